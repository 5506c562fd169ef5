"""vLLM's `--shutdown-timeout` where the server's vLLM has it (servers/shutdown.py): vllm-ascend by its server profile
(`shutdown_timeout_from`), vLLM on GPU by its official image's tag; the value is `docker stop --time`'s default, so a
graceful stop drains the requests in flight for as long as docker waits; never where vLLM would refuse it."""

from __future__ import annotations

import json
from importlib import resources

from deployctl.plan.containers import container_for
from deployctl.plan.rollout import DEFAULT_SHUTDOWN_TIMEOUT
from deployctl.servers.vllm_ascend.upstream import HostNetwork
from deployctl.spec.load import load_spec_text
from deployctl.spec.profiles import parse_version, profiles, select_profile, vllm_shutdown_timeout_from
from tests.plan.test_triton import TRITON
from tests.spec.test_front_rules import UPSTREAM_PD

NETWORKS = {"tb1": HostNetwork("10.200.0.11", "eth0", 8)}
FLAG = "--shutdown-timeout"


def pd(image: str, extra: str = ""):
    text = (UPSTREAM_PD % "proxy: {host: tb1, port: 8000}").replace("quay.io/ascend/vllm-ascend:v0.13.0rc1", image)
    return load_spec_text(text.replace("model: {served_name: tiny}", "model: {served_name: tiny%s}" % extra))


def argv_of(spec, instance=None):
    instance = instance or spec.instances[0]
    return container_for(spec, instance, None, NETWORKS if spec.upstream is not None else None).command


def timeout_in(argv):
    return argv[argv.index(FLAG) + 1] if FLAG in argv else None


def test_vllm_ascend_renders_it_from_the_first_release_whose_vllm_has_it():
    assert DEFAULT_SHUTDOWN_TIMEOUT == 30  # the flag's value is docker stop --time's default, not a copy of it
    for image, expected in (("quay.io/ascend/vllm-ascend:v0.13.0rc1", None),  # vLLM 0.13: argparse exits 2 on it
                            ("quay.io/ascend/vllm-ascend:v0.17.0rc1", None),  # the 0.18 line, vLLM 0.17.0
                            ("quay.io/ascend/vllm-ascend:v0.18.0rc1", str(DEFAULT_SHUTDOWN_TIMEOUT)),
                            ("quay.io/ascend/vllm-ascend:v0.23.0", str(DEFAULT_SHUTDOWN_TIMEOUT))):
        spec = pd(image)
        servers = [i for i in spec.instances if i.server is not None]
        assert {timeout_in(argv_of(spec, i)) for i in servers} == {expected}, image
    proxy = argv_of(pd("quay.io/ascend/vllm-ascend:v0.23.0"), pd("quay.io/ascend/vllm-ascend:v0.23.0").front)
    assert FLAG not in proxy  # the proxy is not vLLM


def test_the_users_own_shutdown_timeout_wins():
    spec = pd("quay.io/ascend/vllm-ascend:v0.23.0", ", extra_args: ['--shutdown-timeout=300']")
    argv = argv_of(spec)
    assert "--shutdown-timeout=300" in argv and FLAG not in argv


def test_vllm_on_gpu_renders_it_only_for_vllms_own_image_from_0_18():
    gpu = TRITON.replace("server: triton", "server: vllm")
    for image, expected in (("vllm/vllm-openai:v0.18.0", str(DEFAULT_SHUTDOWN_TIMEOUT)),
                            ("docker.io/vllm/vllm-openai:v0.33.0", str(DEFAULT_SHUTDOWN_TIMEOUT)),
                            ("vllm/vllm-openai:v0.6.3", None), ("vllm/vllm-openai:latest", None),
                            ("nvcr.io/nvidia/vllm:25.09-py3", None),  # NGC's year.month tag is no vLLM version
                            ("nvcr.io/nvidia/tritonserver:24.08-vllm-python-py3", None)):
        spec = load_spec_text(gpu.replace("nvcr.io/nvidia/tritonserver:24.08-vllm-python-py3", image))
        assert timeout_in(argv_of(spec)) == expected, image


def test_vllm_on_gpu_takes_the_vllm_a_custom_image_runs_from_server_version():
    """A mirrored or custom image (registry.corp/vllm:prod, the bed's deployctl/testbed-vllm-cpu) says its vLLM with
    server_version: the flag from 0.18.0 on, never before; validate takes the key on GPU and still refuses it where
    it would pick nothing (AscendCloud's vLLM)."""
    from deployctl.spec.load import check_spec_text

    gpu = TRITON.replace("server: triton", "server: vllm").replace(
        "nvcr.io/nvidia/tritonserver:24.08-vllm-python-py3", "registry.corp/vllm:prod")
    assert timeout_in(argv_of(load_spec_text(gpu))) is None
    for version, expected in (("0.32.0", str(DEFAULT_SHUTDOWN_TIMEOUT)), ("v0.18.0", str(DEFAULT_SHUTDOWN_TIMEOUT)),
                              ("0.17.1", None)):
        spec = load_spec_text(gpu.replace("server: vllm", f"server: vllm\nserver_version: '{version}'"))
        assert timeout_in(argv_of(spec)) == expected, version
        _, errors, _ = check_spec_text(gpu.replace("server: vllm", f"server: vllm\nserver_version: '{version}'"))
        assert errors == [], [p.render() for p in errors]


def test_every_profile_row_says_where_its_shutdown_timeout_comes_from():
    doc = json.loads(resources.files("deployctl").joinpath("data/server_profiles.json").read_text("utf-8"))
    assert vllm_shutdown_timeout_from() == parse_version("0.18.0") and "#36666" in doc["vllm"]["sources"][
        "shutdown_timeout_from"]
    for row in doc["vllm_ascend"]:
        assert "shutdown_timeout_from" in row and row["sources"]["shutdown_timeout_from"], row["line"]
    assert [p.shutdown_timeout_from for p in profiles()] == [None, None] + ["0.18.0rc1"] * 4
    assert select_profile(image="quay.io/ascend/vllm-ascend:latest").has_shutdown_timeout  # unknown: the newest
    assert not select_profile(server_version="0.16.0rc1").has_shutdown_timeout


def test_docker_stop_waits_at_least_as_long_as_the_server_drains():
    from deployctl.servers.shutdown import stop_grace

    assert stop_grace(("vllm", "serve", "m", FLAG, "30"), 20) == 30
    assert stop_grace(("vllm", "serve", "m", f"{FLAG}=300"), 20) == 300
    assert stop_grace(("vllm", "serve", "m", FLAG, "30"), 60) == 60  # up's own is longer
    assert stop_grace(("vllm", "serve", "m"), 20) == 20  # a vLLM without the flag aborts at SIGTERM anyway
    assert stop_grace(("vllm", "serve", FLAG), 20) == stop_grace(("x", f"{FLAG}=soon"), 20) == 20


def test_every_stop_of_a_server_is_written_in_one_place():
    """One stop policy: `up`, rollout waves, surge, `watch` and `down` stop through servers/shutdown.py
    `stop_command` (the grace from `stop_grace`); a `docker stop` argv written anywhere else would take its own."""
    import pathlib
    import re

    import deployctl

    root = pathlib.Path(deployctl.__file__).parent
    written = re.compile(r"""["']docker["']\s*,\s*["']stop["']""")
    found = [str(p.relative_to(root)) for p in root.rglob("*.py") if written.search(p.read_text(encoding="utf-8"))]
    assert found == ["servers/shutdown.py"], found
