"""The typed actions a plan step holds beside files (PutFile), commands (Command) and health waits (HealthCheck):
an image build, an image ship, a weights transfer. Data only: the executor runs them, the UI shows them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional, Union

if TYPE_CHECKING:
    from deployctl.core import Command
    from deployctl.spec.model import EnvVar
    from deployctl.image.inputs import BuildInputs
    from deployctl.plan.answers import AnswerPath
    from deployctl.weights.manifest import SourceObject


@dataclass(frozen=True)
class Build:
    """`docker build -` of `image` on the step's host, the recipe's context tar on stdin."""

    image: str
    base: str
    inputs: Optional[str]  # the inputs label it will carry; None until the missing base image is pulled
    recipe: BuildInputs = field(repr=False, compare=False)
    context: bytes = field(repr=False, compare=False)
    log_path: str = ""  # where the build log is kept on the control machine

    @property
    def pull_base(self) -> bool:
        return self.inputs is None

    @property
    def bytes(self) -> int:
        return len(self.context)

    def display(self) -> str:
        pull = f"docker pull {self.base}, then " if self.pull_base else ""
        return f"{pull}docker build --tag {self.image} - (context {self.bytes} bytes)"

    def to_json(self) -> dict:
        return {"type": "build", "image": self.image, "base": self.base, "inputs": self.inputs,
                "pull_base": self.pull_base, "bytes": self.bytes}


@dataclass(frozen=True)
class Ship:
    """`docker save` on the step's host streamed into `docker load` on every target at once."""

    image: str
    targets: tuple[str, ...]
    size: Optional[int]  # bytes of the image; None until it is built

    def display(self) -> str:
        size = f"{self.size} bytes" if self.size is not None else "size known after the build"
        return f"docker save {self.image} | docker load on {', '.join(self.targets)} ({size} each)"

    def to_json(self) -> dict:
        return {"type": "ship", "image": self.image, "to": list(self.targets), "bytes": self.size}


@dataclass(frozen=True)
class Fetch:
    """Bring `dest` on the step's host in line with the source: fetch (or push, for a local directory) the
    files its manifest does not vouch for, remove the files deployctl wrote that left the source."""

    source: str
    dest: str
    objects: tuple[SourceObject, ...]
    remove: tuple[str, ...]
    bytes: int  # still to transfer (resumable partial bytes deducted)
    listed: str  # when the source was listed (UTC, ISO 8601)
    local_root: Optional[str] = None  # a local directory source: files go from here over the transport
    bucket: str = ""  # the source's bucket, for the pre-signed URLs made at execution
    fetcher_path: str = ""
    send_fetcher: bool = True  # False when the host already holds this fetcher program
    manifest: Mapping[str, dict] = field(default_factory=dict, repr=False, compare=False)  # what dest holds now
    # Every host fetching from the store in this stage, (name, address), this one included: each reads its share
    # of the parts from the store and the rest from the others (weights_fetch.py's swarm). Empty: all from the store.
    peers: tuple[tuple[str, str], ...] = ()
    holders: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)  # path -> hosts
    peer_wait: int = 60  # seconds without a peer's progress before its parts come from the store

    def display(self) -> str:
        removal = f", remove {len(self.remove)} file(s)" if self.remove else ""
        shared = f", shared with {len(self.peers) - 1} peer host(s)" if self.peers else ""
        return (f"fetch {len(self.objects)} file(s), {self.bytes} bytes from {self.source} into {self.dest}"
                f"{removal}{shared}")

    def to_json(self) -> dict:
        return {"type": "fetch", "source": self.source, "dest": self.dest, "files": len(self.objects),
                "bytes": self.bytes, "remove": list(self.remove)}


@dataclass(frozen=True)
class AnswerCheck:
    """Send the same temperature-0 request down every serving path from the step's host; every path must
    answer, with a body, and with the same text (the verdict: plan/answers.py `judge_answers`)."""

    paths: tuple[AnswerPath, ...]
    tokens: int
    timeout: float  # seconds for each path

    def display(self) -> str:
        names = ", ".join(p.name for p in self.paths)
        return f"ask {len(self.paths)} serving path(s) for the same {self.tokens}-token answer: {names}"

    def to_json(self) -> dict:
        return {"type": "answers", "tokens": self.tokens, "paths": [p.to_json() for p in self.paths]}


@dataclass(frozen=True)
class Drain:
    """Wait, from the step's host, until none of `servers` (name, /metrics URL) runs or queues a request
    (vLLM's `vllm:num_requests_running` + `vllm:num_requests_waiting` = 0), at most `timeout` seconds; then say
    what remained, by server, and go on (the graceful stop gives them its own timeout)."""

    servers: tuple[tuple[str, str], ...]
    timeout: float

    def display(self) -> str:
        names = ", ".join(name for name, _ in self.servers)
        return f"wait until {names} run(s) no request (GET /metrics), at most {self.timeout:g} s"

    def to_json(self) -> dict:
        return {"type": "drain", "servers": [{"name": n, "metrics": u} for n, u in self.servers],
                "timeout_s": self.timeout}


@dataclass(frozen=True)
class AwaitListed:
    """Wait, on the step's host, until the front lists every backend of `keys` (`address:port`), at most
    `timeout` seconds: a front may take a backend back only later (vllm-ascend's proxy from v0.21 adds on its
    listener's next tick), and the next wave must not take another out before."""

    front_kind: str
    command: "Command"  # plan/front.py list_command; plan/front.py parse_list reads its answer
    keys: tuple[str, ...]
    timeout: float

    def display(self) -> str:
        return f"wait until the {self.front_kind} lists {', '.join(self.keys)} (at most {self.timeout:g} s)"

    def to_json(self) -> dict:
        return {"type": "listed", "argv": list(self.command.argv), "backends": list(self.keys),
                "timeout_s": self.timeout}


@dataclass(frozen=True)
class SyncList:
    """On the front's host: read its list (`command`), take out the backends it lists that `wanted` lacks and put in
    those of `wanted` it lacks (its kind's own calls), then wait until it lists them all, at most `timeout`. For a
    front started again from its argv, which holds the lists of the `up` that created it."""

    front_kind: str
    port: int
    command: "Command"  # plan/front.py list_command; plan/front.py parse_roles reads its answer
    wanted: tuple  # fronts/base.py Backend, each as the front names it
    timeout: float

    def display(self) -> str:
        return (f"bring the {self.front_kind}'s list to {', '.join(b.key for b in self.wanted)} (read it, take out "
                f"what is not there, put in what is missing; at most {self.timeout:g} s)")

    def to_json(self) -> dict:
        return {"type": "sync_list", "argv": list(self.command.argv), "backends": [b.key for b in self.wanted],
                "timeout_s": self.timeout}


@dataclass(frozen=True)
class RunHook:
    """Run the user's hook command on the step's host (the control machine, or a host of the spec), its `env` (the
    deployment's DEPLOYCTL_* facts, then the hook's own, a ${VAR} value a Secret) given through stdin, never argv;
    stopped after `timeout` seconds (execute/hooks.py)."""

    point: str  # spec.model.HOOK_POINTS
    argv: tuple[str, ...]
    timeout: int
    env: tuple[EnvVar, ...] = ()
    wave: int = 0

    def display(self) -> str:
        import shlex

        own = [f"{v.name}={shlex.quote(v.display)}" for v in self.env if not v.name.startswith("DEPLOYCTL_")]
        return (f"hook {self.point}: {shlex.join(self.argv)}  # timeout {self.timeout} s; env: "
                + " ".join(own + ["DEPLOYCTL_* (the deployment's facts)"]))

    def to_json(self) -> dict:
        return {"type": "hook", "hook": self.point, "argv": list(self.argv), "timeout_s": self.timeout,
                "env": {v.name: v.display for v in self.env}}


Action = Union[Build, Ship, Fetch, AnswerCheck, Drain, AwaitListed, RunHook]
