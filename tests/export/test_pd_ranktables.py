"""The AscendCloud P/D flow on MindCluster (export/pd_ranktables.py): the in-pod merge program
(deployctl/incluster/pd_ranktable_merge.py), run as the pods run it (the image's python, the standard library only),
gives the bytes `deployctl ranktable merge` gives for the same per-instance ranktables, and the local file `up`
writes; the rendered init step runs as rendered; what it cannot use it refuses, naming the instance."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from deployctl.export.pd_ranktables import SCRIPT_DIR, SCRIPT_NAME
from deployctl.incluster import pd_ranktable_merge
from deployctl.ranktable.build import build_global_for_spec
from deployctl.ranktable.check import check_ranktable
from deployctl.ranktable.merge import merge_documents
from deployctl.ranktable.model import LocalRanktable, Server, ranktable_from_document, server_document, to_json
from deployctl.spec.load import load_spec
from tests.export.cases import ASCENDCLOUD_PD, ROOT, exported
from tests.testbed import layout

PROGRAM = Path(pd_ranktable_merge.__file__)
FORMATS = ROOT / "tests" / "fixtures" / "formats" / "ranktable"
STANDIN = ROOT / "images" / "standin"


def fixture_text(name: str) -> str:
    return (FORMATS / name / "stdout.txt").read_text()


def operator_hccl(entry: dict, rank_index: int = 0, node: str = "node-a") -> str:
    """What ascend-operator writes into rings-config-<Deployment> for the instance's one pod (mind-cluster
    component/ascend-operator/pkg/ranktable/common/common.go buildServerInfo, getDeviceList: rank_id =
    rankIndex x NPUs + index; server.go: device, server_id (the node), host_ip, container_ip (the pod);
    docs/en/scheduling/api/hccl.json_file_description.md). `entry` is the vendor entry, its server_ip the pod's."""
    devices = entry["device"]
    server = {"device": [{"device_id": d["device_id"], "device_ip": d["device_ip"],
                          "rank_id": str(rank_index * len(devices) + n)} for n, d in enumerate(devices)],
              "server_id": node, "host_ip": "203.0.113.1", "container_ip": entry["server_ip"]}
    return json.dumps({"status": "completed", "server_list": [server], "server_count": "1", "version": "1.0"})


def run(tmp_path: Path, inputs: list[tuple[str, str, str]], own: str, pod_ip: str, *extra: str):
    """Run the program as a pod does (`python3 -I`: nothing of deployctl importable) on (role, name, hccl.json)."""
    args = []
    for role, name, text in inputs:
        ring = tmp_path / "rings" / name
        ring.mkdir(parents=True, exist_ok=True)
        (ring / "hccl.json").write_text(text)
        args += ["--instance", role, name, str(ring)]
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-I", str(PROGRAM), *args, "--scheduler", "scheduler", "--own", own,
                           "--pod-ip", pod_ip, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return done, out


def test_the_program_merges_the_format_fixtures_as_ranktable_merge_does(tmp_path):
    """The two per-host files of the formats' 2-host case: `ranktable merge` gives the vendor's merged file byte
    for byte; the program, given each instance's ranktable as the operator writes it, gives the same bytes, and
    each pod's local file is its entry (the scheduler's: the `_host` file)."""
    hosts = [json.loads(fixture_text(f"pd-2host-node{n}-global")) for n in (1, 2)]
    expected = to_json(merge_documents([(f"node{n}", d) for n, d in enumerate(hosts, 1)]))
    assert expected == fixture_text("pd-2host-merged")
    table = ranktable_from_document(json.loads(expected))
    inputs, owners = [], []
    for group, role in (("1", "prefill"), ("2", "decode")):
        for n, server in enumerate(table.group(group)):
            name = f"{role}-{n}"
            # rank indexes as the operator hands them out (one pod each: 0), and one of 1: renumbered from 0
            inputs.append((role, name, operator_hccl(server_document(server), rank_index=n)))
            owners.append((name, server))
    scheduler_ip = table.group("0")[0].server_ip
    done, out = run(tmp_path / "scheduler", inputs, "scheduler", scheduler_ip)
    assert done.returncode == 0, done.stderr
    assert (out / "global_ranktable_merge.json").read_text() == expected
    assert (out / "local_ranktable.json").read_text() == to_json(LocalRanktable(Server(scheduler_ip, scheduler_ip)))
    for name, server in owners:
        done, out = run(tmp_path / name, inputs, name, server.server_ip, "--scheduler-address", scheduler_ip)
        assert done.returncode == 0, done.stderr
        assert (out / "global_ranktable_merge.json").read_text() == expected
        assert (out / "local_ranktable.json").read_text() == to_json(LocalRanktable(server))


def test_the_program_merges_the_beds_inputs_as_up_does(tmp_path):
    """demo-pd on the bed: `up` builds its ranktables from tb1's and tb2's device IPs (the bed's hccn_tool, tests/
    testbed/layout.py) and addresses; the program, given each instance's operator ranktable with those addresses
    as pod IPs, writes `up`'s global file and each instance's local file, which the stand-in's vendor-side reader
    (images/standin/standin/ranktable.py) takes for the same role."""
    spec = load_spec(ROOT / "playbooks" / "demo-pd.yaml")
    device_ips = {layout.host_name(i): dict(enumerate(layout.device_ips(i, 8))) for i in (1, 2)}
    addresses = {h.name: h.address for h in spec.hosts}
    up = build_global_for_spec(spec, device_ips, addresses)
    inputs = []
    for group, role in (("1", "prefill"), ("2", "decode")):
        for instance, server in zip(spec.role(role), up.global_ranktable.group(group)):
            inputs.append((role, instance.name, operator_hccl(server_document(server))))
    sys.path.insert(0, str(STANDIN))
    try:
        from standin.ranktable import pd_layout
    finally:
        sys.path.remove(str(STANDIN))
    node_ports = ",".join(map(str, spec.node_ports))
    scheduler = spec.scheduler
    for instance in (*spec.role("prefill"), *spec.role("decode"), scheduler):
        own = "scheduler" if instance is scheduler else instance.name
        extra = () if instance is scheduler else ("--scheduler-address", addresses[scheduler.host])
        done, out = run(tmp_path / instance.name, inputs, own, addresses[instance.host], *extra)
        assert done.returncode == 0, done.stderr
        merged = (out / "global_ranktable_merge.json").read_text()
        assert merged == up.global_json
        local = (out / "local_ranktable.json").read_text()
        assert local == up.local_files[instance.host][up.instance_files[instance.name]]
        assert check_ranktable(json.loads(merged), complete=True).valid
        found = pd_layout(json.loads(merged), json.loads(local), node_ports, "1", 2, instance.port)
        assert found.role == instance.role


def _entry(ip: str, first_device_ip: int) -> dict:
    return {"server_ip": ip, "device": [{"device_id": str(n), "device_ip": f"198.51.100.{first_device_ip + n}"}
                                        for n in range(2)]}


def test_an_instance_not_placed_yet_ends_the_bounded_wait_naming_it(tmp_path):
    inputs = [("prefill", "p0", operator_hccl(_entry("10.0.0.1", 1))),
              ("decode", "d0", '{\n    "status":"initializing"\n}\n')]
    done, out = run(tmp_path, inputs, "scheduler", "10.0.0.9", "--wait-s", "0")
    assert done.returncode == 1 and not (out / "global_ranktable_merge.json").exists()
    assert "gave up" in done.stderr and "d0 (decode)" in done.stderr and "'initializing'" in done.stderr


def test_a_ranktable_left_by_the_replaced_pod_is_not_taken_for_this_ones(tmp_path):
    """The operator keeps a replaced pod's ranktable (status completed) until it writes the new pod's."""
    inputs = [("prefill", "p0", operator_hccl(_entry("10.0.0.1", 1))),
              ("decode", "d0", operator_hccl(_entry("10.0.0.2", 5)))]
    done, _ = run(tmp_path, inputs, "p0", "10.0.0.7", "--scheduler-address", "10.0.0.9", "--wait-s", "0")
    assert done.returncode == 1 and "names the pod 10.0.0.1, not this pod (10.0.0.7)" in done.stderr


def test_what_ranktable_merge_refuses_the_program_refuses(tmp_path):
    twice = [("prefill", "p0", operator_hccl(_entry("10.0.0.1", 1))),
             ("decode", "d0", operator_hccl(_entry("10.0.0.2", 1)))]
    done, out = run(tmp_path / "twice", twice, "scheduler", "10.0.0.9")
    assert done.returncode == 1 and "device IP 198.51.100.1 twice" in done.stderr
    assert not (out / "global_ranktable_merge.json").exists()
    wide = dict(_entry("10.0.0.2", 5))
    wide["device"] = wide["device"] + [{"device_id": "2", "device_ip": "198.51.100.9"}]
    sizes = [("prefill", "p0", operator_hccl(_entry("10.0.0.1", 1))), ("decode", "d0", operator_hccl(wide))]
    done, _ = run(tmp_path / "sizes", sizes, "scheduler", "10.0.0.9")
    assert done.returncode == 1 and "one tensor-parallel size, got [2, 3]" in done.stderr


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def backends():
    """Two health endpoints on loopback addresses of their own (the instances' pod IPs)."""
    servers = [ThreadingHTTPServer((ip, 0), _Health) for ip in ("127.0.0.2", "127.0.0.3")]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    yield [(s.server_address[0], s.server_address[1]) for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


def _seed_export() -> dict:
    """The seed playbook's export (mindcluster, --to k8s), each object but the Services by name."""
    bodies = [m.body for m in exported(ASCENDCLOUD_PD, "k8s", "mindcluster")]
    return {b["metadata"]["name"]: b for b in bodies if b["kind"] != "Service"}


def _run_init(here: Path, by_name: dict, deployment: str, writes: dict, pod_ip: str, *edits) -> tuple[dict, Path]:
    """Run `deployment`'s init container as the kubelet would, its mount paths moved under `here`: each ConfigMap's
    keys projected as files, the operator's hccl.json of each instance from `writes` (name -> text), $(POD_IP)
    `pod_ip`; each edit (flag, value) replaces a flag's value (value None: drops the flag). Returns the pod spec and
    the directory the server reads its ranktables from."""
    pod = by_name[deployment]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:2] == ["python3", f"{SCRIPT_DIR}/{SCRIPT_NAME}"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    moved = {}
    for mount in init["volumeMounts"]:
        path = here / mount["mountPath"].lstrip("/")
        path.mkdir(parents=True)
        moved[mount["mountPath"]] = str(path)
        source = volumes[mount["name"]]
        if "configMap" in source:  # what the kubelet projects: the ConfigMap's keys as files
            for key, text in by_name[source["configMap"]["name"]]["data"].items():
                (path / key).write_text(text)
    for name, text in writes.items():  # the operator's write, once the instance's pod is placed
        assert json.loads(by_name[f"rings-config-{name}"]["data"]["hccl.json"]) == {"status": "initializing"}
        (Path(moved[f"/opt/deployctl/rings/{name}"]) / "hccl.json").write_text(text)

    def move(word: str) -> str:
        for path, local in moved.items():
            if word == path or word.startswith(path + "/"):
                return local + word[len(path):]
        return word

    argv = [move(word) for word in init["command"]]
    argv[argv.index("--pod-ip") + 1] = pod_ip  # the kubelet's $(POD_IP)
    for flag, value in edits:
        at = argv.index(flag)
        argv[at:at + 2] = [] if value is None else [flag, value]
    done = subprocess.run([sys.executable, "-I", *argv[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    directory = moved[next(m["mountPath"] for m in init["volumeMounts"] if m["mountPath"].endswith("/ranktables"))]
    return pod, Path(directory)


def _server_env(pod: dict) -> dict:
    server = next(c for c in pod["containers"] if c["name"] == "server")
    return {e["name"]: e.get("value") for e in server["env"]}


def test_the_rendered_scheduler_init_step_runs_as_rendered(tmp_path, backends):
    """The golden export's scheduler pod: its init container's command, with only its mount paths moved under
    tmp_path and NODE_PORTS to the local backends' ports, merges what the operator wrote into the directory the
    server reads, then returns once both instances answer their health path."""
    by_name = _seed_export()
    writes = {}
    for name, (ip, _) in zip(("llama3-70b-pd-prefill-0", "llama3-70b-pd-decode-0"), backends):
        entry = {"server_ip": ip, "device": [{"device_id": str(n), "device_ip": f"198.51.100.{10 * (ip[-1] == '3') + n}"}
                                             for n in range(8)]}
        writes[name] = operator_hccl(entry)
    pod, directory = _run_init(tmp_path, by_name, "llama3-70b-pd-scheduler-0", writes, "127.0.0.4",
                               ("--node-ports", ",".join(str(port) for _, port in backends)))
    env = _server_env(pod)
    merged = json.loads((directory / Path(env["GLOBAL_RANK_TABLE_FILE_PATH"]).name).read_text())
    assert check_ranktable(merged, complete=True).valid
    assert [[s["server_ip"] for s in g["server_list"]] for g in merged["server_group_list"]] == [
        ["127.0.0.4"], ["127.0.0.2"], ["127.0.0.3"]]
    local = json.loads((directory / Path(env["RANK_TABLE_FILE_PATH"]).name).read_text())
    assert local["server_list"] == [{"server_id": "127.0.0.4", "server_ip": "127.0.0.4"}]


def test_the_seed_playbooks_init_steps_write_ups_ranktables_from_the_beds_inputs(tmp_path):
    """The seed's P/D playbook (disaggregated-2hosts-910b, a whole server an instance) on the bed's merge inputs:
    node1 and node2 as the bed's tb1 and tb2 (their addresses as the pods' IPs, their NPUs' device IPs from the bed's
    hccn_tool, tests/testbed/layout.py). Each exported pod's init step, run as rendered on what ascend-operator
    writes for those pods, gives the global ranktable `up` builds from the same inputs and the pod's local file
    `up` writes for that instance, at the paths its server reads."""
    spec = load_spec(ROOT / ASCENDCLOUD_PD)
    bed = {"node1": 1, "node2": 2}
    device_ips = {host: dict(enumerate(layout.device_ips(i, spec.requirements.cards))) for host, i in bed.items()}
    addresses = {host: layout.host_address(i) for host, i in bed.items()}
    up = build_global_for_spec(spec, device_ips, addresses)
    writes = {}
    for instance in (*spec.role("prefill"), *spec.role("decode")):
        # what the device plugin reports of the pod's NPUs (the whole server) and the operator writes
        entry = {"server_ip": addresses[instance.host],
                 "device": [{"device_id": str(d), "device_ip": device_ips[instance.host][d]} for d in instance.devices]}
        writes[instance.name] = operator_hccl(entry, node=instance.host)
    by_name = _seed_export()
    scheduler = spec.scheduler
    for instance in (*spec.role("prefill"), *spec.role("decode"), scheduler):
        # the scheduler's headless Service resolves to its pod's IP; its own /health wait is the test above's
        edit = ("--health", None) if instance is scheduler else ("--scheduler-address", addresses[scheduler.host])
        pod, directory = _run_init(tmp_path / instance.name, by_name, instance.name, writes,
                                   addresses[instance.host], edit)
        env = _server_env(pod)
        merged = (directory / Path(env["GLOBAL_RANK_TABLE_FILE_PATH"]).name).read_text()
        assert merged == up.global_json
        local = (directory / Path(env["RANK_TABLE_FILE_PATH"]).name).read_text()
        assert local == up.local_files[instance.host][up.instance_files[instance.name]]
    assert [len(g.servers) for g in up.global_ranktable.groups] == [1, 1, 1]
    assert {len(s.devices) for g in up.global_ranktable.groups[1:] for s in g.servers} == {8}


def test_the_check_rules_of_the_cluster_ranktables_catch_a_broken_shape():
    """export --check's operator-ranktable, ranktable-merge and ranktable-update rules are met by the export and
    not met once the piece each rule reads is taken out; ranktable-refresh is one for the cluster."""
    import copy

    from deployctl.export.check import CLUSTER, MET, NOT_MET, _cluster_ranktables

    spec = load_spec(ROOT / ASCENDCLOUD_PD)
    bodies = [m.body for m in exported(ASCENDCLOUD_PD, "k8s", "mindcluster")]
    assert {r.name: r.status for r in _cluster_ranktables(spec, bodies)} == {
        "operator-ranktable": MET, "ranktable-merge": MET, "ranktable-update": MET, "ranktable-refresh": CLUSTER}

    def broken(edit) -> dict:
        copied = copy.deepcopy(bodies)
        for body in copied:
            if body["kind"] == "Deployment" and body["metadata"]["name"] == "llama3-70b-pd-decode-0":
                edit(body)
        return {r.name: r for r in _cluster_ranktables(spec, copied)}

    rules = broken(lambda b: b["spec"]["template"]["metadata"]["labels"].pop("deploy-name"))
    assert rules["operator-ranktable"].status == NOT_MET and "deploy-name" in rules["operator-ranktable"].detail
    rules = broken(lambda b: b["spec"]["template"]["spec"].pop("initContainers"))
    assert rules["ranktable-merge"].status == NOT_MET and "llama3-70b-pd-decode-0" in rules["ranktable-merge"].detail
    rules = broken(lambda b: b["spec"].update(strategy={"type": "RollingUpdate",
                                                        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}))
    assert rules["ranktable-update"].status == NOT_MET
    assert all("mind-cluster" in rules[name].source for name in ("operator-ranktable", "ranktable-update"))
