"""A DP group's rendezvous, as vLLM's DP coordinator does it: the process holding rank 0 listens on
(--data-parallel-address, --data-parallel-rpc-port); every other process registers its ranks there. The group is
ready only once every rank 0..dp-1 has registered; a conflicting registration stops the master."""

from __future__ import annotations

import asyncio
import errno
import json
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

from standin.app import log
from standin.config import Refusal

RETRY_S = 0.2  # real vLLM waits for its master without a deadline; so does the stand-in, polling this often


@dataclass(frozen=True)
class Registration:
    """What one process tells the master: its ranks and everything the group must agree on."""

    start: int
    local: int
    external: bool
    dp: int
    tp: int
    expert_parallel: bool
    engine_id: Optional[str]
    kv_extra: Optional[dict]
    devices: Tuple[int, ...]
    host: str
    api_port: Optional[int]
    headless: bool = False
    refuses_headless: bool = False  # hybrid or external DP load balancing on the master (AscendConfig)

    @property
    def ranks(self) -> Tuple[int, ...]:
        return tuple(range(self.start, self.start + self.local))

    def who(self) -> str:
        where = f"{self.host}:{self.api_port}" if self.api_port else f"{self.host} (headless)"
        return f"{where} ranks {_span(self.ranks)}"

    def to_json(self) -> bytes:
        doc = asdict(self)
        doc["devices"] = list(self.devices)
        return json.dumps(doc).encode() + b"\n"

    @classmethod
    def from_json(cls, line: bytes) -> "Registration":
        doc = json.loads(line)
        doc["devices"] = tuple(doc["devices"])
        return cls(**doc)


def _span(ranks) -> str:
    ranks = sorted(ranks)
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 1:
        return f"{ranks[0]}..{ranks[-1]}"
    return ",".join(map(str, ranks))


def conflict(own: Registration, other: Registration, holders: Dict[int, Registration]) -> Optional[str]:
    """Why `other` cannot join the group of `own` (the master) given the ranks already held, or None."""
    if own.refuses_headless and other.headless:
        # vLLM's wait_for_engine_startup on the API server of rank 0: remote engines must be headless unless in
        # hybrid or external LB mode, and must not be in those (0.33.0 vllm/v1/engine/utils.py:1502-1509, 0.23.0
        # :1273-1280); the RuntimeError ends the head, so the group never starts
        return (f"RuntimeError: Remote engine {other.start} must not use --headless in external or hybrid dp lb "
                f"mode ({other.who()} is headless; this head runs hybrid DP load balancing because it was given "
                f"--data-parallel-start-rank)")
    for what, mine, theirs in (("dp", own.dp, other.dp), ("tp", own.tp, other.tp),
                               ("expert parallel", own.expert_parallel, other.expert_parallel),
                               ("engine_id", own.engine_id, other.engine_id),
                               ("kv_connector_extra_config", own.kv_extra, other.kv_extra)):
        if mine != theirs:
            return f"{other.who()} has {what} {theirs!r} but the group (master {own.who()}) has {mine!r}"
    if own.external != other.external:
        kinds = {True: "external (--data-parallel-rank)", False: "internal (--data-parallel-start-rank)"}
        return f"{other.who()} is launched {kinds[other.external]} but the master {kinds[own.external]}"
    if other.start < 0 or other.start + other.local > own.dp:
        return f"{other.who()}: ranks go past --data-parallel-size {own.dp}"
    taken = [r for r in other.ranks if r in holders]
    if taken:
        if not own.external:
            return (f"start ranks and local sizes do not tile 0..{own.dp - 1}: {other.who()} overlaps "
                    + ", ".join(f"rank {r} of {holders[r].who()}" for r in taken))
        return f"rank {taken[0]} registered twice: by {holders[taken[0]].who()} and by {other.who()}"
    return None


class DpMaster:
    """The rank-0 process's side: accept registrations, check them, announce readiness to everyone."""

    def __init__(self, own: Registration, address: str, rpc_port: int, fatal: asyncio.Future) -> None:
        self.own = own
        self.address = address
        self.rpc_port = rpc_port
        self.fatal = fatal
        self.holders: Dict[int, Registration] = {}
        self.links: List[asyncio.StreamWriter] = []
        self.ready = asyncio.Event()
        self.server: Optional[asyncio.AbstractServer] = None

    async def start(self) -> None:
        try:
            self.server = await asyncio.start_server(self._serve, self.address, self.rpc_port, reuse_address=True)
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise Refusal(f"--data-parallel-address {self.address} is not an address of this host, but this "
                              f"process holds DP rank 0 (the group's master)") from None
            if exc.errno == errno.EADDRINUSE:
                raise Refusal(f"--data-parallel-rpc-port {self.rpc_port} in use on {self.address}") from None
            raise Refusal(f"cannot listen on {self.address}:{self.rpc_port}: {exc.strerror or exc}") from None
        log(f"dp group: master listening on {self.address}:{self.rpc_port} for dp={self.own.dp}")
        self._join(self.own, "this process")

    def _join(self, reg: Registration, how: str) -> None:
        for rank in reg.ranks:
            self.holders[rank] = reg
            log(f"dp group: rank {rank} joined ({how}: {reg.who()}, devices {list(reg.devices)})")
        if not self.ready.is_set() and all(r in self.holders for r in range(self.own.dp)):
            self.ready.set()
            log(f"dp group ready: dp={self.own.dp} tp={self.own.tp} ranks=0..{self.own.dp - 1}")
            for writer in self.links:
                writer.write(b'{"ready": true}\n')

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reg = None
        try:
            line = await reader.readline()
            try:
                reg = Registration.from_json(line)
            except (ValueError, TypeError, KeyError) as exc:
                writer.write(json.dumps({"ok": False, "reason": f"bad registration: {exc}"}).encode() + b"\n")
                return
            reason = conflict(self.own, reg, self.holders)
            if reason is not None:
                log(f"refusing to start: dp group: {reason}")
                writer.write(json.dumps({"ok": False, "reason": reason}).encode() + b"\n")
                await writer.drain()
                if not self.fatal.done():
                    self.fatal.set_result(1)
                reg = None
                return
            writer.write(b'{"ok": true}\n')
            self._join(reg, "registered")
            self.links.append(writer)
            if self.ready.is_set():
                writer.write(b'{"ready": true}\n')
            await writer.drain()
            await reader.read()  # held open while the process lives; EOF: it stopped
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if reg is not None:
                if writer in self.links:
                    self.links.remove(writer)
                for rank in reg.ranks:
                    if self.holders.get(rank) is reg:
                        del self.holders[rank]
                        log(f"dp group: rank {rank} left ({reg.who()})")
            writer.close()


async def rejoin(own: Registration, address: str, rpc_port: int, reader: asyncio.StreamReader,
                 fatal: asyncio.Future) -> None:
    """Once ready: whenever the master goes away, register again, so a replaced master container can complete
    its group; a refusal then ends this process."""
    while True:
        try:
            await reader.read()
        except ConnectionError:
            pass
        log(f"dp group: lost the master at {address}:{rpc_port}; registering again")
        try:
            reader, _ = await register(own, address, rpc_port)
        except Refusal as exc:
            log(f"stopping: {exc}")
            if not fatal.done():
                fatal.set_result(1)
            return


async def register(own: Registration, address: str, rpc_port: int):
    """Join the master at (address, rpc_port), waiting for it as long as it takes; return (reader, writer) once
    the group is ready (the connection stays open: it tells the master this process lives). Refusal when the
    master says no."""
    waiting_logged = False
    while True:
        try:
            reader, writer = await asyncio.open_connection(address, rpc_port)
        except OSError as exc:
            if not waiting_logged:
                log(f"dp group: waiting for the master at {address}:{rpc_port} ({exc.strerror or exc})")
                waiting_logged = True
            await asyncio.sleep(RETRY_S)
            continue
        writer.write(own.to_json())
        try:
            await writer.drain()
            while True:
                line = await reader.readline()
                if not line:
                    break
                answer = json.loads(line)
                if answer.get("ok") is False:
                    writer.close()
                    raise Refusal(f"dp group: the master at {address}:{rpc_port} refused: {answer.get('reason')}")
                if answer.get("ok"):
                    log(f"dp group: registered ranks {_span(own.ranks)} with the master at {address}:{rpc_port}")
                if answer.get("ready"):
                    log(f"dp group ready: dp={own.dp} tp={own.tp}")
                    return reader, writer
        except (ConnectionError, ValueError):
            pass
        writer.close()
        log(f"dp group: the master at {address}:{rpc_port} went away before the group was ready; waiting")
        waiting_logged = True
        await asyncio.sleep(RETRY_S)
