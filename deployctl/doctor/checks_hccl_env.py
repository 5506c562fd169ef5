"""The HCCL environment the spec will set on a host, linted against that host (pure): one typo in these hangs
HCCL at start-up or mid-serving while every /health stays green. Only what the user writes in `env:` (the
spec's and a group's) is linted; what deployctl derives per host is right by construction."""

from __future__ import annotations

from typing import Optional

from deployctl.facts.model import HostFacts
from deployctl.plan.findings import FAIL, PASS, WARN, Finding, unknown
from deployctl.servers.vllm_ascend.dp_launch import SOCKET_IFNAME_VARS
from deployctl.spec.model import Spec

LINTED = ("HCCL_IF_IP", *SOCKET_IFNAME_VARS, "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT",
          "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS")
HCCL_CONNECT_DEFAULT_S = 120  # HCCL's own default: a multi-node group set-up can need longer, never less
HCCL_EXEC_DEFAULT_S = 1836  # HCCL's operator timeout when HCCL_EXEC_TIMEOUT is not set (vllm-ascend #13233)
NEEDS_ADDRESSES = ("HCCL_IF_IP", *SOCKET_IFNAME_VARS)


def hccl_env_for_host(spec: Spec, host: str) -> tuple[tuple[str, str], ...]:
    """The linted variables the user sets for the NPU containers on `host` (spec env, then each group's on
    top; secrets are never linted). Two groups on one host with different values both count."""
    found: dict[tuple[str, str], None] = {}
    if spec.platform != "ascend":
        return ()
    for instance in spec.instances:
        if instance.host != host or not instance.devices:  # the scheduler and the proxy run no HCCL
            continue
        merged = {e.name: e.value for e in (*spec.env, *instance.env) if not e.is_secret}
        for name in LINTED:
            if name in merged:
                found[(name, str(merged[name]))] = None
    return tuple(found)


def _seconds(text: str) -> Optional[int]:
    return int(text) if text.strip().isdigit() else None


def check_hccl_env(facts: HostFacts, env: tuple[tuple[str, str], ...]) -> tuple[Finding, ...]:
    """`hccl_env` findings: an address the host does not hold, a NIC it does not have, timeouts that end a
    group set-up early or outlast the engine's own timeout. Nothing when the spec sets none of these."""
    if not env:
        return ()
    findings: list[Finding] = []
    names = {name for name, _ in env}
    if names & set(NEEDS_ADDRESSES):
        bound = facts.bound_addresses
        if bound is None:
            findings.append(unknown("hccl_env", facts, "bound_addresses", "ip", "the host's addresses and NICs"))
        else:
            findings += _network(bound.addresses, env)
    findings += _timeouts(env)
    if findings:
        return tuple(findings)
    shown = ", ".join(f"{name}={value}" for name, value in env)
    return (Finding("hccl_env", PASS, shown, "HCCL env that fits this host", None),)


def _network(addresses, env) -> list[Finding]:
    out = []
    held = {a.address for a in addresses}
    nics = sorted({a.interface for a in addresses})
    listed = ", ".join(f"{a.interface} {a.address}" for a in addresses if not a.address.startswith("127.")) or "none"
    for name, value in env:
        if name == "HCCL_IF_IP" and value not in held:
            out.append(Finding("hccl_env", FAIL, f"HCCL_IF_IP={value}, but the host holds {listed}",
                               "HCCL_IF_IP = an address of this host",
                               "remove HCCL_IF_IP from env: deployctl sets each host's own (vllm-ascend); or give "
                               "each host's group its own value"))
        elif name in SOCKET_IFNAME_VARS and value not in nics:
            out.append(Finding("hccl_env", FAIL, f"{name}={value}, but the host has no such interface "
                                                 f"(IPv4 interfaces: {', '.join(nics) or 'none'})",
                               f"{name} = the interface carrying the host's address",
                               f"remove {name} from env: deployctl sets the NIC that carries each host's address "
                               f"(vllm-ascend); or name one of {', '.join(nics) or 'its interfaces'}"))
    return out


def _timeouts(env) -> list[Finding]:
    out = []
    values = dict(env)
    for name in ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"):
        if name in values and _seconds(values[name]) is None:
            out.append(Finding("hccl_env", FAIL, f"{name}={values[name]!r}", "a whole number of seconds",
                               f"set {name} to seconds, e.g. 1200"))
    connect = _seconds(values.get("HCCL_CONNECT_TIMEOUT", ""))
    if connect is not None and connect < HCCL_CONNECT_DEFAULT_S:
        out.append(Finding("hccl_env", WARN, f"HCCL_CONNECT_TIMEOUT={connect}",
                           f">= {HCCL_CONNECT_DEFAULT_S} (HCCL's default; multi-node groups need more)",
                           "raise HCCL_CONNECT_TIMEOUT (vllm-ascend's multi-node tests use 1200 and more): a group "
                           "still loading weights on another node fails with EI0006"))
    engine = _seconds(values.get("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", ""))
    hccl_exec = _seconds(values.get("HCCL_EXEC_TIMEOUT", "")) or HCCL_EXEC_DEFAULT_S
    if engine is not None and engine <= hccl_exec:
        out.append(Finding("hccl_env", WARN, f"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={engine}, HCCL operator timeout "
                                             f"{hccl_exec} s",
                           "the engine's timeout longer than HCCL's",
                           f"set VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS above {hccl_exec}: otherwise a communication "
                           "timeout leaves the engine hung without a log line (vllm-ascend #13233)"))
    return out

