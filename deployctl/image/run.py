"""The impure edge of `image build`: probe hosts, pull bases, build, ship; the decisions live in plan.py."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Optional

from deployctl.errors import HostError, UsageError
from deployctl.facts.files import VERSION_INFO, parse_version_info
from deployctl.facts.npu_smi import parse_npu_smi_board
from deployctl.gather import on_hosts
from deployctl.image.inputs import LABEL_INPUTS, context_tar, inputs_digest
from deployctl.image.package import Package
from deployctl.image.plan import HostAction, HostImage, plan_image_build
from deployctl.core import Command
from deployctl.spec.model import Spec
from deployctl.transport import Transport

BUILD_TIMEOUT = 4 * 3600
_PROBE_SCRIPT = (
    'PATH="$PATH:/usr/local/Ascend/driver/tools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin"; '
    'echo "@@image"; docker image inspect --format "{{.Id}} {{json .Config.Labels}}" "$1" 2>/dev/null; '
    'echo "@@base"; docker image inspect --format "{{.Id}}" "$2" 2>/dev/null; '
    'if [ "$3" = ascend ]; then echo "@@board"; npu-smi info -t board -i 0 2>/dev/null; '
    f'echo "@@version"; cat {VERSION_INFO} 2>/dev/null; fi; echo "@@end"'
)


@dataclass(frozen=True)
class BuildInputs:
    """The package plus the recipe actually built (the vendor's ascend_vllm/ or a folder from images/)."""

    package: Package
    context: Mapping[str, bytes]

    def digest(self, base_id: str) -> str:
        return inputs_digest(base_id, self.package.llm_sha256, self.package.opp_sha256, self.context)


def build_inputs(package: Package, recipe_dir: Optional[str]) -> BuildInputs:
    """A recipe folder gets the two inner zips beside its Dockerfile; the vendor recipe is used as it is."""
    if not recipe_dir:
        return BuildInputs(package, dict(package.recipe))
    root = Path(recipe_dir)
    if not (root / "Dockerfile").is_file():
        raise UsageError(f"image.build.recipe: {recipe_dir} has no Dockerfile")
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    files[package.llm_name] = package.llm_zip
    files[package.opp_name] = package.opp_zip
    return BuildInputs(package, files)


def parse_probe(text: str) -> HostImage:
    """The probe's sections -> HostImage (pure)."""
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@") and line[2:] in ("image", "base", "board", "version", "end"):
            current = line[2:]
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    image_id, labels = None, {}
    image_line = sections.get("image", "").strip()
    if image_line:
        image_id, _, label_text = image_line.partition(" ")
        try:
            labels = json.loads(label_text) or {}
        except ValueError:
            labels = {}
    return HostImage(image_id=image_id or None, inputs=labels.get(LABEL_INPUTS),
                     base_id=sections.get("base", "").strip() or None,
                     driver=_driver(sections.get("board", ""), sections.get("version", "")))


def _driver(board: str, version: str) -> Optional[str]:
    for text, parse in ((board, lambda t: parse_npu_smi_board(t).software_version),
                        (version, lambda t: parse_version_info(t).version)):
        if text.strip():
            try:
                return parse(text)
            except Exception:  # a host without the tool answers nothing useful; the other source may
                continue
    return None


def probe(spec: Spec, transport: Transport) -> HostImage:
    command = Command(("sh", "-c", _PROBE_SCRIPT, "sh", spec.image.name or "", spec.image.build.base, spec.platform))
    result = transport.run(command, timeout=60)
    if "@@end" not in result.stdout:
        raise HostError(transport.name, "cannot read the host's images", stderr_tail=result.stderr,
                        address=getattr(transport, "address", None))
    return parse_probe(result.stdout)


def pull_bases(spec: Spec, transports: Mapping[str, Transport], hosts, ui) -> dict[str, str]:
    """Pull the base image where missing on building hosts; every failure named before any build starts."""
    base = spec.image.build.base

    def pull(transport: Transport):
        ui.info(f"{transport.name}: base image {base} missing: pulling")
        result = transport.run(Command(("docker", "pull", base)), timeout=BUILD_TIMEOUT)
        return result

    results = on_hosts({h: transports[h] for h in hosts}, pull)
    failed = [h for h, r in results.items() if not r.ok]
    if failed:
        raise HostError(", ".join(failed), f"base image {base} is missing and cannot be pulled",
                        stderr_tail=results[failed[0]].stderr,
                        hint="load it on the host (docker load -i <file>) or make the registry reachable")
    return {h: probe(spec, transports[h]).base_id or "" for h in hosts}


def build_on(spec: Spec, transport: Transport, inputs: str, context: bytes, log_dir: Path, ui) -> float:
    """`docker build -` with the context tar on stdin; the log is kept under build-logs/<host>.log."""
    started = time.monotonic()
    ui.info(f"{transport.name}: building {spec.image.name} ({len(context) // 1024} KiB context)")
    command = Command(("docker", "build", "--build-arg", f"BASE_IMAGE={spec.image.build.base}",
                       "--label", f"{LABEL_INPUTS}={inputs}", "--tag", spec.image.name, "-"), stdin=context)
    result = transport.run(command, timeout=BUILD_TIMEOUT)
    log = result.stdout + result.stderr
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{transport.name}.log").write_text(log)
    except OSError:
        pass  # a read-only checkout must not stop a build; the tail below still shows on failure
    if not result.ok:
        raise HostError(transport.name, f"docker build of {spec.image.name} failed (log: {log_dir / transport.name}.log)",
                        command=command.display(), exit_code=result.exit_code, stderr_tail=log)
    seconds = time.monotonic() - started
    ui.info(f"{transport.name}: built in {seconds:.1f} s")
    return seconds


def image_ids(spec: Spec, transports: Mapping[str, Transport], hosts) -> dict[str, Optional[str]]:
    return {h: f.image_id for h, f in on_hosts({h: transports[h] for h in hosts}, lambda t: probe(spec, t)).items()}


def execute(spec: Spec, transports: Mapping[str, Transport], inputs: BuildInputs,
            actions: tuple[HostAction, ...], ui) -> dict[str, float]:
    """Pull bases, build (in parallel), then ship; returns seconds per host."""
    from deployctl.image.ship import ship_image

    builds = [a for a in actions if a.action == "build"]
    missing_base = [a.host for a in builds if a.inputs is None]
    bases = pull_bases(spec, transports, missing_base, ui) if missing_base else {}
    builds = [replace(a, inputs=a.inputs or inputs.digest(bases[a.host])) for a in builds]
    context = context_tar(inputs.context)
    log_dir = spec.state_dir / "build-logs"
    seconds = on_hosts({a.host: transports[a.host] for a in builds},
                       lambda t: build_on(spec, t, next(a.inputs for a in builds if a.host == t.name),
                                          context, log_dir, ui))
    ships = [a for a in actions if a.action == "ship"]
    if ships:
        source = transports[ships[0].source]
        ui.info(f"shipping {spec.image.name} from {source.name} to {', '.join(a.host for a in ships)}")
        seconds.update(ship_image(spec.image.name, source, [transports[a.host] for a in ships]))
    return seconds


def plan_for(spec: Spec, transports: Mapping[str, Transport], inputs: BuildInputs):
    """Probe every host that runs an instance; returns (facts, actions)."""
    hosts = [h.name for h in spec.used_hosts]
    facts = on_hosts({h: transports[h] for h in hosts}, lambda t: probe(spec, t))
    actions = plan_image_build(hosts, spec.image.build.where, facts, inputs.digest)
    return facts, actions
