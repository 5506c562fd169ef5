"""`deployctl monitor SPEC --offline`: the pack written where asked (or beside the spec), a second run rewrites no
unchanged file, `--output json` lists files and targets; no host is asked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from deployctl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_monitor_writes_the_pack_and_rewrites_only_what_changed(tmp_path, capsys):
    out = tmp_path / "pack"
    assert main(["monitor", str(ROOT / "playbooks" / "demo-pd.yaml"), "--offline", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"monitoring pack written to {out}" in said and "2 API servers, 1 front" in said
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["NOTES.txt", "blackbox.yml", "grafana/dashboards/demo-pd.json",
                     "grafana/provisioning/dashboards/deployctl.yaml", "grafana/provisioning/datasources/deployctl.yaml",
                     "prometheus.yml", "rules/deployctl.rules.yml", "targets/front.json", "targets/node-exporter.json",
                     "targets/npu-exporter.json", "targets/servers.json"]
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    (out / "targets" / "servers.json").write_text("[]\n")  # someone's edit: put back
    assert main(["monitor", str(ROOT / "playbooks" / "demo-pd.yaml"), "--offline", "--out", str(out), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["deployment"] == "demo-pd" and doc["files"] == files
    assert [t["labels"]["instance"] for t in doc["targets"]["servers"]] == ["demo-pd-prefill-0", "demo-pd-decode-0"]
    assert json.loads((out / "targets" / "servers.json").read_text()) == doc["targets"]["servers"]
    unchanged = [p for p, stamp in stamps.items() if p.stat().st_mtime_ns == stamp]
    assert len(unchanged) == len(stamps) - 1


def test_monitor_defaults_to_the_spec_key_then_the_state_directory(tmp_path, capsys):
    spec = tmp_path / "demo.yaml"
    shutil.copy(ROOT / "playbooks" / "demo-pd.yaml", spec)
    assert main(["monitor", str(spec), "--offline", "-q"]) == 0
    assert (tmp_path / ".deployctl" / "demo-pd" / "monitoring" / "prometheus.yml").is_file()
    spec.write_text(spec.read_text() + "monitor: {out: graphs}\n")
    assert main(["monitor", str(spec), "--offline", "-q"]) == 0
    assert (tmp_path / "graphs" / "prometheus.yml").is_file()
