"""plan_up: spec + what runs on each host -> the ordered stages `up` executes (pure, no I/O).

Convergence comes from the facts: a container whose digest label equals the digest it would be started with
is kept; anything else is created or replaced, and containers of this deployment that the spec no longer
names are retired. Replaced and retired containers are stopped and renamed `<name>.previous` in one stage
before any new container starts, so an NPU is never held by two containers, and can be restored on failure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Mapping, Optional

from deployctl.errors import PlanError
from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import ContainerDevices, HostFacts
from deployctl.fronts import front_for_role
from deployctl.plan.containers import (
    LABEL_DEPLOYMENT,
    LABEL_DIGEST,
    PREVIOUS_SUFFIX,
    Container,
    RanktableFiles,
    container_digest,
    container_for,
    docker_run,
    env_dir,
    env_file_content,
    ranktable_dir,
)
from deployctl.servers.triton import repository as triton
from deployctl.core import Command, Secret
from deployctl.plan.model import HealthCheck, Plan, PutFile, Stage, Step
from deployctl.plan.probes import health_path
from deployctl.plan.image_stage import plan_image_stages
from deployctl.plan.answers import DEFAULT_ANSWER_TOKENS, plan_answers
from deployctl.plan.contract import contract_step
from deployctl.plan.rollout import DEFAULT_DRAIN_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT
from deployctl.plan.reserve_ports import plan_reserved_ports
from deployctl.servers.shutdown import stop_command
from deployctl.plan.verify import plan_verify
from deployctl.plan.weights_stage import Listing, plan_weights
from deployctl.servers import flavour_of
from deployctl.image.inputs import BuildInputs
from deployctl.spec.model import Spec



def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def owned_containers(spec: Spec, facts: DeployedState) -> tuple[ContainerDevices, ...]:
    return tuple(c for c in facts.containers if c.label(LABEL_DEPLOYMENT) == spec.name)


def check_devices_free(spec: Spec, facts: Mapping[str, DeployedState]) -> None:
    """Refuse to take an NPU/GPU held by a running container that is not this deployment's."""
    problems = []
    for instance in spec.instances:
        host_facts = facts.get(instance.host, DeployedState())
        for container in host_facts.containers:
            if not container.running or container.label(LABEL_DEPLOYMENT) == spec.name:
                continue
            held = _held_devices(spec, container)
            for device in instance.devices:
                if device in held:
                    owner = container.label(LABEL_DEPLOYMENT)
                    whose = f"deployment {owner!r}" if owner else "not deployctl's"
                    problems.append(
                        f"{instance.host}: {'GPU' if spec.platform == 'gpu' else 'NPU'} {device} wanted by "
                        f"{instance.name} is held by container {container.name!r} ({whose})"
                    )
    if problems:
        raise PlanError(
            "; ".join(problems),
            hint="stop that container or choose other devices in the spec; deployctl never shares a device",
        )


def _held_devices(spec: Spec, container: ContainerDevices) -> set[int]:
    """The NPU (or GPU) ids a container holds; `--gpus all` holds every GPU of the spec's instances."""
    if spec.platform == "gpu":
        if "all" in container.gpu_ids:
            return {d for i in spec.instances for d in i.devices}
        return {int(g) for g in container.gpu_ids if g.isdigit()}
    return set(container.npu_ids)


def desired_containers(spec: Spec, ranktables: Optional[RanktableFiles],
                       networks: Optional[Mapping] = None) -> tuple[Container, ...]:
    return tuple(container_for(spec, instance, ranktables, networks) for instance in spec.instances)


def digest_of(container: Container, image_id: str, ranktables: Optional[RanktableFiles],
              spec: Optional[Spec] = None) -> str:
    ranktable_digest = ranktables.digest_for(container.name) if ranktables and container.name in ranktables.local_names else ""
    repository = ""
    files = flavour_of(spec).repository_files(spec, container.instance) if spec is not None else {}
    if files:
        repository = triton.repository_digest(files)
    return container_digest(container, image_id, ranktable_digest, repository)


def repository_puts(spec: Spec) -> dict[str, list[PutFile]]:
    """Each host's files of its servers' repository (Triton's model repository); instances on one host must agree
    on them (one directory)."""
    wanted: dict[str, dict[str, bytes]] = {}
    flavour = flavour_of(spec)
    for instance in spec.instances:
        files = wanted.setdefault(instance.host, {})
        for path, content in flavour.repository_files(spec, instance).items():
            if files.setdefault(path, content) != content:
                raise PlanError(
                    f"{instance.host}: Triton instances of {spec.name!r} need different {path} "
                    f"(GPU counts differ), but share one model repository on the host",
                    hint="give every Triton instance on a host the same number of GPUs",
                )
    return {host: [PutFile(path, content, 0o644) for path, content in files.items()]
            for host, files in wanted.items()}


def plan_files(spec: Spec, facts: Mapping[str, DeployedState], ranktables: Optional[RanktableFiles],
               containers: tuple[Container, ...]) -> Stage:
    """Ranktables for every P/D host and the 0600 env files of secrets; unchanged files are not rewritten."""
    wanted: dict[str, list[PutFile]] = {h.name: [] for h in spec.used_hosts}
    if ranktables is not None:
        for host in spec.used_hosts:
            for name, content in ranktables.contents.items():
                wanted[host.name].append(PutFile(f"{ranktable_dir(spec)}/{name}", content, 0o644))
    for host, puts in repository_puts(spec).items():
        wanted[host].extend(puts)
    for container in containers:
        if container.env_file:
            wanted[container.instance.host].append(
                PutFile(container.env_file, Secret(env_file_content(container), "env file"), 0o600))
    steps = []
    for host in dict.fromkeys([*wanted, *facts]):
        puts = wanted.get(host, [])
        hashes = facts[host].file_hashes if host in facts else {}
        changed = tuple(p for p in puts if hashes.get(p.path) != _sha256(_content_bytes(p)))
        stale = stale_env_files(spec, hashes, puts)
        if changed or stale:
            steps.append(_files_step(host, changed, stale))
        elif puts:
            steps.append(Step(host, "files", "keep", f"{len(puts)} file(s) up to date"))
    return Stage("files", tuple(steps))


def stale_env_files(spec: Spec, hashes: Mapping[str, str], puts: list[PutFile]) -> tuple[str, ...]:
    """Env files on a host that no container of the spec uses there (retired, moved, or its secrets gone): they
    hold secrets nothing reads any more (Docker reads an env file only when it creates the container)."""
    wanted = {p.path for p in puts}
    prefix = env_dir(spec) + "/"
    return tuple(sorted(p for p in hashes if p.startswith(prefix) and p not in wanted))


def _files_step(host: str, changed: tuple[PutFile, ...], stale: tuple[str, ...]) -> Step:
    """Write what changed and remove stale env files; undone, it removes the env files it wrote: the containers
    a rollback restores carry their environment already, and a secret left behind serves nothing."""
    reason = "; ".join(part for part in (f"{len(changed)} file(s) to write" if changed else "",
                                         f"{len(stale)} stale env file(s) to remove" if stale else "") if part)
    written = tuple(p.path for p in changed if isinstance(p.content, Secret))
    return Step(host, "files", "put" if changed else "remove", reason, puts=changed,
                commands=(Command(("rm", "-f", "--", *stale)),) if stale else (),
                undo=(Command(("rm", "-f", "--", *written), check=False),) if written else ())


def _content_bytes(put: PutFile) -> bytes:
    content = put.content.reveal() if isinstance(put.content, Secret) else put.content
    return content.encode() if isinstance(content, str) else content


def _stop_step(host: str, name: str, action: str, reason: str, port: Optional[int] = None,
               path: str = "/health", words: tuple[str, ...] = (), floor: int = DEFAULT_SHUTDOWN_TIMEOUT,
               previous_left: bool = True) -> Step:
    """Stop `name` gracefully (its command `words`, the user's --shutdown-timeout `floor`: servers/shutdown.py's
    one stop policy) and keep it as `.previous` for the rollback. `previous_left`: the host has an old
    `.previous` of it (the facts say), removed first; without one that round trip is left out (a rollout wave
    waits on every command of its stop)."""
    previous = name + PREVIOUS_SUFFIX
    return Step(
        host, "stop", action, reason, container=name,
        undo_health=HealthCheck(name, port, path) if port else None,
        commands=((Command(("docker", "rm", "--force", previous), check=False),) if previous_left else ()) + (
            stop_command(name, words, floor),
            Command(("docker", "rename", name, previous)),
        ),
        undo=(
            Command(("docker", "rm", "--force", name), check=False),
            Command(("docker", "rename", previous, name)),
            Command(("docker", "start", name)),
        ),
        finalize=(Command(("docker", "rm", "--force", previous), check=False),),
    )


def plan_containers(spec: Spec, facts: Mapping[str, DeployedState], ranktables: Optional[RanktableFiles],
                    images: Optional[Mapping[str, Optional[str]]] = None,
                    desired: Optional[tuple[Container, ...]] = None,
                    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT) -> tuple[Stage, ...]:
    """stop (replaced and retired) -> workers (prefill+decode or mixed, in parallel) -> contract (each new
    worker checked from inside) -> scheduler or proxy.
    `images`: each host's image identity once the image stages ran (default: the image ID there now)."""
    check_devices_free(spec, facts)
    stops: list[Step] = []
    contracts: list[Step] = []
    front = spec.front
    starts: dict[str, list[Step]] = {"workers": [], front.role if front else "front": []}
    desired = desired if desired is not None else desired_containers(spec, ranktables)
    for container in desired:
        instance = container.instance
        host_facts = facts[instance.host]
        image_id = (images[instance.host] if images is not None else host_facts.image_id) or ""
        kind = front_for_role(instance.role)
        if kind is not None and kind.pulls_own_image():  # pulled by `docker run`: not the server image
            image_id = f"image:{container.image}"
        digest = digest_of(container, image_id, ranktables, spec)
        current = host_facts.container(container.name)
        wave = instance.role if instance is front else "workers"
        # a headless vllm-ascend server serves no HTTP: its group's API server's health covers it
        health = HealthCheck(container.name, instance.port, health_path(spec, instance)) if instance.port else None
        action, reason = _decide(current, digest, image_id)
        if action == "keep":
            starts[wave].append(Step(instance.host, wave, "keep", reason, container=container.name))
            continue
        if action == "replace":
            stops.append(_stop_step(instance.host, container.name, "replace", reason,
                                    port=instance.port if current and current.running else None,
                                    path=health_path(spec, instance),
                                    words=container.command, floor=shutdown_timeout,
                                    previous_left=host_facts.container(container.name + PREVIOUS_SUFFIX) is not None))
        starts[wave].append(Step(
            instance.host, wave, action, reason, container=container.name,
            commands=(Command(docker_run(container, digest)),),
            undo=(Command(("docker", "rm", "--force", container.name)),),
            health=health, finalize=_seal_caches(container),
        ))
        check = contract_step(container, ranktables)
        if check is not None:
            contracts.append(check)
    wanted = {(c.instance.host, c.name) for c in desired}  # a name that moved hosts is retired where it was
    for host in spec.hosts:
        owned = owned_containers(spec, facts.get(host.name, DeployedState()))
        for current in owned:
            if not current.name.endswith(PREVIOUS_SUFFIX) and (host.name, current.name) not in wanted:
                here = facts.get(host.name, DeployedState())
                stops.append(_stop_step(host.name, current.name, "remove", "no longer in the spec",
                                        floor=shutdown_timeout,
                                        previous_left=here.container(current.name + PREVIOUS_SUFFIX) is not None))
        # A stop step removes an old `.previous` itself before renaming; a leftover beside a container that
        # stays (or is only created now) is removed here — never both, they would race in one stage.
        stopping = {step.container for step in stops if step.host == host.name}
        for current in owned:
            base = current.name[: -len(PREVIOUS_SUFFIX)]
            if current.name.endswith(PREVIOUS_SUFFIX) and base not in stopping:
                stops.append(Step(host.name, "stop", "remove", "left over from an interrupted deploy",
                                  container=current.name,
                                  commands=(Command(("docker", "rm", "--force", current.name)),)))
    stages = [Stage("stop", tuple(stops)), Stage("workers", tuple(starts["workers"]))]
    if contracts:
        stages.append(Stage("contract", tuple(contracts)))
    if front:
        stages.append(Stage(front.role, tuple(starts[front.role])))
    return tuple(stages)


def _seal_caches(container: Container) -> tuple[Command, ...]:
    """Once the deploy served, its compile cache is whole: sealed so later deploys and other hosts reuse it."""
    from deployctl.plan.compile_cache import CONTAINER_DIR, SEAL

    return tuple(Command(("sh", "-c", SEAL, "sh", m.source), check=False)
                 for m in container.mounts if m.target == CONTAINER_DIR)


def _decide(current: Optional[ContainerDevices], digest: str, image_id: str) -> tuple[str, str]:
    if current is None:
        return "create", "not running"
    if not image_id:
        return "replace", "image missing on the host"
    if current.label(LABEL_DIGEST) != digest:
        return "replace", "configuration changed"
    if not current.running:
        return "replace", f"container {current.state} (exit code {current.exit_code})"
    return "keep", "running with this configuration"


@dataclass(frozen=True)
class UpInputs:
    """What the control machine adds to the hosts' facts: rendered ranktables, the image's build inputs, the
    weights source's listing and the digest of the fetcher program this deployctl ships."""

    ranktables: Optional[RanktableFiles] = None
    build: Optional[BuildInputs] = None
    listing: Optional[Listing] = None
    fetcher_digest: str = ""
    answer_tokens: int = DEFAULT_ANSWER_TOKENS  # 0: no all-pairs answer check
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT  # a drain rollout's wait for a server's requests (--drain-timeout)
    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT  # `docker stop --time` (--shutdown-timeout)


def plan_up(spec: Spec, facts: Mapping[str, HostFacts], inputs: UpInputs = UpInputs(), *,
            skip: frozenset[str] = frozenset(),
            stages: frozenset[str] = frozenset({"image", "weights", "containers"})) -> Plan:
    """Every stage of `up` after the checks, in order: image, ship, weights, files, stop, workers, scheduler,
    verify; `stages` keeps a part of it (`image build` plans the image, `weights sync` the weights)."""
    deployed = {host: f.deployed or DeployedState() for host, f in facts.items()}
    image_stages, images = plan_image_stages(spec, facts, inputs.build, skip)
    planned = list(image_stages) if "image" in stages else []
    if "weights" in stages and inputs.listing is not None and "weights" not in skip:
        planned.append(plan_weights(spec, facts, inputs.listing, inputs.fetcher_digest))
    pending: tuple[str, ...] = ()
    rollout = None
    if "containers" in stages:
        networks = flavour_of(spec).host_networks(spec, facts)
        spec = flavour_of(spec).with_host_facts(spec, networks, facts)
        desired = desired_containers(spec, inputs.ranktables, networks)
        if spec.cache.compile:
            desired, cache_stage = _compile_caches(spec, facts, deployed, images, desired)
            planned.extend((cache_stage,) if cache_stage is not None else ())
        planned.append(plan_files(spec, deployed, inputs.ranktables, desired))
        reserve = plan_reserved_ports(spec, facts)
        planned.extend((reserve,) if reserve is not None else ())
        containers = tuple(s for s in plan_containers(spec, deployed, inputs.ranktables, images, desired,
                                                      inputs.shutdown_timeout)
                           if not (s.name == "contract" and "contract" in skip))
        containers, rollout = _rollout(spec, containers, deployed, networks, inputs, skip, facts)
        containers = _membership(spec, containers, facts, networks, inputs)
        planned.extend(containers)
        image_changes = {s.host for stage in image_stages for s in stage.steps if s.changes}
        pending = tuple(sorted(h for h, identity in images.items() if identity is None and h in image_changes))
    profile = spec.profile.describe() if spec.profile is not None else None
    plan = Plan(spec.name, tuple(planned), pending=pending, profile=profile, rollout=rollout)
    if plan.changed and "containers" in stages:
        checks = () if "checks" in skip else (plan_checks(spec),)
        answers = () if "answers" in skip or not inputs.answer_tokens else (
            plan_answers(spec, reach_addresses(spec, networks), inputs.answer_tokens),)
        plan = Plan(spec.name, checks + plan.stages + answers + (plan_verify(spec),), pending=pending, profile=profile,
                    rollout=rollout)
    if "containers" in stages and "hooks" not in skip:
        from deployctl.plan.hooks import with_hooks

        plan = with_hooks(spec, plan, "up")
    return plan


def _rollout(spec: Spec, stages: tuple[Stage, ...], deployed, networks, inputs: UpInputs, skip, facts):
    """The container stages as the rollout replaces serving containers (plan/rollout.py), and its summary."""
    from deployctl.plan.answers import answer_paths, asking_host
    from deployctl.plan.rollout import WAVE_ANSWER_TOKENS, RolloutOptions, plan_rollout
    from deployctl.servers.surge import SURGE_SUFFIX

    address_of = reach_addresses(spec, networks)
    tokens = 0 if "answers" in skip else min(inputs.answer_tokens, WAVE_ANSWER_TOKENS)
    paths = answer_paths(spec, asking_host(spec), address_of, tokens) if tokens else None
    options = RolloutOptions(inputs.drain_timeout, tokens, shutdown_timeout=inputs.shutdown_timeout)

    def surge_container(instance):
        """A surge server: the instance's new container on other cards and port, its env file shared."""
        original = container_for(spec, spec_instance[instance.name[: -len(SURGE_SUFFIX)]], inputs.ranktables, networks)
        container = replace(container_for(spec, instance, inputs.ranktables, networks), env_file=original.env_file)
        return (Command(docker_run(container, "surge")),
                HealthCheck(container.name, instance.port, health_path(spec, instance))
                if instance.port is not None else None)  # a DP group's headless rank: its API server answers

    spec_instance = {i.name: i for i in spec.instances}
    return plan_rollout(spec, stages, deployed, address_of, options, paths, spare_of(spec, facts), surge_container)


def _membership(spec: Spec, stages: tuple[Stage, ...], facts: Mapping[str, HostFacts], networks,
                inputs: UpInputs) -> tuple[Stage, ...]:
    """A kept front's list changed at run time to the spec's (plan/front.py `membership_stages`)."""
    from deployctl.plan.front import membership_stages

    front = spec.front
    listed = facts[front.host].front_list if front is not None and front.host in facts else None
    return membership_stages(spec, stages, listed, reach_addresses(spec, networks), inputs.drain_timeout)


def spare_of(spec: Spec, facts: Mapping[str, HostFacts]) -> dict:
    """Each serving host's cards no running container holds and the spec does not use, and its ports in use
    (the surge of a rollout; known where the layout and listening probes ran)."""
    from deployctl.plan.rollout import Spare

    out = {}
    for host in spec.used_hosts:
        found = facts.get(host.name)
        if found is None or found.layout is None:
            continue
        held = {n for c in (found.deployed.containers if found.deployed else ()) if c.running for n in c.npu_ids}
        mine = {d for i in spec.instances if i.host == host.name for d in i.devices}
        cards = tuple(n for n in found.layout.npus if n not in held and n not in mine)
        out[host.name] = Spare(cards, found.listening.ports if found.listening else frozenset(), found.listening)
    return out
def _compile_caches(spec: Spec, facts: Mapping[str, HostFacts], deployed: Mapping[str, DeployedState],
                    images: Mapping[str, Optional[str]], desired: tuple[Container, ...]):
    """cache.compile: each compiling server's container with its key's directory mounted, and the `cache` stage
    that gives every host the directories its servers use (plan/compile_cache.py)."""
    from deployctl.plan.compile_cache import cache_key, plan_cache, uses_cache, with_cache

    out, keys = [], {}
    for container in desired:
        instance = container.instance
        if uses_cache(spec, instance):
            image_id = (images[instance.host] if images is not None and instance.host in images
                        else deployed[instance.host].image_id) or ""
            key = cache_key(spec, instance, image_id)
            keys.setdefault(instance.host, set()).add(key.name)
            container = with_cache(spec, container, key)
        out.append(container)
    sealed = {host: f.compile_cache for host, f in facts.items()}
    return tuple(out), plan_cache(spec, sealed, keys)


def reach_addresses(spec: Spec, networks: Optional[Mapping]) -> dict[str, str]:
    """How one host reaches another's servers: vllm-ascend's derived address (what its proxy lists), else the
    spec's address."""
    from deployctl.plan.front import reach

    return reach(spec, networks)


def plan_checks(spec: Spec) -> Stage:
    """Before anything changes, `up` runs the doctor's checks on every host that serves (any FAIL stops it)."""
    return Stage("checks", tuple(Step(h.name, "checks", "check", "the doctor's checks, before any change")
                                 for h in spec.used_hosts))
