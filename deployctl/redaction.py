"""The one redaction of what a host says, wherever deployctl quotes it: an error's stderr tail and message (set as
the error is made, errors.py), a progress line quoting a container's last log line, the history records written on
the first host, `logs`, `status --timeline`'s skipped lines and `watch`. It is diagnose/redact.py's redact_text
with the secret values of the spec the command works on, known once it connects to the spec's hosts
(hosts.connected); `diagnose` writes its bundle with the same function. Pure: no I/O."""

from __future__ import annotations

from typing import Mapping, Optional

_known: tuple[str, ...] = ()


def know(spec, environ: Optional[Mapping[str, str]] = None) -> None:
    """From now on, the secret values of `spec` (and the control machine's S3 credentials in `environ`)."""
    from deployctl.diagnose.redact import secret_values

    global _known
    _known = secret_values(spec, environ or {})


def forget() -> None:
    """No spec's values any more (a new command starts: cli.main)."""
    global _known
    _known = ()


def known() -> tuple[str, ...]:
    return _known


def redact(text: str) -> str:
    """A host's text as deployctl may show or write it."""
    from deployctl.diagnose.redact import redact_text

    return redact_text(text, _known) if text else text


def redact_record(value):
    """Every string of a JSON-able value redacted (dict keys are deployctl's own and kept)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_record(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_record(item) for item in value]
    return value
