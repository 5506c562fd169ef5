"""A sealed compile cache copied host to host (here: two directories through local transports): whole and sealed
with the source's digest, or refused and not put in place when the digest differs."""

from __future__ import annotations

import pytest

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.execute.compile_cache import run_cache_copy
from deployctl.facts.compile_cache import MARKER, parse_cache_state
from deployctl.plan.compile_cache import SEAL, CacheCopy
from deployctl.transport.local import LocalTransport

KEY = "aaaa1111-tp2-0123456789abcdef"


def sealed_source(root):
    key = root / KEY
    (key / "torch_compile_cache" / "h1" / "rank_0_0").mkdir(parents=True)
    (key / "torch_compile_cache" / "h1" / "rank_0_0" / "graph.bin").write_bytes(b"\x00compiled" * 1000)
    (key / "torch_compile_cache" / "h1" / "file with space").write_text("x")
    result = LocalTransport("h1").run(Command(("sh", "-c", SEAL, "sh", str(key))))
    assert result.ok, result.stderr
    return (key / MARKER).read_text().strip()


def test_copy_is_whole_and_sealed_with_the_sources_digest(tmp_path):
    source, target = tmp_path / "h1", tmp_path / "h2"
    digest = sealed_source(source)
    assert len(digest) == 64
    target.mkdir()
    transports = {"h1": LocalTransport("h1"), "h2": LocalTransport("h2")}
    # both "hosts" share this machine's filesystem: each reads its own directory through cache_dir
    copy = CacheCopy(KEY, str(source), "h1", digest)
    run_cache_copy(transports["h2"], CacheCopy(KEY, str(target), "h1", digest), {**transports,
                   "h1": _Rooted(transports["h1"], str(target), str(source))})
    copied = target / KEY / "torch_compile_cache" / "h1" / "rank_0_0" / "graph.bin"
    assert copied.read_bytes() == b"\x00compiled" * 1000
    assert (target / KEY / MARKER).read_text().strip() == digest
    assert not list(target.glob(".*partial"))
    listing = LocalTransport().run(Command(("sh", "-c", _list(), "sh", str(target)))).stdout
    assert parse_cache_state(listing) == {KEY: digest}
    assert copy.display().startswith("copy compile cache")


def test_a_digest_that_differs_is_refused_and_nothing_is_put_in_place(tmp_path):
    source, target = tmp_path / "h1", tmp_path / "h2"
    sealed_source(source)
    target.mkdir()
    transports = {"h1": _Rooted(LocalTransport("h1"), str(target), str(source)), "h2": LocalTransport("h2")}
    with pytest.raises(HostError) as raised:
        run_cache_copy(transports["h2"], CacheCopy(KEY, str(target), "h1", "0" * 64), transports)
    assert "digest differs" in raised.value.message
    assert not (target / KEY).exists() and not list(target.glob(".*partial"))


class _Rooted:
    """A transport whose commands name `mine` where the plan says `theirs` (one machine plays two hosts)."""

    def __init__(self, inner, theirs, mine):
        self.inner, self.theirs, self.mine, self.name = inner, theirs, mine, inner.name

    def open_stream(self, command):
        return self.inner.open_stream(Command(tuple(self.mine if w == self.theirs else w for w in command.argv)))


def _list():
    from deployctl.facts.compile_cache import cache_probe

    return cache_probe("/x").argv[2]
