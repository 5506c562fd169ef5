"""A sealed compile cache copied host to host: along a chain of relays over loopback addresses (each "host" a
directory of this machine), never through the control machine, or through it where a host has no cluster address;
whole and sealed with the source's digest, refused and not put in place when the digest differs, and a re-run after
an interrupted copy converges."""

from __future__ import annotations

import dataclasses
import socket
import threading

import pytest

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.execute.compile_cache import run_cache_copy
from deployctl.facts.compile_cache import MARKER, cache_probe, parse_cache_state
from deployctl.plan.compile_cache import SEAL, CacheCopy
from deployctl.transport.local import LocalTransport

KEY = "aaaa1111-tp2-0123456789abcdef"
CACHE = "cache"  # relative: each "host" runs in its own directory
GRAPH = b"\x00compiled" * 100_000


class _Host(LocalTransport):
    """A local transport whose commands run in `root` (one machine plays several hosts, each its own cache dir)."""

    def __init__(self, name, root, address="local"):
        super().__init__(name, address)
        self.root = root
        root.mkdir(exist_ok=True)

    def _in_root(self, command):
        return dataclasses.replace(command, argv=("sh", "-c", 'cd "$0" && exec "$@"', str(self.root), *command.argv))

    def run(self, command, *, timeout=None):
        return super().run(self._in_root(command), timeout=timeout)

    def open_stream(self, command):
        return super().open_stream(self._in_root(command))


def sealed_source(host):
    key = host.root / CACHE / KEY
    (key / "torch_compile_cache" / "h1" / "rank_0_0").mkdir(parents=True)
    (key / "torch_compile_cache" / "h1" / "rank_0_0" / "graph.bin").write_bytes(GRAPH)
    (key / "torch_compile_cache" / "h1" / "file with space").write_text("x")
    result = host.run(Command(("sh", "-c", SEAL, "sh", f"{CACHE}/{KEY}")))
    assert result.ok, result.stderr
    return (key / MARKER).read_text().strip()


def sealed_state(host):
    return parse_cache_state(host.run(Command(cache_probe(CACHE).argv)).stdout)


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_chain_copies_host_to_host_and_the_controller_carries_nothing(tmp_path):
    source = _Host("h1", tmp_path / "h1", "127.0.0.1")
    targets = [_Host(f"h{i}", tmp_path / f"h{i}", f"127.0.0.{i}") for i in (2, 3)]
    digest = sealed_source(source)
    transports = {h.name: h for h in (source, *targets)}
    copy = CacheCopy(KEY, CACHE, "h1", digest, ("h2", "h3"))
    done = run_cache_copy(source, copy, transports, port=_free_port())
    assert {name: c.via for name, c in done.items()} == {"h2": "peer", "h3": "peer"}
    assert all(c.bytes > len(GRAPH) for c in done.values())  # the relays counted the tar stream from a peer
    for target in targets:
        assert (target.root / CACHE / KEY / "torch_compile_cache/h1/rank_0_0/graph.bin").read_bytes() == GRAPH
        assert sealed_state(target) == {KEY: digest}
        assert not list((target.root / CACHE).glob(".*partial"))
    assert "host to host" in copy.display()


def test_without_cluster_addresses_the_copy_goes_through_the_controller_whole_and_sealed(tmp_path):
    source, target = _Host("h1", tmp_path / "h1"), _Host("h2", tmp_path / "h2")
    digest = sealed_source(source)
    done = run_cache_copy(source, CacheCopy(KEY, CACHE, "h1", digest, ("h2",)), {"h1": source, "h2": target})
    assert done["h2"].via == "controller" and done["h2"].bytes > len(GRAPH)
    assert (target.root / CACHE / KEY / "torch_compile_cache/h1/rank_0_0/graph.bin").read_bytes() == GRAPH
    assert sealed_state(target) == {KEY: digest}


def test_a_digest_that_differs_is_refused_and_nothing_is_put_in_place(tmp_path):
    source, target = _Host("h1", tmp_path / "h1"), _Host("h2", tmp_path / "h2")
    sealed_source(source)
    with pytest.raises(HostError) as raised:
        run_cache_copy(source, CacheCopy(KEY, CACHE, "h1", "0" * 64, ("h2",)), {"h1": source, "h2": target})
    assert "digest differs" in raised.value.message and raised.value.host == "h2"
    assert not (target.root / CACHE / KEY).exists() and not list((target.root / CACHE).glob(".*partial"))


def test_a_rerun_after_an_interrupted_copy_converges(tmp_path):
    """An interrupted copy leaves a staging directory (half a tar) and no sealed key: not a cache (the probe does
    not list it), and the next copy replaces it with the whole, verified one."""
    source = _Host("h1", tmp_path / "h1", "127.0.0.1")
    target = _Host("h2", tmp_path / "h2", "127.0.0.2")
    digest = sealed_source(source)
    half = target.root / CACHE / f".{KEY}.partial" / KEY / "torch_compile_cache" / "h1" / "rank_0_0"
    half.mkdir(parents=True)
    (half / "graph.bin").write_bytes(GRAPH[: len(GRAPH) // 3])
    (half / "stale-only-here").write_text("from the interrupted run")
    assert sealed_state(target) == {}
    done = run_cache_copy(source, CacheCopy(KEY, CACHE, "h1", digest, ("h2",)), {"h1": source, "h2": target},
                          port=_free_port())
    assert done["h2"].via == "peer"
    assert sealed_state(target) == {KEY: digest}
    assert not (target.root / CACHE / KEY / "torch_compile_cache/h1/rank_0_0/stale-only-here").exists()
    assert not list((target.root / CACHE).glob(".*partial"))


def test_a_target_the_chain_missed_gets_it_through_the_controller(tmp_path):
    """h3's relay cannot start (no python3) and something else holds its port (it takes the connection and closes
    it, so h2 skips it at once): h2 still gets the cache host to host, h3 through the control machine, both
    verified."""
    source = _Host("h1", tmp_path / "h1", "127.0.0.1")
    h2 = _Host("h2", tmp_path / "h2", "127.0.0.2")
    h3 = _NoPython("h3", tmp_path / "h3", "127.0.0.3")
    digest = sealed_source(source)
    port = _free_port()
    squatter = socket.create_server(("127.0.0.3", port))

    def squat():
        with squatter:
            conn, _ = squatter.accept()
            conn.close()

    threading.Thread(target=squat, daemon=True).start()
    done = run_cache_copy(source, CacheCopy(KEY, CACHE, "h1", digest, ("h2", "h3")),
                          {"h1": source, "h2": h2, "h3": h3}, port=port)
    assert {name: c.via for name, c in done.items()} == {"h2": "peer", "h3": "controller"}
    assert sealed_state(h2) == sealed_state(h3) == {KEY: digest}


class _NoPython(_Host):
    def run(self, command, *, timeout=None):
        if command.argv[0] == "python3":
            return super().run(Command(("sh", "-c", "echo 'python3: not found' >&2; exit 127")), timeout=timeout)
        return super().run(command, timeout=timeout)


@pytest.mark.parametrize("damage", ["", "0123", "not a digest\n", "ab" * 32 + "\nmore\n"],
                         ids=["empty", "cut", "words", "two-lines"])
def test_seal_writes_a_damaged_marker_anew_and_keeps_a_sound_one(tmp_path, damage):
    """SEAL kept any marker that existed, so a damaged one stayed for ever (never copied, never warm)."""
    host = _Host("h1", tmp_path / "h1")
    digest = sealed_source(host)
    marker = host.root / CACHE / KEY / MARKER
    marker.write_text(damage)
    assert host.run(Command(("sh", "-c", SEAL, "sh", f"{CACHE}/{KEY}"))).ok
    assert marker.read_text() == digest + "\n" and sealed_state(host) == {KEY: digest}
    assert host.run(Command(("sh", "-c", SEAL, "sh", f"{CACHE}/{KEY}"))).ok
    assert marker.read_text() == digest + "\n"  # the files unchanged: the seal unchanged


def test_a_seal_follows_files_the_servers_wrote_after_it_so_a_copy_from_that_host_still_verifies(tmp_path):
    """The real engine (vLLM 0.32, CPU) saves its AOT-compiled function again on every start (its AOT load fails on
    CPU: tests/testbed/README.md), so a warm start rewrites files of a sealed cache. SEAL kept the first digest, and
    every later copy from that host failed: "its digest differs from its source's" (benchmarks/time_to_serve.py
    --real: cold, warm, then copied to tb2). Sealed again after the next start, the marker names what is there."""
    source, target = _Host("h1", tmp_path / "h1"), _Host("h2", tmp_path / "h2")
    first = sealed_source(source)
    (source.root / CACHE / KEY / "torch_compile_cache" / "h1" / "rank_0_0" / "graph.bin").write_bytes(GRAPH[::-1])
    assert source.run(Command(("sh", "-c", SEAL, "sh", f"{CACHE}/{KEY}"))).ok  # the warm start's seal
    (now,) = sealed_state(source).values()
    assert now != first
    copy = CacheCopy(KEY, CACHE, "h1", now, ("h2",))
    run_cache_copy(source, copy, {"h2": target})
    assert sealed_state(target) == {KEY: now}
    assert (target.root / CACHE / KEY / "torch_compile_cache" / "h1" / "rank_0_0" / "graph.bin").read_bytes() == \
        GRAPH[::-1]
