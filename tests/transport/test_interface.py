"""One transport interface: every implementation has every member, and the local one streams for real."""

import inspect

import pytest

from deployctl.core import Command
from deployctl.transport import Transport
from deployctl.transport.local import LocalTransport
from deployctl.transport.ssh import SshTransport
from tests.fakes.transport import FakeTransport

MEMBERS = [name for name, _ in inspect.getmembers(Transport, inspect.isfunction) if not name.startswith("_")]
ATTRIBUTES = list(Transport.__annotations__)


def missing_members(transport) -> list[str]:
    """The Protocol's members an instance lacks (its attributes are set in __init__, so a class cannot say)."""
    return [name for name in MEMBERS + ATTRIBUTES
            if not hasattr(transport, name) or (name in MEMBERS and not callable(getattr(transport, name)))]


@pytest.mark.parametrize("cls", [SshTransport, LocalTransport, FakeTransport], ids=lambda c: c.__name__)
def test_every_implementation_has_every_member_with_its_signature(cls):
    assert set(MEMBERS) == {"run", "run_streaming", "open_stream", "put", "get", "close"}
    for name in MEMBERS:
        ours, theirs = inspect.signature(getattr(Transport, name)), inspect.signature(getattr(cls, name))
        assert list(ours.parameters) == list(theirs.parameters), (cls.__name__, name)
    assert ATTRIBUTES == ["name", "address"]


@pytest.mark.parametrize("make", [LocalTransport, FakeTransport], ids=["LocalTransport", "FakeTransport"])
def test_every_instance_has_every_member_and_attribute(make):
    transport = make("here")
    assert missing_members(transport) == [] and transport.name == "here"
    assert isinstance(transport.address, str) and transport.address


def test_local_streams_carry_more_than_a_pipe_holds_both_ways():
    here = LocalTransport("here")
    source = here.open_stream(Command(("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x")))  # as docker save
    sink = here.open_stream(Command(("sh", "-c", "tr -d x | wc -c")))  # as docker load: reads all, says little
    moved = 0
    for chunk in iter(lambda: source.read(1 << 20), b""):
        sink.write(chunk)
        moved += len(chunk)
    assert source.finish() == (0, b"", b"") and moved == 3000000
    code, out, err = sink.finish()
    assert (code, out.strip(), err) == (0, b"0", b"")


def test_a_local_stream_reports_exit_code_and_stderr():
    stream = LocalTransport("here").open_stream(Command(("sh", "-c", "echo saved; echo broken >&2; exit 3")))
    assert stream.read(100) == b"saved\n"
    assert stream.finish() == (3, b"", b"broken\n")
    stream.close()


def test_run_streaming_hands_over_stderr_lines_as_they_come():
    lines = []
    result = LocalTransport("here").run_streaming(Command(("sh", "-c", "echo P 1 2 >&2; echo out")), lines.append)
    assert lines == ["P 1 2"] and result.stdout == "out\n" and result.exit_code == 0
