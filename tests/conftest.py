"""Session fixtures shared by the whole suite: the test bed (real hosts, dockerd, S3) on demand."""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import signal

import pytest

# The second xdist worker's bed is a second one (tests/testbed/layout.py BED_ID), set before anything imports the
# layout: the bed's tests are split in two groups (pytest_itemcollected), one per worker, each with a bed of its own.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit() and int(_WORKER[2:]) > 0:
    os.environ.setdefault("DEPLOYCTL_TESTBED_ID", str(int(_WORKER[2:]) + 1))


def _unavailable(reason: str) -> None:
    # In CI a missing test bed is a failure, on a developer's machine a skip with the reason.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"test bed unavailable: {reason}", pytrace=False)
    pytest.skip(f"test bed unavailable: {reason}")


def _hold_the_bed_lock() -> None:
    """One bed per machine: a second pytest process (another run, or a second xdist worker whose bed tests lost
    their group) fails here with the holder's pid, instead of tearing down the first bed's namespaces."""
    from tests.testbed import layout

    path = f"{layout.state_dir()}.lock"  # beside the state dir: cleanup_leftovers removes the dir, never this
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        _unavailable(f"another process holds the test bed's lock {path} (its last pytest holder: pid {holder}); "
                     "bed tests on two xdist workers mean their xdist group was lost")
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _BED_LOCK.append(handle)  # held until this process exits


_BED_LOCK: list = []
# The longest one bed waits for the other's set-up: a first set-up on a fresh machine builds the images and fetches
# the routers' wheels (minutes); a set-up still running past this is stuck, and says so.
SETUP_WAIT_S = 1800


def _wait_for_lock(handle, seconds: float) -> None:
    """flock `handle` exclusively, or RuntimeError naming the lock after `seconds` (its holder is not waited for
    ever: a bed's set-up failure is the reason the fixture gives)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the other bed's set-up held {handle.name} for over {seconds:g} s") from None
            time.sleep(0.5)


@pytest.fixture(scope="session")
def testbed():
    """ONE test bed for this worker: DEPLOYCTL_TESTBED_HOSTS hosts (default 4), S3, images; torn down at the end."""
    from tests.testbed import Testbed, cleanup_leftovers, layout, netns

    if os.geteuid() != 0:
        _unavailable("needs root (network namespaces, mounts, dockerd)")
    _hold_the_bed_lock()
    n_hosts = int(os.environ.get("DEPLOYCTL_TESTBED_HOSTS", "4"))
    bed = Testbed(n_hosts)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def cleanup():
        netns.enter_bed()  # the session's last test may have been one of the others
        cleanup_leftovers()

    def on_signal(signum, frame):
        cleanup()
        raise SystemExit(128 + signum)

    atexit.register(cleanup)
    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        netns.enter_bed()
        try:
            with open(layout.setup_lock(), "a") as lock:  # the other bed may be building the cache both use
                _wait_for_lock(lock, SETUP_WAIT_S)
                bed.up()
        except Exception as error:  # any set-up failure: clean up, then fail/skip with the reason
            cleanup_leftovers()
            _unavailable(f"set-up failed: {error}")
        yield bed
    finally:
        netns.enter_bed()
        bed.down()
        atexit.unregister(cleanup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.fixture
def restore_profiles(testbed):
    """Reset every host's emulated NPUs (and ip_forward) after a test that changes them."""
    yield testbed
    for host in testbed.hosts:
        testbed.reset_profile(host.name)
        testbed.set_ip_forward(host.name, 1)


def pytest_itemcollected(item):
    """Mark every test that needs the test bed (directly or through a fixture): `-m "not testbed"` runs the rest.
    Marked here, as each item is collected, so that the marks exist before any plugin's
    pytest_collection_modifyitems reads them: xdist's worker turns `xdist_group` into the `@group` node id suffix
    there, and under pytest 9.2 a tryfirst conftest hook no longer ran before it (the bed's tests went to both
    workers, two beds fought over the same namespaces: CI failed every bed test)."""
    uses_bed = "testbed" in getattr(item, "fixturenames", ())
    if uses_bed:
        item.add_marker(pytest.mark.testbed)
    if item.get_closest_marker("real_engine") is not None:
        # The real engine's tests share one group: one engine at a time on 2 cores, and one group name (an item
        # with two groups gets a third, joined name in xdist).
        item.add_marker(pytest.mark.xdist_group("testbed"))
    elif uses_bed:
        # Two groups, one bed each (pyproject's addopts: two workers; xdist hands the two largest groups out
        # first, one to each). A module joins the second with TESTBED_GROUP = "testbed2", chosen by --durations so
        # that the two take about as long.
        item.add_marker(pytest.mark.xdist_group(getattr(item.module, "TESTBED_GROUP", "testbed")))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A bed test runs in its bed's network (a second bed's own namespace), every other test in the machine's:
    before any fixture of the item, so a module's bed fixture is set up there too."""
    if "DEPLOYCTL_TESTBED_ID" not in os.environ or os.geteuid() != 0:
        return  # not root: the bed fixture skips (or fails in CI) with the reason
    from tests.testbed import netns

    if "testbed" in getattr(item, "fixturenames", ()):
        netns.enter_bed()
    else:
        netns.leave_bed()


def pytest_collection_modifyitems(config, items):
    """The real engine's tests (tests/real_engine) run only when `-m` names them: its ~80 s start on 2 cores and
    3 GB venv are no part of the default run. The tune on it (`real_engine_tune`, four engine starts) only when `-m`
    names that marker itself: `-m real_engine` leaves it to its own CI stage."""
    named = set(re.findall(r"\w+", config.getoption("markexpr", "") or ""))
    dropped = [item for item in items if _gate(item) not in (None, *named)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(dropped)
        items[:] = [item for item in items if item not in gone]


def _gate(item):
    """The marker `-m` must name for the item to run, or None."""
    for marker in ("real_engine_tune", "real_engine"):
        if item.get_closest_marker(marker) is not None:
            return marker
    return None


def pytest_terminal_summary(terminalreporter):
    """One clear line when test bed tests were skipped, so a skipped run is never mistaken for a green one."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith("test bed unavailable: "):
            reason = reason.removeprefix("test bed unavailable: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        terminalreporter.write_line(f"{count} test bed tests skipped: {reason}", yellow=True, bold=True)
