"""Stand-in for the vLLM package: only the OpenAI server entry point exists (see images/standin/README.md)."""

__version__ = "0.0.0+standin"
