"""Triton's vLLM-backend model repository for `server: triton`: config.pbtxt and 1/model.json (pure).

The repository lives on the host under `/var/lib/deployctl/<deployment>/triton/<served_name>/` and is
mounted read-only at the same path in the container, so host and container agree on every path.
"""

from __future__ import annotations

import hashlib
import json
from typing import Mapping

from deployctl.errors import PlanError
from deployctl.spec.model import Instance, Spec

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
CONFIG_NAME = "config.pbtxt"
ENGINE_ARGS_NAME = "1/model.json"

# The vLLM backend's I/O contract (triton-inference-server/vllm_backend samples): a decoupled model,
# batching left to vLLM (max_batch_size 0), one model instance that owns all of its GPUs.
CONFIG_TEMPLATE = """name: "{name}"
backend: "vllm"
max_batch_size: 0

model_transaction_policy {{
  decoupled: true
}}

input [
  {{
    name: "text_input"
    data_type: TYPE_STRING
    dims: [ 1 ]
  }},
  {{
    name: "stream"
    data_type: TYPE_BOOL
    dims: [ 1 ]
    optional: true
  }},
  {{
    name: "sampling_parameters"
    data_type: TYPE_STRING
    dims: [ 1 ]
    optional: true
  }},
  {{
    name: "exclude_input_in_output"
    data_type: TYPE_BOOL
    dims: [ 1 ]
    optional: true
  }}
]

output [
  {{
    name: "text_output"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }}
]

instance_group [
  {{
    count: 1
    kind: KIND_MODEL
  }}
]
"""


def repository_dir(spec: Spec) -> str:
    """The model repository (`--model-repository`) on the host and inside the container."""
    return f"{spec.remote_state_dir}/triton"


def model_dir(spec: Spec) -> str:
    return f"{repository_dir(spec)}/{spec.model.served_name}"


def render_config(spec: Spec) -> str:
    """config.pbtxt: the model is named after served_name, which is also its directory's name."""
    return CONFIG_TEMPLATE.format(name=spec.model.served_name)


def engine_args(spec: Spec, instance: Instance) -> dict:
    """vLLM engine arguments (snake_case) for model.json; only keys the spec gives, plus the fixed ones."""
    model = spec.model
    args: dict = {
        "model": spec.weights.dest or "/model",
        "tensor_parallel_size": instance.tp,
    }
    if model.max_model_len is not None:
        args["max_model_len"] = model.max_model_len
    if instance.max_num_seqs is not None:
        args["max_num_seqs"] = instance.max_num_seqs
    if instance.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = instance.max_num_batched_tokens
    args["gpu_memory_utilization"] = _gpu_memory_utilization(instance.extra_args)
    # No `disable_log_requests` (the seed's model.json has it): Triton's vLLM backend builds
    # AsyncEngineArgs(**model.json) (vllm_backend src/model.py), and vLLM 0.12 removed that field (deprecated in
    # 0.10 for enable_log_requests, off by default), so every current image refuses to load the model with it.
    return args


def _gpu_memory_utilization(extra_args: tuple[str, ...]) -> float:
    """`--gpu-memory-utilization X` (or `=X`) among the vLLM extra args sets it; 0.9 otherwise."""
    value = None
    for i, word in enumerate(extra_args):
        if word.startswith("--gpu-memory-utilization="):
            value = word.split("=", 1)[1]
        elif word == "--gpu-memory-utilization" and i + 1 < len(extra_args):
            value = extra_args[i + 1]
    if value is None:
        return DEFAULT_GPU_MEMORY_UTILIZATION
    try:
        return float(value)
    except ValueError:
        raise PlanError(f"--gpu-memory-utilization {value!r} is not a number",
                        hint="give a fraction such as 0.85 in extra_args") from None


def render_engine_args(spec: Spec, instance: Instance) -> str:
    return json.dumps(engine_args(spec, instance), indent=2) + "\n"


def repository_files(spec: Spec, instance: Instance) -> Mapping[str, bytes]:
    """Host path -> content of every file of the model repository one instance reads."""
    base = model_dir(spec)
    return {
        f"{base}/{CONFIG_NAME}": render_config(spec).encode(),
        f"{base}/{ENGINE_ARGS_NAME}": render_engine_args(spec, instance).encode(),
    }


def repository_digest(files: Mapping[str, bytes]) -> str:
    """Hash over paths and contents, so a changed model.json replaces the container."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + files[path] + b"\0")
    return digest.hexdigest()


def tritonserver_command(spec: Spec, instance: Instance) -> tuple[str, ...]:
    """`tritonserver` in explicit model-control mode, loading only the served model."""
    port = instance.port
    grpc = instance.grpc_port if instance.grpc_port is not None else port + 1
    metrics = instance.metrics_port if instance.metrics_port is not None else port + 2
    return (
        "tritonserver",
        "--model-repository", repository_dir(spec),
        "--model-control-mode", "explicit",
        "--load-model", spec.model.served_name,
        "--http-port", str(port),
        "--grpc-port", str(grpc),
        "--metrics-port", str(metrics),
    )
