"""vllm-ascend host tuning on the test bed: a fresh server's swappiness, numa balancing and CPU governor WARN,
`doctor --fix` sets them now and for every boot, the next doctor passes; this machine's own values never move."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_vllm_ascend import MIXED_ONE_HOST, spec
from tests.testbed.tuning import read_tuning

HOST = "tb4"


def tuning_checks(doc):
    (report,) = doc["hosts"]
    return {c["name"]: (c["status"], c["observed"]) for c in report["checks"]
            if c["name"] in ("swappiness", "numa_balancing", "cpu_governor")}


def test_fresh_host_warns_fix_persists_and_the_real_machine_is_untouched(bed, deployctl):
    real = {p: Path(p).read_text() for p in ("/proc/sys/vm/swappiness", "/proc/sys/kernel/numa_balancing")}
    path = deployctl.write(spec(bed, "e2e-va-tune", MIXED_ONE_HOST.replace("tb1", HOST), [HOST], cards=8))
    bed.set_tuning(HOST, swappiness=60, numa_balancing=1, governors=("ondemand", "ondemand", "performance"))
    try:
        code, doc = deployctl.json("doctor", path)
        assert code == 0, doc  # WARNs do not fail the doctor
        assert tuning_checks(doc) == {"swappiness": ("WARN", "60"), "numa_balancing": ("WARN", "1"),
                                      "cpu_governor": ("WARN", "ondemand on 2 CPUs, performance on 1 CPU")}

        code, doc = deployctl.json("doctor", path, "--fix")
        assert code == 0, doc
        fixes = {f["check"]: f for f in doc["fixes"]}
        assert set(fixes) == {"swappiness, numa_balancing", "cpu_governor"} and not any(
            "error" in f for f in fixes.values())
        assert fixes["swappiness, numa_balancing"]["actions"][0] == "sysctl -w vm.swappiness=0 kernel.numa_balancing=0"
        assert "/etc/sysctl.d/zz-deployctl-tuning.conf" in fixes["swappiness, numa_balancing"]["files"]
        assert tuning_checks(doc) == {"swappiness": ("PASS", "0"), "numa_balancing": ("PASS", "0"),
                                      "cpu_governor": ("PASS", "performance on 3 CPUs")}
        assert read_tuning(bed, HOST) == {"swappiness": "0", "numa_balancing": "0", "governors": ["performance"] * 3}

        persisted = bed.run_on(HOST, ["cat", "/etc/sysctl.d/zz-deployctl-tuning.conf"]).stdout
        assert "vm.swappiness = 0\n" in persisted and "kernel.numa_balancing = 0\n" in persisted
        unit = bed.run_on(HOST, ["cat", "/etc/systemd/system/multi-user.target.wants/"
                                        "deployctl-cpu-governor.service"]).stdout
        assert "Type=oneshot" in unit and "echo performance" in unit and "WantedBy=multi-user.target" in unit

        code, doc = deployctl.json("doctor", path, "--fix")  # a second fix has nothing to do
        assert code == 0 and doc["fixes"] == []
    finally:
        bed.set_tuning(HOST, governors=())
        bed.run_on(HOST, ["rm", "-f", "/etc/sysctl.d/zz-deployctl-tuning.conf",
                          "/etc/systemd/system/deployctl-cpu-governor.service",
                          "/etc/systemd/system/multi-user.target.wants/deployctl-cpu-governor.service"])
    assert {p: Path(p).read_text() for p in real} == real  # only the host's own files changed
