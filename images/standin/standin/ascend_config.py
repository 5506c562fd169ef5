"""`vllm serve` start-up checks: devices, the host's NIC for HCCL and the sockets, the KV connector's config and
ports — what upstream vLLM with vllm-ascend rejects or hangs on."""

from __future__ import annotations

import errno
import fcntl
import socket
import struct
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from standin.args import ArgsError
from standin.ascend_args import AscendArgs, parse_serve
from standin.config import (SHOWN_ENV, Config, Refusal, _devices, _model_config, model_limits, read_knobs,
                            shown_env)

ROLE_OF_KV = {"kv_producer": "prefill", "kv_consumer": "decode"}
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
UPSTREAM_SHOWN_ENV = SHOWN_ENV + ("HCCL_IF_IP",) + SOCKET_IFNAME_VARS
_SIOCGIFADDR = 0x8915


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
    devices: Tuple[int, ...]
    if_ip: str
    ifname: str


def if_address(name: str) -> str:
    """The IPv4 address of interface `name` (SIOCGIFADDR); OSError when it has none or does not exist."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        data = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    return socket.inet_ntoa(data[20:24])


def _visible(env: Mapping[str, str], seen: Tuple[str, ...], wanted: int, problems: List[str]) -> Tuple[int, ...]:
    text = env.get("ASCEND_RT_VISIBLE_DEVICES")
    nodes = ", ".join("davinci" + d for d in seen) or "none"
    if text is None:
        ids = tuple(int(d) for d in seen)
    else:
        try:
            ids = tuple(int(w) for w in text.split(","))
        except ValueError:
            problems.append(f"ASCEND_RT_VISIBLE_DEVICES={text!r} is not a comma list of device ids")
            return ()
        if len(set(ids)) != len(ids):
            problems.append(f"ASCEND_RT_VISIBLE_DEVICES={text} names a device twice")
        elif set(ids) != {int(d) for d in seen}:
            problems.append(f"ASCEND_RT_VISIBLE_DEVICES={text} but the container's NPU devices are {nodes}")
    if len(ids) != wanted:
        problems.append(f"{len(ids)} visible device(s) ({','.join(map(str, ids)) or 'none'}) but "
                        f"--tensor-parallel-size x local DP ranks needs {wanted}")
    return ids


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


def bind_kv_ports(kv: KvConfig, args: AscendArgs, ip: str) -> List[socket.socket]:
    """Listen on every port the connector of this process's ranks binds; refuse a port already taken."""
    held, taken = [], []
    for port in kv.ports(args.ranks, args.server.tp):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # As ZMQ's TCP listeners do: a restarted rank rebinds over its predecessor's TIME_WAIT connections,
        # while a port another process listens on is still refused (Linux's SO_REUSEADDR).
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
    """Parse and check everything; raise Refusal with every reason found."""
    try:
        args = parse_serve(argv)
    except ArgsError as exc:
        raise Refusal(str(exc)) from None
    server = args.server
    problems: List[str] = []
    max_model_len = model_limits(server, _model_config(server.model))
    seen = _devices(env.get("STANDIN_DEV_DIR") or "/dev")
    devices = _visible(env, seen, server.tp * args.local, problems)
    if_ip, ifname = _network(env, problems)
    kv = _kv_config(args.kv_transfer_config, args.dp, server.tp, problems) if args.kv_transfer_config else None
    if problems:
        raise Refusal("; ".join(problems))
    role = ROLE_OF_KV[kv.role] if kv else "mixed"
    base = Config(args=server, role=role, knobs=read_knobs(env), layout=None, max_model_len=max_model_len,
                  devices_seen=seen, env_names=tuple(sorted(env)), env_shown=shown_env(env, UPSTREAM_SHOWN_ENV))
    return AscendConfig(base=base, args=args, kv=kv, devices=devices, if_ip=if_ip, ifname=ifname)
