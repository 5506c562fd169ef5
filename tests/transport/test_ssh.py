"""SshTransport against a real sshd on the test bed: the whole interface, streams in both directions."""

from __future__ import annotations

import pytest

from deployctl.core import Command
from deployctl.spec.model import Host, SshSettings
from deployctl.transport.ssh import SshTransport
from tests.transport.test_interface import missing_members


@pytest.fixture
def tb1(testbed):
    host = testbed.hosts[0]
    settings = SshSettings(identity_file=str(host.identity_file), known_hosts=str(host.known_hosts))
    transport = SshTransport(Host(name=host.name, address=host.address, ssh=settings))
    yield transport
    transport.close()


def test_an_ssh_transport_has_every_member_and_attribute(testbed, tb1):
    assert missing_members(tb1) == []
    assert (tb1.name, tb1.address) == (testbed.hosts[0].name, testbed.hosts[0].address)


def test_an_ssh_stream_carries_more_than_a_window_in_and_reports_exit_and_stderr(tb1):
    # more than paramiko's 2 MiB window, so write() must wait for the far side to read
    sink = tb1.open_stream(Command(("sh", "-c", "wc -c; echo done >&2; exit 4")))
    chunk = b"x" * (1 << 20)
    for _ in range(3):
        sink.write(chunk)
    code, out, err = sink.finish()
    sink.close()
    assert (code, out.strip(), err) == (4, b"3145728", b"done\n")


def test_an_ssh_stream_is_read_to_its_end(tb1):
    source = tb1.open_stream(Command(("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' y; echo fine >&2")))
    received = bytearray()
    for chunk in iter(lambda: source.read(1 << 16), b""):
        received += chunk
    code, rest, err = source.finish()
    source.close()
    assert (code, len(received) + len(rest), set(received + rest), err) == (0, 3000000, {ord("y")}, b"fine\n")


def test_ssh_run_streaming_hands_over_stderr_lines_and_keeps_stdout(tb1):
    lines = []
    result = tb1.run_streaming(Command(("sh", "-c", "echo P 1 2 >&2; echo out; echo P 2 2 >&2; exit 3")),
                               lines.append)
    assert lines == ["P 1 2", "P 2 2"] and (result.stdout, result.exit_code) == ("out\n", 3)
