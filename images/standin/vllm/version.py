"""vLLM's version module (vllm/version.py): the vLLM version this image plays (standin/versions.py)."""

import os

from standin.versions import VersionError, emulated

try:
    __version__ = emulated(os.environ).vllm
except VersionError:
    __version__ = "0.0.0+standin"
__version_tuple__ = tuple(int(p) if p.isdigit() else p for p in __version__.replace("+", ".").split("."))
