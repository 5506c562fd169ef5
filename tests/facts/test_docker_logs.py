"""`docker logs` answers: the container's lines merged by timestamp, or docker's own failure (captured samples)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployctl.facts.docker_logs import LogsAnswer, parse_docker_logs

SAMPLES = Path(__file__).parent.parent / "fixtures" / "docker-logs"


@pytest.mark.parametrize("case, failure", [("no-such-container", "missing"), ("daemon-down", "daemon")])
def test_docker_failures_are_recognised_not_taken_for_lines(case, failure):
    folder = SAMPLES / case
    stderr = (folder / "stderr.txt").read_text()
    answer = parse_docker_logs(int((folder / "exit_code.txt").read_text()), "", stderr)
    assert answer == LogsAnswer(failure=failure, detail=stderr.strip())


def test_both_streams_merge_in_time_order_and_an_unknown_failure_keeps_docker_words():
    out = "2024-05-01T10:00:00.000000001Z INFO started\n2024-05-01T10:00:02.000000000Z INFO ready\n"
    err = "2024-05-01T10:00:01.500000000Z WARNING Error response from daemon: not mine\n"
    assert parse_docker_logs(0, out, err).lines == (
        ("2024-05-01T10:00:00.000000001Z", "INFO started"),
        ("2024-05-01T10:00:01.500000000Z", "WARNING Error response from daemon: not mine"),
        ("2024-05-01T10:00:02.000000000Z", "INFO ready"))
    assert parse_docker_logs(1, "", "Error response from daemon: configured logging driver does not support "
                                    "reading\n").failure == "failed"
    assert parse_docker_logs(127, "", "sh: docker: not found\n").failure == "no-docker"


def test_the_blocks_and_stamps_the_log_probes_share():
    from deployctl.facts.docker_logs import MARK, marked_blocks, split_stamp, stamp_seconds

    text = f"junk before\n{MARK} c1 200\nline a\nline b\n{MARK} c2\n"
    assert list(marked_blocks(text, 2)) == [("c1", "200", "line a\nline b"), ("c2", "", "")]
    assert split_stamp("2026-11-25T23:10:16.000000007Z INFO up\r") == ("2026-11-25T23:10:16.000000007Z", "INFO up")
    assert split_stamp("Error response from daemon: No such container: c2") is None
    assert stamp_seconds("2026-11-25T12:00:00+08:00") == stamp_seconds("2026-11-25T04:00:00Z")
    assert stamp_seconds("2026-11-25T04:00:00.5Z") - stamp_seconds("2026-11-25T04:00:00Z") == 0.5
