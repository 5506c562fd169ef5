"""The gather -> plan half that `up`, `plan`, `image build` and `weights sync` share: the hosts' facts in one
round trip each, the control machine's inputs beside them (the package, the weights listing), one plan."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from deployctl.facts.model import HostFacts
from deployctl.plan.answers import DEFAULT_ANSWER_TOKENS
from deployctl.plan.model import Plan
from deployctl.plan.up import UpInputs, plan_up
from deployctl.plan.weights_stage import Listing
from deployctl.servers import flavour_of
from deployctl.spec.model import Spec
from deployctl.transport import Transport

ALL_STAGES = frozenset({"image", "weights", "ranktables", "containers"})


@dataclass
class Prepared:
    """A plan, the facts it was made from, and what executing it needs from the control machine."""

    plan: Plan
    facts: dict[str, HostFacts]
    inputs: UpInputs
    presign: Optional[Callable] = None  # (bucket, keys) -> URLs, for the weights fetches


def prepare(spec: Spec, transports: Mapping[str, Transport], *, skip: frozenset[str] = frozenset(),
            stages: frozenset[str] = ALL_STAGES, on_wait: Optional[Callable[[str], None]] = None,
            allow_unlisted: bool = True, build_inputs=None, answer_tokens: int = DEFAULT_ANSWER_TOKENS,
            drain_timeout: Optional[float] = None, shutdown_timeout: Optional[int] = None) -> Prepared:
    """Gather every host (one round trip each) while the control machine reads the package and lists the
    weights source; render ranktables; plan. Nothing changes anywhere."""
    from deployctl.gather import check_answers, gather_state

    building = "image" in stages and "image" not in skip and spec.image.build is not None
    syncing = ("weights" in stages and "weights" not in skip and bool(spec.weights.dest)
               and bool(spec.weights.source))
    with ThreadPoolExecutor(1) as background:
        pending = background.submit(gather_state, spec, transports, skip=skip, stages=stages, check=False)
        build = (build_inputs or load_build_inputs(spec)) if building else None
        listing, client = list_weights(spec, on_wait, allow_unlisted) if syncing else (None, None)
        facts = pending.result()
    ranktables = render_ranktables(spec, facts) if "containers" in stages else None  # its errors say most
    check_answers(spec, transports, facts, skip=skip, stages=stages)
    from deployctl.execute.weights import fetcher_program

    rollout = {key: value for key, value in (("drain_timeout", drain_timeout), ("shutdown_timeout", shutdown_timeout))
               if value is not None}
    inputs = UpInputs(ranktables, build, listing, fetcher_program()[1] if syncing else "", answer_tokens, **rollout)
    plan = plan_up(spec, facts, inputs, skip=skip, stages=stages)
    return Prepared(plan, facts, inputs, presign=_presigner(client) if client is not None else None)


def load_build_inputs(spec: Spec):
    """The package fetched and checked on the control machine, and the recipe that is built (exit 2 on any
    problem, before a host is touched)."""
    from deployctl.image.fetch import package_bytes
    from deployctl.image.package import read_package
    from deployctl.image.recipe import build_inputs

    build = spec.image.build
    package = read_package(package_bytes(spec, build.packages), build.packages)
    return build_inputs(package, build.recipe)


def list_weights(spec: Spec, on_wait, allow_unlisted: bool):
    """(Listing, S3 client or None): the source listed once, here; without credentials and `allow_unlisted`, a
    Listing that says so (the hosts' manifests may still vouch for the weights)."""
    from deployctl.weights.source import parse_source
    from deployctl.weights.store import MissingCredentials, list_local, list_source, s3_client

    source = parse_source(spec.weights.source)
    if not source.remote:
        return Listing(source, list_local(source), _now()), None
    client = s3_client(spec.weights)
    notice = None
    if on_wait is not None:  # when the endpoint is slow to answer, say which one is being waited for
        notice = threading.Timer(1.0, on_wait, (f"weights: contacting S3 endpoint {client.meta.endpoint_url} "
                                                f"(listing {source.text})…",))
        notice.daemon = True
        notice.start()
    try:
        return Listing(source, list_source(client, source, spec.weights.endpoint), _now()), client
    except MissingCredentials as error:
        if not allow_unlisted:
            raise
        return Listing(source, unlisted=error), None
    finally:
        if notice is not None:
            notice.cancel()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _presigner(client):
    from deployctl.weights.store import presign

    return lambda bucket, keys: {key: presign(client, bucket, key) for key in keys}


def ranktables_from_hosts(spec: Spec, transports: Mapping[str, Transport]):
    """`ranktable gen SPEC`: the device IPs and addresses alone (no Docker needed), then render_ranktables."""
    from deployctl.gather import gather_state

    return render_ranktables(spec, gather_state(spec, transports, stages=frozenset({"ranktables"})))


def render_ranktables(spec: Spec, facts: Mapping[str, HostFacts]):
    """For a disaggregated spec: every device IP (from the facts), merged global + locals, kept beside the spec."""
    if not flavour_of(spec).uses_ranktables(spec):  # only AscendCloud's P/D reads them
        return None
    from deployctl.gather import server_ip
    from deployctl.plan.containers import RanktableFiles
    from deployctl.plan.probes import device_ip_of, host_devices, local_server_ip
    from deployctl.ranktable.build import build_global_for_spec

    device_ips = {h.name: {d: device_ip_of(facts[h.name], h.name, d) for d in host_devices(spec, h.name)}
                  for h in spec.used_hosts if host_devices(spec, h.name)}
    server_ips = {h.name: local_server_ip(facts[h.name], h.name) if h.is_local else server_ip(h)
                  for h in spec.used_hosts}
    built = build_global_for_spec(spec, device_ips, server_ips)
    contents = {built.global_name: built.global_json.encode()}
    for files in built.local_files.values():
        contents.update({name: text.encode() for name, text in files.items()})
    save_ranktables_locally(spec, contents)
    return RanktableFiles(built.global_name, dict(built.instance_files), contents)


def save_ranktables_locally(spec: Spec, contents: Mapping[str, bytes]) -> None:
    """Keep the rendered files beside the spec (`.deployctl/<deployment>/ranktables/`) for people to read."""
    directory = spec.state_dir / "ranktables"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in contents.items():
            (directory / name).write_bytes(data)
    except OSError:
        pass  # a read-only checkout must not stop a deploy: the hosts get the files regardless
