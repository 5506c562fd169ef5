"""Answers -> bundle files, failures and summary, with plain data (no host)."""

import json

from deployctl.diagnose.bundle import (
    Answer, Failure, HostBundle, File, Summary, all_texts, host_bundle, members, unreachable,
)
from deployctl.diagnose.plan import DAEMON_DOWN, collection_plan
from deployctl.diagnose.redact import REDACTED
from deployctl.diagnose.signatures import match
from tests.diagnose.test_plan import load

SECRET = "hf_abcdef123456"


def answers_for(items, **by_name):
    return [by_name.get(i.name, Answer(0, f"{i.name} output\n", "")) for i in items]


def test_answers_become_files_in_the_host_folder_and_failures_say_why():
    items = collection_plan(load(), "h1", lines=10, marker="M")
    inspect = json.dumps([{"Name": "/diag-mixed-0", "Config": {"Env": [f"HF_TOKEN={SECRET}", "HCCL_IF_IP=10.0.0.1"]}}])
    containers = (f"@@M inspect diag-mixed-0\n{inspect}\n\n"
                  f"@@M stdout diag-mixed-0\n2025-01-01T00:00:00Z token {SECRET}\nEI0002: Notify register times out\n\n"
                  "@@M stderr diag-mixed-0\nwarn\n\n")
    state = ("@@M names /var/lib/deployctl/diag/env/diag-mixed-0.env\nHF_TOKEN\n\n"
             "@@M file /var/lib/deployctl/diag/ranktables/global_ranktable_merge.json\n{}\n\n"
             "@@M file /var/lib/deployctl/diag/history.jsonl\n{\"action\": \"up\"}\n\n")
    answers = answers_for(
        items,
        **{"npu-smi info": Answer(127, "", "sh: 1: npu-smi: not found"),
           "hccn_tool -i 0 -link -g": Answer(0, "link status: DOWN\n", ""),
           "/etc/hccn.conf": Answer(1, "", "cat: /etc/hccn.conf: No such file or directory"),
           "docker info": Answer(1, "", f"error during connect {SECRET}"),
           "containers": Answer(0, containers, ""), "plog": Answer(0, "", ""), "state": Answer(0, state, "")})
    bundle = host_bundle("h1", items, answers, marker="M", secrets=(SECRET,))
    paths = [f.path for f in bundle.files]
    assert paths[:2] == ["hccn/npu0-link.txt", "hccn/npu0-net-health.txt"]
    assert {"dmesg.txt", "df.txt", "memory.txt", "containers/diag-mixed-0/inspect.json",
            "containers/diag-mixed-0/stdout.log", "containers/diag-mixed-0/stderr.log",
            "state/env/diag-mixed-0.env", "state/ranktables/global_ranktable_merge.json",
            "state/history.jsonl"} <= set(paths)
    files = {f.path: f for f in bundle.files}
    assert files["state/env/diag-mixed-0.env"].text == f"HF_TOKEN={REDACTED}\n"
    assert json.loads(files["containers/diag-mixed-0/inspect.json"].text)[0]["Config"]["Env"] == [
        f"HF_TOKEN={REDACTED}", "HCCL_IF_IP=10.0.0.1"]
    assert files["containers/diag-mixed-0/stdout.log"].text.startswith(f"2025-01-01T00:00:00Z token {REDACTED}\n")
    assert files["containers/diag-mixed-0/stderr.log"].text == "warn\n"
    assert [(f.item, f.reason) for f in bundle.failed] == [
        ("npu-smi info", "npu-smi is not installed on the host"),
        ("/etc/hccn.conf", "exit 1: cat: /etc/hccn.conf: No such file or directory"),
        ("docker info", f"exit 1: error during connect {REDACTED}")]
    assert bundle.notes == ("plog: no files under /root/ascend/log or /var/log/npu",)
    assert all(SECRET not in f.text for f in bundle.files) and all(SECRET not in f.detail for f in bundle.failed)
    ids = {(h.id, h.source) for h in match(bundle.texts())}
    assert ids == {("npu_link_down", "hccn/npu0-link.txt"), ("hccl_exec_timeout", "containers/diag-mixed-0/stdout.log"),
                   ("hccn_conf_missing", "/etc/hccn.conf (failed)")}


def test_daemon_down_and_hostile_names():
    items = collection_plan(load(), "h1", lines=10, marker="M")
    down = host_bundle("h1", items, answers_for(items, containers=Answer(DAEMON_DOWN, "", "Cannot connect")),
                       marker="M", secrets=())
    assert ("containers", "the Docker daemon is not reachable") in [(f.item, f.reason) for f in down.failed]
    hostile = "@@M file /root/ascend/log/../../etc/passwd\nx\n\n@@M stdout ../up\ny\n"
    bundle = host_bundle("h1", items, answers_for(items, plog=Answer(0, hostile, "")), marker="M", secrets=())
    assert "plog/root/ascend/log/_/_/etc/passwd" in [f.path for f in bundle.files]
    assert all(".." not in f.path.split("/") for f in bundle.files)


def test_summary_and_archive_members():
    hosts = (HostBundle("h1", (File("dmesg.txt", "ok\n", "dmesg"),), (Failure("npu-smi info", "npu-smi is not installed on the host"),),
                        ("plog: no files under /root/ascend/log or /var/log/npu",)),
             unreachable("h2", "h2 (192.0.2.12): timed out waiting for the SSH banner"))
    context = {"up-error.txt": "h1: instance diag-mixed-0 exited\n  | EI0006: Getting socket times out\n"}
    summary = Summary("diag", "2025-01-01T00:00:00+00:00", hosts, tuple(match(all_texts(hosts, context))), context)
    document = summary.to_json(bundle="/x/b.tar.gz")
    assert document["hosts"] == [
        {"host": "h1", "collected": ["dmesg.txt"], "failed": [{"item": "npu-smi info",
                                                                "reason": "npu-smi is not installed on the host"}],
         "notes": ["plog: no files under /root/ascend/log or /var/log/npu"]},
        {"host": "h2", "collected": [], "failed": [{"item": "ssh", "reason": "h2 (192.0.2.12): timed out waiting for "
                                                                            "the SSH banner"}]}]
    assert [(h["id"], h["host"], h["source"]) for h in document["hints"]] == [("hccl_connect_timeout", "-", "up-error.txt")]
    out = members("diagnose-x", summary)
    assert sorted(out) == ["diagnose-x/h1/dmesg.txt", "diagnose-x/summary.json", "diagnose-x/summary.md",
                           "diagnose-x/up-error.txt"]
    md = out["diagnose-x/summary.md"].decode()
    assert "## h2" in md and "- ssh: h2 (192.0.2.12): timed out" in md and "**hccl_connect_timeout**" in md
    assert "- `h1/dmesg.txt`" in md and "- npu-smi info: npu-smi is not installed on the host" in md
    assert json.loads(out["diagnose-x/summary.json"])["deployment"] == "diag"
