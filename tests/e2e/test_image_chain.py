"""Images shipped as a chain on the test bed (issue 32): the control machine sends the stream once, to the first
target; each target loads it and passes it on; a target that cannot take part gets it straight from the control
machine; every target ends with the source's image ID."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from deployctl.core import Command, Secret
from deployctl.image.ship import BOOT, CHAIN_PORT, ship_image

IMAGE = "deployctl/chain-test:1"
TARGETS = ["tb2", "tb3", "tb4"]


class _Counting:
    """A transport wrapper that counts the bytes written into its streams and keeps every command."""

    def __init__(self, inner, log):
        self.inner, self.log, self.name, self.address = inner, log, inner.name, inner.address
        self.written = 0

    def run(self, command, **kw):
        self.log.append((self.name, command))
        return self.inner.run(command, **kw)

    def open_stream(self, command):
        self.log.append((self.name, command))
        stream, outer = self.inner.open_stream(command), self

        class Counted:
            def read(self, size):
                return stream.read(size)

            def write(self, data):
                outer.written += len(data)
                stream.write(data)

            def finish(self):
                return stream.finish()

            def close(self):
                stream.close()

        return Counted()


@pytest.fixture
def tagged(testbed):
    testbed.docker_on("tb1", "tag", testbed.base_image, IMAGE)
    for host in TARGETS:
        testbed.docker_on(host, "image", "rm", IMAGE, check=False)
    yield testbed
    for host in ["tb1", *TARGETS]:
        testbed.docker_on(host, "image", "rm", IMAGE, check=False)


def _transports(bed, log):
    from deployctl.transport.connect import open_transports
    from deployctl.spec.model import Host, SshSettings

    hosts = [Host(h.name, h.address, SshSettings(user=h.user, port=h.port, identity_file=str(h.identity_file),
                                                 known_hosts=str(h.known_hosts))) for h in bed.hosts[:4]]
    transports, errors = open_transports(hosts)
    assert not errors
    return {name: _Counting(t, log) for name, t in transports.items()}


def _image_id(bed, host, image=IMAGE):
    return bed.docker_on(host, "image", "inspect", "--format", "{{.Id}}", image, check=False).stdout.strip()


def _ship(bed, log):
    """Ship IMAGE from tb1 to TARGETS over fresh SSH transports: (seconds per target, the transports, closed)."""
    transports = _transports(bed, log)
    try:
        return ship_image(IMAGE, transports["tb1"], [transports[h] for h in TARGETS]), transports
    finally:
        for transport in transports.values():
            transport.inner.close()


def test_the_control_machine_sends_one_copy_and_every_target_loads_the_same_image(tagged):
    bed, log = tagged, []
    seconds, transports = _ship(bed, log)
    assert sorted(seconds) == TARGETS
    source_id = _image_id(bed, "tb1")
    assert source_id.startswith("sha256:") and all(_image_id(bed, h) == source_id for h in TARGETS)
    # The stream went to the first target only; the others' relays got their job (and the token) on stdin.
    assert transports["tb2"].written > 0 and transports["tb3"].written == transports["tb4"].written == 0
    relays = [(name, c) for name, c in log if isinstance(c, Command) and c.argv[:2] == ("python3", "-c")]
    assert sorted(name for name, _ in relays) == TARGETS
    assert all(c.argv == ("python3", "-c", BOOT) for _, c in relays)
    assert all(isinstance(c.stdin, Secret) for name, c in relays if name != "tb2")


def test_a_target_whose_port_is_taken_is_skipped_by_the_chain_and_served_directly(tagged):
    """Something else listens on tb3's chain port (takes connections and closes them): tb2 passes the stream on to
    tb4, and tb3, whose relay cannot listen, gets the image straight from the control machine."""
    bed, log = tagged, []
    squat = ("import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
             f"s.bind(('{bed.host('tb3').address}',{CHAIN_PORT}))\ns.listen(8)\nprint('up',flush=True)\n"
             "while True:\n c,_=s.accept()\n c.close()\n")
    squatter = subprocess.Popen(["ip", "netns", "exec", bed.host("tb3").netns, sys.executable, "-c", squat],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "up"
        seconds, transports = _ship(bed, log)
    finally:
        squatter.kill()
        squatter.wait()
    assert sorted(seconds) == TARGETS
    source_id = _image_id(bed, "tb1")
    assert all(_image_id(bed, h) == source_id for h in TARGETS)
    # tb3 got a direct `docker load` stream from the control machine after the chain; tb4 none (the chain's).
    direct = [name for name, c in log if isinstance(c, Command) and c.argv == ("docker", "load")]
    assert direct == ["tb3"] and transports["tb4"].written == 0


def _current_layout(legacy: bytes) -> bytes:
    """A `docker save` archive as Docker >= 25 writes it (each layer as blobs/sha256/<diff ID>, manifest.json
    pointing there), made from the bed's Docker 20.10 one (<v1 ID>/layer.tar); both engines load either."""
    import hashlib
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(legacy)) as old:
        files = {m.name: old.extractfile(m).read() for m in old if m.isfile()}
    manifest = json.loads(files["manifest.json"])
    blobs = {}
    for item in manifest:
        config = files[item["Config"]]
        blobs[hashlib.sha256(config).hexdigest()] = config
        item["Config"] = "blobs/sha256/" + hashlib.sha256(config).hexdigest()
        layers = []
        for path in item["Layers"]:
            digest = hashlib.sha256(files[path]).hexdigest()  # an uncompressed layer's digest is its diff ID
            blobs[digest] = files[path]
            layers.append("blobs/sha256/" + digest)
        item["Layers"] = layers
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as new:
        for name, data in [*sorted(("blobs/sha256/" + d, b) for d, b in blobs.items()),
                           ("manifest.json", json.dumps(manifest).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_layers_every_target_holds_are_found_and_travel_empty_and_the_load_is_still_whole(testbed, monkeypatch):
    """An image built on the bed's base image, which every target holds: the ship finds the base's layers held
    on every target; its archive with them emptied is a fraction of the size, and a real `docker load` of it
    gives the source's image ID. The bed's Docker 20.10 names layers by v1 ID in `docker save`, so the ship
    leaves nothing out there; the test lifts that guard and rewrites the archive as Docker >= 25 writes it."""
    import io
    import tarfile

    from deployctl.image.layers import filtered
    from deployctl.image.ship import _held_layers
    from tests.testbed import images

    bed, image = testbed, "deployctl/chain-layers:1"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", f"FROM {bed.base_image}\nCOPY marker /marker\n".encode()),
                           ("marker", b"only this layer is new\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    docker = images.docker_cli()
    bed.run_on("tb1", [docker, "build", "-q", "-t", image, "-"], input=context.getvalue(), timeout=300)
    transports = _transports(bed, [])
    try:
        base = bed.docker_on("tb1", "image", "inspect", "--format", "{{json .RootFS.Layers}}", bed.base_image)
        assert _held_layers(image, transports["tb1"], [transports[h] for h in TARGETS]) == frozenset()
        monkeypatch.setattr("deployctl.image.ship.LAYER_NAMES_SINCE", 20)
        held = _held_layers(image, transports["tb1"], [transports[h] for h in TARGETS])
        assert held == set(json.loads(base.stdout))
        archive = _current_layout(bed.run_on("tb1", [docker, "save", image], input=b"").stdout)
        slim = b"".join(filtered([archive[i:i + 65536] for i in range(0, len(archive), 65536)], held))
        assert len(slim) < len(archive) // 20
        bed.docker_on("tb2", "image", "rm", image, check=False)
        bed.run_on("tb2", [docker, "load"], input=slim)
        assert _image_id(bed, "tb2", image) == _image_id(bed, "tb1", image)
    finally:
        for transport in transports.values():
            transport.inner.close()
        for host in ["tb1", *TARGETS]:
            bed.docker_on(host, "image", "rm", image, check=False)
