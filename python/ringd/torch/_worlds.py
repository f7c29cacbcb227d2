"""The ringd job each world of this process opens in.

Horovod's shutdown() then init(), and torch's destroy_process_group() then
init_process_group(), start a new world on every rank. The ranks do not leave the last world at
the same instant: a rank that re-initialises first would join its peers' sessions of the last
world, about to leave, and its first collective would fail with a membership change. So each
world a process opens in a job is a job of its own: the first under the job's name, the k-th
after it under "<job>.<k>" (every rank re-initialises as often, so they meet there).

A process started later to join a job whose other ranks have re-initialised (an elastic
replacement) opens the first world, under the job's own name, and does not meet them: re-join
such a job under RINGD_JOB="<job>.<k>"."""

import collections
import os

from ..session import Session

_opened = collections.Counter()  # job name -> worlds this process opened in it


def open_world(job=None, **options):
    """Opens this process's next world of job (None: RINGD_JOB, else ringd's "default") as a
    Session with options."""
    base = job if job is not None else (os.environ.get("RINGD_JOB") or "default")
    k = _opened[base]
    s = Session(job=job if k == 0 else f"{base}.{k}", **options)
    _opened[base] += 1
    return s
