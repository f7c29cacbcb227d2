# Horovod's state helpers for ringd.torch: broadcast of parameters, optimizer state and objects.
"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object.

Objects travel pickled (the standard library's pickle: what it cannot pickle, such as lambdas,
cannot be sent); only pickles from the job's own ranks are ever loaded.
"""
import pickle

import torch

from . import mpi_ops
from .mpi_ops import (_allgather_with_dims, _check_process_set, _noname, broadcast_,
                      broadcast_async_, global_process_set, rank, synchronize)


def _object_name(kind, name):
    """The base name of an object's ops: name, or the kind's per-process counter. (Horovod
    defaults to the object's type name, which differs between a root sending a dict and
    ranks passing None, and then never matches.)"""
    if name is not None:
        return name
    k = _noname[kind]
    _noname[kind] += 1
    return f"{kind}.noname.{k}"


def broadcast_parameters(params, root_rank):
    """Copies root_rank's parameters into every rank's, in place: params is a dict such as
    model.state_dict() (broadcast by key, in sorted order), or a list or iterable of tensors
    or of (name, tensor) pairs such as model.named_parameters()."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, torch.Tensor):
        raise ValueError("broadcast_parameters takes a dict or a list of tensors, not a tensor "
                         "(use broadcast_ for one)")
    else:
        try:
            items = [p if isinstance(p, tuple) else (None, p) for p in params]
        except TypeError:
            raise ValueError(f"invalid params of type: {type(params)}") from None
    handles = [broadcast_async_(p, root_rank, name) for name, p in items]
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's obj on every rank (pickled, its size then its bytes broadcast)."""
    _check_process_set(process_set)
    base = _object_name("broadcast_object", name)
    if rank() == root_rank:
        try:
            data = pickle.dumps(obj)
        except Exception as e:  # every rank hears it (size -1) instead of waiting for the size
            broadcast_(torch.tensor([-1], dtype=torch.int64), root_rank, base + ".sz")
            raise TypeError(f"broadcast_object '{base}': rank {root_rank} cannot pickle "
                            f"{type(obj).__name__}: {e}") from e
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
        broadcast_(size, root_rank, base + ".sz")
    else:
        size = torch.zeros(1, dtype=torch.int64)
        broadcast_(size, root_rank, base + ".sz")
        if int(size.item()) < 0:
            raise TypeError(f"broadcast_object '{base}': rank {root_rank} could not pickle "
                            "its object (it raised the reason)")
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, base + ".t")
    if rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None):
    """Returns the list of every rank's obj, in rank order (pickled and allgathered)."""
    base = _object_name("allgather_object", name)
    payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    gathered, sizes = _allgather_with_dims(payload, base + ".t")
    out, start = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[start:start + n].numpy().tobytes()))
        start += n
    return out


def _initialize_state(optimizer):
    """Gives a fresh optimizer its state (momentum buffers, Adam's moments) as Horovod does:
    one step of the wrapped optimizer on zero gradients. Unlike Horovod, the parameters and
    gradients are put back afterwards, so a step that moves parameters even with zero
    gradients (weight decay) changes nothing."""
    saved = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                saved.append((p, p.detach().clone(), p.grad))
                p.grad = torch.zeros_like(p)
    try:
        if getattr(optimizer, "_ringd_distributed", False):
            optimizer._local_step()  # a DistributedOptimizer's step would allreduce
        else:
            optimizer.step()
    finally:
        with torch.no_grad():
            for p, data, grad in saved:
                p.copy_(data)
                p.grad = grad


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Copies root_rank's optimizer state into every rank's optimizer: state tensors (momentum
    buffers, Adam's moments and step) in place by broadcast, everything else (param group
    options such as lr, non-tensor state) as one pickled object. An optimizer without state yet
    gets it first (see _initialize_state), on every rank, so all have the same structure."""
    _broadcast_optimizer_state(optimizer, root_rank, "", False)


def _broadcast_optimizer_state(optimizer, root_rank, prefix, options_of_stateless):
    """broadcast_optimizer_state with every op's name starting with prefix (elastic state
    puts the generation there); with options_of_stateless, a stateless optimizer's options
    (lr, ...) are broadcast too, where Horovod sends nothing (elastic ranks whose reset
    callbacks rescaled lr must not keep a newcomer's)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state:
        _initialize_state(optimizer)
    if not optimizer.state and not options_of_stateless:
        return  # stateless (plain SGD): as in Horovod, nothing is sent, options neither
    # Parameters are numbered across groups in order, as Optimizer.state_dict() numbers them.
    params = [p for group in optimizer.param_groups for p in group["params"]]
    tensors, scalars = [], {}
    for gi, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            if key != "params":
                scalars[("group", gi, key)] = value
    for pid, p in enumerate(params):
        for key, value in (optimizer.state[p].items() if p in optimizer.state else ()):
            if torch.is_tensor(value):
                tensors.append((f"{prefix}optimizer.state.{pid}.{key}", value))
            else:
                scalars[("state", pid, key)] = value
    broadcast_parameters(tensors, root_rank)
    scalars = broadcast_object(scalars, root_rank,
                               name=f"{prefix}broadcast_optimizer_state.scalars")
    for (where, index, key), value in scalars.items():
        if where == "group":
            optimizer.param_groups[index][key] = value
        else:
            optimizer.state[params[index]][key] = value


__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
           "allgather_object", "mpi_ops"]
