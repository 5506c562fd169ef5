"""The in-container contract on the test bed (issue 22): a host without /etc/hccn.conf makes `docker run -v`
mount an empty directory in its place; the server starts healthy anyway (vllm-ascend #7711: then it answers
wrong tokens). `up` catches it from inside the container, names it, and rolls back."""

from __future__ import annotations


from tests.e2e.conftest import container_ids
from tests.e2e.test_vllm_ascend import MIXED_ONE_HOST, spec


HOST = "tb4"


def test_a_missing_hccn_conf_fails_up_from_inside_the_container_and_rolls_back(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-contract", MIXED_ONE_HOST.replace("tb1", HOST), [HOST], cards=8))
    bed.run_on(HOST, ["rm", "-f", "/etc/hccn.conf"])
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 1, doc
        error = doc["error"]
        assert error["host"] == HOST and "e2e-contract-mixed0-tb4" in error["message"]
        assert "file /etc/hccn.conf: expected a readable file, found a directory" in error["stderr_tail"]
        assert container_ids(bed, HOST, "e2e-contract") == {}  # rolled back: nothing of it runs
    finally:
        bed.run_on(HOST, ["sh", "-c", "[ -d /etc/hccn.conf ] && rmdir /etc/hccn.conf; true"])
        bed.reset_profile(HOST)  # renders /etc/hccn.conf again
        assert deployctl("down", path, "--yes")[0] == 0
    code, doc = deployctl.json("up", path, "--skip", "weights")  # with the file back, the same spec deploys
    try:
        assert code == 0, doc
    finally:
        assert deployctl("down", path, "--yes")[0] == 0
