"""The HCCL env lint on the test bed (issue 22): an env that names an address the host does not hold and a NIC it
does not have FAILs doctor with both named, a short connect timeout WARNs, and `up` stops before any change."""

from __future__ import annotations

from tests.e2e.conftest import container_ids
from tests.e2e.test_vllm_ascend import MIXED_ONE_HOST, nic_of, spec

HOST = "tb4"


def hccl_checks(doc):
    (report,) = doc["hosts"]
    return [(c["status"], c["observed"]) for c in report["checks"] if c["name"] == "hccl_env"]


def test_a_hand_typed_hccl_env_that_does_not_fit_the_host_fails_doctor_and_up(bed, deployctl):
    nic, address = nic_of(bed, HOST), bed.host(HOST).address
    env = "env: {HCCL_IF_IP: 10.200.0.99, GLOO_SOCKET_IFNAME: eth7, HCCL_CONNECT_TIMEOUT: '60'}\n"
    path = deployctl.write(spec(bed, "e2e-hccl-env", MIXED_ONE_HOST.replace("tb1", HOST), [HOST], cards=8) + env)
    code, doc = deployctl.json("doctor", path)
    assert code == 3, doc
    checks = hccl_checks(doc)
    assert ("FAIL", f"HCCL_IF_IP=10.200.0.99, but the host holds {nic} {address}") in checks
    assert any(s == "FAIL" and o.startswith("GLOO_SOCKET_IFNAME=eth7, but the host has no such interface") and nic in o
               for s, o in checks)
    assert ("WARN", "HCCL_CONNECT_TIMEOUT=60") in checks
    code, doc = deployctl.json("up", path, "--skip", "weights")
    assert code == 3 and container_ids(bed, HOST, "e2e-hccl-env") == {}

    fitting = f"env: {{HCCL_IF_IP: {address}, GLOO_SOCKET_IFNAME: {nic}, HCCL_CONNECT_TIMEOUT: '1200'}}\n"
    deployctl.write(spec(bed, "e2e-hccl-env", MIXED_ONE_HOST.replace("tb1", HOST), [HOST], cards=8) + fitting)
    code, doc = deployctl.json("doctor", path)
    assert [s for s, _ in hccl_checks(doc)] == ["PASS"], doc
