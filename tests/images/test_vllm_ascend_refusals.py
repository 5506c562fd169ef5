"""What the real vLLM + vllm-ascend stack refuses and the stand-in therefore refuses too (issue 29), each re-derived
from upstream (the citations are in images/standin/standin/): the bad input fails as upstream fails, the good one
starts. The stand-in runs as deployctl runs it (`vllm serve MODEL ...`, the same env), without a container."""

from __future__ import annotations

import json
import sys
import threading

import pytest
from tests.images.test_vllm_ascend_standin import (STANDIN, free_run, kv_config, refusal, serve_args,  # noqa: F401
                                                   start, weights, wait_metric)
from tests.ports import free_port, free_ports

# the stand-in's own modules (standard library only); its directory leaves sys.path at once, since it also holds a
# stub `vllm` package that must not shadow a real one for other tests
sys.path.insert(0, str(STANDIN))
try:
    from standin import serve_flags, versions  # noqa: E402
finally:
    sys.path.remove(str(STANDIN))

OLD_MODULE = "vllm_ascend.distributed.mooncake_connector"
NEW_MODULE = "vllm_ascend.distributed.kv_transfer.kv_p2p.mooncake_connector"


def release(name, **env):
    return {"STANDIN_VLLM_ASCEND_VERSION": name, **env}


def producer(port_base, module=None, prefill=(1, 1), decode=(1, 1), connector="MooncakeConnectorV1"):
    doc = kv_config("kv_producer", port_base, "dep-prefill0", prefill=prefill, decode=decode)
    doc["kv_connector"] = connector
    if module is not None:
        doc["kv_connector_module_path"] = module
    return doc


def usage_error(proc) -> str:
    """argparse's exit: status 2, the usage line and `vllm serve: error: ...`."""
    out = proc.wait_exit()
    assert proc.proc.returncode == 2, out
    assert "usage: vllm serve [model_tag] [options]" in out, out
    return next(line for line in out.splitlines() if line.startswith("vllm serve: error: "))[len("vllm serve: error: "):]


# --- versions -------------------------------------------------------------------------------------------------

def test_the_stand_in_plays_the_newest_profile_rows_with_the_vllm_each_pairs_with():
    """Issue 41: a v0.26 row exists and the stand-in plays it (and 0.25), each on the vLLM its Dockerfile.a3 names,
    whose `vllm serve` flag set the stand-in knows; every profile line from 0.18 has a release the bed runs."""
    from deployctl.spec.profiles import profiles, select_profile

    for name, vllm in (("v0.25.1rc1", "0.25.1"), ("v0.26.0rc1", "0.26.0")):
        played = versions.emulated({"STANDIN_VLLM_ASCEND_VERSION": name})
        assert played.vllm == vllm == select_profile(name).vllm and "--shutdown-timeout" in serve_flags.options(vllm)
        assert played.release.registry["MooncakeConnectorV1"] == (NEW_MODULE, "MooncakeConnector")
    played_lines = {select_profile(name).profile.line for name in versions.RELEASES}
    assert {p.line for p in profiles()} == played_lines


def test_the_release_played_comes_from_the_environment_and_defaults_to_the_newest():
    assert versions.emulated({}).release.name == versions.NEWEST == "v0.23.0"
    played = versions.emulated({"STANDIN_VLLM_ASCEND_VERSION": "v0.11.0"})
    assert (played.vllm, played.module_path_first, played.start_rank_zero_is_hybrid) == ("0.11.0", False, False)
    newer = versions.emulated({"STANDIN_VLLM_ASCEND_VERSION": "v0.23.0", "STANDIN_VLLM_VERSION": "0.33.0"})
    assert (newer.vllm, newer.module_path_first, newer.start_rank_zero_is_hybrid) == ("0.33.0", True, True)
    with pytest.raises(versions.VersionError, match="v0.9.1"):
        versions.emulated({"STANDIN_VLLM_ASCEND_VERSION": "v0.9.1"})
    with pytest.raises(versions.VersionError, match="knows the flag sets"):
        versions.emulated({"STANDIN_VLLM_VERSION": "0.24.0"})


def test_the_release_played_shows_where_the_real_image_shows_its_versions(start):
    import subprocess

    port = free_port()
    server = start(serve_args(port), [0], env=release("v0.11.0"), port=port)
    server.wait_line("startup complete: serving on")
    assert server.json("GET", "/version") == (200, {"version": "0.11.0"})  # vLLM's /version
    probe = "import vllm, vllm_ascend._version as a; print(vllm.__version__, a.__version__)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(STANDIN), "STANDIN_VLLM_ASCEND_VERSION": "v0.18.0"}).stdout
    assert out.split() == ["0.18.0", "0.18.0"]


def test_an_unknown_release_is_refused_at_start(start):
    assert "is not one the stand-in plays" in refusal(start(serve_args(free_port()), [0], env=release("v0.9.1")))


# --- unknown `vllm serve` flags: argparse exits 2 ----------------------------------------------------------

def test_every_known_version_has_a_flag_set_with_what_deployctl_renders():
    rendered = ("--served-model-name", "--host", "--port", "--max-model-len", "--max-num-seqs",
                "--max-num-batched-tokens", "--quantization", "--tensor-parallel-size", "--data-parallel-size",
                "--data-parallel-rank", "--data-parallel-size-local", "--data-parallel-start-rank",
                "--data-parallel-address", "--data-parallel-rpc-port", "--enable-expert-parallel", "--headless",
                "--kv-transfer-config", "--additional-config", "--compilation-config", "--kv-cache-dtype",
                "--enforce-eager", "--no-enable-prefix-caching", "--speculative-config", "--trust-remote-code",
                "--gpu-memory-utilization")
    for vllm in versions.KNOWN_VLLM:
        known = serve_flags.options(vllm)
        assert [flag for flag in rendered if flag not in known] == [], vllm


def rendered_serve_lines():
    """Every `vllm serve` argv deployctl renders for the playbooks and test specs that run upstream vLLM, as
    the vLLM oracle collects them (tests/oracle): the words after the model."""
    from tests.oracle.test_vllm_parser import rendered

    commands, _ = rendered()
    # after `vllm serve MODEL`; the api_server form has no positional model (`--model M` is among its flags)
    return [(c["name"], c["argv"][2:] if c["argv"][2].startswith("-") else c["argv"][3:]) for c in commands]


# flags deployctl renders only where the profile's vLLM has them (servers/shutdown.py): from this vLLM on
VERSION_GATED = {"--shutdown-timeout": (0, 18)}


def _without(argv, flag: str) -> list:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == flag:
            skip = True
        elif not word.startswith(flag + "="):
            out.append(word)
    return out


def test_every_flag_in_deployctls_rendered_serve_lines_is_known_to_every_version():
    lines = rendered_serve_lines()
    assert len(lines) >= 5, lines  # every vllm-ascend golden has one
    assert any(flag in argv for flag in VERSION_GATED for _, argv in lines)
    for vllm in versions.KNOWN_VLLM:
        line = tuple(int(part) for part in vllm.split(".")[:2])
        for name, argv in lines:
            for flag, first in VERSION_GATED.items():
                if line < first:  # never rendered for it: its profile says the image's vLLM lacks the flag
                    argv = _without(argv, flag)
            serve_flags.check(argv, vllm)  # raises UsageError naming what argparse would refuse


@pytest.mark.parametrize("words, message", [
    (["--enforce-eagre"], "unrecognized arguments: --enforce-eagre"),
    (["--tensor-parallel", "1", "stray"], "unrecognized arguments: stray"),  # an abbreviation, then a positional
    (["--max", "4"], "ambiguous option: --max could match "),
    (["--enforce-eager=1"], "argument --enforce-eager: ignored explicit argument '1'"),
    (["--port"], "argument --port: expected one argument"),
    (["--disable-log-requests"], "unrecognized arguments: --disable-log-requests"),  # gone by 0.18.0
])
def test_argparse_rules_on_the_emulated_flag_set(words, message):
    with pytest.raises(serve_flags.UsageError) as caught:
        serve_flags.check(["--max-model-len", "4096", *words], "0.23.0")
    assert str(caught.value).startswith(message), str(caught.value)


def test_good_forms_argparse_and_vllms_parser_accept():
    serve_flags.check(["--max_model_len=4096", "--max-model", "4096", "-tp", "2", "--no-enable-prefix-caching",
                       "--compilation-config.cudagraph_mode", "FULL_DECODE_ONLY", "-O3", "--served-model-name",
                       "a", "b", "--seed", "-1"], "0.23.0")
    serve_flags.check(["--disable-log-requests"], "0.11.0")  # still there in 0.11.0


def test_a_misspelled_flag_exits_2_like_vllm_serve_and_the_version_decides_what_exists(start):
    proc = start(serve_args(free_port()) + ["--enable-expert-paralel"], [0])
    assert usage_error(proc) == "unrecognized arguments: --enable-expert-paralel"
    only_later = start(serve_args(free_port()) + ["--grpc-port", "9"], [0])  # a vLLM 0.33 option
    assert usage_error(only_later) == "unrecognized arguments: --grpc-port 9"
    port = free_port()
    newer = start(serve_args(port) + ["--grpc-port", "9"], [0], env={"STANDIN_VLLM_VERSION": "0.33.0"}, port=port)
    out = newer.wait_line("startup complete: serving on")
    assert "vllm-ascend v0.23.0 on vLLM 0.33.0" in out and "not emulated: vLLM argument --grpc-port 9" in out


# --- the KV connector's module (vLLM #38301, vllm-ascend #5719) ---------------------------------------------

@pytest.mark.parametrize("name, module, reason", [
    ("v0.23.0", OLD_MODULE, f"ModuleNotFoundError: No module named '{OLD_MODULE}'"),
    ("v0.23.0", NEW_MODULE, f"AttributeError: Class MooncakeConnectorV1 not found in {NEW_MODULE}"),
    ("v0.23.0", "", "ValueError: kv_connector_module_path cannot be an empty string."),
])
def test_a_module_path_vllm_imports_first_and_cannot_load_fails_the_start(start, name, module, reason):
    proc = start(serve_args(free_port(), kv=producer(free_run(1), module)), [0], env=release(name))
    assert refusal(proc) == reason


@pytest.mark.parametrize("name, module", [
    ("v0.23.0", None),  # current tutorials: no module path, the registry's MooncakeConnectorV1
    ("v0.13.0", OLD_MODULE),  # vLLM 0.13 asks its registry first: the path is never imported
    ("v0.18.0", OLD_MODULE),  # vLLM 0.18 too, although the module has moved
])
def test_a_module_path_is_harmless_where_the_registry_answers_first(start, name, module):
    port = free_port()
    proc = start(serve_args(port, kv=producer(free_run(1), module)), [0], env=release(name), port=port)
    proc.wait_line("startup complete: serving on")


# --- Mooncake in the image, and its library path ----------------------------------------------------------

def test_an_image_without_mooncake_cannot_load_the_connector(start):
    proc = start(serve_args(free_port(), kv=producer(free_run(1))), [0], env=release("v0.11.0rc1"))
    assert refusal(proc) == "ModuleNotFoundError: No module named 'mooncake'"
    port = free_port()
    with_it = start(serve_args(port, kv=producer(free_run(1))), [0], env=release("v0.11.0"), port=port)
    with_it.wait_line("startup complete: serving on")


def test_mooncakes_library_path_comes_only_from_the_images_shell_set_up(start):
    bypassed = {"LD_LIBRARY_PATH": None}  # `--entrypoint vllm`: ~/.bashrc never read
    proc = start(serve_args(free_port(), kv=producer(free_run(1))), [0], env=release("v0.23.0", **bypassed))
    assert refusal(proc).startswith("ImportError: ascend_transport.so: cannot open shared object file: "
                                    "No such file or directory")
    port = free_port()  # v0.13.0's Mooncake did not need it (#6949 was first seen on v0.15.0rc1)
    older = start(serve_args(port, kv=producer(free_run(1))), [0], env=release("v0.13.0", **bypassed), port=port)
    older.wait_line("startup complete: serving on")
    port = free_port()  # and without a connector nothing loads Mooncake
    mixed = start(serve_args(port), [0], env=release("v0.23.0", **bypassed), port=port)
    mixed.wait_line("startup complete: serving on")


def test_the_images_bash_gives_the_library_path_to_interactive_and_login_shells_only(tmp_path):
    import subprocess

    home = tmp_path / "root"
    home.mkdir()
    (home / ".bashrc").write_text((STANDIN / "etc" / "root.bashrc").read_text())
    (home / ".profile").write_text((STANDIN / "etc" / "root.profile").read_text())
    bash = str(STANDIN / "bin" / "bash")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "STANDIN_ETC": str(tmp_path / "etc")}  # no /etc/profile

    def path(*argv):
        return subprocess.run(["sh", bash, *argv, 'echo "$LD_LIBRARY_PATH"'], env=env, capture_output=True,
                              text=True, check=True).stdout.strip()

    assert path("-c") == ""  # non-interactive, non-login (vllm-ascend #12059)
    assert path("-ic").endswith(":/usr/local/lib") and path("-lc").endswith(":/usr/local/lib")
    assert path("-elc").endswith(":/usr/local/lib")  # upstream CI's `bash -el {0}`


# --- prefill tp >= decode tp --------------------------------------------------------------------------------

def test_a_prefill_tp_smaller_than_decodes_fails_the_mooncake_worker(start):
    proc = start(serve_args(free_port(), kv=producer(free_run(1), prefill=(1, 1), decode=(1, 2))), [0])
    assert refusal(proc) == ("ValueError: prefill_tp_size: 1 must be greater than or equal to the decode_tp_size: 2")
    port = free_port()
    equal_or_larger = start(serve_args(port, tp=2, kv=producer(free_run(2), prefill=(1, 2), decode=(1, 1))), [0, 1],
                            port=port)
    equal_or_larger.wait_line("startup complete: serving on")


# --- kv ports outside Mooncake's own range ----------------------------------------------------------------

def host_hccn_conf(tmp_path, cards):
    """A host's /etc/hccn.conf (mounted into each container): one address per NPU of the host."""
    path = tmp_path / f"hccn{cards}.conf"
    path.write_text("".join(f"address_{n}=10.201.1.{10 + n}\n" for n in range(cards)))
    return {"STANDIN_HCCN_CONF": str(path)}


def test_a_kv_port_inside_mooncakes_random_range_fails(start, tmp_path):
    proc = start(serve_args(free_port(), kv=producer(27999)), [0], env=host_hccn_conf(tmp_path, 8))
    reason = refusal(proc)
    assert reason.startswith("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:27999'); "
                             "RuntimeError: KV Cache sending/receiving thread failed to start."), reason
    assert "[20000, 28000) for 8 NPUs per node" in reason
    # the same port base is fine on an 8-NPU host and inside the range on a 16-NPU host, which reaches 36000
    base = free_run(1)
    port = free_port()
    eight = start(serve_args(port, kv=producer(base)), [0], env=host_hccn_conf(tmp_path, 8), port=port)
    eight.wait_line("startup complete: serving on")
    eight.proc.terminate()
    eight.wait_exit()
    sixteen = start(serve_args(free_port(), kv=producer(base)), [0], env=host_hccn_conf(tmp_path, 16))
    assert "[20000, 36000) for 16 NPUs per node" in refusal(sixteen)


# --- /dev/shm ----------------------------------------------------------------------------------------------------

def test_a_64mb_dev_shm_kills_the_engine_core_at_the_first_request(start):
    port = free_port()
    # /proc's filesystem reports 0 bytes: smaller than any --shm-size, like Docker's 64 MB default
    proc = start(serve_args(port), [0], env={"STANDIN_SHM_DIR": "/proc"}, port=port)
    proc.wait_line("startup complete: serving on")
    assert proc.request("GET", "/health") == (200, b"")  # it starts and looks healthy, as the real one does
    status, answer = proc.json("POST", "/v1/completions", {"model": "qwen", "prompt": "a", "max_tokens": 2})
    assert status == 500 and answer["error"]["type"] == "InternalServerError"
    out = proc.wait_exit()
    assert proc.proc.returncode == 1
    assert "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client." in out


# --- hybrid DP load balancing from vLLM 0.28 -------------------------------------------------------------------

def test_a_start_rank_on_the_head_refuses_headless_engines_from_vllm_028(start):
    api, rpc = free_ports(2)
    newer = {"STANDIN_VLLM_VERSION": "0.33.0"}
    head = start(serve_args(api, dp=4, local=2, start_rank=0, rpc=rpc), [0, 1], env=newer, port=api)
    head.wait_line("dp group: rank 1 joined")
    headless = start(serve_args(dp=4, local=2, start_rank=2, rpc=rpc, headless=True), [2, 3], env=newer)
    expected = "RuntimeError: Remote engine 2 must not use --headless in external or hybrid dp lb mode"
    assert expected in refusal(headless)
    assert refusal(head).startswith(f"dp group: {expected}")


def test_without_a_start_rank_on_the_head_the_group_forms_on_vllm_028(start):
    api, rpc = free_ports(2)
    newer = {"STANDIN_VLLM_VERSION": "0.33.0"}
    args = serve_args(api, dp=4, local=2, start_rank=0, rpc=rpc)
    cut = args.index("--data-parallel-start-rank")
    del args[cut:cut + 2]  # upstream writes the start rank only on the headless nodes
    head = start(args, [0, 1], env=newer, port=api)
    start(serve_args(dp=4, local=2, start_rank=2, rpc=rpc, headless=True), [2, 3], env=newer)
    head.wait_line("standin: dp group ready: dp=4 tp=1 ranks=0..3")
    head.wait_line("startup complete: serving on")
    info = head.json("GET", "/standin/info")[1]
    assert (info["hybrid_lb"], info["dp_ranks"]) == (False, [0, 1, 2, 3])


# --- removed additional_config keys -----------------------------------------------------------------------------

def test_removed_additional_config_keys_are_ignored_without_a_word(start):
    port = free_port()
    config = {"torchair_graph_config": {"enabled": True}, "ascend_scheduler_config": {"enabled": True}}
    proc = start(serve_args(port) + ["--additional-config", json.dumps(config)], [0], port=port)
    out = proc.wait_line("startup complete: serving on")
    assert "torchair" not in out and "ascend_scheduler" not in out  # upstream logs nothing about them
    info = proc.json("GET", "/standin/info")[1]
    assert info["additional_config_unread"] == ["ascend_scheduler_config", "torchair_graph_config"]
    port = free_port()
    older = start(serve_args(port) + ["--additional-config", json.dumps(config)], [0], env=release("v0.11.0"),
                  port=port)
    older.wait_line("startup complete: serving on")
    assert older.json("GET", "/standin/info")[1]["additional_config_unread"] == []  # v0.11.0 still read them


# --- one /metrics series per DP engine ---------------------------------------------------------------------------

def test_an_internal_dp_server_shows_one_series_per_engine_and_spreads_requests(start):
    api, rpc = free_ports(2)
    server = start(serve_args(api, dp=2, local=2, start_rank=0, rpc=rpc), [0, 1], port=api,
                   env={"STANDIN_CAPACITY": "1", "STANDIN_TTFT_MS": "400"})
    server.wait_line("startup complete: serving on")
    body = {"model": "qwen", "prompt": "a b", "max_tokens": 1}
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(server.json("POST", "/v1/completions", body)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for engine in ("0", "1"):  # the DP load balancer puts the second request on the idle engine
        wait_metric(server, "vllm:kv_cache_usage_perc", 1.0, engine)
    text = server.request("GET", "/metrics")[1].decode()
    assert 'vllm:num_requests_waiting{model_name="qwen",engine="1"} 0.0' in text
    for thread in threads:
        thread.join()
    assert [status for status, _ in answers] == [200, 200]
