"""What each container carries: device counts instead of paths, the pod's network, secrets by reference only,
probes with up's start-up budget, deployctl's labels."""

from __future__ import annotations

from deployctl.export.options import ExportOptions
from deployctl.export.render import export, stream
from deployctl.spec.load import load_spec_text
from tests.export.cases import ENVIRON, ROOT, SECRET_VALUE, exported

PD = "tests/fixtures/export/specs/vllm-ascend-pd-1host.yaml"


def templates(manifests):
    """Every pod template of the manifests."""
    for m in manifests:
        body = m.body
        if body["kind"] == "Deployment":
            yield body["spec"]["template"]
        elif body["kind"] == "LeaderWorkerSet":
            yield from list(body["spec"]["leaderWorkerTemplate"].values())[2:]
        elif body["kind"] == "ModelServing":
            yield from (r[k] for r in body["spec"]["template"]["roles"] for k in ("entryTemplate", "workerTemplate")
                        if k in r)


def containers(manifests):
    for template in templates(manifests):
        yield from template["spec"]["containers"]


def env_of(container) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", ())}


def test_a_secret_is_a_secret_key_ref_and_its_value_is_nowhere():
    for target in ("k8s", "lws", "kthena"):
        manifests = exported(PD, target)
        assert SECRET_VALUE not in stream(manifests)
        for container in containers(manifests):
            assert env_of(container)["HF_TOKEN"] == {"secretKeyRef": {"name": "qwen3-tokens", "key": "HF_TOKEN"}}


def test_servers_ask_for_npus_and_take_the_pods_address():
    servers = [c for c in containers(exported(PD, "k8s")) if c["name"].startswith("server")]
    assert [c["resources"]["limits"] for c in servers] == [{"huawei.com/Ascend910": "8"},
                                                          {"huawei.com/Ascend910": "16"}]
    for container in servers:
        env = container["env"]
        assert env[0] == {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        values = env_of(container)
        assert values["HCCL_IF_IP"] == "$(POD_IP)" and values["HCCL_SOCKET_IFNAME"] == "eth0"
        assert "ASCEND_RT_VISIBLE_DEVICES" not in values  # the device plugin picks the NPUs
        # no device paths; /dev/shm in memory, as large as `up`'s --shm-size (the profile's 16g)
        assert [m["mountPath"] for m in container["volumeMounts"] if m["mountPath"].startswith("/dev/")] == [
            "/dev/shm"]
        assert container["args"][:2] == ["sh", "-c"] and "command" not in container  # the image's entrypoint


def test_shm_is_one_memory_volume_per_pod_as_large_as_its_containers_shm_together():
    from deployctl.export.pods import quantity, shm_bytes

    assert shm_bytes("16g") == 16 << 30 and quantity(shm_bytes("512m")) == "512Mi" and quantity(3 << 30) == "3Gi"
    # plain keeps a container per rank (mindcluster runs a host's ranks as one: test_whole_nodes.py)
    body = next(m.body for m in exported("playbooks/vllm-ascend-pd-qwen3.yaml", "lws", "plain")
                if m.name == "qwen3-pd-decode0")
    pod = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert len(pod["containers"]) == 4  # four ranks of 16g each share the pod's /dev/shm
    assert [v for v in pod["volumes"] if v["name"] == "dshm"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]


def test_gpu_instances_ask_for_gpus():
    servers = list(containers(exported("playbooks/gpu-vllm.yaml", "k8s")))
    assert [c["resources"]["limits"] for c in servers] == [{"nvidia.com/gpu": "1"}] * 2


def test_probes_give_the_model_ups_health_budget():
    for container in containers(exported(PD, "lws")):
        startup = container["startupProbe"]
        budget = startup["periodSeconds"] * startup["failureThreshold"]
        if container["name"] == "proxy":  # ready once its backends are: test_proxy_readiness.py
            assert startup["httpGet"]["path"] == "/healthcheck" and budget == 120
        else:
            # up's 1200 s, then STARTUP_MARGIN_S: the server's own deadline ends first and says why
            assert startup["httpGet"] == {"path": "/health", "port": "http"} and budget == 1200 + 60
            assert container["readinessProbe"]["httpGet"] == startup["httpGet"]


def test_headless_workers_have_no_port_and_no_probe():
    body = exported("playbooks/vllm-ascend-mixed-2hosts-internal.yaml", "lws")[0].body
    worker = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert "ports" not in worker and "startupProbe" not in worker


def test_the_proxy_lists_each_server_as_the_cluster_reaches_it():
    def proxy_argv(spec, target, stack=None):
        return next(c.get("command") or c["args"] for c in containers(exported(spec, target, stack))
                    if c["name"] == "proxy")

    argv = proxy_argv(PD, "k8s")
    assert argv[argv.index("--prefiller-hosts") + 1] == "qwen3-pd1-prefill0-node1"  # the Service of that pod
    argv = proxy_argv("playbooks/vllm-ascend-pd-qwen3.yaml", "lws", "plain")  # a container per rank
    hosts = argv[argv.index("--decoder-hosts") + 1:argv.index("--decoder-ports")]
    ports = argv[argv.index("--decoder-ports") + 1:]
    # LWS pods by name under its headless Service: the leader, then worker 1; four ranks each
    assert hosts == ["qwen3-pd-decode0-0.qwen3-pd-decode0"] * 4 + ["qwen3-pd-decode0-0-1.qwen3-pd-decode0"] * 4
    assert ports == ["9100", "9101", "9102", "9103"] * 2


def test_labels_match_deployctls():
    manifests = exported(PD, "k8s")
    deployment = next(m.body for m in manifests if m.kind == "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"] == {
        "deployctl.deployment": "qwen3-pd1", "deployctl.role": "prefill",
        "deployctl.instance": "qwen3-pd1-prefill0-node1"}  # plain: MindCluster refuses part of a node
    labels = next(m.body for m in exported("playbooks/vllm-ascend-mixed-ep-1host.yaml", "k8s")
                  if m.kind == "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert labels["ring-controller.atlas"] == "ascend-910b"  # the default stack's (MindCluster's), on NPU pods only
    endpoint = next(m.body for m in manifests if m.kind == "Service" and m.name == "qwen3-pd1")
    assert endpoint["spec"]["selector"] == {"deployctl.deployment": "qwen3-pd1", "deployctl.role": "proxy"}
    assert all(m.body["metadata"]["namespace"] == "serving" for m in manifests)


def _volumes(manifests):
    for m in manifests:
        for template in _templates(m.body):
            yield from template["spec"].get("volumes", ())


def _templates(body):
    if body["kind"] == "Deployment":
        return [body["spec"]["template"]]
    if body["kind"] == "LeaderWorkerSet":
        return list(body["spec"]["leaderWorkerTemplate"].values())[2:]
    if body["kind"] == "ModelServing":
        return [r[k] for r in body["spec"]["template"]["roles"] for k in ("entryTemplate", "workerTemplate") if k in r]
    return []


def test_every_host_path_says_file_or_directory_so_a_missing_one_fails_at_the_pods_start():
    found = {}
    for spec in (PD, "playbooks/mixed-1host-910b.yaml"):
        for volume in _volumes(exported(spec, "k8s")):
            if "hostPath" in volume:
                found[volume["hostPath"]["path"]] = volume["hostPath"]["type"]
    assert found["/etc/hccn.conf"] == found["/usr/local/sbin/npu-smi"] == found["/etc/ascend_install.info"] == "File"
    assert found["/usr/local/Ascend/driver/tools/hccn_tool"] == found["/etc/localtime"] == "File"
    assert found["/usr/local/Ascend/driver"] == found["/data/models/qwen2-7b"] == "Directory"
    assert found["/var/log/npu/"] == "DirectoryOrCreate"  # written by the server, as docker -v would create it


def test_requests_default_per_card_and_the_proxy_gets_the_cardless_ones():
    by_name = {}
    for c in containers(exported(PD, "k8s")):
        by_name.setdefault(c["name"], []).append(c["resources"]["requests"])
    # prefill: one container of 8 cards, decode 16 (per card 4 CPUs, 32Gi); the proxy none
    assert by_name["server"] == [{"cpu": "32", "memory": "256Gi"}, {"cpu": "64", "memory": "512Gi"}]
    assert by_name["proxy"] == [{"cpu": "1", "memory": "2Gi"}]


def test_requests_come_from_the_spec_and_a_group_over_it():
    text = (ROOT / PD).read_text().replace("env: {HCCL_BUFFSIZE", "container: {cpu: 48, memory: 300Gi}, "
                                                                  "env: {HCCL_BUFFSIZE")
    text += "container: {cpu: 500m, memory: 64Gi}\n"
    spec = load_spec_text(text, environ=ENVIRON)
    manifests = export(spec, ExportOptions(target="k8s", npu_stack="plain", weights_pvc="w", secret="s"))
    servers = [c["resources"]["requests"] for c in containers(manifests) if c["name"] == "server"]
    assert servers == [{"cpu": "500m", "memory": "64Gi"}, {"cpu": "48", "memory": "300Gi"}]


def _probe_budget(container):
    probe = container["startupProbe"]
    return probe["failureThreshold"] * probe["periodSeconds"]


def test_the_start_up_probe_covers_the_specs_budget_and_up_waits_as_long():
    from argparse import Namespace

    from deployctl.commands.up import health_timeout

    text = (ROOT / PD).read_text() + "health: {startup_timeout: 3605}\n"
    spec = load_spec_text(text, environ=ENVIRON)
    manifests = export(spec, ExportOptions(target="lws", npu_stack="plain", weights_pvc="w", secret="s"))
    budgets = {c["name"]: _probe_budget(c) for c in containers(manifests)}
    assert budgets["server"] == 3670 and budgets["proxy"] == 120  # + 60 s margin, whole periods, never short
    assert health_timeout(spec, Namespace(health_timeout=None)) == 3605
    assert health_timeout(spec, Namespace(health_timeout=60.0)) == 60.0  # the flag over the spec


def test_without_the_spec_saying_the_default_scales_with_the_weights():
    text = (ROOT / PD).read_text().replace("Qwen3-30B-A3B", "DeepSeek-R1-671B")
    manifests = export(load_spec_text(text, environ=ENVIRON),
                       ExportOptions(target="k8s", npu_stack="plain", weights_pvc="w", secret="s"))
    # 600 + 2 x 1342 GB + the 60 s margin, in whole periods
    assert {_probe_budget(c) for c in containers(manifests) if c["name"] == "server"} == {3350}


def test_a_server_that_drains_longer_than_30_s_gets_as_long_a_grace_period(tmp_path):
    """The kubelet's SIGKILL comes terminationGracePeriodSeconds (default 30) after SIGTERM: not before the
    server's own --shutdown-timeout ends."""
    from deployctl.spec.load import load_spec
    from tests.export.cases import options

    text = (ROOT / PD).read_text().replace("max_num_batched_tokens: 16384}",
                                           "max_num_batched_tokens: 16384, extra_args: ['--shutdown-timeout=300']}")
    assert "--shutdown-timeout=300" in text
    (tmp_path / "pd.yaml").write_text(text)
    longer = load_spec(tmp_path / "pd.yaml", environ=ENVIRON)

    def drains(template):
        return any("--shutdown-timeout=300" in word for c in template["spec"]["containers"]
                   for word in c.get("command", []) + c.get("args", []))

    # a drained server's grace: the preStop's 5 s settle and 120 s drain, its own stop, a 15 s margin
    for target in ("k8s", "lws", "kthena"):
        assert {t["spec"].get("terminationGracePeriodSeconds") for t in templates(exported(PD, target))} == {
            5 + 120 + 30 + 15, None}  # None: the proxy, which drains nothing
        pods = list(templates(export(longer, options(PD, target))))
        assert any(drains(t) for t in pods) and not all(drains(t) for t in pods)  # the proxy does not
        assert all(t["spec"].get("terminationGracePeriodSeconds") == (5 + 120 + 300 + 15 if drains(t) else None)
                   for t in pods)
