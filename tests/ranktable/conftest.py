"""What the ranktable tests that use this machine's own address need: an address other than loopback."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def bound_address() -> str:
    """This machine's address as deployctl picks it for `address: local` (gather.server_ip). A machine whose only
    address is loopback (a container or network namespace with only `lo`) has none, and says why: skipped."""
    from deployctl.errors import DeployctlError
    from deployctl.gather import server_ip
    from deployctl.spec.model import Host

    if shutil.which("ip") is None:
        pytest.skip("needs the ip tool (iproute2)")
    try:
        return server_ip(Host("node1", "local"))
    except DeployctlError as error:
        pytest.skip(f"this machine has no address but loopback: {error.message}")
