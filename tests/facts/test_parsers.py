"""Every vendor output sample under tests/fixtures/formats/ (ranktables aside) against its facts.json.

Add a case by adding a folder; the command in cmd.txt picks the parser, `FACTS` turns its result into
the plain keys facts.json uses. Keys that need more than the text are checked in tests/doctor/test_checks.py."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from deployctl.errors import FactParseError
from deployctl.facts import docker, files, hccn_tool, npu_smi, nvidia_smi, system
from deployctl.ranktable import host_address

FORMATS = Path(__file__).parent.parent / "fixtures" / "formats"
CASES = sorted(p for p in FORMATS.glob("*/*") if p.is_dir() and p.parent.name != "ranktable")
# keys about the sample itself, or needing more than the text (the doctor checks read those)
NOT_PARSED = {"command", "ok", "note", "path", "layout", "likely_causes", "meets_driver_23_0_6"}


def _device(cmd: str) -> int:
    return int(re.search(r"-i (\d+)", cmd).group(1))


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _npu_info(info, cmd):
    if info.error:
        return {"error": info.error, "dcmi_ret": info.dcmi_ret, "cards": [], "card_count": info.card_count}
    return {
        "npu_smi_version": info.npu_smi_version, "driver_version": info.driver_version,
        "card_count": info.card_count, "npu_ids": list(info.npu_ids), "cards": _plain(info.chips),
        "hbm_total_mb_per_card": info.hbm_total_mb_per_card, "all_healthy": not info.unhealthy,
        "unhealthy": [{"npu_id": c.npu_id, "health": c.health} for c in info.unhealthy],
        "busy_npu_ids": list(info.busy_npu_ids), "free_npu_ids": list(info.free_npu_ids),
        "trailing_warning": info.trailing_warning,
    }


def _npu_count(count, cmd):
    return {"total_count": count.total_count, "npu_ids": list(count.npu_ids),
            "chip_count_per_npu": {str(i): n for i, n in zip(count.npu_ids, count.chip_counts)}}


def _gpus(gpus, cmd):
    out = {"gpus": _plain(gpus), "gpu_count": len(gpus)}
    if gpus and gpus[0].driver_version:
        out["driver_version"] = gpus[0].driver_version
    return out


def _query_fields(cmd: str):
    if "noheader" not in cmd:
        return None
    return re.search(r"--query-[a-z-]+=(\S+)", cmd).group(1).split(",")


def _hccn_conf(conf, cmd):
    return {"devices": {str(d.device_id): _plain(d) for d in conf.devices}}


def _containers_ps(found, cmd):
    return {"containers": [dict(_plain(c), labels=dict(c.labels)) for c in found]}


def _containers_inspect(found, cmd):
    return {"containers": [dict(_plain(c), deployment=c.label("deployctl.deployment")) for c in found]}


# (pattern on cmd.txt, parser taking (stdout, cmd), result -> facts keys)
FACTS = [
    (r"^npu-smi info$", npu_smi.parse_npu_smi_info, _npu_info),
    (r"^npu-smi info -l$", npu_smi.parse_npu_smi_count, _npu_count),
    (r"^npu-smi info -t board -i \d+$", npu_smi.parse_npu_smi_board, lambda b, c: _plain(b)),
    (r"^cat /usr/local/Ascend/driver/version.info$", files.parse_version_info,
     lambda v, c: {"driver_version": v.version, "package_version": v.package_version,
                   "compatible_firmware_range": list(v.compatible_firmware_range)}),
    (r"^cat /etc/hccn.conf$", files.parse_hccn_conf, _hccn_conf),
    (r"^hccn_tool -i \d+ -ip -g$", hccn_tool.parse_hccn_ip, lambda v, c: dict(_plain(v), device_id=_device(c))),
    (r"^hccn_tool -i \d+ -link -g$", hccn_tool.parse_hccn_link,
     lambda v, c: {"link_status": v.status, "device_id": _device(c)}),
    (r"^hccn_tool -i \d+ -tls -g$", hccn_tool.parse_hccn_tls,
     lambda v, c: {"device_id": v.device_id, "tls_enabled": v.enabled, "tls_preconfigured": v.preconfigured,
                   "tls_alarm_days": v.alarm_days}),
    (r"^hccn_tool -i \d+ -ping -g address", hccn_tool.parse_hccn_ping,
     lambda v, c: dict(_plain(v), reachable=v.reachable)),
    (r"^sysctl -n net.ipv4.ip_forward$", system.parse_sysctl_value, lambda v, c: {"ip_forward": v}),
    (r"^df -Pk ", system.parse_df, lambda v, c: _plain(v)),
    (r"^uname -m$", system.parse_uname_machine, lambda v, c: {"arch": v}),
    (r"^cat /etc/os-release$", system.parse_os_release,
     lambda v, c: {"id": v.id, "id_like": list(v.id_like), "version_id": v.version_id, "pretty_name": v.pretty_name,
                   "family": v.family}),
    (r"^docker version ", docker.parse_docker_version,
     lambda v, c: {"client_version": v.client, "server_version": v.server}),
    (r"^docker info ", docker.parse_docker_info, lambda v, c: dict(_plain(v), runtimes=list(v.runtimes))),
    (r"^docker ps ", docker.parse_docker_ps, _containers_ps),
    (r"^docker inspect ", docker.parse_docker_inspect, _containers_inspect),
    (r"^ip -4 -o addr show$", lambda t, c: host_address.parse_ip_addr(t),
     lambda v, c: {"addresses": [_plain(a) for a in v],
                   "interface_of": {a.address: host_address.interface_carrying(v, a.address)
                                    for a in v if a.scope == "global"}}),
    (r"^nvidia-smi --query-gpu=", lambda t, c: nvidia_smi.parse_nvidia_smi_query_gpu(t, _query_fields(c)), _gpus),
    (r"^nvidia-smi --query-compute-apps=",
     lambda t, c: nvidia_smi.parse_nvidia_smi_compute_apps(t, _query_fields(c)), lambda v, c: {"processes": _plain(v)}),
]

# vendor samples of outputs deployctl never reads (the test bed's fakes render some of them): no parser
NOT_READ = [r"^npu-smi info -m$", r"^npu-smi info -t (health|memory) ", r"^cat /etc/ascend_install.info$",
            r"ascend_toolkit_install.info$", r"version.cfg$", r"^hccn_tool -i \d+ -(net_health|netdetect) -g$",
            r"^sysctl (-p \| grep )?net.ipv4.ip_forward$", r"^docker -v$", r"^nvidia-smi -L$",
            r"^nvidia-smi( -i \d+)?$"]
PARSED = [case for case in CASES if not any(re.search(p, (case / "cmd.txt").read_text().strip()) for p in NOT_READ)]


def _parser_for(cmd: str):
    found = [(parse, to_facts) for pattern, parse, to_facts in FACTS if re.search(pattern, cmd)]
    assert len(found) == 1, f"{cmd!r} matches {len(found)} parsers"
    parse, to_facts = found[0]
    takes_cmd = parse.__name__ == "<lambda>"
    return (lambda text: parse(text, cmd)) if takes_cmd else parse, to_facts


def _project(actual, expected):
    """`actual` cut down to the keys `expected` names (recursively), so extra parser fields do not matter."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return actual
        return {k: _project(actual.get(k, "<not produced>"), v) for k, v in expected.items()}
    if isinstance(expected, list) and isinstance(actual, list) and len(actual) == len(expected):
        return [_project(a, e) for a, e in zip(actual, expected)]
    return actual


@pytest.mark.parametrize("case", PARSED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_case(case: Path):
    cmd = (case / "cmd.txt").read_text().strip()
    stdout = (case / "stdout.txt").read_text() if (case / "stdout.txt").exists() else ""
    stderr = (case / "stderr.txt").read_text() if (case / "stderr.txt").exists() else ""
    facts = json.loads((case / "facts.json").read_text())
    parse, to_facts = _parser_for(cmd)
    try:
        result = parse(stdout)
    except FactParseError as error:
        assert facts.get("ok") is False, f"parser refused a good sample: {error}"
        first = next((line.strip() for line in stdout.splitlines() if line.strip()), "")
        assert error.line.strip() == first
        assert cmd.split()[0].split("/")[-1] in error.tool
        if "error" in facts:
            assert facts["error"] in stdout + stderr
        return
    expected = {k: v for k, v in facts.items() if k not in NOT_PARSED}
    produced = to_facts(result, cmd)
    if "error" in expected and "error" not in produced:
        # the tool's complaint is on stderr (docker with no daemon): gather keeps it, the parser cannot
        assert stderr.strip() == expected.pop("error")
    assert _project(produced, expected) == expected


def test_every_command_has_exactly_one_parser():
    for case in PARSED:
        _parser_for((case / "cmd.txt").read_text().strip())
    for case in set(CASES) - set(PARSED):
        cmd = (case / "cmd.txt").read_text().strip()
        assert not [p for p, *_ in FACTS if re.search(p, cmd)], f"{cmd!r} is read after all: take it out of NOT_READ"
