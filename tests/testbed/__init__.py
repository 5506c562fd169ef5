"""The local test bed: network-namespace hosts with sshd, dockerd and emulated NPUs, plus SeaweedFS S3.

Run `python -m tests.testbed up|down|status|demo`, or use the session fixture `testbed` (tests/conftest.py).
"""

from tests.testbed.bed import Testbed, TestbedError, cleanup_leftovers
from tests.testbed.hosts import TestHost
from tests.testbed.s3 import S3Endpoint

__all__ = ["Testbed", "TestbedError", "TestHost", "S3Endpoint", "cleanup_leftovers"]
