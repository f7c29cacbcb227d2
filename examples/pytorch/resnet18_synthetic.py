#!/usr/bin/python3
# Horovod-style ResNet-18 (torchvision) on random 32x32 images, on ringd by its import alone.
"""Horovod's synthetic benchmark, on a small scale: ResNet-18 (torchvision, untrained) trained on
random 32x32 images for a few iterations, printing images/s on rank 0. Swap the import for
`import horovod.torch as hvd` and it runs on Horovod; nothing is downloaded.

    RINGD_JOB=resnet RINGD_WORLD_SIZE=2 python3 examples/pytorch/resnet18_synthetic.py
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

import ringd.torch as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-warmup-batches", type=int, default=2)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=3)
    parser.add_argument("--fp16-allreduce", action="store_true",
                        help="gradients travel as float16")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(1)
    torch.set_num_threads(1)  # one CPU thread per rank: the ranks of a node share its cores

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 10, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(s):
        if hvd.rank() == 0:
            print(s, flush=True)

    log(f"Model: resnet18, batch size {args.batch_size} per rank, {hvd.size()} ranks, "
        f"{args.image_size}x{args.image_size} images")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    rates = []
    for i in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / t
        log(f"Iter #{i}: {rate:.1f} img/sec per rank")
        rates.append(rate)
    mean, conf = np.mean(rates), 1.96 * np.std(rates)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} ranks: {hvd.size() * mean:.1f} "
        f"+-{hvd.size() * conf:.1f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
