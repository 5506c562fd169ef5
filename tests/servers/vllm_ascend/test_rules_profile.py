"""server vllm-ascend: what upstream refuses or silently ignores is a validate error (or warning) at its key,
citing the upstream source: removed keys, Mooncake missing, the connector's tp check, speculative decoding in
P/D, context parallel, reduce sampling, prefix caching for hybrid models, kv ports, ASCEND_RT_VISIBLE_DEVICES."""

from __future__ import annotations

from deployctl.spec.load import check_spec_text

BASE = """version: 1
name: pd
server: vllm-ascend
hosts:
  node1: {address: 10.200.0.11}
  node2: {address: 10.200.0.12}
requirements: {cards: 16}
image: {name: "quay.io/ascend/vllm-ascend:TAG"}
weights: {dest: /mnt/weights/WEIGHTS}
model: {served_name: NAME, max_model_len: 4096}
topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: node1, port: 8000}
  prefill:
    - {hosts: [node1], dp: 2, tp: PTP, port: 9100PREFILL}
  decode:
    - {hosts: [node2], dp: 4, tp: 4, port: 9100DECODE}
"""


def check(tag="v0.23.0-a3", prefill="", decode="", ptp=8, name="qwen3", weights="Qwen3-235B-A22B", head=""):
    text = head + BASE.replace("TAG", tag).replace("PREFILL", prefill).replace("DECODE", decode).replace(
        "PTP", str(ptp)).replace("NAME", name).replace("WEIGHTS", weights)
    _, errors, warnings = check_spec_text(text)
    return [(p.dotted_path, p.message) for p in errors], [(p.dotted_path, p.message) for p in warnings]


def test_the_base_spec_is_valid_without_warnings():
    assert check() == ([], [])


def test_keys_a_profile_removed_are_errors_from_that_line_on():
    config = ", model: {additional_config: {torchair_graph_config: {enabled: true}, ascend_scheduler_config: {}}}"
    errors, _ = check(decode=config)
    assert [path for path, _ in errors] == ["topology.decode[0].model.additional_config.torchair_graph_config",
                                            "topology.decode[0].model.additional_config.ascend_scheduler_config"]
    assert "#4814" in errors[0][1] and "#4623" in errors[1][1] and "silently ignored" in errors[0][1]
    assert check(tag="v0.11.0", decode=config) == ([], [])  # v0.11 still reads them
    errors, _ = check(tag="v0.11.0", decode=config, head='server_version: "0.13"\n')
    assert len(errors) == 2  # server_version overrides the tag


def test_mooncake_p_d_needs_an_image_that_has_mooncake():
    errors, _ = check(tag="v0.11.0rc1-a3")
    assert errors == [("image.name", "vllm-ascend v0.11.0rc1-a3 images have no Mooncake, which connector mooncake "
                                     "needs (built in from v0.11.0rc3: vllm-ascend's Dockerfile.a3 at that tag)")]
    assert check(tag="v0.11.0rc3") == ([], [])


def test_a_version_deployctl_cannot_tell_is_a_warning_naming_the_profile_used():
    _, warnings = check(tag="latest")
    assert warnings == [("image.name", "the vllm-ascend version is unknown (no server_version, and the image tag "
                                       "names none): the newest profile, vllm-ascend 0.26 (v0.26.0rc1 - v0.26.0rc1; "
                                       "vLLM 0.26.0), applies")]
    assert check(tag="latest", head='server_version: "0.23"\n') == ([], [])
    errors, _ = check(head='server_version: 0.13\n')
    assert errors == [("server_version", "0.13 should be a string, not a number")]


def test_server_version_belongs_to_vllm_ascend():
    text = BASE.replace("server: vllm-ascend", "server: vllm")
    _, errors, _ = check_spec_text('server_version: "0.13"\n' + text)
    assert ("server_version", "server_version picks a vllm-ascend profile; server vllm has none") in [
        (p.dotted_path, p.message) for p in errors]


def test_a_prefill_tp_smaller_than_decode_is_refused_as_the_mooncake_connector_refuses_it():
    errors, _ = check(ptp=2)
    assert errors[0][0] == "topology.prefill[0].tp"
    assert errors[0][1].startswith("prefill tp 2 is smaller than decode tp 4: vllm-ascend's Mooncake connector "
                                   "refuses it (vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py")
    assert check(ptp=4) == ([], [])


def test_speculative_decoding_in_p_d_prefill_proposes_one_decode_one_or_more():
    mtp = ", speculative: {method: deepseek_mtp, num_speculative_tokens: N}"
    assert check(prefill=mtp.replace("N", "1"), decode=mtp.replace("N", "3")) == ([], [])
    errors, _ = check(prefill=mtp.replace("N", "2"), decode=mtp.replace("N", "2"))
    assert errors == [("topology.prefill[0].speculative.num_speculative_tokens",
                       "prefill proposes 2 speculative tokens: in P/D the prefill proposes 1 and decode 1 or more "
                       "(vllm-ascend's P/D tutorial)")]
    errors, _ = check(decode=mtp.replace("N", "1"))
    assert errors[0][0] == "topology.prefill[0]" and "decode group 0 uses speculative decoding" in errors[0][1]
    eagle3 = mtp.replace("N", "1").replace("deepseek_mtp", "eagle3").replace("}", ", model: /mnt/weights/e3}")
    errors, _ = check(prefill=mtp.replace("N", "1"), decode=eagle3)
    assert errors[0][0] == "topology.decode[0].speculative.method"


def test_eagle3_takes_its_draft_model_and_enforce_eager_and_is_refused_without_one():
    eagle3 = ", speculative: {method: eagle3, num_speculative_tokens: N, model: /mnt/weights/Qwen3-235B-A22B/eagle3"
    decode = eagle3.replace("N", "3") + ", enforce_eager: true}"
    assert check(prefill=eagle3.replace("N", "1") + "}", decode=decode) == ([], [])
    # without it vLLM exits at start: "num_speculative_tokens was provided but without speculative model"
    bare = ", speculative: {method: eagle3, num_speculative_tokens: N}"
    text = BASE.replace("TAG", "v0.23.0-a3").replace("PTP", "8").replace("NAME", "qwen3").replace(
        "WEIGHTS", "Qwen3-235B-A22B").replace("PREFILL", bare.replace("N", "1")).replace(
        "DECODE", bare.replace("N", "3"))
    _, errors, _ = check_spec_text(text, "pd.yaml")
    assert [(p.dotted_path, p.line) for p in errors] == [("topology.prefill[0].speculative", 17),
                                                         ("topology.decode[0].speculative", 19)]
    assert errors[0].message.startswith("method eagle3 needs its draft model: vLLM refuses to start with "
                                        "'num_speculative_tokens was provided but without speculative model' "
                                        "(vllm/config/speculative.py:1294, vLLM 0.33.0)")
    assert errors[0].hint.startswith("add model: the draft's directory under /mnt/weights/Qwen3-235B-A22B")
    # a draft the container cannot see: only weights.dest is mounted
    outside = ", speculative: {method: eagle3, num_speculative_tokens: 1, model: /data/eagle3}"
    errors, _ = check(prefill=outside, decode=outside)
    assert [path for path, _ in errors] == ["topology.prefill[0].speculative.model",
                                            "topology.decode[0].speculative.model"]
    assert "only weights.dest (/mnt/weights/Qwen3-235B-A22B)" in errors[0][1]
    # the MTP family finds its drafter in the model itself (vllm/config/speculative.py:1252-1263)
    mtp = ", speculative: {method: deepseek_mtp, num_speculative_tokens: 1}"
    assert check(prefill=mtp, decode=mtp) == ([], [])


def test_a_hybrid_model_proposes_as_many_on_both_roles():
    mtp = ", speculative: {method: qwen3_next_mtp, num_speculative_tokens: N}"
    hybrid = {"name": "qwen3-next", "weights": "Qwen3-Next-80B-A3B"}
    assert check(prefill=mtp.replace("N", "2"), decode=mtp.replace("N", "2"), **hybrid) == ([], [])
    errors, _ = check(prefill=mtp.replace("N", "1"), decode=mtp.replace("N", "2"), **hybrid)
    assert errors[0][0] == "topology.prefill[0].speculative.num_speculative_tokens" and "hybrid" in errors[0][1]


def test_prefix_caching_in_p_d_is_refused_for_hybrid_models_only():
    on = ", model: {extra_args: [--enable-prefix-caching]}"
    errors, _ = check(decode=on, name="qwen35", weights="Qwen3.5-397B-A17B")
    assert errors == [("topology.decode[0].model.extra_args",
                       "prefix caching with P/D fails for hybrid models such as Qwen3-Next and Qwen3.5 "
                       "(vllm-ascend #7944; the P node hangs on a hit, #7722)")]
    assert check(decode=on) == ([], [])


def test_context_parallel_sizes_agree_between_prefill_and_decode():
    errors, _ = check(prefill=", model: {extra_args: [--decode-context-parallel-size, '2']}")
    assert errors == [("topology.decode[0].model.extra_args",
                       "decode context-parallel size 1 here but 2 in prefill group 0: prefill and decode must agree "
                       "(vllm-ascend #14322)")]
    both = ", model: {extra_args: ['-dcp=2']}"
    assert check(prefill=both, decode=", model: {extra_args: [--decode-context-parallel-size, '2']}") == ([], [])


def test_reduce_sampling_is_refused_with_p_d():
    errors, _ = check(decode=", model: {additional_config: {enable_reduce_sample: true}}")
    assert errors[0][0] == "topology.decode[0].model.additional_config.enable_reduce_sample"
    assert "#13469" in errors[0][1]


def test_a_kv_port_inside_the_connectors_random_range_is_a_warning_naming_it():
    errors, warnings = check(decode=", kv_port: 30000")
    assert errors == [] and warnings == [(
        "topology.decode[0].kv_port",
        "kv_port 30000 lies inside Mooncake's random port range 20000-35999 on 16-NPU hosts (validate assumes "
        "requirements.cards: 16): it fails now and then with 'Address already in use' (vllm-ascend #6455, #8938)")]
    assert check(decode=", kv_port: 36200") == ([], [])


def test_ascend_rt_visible_devices_must_name_the_containers_own_devices():
    errors, _ = check(decode=", env: {ASCEND_RT_VISIBLE_DEVICES: '4,5,6,7'}")
    assert errors == [("topology.decode[0].env.ASCEND_RT_VISIBLE_DEVICES",
                       "ASCEND_RT_VISIBLE_DEVICES=4,5,6,7 but each container of decode group 0 mounts exactly its "
                       "own 4 NPU(s), which the runtime numbers 0-3: host ids never go in this variable")]
    assert check(decode=", env: {ASCEND_RT_VISIBLE_DEVICES: '3,2,1,0'}") == ([], [])
    errors, _ = check(head="env: {ASCEND_RT_VISIBLE_DEVICES: '0,1,2,3'}\n")
    assert [path for path, _ in errors] == ["env.ASCEND_RT_VISIBLE_DEVICES"]  # prefill's containers mount 8
    text = "env: {ASCEND_RT_VISIBLE_DEVICES: '${DEVS}'}\n" + BASE.replace("TAG", "v0.23.0").replace(
        "PREFILL", "").replace("DECODE", "").replace("PTP", "8").replace("NAME", "q").replace("WEIGHTS", "w")
    _, errors, _ = check_spec_text(text, environ={"DEVS": "8,9,10,11,12,13,14,15"})
    assert [p.message for p in errors if "8,9" in p.message] == [] and any("${DEVS}" in p.message for p in errors)


def test_the_visible_devices_hint_cites_evidence_for_leaving_it_unset_not_the_unmerged_a5_pr():
    """vllm-ascend PR #12959 was closed unmerged and concerned A5 endpoint files only (contract: "Settled on
    2026-11-28"): the hint rests on CANN's numbering of mounted devices and reports such as #2238."""
    text = BASE.replace("TAG", "v0.23.0").replace("PREFILL", "").replace(
        "DECODE", ", env: {ASCEND_RT_VISIBLE_DEVICES: '4,5,6,7'}").replace("PTP", "8").replace(
        "NAME", "q").replace("WEIGHTS", "w")
    _, errors, _ = check_spec_text(text)
    hints = [p.hint for p in errors if "ASCEND_RT_VISIBLE_DEVICES" in p.message]
    assert len(hints) == 1 and "#2238" in hints[0] and "12959" not in hints[0]


def test_shm_size_is_a_size_docker_takes():
    assert check(head="container: {shm_size: 32g}\n", decode=", container: {shm_size: 512m}") == ([], [])
    errors, _ = check(decode=", container: {shm_size: 1.5GB}")
    assert errors == [("topology.decode[0].container.shm_size", "'1.5GB' is not a size docker's --shm-size takes")]


def test_cpu_and_memory_are_kubernetes_quantities():
    assert check(head="container: {cpu: 16, memory: 256Gi}\n", decode=", container: {cpu: 500m, memory: 64G}") == (
        [], [])
    errors, _ = check(head="container: {cpu: 2 cores}\n", decode=", container: {memory: 1.5TB}")
    assert errors == [("container.cpu", "'2 cores' is not a Kubernetes CPU quantity"),
                      ("topology.decode[0].container.memory", "'1.5TB' is not a Kubernetes memory quantity")]


QWEN3_32B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 64,
             "num_attention_heads": 64, "hidden_size": 5120}  # a dense model's config.json: no experts
QWEN3_235B = {**QWEN3_32B, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128,
              "num_experts_per_tok": 8}


def dense_check(tmp_path, tag="v0.23.0-a3", config=QWEN3_32B, model="", weights=None):
    """The base spec serving Qwen3-32B; its weights.source a directory here holding `config` (None: s3)."""
    import json

    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    source = weights or (str(tmp_path) if config is not None else "s3://models/Qwen3-32B/")
    text = BASE.replace("TAG", tag).replace("PTP", "8").replace("NAME", "qwen3-32b").replace(
        "PREFILL", "").replace("DECODE", "").replace("weights: {dest: /mnt/weights/WEIGHTS}",
                                                     f"weights: {{source: {source}, dest: /mnt/weights/Qwen3-32B}}")
    text = text.replace("max_model_len: 4096}", f"max_model_len: 4096{model}}}")
    _, errors, warnings = check_spec_text(text, "pd.yaml")
    return errors, warnings


def test_a_dense_model_with_external_dp_is_refused_from_the_0_23_profile_on(tmp_path):
    for tag in ("v0.23.0-a3", "v0.25.1rc1-a3"):
        errors, _ = dense_check(tmp_path, tag)
        assert [(p.dotted_path, p.line) for p in errors] == [("topology.prefill[0].dp", 17),
                                                             ("topology.decode[0].dp", 19)], tag
        assert errors[0].message == (
            "prefill group 0 runs dp 2 but its config.json at weights.source names no experts (a dense model): vLLM "
            "refuses dp_launch: external with dp > 1 for a dense model from 0.23 ('Non-MoE models do not support "
            "external data parallel mode': vllm/engine/arg_utils.py:2456-2465, vLLM 0.33.0)")
        assert errors[0].hint.startswith("use dp_launch: internal, or groups of dp: 1")
    assert dense_check(tmp_path, "v0.18.0") == ([], [])  # the 0.18 profile's vLLM starts it
    assert dense_check(tmp_path, config=QWEN3_235B) == ([], [])  # a MoE model's config.json names its experts


def test_without_a_readable_config_json_model_moe_says_and_else_it_is_a_warning(tmp_path):
    errors, _ = dense_check(tmp_path, config=None, model=", moe: false")
    assert [p.dotted_path for p in errors] == ["topology.prefill[0].dp", "topology.decode[0].dp"]
    assert "but model.moe is false: vLLM refuses" in errors[0].message
    assert dense_check(tmp_path, config=None, model=", moe: true") == ([], [])
    errors, warnings = dense_check(tmp_path, config=None)
    assert errors == [] and [p.dotted_path for p in warnings] == ["topology.prefill[0].dp", "topology.decode[0].dp"]
    assert "cannot tell whether the model is a mixture of experts" in warnings[0].message
    assert warnings[0].hint.startswith("write model.moe: true (MoE) or false (dense)")
    # config.json holds over model.moe: it is what vLLM reads
    errors, _ = dense_check(tmp_path, model=", moe: true")
    assert len(errors) == 2 and "config.json" in errors[0].message


def test_the_hybrid_connector_is_refused_on_a_release_that_does_not_register_it():
    def hybrid(tag):
        return _check_connector(tag, "mooncake_hybrid")

    for tag in ("v0.18.0", "v0.19.1rc1-a3"):
        errors, _ = hybrid(tag)
        assert errors == [("topology.connector", f"vllm-ascend {tag} registers no MooncakeHybridConnector: vLLM's "
                           "connector factory refuses the name at start (added by vllm-ascend #9270, first released "
                           "in v0.20.2rc1: vllm_ascend/distributed/kv_transfer/__init__.py:32-36 at that tag)")], tag
    for tag in ("v0.20.2rc1", "v0.23.0-a3", "v0.26.0rc1-a3"):
        assert hybrid(tag) == ([], []), tag


def _check_connector(tag, connector, weights="Qwen3-235B-A22B", name="qwen3"):
    text = BASE.replace("connector: mooncake", f"connector: {connector}")
    text = text.replace("TAG", tag).replace("PREFILL", "").replace("DECODE", "").replace("PTP", "8").replace(
        "NAME", name).replace("WEIGHTS", weights)
    _, errors, warnings = check_spec_text(text)
    return [(p.dotted_path, p.message) for p in errors], [(p.dotted_path, p.message) for p in warnings]


def test_deepseek_v4_p_d_needs_the_hybrid_connector_until_mooncake_connector_v1_learned_its_kv_groups(tmp_path):
    errors, _ = _check_connector("v0.21.0rc1-a3", "mooncake", weights="DeepSeek-V4-Flash-w8a8", name="dsv4")
    assert [path for path, _ in errors] == ["topology.connector"]
    assert errors[0][1].startswith("DeepSeek-V4 P/D on vllm-ascend v0.21.0rc1-a3 needs MooncakeHybridConnector")
    assert "#10342" in errors[0][1] and "DeepSeek-V4-flash-w8a8-PD-prefix.yaml:107" in errors[0][1]
    # (its name does not say MoE: the dense external-DP rule warns, which is not this rule's business)
    assert _check_connector("v0.21.0rc1-a3", "mooncake_hybrid", weights="DeepSeek-V4-Flash-w8a8")[0] == []
    # from v0.22.1rc1 MooncakeConnectorV1 carries DeepSeek-V4's KV groups (vllm-ascend #10342)
    assert _check_connector("v0.22.1rc1-a3", "mooncake", weights="DeepSeek-V4-Flash-w8a8")[0] == []
    assert _check_connector("v0.21.0rc1-a3", "mooncake") == ([], [])  # Qwen3 is no DeepSeek-V4
    # config.json's model_type holds over the name
    import json
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deepseek_v4", "n_routed_experts": 256}))
    text = BASE.replace("TAG", "v0.21.0rc1-a3").replace("PTP", "8").replace("NAME", "m").replace(
        "PREFILL", "").replace("DECODE", "").replace("weights: {dest: /mnt/weights/WEIGHTS}",
                                                     f"weights: {{source: {tmp_path}, dest: /mnt/weights/m}}")
    _, errors, _ = check_spec_text(text, "pd.yaml")
    assert [p.dotted_path for p in errors] == ["topology.connector"]
