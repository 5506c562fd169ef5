"""`deployctl logs` on the test bed: lines as one JSON document, and docker's own errors (a container that is not
deployed, a stopped daemon) as errors with exit 1, never as log lines."""

from __future__ import annotations

import json

from tests.e2e.conftest import MODEL

HOST = "tb2"
ADDRESS = "10.200.0.12"


def write_spec(bed, deployctl, name: str, port: int, devices: str = "4, 5") -> str:
    topology = f"topology:\n  mode: mixed\n  instances:\n    - {{host: {HOST}, devices: [{devices}], port: {port}}}\n"
    return deployctl.write(bed.spec_yaml(name, topology, hosts_used=[HOST], extra=MODEL), name=f"{name}.yaml")


def one_document(out: str) -> dict:
    """stdout holds exactly one JSON document and nothing else (json.loads refuses trailing text)."""
    return json.loads(out)


def test_json_is_one_document_with_each_instance_lines(bed, deployctl):
    path = write_spec(bed, deployctl, "e2e-logjson", 8390)
    try:
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 0, err
        code, out, err = deployctl("logs", path, "--tail", "3", "--output", "json")
        assert code == 0, err
        doc = one_document(out)
        assert doc["deployment"] == "e2e-logjson" and "error" not in doc
        (entry,) = doc["instances"]
        assert (entry["name"], entry["host"]) == ("e2e-logjson-mixed-0", HOST)
        expected = bed.docker_on(HOST, "logs", "--tail", "3", "e2e-logjson-mixed-0")
        assert sorted(entry["lines"]) == sorted((expected.stdout + expected.stderr).splitlines())
        assert len(entry["lines"]) == 3

        code, out, err = deployctl("logs", path, "-f", "--output", "json")
        assert code == 2 and "--follow" in err
        refused = one_document(out)  # the failure document of --output json, nothing streamed
        assert refused["ok"] is False and refused["error"]["type"] == "UsageError"
        assert "--follow" in refused["error"]["message"]
    finally:
        deployctl("down", path, "--yes")


def test_instance_not_deployed_is_an_error_naming_instance_and_host(bed, deployctl):
    path = write_spec(bed, deployctl, "e2e-lognone", 8391)
    code, out, err = deployctl("logs", path)
    assert code == 1 and out == ""
    assert f"{HOST} ({ADDRESS}): instance e2e-lognone-mixed-0 is not deployed" in err
    assert "deployctl up" in err  # the hint

    code, out, err = deployctl("logs", path, "--output", "json")
    assert code == 1
    doc = one_document(out)
    assert doc["error"]["host"] == HOST and "e2e-lognone-mixed-0 is not deployed" in doc["error"]["message"]
    assert doc["instances"] == [{"name": "e2e-lognone-mixed-0", "host": HOST,
                                 "error": doc["error"]["message"]}]


def test_stopped_docker_daemon_is_an_error_not_log_lines(bed, deployctl):
    path = write_spec(bed, deployctl, "e2e-logdown", 8392)
    bed.stop_dockerd(HOST)
    try:
        code, out, err = deployctl("logs", path)
        json_code, json_out, json_err = deployctl("logs", path, "--output", "json")
    finally:
        bed.start_dockerd(HOST)
    assert code == 1 and out == ""
    assert "cannot read the logs of e2e-logdown-mixed-0: the Docker daemon is not reachable" in err
    assert "Cannot connect to the Docker daemon" in err and "systemctl start docker" in err
    assert json_code == 1
    doc = one_document(json_out)
    assert "the Docker daemon is not reachable" in doc["error"]["message"] and "lines" not in doc["instances"][0]
    # the bed is as it was: the daemon answers again
    assert bed.docker_on(HOST, "version", "--format", "{{.Server.Version}}").stdout.strip()
