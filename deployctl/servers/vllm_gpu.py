"""vLLM's OpenAI server on NVIDIA GPUs (`server: vllm`, platform gpu; seed 002) (pure). It takes the AscendCloud
server's flags, less what only the vendor's fork reads: vLLM's --kv-cache-dtype has no int8 (its CacheDType is
auto or an fp8 kind) and its --quantization no smoothquant (an AscendCloud method)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional

from deployctl.servers.ascendcloud import FAMILY, MOE, OPENAI_SERVER, AscendCloudVllm
from deployctl.servers.features import Feature
from deployctl.servers.fields import VERBATIM, Flag, Refused
from deployctl.servers.shutdown import ROW as SHUTDOWN_TIMEOUT, shutdown_timeout

if TYPE_CHECKING:
    from deployctl.plan.container_types import Container, Mount, RanktableFiles
    from deployctl.spec.model import Instance, Spec

NO_INT8_KV = Refused("kv_cache_dtype", "kv_cache_dtype int8 is AscendCloud vLLM's: vLLM's --kv-cache-dtype takes "
                                       "auto or an fp8 kind (vllm/config/cache.py CacheDType), never int8",
                     hint="remove kv_cache_dtype and quantization_param_path")
NO_SCALES = Refused("quantization_param_path", "quantization_param_path goes with kv_cache_dtype int8, which vLLM "
                                               "on GPU does not take (an fp8 KV cache reads its scales from the "
                                               "checkpoint)", hint="remove it")
NO_SMOOTHQUANT = Refused("quantization", "quantization 'smoothquant' is AscendCloud vLLM's; vLLM on GPU has no "
                                         "such --quantization method (awq and gptq are among them)",
                         hint="use awq or gptq weights, or server: vllm on platform ascend", values=("smoothquant",))
NO_ASCEND = Refused("quantization", "quantization 'ascend' is vllm-ascend's (w8a8 weights, Ascend NPUs only); vLLM "
                                    "on GPU takes awq or gptq", hint="use awq or gptq weights", values=("ascend",))

TABLE = (
    *OPENAI_SERVER,
    NO_SMOOTHQUANT,
    NO_ASCEND,
    NO_INT8_KV,
    NO_SCALES,
    SHUTDOWN_TIMEOUT,  # where the image's vLLM has it (server_profiles.json `vllm.shutdown_timeout_from`)
    Flag("extra_args", VERBATIM),
    FAMILY,
    MOE,
)


def gpu_shape(spec: "Spec", instance: "Instance") -> tuple[Optional[str], tuple["Mount", ...]]:
    """`--gpus` of an instance and the weights' mount (GPU hosts need no device files or driver mounts)."""
    from deployctl.plan.container_types import Mount

    gpus = "device=" + ",".join(str(d) for d in instance.devices)
    if len(instance.devices) > 1:
        # docker reads --gpus as CSV: unquoted, `device=0,1` is device 0 plus a count of 1, and the
        # daemon refuses "cannot set both Count and DeviceIDs". Docker's documented form quotes it.
        gpus = f'"{gpus}"'
    mounts = (Mount(spec.weights.dest, spec.weights.dest),) if spec.weights.dest else ()
    return gpus, mounts


# deployctl finds the spare cards a surge server starts on with npu-smi's layout (facts/host_layout.py), which only
# Ascend hosts have: no probe reads which GPUs a GPU host has free (nvidia-smi is read for the driver only)
NO_GPU_SURGE = ("rollout.max_surge starts each replacement on spare cards first, and deployctl finds spare cards on "
                "Ascend hosts only (npu-smi): which GPUs are free is not probed on a GPU host")


OFFICIAL_IMAGE = "vllm-openai"  # vLLM's own image (docker.io/vllm/vllm-openai), tagged with its vLLM version


def image_has_shutdown_timeout(image: Optional[str], server_version: Optional[str] = None) -> bool:
    """Whether the image's vLLM takes --shutdown-timeout (vLLM 0.18.0 on): the spec's `server_version` says which
    vLLM a custom or mirrored image runs; else only vLLM's own image counts, by its tag (vllm/vllm-openai:v0.18.0
    on). Any other image gets no such flag: its tag may count otherwise (NGC's `25.09-py3`), and an older vLLM
    exits 2 on it."""
    from deployctl.spec.profiles import parse_version, version_from_image, vllm_shutdown_timeout_from

    first = vllm_shutdown_timeout_from()
    if first is None:
        return False
    if server_version:
        declared = parse_version(server_version)
        return declared is not None and declared >= first
    repository = (image or "").split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    tagged = version_from_image(image)
    return repository == OFFICIAL_IMAGE and tagged is not None and tagged[1] >= first


class VllmGpu(AscendCloudVllm):
    """The same OpenAI server and launcher as AscendCloud's (a GPU P/D spec runs the same start_servers.sh)."""

    platform, server, title = "gpu", "vllm", "vLLM on GPU"
    table = TABLE
    # server_version here is the vLLM version the image runs (no profile table: it decides --shutdown-timeout)
    unsupported = {**{f: r for f, r in AscendCloudVllm.unsupported.items() if f != Feature.VERSION_PROFILES},
                   Feature.SURGE: NO_GPU_SURGE}

    def command(self, spec: "Spec", instance: "Instance") -> tuple[str, ...]:
        """vLLM's OpenAI server, with --shutdown-timeout where the image's vLLM has it (mixed only: a P/D server
        starts through the vendor's start_servers.sh, whose own parsing is not vLLM's)."""
        from deployctl.servers.ascendcloud import VLLM_OPENAI, server_command
        from deployctl.servers.fields import model_values, render_flags

        if spec.mode == "disaggregated":
            return server_command(spec, instance, self.table)
        values = model_values(spec, instance)
        values["@shutdown_timeout"] = shutdown_timeout(image_has_shutdown_timeout(spec.image.name,
                                                                              spec.server_version),
                                                       instance.extra_args)
        return VLLM_OPENAI + render_flags(self.table, values)

    def container(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"],
                  networks: Optional[Mapping]) -> "Container":
        from deployctl.plan.container_types import instance_container
        from deployctl.servers.engine_ready import engine_ready_env

        gpus, mounts = gpu_shape(spec, instance)
        env = self._ranktable_env(spec, instance, ranktables) + engine_ready_env(spec)
        return instance_container(spec, instance, devices=(), mounts=mounts, command=self.command(spec, instance),
                                  env=env, gpus=gpus)
