#!/usr/bin/python3
# DDP training of a torchvision ResNet on random images, on torch.distributed's backend "ringd".
"""A plain torch.distributed DDP script: ResNet-50 (torchvision, untrained) on random images,
launched by torchrun. What makes it run on ringd is the backend string and the import that
registers it; `--backend gloo` (or nccl) runs the same script on torch's own backends.

    torchrun --standalone --nproc_per_node 2 examples/pytorch/ddp_resnet.py
    torchrun --nnodes 2 --node_rank N --master_addr HOST --nproc_per_node 2 \\
        examples/pytorch/ddp_resnet.py --backend ringd

RINGD_SOCKET names the node's ringd socket when it is not /run/ringd/ringd.sock. On a GPU node
each process trains on cuda:LOCAL_RANK.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

import ringd.torch.distributed  # noqa: F401  (registers the backend "ringd")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="ringd")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=16, help="per process")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # the processes of a node share its cores

    torch.manual_seed(1)  # DDP broadcasts rank 0's parameters anyway
    model = DDP(getattr(torchvision.models, args.model)(num_classes=100).to(device),
                device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=g)
    target = torch.randint(0, 100, (args.batch_size,), generator=g)
    data, target = data.to(device), target.to(device)

    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = torch.tensor([args.batch_size * args.steps / (time.perf_counter() - start)])
    dist.all_reduce(rate)  # images/s of every process, added up
    if rank == 0:
        print(f"{args.model} on {dist.get_backend()}, {world} processes: {rate.item():.1f} "
              f"images/s, loss {loss.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
