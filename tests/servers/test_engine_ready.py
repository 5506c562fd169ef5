"""VLLM_ENGINE_READY_TIMEOUT_S reaches every vLLM server container and covers `up`'s start-up budget: vLLM's own
default (600 s, vLLM 0.33.0 vllm/envs.py:813-815) would end a large model's start long before `up` gives up."""

from __future__ import annotations

from pathlib import Path

from deployctl.plan.containers import container_for
from deployctl.servers.vllm_ascend.upstream import host_networks
from deployctl.spec.load import load_spec_text
from deployctl.spec.startup import startup_budget
from tests.plan.test_upstream import facts

ROOT = Path(__file__).resolve().parents[2]
NAME = "VLLM_ENGINE_READY_TIMEOUT_S"

GPU = """version: 1
name: gpu
platform: gpu
hosts: {g1: {address: 192.0.2.41}}
image: {name: "vllm/vllm-openai:v0.33.0"}
weights: {source: s3://models/Llama-3.1-70B/, dest: /mnt/weights/Llama-3.1-70B}
model: {served_name: llama}
ENV
topology:
  mode: mixed
  instances:
    - {host: g1, devices: [0, 1, 2, 3], port: 8000}
"""


def env(container) -> dict:
    return {var.name: var.display for var in container.env}


def test_every_rank_of_the_235b_playbook_waits_for_its_engine_as_long_as_up_waits_for_it():
    # the playbook with the test hosts' addresses for its documentation ones (192.0.2.31-33)
    text = (ROOT / "playbooks" / "vllm-ascend-pd-qwen3.yaml").read_text().replace("192.0.2.3", "10.200.0.1")
    spec = load_spec_text(text, "vllm-ascend-pd-qwen3.yaml", ROOT / "playbooks", {})
    budget = startup_budget(spec).seconds
    assert budget == 1540  # 600 s + 2 s a GB of about 470 GB (spec/startup.py): past vLLM's 600 s
    networks = host_networks(spec, facts(spec))
    servers = [container_for(spec, i, None, networks) for i in spec.instances if i.role != "proxy"]
    assert len(servers) == 10
    for container in servers:
        assert int(env(container)[NAME]) >= budget, container.name
    proxy = next(container_for(spec, i, None, networks) for i in spec.instances if i.role == "proxy")
    assert NAME not in env(proxy)  # the proxy runs no engine


def test_a_gpu_vllm_server_gets_it_from_health_startup_timeout_and_a_written_value_stays_the_users():
    spec = load_spec_text("health: {startup_timeout: 3600}\n" + GPU.replace("ENV\n", ""))
    (container,) = [container_for(spec, i) for i in spec.instances]
    assert env(container)[NAME] == "3600"
    spec = load_spec_text(GPU.replace("ENV", "env: {VLLM_ENGINE_READY_TIMEOUT_S: 7200}"))
    (container,) = [container_for(spec, i) for i in spec.instances]
    assert [var.display for var in container.env if var.name == NAME] == ["7200"]
