"""load_spec(path) -> Spec: compose (with positions) -> schema (all errors) -> rules -> frozen dataclasses.

Every problem found is reported at once, located at `file:line:col`; nothing here touches the network.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Optional

from deployctl.errors import Problem, SpecError
from deployctl.spec.model import Spec


def check_spec_text(
    text: str,
    filename: str = "spec.yaml",
    base_dir: Optional[Path] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> tuple[Optional[Spec], list[Problem], list[Problem]]:
    """(spec or None, errors, warnings); the spec is built only when there are no errors."""
    from deployctl.spec.build import build_spec
    from deployctl.spec.locate import SyntaxProblem, compose_document
    from deployctl.spec.rules import check_rules
    from deployctl.spec.schema import check_schema

    try:
        document = compose_document(text, os.environ if environ is None else environ, filename)
    except SyntaxProblem as syntax:
        return None, [syntax.problem], []
    if document.data is None:
        return None, list(document.problems), []
    schema_problems, failed = check_schema(document, filename)
    # A value already reported (an unset ${VAR}, a duplicate key) is not judged again by the schema or rules.
    reported = {problem.path for problem in document.problems}
    schema_problems = [p for p in schema_problems if not any(p.path[: len(r)] == r for r in reported)]
    failed |= reported
    located = [
        replace(problem, file=filename, line=line, column=column)
        for problem in check_rules(document.data, failed)
        for line, column in [document.locate(problem.path)]
    ]
    problems = document.problems + schema_problems + located
    errors = _in_order([p for p in problems if p.severity != "warning"])
    warnings = _in_order([p for p in problems if p.severity == "warning"])
    if errors:
        return None, errors, warnings
    source = (base_dir / filename) if base_dir is not None else None
    return build_spec(document, source=source, base_dir=base_dir), [], warnings


def load_spec_text(
    text: str,
    filename: str = "spec.yaml",
    base_dir: Optional[Path] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Spec:
    """Like check_spec_text, but raise SpecError(errors, warnings) when anything is wrong."""
    spec, errors, warnings = check_spec_text(text, filename, base_dir, environ)
    if errors:
        raise SpecError(errors, warnings)
    return spec


def check_spec_file(path: str | Path, environ: Optional[Mapping[str, str]] = None):
    """check_spec_text on a file; an unreadable file is one error (no such file, a directory, ...)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return None, [Problem((), f"cannot read the spec file: {reason}", file=str(path))], []
    spec, errors, warnings = check_spec_text(text, str(path), path.resolve().parent, environ)
    if spec is not None:
        spec = replace(spec, source=path.resolve())
    return spec, errors, warnings


def load_spec(path: str | Path, environ: Optional[Mapping[str, str]] = None) -> Spec:
    """Read, validate and build a Spec; raise SpecError naming file, line and path of every problem."""
    spec, errors, warnings = check_spec_file(path, environ)
    if errors:
        raise SpecError(errors, warnings)
    return spec


def _in_order(problems: list[Problem]) -> list[Problem]:
    """By position in the file, so the list reads top to bottom like a compiler's."""
    return sorted(problems, key=lambda p: (p.line, p.column))
