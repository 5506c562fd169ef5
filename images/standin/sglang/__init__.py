"""The stand-in's `sglang` package: `python -m sglang.launch_server` (standin/sglang_server.py)."""
