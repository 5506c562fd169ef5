"""The vllm-ascend proxy is Ready only when every prefiller and decoder it lists answers /health: its own
/healthcheck answers ok whatever they do (load_balance_proxy_server_example.py, ProxyState.healthcheck)."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading

import pytest

from tests.export.cases import exported

PD = "tests/fixtures/export/specs/vllm-ascend-pd-1host.yaml"


def proxy_container(spec: str, target: str) -> dict:
    (proxy,) = [m for m in exported(spec, target) if m.kind == "Deployment" and m.name.endswith("-proxy")]
    (container,) = proxy.body["spec"]["template"]["spec"]["containers"]
    return container


def listed(container: dict) -> list[str]:
    """The proxy's backends as its own argv lists them, each as a /health URL."""
    argv = container.get("args") or container["command"]

    def values(flag: str) -> list[str]:
        rest = argv[argv.index(flag) + 1:]
        return rest[:next((i for i, word in enumerate(rest) if word.startswith("--")), len(rest))]

    return [f"http://{h}:{p}/health" for hosts, ports in (("--prefiller-hosts", "--prefiller-ports"),
                                                          ("--decoder-hosts", "--decoder-ports"))
            for h, p in zip(values(hosts), values(ports))]


@pytest.mark.parametrize("spec,target", [(PD, "k8s"), (PD, "lws"), (PD, "kthena"),
                                         ("playbooks/vllm-ascend-pd-qwen3.yaml", "lws")])
def test_the_proxys_readiness_asks_every_backend_it_lists(spec, target):
    container = proxy_container(spec, target)
    probe = container["readinessProbe"]
    assert "httpGet" not in probe
    command = probe["exec"]["command"]
    assert command[:2] == ["python3", "-c"] and command[3:] == listed(container) and len(command) > 4
    # start-up and liveness still ask the proxy itself: it is alive while its backends load
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthcheck"


class _Health(http.server.BaseHTTPRequestHandler):
    ready: dict = {}

    def do_GET(self):  # noqa: N802 (the standard library's name)
        self.send_response(200 if self.ready.get(self.server.server_address[1]) else 503)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def backends():
    servers = [http.server.HTTPServer(("127.0.0.1", 0), _Health) for _ in range(3)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_probe_passes_only_when_every_backend_answers(backends):
    script = proxy_container(PD, "k8s")["readinessProbe"]["exec"]["command"][2]
    urls = [f"http://127.0.0.1:{s.server_address[1]}/health" for s in backends]

    def probe():
        return subprocess.run([sys.executable, "-c", script, *urls], capture_output=True, text=True, timeout=30)

    _Health.ready = {s.server_address[1]: True for s in backends[:2]}  # the last still loading
    done = probe()
    assert done.returncode == 1 and done.stderr.startswith(f"not ready: {urls[2]}")
    _Health.ready[backends[2].server_address[1]] = True
    assert probe().returncode == 0
