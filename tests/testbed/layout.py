"""Fixed names, addresses and paths of the test bed (other code and tests rely on them)."""

from __future__ import annotations

import os
from pathlib import Path

# Which bed: "" the first; "2" a second one beside it (the second xdist worker's, tests/conftest.py), with its own
# namespace and cgroup names and state dir, and the first's bridge, addresses and ports inside a network namespace
# of its own (tests/testbed/netns.py), so no test needs to know which bed it runs on.
BED_ID = os.environ.get("DEPLOYCTL_TESTBED_ID", "")
BRIDGE = "dctlbr0"
BRIDGE_ADDRESS = "10.200.0.1"
PREFIX_LEN = 24
NETNS_PREFIX = f"dctl{BED_ID}-"
CGROUP_PREFIX = f"dctl{BED_ID}-"
S3_PORT = 8333
S3_BUCKET = "models"
S3_ENDPOINT = f"http://{BRIDGE_ADDRESS}:{S3_PORT}"
BASE_IMAGE = "deployctl/testbed-base:1"
STANDIN_REPO = "deployctl/standin-vllm"
STANDIN_IMAGE = f"{STANDIN_REPO}:latest"  # the newest vllm-ascend release the stand-in plays


def standin_image(version: str) -> str:
    """The stand-in image playing one vllm-ascend release, e.g. `deployctl/standin-vllm:v0.11.0` (tests/testbed/
    images.py builds one per release in images/standin/standin/versions.py)."""
    return f"{STANDIN_REPO}:{version}"


HASH_LABEL = "deployctl.testbed.hash"
DEFAULT_HOSTS = 4
REPO_ROOT = Path(__file__).resolve().parents[2]


def state_dir() -> Path:
    return Path(os.environ.get("DEPLOYCTL_TESTBED_DIR", f"/tmp/deployctl-testbed{'-' + BED_ID if BED_ID else ''}"))


def setup_lock() -> Path:
    """Held while a bed sets up: beds side by side share the engine cache, the packages and the downloads."""
    return Path("/tmp/deployctl-testbed.setup.lock")


def cache_dir() -> Path:
    """Kept across beds (safe to delete): engine image stores keyed by content, so a new bed does not rebuild."""
    return Path(os.environ.get("DEPLOYCTL_TESTBED_CACHE", "/var/cache/deployctl-testbed"))


def host_name(index: int) -> str:
    return f"tb{index}"


def host_address(index: int) -> str:
    return f"10.200.0.{10 + index}"


def nic_name(index: int) -> str:
    """The host's network interface, named as a server's PCI NIC is (enp61s0f0, ...): distinct per host, so
    vllm-ascend's *_SOCKET_IFNAME prove to be read from each host, never typed or guessed."""
    return f"enp{60 + index}s0f0"


def netns_name(index: int) -> str:
    return f"{NETNS_PREFIX}tb{index}"


def veth_name(index: int) -> str:
    return f"dctlv{index}"  # root-namespace end; interface names are at most 15 characters


def host_dir(index: int) -> Path:
    return state_dir() / "hosts" / host_name(index)


def ssh_dir() -> Path:
    return state_dir() / "ssh"


def device_ips(index: int, cards: int) -> list:
    """RoCE addresses of host i's NPUs: distinct per host, never documentation ranges."""
    return [f"10.201.{index}.{10 + n}" for n in range(cards)]
