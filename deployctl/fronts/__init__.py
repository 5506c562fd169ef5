"""The fronts of a deployment: the AscendCloud scheduler, vllm-ascend's proxy and vLLM's router, one module each
behind one interface (base.FrontKind), as servers/ keeps one package per flavour."""

from deployctl.fronts.base import Backend, FrontKind
from deployctl.fronts.registry import FRONT_ROLES, FRONTS, front_for_role, front_kind

__all__ = ["Backend", "FRONT_ROLES", "FRONTS", "FrontKind", "front_for_role", "front_kind"]
