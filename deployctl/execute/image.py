"""Run the image actions: a build on one host (pulling its base first where missing), a ship to many."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.facts.image_state import LABEL_INPUTS
from deployctl.plan.actions import Build, Ship
from deployctl.transport import Transport

BUILD_TIMEOUT = 4 * 3600


def run_build(transport: Transport, build: Build) -> float:
    """`docker build -` with the context tar on stdin; the log is kept at build.log_path. Returns seconds."""
    started = time.monotonic()
    inputs = build.inputs or build.recipe.digest(_pull_base(transport, build.base))
    command = Command(("docker", "build", "--build-arg", f"BASE_IMAGE={build.base}",
                       "--label", f"{LABEL_INPUTS}={inputs}", "--tag", build.image, "-"), stdin=build.context)
    result = transport.run(command, timeout=BUILD_TIMEOUT)
    log = result.stdout + result.stderr
    try:
        Path(build.log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(build.log_path).write_text(log)
    except OSError:
        pass  # a read-only checkout must not stop a build; the tail below still shows on failure
    if not result.ok:
        raise HostError(transport.name, f"docker build of {build.image} failed (log: {build.log_path})",
                        address=transport.address, command=command.display(), exit_code=result.exit_code,
                        stderr_tail=log)
    return time.monotonic() - started


def _pull_base(transport: Transport, base: str) -> str:
    """Pull the missing base image; its ID goes into the inputs label."""
    pulled = transport.run(Command(("docker", "pull", base)), timeout=BUILD_TIMEOUT)
    if not pulled.ok:
        raise HostError(transport.name, f"base image {base} is missing and cannot be pulled", address=transport.address,
                        stderr_tail=pulled.stderr,
                        hint="load it on the host (docker load -i <file>) or make the registry reachable")
    found = transport.run(Command(("docker", "image", "inspect", "--format", "{{.Id}}", base)), timeout=60)
    return found.stdout.strip()


def run_ship(transport: Transport, ship: Ship, transports: Mapping[str, Transport]) -> dict[str, float]:
    """Stream the image from the step's host into every target at once; seconds per target."""
    from deployctl.image.ship import ship_image

    return ship_image(ship.image, transport, [transports[name] for name in ship.targets])
