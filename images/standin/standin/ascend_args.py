"""Parse upstream vLLM's `vllm serve MODEL [flags]` (with vllm-ascend's DP, EP and KV connector flags)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Tuple

from standin import serve_flags
from standin.args import ArgsError, ServerArgs, _is_value, _normalise, parse_vllm_args

# Value flags only `vllm serve` gets from deployctl; the model flags go on to parse_vllm_args.
_DP_INT_FLAGS = {
    "--data-parallel-size": "dp", "-dp": "dp",
    "--data-parallel-rank": "rank", "-dpn": "rank",
    "--data-parallel-size-local": "local", "-dpl": "local",
    "--data-parallel-start-rank": "start", "-dpr": "start",
    "--data-parallel-rpc-port": "rpc_port", "-dpp": "rpc_port",
    # vLLM >= 0.18 (vllm #34730); older versions' parsers refuse it (serve_flags.check) before this runs
    "--shutdown-timeout": "shutdown_timeout",
}
_DP_TEXT_FLAGS = {
    "--data-parallel-address": "address", "-dpa": "address",
    "--kv-transfer-config": "kv_transfer_config",
    "--additional-config": "additional_config",
    "--compilation-config": "compilation_config", "-O": "compilation_config",
}
_BOOL_FLAGS = {"--enable-expert-parallel": "expert_parallel", "-ep": "expert_parallel", "--headless": "headless"}
_JSON_FLAGS = ("kv_transfer_config", "additional_config", "compilation_config")
DEFAULT_RPC_PORT = 29550  # vLLM's default --data-parallel-rpc-port


@dataclass(frozen=True)
class AscendArgs:
    server: ServerArgs  # the model flags; server.model is the positional MODEL
    dp: int
    rank: Optional[int]  # external launch: this process's one DP rank
    local: int  # ranks this process runs
    start: int  # its first global rank
    start_given: bool  # --data-parallel-start-rank was on the command line (vLLM >= 0.28: hybrid LB, see dpgroup)
    address: Optional[str]
    rpc_port: int
    expert_parallel: bool
    headless: bool
    port_given: bool
    kv_transfer_config: Optional[dict]
    additional_config: Optional[dict]
    compilation_config: Optional[dict]
    shutdown_timeout: int = 0  # seconds a SIGTERM lets requests in flight finish (0: abort them), standin/drain.py

    @property
    def external(self) -> bool:
        return self.rank is not None

    @property
    def ranks(self) -> Tuple[int, ...]:
        return tuple(range(self.start, self.start + self.local))


def parse_serve(argv, vllm_version: Optional[str] = None) -> AscendArgs:
    """`serve MODEL --flag value|--flag=value ...`; raise ArgsError for what vLLM's parser would reject, and
    serve_flags.UsageError (argparse's exit 2) for an option `vllm_version`'s `vllm serve` does not have."""
    argv = tuple(argv)
    if not argv or argv[0] != "serve":
        raise ArgsError(f"expected `vllm serve MODEL ...`, got `vllm {' '.join(argv[:1])}`")
    if len(argv) < 2 or argv[1].startswith("-"):
        raise ArgsError("vllm serve: the model path is required (`vllm serve MODEL`)")
    model, rest = argv[1], argv[2:]
    if vllm_version is not None:
        serve_flags.check(rest, vllm_version)
    values: dict = {}
    flags = {"expert_parallel": False, "headless": False}
    passed = []
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        flag, eq, inline = word.partition("=")
        flag = _normalise(flag)
        if flag in _BOOL_FLAGS:
            flags[_BOOL_FLAGS[flag]] = True
            continue
        name = _DP_INT_FLAGS.get(flag) or _DP_TEXT_FLAGS.get(flag)
        if name is None:
            passed.append(word)
            continue
        if eq:
            value = inline
        elif i < len(rest) and (_is_value(rest[i]) or name in _JSON_FLAGS):
            value = rest[i]
            i += 1
        else:
            raise ArgsError(f"{flag}: expected a value")
        values[name] = (flag, value)
    if "--model" in (_normalise(w.partition("=")[0]) for w in passed):
        raise ArgsError("vllm serve: give the model once, as the positional MODEL, not with --model")
    server = parse_vllm_args(("--model", model, *passed))
    ints = {}
    for name in ("dp", "rank", "local", "start", "rpc_port", "shutdown_timeout"):
        if name in values:
            flag, text = values[name]
            try:
                ints[name] = int(text)
            except ValueError:
                raise ArgsError(f"{flag}: {text!r} is not an integer") from None
    docs = {}
    for name in _JSON_FLAGS:
        if name in values:
            flag, text = values[name]
            try:
                doc = json.loads(text)
            except ValueError as exc:
                raise ArgsError(f"{flag}: not JSON ({exc}): {text!r}") from None
            if not isinstance(doc, dict):
                raise ArgsError(f"{flag}: expected a JSON object, got {text!r}")
            docs[name] = doc
    if ints.get("shutdown_timeout", 0) < 0:  # pydantic's Field(ge=0), vllm/config/vllm.py:454 in 0.33.0
        raise ArgsError(f"--shutdown-timeout: {ints['shutdown_timeout']} must be at least 0")
    dp = ints.get("dp", 1)
    if dp < 1:
        raise ArgsError(f"--data-parallel-size: {dp} must be at least 1")
    rank = ints.get("rank")
    if rank is not None and ("local" in ints or "start" in ints):
        raise ArgsError("--data-parallel-rank (external launch) cannot be combined with "
                        "--data-parallel-size-local/--data-parallel-start-rank (internal launch)")
    if rank is not None:
        local, start = 1, rank
        if not 0 <= rank < dp:
            raise ArgsError(f"--data-parallel-rank {rank} is outside 0..{dp - 1} (--data-parallel-size {dp})")
    else:
        local, start = ints.get("local", dp), ints.get("start", 0)
        if local < 1:
            raise ArgsError(f"--data-parallel-size-local: {local} must be at least 1")
        if start < 0 or start + local > dp:
            raise ArgsError(f"--data-parallel-start-rank {start} with --data-parallel-size-local {local} "
                            f"goes past --data-parallel-size {dp}")
    address = values.get("address", (None, None))[1]
    port_given = "--port" in (_normalise(w.partition("=")[0]) for w in passed)
    return AscendArgs(
        server=server, dp=dp, rank=rank, local=local, start=start, start_given="start" in ints, address=address,
        rpc_port=ints.get("rpc_port", DEFAULT_RPC_PORT), expert_parallel=flags["expert_parallel"],
        headless=flags["headless"],
        port_given=port_given, kv_transfer_config=docs.get("kv_transfer_config"),
        additional_config=docs.get("additional_config"), compilation_config=docs.get("compilation_config"),
        shutdown_timeout=ints.get("shutdown_timeout", 0),
    )
