"""cache.compile: one host directory per (image, model, parallel layout) for the servers' torch.compile and graph
caches, mounted into every server of that key, and a `cache` stage that copies a sealed one from a host that has
it to the hosts that do not, host to host (pure).

The key is in the directory's name, so a server never sees a cache made by another image, model or layout; the
server's own cache (vLLM's torch_compile_cache/<hash>) checks the finer factors itself. A directory is sealed
(facts/compile_cache.py's marker, the digest of its files) once its servers served: only a sealed one is copied,
and the copy is verified against that digest before it is put in place (execute/compile_cache.py). The copy is one
step on the host that gives it: its `tar` stream goes straight to the hosts that need it, as a chain over the
cluster network, so the control machine carries none of it whatever the number of hosts."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Optional

from deployctl.core import Command
from deployctl.facts.compile_cache import MARKER
from deployctl.plan.model import Stage, Step
from deployctl.servers import flavour_of

if TYPE_CHECKING:
    from deployctl.plan.containers import Container
    from deployctl.spec.model import Instance, Spec

CONTAINER_DIR = "/var/cache/deployctl-compile"  # where every server sees its key's directory

# $1: the key directory. The digest of its files (names and contents, the marker left out), in a stable order.
DIGEST = ('cd "$1" && find . -type f ! -name ' + MARKER + ' -print0 | LC_ALL=C sort -z | '
          'xargs -0r sha256sum | sha256sum | cut -d" " -f1')
# Written each time the servers of the key served (finalize of their start): later deploys and other hosts reuse
# it. The digest is of the files there now, kept only while they are unchanged: a server may write its cache again
# on a warm start (vLLM 0.32 on CPU saves its AOT-compiled function on every start), and a kept digest would then
# name files that are gone, so every copy from that host would fail its verification. A marker that holds no digest
# (facts/compile_cache.py SEALED_DIGEST) is written anew too.
SEAL = ('d=$(' + DIGEST + ') || exit 1; m=$(head -c 100 "$1/' + MARKER + '" 2>/dev/null); '
        '[ "$m" = "$d" ] && exit 0; '
        'printf "%s\\n" "$d" > "$1/' + MARKER + '.tmp" && mv "$1/' + MARKER + '.tmp" "$1/' + MARKER + '"')


@dataclass(frozen=True)
class CacheKey:
    """What a compile cache is valid for, and the directory name that carries it."""

    name: str  # `<image id, 12 hex>-tp<N>[-dp<D>]-<sha256 of the whole key, 16 hex>`
    document: Mapping  # image, model, layout: what went into the hash

    def path(self, spec: "Spec") -> str:
        return f"{spec.cache.dir}/{self.name}"


def uses_cache(spec: "Spec", instance: "Instance") -> bool:
    """A server that compiles (it holds devices) of a spec with cache.compile, whose flavour knows its caches."""
    return bool(spec.cache.compile and instance.devices and flavour_of(spec).startup(spec) is not None)


def cache_key(spec: "Spec", instance: "Instance", image_id: str) -> CacheKey:
    """The key of an instance's compile cache: its image, its model (weights and the engine arguments that shape
    the graphs) and its parallel layout (tp, dp, expert parallel, devices per server)."""
    model = spec.model
    layout = {"tp": instance.tp, "devices": len(instance.devices), **flavour_of(spec).cache_layout(instance)}
    document = {
        "image": image_id,
        "model": {"dest": spec.weights.dest, "source": spec.weights.source, "max_model_len": model.max_model_len,
                  "quantization": model.quantization, "kv_cache_dtype": model.kv_cache_dtype,
                  "extra_args": list(instance.extra_args), "json_args": [list(a) for a in instance.json_args]},
        "layout": layout,
    }
    digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    image = image_id.split(":", 1)[-1][:12] or "noimage"
    dp = f"-dp{layout['dp']}" if layout["dp"] > 1 else ""
    return CacheKey(f"{image}-tp{instance.tp}{dp}-{digest[:16]}", document)


def with_cache(spec: "Spec", container: "Container", key: CacheKey) -> "Container":
    """The container with its key's directory mounted read-write and the profile's cache variables pointing at it."""
    from deployctl.plan.containers import Mount
    from deployctl.spec.model import EnvVar

    startup = flavour_of(spec).startup(spec)
    env = tuple(EnvVar(name, value.replace("{dir}", CONTAINER_DIR), value.replace("{dir}", CONTAINER_DIR))
                for name, value in sorted(startup.cache_env.items()))
    return replace(container, mounts=container.mounts + (Mount(key.path(spec), CONTAINER_DIR, read_only=False),),
                   env=env + container.env)


def seal_command(spec: "Spec", key: CacheKey) -> Command:
    return Command(("sh", "-c", SEAL, "sh", key.path(spec)), check=False)


@dataclass(frozen=True)
class CacheCopy:
    """Copy a sealed key directory from the step's host (`source`) to `targets`, host to host, each copy verified
    by its digest."""

    key: str
    cache_dir: str
    source: str
    digest: str
    targets: tuple[str, ...]

    def display(self) -> str:
        return (f"copy compile cache {self.key} from {self.source} to {', '.join(self.targets)} "
                f"(host to host; verified: sha256 {self.digest[:12]})")

    def to_json(self) -> dict:
        return {"type": "compile_cache_copy", "key": self.key, "dir": self.cache_dir, "from": self.source,
                "to": list(self.targets), "digest": self.digest}


def plan_cache(spec: "Spec", sealed: Mapping[str, Optional[Mapping[str, str]]],
               keys: Mapping[str, set[str]]) -> Optional[Stage]:
    """For each host, each key its servers need: nothing when it holds it sealed; else a copy from the first host
    of the spec (in `hosts` order, serving or not) that holds it sealed, one step on that host for all the hosts
    that need the key; else its directory made empty-handed (its servers compile, cold).
    `sealed`: host -> key -> digest (the probe); `keys`: host -> the keys its servers use."""
    gives: dict[tuple[str, str], list[str]] = {}  # (donor, key) -> the hosts it copies to
    make: dict[str, list[str]] = {}
    warm: dict[str, list[str]] = {}
    for host in spec.used_hosts:
        have = sealed.get(host.name) or {}
        for key in sorted(keys.get(host.name, ())):
            if key in have:
                warm.setdefault(host.name, []).append(key)
                continue
            donor = next((h.name for h in spec.hosts if h.name != host.name and key in (sealed.get(h.name) or {})),
                         None)
            if donor is not None:
                gives.setdefault((donor, key), []).append(host.name)
            else:
                make.setdefault(host.name, []).append(f"{spec.cache.dir}/{key}")
    steps = []
    for host in spec.hosts:
        copies = tuple(CacheCopy(key, spec.cache.dir, donor, sealed[donor][key], tuple(targets))
                       for (donor, key), targets in gives.items() if donor == host.name)
        made = make.get(host.name, [])
        if not copies and not made:
            if warm.get(host.name):
                steps.append(Step(host.name, "cache", "keep", f"compile cache warm: {', '.join(warm[host.name])}"))
            continue
        # world-writable: the servers may run as another user (the vendor images' ma-user)
        commands = (Command(("mkdir", "-p", "-m", "0777", *made)),) if made else ()
        reason = ", ".join([f"copy {c.key} to {', '.join(c.targets)}" for c in copies]
                           + [f"cold: {m.rsplit('/', 1)[1]}" for m in made])
        steps.append(Step(host.name, "cache", "run", reason, commands=commands, actions=copies))
    if not steps:
        return None
    return Stage("cache", tuple(steps))
