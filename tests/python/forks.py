# Forked children in the Python tests' rank processes, reaped within a bound.
"""reap(pid, what): waits for a forked child (30 s at most, then kills it and fails the test)
and fails the test unless it exited with status 0. Used by rank processes that fork (the
fork-safety tests of test_torch_ops.py and dist_worker.py)."""
import os
import time


def reap(pid, what, seconds=30):
    deadline = time.monotonic() + seconds
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"the forked child hung {what}")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status[1]) == 0, f"the child failed: {status}"
