"""`deployctl export` as users run it: the stream on stdout, one file per object with --out, --output json."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from deployctl.cli import main
from tests.export.cases import ROOT, golden_path

SPEC = "playbooks/vllm-ascend-mixed-ep-1host.yaml"
FLAGS = ["--weights-pvc", "qwen3-30b-weights"]


def test_stdout_is_the_golden_stream(capsys):
    assert main(["export", str(ROOT / SPEC), "--to", "lws", *FLAGS]) == 0
    assert capsys.readouterr().out == golden_path(SPEC, "lws").read_text()


def test_out_writes_one_file_per_object_and_json_lists_them(tmp_path, capsys):
    assert main(["export", str(ROOT / SPEC), "--to", "k8s", *FLAGS, "--out", str(tmp_path), "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["objects"] == [
        {"kind": "Deployment", "name": "qwen3-30b-ep-mixed0-node1",
         "file": "deployment-qwen3-30b-ep-mixed0-node1.yaml"},
        {"kind": "Service", "name": "qwen3-30b-ep", "file": "service-qwen3-30b-ep.yaml"},
    ]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(o["file"] for o in document["objects"])
    joined = "".join("---\n" + (tmp_path / o["file"]).read_text() for o in document["objects"])
    assert joined == golden_path(SPEC, "k8s").read_text()


def test_the_bytes_do_not_depend_on_the_process():
    """Another interpreter with another hash seed prints the same bytes."""
    outputs = set()
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-m", "deployctl", "export", SPEC, "--to", "kthena", *FLAGS],
                              cwd=ROOT, capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=60)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
