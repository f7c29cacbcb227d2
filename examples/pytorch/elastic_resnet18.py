#!/usr/bin/python3
# Horovod-style elastic ResNet-18 training on random 32x32 images, on ringd by its import alone.
"""Elastic training as in Horovod's elastic examples: the state (model, optimizer, epoch,
batch) is committed every few batches; when a node or a process joins or leaves, every rank
restores the last commit, the reset callback rescales the learning rate to the new size, the
state is synchronised from the ranks that have it, and training goes on. Start more ranks of
the job on other nodes while it runs (min_size: RINGD_MIN_SIZE), or stop a node's ringd.
Swap the import for `import horovod.torch as hvd` (and launch with horovodrun) to run it on
Horovod. A rank whose node is drained stops with ringd.Closed (under Horovod its driver stops
it), which ends this script with a traceback; the others go on.

    RINGD_JOB=elastic RINGD_WORLD_SIZE=2 RINGD_MIN_SIZE=1 \
        python3 examples/pytorch/elastic_resnet18.py
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision

import ringd.torch as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches-per-epoch", type=int, default=20)
    parser.add_argument("--batches-per-commit", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--base-lr", type=float, default=0.0125, help="per rank")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(1)
    torch.set_num_threads(1)  # one CPU thread per rank: the ranks of a node share its cores

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def on_state_reset():
        # the learning rate follows the number of ranks
        for group in optimizer.param_groups:
            group["lr"] = args.base_lr * hvd.size()
        if hvd.rank() == 0:
            print(f"reset: {hvd.size()} ranks now, lr {args.base_lr * hvd.size():g}",
                  flush=True)

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    state.register_reset_callbacks([on_state_reset])

    @hvd.elastic.run
    def train(state):
        model.train()
        while state.epoch < args.epochs:
            while state.batch < args.batches_per_epoch:
                if state.batch % args.batches_per_commit == 0:
                    state.commit()  # a membership change comes back to here
                # a rank's data set is 4 random batches, the same in every epoch (something
                # the model can learn), chosen by the batch's number and the rank
                g = torch.Generator().manual_seed((state.batch % 4) * 1000 + hvd.rank())
                data = torch.randn(args.batch_size, 3, 32, 32, generator=g)
                target = torch.randint(0, 10, (args.batch_size,), generator=g)
                optimizer.zero_grad()
                loss = F.cross_entropy(model(data), target)
                loss.backward()
                optimizer.step()
                if hvd.rank() == 0:
                    print(f"epoch {state.epoch} batch {state.batch}: loss {loss.item():.4f} "
                          f"({hvd.size()} ranks)", flush=True)
                state.batch += 1
            state.epoch += 1
            state.batch = 0
            state.commit()

    train(state)
    if hvd.rank() == 0:
        print(f"done: {args.epochs} epochs on {hvd.size()} ranks", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
