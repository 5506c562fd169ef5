"""Every port a deployment binds on a host is in one set: a front on a port a server of its host binds is a
`validate` error naming both, with the kv ports the renderer gives the servers (issue 39 items 6 and 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployctl.plan.dp_launch import kv_transfer_config
from deployctl.spec.load import check_spec_text, load_spec_text

ROOT = Path(__file__).resolve().parents[2]
PD = (ROOT / "playbooks/vllm-ascend-pd-qwen3.yaml").read_text()  # prefill on node1, the proxy on node1
PROXY = "proxy: {host: node1, port: 8000}"


def _with(cards: int, proxy_port: int) -> str:
    assert PROXY in PD and "cards: 16" in PD and PD.count("tp: 8") == PD.count("tp: 4") == 1
    text = PD if cards == 16 else PD.replace("tp: 4", "tp: 2").replace("tp: 8", "tp: 4")  # half the NPUs a rank
    return text.replace("cards: 16", f"cards: {cards}").replace(PROXY, f"proxy: {{host: node1, port: {proxy_port}}}")


def _rendered_kv_ports(cards: int) -> list[int]:
    """The kv ports of prefill's servers on node1 as the renderer writes them into --kv-transfer-config."""
    spec = load_spec_text(_with(cards, 8000), environ={})
    prefill, decode = spec.upstream.groups[0], spec.upstream.groups[-1]
    servers = [i.server for i in spec.instances if i.server is not None and i.server.group.role == "prefill"]
    bases = {int(kv_transfer_config(s, spec.name, prefill, decode)["kv_port"]) for s in servers}
    (base,) = bases
    return list(range(base, base + prefill.ranks_per_host * prefill.tp))


@pytest.mark.parametrize("cards", [8, 16])
def test_a_front_on_a_rendered_kv_port_is_refused_naming_both(cards):
    ports = _rendered_kv_ports(cards)
    assert ports[0] == (36000 if cards == 16 else 28000)  # vllm-ascend's tutorial bases (dp_groups.py)
    for port in (ports[0], ports[-1]):
        spec, errors, _ = check_spec_text(_with(cards, port), "spec.yaml", environ={})
        assert spec is None and [e.dotted_path for e in errors] == ["topology.proxy.port"], errors
        assert f"port {port} is both prefill group 0 kv ports {ports[0]}-{ports[-1]} and the proxy" \
            in errors[0].message


@pytest.mark.parametrize("cards", [8, 16])
def test_a_front_just_past_the_kv_ports_is_valid(cards):
    ports = _rendered_kv_ports(cards)
    for port in (ports[0] - 1, ports[-1] + 1):
        spec, errors, _ = check_spec_text(_with(cards, port), "spec.yaml", environ={})
        assert errors == [] and spec is not None


def test_on_16_npu_hosts_the_8_npu_base_is_free():
    """28000 is the kv base of 8-NPU hosts only: on 16-NPU hosts nothing binds it (vllm-ascend #6455)."""
    spec, errors, _ = check_spec_text(_with(16, 28000), "spec.yaml", environ={})
    assert errors == [] and spec is not None
