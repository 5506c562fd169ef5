"""Which hosts doctor checks, with which devices, and which hccn pings it sends (pure)."""

from __future__ import annotations

import pytest

from deployctl.doctor.targets import PingPair, parse_host_arg, ping_pairs, plan_for_hosts, plan_for_spec
from deployctl.errors import UsageError
from deployctl.spec.load import load_spec

SPEC = """version: 1
name: pd2
hosts:
  a: {address: 10.0.0.1}
  b: {address: 10.0.0.2, user: ma-user}
  c: {address: 10.0.0.3}
requirements: {driver: '23.0.6', cards: 8}
weights: {source: s3://m/x/, dest: /mnt/weights/x}
model: {served_name: x}
topology:
  mode: disaggregated
  scheduler: {host: a, port: 9000}
  prefill:
    - {host: a, devices: [0, 1], port: 8088}
  decode:
    - {host: b, devices: [4, 5], port: 8089}
    - {host: b, devices: [6, 7], port: 8090}
"""


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return load_spec(path)


def test_plan_for_spec_checks_hosts_that_run_instances_with_their_devices(spec):
    plan = plan_for_spec(spec)
    assert [(t.host.name, t.devices) for t in plan.targets] == [("a", (0, 1)), ("b", (4, 5, 6, 7))]
    assert (plan.disk_path, plan.own_deployment, plan.disaggregated, plan.platform) == (
        "/mnt/weights/x", "pd2", True, "ascend")
    assert plan.requirements.driver == "23.0.6"


def test_ping_pairs_cover_every_nic_both_ways_without_the_full_product(spec):
    assert ping_pairs(spec) == (
        PingPair("a", 0, "b", 4), PingPair("a", 1, "b", 5), PingPair("a", 0, "b", 6), PingPair("a", 1, "b", 7),
        PingPair("b", 4, "a", 0), PingPair("b", 5, "a", 1), PingPair("b", 6, "a", 0), PingPair("b", 7, "a", 1),
    )


def test_only_named_hosts_by_name_or_address(spec):
    plan = plan_for_spec(spec, ("10.0.0.2",))
    assert [t.host.name for t in plan.targets] == ["b"]
    assert {p.src_host for p in plan.pings} == {"b"}
    with pytest.raises(UsageError, match="--host z: not a host of pd2"):
        plan_for_spec(spec, ("z",))


def test_parse_host_arg_forms():
    host = parse_host_arg("ma-user@192.0.2.11:2222", "/k", "/kh")
    assert (host.name, host.address, host.ssh.user, host.ssh.port) == ("192.0.2.11:2222", "192.0.2.11", "ma-user", 2222)
    assert (host.ssh.identity_file, host.ssh.known_hosts) == ("/k", "/kh")
    host = parse_host_arg("node1")
    assert (host.name, host.address, host.ssh.user, host.ssh.port) == ("node1", "node1", "root", 22)
    for bad in ("@x", "x:", "x:abc", "x:70000", ""):
        with pytest.raises(UsageError):
            parse_host_arg(bad)


def test_plan_for_hosts_needs_one_and_removes_duplicates():
    with pytest.raises(UsageError, match="needs a SPEC or at least one --host"):
        plan_for_hosts(())
    plan = plan_for_hosts(("root@h1", "h1", "h2:23"))
    assert [(t.host.name, t.devices) for t in plan.targets] == [("h1", ()), ("h2:23", ())]
    assert plan.disk_path is None and plan.own_deployment is None and plan.requirements.cards == 8


def test_doctor_checks_the_host_tuning_where_the_flavour_asks_for_it(spec):
    """vllm-ascend's tutorials tune the host (servers/base.py doctor_checks); AscendCloud vLLM's do not."""
    from deployctl.spec.load import load_spec_text
    from tests.plan.test_upstream import QWEN3

    assert plan_for_spec(load_spec_text(QWEN3 % "external")).tuning is True
    assert plan_for_spec(spec).tuning is False
