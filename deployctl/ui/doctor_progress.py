"""The live view on stderr while hosts answer: a rich Live table at a terminal, else one line per host."""

from __future__ import annotations

import threading

from deployctl.facts.model import HostFacts


class HostProgress:
    """Tracks each host's state (waiting -> connected -> answered/unreachable); safe from worker threads."""

    def __init__(self, ui, names: list[str]) -> None:
        self.ui, self.names = ui, list(names)
        self.state = {name: "connecting" for name in names}
        self._lock = threading.Lock()
        self._console = ui.console(stderr=True)
        self._live = None

    def __enter__(self) -> "HostProgress":
        if not self.ui.quiet and self._console.is_terminal and self.names:
            from rich.live import Live

            self._live = Live(self._render(), console=self._console, transient=True, refresh_per_second=8)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def _render(self):
        from rich.table import Table

        done = sum(1 for s in self.state.values() if s not in ("connecting", "gathering"))
        view = Table(title=f"doctor: {done}/{len(self.names)} hosts answered", title_justify="left", box=None)
        view.add_column("host")
        view.add_column("state")
        for name in self.names:
            view.add_row(name, self.state[name])
        return view

    def _set(self, name: str, state: str, line: bool) -> None:
        with self._lock:
            self.state[name] = state
            if self._live is not None:
                self._live.update(self._render())
            elif line and not self.ui.quiet:
                self._console.print(f"[dim]doctor: {name}: {state}[/]", markup=True, highlight=False)

    def waiting(self, line: str) -> None:
        """A host still connecting after a while: one line off a terminal (the live view shows 'connecting')."""
        if self._live is None and not self.ui.quiet:
            with self._lock:
                self._console.print(f"doctor: {line}", markup=False, highlight=False)

    def connected(self, name: str) -> None:
        self._set(name, "gathering", line=False)

    def unreachable(self, name: str, reason: str) -> None:
        self._set(name, f"[red]unreachable[/] ({reason})", line=True)

    def answered(self, name: str, facts: HostFacts) -> None:
        if not facts.reachable:
            self.unreachable(name, facts.error or "lost")
            return
        self._set(name, "[green]answered[/]", line=True)
