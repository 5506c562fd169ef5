"""All terminal output goes through here; rich is imported lazily, on first use."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any


@dataclass
class UI:
    """Output settings from the common flags: --output, --verbose, --quiet, --no-color."""

    output: str = "table"
    verbose: bool = False
    quiet: bool = False
    color: bool = True

    @property
    def json(self) -> bool:
        return self.output == "json"

    def console(self, stderr: bool = False):
        """A rich Console on stdout (or stderr); created lazily so --help stays fast."""
        from rich.console import Console

        no_color = not self.color or "NO_COLOR" in os.environ
        return Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=True)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Human output to stdout (suppressed in json mode, where stdout holds one document)."""
        if self.json:
            self.console(stderr=True).print(*objects, **kwargs) if self.verbose else None
            return
        self.console().print(*objects, **kwargs)

    def info(self, message: str) -> None:
        """Progress and notes: stderr, so stdout stays clean for scripts."""
        if not self.quiet:
            self.console(stderr=True).print(message)

    def emit_json(self, document: Any) -> None:
        """The one JSON document a read command prints with --output json."""
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()


def render_error(ui: UI, error: Exception) -> None:
    """Render an expected failure (DeployctlError) once, without a traceback."""
    from rich.markup import escape

    from deployctl.errors import DeployctlError

    console = ui.console(stderr=True)
    if isinstance(error, DeployctlError):
        lines = error.lines()
        console.print(f"[bold red]error:[/] {escape(lines[0])}")
        for line in lines[1:]:
            console.print(escape(line))
        if error.hint:
            console.print(f"  [cyan]hint:[/] {escape(error.hint)}")
    else:
        console.print(f"[bold red]error:[/] {escape(str(error))}")
