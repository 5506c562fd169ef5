"""`monitor --scan-logs`: every container of a host read in one round trip (one batch), each with its own exit code;
a container that is not there counts nothing, the others' lines are counted against the signatures."""

from __future__ import annotations

import os

from deployctl.commands.monitor import scan_logs
from deployctl.spec.load import load_spec_text
from deployctl.transport.local import LocalTransport
from tests.plan.test_compile_cache import TWO_HOSTS


class _Counting(LocalTransport):
    def __init__(self, name):
        super().__init__(name)
        self.round_trips = 0

    def run(self, command, *, timeout=None):
        self.round_trips += 1
        return super().run(command, timeout=timeout)


def test_one_round_trip_per_host_and_each_containers_lines_counted(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor n; do :; done\ncase "$n" in\n'
                    '  cc-mixed-1) echo "2026-11-25T10:00:00.000000001Z EI0006: Getting socket times out";'
                    ' echo "2026-11-25T10:00:01.000000001Z INFO fine" ;;\n'
                    '  cc-mixed-2) echo "Error response from daemon: No such container: cc-mixed-2" >&2; exit 1 ;;\n'
                    '  *) echo "2026-11-25T10:00:00.000000001Z INFO fine" ;;\nesac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    spec = load_spec_text(TWO_HOSTS)  # h1: cc-mixed-0; h2: cc-mixed-1 and cc-mixed-2
    transports = {"h1": _Counting("h1"), "h2": _Counting("h2")}
    text = scan_logs(spec, transports, tmp_path / "out", 100).read_text()
    assert {name: t.round_trips for name, t in transports.items()} == {"h1": 1, "h2": 1}
    assert 'host="h2",container="cc-mixed-1",signature="hccl_connect_timeout"} 1' in text
    assert 'container="cc-mixed-0",signature="hccl_connect_timeout"} 0' in text
    assert 'container="cc-mixed-2"' not in text  # not deployed there: nothing to count
