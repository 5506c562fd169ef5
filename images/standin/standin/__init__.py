"""The stand-in inference server: vLLM's OpenAI API with deterministic text and configurable timing."""
