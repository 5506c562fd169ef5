"""Parse the vLLM OpenAI server's command line (the subset the stand-in needs; the rest is ignored)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple


class ArgsError(ValueError):
    """A command line the real server would also reject."""


@dataclass(frozen=True)
class ServerArgs:
    model: str
    served_names: Tuple[str, ...]
    tp: int
    max_model_len: Optional[int]
    max_num_seqs: Optional[int]
    max_num_batched_tokens: Optional[int]
    host: str
    port: int
    quantization: Optional[str]
    kv_cache_dtype: Optional[str]
    quantization_param_path: Optional[str]
    ignored: Tuple[str, ...]  # unknown flags (with their value, if any), for one log line each
    argv: Tuple[str, ...]
    shutdown_timeout: Optional[int] = None  # None: not given (the server stops as vLLM without it does)


# Flags the stand-in reads; the value is the attribute name. Aliases are vLLM's own short forms.
_VALUE_FLAGS = {
    "--model": "model",
    "--tensor-parallel-size": "tp",
    "-tp": "tp",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--host": "host",
    "--port": "port",
    "--quantization": "quantization",
    "-q": "quantization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--quantization-param-path": "quantization_param_path",
    # vLLM >= 0.18 (vllm #34730/#36666): how long a SIGTERM lets requests in flight finish (standin/drain.py)
    "--shutdown-timeout": "shutdown_timeout",
}
_INT_FIELDS = ("tp", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "port", "shutdown_timeout")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def _normalise(flag: str) -> str:
    # vLLM's FlexibleArgumentParser accepts --max_model_len as well as --max-model-len.
    return "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag


def _is_value(word: str) -> bool:
    return not word.startswith("-") or bool(_NUMBER.match(word))


def parse_vllm_args(argv) -> ServerArgs:
    """Read `--flag value` and `--flag=value` forms; unknown flags are collected, never fatal."""
    argv = tuple(argv)
    values: dict = {}
    served: list = []
    ignored: list = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if not word.startswith("-"):
            ignored.append(word)
            continue
        flag, eq, inline = word.partition("=")
        flag = _normalise(flag)
        if flag == "--served-model-name":
            # nargs="+" in vLLM: every following word up to the next flag is one more name.
            if eq:
                served.append(inline)
            while i < len(argv) and not argv[i].startswith("-"):
                served.append(argv[i])
                i += 1
            if not served:
                raise ArgsError("--served-model-name: expected at least one name")
            continue
        if flag in _VALUE_FLAGS:
            if eq:
                value = inline
            elif i < len(argv) and _is_value(argv[i]):
                value = argv[i]
                i += 1
            else:
                raise ArgsError(f"{flag}: expected a value")
            values[_VALUE_FLAGS[flag]] = value
            continue
        # Unknown flag: it owns the next word when that word is not a flag (vLLM has no positionals).
        if not eq and i < len(argv) and _is_value(argv[i]):
            ignored.append(f"{word} {argv[i]}")
            i += 1
        else:
            ignored.append(word)
    for name in _INT_FIELDS:
        if name in values:
            try:
                values[name] = int(values[name])
            except ValueError:
                flag = "--" + name.replace("_", "-") if name != "tp" else "--tensor-parallel-size"
                raise ArgsError(f"{flag}: {values[name]!r} is not an integer") from None
    if not values.get("model"):
        raise ArgsError("--model is required (the weights directory)")
    tp = values.get("tp", 1)
    if tp < 1:
        raise ArgsError(f"--tensor-parallel-size: {tp} must be at least 1")
    port = values.get("port", 8000)
    if not 0 < port < 65536:
        raise ArgsError(f"--port: {port} is not a port number")
    if values.get("shutdown_timeout", 0) < 0:  # pydantic's Field(ge=0), vllm/config/vllm.py:454 in 0.33.0
        raise ArgsError(f"--shutdown-timeout: {values['shutdown_timeout']} must be at least 0")
    return ServerArgs(
        model=values["model"],
        served_names=tuple(served) or (values["model"],),
        tp=tp,
        max_model_len=values.get("max_model_len"),
        max_num_seqs=values.get("max_num_seqs"),
        max_num_batched_tokens=values.get("max_num_batched_tokens"),
        host=values.get("host", "0.0.0.0"),
        port=port,
        quantization=values.get("quantization"),
        kv_cache_dtype=values.get("kv_cache_dtype"),
        quantization_param_path=values.get("quantization_param_path"),
        ignored=tuple(ignored),
        argv=argv,
        shutdown_timeout=values.get("shutdown_timeout"),
    )
