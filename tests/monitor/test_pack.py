"""The monitoring pack (deployctl/monitor/, pure): targets with their labels, the flavour's metric names in every
query, what is missing said once, deterministic bytes, no secret; and a real promtool accepts the config and the
rules (`check config`, `check rules`); tests/monitor/test_alerts.py evaluates every alert (`promtool test rules`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deployctl.monitor import Exporters, render_pack
from deployctl.monitor.known_errors import ContainerLog, hccl_signature_ids, render_textfile
from deployctl.monitor.pack import PROMETHEUS, RULES, TARGET_FILES
from deployctl.servers import flavour_of
from deployctl.servers.metrics import TRITON_VLLM_BACKEND, VLLM_KV_CONNECTOR, VLLM_V1
from deployctl.spec.load import load_spec, load_spec_text
from tests.monitor.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yaml"))
LABELS = {"deployment", "role", "group", "rank", "host", "instance"}


def pack_of(name: str, **options):
    return render_pack(load_spec(ROOT / "playbooks" / name, environ={}, unresolved_env="allow"), **options)


def write(pack, directory: Path) -> Path:
    for relative, text in pack.files.items():
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        (directory / relative).write_text(text)
    return directory


def targets(pack, kind: str) -> list:
    return json.loads(pack.files[TARGET_FILES[kind]])


def test_demo_targets_every_api_server_the_front_and_each_hosts_exporters_with_their_labels():
    pack = pack_of("demo-pd.yaml")
    servers = targets(pack, "servers")
    assert [(g["targets"], g["labels"]["role"], g["labels"]["host"], g["labels"]["instance"]) for g in servers] == [
        (["10.200.0.11:8088"], "prefill", "tb1", "demo-pd-prefill-0"),
        (["10.200.0.12:8089"], "decode", "tb2", "demo-pd-decode-0")]
    assert all(set(g["labels"]) == LABELS | {"role_servers"} and g["labels"]["deployment"] == "demo-pd"
               for g in servers)
    assert [g["labels"]["role_servers"] for g in servers] == ["1", "1"]  # one prefill, one decode
    # the scheduler serves no /metrics: blackbox_exporter probes its health path
    assert [g["targets"] for g in targets(pack, "fronts")] == [["http://10.200.0.11:9000/health"]]
    # MindCluster npu-exporter's default port (cmd/npu-exporter/main.go portConst), node_exporter's
    assert [g["targets"] for g in targets(pack, "npu")] == [["10.200.0.11:8082"], ["10.200.0.12:8082"]]
    assert [g["targets"] for g in targets(pack, "node")] == [["10.200.0.11:9100"], ["10.200.0.12:9100"]]


def test_vllm_ascend_ranks_are_labelled_by_group_and_dp_rank_and_the_proxy_by_its_health_path():
    pack = pack_of("vllm-ascend-pd-qwen3.yaml")
    servers = targets(pack, "servers")
    ranks = [(g["labels"]["role"], g["labels"]["group"], g["labels"]["rank"], g["labels"]["host"]) for g in servers]
    # prefill group 0: DP2 on node1; decode group 0: DP8 over node2 (ranks 0-3) and node3 (4-7); one API server each
    assert ranks == [("prefill", "0", str(r), "node1") for r in range(2)] + \
        [("decode", "0", str(r), "node2" if r < 4 else "node3") for r in range(8)]
    assert len({g["labels"]["instance"] for g in servers}) == len(servers)  # each rank its own series
    assert [g["labels"]["role_servers"] for g in servers] == ["2"] * 2 + ["8"] * 8
    assert [g["targets"][0].endswith("/healthcheck") for g in targets(pack, "fronts")] == [True]
    # its servers listen on 9100: node_exporter's default port there is theirs, so no node target, said once a host
    assert targets(pack, "node") == [] and len([n for n in pack.notes if "9100" in n]) == 3


def test_missing_exporters_are_not_targets_and_are_said():
    spec = load_spec(ROOT / "playbooks" / "demo-pd.yaml", environ={}, unresolved_env="allow")
    pack = render_pack(spec, Exporters({"tb1": frozenset({22, 8082}), "tb2": frozenset({22})}))
    assert [g["labels"]["host"] for g in targets(pack, "npu")] == ["tb1"]
    assert targets(pack, "node") == []
    assert any("tb2" in n and "npu-exporter" in n and "8082" in n for n in pack.notes)
    assert "tb2" in pack.files["NOTES.txt"] and "node_exporter" in pack.files["NOTES.txt"]


def test_the_rules_are_the_same_bytes_whatever_the_server_count():
    """A count written into a rule goes stale when `up` changes it (Prometheus reads rule files only at start and
    on reload): the targets' `role_servers` label carries it, the rule file does not change."""
    text = (ROOT / "playbooks" / "demo-pd.yaml").read_text()
    more = text.replace("    - {host: tb2, devices: [0, 1], port: 8089}",
                        "    - {host: tb2, devices: [0, 1], port: 8089}\n    - {host: tb2, devices: [2, 3], port: 8090}")
    one, two = (render_pack(load_spec_text(t, environ={}, unresolved_env="allow")) for t in (text, more))
    assert [g["labels"]["role_servers"] for g in targets(two, "servers")] == ["1", "2", "2"]
    assert one.files[RULES] == two.files[RULES]
    missing = next(r for r in yaml.safe_load(one.files[RULES])["groups"][0]["rules"]
                   if r["alert"] == "DeployctlRanksMissing")
    assert "deployment" in missing["expr"] and "role_servers" in missing["expr"]


def test_node_exporter_job_keeps_the_textfiles_host_label():
    """The known-error textfile names the scanned container's host; node_exporter's target labels would rename it
    `exported_host` without honor_labels (Prometheus docs, scrape_config)."""
    config = yaml.safe_load(pack_of("demo-pd.yaml").files[PROMETHEUS])
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert jobs["deployctl-node-exporter"].get("honor_labels") is True
    assert not jobs["deployctl-servers"].get("honor_labels")


def test_after_down_no_target_and_no_alert_remain():
    pack = pack_of("demo-pd.yaml", deployed=False)
    assert all(targets(pack, kind) == [] for kind in TARGET_FILES)
    assert yaml.safe_load(pack.files[RULES])["groups"][0]["rules"] == []


@pytest.mark.parametrize("name, names", [("demo-pd.yaml", VLLM_V1), ("gpu-vllm.yaml", VLLM_V1),
                                         ("gpu-triton.yaml", TRITON_VLLM_BACKEND)])
def test_queries_use_the_flavours_metric_names(name, names):
    spec = load_spec(ROOT / "playbooks" / name, environ={}, unresolved_env="allow")
    assert flavour_of(spec).metrics == names
    pack = render_pack(spec)
    exprs = " ".join(t["expr"] for p in json.loads(pack.files[f"grafana/dashboards/{spec.name}.json"])["panels"]
                     for t in p["targets"]) + pack.files[RULES]
    for metric in (names.ttft, names.tpot, names.e2e, names.running, names.waiting, names.kv_usage, names.preemptions,
                   names.generation_tokens):
        assert metric in exprs, metric
    other = VLLM_V1 if names is TRITON_VLLM_BACKEND else TRITON_VLLM_BACKEND
    assert other.tpot not in exprs and other.kv_usage not in exprs


def test_triton_is_scraped_on_its_metrics_port_and_gpu_hosts_have_no_npu_panels():
    spec = load_spec(ROOT / "playbooks" / "gpu-triton.yaml", environ={}, unresolved_env="allow")
    pack = render_pack(spec)
    instance = spec.instances[0]
    assert targets(pack, "servers")[0]["targets"] == [f"{spec.host(instance.host).address}:{instance.metrics_port}"]
    assert targets(pack, "npu") == []
    assert "npu_chip_info" not in pack.files[f"grafana/dashboards/{spec.name}.json"]


def test_dashboard_has_every_panel_the_issue_names():
    pack = pack_of("demo-pd.yaml")
    panels = json.loads(pack.files["grafana/dashboards/demo-pd.json"])["panels"]
    titles = [p["title"] for p in panels]
    for title in ("Time to first token", "Time per output token", "End-to-end request latency", "Requests running",
                  "Requests waiting", "KV cache usage", "Preemptions /s", "NPU AI core utilisation", "NPU HBM used",
                  "NPU temperature", "NPU power", "P:D balance: requests held"):
        assert title in titles
    assert len({p["id"] for p in panels}) == len(panels)
    provisioning = yaml.safe_load(pack.files["grafana/provisioning/datasources/deployctl.yaml"])
    assert {t["datasource"]["uid"] for p in panels for t in p["targets"]} == {provisioning["datasources"][0]["uid"]}
    mixed = json.loads(next(v for k, v in pack_of("mixed-1host-910b.yaml").files.items()
                            if k.startswith("grafana/dashboards/")))
    assert not [p for p in mixed["panels"] if p["title"].startswith("P:D")]  # no P:D balance without P/D


def dashboard_of(name: str) -> dict:
    pack = pack_of(name)
    return {p["title"]: [t["expr"] for t in p["targets"]]
            for p in json.loads(next(v for k, v in pack.files.items() if k.startswith("grafana/dashboards/")))["panels"]}


def test_request_panels_of_vllms_example_dashboard_read_its_metrics():
    """Issue 39: finish reasons, prompt and generation lengths, queue/prefill/decode time, as vLLM's
    examples/online_serving/prometheus_grafana/grafana.json draws them (by role here)."""
    panels = dashboard_of("demo-pd.yaml")
    assert panels["Requests finished /s by reason"] == [
        'sum by (role, finished_reason) (rate(vllm:request_success_total{deployment="demo-pd"}[60s]))']
    assert all("vllm:request_prompt_tokens_bucket" in e for e in panels["Prompt length"])
    assert all("vllm:request_generation_tokens_bucket" in e for e in panels["Generation length"])
    phases = panels["Queue, prefill and decode time (mean)"]
    assert [e.split("(rate(")[1].split("_sum")[0] for e in phases] == [
        "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"]
    # AscendCloud's P/D moves KV through its own scheduler flow: no KV connector metric to draw
    assert not [t for t in panels if t.startswith("KV transfer")]
    # Triton's vLLM backend serves no request_success (vllm_backend src/utils/metrics.py)
    assert "Requests finished /s by reason" not in dashboard_of("gpu-triton.yaml")


def test_kv_transfer_panels_only_for_vllm_ascend_pd():
    """vllm-ascend's Mooncake connector exports nothing of its own: the KV panels read what vLLM's scheduler
    exports for any connector, the decode's lookups it loaded and its requests waiting on a KV load."""
    spec = load_spec(ROOT / "playbooks" / "vllm-ascend-pd-qwen3.yaml", environ={}, unresolved_env="allow")
    assert flavour_of(spec).metrics == VLLM_KV_CONNECTOR
    panels = dashboard_of("vllm-ascend-pd-qwen3.yaml")
    loaded = panels["KV transfer: prompt tokens loaded /s"]
    assert "vllm:external_prefix_cache_hits_total" in loaded[0] and 'role="decode"' in loaded[0]
    assert "vllm:external_prefix_cache_queries_total" in loaded[1]
    assert panels["KV transfer: requests waiting on a KV load"] == [
        'sum by (role, stage) (vllm:num_requests_kv_fetch_by_stage{deployment="qwen3-pd",role="decode"})']
    mixed = dashboard_of("vllm-ascend-mixed-ep-1host.yaml")
    assert not [t for t in mixed if t.startswith("KV transfer")] and "Requests finished /s by reason" in mixed


def test_a_vllm_router_front_is_scraped_on_its_metrics_port_and_has_its_panels():
    """Issue 39: vllm-router's own metrics (vllm-project/router src/metrics.rs) on the port deployctl gives it."""
    spec = load_spec(ROOT / "playbooks" / "mixed-router-910b.yaml", environ={}, unresolved_env="allow")
    pack = render_pack(spec)
    address = spec.host(spec.front.host).address
    (router,) = targets(pack, "router")
    assert router["targets"] == [f"{address}:19000"] and router["labels"]["role"] == "router"
    jobs = {j["job_name"]: j for j in yaml.safe_load(pack.files[PROMETHEUS])["scrape_configs"]}
    assert jobs["deployctl-router"]["file_sd_configs"][0]["files"] == [TARGET_FILES["router"]]
    panels = dashboard_of("mixed-router-910b.yaml")
    assert panels["Router: requests /s by route"] == [
        f'sum by (route) (rate(vllm_router_requests_total{{deployment="{spec.name}",job="deployctl-router"}}[60s]))']
    assert "vllm_router_worker_health" in panels["Router: workers"][0]
    assert not [t for t in dashboard_of("demo-pd.yaml") if t.startswith("Router:")] and targets(
        pack_of("demo-pd.yaml"), "router") == []
    assert targets(render_pack(spec, deployed=False), "router") == []


def test_the_pack_is_the_same_bytes_in_every_process(tmp_path):
    """Deterministic: sorted and stable, whatever the hash seed (sets and dicts never leak their order)."""
    script = ("import hashlib, sys; from pathlib import Path; from deployctl.monitor import render_pack; "
              "from deployctl.spec.load import load_spec\n"
              "for p in sorted(Path(sys.argv[1]).glob('*.yaml')):\n"
              "    pack = render_pack(load_spec(p, environ={}, unresolved_env='allow'))\n"
              "    print(p.name, hashlib.sha256(repr(sorted(pack.files.items())).encode()).hexdigest())\n")
    outputs = {subprocess.run([sys.executable, "-c", script, str(ROOT / "playbooks")], capture_output=True, text=True,
                              check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outputs) == 1 and len(next(iter(outputs)).splitlines()) == len(PLAYBOOKS)


def test_no_secret_reaches_the_pack():
    marker = "s3cr3t-VALUE-42"
    text = (ROOT / "playbooks" / "demo-pd.yaml").read_text().replace("env: {}", "env: {HF_TOKEN: '${HF_TOKEN}'}")
    spec = load_spec_text(text, environ={"HF_TOKEN": marker, "AWS_ACCESS_KEY_ID": marker,
                                         "AWS_SECRET_ACCESS_KEY": marker})
    assert any(e.is_secret for e in spec.env)
    files = render_pack(spec).files
    assert not [path for path, body in files.items() if marker in body or "HF_TOKEN" in body]


def test_the_spec_key_sets_the_interval_ports_and_directory(tmp_path):
    text = (ROOT / "playbooks" / "demo-pd.yaml").read_text() + (
        "monitor: {out: mon, scrape_interval: 1s, npu_exporter_port: 9082, node_exporter_port: null,"
        " blackbox_exporter: '127.0.0.1:9999'}\n")
    spec = load_spec_text(text, base_dir=tmp_path)
    assert spec.monitor_dir == tmp_path / "mon"
    pack = render_pack(spec)
    config = yaml.safe_load(pack.files[PROMETHEUS])
    assert config["global"]["scrape_interval"] == "1s" and config["global"]["evaluation_interval"] == "1s"
    assert [g["targets"] for g in targets(pack, "npu")] == [["10.200.0.11:9082"], ["10.200.0.12:9082"]]
    assert targets(pack, "node") == []
    front = next(j for j in config["scrape_configs"] if j["job_name"] == "deployctl-front")
    assert {"target_label": "__address__", "replacement": "127.0.0.1:9999"} in front["relabel_configs"]
    # the hang looks at two scrapes
    assert "[2s]" in next(r["expr"] for r in yaml.safe_load(pack.files[RULES])["groups"][0]["rules"]
                          if r["alert"] == "DeployctlServerHung")


@pytest.mark.parametrize("value, path", [("{scrape_interval: 15}", "monitor.scrape_interval"),
                                         ("{scrape_interval: 1h}", "monitor.scrape_interval"),
                                         ("{npu_exporter_port: 0}", "monitor.npu_exporter_port"),
                                         ("{deploy: true}", "monitor.deploy"),
                                         ("{blackbox_exporter: '127.0.0.1:99999'}", "monitor.blackbox_exporter"),
                                         ("{scrape_interval: 99999999m}", "monitor.scrape_interval"),
                                         ("{scrape_interval: 5ms}", "monitor.scrape_interval"),
                                         ("{prometheus_url: 'http://127.0.0.1:70000'}", "monitor.prometheus_url"),
                                         ("{prometheus_url: '127.0.0.1:9090'}", "monitor.prometheus_url"),
                                         ("{ttft_p99: 2h}", "monitor.ttft_p99")])
def test_a_bad_monitor_value_is_refused_at_its_path_and_line(value, path):
    from deployctl.errors import SpecError

    text = (ROOT / "playbooks" / "demo-pd.yaml").read_text() + f"monitor: {value}\n"
    with pytest.raises(SpecError) as caught:
        load_spec_text(text)
    problem = caught.value.problems[0]
    assert problem.dotted_path == path and problem.line == text.count("\n"), problem


# --- a real promtool ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_promtool_accepts_the_config_and_the_rules(prometheus_tools, path, tmp_path):
    pack = render_pack(load_spec(path, environ={}, unresolved_env="allow"))
    out = write(pack, tmp_path)
    config = promtool("check", "config", str(out / PROMETHEUS))
    assert config.returncode == 0, config.stdout + config.stderr
    rules = promtool("check", "rules", str(out / RULES))
    assert rules.returncode == 0 and "SUCCESS: 9 rules found" in rules.stdout, rules.stdout + rules.stderr


def test_known_error_lines_become_a_textfile_metric(prometheus_tools):
    lines = json.loads((ROOT / "tests" / "fixtures" / "diagnose" / "signature-lines.json").read_text())["lines"]
    hccl = next(row["line"] for row in lines if row["id"] == "hccl_exec_timeout")
    logs = [ContainerLog("tb2", "demo-pd-decode-0", f"INFO ok\n{hccl}\n{hccl}\nINFO more"),
            ContainerLog("tb1", "demo-pd-prefill-0", "INFO all fine")]
    text = render_textfile("demo-pd", logs, 1700000000.0)
    assert ('deployctl_known_error_lines{deployment="demo-pd",host="tb2",container="demo-pd-decode-0",'
            'signature="hccl_exec_timeout"} 2') in text
    # a clean container still has a 0 for every HCCL signature (the alert sees a scan, not an absence)
    assert all(f'container="demo-pd-prefill-0",signature="{i}"}} 0' in text for i in hccl_signature_ids())
    assert render_textfile("demo-pd", list(reversed(logs)), 1700000000.0) == text
    lint = promtool("check", "metrics", stdin=text)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_sglang_panels_and_rules_name_only_sglangs_metrics_and_the_routers_own():
    """Issue 43: server sglang behind sglang-router. Every server metric a panel or an alert queries is one of
    SGLang's names (servers/metrics.py SGLANG, read from SGLang 0.5.23's metrics_collector.py); the router's panels
    read its own smg_* names (fronts/sglang_router.py), scraped on its metrics port, never vllm-router's; its health
    is probed too (its /health is its liveness: sgl-model-gateway src/server.rs `health`)."""
    from dataclasses import fields

    from deployctl.servers.sglang.metrics import SGLANG
    from tests.fronts.test_sglang_router import TWO

    spec = load_spec_text(TWO, environ={})
    assert flavour_of(spec).metrics is SGLANG
    pack = render_pack(spec)
    panels = json.loads(pack.files[f"grafana/dashboards/{spec.name}.json"])["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]] + [
        r["expr"] for g in yaml.safe_load(pack.files[RULES])["groups"] for r in g["rules"]]
    named = {getattr(SGLANG, f.name) for f in fields(SGLANG) if f.name != "source" and getattr(SGLANG, f.name)}
    allowed = named | {f"{n}_{s}" for n in named for s in ("bucket", "sum", "count")}
    used = {m for e in exprs for m in re.findall(r"[A-Za-z_][A-Za-z0-9_]*:[A-Za-z0-9_:]+", e)}
    assert used and used <= allowed, used - allowed
    assert {SGLANG.ttft + "_bucket", SGLANG.running, SGLANG.waiting, SGLANG.generation_tokens} <= used
    router = [t["expr"] for p in panels if p["title"].startswith("Router:") for t in p["targets"]]
    assert len(router) == 7 and all("smg_" in e and "vllm_router" not in e for e in router), router
    assert 'sum by (worker) (rate(smg_worker_cb_outcomes_total{deployment="tiny-sglang",job="deployctl-router"}' \
           '[60s]))' in router
    assert [g["targets"] for g in targets(pack, "router")] == [["10.200.0.11:19000"]]
    assert [g["targets"] for g in targets(pack, "fronts")] == [["http://10.200.0.11:8000/health"]]
