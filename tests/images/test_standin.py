"""The stand-in inference server, run as the real command lines would run it, on 127.0.0.1 free ports."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.ports import free_port

STANDIN = Path(__file__).resolve().parents[2] / "images" / "standin"
START_SERVERS = STANDIN / "AscendCloud-LLM" / "llm_tools" / "PD_separate" / "start_servers.sh"
MIXED = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")
PD = ("sh", str(START_SERVERS))
REFUSING = "standin: refusing to start: "
LATE_MS = 1500  # how late a token or answer may be on a loaded machine before its schedule counts as not followed


def vllm_args(weights, port, tp=2, name="llama2-13b", *extra):
    return ["--model", str(weights), f"--tensor-parallel-size={tp}", "--max-model-len", "4096",
            "--max-num-seqs", "256", "--max-num-batched-tokens=4096", "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", name, *extra]


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def json(self, method, path, body=None, headers=None):
        status, data = self.request(method, path, body, headers)
        return status, json.loads(data)

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def launch(tmp_path):
    """Start a stand-in process; wait until it accepts connections; stop it at the end."""
    started = []

    def _launch(command, args, env, port, wait=True):
        log = tmp_path / f"server-{port}.log"
        full_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(STANDIN), "PYTHONDONTWRITEBYTECODE": "1",
                    "STANDIN_PYTHON": sys.executable, "STANDIN_STARTUP_S": "0", **env}
        with open(log, "w") as out:
            proc = subprocess.Popen([*command, *args], env=full_env, stdout=out, stderr=subprocess.STDOUT)
        server = Server(proc, port, log)
        started.append(server)
        deadline = time.monotonic() + 10
        while wait:
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}:\n{server.output()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, server.output()
                time.sleep(0.02)
        return server

    yield _launch
    for server in started:
        if server.proc.poll() is None:
            server.proc.terminate()
            server.proc.wait(timeout=5)


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "weights"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                  "max_position_embeddings": 4096}))
    return path


def dev_dir(tmp_path, ids, name="dev"):
    path = tmp_path / name
    path.mkdir()
    for extra in ("davinci_manager", "devmm_svm", "hisi_hdc"):
        (path / extra).touch()
    for i in ids:
        (path / f"davinci{i}").touch()
    return path


def sse_events(data: bytes):
    events = [e for e in data.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    return [e[len("data: "):] for e in events]


# --- mixed ---------------------------------------------------------------------------------------------

@pytest.fixture
def mixed(launch, weights, tmp_path):
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0, 1])), "SECRET_TOKEN": "hunter2-do-not-show"}
    return launch(MIXED, vllm_args(weights, port, 2, "llama2-13b", "--enforce-eager", "--block-size", "128"),
                  env, port)


def test_mixed_completion_is_deterministic_with_usage(mixed):
    body = {"model": "llama2-13b", "prompt": "hello world there", "max_tokens": 5, "temperature": 0}
    status, answer = mixed.json("POST", "/v1/completions", body, {"X-Request-Id": "req-1"})
    assert status == 200
    assert answer["id"] == "cmpl-req-1" and answer["object"] == "text_completion"
    assert answer["model"] == "llama2-13b"
    assert answer["choices"] == [{"index": 0, "text": " fire sierra apple blue golf", "logprobs": None,
                                  "finish_reason": "length", "stop_reason": None}]
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert mixed.json("POST", "/v1/completions", body)[1]["choices"][0]["text"] == " fire sierra apple blue golf"
    other = mixed.json("POST", "/v1/completions", {**body, "prompt": "something else entirely"})[1]
    assert other["choices"][0]["text"] != " fire sierra apple blue golf"
    assert other["usage"]["prompt_tokens"] == 3


def test_mixed_chat_stream_has_role_chunk_content_chunks_usage_and_done(mixed):
    body = {"model": "llama2-13b", "messages": [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": "hi you there"}],
            "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    status, data = mixed.request("POST", "/v1/chat/completions", body, {"X-Request-Id": "chat-1"})
    assert status == 200
    events = sse_events(data)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["id"] for c in chunks] == ["chatcmpl-chat-1"] * 6
    assert chunks[0]["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                     "finish_reason": None}]
    content = [c["choices"][0] for c in chunks[1:5]]
    assert [list(c["delta"]) for c in content] == [["content"]] * 4
    assert [c["finish_reason"] for c in content] == [None, None, None, "length"]
    assert chunks[5]["choices"] == []
    assert chunks[5]["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    status, whole = mixed.json("POST", "/v1/chat/completions", {**body, "stream": False})
    assert status == 200
    assert whole["choices"][0]["message"]["content"] == "".join(c["delta"]["content"] for c in content)
    assert whole["choices"][0]["message"]["role"] == "assistant"
    assert whole["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}


def test_mixed_completion_stream_without_usage_option(mixed):
    body = {"model": "llama2-13b", "prompt": "one two", "max_tokens": 3, "stream": True, "ignore_eos": True}
    status, data = mixed.request("POST", "/v1/completions", body)
    events = sse_events(data)
    assert status == 200 and len(events) == 4 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in c and c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == mixed.json("POST", "/v1/completions", {**body, "stream": False})[1]["choices"][0]["text"]


def test_mixed_wrong_model_and_too_long_are_vllm_errors(mixed):
    status, answer = mixed.json("POST", "/v1/completions", {"model": "gpt-4", "prompt": "x", "max_tokens": 2})
    assert status == 404
    assert answer == {"object": "error", "message": "The model `gpt-4` does not exist.", "type": "NotFoundError",
                      "param": None, "code": 404}
    status, answer = mixed.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "a b", "max_tokens": 4095})
    assert status == 400 and answer["type"] == "BadRequestError"
    assert answer["message"].startswith("This model's maximum context length is 4096 tokens. However, you requested "
                                        "4097 tokens (2 in the messages, 4095 in the completion).")
    assert mixed.request("GET", "/nope") == (404, b'{"detail":"Not Found"}')
    assert mixed.request("GET", "/v1/completions") == (405, b'{"detail":"Method Not Allowed"}')


def test_mixed_health_models_info(mixed, weights):
    assert mixed.request("GET", "/health") == (200, b"")
    status, models = mixed.json("GET", "/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["llama2-13b"]
    status, raw = mixed.request("GET", "/standin/info")
    assert b"hunter2" not in raw
    info = json.loads(raw)
    assert (info["role"], info["port"], info["tp"], info["served_model_name"], info["model"]) == (
        "mixed", mixed.port, 2, "llama2-13b", str(weights))
    assert info["node_ports"] is None and info["ranktable_checks_passed"] == []
    assert info["devices_seen"] == [0, 1]
    # LC_CTYPE: Python itself adds it when no locale is set (PEP 538 locale coercion).
    assert [n for n in info["env_names"] if n != "LC_CTYPE"] == ["PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "SECRET_TOKEN", "STANDIN_DEV_DIR",
                                 "STANDIN_PYTHON", "STANDIN_STARTUP_S"]
    assert info["ignored_args"] == ["--enforce-eager", "--block-size 128"]
    assert info["argv"][:3] == ["--model", str(weights), "--tensor-parallel-size=2"]
    log = mixed.output()
    assert "standin: ignoring unknown vLLM argument --block-size 128\n" in log
    assert "standin: loading weights 4/4\n" in log and "standin: startup complete" in log


def test_ttft_and_tpot_follow_absolute_deadlines_in_the_trace(launch, weights, tmp_path):
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0])), "STANDIN_TTFT_MS": "150", "STANDIN_TPOT_MS": "25"}
    server = launch(MIXED, vllm_args(weights, port, 1), env, port)
    body = {"model": "llama2-13b", "prompt": "time me", "max_tokens": 6, "stream": True, "ignore_eos": True}
    server.request("POST", "/v1/completions", body, {"X-Request-Id": "timed"})
    server.request("POST", "/v1/completions", {**body, "stream": False}, {"X-Request-Id": "whole"})
    status, records = server.json("GET", "/standin/trace")
    assert status == 200 and [r["id"] for r in records] == ["timed", "whole"]
    timed, whole = records
    offsets_ms = [(t - timed["arrival_ns"]) / 1e6 for t in timed["chunk_ns"]]
    assert timed["first_chunk_ns"] == timed["chunk_ns"][0] and len(offsets_ms) == 6
    # Never early (the deadlines hold); how late is the machine's scheduling, so the upper bound only catches
    # a schedule that is not followed at all (a busy 2-core machine delays a wake-up by tens of ms, LATE_MS is
    # far beyond that).
    for i, offset in enumerate(offsets_ms):
        assert 150 + 25 * i - 0.5 <= offset < 150 + 25 * i + LATE_MS, offsets_ms
    assert timed["end_ns"] >= timed["chunk_ns"][-1]
    assert (timed["status"], timed["stream"], timed["completion_tokens"]) == (200, True, 6)
    whole_ms = (whole["first_chunk_ns"] - whole["arrival_ns"]) / 1e6
    assert 150 + 25 * 5 - 0.5 <= whole_ms < 150 + 25 * 5 + LATE_MS
    assert server.json("GET", "/standin/trace?id=whole")[1] == [whole]
    assert server.json("DELETE", "/standin/trace") == (200, {"cleared": 2})
    assert server.json("GET", "/standin/trace") == (200, [])


def test_never_ready_listens_but_health_is_503(launch, weights, tmp_path):
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0, 1])), "STANDIN_NEVER_READY": "1"}
    server = launch(MIXED, vllm_args(weights, port), env, port)
    assert server.request("GET", "/health") == (503, b"")
    status, answer = server.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "x"})
    assert status == 503 and answer["type"] == "ServiceUnavailableError"


def test_crash_after_exits_1_with_a_log_line(launch, weights, tmp_path):
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0, 1])), "STANDIN_CRASH_AFTER_S": "0.3"}
    server = launch(MIXED, vllm_args(weights, port), env, port)
    assert server.proc.wait(timeout=5) == 1
    assert server.output().splitlines()[-1] == "standin: crashing on purpose after 0.3 s (STANDIN_CRASH_AFTER_S)"


def test_fail_hccl_timeout_prints_canns_ei0002_and_exits_1_without_listening(launch, weights, tmp_path):
    from deployctl.diagnose.signatures import Text, match

    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0, 1])), "STANDIN_FAIL_HCCL_TIMEOUT": "1"}
    server = launch(MIXED, vllm_args(weights, port), env, port, wait=False)
    assert server.proc.wait(timeout=5) == 1
    output = server.output()
    assert "loading weights 4/4" in output and "startup complete" not in output
    assert any(line.startswith("EI0002: [PID: ") and "Notify register times out" in line for line in output.splitlines())
    assert output.splitlines()[-1] == "standin: exiting with status 1 (STANDIN_FAIL_HCCL_TIMEOUT)"
    assert [h.id for h in match([Text("h", "stdout.log", "log", output)])] == ["hccl_exec_timeout"]


def test_sigterm_stops_it_cleanly(mixed):
    mixed.proc.send_signal(signal.SIGTERM)
    assert mixed.proc.wait(timeout=5) == 0
    assert mixed.output().splitlines()[-1] == "standin: shutting down"


# --- refusals ------------------------------------------------------------------------------------------

def refusal(command, args, env) -> str:
    """Run a server that must not start; return its one refusal line."""
    full_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(STANDIN), "PYTHONDONTWRITEBYTECODE": "1",
                "STANDIN_PYTHON": sys.executable, "STANDIN_STARTUP_S": "0", **env}
    done = subprocess.run([*command, *args], env=full_env, capture_output=True, text=True, timeout=10)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == ""
    lines = [line for line in done.stdout.splitlines() if line.startswith(REFUSING)]
    assert len(lines) == 1, done.stdout
    return lines[0][len(REFUSING):]


def test_refuses_weights_without_config_json(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    reason = refusal(MIXED, vllm_args(empty, free_port()), {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0, 1]))})
    assert reason == f"--model {empty}: no config.json (not a Hugging Face weights directory)"


def test_refuses_wrong_device_count(tmp_path, weights):
    reason = refusal(MIXED, vllm_args(weights, free_port(), tp=2), {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [3]))})
    assert reason == "--tensor-parallel-size 2 but 1 NPU device(s) visible (davinci3)"


# --- disaggregated: ranktables written like the vendor tool, with 127.0.0.1 as the host -------------------

def entry(devices, first_ip):
    return {"server_id": "127.0.0.1", "server_ip": "127.0.0.1",
            "device": [{"device_id": str(d), "device_ip": f"10.200.0.{first_ip + i}", "rank_id": str(i)}
                       for i, d in enumerate(devices)]}


def write_ranktables(tmp_path, prefill=(4, 5), decode=(6, 7)):
    host = {"server_id": "127.0.0.1", "server_ip": "127.0.0.1"}
    groups = [("0", [host]), ("1", [entry(prefill, 14)]), ("2", [entry(decode, 16)])]
    global_doc = {"version": "1.0", "status": "completed", "server_group_list": [
        {"group_id": gid, "server_count": str(len(servers)), "server_list": servers} for gid, servers in groups]}
    paths = {"global": tmp_path / "global_ranktable_127.0.0.1.json"}
    paths["global"].write_text(json.dumps(global_doc, indent=4))
    for name, server in (("prefill", groups[1][1][0]), ("decode", groups[2][1][0]), ("host", host)):
        suffix = "host" if name == "host" else "".join(map(str, prefill if name == "prefill" else decode))
        paths[name] = tmp_path / f"local_ranktable_127.0.0.1_{suffix}.json"
        paths[name].write_text(json.dumps({"version": "1.0", "status": "completed", "group_id": "0",
                                           "server_count": "1", "server_list": [server]}, indent=4))
    return paths


def pd_env(paths, local, node_ports, devices=None):
    env = {"GLOBAL_RANK_TABLE_FILE_PATH": str(paths["global"]), "RANK_TABLE_FILE_PATH": str(paths[local]),
           "NODE_PORTS": ",".join(map(str, node_ports)), "USE_OPENAI": "1"}
    if devices is not None:
        env["STANDIN_DEV_DIR"] = str(devices)
    return env


def test_refuses_local_not_matching_global(tmp_path, weights):
    paths = write_ranktables(tmp_path)
    doc = json.loads(paths["prefill"].read_text())
    doc["server_list"][0]["device"][1]["device_ip"] = "10.200.0.99"  # hand-edited after generation
    paths["prefill"].write_text(json.dumps(doc))
    reason = refusal(PD, vllm_args(weights, 8088), pd_env(paths, "prefill", [8088, 8089], dev_dir(tmp_path, [4, 5])))
    assert reason == ("local ranktable entry does not equal any entry of the global ranktable "
                      "(server_ip '127.0.0.1', devices ['4', '5'])")


def test_refuses_node_ports_in_the_wrong_order(tmp_path, weights):
    paths = write_ranktables(tmp_path)
    reason = refusal(PD, vllm_args(weights, 8088), pd_env(paths, "prefill", [8089, 8088], dev_dir(tmp_path, [4, 5])))
    assert reason == ("NODE_PORTS position 0 is 8089 but this prefill instance (global ranktable entry 0) listens on "
                      "--port 8088: NODE_PORTS must list prefill then decode ports in global ranktable order")


def test_refuses_node_ports_count_tp_and_use_openai_together(tmp_path, weights):
    paths = write_ranktables(tmp_path)
    env = {**pd_env(paths, "decode", [8088], dev_dir(tmp_path, [6, 7])), "USE_OPENAI": "0"}
    reason = refusal(PD, vllm_args(weights, 8089, tp=4), env)
    assert reason == ("USE_OPENAI is '0', expected '1'; ranktable TP is 2 but --tensor-parallel-size is 4; "
                      "NODE_PORTS has 1 ports but the global ranktable has 2 prefill + decode instances")


def test_refuses_missing_or_broken_ranktable(tmp_path, weights):
    paths = write_ranktables(tmp_path)
    devices = dev_dir(tmp_path, [4, 5])
    env = {**pd_env(paths, "prefill", [8088, 8089], devices), "RANK_TABLE_FILE_PATH": str(tmp_path / "nope.json")}
    assert refusal(PD, vllm_args(weights, 8088), env) == (
        f"RANK_TABLE_FILE_PATH={tmp_path / 'nope.json'}: cannot read: No such file or directory")
    env = pd_env(paths, "prefill", [8088, 8089], devices)
    del env["GLOBAL_RANK_TABLE_FILE_PATH"]
    assert refusal(PD, vllm_args(weights, 8088), env) == "GLOBAL_RANK_TABLE_FILE_PATH is not set"
    partial = json.loads(paths["global"].read_text())
    del partial["server_group_list"][2]  # a per-host file before merge
    paths["global"].write_text(json.dumps(partial))
    assert refusal(PD, vllm_args(weights, 8088), pd_env(paths, "prefill", [8088, 8089], devices)) == (
        "global ranktable is not complete: group_ids ['0', '1'], expected ['0', '1', '2']")


def test_refuses_devices_other_than_the_ranktables(tmp_path, weights):
    paths = write_ranktables(tmp_path)
    reason = refusal(PD, vllm_args(weights, 8088), pd_env(paths, "prefill", [8088, 8089], dev_dir(tmp_path, [0, 1])))
    assert reason == "the ranktable gives this prefill instance devices ['4', '5'] but the visible devices are ['0', '1']"


def test_prefill_decode_scheduler_on_one_machine(launch, weights, tmp_path):
    paths = write_ranktables(tmp_path)
    p_port, d_port, s_port = free_port(), free_port(), free_port()
    ports = [p_port, d_port]
    scheduler = launch(PD, vllm_args(weights, s_port), pd_env(paths, "host", ports), s_port)
    assert scheduler.request("GET", "/health") == (503, b"")  # its backends are not up yet
    prefill = launch(PD, vllm_args(weights, p_port),
                     {**pd_env(paths, "prefill", ports, dev_dir(tmp_path, [4, 5], "dev-p")), "STANDIN_TTFT_MS": "30"},
                     p_port)
    decode = launch(PD, vllm_args(weights, d_port), pd_env(paths, "decode", ports, dev_dir(tmp_path, [6, 7], "dev-d")),
                    d_port)
    assert scheduler.request("GET", "/health") == (200, b"")

    body = {"model": "llama2-13b", "messages": [{"role": "user", "content": "route me please"}], "max_tokens": 3,
            "stream": True, "stream_options": {"include_usage": True}}
    status, data = scheduler.request("POST", "/v1/chat/completions", body, {"X-Request-Id": "pd-1"})
    assert status == 200
    via_scheduler = sse_events(data)
    assert via_scheduler == sse_events(decode.request("POST", "/v1/chat/completions", body,
                                                      {"X-Request-Id": "pd-1"})[1])
    assert json.loads(via_scheduler[-2])["usage"]["completion_tokens"] == 3

    [prefilled] = prefill.json("GET", "/standin/trace")[1]
    assert (prefilled["id"], prefilled["stream"], prefilled["completion_tokens"]) == ("pd-1", False, 1)
    assert scheduler.request("GET", "/metrics")[0] == 404  # it relays: vLLM's metrics live on the instances
    status, metrics = prefill.request("GET", "/metrics")
    labels = 'model_name="llama2-13b",engine="0"'
    assert status == 200 and f"vllm:prompt_tokens_total{{{labels}}} 3.0\n" in metrics.decode()
    assert f'vllm:request_success_total{{{labels},finished_reason="length"}} 1.0\n' in metrics.decode()
    assert f"vllm:generation_tokens_total{{{labels}}} 1.0\n" in metrics.decode()  # the prefill's one token
    decoded = decode.json("GET", "/standin/trace?id=pd-1")[1]
    assert [(r["stream"], r["completion_tokens"]) for r in decoded] == [(True, 3), (True, 3)]
    [routed] = scheduler.json("GET", "/standin/trace")[1]
    assert routed["backends"] == [f"127.0.0.1:{p_port}", f"127.0.0.1:{d_port}"]
    assert len(routed["chunk_ns"]) == 3  # content chunks only: not the role, usage or [DONE] chunks
    assert (routed["first_chunk_ns"] - routed["arrival_ns"]) / 1e6 >= 30  # prefill's TTFT comes first

    status, answer = scheduler.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "a b c",
                                                                "max_tokens": 2})
    assert status == 200 and answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert scheduler.json("POST", "/v1/completions", {"model": "nope", "prompt": "x"})[0] == 404

    infos = {s: s.json("GET", "/standin/info")[1] for s in (prefill, decode, scheduler)}
    assert [infos[s]["role"] for s in (prefill, decode, scheduler)] == ["prefill", "decode", "scheduler"]
    assert infos[scheduler]["node_ports"] == ports and infos[scheduler]["devices_seen"] == []
    assert infos[prefill]["ranktable_checks_passed"] == ["use_openai", "global_complete", "tp",
                                                        "local_matches_global", "node_ports_count",
                                                        "node_ports_position"]
    assert f"standin: forward pd-1 /v1/chat/completions prefill=127.0.0.1:{p_port} decode=127.0.0.1:{d_port}" \
           in scheduler.output()
    decode.proc.terminate()
    decode.proc.wait(timeout=5)
    assert scheduler.request("GET", "/health") == (503, b"")


def test_eos_after_stops_early_unless_ignore_eos(launch, weights, tmp_path):
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0, 1])), "STANDIN_EOS_AFTER": "2"}
    server = launch(MIXED, vllm_args(weights, port), env, port)
    body = {"model": "llama2-13b", "prompt": "a b c", "max_tokens": 5}
    stopped = server.json("POST", "/v1/completions", body)[1]
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    full = server.json("POST", "/v1/completions", {**body, "ignore_eos": True})[1]
    assert full["choices"][0]["finish_reason"] == "length" and full["usage"]["completion_tokens"] == 5
    assert full["choices"][0]["text"].startswith(stopped["choices"][0]["text"])


def test_scheduler_answers_502_when_prefill_is_down(launch, weights, tmp_path):
    paths = write_ranktables(tmp_path)
    ports = [free_port(), free_port()]
    s_port = free_port()
    scheduler = launch(PD, vllm_args(weights, s_port), pd_env(paths, "host", ports), s_port)
    status, answer = scheduler.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "x"},
                                    {"X-Request-Id": "lost"})
    assert status == 502 and answer["type"] == "BadGatewayError"
    assert answer["message"].startswith(f"prefill instance 127.0.0.1:{ports[0]} failed: ")
    assert [(r["id"], r["status"]) for r in scheduler.json("GET", "/standin/trace")[1]] == [("lost", 502)]
