"""`monitor:` on the test bed with a real Prometheus (issue 33): after `up` of the demo (playbooks/demo-pd.yaml)
and of a vllm-ascend P/D shape, Prometheus (Debian's package, on 127.0.0.1) scrapes every target up — the API
servers' /metrics, the front through blackbox_exporter, a fake MindCluster npu-exporter on each host
(tests/monitor/fake_npu_exporter.py) — and every dashboard panel's query returns series. On the P/D shape, a
prefill rank held exactly at its capacity (saturation) fires no alert; hung (STANDIN_HANG_AFTER_REQUESTS) it fires
DeployctlServerHung. `down` empties the target lists and the rules. Waits poll Prometheus' HTTP API."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import MODEL
from tests.monitor.conftest import prometheus_tools  # noqa: F401 (the fixture)
from tests.monitor.prometheus import Blackbox, Prometheus, iso_seconds, promtool, wait_until
from tests.ports import free_port
from tests.testbed import hosts as bed_hosts
from tests.testbed import router_image
from tests.testbed.demo import PLAYBOOK, place_tiny_model

TESTBED_GROUP = "testbed2"  # the second bed, beside the first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
EXPORTER = ROOT / "tests" / "monitor" / "fake_npu_exporter.py"
NPU_PORT = 8082  # MindCluster npu-exporter's default (cmd/npu-exporter/main.go portConst)
WAIT_S = 60


def start_npu_exporters(bed, names):
    """One fake npu-exporter per host, in the host's network namespace on its address, reading its profile."""
    procs = []
    for name in names:
        host = bed.host(name)
        profile = bed_hosts.root_of(host) / "etc/deployctl-fake/profile.json"
        procs.append(subprocess.Popen(["ip", "netns", "exec", host.netns, sys.executable, str(EXPORTER),
                                       host.address, str(NPU_PORT), str(profile)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        url = f"http://{host.address}:{NPU_PORT}/metrics"
        wait_until(lambda: urllib.request.urlopen(url, timeout=2).status == 200, f"the fake npu-exporter on {name}")
    return procs


def stop(procs):
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def monitor_key(out: Path, blackbox_port: int) -> str:
    return f"monitor: {{out: {out}, scrape_interval: 1s, blackbox_exporter: '127.0.0.1:{blackbox_port}'}}\n"


def panel_queries(pack: Path) -> list[tuple[str, str]]:
    dashboard = json.loads(next((pack / "grafana" / "dashboards").glob("*.json")).read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def every_target_up(prometheus: Prometheus, expected: dict) -> bool:
    found: dict = {}
    for target in prometheus.targets():
        if target["health"] != "up":
            return False
        found[target["labels"]["job"]] = found.get(target["labels"]["job"], 0) + 1
    return found == expected


def post(address: str, port: int, body: dict, timeout: float = 30) -> dict:
    request = urllib.request.Request(f"http://{address}:{port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def no_alert(prometheus: Prometheus) -> list:
    """[] when no alert is pending or firing; else an AssertionError with the alerts and the targets' state."""
    active = prometheus.alerts()
    if active:
        detail = {"alerts": [(a["labels"], a["state"], a["activeAt"], a["value"]) for a in active],
                  "targets": [(t["labels"].get("instance"), t["health"], t["lastScrape"], t["lastError"])
                              for t in prometheus.targets()]}
        raise AssertionError(json.dumps(detail, indent=1))
    return active


class Monitoring:
    """Blackbox exporter and Prometheus for one pack; stopped at the end."""

    def __init__(self, pack: Path, blackbox_port: int) -> None:
        self.blackbox = Blackbox(pack / "blackbox.yml", pack.parent, blackbox_port)
        data = pack.parent / "tsdb"
        data.mkdir(exist_ok=True)
        self.prometheus = Prometheus(pack / "prometheus.yml", data)

    def stop(self) -> None:
        self.prometheus.stop()
        self.blackbox.stop()


def check_pack_serves(pack: Path, prometheus: Prometheus, expected: dict) -> None:
    """promtool accepts it, every target is up, every panel's query returns series."""
    for args in (("check", "config", str(pack / "prometheus.yml")),
                 ("check", "rules", str(pack / "rules" / "deployctl.rules.yml"))):
        result = promtool(*args)
        assert result.returncode == 0, result.stdout + result.stderr
    wait_until(lambda: every_target_up(prometheus, expected), f"every target up ({expected})", WAIT_S)
    for title, expr in panel_queries(pack):
        wait_until(lambda: prometheus.query(expr), f"series for the panel {title!r}: {expr}", WAIT_S)


def test_demo_pack_every_target_up_and_every_panel_has_series(bed, deployctl, prometheus_tools, tmp_path):  # noqa: F811
    place_tiny_model(bed, "demo-tiny", ("tb1", "tb2"))  # the demo's model directory
    pack, blackbox_port = tmp_path / "pack", free_port()
    text = PLAYBOOK.read_text().replace("/tmp/deployctl-testbed/", f"{bed.root}/")
    path = deployctl.write(text + monitor_key(pack, blackbox_port), "demo-pd.yaml")
    exporters = start_npu_exporters(bed, ("tb1", "tb2"))
    monitoring = None
    try:
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 0, out + err
        assert f"monitoring pack: {pack}" in err
        notes = (pack / "NOTES.txt").read_text()  # the bed runs no node_exporter: said, and not a target
        assert "tb1: no node_exporter listening on port 9100" in notes and "tb2:" in notes
        monitoring = Monitoring(pack, blackbox_port)
        for _ in range(3):  # traffic through the scheduler, so the latency histograms have observations
            post("10.200.0.11", 9000, {"model": "demo-tiny", "prompt": "hello monitor", "max_tokens": 8})
        check_pack_serves(pack, monitoring.prometheus, {"deployctl-servers": 2, "deployctl-front": 1,
                                                        "deployctl-npu-exporter": 2})
        # the NPU panels read the host's emulated cards, as npu-smi shows them
        cards = monitoring.prometheus.query('npu_chip_info_hbm_total_memory{deployment="demo-pd",host="tb1"}')
        assert len(cards) == 8 and {c["value"][1] for c in cards} == {"65536"}
        # --scan-logs: each container's log counted against the known-error signatures, a clean scan
        scans = tmp_path / "textfile"
        code, out, err = deployctl("monitor", path, "--scan-logs", scans)
        assert code == 0, out + err
        textfile = (scans / "deployctl-demo-pd.prom").read_text()
        assert 'container="demo-pd-decode-0",signature="hccl_exec_timeout"} 0' in textfile
        lint = promtool("check", "metrics", stdin=textfile)
        assert lint.returncode == 0, lint.stdout + lint.stderr

        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, out + err
        assert all(json.loads(f.read_text()) == [] for f in (pack / "targets").glob("*.json"))
        assert yaml.safe_load((pack / "rules" / "deployctl.rules.yml").read_text())["groups"][0]["rules"] == []
    finally:
        if monitoring:
            monitoring.stop()
        stop(exporters)
        deployctl("down", path, "--yes")


ROUTED = """image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 8}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb4, port: 8700, image: "%s", policy: round_robin}
  instances:
    - {host: tb4, devices: [0], port: 8701}
    - {host: tb4, devices: [1], port: 8702}
"""


def test_router_pack_scrapes_the_real_routers_own_metrics(bed, deployctl, prometheus_tools, tmp_path):  # noqa: F811
    """Issue 39: vllm-router's metrics listened on 127.0.0.1:29000 (its default), out of Prometheus' reach; deployctl
    now gives it --prometheus-host 0.0.0.0 --prometheus-port 19000 and the pack scrapes it: the real router's
    series reach the suite's Prometheus and every panel (the router's own included) has series."""
    if router_image.IMAGE not in bed.docker_on("tb4", "images", "--format", "{{.Repository}}:{{.Tag}}").stdout:
        pytest.fail(f"the bed has no {router_image.IMAGE} (pip install vllm-router=={router_image.VERSION} failed)")
    pack, blackbox_port = tmp_path / "pack", free_port()
    path = deployctl.write(bed.spec_yaml("mon-router", ROUTED % router_image.IMAGE, hosts_used=["tb4"],
                                         extra=monitor_key(pack, blackbox_port)))
    exporters = start_npu_exporters(bed, ("tb4",))
    monitoring = None
    try:
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 0, out + err
        monitoring = Monitoring(pack, blackbox_port)
        for _ in range(3):
            post("10.200.0.14", 8700, {"model": "tiny", "prompt": "hello router", "max_tokens": 8})
        check_pack_serves(pack, monitoring.prometheus, {"deployctl-servers": 2, "deployctl-front": 1,
                                                        "deployctl-npu-exporter": 1, "deployctl-router": 1})
        workers = monitoring.prometheus.query('vllm_router_worker_health{deployment="mon-router"}')
        assert sorted(w["metric"]["worker"] for w in workers) == ["http://10.200.0.14:8701",
                                                                 "http://10.200.0.14:8702"]
        assert {w["value"][1] for w in workers} == {"1"}
    finally:
        if monitoring:
            monitoring.stop()
        stop(exporters)
        deployctl("down", path, "--yes")


def seconds(text: str) -> int:
    return int(text[:-1]) if text.endswith("s") and not text.endswith("ms") else int(text[:-2]) // 1000


def quiet_since(prometheus: Prometheus, group: str, since: float, settle: float) -> None:
    """Wait (on Prometheus' own rule evaluations, /api/v1/rules lastEvaluation) until the rules have been
    evaluated past `since + settle`, then: no alert was pending or firing at any evaluation since `since`
    (Prometheus writes the ALERTS series for both states)."""
    wait_until(lambda: (prometheus.last_evaluation(group) or 0) >= since + settle,
               f"rule evaluations {settle:.0f} s past the change", settle + WAIT_S)
    window = int(time.time() - since) + 1
    seen = prometheus.query(f"max_over_time(ALERTS[{window}s])")
    assert seen == [], json.dumps([(a["metric"], a["value"]) for a in seen], indent=1)


def test_after_an_up_that_changes_the_count_and_after_down_no_alert_fires(bed, deployctl, prometheus_tools,  # noqa: F811
                                                                          tmp_path):
    """Issue 39: rules baked the server count in, so after `down` (or an `up` to another count) the rules
    Prometheus had loaded saw too few servers and DeployctlRanksMissing fired until a reload; `down` stopped
    servers while they were still targets (DeployctlRankDown pending), and a just-started Prometheus at 1 s fired
    RanksMissing. Here a real Prometheus keeps the rules it loaded at start through all of it: nothing is ever
    pending or firing."""
    place_tiny_model(bed, "demo-tiny", ("tb1", "tb2"))
    pack, blackbox_port = tmp_path / "pack", free_port()
    text = PLAYBOOK.read_text().replace("/tmp/deployctl-testbed/", f"{bed.root}/") + monitor_key(pack, blackbox_port)
    more = text.replace("    - {host: tb2, devices: [0, 1], port: 8089}",
                        "    - {host: tb2, devices: [0, 1], port: 8089}\n    - {host: tb2, devices: [2, 3], port: 8090}")
    assert more != text
    path = deployctl.write(text, "demo-pd.yaml")
    monitoring = None
    try:
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 0, out + err
        started = time.time()
        monitoring = Monitoring(pack, blackbox_port)
        prometheus = monitoring.prometheus
        rules = yaml.safe_load((pack / "rules" / "deployctl.rules.yml").read_text())
        group = rules["groups"][0]["name"]
        # the longest an alert waits: its down window plus its `for:` (the SLO's 5 min window needs traffic)
        settle = max(seconds(r["for"]) for r in rules["groups"][0]["rules"] if r["alert"] != "DeployctlTtftSlo")
        settle += seconds(re.search(r"\[(\d+s)\]", next(r["expr"] for r in rules["groups"][0]["rules"]
                                                          if r["alert"] == "DeployctlRankDown")).group(1)) + 2
        wait_until(lambda: every_target_up(prometheus, {"deployctl-servers": 2, "deployctl-front": 1}),
                   "every target up", WAIT_S)
        quiet_since(prometheus, group, started, settle)  # a just-started Prometheus fires nothing

        deployctl.write(more, "demo-pd.yaml")  # one more decode server: 3 API servers
        changed = time.time()
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 0, out + err
        assert "alert rules changed" not in err  # no count in the rules: nothing to reload
        wait_until(lambda: every_target_up(prometheus, {"deployctl-servers": 3, "deployctl-front": 1}),
                   "the third server a target, every target up", WAIT_S)
        quiet_since(prometheus, group, changed, settle)

        stopped = time.time()
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, out + err
        assert "reload it (POST" in err  # the rule file is empty now; Prometheus keeps what it loaded
        wait_until(lambda: not [t for t in prometheus.targets() if t["labels"].get("deployment") == "demo-pd"],
                   "Prometheus to drop every target of the deployment", WAIT_S)
        assert prometheus.last_evaluation(group)  # the old rules are still loaded and evaluated
        quiet_since(prometheus, group, stopped, settle)
    finally:
        if monitoring:
            monitoring.stop()
        deployctl("down", path, "--yes")


PD = """topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: tb3, port: 8400}
  prefill:
    - {hosts: [tb3], dp: 2, tp: 2, port: 9400, env: {STANDIN_CAPACITY: '2', STANDIN_TPOT_MS: '40', STANDIN_HANG_AFTER_REQUESTS: '60'}}
  decode:
    - {hosts: [tb4], dp: 2, tp: 2, port: 9400}
"""


def stream(address: str, port: int, tokens: int) -> threading.Thread:
    def run():
        post(address, port, {"model": "tiny", "prompt": "saturate", "max_tokens": tokens, "ignore_eos": True},
             timeout=120)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def hang(address: str, port: int, limit: int = 80) -> socket.socket:
    """Requests to one rank, one at a time, until one is not answered: that one is hung (its socket stays open)."""
    body = json.dumps({"model": "tiny", "prompt": "until it hangs", "max_tokens": 2}).encode()
    for _ in range(limit):
        sock = socket.create_connection((address, port), timeout=10)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        sock.settimeout(3)  # a 2-token answer takes ~0.1 s; a hung one never comes
        try:
            while sock.recv(65536):
                pass
        except socket.timeout:
            return sock
        sock.close()
    raise AssertionError(f"{address}:{port} answered {limit} requests: no hang")


def stall_start(prometheus: Prometheus, instance: str) -> float:
    """The time of the last scrape at which the rank's generated-token counter had just moved."""
    samples = prometheus.query(f'vllm:generation_tokens_total{{instance="{instance}"}}[2m]')[0]["values"]
    moved = [t for (t, v), (_, before) in zip(samples[1:], samples) if v != before]
    assert moved, samples
    return float(moved[-1])


def test_vllm_ascend_pd_pack_saturation_fires_nothing_and_a_hang_fires_the_hang_alert(bed, deployctl,  # noqa: F811
                                                                                        prometheus_tools, tmp_path,
                                                                                        capsys):
    pack, blackbox_port = tmp_path / "pack", free_port()
    extra = "server: vllm-ascend\nrequirements: {cards: 8}\n" + MODEL + monitor_key(pack, blackbox_port)
    path = deployctl.write(bed.spec_yaml("mon-pd", PD, hosts_used=["tb3", "tb4"], extra=extra))
    exporters = start_npu_exporters(bed, ("tb3", "tb4"))
    monitoring, held = None, None
    try:
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 0, out + err
        monitoring = Monitoring(pack, blackbox_port)
        prometheus = monitoring.prometheus
        for _ in range(3):
            post("10.200.0.13", 8400, {"model": "tiny", "prompt": "hello monitor", "max_tokens": 8})
        check_pack_serves(pack, prometheus, {"deployctl-servers": 4, "deployctl-front": 1,
                                             "deployctl-npu-exporter": 2})
        ranks = {(s["metric"]["role"], s["metric"]["rank"]) for s in prometheus.query('up{deployment="mon-pd"}')
                 if s["metric"]["job"] == "deployctl-servers"}
        assert ranks == {("prefill", "0"), ("prefill", "1"), ("decode", "0"), ("decode", "1")}

        # saturation: prefill rank 0 holds exactly its capacity (2) for about 12 s (150 tokens, 80 ms apart at 2/2)
        rank0 = 'instance="mon-pd-prefill0-r0"'
        # a Prometheus just started has rules pending until every target has been scraped (RanksMissing counts an
        # unscraped target as missing): saturation starts once nothing is pending
        wait_until(lambda: prometheus.alerts() == [], "no alert pending once every target was scraped", WAIT_S)
        threads = [stream("10.200.0.13", 9400, 150) for _ in range(2)]
        saturated = (f"min_over_time(vllm:kv_cache_usage_perc{{{rank0}}}[5s]) == 1 and "
                     f"count_over_time(vllm:kv_cache_usage_perc{{{rank0}}}[5s]) >= 5")
        wait_until(lambda: not no_alert(prometheus) and prometheus.query(saturated),
                   "five scrapes of a full KV cache", WAIT_S)
        no_alert(prometheus)  # the hang and KV-full rules evaluated on five saturated scrapes: nothing
        for thread in threads:
            thread.join(120)

        # the hang: a request that never answers, holding its slot while no token comes
        held = hang("10.200.0.13", 9400)
        hung_at = time.time()
        alerts = wait_until(lambda: [a for a in prometheus.alerts() if a["labels"]["alertname"] ==
                                     "DeployctlServerHung" and a["state"] == "firing"], "the hang alert", WAIT_S)
        assert [a["labels"]["instance"] for a in alerts] == ["mon-pd-prefill0-r0"]
        firing = time.time() - hung_at
        stalled = stall_start(prometheus, "mon-pd-prefill0-r0")
        active_at = alerts[0]["activeAt"]
        with capsys.disabled():  # a figure for the record, not an assertion
            print(f"\nhang alert: firing {firing:.1f} s after the client saw no answer for 3 s; Prometheus' activeAt "
                  f"{active_at}, {iso_seconds(active_at) - stalled:.1f} s after the last scrape that saw a token")
    finally:
        if held:
            held.close()
        if monitoring:
            monitoring.stop()
        stop(exporters)
        deployctl("down", path, "--yes")
