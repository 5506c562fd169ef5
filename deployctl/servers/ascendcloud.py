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
MOE = Deployctl("moe", "whether vllm-ascend's external DP launch suits the model (servers/vllm_ascend/rules_profile.py)")
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
        """P/D needs a cluster that writes each pod's ranktable: MindCluster's ascend-operator does (with
        --to k8s, export/pd_ranktables.py); on other stacks nothing does."""
        if spec.mode != "disaggregated" or stack == "mindcluster":
            return
        from deployctl.errors import Problem

        yield Problem(("topology",), _ranktable_flow() + f"; nothing on --npu-stack {stack} writes a pod's "
                                     "ranktable", hint=(
            "export with --npu-stack mindcluster --to k8s (its ascend-operator writes each instance's ranktable "
            "and an init step merges them in the pods), use server: vllm-ascend with a KV connector "
            "(topology.connector: mooncake), which maps to prefill and decode groups, or export a mode: mixed spec"))


def _ranktable_flow() -> str:
    return ("the AscendCloud P/D flow (server: vllm, mode: disaggregated) has no Kubernetes mapping here: its "
            "instances find each other through HCCL ranktables built from every host's NPU device IPs (hccn_tool) "
            "and its scheduler's NODE_PORTS")
