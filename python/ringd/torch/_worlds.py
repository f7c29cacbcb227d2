"""The ringd job each world of this process opens in.

Horovod's shutdown() then init(), and torch's destroy_process_group() then
init_process_group(), start a new world on every rank. The ranks do not leave the last world at
the same instant: a rank that re-initialises first would join its peers' sessions of the last
world, about to leave, and its first collective would fail with a membership change. So each
world a process opens in a job is a job of its own: the first under the job's name, the k-th
after it under "<job>.<k>" (every rank re-initialises as often, so they meet there).

A process started later, to join ranks that have re-initialised (an elastic replacement),
opens its first world under the job's own name and does not meet them: re-initialising and
replacing processes in one job do not mix (Horovod's elastic mode never re-initialises). A
failed open counts no world: the call may be tried again in the same one."""

import collections
import os

from ..errors import InvalidArgument, Result
from ..session import Session

_NAME_MAX = 256  # ringd's job names: 1..256 printable ASCII bytes

_opened = collections.Counter()  # job name -> worlds this process opened in it


def opened(job=None):
    """How many worlds this process has opened in job so far (the index of its next)."""
    return _opened[job if job is not None else (os.environ.get("RINGD_JOB") or "default")]


def open_world(job=None, **options):
    """Opens this process's next world of job (None: RINGD_JOB, else ringd's "default") as a
    Session with options."""
    base = job if job is not None else (os.environ.get("RINGD_JOB") or "default")
    k = _opened[base]
    name = job if k == 0 else f"{base}.{k}"
    if k > 0 and len(name) > _NAME_MAX:
        raise InvalidArgument(Result.INVALID,
                              f"re-initialising job '{base}' opens its world {k} as job "
                              f"'{name}', longer than ringd's {_NAME_MAX} bytes: use a shorter "
                              "job name (RINGD_JOB)")
    s = Session(job=name, **options)
    _opened[base] += 1
    return s
