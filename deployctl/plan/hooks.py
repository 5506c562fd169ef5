"""The user's hooks as plan stages (pure): `pre_up` first, `post_up` last, `pre_wave`/`post_wave` around each wave of
a drain rollout, `on_failure` kept aside for after a rollback; the same for `down`. Each is a step per host it runs
on (the control machine, or every host of the spec) holding one RunHook: argv words, a timeout, and the
deployment's facts as DEPLOYCTL_* variables beside the hook's own `env:` (its ${VAR} values stay Secrets)."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from deployctl.plan.actions import RunHook
from deployctl.plan.model import CONTROL_HOST, Plan, Stage, Step
from deployctl.spec.model import EnvVar, Spec

PRE = ("pre_up", "pre_down")  # a failure refuses the action: nothing changed yet
POST = ("post_up", "post_down")  # after the action finished; a failure marks its result
STAGE = "hooks"  # the stage name of every hook (the ledger's phase `hooks`)


def facts_env(spec: Spec, action: str, point: str, *, wave: Optional[dict] = None, waves: int = 0,
              result: str = "", host: str = "") -> tuple[EnvVar, ...]:
    """The deployment's facts a hook reads: what runs where, and where it answers."""
    from deployctl.plan.verify import endpoint_url

    def address(name: str) -> str:
        found = spec.host(name)
        return "127.0.0.1" if found.is_local else found.address

    values = {
        "DEPLOYCTL_ACTION": action,
        "DEPLOYCTL_HOOK": point,
        "DEPLOYCTL_DEPLOYMENT": spec.name,
        "DEPLOYCTL_SPEC": str(spec.source) if spec.source else "",
        "DEPLOYCTL_HOSTS": " ".join(h.name for h in spec.hosts),
        "DEPLOYCTL_ADDRESSES": " ".join(address(h.name) for h in spec.hosts),
        "DEPLOYCTL_INSTANCES": " ".join(i.name for i in spec.instances),
        "DEPLOYCTL_ENDPOINTS": " ".join(f"{i.name}=http://{address(i.host)}:{i.port}" for i in spec.api_servers),
        "DEPLOYCTL_ENDPOINT": endpoint_url(spec) if spec.api_servers else "",
    }
    if wave is not None:
        values.update({"DEPLOYCTL_WAVE": str(wave["wave"]), "DEPLOYCTL_WAVES": str(waves),
                       "DEPLOYCTL_WAVE_UNITS": " ".join(wave["units"]),
                       "DEPLOYCTL_WAVE_INSTANCES": " ".join(wave["containers"])})
    if result:
        values["DEPLOYCTL_RESULT"] = result
    if host:
        values["DEPLOYCTL_HOST"] = host
    return tuple(EnvVar(name, value, value) for name, value in values.items())


def hook_stage(spec: Spec, action: str, point: str, *, wave: Optional[dict] = None, waves: int = 0,
               result: str = "") -> Optional[Stage]:
    """The stage that runs the spec's hook at `point` (None: the spec has none there)."""
    hook = spec.hook(point)
    if hook is None:
        return None
    number = wave["wave"] if wave is not None else 0
    hosts = [h.name for h in spec.hosts] if hook.on == "hosts" else [CONTROL_HOST]
    steps = tuple(
        Step(host, STAGE, "run", f"{point} hook" + (f" (wave {number})" if number else ""), wave=number,
             actions=(RunHook(point, hook.command, hook.timeout,
                              hook.env + facts_env(spec, action, point, wave=wave, waves=waves, result=result,
                                                   host="" if host == CONTROL_HOST else host), number),))
        for host in hosts)
    return Stage(STAGE, steps, wave=number, hook=point)


def with_hooks(spec: Spec, plan: Plan, action: str) -> Plan:
    """The plan with the spec's hooks of `action` (up | down) in place; a plan that changes nothing runs none."""
    if not spec.hooks or not plan.changed:
        return plan
    stages = list(plan.stages)
    if action == "up":
        stages = _around_waves(spec, stages, (plan.rollout or {}).get("waves", ()))
    pre = hook_stage(spec, action, f"pre_{action}")
    post = hook_stage(spec, action, f"post_{action}", result="ok")
    failure = hook_stage(spec, action, "on_failure", result="rolled back" if action == "up" else "failed")
    return replace(plan, stages=tuple(([pre] if pre else []) + stages + ([post] if post else [])),
                   on_failure=(failure,) if failure else ())


def _around_waves(spec: Spec, stages: list[Stage], waves) -> list[Stage]:
    """pre_wave before a wave's first stage (nothing of it changed yet), post_wave after its last (it is committed)."""
    if not waves or not (spec.hook("pre_wave") or spec.hook("post_wave")):
        return stages
    by_number = {w["wave"]: w for w in waves}
    out: list[Stage] = []
    for index, stage in enumerate(stages):
        if stage.wave and (index == 0 or stages[index - 1].wave != stage.wave) and stage.wave in by_number:
            out += [s for s in (hook_stage(spec, "up", "pre_wave", wave=by_number[stage.wave], waves=len(waves)),) if s]
        out.append(stage)
        if stage.wave and (index + 1 == len(stages) or stages[index + 1].wave != stage.wave) and stage.wave in by_number:
            out += [s for s in (hook_stage(spec, "up", "post_wave", wave=by_number[stage.wave], waves=len(waves),
                                           result="ok"),) if s]
    return out


def split(plan: Plan) -> tuple[Plan, Plan, Plan]:
    """(the leading pre_* hook, the action itself, the trailing post_* hook): each run on its own, so that a failed
    pre_* refuses the action before any change and a failed post_* undoes nothing."""
    stages = list(plan.stages)
    pre = [stages.pop(0)] if stages and stages[0].hook in PRE else []
    post = [stages.pop()] if stages and stages[-1].hook in POST else []
    return (replace(plan, stages=tuple(pre), on_failure=()), replace(plan, stages=tuple(stages)),
            replace(plan, stages=tuple(post), on_failure=()))


def after_failure(plan: Plan, result: str, error: str) -> Plan:
    """The plan of the on_failure hook, told what happened (DEPLOYCTL_RESULT, DEPLOYCTL_ERROR)."""
    def told(step: Step) -> Step:
        actions = tuple(replace(a, env=tuple(v for v in a.env if v.name not in ("DEPLOYCTL_RESULT", "DEPLOYCTL_ERROR"))
                                + (EnvVar("DEPLOYCTL_RESULT", result, result), EnvVar("DEPLOYCTL_ERROR", error, error)))
                        if isinstance(a, RunHook) else a for a in step.actions)
        return replace(step, actions=actions)

    return replace(plan, stages=tuple(replace(s, steps=tuple(told(t) for t in s.steps)) for s in plan.on_failure),
                   on_failure=())
