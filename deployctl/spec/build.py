"""A valid spec document (plain dicts) -> the frozen Spec dataclasses, with every derived value filled in."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

from deployctl.fronts import front_kind
from deployctl.fronts.proxy import PROXY
from deployctl.spec.locate import Document
from deployctl.spec.references import is_env_value
from deployctl.spec.model import (
    DEFAULT_COMPILE_CACHE_DIR, DEFAULT_HOOK_TIMEOUT, HOOK_POINTS, CacheSpec, FrontSpec, Hook, Host, ImageBuild, ImageSpec, Instance, ModelArgs,
    MonitorSpec, Requirements, Rollout, Spec, SshSettings, WeightsSpec,
)
from deployctl.spec.port_uses import DEFAULT_PROXY_PORT
from deployctl.spec.profiles import select_profile
from deployctl.spec.rules import DEFAULT_CARDS, DEFAULT_SCHEDULER_PORT
from deployctl.spec.values import env_vars, quantity

_SSH_KEYS = ("user", "port", "identity_file", "known_hosts", "jump")
_URL_SCHEMES = ("s3://", "obs://")  # the contract's only remote sources (weights.source, image.build.packages)


def build_spec(document: Document, source: Optional[Path] = None, base_dir: Optional[Path] = None) -> Spec:
    """Only called on a document that passed the schema and every rule."""
    data = document.data
    model = _model_args(data["model"])
    from deployctl.servers import flavour_named

    platform, server = data.get("platform", "ascend"), data.get("server", "vllm")
    flavour = flavour_named(platform, server)
    cards = data.get("requirements", {}).get("cards", DEFAULT_CARDS)
    built = flavour.build_topology(data, model, cards, document.references)
    instances, upstream = built if built is not None else (
        _instances(data["name"], data["topology"], model, flavour.ports_of), None)
    container = data.get("container", {})
    shm_size = container.get("shm_size")
    front = _front(data["topology"], built is not None)
    kind = front_kind(front.kind) if front is not None else None
    own = kind.instance(data["name"], front, data["topology"], built is not None) if kind is not None else None
    if own is not None:  # the front deployctl starts: vllm-router, or vllm-ascend's P/D proxy (last of its servers)
        instances += (own,)
    return Spec(
        version=data["version"],
        name=data["name"],
        hosts=_hosts(data.get("ssh", {}), data["hosts"]),
        model=model,
        mode=data["topology"]["mode"],
        instances=instances,
        platform=platform,
        server=server,
        requirements=_requirements(data.get("requirements", {})),
        image=_image(data.get("image", {}), base_dir),
        weights=_weights(data.get("weights", {}), base_dir),
        cache=CacheSpec(compile=bool(data.get("cache", {}).get("compile", False)),
                        dir=data.get("cache", {}).get("dir", DEFAULT_COMPILE_CACHE_DIR).rstrip("/") or "/"),
        env=env_vars(data.get("env", {}), document.references),
        source=source,
        digest=_digest(data, document.references),
        upstream=upstream,
        connector=None if upstream else data["topology"].get("connector"),
        front_spec=front,
        rollout=Rollout(**data.get("rollout", {})),
        server_version=data.get("server_version"),
        shm_size=shm_size,
        cpu=quantity(container.get("cpu")),
        memory=container.get("memory"),
        startup_timeout=data.get("health", {}).get("startup_timeout"),
        profile=select_profile(data.get("server_version"), data.get("image", {}).get("name")) if upstream else None,
        monitor=_monitor(data["monitor"], base_dir) if "monitor" in data else None,
        hooks=_hooks(data.get("hooks", {}), document.references),
    )


def _hooks(data: dict, references: dict) -> tuple[Hook, ...]:
    return tuple(Hook(point, tuple(entry["command"]), entry.get("on", "control"),
                      entry.get("timeout", DEFAULT_HOOK_TIMEOUT),
                      env_vars(entry.get("env", {}), references, ("hooks", point, "env")), ("hooks", point))
                 for point in HOOK_POINTS for entry in [data.get(point)] if entry is not None)


def _monitor(data: dict, base_dir: Optional[Path]) -> MonitorSpec:
    out = data.get("out")
    defaults = MonitorSpec()
    return MonitorSpec(
        out=(base_dir / out if base_dir is not None and not Path(out).is_absolute() else Path(out)) if out else None,
        scrape_interval=data.get("scrape_interval", defaults.scrape_interval),
        npu_exporter_port=data.get("npu_exporter_port", defaults.npu_exporter_port),
        node_exporter_port=data.get("node_exporter_port", defaults.node_exporter_port),
        blackbox_exporter=data.get("blackbox_exporter", defaults.blackbox_exporter),
        prometheus_url=data.get("prometheus_url"),
        ttft_p99=data.get("ttft_p99", defaults.ttft_p99),
    )


def _front(topology: dict, upstream: bool) -> Optional[FrontSpec]:
    """`topology.front`; for vllm-ascend P/D, `topology.proxy` is the same front as kind proxy."""
    entry = topology.get("front")
    if entry is not None:
        kind = front_kind(entry["kind"])
        default = kind.default_metrics_port if kind is not None else None
        metrics = entry.get("metrics_port", default) if default is not None else None
        return FrontSpec(entry["kind"], entry["host"], entry.get("port", DEFAULT_PROXY_PORT), entry.get("image"),
                         entry.get("policy"), metrics)
    proxy = topology.get("proxy")
    if upstream and proxy is not None and topology["mode"] == "disaggregated":
        return FrontSpec(PROXY, proxy["host"], proxy.get("port", DEFAULT_PROXY_PORT))
    return None


def _hosts(defaults: dict, hosts: dict) -> tuple[Host, ...]:
    out = []
    for name, entry in hosts.items():
        settings = {key: entry.get(key, defaults.get(key)) for key in _SSH_KEYS}
        settings = {key: value for key, value in settings.items() if value is not None}
        out.append(Host(name=name, address=entry["address"], ssh=SshSettings(**settings)))
    return tuple(out)


def _model_args(model: dict) -> ModelArgs:
    return ModelArgs(
        served_name=model["served_name"],
        max_model_len=model.get("max_model_len"),
        max_num_seqs=model.get("max_num_seqs"),
        max_num_batched_tokens=model.get("max_num_batched_tokens"),
        quantization=model.get("quantization"),
        kv_cache_dtype=model.get("kv_cache_dtype"),
        quantization_param_path=model.get("quantization_param_path"),
        extra_args=tuple(model.get("extra_args", ())),
        family=model.get("family"),
    )


def _instances(deployment: str, topology: dict, model: ModelArgs, ports_of) -> tuple[Instance, ...]:
    """mixed instances; or prefill..., decode..., then the scheduler (which runs with the P/D TP)."""
    out: list[Instance] = []
    for key, role in (("instances", "mixed"), ("prefill", "prefill"), ("decode", "decode")):
        for index, entry in enumerate(topology.get(key, ())):
            hosts = entry.get("hosts") or [entry["host"]]
            first = _instance(deployment, role, index, dict(entry, host=hosts[0]), model,
                              dict(ports_of(role, len(hosts))), ("topology", key, index))
            if len(hosts) == 1:
                out.append(first)
                continue
            # SGLang's multi-node server: node 0 serves the API, the others run the same command headless
            first = replace(first, tp=first.tp * len(hosts), nodes=tuple(hosts), unit=first.name)
            out += [first] + [replace(first, host=host, node_rank=rank, port=None, bootstrap_port=None,
                                      dist_init_port=None, name=f"{first.name}-node{rank}")
                              for rank, host in enumerate(hosts[1:], 1)]
    scheduler = topology.get("scheduler")
    if scheduler is not None:
        tp = out[0].tp if out else 1
        out.append(Instance(
            role="scheduler", index=0, host=scheduler["host"], devices=(),
            port=scheduler.get("port", DEFAULT_SCHEDULER_PORT), name=f"{deployment}-scheduler-0", tp=tp,
            max_num_seqs=model.max_num_seqs, max_num_batched_tokens=model.max_num_batched_tokens,
            extra_args=model.extra_args, path=("topology", "scheduler"),
        ))
    return tuple(out)


def _instance(deployment: str, role: str, index: int, entry: dict, model: ModelArgs, extra_ports: dict,
              path: tuple) -> Instance:
    """`extra_ports`: key -> offset from port of the further ports the flavour listens on (Triton's, SGLang's
    prefill bootstrap port)."""
    own = entry.get("model", {})
    port = entry["port"]

    def extra(key: str) -> Optional[int]:
        return entry.get(key, port + extra_ports[key]) if key in extra_ports else None

    return Instance(
        role=role, index=index, host=entry["host"], devices=tuple(entry["devices"]), port=port,
        name=f"{deployment}-{role}-{index}", tp=len(entry["devices"]),
        max_num_seqs=own.get("max_num_seqs", model.max_num_seqs),
        max_num_batched_tokens=own.get("max_num_batched_tokens", model.max_num_batched_tokens),
        extra_args=model.extra_args + tuple(own.get("extra_args", ())),
        grpc_port=extra("grpc_port"),
        metrics_port=extra("metrics_port"),
        bootstrap_port=extra("bootstrap_port"),
        dist_init_port=extra("dist_init_port"),
        path=path,
    )


def _requirements(entry: dict) -> Requirements:
    return Requirements(
        driver=entry.get("driver"),
        cards=entry.get("cards", DEFAULT_CARDS),
        npu_memory_gb=entry.get("npu_memory_gb"),
        gpu_memory_gb=entry.get("gpu_memory_gb"),
        ip_forward=entry.get("ip_forward", True),
        free_disk_gb=entry.get("free_disk_gb", 0),
    )


def _local_path(value: Optional[str], base_dir: Optional[Path]) -> Optional[str]:
    """A relative local path is relative to the spec file (as docker compose does); URLs stay as they are."""
    if value is None or base_dir is None or value.startswith(_URL_SCHEMES) or value.startswith("~"):
        return value
    return value if os.path.isabs(value) else str((base_dir / value).resolve())


def _image(entry: dict, base_dir: Optional[Path]) -> ImageSpec:
    build = entry.get("build")
    return ImageSpec(
        name=entry.get("name"),
        build=ImageBuild(
            base=build["base"], packages=_local_path(build["packages"], base_dir),
            where=build.get("where", "each-host"), recipe=_local_path(build.get("recipe"), base_dir),
        ) if build else None,
    )


def _weights(entry: dict, base_dir: Optional[Path]) -> WeightsSpec:
    return WeightsSpec(
        source=_local_path(entry.get("source"), base_dir),
        dest=entry.get("dest"),
        endpoint=entry.get("endpoint"),
        credentials=entry.get("credentials", "env"),
        fan_out=entry.get("fan_out", True),
        peer_wait=entry.get("peer_wait", 60),
    )


def _digest(data: dict, references: dict) -> str:
    """sha256 of the resolved document, with env secrets (the spec's and every group's) hashed as their ${VAR}
    text (never their value)."""
    shown = copy.deepcopy(data)
    for path, original in references.items():
        if is_env_value(path):
            *parents, name = path
            node = shown
            for part in parents:
                node = node[part]
            node[name] = original
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()

