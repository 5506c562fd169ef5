"""`down` leaves no secret behind (issue 28): the 0600 env files and ranktables deployctl wrote for a deployment
are gone from every host, the history stays, a second `down` has nothing to do; `status` then says "not deployed"."""

from __future__ import annotations

import json

from tests.e2e.conftest import MODEL, container_ids

NAME = "e2e-down"
VAR = "E2E_DOWN_S3_SECRET"
TOPOLOGY = """topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9530}
  prefill:
    - {host: tb1, devices: [6, 7], port: 8530}
  decode:
    - {host: tb2, devices: [6, 7], port: 8531}
"""
STATE = f"/var/lib/deployctl/{NAME}"


def holding(bed, host: str, secret: str) -> list[str]:
    """The deployment's env files and any file holding the secret under the host's /var/lib/deployctl."""
    env_files = bed.run_on(host, ["find", "/var/lib/deployctl", "-path", f"{STATE}/*", "-name", "*.env"],
                           check=False).stdout.split()
    with_secret = bed.run_on(host, ["grep", "-rl", "-F", "-e", secret, "/var/lib/deployctl"], check=False).stdout.split()
    return sorted(set(env_files + with_secret))


def test_down_removes_every_env_file_and_secret_from_every_host_and_keeps_the_history(bed, deployctl, monkeypatch):
    secret = bed.s3.secret_key  # a container that reads S3 itself gets the key as an `env:` secret
    monkeypatch.setenv(VAR, secret)
    path = deployctl.write(bed.spec_yaml(NAME, TOPOLOGY, hosts_used=["tb1", "tb2"],
                                         extra=MODEL + f"env: {{AWS_SECRET_ACCESS_KEY: '${{{VAR}}}'}}\n"))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        # the check below can see them: each host holds its containers' env files, with the secret
        assert holding(bed, "tb1", secret) == [f"{STATE}/env/{NAME}-prefill-0.env", f"{STATE}/env/{NAME}-scheduler-0.env"]
        assert holding(bed, "tb2", secret) == [f"{STATE}/env/{NAME}-decode-0.env"]
        code, doc = deployctl.json("status", path)
        assert code == 0 and doc["deployed"] is True

        code, out, err = deployctl("down", path, "--dry-run")  # the plan, as words; nothing removed
        assert code == 0 and f"$ rm -rf -- {STATE}/env {STATE}/ranktables" in out, err
        assert holding(bed, "tb2", secret) and len(container_ids(bed, "tb2", NAME)) == 1

        code, doc = deployctl.json("down", path, "--yes")
        assert code == 0, doc
        assert sorted(doc["removed"]) == [f"{NAME}-decode-0", f"{NAME}-prefill-0", f"{NAME}-scheduler-0"]
        assert {f["host"] for f in doc["files"]} == {"tb1", "tb2"}
        for host in bed.hosts:
            assert holding(bed, host.name, secret) == [], host.name
            assert container_ids(bed, host.name, NAME) == {}
        assert bed.run_on("tb2", ["ls", "-A", "/var/lib/deployctl"]).stdout.split().count(NAME) == 0
        kept = bed.run_on("tb1", ["ls", "-A", STATE]).stdout.split()
        assert "history.jsonl" in kept and not {"env", "ranktables"} & set(kept)
        history = [json.loads(line) for line in bed.run_on("tb1", ["cat", f"{STATE}/history.jsonl"]).stdout.splitlines()]
        assert [(h["action"], h["result"]) for h in history] == [("up", "ok"), ("down", "ok")]

        code, out, err = deployctl("down", path)  # converged: nothing to remove, so nothing to confirm
        assert code == 0 and f"{NAME}: no containers or files to remove" in out, err
        code, out, err = deployctl("status", path)
        assert code == 3 and f"{NAME}: not deployed" in out and "Traceback" not in err
        code, doc = deployctl.json("status", path)
        assert code == 3 and doc["deployed"] is False
        assert {i["state"] for i in doc["instances"]} == {"missing"}
    finally:
        deployctl("down", path, "--yes")
