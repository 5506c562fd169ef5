"""The bundle as data (pure): each host's answers turned into files (framed answers split, every text redacted),
what failed to collect and why, the hints, and the summary (JSON and Markdown) at the top of the archive."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from deployctl.diagnose.plan import DAEMON_DOWN, Item
from deployctl.diagnose.redact import env_file_names, redact_inspect, redact_text
from deployctl.diagnose.signatures import Hint, Text


@dataclass(frozen=True)
class Answer:
    """What one command said (the transport's Result without its argv)."""

    exit_code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class File:
    path: str  # in the host's folder
    text: str  # redacted
    kind: str  # signature source kind


@dataclass(frozen=True)
class Failure:
    item: str
    reason: str
    detail: str = ""  # what the tool said (redacted; matched against the signatures as `error`)

    def to_json(self) -> dict:
        return {"item": self.item, "reason": self.reason}


@dataclass(frozen=True)
class HostBundle:
    host: str
    files: tuple[File, ...] = ()
    failed: tuple[Failure, ...] = ()
    notes: tuple[str, ...] = ()  # collected, nothing to show (no containers, no plogs)

    def texts(self) -> list[Text]:
        out = [Text(self.host, f.path, f.kind, f.text) for f in self.files]
        return out + [Text(self.host, f"{f.item} (failed)", "error", f.detail) for f in self.failed if f.detail]

    def to_json(self) -> dict:
        return {"host": self.host, "collected": [f.path for f in self.files],
                "failed": [f.to_json() for f in self.failed], **({"notes": list(self.notes)} if self.notes else {})}


def host_bundle(host: str, items: Sequence[Item], answers: Sequence[Answer], *, marker: str,
                secrets: Sequence[str]) -> HostBundle:
    """One host's files and failures from its answers, in the plan's order; everything redacted."""
    files: list[File] = []
    failed: list[Failure] = []
    notes: list[str] = []
    for item, answer in zip(items, answers):
        failure = _failure(item, answer, secrets)
        if failure is not None:
            failed.append(failure)
            continue
        if not item.framed:
            files.append(File(item.path, redact_text(answer.stdout, secrets), item.kind))
            continue
        framed = framed_files(item, answer.stdout, marker, secrets)
        if not framed:
            notes.append(_nothing_found(item))
        files += framed
    return HostBundle(host, tuple(files), tuple(failed), tuple(notes))


def unreachable(host: str, message: str) -> HostBundle:
    return HostBundle(host, failed=(Failure("ssh", message),))


def _failure(item: Item, answer: Answer, secrets: Sequence[str]) -> Optional[Failure]:
    if answer.exit_code == 0:
        return None
    detail = redact_text((answer.stderr.strip() or answer.stdout.strip())[-2000:], secrets)
    if answer.exit_code == 127 or re.search(rf"\b{re.escape(item.tool)}: (command )?not found", detail):
        return Failure(item.name, f"{item.tool} is not installed on the host", detail)
    if item.framed == "containers" and answer.exit_code == DAEMON_DOWN:
        return Failure(item.name, "the Docker daemon is not reachable", detail)
    last = detail.splitlines()[-1] if detail else ""
    return Failure(item.name, f"exit {answer.exit_code}" + (f": {last}" if last else ""), detail)


def _nothing_found(item: Item) -> str:
    if item.framed == "containers":
        return "containers: none of this deployment on the host"
    if item.framed == "plog":
        return "plog: no files under /root/ascend/log or /var/log/npu"
    return "state: nothing written by deployctl on the host"


def split_framed(text: str, marker: str) -> list[tuple[str, str, str]]:
    """(what, name, body) for each `@@<marker> <what> <name>` section; one trailing newline (the frame's own
    `echo`) is taken off each body."""
    pattern = re.compile(rf"^@@{re.escape(marker)} (\S+) (.*)\n", re.MULTILINE)
    matches = list(pattern.finditer(text))
    out = []
    for match, following in zip(matches, matches[1:] + [None]):
        body = text[match.end(): following.start() if following else len(text)]
        out.append((match.group(1), match.group(2), body[:-1] if body.endswith("\n") else body))
    return out


def framed_files(item: Item, text: str, marker: str, secrets: Sequence[str]) -> list[File]:
    """A framed answer's files, each in its place under the item's folder, redacted."""
    out = []
    for what, name, body in split_framed(text, marker):
        if item.framed == "containers":
            container = _safe(name)
            if what == "inspect":
                out.append(File(f"{item.path}/{container}/inspect.json", redact_inspect(body, secrets), "inspect"))
            elif what in ("stdout", "stderr"):
                out.append(File(f"{item.path}/{container}/{what}.log", redact_text(body, secrets), "log"))
        elif item.framed == "plog" and what == "file":
            out.append(File(f"{item.path}/{_safe_path(name)}", redact_text(body, secrets), "plog"))
        elif item.framed == "state":
            root = item.root.rstrip("/") + "/"
            relative = _safe_path(name[len(root):] if name.startswith(root) else name)
            if what == "names":  # an env file: its names only ever left the host
                out.append(File(f"{item.path}/{relative}", env_file_names(body), "state"))
            elif what == "file":
                out.append(File(f"{item.path}/{relative}", redact_text(body, secrets), "state"))
    return out


def _safe(name: str) -> str:
    """One path component: no separators, no dot names."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name.strip().lstrip("/"))
    return cleaned if cleaned not in ("", ".", "..") else "_"


def _safe_path(path: str) -> str:
    return "/".join(_safe(part) for part in path.strip("/").split("/") if part) or "_"


@dataclass(frozen=True)
class Summary:
    deployment: str
    created: str  # UTC, ISO 8601
    hosts: tuple[HostBundle, ...]
    hints: tuple[Hint, ...]
    context: Mapping[str, str] = field(default_factory=dict)  # extra top-level files: name -> redacted text

    def to_json(self, bundle: str = "") -> dict:
        return {"deployment": self.deployment, "created": self.created, **({"bundle": bundle} if bundle else {}),
                "hosts": [h.to_json() for h in self.hosts], "hints": [h.to_json() for h in self.hints]}

    def markdown(self) -> str:
        lines = [f"# deployctl diagnose: {self.deployment}", "", f"Collected {self.created} (UTC).", ""]
        if self.context:
            lines += ["Also at the top: " + ", ".join(f"`{name}`" for name in self.context), ""]
        lines += ["## Hints", ""]
        if not self.hints:
            lines.append("No known error signature matched.")
        for hint in self.hints:
            lines += [f"- **{hint.id}** ({hint.title}) on {hint.host}, `{hint.source}`:", f"  `{hint.line}`",
                      f"  fix: {hint.hint}"]
        for host in self.hosts:
            lines += ["", f"## {host.host}", "", f"Collected ({len(host.files)} files):"]
            lines += [f"- `{host.host}/{f.path}`" for f in host.files] or ["- nothing"]
            lines += [f"- {note}" for note in host.notes]
            if host.failed:
                lines += ["", "Failed to collect:"]
                lines += [f"- {f.item}: {f.reason}" for f in host.failed]
        return "\n".join(lines) + "\n"


def context_texts(context: Mapping[str, str]) -> list[Text]:
    """Top-level files (e.g. the error a failed `up` ended with) are matched as logs."""
    return [Text("-", name, "log", text) for name, text in context.items()]


def all_texts(hosts: Iterable[HostBundle], context: Mapping[str, str]) -> list[Text]:
    return [t for h in hosts for t in h.texts()] + context_texts(context)


def members(root: str, summary: Summary) -> dict[str, bytes]:
    """Archive path -> content: `<root>/summary.md`, `summary.json`, the context files, then one folder per host."""
    out = {f"{root}/summary.md": summary.markdown().encode(),
           f"{root}/summary.json": (json.dumps(summary.to_json(), indent=2) + "\n").encode()}
    for name, text in summary.context.items():
        out[f"{root}/{_safe(name)}"] = text.encode()
    for host in summary.hosts:
        for f in host.files:
            out[f"{root}/{_safe(host.host)}/{f.path}"] = f.text.encode()
    return out
