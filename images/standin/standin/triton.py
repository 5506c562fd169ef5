"""`tritonserver` stand-in: Triton's HTTP/REST (v2) health, model-ready and generate endpoints for one vLLM-backend model.

Reads the model repository the way Triton + the vLLM backend do and refuses to start, as they do, when
config.pbtxt or 1/model.json is missing or wrong. Listens on --http-port (HTTP), --grpc-port (accepts and
closes) and --metrics-port (GET /metrics), all three on 0.0.0.0.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

from standin.generation import tokens
from standin.httpio import BadRequest, json_response, read_request, response_bytes, serve_keep_alive

DEFAULT_MAX_TOKENS = 16
USAGE = """usage: tritonserver --model-repository DIR [--model-control-mode explicit --load-model NAME]
         [--http-port 8000] [--grpc-port 8001] [--metrics-port 8002]
The deployctl test bed's stand-in for Triton's vLLM backend (images/standin/README.md)."""
# What the vLLM backend needs from config.pbtxt (its samples' config and model.py checks).
REQUIRED_CONFIG = (
    (r'backend:\s*"vllm"', 'backend: "vllm"'),
    (r"max_batch_size:\s*0\b", "max_batch_size: 0"),
    (r"decoupled:\s*(true|True)\b", "model_transaction_policy { decoupled: true }"),
    (r'name:\s*"text_input"', 'input "text_input"'),
    (r'name:\s*"text_output"', 'output "text_output"'),
)


class Refusal(Exception):
    pass


@dataclass(frozen=True)
class Options:
    repository: str
    models: tuple
    control_mode: str = "none"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002


@dataclass(frozen=True)
class LoadedModel:
    name: str
    engine_args: dict


def parse_options(argv: List[str]) -> Options:
    """tritonserver's flags, `--flag value` or `--flag=value`; unknown flags are refused, as Triton does."""
    values: Dict[str, List[str]] = {}
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise Refusal(f"unexpected argument {word!r}")
        key, eq, value = word[2:].partition("=")
        if not eq:
            if i + 1 >= len(words):
                raise Refusal(f"--{key} needs a value")
            value = words[i + 1]
            i += 1
        values.setdefault(key, []).append(value)
        i += 1
    known = {"model-repository", "model-control-mode", "load-model", "http-port", "grpc-port", "metrics-port"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise Refusal(f"unrecognized option --{unknown[0]}")
    if "model-repository" not in values:
        raise Refusal("--model-repository must be specified")
    mode = values.get("model-control-mode", ["none"])[-1]
    if mode not in ("none", "poll", "explicit"):
        raise Refusal(f"unexpected value for --model-control-mode: {mode}")
    if values.get("load-model") and mode != "explicit":
        raise Refusal("--load-model is only allowed with --model-control-mode explicit")
    try:
        ports = {k: int(values[k][-1]) for k in ("http-port", "grpc-port", "metrics-port") if k in values}
    except ValueError as exc:
        raise Refusal(f"bad port: {exc}") from None
    return Options(values["model-repository"][-1], tuple(values.get("load-model", ())), mode,
                   ports.get("http-port", 8000), ports.get("grpc-port", 8001), ports.get("metrics-port", 8002))


def load_model(repository: str, name: str) -> LoadedModel:
    """Check <repository>/<name>/config.pbtxt and 1/model.json as Triton and the vLLM backend would."""
    model_dir = os.path.join(repository, name)
    if not os.path.isdir(model_dir):
        raise Refusal(f"failed to load '{name}': model directory {model_dir} does not exist")
    config_path = os.path.join(model_dir, "config.pbtxt")
    try:
        with open(config_path) as handle:
            config = handle.read()
    except OSError:
        raise Refusal(f"failed to load '{name}': {config_path} is missing") from None
    declared = re.search(r'^name:\s*"([^"]*)"', config, re.M)
    if declared and declared.group(1) != name:
        raise Refusal(f"failed to load '{name}': config.pbtxt names model '{declared.group(1)}'")
    for pattern, what in REQUIRED_CONFIG:
        if not re.search(pattern, config):
            raise Refusal(f"failed to load '{name}': config.pbtxt lacks {what}")
    args_path = os.path.join(model_dir, "1", "model.json")
    try:
        with open(args_path) as handle:
            engine_args = json.load(handle)
    except OSError:
        raise Refusal(f"failed to load '{name}': '{args_path}' containing vllm engine args must be provided") from None
    except ValueError as exc:
        raise Refusal(f"failed to load '{name}': {args_path} is not JSON: {exc}") from None
    if not isinstance(engine_args, dict) or not isinstance(engine_args.get("model"), str):
        raise Refusal(f"failed to load '{name}': model.json needs a \"model\" path")
    unknown = _not_engine_args(engine_args)
    if unknown:
        raise Refusal(f"failed to load '{name}': AsyncEngineArgs.__init__() got an unexpected keyword argument "
                      f"'{unknown[0]}'")
    if not os.path.isdir(engine_args["model"]):
        raise Refusal(f"failed to load '{name}': model path {engine_args['model']} does not exist in the container")
    tp = engine_args.get("tensor_parallel_size", 1)
    visible = [d for d in os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not isinstance(tp, int) or tp < 1:
        raise Refusal(f"failed to load '{name}': tensor_parallel_size {tp!r} is not a positive integer")
    if visible and visible != ["all"] and tp != len(visible):
        raise Refusal(f"failed to load '{name}': tensor_parallel_size {tp} but {len(visible)} GPU(s) visible")
    return LoadedModel(name, engine_args)


def generate(model: LoadedModel, body) -> dict:
    """The vLLM backend's answer to POST /v2/models/<name>/generate (text_output includes the prompt by default)."""
    if not isinstance(body, dict) or not isinstance(body.get("text_input"), str):
        raise BadRequest(400, "input 'text_input' is required and must be a string")
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise BadRequest(400, "'parameters' must be an object")
    if parameters.get("stream") or body.get("stream"):
        raise BadRequest(400, "the generate endpoint cannot stream; use generate_stream")
    max_tokens = parameters.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(400, "'max_tokens' must be a positive integer")
    prompt = body["text_input"]
    text = "".join(tokens(prompt, max_tokens)).lstrip()
    exclude = body.get("exclude_input_in_output", parameters.get("exclude_input_in_output", False))
    return {"model_name": model.name, "model_version": "1", "text_output": text if exclude else prompt + " " + text}


class TritonApp:
    def __init__(self, models: Dict[str, LoadedModel]) -> None:
        self.models = models
        self.requests = 0

    async def serve_http(self, reader, writer) -> None:
        await serve_keep_alive(reader, writer, self._respond, "error")

    async def _respond(self, req, writer) -> None:
        writer.write(self.answer(req.method, req.path, req.body, req.keep_alive))
        await writer.drain()

    def answer(self, method: str, path: str, body: bytes, keep_alive: bool) -> bytes:
        if path in ("/v2/health/ready", "/v2/health/live") and method == "GET":
            return response_bytes(200, b"", keep_alive)
        match = re.fullmatch(r"/v2/models/([^/]+)(?:/versions/1)?(/ready|/generate)?", path)
        if not match:
            return json_response(404, {"error": "Not Found"}, keep_alive)
        name, action = match.group(1), match.group(2) or ""
        model = self.models.get(name)
        if model is None:
            return json_response(400, {"error": f"Request for unknown model: '{name}' is not found"}, keep_alive)
        if action == "/ready" and method == "GET":
            return response_bytes(200, b"", keep_alive)
        if action == "" and method == "GET":
            return json_response(200, {"name": name, "versions": ["1"], "platform": "vllm"}, keep_alive)
        if action == "/generate" and method == "POST":
            try:
                doc = generate(model, json.loads(body or b"null"))
            except ValueError:
                return json_response(400, {"error": "request body is not JSON"}, keep_alive)
            except BadRequest as exc:
                return json_response(exc.status, {"error": str(exc)}, keep_alive)
            self.requests += 1
            return json_response(200, doc, keep_alive)
        return json_response(405, {"error": "Method Not Allowed"}, keep_alive)

    async def serve_metrics(self, reader, writer) -> None:
        try:
            req = await read_request(reader, asyncio.get_running_loop())
            if req is not None:
                lines = [f'nv_inference_request_success{{model="{n}",version="1"}} {self.requests}'
                         for n in self.models]
                writer.write(response_bytes(200, ("\n".join(lines) + "\n").encode(), False, "text/plain"))
                await writer.drain()
        except (BadRequest, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _close(reader, writer) -> None:
    writer.close()  # the gRPC port only has to be taken, as Triton takes it


def _not_engine_args(engine_args: dict) -> List[str]:
    """Keys that are no engine argument of the emulated vLLM. Triton's vLLM backend builds
    AsyncEngineArgs(**model.json) (triton-inference-server/vllm_backend src/model.py, _init_engine_args), so
    such a key is a TypeError at load: `disable_log_requests`, for one, left AsyncEngineArgs in vLLM 0.12
    (vllm/engine/arg_utils.py 0.11.0:1692 says so). Engine arguments are `vllm serve`'s engine flags, dashes
    read as underscores (EngineArgs.add_cli_args); the frontend's flags among them make this a superset."""
    from standin import serve_flags, versions

    known = {flag[2:].replace("-", "_") for flag in serve_flags.options(versions.emulated(os.environ).vllm)
             if flag.startswith("--")}
    return sorted(key for key in engine_args if key not in known)


def log(line: str) -> None:
    print(f"standin tritonserver: {line}", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(USAGE, flush=True)
        return 0
    try:
        options = parse_options(argv)
        if not os.path.isdir(options.repository):
            raise Refusal(f"failed to stat file {options.repository}")
        names = options.models if options.control_mode == "explicit" else tuple(
            sorted(d for d in os.listdir(options.repository) if os.path.isdir(os.path.join(options.repository, d))))
        models = {name: load_model(options.repository, name) for name in names}
    except Refusal as exc:
        log(f"error: {exc}")
        return 1
    try:
        return asyncio.run(_serve(options, models))
    except KeyboardInterrupt:
        return 0


async def _serve(options: Options, models: Dict[str, LoadedModel]) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)  # PID 1: docker stop must not wait for SIGKILL
    await asyncio.sleep(float(os.environ.get("STANDIN_STARTUP_S", "0.3")))
    for name, model in models.items():
        log(f"successfully loaded '{name}' version 1 (vllm backend, model {model.engine_args['model']}, "
            f"tensor_parallel_size {model.engine_args.get('tensor_parallel_size', 1)})")
    app = TritonApp(models)
    try:
        servers = [
            await asyncio.start_server(_close, None, options.grpc_port, reuse_address=True),
            await asyncio.start_server(app.serve_metrics, None, options.metrics_port, reuse_address=True),
            await asyncio.start_server(app.serve_http, None, options.http_port, backlog=1024, reuse_address=True),
        ]
    except OSError as exc:
        log(f"error: cannot listen: {exc.strerror or exc}")
        return 1
    log(f"Started GRPCInferenceService at 0.0.0.0:{options.grpc_port}")
    log(f"Started HTTPService at 0.0.0.0:{options.http_port}")
    log(f"Started Metrics Service at 0.0.0.0:{options.metrics_port}")
    try:
        await asyncio.gather(*(s.serve_forever() for s in servers))
    except asyncio.CancelledError:
        log("shutting down")
        for server in servers:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
