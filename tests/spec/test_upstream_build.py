"""A valid server vllm-ascend spec -> one instance per `vllm serve`, then the proxy, with what each one runs."""

from __future__ import annotations

from deployctl.spec.load import load_spec_text

QWEN3 = """version: 1
name: qwen3
server: vllm-ascend
hosts:
  node1: {address: 10.200.0.11}
  node2: {address: 10.200.0.12}
  node3: {address: 10.200.0.13}
requirements: {cards: 16}
image: {name: "quay.io/ascend/vllm-ascend:v0.23.0-a3"}
weights: {dest: /mnt/weights/Qwen3-235B-A22B}
model: {served_name: qwen3, max_model_len: 4096, max_num_seqs: 16, extra_args: [--trust-remote-code]}
topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: %s
  proxy: {host: node1, port: 8000}
  prefill:
    - {hosts: [node1], dp: 2, tp: 8, expert_parallel: true, port: 9100, env: {HCCL_BUFFSIZE: 1024}}
  decode:
    - hosts: [node2, node3]
      dp: 8
      tp: 4
      expert_parallel: true
      port: 9100
      model: {max_num_seqs: 24, extra_args: [--enforce-eager], additional_config: {enable_shared_expert_dp: true}}
"""


def test_external_launch_is_one_instance_per_rank_then_the_proxy():
    spec = load_spec_text(QWEN3 % "external")
    assert spec.server == "vllm-ascend" and spec.upstream.dp_launch == "external"
    names = [i.name for i in spec.instances]
    assert names == ["qwen3-prefill0-r0", "qwen3-prefill0-r1"] + [f"qwen3-decode0-r{r}" for r in range(8)] + [
        "qwen3-proxy"]
    r5 = spec.instances[7]
    assert (r5.host, r5.devices, r5.port, r5.tp, r5.server.ranks[0].rank) == ("node3", (4, 5, 6, 7), 9101, 4, 5)
    assert r5.max_num_seqs == 24 and r5.extra_args == ("--trust-remote-code", "--enforce-eager")
    assert r5.json_args == (("--additional-config", '{"enable_shared_expert_dp":true}'),)
    prefill = spec.instances[0]
    assert prefill.max_num_seqs == 16 and [(e.name, e.value) for e in prefill.env] == [("HCCL_BUFFSIZE", "1024")]
    assert spec.front.role == "proxy" and spec.front.port == 8000 and spec.front.devices == ()
    assert spec.start_order[-1] == (spec.front,)


def test_internal_launch_is_one_instance_per_host_the_later_ones_headless():
    spec = load_spec_text(QWEN3 % "internal")
    decode = spec.role("decode")
    assert [(i.name, i.port, len(i.devices)) for i in decode] == [
        ("qwen3-decode0-node2", 9100, 16), ("qwen3-decode0-node3", None, 16)]
    assert [i.name for i in spec.api_servers] == ["qwen3-prefill0-node1", "qwen3-decode0-node2", "qwen3-proxy"]


DRAFT = "{method: eagle3, num_speculative_tokens: N, model: /mnt/weights/Qwen3-235B-A22B/eagle3, enforce_eager: true}"
# QWEN3 with an EAGLE-3 drafter on both roles (prefill proposes 1 token, decode 3)
EAGLE3 = (QWEN3 % "external").replace("port: 9100, env:", f"port: 9100, speculative: {DRAFT.replace('N', '1')}, env:"
                                      ).replace("      port: 9100\n",
                                                f"      port: 9100\n      speculative: {DRAFT.replace('N', '3')}\n")


def test_an_eagle3_drafter_reaches_the_speculative_config_with_its_model_and_enforce_eager():
    spec = load_spec_text(EAGLE3)
    decode = spec.role("decode")[0]
    assert dict(decode.json_args)["--speculative-config"] == (
        '{"enforce_eager":true,"method":"eagle3","model":"/mnt/weights/Qwen3-235B-A22B/eagle3",'
        '"num_speculative_tokens":3}')
