"""`deployctl monitor SPEC --offline`: the pack written where asked (or beside the spec), a second run rewrites no
unchanged file, `--output json` lists files and targets; no host is asked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

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
                     "targets/npu-exporter.json", "targets/router.json", "targets/servers.json"]
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


def _tree(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("case", ["out is a file", "out under a file", "targets/ is a file",
                                  "a file's place is a directory", "unwritable", "scan-logs on a file"])
def test_a_bad_output_place_is_refused_before_anything_is_written(case, tmp_path, capsys):
    """Each used to end in a traceback, some after writing half a pack (or the whole pack, for --scan-logs)."""
    spec = str(ROOT / "playbooks" / "demo-pd.yaml")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "pack" / "targets").parent.mkdir()
    (tmp_path / "pack" / "targets").write_text("x")
    (tmp_path / "dirs" / "prometheus.yml").mkdir(parents=True)
    out, extra, said = {
        "out is a file": (tmp_path / "afile", [], "afile is a file, not a directory"),
        "out under a file": (tmp_path / "afile" / "sub", [], "afile is a file, not a directory"),
        "targets/ is a file": (tmp_path / "pack", [], "targets is a file, not a directory"),
        "a file's place is a directory": (tmp_path / "dirs", [], "prometheus.yml is a directory where a file goes"),
        # root may write anywhere but not in sysfs; anyone else is refused by the permission check
        "unwritable": (Path("/sys/deployctl-pack"), [], "/sys"),
        # refused before any host is asked (the demo's hosts are not there: a connection would fail instead)
        "scan-logs on a file": (tmp_path / "fresh", ["--scan-logs", str(tmp_path / "afile")],
                                "--scan-logs"),
    }[case]
    before = _tree(tmp_path)
    code = main(["monitor", spec, "--offline", "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code != 0 and said in err and "nothing was written" in err and "Traceback" not in err, err
    assert _tree(tmp_path) == before
    assert not Path("/sys/deployctl-pack").exists()


def test_a_changed_rule_file_is_reloaded_at_the_specs_prometheus_url_or_said(tmp_path, capsys):
    """Prometheus reads rule files only at start and on reload: `monitor` (like `up`/`down`) POSTs /-/reload to
    monitor.prometheus_url when the rules changed, else says a reload is needed; unchanged rules: nothing."""
    import http.server
    import threading

    posts = []

    class Lifecycle(http.server.BaseHTTPRequestHandler):  # Prometheus' /-/reload answers 200 once reloaded
        def do_POST(self):
            posts.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Lifecycle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = tmp_path / "demo.yaml"
        text = (ROOT / "playbooks" / "demo-pd.yaml").read_text()
        spec.write_text(text + "monitor: {out: pack}\n")
        assert main(["monitor", str(spec), "--offline"]) == 0
        assert "reload it (POST" in capsys.readouterr().err and posts == []
        spec.write_text(text + f"monitor: {{out: pack, prometheus_url: 'http://127.0.0.1:{server.server_port}',"
                               " ttft_p99: 2s}\n")
        assert main(["monitor", str(spec), "--offline"]) == 0
        assert posts == ["/-/reload"] and "reloaded the changed alert rules" in capsys.readouterr().err
        assert main(["monitor", str(spec), "--offline"]) == 0  # nothing changed: no reload
        assert posts == ["/-/reload"] and "reload" not in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
