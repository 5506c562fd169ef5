"""The Docker daemon dies while `up` waits for health (issue 19 item 8): a clear error naming host and daemon,
and once the daemon is back a re-run converges with nothing left over."""

from __future__ import annotations

from tests.children import deployctl_child
from tests.e2e.conftest import MODEL, container_ids, http_json
from tests.e2e.test_up_faults import container_state, wait_for

MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb3, devices: [2, 3], port: 8530}\n"


def test_dockerd_dying_mid_up_is_named_and_a_rerun_converges(bed, deployctl):
    good = bed.spec_yaml("e2e-dkd", MIXED, hosts_used=["tb3"], extra=MODEL)
    path = deployctl.write(good)
    try:
        assert deployctl("up", path, "--skip", "weights")[0] == 0
        old_id = container_ids(bed, "tb3", "e2e-dkd")["e2e-dkd-mixed-0"]
        path.write_text(good + "env: {STANDIN_STARTUP_S: '900'}\n")  # the new one stays unhealthy meanwhile
        child = deployctl_child("up", path, "--skip", "weights", "--yes")
        try:
            assert child.stderr.wait_for("start  workers tb3 e2e-dkd-mixed-0", timeout=120), child.stderr.text(0)
            assert wait_for(lambda: container_state(bed, "tb3", "e2e-dkd-mixed-0").endswith(" running")
                            and not container_state(bed, "tb3", "e2e-dkd-mixed-0").startswith(old_id[:12]),
                            timeout=120)
            bed.stop_dockerd("tb3")
            code, out, err = child.finish(timeout=120)
            assert code == 1, err
        finally:
            child.kill()
            bed.start_dockerd("tb3")
        # Said at once (not after the health timeout), then once more by the state read after the rollback.
        assert ("failed workers tb3 e2e-dkd-mixed-0 — tb3 (10.200.0.13): the Docker daemon is not reachable "
                "(waiting for e2e-dkd-mixed-0)") in err, err
        assert "error: tb3 (10.200.0.13): the Docker daemon is not reachable" in err
        assert "Traceback" not in err

        path.write_text(good)
        code, doc = deployctl.json("up", path, "--skip", "weights", "--yes")
        assert code == 0, doc
        assert [(i["state"], i["healthy"]) for i in doc["instances"]] == [("running", True)]
        assert list(container_ids(bed, "tb3", "e2e-dkd")) == ["e2e-dkd-mixed-0"]  # no .previous left over
        assert http_json(bed, "tb3", 8530, "/v1/models")["data"][0]["id"] == "tiny"
    finally:
        deployctl("down", path, "--yes")
