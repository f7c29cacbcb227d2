#!/usr/bin/python3
# torch-train: timed ResNet training steps with ringd.torch, DDP on ringd or Gloo, or no communication.
"""One rank of bench/torch-peers.sh: trains torchvision's ResNet-18 (or --model resnet50) on
random 32x32 images with SGD (momentum 0.9) and times every step after a warm-up.

  --peer ringd  ringd.torch's DistributedOptimizer (RINGD_SOCKET, RINGD_JOB, RINGD_WORLD_SIZE;
                RINGD_LIBRARY for the build under test); the optimizer's synchronize() is
                called on its own, timed, then step() under skip_synchronize().
  --peer ddp    torch.nn.parallel.DistributedDataParallel on Gloo (--init tcp://...), default
                25 MiB buckets; its allreduces run inside backward.
  --peer ddp-ringd  the same DDP on the torch.distributed backend "ringd" (ringd.torch.distributed;
                RINGD_SOCKET and RINGD_JOB as for ringd).
  --peer none   no communication at all: the compute-only reference.

Communication wait, the same for every peer: from the moment the last gradient of the step is
computed (a hook on every parameter's gradient records when autograd produces it) until every
gradient is reduced: the end of backward() (DDP waits for its buckets there) plus, for ringd,
synchronize(). What overlaps with the backward pass is not counted: only what the step waits.

Rank 0 prints one line (times: means per step over the timed steps, averaged over the ranks;
elapsed and images/s: the slowest rank's):
  RESULT peer=P ranks=N batch=B steps=S img_per_s=X step_ms=T fwd_ms=F bwd_ms=K wait_ms=W
Exit status: 0 done, 1 the ranks' parameters differ at the end, 2 a failure.
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision


def main():
    ap = argparse.ArgumentParser(description="one rank of bench/torch-peers.sh")
    ap.add_argument("--peer", choices=["ringd", "ddp", "ddp-ringd", "none"], required=True)
    ap.add_argument("--model", choices=["resnet18", "resnet50"], default="resnet18")
    ap.add_argument("--rank", type=int, default=0, help="ddp and none: this rank")
    ap.add_argument("--world", type=int, default=2, help="ddp and none: the ranks")
    ap.add_argument("--init", default=None, help="ddp: the process group's init_method")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32, help="images per rank and step")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    hvd = dist = None
    if args.peer == "ringd":
        import ringd.torch as hvd

        hvd.init()
        rank, world = hvd.rank(), hvd.size()
    else:
        rank, world = args.rank, args.world
        if args.peer in ("ddp", "ddp-ringd"):
            import torch.distributed as dist

            backend = "gloo"
            if args.peer == "ddp-ringd":
                import ringd.torch.distributed  # noqa: F401  (registers the backend "ringd")

                backend = "ringd"
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            dist.init_process_group(backend, init_method=args.init, rank=rank,
                                    world_size=world, timeout=datetime.timedelta(seconds=120))

    torch.manual_seed(1)
    # 1000 classes: ResNet-18 11.7 M parameters (46.8 MB), ResNet-50 25.6 M (102 MB)
    model = getattr(torchvision.models, args.model)()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if args.peer == "ringd":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    elif args.peer in ("ddp", "ddp-ringd"):
        model = torch.nn.parallel.DistributedDataParallel(model)

    last_grad = [0.0]

    def grad_seen(_grad):
        last_grad[0] = max(last_grad[0], time.perf_counter())

    for p in params:
        p.register_hook(grad_seen)

    g = torch.Generator().manual_seed(100 + rank)
    data = torch.randn(args.batch, 3, 32, 32, generator=g)
    target = torch.randint(0, 1000, (args.batch,), generator=g)

    fwd = bwd = wait = 0.0
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            fwd = bwd = wait = 0.0
            start = time.perf_counter()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(data), target)
        t1 = time.perf_counter()
        last_grad[0] = 0.0
        loss.backward()
        t2 = time.perf_counter()
        if args.peer == "ringd":
            opt.synchronize()
            t3 = time.perf_counter()
            with opt.skip_synchronize():
                opt.step()
        else:
            t3 = t2
            opt.step()
        fwd += t1 - t0
        bwd += t2 - t1
        if args.peer != "none":
            wait += (t2 - last_grad[0]) + (t3 - t2)
    elapsed = time.perf_counter() - start

    # Over the ranks: the slowest elapsed, the mean of the per-step means; a checksum of the
    # parameters by MIN and MAX (equal: every rank holds the same model).
    stats = torch.tensor([elapsed, fwd, bwd, wait], dtype=torch.float64)
    checksum = sum(float(p.detach().double().sum()) for p in params)
    lo = hi = torch.tensor([checksum], dtype=torch.float64)
    if hvd is not None:
        slowest = hvd.allreduce(stats, name="stats.max", op=hvd.Max)[0].item()
        stats = hvd.allreduce(stats, name="stats.avg", op=hvd.Average)
        lo = hvd.allreduce(lo, name="checksum.min", op=hvd.Min)
        hi = hvd.allreduce(hi, name="checksum.max", op=hvd.Max)
    elif dist is not None:
        mx = stats.clone()
        dist.all_reduce(mx, op=dist.ReduceOp.MAX)
        slowest = mx[0].item()
        dist.all_reduce(stats)
        stats /= world
        lo, hi = lo.clone(), hi.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    else:
        slowest = elapsed
    n = args.steps
    if rank == 0:
        print(f"RESULT peer={args.peer} ranks={world} batch={args.batch} steps={n} "
              f"img_per_s={world * args.batch * n / slowest:.2f} "
              f"step_ms={1000 * slowest / n:.2f} fwd_ms={1000 * stats[1].item() / n:.2f} "
              f"bwd_ms={1000 * stats[2].item() / n:.2f} wait_ms={1000 * stats[3].item() / n:.2f}",
              flush=True)
    same = args.peer == "none" or lo.item() == hi.item()
    if not same:
        print(f"torch-train.py: rank {rank}: the ranks' parameters differ (checksums "
              f"{lo.item()!r}..{hi.item()!r})", file=sys.stderr)
    if hvd is not None:
        hvd.shutdown()
    elif dist is not None:
        dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - one line saying what failed, exit status 2
        print(f"torch-train.py: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
