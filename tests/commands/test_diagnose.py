"""A failed `up` writes the bundle by itself; whatever happens to the bundle, the deploy's own error goes on."""

from __future__ import annotations

from pathlib import Path

import deployctl.diagnose.collect as collect
from deployctl.commands.diagnose import bundle_after_failure
from deployctl.errors import HostError
from deployctl.spec.load import check_spec_text
from deployctl.ui import UI, error_document
from tests.diagnose.test_plan import BASE
from tests.fakes.transport import FakeTransport


def spec_in(tmp_path):
    spec, errors, _ = check_spec_text(BASE, str(tmp_path / "spec.yaml"), tmp_path, {})
    assert not errors
    return spec


def test_bundle_after_failure_writes_the_bundle_and_attaches_it_to_the_error(tmp_path, capsys):
    spec = spec_in(tmp_path)
    error = HostError("h1", "instance diag-mixed-0 exited (code 1) while starting",
                      stderr_tail="EI0002: [PID: 7] The wait execution of the Notify register times out.")
    bundle_after_failure(spec, {"h1": FakeTransport("h1"), "h2": FakeTransport("h2")}, error, UI())
    err = capsys.readouterr().err
    assert "diagnose bundle: " in err and "hccl_exec_timeout in up-error.txt: | EI0002: [PID: 7]" in err and "fix:" in err
    assert Path(error.diagnose["bundle"]).parent == tmp_path / ".deployctl" / "diag"
    assert [h["id"] for h in error.diagnose["hints"]] == ["hccl_exec_timeout"]
    assert error_document(error)["error"]["diagnose"] == error.diagnose


def test_a_bundle_that_cannot_be_written_is_said_and_never_raised(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise PermissionError("cannot write .deployctl/")

    monkeypatch.setattr(collect, "write_bundle", broken)
    error = HostError("h1", "deploy failed")
    bundle_after_failure(spec_in(tmp_path), {}, error, UI())
    assert "could not write the diagnose bundle: cannot write .deployctl/" in capsys.readouterr().err
    assert not hasattr(error, "diagnose") and "diagnose" not in error_document(error)["error"]


def test_ctrl_c_while_collecting_stops_the_bundle_only(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(collect, "write_bundle", interrupted)
    bundle_after_failure(spec_in(tmp_path), {}, HostError("h1", "deploy failed"), UI())
    assert "could not write the diagnose bundle: interrupted" in capsys.readouterr().err


def test_the_command_collects_from_the_hosts_it_reaches_and_names_the_others(tmp_path, capsys, monkeypatch):
    import json

    import deployctl.transport.connect as connect
    from deployctl.cli import main

    (tmp_path / "spec.yaml").write_text(BASE)

    def some(hosts, **kwargs):
        return {"h1": FakeTransport("h1")}, {"h2": HostError("h2", "timed out waiting for the SSH banner",
                                                             address="192.0.2.12")}

    monkeypatch.setattr(connect, "open_transports", some)
    assert main(["diagnose", str(tmp_path / "spec.yaml"), "-o", "json", "--out", str(tmp_path / "b.tar.gz")]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["bundle"] == str(tmp_path / "b.tar.gz") and (tmp_path / "b.tar.gz").exists()
    assert doc["hosts"][1] == {"host": "h2", "collected": [], "failed": [
        {"item": "ssh", "reason": "h2 (192.0.2.12): timed out waiting for the SSH banner"}]}
    assert "not collected: h2 (192.0.2.12): timed out" in err

    def none(hosts, **kwargs):
        return {}, {n: HostError(n, "connection refused") for n in ("h1", "h2")}

    monkeypatch.setattr(connect, "open_transports", none)
    assert main(["diagnose", str(tmp_path / "spec.yaml")]) == 1
    assert "error: h1: connection refused (also: h2: connection refused)" in capsys.readouterr().err
