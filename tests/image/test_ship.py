"""What the ship asks before it streams (which layers every target holds) and what it reads from the relays."""

from __future__ import annotations

import json

from deployctl.image.layers import chain_ids
from deployctl.image.ship import relay_events, _held_layers, ship_image
from tests.fakes.transport import FakeTransport

A, B, C, X = ("sha256:" + ch * 64 for ch in "abcx")
OVERLAY = 'overlay2 [["Backing Filesystem","extfs"],["Supports d_type","true"]]'
LAYERS = r"json \.RootFS\.Layers\}\}' \"\$1\""  # the source's question


def _source() -> FakeTransport:
    return FakeTransport("src", {LAYERS: f"{json.dumps([A, B, C])}\n"})


def _target(name: str, engine: str, *images: list[str]) -> FakeTransport:
    return FakeTransport(name, {r"docker info": "\n".join([engine, *map(json.dumps, images)]) + "\n"})


def test_the_layers_every_target_holds_with_the_same_layers_under_them_are_left_out():
    targets = [_target("t1", OVERLAY, [A, B], [X]), _target("t2", OVERLAY, [A, B, X]), _target("t3", OVERLAY, [A])]
    # By diff ID (Docker >= 25's blob names) and by chain ID (what an older engine's v1 IDs are made of).
    assert _held_layers("img:1", _source(), targets) == {A}  # the bottom layer's chain ID is its diff ID
    assert _held_layers("img:1", _source(), targets[:2]) == {A, B, chain_ids([A, B])[1]}


def test_the_image_name_reaches_the_sources_shell_as_an_argument_not_inside_the_script():
    source = _source()
    _held_layers("img'; rm -rf /; echo '", source, [_target("t1", OVERLAY, [A])])
    argv = source.ran[0].argv
    assert argv[:2] == ("sh", "-c") and "rm -rf" not in argv[2] and argv[-1] == "img'; rm -rf /; echo '"


def test_nothing_is_left_out_for_a_containerd_image_store_or_a_target_that_does_not_answer():
    held = [_target("t1", OVERLAY, [A, B, C])]
    assert _held_layers("img:1", _source(), held) == {A, B, C, *chain_ids([A, B, C])}
    assert _held_layers("img:1", _source(), [*held, _target("t2", 'overlayfs [["driver-type",'
                                                              '"io.containerd.snapshotter.v1"]]', [A, B, C])]) == set()
    assert _held_layers("img:1", _source(), [*held, FakeTransport("t3", {r"docker info": ""})]) == frozenset()


def test_the_relays_event_lines_become_seconds_and_the_rest_stays_for_the_error():
    events, rest = relay_events("T start 100.5\nF skipped 10.0.0.3:29472\nT last_byte 103.25\n", 100.0)
    assert events == {"start": 0.5, "last_byte": 3.25}
    assert rest == "F skipped 10.0.0.3:29472"


class _Recording(FakeTransport):
    """A FakeTransport that keeps the streams it opened."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.streams = []

    def open_stream(self, command):
        self.streams.append(super().open_stream(command))
        return self.streams[-1]


def test_one_target_gets_the_save_stream_straight_into_its_load_and_its_image_id_checked():
    source = _Recording("src", {LAYERS: f"{json.dumps([A])}\n", r"docker save": "ARCHIVE",
                                r"\{\{\.Id\}\}": "sha256:1\n"})
    target = _Recording("t1", {r"docker info": f"{OVERLAY}\n", r"\{\{\.Id\}\}": "sha256:1\n"})

    assert list(ship_image("img:1", source, [target])) == ["t1"]
    assert [c.argv for c in target.ran if c.argv[0] == "docker" and c.argv[1] == "load"] == [("docker", "load")]
    assert bytes(target.streams[0].written) == b"ARCHIVE"
