# ringd.Session's life and misuse: clear Python exceptions, never a crash or a hang.
"""Each misuse must raise the exception a caller can act on, naming what is wrong: bad
buffers (TypeError/ValueError before anything reaches libringd), ranks disagreeing (Mismatch on
every rank, naming them), calls after close (Closed), no daemon (ConnectError)."""
import gc
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import ranks
import ringd


def test_no_daemon_raises_connect_error(tmp_path):
    sock = str(tmp_path / "nobody.sock")
    t0 = time.monotonic()
    with pytest.raises(ringd.ConnectError) as e:
        ringd.Session(socket=sock, job="nobody", open_timeout_ms=2000)
    assert sock in str(e.value) and "ringd" in str(e.value)
    assert e.value.code == ringd.Result.CONNECT
    assert time.monotonic() - t0 < 10


def test_bad_options_raise_before_connecting(daemon):
    with pytest.raises(ringd.InvalidArgument, match="local_size"):
        ringd.Session(socket=daemon.sock, job="bad", world_size=1, local_size=2)
    with pytest.raises(TypeError, match="world_size"):
        ringd.Session(socket=daemon.sock, job="bad", world_size="2")


def test_buffers_ringd_cannot_take(daemon):
    with ringd.Session(socket=daemon.sock, job="misuse", op_timeout_ms=10000) as s:
        with pytest.raises(ValueError, match="contiguous"):
            s.allreduce("t", torch.zeros(4, 4).t())
        with pytest.raises(ValueError, match="contiguous"):
            s.allreduce("n", np.zeros((4, 4))[:, 1])
        for dt in (torch.bool, torch.int16, torch.int8, torch.complex64):
            with pytest.raises(TypeError, match="dtype"):
                s.allreduce("t", torch.zeros(3, dtype=dt))
        for dt in (np.int16, np.bool_, np.complex64, np.uint32):
            with pytest.raises(TypeError, match="dtype"):
                s.allreduce("n", np.zeros(3, dtype=dt))
        with pytest.raises(TypeError, match="byte order"):
            s.allreduce("n", np.zeros(3, dtype=">f4"))
        with pytest.raises(TypeError, match="CPU"):
            s.allreduce("m", torch.zeros(3, device="meta"))
        with pytest.raises(TypeError, match="numpy array"):
            s.allreduce("l", [1.0, 2.0])
        with pytest.raises(ValueError, match="needs 3"):
            s.allreduce("o", np.zeros(3, np.float32), out=np.zeros(4, np.float32))
        with pytest.raises(TypeError, match="must match"):
            s.allreduce("o", np.zeros(3, np.float32), out=np.zeros(3, np.float64))
        ro = np.zeros(3, np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            s.broadcast("ro", ro, 0)
        with pytest.raises(ringd.InvalidArgument, match="names"):
            s.allreduce("bad\nname", np.zeros(3))
        assert s.allreduce("empty", np.zeros(0)).shape == (0,)  # every rank passes none
        with pytest.raises(ValueError, match="2 counts for a job of 1 ranks"):
            s.allgatherv("v", np.zeros(3), [3, 0])
        with pytest.raises(ValueError, match="add up to 4"):
            s.reducescatter("v", np.zeros(3), recvcounts=[4])
        with pytest.raises(ringd.OutOfMemory, match="arena"):
            s.alloc(1 << 50)
        # After all that the session still works.
        assert s.allreduce("ok", np.ones(3)).tolist() == [1.0, 1.0, 1.0]


def test_calls_after_close_raise_closed(daemon):
    s = ringd.Session(socket=daemon.sock, job="closing")
    buf = s.array((8,), np.float32)
    buf[:] = 3
    view = torch.frombuffer(s.alloc(16), dtype=torch.float32)
    s.close()
    s.close()  # idempotent
    assert s.closed
    for call in (lambda: s.rank, lambda: s.allreduce("x", np.ones(2)), lambda: s.barrier(),
                 lambda: s.alloc(8), lambda: s.broadcast("b", np.ones(2), 0)):
        with pytest.raises(ringd.Closed, match="closed"):
            call()
    # Views of arena buffers outlive the arena without crashing the process.
    assert buf.tolist() == [0.0] * 8 and view.tolist() == [0.0] * 4
    buf[:] = 1
    del buf, view
    gc.collect()


def test_daemon_gone_mid_session(daemon):
    """A daemon killed under an open session: the next call fails fast with an Error."""
    s = ringd.Session(socket=daemon.sock, job="orphaned", op_timeout_ms=20000)
    assert s.allreduce("before", np.ones(2)).tolist() == [1.0, 1.0]
    daemon.kill()
    t0 = time.monotonic()
    with pytest.raises(ringd.Error) as e:
        s.allreduce("after", np.ones(2))
    assert not isinstance(e.value, ringd.Timeout), e.value
    assert time.monotonic() - t0 < 10
    with pytest.raises(ringd.Error):
        s.barrier("again")
    s.close()


# A rank of a one-node job as a process of its own, looping 16 MiB allreduces (they run on the
# daemon's workers) and recovering as ringd.h says: rank 0's counter broadcast after a failure.
# argv: socket, job, stop file, "victim" or "survivor". The victim submits its 6th allreduce
# last (the others already wait in it, so that it starts at once) and is killed (SIGKILL) as it
# runs. Prints "PID <pid>" once opened, then at the end one JSON line.
_LOOPER = r"""
import json, os, signal, sys, time
import numpy as np
import ringd
sock, job, stop, role = sys.argv[1:5]
s = ringd.Session(socket=sock, job=job, world_size=3, local_size=3, op_timeout_ms=20000)
print("PID", os.getpid(), flush=True)
x = np.ones(4 << 20, np.float32)
failures, i, after, size = [], 0, 0, 0
while after < 10:  # counted alike on every rank: x[1] says whether a rank saw the stop file
    if role == "victim" and i == 5:
        time.sleep(0.3)
        s.allreduce_async(f"loop.{i}", x)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        x[1] = float(os.path.exists(stop))
        y = s.allreduce(f"loop.{i}", x)
        assert y[0] == s.size and y[-1] == s.size, (y[0], s.size)
        i, after, size = i + 1, after + (y[1] > 0), s.size
    except ringd.MembershipChanged as e:
        failures.append(str(e))
        while True:
            try:
                c = s.broadcast(f"sync.{s.generation}", np.array([i]), root=0)
                i = int(c[0])
                break
            except ringd.MembershipChanged as e2:
                failures.append(str(e2))
print(json.dumps({"failures": failures, "size": size}), flush=True)
s.close()
"""


def test_a_rank_killed_mid_allreduce_on_one_node_raises_membership_changed_once_on_each_other(
        daemon, tmp_path):
    """kill -9 of one of three local ranks while a 16 MiB allreduce of all three runs: the other
    two get MembershipChanged once, naming its pid, and go on at size 2 (never a result at the
    old size in silence)."""
    stop = tmp_path / "stop"
    procs = [subprocess.Popen([sys.executable, "-c", _LOOPER, daemon.sock, "killed.one",
                               str(stop), "victim" if k == 2 else "survivor"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(3)]
    try:
        pids = [int(p.stdout.readline().split()[1]) for p in procs]
        assert procs[2].wait(60) == -signal.SIGKILL
        stop.touch()
        for p in procs[:2]:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err[-3000:]
            r = json.loads(out.strip().splitlines()[-1])
            assert r["size"] == 2, r
            assert len(r["failures"]) == 1 and f"pid {pids[2]}" in r["failures"][0], r
            # the op it died in, or when that one ended before the daemon saw the hang-up (its
            # answer then kept the old generation), the next
            assert "'loop.5'" in r["failures"][0] or "'loop.6'" in r["failures"][0], r
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def r_mismatch():
    """Ranks disagree on a tensor's count, then dtype: every rank gets Mismatch naming ranks."""
    s = ranks.session()
    r, n = s.rank, s.size
    seen = []
    for name, x in [("mm.count", np.ones(4 + (r == n - 1), np.float32)),
                    ("mm.dtype", np.ones(4, np.float32 if r == 0 else np.float64)),
                    ("mm.op", np.ones(4, np.float32))]:
        op = ringd.MAX if (name == "mm.op" and r == 0) else ringd.SUM
        try:
            s.allreduce(name, x, op=op)
            raise AssertionError(f"{name}: no error")
        except RuntimeError as e:  # what a Horovod script catches
            assert isinstance(e, ringd.Mismatch), repr(e)
            msg = str(e)
            assert name in msg and "rank" in msg, msg
            seen.append(msg)
    # The job goes on.
    assert s.allreduce("mm.after", np.ones(2)).tolist() == [n, n]
    return seen


def test_mismatch_names_the_ranks(cluster):
    msgs = cluster.run(r_mismatch)
    n = cluster.world
    for count, dtype, op in msgs:
        assert f"rank {n - 1} " in count and f"rank {n - 2} " in count, count
        assert "count 5" in count and "count 4" in count, count
        assert "rank 0 " in dtype and "rank 1 " in dtype and "f64" in dtype, dtype
        assert "rank 0 " in op and "op max" in op, op


def r_duplicate_names():
    """A second outstanding collective of one name is refused on every rank alike (the daemon
    alone would refuse it on one rank and leave the others' waiting), and the first finishes."""
    s = ranks.session()
    n = s.size
    h = s.allreduce_async("dup", np.ones(4))
    for again in (lambda: s.allreduce_async("dup", np.ones(4)),
                  lambda: s.broadcast("dup", np.ones(4), 0)):
        try:
            again()
            raise AssertionError("a second outstanding 'dup' was accepted")
        except ringd.InvalidArgument as e:
            assert "'dup' is still outstanding" in str(e), str(e)
    assert h.wait().tolist() == [n] * 4
    return s.allreduce("dup", np.ones(1)).tolist()  # free again once finished


def test_one_outstanding_collective_per_name(cluster):
    assert cluster.run(r_duplicate_names) == [[float(cluster.world)]] * cluster.world


def test_every_result_code_has_its_exception():
    classes = set()
    for code in ringd.Result:
        if code == ringd.Result.OK:
            continue
        e = ringd.errors.error_for(code, "what happened", "what to do")
        assert isinstance(e, ringd.Error) and type(e) is not ringd.Error, code
        assert e.code == code and e.message == "what happened" and "what to do" in str(e)
        classes.add(type(e))
    assert len(classes) == len(ringd.Result) - 1
    assert all(issubclass(c, RuntimeError) for c in classes)  # as Horovod's errors are
    assert isinstance(ringd.errors.error_for(1, "x"), ValueError)
    assert type(ringd.errors.error_for(99, "future code")) is ringd.Error


def r_close_with_pending():
    """A pending handle of a session closed under it raises Closed; the process goes on."""
    s = ranks.session()
    cfg = ranks.cfg()
    other = ringd.Session(job=cfg["tag"] + ".closing", op_timeout_ms=10000)
    h = other.allreduce_async(f"lonely.{other.rank}", np.ones(100))  # no rank matches it
    s.barrier("lonely.submitted")  # (a rank that closed first would end the other's op)
    assert not h.done()
    s.barrier("lonely.checked")
    other.close()
    try:
        h.wait()
        raise AssertionError("wait on a closed session returned")
    except ringd.Closed as e:
        assert "lonely" in str(e), str(e)
    assert h.done()
    return s.allreduce("after.close", np.ones(1)).tolist()


def test_handles_of_a_closed_session_raise_closed(one_node):
    assert one_node.run(r_close_with_pending) == [[2.0], [2.0]]


def r_expecting_another_generation():
    """A session told to expect another generation submits nothing, on every rank alike."""
    s = ranks.session()
    gen = s.generation
    s.expect_generation(gen + 1)
    try:
        s.allreduce("not.sent", np.ones(3))
        raise AssertionError("an op went out in a generation the session did not expect")
    except ringd.MembershipChanged as e:
        assert "tensor 'not.sent' was not submitted" in e.message, e.message
        assert f"from generation {gen + 1} to {gen}" in e.message, e.message
    finally:
        s.expect_generation(None)
    with pytest.raises(TypeError, match="generation"):
        s.expect_generation(-1)
    return s.allreduce("sent", np.ones(3)).tolist()


def test_a_session_expecting_another_generation_submits_nothing(cluster):
    assert cluster.run(r_expecting_another_generation) == [[float(cluster.world)] * 3] * \
        cluster.world


def test_library_lookup_reports_what_it_loaded():
    assert os.path.samefile(ringd.library_path(), os.environ["RINGD_LIBRARY"])
    major, minor, _ = ringd.library_version().split(".")
    assert (int(major), int(minor)) >= (0, 1)


def r_local_rank_asked():
    """Each process of a node asks for the local rank the others would not get by arrival (the
    reverse of its core session's), through Session(local_rank=) on even local ranks and
    ringd.torch's reading of a launcher's LOCAL_RANK on odd ones; each gets what it asked."""
    c, core = ranks.cfg(), ranks.session()
    ranks.hvd_shutdown()  # ringd.torch opens its session in this test's job below
    want = c["local"] - 1 - core.local_rank
    job = f"{c['tag']}.lr"
    if core.local_rank % 2 == 0:
        with ringd.Session(job=job, local_rank=want, open_timeout_ms=20000) as s:
            got = (s.local_rank, s.rank - core.rank + core.local_rank)
    else:
        os.environ["LOCAL_RANK"] = str(want)
        try:
            ringd.torch.init(job=job, open_timeout_ms=20000)
            got = (ringd.torch.local_rank(), ringd.torch.rank() - core.rank + core.local_rank)
        finally:
            ringd.torch.shutdown()
            del os.environ["LOCAL_RANK"]
    assert got == (want, want), f"asked for local rank {want}, got {got}"
    return got[0]


def test_each_process_gets_the_local_rank_it_asks_for(cluster):
    got = cluster.run(r_local_rank_asked)
    assert sorted(got) == sorted(list(range(cluster.local)) * cluster.nodes), got


def test_a_taken_local_rank_is_refused_naming_its_holder(daemon):
    """Two processes asking for one local rank: the second hears which process holds it."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    opts = dict(socket=daemon.sock, job="lr.taken", world_size=2, local_size=2, local_rank=0,
                open_timeout_ms=3000)

    def hold(q):
        try:
            ringd.Session(**opts)
        except ringd.Timeout:
            q.put("timeout")
        except Exception as e:  # noqa: BLE001 - reported to the test
            q.put(repr(e))

    q = ctx.Queue()
    p = ctx.Process(target=hold, args=(q,))
    p.start()
    try:
        time.sleep(0.5)
        with pytest.raises(ringd.Refused) as e:
            ringd.Session(**opts)
        assert "local rank 0" in str(e.value) and f"pid {p.pid}" in str(e.value), str(e.value)
        with pytest.raises(ringd.InvalidArgument):
            ringd.Session(**dict(opts, local_rank=2))
        assert q.get(timeout=10) == "timeout"
    finally:
        p.join(10)


def test_device_given_or_refused(daemon):
    """Without asking, a session gets the daemon's pick (None where it serves no GPU, as here
    without a driver); a device the daemon does not serve is refused, saying so."""
    with ringd.Session(socket=daemon.sock, job="dev.any") as s:
        assert s.device is None or s.device >= 0
        assert (s.device_uuid is None) == (s.device is None)
        assert s.device_uuid is None or s.device_uuid[:4] in ("GPU-", "MIG-")
        gpus = s.device is not None
    with pytest.raises(ringd.InvalidArgument) as e:
        ringd.Session(socket=daemon.sock, job="dev.63", device=63)
    assert "asked for CUDA device 63" in str(e.value)
    if not gpus:
        assert "serves no GPU" in str(e.value)


def test_device_arena_refused_saying_why_without_a_gpu(daemon):
    """A device arena is device memory on the session's GPU: a daemon serving none refuses the
    session, naming the size asked for and why it has no GPU; the option takes an int."""
    with ringd.Session(socket=daemon.sock, job="dev.probe") as s:
        gpus = s.device is not None
    if gpus:
        with ringd.Session(socket=daemon.sock, job="dev.arena", device_arena_size=4 << 20) as s:
            assert s.device is not None
        return
    with pytest.raises(ringd.InvalidArgument) as e:
        ringd.Session(socket=daemon.sock, job="dev.arena", device_arena_size=4 << 20)
    assert "device arena of 4194304 bytes" in str(e.value)
    # the daemon's refusal, or a libringd built without CUDA refusing first
    assert "serves no GPU" in str(e.value) or "built without CUDA" in str(e.value)
    with pytest.raises(TypeError, match="device_arena_size"):
        ringd.Session(socket=daemon.sock, job="dev.arena", device_arena_size="4M")
