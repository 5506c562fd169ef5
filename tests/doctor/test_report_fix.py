"""Doctor's probe list, the per-host reports from vendor outputs, the JSON document, and --fix (no host)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from deployctl.doctor import sysctl_persist as persist
from deployctl.doctor.fix import SYSCTL_CONTENT, SYSCTL_FILE, fix_ip_forward, hosts_to_fix, persist_program
from deployctl.doctor.gather import CONTAINERS, NEAREST_DF, doctor_probes, ping_probes
from deployctl.doctor.report import document, failure_lines, host_reports
from deployctl.doctor.targets import DoctorPlan, PingPair, Target
from deployctl.facts.assemble import ProbeOutput, host_facts_from
from deployctl.facts.hccn_model import HccnDeviceFacts, HccnIp
from deployctl.facts.model import HostFacts
from deployctl.spec.model import Host, Requirements
from deployctl.transport import Result
from tests.fakes.transport import FakeTransport

FORMATS = Path(__file__).parent.parent / "fixtures" / "formats"


def sample(case: str) -> ProbeOutput:
    folder = FORMATS / case
    read = lambda name: (folder / name).read_text() if (folder / name).exists() else ""  # noqa: E731
    return ProbeOutput(int(read("exit_code.txt")), read("stdout.txt"), read("stderr.txt"))


SAMPLES = {
    "npu_info": "npu-smi/info-910b3-8x64g-healthy-23.0.6",
    "npu_count": "npu-smi/info-l-8cards",
    "board:0": "npu-smi/board-i1-23.0.6",
    "version_info": "files/driver-version-info-23.0.6",
    "arch": "system/uname-m",
    "os_release": "system/os-release-hce-2.0",
    "docker_version": "system/docker-version-json",
    "ip_forward": "system/sysctl-ip-forward-1",
    "containers": "system/docker-inspect-npu-holders",
    "disk": "system/df-pk-weights",
}


def plan(**changes) -> DoctorPlan:
    values = dict(targets=(Target(Host("n1", "192.0.2.11"), (0, 1)),), requirements=Requirements(driver="23.0.6"),
                  disk_path="/mnt/weights/x", own_deployment="demo")
    values.update(changes)
    return DoctorPlan(**values)


def facts_with(**overrides) -> HostFacts:
    probes = doctor_probes(plan(), plan().targets[0])
    overrides.setdefault("containers", ProbeOutput(0, "[]\n"))  # nothing running
    results = [(p, overrides.get(p.key) or sample(SAMPLES[p.key])) for p in probes]
    return host_facts_from(results, disk_path="/mnt/weights/x")


def test_one_batch_of_probes_with_nearest_parent_df_and_ps_plus_inspect():
    probes = doctor_probes(plan(), plan().targets[0])
    assert [p.key for p in probes] == list(SAMPLES)
    by_key = {p.key: p for p in probes}
    assert by_key["disk"].argv == ("sh", "-c", NEAREST_DF, "sh", "/mnt/weights/x")
    assert (by_key["disk"].tool, by_key["containers"].tool) == ("df", "docker")
    assert by_key["containers"].argv == ("sh", "-c", CONTAINERS) and by_key["containers"].parse_failed_output


def test_nearest_parent_df_script_measures_an_existing_parent(tmp_path):
    missing = tmp_path / "not" / "yet" / "there"
    out = subprocess.run(["sh", "-c", NEAREST_DF, "sh", str(missing)], capture_output=True, text=True, check=True)
    expected = subprocess.run(["df", "-Pk", str(tmp_path)], capture_output=True, text=True, check=True)
    # same filesystem and mount point (the free blocks may move between the two calls)
    assert out.stdout.split()[-1] == expected.stdout.split()[-1]
    assert out.stdout.splitlines()[1].split()[0] == expected.stdout.splitlines()[1].split()[0]


def test_ping_probes_only_where_the_peer_address_is_known():
    peer = HostFacts(hccn=(HccnDeviceFacts(4, ip=HccnIp("10.201.2.14", "255.255.255.0")), HccnDeviceFacts(5)))
    pairs = (PingPair("a", 0, "b", 4), PingPair("a", 1, "b", 5), PingPair("a", 0, "c", 4))
    probes = ping_probes(pairs, {"b": peer, "c": HostFacts(reachable=False, error="refused")})
    assert [p.argv[1:] for p in probes] == [("-i", "0", "-ping", "-g", "address", "10.201.2.14")]
    assert probes[0].parse_failed_output  # a failed ping prints its summary and exits 1


def test_report_of_a_healthy_host_then_json_shape():
    facts = {"n1": facts_with(ip_forward=ProbeOutput(0, "1\n"))}  # `sysctl -n`: the value alone
    (report,) = host_reports(plan(), facts)
    assert [(f.name, f.status) for f in report.findings if f.status != "PASS"] == [("npu_memory", "SKIP")]
    assert report.finding("disk").observed == "6005.1 GB free on /mnt (/dev/nvme0n1p1)"
    doc = document((report,))
    assert set(doc) == {"ok", "hosts"} and set(doc["hosts"][0]) == {"host", "address", "reachable", "checks"}
    assert doc["hosts"][0]["host"] == "n1" and doc["hosts"][0]["address"] == "192.0.2.11"


def test_ip_forward_zero_is_the_one_thing_fix_repairs():
    facts = {"n1": facts_with(ip_forward=ProbeOutput(0, "0\n"))}
    reports = host_reports(plan(), facts)
    assert hosts_to_fix(reports) == ("n1",)
    assert failure_lines(reports) == ["n1 ip_forward: 0 (expected 1); fix: deployctl doctor --fix (sets "
                                      "net.ipv4.ip_forward=1 now and in /etc/sysctl.d/)"]
    unknown = host_reports(plan(), {"n1": facts_with(ip_forward=ProbeOutput(127, "", "sysctl: not found"))})
    assert hosts_to_fix(unknown) == ()  # not read: nothing safe to do


def test_unreachable_host_gets_the_host_key_fix():
    facts = {"n1": HostFacts(reachable=False, error="unknown host key ssh-ed25519 SHA256:abc")}
    (report,) = host_reports(plan(), facts, {"n1": "ssh-keyscan -p 22 -t ed25519 192.0.2.11 >> kh"})
    assert [(f.name, f.status, f.fix) for f in report.findings] == [
        ("ssh", "FAIL", "ssh-keyscan -p 22 -t ed25519 192.0.2.11 >> kh")]
    assert document((report,))["ok"] is False


PERSISTED = ('{"actions": ["wrote /etc/sysctl.d/zz-deployctl.conf (net.ipv4.ip_forward = 1)", "edited /etc/sysctl.conf: '
             'net.ipv4.ip_forward was 0, now 1 (backup /etc/sysctl.conf.deployctl.bak)"], '
             '"files": ["/etc/sysctl.d/zz-deployctl.conf", "/etc/sysctl.conf"]}\n')


def test_fix_sets_it_now_then_runs_the_persist_program_as_argv_data():
    transport = FakeTransport("n1", {r"^python3 -c": PERSISTED})
    outcome = fix_ip_forward(transport)
    now, persist = transport.ran
    assert now.argv == ("sysctl", "-w", "net.ipv4.ip_forward=1")
    assert persist.argv[:2] == ("python3", "-c") and persist.argv[2] == persist_program()
    assert persist.argv[3:5] == (SYSCTL_FILE, SYSCTL_CONTENT) and "/etc/sysctl.d/99-deployctl.conf" in persist.argv
    assert SYSCTL_FILE > "/etc/sysctl.d/99-sysctl.conf"  # sorts after Debian's link to /etc/sysctl.conf
    assert outcome.to_json() == {"host": "n1", "check": "ip_forward", "changed": True, "actions": [
        "sysctl -w net.ipv4.ip_forward=1", "wrote /etc/sysctl.d/zz-deployctl.conf (net.ipv4.ip_forward = 1)",
        "edited /etc/sysctl.conf: net.ipv4.ip_forward was 0, now 1 (backup /etc/sysctl.conf.deployctl.bak)"],
        "files": ["/etc/sysctl.d/zz-deployctl.conf", "/etc/sysctl.conf"]}


def test_fix_without_python3_sets_it_now_and_says_it_is_not_persisted():
    missing = Result(("python3",), 127, "", "sh: 1: python3: not found\n")
    outcome = fix_ip_forward(FakeTransport("n1", {r"^python3 -c": missing}))
    assert outcome.actions == ("sysctl -w net.ipv4.ip_forward=1",)
    assert outcome.error == "set for now, but not persisted across a reboot: python3 is not installed"


def test_persist_program_reads_lines_as_both_loaders_do():
    assert persist.assignment("  -net/ipv4/ip_forward= 0 ") == ("net.ipv4.ip_forward", "0")
    assert persist.assignment("# net.ipv4.ip_forward=0") is None and persist.assignment("; x=1") is None
    assert persist.assignment("net.ipv4.conf.all/forwarding = 1") == ("net.ipv4.conf.all/forwarding", "1")
    text = "net.ipv4.ip_forward=0\nvm.swappiness = 10\nnet.ipv4.ip_forward = 1\n"
    assert persist.final_value(text) == "1" and persist.final_value("vm.swappiness=1\n") is None
    assert persist.final_value(text + "-net.ipv4.ip_forward=0") == "0"
    assert persist.set_to_one("a = 1\n net.ipv4.ip_forward=0\n") == (
        "a = 1\n# deployctl doctor --fix (was: net.ipv4.ip_forward=0)\nnet.ipv4.ip_forward = 1\n")


def test_fix_that_cannot_run_sysctl_says_why_and_writes_nothing():
    denied = Result(("sysctl",), 255, "", "sysctl: permission denied on key 'net.ipv4.ip_forward'\n")
    transport = FakeTransport("n1", {("sysctl", "-w", "net.ipv4.ip_forward=1"): denied})
    outcome = fix_ip_forward(transport)
    assert len(transport.ran) == 1  # nothing persisted
    assert outcome.to_json() == {"host": "n1", "check": "ip_forward", "changed": False, "actions": [], "files": [],
                                 "error": "sysctl -w net.ipv4.ip_forward=1 failed: sysctl: permission denied on "
                                          "key 'net.ipv4.ip_forward'"}


def test_persist_program_makes_every_setting_of_its_file_win():
    wanted = {"vm.swappiness": "0", "kernel.numa_balancing": "0"}
    text = "vm.swappiness = 60\nnet.ipv4.ip_forward = 1\nkernel.numa_balancing=1\n"
    assert persist.overruled(text, wanted) == [("vm.swappiness", "60"), ("kernel.numa_balancing", "1")]
    fixed = persist.set_to_one(text, wanted)
    assert persist.overruled(fixed, wanted) == [] and "net.ipv4.ip_forward = 1\n" in fixed
    assert "# deployctl doctor --fix (was: vm.swappiness = 60)\nvm.swappiness = 0\n" in fixed


def test_fix_plan_has_one_step_per_repair_and_host():
    from deployctl.doctor.fix import GOVERNOR_UNIT, TUNING_FILE, plan_fix

    plan, names = plan_fix({"n1": ("ip_forward", "swappiness", "cpu_governor"), "n2": ("numa_balancing",)})
    assert names == ("ip_forward", "swappiness", "cpu_governor", "numa_balancing")
    steps = plan.steps
    assert steps[1].commands[0].argv == ("sysctl", "-w", "vm.swappiness=0")
    assert steps[1].commands[1].argv[3:5] == (TUNING_FILE, "# written by deployctl doctor --fix: vllm-ascend "
                                                           "serving tuning\nvm.swappiness = 0\n")
    assert steps[2].puts[0].path == GOVERNOR_UNIT and steps[3].host == "n2"
    assert steps[3].commands[0].argv == ("sysctl", "-w", "kernel.numa_balancing=0")


SECRET = "hf_dOcToR0123456789abc"  # the spec's ${HF_TOKEN}: at most 24 characters, npu-smi's process name column


@pytest.fixture
def known_secret(monkeypatch):
    """The spec's secret values as `know` leaves them once doctor has loaded the spec (deployctl/redaction.py)."""
    from deployctl import redaction

    monkeypatch.setattr(redaction, "_known", (SECRET,))


def test_npu_smis_process_names_are_quoted_redacted(known_secret):
    """The fake npu-smi's own `info` table (tests/testbed/fakes.py), a process on NPU 0 named by the secret: the
    FAIL that quotes it shows `<redacted>` in the table's rows, the JSON document and up's refusal lines."""
    from tests.testbed import fakes

    profile = fakes.with_defaults({"processes": {"0": [{"pid": 4242, "name": SECRET, "memory_mb": 100}]}})
    stdout, _, code = fakes.render_npu_smi_info(profile)
    reports = host_reports(plan(), {"n1": facts_with(npu_info=ProbeOutput(code, stdout))})
    held = reports[0].finding("npu_free")
    assert (held.name, held.observed) == ("npu_free", "NPU 0 used by pid 4242 (<redacted>, 100 MB)")
    assert SECRET not in json.dumps(document(reports)) and SECRET not in "\n".join(failure_lines(reports))


def test_a_vendor_tools_error_is_quoted_redacted(known_secret):
    """`npu-smi info -t board` failing with the secret, or a `NAME=value` whose name says secret, in its last line:
    the `npu-smi failed: ...` finding quotes it redacted."""
    for said, quoted in ((f"dcmi get board info failed, token {SECRET}", "token <redacted>"),
                         ("dcmi get board info failed, ASCEND_PASSWORD=s3cr3tpw", "ASCEND_PASSWORD=<redacted>")):
        facts = facts_with(**{"board:0": ProbeOutput(1, "", said + "\n")})
        (report,) = host_reports(plan(), {"n1": facts})
        assert report.finding("firmware").observed == f"npu-smi failed: dcmi get board info failed, {quoted}"


def test_a_fix_outcome_quotes_the_hosts_words_redacted(known_secret):
    broken = Result(("python3",), 1, "", f"PermissionError: /etc/sysctl.conf {SECRET}\n")
    outcome = fix_ip_forward(FakeTransport("n1", {r"^python3 -c": broken}))
    assert outcome.error == "set for now, but not persisted across a reboot: PermissionError: /etc/sysctl.conf <redacted>"
