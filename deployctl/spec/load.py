"""load_spec(path) -> Spec: compose (with positions) -> schema (all errors) -> rules -> frozen dataclasses.

Every problem found is reported at once, located at `file:line:col`; nothing here touches the network.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Mapping, Optional

from deployctl.errors import Problem, SpecError, UsageError
from deployctl.spec.model import Spec

MAX_REPORTED = 100
STDIN = "-"  # SPEC `-`: the spec on standard input (validate)
STDIN_NAME = "<stdin>"  # how its problems name it: `<stdin>:3:7: ...`


def check_spec_text(
    text: str,
    filename: str = "spec.yaml",
    base_dir: Optional[Path] = None,
    environ: Optional[Mapping[str, str]] = None,
    unresolved_env: str = "error",
) -> tuple[Optional[Spec], list[Problem], list[Problem]]:
    """(spec or None, errors, warnings); the spec is built only when there are no errors.

    `unresolved_env="allow"` forgives an unset ${VAR} in an `env:` value (listed in Spec.unresolved_env)."""
    from deployctl.spec import references
    from deployctl.spec.build import build_spec
    from deployctl.spec.locate import SyntaxProblem, compose_document
    from deployctl.spec.rules import check_rules
    from deployctl.spec.schema import check_schema

    environ = os.environ if environ is None else environ
    try:
        document = compose_document(text, environ, filename)
    except SyntaxProblem as syntax:
        return None, [syntax.problem], []
    if document.data is None:
        return None, list(document.problems), []
    forgiven = _forgiven(document, unresolved_env)
    document.problems = [p for p in document.problems if not any(p is f for f in forgiven)]
    schema_problems, failed = check_schema(document, filename)
    # A ${VAR} where none may stand is that key's one error (whether or not the variable is set).
    refused = [replace(p, file=filename, line=line, column=column)
               for p in references.refused(document.references) for line, column in [document.locate(p.path)]]
    refused_paths = {p.path for p in refused}
    document_problems = [p for p in document.problems if p.path not in refused_paths] + refused
    # A value already reported (an unset ${VAR}, a duplicate key) is not judged again by the schema or rules.
    reported = {problem.path for problem in document_problems}
    schema_problems = [p for p in schema_problems
                       if not any(p.path[:length] in reported for length in range(len(p.path) + 1))]
    failed |= reported
    located = [
        replace(problem, file=filename, line=line, column=column)
        for problem in check_rules(document.data, failed, document.references, document.locate,
                                   local_model_shape(document.data))
        for line, column in [document.locate(problem.path)]
    ]
    problems = references.scrub(document_problems + schema_problems + located, document.references,
                                document.data, environ)
    errors = _at_most(_in_order([p for p in problems if p.severity != "warning"]))
    warnings = _at_most(_in_order([p for p in problems if p.severity == "warning"]))
    if errors:
        return None, errors, warnings
    source = (base_dir / filename) if base_dir is not None else None
    spec = build_spec(document, source=source, base_dir=base_dir)
    if forgiven:
        spec = replace(spec, unresolved_env=tuple(dict.fromkeys(p.path[-1] for p in forgiven)))
    return spec, [], warnings


def local_model_shape(data):
    """The weights' config.json where weights.source is a directory on this machine (an s3:// or obs:// source is
    not contacted): None where there is none or it cannot be read."""
    from deployctl.facts.model_config import CONFIG_NAME, MAX_BYTES, parse_model_config

    weights = data.get("weights") if isinstance(data, dict) else None
    source = weights.get("source") if isinstance(weights, dict) else None
    if not isinstance(source, str) or not os.path.isabs(source):
        return None
    try:
        with open(os.path.join(source, CONFIG_NAME), "rb") as config:
            blob = config.read(MAX_BYTES + 1)
    except (OSError, ValueError):  # none there, a file where a directory should be, no permission
        return None
    return parse_model_config(blob.decode("utf-8", "replace")) if len(blob) <= MAX_BYTES else None


def _forgiven(document, unresolved_env: str) -> list[Problem]:
    """The unset-variable problems a command may do without: only in env values, only when it asks."""
    from deployctl.spec.references import kind

    if unresolved_env not in ("error", "allow"):
        raise ValueError(f"unresolved_env={unresolved_env!r}")
    if unresolved_env == "error":
        return []
    return [p for p in document.unset if kind(p.path) == "secret"]


def load_spec_text(text: str, *args, **options) -> Spec:
    """Like check_spec_text (same arguments), but raise SpecError(errors, warnings) when anything is wrong."""
    spec, errors, warnings = check_spec_text(text, *args, **options)
    if errors:
        raise SpecError(errors, warnings)
    return spec


def check_spec_stream(stream: Optional[BinaryIO], environ: Optional[Mapping[str, str]] = None,
                      unresolved_env: str = "error"):
    """check_spec_text on a spec piped in (SPEC `-`): named `<stdin>` in every problem, its relative paths relative
    to the current directory (as docker compose reads `-f -`); the same size and UTF-8 limits as a file.
    `stream` None: the process has no stdin at all (started with it closed)."""
    from deployctl.spec.yaml12 import MAX_BYTES

    if stream is None:
        return None, [Problem((), "stdin is closed: there is no spec to read", file=STDIN_NAME,
                              hint="pipe the spec in (`generate | deployctl validate -`) or name its file")], []
    try:
        text = _decoded(stream.read(MAX_BYTES + 1), "the spec on stdin")
    except OSError as error:
        return None, [Problem((), f"cannot read the spec from stdin: {error.strerror or error}", file=STDIN_NAME)], []
    except _Unreadable as unreadable:
        return None, [replace(unreadable.problem, file=STDIN_NAME)], []
    spec, errors, warnings = check_spec_text(text, STDIN_NAME, Path.cwd(), environ, unresolved_env)
    return (replace(spec, source=None) if spec is not None else None), errors, warnings


def check_spec_file(path: str | Path, environ: Optional[Mapping[str, str]] = None, unresolved_env: str = "error"):
    """check_spec_text on a file; an unreadable file is one error (no such file, a directory, ...)."""
    if str(path) == STDIN:  # only `validate` reads stdin (check_spec_stream); `./-` names a file called -
        raise UsageError("SPEC '-' (the spec on stdin) is read by `deployctl validate` only",
                         hint="write the spec to a file and give its path")
    path = Path(path)
    try:
        text = _read_text(path)
    except OSError as error:
        return None, [Problem((), f"cannot read the spec file: {error.strerror or error}", file=str(path))], []
    except _Unreadable as unreadable:
        return None, [replace(unreadable.problem, file=str(path))], []
    spec, errors, warnings = check_spec_text(text, str(path), path.resolve().parent, environ, unresolved_env)
    if spec is not None:
        spec = replace(spec, source=path.resolve())
    return spec, errors, warnings


class _Unreadable(Exception):
    """The file is not a spec to parse at all (too large, not UTF-8); carries the one Problem."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _read_text(path: Path) -> str:
    """The file as text, reading at most one byte past the size limit (`/dev/zero` ends at once)."""
    from deployctl.spec.yaml12 import MAX_BYTES

    with open(path, "rb") as stream:
        return _decoded(stream.read(MAX_BYTES + 1), "the spec file")


def _decoded(data: bytes, what: str) -> str:
    """The spec's bytes (at most one past the limit) as text; _Unreadable when too large or not UTF-8."""
    from deployctl.spec.yaml12 import MAX_BYTES

    if len(data) > MAX_BYTES:
        raise _Unreadable(Problem((), f"{what} is larger than {MAX_BYTES // (1024 * 1024)} MiB; "
                                      "a spec is a few KiB of YAML", line=1, column=1))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise _Unreadable(Problem((), f"{what} is not UTF-8 text (byte 0x{data[error.start]:02x})",
                                  line=line, column=column))


def load_spec(path: str | Path, environ: Optional[Mapping[str, str]] = None, *,
              unresolved_env: str = "error") -> Spec:
    """Read, validate and build a Spec; raise SpecError naming file, line and path of every problem.

    Commands that never send `env:` to a host (logs, status, down) pass unresolved_env="allow"."""
    spec, errors, warnings = check_spec_file(path, environ, unresolved_env)
    if errors:
        raise SpecError(errors, warnings)
    return spec


def _at_most(problems: list[Problem]) -> list[Problem]:
    """The first MAX_REPORTED problems and a note saying there are more: a compiler stops, so do we."""
    if len(problems) <= MAX_REPORTED:
        return problems
    last = problems[MAX_REPORTED]
    more = replace(last, path=(), hint=None, message=f"too many problems: only the first {MAX_REPORTED} are shown")
    return problems[:MAX_REPORTED] + [more]


def _in_order(problems: list[Problem]) -> list[Problem]:
    """By position in the file, so the list reads top to bottom like a compiler's."""
    return sorted(problems, key=lambda p: (p.line, p.column))
