"""Triton's vLLM-backend model repository for `server: triton`: config.pbtxt and 1/model.json (pure).

The repository lives on the host under `/var/lib/deployctl/<deployment>/triton/<served_name>/` and is
mounted read-only at the same path in the container, so host and container agree on every path.
"""

from __future__ import annotations

import hashlib
import json
from typing import Mapping

from deployctl.servers.fields import model_values, render_flags, render_keys
from deployctl.servers.triton import MODEL_JSON, TABLE
from deployctl.spec.model import Instance, Spec

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
    """vLLM engine arguments (snake_case) for model.json, from Triton's field table (this package's __init__):
    only keys the spec gives, plus the fixed ones."""
    return render_keys(TABLE, _values(spec, instance), MODEL_JSON)


def _values(spec: Spec, instance: Instance) -> dict:
    port = instance.port
    values = model_values(spec, instance)
    values.update({
        "@repository": repository_dir(spec),
        "@control": "explicit",
        "@grpc_port": instance.grpc_port if instance.grpc_port is not None else port + 1,
        "@metrics_port": instance.metrics_port if instance.metrics_port is not None else port + 2,
    })
    return values


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
    return ("tritonserver",) + render_flags(TABLE, _values(spec, instance))
