"""`up` reserves the ports its servers listen on that lie in a host's ephemeral range (plain facts, no I/O)."""

import subprocess
from dataclasses import replace

from deployctl.facts.listening import Listening, parse_port_list
from deployctl.plan.reserve_ports import RESERVE_SCRIPT, plan_reserved_ports
from deployctl.plan.up import plan_up
from deployctl.spec.load import load_spec_text
from tests.plan.test_upstream import facts as upstream_facts, running_containers
from tests.spec.test_upstream_build import QWEN3


def facts(spec, reserved=(), containers=None, ephemeral=(32768, 60999)):
    listening = Listening(frozenset({22}), ephemeral, frozenset(reserved))
    return {name: replace(found, listening=listening)
            for name, found in upstream_facts(spec, containers).items()}


def test_kv_ports_in_the_ephemeral_range_are_reserved_on_each_host_keeping_its_own_list():
    spec = load_spec_text(QWEN3 % "external")  # 16-NPU hosts: kv ports from 36000, inside 32768-60999
    stage = plan_reserved_ports(spec, facts(spec, reserved={8080}))
    by_host = {s.host: s for s in stage.steps}
    assert stage.name == "ports" and set(by_host) == {"node1", "node2", "node3"}
    node3 = by_host["node3"]
    assert node3.action == "run" and node3.commands[0].argv == ("sh", "-c", RESERVE_SCRIPT, "sh", "36116-36131")
    assert node3.reason.startswith("reserve 36116-36131 (decode group 0 kv ports 36116-36131) from the ephemeral "
                                   "range 32768-60999")
    assert node3.commands[0].failure.startswith(  # what a host that refuses the write (not root) is told
        "cannot add 36116-36131 to /proc/sys/net/ipv4/ip_local_reserved_ports (writing it needs root): reserve them yourself, "
        "`sysctl -w net.ipv4.ip_local_reserved_ports=8080,36116-36131`")
    # the API ports (9100 up) and the rpc port (12345) lie below the range: nothing to reserve there
    assert by_host["node1"].commands[0].argv[-1] == "36000-36015"


def test_nothing_when_reserved_already_below_the_range_or_unknown():
    spec = load_spec_text(QWEN3 % "external")
    assert plan_reserved_ports(spec, facts(spec, reserved=range(36000, 36200))) is None
    assert plan_reserved_ports(spec, facts(spec, ephemeral=(40000, 60999))) is None
    assert plan_reserved_ports(spec, upstream_facts(spec)) is None  # no listening fact gathered


def test_both_ends_of_the_range_count_as_inside():
    """ip_local_port_range: "The first number is the first, the second the last local port number" (kernel
    Documentation/networking/ip-sysctl.rst): both ends are handed out."""
    spec = load_spec_text(QWEN3 % "external")  # node1's kv ports are 36000-36015

    def node1(low, high):
        stage = plan_reserved_ports(spec, facts(spec, ephemeral=(low, high)))
        step = next((s for s in stage.steps if s.host == "node1"), None) if stage else None
        return step.commands[0].argv[-1] if step else None

    assert node1(32768, 36000) == "36000"  # the top of the range is a kv port
    assert node1(36015, 60999) == "36015"  # the bottom
    assert node1(32768, 35999) is None and node1(36016, 60999) is None


def test_up_reserves_before_it_stops_or_starts_a_server_and_a_rerun_reserves_nothing():
    spec = load_spec_text(QWEN3 % "external")
    names = [s.name for s in plan_up(spec, facts(spec)).stages]
    assert names.index("files") < names.index("ports") < names.index("workers")
    running = running_containers(spec)
    assert not plan_up(spec, facts(spec, reserved=range(36000, 36132), containers=running)).changed


def test_the_host_script_adds_to_the_list_it_finds(tmp_path):
    """The script as the host runs it, on a file standing in for the /proc entry."""
    target = tmp_path / "reserved"
    script = RESERVE_SCRIPT.replace("/proc/sys/net/ipv4/ip_local_reserved_ports", str(target))
    target.write_text("\n")
    subprocess.run(["sh", "-c", script, "sh", "36100-36103"], check=True)
    assert parse_port_list(target.read_text()) == set(range(36100, 36104))
    subprocess.run(["sh", "-c", script, "sh", "40000"], check=True)
    assert target.read_text() == "36100-36103,40000\n"
