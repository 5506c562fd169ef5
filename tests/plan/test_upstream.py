"""plan_up for server vllm-ascend with plain facts: one container per vllm serve with exactly its devices, each
host's own address and NIC, the connector JSON, the proxy last with its ordered lists, verify through it."""

from __future__ import annotations

import json

import pytest

from deployctl.errors import PlanError
from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import HostFacts
from deployctl.plan.containers import LABEL_DEPLOYMENT, LABEL_DIGEST, container_for
from deployctl.plan.up import digest_of, plan_up
from deployctl.ranktable.host_address import HostAddresses, parse_ip_addr
from deployctl.servers.vllm_ascend.upstream import host_networks
from deployctl.spec.load import load_spec_text
from tests.plan.test_up import container_fact
from tests.spec.test_upstream_build import QWEN3

NICS = {"node1": "enp61s0f0", "node2": "enp62s0f0", "node3": "enp63s0f0"}


def addresses(host: str) -> HostAddresses:
    n = host[-1]
    text = (f"1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
            f"2: {NICS[host]}    inet 10.200.0.1{n}/24 brd 10.200.0.255 scope global {NICS[host]}\\       "
            f"valid_lft forever preferred_lft forever\n")
    return HostAddresses(parse_ip_addr(text), NICS[host])


def facts(spec, containers=None, image_id="sha256:img", layout=None):
    return {h.name: HostFacts(deployed=DeployedState(tuple((containers or {}).get(h.name, ())), image_id, {}),
                              bound_addresses=addresses(h.name), layout=(layout or {}).get(h.name))
            for h in spec.hosts}


def running_containers(spec):
    """Each host's containers as `up` left them: every instance running with the digest it was planned with."""
    networks = host_networks(spec, facts(spec))
    running = {}
    for instance in spec.instances:
        container = container_for(spec, instance, None, networks)
        labels = {LABEL_DEPLOYMENT: spec.name, LABEL_DIGEST: digest_of(container, "sha256:img", None, spec)}
        running.setdefault(instance.host, []).append(
            container_fact("id-" + instance.name, instance.name, "running", "sha256:img", labels, instance.devices))
    return running


def argv_of(plan, container):
    step = next(s for s in plan.steps if s.container == container and s.commands)
    return list(step.commands[0].argv)


def env_of(argv):
    return dict(argv[i + 1].split("=", 1) for i, word in enumerate(argv) if word == "--env")


def test_external_pd_plan_launches_every_rank_then_the_proxy_then_verifies_through_it():
    spec = load_spec_text(QWEN3 % "external")
    plan = plan_up(spec, facts(spec))
    assert [stage.name for stage in plan.stages] == ["checks", "image", "files", "stop", "workers", "contract", "proxy", "answers", "verify"]
    workers = [s for s in plan.steps if s.stage == "workers"]
    assert len(workers) == 10 and all(s.health and s.health.path == "/health" for s in workers)
    proxy = next(s for s in plan.steps if s.stage == "proxy")
    assert proxy.health.path == "/healthcheck" and proxy.health.port == 8000

    argv = argv_of(plan, "qwen3-decode0-r5")
    assert [argv[i + 1] for i, w in enumerate(argv) if w == "--device"] == [
        "/dev/davinci4", "/dev/davinci5", "/dev/davinci6", "/dev/davinci7", "/dev/davinci_manager",
        "/dev/devmm_svm", "/dev/hisi_hdc"]
    env = env_of(argv)
    # the container mounts exactly davinci4-7, which the runtime numbers 0-3: no host ids in the variable
    assert "ASCEND_RT_VISIBLE_DEVICES" not in env and env["HCCL_IF_IP"] == "10.200.0.13"
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == env["HCCL_SOCKET_IFNAME"] == "enp63s0f0"
    # the profile's env per role (v0.23: upstream's nightly configs set these in 21 of 24)
    assert (env["PYTORCH_NPU_ALLOC_CONF"], env["HCCL_OP_EXPANSION_MODE"], env["TASK_QUEUE_ENABLE"]) == (
        "expandable_segments:True", "AIV", "1")
    assert "--entrypoint" not in argv and argv[argv.index("--shm-size") + 1] == "16g"
    image = argv.index("quay.io/ascend/vllm-ascend:v0.23.0-a3")
    assert argv[image + 1:image + 3] == ["sh", "-c"]  # through the image's entrypoint, its set-up sourced
    command = argv[image + 5:]
    assert command[:4] == ["vllm", "serve", "/mnt/weights/Qwen3-235B-A22B", "--served-model-name"]
    assert command[command.index("--data-parallel-rank") + 1] == "5"
    assert command[command.index("--data-parallel-address") + 1] == "10.200.0.12"  # the group's first host
    assert command[command.index("--port") + 1] == "9101" and "--enable-expert-parallel" in command
    config = json.loads(command[command.index("--kv-transfer-config") + 1])
    assert config["kv_role"] == "kv_consumer" and config["engine_id"] == "qwen3-decode0"
    assert "kv_connector_module_path" not in config and config["kv_port"] == "36100"  # 16-NPU hosts
    assert "--no-enable-prefix-caching" in command  # the profile's P/D default
    assert "--compilation-config" not in command  # decode's FULL_DECODE_ONLY yields to its --enforce-eager
    assert config["kv_connector_extra_config"] == {"prefill": {"dp_size": 2, "tp_size": 8},
                                                   "decode": {"dp_size": 8, "tp_size": 4}}
    assert "--additional-config" in command and "--enforce-eager" in command

    proxy_argv = argv_of(plan, "qwen3-proxy")
    assert "--device" not in proxy_argv and "--volume" not in proxy_argv
    tail = proxy_argv[proxy_argv.index("--prefiller-hosts"):]
    assert tail[:6] == ["--prefiller-hosts", "10.200.0.11", "10.200.0.11", "--prefiller-ports", "9100", "9101"]
    assert tail[tail.index("--decoder-ports") + 1:] == ["9100", "9101", "9102", "9103"] * 2
    verify = next(s for s in plan.steps if s.stage == "verify")
    assert verify.container == "qwen3-proxy" and "http://127.0.0.1:8000/v1/chat/completions" in verify.commands[0].argv


def test_internal_headless_server_has_no_port_and_no_health_wait():
    spec = load_spec_text(QWEN3 % "internal")
    plan = plan_up(spec, facts(spec))
    headless = next(s for s in plan.steps if s.container == "qwen3-decode0-node3" and s.stage == "workers")
    assert headless.health is None
    argv = argv_of(plan, "qwen3-decode0-node3")
    assert "--headless" in argv and "--port" not in argv[argv.index("serve"):]
    assert argv[argv.index("--data-parallel-start-rank") + 1] == "4"
    assert "ASCEND_RT_VISIBLE_DEVICES" not in env_of(argv)
    head = argv_of(plan, "qwen3-decode0-node2")  # the head: local size, address, rpc port; no start rank
    assert "--data-parallel-start-rank" not in head and head[head.index("--data-parallel-size-local") + 1] == "4"


def test_a_rerun_keeps_everything_and_a_changed_decode_replaces_only_decode():
    spec = load_spec_text(QWEN3 % "external")
    running = running_containers(spec)
    assert not plan_up(spec, facts(spec, running)).changed

    changed = load_spec_text((QWEN3 % "external").replace("max_num_seqs: 24", "max_num_seqs: 32"))
    plan = plan_up(changed, facts(changed, running))
    replaced = {s.container for s in plan.steps if s.stage == "workers" and s.action != "keep"}
    assert replaced == {f"qwen3-decode0-r{r}" for r in range(8)}
    assert {s.container for s in plan.steps if s.stage == "proxy" and s.action != "keep"} == set()


def test_a_host_whose_interfaces_do_not_carry_its_address_is_refused():
    spec = load_spec_text((QWEN3 % "external").replace("10.200.0.13", "10.200.0.99"))
    with pytest.raises(PlanError, match=r"node3 \(10.200.0.99\): no network interface on the host carries "
                                        r"10.200.0.99 \(its IPv4 addresses: lo 127.0.0.1, enp63s0f0 10.200.0.13\)"):
        plan_up(spec, facts(spec))


def test_status_counts_a_running_headless_server_healthy_and_reads_the_proxy_health():
    from deployctl.facts.deployed import DeployedState
    from deployctl.plan.status import status_rows

    spec = load_spec_text(QWEN3 % "internal")
    containers = {i.host: [] for i in spec.instances}
    for i in spec.instances:
        containers[i.host].append(container_fact("id-" + i.name, i.name, "running", "sha256:img",
                                                 {LABEL_DEPLOYMENT: spec.name}, i.devices))
    health = {"node1": {9100: True, 8000: True}, "node2": {9100: False}, "node3": {}}
    facts = {h: HostFacts(deployed=DeployedState(tuple(c), "sha256:img", {}, health[h])) for h, c in containers.items()}
    rows = {r["name"]: r for r in status_rows(spec, facts)}
    assert rows["qwen3-decode0-node3"]["healthy"] and rows["qwen3-decode0-node3"]["port"] is None
    assert not rows["qwen3-decode0-node2"]["healthy"] and rows["qwen3-proxy"]["healthy"]


def test_a_rank_whose_name_moves_to_another_host_is_retired_where_it_ran():
    spec = load_spec_text(QWEN3 % "external")
    running = running_containers(spec)
    smaller = load_spec_text((QWEN3 % "external").replace("dp: 8", "dp: 4"))  # ranks 2-3 now live on node3
    plan = plan_up(smaller, facts(smaller, running))
    retired = {(s.host, s.container) for s in plan.steps if s.stage == "stop" and s.action == "remove"}
    assert retired == {("node2", "qwen3-decode0-r2"), ("node2", "qwen3-decode0-r3")} | {
        ("node3", f"qwen3-decode0-r{r}") for r in range(4, 8)}
    created_on_node3 = {s.container for s in plan.steps if s.stage == "workers" and s.host == "node3"}
    assert created_on_node3 == {"qwen3-decode0-r2", "qwen3-decode0-r3"}


def test_status_says_hung_when_health_answers_but_a_one_token_generate_does_not():
    from deployctl.facts.deployed import DeployedState
    from deployctl.facts.liveness import Answer
    from deployctl.plan.status import status_rows

    spec = load_spec_text(QWEN3 % "internal")
    containers = {i.host: [] for i in spec.instances}
    for i in spec.instances:
        containers[i.host].append(container_fact("id-" + i.name, i.name, "running", "sha256:img",
                                                 {LABEL_DEPLOYMENT: spec.name}, i.devices))
    health = {"node1": {9100: True, 8000: True}, "node2": {9100: True}, "node3": {}}
    liveness = {"node1": {9100: Answer(200, 300), 8000: Answer(200, 0)}, "node2": {9100: Answer(0, 0)}, "node3": {}}
    facts = {h: HostFacts(deployed=DeployedState(tuple(c), "sha256:img", {}, health[h]), liveness=liveness[h])
             for h, c in containers.items()}
    rows = {r["name"]: (r["health"], r["healthy"]) for r in status_rows(spec, facts)}
    assert rows == {"qwen3-prefill0-node1": ("healthy", True), "qwen3-decode0-node2": ("hung", False),
                    "qwen3-decode0-node3": ("healthy", True), "qwen3-proxy": ("hung", False)}  # an empty 200


def test_the_gather_asks_each_host_for_its_nic_and_status_also_for_a_one_token_generate():
    from deployctl.plan.probes import state_probes

    spec = load_spec_text(QWEN3 % "external")
    keys = [p.key for p in state_probes(spec, "node3", stages=frozenset({"containers"}))]
    assert keys == ["deployed", "bound_addresses", "layout", "image_version", "listening"]
    keys = [p.key for p in state_probes(spec, "node3", stages=frozenset({"containers", "liveness"}))]
    assert keys == ["deployed", "bound_addresses", "layout", "image_version", "liveness"]


def test_dcmi_is_mounted_where_the_host_has_it_and_the_default_kv_port_follows_the_hosts_npus():
    from deployctl.facts.host_layout import HostLayout

    small = (QWEN3 % "external").replace("requirements: {cards: 16}", "requirements: {cards: 8}").replace(
        "dp: 2, tp: 8", "dp: 1, tp: 8").replace("tp: 4", "tp: 2")
    spec = load_spec_text(small)
    layout = {"node1": HostLayout(tuple(range(16)), True), "node2": HostLayout(tuple(range(16)), False),
              "node3": HostLayout(tuple(range(16)), False)}
    plan = plan_up(spec, facts(spec, layout=layout))
    prefill, decode = argv_of(plan, "qwen3-prefill0-r0"), argv_of(plan, "qwen3-decode0-r0")
    assert "/usr/local/dcmi:/usr/local/dcmi:ro" in prefill and not any("dcmi" in w for w in decode)
    # validate assumed 8 NPUs (requirements.cards: 8 -> 28000); the hosts have 16: clear of 20000-35999
    kv = json.loads(decode[decode.index("--kv-transfer-config") + 1])["kv_port"]
    assert spec.upstream.groups[1].kv_port_base == 28100 and kv == "36100"
    unknown = plan_up(spec, facts(spec))  # no layout gathered: what validate assumed
    decode = argv_of(unknown, "qwen3-decode0-r0")
    assert json.loads(decode[decode.index("--kv-transfer-config") + 1])["kv_port"] == "28100"


def test_the_profile_is_chosen_by_server_version_over_the_tag_and_renders_its_flags():
    old_tag = (QWEN3 % "external").replace("v0.23.0-a3", "v0.11.0").replace(
        "additional_config: {enable_shared_expert_dp: true}", "additional_config: {torchair_graph_config: {}}")
    spec = load_spec_text(old_tag)  # v0.11: torchair still read; no FULL_DECODE_ONLY, no default env
    assert spec.profile.profile.line == "0.11" and spec.profile.source == "image tag"
    decode = argv_of(plan_up(spec, facts(spec)), "qwen3-decode0-r0")
    assert "PYTORCH_NPU_ALLOC_CONF" not in env_of(decode) and "--no-enable-prefix-caching" in decode
    pinned = load_spec_text('server_version: "0.13"\n' + (QWEN3 % "external").replace(
        "extra_args: [--enforce-eager], ", ""))
    assert pinned.profile.profile.line == "0.13" and pinned.profile.source == "server_version"
    decode = argv_of(plan_up(pinned, facts(pinned)), "qwen3-decode0-r0")
    assert decode[decode.index("--compilation-config") + 1] == '{"cudagraph_mode":"FULL_DECODE_ONLY"}'
    prefill = argv_of(plan_up(pinned, facts(pinned)), "qwen3-prefill0-r0")
    assert "--compilation-config" not in prefill


def test_a_version_probed_in_the_image_picks_the_profile_the_plan_names_unless_server_version_says_otherwise():
    spec = load_spec_text((QWEN3 % "external").replace("v0.23.0-a3", "latest"))
    probed = {h: HostFacts(**{**vars(f), "image_version": "v0.13.0"}) for h, f in facts(spec).items()}
    plan = plan_up(spec, probed)
    assert plan.profile == ("server profile vllm-ascend 0.13 (v0.12.0rc1 - v0.14.0rc1; vLLM 0.12.0 - 0.14.1: 0.13.0 "
                            "here), probed in the image: v0.13.0") and plan.to_json()["server_profile"] == plan.profile
    assert plan_up(spec, facts(spec)).profile.endswith("by default (version unknown)")
    pinned = load_spec_text('server_version: "0.18"\n' + (QWEN3 % "external").replace("v0.23.0-a3", "latest"))
    assert "0.18" in plan_up(pinned, probed).profile and "from server_version" in plan_up(pinned, probed).profile


def test_the_users_env_and_shm_size_win_over_the_profiles():
    text = (QWEN3 % "external").replace("env: {HCCL_BUFFSIZE: 1024}", "env: {HCCL_BUFFSIZE: 1024, "
                                        "TASK_QUEUE_ENABLE: 2}, container: {shm_size: 64g}")
    spec = load_spec_text("container: {shm_size: 2g}\nenv: {HCCL_OP_EXPANSION_MODE: HOST}\n" + text)
    plan = plan_up(spec, facts(spec))
    prefill, decode = argv_of(plan, "qwen3-prefill0-r0"), argv_of(plan, "qwen3-decode0-r0")
    assert prefill[prefill.index("--shm-size") + 1] == "64g" and decode[decode.index("--shm-size") + 1] == "2g"
    assert [w for w in prefill if w.startswith("TASK_QUEUE_ENABLE=")] == ["TASK_QUEUE_ENABLE=2"]
    assert [w for w in decode if w.startswith("HCCL_OP_EXPANSION_MODE=")] == ["HCCL_OP_EXPANSION_MODE=HOST"]
    assert "--shm-size" not in argv_of(plan, "qwen3-proxy")


@pytest.mark.parametrize("tag, preloads", [("v0.23.0-a3", True), ("v0.26.0rc1-a3", True), ("v0.12.0rc1", False),
                                           ("v0.11.0", False)])
def test_every_rank_carries_the_images_jemalloc_preload_where_its_release_sets_one(tag, preloads):
    """vllm-ascend's images from v0.13.0rc1 (#5127) set LD_PRELOAD=libjemalloc.so.2 in ~/.bashrc only (#12059)."""
    spec = load_spec_text((QWEN3 % "external").replace("v0.23.0-a3", tag))
    shell = argv_of(plan_up(spec, facts(spec)), "qwen3-prefill0-r0")
    prelude = next(word for word in shell if "exec \"$0\"" in word and "LD_LIBRARY_PATH" in word)
    assert ("/usr/lib/aarch64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 "
            "/usr/lib64/libjemalloc.so.2; do" in prelude) is preloads
    assert ("export LD_PRELOAD=" in prelude) is preloads


def test_connector_mooncake_hybrid_renders_upstreams_deepseek_v4_connector_on_every_p_d_server():
    spec = load_spec_text((QWEN3 % "external").replace("connector: mooncake", "connector: mooncake_hybrid"))
    plan = plan_up(spec, facts(spec))
    for container in ("qwen3-prefill0-r0", "qwen3-decode0-r5"):
        command = argv_of(plan, container)
        config = json.loads(command[command.index("--kv-transfer-config") + 1])
        # v0.23.0:tests/e2e/nightly/multi_node/external_dp/config/DeepSeek-V4-flash-w8a8-PD-prefix.yaml:107
        assert config["kv_connector"] == "MooncakeHybridConnector" and "kv_connector_module_path" not in config
    plain = load_spec_text(QWEN3 % "external")
    command = argv_of(plan_up(plain, facts(plain)), "qwen3-decode0-r5")
    assert json.loads(command[command.index("--kv-transfer-config") + 1])["kv_connector"] == "MooncakeConnectorV1"
