"""run_batch: many commands, one round trip, exact outputs and exit codes per command."""

from deployctl.batch import run_batch
from deployctl.core import Command
from deployctl.transport.local import LocalTransport


def test_outputs_stderr_and_codes_are_kept_apart_exactly():
    commands = [
        Command(("printf", "a\nb\n")),
        Command(("printf", "no newline")),
        Command(("sh", "-c", "echo oops >&2; exit 3")),
        Command(("no-such-tool-deployctl",)),
        Command(("echo", "$HOME; rm -rf /", "'quoted'")),
    ]
    results = run_batch(LocalTransport(), commands)
    assert [r.stdout for r in results[:2]] == ["a\nb\n", "no newline"]
    assert (results[2].exit_code, results[2].stderr) == (3, "oops\n")
    assert results[3].exit_code == 127
    assert results[4].stdout == "$HOME; rm -rf / 'quoted'\n"
