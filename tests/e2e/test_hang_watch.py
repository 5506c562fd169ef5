"""The hang watch (issue 22): an instance whose /health stays 200 while generation hangs is `hung` in `status`,
not healthy; a healthy one is not."""

from __future__ import annotations

from tests.e2e.conftest import MODEL

HANGING = """topology:
  mode: mixed
  instances:
    - {host: tb3, devices: [0, 1], port: 8190}
    - {host: tb3, devices: [2, 3], port: 8191, model: {max_num_seqs: 8}}
"""


def test_status_reports_a_hang_behind_a_green_health(bed, deployctl):
    # every instance answers up's answer check, its smoke request and up's own final check, then hangs (as an
    # HCCL hang does)
    env = "env: {STANDIN_HANG_AFTER_REQUESTS: 3}\n"
    path = deployctl.write(bed.spec_yaml("e2e-hang", HANGING, hosts_used=["tb3"], extra=MODEL + env))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert [(i["name"], i["health"]) for i in doc["instances"]] == [
            ("e2e-hang-mixed-0", "healthy"), ("e2e-hang-mixed-1", "healthy")]

        code, doc = deployctl.json("status", path, "--hang-timeout", "2")
        assert code == 0
        assert [(i["name"], i["state"], i["health"], i["healthy"]) for i in doc["instances"]] == [
            ("e2e-hang-mixed-0", "running", "hung", False), ("e2e-hang-mixed-1", "running", "hung", False)]
        code, out, err = deployctl("status", path, "--hang-timeout", "2")
        assert "hung (health 200, no generate)" in out
    finally:
        assert deployctl("down", path, "--yes")[0] == 0
