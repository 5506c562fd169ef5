"""Ship an image from one host to many: one `docker save` read once, fanned out to every `docker load` at once.

Over SSH the bytes go source channel -> control machine -> every target channel chunk by chunk, so the image
is saved once and never lands on a disk between hosts; other transports fall back to save/get/put/load.
"""

from __future__ import annotations

import select
import threading
import time
import uuid
from typing import Mapping, Sequence

from deployctl.errors import HostError
from deployctl.core import Command
from deployctl.transport import Transport

_CHUNK = 1 << 20


def ship_image(image: str, source: Transport, targets: Sequence[Transport]) -> dict[str, float]:
    """Load `image` from `source` into every target; returns seconds per target host."""
    if not targets:
        return {}
    if hasattr(source, "open_stream") and all(hasattr(t, "open_stream") for t in targets):
        return _stream(image, source, targets)
    return _copy(image, source, targets)


def _stream(image: str, source, targets) -> dict[str, float]:
    started = time.monotonic()
    sinks = {t.name: t.open_stream(Command(("docker", "load"))) for t in targets}
    save = source.open_stream(Command(("docker", "save", image)))
    errors: dict[str, str] = {}
    source_err = bytearray()
    done: dict[str, float] = {}
    try:
        while True:
            if save.recv_stderr_ready():
                source_err += save.recv_stderr(_CHUNK)
            chunk = save.recv(_CHUNK)
            if not chunk:
                break
            _send_all(chunk, sinks, errors)
        while save.recv_stderr_ready():
            source_err += save.recv_stderr(_CHUNK)
        if save.recv_exit_status() != 0:
            raise HostError(source.name, f"`docker save {image}` failed", stderr_tail=bytes(source_err).decode(
                "utf-8", "replace"))
        for name, sink in sinks.items():
            if name in errors:
                continue
            sink.shutdown_write()
            out, err = _drain(sink)
            if sink.recv_exit_status() != 0:
                errors[name] = (err or out).decode("utf-8", "replace")
            done[name] = time.monotonic() - started
    finally:
        for channel in (save, *sinks.values()):
            channel.close()
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
        sink.sendall(chunk)
    except OSError as exc:
        errors[name] = f"stream broken: {exc}"


def _drain(channel) -> tuple[bytes, bytes]:
    out, err = bytearray(), bytearray()
    while not (channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready()):
        if channel.recv_ready():
            out += channel.recv(_CHUNK)
        elif channel.recv_stderr_ready():
            err += channel.recv_stderr(_CHUNK)
        else:
            select.select([channel], [], [], 0.05)
    return bytes(out), bytes(err)


def _copy(image: str, source: Transport, targets: Sequence[Transport]) -> dict[str, float]:
    """Fallback: save to a file on the source, get it once, put + load on each target (sequential here)."""
    started = time.monotonic()
    path = f"/tmp/deployctl-ship-{uuid.uuid4().hex[:12]}.tar"
    saved = source.run(Command(("docker", "save", "--output", path, image)), timeout=3600)
    if not saved.ok:
        raise HostError(source.name, f"`docker save {image}` failed", stderr_tail=saved.stderr)
    try:
        data = source.get(path)
    finally:
        source.run(Command(("rm", "-f", path), check=False))
    done = {}
    for target in targets:
        target.put(path, data)
        loaded = target.run(Command(("docker", "load", "--input", path)), timeout=3600)
        target.run(Command(("rm", "-f", path), check=False))
        if not loaded.ok:
            raise HostError(target.name, f"`docker load` of {image} failed", stderr_tail=loaded.stderr)
        done[target.name] = time.monotonic() - started
    return done
