"""plan_down: remove this deployment's containers (by label, `.previous` ones too; a running one stopped first as
every stop is, servers/shutdown.py), then the files deployctl wrote for it on each host (env files of secrets,
ranktables, ...), and nothing else: the history and the lock stay (pure)."""

from __future__ import annotations

from typing import Mapping, Optional

from deployctl.core import Command
from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import HostFacts
from deployctl.plan.hooks import with_hooks
from deployctl.plan.model import Plan, Stage, Step
from deployctl.plan.probes import deployment_files
from deployctl.plan.up import owned_containers
from deployctl.servers.shutdown import stop_command
from deployctl.spec.model import Spec

RM_WORDS = ("rm", "-rf", "--")


def plan_down(spec: Spec, facts: Mapping[str, HostFacts], shutdown_timeout: Optional[int] = None,
              skip: frozenset[str] = frozenset()) -> Plan:
    """Containers first (stage `down`), then the deployment's files (stage `files`), on every host of the spec. A
    running server gets its own --shutdown-timeout, at least `shutdown_timeout` (None: docker's default), to end
    what it serves before it is removed: `docker rm --force` alone is a SIGKILL. The spec's pre_down and post_down
    hooks go around them unless `skip` holds "hooks"."""
    extra_args = {i.name: i.extra_args for i in spec.instances}
    containers, files = [], []
    for host in spec.hosts:
        host_facts = facts.get(host.name)
        deployed = host_facts.deployed if host_facts and host_facts.deployed else DeployedState()
        for container in owned_containers(spec, deployed):
            stop = ((stop_command(container.name, extra_args.get(container.name, ()), shutdown_timeout),)
                    if container.running else ())
            containers.append(Step(host.name, "down", "remove", f"container {container.state}",
                                   container=container.name,
                                   commands=stop + (Command(("docker", "rm", "--force", container.name)),)))
        step = files_step(spec, host.name, host_facts.deployment_files if host_facts else None)
        if step is not None:
            files.append(step)
    plan = Plan(spec.name, (Stage("down", tuple(containers)), Stage("files", tuple(files))))
    return plan if "hooks" in skip else with_hooks(spec, plan, "down")


def files_step(spec: Spec, host: str, existing: tuple[str, ...] | None) -> Step | None:
    """Remove what exists of the deployment's files (`existing`; None: unknown, so all of them: `rm -rf` of a
    missing path is no error); then the deployment's folder where nothing else is left in it."""
    paths = deployment_files(spec)
    present = paths if existing is None else tuple(p for p in paths if p in existing)
    if not present:
        return None
    return Step(host, "files", "remove", f"the deployment's files: {', '.join(p.rsplit('/', 1)[-1] for p in present)}",
                commands=(Command((*RM_WORDS, *present)),
                          # the first host keeps the history and the lock here: rmdir leaves a folder with files
                          Command(("rmdir", "--", spec.remote_state_dir), check=False)))


def removed_paths(step: Step) -> tuple[str, ...]:
    """The paths a `files` step of this plan removes."""
    return step.commands[0].argv[len(RM_WORDS):]
