"""Every kind of spec message, exactly as a person reads it: each one quotes the offending value."""

from __future__ import annotations

import pytest

from deployctl.spec.load import check_spec_text

TEMPLATE = """\
version: 1
name: demo
{top}
hosts:
  node1: {{address: 10.200.0.11}}
model: {{served_name: demo-model{model}}}
topology:
  mode: mixed
  instances:
    - {{host: node1, devices: [0, 1], port: 8080{instance}}}
    - {{host: node1, devices: [2, 3], port: 8081}}
"""
ENVIRON = {"TOKEN": "hf_s3cr3t_token", "SOURCE": "ftp://mirror.example/m/", "LINES": "a\nB=1"}

# (top-level snippet, model snippet, instance snippet) -> (path, message) of the one error
CASES = {
    "type-string": (("requirements: {cards: eight}", "", ""),
                    ("requirements.cards", "'eight' should be an integer, not a string")),
    "type-float": (("", "", ", metrics_port: 8080.0"), ("topology.instances[0].metrics_port",
                                                         "8080.0 should be an integer, not a number")),
    "enum": (("", ", quantization: fp8", ""),
             ("model.quantization", "'fp8' is not one of null, awq, smoothquant, gptq, ascend, modelslim")),
    "enum-did-you-mean": (("platform: gpus", "", ""),
                          ("platform", "'gpus' is not one of ascend, gpu — did you mean 'gpu'?")),
    "enum-family": (("", ", family: llama9", ""), ("model.family", "'llama9' is not a known family — did you mean 'llama-7b'?")),
    "minimum": (("", ", max_num_seqs: 0", ""), ("model.max_num_seqs", "0 should be at least 1")),
    "exclusive-minimum": (("platform: gpu\nrequirements: {gpu_memory_gb: 0}", "", ""),
                          ("requirements.gpu_memory_gb", "0 should be more than 0")),
    "port-minimum": (("", "", ", grpc_port: 0"), ("topology.instances[0].grpc_port", "0 is not a port (1-65535)")),
    "port-maximum": (("ssh: {port: 70000}", "", ""), ("ssh.port", "70000 is not a port (1-65535)")),
    "pattern-credentials": (("weights: {credentials: keys}", "", ""),
                            ("weights.credentials", "'keys' should be env or profile:<name>")),
    "pattern-source": (("weights: {source: 'ftp://x/m/'}", "", ""),
                       ("weights.source", "'ftp://x/m/' is not s3://, obs:// or an absolute local path")),
    "pattern-dest": (("weights: {dest: m}", "", ""), ("weights.dest", "'m' is not an absolute path")),
    "pattern-packages": (("image: {build: {base: b, packages: 'http://x/p.zip'}}", "", ""),
                         ("image.build.packages", "'http://x/p.zip' is not a local path, s3:// or obs://")),
    "min-length": (("image: {name: ''}", "", ""), ("image.name", "'' should not be empty")),
    "unknown-key": (("", ", max_num_seq: 4", ""),
                    ("model.max_num_seq", "unknown key 'max_num_seq' — did you mean 'max_num_seqs'?")),
    "instance-model-key": (("", "", ", model: {max_model_len: 4}"),
                           ("topology.instances[0].model.max_model_len", "'max_model_len' cannot be set per "
                            "instance; an instance's model may set only max_num_seqs, max_num_batched_tokens, "
                            "extra_args")),
    "env-name": (("env: {'A-B': x}", "", ""), ("env.A-B", "'A-B' is not an environment variable name")),
    "env-name-newline": (('env: {"A\\nB": x}', "", ""),
                         ("env.A\\nB", "'A\\nB' is not an environment variable name")),
    "unknown-key-nul": (('"x\\0": 1', "", ""), ("x\\x00", "unknown key 'x\\x00'")),
    "env-control": (("env: {A: \"x\\ty\"}", "", ""),
                    ("env.A", "'x\\ty' contains a tab; control characters are not allowed in env values")),
    "env-secret-control": (("env: {A: '${LINES}'}", "", ""),
                           ("env.A", "the value of '${LINES}' contains a newline; control characters are not "
                                     "allowed in env values")),
    "reference-refused": (("", ", extra_args: [--api-key, '${TOKEN}']", ""),
                          ("model.extra_args[1]", "'${TOKEN}': a ${VAR} reference is not allowed here")),
    "reference-resolved-is-scrubbed": (("weights: {source: '${SOURCE}'}", "", ""),
                                       ("weights.source", "'${SOURCE}' is not s3://, obs:// or an absolute local "
                                                          "path")),
    "unset-variable": (("image: {name: '${DEPLOYCTL_UNSET_IMAGE}'}", "", ""),
                       ("image.name", "environment variable DEPLOYCTL_UNSET_IMAGE is not set")),
    "batched-tokens": (("", ", max_model_len: 4096, max_num_batched_tokens: 2048", ""),
                       ("model.max_num_batched_tokens", "max_num_batched_tokens 2048 is less than max_model_len 4096")),
    "kv-cache": (("", ", kv_cache_dtype: int8", ""),
                 ("model.kv_cache_dtype", "kv_cache_dtype int8 needs quantization_param_path")),
}
BASE = TEMPLATE.format(top="", model="", instance="")
# Cases that change the text around the template's three holes: the whole text, and the one error.
WHOLE = {
    "type": ("version: 1\nname: [demo]\nhosts: {n: {address: a}}\nmodel: {served_name: m}\ntopology: {mode: mixed, instances: [{host: n, devices: [0], port: 1}]}\n",
             ("name", '["demo"] should be a string, not a list')),
    "enum-version": (BASE.replace("version: 1", "version: 2"),
                     ("version", "unsupported version 2; supported versions: 1")),
    "device-minimum": (BASE.replace("[0, 1]", "[-1, 1]"),
                       ("topology.instances[0].devices[0]", "-1 is not a device id (cards: 0-7)")),
    "pattern-name": (BASE.replace("name: demo", "name: Demo_1"),
                     ("name", "'Demo_1' is not a valid deployment name: use 1 to 40 lowercase letters, digits "
                              "and '-'")),
    "min-properties": (BASE.replace("  node1: {address: 10.200.0.11}\n", "").replace("hosts:", "hosts: {}"),
                       ("hosts", "{} should not be empty")),
    "device-range": (BASE.replace("[2, 3]", "[2, 5]").replace("name: demo\n", "name: demo\nrequirements: {cards: 4}"),
                     ("topology.instances[1].devices[1]", "5 is not a device id (cards: 0-3)")),
    "device-count": (BASE.replace("[2, 3]", "[2, 3, 4]"),
                     ("topology.instances[1].devices",
                      "3 devices: an instance needs 1, 2, 4 or 8 (its TP size is its device count)")),
    "unknown-host": (BASE.replace("host: node1, devices: [2, 3]", "host: node2, devices: [2, 3]"),
                     ("topology.instances[1].host", "unknown host 'node2' — did you mean 'node1'?")),
    "device-used": (BASE.replace("[2, 3]", "[1, 3]"),
                    ("topology.instances[1].devices[0]", "NPU 1 on host node1 is already used by "
                                                         "topology.instances[0]")),
    "port-used": (BASE.replace("port: 8081", "port: 8080"),
                  ("topology.instances[1].port", "port 8080 on host node1 is already used by "
                                                 "topology.instances[0].port (line 10)")),
    "missing-key": (BASE.replace("served_name: demo-model", "max_num_seqs: 2"),
                    ("model.served_name", "missing required key 'served_name'")),
    "host-name": (BASE.replace("node1", "node/1"),
                  ("hosts.node/1", "'node/1' is not a valid host name: use 1 to 63 letters, digits, '.', '_' and "
                                   "'-', starting with a letter or digit")),
    "served-name": (BASE.replace("served_name: demo-model", "served_name: -rf"),
                    ("model.served_name", "'-rf' is not a valid served name: use up to 128 letters, digits, '.', "
                                          "'_', ':' and '-', starting with a letter or digit")),
}


def text_of(name: str) -> tuple[str, tuple[str, str]]:
    if name in WHOLE:
        text, expected = WHOLE[name]
        return text, expected
    (top, model, instance), expected = CASES[name]
    return TEMPLATE.format(top=top, model=model, instance=instance), expected


@pytest.mark.parametrize("name", sorted(set(CASES) | set(WHOLE)))
def test_message(name):
    text, expected = text_of(name)
    _, errors, _ = check_spec_text(text, environ=ENVIRON)
    assert [(p.dotted_path, p.message) for p in errors] == [expected], text


def test_no_message_prints_a_resolved_value():
    for name in sorted(set(CASES) | set(WHOLE)):
        text, _ = text_of(name)
        _, errors, warnings = check_spec_text(text, environ=ENVIRON)
        shown = " ".join(f"{p.message} {p.hint}" for p in errors + warnings)
        assert not any(value in shown or repr(value)[1:-1] in shown for value in ENVIRON.values()), name
