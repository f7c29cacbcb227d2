#!/usr/bin/python3
"""gloo-model: one training step's gradients through torch.distributed Gloo in DDP's buckets,
timed as `ringd-bench --model` times itself, ending with the same "# model" line.

The tensor list is a model file ("name count" per line, declaration order; `ringd-bench --model
resnet50 --list` writes one). Buckets are DDP's defaults: gradients in reverse order, the first
bucket capped at 1 MiB (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES), the others at 25 MiB
(bucket_cap_mb); each gradient is copied into its bucket, each full bucket is allreduced
asynchronously, and the results are copied back, as DDP's reducer does.

Usage: bench/gloo-model.py MODEL_FILE [--ranks N] [--bucket-mb 25] [--gap-us 0] [-n ITERS]
                           [-w WARMUP] [-c 0|1]
Exit status: 0 all results right, 1 some #wrong > 0, 2 a failure.
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from peerlib import free_port

FIRST_BUCKET_BYTES = 1 << 20


def load_model(path):
    """[(name, count)] from a model file, as bench/model.c reads it."""
    tensors = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 2 or not fields[1].isdigit() or int(fields[1]) == 0:
                raise ValueError(f"{path}:{lineno}: expected \"name count\"")
            tensors.append((fields[0], int(fields[1])))
    if not tensors:
        raise ValueError(f"{path}: no tensors")
    return tensors


def buckets_of(counts, cap_bytes):
    """DDP's bucket assignment (compute_bucket_assignment_by_size): indices in reverse order, a
    bucket closed once it holds at least its cap."""
    buckets, cur, cur_bytes, cap = [], [], 0, FIRST_BUCKET_BYTES
    for i in reversed(range(len(counts))):
        cur.append(i)
        cur_bytes += counts[i] * 4
        if cur_bytes >= cap:
            buckets.append(cur)
            cur, cur_bytes, cap = [], 0, cap_bytes
    if cur:
        buckets.append(cur)
    return buckets


def pattern(rank, first, count):
    """Rank r's input from pattern element first on: small integers, exact in f32 sums (bench/
    common.c's rb_pattern; tensor i starts at element 7 i, as ringd-bench's do)."""
    return ((torch.arange(first, first + count, dtype=torch.int64) + rank * 5) % 13
            + 1).to(torch.float32)


def step(grads, buckets, flats, gap_s):
    """One backward pass: gradients become ready in reverse order (gap_s apart); a bucket goes
    out when its last gradient is ready; then waits for all and copies the results back."""
    works = []
    first = True
    for b, idx in enumerate(buckets):
        off = 0
        for i in idx:
            if not first and gap_s > 0:
                time.sleep(gap_s)
            first = False
            n = grads[i].numel()
            flats[b][off:off + n].copy_(grads[i])
            off += n
        works.append(dist.all_reduce(flats[b], op=dist.ReduceOp.SUM, async_op=True))
    for b, idx in enumerate(buckets):
        works[b].wait()
        off = 0
        for i in idx:
            n = grads[i].numel()
            grads[i].copy_(flats[b][off:off + n])
            off += n


def rank_main(rank, nranks, port, args, model, status):
    torch.set_num_threads(1)  # the bench is about the transport; keep the cores for it
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nranks, timeout=datetime.timedelta(seconds=300))
    counts = [c for _, c in model]
    grads = [torch.zeros(c, dtype=torch.float32) for c in counts]
    buckets = buckets_of(counts, args.bucket_mb << 20)
    flats = [torch.zeros(sum(counts[i] for i in idx), dtype=torch.float32) for idx in buckets]
    gap_s = args.gap_us / 1e6
    for _ in range(args.warmup):
        step(grads, buckets, flats, gap_s)
    times = torch.zeros(args.iters, dtype=torch.float64)
    for i in range(args.iters):
        t0 = time.perf_counter()
        step(grads, buckets, flats, gap_s)
        times[i] = time.perf_counter() - t0
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    wrong = 0
    if args.check:
        for i, (g, c) in enumerate(zip(grads, counts)):
            g.copy_(pattern(rank, 7 * i, c))
        step(grads, buckets, flats, gap_s)
        for i, (g, c) in enumerate(zip(grads, counts)):
            want = sum(pattern(r, 7 * i, c) for r in range(nranks))
            wrong += int((g != want).sum().item())
    total = torch.tensor([wrong], dtype=torch.int64)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    if rank == 0:
        name = os.path.basename(args.model)
        nbytes = sum(counts) * 4
        print(f"# gloo-model: {nranks} ranks, model {name} ({len(counts)} tensors, {nbytes} "
              f"bytes), allreduce f32 sum in DDP buckets (first 1 MiB, then {args.bucket_mb} MiB), "
              f"gap {args.gap_us} us, iters {args.iters}, warmup {args.warmup}")
        print("# step times (ms, slowest rank): "
              + " ".join(f"{t * 1e3:.2f}" for t in times.tolist()))
        print(f"# #wrong {int(total.item())}")
        step_ms = statistics.median(times.tolist()) * 1e3
        print(f"# model {name}: tensors {len(counts)} bytes {nbytes} step_ms {step_ms:.2f} "
              f"ring_passes {len(buckets)} ops_per_pass {len(counts) / len(buckets):.1f}",
              flush=True)
    dist.destroy_process_group()
    status[rank] = 1 if total.item() > 0 else 0


def main():
    p = argparse.ArgumentParser(description="a model's gradients through Gloo in DDP's buckets")
    p.add_argument("model", help="model file: one \"name count\" per line")
    p.add_argument("--ranks", type=int, default=2, help="processes to start (default 2)")
    p.add_argument("--bucket-mb", type=int, default=25, help="DDP bucket_cap_mb (default 25)")
    p.add_argument("--gap-us", type=int, default=0,
                   help="sleep between two gradients, standing in for compute (default 0)")
    p.add_argument("-n", dest="iters", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("-w", dest="warmup", type=int, default=5, help="untimed steps (default 5)")
    p.add_argument("-c", dest="check", type=int, choices=(0, 1), default=1,
                   help="check the results of one extra step (default 1)")
    args = p.parse_args()
    if args.ranks < 2 or args.iters < 1 or args.warmup < 0 or args.bucket_mb < 1 or args.gap_us < 0:
        p.error("bad arguments: need --ranks >= 2, -n >= 1, -w >= 0, --bucket-mb >= 1")
    try:
        model = load_model(args.model)
    except (OSError, ValueError) as e:
        print(f"gloo-model: {e}", file=sys.stderr)
        return 2
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    status = mp.get_context("spawn").Array("i", [2] * args.ranks, lock=False)
    try:
        mp.spawn(rank_main, args=(args.ranks, free_port(), args, model, status),
                 nprocs=args.ranks, join=True)
    except Exception as e:  # a rank raised or died: mp.spawn says which
        print(f"gloo-model: {e}", file=sys.stderr)
        return 2
    return max(status)



if __name__ == "__main__":
    sys.exit(main())
