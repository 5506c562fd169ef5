"""Loading specs into the frozen model: examples, derived values, ${VAR} secrets, paths, errors raised."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployctl.errors import SpecError
from deployctl.core import Secret
from deployctl.spec.load import check_spec_text, load_spec, load_spec_text
from deployctl.spec.model import EnvVar, Host, SshSettings
from tests.spec.corpus import SPECS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((SPECS / "examples").glob("*.yaml"))
PLAYBOOKS = ["mixed-1host-910b.yaml", "pd-1host-910b.yaml", "disaggregated-2hosts-910b.yaml",
             "gpu-triton.yaml", "gpu-vllm.yaml"]

MIXED = """\
version: 1
name: demo
hosts:
  node1: {address: 10.200.0.11}
model: {served_name: demo-model, max_num_seqs: 256, extra_args: [--enforce-eager]}
topology:
  mode: mixed
  instances:
    - {host: node1, devices: [0, 1], port: 8080, model: {max_num_seqs: 64, extra_args: [--seed, "1"]}}
    - {host: node1, devices: [2, 3], port: 8081}
"""


def test_there_are_the_four_contract_examples():
    assert [p.name for p in EXAMPLES] == ["gpu-triton.yaml", "mixed-1host.yaml", "pd-1host.yaml", "pd-2hosts.yaml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_contract_examples_validate_as_they_are(path):
    spec = load_spec(path)
    assert spec.version == 1 and spec.instances


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_playbooks_validate_without_warnings(name):
    spec, errors, warnings = check_spec_text((ROOT / "playbooks" / name).read_text(), name, ROOT / "playbooks", {})
    assert [p.render() for p in errors + warnings] == []
    assert spec.name


def test_two_host_disaggregated_derived_values():
    spec = load_spec(SPECS / "examples" / "pd-2hosts.yaml")
    assert spec.mode == "disaggregated"
    assert [(i.name, i.role, i.index, i.host, i.devices, i.port, i.tp) for i in spec.instances] == [
        ("llama3-70b-pd-prefill-0", "prefill", 0, "node1", (0, 1, 2, 3), 8088, 4),
        ("llama3-70b-pd-prefill-1", "prefill", 1, "node1", (4, 5, 6, 7), 8090, 4),
        ("llama3-70b-pd-decode-0", "decode", 0, "node2", (0, 1, 2, 3), 8089, 4),
        ("llama3-70b-pd-decode-1", "decode", 1, "node2", (4, 5, 6, 7), 8091, 4),
        ("llama3-70b-pd-scheduler-0", "scheduler", 0, "node1", (), 9000, 4),  # scheduler TP = the P/D TP
    ]
    assert spec.node_ports == (8088, 8090, 8089, 8091)  # prefill ports, then decode ports
    assert [[i.name for i in wave] for wave in spec.start_order] == [
        ["llama3-70b-pd-prefill-0", "llama3-70b-pd-prefill-1", "llama3-70b-pd-decode-0", "llama3-70b-pd-decode-1"],
        ["llama3-70b-pd-scheduler-0"],
    ]
    assert spec.scheduler.path == ("topology", "scheduler")
    assert spec.instances[1].path == ("topology", "prefill", 1)
    assert spec.hosts == (
        Host("node1", "192.0.2.21", SshSettings(user="root", identity_file="~/.ssh/id_ed25519")),
        Host("node2", "192.0.2.22", SshSettings(user="root", identity_file="~/.ssh/id_ed25519")),
    )
    assert spec.requirements.free_disk_gb == 200 and spec.requirements.cards == 8
    assert spec.weights.source == "s3://models/llama3-70b/" and spec.weights.credentials == "env"
    assert spec.source == (SPECS / "examples" / "pd-2hosts.yaml").resolve()


def test_scheduler_port_defaults_to_9000_and_host_ssh_overrides_defaults():
    text = """\
version: 1
name: pd
ssh: {user: root, port: 2222}
hosts:
  a: {address: 10.200.0.11, user: ma-user}
model: {served_name: m}
topology:
  mode: disaggregated
  scheduler: {host: a}
  prefill: [{host: a, devices: [0], port: 8088}]
  decode: [{host: a, devices: [1], port: 8089}]
"""
    spec = load_spec_text(text, environ={})
    assert spec.scheduler.port == 9000 and spec.scheduler.tp == 1
    assert spec.hosts[0].ssh == SshSettings(user="ma-user", port=2222)
    assert spec.node_ports == (8088, 8089)


def test_mixed_effective_per_instance_values():
    spec = load_spec_text(MIXED, environ={})
    first, second = spec.instances
    assert (first.name, first.max_num_seqs, first.extra_args) == ("demo-mixed-0", 64, ("--enforce-eager", "--seed", "1"))
    assert (second.name, second.max_num_seqs, second.extra_args) == ("demo-mixed-1", 256, ("--enforce-eager",))
    assert first.max_num_batched_tokens is None and first.grpc_port is None
    assert [[i.name for i in wave] for wave in spec.start_order] == [["demo-mixed-0", "demo-mixed-1"]]
    assert spec.node_ports == () and spec.scheduler is None
    assert spec.platform == "ascend" and spec.server == "vllm" and spec.requirements.cards == 8


def test_cards_sets_the_device_range_not_a_fixed_eight():
    text = MIXED.replace("hosts:", "requirements: {cards: 16}\nhosts:").replace("[2, 3]", "[12, 13]")
    spec = load_spec_text(text, environ={})
    assert spec.instances[1].devices == (12, 13)


def test_triton_ports_default_to_port_plus_one_and_two():
    spec = load_spec(SPECS / "examples" / "gpu-triton.yaml")
    (instance,) = spec.instances
    assert (instance.port, instance.grpc_port, instance.metrics_port) == (8000, 8001, 8002)
    assert (spec.platform, spec.server) == ("gpu", "triton")


def test_env_values_from_variables_are_secrets_shown_as_the_reference():
    text = MIXED + 'env:\n  HF_TOKEN: ${DEPLOYCTL_T}\n  URL: "http://${DEPLOYCTL_H}:80"\n  PLAIN: x\n  FLAG: true\n  N: 3\n' \
                   '  LITERAL: $${NOT_A_REF}\n'
    spec = load_spec_text(text, environ={"DEPLOYCTL_T": "tok-123", "DEPLOYCTL_H": "10.200.0.9"})
    token, url, *plain = spec.env
    assert token == EnvVar("HF_TOKEN", Secret("tok-123"), "${DEPLOYCTL_T}") and token.is_secret
    assert token.value.reveal() == "tok-123" and "tok-123" not in repr(token)
    assert url.value.reveal() == "http://10.200.0.9:80" and url.display == "http://${DEPLOYCTL_H}:80"
    assert plain == [EnvVar("PLAIN", "x", "x"), EnvVar("FLAG", "true", "true"), EnvVar("N", "3", "3"),
                     EnvVar("LITERAL", "${NOT_A_REF}", "${NOT_A_REF}")]


def test_variables_resolve_outside_env_too_and_secrets_stay_out_of_the_digest():
    text = MIXED.replace("10.200.0.11", "\"${DEPLOYCTL_ADDR}\"") + "env:\n  HF_TOKEN: ${DEPLOYCTL_T}\n"
    one = load_spec_text(text, environ={"DEPLOYCTL_ADDR": "10.200.0.5", "DEPLOYCTL_T": "a"})
    two = load_spec_text(text, environ={"DEPLOYCTL_ADDR": "10.200.0.5", "DEPLOYCTL_T": "b"})
    other = load_spec_text(text, environ={"DEPLOYCTL_ADDR": "10.200.0.6", "DEPLOYCTL_T": "a"})
    assert one.hosts[0].address == "10.200.0.5"
    assert one.digest == two.digest != other.digest and len(one.digest) == 64


def test_environ_defaults_to_the_process_environment(monkeypatch):
    monkeypatch.setenv("DEPLOYCTL_TEST_ADDRESS", "10.200.0.77")
    spec = load_spec_text(MIXED.replace("10.200.0.11", "\"${DEPLOYCTL_TEST_ADDRESS}\""))
    assert spec.hosts[0].address == "10.200.0.77"


def test_relative_package_path_is_relative_to_the_spec_file(tmp_path):
    text = MIXED.replace("model:", "image: {name: i:1, build: {base: b:1, packages: ./pkg/Ascend.zip}}\n"
                                   "weights: {source: /srv/models/m, dest: /mnt/m}\nmodel:", 1)
    spec_file = tmp_path / "deploy" / "spec.yaml"
    spec_file.parent.mkdir()
    spec_file.write_text(text)
    spec = load_spec(spec_file, environ={})
    assert spec.image.build.packages == str(tmp_path / "deploy" / "pkg" / "Ascend.zip")
    assert spec.image.build.where == "each-host"
    assert spec.weights.source == "/srv/models/m" and spec.weights.dest == "/mnt/m"
    assert spec.state_dir == tmp_path / "deploy" / ".deployctl" / "demo"
    url = load_spec(SPECS / "examples" / "pd-1host.yaml")
    assert url.weights.source == "obs://models/llama2-13b/"


def test_image_and_weights_are_optional_for_validate():
    spec = load_spec_text(MIXED, environ={})
    assert spec.image.name is None and spec.image.build is None
    assert spec.weights.source is None and spec.weights.dest is None


def test_load_spec_raises_every_problem_with_warnings():
    path = SPECS / "many" / "schema-and-rule.yaml"
    with pytest.raises(SpecError) as raised:
        load_spec(path)
    assert [p.render() for p in raised.value.problems] == [
        f"{path}:10:50: topology.instances[0].devcies: unknown key 'devcies' — did you mean 'devices'?",
        f"{path}:11:31: topology.instances[1].devices[0]: 8 is not a device id (cards: 0-7)",
        f"{path}:11:34: topology.instances[1].devices[1]: 9 is not a device id (cards: 0-7)",
    ]
    assert raised.value.exit_status == 2
    assert raised.value.lines()[0] == "invalid spec: 3 errors"


def test_load_spec_text_raises_with_the_given_filename():
    with pytest.raises(SpecError) as raised:
        load_spec_text(MIXED.replace("version: 1", "version: 2"), filename="mine.yaml", environ={})
    assert [p.render() for p in raised.value.problems] == [
        "mine.yaml:1:10: version: unsupported version 2; supported versions: 1"]


def test_a_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(SpecError) as raised:
        load_spec(tmp_path / "nope.yaml")
    (problem,) = raised.value.problems
    assert problem.message == "cannot read the spec file: No such file or directory"
    assert problem.file == str(tmp_path / "nope.yaml")


def test_warnings_come_back_with_a_valid_spec():
    path = SPECS / "warnings" / "max-model-len-over-table.yaml"
    spec, errors, warnings = check_spec_text(path.read_text(), path.name, environ={})
    assert spec is not None and errors == []
    assert [(w.severity, w.dotted_path) for w in warnings] == [
        ("warning", "model.max_model_len"), ("warning", "topology.instances[0].grpc_port")]


def test_an_unquoted_variable_in_a_flow_mapping_gets_a_hint():
    _, errors, _ = check_spec_text(MIXED.replace("10.200.0.11", "${DEPLOYCTL_ADDR}"), environ={})
    (problem,) = errors
    assert problem.message.startswith("YAML syntax error") and problem.line == 4
    assert problem.hint == 'quote a value that holds ${VAR} inside { } or [ ]: "${VAR}"'


def test_unresolved_env_allow_forgives_unset_variables_in_env_values_only():
    text = MIXED.replace("10.200.0.11", "\"${DEPLOYCTL_ADDR}\"") + "env:\n  HF_TOKEN: ${DEPLOYCTL_T}\n  K: ${DEPLOYCTL_K}\n"
    with pytest.raises(SpecError) as refused:
        load_spec_text(text, environ={"DEPLOYCTL_ADDR": "10.200.0.5"})
    assert [p.message for p in refused.value.problems] == ["environment variable DEPLOYCTL_T is not set",
                                                           "environment variable DEPLOYCTL_K is not set"]
    spec = load_spec_text(text, environ={"DEPLOYCTL_ADDR": "10.200.0.5"}, unresolved_env="allow")
    assert spec.unresolved_env == ("HF_TOKEN", "K") and spec.hosts[0].address == "10.200.0.5"
    assert spec.digest == load_spec_text(text, environ={"DEPLOYCTL_ADDR": "10.200.0.5", "DEPLOYCTL_T": "t",
                                                        "DEPLOYCTL_K": "k"}).digest
    assert load_spec_text(text, environ={"DEPLOYCTL_ADDR": "1.2.3.4", "DEPLOYCTL_T": "t",
                                         "DEPLOYCTL_K": "k"}).unresolved_env == ()
    # an address is needed to connect: never forgiven
    with pytest.raises(SpecError) as address:
        load_spec_text(text, environ={}, unresolved_env="allow")
    assert [(p.dotted_path, p.message) for p in address.value.problems] == [
        ("hosts.node1.address", "environment variable DEPLOYCTL_ADDR is not set")]
