"""`up`'s ledger counts from when the process started: the interpreter's start-up is the user's wall time too."""

import subprocess
import sys
import time

from deployctl.cli import process_started


def test_process_start_is_before_now_and_after_the_parent_launched_it():
    before = time.monotonic()
    code = ("import time; from deployctl.cli import process_started; "
            "print(time.monotonic() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    # the child's start-up counted, none of the parent's time (start times come in clock ticks: 10 ms)
    assert 0 < age <= time.monotonic() - before + 0.02
    assert process_started() <= time.monotonic()
