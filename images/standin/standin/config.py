"""Everything the server needs, read and checked once at start-up (the only module here that reads files)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from standin.args import ArgsError, ServerArgs, parse_vllm_args
from standin.ranktable import PdLayout, RanktableProblem, pd_layout


class Refusal(Exception):
    """Why the server will not start; printed as one `standin: refusing to start:` line."""


@dataclass(frozen=True)
class Knobs:
    startup_s: float
    ttft_ms: float
    tpot_ms: float
    never_ready: bool
    crash_after_s: Optional[float]
    eos_after: Optional[int]  # without ignore_eos, generation stops after this many tokens
    default_max_tokens: int
    log_requests: bool
    hang_after_requests: Optional[int] = None  # then every generation hangs while /health stays 200
    fail_hccl_timeout: bool = False  # after loading, print CANN's HCCL timeout (EI0002) and exit 1
    empty_answers: bool = False  # every generation answers 200 with no body (a broken decoder behind a proxy)
    hccn_conf: str = "/etc/hccn.conf"  # HCCL's NIC table: without it as a readable file, HCCL answers go wrong
    capacity: Optional[int] = None  # sequences the emulated KV cache holds; None: unlimited (no queue, no slowdown)
    load_slowdown: float = 1.0  # with r of `capacity` running, TTFT and TPOT are x (1 + load_slowdown * r / capacity)
    engine_dead_after_requests: Optional[int] = None  # then the engine core dies (standin/stall.py, engine-dead)
    keep_alive_on_engine_death: bool = False  # VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1: the API server stays up


@dataclass(frozen=True)
class Config:
    args: ServerArgs
    role: str  # mixed | prefill | decode | scheduler
    knobs: Knobs
    layout: Optional[PdLayout]
    max_model_len: int
    devices_seen: Tuple[str, ...]
    env_names: Tuple[str, ...]
    env_shown: Tuple[Tuple[str, str], ...]  # only the variables the stand-in itself reads


# Values of these are shown by /standin/info; every other variable is shown by name only (it may be a secret).
SHOWN_ENV = ("GLOBAL_RANK_TABLE_FILE_PATH", "RANK_TABLE_FILE_PATH", "NODE_PORTS", "USE_OPENAI",
             "ASCEND_RT_VISIBLE_DEVICES")
_DAVINCI = re.compile(r"^davinci(\d+)$")


def _number(env: Mapping[str, str], name: str, default, kind=float):
    text = env.get(name, "")
    if text == "":
        return default
    try:
        value = kind(text)
    except ValueError:
        raise Refusal(f"{name}={text!r} is not a {'number' if kind is float else 'whole number'}") from None
    if value < 0:
        raise Refusal(f"{name}={text!r} must not be negative")
    return value


def read_knobs(env: Mapping[str, str]) -> Knobs:
    """The STANDIN_* settings (see images/standin/README.md)."""
    return Knobs(
        startup_s=_number(env, "STANDIN_STARTUP_S", 0.5),
        ttft_ms=_number(env, "STANDIN_TTFT_MS", 0.0),
        tpot_ms=_number(env, "STANDIN_TPOT_MS", 0.0),
        never_ready=env.get("STANDIN_NEVER_READY", "") == "1",
        crash_after_s=_number(env, "STANDIN_CRASH_AFTER_S", None),
        eos_after=_number(env, "STANDIN_EOS_AFTER", None, int),
        default_max_tokens=_number(env, "STANDIN_DEFAULT_MAX_TOKENS", 16, int),
        log_requests=env.get("STANDIN_LOG_REQUESTS", "") == "1",
        hang_after_requests=_number(env, "STANDIN_HANG_AFTER_REQUESTS", None, int),
        fail_hccl_timeout=env.get("STANDIN_FAIL_HCCL_TIMEOUT", "") == "1",
        empty_answers=env.get("STANDIN_EMPTY_ANSWERS", "") == "1",
        hccn_conf=env.get("STANDIN_HCCN_CONF") or "/etc/hccn.conf",
        capacity=_capacity(env),
        load_slowdown=_number(env, "STANDIN_LOAD_SLOWDOWN", 1.0),
        engine_dead_after_requests=_number(env, "STANDIN_ENGINE_DEAD_AFTER_REQUESTS", None, int),
        # vLLM's own variable (vllm/envs.py: bool(int(...))), read as vLLM reads it
        keep_alive_on_engine_death=env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") not in ("", "0"),
    )


def _capacity(env: Mapping[str, str]) -> Optional[int]:
    capacity = _number(env, "STANDIN_CAPACITY", None, int)
    if capacity == 0:  # a cache that holds nothing would queue every request for ever
        raise Refusal("STANDIN_CAPACITY='0' must be at least 1")
    return capacity


def hccn_conf_readable(knobs: Knobs) -> bool:
    """Is HCCL's /etc/hccn.conf a readable file? `docker run -v` of a host file that is missing mounts an empty
    directory in its place, and the server starts anyway (vllm-ascend #7711)."""
    return os.path.isfile(knobs.hccn_conf) and os.access(knobs.hccn_conf, os.R_OK)


def _model_config(model_dir: str) -> dict:
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise Refusal(f"--model {model_dir}: no config.json (not a Hugging Face weights directory)") from None
    except (OSError, ValueError) as exc:
        raise Refusal(f"--model {model_dir}: config.json unreadable: {exc}") from None
    if not isinstance(doc, dict):
        raise Refusal(f"--model {model_dir}: config.json is not a JSON object")
    return doc


def _devices(dev_dir: str) -> Tuple[str, ...]:
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return ()
    return tuple(sorted((m.group(1) for m in map(_DAVINCI.match, names) if m), key=int))


def _ranktable(env: Mapping[str, str], name: str):
    path = env.get(name, "")
    if not path:
        raise Refusal(f"{name} is not set")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise Refusal(f"{name}={path}: cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Refusal(f"{name}={path}: not JSON: {exc}") from None


def load_config(argv, launcher: str, env: Mapping[str, str]) -> Config:
    """Parse, read and check; raise Refusal with every reason the real server or scheduler would fail."""
    try:
        args = parse_vllm_args(argv)
    except ArgsError as exc:
        raise Refusal(str(exc)) from None
    knobs = read_knobs(env)
    model_config = _model_config(args.model)
    layout = None
    if launcher == "start_servers":
        try:
            layout = pd_layout(_ranktable(env, "GLOBAL_RANK_TABLE_FILE_PATH"),
                               _ranktable(env, "RANK_TABLE_FILE_PATH"),
                               env.get("NODE_PORTS"), env.get("USE_OPENAI"), args.tp, args.port)
        except RanktableProblem as exc:
            raise Refusal(str(exc)) from None
    role = layout.role if layout else "mixed"
    devices = _devices(env.get("STANDIN_DEV_DIR") or "/dev")
    gpus = [d.strip() for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if gpus and gpus != ["all"] and role == "mixed":
        # `docker run --gpus device=...` on a GPU host: dockerd's NVIDIA driver sets NVIDIA_VISIBLE_DEVICES.
        if len(gpus) != args.tp:
            raise Refusal(f"--tensor-parallel-size {args.tp} but {len(gpus)} GPU(s) visible "
                          f"(NVIDIA_VISIBLE_DEVICES={','.join(gpus)})")
    elif role != "scheduler":
        if len(devices) != args.tp:
            raise Refusal(f"--tensor-parallel-size {args.tp} but {len(devices)} NPU device(s) visible "
                          f"({', '.join('davinci' + d for d in devices) or 'none'})")
        if layout is not None:
            wanted = layout.backends[layout.own_index].device_ids
            if set(wanted) != set(devices):
                raise Refusal(f"the ranktable gives this {role} instance devices {list(wanted)} but "
                              f"the visible devices are {list(devices)}")
    return Config(
        args=args, role=role, knobs=knobs, layout=layout, max_model_len=model_limits(args, model_config),
        devices_seen=devices, env_names=tuple(sorted(env)), env_shown=shown_env(env),
    )


def model_limits(args: ServerArgs, model_config: dict) -> int:
    """The context length the server will use; refuse lengths the model or the batch size cannot hold."""
    limit = model_config.get("max_position_embeddings")
    max_model_len = args.max_model_len or (limit if isinstance(limit, int) and limit > 0 else 4096)
    if isinstance(limit, int) and limit > 0 and max_model_len > limit:
        raise Refusal(f"--max-model-len {max_model_len} is larger than the model's max_position_embeddings {limit}")
    if args.max_num_batched_tokens is not None and args.max_num_batched_tokens < max_model_len:
        raise Refusal(f"--max-num-batched-tokens {args.max_num_batched_tokens} is smaller than "
                      f"--max-model-len {max_model_len}")
    if args.kv_cache_dtype == "int8" and not args.quantization_param_path:
        raise Refusal("--kv-cache-dtype int8 needs --quantization-param-path")
    return max_model_len


def shown_env(env: Mapping[str, str], names=SHOWN_ENV) -> Tuple[Tuple[str, str], ...]:
    return tuple((k, env[k]) for k in sorted(env) if k in names or k.startswith("STANDIN_"))
