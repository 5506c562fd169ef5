"""The interface every server flavour implements (pure): what `validate`, `plan`, `doctor`, `export` and `status`
ask of a server instead of comparing `spec.server`. A flavour is one module with one `Flavour` subclass; the
defaults here are vLLM's OpenAI server's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional, Sequence

from deployctl.servers.features import Feature
from deployctl.servers.fields import Flag, Refused, Table, flag_rows
from deployctl.servers.metrics import VLLM_V1, ServerMetrics
from deployctl.servers.requests import ONE_TOKEN_PATH, one_token_body, smoke_request_body

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.export.gang_types import Gang
    from deployctl.export.stacks import NpuStack
    from deployctl.facts.model import HostFacts
    from deployctl.facts.probe import Probe
    from deployctl.plan.container_types import Container, RanktableFiles
    from deployctl.spec.model import Instance, ModelArgs, Spec
    from deployctl.spec.port_uses import PortUse
    from deployctl.spec.profiles import StartupProfile
    from deployctl.spec.rules import Context, Unit


class Flavour:
    """One server flavour on one platform: its spec rules, its field table, its container, its paths."""

    platform: str = ""
    server: str = ""
    title: str = ""  # how docs and messages name it
    table: Table = ()  # spec model fields -> engine flags (rendered by fields.render_flags / render_keys)
    wrong_platform_hint: str = ""  # the hint when the spec's platform is not this flavour's

    # The spec's shape for this flavour
    dp_groups: bool = False  # topology of DP groups (vllm-ascend) instead of instances and a scheduler
    extra_ports: tuple[tuple[str, int], ...] = ()  # (key, offset from port): more ports each instance listens on
    max_devices: int = 8  # the most NPUs/GPUs one instance may take on its host (its TP size)
    # Further topology and instance keys it reads, and the instance keys of the further ports it listens on (see
    # ports_of), each with what it is: validate warns where another flavour's key is written, naming its readers
    topology_options: Mapping[str, str] = {}
    instance_options: Mapping[str, str] = {}
    port_keys: Mapping[str, str] = {}  # key -> when it listens there ("unless <that>" in the warning)
    # mode -> the topology keys a spec of that mode lists its units under, in the order the rules name them (none:
    # the flavour's own rules check its topology, as vllm-ascend's DP groups)
    topology_keys: Mapping[str, tuple[str, ...]] = {"mixed": ("instances",),
                                                    "disaggregated": ("scheduler", "prefill", "decode")}

    # How it serves and how deployctl talks to it
    metrics: ServerMetrics = VLLM_V1  # the names its /metrics writes (`deployctl monitor`'s panels and alerts)
    signatures: str = ""  # the package whose signatures.json holds its known error lines (diagnose, after the generic)
    # What it cannot do, each with the reason validate, plan and export say (servers/features.py); the defaults are
    # vLLM's OpenAI server's, which has no version profiles
    unsupported: Mapping[Feature, str] = {}
    # Values of a spec field only this server takes: the registry adds each row to the table of every other
    # server's flavour that does not refuse that value already (their engines have no such value)
    claims: tuple[Refused, ...] = ()

    def supports(self, feature: Feature) -> bool:
        return feature not in self.unsupported

    def ports_of(self, role: str, nodes: int = 1) -> tuple[tuple[str, int], ...]:
        """(key, offset from port) of the ports an instance of `role` over `nodes` hosts listens on beside `port`
        on its first host (Triton's grpc and metrics ports; SGLang's prefill bootstrap port, its dist-init port)."""
        return self.extra_ports

    # --- spec rules -------------------------------------------------------------------------------------------
    def document_units(self, c: "Context") -> tuple[list["Unit"], list["Unit"], Optional["Unit"]]:
        """(instances, DP groups, scheduler) as the rules read them from the document: its instances and the
        AscendCloud P/D scheduler by default."""
        return list(c.worker_units()), [], c.scheduler_unit()

    def topology_front(self, mode: Optional[str]) -> Optional[str]:
        """The role of the front a topology of `mode` holds itself, under that key (`topology.scheduler`: the
        AscendCloud P/D flow's scheduler); None: only `topology.front`."""
        return "scheduler" if mode == "disaggregated" else None

    def check(self, c: "Context") -> Iterator["Problem"]:
        """The rules only this flavour has (the field table's refusals are checked for every flavour)."""
        return iter(())

    def renders(self, field: str) -> bool:
        """True when a spec field reaches this flavour's engine arguments."""
        return any(row.field == field for row in flag_rows(self.table))

    # --- the topology it builds (issue 42)
    def build_topology(self, data: Mapping, model: "ModelArgs", cards: int,
                       references: Mapping) -> Optional[tuple[tuple["Instance", ...], object]]:
        """(its servers' instances, its own topology data, kept as `Spec.upstream`) from a valid document, where it
        lays its topology out itself (vllm-ascend's DP groups); None: the instances the document lists."""
        return None

    def document_ports(self, c: "Context") -> Optional[list["PortUse"]]:
        """Every port its servers and its front bind as validate reads the document, where it lays them out itself;
        None: each unit's own ports and the front's."""
        return None

    def spec_ports(self, spec: "Spec") -> Optional[list["PortUse"]]:
        """The same of a loaded spec, its servers' only (the fronts' are every flavour's); None: each instance's."""
        return None

    def card_counts(self, c: "Context") -> Iterator[tuple[tuple, int, str]]:
        """(path, cards, what it says) of each of its own units the model table checks, beside the instances'
        devices (vllm-ascend: a DP group's tp, times dp with expert parallel); none by default."""
        return iter(())

    def carried_key(self, key: str, known: Sequence[str]) -> Optional[tuple[str, str]]:
        """(message, hint) for `key`, another server's key written where its schema reads the keys `known` (the
        AscendCloud keys people carry over to vllm-ascend); None: not one of those."""
        return None

    # --- doctor -----------------------------------------------------------------------------------------------
    def doctor_checks(self, spec: "Spec") -> frozenset[str]:
        """The doctor's optional host checks its hosts need (`tuning`: the swappiness, NUMA balancing and CPU
        governor its tutorials set); none by default."""
        return frozenset()

    # --- the container ----------------------------------------------------------------------------------------
    def container(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"],
                  networks: Optional[Mapping]) -> "Container":
        raise NotImplementedError

    # --- what it reads of the hosts ----------------------------------------------------------------------------
    def host_probes(self, spec: "Spec") -> tuple["Probe", ...]:
        """What `up`, `status` and `watch` probe on each serving host for its containers, beside the generic
        facts (vllm-ascend: each host's addresses, NPUs and image version); none by default."""
        return ()

    def network_probes(self, spec: "Spec") -> tuple["Probe", ...]:
        """Of those, what `host_networks` reads (`watch` names a front's backends by them); none by default."""
        return ()

    def host_networks(self, spec: "Spec", facts: Mapping[str, "HostFacts"]) -> Optional[Mapping]:
        """Host name -> its address (`.address`) and NIC as its containers are given them, from those probes'
        facts (None: its containers take none, and a front reaches them at the spec's addresses)."""
        return None

    def with_host_facts(self, spec: "Spec", networks: Optional[Mapping], facts: Mapping[str, "HostFacts"]) -> "Spec":
        """The spec as the hosts' facts complete it (vllm-ascend: default kv ports, the image's version); as is by
        default."""
        return spec

    def uses_ranktables(self, spec: "Spec") -> bool:
        """True when its instances find each other through HCCL ranktables (AscendCloud's P/D)."""
        return False

    def repository_files(self, spec: "Spec", instance: "Instance") -> Mapping[str, bytes]:
        """Host path -> content of the files `up` writes for an instance's server to read (Triton's model
        repository); none by default."""
        return {}

    def repository_dir(self, spec: "Spec") -> Optional[str]:
        """The host directory those files live in, mounted into the container (None: no such files)."""
        return None

    def deployed_dirs(self, spec: "Spec") -> tuple[str, ...]:
        """Directories of those files whose contents `plan` reads back (one level each)."""
        return ()

    # --- health and answers -----------------------------------------------------------------------------------
    def health_path(self, instance: Optional["Instance"] = None) -> str:
        """What answers 200 once an instance serves: `up` waits on it and `status` reads it."""
        return "/health"

    def ready_path(self) -> Optional[str]:
        """A server-wide readiness to check before the smoke request (None: the health barrier suffices)."""
        return None

    def answers_path(self, spec: "Spec") -> str:
        """Where a completion is asked (`up --answers`, `status --answers`)."""
        return "/v1/completions"

    def smoke_path(self, spec: "Spec") -> str:
        """Where `up`'s smoke request goes."""
        return "/v1/chat/completions"

    def smoke_body(self, spec: "Spec") -> bytes:
        """The body of `up`'s smoke request: a greedy chat completion."""
        return smoke_request_body(spec)

    def own_answer_body(self, prompt: str, tokens: int) -> Optional[str]:
        """The body each server is asked for itself on its own generate endpoint (`up --answers`); None: the
        OpenAI completion, through the front where there is one."""
        return None

    def liveness_request(self, spec: "Spec") -> Optional[tuple[str, bytes]]:
        """(path, body) of the one-token generate `status` and `watch` judge an engine's liveness by (an empty body:
        a GET whose 200 says it generated); None: they judge it by its health alone (the reason is the flavour's
        unsupported ONE_TOKEN_LIVENESS)."""
        return (ONE_TOKEN_PATH, one_token_body(spec)) if self.supports(Feature.ONE_TOKEN_LIVENESS) else None

    def surge(self, spec: "Spec") -> int:
        """How many units a rollout may start beside the old ones: rollout.max_surge where the flavour can surge
        (validate says why where it cannot)."""
        return spec.rollout.max_surge if self.supports(Feature.SURGE) else 0

    # --- start-up: the time-to-serve ledger and compile caches --------------------------------------------------
    def startup(self, spec: "Spec") -> Optional["StartupProfile"]:
        """The log lines that end its start-up phases and its compile caches' env (None: not known)."""
        from deployctl.spec.profiles import vllm_startup

        return vllm_startup()

    # --- units, rollout and reports (issue 42)
    def unit_noun(self, spec: "Spec") -> str:
        """How a rollout's messages name one of its units (plan/units.py): `instance` by default."""
        return "instance"

    def members_change_refusal(self, spec: "Spec") -> str:
        """Why a rollout cannot drain while a unit starts or retires some of its members for good beside replacing
        others ("": it can, each instance being a unit of its own)."""
        return ""

    def surge_unit(self, spec: "Spec", members: tuple["Instance", ...], surged: int, free: dict[str, list[int]],
                   taken: dict[str, set[int]]) -> Optional[tuple["Instance", ...]]:
        """The surge servers standing in for the unit `members` while it is replaced, on host -> cards `free` and
        beside host -> ports `taken` (both updated with what they take), `surged` units having surged before it;
        None where they do not fit. By default a one-instance unit again on free cards and a free port."""
        from deployctl.servers.surge import instance_surge

        return instance_surge(members, free, taken)

    def cache_layout(self, instance: "Instance") -> Mapping[str, object]:
        """The parallel layout beside tp and devices that an instance's compile cache is keyed by."""
        return {"dp": 1, "expert_parallel": False}

    def monitor_labels(self, instance: "Instance") -> Mapping[str, str]:
        """The `group` and `rank` labels of an instance's metrics target: its index among its role and rank 0."""
        return {"group": str(instance.index), "rank": "0"}

    def summary_columns(self, spec: "Spec") -> tuple[str, ...]:
        """The columns validate's summary table has after TP (each row's cell: summary_cells, else "-"); none."""
        return ()

    def summary_cells(self, instance: "Instance") -> Mapping[str, str]:
        """Column -> an instance's cell in those columns; none by default."""
        return {}

    def summary_fields(self, instance: "Instance") -> Mapping[str, object]:
        """Key -> value an instance has in `validate --output json`'s summary beside the generic ones; none."""
        return {}

    # --- monitoring -------------------------------------------------------------------------------------------
    def metrics_endpoint(self, instance: "Instance") -> Optional[tuple[int, str]]:
        """(port, path) where Prometheus scrapes an instance's server metrics; None where it serves none. vLLM's
        OpenAI server serves /metrics on its API port; the fronts (AscendCloud's scheduler, vllm-ascend's proxy
        example, which has no /metrics route; vllm-router, whose metrics are on a port of their own) have none
        there, so `deployctl monitor` probes their health instead."""
        from deployctl.fronts import FRONT_ROLES

        if instance.role in FRONT_ROLES or instance.port is None:
            return None
        return instance.port, "/metrics"

    # --- export -----------------------------------------------------------------------------------------------
    def export_refusals(self, spec: "Spec", stack: str) -> Iterator["Problem"]:
        """What no export target can express for this flavour's spec on the NPU stack `stack` (--npu-stack), said
        at its path, each with what would make it exportable."""
        return iter(())

    def readiness_command(self, instance: "Instance", command: tuple[str, ...]) -> Optional[tuple[str, ...]]:
        """An exec readiness probe for an instance whose health path says too little (None: the health path's
        httpGet); `command` is the instance's command as exported."""
        return None

    def export_spec(self, spec: "Spec", stack: "NpuStack") -> "Spec":
        """The spec as the export places it on `stack` (--npu-stack): by default as it is."""
        return spec

    def export_gangs(self, spec: "Spec") -> tuple["Gang", ...]:
        """The serving pods as a cluster schedules them, in spec order (the front is none): by default a one-pod
        gang per serving instance."""
        from deployctl.export.gang_types import Gang, Pod

        return tuple(Gang(i.name, i.role, (Pod(i.name, (i,), 0),), i.path)
                     for i in spec.instances if i.role in ("mixed", "prefill", "decode"))

    def worker_values(self, instance: "Instance", leader: str, index: str) -> Mapping[str, str]:
        """flag -> the shell text a gang worker's command has after it instead of its value, from `leader` (shell
        text of the leader's IP) and `index` (the variable holding the worker's index); none by default."""
        return {}

    def gang_refusal(self, spec: "Spec", target: str) -> Optional[tuple[str, str]]:
        """Why `target` (a gang controller) cannot run a gang of this spec over several hosts, and what would
        (message, hint); None: it can."""
        return None

    def cluster_proxy_command(self, spec: "Spec", proxy: "Instance", networks: Mapping,
                              address: Callable[["Instance"], str]) -> Optional[tuple[str, ...]]:
        """The proxy's command on a cluster, `address` naming each server instance as the cluster reaches it (None:
        its command as `up` runs it)."""
        return None


def flag_of(flavour: Flavour, field: str) -> Optional[Flag]:
    """The row that renders `field`, if any."""
    return next((row for row in flag_rows(flavour.table) if row.field == field), None)
