"""server sglang on Ascend NPUs (issue 43): the NPU launch words, the container's NPUs and mounts, the MemFabric
store every P/D server shares, what only SGLang on NPUs takes (modelslim, 16-die A3 instances) and what it
refuses; the playbook shaped after SGLang's own Ascend docs."""

from __future__ import annotations

from pathlib import Path

from deployctl.plan.containers import container_for
from deployctl.servers import flavour_of
from deployctl.spec.load import check_spec_text, load_spec, load_spec_text
from tests.servers.sglang.test_flavour import BASE, TEST_SPECS, errors_of

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = ROOT / "playbooks" / "sglang-ascend-pd.yaml"
ASCEND = BASE.replace("platform: gpu", "platform: ascend")
ASCEND_PD = TEST_SPECS["PD"].replace("platform: gpu", "platform: ascend").replace("  connector: nixl\n", "")


def test_every_server_runs_sglangs_npu_launch_on_its_own_npus():
    s = load_spec_text(ASCEND, environ={})
    assert flavour_of(s).title == "SGLang on Ascend"
    container = container_for(s, s.instances[0])
    assert container.command[-4:] == ("--device", "npu", "--attention-backend", "ascend")
    assert container.devices == ("/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
    assert container.gpus is None
    assert [m.target for m in container.mounts] == ["/usr/local/Ascend/driver", "/usr/local/sbin/npu-smi",
                                                    "/etc/ascend_install.info", "/srv/models/tiny"]
    assert "ASCEND_MF_STORE_URL" not in {e.name for e in container.env}  # a mixed server moves no KV


def test_pd_servers_share_the_first_prefills_memfabric_store_and_get_hccn():
    s = load_spec_text(ASCEND_PD, environ={})
    for instance in (i for i in s.instances if i is not s.front):
        container = container_for(s, instance)
        assert ("ASCEND_MF_STORE_URL", "tcp://10.200.0.11:24669") in {(e.name, e.display) for e in container.env}
        assert container.command[container.command.index("--disaggregation-transfer-backend") + 1] == "ascend"
        assert {"/etc/hccn.conf", "/usr/local/bin/hccn_tool"} <= {m.target for m in container.mounts}
    # another backend needs no store; the user's own value is kept
    mooncake = load_spec_text(ASCEND_PD.replace("  mode: disaggregated\n", "  mode: disaggregated\n"
                                                                        "  connector: mooncake\n"), environ={})
    assert "ASCEND_MF_STORE_URL" not in {e.name for e in container_for(mooncake, mooncake.instances[0]).env}
    own = load_spec_text(ASCEND_PD.replace("topology:", "env: {ASCEND_MF_STORE_URL: 'tcp://10.0.0.9:1'}\ntopology:"),
                         environ={})
    assert [e.display for e in container_for(own, own.instances[0]).env if e.name == "ASCEND_MF_STORE_URL"] == [
        "tcp://10.0.0.9:1"]


def test_the_playbook_renders_the_docs_two_a3_pd_launch():
    s = load_spec(PLAYBOOK)
    prefill, decode = s.role("prefill")[0], s.role("decode")[0]
    words = container_for(s, prefill).command
    assert ("--tp-size", "16") == words[words.index("--tp-size"):words.index("--tp-size") + 2]
    assert ("--quantization", "modelslim") == words[words.index("--quantization"):words.index("--quantization") + 2]
    assert words[words.index("--disaggregation-bootstrap-port") + 1] == "8001"
    assert "--attn-dp-size" in container_for(s, decode).command
    router = container_for(s, s.front).command
    assert router[router.index("--pd-disaggregation"):] == (
        "--pd-disaggregation", "--prefill", "http://192.0.2.41:8000", "8001", "--decode", "http://192.0.2.42:8000",
        "--policy", "cache_aware")


def test_what_only_sglang_on_npus_takes_is_refused_elsewhere_with_the_way_out():
    sixteen = "devices: [" + ", ".join(map(str, range(16))) + "]"
    a3 = ASCEND.replace("devices: [0]", sixteen).replace("weights:", "requirements: {cards: 16}\nweights:")
    assert errors_of(a3) == []
    assert errors_of(a3.replace("server: sglang\n", "")) == [
        "s.yaml:15:28: topology.instances[0].devices: 16 devices: an instance needs 1, 2, 4 or 8 (its TP size is "
        "its device count)"]
    modelslim = "  max_model_len: 2048\n  quantization: modelslim\n"
    assert errors_of(ASCEND.replace("  max_model_len: 2048\n", modelslim)) == []
    assert errors_of(BASE.replace("  max_model_len: 2048\n", modelslim)) == [
        "s.yaml:12:17: model.quantization: quantization 'modelslim' is SGLang's for Ascend NPUs "
        "(arg_groups/choices.py); on GPU it takes awq or gptq"]
    assert errors_of(ASCEND.replace("server: sglang\n", "").replace("  max_model_len: 2048\n", modelslim)) == [
        "s.yaml:11:17: model.quantization: quantization 'modelslim' is SGLang's on Ascend NPUs; vLLM's "
        "--quantization has no such method"]
    assert [e for e in errors_of(ASCEND.replace("topology:", "rollout: {max_surge: 1}\ntopology:"))
            if "surge" in e] == [
        "s.yaml:12:22: rollout.max_surge: a surge replacement on spare NPUs is not built for server sglang: the "
        "drain rollout replaces servers in place"]


def test_data_parallel_attention_within_the_tp_size_is_taken_and_replicas_are_refused():
    def extra(words: str) -> list[str]:
        return errors_of(ASCEND.replace("  max_model_len: 2048\n", f"  max_model_len: 2048\n  extra_args: {words}\n"))

    assert extra("[--attn-dp-size, '2']") == []
    assert extra("[--dp-size, '2', --enable-dp-attention]") == []
    (refused,) = extra("[--dp-size, '2']")
    assert "extra_args asks for SGLang's data parallelism (--dp-size)" in refused


def test_the_one_tp_rule_of_the_scheduler_does_not_bind_sglangs_pd():
    mixed_sizes = ASCEND_PD.replace("devices: [2, 3], port: 30020", "devices: [2, 3, 4, 5], port: 30020")
    _, errors, _ = check_spec_text(mixed_sizes.replace("weights:", "requirements: {cards: 8}\nweights:"), "s.yaml")
    assert [e.render() for e in errors] == []
