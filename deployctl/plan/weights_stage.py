"""The weights stage of `up` and `weights sync` (pure): per host, what to fetch and remove, or nothing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Optional

from deployctl.errors import DeployctlError, HostError
from deployctl.facts.model import HostFacts
from deployctl.plan.actions import Fetch
from deployctl.plan.model import Stage, Step
from deployctl.plan.probes import fetcher_path
from deployctl.spec.model import Spec
from deployctl.weights.manifest import HostPlan, HostState, SourceObject, manifest_digest, plan_host
from deployctl.weights.source import Source


@dataclass(frozen=True)
class Listing:
    """What the source holds, listed once on the control machine (or why it could not be listed)."""

    source: Source
    objects: tuple[SourceObject, ...] = ()
    listed: str = ""  # when (UTC, ISO 8601)
    unlisted: Optional[DeployctlError] = None  # no credentials: the hosts' manifests may still vouch


def weights_hosts(spec: Spec) -> list[str]:
    """Hosts that run instances (the scheduler reads no weights, but it may share a host)."""
    return [h.name for h in spec.used_hosts]


def plan_weights(spec: Spec, facts: Mapping[str, HostFacts], listing: Listing, fetcher_digest: str) -> Stage:
    """Fetch what each host lacks; hosts that hold the listing already keep what they have."""
    states = {host: facts[host].weights for host in weights_hosts(spec)}
    if listing.unlisted is not None:
        return _judged_by_manifests(spec, states, listing)
    steps = []
    for host, state in states.items():
        plan = plan_host(listing.objects, state)
        _check_space(host, spec.host(host).address, spec.weights.dest, state, plan)
        if plan.idle:
            digest = manifest_digest(state.manifest)
            steps.append(Step(host, "weights", "keep", f"{len(listing.objects)} file(s) up to date"
                              + (f" ({digest[:19]})" if digest else "")
                              + (f"; {state.damaged}: left as is" if state.damaged else "")))
            continue
        fetch = Fetch(listing.source.text, spec.weights.dest, plan.fetch, plan.remove, plan.bytes_needed,
                      listing.listed, local_root=None if listing.source.remote else listing.source.path,
                      bucket=listing.source.bucket, fetcher_path=fetcher_path(spec),
                      send_fetcher=state.fetcher_digest != fetcher_digest, manifest=state.manifest)
        reason = _reason(plan) + (f"; {state.damaged}: those files are fetched again and the manifest rewritten"
                                  if state.damaged else "")
        steps.append(Step(host, "weights", "fetch", reason, actions=(fetch,)))
    summary = f"weights: {len(steps)} host(s) hold {len(listing.objects)} files"
    return Stage("weights", _shared(spec, tuple(steps)), summary=summary, counts_bytes=True)


def _shared(spec: Spec, steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Hosts that fetch from the store share the parts: each file's parts are split among the hosts that need it
    and passed on host to host, so the store sends one copy. Not for one host, a local directory, or a host
    reached as `local` (it has no address the others could reach), nor with `weights.fan_out: false`."""
    fetching = [(s, a) for s in steps for a in s.actions if isinstance(a, Fetch) and a.local_root is None]
    addresses = {s.host: spec.host(s.host).address for s, _ in fetching}
    if not spec.weights.fan_out or len(fetching) < 2 or any(spec.host(host).is_local for host in addresses):
        return steps
    holders: dict[str, list[str]] = {}
    for step, fetch in fetching:
        for obj in fetch.objects:
            holders.setdefault(obj.path, []).append(step.host)
    peers = tuple(sorted(addresses.items()))
    shared = []
    for step in steps:
        actions = tuple(replace(a, peers=peers, holders={o.path: tuple(holders[o.path]) for o in a.objects},
                                peer_wait=spec.weights.peer_wait)
                        if isinstance(a, Fetch) and a.local_root is None else a for a in step.actions)
        shared.append(replace(step, actions=actions))
    return tuple(shared)


def _reason(plan: HostPlan) -> str:
    parts = [f"{len(plan.fetch)} file(s), {plan.bytes_needed} bytes to transfer"] if plan.fetch else []
    if plan.remove:
        parts.append(f"{len(plan.remove)} file(s) left the source")
    return "; ".join(parts)


def _check_space(host: str, address: Optional[str], dest: str, state: HostState, plan: HostPlan) -> None:
    if plan.bytes_needed > state.free_bytes:
        raise HostError(host, f"not enough space for the weights at {dest}: {plan.bytes_needed} bytes still to "
                              f"download, {state.free_bytes} bytes free on {state.free_path}", address=address,
                        hint=f"free {plan.bytes_needed - state.free_bytes} bytes on {state.free_path}, "
                             "or set weights.dest on a larger filesystem")


def _judged_by_manifests(spec: Spec, states: Mapping[str, HostState], listing: Listing) -> Stage:
    """Without credentials to list the source: when every host holds a complete manifest of this very source,
    identical across hosts, `up` goes on; otherwise the listing's error stands, with the way around it."""
    held = held_without_listing(spec.weights.source or "", states)
    error = listing.unlisted
    if held is None:
        error.hint = (f"{error.hint}; or, when every host already holds these weights, "
                      f"skip this stage: deployctl up {spec.source or 'SPEC'} --skip weights")
        raise error
    reason = f"every host holds the manifest of {spec.weights.source} ({held}); source not listed: no credentials"
    return Stage("weights", tuple(Step(host, "weights", "keep", reason) for host in states), summary=f"weights: {reason}")


def held_without_listing(source: str, states: Mapping[str, HostState]) -> Optional[str]:
    """'listed <when>' when every host holds a complete manifest of `source`, the same on all (every file
    present at its recorded size); None otherwise."""
    digests = {manifest_digest(state.manifest) for state in states.values()}
    if not states or len(digests) != 1 or None in digests or any(state.damaged for state in states.values()):
        return None
    for state in states.values():
        if state.source != source:
            return None
        if any(state.sizes.get(path) != entry.get("size") for path, entry in state.manifest.items()):
            return None
    listed = sorted({state.listed or "at an unrecorded time" for state in states.values()})
    return "listed " + ", ".join(listed)
