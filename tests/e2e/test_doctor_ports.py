"""doctor's port checks on the test bed: a port of the deployment taken by someone else FAILs naming it (and `up`
refuses before any change); once the deployment runs, its own ports pass."""

from __future__ import annotations


from tests.e2e.test_vllm_ascend import MIXED_ONE_HOST, spec


LISTEN = ("import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('0.0.0.0', 8310)); s.listen(); print('listening', flush=True); time.sleep(600)")


def findings(doc, host, name):
    (report,) = [h for h in doc["hosts"] if h["host"] == host]
    return [c for c in report["checks"] if c["name"] == name]


def test_a_taken_api_port_fails_doctor_and_up_and_our_own_ports_pass(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-va-ports", MIXED_ONE_HOST.replace("tb1", "tb4"), ["tb4"], cards=8))
    bed.docker_on("tb4", "run", "--detach", "--name", "port-squatter", "--net=host", bed.base_image,
                  "python3", "-c", LISTEN)
    try:
        # wait for its "listening" line (bounded): the port is taken from then on
        bed.run_on("tb4", ["sh", "-c", "timeout 60 sh -c 'until docker logs port-squatter 2>&1 | grep -q listening; "
                                       "do sleep 0.05; done'"])
        code, doc = deployctl.json("doctor", path)
        (ports,) = findings(doc, "tb4", "ports")
        assert code == 3 and ports["status"] == "FAIL"
        # a mixed group runs no KV connector: its API port is what it binds (28000, a P/D kv base, is not)
        assert ports["observed"] == "in use: 8310 (mixed group 0 API port)"
        (ephemeral,) = findings(doc, "tb4", "ephemeral_ports")
        assert ephemeral["status"] == "PASS"

        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 3, doc
        assert "e2e-va-ports" not in bed.docker_on("tb4", "ps", "--format", "{{.Names}}").stdout

        bed.docker_on("tb4", "rm", "--force", "port-squatter")
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        code, doc = deployctl.json("doctor", path)
        (ports,) = findings(doc, "tb4", "ports")
        assert ports["status"] == "PASS" and "held by e2e-va-ports's running containers" in ports["observed"]
    finally:
        bed.docker_on("tb4", "rm", "--force", "port-squatter", check=False)
        assert deployctl("down", path, "--yes")[0] == 0
