"""Doctor's port checks with plain facts: the ports a spec will listen on are free (or ours), and outside the
ephemeral range."""

from deployctl.facts.listening import Listening
from deployctl.facts.model import HostFacts
from deployctl.doctor.checks_ports import check_ports, listen_ports
from deployctl.spec.load import load_spec_text
from tests.plan.test_up import container_fact
from tests.spec.test_upstream_build import QWEN3


def facts(ports, containers=(), ephemeral=(32768, 60999), reserved=()):
    return HostFacts(listening=Listening(frozenset(ports), ephemeral, frozenset(reserved)),
                     containers=tuple(containers))


def test_every_port_of_a_vllm_ascend_host_is_listed():
    spec = load_spec_text(QWEN3 % "external")
    node1 = dict(listen_ports(spec, "node1"))
    assert node1[9100] == node1[9101] == "prefill group 0 API ports 9100-9101"
    assert node1[36000] == node1[36015] == "prefill group 0 kv ports 36000-36015" and 36016 not in node1
    assert node1[12345] == "prefill group 0 rpc port" and node1[8000] == "the proxy"
    node3 = dict(listen_ports(spec, "node3"))
    assert min(p for p in node3 if p >= 36100) == 36116  # decode ranks 4-7: kv_port + rank x tp
    assert 12346 not in node3  # the rpc port is the DP master's (node2)


def test_a_vllm_router_front_listens_on_its_metrics_port_too():
    """Issue 39: doctor checks the router's --prometheus-port is free, with vllm-ascend groups and without."""
    from tests.spec.test_front_rules import MIXED, ROUTER, UPSTREAM_MIXED

    upstream = dict(listen_ports(load_spec_text(UPSTREAM_MIXED % ""), "tb1"))
    assert upstream[8000] == "the vllm-router" and upstream[19000] == "the vllm-router's metrics port"
    plain = dict(listen_ports(load_spec_text(MIXED % ROUTER), "tb1"))
    assert plain[8000] == "the vllm-router" and plain[19000] == "the vllm-router's metrics port"


def test_free_ports_pass_and_taken_ones_fail_naming_them():
    wanted = ((8000, "the proxy"), (30000, "kv"), (30001, "kv"))
    ports, ephemeral = check_ports(facts({22}), wanted, "qwen3")
    assert (ports.status, ephemeral.status) == ("PASS", "PASS")
    ports, _ = check_ports(facts({30000, 30001, 8000}), wanted, "qwen3")
    assert ports.status == "FAIL" and ports.observed == "in use: 8000 (the proxy), 30000-30001 (kv)"
    assert "ss -ltnp 'sport = :8000'" in ports.fix


def test_ports_held_while_this_deployment_runs_are_expected():
    ours = container_fact("c1", "qwen3-proxy", "running", "sha256:x", {"deployctl.deployment": "qwen3"})
    theirs = container_fact("c2", "other", "running", "sha256:x", {"deployctl.deployment": "other"})
    wanted = ((8000, "the proxy"),)
    assert check_ports(facts({8000}, [ours]), wanted, "qwen3")[0].status == "PASS"
    assert check_ports(facts({8000}, [theirs]), wanted, "qwen3")[0].status == "FAIL"


def test_a_port_in_the_ephemeral_range_warns_with_the_reservation():
    _, ephemeral = check_ports(facts(set(), ephemeral=(30000, 60999)), ((30000, "kv"), (8000, "api")), "qwen3")
    assert ephemeral.status == "WARN" and ephemeral.observed == "in the ephemeral range 30000-60999: 30000 (kv)"
    assert ephemeral.fix.endswith("net.ipv4.ip_local_reserved_ports=30000")


def test_reserved_ports_in_the_ephemeral_range_pass_and_the_fix_keeps_the_hosts_own_reservations():
    wanted = ((36100, "kv"), (36101, "kv"), (8000, "api"))
    _, ephemeral = check_ports(facts(set(), reserved={36100, 36101}), wanted, "qwen3")
    assert ephemeral.status == "PASS" and ephemeral.observed == "none in 32768-60999 but 2 reserved from it"
    _, ephemeral = check_ports(facts(set(), reserved={36100, 40000}), wanted, "qwen3")
    assert ephemeral.status == "WARN" and ephemeral.observed == "in the ephemeral range 32768-60999: 36101 (kv)"
    assert ephemeral.fix.endswith("net.ipv4.ip_local_reserved_ports=36100-36101,40000")


def test_nothing_to_check_without_ports_and_unknown_without_the_probe():
    assert check_ports(facts(set()), (), "x") == ()
    (unknown,) = check_ports(HostFacts(), ((8000, "api"),), "x")
    assert unknown.status == "FAIL" and unknown.observed == "unknown (not gathered)"
