"""`address: local` in a disaggregated spec (issue 17 item 4): the ranktable's server_ip is an address bound on
this machine, never the word `local` resolved as a hostname; whatever fails says so without a traceback."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deployctl.errors import HostError
from deployctl.gather import server_ip
from deployctl.spec.model import Host

PLAYBOOK = Path(__file__).parent.parent.parent / "playbooks" / "pd-1host-910b.yaml"
GLOBAL = Path(__file__).parent.parent / "fixtures" / "formats" / "ranktable" / "pd-1host-global" / "stdout.txt"


def deployctl(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deployctl", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


@pytest.fixture
def local_spec(tmp_path) -> Path:
    text = PLAYBOOK.read_text().replace("node1: {address: 192.0.2.18}", "node1: {address: local}")
    assert "address: local" in text
    path = tmp_path / "local.yaml"
    path.write_text(text)
    return path


def _bindable(address: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def test_local_server_ip_is_an_address_bound_here(bound_address):
    address = server_ip(Host("node1", "local"))
    assert address == bound_address and _bindable(address) and not address.startswith("127.")


def test_an_unresolvable_name_is_a_host_error_naming_host_and_address():
    with pytest.raises(HostError) as caught:
        server_ip(Host("node1", "no-such-host.invalid"))
    assert caught.value.message.startswith(
        "node1 (no-such-host.invalid): cannot resolve 'no-such-host.invalid' to an IPv4 address: ")
    with pytest.raises(HostError, match=r"node1 \(a\.\.b\): cannot resolve 'a\.\.b' to an IPv4 address: .*label"):
        server_ip(Host("node1", "a..b"))


@pytest.mark.parametrize("command", [("ranktable", "gen"), ("plan",)])
def test_gen_and_plan_on_a_machine_without_npus_name_what_is_missing(command, local_spec, tmp_path):
    if shutil.which("hccn_tool") or Path("/etc/hccn.conf").exists():
        pytest.skip("this machine has hccn_tool or /etc/hccn.conf: the NPU path is tested on the test bed")
    result = deployctl(*command, local_spec, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: node1: NPU 4: no device IP: hccn_tool is not installed")
    assert "Traceback" not in result.stderr and "gaierror" not in result.stderr


def test_validate_against_a_local_spec_compares_with_this_machines_address(bound_address, local_spec, tmp_path):
    # before: socket.gaierror resolving the word `local`; now the file's 192.0.2.18 is simply not this host
    result = deployctl("ranktable", "validate", GLOBAL, "--against-hosts", local_spec, "-o", "json", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    errors = json.loads(result.stdout)["files"][0]["errors"]
    assert errors[0] == {"json_path": "server_group_list[1].server_list[0].device[0].device_ip",
                         "message": "server 192.0.2.18 is not a host of llama2-13b-pd", "rule": "against-hosts"}
    assert "Traceback" not in result.stderr


def test_local_without_the_ip_tool_is_a_clear_error(local_spec, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = deployctl("ranktable", "validate", GLOBAL, "--against-hosts", local_spec, cwd=tmp_path,
                       env={"PATH": str(empty), "HOME": str(tmp_path)})
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[:2] == [
        "error: node1: cannot tell this host's address: `ip -4 -o addr show` exited 127: ip: command not found",
        "  hint: write the host's address in the spec instead of `local`"]
