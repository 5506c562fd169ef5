"""Rollback of a P/D deployment across hosts (issue 19 item 8): the decode instance exits during the health wait
after prefill (on another host) was replaced; every replaced container is restored, the scheduler untouched."""

from __future__ import annotations

from tests.e2e.conftest import MODEL, MODEL_DIR, container_ids, http_json
from tests.testbed.demo import tiny_model

TOPOLOGY = """topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9520}
  prefill:
    - {host: tb1, devices: [6, 7], port: 8520}
  decode:
    - {host: tb2, devices: [6, 7], port: 8521}
"""
NEW_DIR = "/srv/weights/e2e-pdrb"


def both(bed) -> dict:
    return {**container_ids(bed, "tb1", "e2e-pdrb"), **container_ids(bed, "tb2", "e2e-pdrb")}


def test_decode_exiting_during_health_wait_restores_prefill_and_decode(bed, deployctl):
    good = bed.spec_yaml("e2e-pdrb", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=MODEL)
    path = deployctl.write(good)
    # The new model directory is whole on tb1 and broken on tb2 (config.json not an object): the new prefill
    # starts and turns healthy, the new decode refuses to start and exits.
    for host, config in (("tb1", tiny_model()["config.json"]), ("tb2", b"[]")):
        target = bed.host(host).dir / "srv" / NEW_DIR.removeprefix("/srv/")
        target.mkdir(parents=True, exist_ok=True)
        for name, data in {**tiny_model(), "config.json": config}.items():
            (target / name).write_bytes(data)
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        before = both(bed)
        assert sorted(before) == ["e2e-pdrb-decode-0", "e2e-pdrb-prefill-0", "e2e-pdrb-scheduler-0"]

        path.write_text(good.replace(f"dest: {MODEL_DIR}", f"dest: {NEW_DIR}"))
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes", "--health-timeout", "600")
        assert code == 1, err
        assert "e2e-pdrb-decode-0 exited while starting" in err and "config.json is not a JSON object" in err
        assert "tb2" in err and "rolled back" in err and "Traceback" not in err
        # prefill on tb1 had been replaced: whether its new container turned healthy first or its wait was stopped
        # when decode failed, it is undone as well, and the previous scheduler is waited for only once its
        # workers are back (it was restored healthy).
        assert ("done   workers tb1 e2e-pdrb-prefill-0" in err
                or "e2e-pdrb-prefill-0 — stopped: another step of this stage failed" in err)
        assert "undo   workers tb1 e2e-pdrb-prefill-0" in err
        assert "restored, but" not in err
        assert both(bed) == before  # the very same containers, nothing left renamed .previous
        for host, port in (("tb1", 8520), ("tb2", 8521), ("tb1", 9520)):
            assert http_json(bed, host, port, "/v1/models")["data"][0]["id"] == "tiny"
        assert http_json(bed, "tb1", 8520, "/standin/info")["model"] == MODEL_DIR

        path.write_text(good)
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
    finally:
        deployctl("down", path, "--yes")
        for host in ("tb1", "tb2"):
            bed.run_on(host, ["rm", "-rf", NEW_DIR], check=False)
