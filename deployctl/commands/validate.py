"""`deployctl validate SPEC`: load + every rule, no network; print the derived layout or every problem."""

from __future__ import annotations

from deployctl.errors import ExitStatus, Problem, SpecError


def run(args, ui) -> int:
    from deployctl.spec.load import STDIN, check_spec_file, check_spec_stream
    from deployctl.ui.validate import render_summary, render_warnings

    if args.spec == STDIN:  # `generate | deployctl validate -`: problems at <stdin>:line:col
        import sys

        stdin = _Kept(sys.stdin.buffer) if sys.stdin is not None else None  # None: started with stdin closed
        spec, errors, warnings = check_spec_stream(stdin)
        text = stdin.data.decode("utf-8", "replace") if stdin is not None else None
    else:
        spec, errors, warnings = check_spec_file(args.spec)
        text = None
    if spec is not None:
        warnings = sorted(warnings + local_file_warnings(spec, args.spec, text), key=lambda p: (p.line, p.column))
    if ui.json:
        ui.emit_json(validation_document(spec, errors, warnings))
        return int(ExitStatus.SPEC if errors else ExitStatus.OK)
    render_warnings(ui, warnings)
    if errors:
        raise SpecError(errors)  # its warnings were just shown
    render_summary(ui, spec)
    return int(ExitStatus.OK)


class _Kept:
    """A stream that keeps what was read from it: the text the problems of a spec on stdin are located in."""

    def __init__(self, stream) -> None:
        self.stream, self.data = stream, b""

    def read(self, size: int) -> bytes:
        self.data = self.stream.read(size)
        return self.data


def validation_document(spec, errors: list[Problem], warnings: list[Problem]) -> dict:
    """The contract's `validate --output json` document."""
    from deployctl.servers import flavour_of

    flavour = flavour_of(spec) if spec is not None else None
    return {
        "valid": not errors,
        "errors": [_located(p) for p in errors],
        "warnings": [_located(p) for p in warnings],
        "summary": {"instances": [] if spec is None else [
            {"name": i.name, "role": i.role, "host": i.host, "devices": list(i.devices), "port": i.port,
             "tp": i.tp if i.devices else None,  # the scheduler holds no devices
             **flavour.summary_fields(i)}  # vllm-ascend's dp_ranks
            for i in spec.instances
        ], **({"server_profile": profile_document(spec.profile)} if spec is not None and spec.profile else {})},
    }


def profile_document(choice) -> dict:
    """Which server profile a vllm-ascend spec renders with, and why (`source`: server_version, probed, image
    tag or default)."""
    return {"line": choice.profile.line, "releases": choice.profile.releases, "vllm": choice.vllm,
            "vllm_range": choice.profile.vllm_range,
            "source": choice.source, "version": choice.shown or None, "warning": choice.warning}


def local_file_warnings(spec, spec_path, text: str | None = None) -> list[Problem]:
    """A local image.build.packages that is missing on this (the control) machine: `image build`/`up` will refuse.

    A warning, not an error: the package is often fetched after the spec is written."""
    from deployctl.image.fetch import missing_local_package

    missing = missing_local_package(spec)
    if missing is None:
        return []
    from deployctl.spec.load import STDIN, STDIN_NAME

    path = ("image", "build", "packages")
    line, column = _locate(spec_path, path, text)
    return [Problem(path, f"{missing}: no such file on this machine (`image build` and `up` need it)",
                    hint="put the AscendCloud-<ver>-<timestamp>.zip there, or point packages at it (a relative "
                         + ("path is relative to the current directory for a spec on stdin)" if spec_path == STDIN
                            else "path is relative to the spec file)"),
                    file=STDIN_NAME if spec_path == STDIN else str(spec_path), line=line, column=column,
                    severity="warning")]


def _locate(spec_path, path: tuple, text: str | None = None) -> tuple[int, int]:
    """Where `path` is written: in `text` (the spec read from stdin), else in the file read again."""
    from pathlib import Path

    from deployctl.spec.locate import SyntaxProblem, compose_document

    try:
        text = Path(spec_path).read_text(encoding="utf-8") if text is None else text
        return compose_document(text, {}, str(spec_path)).locate(path)
    except (OSError, UnicodeDecodeError, SyntaxProblem):  # loaded a moment ago; a position is a nicety only
        return 0, 0


def _located(problem: Problem) -> dict:
    return {key: problem.to_json()[key] for key in ("file", "line", "column", "path", "message")} | (
        {"hint": problem.hint} if problem.hint else {})


