"""A host's facts as the planner reads them, built from plain data for planner tests."""

from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import HostFacts


def deployed(containers=(), image_id=None, file_hashes=None, health=None) -> HostFacts:
    """HostFacts holding only the deployed state (containers, the image's ID, deployctl's files' hashes)."""
    return HostFacts(deployed=DeployedState(tuple(containers), image_id, file_hashes or {}, health or {}))
