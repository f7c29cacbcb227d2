# ringd.Session's collectives on every dtype, numpy and torch, sync and async, against a reference.
"""Every rank builds every rank's input from shared seeds, so each checks its own result
against a numpy reference computed in float64 (inputs are small integers, so every dtype,
float16 and bfloat16 included, must come out exact)."""
import gc
import weakref

import numpy as np
import pytest
import torch

import ranks
import ringd

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]
FLOATS = {"float32", "float64", "float16", "bfloat16"}


def _inputs(dtype, rank, kind, n, shape=(17,)):
    """Rank rank's input values (float64) for one collective: small integers, exact in every
    dtype when summed, multiplied ({1, 2} or {-2, -1, 1, 2}) or averaged over n ranks."""
    g = ranks.rng(DTYPES.index(dtype), rank, sum(map(ord, kind)))
    if kind == "prod":
        pool = [1, 2] if dtype == "uint8" else [-2, -1, 1, 2]
        return g.choice(pool, size=shape).astype(np.float64)
    lo = 0 if dtype == "uint8" else -8
    return g.integers(lo, 9, size=shape).astype(np.float64)


def _make(lib, dtype, values):
    if lib == "numpy":
        return values.astype(np.dtype(dtype))
    return torch.from_numpy(values.copy()).to(getattr(torch, dtype))


def _as_f64(x):
    if isinstance(x, torch.Tensor):
        return x.to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def _check(what, got, want):
    got = _as_f64(got)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: got {got.tolist()}, want {want.tolist()}")


_REDUCE = {"sum": lambda a: a.sum(0), "min": lambda a: a.min(0), "max": lambda a: a.max(0),
           "prod": lambda a: a.prod(0)}


def r_every_collective(dtype):
    """Allreduce (each op, sync/async, in place/out of place), scaled allreduce, broadcast and
    allgather of dtype on numpy (where numpy has it) and torch."""
    s = ranks.session()
    r, n = s.rank, s.size
    libs = ["torch"] if dtype == "bfloat16" else ["numpy", "torch"]
    checks = 0
    for lib in libs:
        for kind in ["sum", "avg", "min", "max", "prod"]:
            src = "sum" if kind == "avg" else kind
            every = np.stack([_inputs(dtype, q, src, n) for q in range(n)])
            if kind == "avg":
                want = every.sum(0) / n
                if dtype not in FLOATS:
                    want = np.trunc(want)  # ringd.h: integers truncate toward zero
            else:
                want = _REDUCE[kind](every)
            op = getattr(ringd, kind.upper()) if kind != "avg" else ringd.AVG
            for mode in ["sync", "async"]:
                for place in ["out", "in"]:
                    x = _make(lib, dtype, every[r])
                    name = f"{dtype}.{lib}.{kind}.{mode}.{place}"
                    out = x if place == "in" else None
                    if mode == "sync":
                        got = s.allreduce(name, x, out=out, op=op)
                    else:
                        h = s.allreduce_async(name, x, out=out, op=op)
                        got = h.wait()
                        assert h.done()
                    if place == "in":
                        assert got is x
                    else:
                        _check(f"{name}: the input changed", x, every[r])
                    _check(name, got, want)
                    checks += 1
        every = np.stack([_inputs(dtype, q, "sum", n) for q in range(n)])
        x = _make(lib, dtype, every[r])
        name = f"{dtype}.{lib}.scaled"
        if dtype in FLOATS:
            _check(name, s.allreduce(name, x, op=ringd.SUM, prescale=0.5, postscale=4.0),
                   every.sum(0) * 2)
            h = s.allreduce_async(name + ".async", x, op=ringd.AVG, prescale=2.0, postscale=0.5)
            _check(name + ".async", h.wait(), every.sum(0) / n)
        else:
            try:
                s.allreduce(name, x, prescale=2.0)
                raise AssertionError(f"{name}: scaling {dtype} did not fail")
            except ringd.InvalidArgument as e:
                assert "floating" in str(e), str(e)
        checks += 1
        root = n - 1
        every = np.stack([_inputs(dtype, q, "bcast", n, (3, 5)) for q in range(n)])
        x = _make(lib, dtype, every[r])
        assert s.broadcast(f"{dtype}.{lib}.bcast", x, root) is x
        _check(f"{dtype}.{lib}.bcast", x, every[root])
        x = _make(lib, dtype, every[r])
        h = s.broadcast_async(f"{dtype}.{lib}.bcast.async", x, 0)
        _check(f"{dtype}.{lib}.bcast.async", h.wait(), every[0])
        every = np.stack([_inputs(dtype, q, "gather", n, (3, 4)) for q in range(n)])
        x = _make(lib, dtype, every[r])
        _check(f"{dtype}.{lib}.gather", s.allgather(f"{dtype}.{lib}.gather", x),
               every.reshape(3 * n, 4))
        out = _make(lib, dtype, np.zeros((n, 3, 4)))
        h = s.allgather_async(f"{dtype}.{lib}.gather.async", x, out=out)
        assert h.wait() is out
        _check(f"{dtype}.{lib}.gather.async", out, every)
        out = _make(lib, dtype, np.zeros((n, 3, 4)))
        out[r] = x  # in place, MPI's way: the contribution already sits in this rank's slot
        s.allgather(f"{dtype}.{lib}.gather.inplace", out[r], out=out)
        _check(f"{dtype}.{lib}.gather.inplace", out, every)
        checks += 4
    s.barrier(f"{dtype}.done")
    return checks


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_collective_matches_numpy(cluster, dtype):
    counts = cluster.run(r_every_collective, dtype)
    assert counts == [counts[0]] * cluster.world and counts[0] > 0


def r_single_local_rank():
    s = ranks.session()
    r, n = s.rank, s.size
    x = np.arange(1 << 18, dtype=np.float32) * (r + 1)  # 1 MiB: the worker threads' ring
    got = s.allreduce("big", x)
    np.testing.assert_array_equal(got, np.arange(1 << 18, dtype=np.float32) * 3)
    t = torch.full((5,), float(r + 1), dtype=torch.bfloat16)
    s.allreduce("small", t, out=t, op=ringd.PROD)
    assert t.tolist() == [2.0] * 5
    return n


def test_ring_with_one_rank_per_node(two_single_nodes):
    """With one local rank the ring works in the output buffer itself."""
    assert two_single_nodes.run(r_single_local_rank) == [2, 2]


def r_names_in_any_order():
    """Each rank submits the same named allreduces in its own order and waits for them in yet
    another; sizes straddle the daemon's inline and fusion thresholds."""
    s = ranks.session()
    r, n = s.rank, s.size
    sizes = [1, 7, 1000, 3000, 70000, 300000, 5, 2048, 40000, 1, 333, 262144]
    order = ranks.rng(r, 1).permutation(len(sizes))
    handles = {}
    for k in order:
        x = np.full(sizes[k], float(r + 1 + k), dtype=np.float32)
        handles[k] = s.allreduce_async(f"order.{k}", x)
    for k in ranks.rng(r, 2).permutation(len(sizes)):
        want = sum(q + 1 + k for q in range(n))
        got = handles[k].wait()
        assert got.shape == (sizes[k],) and np.all(got == want), (k, got[:4], want)
    return [int(k) for k in order]


def test_names_submitted_in_different_orders(cluster):
    orders = cluster.run(r_names_in_any_order)
    assert len({tuple(o) for o in orders}) > 1, "every rank used the same order"


def r_arena_buffers():
    """Buffers from the arena go to the daemon without a copy, and work like any other."""
    s = ranks.session()
    r, n = s.rank, s.size
    a = s.array((4, 8), np.float64)
    a[:] = r + 1
    t = s.tensor((16,), torch.int32)
    t.fill_(r + 1)
    raw = s.alloc(64)
    v = np.frombuffer(raw, dtype=np.uint8)
    v[:] = r + 1
    outside = np.zeros(4)
    assert s.in_arena(a) and s.in_arena(t) and s.in_arena(raw) and s.in_arena(v)
    assert not s.in_arena(outside)
    s.allreduce("arena.a", a, out=a)
    s.allreduce("arena.t", t, out=t, op=ringd.MAX)
    s.allreduce("arena.raw", raw, out=raw)
    total = n * (n + 1) // 2
    assert np.all(a == total) and torch.all(t == n) and np.all(v == total)
    out = s.array((n * 16,), np.int32)
    s.allgather("arena.gather", t, out=out)
    assert np.all(out == n)
    s.free(out)
    return True


def test_arena_buffers_are_zero_copy(cluster):
    assert cluster.run(r_arena_buffers) == [True] * cluster.world


def _submit_and_forget(s, r):
    """Async allreduces whose arrays only their handles reference."""
    return [s.allreduce_async(f"keep.{i}", np.full(100000, float(r + i), dtype=np.float32))
            for i in range(4)]


def r_async_keeps_buffers_alive():
    """The caller's arrays may be dropped while a collective runs: the handle keeps them (ASan
    would see libringd write freed memory otherwise). A handle dropped unwaited is reaped."""
    s = ranks.session()
    r, n = s.rank, s.size
    handles = _submit_and_forget(s, r)
    gc.collect()
    junk = [np.ones(100000, dtype=np.float32) for _ in range(8)]  # reuse freed memory, if any
    for i, h in enumerate(handles):
        got = h.wait()
        assert np.all(got == sum(q + i for q in range(n))), (i, got[:3])
    del junk
    out = np.zeros(3)
    ref = weakref.ref(out)
    s.allreduce_async("dropped", np.ones(3), out=out)  # the Handle dies at once
    del out
    gc.collect()
    assert ref() is not None, "the output of a pending collective was freed"
    for i in range(5):  # a later call reaps the request once it finished
        s.barrier(f"dropped.after.{i}")
    assert not s._st.pending, s._st.pending
    return True


def test_async_handles_keep_buffers_alive(cluster):
    assert cluster.run(r_async_keeps_buffers_alive) == [True] * cluster.world


def r_reducescatter_and_allgatherv():
    """Session.reducescatter (even and per-rank counts, numpy and torch) and allgatherv (given
    counts, and counts the ranks learn: sync, and async waited in rank-specific orders)."""
    s = ranks.session()
    r, n = s.rank, s.size
    every = [np.arange(6 * n, dtype=np.float64) * (q + 1) for q in range(n)]
    want = sum(every)
    got = s.reducescatter("rs.even", every[r].astype(np.float32))
    _check("reducescatter even", got, want[6 * r:6 * r + 6])
    counts = [(q * 5) % 7 for q in range(n)]
    x = torch.arange(sum(counts), dtype=torch.int64) * (r + 1)
    got = s.reducescatter("rs.v", x, recvcounts=counts, op=ringd.MAX)
    first = sum(counts[:r])
    _check("reducescatter v", got,
           (np.arange(sum(counts), dtype=np.float64) * n)[first:first + counts[r]])
    mine = np.full((r % 3, 2), r, dtype=np.int32)  # rows of 2, rank-specific row counts
    rows = [q % 3 for q in range(n)]
    want_rows = np.concatenate([np.full((q % 3, 2), q, dtype=np.int32) for q in range(n)])
    _check("allgatherv given", s.allgatherv("agv.given", mine, [2 * k for k in rows]),
           want_rows.astype(np.float64))
    got = s.allgatherv("agv.learnt", mine)
    assert got.shape == (sum(rows), 2), got.shape
    _check("allgatherv learnt", got, want_rows.astype(np.float64))
    a = s.allgatherv_async("agv.a", mine)
    b = s.allgatherv_async("agv.b", mine * 2)
    for h in ((a, b) if r % 2 == 0 else (b, a)):
        h.wait()
    _check("allgatherv async a", a.wait(), want_rows.astype(np.float64))
    _check("allgatherv async b", b.wait(), want_rows.astype(np.float64) * 2)
    assert a.counts == [2 * k for k in rows], a.counts
    return True


def test_reducescatter_and_allgatherv(cluster):
    assert cluster.run(r_reducescatter_and_allgatherv) == [True] * cluster.world


def r_process_sets():
    """Session.process_set: two overlapping sets used at once; a rank outside gets None."""
    s = ranks.session()
    r, n = s.rank, s.size
    a = s.process_set(range(1, n))
    b = s.process_set([0, n - 1])
    assert (a is not None) == (r != 0) and (b is not None) == (r in (0, n - 1)), (r, a, b)
    got = []
    if a is not None:
        ha = a.allreduce_async("x", np.array([float(r)]))
    if b is not None:
        got.append(b.allreduce("x", np.array([10.0 * r]))[0])
    if a is not None:
        got.append(ha.wait()[0])
        assert a.size == n - 1 and a.rank == r - 1, (a.size, a.rank)
        a.close()
    if b is not None:
        b.close()
    return got


def test_process_sets(cluster):
    n = cluster.world
    got = cluster.run(r_process_sets)
    for q in range(n):
        expect = []
        if q in (0, n - 1):
            expect.append(10.0 * (n - 1))
        if q != 0:
            expect.append(float(n * (n - 1) // 2))
        assert got[q] == expect, (q, got[q], expect)
