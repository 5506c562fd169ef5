"""The P/D proxy's prefiller and decoder lists and how they change at run time (POST /instances/add|remove), as
vllm-ascend's examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py keeps them in the release the
stand-in plays. Paths below are that file at the tag named (v0.13.0, v0.18.0, v0.23.0)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple

from standin.versions import parse_version

ROLES = ("prefill", "decode")
Address = Tuple[str, int]


@dataclass(frozen=True)
class ListRules:
    """What the release's proxy does with its lists."""

    # POST /instances/add|remove and the node listener exist: vllm-ascend #5063, first tagged v0.13.0rc1
    # (v0.13.0 :816-890). Older proxies have no such route: FastAPI answers 404 {"detail": "Not Found"}.
    instances_api: bool
    # remove while requests are counted taints the instances (picked only when nothing else is left) and the
    # listener removes them once none is counted: #5934, first v0.15.0rc1 (v0.18.0 :370-445, :483-491)
    taint: bool
    # the shared-scheduler rewrite #9645 (first v0.21.0rc1; v0.23.0 :236-505, :1101-1140): add never checks at
    # once, every instance waits for the listener's next round, and one still listed (tainted too) is skipped;
    # request_num spans the whole request instead of ending when the handler returns (v0.18.0 :712, :829: before
    # the decoder streams); /healthcheck adds request_num; messages quote addresses
    shared_scheduler: bool


def rules_for(release: str) -> ListRules:
    version = parse_version(release)
    return ListRules(instances_api=version >= (0, 13), taint=version >= (0, 15),
                     shared_scheduler=version >= (0, 21))


def server_key(host: str, port: int) -> str:
    """The same instance under its loopback spellings is one entry (v0.23.0 :214-219; v0.18.0 ServerState.__eq__)."""
    return f"{host.replace('localhost', '0.0.0.0').replace('127.0.0.1', '0.0.0.0')}:{int(port)}"


class AdjustError(Exception):
    """A body the upstream handler fails on (it raises: FastAPI answers 500 Internal Server Error)."""


@dataclass
class Member:
    host: str
    port: int
    backend: object  # what requests go to (the proxy's Upstream)

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class Pools:
    """Both lists, the instances waiting to be added and those tainted for removal."""

    rules: ListRules
    make_backend: Callable[[str, int], object]
    # answers whether host:port serves: the listener's GET {host:port}/v1/models with a 200 (v0.23.0 :598-608)
    check: Callable[[str, int], Awaitable[bool]]
    max_waiting_retries: int = 3  # --max-waiting-retries (v0.23.0 :654-656)
    members: Dict[str, List[Member]] = field(default_factory=lambda: {role: [] for role in ROLES})
    tainted: Dict[str, Set[str]] = field(default_factory=lambda: {role: set() for role in ROLES})
    # before #9645: tainted instances whose heap entry lost its taint (see release()), pickable again
    retainted: Dict[str, Set[str]] = field(default_factory=lambda: {role: set() for role in ROLES})
    waiting: Dict[str, Tuple[str, str, int, int]] = field(default_factory=dict)  # key -> (role, host, port, tries)
    request_num: int = 0  # requests the proxy counts as in flight (see ListRules.shared_scheduler)
    _turn: Dict[str, int] = field(default_factory=lambda: {role: 0 for role in ROLES})

    def seed(self, role: str, addresses: Sequence[Address]) -> None:
        for host, port in addresses:
            self._append(role, host, port)

    def _append(self, role: str, host: str, port: int) -> bool:
        key = server_key(host, port)
        if any(server_key(m.host, m.port) == key for m in self.members[role]):
            return False
        self.members[role].append(Member(host, port, self.make_backend(host, port)))
        return True

    def pick(self, role: str) -> Optional[Member]:
        """Round robin over the members not tainted; None for an empty list. Upstream's load heap gives a tainted
        instance TAINT_PRIORITY = 1e15 (v0.23.0 :166, :276-281; v0.18.0 :429-445), so with every member tainted
        the tie goes to the lowest ordinal, the first listed. v0.23.0 keeps that priority whatever the load; before
        #9645 picking it rewrites its heap entry with its load (v0.18.0 :226-232, :293-306), which lifts the
        taint (see release())."""
        listed = self.members[role]
        blocked = self.tainted[role] - self.retainted[role]
        usable = [m for m in listed if server_key(m.host, m.port) not in blocked]
        if not usable:
            if not listed:
                return None
            self.release(role, listed[0])
            return listed[0]
        member = usable[self._turn[role] % len(usable)]
        self._turn[role] += 1
        return member

    def release(self, role: str, member: Member) -> None:
        """A request on `member` picked or done. Before #9645 the heap entry of that instance is rewritten with its
        load (v0.18.0 _update_decoder_priority :226-232, called by select_decoder and release_decoder; the
        prefiller's likewise), so a tainted instance becomes pickable again though it still waits for removal.
        v0.23.0 recomputes TAINT_PRIORITY (:276-281): nothing changes."""
        key = server_key(member.host, member.port)
        if not self.rules.shared_scheduler and key in self.tainted[role]:
            self.retainted[role].add(key)

    def names(self, role: str) -> List[str]:
        return [m.name for m in self.members[role]]

    def healthcheck(self) -> dict:
        doc = {"status": "ok", "prefill_instances": len(self.members["prefill"]),
               "decode_instances": len(self.members["decode"])}
        if self.rules.shared_scheduler:
            doc["request_num"] = self.request_num  # v0.23.0 :343-350
        return doc

    async def adjust(self, mode: str, body: object) -> dict:
        """POST /instances/<mode>: the 200 answer, shaped as the release's handler shapes it."""
        if not isinstance(body, dict):
            raise AdjustError("the body is not a JSON object")
        kind = body.get("type", "")
        instances = body.get("instances", [])
        if isinstance(instances, str):
            instances = [instances]
        try:  # "host:port" split on ":" (v0.23.0 parse_server_addresses; v0.18.0 trans_instances)
            addresses = [(host, int(port)) for host, port in (text.split(":") for text in instances)]
        except (ValueError, AttributeError, TypeError):
            raise AdjustError(f"instances {instances!r} are not host:port strings") from None
        quoted = [f"{h}:{p}" for h, p in addresses]
        message = f"{mode} {kind} instances: {quoted}."
        if kind not in ROLES:
            if self.rules.shared_scheduler:
                return {"error": f"Instance type {kind!r} is not supported. Only 'prefill' and 'decode' are allowed."}
            return {"error": f"Instance type {kind} is not supported. Only support 'prefill' and 'decode'."}
        if mode == "add":
            message = await self._add(kind, addresses, message)
        elif self._remove(kind, addresses):
            # v0.18.0 formats its ServerState list (repr host:port, unquoted); v0.23.0 a list of strings
            shown = quoted if self.rules.shared_scheduler else "[" + ", ".join(quoted) + "]"
            message = f"Instances {shown} are isolated and waiting to be removed."
        return {"message": message, "current_prefill_instances": self.names("prefill"),
                "current_decode_instances": self.names("decode")}

    async def _add(self, role: str, addresses: Sequence[Address], message: str) -> str:
        if self.rules.shared_scheduler:  # v0.23.0 add_instances :429-439: everything new waits for the listener
            waiting = []
            listed = {server_key(m.host, m.port) for m in self.members[role]}
            for host, port in addresses:
                key = server_key(host, port)
                if key in listed or key in self.waiting:
                    continue  # a tainted instance is still listed: it stays tainted
                self.waiting[key] = (role, host, port, 0)
                waiting.append(f"{host}:{port}")
            return f"Instances {waiting} are waiting to be added." if waiting else message
        added, waiting = [], []  # v0.13.0 :317-333, v0.18.0 :325-339: checked at once, waits if not serving
        for host, port in addresses:
            if await self.check(host, port):
                self._activate(role, host, port)
                added.append(f"{host}:{port}")
            else:
                self.waiting[server_key(host, port)] = (role, host, port, 0)
                waiting.append(f"{host}:{port}")
        if waiting:
            return f"add {role} instances: {added}. Instances {waiting} are waiting to be added."
        return message

    def _activate(self, role: str, host: str, port: int) -> None:
        key = server_key(host, port)
        self.waiting.pop(key, None)
        if key in self.tainted[role]:  # re-adding a tainted instance takes the taint off (v0.18.0 :342-349)
            self.tainted[role].discard(key)
            self.retainted[role].discard(key)
            return
        self._append(role, host, port)

    def _remove(self, role: str, addresses: Sequence[Address]) -> bool:
        """True when the instances were tainted instead of removed."""
        keys = {server_key(h, p) for h, p in addresses}
        if not keys:
            return False
        if self.rules.taint and self.request_num > 0:
            self.tainted[role].update(keys)
            self.retainted[role] -= keys  # the heap entries get TAINT_PRIORITY again
            return True
        self.members[role] = [m for m in self.members[role] if server_key(m.host, m.port) not in keys]
        for key in keys:
            if self.rules.shared_scheduler:
                self.waiting.pop(key, None)
            self.tainted[role].discard(key)
            self.retainted[role].discard(key)
        return False

    async def listen(self, interval_s: float) -> None:
        """The node listener thread: every --waiting-retry-interval seconds check each waiting instance (added when
        it serves, dropped after --max-waiting-retries failed checks), then remove the tainted ones if no request
        is counted (v0.23.0 NodeListener :574-596; v0.18.0 :465-492; v0.13.0 :405-422)."""
        while True:
            for key, (role, host, port, tries) in list(self.waiting.items()):
                serving = await self.check(host, port)
                tries += 1
                if serving:
                    self._activate(role, host, port)
                elif tries >= self.max_waiting_retries:
                    # v0.23.0 names it by its key (:590), older ones as host:port (v0.18.0 :478)
                    shown = key if self.rules.shared_scheduler else f"{host}:{port}"
                    print(f"Instance {shown} was not added to the proxy.", flush=True)
                    self.waiting.pop(key, None)
                else:
                    self.waiting[key] = (role, host, port, tries)
            if self.request_num == 0:
                for role in ROLES:
                    if self.tainted[role]:
                        gone = self.tainted[role]
                        self.members[role] = [m for m in self.members[role]
                                              if server_key(m.host, m.port) not in gone]
                        self.tainted[role] = set()
                        self.retainted[role] = set()
            await asyncio.sleep(interval_s)
