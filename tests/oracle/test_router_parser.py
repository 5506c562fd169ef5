"""vLLM router's own argument parser as an oracle (issue 31): the `vllm-router` argv deployctl renders for a
front goes through the wheel's `parse_router_args` (vllm_router/launch_router.py) and comes back with the worker
URLs, port and policy it was meant to have. The wheel lives where the test bed installs it
(tests/testbed/router_image.py: `pip install --target`), or at $DEPLOYCTL_VLLM_ROUTER_SITE; without it, skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployctl.plan.containers import container_for
from deployctl.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
CHECK = ("import json, sys\nfrom vllm_router.launch_router import parse_router_args\n"
         "args = parse_router_args(sys.argv[1:])\n"
         "print(json.dumps({'worker_urls': args.worker_urls, 'port': args.port, 'host': args.host, "
         "'policy': args.policy}))\n")


def _site() -> Path | None:
    from tests.testbed import router_image

    for candidate in (os.environ.get("DEPLOYCTL_VLLM_ROUTER_SITE"), str(router_image.site_dir())):
        if candidate and (Path(candidate) / "vllm_router" / "launch_router.py").exists():
            return Path(candidate)
    return None


def test_the_router_parses_the_rendered_argv_as_meant():
    site = _site()
    if site is None:
        pytest.skip("vllm-router is not installed here: set DEPLOYCTL_VLLM_ROUTER_SITE to a `pip install --target` "
                    "directory holding vllm-router==0.1.17 (the test bed's cache has one once a bed ran)")
    spec = load_spec(ROOT / "playbooks" / "mixed-router-910b.yaml")
    command = container_for(spec, spec.front).command
    assert command[0] == "vllm-router"
    result = subprocess.run([sys.executable, "-c", CHECK, *command[1:]], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr[-2000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed == {"worker_urls": ["http://192.0.2.11:8080", "http://192.0.2.11:8081"], "port": 8000,
                      "host": "0.0.0.0", "policy": "round_robin"}


SGLANG_CHECK = ("import json, sys\nfrom sglang_router.launch_router import parse_router_args\n"
                "args = parse_router_args(sys.argv[1:])\n"
                "print(json.dumps({'worker_urls': args.worker_urls, 'port': args.port, 'host': args.host, "
                "'policy': args.policy, 'prometheus_port': args.prometheus_port, "
                "'prometheus_host': args.prometheus_host}))\n")


def test_sglang_router_parses_the_rendered_argv_as_meant():
    """Issue 43: `python3 -m sglang_router.launch_router ...` through the 0.3.2 wheel's own parse_router_args (the
    bed's cache, tests/testbed/sglang_router_image.py, or $DEPLOYCTL_SGLANG_ROUTER_SITE)."""
    from tests.fronts.test_sglang_router import TWO
    from tests.testbed import sglang_router_image

    site = next((Path(c) for c in (os.environ.get("DEPLOYCTL_SGLANG_ROUTER_SITE"), str(sglang_router_image.site_dir()))
                 if c and (Path(c) / "sglang_router" / "launch_router.py").exists()), None)
    if site is None:
        pytest.skip("sglang-router is not installed here: set DEPLOYCTL_SGLANG_ROUTER_SITE to a `pip install --target` "
                    "directory holding sglang-router==0.3.2 (the test bed's cache has one once a bed ran)")
    from deployctl.spec.load import load_spec_text

    spec = load_spec_text(TWO, environ={})
    command = container_for(spec, spec.front).command
    assert command[:3] == ("python3", "-m", "sglang_router.launch_router")
    result = subprocess.run([sys.executable, "-c", SGLANG_CHECK, *command[3:]], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr[-2000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed == {"worker_urls": ["http://10.200.0.11:30000", "http://10.200.0.11:30001"], "port": 8000,
                      "host": "0.0.0.0", "policy": "round_robin", "prometheus_port": 19000,
                      "prometheus_host": "0.0.0.0"}
