#!/usr/bin/python3
# Horovod-style MLP training on synthetic MNIST-sized data, on ringd by its import alone.
"""Data-parallel training of a 784-128-10 MLP on synthetic 28x28 "digits", written as a Horovod
script: swap the import below for `import horovod.torch as hvd` and it runs on Horovod; as it
is, every rank talks to its node's ringd (RINGD_SOCKET, RINGD_JOB, RINGD_WORLD_SIZE,
RINGD_LOCAL_SIZE). Nothing is downloaded: the images are random (normal), and each label is the
argmax of a fixed random projection of its image, so the model has something to learn.

    RINGD_JOB=mlp RINGD_WORLD_SIZE=2 python3 examples/pytorch/mnist_mlp.py   # on each rank
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed

import ringd.torch as hvd


class Net(nn.Module):
    """784 -> 128 -> 10, ReLU."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def synthetic_mnist(samples, seed):
    """samples random 1x28x28 images and their labels (the same on every rank for one seed)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(samples, 1, 28, 28, generator=g)
    projection = torch.randn(28 * 28, 10, generator=g)
    labels = images.flatten(1).matmul(projection).argmax(1)
    return torch.utils.data.TensorDataset(images, labels)


def metric_average(value, name):
    """value averaged over every rank."""
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4096, help="training set size")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="per rank (scaled by size)")
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one CPU thread per rank: the ranks of a node share its cores

    train_set = synthetic_mnist(args.samples, args.seed)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank())
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                                momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    if hvd.rank() == 0:
        print(f"mnist_mlp: {hvd.size()} ranks, {len(loader)} steps of {args.batch_size} per "
              f"rank per epoch", flush=True)
    for epoch in range(args.epochs):
        model.train()
        sampler.set_epoch(epoch)
        total, correct, batches = 0.0, 0, 0
        for data, target in loader:
            optimizer.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output, target)
            loss.backward()
            optimizer.step()
            total += loss.item()
            correct += (output.argmax(1) == target).sum().item()
            batches += 1
        loss = metric_average(total / batches, "avg_loss")
        accuracy = metric_average(correct / (batches * args.batch_size), "avg_accuracy")
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss:.4f} accuracy {100 * accuracy:.1f}%", flush=True)
    # every rank holds the same model: a checksum of it, the same printed by rank 0 alone
    checksum = sum(float(p.double().sum()) for p in model.parameters())
    lo = hvd.allreduce(torch.tensor([checksum]), name="checksum.min", op=hvd.Min).item()
    hi = hvd.allreduce(torch.tensor([checksum]), name="checksum.max", op=hvd.Max).item()
    if hvd.rank() == 0:
        print(f"parameters identical on all {hvd.size()} ranks: {lo == hi} "
              f"(checksum {checksum:.9g})", flush=True)
    hvd.shutdown()
    return 0 if lo == hi else 1


if __name__ == "__main__":
    raise SystemExit(main())
