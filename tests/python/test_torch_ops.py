# ringd.torch's collectives (Horovod's names and semantics) against torch references, and misuse.
"""Each rank computes every rank's input from shared seeds and checks its own results."""
import json
import os
import threading
import time
import traceback
import warnings

import pytest
import torch

import forks
import ranks
import ringd

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.uint8]


def _input(dtype, rank, salt, shape=(2, 3)):
    """Small integers (exact in every dtype and op); {1, 2} for products."""
    g = torch.Generator().manual_seed(rank * 1000 + salt)
    if salt % 7 == 6:
        return torch.randint(1, 3, shape, generator=g).to(dtype)
    lo = 0 if dtype == torch.uint8 else -8
    return torch.randint(lo, 9, shape, generator=g).to(dtype)


def _same(what, got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got, want)
    assert torch.equal(got.double(), want.double()), (what, got.tolist(), want.tolist())


def r_allreduce_ops():
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    checks = 0
    for dtype in DTYPES:
        for salt, op in enumerate([hvd.Sum, hvd.Min, hvd.Max, hvd.Average, None, None,
                                   hvd.Product]):
            every = torch.stack([_input(dtype, q, salt) for q in range(n)]).double()
            if op in (hvd.Average, None):  # Average is the default op
                want = every.sum(0) / n
                if not dtype.is_floating_point:
                    want = torch.trunc(want)  # as Horovod: the scale cast toward zero
            else:
                want = {hvd.Sum: every.sum(0), hvd.Min: every.min(0).values,
                        hvd.Max: every.max(0).values, hvd.Product: every.prod(0)}[op]
            want = want.to(dtype)
            x = _input(dtype, r, salt)
            name = f"ops.{dtype}.{salt}" if salt % 2 == 0 else None  # named and unnamed
            _same(f"allreduce {dtype} {op}", hvd.allreduce(x, name=name, op=op), want)
            _same("the input", x, _input(dtype, r, salt))
            assert hvd.allreduce_(x, name=name, op=op) is x
            _same(f"allreduce_ {dtype} {op}", x, want)
            h = hvd.allreduce_async(_input(dtype, r, salt), name=name, op=op)
            _same(f"allreduce_async {dtype} {op}", hvd.synchronize(h), want)
            checks += 3
    x = torch.full((4,), float(r + 1))
    total = n * (n + 1) / 2
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
    assert got.tolist() == [total * 2] * 4, got
    got = hvd.allreduce(x, prescale_factor=2.0, postscale_factor=0.5)  # Average
    assert got.tolist() == [total / n] * 4, got
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = hvd.allreduce(x, average=False)
    assert got.tolist() == [total] * 4 and any(i.category is DeprecationWarning for i in w)
    try:
        hvd.allreduce(x, average=True, op=hvd.Sum)
        raise AssertionError("average and op together were accepted")
    except ValueError as e:
        assert "supersedes" in str(e)
    h = hvd.allreduce_async_(torch.ones(100000), name="polled")
    while not hvd.poll(h):
        pass
    assert hvd.synchronize(h).tolist() == [1.0] * 100000
    assert hvd.synchronize(h) is None  # Horovod: an unknown handle gives None
    return checks


def test_allreduce_ops_and_dtypes(cluster):
    checks = cluster.run(r_allreduce_ops)
    assert checks == [checks[0]] * cluster.world and checks[0] == 3 * 7 * len(DTYPES)


def r_small_integers_and_integer_scales():
    """int8, int16 and bool through every collective (reduced in int32 and wrapped back as
    torch's own arithmetic wraps), and integer tensors with prescale/postscale scaled as Horovod
    scales them: in float64, truncated back to the dtype."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    for dtype in (torch.int8, torch.int16, torch.bool):
        every = [(_input(torch.int64, q, 11) * 40).to(dtype) for q in range(n)]  # int8 wraps
        for op, fold in ((hvd.Sum, lambda a, b: a + b), (hvd.Min, torch.minimum),
                         (hvd.Max, torch.maximum)):
            want = every[0].clone()
            for e in every[1:]:
                want = fold(want.to(torch.int64), e.to(torch.int64)).to(dtype)
            _same(f"allreduce {dtype} {op}", hvd.allreduce(every[r], op=op), want)
        x = every[r].clone()
        hvd.broadcast_(x, root_rank=n - 1)
        _same(f"broadcast {dtype}", x, every[n - 1])
        rows = [torch.full((q + 1, 3), q % 2, dtype=torch.int64).to(dtype) for q in range(n)]
        _same(f"allgather {dtype}", hvd.allgather(rows[r]), torch.cat(rows))
        splits = [k + 1 for k in range(n)]
        mine = torch.cat([torch.full((k + 1,), (r + k) % 2 if dtype == torch.bool else r * 10 + k,
                                     dtype=torch.int64).to(dtype) for k in range(n)])
        got, received = hvd.alltoall(mine, splits=splits)
        want = torch.cat([torch.full((r + 1,), (q + r) % 2 if dtype == torch.bool else q * 10 + r,
                                     dtype=torch.int64).to(dtype) for q in range(n)])
        _same(f"alltoall {dtype}", got, want)
        assert received.tolist() == [r + 1] * n, received
    if n % 2 == 0:
        x = torch.arange(n * 2, dtype=torch.int16).view(n, 2) * (r + 1)
        want = (torch.arange(n * 2, dtype=torch.int64).view(n, 2) * (n * (n + 1) // 2))
        _same("reducescatter int16", hvd.reducescatter(x, op=hvd.Sum),
              want[r:r + 1].to(torch.int16))
    for dtype in (torch.int32, torch.int64, torch.int8):
        x = torch.tensor([7, -7, 3], dtype=dtype) * (r + 1)
        pre, post = 0.5, 3.0
        scaled = [torch.trunc(torch.tensor([7., -7., 3.]) * (q + 1) * pre) for q in range(n)]
        want = torch.trunc(sum(scaled) * post).to(dtype)
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=pre, postscale_factor=post)
        _same(f"allreduce {dtype} scaled", got, want)
    try:
        hvd.allreduce(torch.ones(2, dtype=torch.complex64), op=hvd.Sum)
        raise AssertionError("a complex allreduce was accepted")
    except TypeError as e:
        assert "complex" in str(e), e
    return True


def test_small_integers_and_integer_scales(cluster):
    assert cluster.run(r_small_integers_and_integer_scales) == [True] * cluster.world


def r_grouped_allgather_broadcast():
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    ts = [torch.full((3,), float(r)), torch.arange(5, dtype=torch.int64) * (r + 1),
          torch.full((2, 2), r + 1, dtype=torch.bfloat16), torch.zeros(0)]
    total = sum(range(n))
    got = hvd.grouped_allreduce(ts, op=hvd.Sum, name="group")
    assert got[0].tolist() == [float(total)] * 3
    assert got[1].tolist() == [i * n * (n + 1) // 2 for i in range(5)]
    assert got[2].tolist() == [[float(n * (n + 1) // 2)] * 2] * 2 and got[3].numel() == 0
    assert ts[0].tolist() == [float(r)] * 3  # inputs unchanged
    out = hvd.grouped_allreduce_(ts, op=hvd.Max)
    assert all(a is b for a, b in zip(out, ts)) and ts[0].tolist() == [float(n - 1)] * 3
    h = hvd.grouped_allreduce_async([torch.ones(2), torch.ones(3, dtype=torch.int32)])
    avg = hvd.synchronize(h)
    assert avg[0].tolist() == [1.0, 1.0] and avg[1].tolist() == [1, 1, 1]

    # allgather: first dimensions differ across ranks (rank 0 sends none), the rest match.
    mine = torch.full((r, 3), float(r))
    got = hvd.allgather(mine, name="ragged")
    want = torch.cat([torch.full((q, 3), float(q)) for q in range(n)])
    assert torch.equal(got, want), got
    got = hvd.allgather(torch.tensor([r, 10 * r], dtype=torch.int32))
    assert got.tolist() == [v for q in range(n) for v in (q, 10 * q)]
    h = hvd.allgather_async(torch.full((r + 1, 2), r, dtype=torch.uint8), name="ragged.async")
    got = hvd.synchronize(h)
    assert got.tolist() == [[q, q] for q in range(n) for _ in range(q + 1)]
    assert hvd.allgather(torch.zeros(0, 4), name="empty").shape == (0, 4)
    try:
        hvd.allgather(torch.zeros(2, 3 + (r == n - 1)), name="bad.shape")
        raise AssertionError("allgather of mismatched shapes returned")
    except ringd.Mismatch as e:
        assert f"rank {n - 1}'s (4,)" in str(e) and "rank 0's rows have shape (3,)" in str(e), e

    # broadcast: out of place leaves the input, in place overwrites it.
    root = n - 1
    x = torch.arange(4, dtype=torch.float64) + r
    got = hvd.broadcast(x, root_rank=root, name="b")
    assert got.tolist() == [float(root + i) for i in range(4)]
    assert x.tolist() == [float(r + i) for i in range(4)]
    assert hvd.broadcast_(x, root_rank=0, name="b_") is x and x.tolist() == [0.0, 1, 2, 3]
    y = torch.full((3,), r, dtype=torch.int64)
    h = hvd.broadcast_async_(y, 1)
    assert hvd.synchronize(h) is y and y.tolist() == [1, 1, 1]
    h = hvd.broadcast_async(torch.full((2,), float(r)), 0, name="b.async")
    assert hvd.synchronize(h).tolist() == [0.0, 0.0]

    hvd.barrier()
    last = hvd.join()
    assert 0 <= last < n
    return last


def test_grouped_allgather_broadcast_barrier_join(cluster):
    lasts = cluster.run(r_grouped_allgather_broadcast)
    assert len(set(lasts)) == 1  # every rank names the same last rank


def _uneven_batch(rank, step):
    g = torch.Generator().manual_seed(7919 * rank + step)
    return torch.randint(-4, 5, (3, 4), generator=g).float(), torch.randint(-4, 5, (3, 1),
                                                                             generator=g).float()


def r_uneven_data_join():
    """Horovod's uneven data: rank r has 2 + 2r batches, then joins; the DistributedOptimizer's
    allreduces of the ranks still training average zeros in for the joined ones, and the model
    broadcast from the last to join is the one computed here from every rank's batches."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1, bias=False)
    torch.nn.init.constant_(model.weight, 0.5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    for step in range(2 + 2 * r):
        x, y = _uneven_batch(r, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    last = hvd.join()
    assert last == n - 1, last
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    w = torch.full((1, 4), 0.5)
    for step in range(2 + 2 * (n - 1)):  # the reference: every rank's gradient, zeros once joined
        grad = torch.zeros_like(w)
        for q in range(n):
            if step < 2 + 2 * q:
                x, y = _uneven_batch(q, step)
                wq = w.clone().requires_grad_(True)
                torch.nn.functional.mse_loss(x @ wq.t(), y).backward()
                grad += wq.grad
        w -= 0.01 * grad / n
    assert torch.allclose(model.weight.detach(), w, rtol=1e-5, atol=1e-6), (model.weight, w)
    if r != 0:  # rank 0 joins at once: a broadcast of the others raises, naming it
        with pytest.raises(ringd.Error, match="rank 0 .*has joined"):
            hvd.broadcast(torch.ones(2), root_rank=1, name="while.joined")
    return hvd.join()


def test_uneven_data_with_join_trains_as_horovod(cluster):
    assert cluster.run(r_uneven_data_join) == [cluster.world - 1] * cluster.world


def r_process_sets():
    """Horovod's process sets: the even and the odd ranks each run every collective among
    themselves (their own names, unnamed ops counted per set), overlapping in time; a rank
    outside a set cannot use it; a removed set cannot be used."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    loose = hvd.ProcessSet(ranks_or_comm=[0])  # as Horovod: None until added
    assert (loose.size(), loose.rank(), loose.included()) == (None, None, None)
    even = hvd.add_process_set(hvd.ProcessSet(range(0, n, 2)))
    odd = hvd.add_process_set([q for q in range(n) if q % 2])
    mine, other = (even, odd) if r % 2 == 0 else (odd, even)
    members = mine.ranks
    assert mine.included() and not other.included() and other.rank() == -1
    assert mine.size() == len(members) and mine.rank() == members.index(r), (mine, r)
    got = hvd.allreduce(torch.tensor([float(r + 1)]), op=hvd.Sum, process_set=mine)
    assert got.item() == sum(q + 1 for q in members), got
    h = hvd.allreduce_async(torch.tensor([1.0]), op=hvd.Sum, process_set=mine)  # unnamed
    whole = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum)  # unnamed too, on the whole job
    assert hvd.synchronize(h).item() == len(members) and whole.item() == n
    rows = hvd.allgather(torch.full((r + 1, 2), float(r)), process_set=mine)
    assert rows[:, 0].tolist() == [float(q) for q in members for _ in range(q + 1)], rows
    root = members[-1]
    got = hvd.broadcast(torch.tensor([float(r)]), root_rank=root, process_set=mine)
    assert got.item() == float(root), got
    k = len(members)
    part = hvd.reducescatter(torch.ones(2 * k, 3), op=hvd.Sum, process_set=mine)
    assert part.shape == (2, 3) and torch.all(part == k), part
    a2a = hvd.alltoall(torch.full((k,), float(r)), process_set=mine)
    assert a2a.tolist() == [float(q) for q in members], a2a
    assert hvd.broadcast_object({"from": root}, root_rank=root, process_set=mine) == \
        {"from": root}
    hvd.barrier(process_set=mine)
    model = torch.nn.Linear(2, 1, bias=False)  # gradients summed over the set's ranks alone
    torch.nn.init.constant_(model.weight, 1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), op=hvd.Sum,
                                   named_parameters=model.named_parameters(), process_set=mine)
    opt.zero_grad()
    model(torch.full((1, 2), float(r + 1))).sum().backward()
    opt.step()
    want = 1.0 - sum(q + 1 for q in members)
    assert model.weight.tolist() == [[want, want]], model.weight
    outside = torch.nn.Linear(2, 1, bias=False)  # a rank outside a set steps alone (Horovod's)
    torch.nn.init.constant_(outside.weight, 1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(outside.parameters(), lr=1.0), op=hvd.Sum,
                                   named_parameters=outside.named_parameters(), process_set=other)
    opt.zero_grad()
    outside(torch.full((1, 2), float(r + 1))).sum().backward()
    opt.step()
    assert outside.weight.tolist() == [[-float(r), -float(r)]], outside.weight  # 1 - (r + 1)
    with pytest.raises(ValueError, match="not in ProcessSet"):
        hvd.allreduce(torch.ones(1), process_set=other)
    with pytest.raises(ValueError, match="root_rank"):
        hvd.broadcast(torch.ones(1), root_rank=other.ranks[0], process_set=mine)
    hvd.barrier()
    assert hvd.remove_process_set(even) and hvd.remove_process_set(odd)
    assert not hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="removed"):
        hvd.allreduce(torch.ones(1), process_set=mine)
    assert mine.size() is None and mine.included() is None  # as Horovod's once removed
    return hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name="after.sets").item()


def test_process_sets_run_collectives_among_their_ranks(cluster):
    assert cluster.run(r_process_sets) == [float(cluster.world)] * cluster.world


def r_autograd():
    """allreduce, allgather and broadcast carry gradients as Horovod's do."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    x = torch.full((3,), float(r + 1), requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, name="grad.ar")
    (y * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [float(n), 2.0 * n, 3.0 * n], x.grad  # Sum's gradient: a Sum
    rows = r + 1
    x = torch.ones(rows, 2, requires_grad=True)
    y = hvd.allgather(x, name="grad.ag")
    w = torch.arange(y.shape[0] * 2, dtype=torch.float32).view(-1, 2)
    (y * w).sum().backward()
    offset = sum(q + 1 for q in range(r))
    assert torch.equal(x.grad, w[offset:offset + rows]), (x.grad, w)
    x = torch.full((2,), float(r), requires_grad=True)
    y = hvd.broadcast(x, root_rank=0, name="grad.bc")
    (y * 3).sum().backward()
    assert x.grad.tolist() == ([3.0, 3.0] if r == 0 else [0.0, 0.0]), x.grad
    ts = [torch.ones(2, requires_grad=True), torch.ones(1, requires_grad=True)]
    out = hvd.grouped_allreduce(ts, op=hvd.Sum, name="grad.group")
    (out[0].sum() + 2 * out[1].sum()).backward()
    assert ts[0].grad.tolist() == [float(n)] * 2 and ts[1].grad.tolist() == [2.0 * n]
    return True


def test_autograd_through_collectives(cluster):
    assert cluster.run(r_autograd) == [True] * cluster.world


def r_misuse():
    """Local misuse raises before anything is submitted; the job goes on afterwards."""
    hvd = ranks.hvd()
    expect = [
        (ValueError, "contiguous", lambda: hvd.allreduce(torch.zeros(3, 3).t())),
        (ValueError, "contiguous", lambda: hvd.broadcast_(torch.zeros(4, 2)[:, 0], 0)),
        (TypeError, "dtype", lambda: hvd.allreduce(torch.zeros(3, dtype=torch.complex64))),
        (TypeError, "dtype", lambda: hvd.reducescatter(torch.zeros(4, dtype=torch.complex64))),
        (TypeError, "CPU", lambda: hvd.allreduce(torch.zeros(3, device="meta"))),
        (TypeError, "torch.Tensor", lambda: hvd.allreduce([1.0, 2.0])),
        (NotImplementedError, "Adasum", lambda: hvd.allreduce(torch.zeros(3), op=hvd.Adasum)),
        (ValueError, "has not been added",
         lambda: hvd.allreduce(torch.zeros(3), process_set=hvd.ProcessSet([0]))),
        (TypeError, "no MPI communicator", lambda: hvd.ProcessSet(object())),
        (ValueError, "ranks of the job", lambda: hvd.add_process_set([0, 0])),
        (ValueError, "ranks of the job", lambda: hvd.add_process_set([hvd.size()])),
        (ValueError, "0-d", lambda: hvd.allgather(torch.tensor(1.0))),
    ]
    for exc, words, call in expect:
        try:
            call()
        except exc as e:
            assert words in str(e), (words, str(e))
        else:
            raise AssertionError(f"no {exc.__name__} ({words})")
    try:
        hvd.allreduce(torch.ones(3 + hvd.rank()), name="shape")
        raise AssertionError("an allreduce of different shapes returned")
    except ringd.Mismatch as e:
        assert "rank 0 " in str(e) and "rank 1 " in str(e) and "allreduce.shape" in str(e), e
    h = hvd.allreduce_async(torch.ones(2), name="twice")
    try:
        hvd.allreduce_async(torch.ones(2), name="twice")
        raise AssertionError("a second outstanding op of one name was accepted")
    except ValueError as e:
        assert "outstanding" in str(e)
    assert hvd.synchronize(h).tolist() == [1.0, 1.0]
    return hvd.allreduce(torch.ones(1), op=hvd.Sum, name="misuse.after").item()


def test_misuse_raises_clear_errors(one_node):
    assert one_node.run(r_misuse) == [2.0, 2.0]


def r_forked_child():
    """Rank 0 forks while another of its threads waits inside a synchronous collective, holding
    the session's lock: the child is refused the parent's session (its queues and arena are the
    parent's) with a clear error and shuts ringd.torch down; the parent's collective and those
    after it go on."""
    hvd = ranks.hvd()
    s = hvd.session()
    go = os.path.join(ranks.cfg()["tmp"], "fork.go")
    if hvd.rank() != 0:
        deadline = time.monotonic() + 60
        while not os.path.exists(go):  # the fork is over
            assert time.monotonic() < deadline, "rank 0 never said its child was done"
            time.sleep(0.01)
        got = s.allreduce("fork.pending", torch.ones(3)).tolist()
        assert hvd.allreduce(torch.ones(2), name="fork.after", op=hvd.Sum).tolist() == [2.0, 2.0]
        return got
    out = {}
    t = threading.Thread(target=lambda: out.update(v=s.allreduce("fork.pending", torch.ones(3))),
                         daemon=True)
    t.start()
    lock = s._st.lock
    deadline = time.monotonic() + 30
    while lock.acquire(blocking=False):  # until the thread waits inside libringd, holding it
        lock.release()
        assert time.monotonic() < deadline, "the waiting thread never took the session's lock"
        time.sleep(0.001)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                hvd.allreduce(torch.ones(1), name="fork.child", op=hvd.Sum)
                code = 2
            except ringd.InvalidArgument as e:
                code = 0 if "forked from" in str(e) and "open a session of its own" in str(e) \
                    else 3
                if code:
                    print(f"child: {e}", flush=True)
            hvd.shutdown()  # closes the session under its lock, as the child's exit would
        except BaseException:  # noqa: BLE001 - reported, then the exit status says it failed
            traceback.print_exc()
            code = 4
        finally:
            os._exit(code)
    forks.reap(pid, "on the parent's session")
    open(go, "w").close()
    try:
        t.join(60)
        assert not t.is_alive(), "the parent's collective never finished"
        assert hvd.allreduce(torch.ones(2), name="fork.after", op=hvd.Sum).tolist() == [2.0] * 2
    finally:
        os.unlink(go)  # rank 1 is past it (or failed): a rerun starts without it
    return out["v"].tolist()


def test_a_forked_child_is_refused_the_parent_s_session_which_goes_on(one_node):
    assert one_node.run(r_forked_child) == [[2.0] * 3] * 2


def r_names_and_fresh_optimizer_state():
    """A name stays taken until its handle is synchronized, finished or not (every rank refuses
    a second op alike), and the first's handle leaves a later op of the name alone;
    broadcast_optimizer_state on a fresh optimizer leaves zero gradients that can be broadcast,
    as Horovod's, and none on a parameter that needs none."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    first = hvd.allreduce_async(torch.full((2,), float(r)), name="reused", op=hvd.Sum)
    deadline = time.monotonic() + 30
    while not hvd.poll(first):
        assert time.monotonic() < deadline, "the first 'reused' never finished"
        time.sleep(0.001)
    with pytest.raises(ValueError, match="still outstanding"):
        hvd.allreduce_async(torch.ones(2), name="reused", op=hvd.Sum)
    assert hvd.synchronize(first).tolist() == [float(sum(range(n)))] * 2
    second = hvd.allreduce_async(torch.ones(2), name="reused", op=hvd.Sum)
    assert hvd.synchronize(first) is None  # a released handle: nothing, the second untouched
    with pytest.raises(ValueError, match="still outstanding"):
        hvd.allreduce_async(torch.ones(2), name="reused", op=hvd.Sum)
    assert hvd.synchronize(second).tolist() == [float(n)] * 2
    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-6)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert model.bias.grad is None
    grad = model.weight.grad
    assert grad is not None and not grad.any(), grad
    assert torch.equal(hvd.broadcast(grad, root_rank=0, name="fresh.grad"), grad)
    return True


def test_names_stay_taken_until_synchronized_and_a_fresh_optimizer_gets_zero_gradients(
        cluster):
    assert cluster.run(r_names_and_fresh_optimizer_state) == [True] * cluster.world


def r_shutdown():
    hvd = ranks.hvd()
    n = hvd.size()
    h = hvd.allreduce_async(torch.ones(3), name=f"never.{hvd.rank()}")  # matched by nobody
    hvd.shutdown()
    hvd.shutdown()  # twice is fine
    assert not hvd.is_initialized()
    for call in (hvd.rank, hvd.size, lambda: hvd.allreduce(torch.ones(2)), hvd.barrier,
                 lambda: hvd.broadcast_object(1), lambda: hvd.allgather(torch.ones(1))):
        try:
            call()
            raise AssertionError(f"{call} worked after shutdown")
        except hvd.NotInitialized as e:
            assert isinstance(e, ValueError) and isinstance(e, ringd.Closed)
            assert "hvd.init()" in str(e), str(e)
    assert hvd.synchronize(h) is None  # as Horovod: a handle it no longer knows
    hvd = ranks.hvd_restart()
    return hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n


def test_calls_after_shutdown_raise(cluster):
    assert cluster.run(r_shutdown) == [True] * cluster.world


def r_unpicklable_and_unnamed():
    """An object root cannot pickle raises on every rank (none waits for its size); unnamed
    allreduces between backward and step do not collide with DistributedOptimizer's gradient
    names."""
    hvd = ranks.hvd()
    try:
        hvd.broadcast_object((lambda: 1) if hvd.rank() == 0 else None, root_rank=0)
        raise AssertionError("an unpicklable object was broadcast")
    except TypeError as e:
        assert "pickle" in str(e), str(e)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(2):
        opt.zero_grad()
        loss = model(torch.ones(2, 3)).sum()
        loss.backward()
        hvd.allreduce(loss.detach())  # the k-th unnamed allreduce, k < 4 parameters
        opt.step()
    return float(sum(p.sum() for p in model.parameters()))


def test_unpicklable_objects_and_unnamed_ops_beside_the_optimizer(cluster):
    got = cluster.run(r_unpicklable_and_unnamed)
    assert len(set(got)) == 1, got


def r_crossed_waits():
    """Ranks waiting for async allgathers (and an allreduce) in opposite orders: each rank
    starts an allgather's data phase while it waits for something else, so nobody deadlocks."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    a = hvd.allgather_async(torch.full((r + 1, 2), float(r)), name="crossed.a")
    b = hvd.allgather_async(torch.full((n - r,), r, dtype=torch.int32), name="crossed.b")
    c = hvd.allreduce_async(torch.ones(3), op=hvd.Sum, name="crossed.c")
    order = [a, b, c] if r % 2 == 0 else [c, b, a]
    got = {h: hvd.synchronize(h) for h in order}
    assert torch.equal(got[a], torch.cat([torch.full((q + 1, 2), float(q)) for q in range(n)]))
    assert got[b].tolist() == [q for q in range(n) for _ in range(n - q)], got[b]
    assert got[c].tolist() == [float(n)] * 3
    # an allgather created after a blocking op on one rank and before it on the others
    if r == 0:
        hvd.allreduce(torch.ones(1), name="crossed.first")
        d = hvd.allgather_async(torch.full((2,), r), name="crossed.d")
    else:
        d = hvd.allgather_async(torch.full((2,), r), name="crossed.d")
        hvd.allreduce(torch.ones(1), name="crossed.first")
    got = hvd.synchronize(d).tolist()
    # a synchronous barrier on one rank while another waits for an allgather's data
    e = hvd.allgather_async(torch.full((1,), r), name="crossed.e")
    if r == 0:
        hvd.barrier()
        hvd.synchronize(e)
    else:
        hvd.synchronize(e)
        hvd.barrier()
    return got


def test_async_allgathers_waited_in_opposite_orders(cluster):
    got = cluster.run(r_crossed_waits, timeout=60)
    assert got == [[q for q in range(cluster.world) for _ in range(2)]] * cluster.world


def r_empty_tensors():
    """Empty tensors take part like any other: on every rank they finish; on one rank beside
    full ones elsewhere, every rank gets Mismatch (none waits for the empty one)."""
    hvd = ranks.hvd()
    r = hvd.rank()
    assert hvd.allreduce(torch.zeros(0), name="empty.all").shape == (0,)
    assert hvd.broadcast_(torch.zeros(0, 3), 0, name="empty.bc").shape == (0, 3)
    for kind, call in (("allreduce", lambda t: hvd.allreduce(t, name="empty.one")),
                       ("broadcast", lambda t: hvd.broadcast_(t, 0, name="empty.one")),
                       ("grouped", lambda t: hvd.grouped_allreduce([torch.ones(2), t],
                                                                   name="empty.group"))):
        t = torch.zeros(0) if r == 0 else torch.ones(4 if kind != "broadcast" else 1)
        try:
            call(t)
            raise AssertionError(f"{kind} of an empty tensor beside full ones returned")
        except ringd.Mismatch as e:
            assert "count" in str(e), str(e)
    return hvd.allreduce(torch.ones(1), op=hvd.Sum, name="empty.after").item()


def test_empty_tensors_never_leave_a_rank_waiting(cluster):
    assert cluster.run(r_empty_tensors, timeout=60) == [float(cluster.world)] * cluster.world


def r_reducescatter_and_uneven_allgather():
    """reducescatter of every dtype and op, first dimensions that do not split evenly (the first
    ranks get a row more, as Horovod splits them), scaled, through autograd; allgather of first
    dimensions that differ (0 on one rank) against torch references."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        for salt, op in enumerate([hvd.Sum, hvd.Min, hvd.Max, hvd.Average, hvd.Product]):
            shape = (2 * n + 1, 3)
            seed = 6 if op == hvd.Product else salt  # {1, 2} for products
            every = torch.stack([_input(dtype, q, seed, shape) for q in range(n)]).double()
            if op == hvd.Average:
                want = every.sum(0) / n
                if not dtype.is_floating_point:
                    want = torch.trunc(want)
            else:
                want = {hvd.Sum: every.sum(0), hvd.Min: every.min(0).values,
                        hvd.Max: every.max(0).values, hvd.Product: every.prod(0)}[op]
            rows = [shape[0] // n + (1 if q < shape[0] % n else 0) for q in range(n)]
            first = sum(rows[:r])
            want = want[first:first + rows[r]].to(dtype)
            x = _input(dtype, r, seed, shape)
            _same(f"reducescatter {dtype} {op}",
                  hvd.reducescatter(x, name=f"rs.{dtype}.{salt}", op=op), want)
            h = hvd.reducescatter_async(x, name=f"rsa.{dtype}.{salt}", op=op)
            _same(f"reducescatter_async {dtype} {op}", hvd.synchronize(h), want)
    x = torch.full((n, 2), float(r + 1))
    got = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
    assert got.tolist() == [[n * (n + 1)] * 2], got
    w = torch.ones(n, 2, requires_grad=True)
    hvd.reducescatter(w * (r + 1), op=hvd.Sum, name="rs.grad").sum().backward()
    assert w.grad.tolist() == [[float(r + 1)] * 2] * n, w.grad
    # allgather of differing first dimensions, one of them 0: one allgatherv, no padding
    t = torch.arange(3 * (r % 3), dtype=torch.int64).reshape(-1, 3) + 100 * r
    want = torch.cat([torch.arange(3 * (q % 3), dtype=torch.int64).reshape(-1, 3) + 100 * q
                      for q in range(n)])
    _same("uneven allgather", hvd.allgather(t, name="agv"), want)
    return True


def r_grouped_allgather_and_reducescatter():
    """grouped_allgather and grouped_reducescatter give what each tensor's own op gives."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    a, b = torch.full((r + 1, 2), float(r)), torch.arange(3 * n, dtype=torch.int64) * (r + 1)
    got = hvd.grouped_allgather([a, b], name="g.ag")
    _same("grouped allgather 0", got[0], hvd.allgather(a, name="one.ag.0"))
    _same("grouped allgather 1", got[1], hvd.allgather(b, name="one.ag.1"))
    x, y = torch.ones(2 * n + 1, 3) * (r + 1), torch.arange(n, dtype=torch.float64)
    # all or nothing: one member's dtype differs on rank 0, and every member fails everywhere
    bad = [torch.ones(3), torch.ones(2, dtype=torch.float64 if r == 0 else torch.float32)]
    h = hvd.grouped_allreduce_async(bad, name="g.bad", op=hvd.Sum)
    try:
        hvd.synchronize(h)
        raise AssertionError("a grouped allreduce with a mismatched member returned")
    except ringd.Mismatch as e:
        assert "group" in str(e), str(e)
    # all or nothing: the second member's rows differ in shape on the last rank, and both fail
    rows = torch.ones(r + 1, 3 if r == n - 1 else 2)
    h = hvd.grouped_allgather_async([a, rows], name="g.agbad")
    with pytest.raises(ringd.Mismatch, match=r"g\.agbad\.0' \(in a group with '.*agbad\.1'"):
        hvd.synchronize(h)
    got = hvd.grouped_reducescatter([x, y], name="g.rs", op=hvd.Sum)
    _same("grouped reducescatter 0", got[0], hvd.reducescatter(x, name="one.rs.0", op=hvd.Sum))
    _same("grouped reducescatter 1", got[1], hvd.reducescatter(y, name="one.rs.1", op=hvd.Sum))
    return True


def test_grouped_allgather_and_reducescatter(cluster):
    assert cluster.run(r_grouped_allgather_and_reducescatter, timeout=60) == [True] * cluster.world


def test_reducescatter_and_allgather_of_uneven_first_dimensions(cluster):
    assert cluster.run(r_reducescatter_and_uneven_allgather, timeout=120) == [True] * cluster.world


def r_alltoall():
    """alltoall: an even split on every dtype and of first dimensions that differ between ranks,
    splits with 0s (received_splits as Horovod gives them), rows of several dimensions, and the
    gradient going back where the rows came from."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        x = torch.tensor([[r, q] for q in range(n) for _ in range(2)]).to(dtype)
        got = hvd.alltoall(x, name=f"a2a.{dtype}")
        _same(f"alltoall {dtype}", got,
              torch.tensor([[q, r] for q in range(n) for _ in range(2)]).to(dtype))
    # an even split of first dimensions that differ between ranks: (r + 1) rows for each rank
    x = torch.tensor([[r, q] for q in range(n) for _ in range(r + 1)]).float()
    got = hvd.alltoall(x, name="a2a.uneven")
    _same("alltoall of uneven first dimensions", got,
          torch.tensor([[q, r] for q in range(n) for _ in range(q + 1)]).float())
    mpi_ops = hvd.mpi_ops
    limit, mpi_ops._ALLTOALL_LEARNT_MAX = mpi_ops._ALLTOALL_LEARNT_MAX, 1  # as beyond 512 ranks
    try:  # an even split of equal first dimensions: one alltoall of equal counts
        x = torch.tensor([[r, q] for q in range(n) for _ in range(2)]).float()
        h = hvd.alltoall_async(x, name="a2a.equal")
        assert mpi_ops._handles[h][0].even, "an even split beyond the bound learnt counts"
        got, received = hvd.synchronize(h)
        _same("alltoall of equal counts", got,
              torch.tensor([[q, r] for q in range(n) for _ in range(2)]).float())
        assert received.tolist() == [2] * n, received
        w = torch.ones(2 * n, 3, requires_grad=True)  # and its gradient, as one too
        (hvd.alltoall(w * (r + 1), name="a2a.equal.grad") *
         torch.arange(2 * n).view(-1, 1)).sum().backward()
        assert w.grad.tolist() == [[float((r + 1) * (2 * r + k % 2))] * 3
                                   for k in range(2 * n)], w.grad
    finally:
        mpi_ops._ALLTOALL_LEARNT_MAX = limit
    splits = [(r + q) % 3 for q in range(n)]  # rows for rank q
    x = torch.cat([torch.full((splits[q], 2, 2), 10 * r + q) for q in range(n)]).float()
    got, received = hvd.alltoall(x, splits=splits, name="a2a.splits")
    want_rows = [(q + r) % 3 for q in range(n)]
    assert received.dtype == torch.int32 and received.tolist() == want_rows, received
    want = torch.cat([torch.full((want_rows[q], 2, 2), 10 * q + r) for q in range(n)]).float()
    _same("alltoall splits", got, want)
    h = hvd.alltoall_async(x, splits=torch.tensor(splits), name="a2a.async")
    got, received = hvd.synchronize(h)
    _same("alltoall_async", got, want)
    w = torch.ones(n, 3, requires_grad=True)
    (hvd.alltoall(w * (r + 1), name="a2a.grad") * torch.arange(n).view(-1, 1)).sum().backward()
    assert w.grad.tolist() == [[float((r + 1) * r)] * 3] * n, w.grad
    return True


def test_alltoall(cluster):
    assert cluster.run(r_alltoall, timeout=120) == [True] * cluster.world


def r_wrong_arguments_on_one_rank():
    """Arguments one rank finds wrong before libringd sees the op (splits that do not add up, a
    0-d tensor, counts of the wrong length) raise there, and every other rank's copy of the op
    fails at once, naming that rank, instead of waiting for it."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    s = hvd.session()
    for what, call in (
            ("alltoall", lambda bad: hvd.alltoall(torch.ones(n, 2), splits=[1] * (n + bad),
                                                  name="bad.a2a")),
            ("reducescatter", lambda bad: hvd.reducescatter(
                torch.tensor(1.0) if bad else torch.ones(n), name="bad.rs")),
            ("allgatherv", lambda bad: s.allgatherv("bad.agv", torch.ones(2),
                                                    [2] * (n + bad)))):
        start = time.monotonic()
        try:
            call(1 if r == 0 else 0)
            raise AssertionError(f"{what}: returned")
        except ringd.InvalidArgument as e:  # the others: rank 0's refusal
            assert r != 0 and "rank 0" in str(e), (what, str(e))
        except ValueError as e:  # rank 0: its own error
            assert r == 0, (what, str(e))
        assert time.monotonic() - start < 10, f"{what}: took {time.monotonic() - start:.1f} s"
    return hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after.bad").item()


def test_wrong_arguments_on_one_rank_fail_every_rank_at_once(cluster):
    assert cluster.run(r_wrong_arguments_on_one_rank, timeout=60) == [float(cluster.world)] * \
        cluster.world


def r_optimizer_state_from_root_only():
    """broadcast_optimizer_state when only root holds state, shaped unlike the others' first
    state: a checkpoint only root loaded, where a frozen layer never had a gradient."""
    hvd = ranks.hvd()
    r = hvd.rank()
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if r == 0:  # "resumed": momentum for the first layer only (the second was frozen)
        model[1].requires_grad_(False)
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
        model[1].requires_grad_(True)
        opt.param_groups[0]["lr"] = 0.05
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    layout = sorted((i, k, tuple(v.shape), float(v.double().sum()))
                    for i, p in enumerate(model.parameters()) for k, v in opt.state[p].items()
                    if torch.is_tensor(v))
    assert [i for i, *_ in layout] == [0, 1], layout  # the first layer's weight and bias
    assert opt.param_groups[0]["lr"] == 0.05
    adam = torch.optim.Adam(model.parameters(), lr=1e-3 * (r + 1))
    if r == 0:
        model(torch.ones(2, 3)).sum().backward()
        adam.step()
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    state = [(k, float(v.double().sum())) for p in model.parameters()
             for k, v in sorted(adam.state[p].items())]
    return layout, state, adam.param_groups[0]["lr"]


def test_optimizer_state_broadcast_from_root_only_state(cluster):
    got = cluster.run(r_optimizer_state_from_root_only, timeout=60)
    assert all(g == got[0] for g in got), got
    assert got[0][2] == 1e-3


def r_timeout_keeps_handle():
    """A synchronize that times out (op_timeout_ms) leaves the handle pending: a second one
    returns the result, and the name stays taken meanwhile."""
    ranks.hvd_shutdown()
    hvd = ringd.torch
    hvd.init(job=f"{ranks.cfg()['tag']}.timeout", op_timeout_ms=200)
    r = hvd.rank()
    hvd.barrier()
    if r != 0:
        time.sleep(1.0)
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="late")
    timed_out = False
    if r == 0:
        try:
            hvd.synchronize(h)
        except ringd.Timeout:
            timed_out = True
        try:
            hvd.allreduce_async(torch.ones(2), name="late")
            raise AssertionError("the name of a pending op was taken again")
        except ValueError as e:
            assert "outstanding" in str(e)
    got = None
    for _ in range(20):
        try:
            got = hvd.synchronize(h)
            break
        except ringd.Timeout:
            continue
    # DistributedOptimizer: a step that times out waiting for a late rank is taken again
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 2)
    hvd.broadcast_parameters(model.state_dict(), 0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    step_timeouts = 0
    for step in range(2):
        if r != 0 and step == 0:
            time.sleep(1.0)
        opt.zero_grad()
        model(torch.full((3, 4), float(r + 1))).sum().backward()
        while True:
            try:
                opt.step()
                break
            except ringd.Timeout:
                step_timeouts += 1
    weights = hvd.allgather_object(model.weight.detach().tolist(), name="timeout.weights")
    assert all(w == weights[0] for w in weights), weights
    hvd.shutdown()
    return r, timed_out, got.tolist(), step_timeouts > 0 or r != 0


def test_synchronize_after_a_timeout_keeps_the_handle(cluster):
    got = cluster.run(r_timeout_keeps_handle, timeout=60)
    n = float(cluster.world)
    got = sorted(got)  # by the rank in the new job (another than the cluster's rank)
    assert got[0][1] and all(g[2:] == ([n, n], True) for g in got), got


def r_sparse_gradients():
    """Sparse gradients as Horovod reduces them: sparse_allreduce_async (indices and values
    allgathered, Average divides), DistributedOptimizer with an embedding's sparse gradient,
    and with sparse_as_dense=True the reduced gradient sparse again for SparseAdam."""
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    rows = [torch.tensor([q % 5, (q + 2) % 5]) for q in range(n)]

    def grad_of(q):
        return torch.sparse_coo_tensor(rows[q].unsqueeze(0), torch.full((2, 3), q + 1.0), (5, 3))

    want_sum = sum(grad_of(q).to_dense() for q in range(n))
    for op, want in ((hvd.Sum, want_sum), (hvd.Average, want_sum / n)):
        h = hvd.sparse_allreduce_async(grad_of(r), name=f"sparse.{op}", op=op)
        got = hvd.synchronize(h)
        assert got.is_sparse and torch.allclose(got.to_dense(), want), (op, got, want)
    for sparse_as_dense, opt_class in ((False, torch.optim.SGD), (True, torch.optim.SparseAdam)):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(5, 3, sparse=True)
        start = emb.weight.detach().clone()
        opt = hvd.DistributedOptimizer(opt_class(emb.parameters(), lr=0.1),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        opt.zero_grad()
        emb(rows[r]).sum().backward()
        opt.synchronize()
        assert emb.weight.grad.is_sparse, (sparse_as_dense, emb.weight.grad)
        want = sum(torch.zeros(5, 3).index_add_(0, rows[q], torch.ones(2, 3))
                   for q in range(n)) / n
        assert torch.allclose(emb.weight.grad.to_dense(), want), (emb.weight.grad, want)
        with opt.skip_synchronize():
            opt.step()
        assert not torch.equal(emb.weight.detach(), start)
        hvd.allreduce(torch.zeros(1), name=f"sparse.after.{sparse_as_dense}")
    return True


def test_sparse_gradients_as_horovod_reduces_them(cluster):
    assert cluster.run(r_sparse_gradients) == [True] * cluster.world


def r_shapes_must_match():
    """Horovod's shape check: tensors of one element count but other shapes are a mismatch on
    every rank, naming both shapes; the same shape goes through."""
    hvd = ranks.hvd()
    r = hvd.rank()
    shape = (17, 1311) if r == 0 else (17, 23, 57)
    for call in (lambda t: hvd.allreduce(t, name="shaped", op=hvd.Sum),
                 lambda t: hvd.broadcast(t, root_rank=0, name="shaped.b")):
        try:
            call(torch.ones(shape))
            raise AssertionError("tensors of other shapes were reduced")
        except ringd.Mismatch as e:
            assert "shape (17, 1311)" in str(e) and "shape (17, 23, 57)" in str(e), e
    got = hvd.allreduce(torch.ones(17, 1311), name="shaped.same", op=hvd.Sum)
    return got[0, 0].item()


def test_tensors_of_one_count_but_other_shapes_fail_on_every_rank(cluster):
    assert cluster.run(r_shapes_must_match) == [float(cluster.world)] * cluster.world


def test_build_introspection_answers_for_ringd():
    import ringd.torch as hvd

    assert hvd.cuda_built() is True  # libringd takes CUDA tensors itself
    for fn in (hvd.mpi_built, hvd.mpi_enabled, hvd.mpi_threads_supported, hvd.gloo_built,
               hvd.gloo_enabled, hvd.nccl_built, hvd.ddl_built, hvd.ccl_built, hvd.rocm_built):
        assert fn() is False, fn.__name__


def r_reinit_same_job(times):
    """hvd.shutdown() then hvd.init() in the same job, as Horovod scripts do between phases: each
    new session is the whole world again, and its first collective succeeds (none counts a peer's
    session that is about to leave)."""
    ranks.hvd_shutdown()
    hvd = ringd.torch
    job = f"{ranks.cfg()['tag']}.reinit"
    sizes = []
    for k in range(times):
        hvd.init(job=job, op_timeout_ms=ranks.cfg()["op_timeout_ms"])
        sizes.append(hvd.size())
        got = hvd.allreduce(torch.full((4,), float(hvd.rank() + k)), op=hvd.Sum, name="first")
        want = sum(r + k for r in range(hvd.size()))
        assert got.tolist() == [float(want)] * 4, (k, got)
        hvd.shutdown()
    return sizes


def test_shutdown_then_init_in_the_same_job(cluster):
    got = cluster.run(r_reinit_same_job, 8)
    assert got == [[cluster.world] * 8] * cluster.world, got


def r_timeline_started_and_stopped(path):
    """hvd.start_timeline() then stop_timeline() in a running session: the file holds the
    collectives in between as a Chrome trace; those after the stop go nowhere."""
    hvd = ranks.hvd()
    hvd.allreduce(torch.ones(2), name="tl.before")
    hvd.start_timeline(path.replace("tl.", "first."), mark_cycles=True)
    hvd.allreduce(torch.ones(4), name="tl.first")
    hvd.start_timeline(path)  # as Horovod's: switches files
    try:
        hvd.session().start_timeline(path)
        raise AssertionError("a second Session.start_timeline was taken")
    except ValueError as e:
        assert "being written already" in str(e), str(e)
    for k in range(5):
        hvd.allreduce(torch.ones(4), name=f"tl.during.{k}")
    hvd.stop_timeline()
    hvd.stop_timeline()  # nothing to stop: no error
    for k in range(3):
        hvd.allreduce(torch.ones(4), name=f"tl.after.{k}")
    mine = path.replace("%r", str(hvd.rank()))
    with open(mine) as f:
        ev = json.load(f)
    rows = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert {f"allreduce.tl.during.{k}" for k in range(5)} <= rows, rows
    assert not any("tl.after" in r for r in rows), rows
    assert len([e for e in ev if e["ph"] == "X" and e["name"] == "ALLREDUCE"]) >= 5
    # rank 0 alone writes a path without %r
    hvd.start_timeline(os.path.join(os.path.dirname(path), "rank0.json"))
    hvd.allreduce(torch.ones(1), name="tl.rank0")
    hvd.stop_timeline()
    return True


def test_start_and_stop_timeline_in_a_running_session(cluster, tmp_path):
    got = cluster.run(r_timeline_started_and_stopped, str(tmp_path / "tl.%r.json"))
    assert got == [True] * cluster.world, got
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["rank0.json"] + [f"{f}.{r}.json" for r in range(cluster.world) for f in ("first", "tl")])
    with open(tmp_path / "first.0.json") as f:
        first = {e["args"]["name"] for e in json.load(f) if e["name"] == "process_name"}
    assert "allreduce.tl.first" in first and not any("during" in n for n in first), first
