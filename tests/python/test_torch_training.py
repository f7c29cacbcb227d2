# DistributedOptimizer, state broadcasts and SyncBatchNorm against torch.distributed Gloo and torch.
"""Training through ringd.torch must equal training whose gradients torch.distributed (Gloo)
averages, step for step; broadcast state must equal the root's; SyncBatchNorm must equal one
BatchNorm over every rank's batch."""
import copy

import pytest
import torch
import torch.nn.functional as F

import ranks
import ringd.torch


def _model():
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batch(rank, step, micro):
    g = torch.Generator().manual_seed(10000 * rank + 100 * step + micro)
    return torch.randn(8, 10, generator=g), torch.randn(8, 4, generator=g)


def _worst_relative(model, ref):
    """The largest |a - b| / max|b| over the parameters of two models."""
    worst = 0.0
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        worst = max(worst, ((a - b).abs().max() / b.abs().max()).item())
    return worst


def r_train_against_gloo(steps, passes, compression, make_opt, predivide=1.0,
                         set_to_none=False):
    hvd, dist = ranks.hvd(), ranks.gloo()
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(100 + r)  # every rank starts elsewhere...
    model = _model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # ...until rank 0's arrive
    torch.manual_seed(100)
    ref = _model()
    for a, b in zip(model.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b), "broadcast_parameters did not give rank 0's parameters"
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes,
                                   compression=getattr(hvd.Compression, compression),
                                   gradient_predivide_factor=predivide)
    ref_opt = make_opt(ref.parameters())
    for step in range(steps):
        for micro in range(passes):
            x, y = _batch(r, step, micro)
            F.mse_loss(model(x), y).backward()
            F.mse_loss(ref(x), y).backward()
        opt.step()
        if compression == "none":  # reduced where they lie: in the arena, nothing copied
            assert all(hvd.session().in_arena(p.grad) for p in model.parameters())
        opt.zero_grad(set_to_none=set_to_none)
        for p in ref.parameters():
            dist.all_reduce(p.grad)
            p.grad /= n
        ref_opt.step()
        ref_opt.zero_grad()
        assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    return _worst_relative(model, ref)


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _adam(params):
    return torch.optim.Adam(params, lr=0.01)


@pytest.mark.parametrize("make_opt", [_sgd, _adam], ids=["sgd-momentum", "adam"])
def test_distributed_optimizer_equals_gloo_averaging(cluster, make_opt):
    worst = cluster.run(r_train_against_gloo, 6, 1, "none", make_opt)
    assert max(worst) <= 1e-6, worst


def test_gradients_set_to_none_between_steps(cluster):
    """zero_grad(set_to_none=True): backward makes new gradients, moved into the arena."""
    worst = cluster.run(r_train_against_gloo, 4, 1, "none", _sgd, 1.0, True)
    assert max(worst) <= 1e-6, worst


def r_gradients_survive_shutdown():
    hvd = ranks.hvd()
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = _batch(hvd.rank(), 0, 0)
    F.mse_loss(model(x), y).backward()
    opt.step()
    before = [p.grad.clone() for p in model.parameters()]
    assert all(hvd.session().in_arena(p.grad) for p in model.parameters())
    ranks.hvd_shutdown()
    after = [p.grad for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(after, before)), "gradients lost at shutdown"
    assert any(bool(a.abs().sum() > 0) for a in after)
    return True


def r_small_arena():
    """An arena that cannot hold the gradients twice over: they stay in ordinary memory,
    libringd stages each allreduce, and training is the same on every rank."""
    ranks.hvd_shutdown()
    hvd = ringd.torch
    hvd.init(job=f"{ranks.cfg()['tag']}.small-arena", arena_size=1 << 20)
    torch.manual_seed(7)
    model = torch.nn.Linear(400, 400)  # 641 KB of gradients: 1.28 MB twice over
    hvd.broadcast_parameters(model.state_dict(), 0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(2):
        opt.zero_grad()
        model(torch.full((2, 400), float(hvd.rank() + step))).sum().backward()
        opt.step()
        assert not any(hvd.session().in_arena(p.grad) for p in model.parameters())
    total = float(model.weight.double().sum())
    hvd.shutdown()
    return total


def test_gradients_stay_outside_an_arena_too_small_for_them(cluster):
    got = cluster.run(r_small_arena)
    assert len(set(got)) == 1, got


def test_gradients_keep_their_values_after_shutdown(one_node):
    assert one_node.run(r_gradients_survive_shutdown) == [True, True]


def test_backward_passes_per_step_accumulate_locally(cluster):
    """Three backward passes summed locally, then one allreduce (split by a predivide factor)."""
    worst = cluster.run(r_train_against_gloo, 4, 3, "none", _sgd, 4.0)
    assert max(worst) <= 1e-6, worst


def test_fp16_compression(one_node):
    """Gradients travel as float16: close to the exact average, but not equal to it."""
    worst = one_node.run(r_train_against_gloo, 4, 1, "fp16", _sgd)
    assert 1e-6 < max(worst) < 5e-3, worst


def r_optimizer_state(kind):
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(7)
    model = _model()
    if kind == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=0.001 * (r + 1), betas=(0.9, 0.99 - r / 100))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01 * (r + 1), momentum=0.5 + r / 10)
    for i in range(r + 1):  # every rank's state differs: steps, moments, buffers
        x, y = _batch(r, i, 0)
        F.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    snapshot = {"groups": [{k: v for k, v in g.items() if k != "params"}
                           for g in opt.param_groups],
                "state": [{k: v.clone() if torch.is_tensor(v) else v
                           for k, v in opt.state[p].items()} for p in model.parameters()]}
    every = hvd.allgather_object(snapshot, name=f"snapshot.{kind}")
    root = every[0]
    for q, other in enumerate(every):
        assert other["groups"] == root["groups"], (q, other["groups"], root["groups"])
        for a, b in zip(other["state"], root["state"]):
            assert a.keys() == b.keys()
            for k in a:
                assert torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k], (q, k)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001 if kind == "adam" else 0.01)
    keys = sorted(root["state"][0])
    # A fresh optimizer gets state on every rank without moving a parameter (weight decay!).
    fresh_model = _model()
    before = [p.detach().clone() for p in fresh_model.parameters()]
    base = (torch.optim.AdamW(fresh_model.parameters(), lr=0.1, weight_decay=0.5)
            if kind == "adam" else torch.optim.SGD(fresh_model.parameters(), lr=0.1,
                                                   momentum=0.9, weight_decay=0.5))
    fresh = hvd.DistributedOptimizer(base, named_parameters=fresh_model.named_parameters())
    hvd.broadcast_optimizer_state(fresh, root_rank=0)
    assert all(torch.equal(a, b) for a, b in zip(before, fresh_model.parameters()))
    # as Horovod leaves them: zeros where there were none (a script may broadcast them next)
    assert all(p.grad is not None and not p.grad.any() for p in fresh_model.parameters())
    assert len(fresh.state) == len(before)
    return keys


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_broadcast_optimizer_state(cluster, kind):
    keys = cluster.run(r_optimizer_state, kind)
    want = ["exp_avg", "exp_avg_sq", "step"] if kind == "adam" else ["momentum_buffer"]
    assert keys == [want] * cluster.world


def r_objects():
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    big = {"nested": [1, 2.5, ("x", None)], "text": "y" * 5000, "t": torch.arange(4)}
    got = hvd.broadcast_object(big if r == 0 else None, root_rank=0)
    assert got["nested"] == big["nested"] and got["text"] == big["text"]
    assert torch.equal(got["t"], big["t"])
    assert hvd.broadcast_object(r * 10, root_rank=n - 1, name="from.last") == (n - 1) * 10
    every = hvd.allgather_object({"rank": r, "pad": "z" * (300 * r)})
    assert [o["rank"] for o in every] == list(range(n))
    assert [len(o["pad"]) for o in every] == [300 * q for q in range(n)]
    return len(every)


def test_broadcast_and_allgather_objects(cluster):
    assert cluster.run(r_objects) == [cluster.world] * cluster.world


def r_sync_batch_norm():
    hvd = ranks.hvd()
    r, n = hvd.rank(), hvd.size()
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(3 + q, 4, 5, generator=g) * (q + 1) + q for q in range(n)]  # ragged
    dys = [torch.randn(3 + q, 4, 5, generator=g) for q in range(n)]
    weight, bias = torch.randn(4, generator=g), torch.randn(4, generator=g)
    bn, ref = hvd.SyncBatchNorm(4, momentum=0.2), torch.nn.BatchNorm1d(4, momentum=0.2)
    for m in (bn, ref):
        with torch.no_grad():
            m.weight.copy_(weight)
            m.bias.copy_(bias)
    x = xs[r].clone().requires_grad_()
    y = bn(x)
    (y * dys[r]).sum().backward()
    xr = torch.cat(xs).requires_grad_()
    yr = ref(xr)
    (yr * torch.cat(dys)).sum().backward()
    start = sum(3 + q for q in range(r))
    mine = slice(start, start + 3 + r)
    torch.testing.assert_close(y, yr[mine], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, xr.grad[mine], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(hvd.allreduce(bn.weight.grad, op=hvd.Sum), ref.weight.grad,
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(hvd.allreduce(bn.bias.grad, op=hvd.Sum), ref.bias.grad,
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=1e-5, atol=1e-6)
    bn.eval()
    ref.eval()
    torch.testing.assert_close(bn(xs[r]), ref(xs[r]), rtol=1e-5, atol=1e-5)
    return True


def test_sync_batch_norm_equals_batch_norm_over_all_ranks(cluster):
    assert cluster.run(r_sync_batch_norm) == [True] * cluster.world
