"""Copy one sealed compile-cache directory from the host that has it to the hosts that do not (plan/compile_cache.py),
host to host: the image ship's relay (deployctl/image/image_relay.py) runs `tar` on the source and passes the stream
along a chain of the targets over the cluster network, each unpacking it on the way. The control machine carries
none of the bytes, whatever the number of targets. Each target unpacks into a staging directory that is put in place
only once its files hash to the source's sealed digest, so a half copy is never a cache and a re-run after an
interrupted one starts it afresh. A target the chain did not serve (no cluster address, a hop that failed) gets the
stream through the control machine instead, verified the same way."""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from deployctl.core import Command, Secret
from deployctl.errors import HostError
from deployctl.facts.compile_cache import MARKER
from deployctl.plan.compile_cache import DIGEST, CacheCopy
from deployctl.transport import Transport

_CHUNK = 1 << 20
# $1 cache dir, $2 key, $3 expected digest. Unpack into $1/.$2.partial (a half copy is never a cache; a re-run
# removes what an interrupted one left), then verify, seal and put in place; exit 3 when the digest differs.
_RECEIVE = ('rm -rf "$1/.$2.partial" && mkdir -p "$1/.$2.partial" && tar -C "$1/.$2.partial" -xf - || exit 1; '
            'd=$(' + DIGEST.replace('"$1"', '"$1/.$2.partial/$2"') + ') || exit 1; '
            'if [ "$d" != "$3" ]; then rm -rf "$1/.$2.partial"; echo "digest $d" >&2; exit 3; fi; '
            'printf "%s\\n" "$d" > "$1/.$2.partial/$2/' + MARKER + '" && chmod 0777 "$1/.$2.partial/$2" && '
            'rm -rf "$1/$2" && mv "$1/.$2.partial/$2" "$1/$2" && rm -rf "$1/.$2.partial"')

# One chain at a time per target host: its relay listens on one port (two keys from two givers would collide).
_held: dict[str, threading.Lock] = {}
_held_lock = threading.Lock()


@dataclass(frozen=True)
class Copied:
    """How one target got its copy."""

    seconds: float
    bytes: int
    via: str  # "peer": host to host over the cluster network | "controller": streamed through the control machine

    def to_json(self) -> dict:
        return {"seconds": round(self.seconds, 3), "bytes": self.bytes, "via": self.via}


def run_cache_copy(source: Transport, copy: CacheCopy, transports: Mapping[str, Transport],
                   port: int | None = None) -> dict[str, Copied]:
    """Copy and verify onto every target; how each got it. A HostError names the side that failed."""
    from deployctl.image.ship import CHAIN_PORT

    targets = [transports[name] for name in copy.targets]
    locks = [_lock(name) for name in sorted(copy.targets)]
    for lock in locks:
        lock.acquire()
    try:
        if all(_routable(t) for t in (source, *targets)):
            done, missed = _chain(source, copy, targets, CHAIN_PORT if port is None else port)
        else:
            done, missed = {}, {t.name: "no cluster address" for t in targets}
        for target in targets:
            if target.name in missed:
                done[target.name] = _through_controller(source, target, copy)
    finally:
        for lock in locks:
            lock.release()
    return done


def _lock(host: str) -> threading.Lock:
    with _held_lock:
        return _held.setdefault(host, threading.Lock())


def _routable(transport: Transport) -> bool:
    return transport.address not in (None, "", "local")


def _receive(copy: CacheCopy) -> tuple[str, ...]:
    return ("sh", "-c", _RECEIVE, "sh", copy.cache_dir, copy.key, copy.digest)


def _pack(copy: CacheCopy) -> tuple[str, ...]:
    return ("tar", "-C", copy.cache_dir, "-cf", "-", "--exclude", MARKER, copy.key)


def _relay_stdin(job: dict) -> Secret:
    from deployctl.image.ship import relay_stdin

    return Secret(relay_stdin(job), "compile cache relay (chain token)")


def _counted(stderr: str) -> tuple[int, str]:
    """The relay's `C bytes from` line: (bytes, where they came from)."""
    for line in reversed(stderr.splitlines()):
        words = line.split()
        if len(words) == 3 and words[0] == "C" and words[1].isdigit():
            return int(words[1]), words[2]
    return 0, ""


def _chain(source: Transport, copy: CacheCopy, targets: Sequence[Transport],
           port: int) -> tuple[dict[str, Copied], dict[str, str]]:
    """The source's `tar` along a chain of the targets; (what each target it served got, target -> why not)."""
    from deployctl.image.ship import BOOT, CHAIN_WAIT_S, relay_events

    token = secrets.token_urlsafe(32)
    hops = [[t.address, port] for t in targets]
    started = time.monotonic()
    done: dict[str, Copied] = {}
    missed: dict[str, str] = {}
    lock = threading.Lock()

    def link(index: int, host: Transport) -> None:
        head = index < 0
        job = {"token": token, "listen": None if head else hops[index], "next": hops[index + 1:],
               "wait": CHAIN_WAIT_S, "sink": [] if head else list(_receive(copy)), "counts": True,
               **({"source": list(_pack(copy))} if head else {})}
        try:
            result = host.run(Command(("python3", "-c", BOOT), stdin=_relay_stdin(job)), timeout=None)
            _, rest = relay_events(result.stderr, 0.0)
            code, said, err = result.exit_code, (rest or result.stdout)[-2000:], result.stderr
        except HostError as error:
            code, said, err = 1, error.message, ""
        with lock:
            if head:
                if code != 0:
                    missed.setdefault(host.name, said)  # the source: its targets say what they missed
                return
            count, came = _counted(err)
            if code == 0 and came == "peer":
                done[host.name] = Copied(time.monotonic() - started, count, "peer")
            else:
                missed[host.name] = said

    threads = [threading.Thread(target=link, args=(i, t), daemon=True) for i, t in enumerate(targets)]
    threads.append(threading.Thread(target=link, args=(-1, source), daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    missed.pop(source.name, None)
    return done, missed


def _through_controller(source: Transport, target: Transport, copy: CacheCopy) -> Copied:
    """`tar` on the source streamed through the control machine into the target, verified there."""
    started = time.monotonic()
    carried = 0
    sink = target.open_stream(Command(_receive(copy)))
    pack = source.open_stream(Command(_pack(copy)))
    try:
        for chunk in iter(lambda: pack.read(_CHUNK), b""):
            sink.write(chunk)
            carried += len(chunk)
        code, _, err = pack.finish()
        if code != 0:
            raise HostError(source.name, f"reading compile cache {copy.key} failed",
                            stderr_tail=err.decode("utf-8", "replace"))
        code, out, err = sink.finish()
    except OSError as exc:
        raise HostError(target.name, f"compile cache {copy.key}: stream from {copy.source} broken: {exc}") from None
    finally:
        pack.close()
        sink.close()
    if code == 3:
        raise HostError(target.name, f"compile cache {copy.key} copied from {copy.source}: its digest differs from "
                        "its source's", stderr_tail=(err or out).decode("utf-8", "replace")[-2000:],
                        hint="the source changed during the copy? run `up` again")
    if code != 0:
        raise HostError(target.name, f"writing compile cache {copy.key} from {copy.source} failed",
                        stderr_tail=(err or out).decode("utf-8", "replace")[-2000:])
    return Copied(time.monotonic() - started, carried, "controller")
