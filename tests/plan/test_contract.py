"""The in-container contract: the step each new Ascend worker gets, and the script itself, run here with sh on
a directory of fake device nodes (the same words `docker exec` passes)."""

from __future__ import annotations

import hashlib
import subprocess

from deployctl.plan.containers import container_for
from deployctl.plan.contract import CONTRACT_SCRIPT, contract_step
from deployctl.servers.vllm_ascend.upstream import host_networks
from deployctl.spec.load import load_spec_text
from tests.plan.test_upstream import facts
from tests.spec.test_upstream_build import QWEN3


def test_a_vllm_ascend_rank_is_checked_for_its_devices_files_env_and_nic():
    spec = load_spec_text(QWEN3 % "external")
    networks = host_networks(spec, facts(spec))
    rank5 = next(i for i in spec.instances if i.name == "qwen3-decode0-r5")
    step = contract_step(container_for(spec, rank5, None, networks))
    argv = step.commands[0].argv
    assert argv[:3] == ("docker", "exec", "qwen3-decode0-r5") and argv[7:9] == ("/dev", "4,5,6,7")
    items = argv[9:]
    assert "f:/etc/hccn.conf" in items and "d:/mnt/weights/Qwen3-235B-A22B" in items
    assert "e:HCCL_IF_IP=10.200.0.13" in items
    # what the process sees is what the container mounts (the device listing), never the variable
    assert not any("ASCEND_RT_VISIBLE_DEVICES" in item for item in items)
    assert "n:enp63s0f0" in items and "e:HCCL_SOCKET_IFNAME=enp63s0f0" in items
    proxy = next(i for i in spec.instances if i.role == "proxy")
    assert contract_step(container_for(spec, proxy, None, networks)) is None
    own = load_spec_text((QWEN3 % "external").replace(
        "tp: 4\n", "tp: 4\n      env: {ASCEND_RT_VISIBLE_DEVICES: '0,1,2,3'}\n"))
    rank5 = next(i for i in own.instances if i.name == "qwen3-decode0-r5")
    items = contract_step(container_for(own, rank5, None, host_networks(own, facts(own)))).commands[0].argv[9:]
    assert not any("ASCEND_RT_VISIBLE_DEVICES" in item for item in items)  # a user's value: validate lints it


def run(tmp_path, want, *items, env=None, devices=(0, 1)):
    for n in devices:
        (tmp_path / f"davinci{n}").write_text("")
    (tmp_path / "davinci_manager").write_text("")
    result = subprocess.run(["sh", "-c", CONTRACT_SCRIPT, "sh", str(tmp_path), want, *items],
                            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **(env or {})})
    return result.returncode, result.stdout.splitlines()


def test_the_script_passes_what_matches_and_names_each_item_that_does_not(tmp_path):
    hccn = tmp_path / "hccn.conf"
    hccn.write_text("address_0=10.0.0.1\n")
    env = {"ASCEND_RT_VISIBLE_DEVICES": "0,1", "HCCL_IF_IP": "10.200.0.11"}
    assert run(tmp_path, "0,1", f"f:{hccn}", f"d:{tmp_path}", "e:ASCEND_RT_VISIBLE_DEVICES=0,1", "n:lo",
               env=env) == (0, [])
    code, said = run(tmp_path, "0,1,2", "f:/etc/hccn.conf.missing", f"f:{tmp_path}", "e:HCCL_IF_IP=10.200.0.12",
                     "e:ASCEND_RT_VISIBLE_DEVICES=0,1,2", "n:enp99s0f0", env=env)
    assert code == 1 and said == [
        "devices: expected 0,1,2, found 0,1", "file /etc/hccn.conf.missing: expected a readable file, found missing",
        f"file {tmp_path}: expected a readable file, found a directory",
        "env HCCL_IF_IP: expected 10.200.0.12, found 10.200.0.11",
        "env ASCEND_RT_VISIBLE_DEVICES: expected 0,1,2, found 0,1",
        "interface enp99s0f0: expected present, found missing"]


def test_an_ascendcloud_pd_worker_is_checked_for_the_ranktables_content_as_planned():
    from tests.plan.test_containers import ranktables, spec as pd_spec

    s = pd_spec()
    rts = ranktables(s)
    prefill = s.role("prefill")[0]
    items = contract_step(container_for(s, prefill, rts), rts).commands[0].argv[9:]
    directory = f"{s.remote_state_dir}/ranktables"
    assert f"s:{directory}/global_ranktable_merge.json={sha(GLOBAL)}" in items
    assert "e:NODE_PORTS=8088,8089" in items and "f:/etc/hccn.conf" in items
    assert contract_step(container_for(s, s.scheduler, rts), rts) is None  # no NPUs: nothing to check inside


def test_the_script_compares_a_files_content_with_the_planned_digest(tmp_path):
    table = tmp_path / "global_ranktable_merge.json"
    table.write_bytes(GLOBAL)
    planned = sha(GLOBAL)
    assert run(tmp_path, "0,1", f"s:{table}={planned}") == (0, [])
    table.write_bytes(CHANGED)
    code, said = run(tmp_path, "0,1", f"s:{table}={planned}", f"s:{tmp_path}/gone.json={planned}")
    assert code == 1 and said == [
        f"file {table}: expected sha256 {planned} (as planned), found {sha(CHANGED)}",
        f"file {tmp_path}/gone.json: expected sha256 {planned} (as planned), found unreadable"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


GLOBAL, CHANGED = b'{"g": 1}', b'{"g": 2}'  # tests.plan.test_containers' global ranktable, and another
