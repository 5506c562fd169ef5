"""How long vLLM's API server waits for its engine cores at start, sized from deployctl's own health wait (pure).

vLLM waits VLLM_ENGINE_READY_TIMEOUT_S for the engine cores to report ready (load the weights, compile, size the
KV cache) and then exits (vLLM 0.33.0 vllm/v1/engine/core_client.py:762-771 and :1979-1986); its default is 600 s
(vllm/envs.py:813-815), shorter than the start-up budget `up` waits for a large model (spec/startup.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deployctl.spec.model import EnvVar, Spec

ENGINE_READY_TIMEOUT = "VLLM_ENGINE_READY_TIMEOUT_S"


def engine_ready_env(spec: "Spec", written: "tuple[EnvVar, ...]" = ()) -> "tuple[EnvVar, ...]":
    """VLLM_ENGINE_READY_TIMEOUT_S = the start-up budget, so vLLM never gives up before `up` does; nothing where
    the spec's or a group's env writes it (theirs is passed as they wrote it)."""
    from deployctl.spec.model import EnvVar
    from deployctl.spec.startup import startup_budget

    if any(var.name == ENGINE_READY_TIMEOUT for var in (*spec.env, *written)):
        return ()
    seconds = str(startup_budget(spec).seconds)
    return (EnvVar(ENGINE_READY_TIMEOUT, seconds, seconds),)
