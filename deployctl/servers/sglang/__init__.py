"""SGLang's own server on NVIDIA GPUs (`server: sglang`, platform gpu; issue 43) (pure): one
`python -m sglang.launch_server` per instance, its TP size its device count, with the GPU container shape of vLLM on
GPU; mixed, or P/D (prefill and decode servers behind sglang-router's P/D mode). SGLang's source read here is the
0.5.23 wheel's (paths below are inside it); the oracle in tests/oracle/ feeds every rendered line to that version's
own parser."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from deployctl.servers.ascendcloud import FAMILY, MOE
from deployctl.servers.base import Flavour
from deployctl.servers.features import Feature
from deployctl.servers.fields import VERBATIM, Flag, Refused
from deployctl.servers.sglang.metrics import SGLANG
from deployctl.servers.vllm_gpu import NO_GPU_SURGE

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.plan.container_types import Container, RanktableFiles
    from deployctl.spec.model import Instance, Spec
    from deployctl.spec.rules import Context

# sglang/launch_server.py: `python -m sglang.launch_server ARGS` parses ARGS with prepare_server_args
# (sglang/srt/server_args.py:668), the parser the oracle runs; it warns that `sglang serve` is the newer spelling
# of the same parser, which older images lack.
LAUNCH_SERVER = ("python", "-m", "sglang.launch_server")

# sglang/srt/arg_groups/fields/model.py:177-183 and arg_groups/choices.py:32 (QUANTIZATION_CHOICES: awq, gptq and
# others; no smoothquant, no ascend)
NO_SMOOTHQUANT = Refused("quantization", "quantization 'smoothquant' is AscendCloud vLLM's; SGLang's --quantization "
                                         "has no such method (awq and gptq are among its choices)",
                         hint="use awq or gptq weights", values=("smoothquant",))
NPU_ONLY_QUANTIZATION = Refused("quantization", "quantization 'modelslim' is SGLang's for Ascend NPUs "
                                                "(arg_groups/choices.py); on GPU it takes awq or gptq",
                                hint="use awq or gptq weights, or platform: ascend", values=("modelslim",))
NO_ASCEND = Refused("quantization", "quantization 'ascend' is vllm-ascend's (w8a8 weights on Ascend NPUs); SGLang "
                                    "on GPU takes awq or gptq", hint="use awq or gptq weights", values=("ascend",))
# SGLang's NPU quantization (its arg_groups/choices.py QUANTIZATION_CHOICES: "modelslim", "for NPU"); vLLM's
# --quantization has no such method (vllm-ascend reads msModelSlim weights as `ascend`): every other flavour refuses
# it so (Flavour.claims)
NO_MODELSLIM = Refused("quantization", "quantization 'modelslim' is SGLang's on Ascend NPUs; vLLM's --quantization "
                                       "has no such method", hint="use server: sglang on platform ascend, or "
                                                                  "server: vllm-ascend with quantization ascend",
                       values=("modelslim",))
# sglang/srt/arg_groups/fields/model.py:197-216: --kv-cache-dtype is auto, an fp8/fp4 kind or bf16, never int8
NO_INT8_KV = Refused("kv_cache_dtype", "kv_cache_dtype int8 is AscendCloud vLLM's: SGLang's --kv-cache-dtype takes "
                                       "auto, bf16 or an fp8/fp4 kind, never int8",
                     hint="remove kv_cache_dtype and quantization_param_path")
NO_SCALES = Refused("quantization_param_path", "quantization_param_path goes with kv_cache_dtype int8, which SGLang "
                                               "does not take", hint="remove it")

# What extra_args may not say, each with why: the flags the table renders itself (argparse keeps the last one, so a
# second --port would move the server off the port `up` waits on), SGLang's data parallelism (an instance's devices
# are its TP size: a --dp-size would ask for dp x tp GPUs; with --enable-dp-attention it is the attention's DP width
# within the TP size, `--attn-dp-size` since 0.5.23, arg_groups/fields/parallel.py:192-193), and vLLM's spellings a
# carried-over spec brings.
OWNED = ("--model-path", "--model", "--served-model-name", "--host", "--port", "--tp-size",
         "--tensor-parallel-size", "--context-length", "--max-running-requests", "--chunked-prefill-size",
         "--quantization", "--kv-cache-dtype", "--enable-metrics", "--disaggregation-mode",
         "--disaggregation-bootstrap-port", "--disaggregation-transfer-backend", "--nnodes", "--node-rank",
         "--dist-init-addr")
DATA_PARALLEL = ("--dp-size", "--data-parallel-size")
VLLM_SPELLINGS = {"--gpu-memory-utilization": "--mem-fraction-static", "--max-model-len": "model.max_model_len",
                  "--max-num-seqs": "model.max_num_seqs", "--max-num-batched-tokens": "model.max_num_batched_tokens",
                  "--enforce-eager": "--disable-cuda-graph"}


def _flags(words) -> set[str]:
    return {word.split("=", 1)[0] for word in words if isinstance(word, str) and word.startswith("--")}


def _says_none_of(flags) -> object:
    return lambda words: not (_flags(words) & set(flags))


TABLE = (
    Flag("@model", "--model-path"),
    Flag("served_name", "--served-model-name"),
    Flag("@host", "--host"),
    Flag("@port", "--port"),
    Flag("@tp", "--tp-size"),
    Flag("@nodes", VERBATIM),  # a server over several hosts: --nnodes, --node-rank, --dist-init-addr
    Flag("max_model_len", "--context-length"),
    Flag("max_num_seqs", "--max-running-requests"),
    # vLLM's per-step token budget is what SGLang chunks a long prefill by (arg_groups/fields/schedule.py:52-55)
    Flag("max_num_batched_tokens", "--chunked-prefill-size"),
    Flag("quantization", "--quantization"),
    NO_SMOOTHQUANT,
    NO_ASCEND,
    NPU_ONLY_QUANTIZATION,
    NO_INT8_KV,
    NO_SCALES,
    Flag("@metrics", VERBATIM),  # --enable-metrics: /metrics exists only with it (metrics.py)
    Flag("@disaggregation", VERBATIM),  # a P/D server's role, its bootstrap port and transfer backend
    Refused("extra_args", "extra_args repeats a flag deployctl renders from the spec for server sglang ("
                          + ", ".join(OWNED) + "): SGLang's parser keeps the last one, so the server would not run "
                          "as the spec says",
            hint="set it through the spec (model.*, devices, port, topology.connector), not extra_args",
            allows=_says_none_of(OWNED)),
    Refused("extra_args", "extra_args asks for SGLang's data parallelism (--dp-size): an instance's devices are its "
                          "TP size, so SGLang would want dp x tp GPUs; deployctl renders no --dp-size yet",
            hint="run one instance per replica (each on its own devices and port), or data-parallel attention "
                 "within the TP size: --attn-dp-size N (or --dp-size N with --enable-dp-attention)",
            allows=lambda words: _says_none_of(DATA_PARALLEL)(words) or "--enable-dp-attention" in _flags(words)),
    Refused("extra_args", "extra_args holds vLLM flags that SGLang's parser refuses (exit 2): "
                          + ", ".join(f"{v} -> {s}" for v, s in VLLM_SPELLINGS.items()),
            hint="write SGLang's spelling (the right-hand side above)", allows=_says_none_of(VLLM_SPELLINGS)),
    Flag("extra_args", VERBATIM),
    FAMILY,
    MOE,
)

# SGLang on SIGTERM (sglang/srt/managers/tokenizer_manager.py:4066-4070 sets gracefully_exit; sigterm_watchdog,
# :3508-3550): /health answers 503 from then on, the requests in flight run to the end with no limit of SGLang's
# own (it checks every 5 s), then the schedulers get 15 s to exit (_SCHEDULER_EXIT_TIMEOUT_SECS, :456). It has no
# --shutdown-timeout flag: docker's --time is the only bound, so the one stop policy (servers/shutdown.py) gives
# it deployctl's default grace or the user's --shutdown-timeout, whichever `stop_grace` reads.

UNSUPPORTED = {
    Feature.COMPILE_CACHE: "deployctl knows no compile cache of SGLang's (no start-up profile names where its caches "
                           "live)",
    Feature.VERSION_PROFILES: "server_version picks a vllm-ascend profile; server sglang has no version profiles",
    Feature.SURGE: NO_GPU_SURGE,
}


# P/D (arg_groups/fields/disagg.py): a prefill server (--disaggregation-mode prefill) starts a bootstrap server on
# --disaggregation-bootstrap-port (default 8998; disaggregation/common/conn.py `_setup_routes`: /route, /health),
# where a decode server (--disaggregation-mode decode) asks for the prefill's ranks before the KV arrives over the
# transfer backend. Either refuses a request that carries no bootstrap_room ("Disaggregated request received
# without bootstrap room id", managers/scheduler.py:3048-3064) unless the backend is `fake`: sglang-router in its
# P/D mode adds bootstrap_host, bootstrap_port and bootstrap_room to each request and sends it to a prefill and a
# decode at once (docs/platforms/ascend/ascend_npu_deepseek_example.md runs launch_router --pd-disaggregation
# --prefill URL BOOTSTRAP_PORT --decode URL), so a P/D deployment needs that front.
BOOTSTRAP_OFFSET = 1  # SGLang's default 8998 would be one port for every prefill on a host
# One server over several hosts (`hosts`): SGLang's multi-node launch, every node the same command but for
# --node-rank, all meeting at --dist-init-addr (the first node's address and a port: torch.distributed's TCP store,
# server_args.py dist_init_addr; docs/platforms/ascend/ascend_npu_deepseek_example.md runs the decode as
# `--dist-init-addr ${D_IP[0]}:5000 --nnodes 2 --node-rank $i`). Node 0 serves the API; the others serve none.
DIST_INIT_OFFSET = 2
# --disaggregation-transfer-backend (arg_groups/choices.py DISAGG_TRANSFER_BACKEND_CHOICES; `fake` is a test
# double): mooncake is SGLang's default; on Ascend its docs run `ascend` (ascend_npu_deepseek_example.md)
DEFAULT_CONNECTOR = {"gpu": "mooncake", "ascend": "ascend"}
NPU_ONLY_CONNECTORS = ("ascend",)  # the ascend backend moves KV between NPUs (disaggregation/ascend/)


def first_node(spec: "Spec", instance: "Instance") -> "Instance":
    """Node 0 of a server over several hosts (the instance itself on one host): its ports are the server's."""
    if not instance.nodes:
        return instance
    return next(i for i in spec.instances if i.unit == instance.unit and i.node_rank == 0)


def node_words(spec: "Spec", instance: "Instance") -> tuple[str, ...]:
    """A multi-node server's --nnodes, --node-rank and --dist-init-addr (its first node's address and port)."""
    if not instance.nodes:
        return ()
    first = first_node(spec, instance)
    return ("--nnodes", str(len(instance.nodes)), "--node-rank", str(instance.node_rank), "--dist-init-addr",
            f"{spec.host(first.host).address}:{first.dist_init_port}")


def disaggregation_words(spec: "Spec", instance: "Instance") -> tuple[str, ...]:
    """A P/D server's role, its bootstrap port (prefill) and the transfer backend; () for a mixed server."""
    if instance.role not in ("prefill", "decode"):
        return ()
    words = ("--disaggregation-mode", instance.role)
    # every node of a multi-node prefill registers its ranks with node 0's bootstrap server, at that port
    bootstrap = first_node(spec, instance).bootstrap_port
    if bootstrap is not None:
        words += ("--disaggregation-bootstrap-port", str(bootstrap))
    return words + ("--disaggregation-transfer-backend", spec.connector or DEFAULT_CONNECTOR[spec.platform])


# Its front is SGLang's own router (fronts/sglang_router.py). vllm-router is a fork of it, but deployctl has run it
# only before vLLM's servers, and vllm-ascend's proxy lists vLLM P/D servers: neither is offered for SGLang.
FRONT_KINDS = ("sglang-router",)
HEALTH_GENERATE = "/health_generate"  # sglang/srt/entrypoints/http_server.py:721-795


class SglangGpu(Flavour):
    platform, server, title = "gpu", "sglang", "SGLang on GPU"
    table = TABLE
    wrong_platform_hint = "set platform: gpu or ascend"
    metrics = SGLANG
    signatures = __name__  # its known error lines: signatures.json beside this module
    claims = (NO_MODELSLIM,)
    unsupported = UNSUPPORTED
    topology_keys = {"mixed": ("instances",), "disaggregated": ("prefill", "decode")}
    topology_options = {"connector": "its P/D transfer backend"}
    instance_options = {"hosts": "multi-node launch"}
    port_keys = {"bootstrap_port": "it is a prefill instance of server sglang",
                 "dist_init_port": "the instance spans hosts (server sglang's `hosts`)"}

    def topology_front(self, mode: Optional[str]) -> Optional[str]:
        return None  # its front, P/D included, is topology.front

    def ports_of(self, role: str, nodes: int = 1) -> tuple[tuple[str, int], ...]:
        return ((("bootstrap_port", BOOTSTRAP_OFFSET),) if role == "prefill" else ()) + (
            (("dist_init_port", DIST_INIT_OFFSET),) if nodes > 1 else ())

    def check(self, c: "Context") -> Iterator["Problem"]:
        from deployctl.errors import Problem

        kind = c.value(("topology", "front", "kind"), str)
        if kind is not None and kind not in FRONT_KINDS:
            yield Problem(("topology", "front", "kind"), f"server sglang is fronted by SGLang's own router (kind "
                                                         f"sglang-router), not kind {kind}: vllm-router and the proxy "
                                                         "are run before vLLM servers only",
                          hint="kind: sglang-router")
        connector = c.value(("topology", "connector"), str)
        if c.mode == "disaggregated" and "front" not in (c.value(("topology",), dict) or {}):
            yield Problem(("topology",), "server sglang's P/D servers answer only requests that carry a bootstrap "
                                         "room, which SGLang's router adds (its --pd-disaggregation mode): mode "
                                         "disaggregated needs topology.front",
                          hint="front: {kind: sglang-router, host: ..., port: ..., image: ...}")
        if connector is not None and c.mode != "disaggregated":
            yield Problem(("topology", "connector"), "topology.connector is the P/D transfer backend: mode "
                                                     f"{c.mode} renders none", severity="warning")
        elif connector in NPU_ONLY_CONNECTORS and c.platform != "ascend":
            yield Problem(("topology", "connector"), f"connector {connector} moves the KV cache between Ascend NPUs "
                                                     f"(SGLang's disaggregation/{connector}/); platform {c.platform} "
                                                     "has none",
                          hint=f"connector: {DEFAULT_CONNECTOR['gpu']} (SGLang's default), or nixl")

    def command(self, spec: "Spec", instance: "Instance") -> tuple[str, ...]:
        from deployctl.servers.fields import model_values, render_flags

        values = model_values(spec, instance)
        values["@metrics"] = ("--enable-metrics",)
        values["@disaggregation"] = disaggregation_words(spec, instance)
        values["@nodes"] = node_words(spec, instance)
        return LAUNCH_SERVER + render_flags(self.table, values)

    def container(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"],
                  networks: Optional[Mapping]) -> "Container":
        from deployctl.plan.container_types import instance_container
        from deployctl.servers.vllm_gpu import gpu_shape

        # --gpus and the weights' mount as vLLM on GPU has them; instance_container gives every server its
        # --shm-size (container.shm_size). SGLang's own docs run its image with `--shm-size 32g --ipc=host`
        # (benchmark/deepseek_v3/README.md); deployctl's containers never share the host's IPC namespace, as for
        # vLLM, so a large model's TP workers need container.shm_size set that high
        gpus, mounts = gpu_shape(spec, instance)
        return instance_container(spec, instance, devices=(), mounts=mounts, command=self.command(spec, instance),
                                  gpus=gpus)

    def health_path(self, instance: Optional["Instance"] = None) -> str:
        # sglang/srt/entrypoints/http_server.py:721-795: /health is 503 while the server starts and once SIGTERM
        # came, 200 otherwise (a one-token generation only with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION), a hung
        # scheduler included; /health_generate always generates one token and says 503 when no answer came within
        # SGLANG_HEALTH_CHECK_TIMEOUT (20 s). `status` and watch's liveness probe ask /health_generate itself
        # within their own --hang-timeout (liveness_request), so a hang is found behind a green /health
        # (tests/e2e/test_gpu.py and test_sglang_pd.py restart one)
        return "/health"

    def export_refusals(self, spec: "Spec", stack: str) -> Iterator["Problem"]:
        """A server over several hosts meets at its first host's address (--dist-init-addr), which no pod has: on a
        cluster its nodes would be a LeaderWorkerSet's leader and workers, meeting at the leader's address."""
        from deployctl.errors import Problem

        for instance in spec.instances:
            if instance.nodes and instance.node_rank == 0:
                yield Problem(instance.path + ("hosts",), "a server over several hosts is not exported: its nodes "
                                                          "meet at its first host's address (--dist-init-addr), "
                                                          "which no pod has",
                              hint="export a copy of the spec whose instances run on one host each")

    def liveness_request(self, spec: "Spec") -> Optional[tuple[str, bytes]]:
        """GET /health_generate: a one-token generate of SGLang's own, answered 200 once its scheduler answered
        anything (a busy server at once) and 503 after SGLANG_HEALTH_CHECK_TIMEOUT; a P/D server takes it too (it
        gives the request a fake bootstrap, http_server.py:756-758), where a completion without a bootstrap room
        is refused with 400."""
        return HEALTH_GENERATE, b""

    def startup(self, spec: "Spec"):
        """SGLang logs its own start-up lines, which no profile lists yet: its ledger has no server phases and
        `cache.compile` is refused."""
        return None
