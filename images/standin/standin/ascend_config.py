"""`vllm serve` start-up checks: devices, the host's NIC for HCCL and the sockets, the KV connector's config,
module and ports — what upstream vLLM with vllm-ascend rejects or hangs on, as the emulated release does it
(standin/versions.py). Each check cites the upstream source it follows."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import struct
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from standin.args import ArgsError
from standin.ascend_args import AscendArgs, parse_serve
from standin.config import (SHOWN_ENV, Config, Refusal, _devices, _model_config, model_limits, read_knobs,
                            shown_env)
from standin.versions import RELEASES, Emulated, VersionError, emulated

ROLE_OF_KV = {"kv_producer": "prefill", "kv_consumer": "decode"}
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
UPSTREAM_SHOWN_ENV = SHOWN_ENV + ("HCCL_IF_IP", "LD_LIBRARY_PATH") + SOCKET_IFNAME_VARS
_SIOCGIFADDR = 0x8915
# Where Mooncake's `make install` puts its libraries (ascend_transport.so among them): vllm-ascend #6949's fix
# `export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/lib`, which the images write to ~/.bashrc (#6976).
MOONCAKE_LIB_DIR = "/usr/local/lib"
# Mooncake's AscendDirectTransport picks its ports at random in [20000, 20000 + NPUs per node x 1000): a kv_port
# in there collides now and then ("zmq.error.ZMQError: Address already in use", vllm-ascend #6455, #8938; the
# range as vllm-ascend documents it: docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md:233
# at v0.23.0). The stand-in makes the collision certain, so a port plan inside the range always fails.
MOONCAKE_PORT_BASE, MOONCAKE_PORTS_PER_NPU = 20000, 1000
# Docker's default /dev/shm is 64 MB; vllm-ascend's docker run uses --shm-size=1g (#3645) after engine-core
# dumps under load (#3513, fixed in the docs by #3519). Below this the stand-in's engine core dies at the first
# generation request (see ascend_engine.py), deterministically, where the real one dies under load.
SHM_NEEDED_BYTES = 1 << 30
_HCCN_ADDRESS = re.compile(r"^address_(\d+)=", re.M)


@dataclass(frozen=True)
class KvConfig:
    connector: str
    role: str  # kv_producer | kv_consumer
    port: int  # the base: rank g, tp rank t binds port + g*tp + t
    engine_id: str
    extra: dict  # kv_connector_extra_config as given
    doc: dict  # the whole --kv-transfer-config

    def ports(self, ranks, tp: int) -> Tuple[int, ...]:
        return tuple(self.port + g * tp + t for g in ranks for t in range(tp))


@dataclass(frozen=True)
class AscendConfig:
    base: Config  # what the shared App and generation code read
    args: AscendArgs
    kv: Optional[KvConfig]
    devices: Tuple[int, ...]  # physical ids (davinciN) of the devices used, in the runtime's order
    if_ip: str
    ifname: str
    version: Optional[Emulated] = None
    shm_bytes: Optional[int] = None  # the size of /dev/shm (STANDIN_SHM_DIR); None: unknown

    @property
    def hybrid_lb(self) -> bool:
        """This API server runs vLLM's hybrid (or, with one local rank, external) DP load balancing: it fronts
        only its own ranks, and its rank 0 refuses remote --headless engines. vLLM infers hybrid LB for a
        non-headless node given --data-parallel-size-local and a start rank (arg_utils.py in 0.23.0: :1888-1890
        for a non-zero start rank only; in 0.28.0: :2156 for any, 0 included), falls back to external LB with one
        local rank (0.23.0 :1892-1900) and keeps neither when every rank is local (:1902-1904)."""
        a = self.args
        if a.external or a.headless or not a.start_given or a.local == a.dp or self.version is None:
            return False
        return a.start > 0 or self.version.start_rank_zero_is_hybrid

    @property
    def fronted_ranks(self) -> Tuple[int, ...]:
        """The DP ranks (vLLM's engine indexes) behind this API server: an external or hybrid launch its own
        ones, an internal launch's head all of them ("Client manages local+remote EngineCores in pure internal LB
        case", 0.23.0 vllm/v1/engine/core_client.py:597-602; its stat loggers label these, async_llm.py:160)."""
        a = self.args
        return a.ranks if a.external or self.hybrid_lb else tuple(range(a.dp))


def if_address(name: str) -> str:
    """The IPv4 address of interface `name` (SIOCGIFADDR); OSError when it has none or does not exist."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        data = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    return socket.inet_ntoa(data[20:24])


def _visible(env: Mapping[str, str], seen: Tuple[str, ...], wanted: int, problems: List[str]) -> Tuple[int, ...]:
    """The devices the process uses (their physical ids, the davinciN names), as the CANN runtime numbers them:
    a container that mounts n davinci nodes sees logical devices 0..n-1 in node order, whatever the host numbers
    them (reports such as vllm-ascend #2238; PR #12959, closed unmerged, concerned A5 only); the variable, when set,
    selects among those logical ids. Ids outside 0..n-1 are dropped (vllm-ascend PR #10227); when none is left,
    aclrtGetDeviceCount fails with CANN's EE1001 (the text as torch_npu prints it, gpustack #3352). Fewer devices
    than tp x local ranks: the first rank without one fails in torch.npu.set_device ("open device N failed,
    runtime result = 107001", same sources). More: vLLM uses the first ones."""
    nodes = tuple(int(d) for d in seen)
    names = ", ".join("davinci" + d for d in seen) or "none"
    text = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if text is None:
        visible = nodes
        how = f"({names})"
    else:
        try:
            ids = [int(w) for w in text.split(",")]
        except ValueError:
            problems.append(f"ASCEND_RT_VISIBLE_DEVICES={text!r} is not a comma list of device ids")
            return ()
        valid = [i for i in ids if 0 <= i < len(nodes)]
        if not valid:
            problems.append(
                f"ASCEND_RT_VISIBLE_DEVICES={text}, but in this container the runtime numbers its {len(nodes)} "
                f"NPU(s) {'0..' + str(len(nodes) - 1) if nodes else ''} ({names}): torch_npu: NPU function error: "
                f"aclrtGetDeviceCount(&device_count), error code is 207004; EE1001: The argument is invalid."
                f"Reason: set ASCEND_RT_VISIBLE_DEVICES:{text} error, input data rang[0-{len(nodes)})")
            return ()
        visible = tuple(nodes[i] for i in valid)
        how = f"(ASCEND_RT_VISIBLE_DEVICES={text} of {names})"
    if len(visible) < wanted:
        problems.append(f"{len(visible)} NPU device(s) visible {how} but --tensor-parallel-size x local DP ranks "
                        f"needs {wanted}: open device {len(visible)} failed, runtime result = 107001")
        return visible
    return visible[:wanted]


def _network(env: Mapping[str, str], problems: List[str]) -> Tuple[str, str]:
    ip = env.get("HCCL_IF_IP", "")
    names = {var: env.get(var, "") for var in SOCKET_IFNAME_VARS}
    if not ip:
        problems.append("HCCL_IF_IP is not set")
    unset = [var for var, name in names.items() if not name]
    if unset:
        problems.append(f"{', '.join(unset)} not set")
        return ip, ""
    if len(set(names.values())) != 1:
        problems.append("the socket interfaces differ: " + ", ".join(f"{v}={n}" for v, n in names.items()))
        return ip, ""
    ifname = names["GLOO_SOCKET_IFNAME"]
    try:
        address = if_address(ifname)
    except OSError as exc:
        why = "no such interface" if exc.errno == errno.ENODEV else "it has no IPv4 address"
        problems.append(f"GLOO/TP/HCCL_SOCKET_IFNAME={ifname}: {why}")
        return ip, ifname
    if ip and address != ip:
        problems.append(f"GLOO/TP/HCCL_SOCKET_IFNAME={ifname} carries {address}, not HCCL_IF_IP={ip}")
    return ip, ifname


def _kv_config(doc: dict, dp: int, tp: int, problems: List[str]) -> Optional[KvConfig]:
    before = len(problems)
    connector = doc.get("kv_connector")
    if not isinstance(connector, str) or not connector:
        problems.append("--kv-transfer-config: kv_connector is missing")
    role = doc.get("kv_role")
    if role not in ROLE_OF_KV:
        problems.append(f"--kv-transfer-config: kv_role {role!r} is not kv_producer or kv_consumer")
    try:
        port = int(doc.get("kv_port"))
        if not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"--kv-transfer-config: kv_port {doc.get('kv_port')!r} is not a port number")
        port = 0
    engine_id = doc.get("engine_id")
    if not isinstance(engine_id, str) or not engine_id:
        problems.append(f"--kv-transfer-config: engine_id {engine_id!r} is not a name")
    extra = doc.get("kv_connector_extra_config")
    if not isinstance(extra, dict):
        problems.append("--kv-transfer-config: kv_connector_extra_config is missing")
        extra = {}
    for side in ("prefill", "decode"):
        sizes = extra.get(side)
        if not (isinstance(sizes, dict) and all(isinstance(sizes.get(k), int) for k in ("dp_size", "tp_size"))):
            problems.append(f"--kv-transfer-config: kv_connector_extra_config.{side} needs integer dp_size "
                            f"and tp_size, got {sizes!r}")
        elif role in ROLE_OF_KV and side == ROLE_OF_KV[role] and (sizes["dp_size"], sizes["tp_size"]) != (dp, tp):
            problems.append(f"--kv-transfer-config: kv_connector_extra_config.{side} says dp_size "
                            f"{sizes['dp_size']}, tp_size {sizes['tp_size']} but this {side} server runs "
                            f"--data-parallel-size {dp} --tensor-parallel-size {tp}")
    if len(problems) > before:
        return None
    return KvConfig(connector, role, port, engine_id, extra, doc)


def connector_module(doc: dict, version: Emulated, env: Mapping[str, str]) -> Tuple[Optional[str], Optional[str]]:
    """(module, None) for the connector module vLLM loads for this --kv-transfer-config, or (None, why it fails
    to load), as KVConnectorFactory does it in the emulated vLLM (vllm/distributed/kv_transfer/kv_connector/
    factory.py): from vLLM #38301 the module path is imported first (0.23.0 :96-127), before that only a name
    missing from the registry falls back to it (0.18.0 :110-122, 0.11.0 :64-78)."""
    release = version.release
    name, path = doc.get("kv_connector"), doc.get("kv_connector_module_path")
    if version.module_path_first:
        if path is not None and not path:
            return None, "ValueError: kv_connector_module_path cannot be an empty string."
        target = (path, name) if path else release.registry.get(name)
    else:
        target = release.registry.get(name) or ((path, name) if path else None)
    if target is None:
        known = ", ".join(release.registry)
        return None, (f"kv_connector {name!r}: the stand-in plays vllm-ascend {release.name}'s Mooncake P2P "
                      f"connectors only ({known})")
    module, cls = target
    if module not in release.modules:
        if any(module in r.modules for r in RELEASES.values()):  # there in another release: moved (#5719)
            return None, f"ModuleNotFoundError: No module named '{module}'"
        return None, f"kv_connector_module_path {module!r}: not a module the stand-in plays"
    if cls not in release.modules[module]:
        if version.vllm_tuple >= (0, 13):  # factory.py 0.23.0 :108-113, 0.13.0 :117-122
            return None, f"AttributeError: Class {cls} not found in {module}"
        return None, f"AttributeError: module '{module}' has no attribute '{cls}'"  # 0.11.0 :77, a bare getattr
    if not release.mooncake:
        # the connector module imports `mooncake.engine` (v0.11.0rc1 vllm_ascend/distributed/
        # mooncake_connector.py:23); the image has no Mooncake
        return None, "ModuleNotFoundError: No module named 'mooncake'"
    if release.mooncake_lib_in_shell_only and MOONCAKE_LIB_DIR not in env.get("LD_LIBRARY_PATH", "").split(":"):
        return None, ("ImportError: ascend_transport.so: cannot open shared object file: No such file or directory "
                      f"(Mooncake's {MOONCAKE_LIB_DIR} is not on LD_LIBRARY_PATH: this image adds it in "
                      "~/.bashrc, which a start that bypasses the image's shell set-up never reads; vllm-ascend "
                      "#6949, #12059)")
    return module, None


def connector_problems(kv: KvConfig, version: Emulated, env: Mapping[str, str], hccn_conf: str,
                       seen: Tuple[str, ...], ports: Tuple[int, ...], ip: str) -> List[str]:
    """Why the Mooncake connector's worker fails to start: its module does not load, prefill tp < decode tp,
    or a kv port inside Mooncake's own port range."""
    _, why = connector_module(kv.doc, version, env)
    if why is not None:
        return [why]
    problems = []
    prefill, decode = kv.extra.get("prefill", {}), kv.extra.get("decode", {})
    if prefill.get("tp_size", 0) < decode.get("tp_size", 0):
        # MooncakeConnectorWorker.__init__: v0.23.0 vllm_ascend/distributed/kv_transfer/kv_p2p/
        # mooncake_connector.py:1982-1986, v0.11.0 vllm_ascend/distributed/mooncake_connector.py:856-859 (and the
        # layerwise and hybrid connectors alike)
        problems.append(f"ValueError: prefill_tp_size: {prefill['tp_size']} must be greater than or equal to the "
                        f"decode_tp_size: {decode['tp_size']}")
    npus = npus_per_node(hccn_conf, seen)
    top = MOONCAKE_PORT_BASE + npus * MOONCAKE_PORTS_PER_NPU
    inside = [p for p in ports if MOONCAKE_PORT_BASE <= p < top]
    if inside:
        problems.append(f"zmq.error.ZMQError: Address already in use (addr='tcp://{ip}:{inside[0]}'); "
                        f"RuntimeError: KV Cache sending/receiving thread failed to start. (kv port(s) "
                        f"{', '.join(map(str, inside))} lie in Mooncake's own random port range "
                        f"[{MOONCAKE_PORT_BASE}, {top}) for {npus} NPUs per node; vllm-ascend #6455, #8938)")
    return problems


def npus_per_node(hccn_conf: str, seen: Tuple[str, ...]) -> int:
    """The host's NPU count as a container can tell: the cards in the host's /etc/hccn.conf (mounted in), else
    the highest davinci node mounted + 1."""
    try:
        with open(hccn_conf, encoding="utf-8") as f:
            cards = {int(n) for n in _HCCN_ADDRESS.findall(f.read())}
    except (OSError, ValueError):
        cards = set()
    highest = max((int(d) for d in seen), default=-1) + 1
    return max(len(cards), highest, 1)


def shm_size(env: Mapping[str, str]) -> Optional[int]:
    """Bytes of the shared-memory filesystem the engine's processes share (/dev/shm, or STANDIN_SHM_DIR)."""
    try:
        stat = os.statvfs(env.get("STANDIN_SHM_DIR") or "/dev/shm")
    except OSError:
        return None
    return stat.f_blocks * stat.f_frsize


def bind_kv_ports(kv: KvConfig, args: AscendArgs, ip: str) -> List[socket.socket]:
    """Listen on every port the connector of this process's ranks binds; refuse a port already taken."""
    held, taken = [], []
    for port in kv.ports(args.ranks, args.server.tp):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # As ZMQ's TCP listeners do: a restarted rank rebinds over its predecessor's TIME_WAIT connections,
        # while a port another process listens on is still refused (Linux's SO_REUSEADDR) — and so is one an
        # open outgoing connection holds as its own (the kernel took it from ip_local_port_range; a connecting
        # socket sets no SO_REUSEADDR), the "Address already in use" of vllm-ascend #6455 outside Mooncake's range.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
            sock.listen(64)
        except OSError as exc:
            sock.close()
            taken.append(f"kv port {port} in use" if exc.errno == errno.EADDRINUSE
                         else f"kv port {port}: cannot bind on {ip}: {exc.strerror or exc}")
            continue
        sock.setblocking(False)
        held.append(sock)
    if taken:
        for sock in held:
            sock.close()
        raise Refusal("; ".join(taken))
    return held


def load_ascend(argv, env: Mapping[str, str]) -> AscendConfig:
    """Parse and check everything; raise Refusal with every reason found (serve_flags.UsageError for an option
    the emulated `vllm serve` does not have: argparse exits 2 before anything else)."""
    try:
        version = emulated(env)
    except VersionError as exc:
        raise Refusal(str(exc)) from None
    try:
        args = parse_serve(argv, version.vllm)
    except ArgsError as exc:
        raise Refusal(str(exc)) from None
    server = args.server
    problems: List[str] = []
    max_model_len = model_limits(server, _model_config(server.model))
    seen = _devices(env.get("STANDIN_DEV_DIR") or "/dev")
    devices = _visible(env, seen, server.tp * args.local, problems)
    if_ip, ifname = _network(env, problems)
    kv = _kv_config(args.kv_transfer_config, args.dp, server.tp, problems) if args.kv_transfer_config else None
    knobs = read_knobs(env)
    if kv is not None:
        problems += connector_problems(kv, version, env, knobs.hccn_conf, seen, kv.ports(args.ranks, server.tp),
                                       if_ip)
    if problems:
        raise Refusal("; ".join(problems))
    role = ROLE_OF_KV[kv.role] if kv else "mixed"
    base = Config(args=server, role=role, knobs=knobs, layout=None, max_model_len=max_model_len,
                  devices_seen=seen, env_names=tuple(sorted(env)), env_shown=shown_env(env, UPSTREAM_SHOWN_ENV))
    return AscendConfig(base=base, args=args, kv=kv, devices=devices, if_ip=if_ip, ifname=ifname, version=version,
                        shm_bytes=shm_size(env))
