"""The beds' set-up lock (tests/conftest.py): a bed waits for the other's set-up, but not for ever."""

from __future__ import annotations

import fcntl

import pytest

from tests.conftest import _wait_for_lock


def test_a_held_setup_lock_ends_in_an_error_naming_it_and_a_free_one_is_taken(tmp_path):
    path = tmp_path / "setup.lock"
    with open(path, "a") as holder, open(path, "a") as waiter:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match=f"the other bed's set-up held {path} for over 0.2 s"):
            _wait_for_lock(waiter, 0.2)
        fcntl.flock(holder, fcntl.LOCK_UN)
        _wait_for_lock(waiter, 0.2)
        with open(path, "a") as third, pytest.raises(BlockingIOError):  # the waiter holds it now
            fcntl.flock(third, fcntl.LOCK_EX | fcntl.LOCK_NB)
