"""Known error log lines as a Prometheus metric (pure). Prometheus reads no logs: `deployctl monitor --scan-logs
DIR` matches each container's log against the known-error signatures (data/signatures.json, the table `diagnose`
uses) and writes the counts in the text format, a file node_exporter's textfile collector
(--collector.textfile.directory) serves; the alert rules read `deployctl_known_error_lines`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from deployctl.diagnose.signatures import Signature, Text, matched_lines, signatures

METRIC = "deployctl_known_error_lines"
SCANNED = "deployctl_known_error_scan_timestamp_seconds"


def hccl_signature_ids(table: Optional[tuple[Signature, ...]] = None) -> tuple[str, ...]:
    """The signatures of HCCL failures looked for in container logs, in table order."""
    table = signatures() if table is None else table
    return tuple(s.id for s in table if s.id.startswith("hccl_") and "log" in s.sources)


@dataclass(frozen=True)
class ContainerLog:
    host: str
    container: str
    text: str


def count_lines(log: ContainerLog, table: Optional[tuple[Signature, ...]] = None) -> dict[str, int]:
    """signature id -> lines of the log that match it; a line counts for the first signature that matches (as
    `diagnose` reports it)."""
    counts: dict[str, int] = {}
    for signature, _ in matched_lines(Text(log.host, log.container, "log", log.text), table):
        counts[signature.id] = counts.get(signature.id, 0) + 1
    return counts


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_textfile(deployment: str, logs: Iterable[ContainerLog], scanned_at: float,
                    table: Optional[tuple[Signature, ...]] = None) -> str:
    """The text-format file: one series per (host, container, signature) found, a 0 for each HCCL signature of
    every container (so `rate`/absence never hide a clean scan), and when the scan ran."""
    table = signatures() if table is None else table
    always = hccl_signature_ids(table)
    lines = [f"# HELP {METRIC} Lines of a container's current log that match a deployctl known-error signature.",
             f"# TYPE {METRIC} gauge"]
    for log in sorted(logs, key=lambda item: (item.host, item.container)):
        counts = count_lines(log, table)
        for signature in sorted(set(counts) | set(always)):
            labels = (f'deployment="{_label(deployment)}",host="{_label(log.host)}",'
                      f'container="{_label(log.container)}",signature="{_label(signature)}"')
            lines.append(f"{METRIC}{{{labels}}} {counts.get(signature, 0)}")
    lines += [f"# HELP {SCANNED} When deployctl last scanned the deployment's container logs.",
              f"# TYPE {SCANNED} gauge",
              f'{SCANNED}{{deployment="{_label(deployment)}"}} {scanned_at:.3f}']
    return "\n".join(lines) + "\n"
