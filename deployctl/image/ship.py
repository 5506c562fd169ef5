"""Ship an image from one host to many: one `docker save` read once, fanned out to every `docker load` at once.

The bytes go source -> control machine -> every target chunk by chunk (Transport.open_stream), so the image is
saved once and never lands on a disk between hosts."""

from __future__ import annotations

import threading
import time
from typing import Mapping, Sequence

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.transport import Transport

_CHUNK = 1 << 20


def ship_image(image: str, source: Transport, targets: Sequence[Transport]) -> dict[str, float]:
    """Load `image` from `source` into every target; returns seconds per target host."""
    if not targets:
        return {}
    started = time.monotonic()
    sinks = {t.name: t.open_stream(Command(("docker", "load"))) for t in targets}
    save = source.open_stream(Command(("docker", "save", image)))
    errors: dict[str, str] = {}
    done: dict[str, float] = {}
    try:
        for chunk in iter(lambda: save.read(_CHUNK), b""):
            _send_all(chunk, sinks, errors)
        code, _, source_err = save.finish()
        if code != 0:
            raise HostError(source.name, f"`docker save {image}` failed",
                            stderr_tail=source_err.decode("utf-8", "replace"))
        for name, sink in sinks.items():
            if name in errors:
                continue
            code, out, err = sink.finish()
            if code != 0:
                errors[name] = (err or out).decode("utf-8", "replace")
            done[name] = time.monotonic() - started
    finally:
        for stream in (save, *sinks.values()):
            stream.close()
    if errors:
        name, text = next(iter(errors.items()))
        raise HostError(name, f"`docker load` of {image} shipped from {source.name} failed", stderr_tail=text)
    return done


def _send_all(chunk: bytes, sinks: Mapping[str, object], errors: dict[str, str]) -> None:
    """Write one chunk to every live target in parallel threads, so one slow host does not serialise the rest."""
    live = [(n, s) for n, s in sinks.items() if n not in errors]
    if len(live) == 1:
        _send_one(live[0][0], live[0][1], chunk, errors)
        return
    threads = [threading.Thread(target=_send_one, args=(n, s, chunk, errors)) for n, s in live]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _send_one(name: str, sink, chunk: bytes, errors: dict[str, str]) -> None:
    try:
        sink.write(chunk)
    except OSError as exc:
        errors[name] = f"stream broken: {exc}"
