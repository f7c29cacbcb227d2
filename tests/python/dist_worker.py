# One rank of the torch.distributed tests: init_process_group("ringd") as torchrun's workers do.
"""Run as a script by test_torch_distributed.py (or under torchrun), one process per rank, with
torch's launch variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) and RINGD_SOCKET. argv: the scenarios to run in turn. Each checks its results on
this rank (AssertionError when wrong) and adds figures to the JSON line printed last:
"RESULT {...}". A Gloo group of the same ranks (new_group(backend="gloo") over torch's store)
is the reference where results are compared with Gloo's.
"""
import datetime
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import forks
import ringd
import ringd.torch.distributed  # noqa: F401  (registers the backend)

R = N = None
_gloo = None


def gloo():
    global _gloo
    if _gloo is None:
        _gloo = dist.new_group(backend="gloo")
    return _gloo


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def batches(steps, rank):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 12, generator=g), torch.randn(8, 3, generator=g))
            for _ in range(steps)]


def train(wrapped, params, opt, steps, dev=None):
    for x, y in batches(steps, R):
        opt.zero_grad()
        loss = ((wrapped(x.to(dev)) - y.to(dev)) ** 2).mean()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in params]


def compare(a, b):
    """(max absolute difference, bit-identical) of two lists of tensors."""
    a, b = [x.cpu() for x in a], [y.cpu() for y in b]
    diff = max(float((x - y).abs().max()) for x, y in zip(a, b))
    return diff, all(torch.equal(x, y) for x, y in zip(a, b))


def gpu():
    """This rank's GPU (LOCAL_RANK's, round robin), made the current device."""
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def error_name(e):
    """The name of e's ringd error class (Mismatch, Timeout, ...): under a torch with
    DistBackendError the backend raises a subclass of both, DistBackend<Name>."""
    return next(c.__name__ for c in type(e).__mro__
                if issubclass(c, ringd.Error) and not c.__name__.startswith("DistBackend"))


# ---- scenarios ----


def s_ops():
    """Every collective against what it must give, in every form torch has."""
    n, r = N, R
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t)
    assert t.tolist() == [n * (n + 1) / 2] * 5, t
    for op, want in ((dist.ReduceOp.MAX, n), (dist.ReduceOp.MIN, 1),
                     (dist.ReduceOp.PRODUCT, float(torch.arange(1, n + 1).prod()))):
        t = torch.full((3,), float(r + 1))
        dist.all_reduce(t, op=op)
        assert t.tolist() == [want] * 3, (op, t)
    if hasattr(dist.ReduceOp, "AVG"):
        t = torch.full((3,), float(r + 1))
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert torch.allclose(t, torch.full((3,), (n + 1) / 2)), t
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.float64,
                  torch.float16, torch.bfloat16):
        t = (torch.arange(7) % 5 + r).to(dtype)
        dist.all_reduce(t)
        want = sum((torch.arange(7) % 5 + k) for k in range(n)).to(dtype)
        assert torch.equal(t, want), (dtype, t, want)
    b = torch.tensor([r == 0, True, False])
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert b.tolist() == [True, True, False], b
    if hasattr(dist.ReduceOp, "AVG"):
        try:
            dist.all_reduce(b, op=dist.ReduceOp.AVG)
            raise AssertionError("an average of bools did not raise")
        except RuntimeError as e:  # every rank raises it (refused before reaching the daemons)
            assert "no average" in str(e), e
    c = torch.tensor([1 + 2j, r * 1j], dtype=torch.complex64)
    dist.all_reduce(c)
    assert torch.allclose(c, torch.tensor([n * (1 + 2j), 1j * n * (n - 1) / 2])), c
    nc = torch.arange(12.).view(3, 4).t() * (r + 1)  # not contiguous
    dist.all_reduce(nc)
    assert torch.equal(nc, torch.arange(12.).view(3, 4).t() * n * (n + 1) / 2), nc
    for root in range(n):
        t = torch.arange(4.) + 10 * r
        dist.broadcast(t, root)
        assert t.tolist() == (torch.arange(4.) + 10 * root).tolist(), (root, t)
        i = torch.tensor([r, -r], dtype=torch.int16)
        dist.broadcast(i, root)
        assert i.tolist() == [root, -root], i
    outs = [torch.zeros(k + 1) for k in range(n)]  # sizes differ by rank
    dist.all_gather(outs, torch.full((r + 1,), float(r)))
    assert [o.tolist() for o in outs] == [[float(k)] * (k + 1) for k in range(n)], outs
    big = torch.zeros(3 * n, dtype=torch.int8)
    gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    gather_into(big, torch.full((3,), r, dtype=torch.int8))
    assert big.tolist() == [k for k in range(n) for _ in range(3)], big
    o = torch.zeros(2)
    dist.reduce_scatter(o, [torch.full((2,), float(r * 10 + j)) for j in range(n)])
    assert o.tolist() == [float(sum(k * 10 + r for k in range(n)))] * 2, o
    o = torch.zeros(2)
    scatter_tensor = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    scatter_tensor(o, torch.arange(2. * n) * (r + 1))
    assert o.tolist() == [(2. * r + k) * n * (n + 1) / 2 for k in range(2)], o
    # all_to_all_single: even, and uneven splits (rank r sends k + r + 1 rows to rank k)
    inp = torch.arange(2. * n) + 100 * r
    out = torch.zeros(2 * n)
    dist.all_to_all_single(out, inp)
    assert out.tolist() == [100. * k + 2 * r + j for k in range(n) for j in range(2)], out
    send = [k + r + 1 for k in range(n)]
    recv = [r + k + 1 for k in range(n)]
    inp = torch.cat([torch.full((s, 2), 100. * r + k) for k, s in enumerate(send)])
    out = torch.zeros(sum(recv), 2)
    dist.all_to_all_single(out, inp, recv, send)
    want = torch.cat([torch.full((s, 2), 100. * k + r) for k, s in enumerate(recv)])
    assert torch.equal(out, want), (out, want)
    outs = [torch.zeros(k + 1, dtype=torch.int64) for k in range(n)]
    dist.all_to_all(outs, [torch.full((r + 1,), r * 10 + k) for k in range(n)])
    assert [o.tolist() for o in outs] == [[k * 10 + r] * (k + 1) for k in range(n)], outs
    if hasattr(dist, "all_reduce_coalesced"):  # one ringd group of both
        a, b = torch.full((2,), float(r)), torch.full((3,), float(r + 1))
        dist.all_reduce_coalesced([a, b])
        assert a.tolist() == [n * (n - 1) / 2] * 2 and b.tolist() == [n * (n + 1) / 2] * 3, (a, b)
    dist.barrier()
    root = n - 1
    t = torch.full((2,), float(r + 1))
    dist.reduce(t, root)
    assert t.tolist() == ([n * (n + 1) / 2] * 2 if r == root else [float(r + 1)] * 2), t
    gl = [torch.zeros(2) for _ in range(n)] if r == root else None
    dist.gather(torch.full((2,), float(r)), gl, dst=root)
    if r == root:
        assert [g.tolist() for g in gl] == [[float(k)] * 2 for k in range(n)], gl
    t = torch.zeros(3)
    dist.scatter(t, [torch.full((3,), float(k)) for k in range(n)] if r == 0 else None, src=0)
    assert t.tolist() == [float(r)] * 3, t
    objs = [{"from": r}]
    dist.broadcast_object_list(objs, 0)
    assert objs == [{"from": 0}], objs
    got = [None] * n
    dist.all_gather_object(got, {"r": r})
    assert got == [{"r": k} for k in range(n)], got
    if hasattr(dist, "all_gather_coalesced"):  # output_lists[rank][i]: rank's input i
        ins = [torch.full((2,), 10. * r + i) for i in range(n + 1)]
        outs = [[torch.zeros(2) for _ in range(n + 1)] for _ in range(n)]
        dist.all_gather_coalesced(outs, ins)
        assert [[o.tolist() for o in per] for per in outs] == \
            [[[10. * k + i] * 2 for i in range(n + 1)] for k in range(n)], outs
    w = dist.all_reduce(torch.ones(3), async_op=True)
    fut = w.get_future()
    assert w.wait() and fut.wait()[0].tolist() == [float(n)] * 3, fut.value()
    # a Work's future holds a list of its outputs, as Gloo's and NCCL's
    for call, size in ((lambda o: dist.all_to_all_single(o, torch.ones(2 * n), async_op=True),
                        2 * n),
                       (lambda o: gather_into(o, torch.ones(2), async_op=True), 2 * n),
                       (lambda o: scatter_tensor(o, torch.ones(2 * n), async_op=True), 2)):
        o = torch.zeros(size)
        value = call(o).get_future().wait()
        assert isinstance(value, list) and len(value) == 1 and value[0] is o, value
    works = [dist.all_reduce(torch.full((4,), float(i)), async_op=True) for i in range(20)]
    for i, w in enumerate(works):
        w.wait()
        assert w.result()[0].tolist() == [float(i * n)] * 4, (i, w.result())
    try:
        dist.send(torch.ones(1), (r + 1) % n)
        raise AssertionError("send did not raise")
    except RuntimeError as e:
        assert "no point-to-point" in str(e), e
    return {"ops": "ok"}


def s_groups():
    """Two overlapping groups, each running collectives among its members alone."""
    n, r = N, R
    a_ranks, b_ranks = list(range(0, n - 1)), list(range(1, n))
    a = dist.new_group(a_ranks)
    b = dist.new_group(b_ranks)
    for k in range(3):
        if r in a_ranks:
            t = torch.full((3,), float(r + k))
            dist.all_reduce(t, group=a)
            assert t.tolist() == [float(sum(x + k for x in a_ranks))] * 3, t
            t = torch.full((2,), float(r))
            dist.broadcast(t, a_ranks[-1], group=a)
            assert t.tolist() == [float(a_ranks[-1])] * 2, t
        if r in b_ranks:
            outs = [torch.zeros(1) for _ in b_ranks]
            dist.all_gather(outs, torch.full((1,), float(r)), group=b)
            assert [o.item() for o in outs] == [float(x) for x in b_ranks], outs
    if r not in a_ranks:
        assert a == dist.GroupMember.NON_GROUP_MEMBER
    return {"groups": "ok"}


def s_ddp():
    """DDP on ringd against DDP on Gloo: the same parameters after some steps."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps = 6
    m1, m2 = model(), model()
    d1 = DDP(m1)  # the default group: ringd
    d2 = DDP(m2, process_group=gloo())
    p1 = train(d1, list(m1.parameters()), torch.optim.SGD(m1.parameters(), lr=0.1, momentum=0.9),
               steps)
    p2 = train(d2, list(m2.parameters()), torch.optim.SGD(m2.parameters(), lr=0.1, momentum=0.9),
               steps)
    diff, same = compare(p1, p2)
    moved = compare(p1, list(model().parameters()))[0]
    assert moved > 1e-3, "training did not change the parameters"
    return {"ddp_diff": diff, "ddp_identical": same}


def s_powersgd():
    """DDP with torch's PowerSGD communication hook, whose future callbacks run further
    collectives and wait for them: against the same on Gloo."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    from torch.nn.parallel import DistributedDataParallel as DDP

    # On a machine with CUDA, torch's hook synchronises the tensors' device as a CUDA device
    # (torch.cuda.synchronize(cpu) fails, on Gloo as on ringd): there it runs on the GPU.
    dev = gpu() if torch.cuda.is_available() else None
    out = []
    for group in (None, gloo()):
        m = model(5).to(dev)
        d = DDP(m, device_ids=[dev] if dev else None, process_group=group)
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, min_compression_rate=0.1)
        d.register_comm_hook(state, powersgd.powerSGD_hook)
        out.append(train(d, list(m.parameters()), torch.optim.SGD(m.parameters(), lr=0.1), 5,
                         dev))
    diff, _ = compare(*out)
    return {"powersgd_diff": diff}


def s_zero():
    """ZeroRedundancyOptimizer over DDP on ringd against the same on Gloo."""
    from torch.distributed.optim import ZeroRedundancyOptimizer as ZeRO
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = []
    for group in (None, gloo()):
        m = model(1)
        d = DDP(m, process_group=group)
        opt = ZeRO(m.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                   process_group=group)
        out.append(train(d, list(m.parameters()), opt, 5))
    diff, same = compare(*out)
    return {"zero_diff": diff, "zero_identical": same}


def s_fsdp():
    """FullyShardedDataParallel on ringd against FSDP on Gloo (CPU)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    out = []
    for group in (None, gloo()):
        m = model(2)
        # CPU FSDP: a torch with CUDA takes a CPU module for one to move to the GPU unless told
        f = FSDP(m, process_group=group,
                 **({"device_id": torch.device("cpu")} if torch.cuda.is_available() else {}))
        opt = torch.optim.SGD(f.parameters(), lr=0.05)
        train(f, list(f.parameters()), opt, 4)
        with FSDP.summon_full_params(f):
            out.append([p.detach().clone() for p in f.parameters()])
    diff, same = compare(*out)
    return {"fsdp_diff": diff, "fsdp_identical": same}


def _fails_fast(what, fn):
    start = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        took = time.monotonic() - start
        assert isinstance(e, ringd.Error), (what, type(e), e)
        if hasattr(dist, "DistBackendError"):
            assert isinstance(e, dist.DistBackendError), (what, type(e))
        return {"what": what, "s": round(took, 3), "error": error_name(e),
                "message": str(e)[:300]}
    raise AssertionError(f"{what}: no error on rank {R}")


def s_mismatch():
    """A collective called differently on one rank fails on every rank, at once."""
    n, r = N, R
    last = r == n - 1
    got = [
        _fails_fast("count", lambda: dist.all_reduce(torch.ones(11 if last else 10))),
        _fails_fast("dtype", lambda: dist.all_reduce(torch.ones(4, dtype=torch.float64
                                                                if last else torch.float32))),
        _fails_fast("op", lambda: dist.broadcast(torch.ones(4), 0) if last
                    else dist.all_reduce(torch.ones(4))),
        _fails_fast("root", lambda: dist.broadcast(torch.ones(4), 1 if last else 0)),
        _fails_fast("reduce op", lambda: dist.all_reduce(
            torch.ones(4), op=dist.ReduceOp.MAX if last else dist.ReduceOp.SUM)),
        _fails_fast("all_to_all_single splits", lambda: dist.all_to_all_single(
            torch.zeros(n + (1 if last else 0)), torch.zeros(n))),
        _fails_fast("bad op on one rank", lambda: dist.all_reduce(
            torch.ones(4), op=dist.ReduceOp.BAND if last else dist.ReduceOp.SUM)),
        _fails_fast("all_gather_into_tensor", lambda: (getattr(
            dist, "all_gather_into_tensor", None) or dist._all_gather_base)(
            torch.zeros(3 * n if last else 2 * n), torch.zeros(3 if last else 2))),
        _fails_fast("all_gather sizes", lambda: dist.all_gather(
            [torch.zeros(2 if last and k == 0 else 1) for k in range(n)],
            torch.zeros(2 if last and r == 0 else 1))),
        _fails_fast("reduce_scatter_tensor", lambda: (getattr(
            dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base)(
            torch.zeros(2 if last else 1), torch.zeros(2 * n if last else n))),
        _fails_fast("barrier against allreduce", lambda: dist.barrier() if last
                    else dist.all_reduce(torch.ones(1))),
        _fails_fast("scatter root", lambda: dist.scatter(
            torch.zeros(2), [torch.zeros(2)] * n if r == (1 if last else 0) else None,
            src=1 if last else 0)),
    ]
    t = torch.full((2,), 1.0)
    dist.all_reduce(t)  # the group goes on after failures
    assert t.tolist() == [float(n)] * 2, t
    return {"mismatch": got}


def s_killed():
    """The last rank dies in the middle of training; the others get an error, not a hang."""
    n, r = N, R
    if r == n - 1:
        for _ in range(3):
            dist.all_reduce(torch.ones(1000))
        os._exit(17)
    start = None
    try:
        for i in range(100000):
            dist.all_reduce(torch.ones(1000))
            if i == 2:
                start = time.monotonic()
    except RuntimeError as e:
        took = time.monotonic() - (start or time.monotonic())
        return {"killed_error": error_name(e), "killed_s": round(took, 3),
                "killed_message": str(e)[:1000],
                "dist_backend_error": isinstance(e, getattr(dist, "DistBackendError", ()))}
    raise AssertionError("no error after the last rank died")


def s_cuda():
    """CUDA tensors through the backend: collectives against torch's own arithmetic, and DDP
    on the GPU against DDP on Gloo (which stages CUDA tensors through the host)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    n, r = N, R
    dev = gpu()
    t = torch.arange(1000., device=dev) * (r + 1)
    dist.all_reduce(t)
    assert torch.equal(t, torch.arange(1000., device=dev) * n * (n + 1) / 2), "all_reduce"
    big = torch.zeros(3 * n, device=dev)
    (getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base)(
        big, torch.full((3,), float(r), device=dev))
    assert big.tolist() == [float(k) for k in range(n) for _ in range(3)], big
    o = torch.zeros(2, device=dev)
    (getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base)(
        o, torch.arange(2. * n, device=dev) * (r + 1))
    assert o.tolist() == [(2. * r + k) * n * (n + 1) / 2 for k in range(2)], o
    send = [k + r + 1 for k in range(n)]
    recv = [r + k + 1 for k in range(n)]
    inp = torch.cat([torch.full((s, 2), 100. * r + k) for k, s in enumerate(send)]).to(dev)
    out = torch.zeros(sum(recv), 2, device=dev)
    dist.all_to_all_single(out, inp, recv, send)
    want = torch.cat([torch.full((s, 2), 100. * k + r) for k, s in enumerate(recv)]).to(dev)
    assert torch.equal(out, want), "all_to_all_single"
    out = []
    for group in (None, gloo()):
        m = model(3).to(dev)
        d = DDP(m, device_ids=[dev], process_group=group)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for x, y in batches(5, R):
            opt.zero_grad()
            ((d(x.to(dev)) - y.to(dev)) ** 2).mean().backward()
            opt.step()
        out.append([p.detach().cpu() for p in m.parameters()])
    diff, same = compare(*out)
    return {"cuda_ddp_diff": diff, "cuda_ddp_identical": same}


def s_ddp_killed():
    """The last rank dies in the middle of DDP training: the others' backward raises (DDP's
    reducer sees the failed future), no crash and no hang."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    m = model(4)
    d = DDP(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    start = None
    try:
        for step, (x, y) in enumerate(batches(100000, R)):
            if R == N - 1 and step == 3:
                os._exit(17)
            if step == 3:
                start = time.monotonic()
            opt.zero_grad()
            ((d(x) - y) ** 2).mean().backward()
            opt.step()
    except RuntimeError as e:
        return {"ddp_killed_s": round(time.monotonic() - (start or time.monotonic()), 3),
                "ddp_killed_message": str(e)[:500]}
    raise AssertionError("DDP went on after a rank died")


def s_timeout():
    """Rank 0 calls a collective the others never call: it fails at the group's timeout."""
    if R != 0:
        time.sleep(float(os.environ["DIST_TIMEOUT"]) + 1.5)
        return {}
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(3))
    except RuntimeError as e:
        return {"timeout_error": error_name(e), "timeout_s": round(time.monotonic() - start, 3),
                "timeout_message": str(e)[:300]}
    raise AssertionError("no timeout")


def s_reinit():
    """destroy_process_group() then init_process_group("ringd") again, five times on every rank:
    each new world is whole, and its first collective succeeds."""
    global _gloo
    jobs = []
    # torch 1.13's env:// init ends in a barrier on rank 0's store, which rank 1 may still be
    # polling when rank 0 destroys the group (and the store): a collective first, as a script does
    dist.all_reduce(torch.zeros(1))
    for k in range(5):
        dist.destroy_process_group()
        _gloo = None
        # torch's env:// store is rank 0's, gone with its group: a file store for torch (ringd
        # needs none; its job still comes from MASTER_ADDR and MASTER_PORT)
        store = f"file:///tmp/ringd-reinit.{os.environ['MASTER_PORT']}.{k}"
        dist.init_process_group("ringd", init_method=store, rank=R, world_size=N,
                                timeout=datetime.timedelta(seconds=60))
        assert (dist.get_rank(), dist.get_world_size()) == (R, N)
        t = torch.full((3,), float(R + k))
        dist.all_reduce(t)
        assert t.tolist() == [float(sum(r + k for r in range(N)))] * 3, (k, t)
        jobs.append(dist.distributed_c10d._get_default_group()._s.job)
    return {"reinit_jobs": jobs}


def s_exit_in_callback():
    """Returns while a callback on a collective's future still runs (a user's fire-and-forget
    hook): the process must still exit with status 0, the callback's work done (it writes the
    name of its thread and its value into DIST_OUT/callback.<rank>)."""
    import threading

    path = os.path.join(os.environ["DIST_OUT"], f"callback.{R}")
    started = threading.Event()

    inline = []

    def callback(fut):
        if threading.current_thread() is threading.main_thread():
            inline.append(fut)  # finished before it was chained: run by then() itself
            return fut.value()
        started.set()
        time.sleep(1.0)  # the main thread has returned by then
        v = fut.value()[0] * 2
        with open(path, "w") as f:
            f.write(f"{threading.current_thread().name} {v.tolist()}")
        return v

    hooked = False
    for _ in range(3):  # as many on every rank
        fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
        if not hooked:
            before = len(inline)
            fut.then(callback)
            hooked = len(inline) == before
    # every rank is past torch's start-up barrier on the store before one exits; the callback
    # still runs (wait() would wait for it)
    dist.barrier()
    assert hooked, "3 collectives finished before their futures were asked for"
    assert started.wait(30), "the callback never started"
    return {"exit_in_callback": path}


def s_fork():
    """Rank 0 forks while its all_reduce waits for rank 1 (the module's completer polling it): in
    the child, waiting for that Work or its future and starting another collective raise at
    once, naming the fork, and the exit handlers end; the parent's Work and the collectives
    after it go on."""
    import atexit

    go = os.path.join(os.environ["DIST_OUT"], "fork.go")
    t = torch.full((3,), float(R + 1))
    if R != 0:
        deadline = time.monotonic() + 60
        while not os.path.exists(go):
            assert time.monotonic() < deadline, "rank 0 never said its child was done"
            time.sleep(0.01)
        dist.all_reduce(t)
    else:
        work = dist.all_reduce(t, async_op=True)
        pid = os.fork()
        if pid == 0:
            code = 0
            for step, call in enumerate((work.wait, lambda: work.get_future().wait(),
                                         lambda: dist.all_reduce(torch.ones(1)))):
                try:
                    call()
                    code = 10 + step
                except Exception as e:  # noqa: BLE001 - what it says is checked
                    if "forked from" not in str(e):
                        print(f"child, step {step}: {e!r}", flush=True)
                        code = 20 + step
            try:
                atexit._run_exitfuncs()  # the module's, as a normal exit runs them
            finally:
                os._exit(code)
        forks.reap(pid, "on the process group")
        open(go, "w").close()
        work.wait()
    after = torch.ones(2)
    dist.all_reduce(after)
    return {"fork": t.tolist() + after.tolist()}


def main():
    global R, N, _gloo
    timeout = float(os.environ.get("DIST_TIMEOUT", "60"))
    dist.init_process_group("ringd", timeout=datetime.timedelta(seconds=timeout))
    R, N = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "ringd", dist.get_backend()
    result = {"rank": R, "size": N, "job": dist.distributed_c10d._get_default_group()._s.job}
    for name in sys.argv[1:]:
        result.update(globals()[f"s_{name}"]())
    print("RESULT " + json.dumps(result), flush=True)
    if os.environ.get("DIST_NO_DESTROY") is None:
        # Every rank is done with Gloo's group before any tears it down: torch 1.13's Gloo
        # aborted a process once (std::terminate at exit) when a peer went first.
        if _gloo is not None:
            dist.barrier(group=_gloo)
        dist.destroy_process_group()
        # ...and its last reference goes now, not in the interpreter's finalization, where
        # torch 1.13 aborted (std::terminate, no Python thread left) about once in 25 runs
        _gloo = None
        gc.collect()


if __name__ == "__main__":
    main()
