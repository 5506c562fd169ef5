"""The deploy lock: atomic, refused while held, taken over only from a dead holder on this machine."""

import json
import socket

import pytest

from deployctl.errors import HostError
from deployctl.lock import DeployLock
from deployctl.transport.local import LocalTransport


def hold(directory, host, pid):
    (directory / "lock").mkdir(parents=True)
    (directory / "lock" / "holder").write_text(json.dumps(
        {"user": "alice", "host": host, "pid": pid, "action": "up", "since": "2026-11-23T06:00:00+00:00"}))


def test_lock_is_exclusive_and_history_is_written_on_release(tmp_path):
    state = tmp_path / "dep"
    with DeployLock(LocalTransport(), str(state), "up") as lock:
        with pytest.raises(HostError, match="locked by another deploy: up by"):
            DeployLock(LocalTransport(), str(state), "up").__enter__()
        lock.history = {"action": "up", "result": "ok"}
    assert not (state / "lock").exists()
    assert json.loads((state / "history.jsonl").read_text())["result"] == "ok"


def test_a_live_or_foreign_holder_is_respected(tmp_path):
    hold(tmp_path, "another-workstation", 1)
    with pytest.raises(HostError, match="alice@another-workstation"):
        DeployLock(LocalTransport(), str(tmp_path), "up").__enter__()


def test_a_dead_holder_from_this_machine_is_taken_over(tmp_path):
    hold(tmp_path, socket.gethostname(), 2 ** 22 + 12345)  # beyond pid_max: no such process
    with DeployLock(LocalTransport(), str(tmp_path), "up"):
        holder = json.loads((tmp_path / "lock" / "holder").read_text())
        assert holder["user"] != "alice"
