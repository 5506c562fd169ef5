"""vllm-ascend's version module, which setuptools-scm writes at install (setup.py: get_version(write_to=
"vllm_ascend/_version.py")): the vllm-ascend release this image plays (standin/versions.py)."""

import os

from standin.versions import VersionError, emulated

try:
    __version__ = version = emulated(os.environ).release.name.lstrip("v")
except VersionError:
    __version__ = version = "0.0.0+standin"
