"""Which layers the targets hold, and the `docker save` stream with those layers emptied (deployctl/image/layers.py)."""

from __future__ import annotations

import io
import os
import random
import tarfile

import pytest

from deployctl.image.layers import filtered, held_prefix, skippable

A, B, C = ("sha256:" + ch * 64 for ch in "abc")


def test_a_layer_counts_as_held_only_with_the_same_layers_under_it():
    assert held_prefix([A, B, C], [[A, B], [B, C]]) == 2
    assert held_prefix([A, B, C], [[B, A, B, C]]) == 0  # B is there, but on another base: another chain ID
    assert held_prefix([A, B, C], [[A, B, C, "sha256:" + "d" * 64]]) == 3
    assert held_prefix([A, B], []) == 0


def test_a_held_digest_that_also_appears_higher_up_still_travels():
    assert skippable([A, B, A, C], 2) == {B}
    assert skippable([A, B, C], 0) == frozenset()
    assert skippable([A, B, C], 3) == {A, B, C}


def _archive(fmt: int) -> bytes:
    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w", format=fmt) as tar:
        folder = tarfile.TarInfo("blobs/sha256")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, data, pax in ((A, os.urandom(70_001), {}), (B, os.urandom(1024), {}),
                                ("x" * 150, b"a long name", {}), (C, os.urandom(3), {"comment": "pax"}),
                                ("manifest.json", b"[]", {})):
            info = tarfile.TarInfo(name if name.startswith("x") or "." in name else "blobs/sha256/" + name[7:])
            info.size, info.pax_headers = len(data), pax
            tar.addfile(info, io.BytesIO(data))
    return blob.getvalue()


def _members(raw: bytes) -> dict[str, bytes | None]:
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return {m.name: tar.extractfile(m).read() if m.isfile() else None for m in tar}


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_skipped_layers_become_empty_files_and_every_other_member_is_unchanged(fmt):
    raw = _archive(fmt)
    whole = _members(raw)
    rng = random.Random(7)
    for _ in range(25):  # any chunking of the stream gives the same result
        cuts = sorted(rng.sample(range(1, len(raw)), 12))
        chunks = [raw[i:j] for i, j in zip([0, *cuts], [*cuts, len(raw)])]
        out = b"".join(filtered(chunks, {A, C}))
        got = _members(out)
        assert got.keys() == whole.keys()
        assert got["blobs/sha256/" + "a" * 64] == b""
        # C sits behind a pax header (in the pax archive): passed unchanged, never guessed at.
        assert got["blobs/sha256/" + "c" * 64] == (whole["blobs/sha256/" + "c" * 64] if fmt == tarfile.PAX_FORMAT
                                                 else b"")
        for name in whole.keys() - {"blobs/sha256/" + "a" * 64, "blobs/sha256/" + "c" * 64}:
            assert got[name] == whole[name], name
        assert len(out) < len(raw) - 70_000


def test_a_pax_size_record_is_followed_so_the_member_after_it_is_found():
    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w", format=tarfile.PAX_FORMAT) as tar:
        big = tarfile.TarInfo("big")
        big.size, big.pax_headers = 5000, {"size": "5000"}  # a size given by pax, as Go writes one over 8 GiB
        tar.addfile(big, io.BytesIO(b"z" * 5000))
        layer = tarfile.TarInfo("blobs/sha256/" + "a" * 64)
        layer.size = 9000
        tar.addfile(layer, io.BytesIO(b"y" * 9000))
    raw = bytearray(blob.getvalue())
    at = raw.find(b"big\0", 512)  # the member's own header, after the pax one: its ustar size says 0
    raw[at + 124:at + 136] = b"%011o\0" % 0
    raw[at + 148:at + 156] = b" " * 8
    raw[at + 148:at + 156] = b"%06o\0 " % sum(raw[at:at + 512])
    got = _members(b"".join(filtered([bytes(raw)], {A})))
    assert got == {"big": b"z" * 5000, "blobs/sha256/" + "a" * 64: b""}


def test_nothing_to_skip_passes_the_stream_through_untouched():
    raw = _archive(tarfile.GNU_FORMAT)
    assert b"".join(filtered([raw[:1000], raw[1000:]], ())) == raw
