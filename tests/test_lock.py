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


class _MeetAfterFirstRefusal(LocalTransport):
    """A LocalTransport that makes two deploys meet after each saw the dead holder, so both take over at once."""

    def __init__(self, barrier):
        super().__init__()
        self.barrier, self.refused = barrier, False

    def run(self, command, **kw):
        result = super().run(command, **kw)
        if not self.refused and result.exit_code == 75:
            self.refused = True
            self.barrier.wait(timeout=30)
        return result


def test_two_deploys_taking_over_the_same_dead_holder_leave_exactly_one_holding(tmp_path):
    import threading

    for round_ in range(10):
        state = tmp_path / f"dep{round_}"
        hold(state, socket.gethostname(), 2 ** 22 + 12345)
        barrier = threading.Barrier(2)
        outcomes: list = []
        release, decided = threading.Event(), threading.Semaphore(0)

        def deploy():
            lock = DeployLock(_MeetAfterFirstRefusal(barrier), str(state), "up")
            try:
                lock.__enter__()
            except HostError as exc:
                outcomes.append(exc.message)
                decided.release()
                return
            outcomes.append("held")
            decided.release()
            release.wait(timeout=30)  # keep holding until the other one has decided
            lock.__exit__(None, None, None)

        threads = [threading.Thread(target=deploy) for _ in range(2)]
        for thread in threads:
            thread.start()
        assert decided.acquire(timeout=30) and decided.acquire(timeout=30)
        release.set()
        for thread in threads:
            thread.join()
        held = [o for o in outcomes if o == "held"]
        refused = [o for o in outcomes if "deployment is locked by another deploy: up by" in o]
        assert len(held) == 1 and len(refused) == 1, outcomes
        assert not (state / "lock").exists()


@pytest.mark.parametrize("note", [
    '{"user": "alice", "host": "HERE", "pid": ',  # cut
    '[1, 2]', '"HERE"', "[" * 100000,  # not an object, nested past the parser's depth
    '{"user": "alice", "host": "HERE", "action": "up", "since": "x"}',  # no pid
    '{"user": "alice", "host": "HERE", "pid": 1e400, "action": "up", "since": "x"}',  # inf
    '{"user": "alice", "host": "HERE", "pid": 18446744073709551616, "action": "up", "since": "x"}',  # past a C int
    '{"user": "alice", "host": "HERE", "pid": -4206942, "action": "up", "since": "x"}',  # a process group
    '{"user": "alice", "host": "HERE", "pid": "12", "action": "up", "since": "x"}',  # a string
    '{"user": ["alice"], "host": "HERE", "pid": 4206942, "action": "up", "since": "x"}',  # a list
], ids=["cut", "list", "string", "nested", "no-pid", "inf", "huge", "negative", "pid-string", "user-list"])
def test_a_damaged_holder_note_is_refused_with_a_clear_error_never_taken_over(tmp_path, note):
    """The holder note is read back from the host: damaged, it ended in a traceback (OverflowError, RecursionError),
    or a negative pid — os.kill of a process group no one runs — judged the holder dead and took the lock over."""
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "holder").write_text(note.replace("HERE", socket.gethostname()))
    with pytest.raises(HostError, match=r"locked by another deploy: holder unknown \(its note is damaged\)") as caught:
        DeployLock(LocalTransport(), str(tmp_path), "up").__enter__()
    assert f"remove {tmp_path}/lock" in caught.value.hint
    assert (tmp_path / "lock" / "holder").read_text() == note.replace("HERE", socket.gethostname())
