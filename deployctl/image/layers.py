"""Which of an image's layers its targets already hold, and a `docker save` stream without them.

`docker load` into Docker's own image store (the graph drivers, overlay2 …) unpacks the whole archive first, then
registers each layer only if the engine does not hold its chain ID yet (moby image/tarexport/load.go, `Load`:
`lss.Get(r.ChainID())` before `loadLayer`, the same in 20.10 and 28): the bytes of a layer the target has are read
from disk and never used, so such a layer can travel as an empty file and the load is unchanged. Which member holds
a layer depends on the source's engine (moby image/tarexport/save.go): Docker >= 25 writes it as
`blobs/sha256/<diff ID>` (`saveConfigAndLayer`); older ones as `<v1 ID>/layer.tar`, right after `<v1 ID>/json`,
the v1 image JSON whose digest, with the layer's chain ID added, is the v1 ID (`saveImage` via image/v1
`CreateID`), so the JSON names its layer before the layer's bytes pass. A chain ID covers the layers below, so a
layer counts as held only with the same layers under it: the part of the image's layer list that starts some image
on the target. Pure: no I/O."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, Iterator, Sequence

BLOCK = 512
_BLOB = "blobs/sha256/"
_V1_JSON = re.compile(r"([0-9a-f]{64})/json")
_V1_JSON_MAX = 1 << 20  # a v1 image JSON is a few KiB; a bigger member is passed without being read


def held_prefix(layers: Sequence[str], images: Iterable[Sequence[str]]) -> int:
    """How many of `layers`, from the bottom, an engine holding `images` (their layer lists) already has."""
    best = 0
    for other in images:
        count = 0
        for mine, theirs in zip(layers, other):
            if mine != theirs:
                break
            count += 1
        best = max(best, count)
    return best


def skippable(layers: Sequence[str], held: int) -> frozenset[str]:
    """The diff IDs whose bytes need not travel when the first `held` layers are on every target (a diff ID that
    also appears higher up, e.g. an empty layer repeated, still travels)."""
    return frozenset(layers[:held]) - frozenset(layers[held:])


def chain_ids(layers: Sequence[str]) -> list[str]:
    """The chain ID of each layer (moby layer/layer.go `CreateChainID`: sha256 of "<chain below> <diff ID>")."""
    chains: list[str] = []
    for diff_id in layers:
        chains.append(diff_id if not chains else
                      "sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


def held_digests(layers: Sequence[str], held: int) -> frozenset[str]:
    """What names the layers that need not travel, whichever engine saves them: their diff IDs (Docker >= 25's
    blob names) and their chain IDs (what an older engine's v1 IDs are made of). A layer whose diff ID also
    appears higher up travels: an older engine writes the second one as a link to the first one's file."""
    skip = skippable(layers, held)
    return skip | {chain for diff_id, chain in zip(layers[:held], chain_ids(layers)) if diff_id in skip}


def _raw_members(text: str) -> dict[str, str]:
    """The top-level members of a JSON object, each value as its own text (as Go's json.RawMessage keeps it)."""
    decoder, members = json.JSONDecoder(), {}
    at = text.index("{") + 1
    while True:
        at = len(text) - len(text[at:].lstrip())
        if text[at] == "}":
            return members
        key, at = decoder.raw_decode(text, at)
        at = text.index(":", at) + 1
        at = len(text) - len(text[at:].lstrip())
        _, end = decoder.raw_decode(text, at)
        members[key] = text[at:end]
        at = text.index(",", end) + 1 if text[end:].lstrip()[:1] == "," else end


def v1_layer_chain(v1_id: str, data: bytes, chains: Iterable[str]) -> str | None:
    """Which of `chains` the layer saved as `<v1_id>/` (Docker < 25) is, from its `json`; None if none is.

    moby image/v1/imagev1.go `CreateID`: the v1 JSON without "id", as a map with "layer_id" (the chain ID) and
    "parent" ("sha256:" + the parent's v1 ID) added, marshalled again (keys sorted) and hashed. save.go sets "os"
    only after that for every layer but the top one, so the JSON is tried with and without it. A match is a
    sha256 match: a JSON this cannot rebuild only means the layer travels."""
    try:
        members = _raw_members(data.decode("utf-8"))
        parent = json.loads(members.pop("parent", '""'))
    except (ValueError, IndexError):
        return None
    members.pop("id", None)
    if parent:
        members["parent"] = json.dumps("sha256:" + parent)
    variants = [members] + ([{k: v for k, v in members.items() if k != "os"}] if "os" in members else [])
    for chain in chains:
        for variant in variants:
            fields = {**variant, "layer_id": json.dumps(chain)}
            text = "{" + ",".join(f"{json.dumps(k)}:{fields[k]}" for k in sorted(fields)) + "}"
            if hashlib.sha256(text.encode()).hexdigest() == v1_id:
                return chain
    return None


def _octal(field: bytes) -> int:
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _emptied(header: bytes) -> bytes:
    """The same tar header with size 0 and its checksum made again."""
    block = bytearray(header)
    block[124:136] = b"%011o\0" % 0
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def _pax(data: bytes) -> dict[str, str]:
    """The records of a pax extended header ("<length> <key>=<value>\\n" each)."""
    records, at = {}, 0
    while at < len(data):
        space = data.find(b" ", at)
        if space < 0:
            break
        length = int(data[at:space])
        key, _, value = data[space + 1:at + length - 1].partition(b"=")
        records[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        at += length
    return records


class SaveFilter:
    """Feed a `docker save` tar stream in; out comes the same stream with the layers in `skip` (held_digests)
    emptied: `blobs/sha256/<diff ID>`, or `<v1 ID>/layer.tar` once `<v1 ID>/json` showed it is one of them. Every
    member's size is followed (ustar, base-256, or a pax `size` record), so the stream stays whole; a member whose
    size or name comes from a pax or GNU header passes unchanged."""

    def __init__(self, skip: Iterable[str]) -> None:
        self.chains = frozenset(skip)
        self.names = {_BLOB + digest.split(":", 1)[-1] for digest in self.chains}
        self.pending = b""  # an incomplete header
        self.left = 0  # bytes of the current member's data and padding still to pass or drop
        self.data_left = 0  # of which data (not padding), for a header member being kept
        self.dropping = False
        self.keep: bytearray | None = None  # the data of a pax/GNU header member, kept to read
        self.kind = b""
        self.v1_id = ""  # the layer directory of the v1 JSON being kept
        self.extra: dict[str, str] = {}  # what the last pax/GNU header says of the next member
        self.dropped = 0

    def feed(self, data: bytes) -> bytes:
        if not self.names:
            return data
        out = bytearray()
        view = memoryview(data)
        while view:
            if self.left:
                take = min(self.left, len(view))
                if self.dropping:
                    self.dropped += take
                else:
                    out += view[:take]
                if self.keep is not None and self.data_left:
                    self.keep += view[:min(take, self.data_left)]
                    self.data_left -= min(take, self.data_left)
                self.left -= take
                view = view[take:]
                if not self.left and self.keep is not None:
                    self._read_extension(bytes(self.keep))
                    self.keep = None
                continue
            need = BLOCK - len(self.pending)
            self.pending += bytes(view[:need])
            view = view[need:]
            if len(self.pending) < BLOCK:
                break
            header, self.pending = self.pending, b""
            out += self._header(header)
        return bytes(out)

    def _read_extension(self, data: bytes) -> None:
        if self.v1_id:
            if v1_layer_chain(self.v1_id, data, self.chains):
                self.names.add(f"{self.v1_id}/layer.tar")
            self.v1_id = ""
        elif self.kind == b"x":
            self.extra.update(_pax(data))
        elif self.kind == b"L":
            self.extra["path"] = data.split(b"\0", 1)[0].decode("utf-8", "replace")

    def _header(self, header: bytes) -> bytes:
        if header == b"\0" * BLOCK:  # end-of-archive blocks
            self.left, self.dropping = 0, False
            return header
        field = header[124:136]
        size = int.from_bytes(field[1:], "big") if field[0] & 0x80 else _octal(field)
        kind = header[156:157]
        extra, self.extra = self.extra, {}
        if "size" in extra:
            size = int(extra["size"])
        self.left = (size + BLOCK - 1) // BLOCK * BLOCK
        self.dropping, self.kind = False, kind
        if kind in (b"x", b"L"):  # about the next member: read it as it passes
            self.keep, self.data_left, self.extra = bytearray(), size, extra
            if not self.left:
                self._read_extension(b"")
                self.keep = None
            return header
        name = header[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        prefix = header[345:500].split(b"\0", 1)[0].decode("utf-8", "replace")
        full = f"{prefix}/{name}" if prefix else name
        if kind in (b"0", b"\0") and not extra and full in self.names:
            self.dropping = True
            return _emptied(header)
        v1 = _V1_JSON.fullmatch(full)
        if kind in (b"0", b"\0") and v1 and size <= _V1_JSON_MAX:  # read as it passes: is its layer.tar held?
            self.keep, self.data_left, self.v1_id = bytearray(), size, v1.group(1)
            if not self.left:
                self._read_extension(b"")
                self.keep = None
        return header


def filtered(chunks: Iterable[bytes], skip: Iterable[str]) -> Iterator[bytes]:
    """The chunks of a `docker save` stream with the layers in `skip` emptied (unchanged when `skip` is empty)."""
    tar = SaveFilter(skip)
    for chunk in chunks:
        out = tar.feed(chunk)
        if out:
            yield out
