"""A DP group's `${VAR}` secrets reach its containers as the spec's do: through the 0600 env file, never argv;
and a name both the spec and a group set is the group's, once."""

from __future__ import annotations

from deployctl.core import Secret
from deployctl.plan.containers import container_for, env_file_content
from deployctl.plan.up import plan_up
from deployctl.servers.vllm_ascend.upstream import host_networks
from deployctl.spec.load import load_spec_text
from tests.plan.test_upstream import argv_of, env_of, facts
from tests.spec.test_upstream_build import QWEN3

GROUP_SECRET = "group-secret-0123456789"
SPEC_SECRET = "spec-secret-9876543210"
TEXT = (QWEN3 % "internal").replace(
    "env: {HCCL_BUFFSIZE: 1024}", 'env: {HCCL_BUFFSIZE: 1024, MOONCAKE_TOKEN: "${G}", SHARED: from-group}'
) + 'env: {HF_TOKEN: "${S}", SHARED: from-spec, OMP_NUM_THREADS: 4}\n'
ENVIRON = {"G": GROUP_SECRET, "S": SPEC_SECRET}


def test_a_group_secret_goes_through_the_0600_env_file_and_never_argv():
    spec = load_spec_text(TEXT, environ=ENVIRON)
    plan = plan_up(spec, facts(spec))
    prefill = spec.instances[0].name
    argv = argv_of(plan, prefill)
    assert not any(GROUP_SECRET in word or SPEC_SECRET in word for step in plan.steps for command in step.commands
                   for word in command.argv)
    assert "MOONCAKE_TOKEN" not in env_of(argv) and "HF_TOKEN" not in env_of(argv)
    env_file = argv[argv.index("--env-file") + 1]
    (put,) = [p for step in plan.steps for p in step.puts if p.path == env_file]
    assert put.mode == 0o600 and isinstance(put.content, Secret)
    lines = put.content.reveal().decode().splitlines()
    assert sorted(lines) == sorted([f"HF_TOKEN={SPEC_SECRET}", f"MOONCAKE_TOKEN={GROUP_SECRET}"])


def test_a_group_without_secrets_gets_only_the_spec_secrets():
    spec = load_spec_text(TEXT, environ=ENVIRON)
    networks = host_networks(spec, facts(spec))
    decode = next(i for i in spec.instances if i.role == "decode")
    container = container_for(spec, decode, None, networks)
    assert env_file_content(container) == f"HF_TOKEN={SPEC_SECRET}\n".encode()


def test_a_name_set_by_the_spec_and_a_group_is_the_groups_once():
    spec = load_spec_text(TEXT, environ=ENVIRON)
    networks = host_networks(spec, facts(spec))
    prefill, decode = spec.instances[0], next(i for i in spec.instances if i.role == "decode")
    prefill_env = [(e.name, e.value) for e in container_for(spec, prefill, None, networks).env]
    decode_env = [(e.name, e.value) for e in container_for(spec, decode, None, networks).env]
    assert [v for n, v in prefill_env if n == "SHARED"] == ["from-group"]
    assert [v for n, v in decode_env if n == "SHARED"] == ["from-spec"]
    assert ("OMP_NUM_THREADS", "4") in prefill_env and ("OMP_NUM_THREADS", "4") in decode_env
