"""AscendCloud vLLM (`server: vllm`, platform ascend; seed 001): the vendor's OpenAI server, and its P/D launcher
that finds the other instances through HCCL ranktables and the scheduler's NODE_PORTS (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from deployctl.servers.base import Flavour
from deployctl.servers.features import Feature
from deployctl.servers.fields import VERBATIM, Deployctl, Flag, Refused, render_flags

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.plan.container_types import Container, Mount, RanktableFiles
    from deployctl.spec.model import EnvVar, Instance, Spec

# The vendor's P/D launcher inside the AscendCloud image (seed 001); the stand-in image has it too.
START_SERVERS = "/home/ma-user/AscendCloud/AscendCloud-LLM/llm_tools/PD_separate/start_servers.sh"
VLLM_OPENAI = ("python", "-m", "vllm.entrypoints.openai.api_server")
FAMILY = Deployctl("family", "the model table's minimum cards and longest max_model_len (spec/known_models.py)")
MOE = Deployctl("moe", "whether vllm-ascend's external DP launch suits the model (spec/rules_profile.py)")
ASCEND_QUANTIZATION = ("quantization 'ascend' is vllm-ascend's (w8a8 weights); server vllm takes awq, smoothquant "
                       "or gptq")

# The vLLM OpenAI server's flags, in the order the runbook writes them (the scheduler runs with the P/D TP);
# vLLM on GPU starts the same server with the same flags (servers/vllm_gpu.py).
OPENAI_SERVER = (
    Flag("@model", "--model"),
    Flag("@tp", "--tensor-parallel-size"),
    Flag("max_model_len", "--max-model-len"),
    Flag("max_num_seqs", "--max-num-seqs"),
    Flag("max_num_batched_tokens", "--max-num-batched-tokens"),
    Flag("@host", "--host"),
    Flag("@port", "--port"),
    Flag("served_name", "--served-model-name"),
    Flag("quantization", "--quantization"),
)
TABLE = (
    *OPENAI_SERVER,
    Refused("quantization", ASCEND_QUANTIZATION, hint="use server: vllm-ascend for these weights", values=("ascend",)),
    Flag("kv_cache_dtype", "--kv-cache-dtype"),  # AscendCloud's vLLM takes int8 with a scales file
    Flag("quantization_param_path", "--quantization-param-path", after="kv_cache_dtype"),
    Flag("extra_args", VERBATIM),
    FAMILY,
    MOE,
)


def serve_args(spec: "Spec", instance: "Instance", table: tuple = TABLE) -> tuple[str, ...]:
    """The vLLM OpenAI-server arguments of one instance (the scheduler runs with the P/D TP)."""
    from deployctl.servers.fields import model_values

    return render_flags(table, model_values(spec, instance))


def server_command(spec: "Spec", instance: "Instance", table: tuple = TABLE) -> tuple[str, ...]:
    """P/D through the vendor's launcher; mixed through the OpenAI server's module."""
    if spec.mode == "disaggregated":
        return ("sh", START_SERVERS) + serve_args(spec, instance, table)
    return VLLM_OPENAI + serve_args(spec, instance, table)


def ascend_mounts(spec: "Spec") -> tuple["Mount", ...]:
    """Runbook section 5, plus hccn.conf/hccn_tool and the ranktables for P/D; never /home/ma-user."""
    from deployctl.facts.hccn_tool import HCCN_TOOL_PATH as HCCN_TOOL  # mounted into the containers
    from deployctl.plan.container_types import Mount, ranktable_dir

    mounts = [
        Mount("/etc/localtime", "/etc/localtime"),
        Mount("/usr/local/Ascend/driver", "/usr/local/Ascend/driver"),
        Mount("/etc/ascend_install.info", "/etc/ascend_install.info"),
        Mount("/var/log/npu/", "/usr/slog", read_only=False),
        Mount("/usr/local/sbin/npu-smi", "/usr/local/sbin/npu-smi"),
        Mount("/sys/fs/cgroup", "/sys/fs/cgroup"),
    ]
    if spec.mode == "disaggregated":
        mounts += [
            Mount("/etc/hccn.conf", "/etc/hccn.conf"),
            Mount(HCCN_TOOL, "/usr/local/bin/hccn_tool"),
            Mount(ranktable_dir(spec), ranktable_dir(spec)),
        ]
    if spec.weights.dest:
        mounts.append(Mount(spec.weights.dest, spec.weights.dest))
    return tuple(mounts)


def ranktable_env(spec: "Spec", instance: "Instance", files: "RanktableFiles") -> tuple["EnvVar", ...]:
    """GLOBAL_RANK_TABLE_FILE_PATH, RANK_TABLE_FILE_PATH, NODE_PORTS, USE_OPENAI for a P/D instance."""
    from deployctl.plan.container_types import ranktable_dir
    from deployctl.spec.model import EnvVar

    directory = ranktable_dir(spec)
    values = (
        ("GLOBAL_RANK_TABLE_FILE_PATH", f"{directory}/{files.global_name}"),
        ("RANK_TABLE_FILE_PATH", f"{directory}/{files.local_names[instance.name]}"),
        ("NODE_PORTS", ",".join(str(p) for p in spec.node_ports)),
        ("USE_OPENAI", "1"),
    )
    return tuple(EnvVar(k, v, v) for k, v in values)


class AscendCloudVllm(Flavour):
    platform, server, title = "ascend", "vllm", "AscendCloud vLLM"
    table = TABLE
    unsupported = {Feature.VERSION_PROFILES: "server_version picks a vllm-ascend profile; server vllm has none"}

    def uses_ranktables(self, spec: "Spec") -> bool:
        return spec.mode == "disaggregated"

    def command(self, spec: "Spec", instance: "Instance") -> tuple[str, ...]:
        return server_command(spec, instance, self.table)

    def container(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"],
                  networks: Optional[Mapping]) -> "Container":
        from deployctl.plan.container_types import MANAGER_DEVICES, instance_container

        devices = tuple(f"/dev/davinci{d}" for d in instance.devices) + MANAGER_DEVICES
        return instance_container(spec, instance, devices=devices, mounts=ascend_mounts(spec),
                                  command=self.command(spec, instance), env=self._ranktable_env(spec, instance,
                                                                                                ranktables))

    def _ranktable_env(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"]) -> tuple:
        if self.uses_ranktables(spec) and ranktables is not None:
            return ranktable_env(spec, instance, ranktables)
        return ()

    def export_refusals(self, spec: "Spec", stack: str) -> Iterator["Problem"]:
        if spec.mode != "disaggregated":
            return
        from deployctl.errors import Problem

        if stack == "mindcluster":
            yield from _mindcluster_pieces(spec)
            return
        yield Problem(("topology",), _ranktable_flow() + f"; nothing on --npu-stack {stack} writes a pod's "
                                     "ranktable", hint=(
            "export with --npu-stack mindcluster (its Ascend operator writes each pod's ranktable; that export is "
            "not built yet, and its refusal names each missing piece), use server: vllm-ascend with a KV connector "
            "(topology.connector: mooncake), which maps to prefill and decode groups, or export a mode: mixed spec"))


def _ranktable_flow() -> str:
    return ("the AscendCloud P/D flow (server: vllm, mode: disaggregated) has no Kubernetes mapping: its instances "
            "find each other through HCCL ranktables built from every host's NPU device IPs (hccn_tool) and its "
            "scheduler's NODE_PORTS, and neither LeaderWorkerSet, Kthena nor plain Kubernetes renders those")


def _mindcluster_pieces(spec: "Spec") -> Iterator["Problem"]:
    """On MindCluster the ranktables could come from the cluster; what the export lacks for that, piece by piece,
    each at the spec path it serves (issue 30: the refusal names every missing piece)."""
    from deployctl.errors import Problem
    from deployctl.plan.container_types import ranktable_dir

    directory = ranktable_dir(spec)
    yield Problem(("topology",), (
        f"the global ranktable (GLOBAL_RANK_TABLE_FILE_PATH, {directory}/...) that `up` merges on the control "
        "machine from every instance's local one, with each host's address as its server_ip: in a cluster it must "
        "be merged from the pods' own ranktables and addresses once all are placed, and the export renders no such "
        "step"), hint=("an init step per P/D pod (and the scheduler's) that waits for every instance's local "
                       "ranktable and merges them in the vendor's format (`deployctl ranktable merge`, as "
                       "pd_ranktable_tools.py --mode merge) into a volume the pods share; not built yet"))
    for instance in spec.role("prefill") + spec.role("decode"):
        yield Problem(instance.path, (
            f"{instance.name}'s local ranktable (RANK_TABLE_FILE_PATH: the device IPs of its {len(instance.devices)} "
            "NPUs, which `up` reads with hccn_tool on its host): the NPUs are the device plugin's choice, known only "
            "in the placed pod, and the export renders nothing that writes their ranktable"), hint=(
            "a pod the Ascend operator writes a ranktable for (MindCluster's ascend-operator with Volcano: the "
            "ranktable of the pod's allocated NPUs), its path given as RANK_TABLE_FILE_PATH; not built yet"))
    scheduler = spec.role("scheduler")
    if scheduler:
        ports = ",".join(str(p) for p in spec.node_ports)
        yield Problem(scheduler[0].path, (
            f"the scheduler reaches the instances at NODE_PORTS ({ports}) on their global-ranktable server_ip, a "
            "host's address under `up`: a pod's address is its own and known only once it runs, and the export "
            "wires neither"), hint=(
            "the merge step (at topology) writing each pod's IP as its server_ip, so that the scheduler reads "
            "them from the global ranktable as under `up`; not built yet"))

