"""Ship an image from one host to many, read once: `docker save` on the source, streamed through the control machine.

To one target, straight into its `docker load`. To several, as a chain: the control machine sends the stream once,
to the first target, whose relay (image_relay.py) loads it and passes the same bytes on to the next target over
the cluster network, and so on; the control machine's uplink carries one copy whatever the number of targets.
Targets the chain did not serve get the image straight from the control machine, as with one target. Each target's
image ID is checked against the source's afterwards. Layers every target already holds travel as empty files
(deployctl/image/layers.py); a target whose load fails that way gets the whole image straight from the control
machine."""

from __future__ import annotations

import functools
import json
import secrets
import threading
import time
from importlib import resources
from typing import Callable, Mapping, Sequence

from deployctl.core import Command, Secret
from deployctl.errors import HostError
from deployctl.transport import Transport

_CHUNK = 1 << 20
# The relays listen on this port of each target's address (`hosts[].address`) for the length of one ship.
CHAIN_PORT = 29472
CHAIN_WAIT_S = 120  # how long a relay waits for the host before it (its SSH session may start late)
# The relay reads its own program from stdin (length line, then the program): nothing is left on the host.
BOOT = ("import sys;b=sys.stdin.buffer;n=int(b.readline());"
        "exec(compile(b.read(n),'image_relay.py','exec'),{'__name__':'__main__'})")


@functools.lru_cache(maxsize=1)
def relay_program() -> bytes:
    return resources.files("deployctl.image").joinpath("image_relay.py").read_bytes()


def ship_image(image: str, source: Transport, targets: Sequence[Transport],
               trace: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """Load `image` from `source` into every target; returns seconds per target host. With `trace`, each chain
    hop's events (see image_relay.py) go into it, as seconds since the ship started by the hosts' clocks."""
    from concurrent.futures import ThreadPoolExecutor

    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        # Which layers the targets hold is asked while the chain's relays start; the stream waits for the answer.
        held = pool.submit(_held_layers, image, source, targets)
        if len(targets) < 2 or any(t.address in (None, "", "local") for t in targets):
            try:
                done = _ship_direct(image, source, targets, held.result)
            except HostError:
                if not held.result():
                    raise
                done = _ship_direct(image, source, targets)  # a layer went missing meanwhile: send it whole
        else:
            done, missed = _ship_chain(image, source, targets, held.result, trace)
            if missed:
                done.update(_ship_direct(image, source, [t for t in targets if t.name in missed]))
    _check_ids(image, source, targets)
    return done


# One SSH command per host. The source: the image's layers (any engine version: layers.py finds a layer in the
# `docker save` of Docker >= 25 by its diff ID and in an older one's by its v1 ID). A target: its engine's kind,
# then the layer lists of every image it holds.
_SOURCE = "docker image inspect --format '{{json .RootFS.Layers}}' \"$1\""
_HELD = ("docker info --format '{{.Driver}} {{json .DriverStatus}}' && "
         "docker image inspect --format '{{json .RootFS.Layers}}' $(docker image ls --all --quiet --no-trunc)")


def _held_layers(image: str, source: Transport, targets: Sequence[Transport]) -> frozenset[str]:
    """The image's layers every target already holds (layers.held_digests): none when any target's engine might
    check the layers it is sent (the containerd image store imports every blob by its digest)."""
    from deployctl.fanout import on_hosts
    from deployctl.image.layers import held_digests, held_prefix

    def lines(transport: Transport, command: Command) -> list[str]:
        result = transport.run(command, timeout=60)
        return [line for line in result.stdout.splitlines() if line.strip()] if result.ok else []

    def held(transport: Transport) -> list[list[str]]:
        found = lines(transport, Command(("sh", "-c", _HELD)))
        if not found or "containerd" in found[0]:
            return []
        return [json.loads(line) or [] for line in found[1:]]

    try:
        mine = lines(source, Command(("sh", "-c", _SOURCE, "sh", image)))
        if len(mine) != 1:
            return frozenset()
        layers = json.loads(mine[0]) or []
        theirs = on_hosts({t.name: t for t in targets}, held)
    except (HostError, ValueError):
        return frozenset()  # not knowing only costs the bytes
    if not layers:
        return frozenset()
    return held_digests(layers, min(held_prefix(layers, images) for images in theirs.values()))


def relay_stdin(job: dict) -> bytes:
    """What a relay reads first: its program (length-prefixed), then its job as one JSON line."""
    program = relay_program()
    return str(len(program)).encode() + b"\n" + program + json.dumps(job).encode() + b"\n"


def _job(token: str, listen, following) -> dict:
    return {"token": token, "listen": listen, "next": following, "wait": CHAIN_WAIT_S}


def relay_events(stderr: str, since: float) -> tuple[dict[str, float], str]:
    """The relay's `T <event> <unix time>` lines as seconds since `since`, and the rest of its stderr."""
    events, rest = {}, []
    for line in stderr.splitlines():
        word = line.split()
        if len(word) == 3 and word[0] == "T":
            try:
                events[word[1]] = float(word[2]) - since
                continue
            except ValueError:
                pass
        rest.append(line)
    return events, "\n".join(rest)


def _ship_chain(image: str, source: Transport, targets: Sequence[Transport],
                skip: Callable[[], frozenset[str]] = frozenset,
                trace: dict[str, dict[str, float]] | None = None) -> tuple[dict[str, float], dict]:
    """The chain; (seconds per target it served, target -> why it did not). `skip()` says which layers need not
    travel; it is asked once the relays are starting."""
    from deployctl.image.layers import filtered

    token = secrets.token_urlsafe(32)
    hops = [[t.address, CHAIN_PORT] for t in targets]
    started, wall = time.monotonic(), time.time()
    done: dict[str, float] = {}
    missed: dict[str, str] = {}
    lock = threading.Lock()

    def settle(name: str, code: int, out: str, err: str) -> None:
        events, err = relay_events(err, wall)
        with lock:
            if trace is not None:
                trace[name] = {**events, "done": time.monotonic() - started}
            if code == 0:
                done[name] = time.monotonic() - started
            else:
                missed[name] = (err or out)[-2000:]

    def downstream(index: int, target: Transport) -> None:
        stdin = Secret(relay_stdin(_job(token, hops[index], hops[index + 1:])), "image relay (ship token)")
        try:
            result = target.run(Command(("python3", "-c", BOOT), stdin=stdin), timeout=None)
            settle(target.name, result.exit_code, result.stdout, result.stderr)
        except HostError as error:
            settle(target.name, 1, "", error.message)

    threads = [threading.Thread(target=downstream, args=(i, t), daemon=True) for i, t in enumerate(targets) if i]
    for thread in threads:
        thread.start()
    head = targets[0]
    try:
        sink = head.open_stream(Command(("python3", "-c", BOOT)))
    except HostError as error:
        missed[head.name] = error.message
        sink = None
    if sink is not None:
        # `docker save` starts while the held layers are still being asked (it writes the image out before its
        # first byte); nothing is read from it before the answer.
        save = source.open_stream(Command(("docker", "save", image)))
        try:
            sink.write(relay_stdin(_job(token, None, hops[1:])))
            skipped = skip()
            broken = None
            for chunk in filtered(iter(lambda: save.read(_CHUNK), b""), skipped):
                if broken is None:
                    try:
                        sink.write(chunk)
                    except OSError as exc:
                        broken = f"stream broken: {exc}"
            code, _, source_err = save.finish()
            if code != 0:
                raise HostError(source.name, f"`docker save {image}` failed",
                                stderr_tail=source_err.decode("utf-8", "replace"))
            code, out, err = sink.finish()
            settle(head.name, 1 if broken else code, out.decode("utf-8", "replace"),
                   broken or err.decode("utf-8", "replace"))
        finally:
            save.close()
            sink.close()
    for thread in threads:
        thread.join()
    return done, missed


def _check_ids(image: str, source: Transport, targets: Sequence[Transport]) -> None:
    """Every target now holds the very image the source saved (same image ID: the digest of its config)."""
    from deployctl.fanout import on_hosts

    def image_id(transport: Transport) -> str:
        result = transport.run(Command(("docker", "image", "inspect", "--format", "{{.Id}}", image)), timeout=60)
        return result.stdout.strip() if result.ok else ""

    ids = on_hosts({t.name: t for t in (source, *targets)}, image_id)
    for target in targets:
        if not ids.get(target.name) or ids[target.name] != ids.get(source.name):
            raise HostError(target.name, f"{image} after `docker load` is {ids.get(target.name) or 'missing'}, "
                                         f"not {ids.get(source.name)} as on {source.name}", address=target.address)


def _ship_direct(image: str, source: Transport, targets: Sequence[Transport],
                 skip: Callable[[], frozenset[str]] = frozenset) -> dict[str, float]:
    """One `docker save` fanned out from the control machine to every target's `docker load` at once (the layers
    `skip()` names emptied; asked once the streams are open)."""
    from deployctl.image.layers import filtered

    started = time.monotonic()
    sinks = {t.name: t.open_stream(Command(("docker", "load"))) for t in targets}
    save = source.open_stream(Command(("docker", "save", image)))
    errors: dict[str, str] = {}
    done: dict[str, float] = {}
    try:
        for chunk in filtered(iter(lambda: save.read(_CHUNK), b""), skip()):
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
