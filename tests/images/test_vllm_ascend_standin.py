"""The stand-in as upstream vLLM + vllm-ascend (`vllm serve`, DP groups, the Mooncake connector's config and ports)
and vllm-ascend's P/D proxy, run as deployctl runs them, on 127.0.0.1 with the loopback NIC `lo`."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests import ports
from tests.ports import free_port, free_ports

STANDIN = Path(__file__).resolve().parents[2] / "images" / "standin"
VLLM = (str(STANDIN / "bin" / "vllm"), "serve")
PROXY = (sys.executable, str(STANDIN / "vllm-ascend" / "examples" / "disaggregated_prefill_v1"
                             / "load_balance_proxy_server_example.py"))
REFUSING = "standin: refusing to start: "
NET = {"HCCL_IF_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo", "TP_SOCKET_IFNAME": "lo", "HCCL_SOCKET_IFNAME": "lo"}
EVENT_TIMEOUT_S = 20


# The stand-in's emulated hosts have at most 8 NPUs here (davinci0-7, one card in hccn.conf): Mooncake's own port
# range is then [20000, 28000), which a kv port must stay out of (see test_kv_port_in_mooncakes_range_refused).
MOONCAKE_TOP_8 = 28000


def free_run(count: int) -> int:
    """A base port with `count` consecutive ports free (the connector binds a run), above Mooncake's own range."""
    return ports.free_run(count, floor=MOONCAKE_TOP_8)


class Proc:
    def __init__(self, proc: subprocess.Popen, log: Path, port) -> None:
        self.proc, self.log, self.port = proc, log, port

    def output(self) -> str:
        return self.log.read_text()

    def wait_line(self, text: str) -> str:
        """Wait until the log has `text` (the process exiting first fails the test)."""
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while text not in self.output():
            assert self.proc.poll() is None or text in self.output(), \
                f"exited {self.proc.returncode} before {text!r}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.output()}"
            time.sleep(0.02)
        return self.output()

    def wait_exit(self) -> str:
        self.proc.wait(timeout=EVENT_TIMEOUT_S)
        return self.output()

    def listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
            return True
        except OSError:
            return False

    def json(self, method, path, body=None):
        status, data = self.request(method, path, body)
        return status, json.loads(data)

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "weights"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    return path


@pytest.fixture
def start(tmp_path, weights):
    """start(args, devices, env=..., port=...) runs `vllm serve WEIGHTS args` (or, with command=, the proxy)."""
    procs = []

    def _start(args, devices=(), env=None, port=None, command=VLLM):
        dev = tmp_path / f"dev-{len(procs)}"
        dev.mkdir()
        for d in devices:
            (dev / f"davinci{d}").touch()
        hccn = tmp_path / "hccn.conf"  # HCCL's NIC table, as /etc/hccn.conf is mounted on a real host
        hccn.write_text("address_0=10.201.1.10\n")
        # as the image's own shell set-up leaves it (Mooncake's library directory on the path), and a /dev/shm as
        # large as the disk under tmp_path; ASCEND_RT_VISIBLE_DEVICES unset, as for a container that mounts
        # exactly its devices
        full_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(STANDIN), "PYTHONDONTWRITEBYTECODE": "1",
                    "STANDIN_PYTHON": sys.executable, "STANDIN_STARTUP_S": "0", "STANDIN_DEV_DIR": str(dev),
                    "STANDIN_HCCN_CONF": str(hccn), "STANDIN_SHM_DIR": str(tmp_path),
                    "LD_LIBRARY_PATH": "/usr/local/lib", **NET, **(env or {})}
        full_env = {k: v for k, v in full_env.items() if v is not None}
        log = tmp_path / f"proc-{len(procs)}.log"
        argv = [*command, *([str(weights)] if command == VLLM else []), *map(str, args)]
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, env=full_env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(Proc(proc, log, port))
        return procs[-1]

    yield _start
    for p in procs:
        if p.proc.poll() is None:
            p.proc.terminate()
            p.proc.wait(timeout=10)


def serve_args(port=None, tp=1, dp=1, rank=None, local=None, start_rank=None, rpc=None, kv=None, headless=False):
    args = ["--served-model-name", "qwen", "--host", "127.0.0.1", "--max-model-len", "4096",
            f"--tensor-parallel-size={tp}", "--data-parallel-size", dp]
    if rank is not None:
        args += ["--data-parallel-rank", rank]
    if local is not None:
        args += ["--data-parallel-size-local", local, "--data-parallel-start-rank", start_rank]
    if rpc is not None:
        args += ["--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", rpc]
    args += ["--enable-expert-parallel"]
    args += ["--headless"] if headless else ["--port", port]
    if kv is not None:
        args += ["--kv-transfer-config", json.dumps(kv, separators=(",", ":"))]
    return args


def kv_config(role, kv_port, engine, prefill=(2, 1), decode=(2, 1)):
    # as current vllm-ascend tutorials write it: no kv_connector_module_path (see test_kv_connector_module_path)
    return {"kv_connector": "MooncakeConnectorV1",
            "kv_role": role, "kv_port": str(kv_port), "engine_id": engine,
            "kv_connector_extra_config": {"prefill": {"dp_size": prefill[0], "tp_size": prefill[1]},
                                          "decode": {"dp_size": decode[0], "tp_size": decode[1]}}}


def refusal(proc: Proc) -> str:
    out = proc.wait_exit()
    assert proc.proc.returncode == 1, out
    lines = [line for line in out.splitlines() if line.startswith(REFUSING)]
    assert len(lines) == 1, out
    return lines[0][len(REFUSING):]


# --- DP groups -------------------------------------------------------------------------------------------

def test_external_dp_group_serves_only_after_every_rank_joined(start):
    api0, api1, rpc = free_ports(3)
    master = start(serve_args(api0, dp=2, rank=0, rpc=rpc), [0], port=api0)
    master.wait_line("dp group: master listening on 127.0.0.1:")
    master.wait_line("dp group: rank 0 joined")
    assert not master.listening()  # vLLM does not listen before its DP group is complete
    other = start(serve_args(api1, dp=2, rank=1, rpc=rpc), [1], port=api1)
    out = master.wait_line("standin: dp group ready: dp=2 tp=1 ranks=0..1")
    assert "dp group: rank 1 joined (registered: 127.0.0.1:%d ranks 1, devices [1])" % api1 in out
    master.wait_line(f"startup complete: serving on http://127.0.0.1:{api0}")
    other.wait_line(f"startup complete: serving on http://127.0.0.1:{api1}")
    assert master.request("GET", "/health") == (200, b"") and other.request("GET", "/health") == (200, b"")
    info0, info1 = master.json("GET", "/standin/info")[1], other.json("GET", "/standin/info")[1]
    assert (info0["role"], info0["dp"], info0["tp"], info0["dp_ranks"], info0["devices"]) == ("mixed", 2, 1, [0], [0])
    assert (info1["dp_ranks"], info1["devices"], info1["launch"], info1["expert_parallel"]) == (
        [1], [1], "external", True)
    assert (info1["hccl_if_ip"], info1["ifname"], info1["engine_id"]) == ("127.0.0.1", "lo", None)


def test_a_replaced_master_gets_its_group_back(start):
    api0, api1, rpc = free_ports(3)
    first = start(serve_args(api0, dp=2, rank=0, rpc=rpc), [0], port=api0)
    other = start(serve_args(api1, dp=2, rank=1, rpc=rpc), [1], port=api1)
    first.wait_line("dp group ready")
    other.wait_line("startup complete: serving on")
    first.proc.terminate()
    first.wait_exit()
    other.wait_line("dp group: lost the master at 127.0.0.1:%d; registering again" % rpc)
    second = start(serve_args(api0, dp=2, rank=0, rpc=rpc), [0], port=api0)
    second.wait_line("standin: dp group ready: dp=2 tp=1 ranks=0..1")
    second.wait_line("startup complete: serving on")
    assert other.request("GET", "/health") == (200, b"")  # it kept serving meanwhile


def test_duplicated_rank_stops_the_master_and_is_refused(start):
    api0, api1, api2, rpc = free_ports(4)
    master = start(serve_args(api0, dp=3, rank=0, rpc=rpc), [0], port=api0)
    start(serve_args(api1, dp=3, rank=1, rpc=rpc), [1], port=api1)
    master.wait_line("dp group: rank 1 joined")
    twice = start(serve_args(api2, dp=3, rank=1, rpc=rpc), [2], port=api2)
    assert "rank 1 registered twice" in refusal(twice)
    reason = refusal(master)
    assert reason.startswith("dp group: rank 1 registered twice: by 127.0.0.1:%d ranks 1 and by 127.0.0.1:%d"
                             % (api1, api2)), reason
    assert "dp group ready" not in master.output()


def test_missing_rank_never_becomes_ready(start):
    api0, api2, rpc = free_ports(3)
    master = start(serve_args(api0, dp=3, rank=0, rpc=rpc), [0], port=api0)
    last = start(serve_args(api2, dp=3, rank=2, rpc=rpc), [1], port=api2)
    out = master.wait_line("dp group: rank 2 joined")
    last.wait_line("dp group: registered ranks 2 with the master")
    # The ready line is written in the same step as the join that completes the group: it would be here now.
    assert "dp group ready" not in out and "dp group ready" not in last.output()
    assert not master.listening() and not last.listening()
    assert master.proc.poll() is None and last.proc.poll() is None


def test_internal_launch_overlapping_start_ranks_refused(start):
    api, rpc = free_ports(2)
    master = start(serve_args(api, dp=4, local=2, start_rank=0, rpc=rpc), [0, 1], port=api)
    master.wait_line("dp group: rank 1 joined")
    headless = start(serve_args(dp=4, local=2, start_rank=1, rpc=rpc, headless=True), [2, 3])
    assert "do not tile 0..3" in refusal(headless)
    reason = refusal(master)
    assert reason.startswith("dp group: start ranks and local sizes do not tile 0..3: 127.0.0.1 (headless) ranks "
                             "1..2 overlaps rank 1 of 127.0.0.1:%d ranks 0..1" % api), reason


def test_internal_launch_headless_completes_the_group(start):
    api, rpc = free_ports(2)
    master = start(serve_args(api, dp=4, local=2, start_rank=0, rpc=rpc), [0, 1], port=api)
    headless = start(serve_args(dp=4, local=2, start_rank=2, rpc=rpc, headless=True), [2, 3])
    master.wait_line("standin: dp group ready: dp=4 tp=1 ranks=0..3")
    master.wait_line("startup complete: serving on")
    headless.wait_line("startup complete: headless (serves no HTTP)")
    info = master.json("GET", "/standin/info")[1]
    assert (info["dp_ranks"], info["local_dp_ranks"], info["launch"], info["devices"]) == (
        [0, 1, 2, 3], [0, 1], "internal", [0, 1])


def test_start_rank_past_the_group_refused(start):
    proc = start(serve_args(free_port(), dp=4, local=2, start_rank=3, rpc=free_port()), [0, 1])
    assert refusal(proc) == ("--data-parallel-start-rank 3 with --data-parallel-size-local 2 goes past "
                             "--data-parallel-size 4")


def test_master_address_must_be_its_own(start):
    args = serve_args(free_port(), dp=2, rank=0, rpc=free_port())
    args[args.index("--data-parallel-address") + 1] = "203.0.113.7"  # bound, never sent to
    reason = refusal(start(args, [0]))
    assert reason.startswith("--data-parallel-address 203.0.113.7 is not an address of this host"), reason


# --- devices and network ---------------------------------------------------------------------------------

def test_visible_device_count_must_be_tp_times_local_ranks(start):
    proc = start(serve_args(free_port(), tp=2, dp=2, local=2, start_rank=0, rpc=free_port()), [0, 1])
    assert refusal(proc) == ("2 NPU device(s) visible (davinci0, davinci1) but --tensor-parallel-size x local DP "
                             "ranks needs 4: open device 2 failed, runtime result = 107001")


def test_without_ascend_rt_visible_devices_a_container_uses_the_nodes_it_mounts(start):
    port = free_port()
    proc = start(serve_args(port, tp=4), [8, 9, 10, 11], port=port)  # host ids: a rank's slice of a 16-NPU host
    proc.wait_line("startup complete: serving on")
    info = proc.json("GET", "/standin/info")[1]
    assert info["devices"] == [8, 9, 10, 11] and info["env"].get("ASCEND_RT_VISIBLE_DEVICES") is None


def test_host_ids_in_ascend_rt_visible_devices_fail_as_cann_does(start):
    # the container sees 4 NPUs, numbered 0..3 by the runtime: the host's ids 8-11 are out of range (gpustack #3352)
    proc = start(serve_args(free_port(), tp=4), [8, 9, 10, 11], env={"ASCEND_RT_VISIBLE_DEVICES": "8,9,10,11"})
    reason = refusal(proc)
    assert "aclrtGetDeviceCount(&device_count), error code is 207004" in reason, reason
    assert reason.endswith("EE1001: The argument is invalid.Reason: set ASCEND_RT_VISIBLE_DEVICES:8,9,10,11 error, "
                           "input data rang[0-4)"), reason


def test_container_local_ids_select_among_the_mounted_nodes(start):
    port = free_port()
    proc = start(serve_args(port, tp=2), [8, 9, 10, 11], env={"ASCEND_RT_VISIBLE_DEVICES": "2,3"}, port=port)
    proc.wait_line("startup complete: serving on")
    assert proc.json("GET", "/standin/info")[1]["devices"] == [10, 11]
    # an id past the container's devices is dropped (vllm-ascend #10227): one device left for a tp of 2
    short = start(serve_args(free_port(), tp=2), [4, 5], env={"ASCEND_RT_VISIBLE_DEVICES": "0,6"})
    assert refusal(short) == ("1 NPU device(s) visible (ASCEND_RT_VISIBLE_DEVICES=0,6 of davinci4, davinci5) but "
                              "--tensor-parallel-size x local DP ranks needs 2: open device 1 failed, runtime "
                              "result = 107001")


@pytest.mark.parametrize("env, reason", [
    ({"HCCL_IF_IP": "127.0.0.2"}, "GLOO/TP/HCCL_SOCKET_IFNAME=lo carries 127.0.0.1, not HCCL_IF_IP=127.0.0.2"),
    ({"TP_SOCKET_IFNAME": "eth9"},
     "the socket interfaces differ: GLOO_SOCKET_IFNAME=lo, TP_SOCKET_IFNAME=eth9, HCCL_SOCKET_IFNAME=lo"),
    ({n: "nope0" for n in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")},
     "GLOO/TP/HCCL_SOCKET_IFNAME=nope0: no such interface"),
    ({"HCCL_IF_IP": None}, "HCCL_IF_IP is not set"),
])
def test_network_env_must_name_the_nic_carrying_hccl_if_ip(start, env, reason):
    assert refusal(start(serve_args(free_port()), [0], env=env)) == reason


def test_good_network_on_loopback_starts(start):
    port = free_port()
    proc = start(serve_args(port), [0], port=port)
    proc.wait_line(f"startup complete: serving on http://127.0.0.1:{port}")
    assert proc.request("GET", "/health") == (200, b"")


# --- the KV connector ------------------------------------------------------------------------------------

def test_kv_transfer_config_checks(start):
    port = free_port()
    bad_json = serve_args(port) + ["--kv-transfer-config", '{"kv_role": "kv_producer",']
    assert refusal(start(bad_json, [0])).startswith("--kv-transfer-config: not JSON")
    wrong_role = kv_config("kv_both", 30000, "dep-prefill0", prefill=(1, 1))
    assert refusal(start(serve_args(port, kv=wrong_role), [0])) == \
        "--kv-transfer-config: kv_role 'kv_both' is not kv_producer or kv_consumer"
    wrong_size = kv_config("kv_consumer", 30000, "dep-decode0", decode=(8, 4))
    assert refusal(start(serve_args(port, kv=wrong_size), [0])) == (
        "--kv-transfer-config: kv_connector_extra_config.decode says dp_size 8, tp_size 4 but this decode server "
        "runs --data-parallel-size 1 --tensor-parallel-size 1")


def test_kv_port_in_use_refused(start):
    base = free_run(4)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 3))  # rank 1, tp rank 1
        taken.listen()
        proc = start(serve_args(free_port(), tp=2, dp=2, rank=1, rpc=free_port(),
                                kv=kv_config("kv_producer", base, "dep-prefill0", prefill=(2, 2))), [2, 3])
        assert refusal(proc) == f"kv port {base + 3} in use"


# --- P/D through the proxy -------------------------------------------------------------------------------

@pytest.fixture
def pd(start):
    """Prefill: internal DP2 x TP1 in one server; decode: external DP2 x TP1, one server per rank."""
    p_api, d_api0, d_api1, p_rpc, d_rpc = free_ports(5)
    p_kv, d_kv = free_run(2), free_run(2)
    prefill = start(serve_args(p_api, dp=2, local=2, start_rank=0, rpc=p_rpc,
                               kv=kv_config("kv_producer", p_kv, "dep-prefill0")), [0, 1], port=p_api)
    decodes = [start(serve_args(api, dp=2, rank=r, rpc=d_rpc, kv=kv_config("kv_consumer", d_kv, "dep-decode0")),
                     [2 + r], port=api) for r, api in enumerate((d_api0, d_api1))]
    for proc in (prefill, *decodes):
        proc.wait_line("startup complete: serving on")
    return prefill, decodes, p_kv, d_kv


def proxy_args(port, prefill, decodes):
    return ["--host", "127.0.0.1", "--port", port, "--prefiller-hosts", *(["127.0.0.1"] * len(prefill)),
            "--prefiller-ports", *(p.port for p in prefill), "--decoder-hosts", *(["127.0.0.1"] * len(decodes)),
            "--decoder-ports", *(d.port for d in decodes)]


def test_pd_servers_report_their_connector(pd):
    prefill, decodes, p_kv, d_kv = pd
    info = prefill.json("GET", "/standin/info")[1]
    assert (info["role"], info["kv_role"], info["engine_id"], info["dp_ranks"], info["kv_port"]) == (
        "prefill", "kv_producer", "dep-prefill0", [0, 1], p_kv)
    assert info["kv_ports"] == [p_kv, p_kv + 1]
    assert info["kv_connector_extra_config"] == {"prefill": {"dp_size": 2, "tp_size": 1},
                                                 "decode": {"dp_size": 2, "tp_size": 1}}
    second = decodes[1].json("GET", "/standin/info")[1]
    assert (second["role"], second["dp_ranks"], second["kv_ports"]) == ("decode", [1], [d_kv + 1])


def test_decode_prefills_a_request_without_a_producers_params_itself_and_refuses_forged_ones(pd):
    """vllm-ascend's MooncakeConnector on a kv_consumer: no do_remote_prefill, no remote prefill: the decode
    instance computes the prompt and answers (what `deployctl watch`'s one-token generate to a decode rank gets)."""
    prefill, decodes, p_kv, d_kv = pd
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    status, answer = decodes[0].json("POST", "/v1/chat/completions", body)
    assert status == 200 and answer["choices"][0]["message"]["content"], answer
    assert decodes[0].wait_line("local prefill ")
    forged = {"do_remote_prefill": True, "remote_engine_id": "dep-decode0", "remote_host": "127.0.0.1",
              "remote_port": d_kv + 1, "remote_block_ids": [0]}
    status, answer = decodes[0].json("POST", "/v1/chat/completions", {**body, "kv_transfer_params": forged})
    assert status == 400
    assert "remote_engine_id 'dep-decode0' is not a kv_producer's" in answer["error"]["message"], answer


def test_proxy_routes_prefill_then_decode_end_to_end(pd, start):
    prefill, decodes, p_kv, d_kv = pd
    port = free_port()
    proxy = start(proxy_args(port, [prefill], decodes), command=PROXY, port=port)
    proxy.wait_line("startup complete: proxy serving on")
    assert proxy.json("GET", "/healthcheck") == (200, {"status": "ok", "prefill_instances": 1,
                                                       "decode_instances": 2, "request_num": 0})
    assert [m["id"] for m in proxy.json("GET", "/v1/models")[1]["data"]] == ["qwen"]
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4,
            "stream": True}
    status, data = proxy.request("POST", "/v1/chat/completions", body)
    assert status == 200
    events = [e[len("data: "):] for e in data.decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert len(text.split()) == 4
    line = decodes[0].wait_line("remote prefill ")
    assert f"engine_id=dep-prefill0 host=127.0.0.1 port={p_kv} blocks=1" in line
    status, whole = proxy.json("POST", "/v1/chat/completions", {**body, "stream": False})
    assert status == 200 and whole["choices"][0]["message"]["content"] == text
    second = decodes[1].wait_line("remote prefill ")  # round robin: the second request went to decode rank 1
    assert f"engine_id=dep-prefill0 host=127.0.0.1 port={p_kv + 1} blocks=1" in second
    assert proxy.request("GET", "/metrics")[0] == 404  # it relays: vLLM's metrics live on the servers
    prefilled = prefill.request("GET", "/metrics")[1].decode()
    assert 'vllm:generation_tokens_total{model_name="qwen",engine="0"} 2.0\n' in prefilled  # 1 token each
    decoded = decodes[1].request("GET", "/metrics")[1].decode()  # external launch: labelled with its own rank
    assert 'vllm:request_success_total{model_name="qwen",engine="1",finished_reason="length"} 1.0\n' in decoded
    assert 'vllm:num_requests_running{model_name="qwen",engine="1"} 0.0\n' in decoded


def test_prefill_answers_do_remote_decode_with_kv_transfer_params(pd):
    prefill, _, p_kv, _ = pd
    body = {"model": "qwen", "prompt": "a b c", "max_tokens": 1, "stream": False,
            "kv_transfer_params": {"do_remote_decode": True}}
    status, answer = prefill.json("POST", "/v1/completions", body)
    assert status == 200
    params = answer["kv_transfer_params"]
    assert (params["do_remote_prefill"], params["remote_engine_id"], params["remote_host"], params["remote_port"],
            params["remote_block_ids"]) == (True, "dep-prefill0", "127.0.0.1", p_kv, [0])


def remote_decode(prefill, decode, prompt="a b c"):
    """What the proxy does for one request: prefill with do_remote_decode, then decode with its params."""
    body = {"model": "qwen", "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": False}
    status, first = prefill.json("POST", "/v1/completions", {**body, "max_tokens": 1,
                                                              "kv_transfer_params": {"do_remote_decode": True}})
    assert status == 200, first
    status, answer = decode.json("POST", "/v1/completions", {**body, "kv_transfer_params": first["kv_transfer_params"]})
    assert status == 200, answer
    return answer["choices"][0]["text"]


def test_without_a_readable_hccn_conf_a_server_answers_other_tokens_and_so_does_a_decode_it_feeds(pd, start,
                                                                                                    tmp_path):
    prefill, decodes, _, _ = pd
    api, kv = free_port(), free_run(1)
    (tmp_path / "mounted-as-a-directory").mkdir()  # `docker run -v` of a missing host file
    broken = start(serve_args(api, kv=kv_config("kv_producer", kv, "dep-prefill1", prefill=(1, 1))), [5], port=api,
                   env={"STANDIN_HCCN_CONF": str(tmp_path / "mounted-as-a-directory")})
    assert "is not a readable file: HCCL runs without its NIC table" in broken.wait_line("startup complete")
    good = remote_decode(prefill, decodes[0])
    assert remote_decode(prefill, decodes[1]) == good and len(good.split()) == 4
    assert remote_decode(broken, decodes[0]) != good  # the KV it hands over is wrong: so is the decode's answer
    mixed_api = free_port()
    mixed = start(serve_args(mixed_api), [6], port=mixed_api, env={"STANDIN_HCCN_CONF": str(tmp_path / "none")})
    mixed.wait_line("startup complete")
    status, answer = mixed.json("POST", "/v1/completions", {"model": "qwen", "prompt": "a b c", "max_tokens": 4})
    assert status == 200 and answer["choices"][0]["text"] != good


def test_empty_answers_knob_answers_200_with_no_body(start):
    api = free_port()
    server = start(serve_args(api), [0], port=api, env={"STANDIN_EMPTY_ANSWERS": "1"})
    server.wait_line("startup complete")
    assert server.request("POST", "/v1/completions", {"model": "qwen", "prompt": "a", "max_tokens": 2}) == (200, b"")
    assert server.request("GET", "/health") == (200, b"")


def metric(server, name: str, engine: str = "0") -> float:
    """One engine's series of the server's /metrics."""
    status, text = server.request("GET", "/metrics")
    assert status == 200
    prefix = name + '{model_name="qwen",engine="%s"} ' % engine
    return float(next(line[len(prefix):] for line in text.decode().splitlines() if line.startswith(prefix)))


def wait_metric(server, name: str, value: float, engine: str = "0") -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while metric(server, name, engine) != value:
        assert time.monotonic() < deadline, f"{name} of engine {engine} never {value}"
        time.sleep(0.005)  # a poll interval


def test_a_prefill_holds_a_kv_cache_slot_while_it_prefills(start):
    api, kv = free_port(), free_run(1)
    prefill = start(serve_args(api, kv=kv_config("kv_producer", kv, "dep-prefill1", prefill=(1, 1))), [5], port=api,
                    env={"STANDIN_CAPACITY": "1", "STANDIN_TTFT_MS": "500"})  # a prefill lasts 2 x 500 ms at r = 1
    prefill.wait_line("startup complete")
    body = {"model": "qwen", "prompt": "a b c", "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(prefill.json("POST", "/v1/completions", body)))]
    threads[0].start()
    wait_metric(prefill, "vllm:num_requests_running", 1)
    assert metric(prefill, "vllm:kv_cache_usage_perc") == 1.0
    threads.append(threading.Thread(target=lambda: answers.append(prefill.json("POST", "/v1/completions", body))))
    threads[1].start()
    wait_metric(prefill, "vllm:num_requests_waiting", 1)
    assert metric(prefill, "vllm:num_preemptions_total") == 1
    for thread in threads:
        thread.join(EVENT_TIMEOUT_S)
    assert [status for status, _ in answers] == [200, 200]
    assert all(doc["kv_transfer_params"]["do_remote_prefill"] for _, doc in answers)
    assert metric(prefill, "vllm:generation_tokens_total") == 2 and metric(prefill, "vllm:prompt_tokens_total") == 6


def test_proxy_refuses_an_omitted_rank(pd, start):
    prefill, decodes, _, _ = pd
    proxy = start(proxy_args(free_port(), [prefill], decodes[:1]), command=PROXY)
    reason = refusal(proxy)
    assert "engine dep-decode0: dp rank(s) 1 of dp=2 not listed (listed: 127.0.0.1:%d)" % decodes[0].port in reason


def test_proxy_refuses_mismatched_connector_sizes(pd, start):
    prefill, decodes, _, _ = pd
    api, kv = free_port(), free_run(1)
    lone = start(serve_args(api, kv=kv_config("kv_consumer", kv, "dep-decode9", prefill=(4, 1), decode=(1, 1))),
                 [7], port=api)
    lone.wait_line("startup complete: serving on")
    reason = refusal(start(proxy_args(free_port(), [prefill], [lone]), command=PROXY))
    assert ("prefill 127.0.0.1:%d's kv_connector_extra_config says decode dp_size 2, tp_size 1 but the listed "
            "decode servers run dp 1 tp 1" % prefill.port) in reason, reason
    assert ("decode 127.0.0.1:%d's kv_connector_extra_config says prefill dp_size 4, tp_size 1 but the listed "
            "prefill servers run dp 2 tp 1" % api) in reason, reason


def test_proxy_refuses_bad_lists(pd, start):
    prefill, decodes, _, _ = pd
    args = proxy_args(free_port(), [prefill], decodes)
    args[args.index("--decoder-ports") + 2:] = []  # two hosts, one port
    assert refusal(start(args, command=PROXY)) == "2 --decoder-hosts but 1 --decoder-ports"
    twice = refusal(start(proxy_args(free_port(), [prefill], [decodes[0], decodes[0], decodes[1]]), command=PROXY))
    assert twice == f"listed twice: 127.0.0.1:{decodes[0].port}"
    swapped = refusal(start(proxy_args(free_port(), [decodes[0]], [prefill]), command=PROXY))
    assert f"prefiller 127.0.0.1:{decodes[0].port} is not a kv_producer (its kv_role: kv_consumer)" in swapped


def test_proxy_refuses_a_backend_that_never_answers(start):
    silent, quiet, port = free_ports(3)
    proxy = start(["--port", port, "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", silent,
                   "--decoder-hosts", "127.0.0.1", "--decoder-ports", quiet], command=PROXY,
                  env={"STANDIN_PROXY_WAIT_S": "0.3"})
    assert refusal(proxy) == ("no answer to /standin/info within 0.3 s (STANDIN_PROXY_WAIT_S) from prefiller "
                              f"127.0.0.1:{silent}, decoder 127.0.0.1:{quiet}")
