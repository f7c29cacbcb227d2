# Rank processes of the Python tests: a loop that runs test functions sent by the pytest process.
"""The worker side of conftest.Cluster.

Each rank process (forked from the pytest process, which has torch and numpy imported) sets
the RINGD_* variables of its node, opens a ringd.Session of the cluster's job ("<tag>.core")
and then runs the functions the test sends it, one at a time, replying ("ok", rank, value) or
("error", rank, traceback). Test functions run on every rank at once and
check their own results against a numpy/torch reference, raising AssertionError when wrong.

Helpers for those functions: session() (the core Session), cfg(), rng().
"""
import os
import traceback

import numpy
import torch

import ringd

_cfg = None
_session = None


def cfg():
    """The cluster's settings for this rank: socket, world, local, tag, tmp, index."""
    return _cfg


def session():
    """This rank's core ringd.Session (job "<tag>.core")."""
    return _session


def rng(*seed):
    """A numpy generator seeded by the integers given (the same on every rank)."""
    return numpy.random.default_rng(list(seed))


def serve(conn, config):
    """The rank process's main loop (multiprocessing target)."""
    global _cfg, _session
    _cfg = config
    os.environ["RINGD_SOCKET"] = config["socket"]
    os.environ["RINGD_WORLD_SIZE"] = str(config["world"])
    os.environ["RINGD_LOCAL_SIZE"] = str(config["local"])
    torch.set_num_threads(1)
    rank = -1
    try:
        _session = ringd.Session(job=f"{config['tag']}.core",
                                 op_timeout_ms=config["op_timeout_ms"])
        rank = _session.rank
        conn.send(("ok", rank, None))
    except BaseException:
        conn.send(("error", rank, traceback.format_exc()))
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg is None:
            break
        fn, args = msg
        try:
            value = fn(*args)
            conn.send(("ok", rank, value))
        except BaseException:
            conn.send(("error", rank, traceback.format_exc()))
    _session.close()
    conn.send(("bye", rank, None))
