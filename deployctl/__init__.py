"""deployctl: deploy vLLM inference services onto Ascend NPU and Docker hosts from one spec."""

__version__ = "0.1.0"
