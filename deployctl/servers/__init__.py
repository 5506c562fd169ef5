"""Server flavours as one seam: each flavour (AscendCloud vLLM, vllm-ascend, vLLM on GPU, Triton's vLLM backend)
is one module behind `base.Flavour`, found by (platform, server) in `registry` (see docs/architecture.md)."""

from deployctl.servers.registry import FLAVOURS, flavour_for, flavour_named, flavour_of

__all__ = ["FLAVOURS", "flavour_for", "flavour_named", "flavour_of"]
