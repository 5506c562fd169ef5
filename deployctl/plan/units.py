"""What is taken out, replaced or restarted together (pure): a vllm-ascend DP group, every rank of it on every
host (one rank's collective hangs every other's, so they fail and come back together), every node of a server over
several hosts (server sglang's `hosts`: the same), else an instance alone.
One definition for `up`'s rollout waves and `deployctl watch`'s restarts."""

from __future__ import annotations

from deployctl.spec.model import Instance, Spec

SERVING_ROLES = ("mixed", "prefill", "decode")


def unit_of(spec: Spec, instance: Instance) -> tuple[str, tuple[Instance, ...]]:
    """The unit an instance belongs to, by its key: the unit its flavour built it in (a DP group's label, `decode0`
    as in its container names; a multi-node server's first node's name) with every instance of it, else the
    instance's name with the instance alone (an AscendCloud or GPU instance, a front)."""
    if instance.unit:
        return instance.unit, tuple(i for i in spec.instances if i.unit == instance.unit)
    return instance.name, (instance,)


def serving_units(spec: Spec) -> dict[str, tuple[Instance, ...]]:
    """Every unit of the spec's serving instances (not its front), by key, in spec order."""
    out: dict[str, tuple[Instance, ...]] = {}
    for instance in spec.instances:
        if instance.role in SERVING_ROLES:
            key, members = unit_of(spec, instance)
            out.setdefault(key, members)
    return out
