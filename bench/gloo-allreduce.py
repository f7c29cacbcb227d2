#!/usr/bin/python3
"""gloo-allreduce: torch.distributed Gloo allreduce (f32 sum) on loopback, timed the way
ringd-bench times itself and printed in the same table, so bench/net-peers.sh can set them
side by side.

Usage: bench/gloo-allreduce.py [--ranks N] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]
                               [-w WARMUP] [-c 0|1]
Exit status: 0 all results right, 1 some #wrong > 0, 2 a failure.
"""
import argparse
import datetime
import os
import re
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from peerlib import free_port


def parse_size(text):
    """A byte count with an optional K/M/G (2^10/2^20/2^30) suffix, as bench/common.c reads it."""
    m = re.fullmatch(r"([0-9]+)([kKmMgG](iB)?)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (suffixes K, M, G)")
    shift = {"": 0, "k": 10, "m": 20, "g": 30}[(m.group(2) or "")[:1].lower()]
    value = int(m.group(1)) << shift
    if value == 0:
        raise argparse.ArgumentTypeError("a size must be at least 1 byte")
    return value


def count_for(nbytes):
    """Number of f32 elements a row of nbytes reduces (at least one)."""
    return max(1, nbytes // 4)


def check_row(count, rank, nranks):
    """One extra allreduce with known inputs; the number of elements on this rank that differ
    from the exact sum (every value stays below 2^24, so f32 sums are exact)."""
    pattern = (torch.arange(count, dtype=torch.int64) % 61 + 1).to(torch.float32)
    buf = pattern * float(rank + 1)
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    want = pattern * float(nranks * (nranks + 1) // 2)
    return int((buf != want).sum().item())


def print_header(nranks, args):
    print(f"# gloo-allreduce: {nranks} ranks, allreduce f32 sum, iters {args.iters}, "
          f"warmup {args.warmup} (time: median over iterations of the slowest rank)")
    print("#       size        count   type  redop     time(us)   algbw(GB/s)   busbw(GB/s)"
          "  #wrong", flush=True)


def print_row(nbytes, count, seconds, bus_factor, wrong):
    algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    print(f"{nbytes:12d} {count:12d} {'f32':>6s} {'sum':>6s} {seconds * 1e6:12.2f} "
          f"{algbw:13.2f} {algbw * bus_factor:13.2f} {wrong:7d}", flush=True)


def rank_main(rank, nranks, port, args, status):
    """One rank: joins the group, sweeps the sizes, prints on rank 0, records its exit status."""
    torch.set_num_threads(1)  # the bench is about the transport; keep the cores for it
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nranks, timeout=datetime.timedelta(seconds=120))
    buf = torch.zeros(count_for(args.max_bytes), dtype=torch.float32)
    times = torch.zeros(args.iters, dtype=torch.float64)
    bus_factor = 2.0 * (nranks - 1) / nranks
    if rank == 0:
        print_header(nranks, args)
    result = 0
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = count_for(nbytes)
        view = buf[:count]
        view.zero_()  # zeros stay zeros under sum, so repeated in-place reduces stay bounded
        for _ in range(args.warmup):
            dist.all_reduce(view, op=dist.ReduceOp.SUM)
        for i in range(args.iters):
            t0 = time.perf_counter()
            dist.all_reduce(view, op=dist.ReduceOp.SUM)
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        wrong = check_row(count, rank, nranks) if args.check else 0
        total = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        if total.item() > 0:
            result = 1
        if rank == 0:
            print_row(count * 4, count, statistics.median(times.tolist()), bus_factor,
                      int(total.item()))
        nbytes *= args.factor
    dist.destroy_process_group()
    status[rank] = result


def main():
    p = argparse.ArgumentParser(
        description="torch.distributed Gloo allreduce (f32 sum) on loopback, nccl-tests table")
    p.add_argument("--ranks", type=int, default=2, help="processes to start (default 2)")
    p.add_argument("-b", dest="min_bytes", type=parse_size, default=4,
                   help="smallest size in bytes, suffix K/M/G (default 4)")
    p.add_argument("-e", dest="max_bytes", type=parse_size, default=64 << 20,
                   help="largest size in bytes (default 64M)")
    p.add_argument("-f", dest="factor", type=parse_size, default=4,
                   help="size multiplier between rows, >= 2 (default 4)")
    p.add_argument("-n", dest="iters", type=int, default=20,
                   help="timed iterations per size (default 20)")
    p.add_argument("-w", dest="warmup", type=int, default=5,
                   help="untimed iterations per size (default 5)")
    p.add_argument("-c", dest="check", type=int, choices=(0, 1), default=1,
                   help="check the result of one extra op per size (default 1)")
    args = p.parse_args()
    if (args.ranks < 2 or args.factor < 2 or args.iters < 1 or args.warmup < 0
            or args.min_bytes > args.max_bytes):
        p.error("bad arguments: need --ranks >= 2, -f >= 2, -n >= 1, -w >= 0, -b <= -e")

    # Gloo would otherwise pick the interface of the host name, which may not be loopback.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    status = mp.get_context("spawn").Array("i", [2] * args.ranks, lock=False)
    try:
        mp.spawn(rank_main, args=(args.ranks, free_port(), args, status), nprocs=args.ranks,
                 join=True)
    except Exception as e:  # a rank raised or died: mp.spawn says which
        print(f"gloo-allreduce: {e}", file=sys.stderr)
        return 2
    return max(status)


if __name__ == "__main__":
    sys.exit(main())
