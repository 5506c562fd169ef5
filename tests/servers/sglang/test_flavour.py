"""server sglang on GPU hosts (issue 43): the argv each instance runs, the field table, the refusals at their key and
line, the container, health, metrics and the stop policy, and the plan that `deployctl plan` prints."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from deployctl.plan.containers import container_for
from deployctl.plan.down import plan_down
from deployctl.plan.up import plan_up
from deployctl.servers import flavour_of
from deployctl.servers.fields import Flag, flag_rows
from deployctl.servers.metrics import VLLM_V1
from deployctl.servers.sglang import LAUNCH_SERVER, SglangGpu
from deployctl.spec.load import check_spec_text, load_spec, load_spec_text
from deployctl.ui import UI, render_plan
from tests.plan.hostfacts import deployed, running

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = ROOT / "playbooks" / "sglang-gpu-mixed.yaml"

BASE = textwrap.dedent("""\
    version: 1
    name: tiny-sglang
    platform: gpu
    server: sglang
    hosts:
      tb1: {address: 10.200.0.11}
    image: {name: 'lmsysorg/sglang:v0.5.23'}
    weights: {dest: /srv/models/tiny}
    model:
      served_name: tiny
      max_model_len: 2048
    topology:
      mode: mixed
      instances:
        - {host: tb1, devices: [0], port: 30000}
    """)
# Specs the SGLang parser oracle judges too (tests/oracle/test_sglang_parser.py): every row of the table, once.
TEST_SPECS = {
    "AWQ": BASE.replace("  max_model_len: 2048\n", "  max_model_len: 2048\n  max_num_seqs: 16\n"
                        "  max_num_batched_tokens: 4096\n  quantization: awq\n"
                        "  extra_args: [--mem-fraction-static, '0.7', --disable-cuda-graph]\n")
                   .replace("devices: [0], port: 30000}", "devices: [0, 1, 2, 3], port: 30000, "
                                                          "model: {max_num_seqs: 8, extra_args: [--random-seed, '7']}}"),
    "GPTQ": BASE.replace("  max_model_len: 2048\n", "  quantization: gptq\n"),
    # P/D behind the router: two prefills (one bootstrap port defaulted, one written), a TP-2 decode, nixl
    "PD": BASE.replace("  mode: mixed\n  instances:\n    - {host: tb1, devices: [0], port: 30000}\n",
                       "  mode: disaggregated\n  connector: nixl\n"
                       "  front: {kind: sglang-router, host: tb1, port: 8000, image: 'r:1'}\n"
                       "  prefill:\n    - {host: tb1, devices: [0], port: 30000}\n"
                       "    - {host: tb1, devices: [1], port: 30010, bootstrap_port: 8998}\n"
                       "  decode:\n    - {host: tb1, devices: [2, 3], port: 30020}\n"),
    # one server over two hosts (node 0 serves the API on tb1, node 1 on tb2 runs headless)
    "MULTINODE": BASE.replace("  tb1: {address: 10.200.0.11}\n", "  tb1: {address: 10.200.0.11}\n"
                              "  tb2: {address: 10.200.0.12}\n")
                     .replace("{host: tb1, devices: [0], port: 30000}", "{hosts: [tb1, tb2], devices: [0, 1], port: 30000}"),
}


def spec(text: str = BASE):
    return load_spec_text(text, environ={})


def errors_of(text: str) -> list[str]:
    _, errors, _ = check_spec_text(text, "s.yaml")
    return [p.render() for p in errors]


def test_the_playbook_renders_launch_server_with_sglangs_flags_in_table_order():
    s = load_spec(PLAYBOOK)
    first, second = (container_for(s, i).command for i in s.instances)
    assert first == LAUNCH_SERVER + (
        "--model-path", "/mnt/weights/qwen2-7b", "--served-model-name", "qwen2-7b", "--host", "0.0.0.0",
        "--port", "30000", "--tp-size", "2", "--context-length", "8192", "--max-running-requests", "128",
        "--chunked-prefill-size", "8192", "--enable-metrics", "--mem-fraction-static", "0.85")
    # the per-instance override, TP from its one GPU
    assert second[second.index("--tp-size") + 1] == "1"
    assert second[second.index("--max-running-requests") + 1] == "64"
    assert second[second.index("--port") + 1] == "30001"


def test_every_model_field_reaches_its_sglang_flag():
    s = spec(TEST_SPECS["AWQ"])
    argv = container_for(s, s.instances[0]).command
    flags = dict(zip(argv[3::1], argv[4::1]))
    assert {f: flags[f] for f in ("--context-length", "--max-running-requests", "--chunked-prefill-size",
                                  "--quantization", "--tp-size")} == {
        "--context-length": "2048", "--max-running-requests": "8", "--chunked-prefill-size": "4096",
        "--quantization": "awq", "--tp-size": "4"}
    # the model's extra args, then the instance's, verbatim and last
    assert argv[-5:] == ("--mem-fraction-static", "0.7", "--disable-cuda-graph", "--random-seed", "7")
    assert {row.field: row.flag for row in flag_rows(SglangGpu.table)}.items() >= {
        "max_model_len": "--context-length", "max_num_seqs": "--max-running-requests",
        "max_num_batched_tokens": "--chunked-prefill-size", "quantization": "--quantization",
        "served_name": "--served-model-name", "@tp": "--tp-size", "@model": "--model-path"}.items()


def test_unset_fields_render_no_flag():
    argv = container_for(spec(TEST_SPECS["GPTQ"]), spec(TEST_SPECS["GPTQ"]).instances[0]).command
    assert "--context-length" not in argv and "--max-running-requests" not in argv
    assert "--chunked-prefill-size" not in argv and argv[argv.index("--quantization") + 1] == "gptq"


@pytest.mark.parametrize("snippet,expected", [
    ("  kv_cache_dtype: int8\n  quantization_param_path: /srv/scales.json\n",
     ["s.yaml:12:19: model.kv_cache_dtype: kv_cache_dtype int8 is AscendCloud vLLM's: SGLang's --kv-cache-dtype "
      "takes auto, bf16 or an fp8/fp4 kind, never int8",
      "s.yaml:13:28: model.quantization_param_path: quantization_param_path goes with kv_cache_dtype int8, which "
      "SGLang does not take"]),
    ("  quantization: smoothquant\n",
     ["s.yaml:12:17: model.quantization: quantization 'smoothquant' is AscendCloud vLLM's; SGLang's --quantization "
      "has no such method (awq and gptq are among its choices)"]),
    ("  extra_args: [--dp-size, '2']\n",
     ["s.yaml:12:15: model.extra_args: extra_args asks for SGLang's data parallelism (--dp-size): an instance's "
      "devices are its TP size, so SGLang would want dp x tp GPUs; deployctl renders no --dp-size yet"]),
])
def test_what_sglang_would_refuse_is_refused_at_its_key_and_line(snippet, expected):
    assert errors_of(BASE.replace("  max_model_len: 2048\n", "  max_model_len: 2048\n" + snippet)) == expected


@pytest.mark.parametrize("words", [["--port=9"], ["--tensor-parallel-size", "2"], ["--enable-metrics"]])
def test_extra_args_may_not_repeat_a_flag_the_table_renders(words):
    text = BASE.replace("port: 30000}", f"port: 30000, model: {{extra_args: {json.dumps(words)}}}}}")
    [error] = errors_of(text)
    assert error.startswith("s.yaml:15:66: topology.instances[0].model.extra_args: extra_args repeats a flag "
                            "deployctl renders from the spec for server sglang")


def test_vllm_spellings_in_extra_args_are_refused_naming_sglangs():
    [error] = errors_of(BASE.replace("  max_model_len: 2048\n", "  extra_args: [--gpu-memory-utilization, '0.8']\n"))
    assert error.startswith("s.yaml:11:15: model.extra_args: extra_args holds vLLM flags that SGLang's parser refuses")
    assert "--gpu-memory-utilization -> --mem-fraction-static" in error


@pytest.mark.parametrize("change,expected", [
    (("  mode: mixed\n", "  mode: mixed\n  front: {kind: vllm-router, host: tb1, port: 8000, image: 'r:1'}\n"),
     "s.yaml:14:17: topology.front.kind: server sglang is fronted by SGLang's own router (kind sglang-router), "
     "not kind vllm-router: vllm-router and the proxy are run before vLLM servers only"),
    (("topology:", "cache: {compile: true}\ntopology:"),
     "s.yaml:12:18: cache.compile: deployctl knows no compile cache of SGLang's (no start-up profile names where "
     "its caches live)"),
])
def test_what_the_flavour_cannot_do_yet_is_refused_at_the_key_that_asks(change, expected):
    assert expected in errors_of(BASE.replace(*change))


def test_container_is_the_gpu_shape_with_shm_and_the_weights():
    s = spec(TEST_SPECS["AWQ"].replace("topology:", "container: {shm_size: 32g}\ntopology:"))
    container = container_for(s, s.instances[0])
    assert container.gpus == '"device=0,1,2,3"' and container.devices == ()
    assert container.shm_size == "32g"
    assert [(m.source, m.target) for m in container.mounts] == [("/srv/models/tiny", "/srv/models/tiny")]
    assert "VLLM_ENGINE_READY_TIMEOUT_S" not in {e.name for e in container.env}  # vLLM's, not SGLang's


def test_health_metrics_and_start_up_are_sglangs():
    s = spec()
    flavour = flavour_of(s)
    assert flavour.health_path() == "/health"
    assert flavour.metrics_endpoint(s.instances[0]) == (30000, "/metrics")
    assert flavour.metrics.running == "sglang:num_running_reqs"
    names = [getattr(flavour.metrics, f) for f in ("ttft", "tpot", "e2e", "running", "waiting", "kv_usage",
                                                   "generation_tokens", "prompt_tokens")]
    assert all(n.startswith("sglang:") for n in names) and set(names).isdisjoint(vars(VLLM_V1).values())
    assert flavour.startup(s) is None  # no vLLM log lines for SGLang's ledger


def test_plan_starts_each_server_with_its_exact_argv_and_waits_on_health(capsys):
    s = load_spec(PLAYBOOK)
    plan = plan_up(s, {"gpu1": deployed((), "sha256:img")})
    starts = [step for step in plan.steps if step.stage == "workers"]
    assert [(st.health.port, st.health.path) for st in starts] == [(30000, "/health"), (30001, "/health")]
    argv = container_for(s, s.instances[0]).command
    [run] = [c for c in starts[0].commands if c.argv[:2] == ("docker", "run")]
    # the image's entrypoint is replaced by the command's first word; the rest follows the image
    entry = run.argv.index("--entrypoint")
    assert run.argv[entry + 1] == argv[0] and run.argv[-len(argv) + 1:] == argv[1:]
    assert run.argv[-len(argv)] == "lmsysorg/sglang:v0.5.23"
    assert ("--shm-size", "32g") == run.argv[run.argv.index("--shm-size"):run.argv.index("--shm-size") + 2]
    render_plan(UI(output="json"), plan)
    shown = [entry["argv"] for entry in json.loads(capsys.readouterr().out)["steps"]
             if entry["argv"][:2] == ["docker", "run"]]
    assert [w[-len(argv) + 1:] for w in shown] == [list(container_for(s, i).command[1:]) for i in s.instances]


def test_down_stops_each_server_with_the_one_stop_policy():
    """SGLang drains on SIGTERM with no limit of its own (tokenizer_manager.py sigterm_watchdog): docker's
    --time is the bound, the default grace or the user's longer --shutdown-timeout."""
    s = spec()
    facts = running(s)
    plan = plan_down(s, {"tb1": facts["tb1"]})
    stops = [c.argv for step in plan.steps for c in step.commands if c.argv[:2] == ("docker", "stop")]
    assert stops == [("docker", "stop", "--time", "30", "tiny-sglang-mixed-0")]
    plan = plan_down(s, {"tb1": facts["tb1"]}, shutdown_timeout=120)
    assert [c.argv for step in plan.steps for c in step.commands if c.argv[:2] == ("docker", "stop")] == [
        ("docker", "stop", "--time", "120", "tiny-sglang-mixed-0")]


# -- P/D behind sglang-router ------------------------------------------------------------------------------------
def test_pd_servers_render_their_role_bootstrap_port_and_transfer_backend():
    s = spec(TEST_SPECS["PD"])
    flavour = flavour_of(s)
    tails = {i.name: flavour.command(s, i)[-6:] for i in s.instances if i.role in ("prefill", "decode")}
    assert tails == {
        "tiny-sglang-prefill-0": ("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "30001",
                                  "--disaggregation-transfer-backend", "nixl"),
        "tiny-sglang-prefill-1": ("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "8998",
                                  "--disaggregation-transfer-backend", "nixl"),
        "tiny-sglang-decode-0": ("--tp-size", "2", "--context-length", "2048", "--enable-metrics",
                                 "--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl")[-6:],
    }
    assert [i.bootstrap_port for i in s.instances] == [30001, 8998, None, None]
    assert ("bootstrap_port", 30001) in s.instances[0].own_ports
    # SGLang's own default backend where the spec names none
    default = spec(TEST_SPECS["PD"].replace("  connector: nixl\n", ""))
    assert flavour.command(default, default.instances[2])[-2:] == ("--disaggregation-transfer-backend", "mooncake")


def test_the_router_runs_its_pd_mode_with_each_prefills_bootstrap_port_and_puts_servers_back_by_type():
    from deployctl.fronts.base import backends
    from deployctl.fronts.registry import FRONTS
    from deployctl.plan.answers import answer_paths

    s = spec(TEST_SPECS["PD"])
    kind = FRONTS["sglang-router"]
    address = {"tb1": "10.200.0.11"}
    container = kind.container(s, s.front, address)
    assert container.command[container.command.index("--pd-disaggregation"):] == (
        "--pd-disaggregation", "--prefill", "http://10.200.0.11:30000", "30001", "--prefill",
        "http://10.200.0.11:30010", "8998", "--decode", "http://10.200.0.11:30020")
    # its lists are not its identity: a server added or moved is put to the running router, the mode is
    assert container.identity_command[-1] == "--pd-disaggregation"
    bodies = [json.loads(c.argv[-1]) for c in kind.change_commands(8000, backends(s, address), "add")]
    assert bodies == [{"url": "http://10.200.0.11:30000", "worker_type": "prefill", "bootstrap_port": 30001},
                      {"url": "http://10.200.0.11:30010", "worker_type": "prefill", "bootstrap_port": 8998},
                      {"url": "http://10.200.0.11:30020", "worker_type": "decode"}]
    assert kind.parse_roles(json.dumps({"workers": [
        {"id": "a", "url": "http://10.200.0.11:30020", "worker_type": "decode", "is_healthy": True},
        {"id": "b", "url": "http://10.200.0.11:30000", "worker_type": "prefill", "bootstrap_port": 30001}]})) == {
        "10.200.0.11:30020": "decode", "10.200.0.11:30000": "prefill"}
    # the answer check: each pair as the router asks it (the decode answers, with the prefill's bootstrap), then
    # the router
    paths = answer_paths(s, "tb1", address, 8)
    assert [(p.name, p.url, p.prefill_url, p.bootstrap) for p in paths] == [
        ("tiny-sglang-prefill-0 -> tiny-sglang-decode-0", "http://127.0.0.1:30020/v1/completions",
         "http://127.0.0.1:30000/v1/completions", "10.200.0.11:30001"),
        ("tiny-sglang-prefill-1 -> tiny-sglang-decode-0", "http://127.0.0.1:30020/v1/completions",
         "http://127.0.0.1:30010/v1/completions", "10.200.0.11:8998"),
        ("tiny-sglang-router", "http://127.0.0.1:8000/v1/completions", "", "")]


def test_status_and_watch_ask_sglangs_own_one_token_generate():
    s = spec(TEST_SPECS["PD"])
    assert flavour_of(s).liveness_request(s) == ("/health_generate", b"")


@pytest.mark.parametrize("change,expected", [
    (("  front: {kind: sglang-router, host: tb1, port: 8000, image: 'r:1'}\n", ""),
     "s.yaml:13:3: topology: server sglang's P/D servers answer only requests that carry a bootstrap room, which "
     "SGLang's router adds (its --pd-disaggregation mode): mode disaggregated needs topology.front"),
    (("connector: nixl", "connector: ascend"),
     "s.yaml:14:14: topology.connector: connector ascend moves the KV cache between Ascend NPUs (SGLang's "
     "disaggregation/ascend/); platform gpu has none"),
    (("bootstrap_port: 8998", "bootstrap_port: 30020"),
     "s.yaml:20:42: topology.decode[0].port: port 30020 on host tb1 is already used by "
     "topology.prefill[1].bootstrap_port (line 18)"),
    (("connector: nixl", "connector: fake"), "s.yaml:14:14: topology.connector: 'fake' is not one of mooncake, "),
])
def test_what_a_pd_spec_gets_wrong_is_refused_at_its_key(change, expected):
    found = errors_of(TEST_SPECS["PD"].replace(*change))
    assert [e for e in found if e.startswith(expected)], found


def test_a_bootstrap_port_where_no_prefill_listens_and_a_connector_without_pd_are_warned():
    _, errors, warnings = check_spec_text(TEST_SPECS["PD"].replace("port: 30020}", "port: 30020, bootstrap_port: 9}"),
                                          "s.yaml")
    assert errors == [] and "topology.decode[0].bootstrap_port: bootstrap_port is ignored unless it is a prefill " \
                            "instance of server sglang" in [w.render().split(": ", 1)[1] for w in warnings]
    _, errors, warnings = check_spec_text(BASE.replace("  mode: mixed\n", "  mode: mixed\n  connector: nixl\n"),
                                          "s.yaml")
    assert errors == [] and [w.render() for w in warnings] == [
        "s.yaml:14:14: topology.connector: topology.connector is the P/D transfer backend: mode mixed renders none"]
