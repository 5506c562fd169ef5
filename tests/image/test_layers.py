"""Which layers the targets hold, and the `docker save` stream with those layers emptied (deployctl/image/layers.py)."""

from __future__ import annotations

import io
import os
import random
import tarfile

import pytest

from deployctl.image.layers import chain_ids, filtered, held_digests, held_prefix, skippable, v1_layer_chain

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


# What dockerd 20.10.24 (Debian bookworm) wrote for an image of 3 layers: its `docker save` names each layer
# `<v1 ID>/layer.tar` beside `<v1 ID>/json` (moby v20.10.24 image/tarexport/save.go `saveLayer`), the v1 ID being
# image/v1 `CreateID` of that JSON with the layer's chain ID. Real output, so the test does not echo the code.
DIFF_IDS = ["sha256:e9659a43fdfb46bf92b40aebeb3da3d26c772784bd9aaa24b294e85c87cd62df",
            "sha256:b9cd9313181def8bee7686c8f8cbfec8a4e82c52d31a0da88720ae76dfb706f7",
            "sha256:25a44771390f03ae63e2380ee1571a00cd034bf1cb7a335ef8d0e85066f16c6d"]
_EMPTY_CONFIG = ('"container_config":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":'
                 'false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,'
                 '"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null}')
V1_BASE = "d7420569ea9b294d1515bb538f7ffec641e473472da847bee8d544964cb14005"
V1_MID = "af694b2160ed90d995c96da8295b367acff1c3ffb8e47792f697685c6821a2cb"
V1_JSON = {V1_BASE: f'{{"id":"{V1_BASE}","created":"1970-01-01T00:00:00Z",{_EMPTY_CONFIG},"os":"linux"}}',
           V1_MID: f'{{"id":"{V1_MID}","parent":"{V1_BASE}","created":"1970-01-01T00:00:00Z",{_EMPTY_CONFIG},'
                   f'"os":"linux"}}'}


def test_chain_ids_and_an_older_engines_v1_json_name_the_layer_it_holds():
    chains = chain_ids(DIFF_IDS)
    assert chains[0] == DIFF_IDS[0]
    assert chains[1] == "sha256:eba25c7a0b4429985c164471a11d6d885b8af6273173bfb1335df20bedc8be9a"  # the engine's
    assert v1_layer_chain(V1_BASE, V1_JSON[V1_BASE].encode(), chains) == chains[0]
    assert v1_layer_chain(V1_MID, V1_JSON[V1_MID].encode(), chains) == chains[1]
    assert v1_layer_chain(V1_MID, V1_JSON[V1_MID].encode(), chains[:1]) is None  # not held: it travels
    assert v1_layer_chain(V1_MID, b"not json", chains) is None
    assert held_digests(DIFF_IDS, 2) == {DIFF_IDS[0], DIFF_IDS[1], chains[1]}
    assert held_digests([A, B, A], 2) == {B, chain_ids([A, B])[1]}  # A again on top: its file is linked to


def _legacy_archive(top: bytes) -> bytes:
    """The 20.10 layout in archive.Tar's order (each directory's VERSION, json, layer.tar; then manifest.json)."""
    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for v1_id, layer in sorted([(V1_BASE, os.urandom(30_000)), (V1_MID, os.urandom(2_000)), ("f" * 64, top)]):
            folder = tarfile.TarInfo(v1_id)
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
            for name, data in (("VERSION", b"1.0"), ("json", V1_JSON.get(v1_id, "{}").encode()),
                               ("layer.tar", layer)):
                info = tarfile.TarInfo(f"{v1_id}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("manifest.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"[]"))
    return blob.getvalue()


@pytest.mark.parametrize("held", [1, 2])
def test_an_older_engines_held_layer_tars_travel_empty_and_the_rest_unchanged(held):
    raw = _legacy_archive(os.urandom(5_000))
    whole = _members(raw)
    rng = random.Random(held)
    for _ in range(20):  # any chunking: the json may arrive cut anywhere
        cuts = sorted(rng.sample(range(1, len(raw)), 15))
        out = b"".join(filtered([raw[i:j] for i, j in zip([0, *cuts], [*cuts, len(raw)])],
                                held_digests(DIFF_IDS, held)))
        got = _members(out)
        emptied = {f"{v}/layer.tar" for v in [V1_BASE, V1_MID][:held]}
        assert got.keys() == whole.keys()
        assert all(got[name] == b"" for name in emptied)
        assert all(got[name] == whole[name] for name in whole.keys() - emptied)
