"""Runs one hook where it is sent (the control machine or a host; stdlib Python 3.7+, sent with `python3 -c`):
the hook's words are argv, its environment (the deployment's facts and the spec's ${VAR} values) arrives as JSON
on stdin so that no secret is ever a word of any process; the hook runs in a session of its own, its output and
errors together on stdout, and after `timeout` seconds its whole process group gets TERM, then KILL 5 s later."""

import json
import os
import signal
import subprocess
import sys

MARK = "deployctl-hook:"  # the lines this program adds on stderr (execute/hooks.py reads them)
TIMED_OUT = 124  # as coreutils' timeout(1) exits


def main():
    request = json.loads(sys.stdin.read())
    env = dict(os.environ)
    env.update(request["env"])
    timeout = request["timeout"]
    try:
        child = subprocess.Popen(sys.argv[1:], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    except OSError as error:
        sys.stderr.write("%s cannot run %s: %s\n" % (MARK, sys.argv[1], error.strerror or error))
        return 127 if isinstance(error, FileNotFoundError) else 126
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _signal_group(child.pid, signal.SIGKILL)
            child.wait()
        _signal_group(child.pid, signal.SIGKILL)  # what it started and left behind
        sys.stderr.write("%s timed out after %s s\n" % (MARK, timeout))
        return TIMED_OUT


def _signal_group(pid, number):
    try:
        os.killpg(pid, number)
    except OSError:
        pass  # the group is gone already


if __name__ == "__main__":
    sys.exit(main())
