"""server sglang's one server over several hosts (issue 43; `hosts` on an instance): SGLang's multi-node launch,
node 0 serving the API and the others headless, every node one unit; the rules that keep it to SGLang and check each
node's host, devices and ports; exports refuse it."""

from __future__ import annotations

from deployctl.export.options import ExportOptions
from deployctl.export.refusals import problems
from deployctl.plan.containers import container_for
from deployctl.plan.units import serving_units
from deployctl.spec.load import check_spec_text, load_spec_text
from tests.servers.sglang.test_flavour import BASE, TEST_SPECS, errors_of

MULTI = TEST_SPECS["MULTINODE"]


def tail(spec, instance, n: int) -> tuple[str, ...]:
    words = container_for(spec, instance).command
    start = words.index("--tp-size")
    return words[start:start + n]


def test_each_node_runs_the_same_launch_but_its_rank_and_meets_at_the_first_hosts_address():
    s = load_spec_text(MULTI, environ={})
    first, second = s.instances
    assert (first.name, first.host, first.port, first.tp) == ("tiny-sglang-mixed-0", "tb1", 30000, 4)
    assert (second.name, second.host, second.port, second.tp) == ("tiny-sglang-mixed-0-node1", "tb2", None, 4)
    assert first.own_ports == (("port", 30000), ("dist_init_port", 30002)) and second.own_ports == ()
    assert tail(s, first, 8) == ("--tp-size", "4", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr",
                                 "10.200.0.11:30002")
    assert tail(s, second, 8)[5] == "1" and tail(s, second, 8)[7] == "10.200.0.11:30002"
    assert container_for(s, second).devices == container_for(s, first).devices  # the same ids on each host
    # one unit: a rollout replaces, and watch restarts, both nodes together; only node 0 serves the API
    assert [[m.name for m in members] for members in serving_units(s).values()] == [
        ["tiny-sglang-mixed-0", "tiny-sglang-mixed-0-node1"]]
    assert s.api_servers == (first,)
    written = load_spec_text(MULTI.replace("port: 30000}", "port: 30000, dist_init_port: 5000}"), environ={})
    assert tail(written, written.instances[1], 8)[7] == "10.200.0.11:5000"


def test_every_node_of_a_multi_node_prefill_registers_at_node_0s_bootstrap_port():
    pd = TEST_SPECS["PD"].replace("  tb1: {address: 10.200.0.11}\n", "  tb1: {address: 10.200.0.11}\n"
                                  "  tb2: {address: 10.200.0.12}\n").replace(
        "{host: tb1, devices: [0], port: 30000}", "{hosts: [tb1, tb2], devices: [0], port: 30000}")
    s = load_spec_text(pd, environ={})
    nodes = [i for i in s.instances if i.role == "prefill" and i.unit]
    for node in nodes:
        words = container_for(s, node).command
        assert words[words.index("--disaggregation-bootstrap-port") + 1] == "30001"
    assert nodes[0].own_ports == (("port", 30000), ("bootstrap_port", 30001), ("dist_init_port", 30002))


def test_what_a_multi_node_instance_gets_wrong_is_said_at_its_key():
    assert errors_of(MULTI.replace("server: sglang\n", "").replace("platform: gpu\n", "platform: gpu\n")) == [
        "s.yaml:15:15: topology.instances[0].hosts: an instance over several hosts is server sglang's multi-node "
        "launch; vLLM on GPU runs each instance on one host"]
    assert errors_of(MULTI.replace("{hosts: [tb1, tb2]", "{host: tb1, hosts: [tb1, tb2]")) == [
        "s.yaml:16:26: topology.instances[0].hosts: give host (one host) or hosts (a server over several), not both"]
    assert errors_of(MULTI.replace("hosts: [tb1, tb2]", "hosts: [tb1, tb3]")) == [
        "s.yaml:16:21: topology.instances[0].hosts[1]: unknown host 'tb3' — did you mean 'tb2'?"]
    # node 1's devices on tb2 are another instance's
    taken = MULTI.replace("port: 30000}\n", "port: 30000}\n    - {host: tb2, devices: [1], port: 30010}\n")
    assert errors_of(taken) == [
        "s.yaml:17:29: topology.instances[1].devices[0]: GPU 1 on host tb2 is already used by "
        "topology.instances[0]"]
    clash = MULTI.replace("port: 30000}\n", "port: 30000}\n    - {host: tb1, devices: [2], port: 30002}\n")
    assert [e for e in errors_of(clash) if "30002" in e], errors_of(clash)
    # what is wrong with its devices is said once, not once a node
    assert errors_of(MULTI.replace("devices: [0, 1], port", "devices: [0, 1, 9], port")) == [
        "s.yaml:16:36: topology.instances[0].devices: 3 devices: an instance needs 1, 2, 4 or 8 (its TP size is its "
        "device count)", "s.yaml:16:43: topology.instances[0].devices[2]: 9 is not a device id (cards: 0-7)"]
    assert errors_of(MULTI.replace("{hosts: [tb1, tb2]", "{hosts: [tb1]")) == [
        "s.yaml:16:15: topology.instances[0].hosts: [\"tb1\"] is too short (at least 2 items)"]


def test_a_dist_init_port_on_one_host_is_warned_and_exports_refuse_a_server_over_several_hosts():
    _, errors, warnings = check_spec_text(BASE.replace("port: 30000}", "port: 30000, dist_init_port: 5000}"),
                                          "s.yaml")
    assert errors == [] and [w.render().split(": ", 2)[2] for w in warnings] == [
        "dist_init_port is ignored unless the instance spans hosts (server sglang's `hosts`)"]
    found = problems(load_spec_text(MULTI, environ={}), ExportOptions(target="lws", weights_pvc="w"))
    assert [(p.dotted_path, p.message.split(":")[0]) for p in found] == [
        ("topology.instances[0].hosts", "a server over several hosts is not exported")]
