"""Fixtures for end-to-end runs of deployctl against the test bed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployctl.cli import main
from tests.testbed.demo import place_tiny_model

MODEL_DIR = "/srv/weights/tiny"


@pytest.fixture(scope="session")
def bed(testbed):
    """The test bed with a tiny model directory at /srv/weights/tiny on every host."""
    place_tiny_model(testbed)
    return testbed


MODEL = (f"image: {{name: deployctl/standin-vllm:latest}}\n"
         f"weights: {{source: s3://models/tiny/, dest: {MODEL_DIR}}}\n"
         "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n")


class Deployctl:
    """Run the CLI in-process on a spec file; returns (exit code, stdout, stderr)."""

    def __init__(self, capsys, tmp_path: Path) -> None:
        self.capsys, self.tmp_path = capsys, tmp_path
        self.failed: list[str] = []  # each failed command and its whole answer, for a failed test's report

    def write(self, text: str, name: str = "spec.yaml") -> Path:
        path = self.tmp_path / name
        path.write_text(text)
        return path

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([str(a) for a in argv])
        out, err = self.capsys.readouterr()
        if code != 0:
            self.failed.append(f"$ deployctl {' '.join(map(str, argv))}  -> exit {code}\n{out}{err}")
        return code, out, err

    def json(self, *argv: str) -> tuple[int, dict]:
        code, out, err = self(*argv, "--output", "json")
        assert out.strip(), err
        return code, json.loads(out)


@pytest.hookimpl(hookwrapper=True)  # old style: the lowest pytest the project allows (7) knows only this one
def pytest_runtest_makereport(item, call):
    """A failed test's report shows every deployctl command that failed in it, whole: pytest shortens the dict
    an assertion prints, cutting the host's own words (a container's last log lines) that say why."""
    report = (yield).get_result()
    runner = item.funcargs.get("deployctl") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(runner, Deployctl) and runner.failed:
        report.sections.append(("deployctl commands that failed", "\n".join(runner.failed)))


@pytest.fixture
def deployctl(capsys, tmp_path):
    return Deployctl(capsys, tmp_path)


def container_ids(bed, host: str, deployment: str) -> dict[str, str]:
    """name -> id of a deployment's containers on a host (running or not)."""
    out = bed.docker_on(host, "ps", "--all", "--filter", f"label=deployctl.deployment={deployment}",
                        "--format", "{{.Names}} {{.ID}} {{.State}}").stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.strip()}


def http_json(bed, host: str, port: int, path: str) -> dict:
    """GET a JSON document from a server inside a host (curl in the host's namespaces)."""
    out = bed.run_on(host, ["curl", "--silent", "--max-time", "5", f"http://127.0.0.1:{port}{path}"]).stdout
    return json.loads(out)

