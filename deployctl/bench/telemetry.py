"""Telemetry during a bench run (pure half): what each host is asked once per tick — `npu-smi info` (GPU:
nvidia-smi's query) and every serving engine's Prometheus `/metrics` on the host's loopback — the parsers, and
each run's summary (NPU utilisation, HBM, temperature; KV-cache use, running and waiting requests, preemptions)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from deployctl.core import Command
from deployctl.facts.npu_smi import parse_npu_smi_info
from deployctl.fronts import FRONT_ROLES
from deployctl.servers.metric_names import names_of
from deployctl.spec.model import Spec

NVIDIA_QUERY = ("nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu",
                "--format=csv,noheader,nounits")
# vLLM v1's names first; v0 called the KV-cache gauge gpu_cache_usage_perc. An API server fronting several DP
# engines (internal DP) writes one label set per engine (label `engine`, vllm/v1/metrics/loggers.py), so each field
# says how its engines add up to the server: requests and preemptions are counts and add up; KV-cache usage is a
# fraction of each engine's own cache, and the fullest engine is the one that queues and preempts (the knee's
# "KV cache full"), so the server reads as its maximum, never as a sum (two engines at 60 % are not 120 %).
# The names are the flavours' (servers/metric_names.py names_of).
ENGINE_METRICS = {
    "running": (names_of("running"), sum),
    "waiting": (names_of("waiting"), sum),
    "kv_cache_usage": (names_of("kv_usage"), max),
    "preemptions": (names_of("preemptions"), sum),
    # the progress counters `deployctl watch` compares between two probes (a server stalls when they stop)
    "generation_tokens": (names_of("generation_tokens"), sum),
    "prompt_tokens": (names_of("prompt_tokens"), sum),
}
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_ENGINE_LABEL = re.compile(r'(?:^|,)\s*engine="(?P<engine>[^"]*)"')


@dataclass(frozen=True)
class Device:
    """One accelerator at one tick."""

    device: int
    util_pct: Optional[float]
    mem_used_mb: Optional[float]
    mem_total_mb: Optional[float]
    temp_c: Optional[float]


@dataclass(frozen=True)
class Engine:
    """One serving engine's gauges and counters at one tick (None: it did not answer or has no such metric)."""

    instance: str
    running: Optional[float] = None
    waiting: Optional[float] = None
    kv_cache_usage: Optional[float] = None  # 0..1
    preemptions: Optional[float] = None  # a counter since the engine started
    generation_tokens: Optional[float] = None  # a counter: tokens generated since the engine started
    prompt_tokens: Optional[float] = None  # a counter: prompt tokens prefilled


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the run started
    host: str
    devices: tuple[Device, ...] = ()
    engines: tuple[Engine, ...] = ()

    def rows(self, run: int) -> list[dict]:
        """CSV rows: one per device and one per engine."""
        base = {"run": run, "t": round(self.t, 3), "host": self.host}
        out = [{**base, "kind": "device", "id": d.device, "util_pct": d.util_pct, "mem_used_mb": d.mem_used_mb,
                "mem_total_mb": d.mem_total_mb, "temp_c": d.temp_c} for d in self.devices]
        out += [{**base, "kind": "engine", "id": e.instance, "running": e.running, "waiting": e.waiting,
                 "kv_cache_usage": e.kv_cache_usage, "preemptions": e.preemptions} for e in self.engines]
        return out


def engines_on(spec: Spec, host: str) -> tuple[tuple[str, int], ...]:
    """(instance, port) of every serving engine on `host`: not the scheduler or the proxy, which have no engine."""
    return tuple((i.name, i.port) for i in spec.api_servers
                 if i.host == host and i.role not in FRONT_ROLES and i.port is not None)


def telemetry_commands(spec: Spec, host: str) -> tuple[Command, ...]:
    """One tick on one host: the accelerators, then each engine's /metrics (2 s at most each)."""
    devices = Command(NVIDIA_QUERY) if spec.platform == "gpu" else Command(("npu-smi", "info"))
    return (devices, *(Command(("curl", "--silent", "--fail", "--max-time", "2", f"http://127.0.0.1:{port}/metrics"))
                       for _, port in engines_on(spec, host)))


def parse_devices(text: str, platform: str) -> tuple[Device, ...]:
    """`npu-smi info` rows (AICore %, HBM, temperature) or nvidia-smi's CSV query; nothing on an unreadable answer."""
    if platform == "gpu":
        out = []
        for line in text.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) == 5 and cells[0].isdigit():
                util, used, total, temp = (_number(c) for c in cells[1:])
                out.append(Device(int(cells[0]), util, used, total, temp))
        return tuple(out)
    try:
        info = parse_npu_smi_info(text)
    except Exception:  # noqa: BLE001 - a tick that cannot be read is a gap in the series, not a failed bench
        return ()
    return tuple(Device(chip.npu_id, _float(chip.aicore_pct), _float(chip.hbm_used_mb), _float(chip.hbm_total_mb),
                        _float(chip.temp_c)) for chip in info.chips)


def _samples(text: str):
    """Each sample of a Prometheus text page: (name, labels text, value); comments and unreadable lines skipped."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        value = _number(match["value"]) if match else None
        if match and value is not None:
            yield match["name"], match["labels"] or "", value


def parse_prometheus(text: str) -> dict[str, list[float]]:
    """Metric name -> the value of each of its label sets, in order (one per engine behind the server)."""
    out: dict[str, list[float]] = {}
    for name, _, value in _samples(text):
        out.setdefault(name, []).append(value)
    return out


def parse_engine(instance: str, text: str) -> Engine:
    """One server's /metrics as one Engine: each field its engines combined as ENGINE_METRICS says."""
    return _engine_of(instance, parse_prometheus(text))


def _engine_of(instance: str, metrics: dict[str, list[float]]) -> Engine:
    def first(names, combine):
        return next((float(combine(metrics[n])) for n in names if n in metrics), None)

    return Engine(instance, **{field: first(names, combine) for field, (names, combine) in ENGINE_METRICS.items()})


def parse_engines(text: str) -> dict[str, Engine]:
    """One server's /metrics per engine behind it (label `engine`; a series without it counts as engine "0"):
    an internal DP launch's API server fronts several, and one of them can stall while the others run."""
    per_engine: dict[str, dict[str, list[float]]] = {}
    for name, labels, value in _samples(text):
        label = _ENGINE_LABEL.search(labels)
        per_engine.setdefault(label["engine"] if label else "0", {}).setdefault(name, []).append(value)
    return {engine: _engine_of(engine, metrics) for engine, metrics in sorted(per_engine.items())}


def parse_tick(spec: Spec, host: str, t: float, outputs: Sequence[tuple[int, str]]) -> Sample:
    """The answers of telemetry_commands (exit code, stdout each, in order) as one Sample."""
    (device_code, device_text), *engine_outputs = outputs
    used = {d for i in spec.instances if i.host == host for d in i.devices}  # not the host's other cards
    devices = tuple(d for d in (parse_devices(device_text, spec.platform) if device_code == 0 else ())
                    if d.device in used)
    engines = tuple(parse_engine(name, text) if code == 0 else Engine(name)
                    for (name, _), (code, text) in zip(engines_on(spec, host), engine_outputs))
    return Sample(t, host, devices, engines)


def summarize_telemetry(samples: Sequence[Sample]) -> dict:
    """A run's telemetry in a few figures: what the knee explanation and the chart read."""
    devices = [d for s in samples for d in s.devices]
    utils = [d.util_pct for d in devices if d.util_pct is not None]
    mem = [100.0 * d.mem_used_mb / d.mem_total_mb for d in devices if d.mem_used_mb is not None and d.mem_total_mb]
    temps = [d.temp_c for d in devices if d.temp_c is not None]
    per_engine: dict[str, list[Engine]] = {}
    for sample in samples:
        for engine in sample.engines:
            per_engine.setdefault(engine.instance, []).append(engine)
    engines = {}
    for name, series in sorted(per_engine.items()):
        counters = [e.preemptions for e in series if e.preemptions is not None]
        engines[name] = {
            "running_max": _max(e.running for e in series), "waiting_max": _max(e.waiting for e in series),
            "kv_cache_usage_max": _max(e.kv_cache_usage for e in series),
            "preemptions": (counters[-1] - counters[0]) if len(counters) > 1 else 0.0,
        }
    return {
        "samples": len(samples),
        "device_util_mean_pct": sum(utils) / len(utils) if utils else None,
        "device_util_max_pct": max(utils) if utils else None,
        "device_mem_max_pct": max(mem) if mem else None,
        "device_temp_max_c": max(temps) if temps else None,
        "kv_cache_usage_max": _max(e["kv_cache_usage_max"] for e in engines.values()),
        "preemptions": sum(e["preemptions"] for e in engines.values()),
        "waiting_max": _max(e["waiting_max"] for e in engines.values()),
        "engines": engines,
    }


def _max(values) -> Optional[float]:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _number(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None  # NaN: no value


def _float(value) -> Optional[float]:
    return None if value is None else float(value)
