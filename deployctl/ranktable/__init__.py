"""Ranktables: the pure core (model, build, merge, check). No I/O here; commands/ranktable.py does that."""

from deployctl.ranktable.build import (
    HostRanktables,
    SpecRanktables,
    build_global_for_spec,
    build_host_ranktables,
)
from deployctl.ranktable.check import (
    CheckResult,
    check_local_against_global,
    check_local_against_globals,
    check_ranktable,
    detect_kind,
)
from deployctl.ranktable.merge import merge
from deployctl.ranktable.model import (
    MERGED_FILE_NAME,
    Device,
    Group,
    LocalRanktable,
    Ranktable,
    Server,
    global_file_name,
    host_file_name,
    local_file_name,
    ranktable_from_document,
    to_json,
)
from deployctl.ranktable.rules import Violation

__all__ = [
    "MERGED_FILE_NAME", "CheckResult", "Device", "Group", "HostRanktables", "LocalRanktable", "Ranktable",
    "Server", "SpecRanktables", "Violation", "build_global_for_spec", "build_host_ranktables",
    "check_local_against_global", "check_local_against_globals", "check_ranktable", "detect_kind", "global_file_name", "host_file_name",
    "local_file_name", "merge", "ranktable_from_document", "to_json",
]
