"""Images shipped as a chain on the test bed (issue 32): the control machine sends the stream once, to the first
target; each target loads it and passes it on; a target that cannot take part gets it straight from the control
machine; every target ends with the source's image ID."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from deployctl.core import Command, Secret
from deployctl.image.ship import BOOT, CHAIN_PORT, ship_image

IMAGE = "deployctl/chain-test:1"
TARGETS = ["tb2", "tb3", "tb4"]


class _Counting:
    """A transport wrapper that counts the bytes written into its streams and keeps every command."""

    def __init__(self, inner, log, keep=False):
        self.inner, self.log, self.name, self.address = inner, log, inner.name, inner.address
        self.written = 0
        self.kept = bytearray() if keep else None

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
                if outer.kept is not None:
                    outer.kept += data
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


def _transports(bed, log, keep=False):
    from deployctl.transport.connect import open_transports
    from deployctl.spec.model import Host, SshSettings

    hosts = [Host(h.name, h.address, SshSettings(user=h.user, port=h.port, identity_file=str(h.identity_file),
                                                 known_hosts=str(h.known_hosts))) for h in bed.hosts[:4]]
    transports, errors = open_transports(hosts)
    assert not errors
    return {name: _Counting(t, log, keep) for name, t in transports.items()}


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


ENGINES = ["bed", "docker26"]  # the bed's dockerd 20.10 (`<v1 ID>/layer.tar`), Debian trixie's 26 (blobs by diff ID)


@pytest.fixture(params=ENGINES)
def source_engine(request, testbed):
    """tb1's engine for the test: the bed's own, or a newer dockerd on an image store of its own that gets the
    bed's base image from tb2 (the targets keep the bed's 20.10, which loads either layout)."""
    bed = testbed
    if request.param == "bed":
        yield bed
        return
    from tests.testbed import images, newer_docker

    binary = newer_docker.ensure_dockerd()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("no newer dockerd for the bed (Debian trixie's docker.io)")
        pytest.skip("no newer dockerd for the bed (Debian trixie's docker.io)")
    docker = images.docker_cli()
    bed.use_dockerd("tb1", str(binary))
    try:
        assert not bed.docker_on("tb1", "version", "--format", "{{.Server.Version}}").stdout.startswith("20.")
        base = bed.run_on("tb2", [docker, "save", bed.base_image], input=b"", timeout=300).stdout
        bed.run_on("tb1", [docker, "load"], input=base, timeout=300)
        yield bed
    finally:
        bed.use_dockerd("tb1", None)


@pytest.mark.parametrize("targets", [["tb2"], TARGETS], ids=["one", "chain"])
def test_the_base_every_target_holds_travels_as_an_empty_file_and_the_load_is_whole(source_engine, targets):
    """An image built on the bed's base, which every target holds: what the control machine sends is the new
    layer, not the base (~50 MB), whatever engine saved it (issue 39: before, a source older than Docker 25
    sent its whole image, and the bed, dockerd 20.10 under a 28.2.2 client, never left a layer out); every
    target ends with the source's image ID (ship_image checks it)."""
    import io
    import tarfile

    from tests.testbed import images

    bed, image = source_engine, "deployctl/chain-layers:1"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", f"FROM {bed.base_image}\nCOPY marker /marker\n".encode()),
                           ("marker", os.urandom(1 << 20))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    docker = images.docker_cli()
    bed.run_on("tb1", [docker, "build", "-q", "-t", image, "-"], input=context.getvalue(), timeout=300)
    base = json.loads(bed.docker_on("tb1", "image", "inspect", "--format", "{{json .RootFS.Layers}}",
                                    bed.base_image).stdout)
    layers = json.loads(bed.docker_on("tb1", "image", "inspect", "--format", "{{json .RootFS.Layers}}",
                                      image).stdout)
    assert layers[:len(base)] == base and len(layers) == len(base) + 1
    base_size = int(bed.docker_on("tb2", "image", "inspect", "--format", "{{.Size}}", bed.base_image).stdout)
    for host in targets:
        bed.docker_on(host, "image", "rm", image, check=False)
    transports = _transports(bed, [], keep=targets == ["tb2"])
    try:
        seconds = ship_image(image, transports["tb1"], [transports[h] for h in targets])
        assert sorted(seconds) == sorted(targets)
        sent = sum(transports[h].written for h in targets)
        assert 1 << 20 < sent < base_size // 4, (sent, base_size)
        if targets == ["tb2"]:  # straight into tb2's `docker load`: the very archive, base layer emptied
            with tarfile.open(fileobj=io.BytesIO(bytes(transports["tb2"].kept))) as archive:
                names = ("layer.tar", *(diff_id.split(":")[1] for diff_id in layers))
                sizes = {m.name: m.size for m in archive if m.name.endswith(names)}
            assert sorted(sizes.values())[:len(base)] == [0] * len(base) and max(sizes.values()) > 1 << 20
        source_id = _image_id(bed, "tb1", image)
        assert source_id.startswith("sha256:") and all(_image_id(bed, h, image) == source_id for h in targets)
    finally:
        for transport in transports.values():
            transport.inner.close()
        for host in ["tb1", *targets]:
            bed.docker_on(host, "image", "rm", image, check=False)
