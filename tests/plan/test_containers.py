"""The container of each instance: exact argv, devices, mounts, env, labels, digest."""

import textwrap

from deployctl.plan.containers import (
    MANAGER_DEVICES, RanktableFiles, container_digest, container_for, docker_run, env_file_content,
)
from deployctl.servers.ascendcloud import START_SERVERS
from deployctl.spec.load import load_spec_text

PD = textwrap.dedent("""\
    version: 1
    name: llama2-13b-pd
    hosts:
      node1: {address: 192.0.2.18}
    image: {name: deployctl/vllm-ascend:6.3.909}
    weights: {source: obs://models/llama2-13b/, dest: /mnt/weights/llama2-13b}
    model: {served_name: llama2-13b, max_model_len: 4096, max_num_seqs: 256, max_num_batched_tokens: 4096}
    env: {HF_TOKEN: "${TEST_HF_TOKEN}", LOG_LEVEL: info}
    topology:
      mode: disaggregated
      scheduler: {host: node1, port: 9000}
      prefill:
        - {host: node1, devices: [4, 5], port: 8088}
      decode:
        - {host: node1, devices: [6, 7], port: 8089, model: {max_num_seqs: 512}}
    """)


def spec(text=PD):
    return load_spec_text(text, environ={"TEST_HF_TOKEN": "hf_sekrit_value"})


def ranktables(s):
    names = {i.name: f"local_ranktable_192.0.2.18_{''.join(map(str, i.devices)) or 'host'}.json" for i in s.instances}
    contents = {"global_ranktable_merge.json": b'{"g": 1}', **{n: n.encode() for n in names.values()}}
    return RanktableFiles("global_ranktable_merge.json", names, contents)


def test_prefill_container_devices_mounts_env_and_command():
    s = spec()
    prefill = container_for(s, s.role("prefill")[0], ranktables(s))
    assert prefill.devices == ("/dev/davinci4", "/dev/davinci5") + MANAGER_DEVICES
    volumes = [m.volume() for m in prefill.mounts]
    assert "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro" in volumes
    assert "/var/log/npu/:/usr/slog" in volumes
    assert "/sys/fs/cgroup:/sys/fs/cgroup:ro" in volumes
    assert "/etc/hccn.conf:/etc/hccn.conf:ro" in volumes
    assert "/mnt/weights/llama2-13b:/mnt/weights/llama2-13b:ro" in volumes
    assert not any(m.target.startswith("/home/ma-user") for m in prefill.mounts)
    env = {e.name: e.value for e in prefill.env}
    assert env["NODE_PORTS"] == "8088,8089" and env["USE_OPENAI"] == "1"
    assert env["RANK_TABLE_FILE_PATH"].endswith("local_ranktable_192.0.2.18_45.json")
    assert env["GLOBAL_RANK_TABLE_FILE_PATH"] == "/var/lib/deployctl/llama2-13b-pd/ranktables/global_ranktable_merge.json"
    assert prefill.command[:2] == ("sh", START_SERVERS)
    assert prefill.command[2:] == (
        "--model", "/mnt/weights/llama2-13b", "--tensor-parallel-size", "2", "--max-model-len", "4096",
        "--max-num-seqs", "256", "--max-num-batched-tokens", "4096", "--host", "0.0.0.0", "--port", "8088",
        "--served-model-name", "llama2-13b")


def test_scheduler_gets_manager_devices_only_the_host_file_and_pd_tp():
    s = spec()
    scheduler = container_for(s, s.scheduler, ranktables(s))
    assert scheduler.devices == MANAGER_DEVICES
    env = {e.name: e.value for e in scheduler.env}
    assert env["RANK_TABLE_FILE_PATH"].endswith("_host.json")
    assert scheduler.command[scheduler.command.index("--tensor-parallel-size") + 1] == "2"


def test_decode_uses_its_own_max_num_seqs():
    s = spec()
    decode = container_for(s, s.role("decode")[0], ranktables(s))
    assert decode.command[decode.command.index("--max-num-seqs") + 1] == "512"


def test_secret_env_goes_to_a_0600_env_file_never_argv():
    s = spec()
    prefill = container_for(s, s.role("prefill")[0], ranktables(s))
    argv = docker_run(prefill, "d" * 64)
    assert not any("hf_sekrit_value" in word for word in argv)
    assert argv[argv.index("--env-file") + 1] == "/var/lib/deployctl/llama2-13b-pd/env/llama2-13b-pd-prefill-0.env"
    assert "LOG_LEVEL=info" in argv
    assert env_file_content(prefill) == b"HF_TOKEN=hf_sekrit_value\n"


def test_docker_run_starts_with_labels_and_host_network():
    s = spec()
    prefill = container_for(s, s.role("prefill")[0], ranktables(s))
    argv = docker_run(prefill, "abc")
    assert argv[:5] == ("docker", "run", "--detach", "--label", "deployctl.digest=abc")
    for label in ("deployctl.deployment=llama2-13b-pd", "deployctl.role=prefill",
                  "deployctl.instance=llama2-13b-pd-prefill-0"):
        assert label in argv
    assert "--net=host" in argv and argv[argv.index("--name") + 1] == "llama2-13b-pd-prefill-0"


def test_digest_changes_with_image_argv_and_ranktable_content():
    s = spec()
    prefill = container_for(s, s.role("prefill")[0], ranktables(s))
    base = container_digest(prefill, "sha256:1", "r1")
    assert base == container_digest(prefill, "sha256:1", "r1")
    assert base != container_digest(prefill, "sha256:2", "r1")
    assert base != container_digest(prefill, "sha256:1", "r2")
    other = spec(PD.replace("max_model_len: 4096", "max_model_len: 2048").replace("max_num_batched_tokens: 4096", "max_num_batched_tokens: 4096"))
    assert base != container_digest(container_for(other, other.role("prefill")[0], ranktables(other)), "sha256:1", "r1")


def test_secret_change_changes_digest_but_value_never_appears_in_it():
    s = spec()
    s2 = load_spec_text(PD, environ={"TEST_HF_TOKEN": "other"})
    c1 = container_for(s, s.role("prefill")[0], ranktables(s))
    c2 = container_for(s2, s2.role("prefill")[0], ranktables(s2))
    assert container_digest(c1, "i", "r") != container_digest(c2, "i", "r")


def test_the_server_command_overrides_the_image_entrypoint():
    s = spec()
    argv = docker_run(container_for(s, s.role("prefill")[0], ranktables(s)), "d")
    image_at = argv.index("deployctl/vllm-ascend:6.3.909")
    assert argv[image_at - 2:image_at] == ("--entrypoint", "sh")
    assert argv[image_at + 1] == START_SERVERS
