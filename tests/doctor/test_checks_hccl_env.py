"""The HCCL env lint with plain data: what the user's env sets for a host's containers, and each rule."""

from __future__ import annotations

from deployctl.facts.model import HostFacts
from deployctl.doctor.checks_hccl_env import check_hccl_env, hccl_env_for_host
from deployctl.ranktable.host_address import BoundAddress, HostAddresses
from deployctl.spec.load import load_spec_text
from tests.spec.test_upstream_build import QWEN3

FACTS = HostFacts(bound_addresses=HostAddresses(
    (BoundAddress("lo", "127.0.0.1", "host"), BoundAddress("enp61s0f0", "10.200.0.11", "global")), "enp61s0f0"))


def statuses(findings):
    return [(f.status, f.observed) for f in findings]


def test_nothing_set_means_no_finding_and_sound_values_pass():
    assert check_hccl_env(FACTS, ()) == ()
    (finding,) = check_hccl_env(FACTS, (("HCCL_IF_IP", "10.200.0.11"), ("HCCL_SOCKET_IFNAME", "enp61s0f0"),
                                        ("HCCL_CONNECT_TIMEOUT", "1200")))
    assert (finding.name, finding.status) == ("hccl_env", "PASS")


def test_an_address_the_host_does_not_hold_and_a_nic_it_does_not_have_fail():
    findings = check_hccl_env(FACTS, (("HCCL_IF_IP", "10.200.0.12"), ("GLOO_SOCKET_IFNAME", "eth0")))
    assert statuses(findings) == [
        ("FAIL", "HCCL_IF_IP=10.200.0.12, but the host holds enp61s0f0 10.200.0.11"),
        ("FAIL", "GLOO_SOCKET_IFNAME=eth0, but the host has no such interface (IPv4 interfaces: enp61s0f0, lo)")]
    assert "deployctl sets each host's own" in findings[0].fix


def test_timeouts_short_of_a_group_set_up_or_shorter_than_hccls_warn_and_a_non_number_fails():
    assert statuses(check_hccl_env(FACTS, (("HCCL_CONNECT_TIMEOUT", "60"),))) == [("WARN", "HCCL_CONNECT_TIMEOUT=60")]
    (engine,) = check_hccl_env(FACTS, (("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300"),))
    assert engine.status == "WARN" and "HCCL operator timeout 1836 s" in engine.observed and "#13233" in engine.fix
    assert check_hccl_env(FACTS, (("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300"), ("HCCL_EXEC_TIMEOUT", "200")))[0].status == "PASS"
    assert statuses(check_hccl_env(FACTS, (("HCCL_EXEC_TIMEOUT", "2h"),))) == [("FAIL", "HCCL_EXEC_TIMEOUT='2h'")]


def test_addresses_not_gathered_is_a_fail_saying_so():
    (finding,) = check_hccl_env(HostFacts(), (("HCCL_IF_IP", "10.200.0.11"),))
    assert finding.status == "FAIL" and finding.observed == "unknown (not gathered)"


def test_the_env_linted_per_host_is_the_spec_env_under_each_groups_and_never_a_secret():
    text = (QWEN3 % "external").replace("env: {HCCL_BUFFSIZE: 1024}",
                                        "env: {HCCL_BUFFSIZE: 1024, HCCL_CONNECT_TIMEOUT: 60}")
    text += "env: {HCCL_CONNECT_TIMEOUT: '1200', HCCL_IF_IP: '${SECRET_IP}', TP_SOCKET_IFNAME: eth9}\n"
    spec = load_spec_text(text, environ={"SECRET_IP": "10.0.0.1"})
    assert hccl_env_for_host(spec, "node1") == (("TP_SOCKET_IFNAME", "eth9"), ("HCCL_CONNECT_TIMEOUT", "60"))
    assert hccl_env_for_host(spec, "node2") == (("TP_SOCKET_IFNAME", "eth9"), ("HCCL_CONNECT_TIMEOUT", "1200"))
