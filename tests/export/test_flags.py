"""Every export flag that becomes a Kubernetes name, path or value is held to Kubernetes' own rule: exit 2, one
line per bad flag naming it, its value and the rule, and nothing written."""

from __future__ import annotations

import json
import re

import pytest

from deployctl.cli import main
from deployctl.export import k8s_names
from deployctl.export.flags import bad_flags
from deployctl.export.options import ExportOptions
from deployctl.spec.show import quoted
from tests.export.cases import ROOT

SPEC = str(ROOT / "playbooks/vllm-ascend-mixed-ep-1host.yaml")

# (flag, a value Kubernetes, the kernel or Docker would refuse, a word of the rule)
BAD = [
    ("--weights-pvc", "../x", "DNS-1123 subdomain"),
    ("--weights-pvc", "Models", "DNS-1123 subdomain"),
    ("--weights-pvc", "models_7b", "DNS-1123 subdomain"),
    ("--weights-pvc", "-models", "DNS-1123 subdomain"),
    ("--weights-pvc", "models.", "DNS-1123 subdomain"),
    ("--weights-pvc", "a" * 254, "253"),
    ("--weights-pvc", "", "DNS-1123 subdomain"),
    ("--namespace", "Kube-System", "DNS-1123 label"),
    ("--namespace", "kube.system", "DNS-1123 label"),
    ("--namespace", "a" * 64, "63"),
    ("--namespace", "serving-", "DNS-1123 label"),
    ("--namespace", "", "DNS-1123 label"),
    ("--namespace", "ns\nkind: Secret", "DNS-1123 label"),
    ("--secret", "My_Tokens", "DNS-1123 subdomain"),
    ("--secret", "tokens/x", "DNS-1123 subdomain"),
    ("--secret", " tokens", "DNS-1123 subdomain"),
    ("--nic", "", "1 to 15 bytes"),
    ("--nic", "a-very-long-nic0", "1 to 15 bytes"),
    ("--nic", "eth0:1", "':'"),
    ("--nic", "eth/0", "'/'"),
    ("--nic", "eth 0", "whitespace"),
    ("--nic", "eth0\n", "whitespace"),
    ("--nic", "..", "'..'"),
    ("--weights-hostpath", "data/models", "absolute"),
    ("--weights-hostpath", "", "absolute"),
    ("--weights-hostpath", "/data/../etc", "normalized"),
    ("--weights-hostpath", "/data//models", "normalized"),
    ("--weights-hostpath", "/data/models/", "normalized"),
    ("--weights-hostpath", "/data/./models", "normalized"),
    ("--weights-hostpath", "//data", "normalized"),
    ("--weights-hostpath", "/data\n/models", "control characters"),
    ("--npu-resource", "Ascend910", "DOMAIN/NAME"),
    ("--npu-resource", "huawei.com/", "name part"),
    ("--npu-resource", "/Ascend910", "prefix"),
    ("--npu-resource", "Huawei.com/Ascend910", "prefix"),
    ("--npu-resource", "huawei.com/a/b", "qualified name"),
    ("--npu-resource", "huawei.com/Ascend 910", "name part"),
    ("--npu-resource", "kubernetes.io/npu", "kubernetes.io"),
    ("--npu-resource", "requests.huawei.com/npu", "requests."),
    ("--npu-resource", "huawei.com/" + "a" * 64, "63"),
    ("--image", "registry.example/vllm ascend:1", "whitespace"),
    ("--image", "registry.example/vllm-ascend:1\n", "newline"),
    ("--image", "registry.example/vllm-ascend:1\x00", "NUL"),
    ("--image", " registry.example/vllm-ascend:1", "whitespace"),
    ("--image", "registry.example/VLLM:1", "lower-case"),
    ("--image", "registry.example/vllm:", "image reference"),
    ("--image", "registry.example/vllm:-1", "image reference"),
    ("--image", "", "image reference"),
    ("--image", "registry.example/vllm@sha256:abc", "image reference"),
]


def _refused(tmp_path, capsys, *flags: str) -> str:
    out_dir = tmp_path / "out"
    pvc = [] if any(f.startswith("--weights-") for f in flags) else ["--weights-pvc", "models"]
    assert main(["export", SPEC, "--to", "lws", *pvc, *flags, "--out", str(out_dir)]) == 2
    assert not out_dir.exists()  # nothing written: not even the directory
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    return err


@pytest.mark.parametrize("flag,value,word", BAD, ids=[f"{f}={v[:20]!r}" for f, v, _ in BAD])
def test_a_bad_flag_is_one_line_naming_it_its_value_and_the_rule(tmp_path, capsys, flag, value, word):
    err = _refused(tmp_path, capsys, f"{flag}={value}")
    lines = [line for line in err.splitlines() if line.startswith(flag + " ")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{flag} {quoted(value)}: ") and word in lines[0], err
    assert "1 invalid flag value" in err


def test_every_bad_flag_is_named_at_once(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--weights-pvc", "../x", "--namespace", "Kube-System", "--nic", "")
    named = [line.split(" ")[0] for line in err.splitlines() if line.startswith("--")]
    assert named == ["--namespace", "--weights-pvc", "--nic"], err
    assert "3 invalid flag values" in err


def test_json_lists_each_bad_flag(capsys):
    assert main(["export", SPEC, "--to", "k8s", "--weights-pvc", "models", "--secret", "A", "--output", "json"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["error"]["exit_code"] == 2
    assert document["error"]["flags"] == [
        {"flag": "--secret", "value": "A", "message": k8s_names.dns1123_subdomain("A")}]


# Values at the edge of each rule, which Kubernetes accepts.
GOOD = [
    ("namespace", "a" * 63), ("namespace", "0serving-1"), ("weights_pvc", "a" * 63 + "." + "b" * 63),
    ("weights_pvc", "qwen3.weights-v2"), ("secret", "hf-tokens"), ("nic", "a" * 15), ("nic", "bond0.100"),
    ("nic", "enp1s0f0np0"), ("weights_hostpath", "/"), ("weights_hostpath", "/data/models/qwen2-7b"),
    ("npu_resource", "huawei.com/Ascend910"), ("npu_resource", "huawei.com/Ascend910-16c.x_y"),
    ("image", "registry.example:5000/team/vllm-ascend:6.3.909"), ("image", "ubuntu"),
    ("image", "quay.io/ascend/vllm-ascend@sha256:" + "0" * 64), ("image", "[::1]:5000/vllm:v1"),
]


@pytest.mark.parametrize("field,value", GOOD)
def test_values_kubernetes_accepts_pass(field, value):
    assert bad_flags(ExportOptions(target="lws", **{field: value})) == []


def test_the_defaults_pass():
    assert bad_flags(ExportOptions(target="k8s")) == []


def test_a_good_export_still_writes(tmp_path, capsys):
    assert main(["export", SPEC, "--to", "lws", "--weights-pvc", "models", "--namespace", "serving",
                 "--nic", "bond0.100", "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir())


def _spec(tmp_path, *swaps: tuple[str, str]) -> str:
    text = (ROOT / "playbooks/vllm-ascend-mixed-ep-1host.yaml").read_text()
    for old, new in swaps:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", ["1qwen3", "qwen3-", "-qwen3", "--"])
def test_a_deployment_name_that_cannot_name_a_service_is_refused_at_name(tmp_path, capsys, name):
    spec = _spec(tmp_path, ("name: qwen3-30b-ep", f"name: {name!r}"))
    assert main(["export", spec, "--to", "k8s", "--weights-pvc", "models", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    located = [line for line in err.splitlines() if re.match(rf"{re.escape(spec)}:\d+:\d+: ", line)]
    assert len(located) == 1 and ": name: " in located[0] and "DNS-1035" in located[0], err
    assert not (tmp_path / "out").exists()


def test_a_host_that_makes_the_instance_label_too_long_is_refused_at_the_host(tmp_path, capsys):
    host = "node-" + "a" * 50  # a valid host key (<= 63), but the pod's instance label would be 70 characters
    spec = _spec(tmp_path, ("node1:", f"{host}:"), ("hosts: [node1]", f"hosts: [{host}]"))
    assert main(["export", spec, "--to", "lws", "--weights-pvc", "models"]) == 2
    err = capsys.readouterr().err
    located = [line for line in err.splitlines() if re.match(rf"{re.escape(spec)}:\d+:\d+: ", line)]
    assert len(located) == 1 and f": hosts.{host}: " in located[0] and "label value" in located[0], err
