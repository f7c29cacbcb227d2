#!/usr/bin/python3
# FSDP training of an MLP on torch.distributed's backend "ringd": sharded parameters and gradients.
"""A plain torch.distributed FSDP script: an MLP whose parameters, gradients and optimizer state
are sharded across the processes (FullyShardedDataParallel: all_gather_into_tensor before each
layer, reduce_scatter_tensor of its gradients after), learning a fixed random linear map.
What makes it run on ringd is the backend string and the import that registers it.

    torchrun --standalone --nproc_per_node 2 examples/pytorch/fsdp_mlp.py
    torchrun --standalone --nproc_per_node 2 examples/pytorch/fsdp_mlp.py --backend gloo

(Debian's PyTorch 1.13 cannot import FSDP under Python 3.11: run it with PyTorch 2.x.)
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

import ringd.torch.distributed  # noqa: F401  (registers the backend "ringd")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="ringd")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)

    torch.manual_seed(0)
    w = args.width
    target_map = torch.randn(w, w) / w ** 0.5  # what the model learns: the same on every rank
    layers = [nn.Sequential(nn.Linear(w, w), nn.ReLU()) for _ in range(3)] + [nn.Linear(w, w)]
    model = FSDP(nn.Sequential(*[FSDP(layer, device_id=device if device.type == "cuda" else None)
                                 for layer in layers]),
                 device_id=device if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(32, w, generator=g)
        y = x @ target_map
        optimizer.zero_grad()
        loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
        loss.backward()
        optimizer.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
