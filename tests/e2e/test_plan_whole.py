"""`plan` shows the whole of `up` (issue 20): with the image missing on one host and the weights absent, the
plan lists the ship of the image and the weight transfer per host with their bytes; once `up` ran, the same
plan lists nothing to do and `up` executes nothing."""

from __future__ import annotations

import json

from tests.e2e.conftest import container_ids
from tests.e2e.test_up_weights import DEST, IMAGE, built_image_and_s3_weights, s3_model  # noqa: F401 (fixture)

HOSTS = ["tb1", "tb2"]
TOPOLOGY = """topology:
  mode: mixed
  instances:
    - {host: tb1, devices: [0, 1], port: 8520}
    - {host: tb2, devices: [0, 1], port: 8520}
"""


def typed(doc: dict) -> list[tuple]:
    """(type, host, bytes[, targets]) of every build, ship and fetch in a plan document."""
    return sorted((e["type"], e["host"], e["bytes"], tuple(e.get("to", ()))) for e in doc["steps"]
                  if e.get("type") in ("build", "ship", "fetch"))


def test_plan_lists_ship_and_weight_bytes_per_host_then_nothing_after_up(bed, deployctl, s3_model):  # noqa: F811
    extra = built_image_and_s3_weights(bed, deployctl, where="once")
    path = deployctl.write(bed.spec_yaml("e2e-planw", TOPOLOGY, hosts_used=HOSTS, extra=extra))
    try:
        code, out, err = deployctl("image", "build", path)
        assert code == 0, err
        bed.docker_on("tb2", "image", "rm", "--force", IMAGE)  # the image is now missing on one host
        size = int(bed.docker_on("tb1", "image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
        total = sum(len(data) for data in s3_model.values())

        code, plan = deployctl.json("plan", path)
        assert code == 0 and plan["changed"] is True
        assert typed(plan) == [("fetch", "tb1", total, ()), ("fetch", "tb2", total, ()),
                               ("ship", "tb1", size, ("tb2",))]
        assert sorted((m["host"], m["image_bytes"], m["weight_bytes"]) for m in plan["moves"]) == [
            ("tb1", 0, total), ("tb2", size, total)]
        stages = [e["stage"] for e in plan["steps"]]
        assert stages.index("ship") < stages.index("weights") < stages.index("workers") < stages.index("verify")
        code, out, err = deployctl("plan", path)  # the table says the same, with the bytes
        assert code == 0 and f"({size} bytes each)" in out and f"{total} bytes from s3://" in out
        assert not bed.run_on("tb2", ["test", "-e", DEST], check=False).returncode == 0  # plan changed nothing

        code, out, err = deployctl("up", path, "--yes", "--output", "json")
        assert code == 0, err
        assert json.loads(out)["changed"] is True

        code, plan = deployctl.json("plan", path)
        assert code == 0 and plan["changed"] is False and plan["moves"] == [] and typed(plan) == []
        assert {e["action"] for e in plan["steps"]} == {"keep"}
        before = {**container_ids(bed, "tb1", "e2e-planw"), **container_ids(bed, "tb2", "e2e-planw")}
        code, out, err = deployctl("up", path, "--output", "json")
        assert code == 0 and json.loads(out)["changed"] is False, err
        assert not any(line.startswith(("start", "done")) for line in err.splitlines())  # no step ran
        assert {**container_ids(bed, "tb1", "e2e-planw"), **container_ids(bed, "tb2", "e2e-planw")} == before
    finally:
        deployctl("down", path, "--yes")
