"""Triton's vLLM backend (`server: triton`, platform gpu; seed 002) (pure): `tritonserver` loads one model from a
repository that `up` writes (config.pbtxt and 1/model.json, repository.py); the engine arguments are model.json keys,
and Triton answers on its own generate endpoint and readiness path."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from deployctl.core import flag_value
from deployctl.errors import Problem
from deployctl.servers.ascendcloud import FAMILY, MOE
from deployctl.servers.base import Flavour
from deployctl.servers.features import Feature
from deployctl.servers.fields import Flag, Refused
from deployctl.servers.metrics import TRITON_VLLM_BACKEND
from deployctl.servers.requests import SMOKE_PROMPT
from deployctl.servers.vllm_gpu import NO_ASCEND, NO_GPU_SURGE, NO_INT8_KV, NO_SCALES, NO_SMOOTHQUANT, gpu_shape
from deployctl.spec.show import quoted

if TYPE_CHECKING:
    from deployctl.plan.container_types import Container, RanktableFiles
    from deployctl.spec.model import Instance, Spec
    from deployctl.spec.rules import Context

MODEL_JSON = "model.json"
GPU_MEMORY_UTILIZATION = "--gpu-memory-utilization"
READY_PATH = "/v2/health/ready"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def _reads_only_gpu_memory(extra_args) -> bool:
    """The one vLLM extra arg the backend's model.json is given (gpu_memory_utilization)."""
    words = list(extra_args)
    rest = [w for i, w in enumerate(words) if not (w == GPU_MEMORY_UTILIZATION or w.startswith(GPU_MEMORY_UTILIZATION
            + "=") or (i and words[i - 1] == GPU_MEMORY_UTILIZATION))]
    return not rest


def gpu_memory_utilization(extra_args: tuple[str, ...]) -> float:
    """`--gpu-memory-utilization X` (or `=X`) among the vLLM extra args sets it; 0.9 otherwise."""
    value = flag_value(extra_args, (GPU_MEMORY_UTILIZATION,))
    if value is None:
        return DEFAULT_GPU_MEMORY_UTILIZATION
    try:
        return float(value)
    except ValueError:
        from deployctl.errors import PlanError

        raise PlanError(f"--gpu-memory-utilization {value!r} is not a number",
                        hint="give a fraction such as 0.85 in extra_args") from None


TABLE = (
    # tritonserver's own command line
    Flag("@repository", "--model-repository"),
    Flag("@control", "--model-control-mode"),
    Flag("served_name", "--load-model"),  # also the model's directory and config.pbtxt name
    Flag("@port", "--http-port"),
    Flag("@grpc_port", "--grpc-port"),
    Flag("@metrics_port", "--metrics-port"),
    # the vLLM engine arguments, as 1/model.json keys
    Flag("@model", "model", target=MODEL_JSON),
    Flag("@tp", "tensor_parallel_size", target=MODEL_JSON),
    Flag("max_model_len", "max_model_len", target=MODEL_JSON),
    Flag("max_num_seqs", "max_num_seqs", target=MODEL_JSON),
    Flag("max_num_batched_tokens", "max_num_batched_tokens", target=MODEL_JSON),
    Flag("quantization", "quantization", target=MODEL_JSON),
    NO_SMOOTHQUANT,
    NO_ASCEND,
    NO_INT8_KV,
    NO_SCALES,
    Flag("extra_args", "gpu_memory_utilization", target=MODEL_JSON, read=gpu_memory_utilization),  # else 0.9
    # No `disable_log_requests` (the seed's model.json has it): Triton's vLLM backend builds
    # AsyncEngineArgs(**model.json) (vllm_backend src/model.py), and vLLM 0.12 removed that field (deprecated in
    # 0.10 for enable_log_requests, off by default), so every current image refuses to load the model with it.
    Refused("extra_args", "server triton reads only --gpu-memory-utilization from extra_args (model.json takes "
                          "engine arguments as keys); every other word would be dropped",
            hint="remove them, or use server: vllm", allows=_reads_only_gpu_memory),
    FAMILY,
    MOE,
)


def check_served_name(c: Context) -> Iterator[Problem]:
    """Triton's model repository names a directory after served_name; ':' has no place there (a spec rule of
    Triton's alone, so it lives with the flavour)."""
    name = c.value(("model", "served_name"), str)
    if name is not None and ":" in name:
        yield Problem(("model", "served_name"), f"{quoted(name)} cannot name a Triton model: use letters, digits, "
                      f"'.', '_' and '-'", hint="Triton's model repository holds a directory of that name")


class TritonVllm(Flavour):
    platform, server, title = "gpu", "triton", "Triton's vLLM backend"
    table = TABLE
    wrong_platform_hint = "use server: vllm on Ascend, or set platform: gpu"
    extra_ports = (("grpc_port", 1), ("metrics_port", 2))
    port_keys = {"grpc_port": "server is triton", "metrics_port": "server is triton"}
    unsupported = {
        Feature.OPENAI_API: "a front routes OpenAI requests; Triton's vLLM backend serves its own generate endpoint",
        Feature.ONE_TOKEN_LIVENESS: "its generate endpoint is not the OpenAI one the one-token liveness probe asks: "
                                    "`status` and `watch` judge it by its health alone",
        Feature.COMPILE_CACHE: "Triton's vLLM backend has no compile cache deployctl knows of (no start-up profile "
                               "names where its caches live)",
        Feature.VERSION_PROFILES: "server_version picks a vllm-ascend profile; server triton has none",
        Feature.SURGE: NO_GPU_SURGE,
    }
    metrics = TRITON_VLLM_BACKEND

    def startup(self, spec: "Spec"):
        """Triton logs its own start-up lines, which no profile lists yet: its ledger has no server phases and
        `cache.compile` is refused."""
        return None

    def metrics_endpoint(self, instance: "Instance") -> Optional[tuple[int, str]]:
        # Triton's metrics service (--metrics-port), not its HTTP port, serves /metrics
        return (instance.metrics_port, "/metrics") if instance.metrics_port else None

    def check(self, c: "Context") -> Iterator["Problem"]:
        yield from check_served_name(c)

    def container(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"],
                  networks: Optional[Mapping]) -> "Container":
        from deployctl.plan.container_types import Mount, instance_container
        from deployctl.servers.triton.repository import repository_dir, tritonserver_command

        gpus, mounts = gpu_shape(spec, instance)
        mounts += (Mount(repository_dir(spec), repository_dir(spec)),)
        return instance_container(spec, instance, devices=(), mounts=mounts,
                                  command=tritonserver_command(spec, instance), gpus=gpus)

    def repository_files(self, spec: "Spec", instance: "Instance") -> Mapping[str, bytes]:
        from deployctl.servers.triton.repository import repository_files

        return repository_files(spec, instance)

    def repository_dir(self, spec: "Spec") -> Optional[str]:
        from deployctl.servers.triton.repository import repository_dir

        return repository_dir(spec)

    def deployed_dirs(self, spec: "Spec") -> tuple[str, ...]:
        from deployctl.servers.triton.repository import model_dir

        return (model_dir(spec), f"{model_dir(spec)}/1")  # config.pbtxt, 1/model.json: one level each

    def health_path(self, instance: Optional["Instance"] = None) -> str:
        return READY_PATH  # strict by default: ready only once its models are

    def ready_path(self) -> Optional[str]:
        return READY_PATH

    def answers_path(self, spec: "Spec") -> str:
        return f"/v2/models/{spec.model.served_name}/generate"

    def smoke_path(self, spec: "Spec") -> str:
        return self.answers_path(spec)

    def smoke_body(self, spec: "Spec") -> bytes:
        # Triton's generate extension: the vLLM backend's inputs as top-level keys, greedy
        return json.dumps({"text_input": SMOKE_PROMPT, "parameters": {"stream": False, "temperature": 0}}).encode()

    def own_answer_body(self, prompt: str, tokens: int) -> Optional[str]:
        return json.dumps({"text_input": prompt, "parameters": {"stream": False, "temperature": 0,
                                                                "max_tokens": tokens}}, separators=(",", ":"))
