"""Every alert of the pack under Prometheus' own rule engine (`promtool test rules`) on synthetic 1 s scrapes of the
demo (playbooks/demo-pd.yaml): each fires on its fault, and not before its `for:` has run (a rule without its
`for:`, or with a shorter one, fires at a checked time where none may); none fires at saturation, on a
just-started Prometheus, or with the prober down while the front serves (for the front's own alert)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from deployctl.monitor import render_pack
from deployctl.monitor.pack import RULES
from deployctl.spec.load import load_spec_text
from tests.monitor.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
SCRAPE_S = 1
RANK = {"deployment": "demo-pd", "role": "decode", "group": "0", "rank": "0", "host": "tb2",
        "instance": "demo-pd-decode-0"}
DECODE = {**RANK, "job": "deployctl-servers", "model_name": "demo-tiny", "engine": "0", "role_servers": "1"}
PREFILL = {**DECODE, "role": "prefill", "host": "tb1", "instance": "demo-pd-prefill-0"}
FRONT = {**RANK, "job": "deployctl-front", "role": "scheduler", "host": "tb1", "instance": "demo-pd-scheduler-0"}
EVERY = ("DeployctlServerHung", "DeployctlKvCacheFull", "DeployctlRankDown", "DeployctlRanksMissing",
         "DeployctlFrontDown", "DeployctlProberDown", "DeployctlHcclErrors", "DeployctlLogScanStale",
         "DeployctlTtftSlo")
SLO_S = 300  # the latency SLO must hold over its whole 5 min window
N = 60  # samples of every series


def s(name: str, labels: dict, values: str) -> dict:
    return {"series": name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}",
            "values": values}


def engine(labels: dict, running: str = f"0x{N}", tokens: str = f"0+1x{N}", kv: str = f"0x{N}",
           preempted: str = f"0x{N}", up: str = f"1x{N}") -> list:
    return [s("up", labels, up), s("vllm:num_requests_running", labels, running),
            s("vllm:num_requests_waiting", labels, f"0x{N}"), s("vllm:generation_tokens_total", labels, tokens),
            s("vllm:kv_cache_usage_perc", labels, kv), s("vllm:num_preemptions_total", labels, preempted)]


def front(up: str = f"1x{N}", success: str = f"1x{N}") -> list:
    return [s("up", FRONT, up), s("probe_success", FRONT, success)]


HEALTHY = engine(PREFILL) + front()


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> tuple[Path, dict]:
    text = (ROOT / "playbooks" / "demo-pd.yaml").read_text() + f"monitor: {{scrape_interval: {SCRAPE_S}s}}\n"
    files = render_pack(load_spec_text(text, environ={}, unresolved_env="allow")).files
    path = tmp_path_factory.mktemp("rules") / "rules.yml"
    path.write_text(files[RULES])
    rules = {r["alert"]: r for r in yaml.safe_load(files[RULES])["groups"][0]["rules"]}
    return path, rules


# Prometheus applies a new target list within two 5 s ticks (discovery/manager.go `updatert`, scrape/manager.go
# `reloader`), then scrapes a new target within one interval: no `for:` may be shorter
FIRST_SCRAPE_S = 10 + SCRAPE_S


def seconds(text: str) -> int:
    found = re.fullmatch(r"(\d+)(ms|s|m)", text)
    return int(found.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[found.group(2)]


def hold_s(rules: dict, name: str) -> int:
    return seconds(rules[name]["for"])


def window_s(rules: dict, name: str) -> int:
    """The range of the rule's first range selector, seconds."""
    return seconds(re.search(r"\[(\d+(?:ms|s|m))\]", rules[name]["expr"]).group(1))


def firing(rules: dict, name: str, true_from: int, labels: dict, at_least: int = FIRST_SCRAPE_S) -> list:
    """From the first evaluation where its expression holds (`true_from`) the alert is pending, not firing, for at
    least the first scrape of new targets, and fires once its `for:` has run: checked 2 s before the one and 1 s
    after the other (slack for Prometheus 2's closed and 3's left-open range windows)."""
    return [{"eval_time": f"{true_from + at_least - 2}s", "alertname": name, "exp_alerts": []},
            {"eval_time": f"{true_from + hold_s(rules, name) + 1}s", "alertname": name,
             "exp_alerts": [{"exp_labels": labels}]}]


def quiet(names, times) -> list:
    return [{"eval_time": f"{t}s", "alertname": name, "exp_alerts": []} for t in times for name in names]


def cases(rules: dict) -> list:
    down = window_s(rules, "DeployctlRankDown")  # the down window: a target silent for all of it
    fails_at = 10  # every fault starts at t=10 s (the 11th sample)
    ok = fails_at - 1
    severity = {name: rules[name]["labels"]["severity"] for name in EVERY}
    flat = f"0+10x{fails_at} {10 * fails_at}x{N - fails_at}"
    stale_from = 600  # the scan ran every minute until 10 min, then stopped
    max_age = int(re.search(r"> (\d+)$", rules["DeployctlLogScanStale"]["expr"]).group(1))
    return [
        {"name": "hang: requests held, the token counter flat from t=10 s", "interval": "1s",
         "input_series": HEALTHY + engine(DECODE, running=f"4x{N}", tokens=flat, kv=f"0.25x{N}"),
         # increase() over two scrapes is 0 once the samples at 10, 11 and 12 s agree
         "alert_rule_test": firing(rules, "DeployctlServerHung", fails_at + 2,
                                   {**RANK, "severity": severity["DeployctlServerHung"]})
         + quiet([n for n in EVERY if n != "DeployctlServerHung"], (30, 45))},
        {"name": "idle: nothing held, the token counter flat (as a real idle vLLM 0.32 shows)", "interval": "1s",
         "input_series": HEALTHY + engine(DECODE, tokens=f"434x{N}", kv=f"0x{N}"),
         "alert_rule_test": quiet(EVERY, (15, 30, 45, N - 1))},
        {"name": "saturation: the cache full, every slot busy, tokens flowing, nobody preempted", "interval": "1s",
         "input_series": HEALTHY + engine(DECODE, running=f"16x{N}", tokens=f"0+16x{N}", kv=f"1x{N}"),
         "alert_rule_test": quiet(EVERY, (15, 30, 45, N - 1))},
        {"name": "overload: the cache full, preempting from t=10 s", "interval": "1s",
         "input_series": HEALTHY + engine(DECODE, running=f"16x{N}", tokens=f"0+16x{N}", kv=f"1x{N}",
                                          preempted=f"0x{fails_at} 1+1x{N - fails_at}"),
         "alert_rule_test": firing(rules, "DeployctlKvCacheFull", fails_at,
                                   {**RANK, "severity": severity["DeployctlKvCacheFull"]})
         + quiet(["DeployctlServerHung"], (30,))},
        {"name": "a rank gone at t=10 s", "interval": "1s",
         "input_series": HEALTHY + engine(DECODE, up=f"1x{ok} 0x{N - fails_at}"),
         "alert_rule_test": firing(rules, "DeployctlRankDown", fails_at + down,
                                   {**DECODE, "severity": severity["DeployctlRankDown"]})
         + firing(rules, "DeployctlRanksMissing", fails_at + down,
                  {"deployment": "demo-pd", "role": "decode", "role_servers": "1",
                   "severity": severity["DeployctlRanksMissing"]})},
        {"name": "a server target missing from Prometheus' list (two decode servers run, one is scraped)",
         "interval": "1s",
         "input_series": HEALTHY + engine({**DECODE, "role_servers": "2"}),
         # the expected side needs the role's target count held over the down window: true from then on
         "alert_rule_test": firing(rules, "DeployctlRanksMissing", down,
                                   {"deployment": "demo-pd", "role": "decode", "role_servers": "2",
                                    "severity": severity["DeployctlRanksMissing"]})
         + quiet(["DeployctlRankDown"], (30,))},
        {"name": "down: two decode targets of one list go stale two intervals apart (each at its own scrape slot)",
         "interval": "1s",
         "input_series": HEALTHY + engine({**DECODE, "role_servers": "2"}, up=f"1x{ok} stale")
         + engine({**DECODE, "role_servers": "2", "rank": "1", "instance": "demo-pd-decode-1"},
                  up=f"1x{ok + 2} stale"),
         "alert_rule_test": quiet(["DeployctlRanksMissing"], (fails_at + 2, fails_at + 12)),
         # never even pending: the expression itself is empty at every step while the list is dropped
         "promql_expr_test": [{"expr": rules["DeployctlRanksMissing"]["expr"], "eval_time": f"{t}s",
                               "exp_samples": []} for t in range(fails_at - 1, fails_at + 6)]},
        {"name": "one scrape that timed out (a busy host) is not a rank gone", "interval": "1s",
         "input_series": HEALTHY + engine(DECODE, up=f"1x{ok} 0 1x{N - fails_at - 1}"),
         "alert_rule_test": quiet(("DeployctlRankDown", "DeployctlRanksMissing"), range(fails_at, 40, 3))},
        {"name": "down: every target dropped (stale) 13 scrapes after its server stopped, before any for: ran",
         "interval": "1s",
         # Prometheus writes a stale marker when it drops a target; a range still holds the failed samples before
         "input_series": engine(PREFILL, up=f"1x{ok} 0x12 stale") + engine(DECODE, up=f"1x{ok} 0x12 stale")
         + front(up=f"1x{ok} 0x12 stale", success=f"1x{ok} 0x12 stale"),
         "alert_rule_test": quiet(EVERY, range(fails_at, 45, 2))},
        {"name": "a just-started Prometheus: nothing scraped for 10 s, then targets one interval apart",
         "interval": "1s",
         "input_series": engine(PREFILL, up=f"_x{fails_at} 1x{N - fails_at}", tokens=f"_x{fails_at} 0+1x{N - fails_at}")
         + engine(DECODE, up=f"_x{fails_at + 1} 1x{N - fails_at - 1}",
                  tokens=f"_x{fails_at + 1} 0+1x{N - fails_at - 1}")
         + front(up=f"_x{fails_at} 1x{N - fails_at}", success=f"_x{fails_at} 1x{N - fails_at}"),
         "alert_rule_test": quiet(EVERY, (3, 11, 12, 13, 20, 30, 45))},
        {"name": "the front fails its health check from t=10 s", "interval": "1s",
         "input_series": engine(PREFILL) + engine(DECODE) + front(success=f"1x{ok} 0x{N - fails_at}"),
         "alert_rule_test": firing(rules, "DeployctlFrontDown", fails_at + down,
                                   {**FRONT, "severity": severity["DeployctlFrontDown"]})
         + quiet(["DeployctlProberDown"], (40,))},
        {"name": "the prober is down from t=10 s while the front serves: its own alert, not the front's",
         "interval": "1s",
         # a failed scrape of blackbox_exporter writes up=0 and no probe_success
         "input_series": engine(PREFILL) + engine(DECODE) + front(up=f"1x{ok} 0x{N - fails_at}",
                                                                   success=f"1x{ok} _x{N - fails_at}"),
         "alert_rule_test": firing(rules, "DeployctlProberDown", fails_at + down,
                                   {**FRONT, "severity": severity["DeployctlProberDown"]})
         + quiet(["DeployctlFrontDown"], (30, 40, N - 1))},
        {"name": "HCCL errors in a log from t=10 s", "interval": "1s", "input_series": HEALTHY + engine(DECODE) + [
            s("deployctl_known_error_lines", {"deployment": "demo-pd", "host": "tb2", "container": "demo-pd-decode-0",
                                              "signature": "hccl_exec_timeout", "job": "deployctl-node-exporter",
                                              "instance": "tb1"}, f"0x{fails_at} 3x{N - fails_at}"),
            s("deployctl_known_error_lines", {"deployment": "demo-pd", "host": "tb2", "container": "demo-pd-decode-0",
                                              "signature": "npu_oom", "job": "deployctl-node-exporter",
                                              "instance": "tb1"}, f"1x{N}")],
         "alert_rule_test": firing(rules, "DeployctlHcclErrors", fails_at,
                                   {"deployment": "demo-pd", "host": "tb2", "container": "demo-pd-decode-0",
                                    "signature": "hccl_exec_timeout", "severity": severity["DeployctlHcclErrors"]})},
        {"name": "the log scan ran every minute, then stopped at 10 min", "interval": "1m",
         "input_series": [s("deployctl_known_error_scan_timestamp_seconds",
                            {"deployment": "demo-pd", "job": "deployctl-node-exporter", "instance": "tb1"},
                            f"0+60x{stale_from // 60} {stale_from}x30")],
         "alert_rule_test": quiet(["DeployctlLogScanStale"], (stale_from, stale_from + max_age - 60))
         + firing(rules, "DeployctlLogScanStale", stale_from + max_age + 1,
                  {"deployment": "demo-pd", "severity": severity["DeployctlLogScanStale"]})},
        {"name": "TTFT: 0.5 s every 10 s until 5 min, then 8 s (above the 5 s SLO)", "interval": "10s",
         "input_series": [s("vllm:time_to_first_token_seconds_bucket", {**DECODE, "le": le}, values)
                          for le, values in (("1.0", "0+1x30 30x90"), ("10.0", "0+1x120"), ("+Inf", "0+1x120"))],
         # the first slow request is scraped at 310 s; p99 over 5 min is above 5 s from then on
         "alert_rule_test": quiet(["DeployctlTtftSlo"], (200, 300))
         + firing(rules, "DeployctlTtftSlo", 310, {"deployment": "demo-pd", "role": "decode",
                                                   "severity": severity["DeployctlTtftSlo"]}, at_least=SLO_S)},
    ]


def expand(rules: dict, tests: list) -> list:
    """promtool compares annotations too: each rule's, expanded with the alert's labels."""
    for test in tests:
        for case in test["alert_rule_test"]:
            for alert in case["exp_alerts"]:
                alert["exp_annotations"] = {key: re.sub(r"\{\{ \$labels\.(\w+) \}\}",
                                                        lambda m: alert["exp_labels"][m.group(1)], value)
                                            for key, value in rules[case["alertname"]]["annotations"].items()}
    return tests


def test_every_alert_has_a_case_and_a_for_no_shorter_than_the_first_scrape_of_new_targets(pack):
    _, rules = pack
    assert set(rules) == set(EVERY)
    tested = {case["alertname"] for test in cases(rules) for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert tested == set(EVERY)
    assert all(hold_s(rules, name) >= FIRST_SCRAPE_S for name in EVERY)


def test_every_alert_fires_on_its_fault_not_before_its_for_and_none_when_healthy(prometheus_tools, pack, tmp_path):
    path, rules = pack
    unit = tmp_path / "test.yml"
    unit.write_text(yaml.safe_dump({"rule_files": [str(path)], "evaluation_interval": f"{SCRAPE_S}s",
                                    "tests": expand(rules, cases(rules))}, sort_keys=False))
    result = promtool("test", "rules", str(unit))
    assert result.returncode == 0, result.stdout + result.stderr
