"""`doctor --host local`: this machine, reached without SSH, says so in its `ssh` row (the contract's name)."""

from __future__ import annotations

import json

from tests.test_ui import piped


def test_a_local_host_shows_local_not_ssh_connected():
    done = piped("doctor", "--host", "local", "--output", "json")
    (host,) = json.loads(done.stdout)["hosts"]
    assert (host["host"], host["reachable"]) == ("local", True)
    assert host["checks"][0] == {"name": "ssh", "status": "PASS", "observed": "local (no SSH)",
                                 "expected": "this machine (no SSH)", "fix": None}
    table = piped("doctor", "--host", "local").stdout
    (row,) = [line for line in table.splitlines() if " ssh " in line]
    assert "local (no SSH)" in row and "connected" not in table
