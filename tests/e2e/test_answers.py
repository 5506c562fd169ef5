"""The all-pairs answer check on the test bed (issue 22): faults that leave every /health at 200 — a decode host
without /etc/hccn.conf (its answers have other tokens, vllm-ascend #7711) and a decoder that answers empty 200s
(#13140) — fail `up` with the serving paths named, and the deployment is rolled back."""

from __future__ import annotations


from tests.e2e.conftest import container_ids
from tests.e2e.test_vllm_ascend import spec

TESTBED_GROUP = "testbed2"  # the second bed, beside the first (tests/conftest.py)


PD = """topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: tb1, port: 8400}
  prefill:
    - {hosts: [tb1], dp: 2, tp: 4, port: 9400}
  decode:
    - {hosts: [tb2, tb3], dp: 2, tp: 4, port: 9400DECODE_ENV}
"""
HOSTS = ["tb1", "tb2", "tb3"]


def nothing_runs(bed, name):
    return all(container_ids(bed, host, name) == {} for host in HOSTS)


def test_a_decode_host_without_hccn_conf_answers_other_tokens_and_fails_up_naming_its_pairs(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-ans", PD.replace("DECODE_ENV", ""), HOSTS, cards=8))
    bed.run_on("tb3", ["rm", "-f", "/etc/hccn.conf"])
    try:
        # the contract stage would name the container first (tests/e2e/test_contract.py): leave it out to
        # prove the answers alone catch what /health does not
        code, doc = deployctl.json("up", path, "--skip", "weights,contract")
        assert code == 1, doc
        error = doc["error"]
        assert error["host"] == "tb1" and "answer check: " in error["message"]
        problems = error["stderr_tail"].splitlines()
        assert sorted(p.split(":")[0] for p in problems) == [
            "e2e-ans-prefill0-r0 -> e2e-ans-decode0-r1", "e2e-ans-prefill0-r1 -> e2e-ans-decode0-r1"]
        assert all("where 3 other path(s) answered" in p for p in problems)
        assert nothing_runs(bed, "e2e-ans")
    finally:
        bed.run_on("tb3", ["sh", "-c", "[ -d /etc/hccn.conf ] && rmdir /etc/hccn.conf; true"])
        bed.reset_profile("tb3")
        assert deployctl("down", path, "--yes")[0] == 0


def test_a_decoder_answering_empty_200s_fails_up_naming_every_path_through_it(bed, deployctl):
    topology = PD.replace("DECODE_ENV", ", env: {STANDIN_EMPTY_ANSWERS: '1'}")
    path = deployctl.write(spec(bed, "e2e-ans-empty", topology, HOSTS, cards=8))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 1, doc
        problems = doc["error"]["stderr_tail"].splitlines()
        assert "e2e-ans-empty-prefill0-r1 -> e2e-ans-empty-decode0-r0: HTTP 200 with no body" in problems
        assert "e2e-ans-empty-proxy: HTTP 200 with no body" in problems and len(problems) == 5
        assert nothing_runs(bed, "e2e-ans-empty")
    finally:
        assert deployctl("down", path, "--yes")[0] == 0
