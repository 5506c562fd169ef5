"""Stand-in for the vllm_ascend package: only its version module (see images/standin/README.md)."""
