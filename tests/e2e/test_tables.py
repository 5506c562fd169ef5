"""`status` and `doctor` through a pipe at 80 columns (a CI log, `| less`): every value in full, no "…"."""

from __future__ import annotations

import json
import re

from deployctl.plan.containers import LABEL_DEPLOYMENT, LABEL_INSTANCE
from tests.e2e.conftest import MODEL
from tests.test_ui import assert_in_full, piped

NAME = "e2e-tables-a-name-of-forty-characters-xx"
REQUIREMENTS = "requirements: {driver: '23.0.6', cards: 8, npu_memory_gb: 64, ip_forward: true, free_disk_gb: 1}\n"
TOPOLOGY = ("topology:\n  mode: mixed\n  instances:\n"
            "    - {host: tb1, devices: [0, 1, 2, 3], port: 58480}\n"
            "    - {host: tb2, devices: [4, 5, 6, 7], port: 58481}\n")


def test_status_and_doctor_through_a_pipe_print_every_value_in_full(bed, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(bed.spec_yaml(NAME, TOPOLOGY, hosts_used=["tb1", "tb2"], extra=MODEL + REQUIREMENTS))
    # one container of the deployment exists (status prints its table; with none it says "not deployed")
    first = f"{NAME}-mixed-0"
    bed.docker_on("tb1", "run", "-d", "--name", first, "--label", f"{LABEL_DEPLOYMENT}={NAME}",
                  "--label", f"{LABEL_INSTANCE}={first}", bed.base_image, "sleep", "600")
    try:
        status = json.loads(piped("status", str(spec), "--output", "json").stdout)
        table = piped("status", str(spec))
    finally:
        bed.docker_on("tb1", "rm", "-f", first)
    assert table.returncode == 0, table.stderr
    rows = status["instances"]
    assert [row["name"] for row in rows] == [f"{NAME}-mixed-0", f"{NAME}-mixed-1"]
    assert_in_full(table.stdout, [value for row in rows for value in (
        row["name"], row["role"], row["host"], ",".join(map(str, row["devices"])), row["port"], row["state"])])

    doctor = json.loads(piped("doctor", str(spec), "--output", "json").stdout)
    table = piped("doctor", str(spec))
    assert table.returncode == 0, table.stderr
    checks = [check for host in doctor["hosts"] for check in host["checks"]]
    assert len(checks) > 10
    # Free disk is read anew by each run, and the machine's other work writes between the two runs: its figure
    # is compared up to its first digit (the table must still show it whole, unit and mount point included).
    def steady(check: dict) -> str:
        return re.sub(r"^\d+(\.\d+)? GB", "", check["observed"]) if check["name"] == "disk" else check["observed"]

    assert_in_full(table.stdout, [value for check in checks for value in (check["name"], steady(check))])
    assert len(re.findall(r"\d+(\.\d+)? GB free on /srv", table.stdout)) == 2
