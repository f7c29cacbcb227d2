# Rank processes of the Python tests: a loop that runs test functions sent by the pytest process.
"""The worker side of conftest.Cluster.

Each rank process (forked from the pytest process, which has torch and numpy imported) sets
the RINGD_* variables of its node, opens a ringd.Session of the cluster's job ("<tag>.core")
and then runs the functions the test sends it, one at a time, replying ("ok", rank, value) or
("error", rank, traceback). Test functions run on every rank at once and
check their own results against a numpy/torch reference, raising AssertionError when wrong.

Helpers for those functions: session() (the core Session), hvd() (ringd.torch, initialised on
first use in its own job; hvd_shutdown(), hvd_restart()), gloo() (a torch.distributed Gloo
group of the same ranks), cfg().
"""
import datetime
import os
import traceback

import numpy
import torch

import ringd
import ringd.torch

_cfg = None
_session = None
_hvd_generation = 0
_gloo = None


def cfg():
    """The cluster's settings for this rank: socket, world, local, tag, tmp, index."""
    return _cfg


def session():
    """This rank's core ringd.Session (job "<tag>.core")."""
    return _session


def hvd():
    """ringd.torch, initialised on first use in job "<tag>.hvd<n>" (n: see hvd_restart)."""
    if not ringd.torch.is_initialized():
        ringd.torch.init(job=f"{_cfg['tag']}.hvd{_hvd_generation}",
                         op_timeout_ms=_cfg["op_timeout_ms"])
    return ringd.torch


def hvd_shutdown():
    """Shuts ringd.torch down if it runs; the next hvd() opens it in a new job (every rank must
    call it at the same time)."""
    global _hvd_generation
    if ringd.torch.is_initialized():
        ringd.torch.shutdown()
    _hvd_generation += 1


def hvd_restart():
    """Shuts ringd.torch down if it runs and initialises it in a new job (every rank must call
    it at the same time)."""
    hvd_shutdown()
    return hvd()


def gloo():
    """torch.distributed with the Gloo backend over the same ranks as hvd() (its ranks)."""
    global _gloo
    import torch.distributed as dist

    if _gloo is None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        h = hvd()
        dist.init_process_group("gloo", init_method=f"file://{_cfg['tmp']}/gloo.store",
                                rank=h.rank(), world_size=h.size(),
                                timeout=datetime.timedelta(seconds=60))
        _gloo = dist
    return _gloo


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
    if ringd.torch.is_initialized():
        ringd.torch.shutdown()
    _session.close()
    if _gloo is not None:
        _gloo.destroy_process_group()
    conn.send(("bye", rank, None))
