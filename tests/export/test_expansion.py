"""The kubelet expands `$(VAR)` (and reads `$$` as `$`) in command, args and env values: a value from the spec
reaches the container as written, as `docker run` passes it; only deployctl's own `$(POD_IP)` is expanded."""

from __future__ import annotations

import shlex

import pytest

from deployctl.export.options import ExportOptions
from deployctl.export.render import export
from deployctl.spec.load import load_spec_text
from tests.export.cases import ROOT

TRICKY = ["$(HOME)", "$$(HOME)", "a$$b", "$(POD_IP)", "cost $5", "end$", "$(", "$((1+1))", "$HOME"]


def expand(text: str, mapping: dict) -> str:
    """k8s.io/kubernetes third_party/forked/golang/expansion Expand, line by line: `$$` is `$`, `$(NAME)` a
    defined variable's value (an undefined one stays as written), any other `$` itself."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1:]
            if rest[0] == "$":
                read, advance = "$", 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    read, advance = "$(", 1
                else:
                    name = rest[1:close]
                    read, advance = mapping.get(name, f"$({name})"), close + 1
            else:
                read, advance = "$" + rest[0], 1
            out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def test_the_port_of_the_kubelets_expansion_reads_as_upstream_documents():
    assert expand("$(A)-$$(A)-$(B)-$$-$x-$", {"A": "1"}) == "1-$(A)-$(B)-$-$x-$"


def _gpu_spec(env_value: str, extra_arg: str):
    text = (ROOT / "playbooks/gpu-vllm.yaml").read_text()
    text = text.replace('extra_args: ["--gpu-memory-utilization", "0.90"]',
                        f"extra_args: [--gpu-memory-utilization, '0.90', {extra_arg!r}]")
    return load_spec_text(text + f"env: {{FROM_SPEC: {env_value!r}}}\n")


def _containers(manifests):
    return [c for m in manifests if m.kind == "Deployment" for c in m.body["spec"]["template"]["spec"]["containers"]]


@pytest.mark.parametrize("value", TRICKY)
def test_a_spec_value_reaches_the_container_as_written(value):
    manifests = export(_gpu_spec(value, "--x=" + value), ExportOptions(target="k8s", weights_pvc="models"))
    for container in _containers(manifests):
        env = {e["name"]: e for e in container["env"]}
        assert "POD_IP" not in env  # nothing of deployctl's refers to it here: a user's $(POD_IP) is text
        defined = {"HOME": "/root", "POD_IP": "10.1.2.3"}
        assert expand(env["FROM_SPEC"]["value"], defined) == value
        assert [expand(w, defined) for w in container["command"]][-1] == "--x=" + value


def test_home_is_escaped_once():
    manifests = export(_gpu_spec("$(HOME)", "$(HOME)"), ExportOptions(target="k8s", weights_pvc="models"))
    container = _containers(manifests)[0]
    assert {"name": "FROM_SPEC", "value": "$$(HOME)"} in container["env"]
    assert container["command"][-1] == "$$(HOME)"


UPSTREAM = ROOT / "playbooks/vllm-ascend-mixed-2hosts-internal.yaml"


def _upstream(target: str):
    text = UPSTREAM.read_text().replace("extra_args: [--trust-remote-code]",
                                        "extra_args: [--trust-remote-code, '--x=$(HOME)']")
    text = text.replace('env: {HCCL_BUFFSIZE: "1024"}', 'env: {HCCL_BUFFSIZE: "1024", GROUP_VALUE: "$(HOME)"}')
    return export(load_spec_text(text), ExportOptions(target=target, weights_pvc="models"))


def test_deployctls_own_pod_ip_stays_a_reference_and_the_spec_values_are_escaped():
    (lws,) = [m for m in _upstream("lws") if m.kind == "LeaderWorkerSet"]
    shape = lws.body["spec"]["leaderWorkerTemplate"]
    leader = shape["leaderTemplate"]["spec"]["containers"][0]
    env = {e["name"]: e for e in leader["env"]}
    assert leader["env"][0] == {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert env["HCCL_IF_IP"]["value"] == "$(POD_IP)"
    assert env["GROUP_VALUE"]["value"] == "$$(HOME)"
    command = leader["args"]  # vllm-ascend runs through the image's entrypoint: args, not command
    assert command[command.index("--data-parallel-address") + 1] == "$(POD_IP)"
    assert "--x=$$(HOME)" in command
    # The worker's `sh -c` script: the shell gets the word quoted and whole, the kubelet leaves it alone.
    worker = shape["workerTemplate"]["spec"]["containers"][0]
    script = expand(worker["args"][2], {"POD_IP": "10.1.2.3", "HOME": "/root"})
    assert shlex.quote("--x=$(HOME)") in script and "/root" not in script
    assert {e["name"]: e for e in worker["env"]}["GROUP_VALUE"]["value"] == "$$(HOME)"
