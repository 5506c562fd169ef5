"""Copy one sealed compile-cache directory from the host that has it to one that does not (plan/compile_cache.py),
through the control machine: `tar` on the source streamed into `tar` on the target, into a staging directory that is
put in place only once its files hash to the source's sealed digest. Small and separate on purpose: the weights'
host-to-host fan-out can carry it later."""

from __future__ import annotations

import time
from typing import Mapping

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.facts.compile_cache import MARKER
from deployctl.plan.compile_cache import DIGEST, CacheCopy
from deployctl.transport import Transport

_CHUNK = 1 << 20
# $1 cache dir, $2 key: unpack into $1/.$2.partial (a half copy is never a cache)
_UNPACK = 'rm -rf "$1/.$2.partial" && mkdir -p "$1/.$2.partial" && tar -C "$1/.$2.partial" -xf -'
# $1 cache dir, $2 key, $3 expected digest: verify, seal, put in place; exit 3 when the digest differs
_VERIFY_AND_PLACE = ('d=$(' + DIGEST.replace('"$1"', '"$1/.$2.partial/$2"') + ') || exit 1; '
                     'if [ "$d" != "$3" ]; then rm -rf "$1/.$2.partial"; echo "digest $d" >&2; exit 3; fi; '
                     'printf "%s\\n" "$d" > "$1/.$2.partial/$2/' + MARKER + '" && chmod 0777 "$1/.$2.partial/$2" && '
                     'rm -rf "$1/$2" && mv "$1/.$2.partial/$2" "$1/$2" && rm -rf "$1/.$2.partial"')


def run_cache_copy(transport: Transport, copy: CacheCopy, transports: Mapping[str, Transport]) -> float:
    """Copy and verify; the seconds it took. A HostError names the side that failed."""
    started = time.monotonic()
    source = transports[copy.source]
    sink = transport.open_stream(Command(("sh", "-c", _UNPACK, "sh", copy.cache_dir, copy.key)))
    pack = source.open_stream(Command(("tar", "-C", copy.cache_dir, "-cf", "-", "--exclude", MARKER, copy.key)))
    try:
        for chunk in iter(lambda: pack.read(_CHUNK), b""):
            sink.write(chunk)
        code, _, err = pack.finish()
        if code != 0:
            raise HostError(source.name, f"reading compile cache {copy.key} failed",
                            stderr_tail=err.decode("utf-8", "replace"))
        code, out, err = sink.finish()
        if code != 0:
            raise HostError(transport.name, f"writing compile cache {copy.key} from {copy.source} failed",
                            stderr_tail=(err or out).decode("utf-8", "replace"))
    except OSError as exc:
        raise HostError(transport.name, f"compile cache {copy.key}: stream from {copy.source} broken: {exc}") from None
    finally:
        pack.close()
        sink.close()
    result = transport.run(Command(("sh", "-c", _VERIFY_AND_PLACE, "sh", copy.cache_dir, copy.key, copy.digest)),
                           timeout=600)
    if not result.ok:
        said = "differs from its source's" if result.exit_code == 3 else "could not be verified"
        raise HostError(transport.name, f"compile cache {copy.key} copied from {copy.source}: its digest {said}",
                        stderr_tail=(result.stderr or result.stdout)[-2000:],
                        hint="the source changed during the copy? run `up` again")
    return time.monotonic() - started
