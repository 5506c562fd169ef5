"""The loaded spec as frozen dataclasses, with the values derived from it (TP, names, start order).

`spec/load.py` is the only place that turns YAML dicts into these; everything downstream reads these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from deployctl.core import Secret
from deployctl.spec.profiles import ProfileChoice

if TYPE_CHECKING:
    from deployctl.servers.vllm_ascend.groups import Server

LOCAL_ADDRESS = "local"


@dataclass(frozen=True)
class SshSettings:
    """How to reach a host; each host may override the spec's `ssh` defaults."""

    user: str = "root"
    port: int = 22
    identity_file: Optional[str] = None  # None: OpenSSH defaults (~/.ssh/id_ed25519, then id_rsa)
    known_hosts: Optional[str] = None  # None: ~/.ssh/known_hosts
    jump: Optional[str] = None  # ProxyJump "[user@]host[:port]"


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    ssh: SshSettings = field(default_factory=SshSettings)

    @property
    def is_local(self) -> bool:
        return self.address == LOCAL_ADDRESS

    @property
    def label(self) -> str:
        """`node2 (192.0.2.12)`: how errors name a host."""
        return self.name if self.is_local or self.address == self.name else f"{self.name} ({self.address})"


@dataclass(frozen=True)
class Requirements:
    driver: Optional[str] = None  # ascend: exact; gpu: minimum
    cards: int = 8
    npu_memory_gb: Optional[int] = None
    gpu_memory_gb: Optional[int] = None
    ip_forward: bool = True
    free_disk_gb: float = 0


@dataclass(frozen=True)
class ImageBuild:
    base: str
    packages: str  # local path or s3:// / obs:// URL
    where: str = "each-host"  # each-host | once
    recipe: Optional[str] = None  # a recipe folder from images/ instead of the package's ascend_vllm/


@dataclass(frozen=True)
class ImageSpec:
    name: Optional[str] = None
    build: Optional[ImageBuild] = None


@dataclass(frozen=True)
class WeightsSpec:
    source: Optional[str] = None  # s3:// obs:// or a local path
    dest: Optional[str] = None  # on every host; the model directory
    endpoint: Optional[str] = None
    credentials: str = "env"  # env | profile:<name>
    fan_out: bool = True  # hosts pass the store's parts on to each other (false: every host reads the store)
    peer_wait: int = 60  # seconds without a peer's progress before its parts come from the store


DEFAULT_COMPILE_CACHE_DIR = "/var/cache/deployctl/compile"


@dataclass(frozen=True)
class CacheSpec:
    """cache: the servers' compile caches, one host directory per (image, model, parallel layout)."""

    compile: bool = False
    dir: str = DEFAULT_COMPILE_CACHE_DIR


@dataclass(frozen=True)
class MonitorSpec:
    """`monitor:`: where `deployctl monitor` writes its pack and what it scrapes (defaults when the key is absent)."""

    out: Optional[Path] = None  # None: .deployctl/<name>/monitoring beside the spec
    scrape_interval: str = "15s"
    npu_exporter_port: Optional[int] = 8082  # MindCluster npu-exporter's -port default (cmd/npu-exporter/main.go)
    node_exporter_port: Optional[int] = 9100  # node_exporter's default --web.listen-address
    blackbox_exporter: str = "127.0.0.1:9115"  # blackbox_exporter's default --web.listen-address
    prometheus_url: Optional[str] = None  # a Prometheus to reload (POST /-/reload) when the rule file changes
    ttft_p99: Optional[str] = "5s"  # the latency SLO alert's bound (None: no SLO alert)


@dataclass(frozen=True)
class ModelArgs:
    """vLLM engine arguments shared by every instance."""

    served_name: str
    max_model_len: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    quantization: Optional[str] = None
    kv_cache_dtype: Optional[str] = None
    quantization_param_path: Optional[str] = None
    extra_args: tuple[str, ...] = ()
    family: Optional[str] = None  # explicit model family for the min-cards table


@dataclass(frozen=True)
class Instance:
    """One container to run, with everything derived for it."""

    role: str  # mixed | prefill | decode | scheduler | proxy | router
    index: int  # position in its list (scheduler, proxy: 0; vllm-ascend: among its role's servers)
    host: str  # a key of Spec.hosts
    devices: tuple[int, ...]  # physical NPU/GPU ids; () for the scheduler and the proxy
    port: Optional[int]  # None only for a headless vllm-ascend server (it serves no API)
    name: str  # container name: <deployment>-<role>-<index>
    tp: int  # tensor parallel size (scheduler: the P/D TP)
    max_num_seqs: Optional[int] = None  # effective value (instance override, else model's)
    max_num_batched_tokens: Optional[int] = None
    extra_args: tuple[str, ...] = ()  # effective: model's extra_args then the instance's
    grpc_port: Optional[int] = None  # triton only
    metrics_port: Optional[int] = None  # triton's --metrics-port; a vllm-router's --prometheus-port
    bootstrap_port: Optional[int] = None  # an SGLang prefill's --disaggregation-bootstrap-port
    # One server over several hosts (server sglang's `hosts`): every node's host in rank order, this container's
    # rank, and the first node's --dist-init-addr port
    nodes: tuple[str, ...] = ()
    node_rank: int = 0
    dist_init_port: Optional[int] = None
    # The unit it is replaced and restarted with (plan/units.py): a server over several hosts, named after node 0;
    # a vllm-ascend DP group, by its label. "": the instance alone
    unit: str = ""
    path: tuple = ()  # where it sits in the spec, e.g. ("topology", "prefill", 0)
    server: Optional[Server] = None  # vllm-ascend: the DP ranks this `vllm serve` runs
    env: tuple["EnvVar", ...] = ()  # vllm-ascend: its group's env, on top of the spec's
    json_args: tuple[tuple[str, str], ...] = ()  # vllm-ascend: (flag, compact JSON) passed through
    shm_size: Optional[str] = None  # container.shm_size written for its group, else the spec's (None: default)
    cpu: Optional[str] = None  # container.cpu written for its group, else the spec's (None: the export's default)
    memory: Optional[str] = None  # container.memory likewise

    @property
    def own_ports(self) -> tuple[tuple[str, int], ...]:
        """(key, port) of each port its own server answers on: `port`, then its flavour's further ones (Triton's
        grpc_port and metrics_port, a vllm-router's metrics_port, an SGLang prefill's bootstrap_port and a multi-node
        server's dist_init_port). The one list every reader of them takes."""
        return tuple((key, port) for key, port in (("port", self.port), ("grpc_port", self.grpc_port),
                                                    ("metrics_port", self.metrics_port),
                                                    ("bootstrap_port", self.bootstrap_port),
                                                    ("dist_init_port", self.dist_init_port)) if port is not None)

    @property
    def ports(self) -> tuple[tuple[str, int], ...]:
        """own_ports, then the further ports its flavour's server binds (a DP group server's `bound_ports`: kv ports
        where its group runs the connector and, on the group's first host, its rpc port): every port on its host."""
        return self.own_ports + (self.server.bound_ports if self.server is not None else ())


@dataclass(frozen=True)
class EnvVar:
    """A container environment variable; a value from `${VAR}` is a Secret shown as `${VAR}`."""

    name: str
    value: Union[str, Secret]
    display: str  # what plan/logs show: the literal value, or "${VAR}" for a secret

    @property
    def is_secret(self) -> bool:
        return isinstance(self.value, Secret)


@dataclass(frozen=True)
class FrontSpec:
    """`topology.front` (or vllm-ascend's `topology.proxy`, kind proxy): the router in front of the workers."""

    kind: str  # proxy | vllm-router
    host: str
    port: int
    image: Optional[str] = None  # vllm-router: the image holding its command
    policy: Optional[str] = None  # vllm-router: --policy (None: the router's default)
    metrics_port: Optional[int] = None  # vllm-router: --prometheus-port (on 0.0.0.0)


@dataclass(frozen=True)
class Rollout:
    """`rollout`: how `up` replaces the containers of a serving deployment."""

    strategy: Optional[str] = None  # drain | recreate; None: drain where the spec has a front, else recreate
    max_unavailable: int = 1  # per role: instances (or DP groups) out of the front at once
    max_surge: int = 0  # replacements started on free cards before the old one is drained


HOOK_POINTS = ("pre_up", "post_up", "pre_down", "post_down", "pre_wave", "post_wave", "on_failure")
DEFAULT_HOOK_TIMEOUT = 300  # seconds; the schema bounds a spec's own to 1..86400 (a day, as cli_numbers.DAY_S)


@dataclass(frozen=True)
class Hook:
    """`hooks.<point>`: the user's command (argv words), where it runs, its time limit and its own env."""

    point: str  # one of HOOK_POINTS
    command: tuple[str, ...]
    on: str = "control"  # control: the machine deployctl runs on | hosts: each host of the spec
    timeout: int = DEFAULT_HOOK_TIMEOUT
    env: tuple["EnvVar", ...] = ()  # a ${VAR} value is a Secret, as in the spec's `env:`
    path: tuple = ()  # ("hooks", point)


@dataclass(frozen=True)
class Spec:
    version: int
    name: str
    hosts: tuple[Host, ...]  # in spec order
    model: ModelArgs
    mode: str  # mixed | disaggregated
    instances: tuple[Instance, ...]  # mixed...; or prefill..., decode..., scheduler
    platform: str = "ascend"  # ascend | gpu
    server: str = "vllm"  # vllm | triton
    requirements: Requirements = field(default_factory=Requirements)
    image: ImageSpec = field(default_factory=ImageSpec)
    weights: WeightsSpec = field(default_factory=WeightsSpec)
    cache: CacheSpec = field(default_factory=CacheSpec)
    env: tuple[EnvVar, ...] = ()
    source: Optional[Path] = None  # the spec file, when loaded from one
    digest: str = ""  # sha256 of the resolved spec document
    # env keys whose ${VAR} was not set, allowed only by commands that never send env (logs, status, down)
    unresolved_env: tuple[str, ...] = ()
    upstream: Optional[Any] = None  # the flavour's own topology: vllm-ascend's DP groups (UpstreamTopology)
    connector: Optional[str] = None  # server sglang's P/D: topology.connector, its transfer backend (None: default)
    server_version: Optional[str] = None  # vllm-ascend: the version the spec says its image runs (overrides)
    shm_size: Optional[str] = None  # container.shm_size (None: the server's default)
    cpu: Optional[str] = None  # container.cpu: the export's CPU request (None: its default per card)
    memory: Optional[str] = None  # container.memory: the export's memory request (None: its default per card)
    startup_timeout: Optional[int] = None  # health.startup_timeout (None: spec/startup.py's default)
    profile: Optional["ProfileChoice"] = None  # vllm-ascend: the server profile it renders with, and why
    front_spec: Optional[FrontSpec] = None  # topology.front (or vllm-ascend's proxy as kind proxy)
    rollout: Rollout = field(default_factory=Rollout)
    monitor: Optional[MonitorSpec] = None  # `monitor:` (None: absent; `up`/`down` then write no monitoring pack)
    hooks: tuple[Hook, ...] = ()  # `hooks:`, in HOOK_POINTS order

    def hook(self, point: str) -> Optional[Hook]:
        return next((h for h in self.hooks if h.point == point), None)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def role(self, role: str) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.role == role)

    @property
    def scheduler(self) -> Optional[Instance]:
        found = self.role("scheduler")
        return found[0] if found else None

    @property
    def front(self) -> Optional[Instance]:
        """The public endpoint in front of the workers: the AscendCloud scheduler, else the instance a front kind
        made of topology.front (or vllm-ascend's topology.proxy): the proxy, vllm-router or sglang-router."""
        found = self.role("scheduler") + tuple(i for i in self.instances
                                               if i.path in (("topology", "front"), ("topology", "proxy")))
        return found[0] if found else None

    @property
    def api_servers(self) -> tuple[Instance, ...]:
        """Every instance that serves HTTP (all but headless vllm-ascend servers)."""
        return tuple(i for i in self.instances if i.port is not None)

    @property
    def used_hosts(self) -> tuple[Host, ...]:
        """Hosts that run at least one instance, in `hosts` order."""
        used = {i.host for i in self.instances}
        return tuple(h for h in self.hosts if h.name in used)

    @property
    def first_host(self) -> Host:
        """Where the deploy lock and history live: the first host of the spec."""
        return self.hosts[0]

    @property
    def start_order(self) -> tuple[tuple[Instance, ...], ...]:
        """Waves of instances: prefill+decode (or mixed) in parallel, then the front (scheduler, proxy, router)."""
        front = self.front
        workers = tuple(i for i in self.instances if i is not front)
        return (workers, (front,)) if front else (workers,)

    @property
    def node_ports(self) -> tuple[int, ...]:
        """NODE_PORTS: prefill ports then decode ports, in global-ranktable order."""
        return tuple(i.port for i in self.role("prefill") + self.role("decode"))

    @property
    def state_dir(self) -> Path:
        """`.deployctl/<deployment>/` beside the spec file (control-machine cache)."""
        base = self.source.parent if self.source else Path.cwd()
        return base / ".deployctl" / self.name

    @property
    def monitor_dir(self) -> Path:
        """Where the monitoring pack goes: `monitor.out`, else `.deployctl/<deployment>/monitoring/`."""
        out = self.monitor.out if self.monitor else None
        return out if out is not None else self.state_dir / "monitoring"

    @property
    def remote_state_dir(self) -> str:
        """Lock and history on the first host."""
        return f"/var/lib/deployctl/{self.name}"
