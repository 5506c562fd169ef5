"""What runs on a host for `up`, `plan`, `status` and `down`: every container (any state, with labels and
devices), the spec image's ID, the hashes of the files deployctl wrote, the HTTP status of each instance port."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from deployctl.facts.docker import parse_docker_inspect
from deployctl.facts.model import ContainerDevices
from deployctl.facts.probe import Probe

SEPARATOR = "@@deployctl@@"
DAEMON_DOWN = 97  # the script's exit status when `docker ps` cannot reach the daemon

# A constant script; every value reaches it as a positional argument: image, directories..., --, PORT/PATH...
DEPLOYED_SCRIPT = (
    f'ids=$(docker ps --all --quiet --no-trunc) || exit {DAEMON_DOWN}; '
    'if [ -n "$ids" ]; then docker inspect $ids 2>/dev/null || true; else echo "[]"; fi; '
    f'echo {SEPARATOR}; '
    'if [ -n "$1" ]; then docker image inspect --format "{{.Id}}" "$1" 2>/dev/null; fi; '
    f'echo {SEPARATOR}; '
    'shift; while [ "$1" != "--" ]; do [ -d "$1" ] && sha256sum -- "$1"/* 2>/dev/null; shift; done; shift; '
    f'echo {SEPARATOR}; '
    'for t in "$@"; do p=${t%%/*}; printf "%s %s\\n" "$p" "$(curl --silent --max-time 2 --output /dev/null '
    '--write-out "%{http_code}" "http://127.0.0.1:$p/${t#*/}")"; done; true'
)


@dataclass(frozen=True)
class DeployedState:
    """What `up` needs to know about one host before planning."""

    containers: tuple[ContainerDevices, ...] = ()
    image_id: Optional[str] = None  # ID of spec.image.name on the host; None when missing
    file_hashes: Mapping[str, str] = field(default_factory=dict)  # remote path -> sha256 of its content
    health: Mapping[int, bool] = field(default_factory=dict)  # port -> its health path answered 200

    def container(self, name: str) -> Optional[ContainerDevices]:
        for container in self.containers:
            if container.name == name:
                return container
        return None


def deployed_probe(image: str, directories: tuple[str, ...], health: tuple[tuple[int, str], ...]) -> Probe:
    """`health`: (port, health path) of each API server on the host; its answer is each port's HTTP status."""
    argv = ("sh", "-c", DEPLOYED_SCRIPT, "sh", image, *directories, "--", *(f"{p}{path}" for p, path in health))
    return Probe(argv, parse_deployed, "deployed", tool_name="docker")


def parse_deployed(text: str) -> DeployedState:
    inspect_text, image_text, hashes_text, health_text = (text.split(SEPARATOR + "\n") + ["", "", ""])[:4]
    hashes = {}
    for line in hashes_text.splitlines():
        digest, _, path = line.partition("  ")
        if path:
            hashes[path] = digest
    return DeployedState(containers=parse_docker_inspect(inspect_text), image_id=image_text.strip() or None,
                         file_hashes=hashes, health=parse_health_codes(health_text))


def parse_health_codes(text: str) -> dict[int, bool]:
    """`<port> <http status>` lines -> port: answered 200."""
    health = {}
    for line in text.splitlines():
        port, _, code = line.partition(" ")
        if port.isdigit():
            health[int(port)] = code.strip() == "200"
    return health


# A constant script: which of the paths given as arguments exist (file or folder), one per line.
EXISTING_SCRIPT = 'for p in "$@"; do if [ -e "$p" ]; then printf "%s\\n" "$p"; fi; done'


def existing_paths_probe(paths: tuple[str, ...]) -> Probe:
    """Which of `paths` exist on the host (`down` removes only what is there, so a re-run plans nothing)."""
    return Probe(("sh", "-c", EXISTING_SCRIPT, "sh", *paths), parse_existing_paths, "deployment_files")


def parse_existing_paths(text: str) -> tuple[str, ...]:
    return tuple(line for line in text.splitlines() if line)
