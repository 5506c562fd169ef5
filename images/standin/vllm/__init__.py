"""Stand-in for the vLLM package: only the OpenAI server entry point exists (see images/standin/README.md)."""

from vllm.version import __version__  # noqa: F401  (as vllm/__init__.py re-exports it)
