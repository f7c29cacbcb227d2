# CUDA tensors through ringd.torch, against the same computed by torch on the GPU.
"""ringd.torch with CUDA tensors: allreduce (every op, in place, out of place, async),
broadcast, allgather (equal and differing first dimensions), reducescatter, alltoall with splits,
and DistributedOptimizer for a few
steps, each checked against what torch computes on the GPU from every rank's inputs. Each runs
with a device arena (tensors copied device to device and reduced by the daemon's CUDA kernels)
and without one (staged through host memory), on one node of 2 ranks and on 2 nodes of 1.

Inputs are whole numbers where the ranks' order of reduction could show (exact in every float
dtype at these sizes), so that results compare bit for bit whatever the reduction order.

Skipped, saying why, where PyTorch has no CUDA device (it asks in a child process: the rank
processes are forked from this one, and CUDA initialised here would fail in them).
"""
import subprocess
import sys

import pytest
import torch

import ringd
import ringd.torch
from ranks import cfg, hvd_shutdown


def _no_cuda_why():
    """None where torch sees a CUDA device, else why not."""
    if torch.version.cuda is None:
        return f"PyTorch {torch.__version__} is built without CUDA"
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired:
        return "asking PyTorch for CUDA devices took over 120 s"
    if r.returncode != 0 or not r.stdout.strip().isdigit():
        return f"PyTorch could not count CUDA devices: {r.stderr.strip()[-300:]}"
    if int(r.stdout) == 0:
        return "no CUDA device here"
    return None


_why = _no_cuda_why()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"CUDA tensors: {_why}")

ARENA = 64 << 20


@pytest.fixture(params=["one_node", "two_single_nodes"])
def layout(request):
    return request.getfixturevalue(request.param)


# ---- on the ranks ----

def _hvd(tag, arena):
    """ringd.torch in job <cluster>.cuda.<tag> with a device arena of arena bytes (0: none);
    returns (hvd, the torch device of this rank's GPU)."""
    hvd_shutdown()
    opts = {"device_arena_size": arena} if arena else {}
    ringd.torch.init(job=f"{cfg()['tag']}.cuda.{tag}", op_timeout_ms=60000, **opts)
    dev = ringd.torch.session().device
    if dev is None:  # a daemon that serves no GPU: the process picks its own
        dev = ringd.torch.local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    return ringd.torch, torch.device("cuda", dev)


def _input(rank, n, dtype, device, seed):
    """Rank's input: whole numbers from -lim to lim, exact in dtype (and in sums of 4)."""
    lim = {torch.bfloat16: 60, torch.float16: 500, torch.uint8: 60}.get(dtype, 1000)
    lo = 0 if dtype == torch.uint8 else -lim
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(lo, lim + 1, (n,), generator=g).to(dtype).to(device)


def _allreduce(tag, arena):
    h, dev = _hvd(tag, arena)
    me, n = h.rank(), h.size()
    checked = 0
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
              torch.int64, torch.uint8]
    for seed, dtype in enumerate(dtypes):
        ins = [_input(r, 100003, dtype, dev, seed) for r in range(n)]
        stacked = torch.stack([x.to(torch.float64) for x in ins])
        ops = [(h.Sum, stacked.sum(0)), (h.Min, stacked.min(0).values),
               (h.Max, stacked.max(0).values)]
        if dtype.is_floating_point:
            ops.append((h.Average, stacked.sum(0) / n))
        for op, want in ops:
            want = want.to(dtype)
            name = f"ar.{seed}.{op}"
            got = h.allreduce(ins[me], name=name + ".out", op=op)
            assert got.device == dev and got.dtype == dtype, (got.device, got.dtype)
            assert torch.equal(got, want), f"{name}: allreduce differs from torch's"
            t = ins[me].clone()
            h.allreduce_(t, name=name + ".in", op=op)
            assert torch.equal(t, want), f"{name}: allreduce_ differs from torch's"
            checked += 2
    # async, several in flight, and a tensor whose last write is still queued on the stream
    xs = [torch.full((1 << 20,), float(me + k), device=dev) for k in range(4)]
    hs = [h.allreduce_async_(x, name=f"async.{k}", op=h.Sum) for k, x in enumerate(xs)]
    for k, (x, hd) in enumerate(zip(xs, hs)):
        h.synchronize(hd)
        assert torch.equal(x, torch.full_like(x, float(sum(r + k for r in range(n))))), k
    y = torch.zeros(1 << 22, device=dev)
    for _ in range(16):
        y.add_(1.0)
    got = h.allreduce(y, name="queued", op=h.Sum)
    assert torch.equal(got, torch.full_like(y, 16.0 * n)), "read before the stream's work ran"
    # non-integer values: a sum of two is one rounding in any order
    if n == 2:
        g = torch.Generator().manual_seed(7 + me)
        x = torch.randn(333331, generator=g).to(dev)
        other = torch.randn(333331, generator=torch.Generator().manual_seed(7 + 1 - me)).to(dev)
        got = h.allreduce(x, name="randn", op=h.Sum)
        assert torch.equal(got, x + other), "a sum of two random f32 tensors differs"
    return checked


def _broadcast_allgather(tag, arena):
    h, dev = _hvd(tag, arena)
    me, n = h.rank(), h.size()
    root = n - 1
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        t = _input(me, 40961, dtype, dev, 3)
        want = _input(root, 40961, dtype, dev, 3)
        got = h.broadcast(t, root_rank=root, name=f"b.{dtype}")
        assert got.device == dev and torch.equal(got, want), f"broadcast of {dtype}"
        h.broadcast_(t, root_rank=root, name=f"b_.{dtype}")
        assert torch.equal(t, want), f"broadcast_ of {dtype}"
    # equal first dimensions, then differing ones (rank r gives r + 1 rows)
    rows = [_input(r, 3 * 1001, torch.float32, dev, 4).view(1001, 3) for r in range(n)]
    got = h.allgather(rows[me], name="g.equal")
    assert torch.equal(got, torch.cat(rows)), "allgather of equal shapes"
    parts = [_input(r, (r + 1) * 7, torch.float16, dev, 5).view(r + 1, 7) for r in range(n)]
    got = h.allgather(parts[me], name="g.uneven")
    assert got.device == dev and torch.equal(got, torch.cat(parts)), "allgather of uneven rows"
    return n


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _batch(rank, step, dev):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(16, 32, generator=g).to(dev), torch.randint(0, 10, (16,), generator=g).to(dev)


def _optimizer(tag, arena):
    """DistributedOptimizer for 4 steps from parameters broadcast from rank 0, against one
    model trained on the mean of every rank's loss (the averaged gradient) on this GPU."""
    h, dev = _hvd(tag, arena)
    me, n = h.rank(), h.size()
    torch.manual_seed(1000 + me)  # different on every rank until the broadcast
    model = _Net().to(dev)
    torch.manual_seed(1000)
    ref = _Net().to(dev)  # rank 0's initial parameters
    h.broadcast_parameters(model.state_dict(), root_rank=0)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(p, q), f"{name} after broadcast_parameters"
    opt = h.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                 named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(4):
        x, y = _batch(me, step, dev)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        ref_opt.zero_grad()
        sum(loss_fn(ref(xr), yr) for xr, yr in (_batch(r, step, dev) for r in range(n))).div(
            n).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.device == dev
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), \
            f"{name}: max difference {(p - q).abs().max().item()} from torch's on the GPU"
    return [p.detach().cpu() for p in model.parameters()]


def _sharded_ops(tag, arena):
    """reducescatter (Horovod's split of rows), grouped_reducescatter, alltoall with uneven
    splits and allgather of differing first dimensions, on CUDA tensors (the library stages
    what its daemon cannot take in device memory), against torch on this GPU."""
    h, dev = _hvd(tag, arena)
    me, n = h.rank(), h.size()
    ins = [_input(r, 7 * 5, torch.float32, dev, 40).view(7, 5) for r in range(n)]
    total = torch.stack(ins).sum(0)
    rows = [7 // n + (1 if r < 7 % n else 0) for r in range(n)]
    mine = total[sum(rows[:me]):sum(rows[:me + 1])]
    got = h.reducescatter(ins[me], op=h.Sum, name="rs")
    assert got.device == dev and torch.equal(got, mine), "reducescatter differs from torch's"
    a, b = h.grouped_reducescatter([ins[me], ins[me] * 2], op=h.Sum, name="grs")
    assert torch.equal(a, mine) and torch.equal(b, mine * 2), "grouped_reducescatter differs"
    # alltoall: rank r sends r + k + 1 rows of 3 to rank k
    send = [torch.cat([torch.full((r + k + 1, 3), float(100 * r + k), device=dev)
                       for k in range(n)]) for r in range(n)]
    out, received = h.alltoall(send[me], splits=[me + k + 1 for k in range(n)], name="a2a")
    want = torch.cat([torch.full((r + me + 1, 3), float(100 * r + me), device=dev)
                      for r in range(n)])
    assert out.device == dev and torch.equal(out, want), "alltoall differs from torch's"
    assert received.tolist() == [r + me + 1 for r in range(n)], received
    parts = [torch.full((r + 2, 4), float(r), device=dev) for r in range(n)]
    got = h.allgather(parts[me], name="agv")
    assert torch.equal(got, torch.cat(parts)), "allgather of differing rows differs"
    return True


# ---- the tests ----

@pytest.mark.parametrize("arena", [ARENA, 0], ids=["device_arena", "host_staged"])
def test_cuda_allreduce_matches_torch(layout, arena):
    checked = layout.run(_allreduce, f"ar{arena}", arena, timeout=180)
    assert checked[0] == checked[-1] > 0


@pytest.mark.parametrize("arena", [ARENA, 0], ids=["device_arena", "host_staged"])
def test_cuda_broadcast_and_allgather_match_torch(layout, arena):
    layout.run(_broadcast_allgather, f"bg{arena}", arena)


@pytest.mark.parametrize("arena", [ARENA, 0], ids=["device_arena", "host_staged"])
def test_cuda_distributed_optimizer_matches_torch(layout, arena):
    params = layout.run(_optimizer, f"opt{arena}", arena)
    for p in params[1:]:  # every rank ends with the same parameters
        assert all(torch.equal(a, b) for a, b in zip(params[0], p))


@pytest.mark.parametrize("arena", [ARENA, 0], ids=["device_arena", "host_staged"])
def test_cuda_reducescatter_alltoall_and_uneven_allgather_match_torch(layout, arena):
    assert layout.run(_sharded_ops, f"sh{arena}", arena) == [True] * layout.world
