# Horovod's state helpers for ringd.torch: broadcast of parameters, optimizer state and objects.
"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object.

Objects travel pickled (the standard library's pickle: what it cannot pickle, such as lambdas,
cannot be sent); only pickles from the job's own ranks are ever loaded.
"""
import pickle
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union

import torch

from . import mpi_ops
from .mpi_ops import (_allgather_with_dims, _op_name, _session_of, broadcast_,
                      broadcast_async_, global_process_set)


def _object_name(kind, name, process_set=None):
    """The base name of an object's ops: name, or the kind's per-process counter (per process
    set). (Horovod defaults to the object's type name, which differs between a root sending a
    dict and ranks passing None, and then never matches.)"""
    if name is not None:
        return name
    return _op_name(kind, None, process_set)


def broadcast_parameters(params: Union[Mapping[str, torch.Tensor], Iterable[torch.Tensor],
                                       Iterable[Tuple[str, torch.Tensor]]],
                         root_rank: int) -> None:
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
    handles = []
    try:
        for name, p in items:
            handles.append(broadcast_async_(p, root_rank, name))
    finally:  # what was started is waited for (or given up) even when a later one failed
        mpi_ops._sync_all(handles)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: mpi_ops.ProcessSet = global_process_set) -> Any:
    """Returns root_rank's obj on every rank of process_set (pickled, its size then its bytes
    broadcast; root_rank a global rank, as broadcast's)."""
    me = _session_of(process_set).rank
    if process_set is not None and not process_set._global():
        me = process_set.ranks[me]  # the global rank, which root_rank is
    base = _object_name("broadcast_object", name, process_set)
    if me == root_rank:
        try:
            data = pickle.dumps(obj)
        except Exception as e:  # every rank hears it (size -1) instead of waiting for the size
            broadcast_(torch.tensor([-1], dtype=torch.int64), root_rank, base + ".sz",
                       process_set)
            raise TypeError(f"broadcast_object '{base}': rank {root_rank} cannot pickle "
                            f"{type(obj).__name__}: {e}") from e
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
        broadcast_(size, root_rank, base + ".sz", process_set)
    else:
        size = torch.zeros(1, dtype=torch.int64)
        broadcast_(size, root_rank, base + ".sz", process_set)
        if int(size.item()) < 0:
            raise TypeError(f"broadcast_object '{base}': rank {root_rank} could not pickle "
                            "its object (it raised the reason)")
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, base + ".t", process_set)
    if me == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: mpi_ops.ProcessSet = global_process_set) -> List[Any]:
    """Returns the list of every rank's obj (of process_set), in rank order (pickled and
    allgathered)."""
    base = _object_name("allgather_object", name, process_set)
    payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    gathered, sizes = _allgather_with_dims(payload, base + ".t", process_set)
    out, start = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[start:start + n].numpy().tobytes()))
        start += n
    return out


def _initialize_state(optimizer):
    """Gives a fresh optimizer its state (momentum buffers, Adam's moments) as Horovod does:
    one step of the wrapped optimizer on zero gradients, which stay where a parameter had
    none (a script may read or broadcast them next, as Horovod's tests do). Unlike Horovod, the
    parameters and the gradients they had are put back afterwards, so a step that moves
    parameters even with zero gradients (weight decay) changes nothing."""
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
                if grad is not None:
                    p.grad = grad


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              model: Optional[torch.nn.Module] = None) -> None:
    """Copies root_rank's optimizer state into every rank's optimizer: state tensors (momentum
    buffers, Adam's moments and step) in place by broadcast, everything else (param group
    options such as lr, non-tensor state) as one pickled object. An optimizer without state yet
    gets it first (see _initialize_state). Root's state decides what every rank holds: a rank
    whose state differs in structure (root resumed from a checkpoint only it loaded, a
    parameter that never had a gradient somewhere) takes root's, tensors it lacks are created
    and those root lacks dropped."""
    _broadcast_optimizer_state(optimizer, root_rank, "", False)


def _broadcast_optimizer_state(optimizer, root_rank, prefix, options_of_stateless):
    """broadcast_optimizer_state with every op's name starting with prefix (elastic state
    puts the generation there); with options_of_stateless, a stateless optimizer's options
    (lr, ...) are broadcast too, where Horovod leaves them (elastic ranks whose reset
    callbacks rescaled lr must not keep a newcomer's)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state:
        _initialize_state(optimizer)
    # Parameters are numbered across groups in order, as Optimizer.state_dict() numbers them.
    params = [p for group in optimizer.param_groups for p in group["params"]]
    scalars, specs = {}, []  # specs: (pid, key, dtype, shape) of each state tensor
    for gi, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            if key != "params":
                scalars[("group", gi, key)] = value
    for pid, p in enumerate(params):
        for key, value in (optimizer.state[p].items() if p in optimizer.state else ()):
            if torch.is_tensor(value):
                specs.append((pid, key, value.dtype, tuple(value.shape)))
            else:
                scalars[("state", pid, key)] = value
    # root's layout first, so that every rank broadcasts the same tensors under the same names
    layout = broadcast_object({"params": len(params), "groups": len(optimizer.param_groups),
                               "tensors": specs, "scalars": scalars}, root_rank,
                              name=f"{prefix}broadcast_optimizer_state.layout")
    fits = (layout["params"] == len(params)
            and layout["groups"] == len(optimizer.param_groups))
    agreed = mpi_ops.allreduce(torch.tensor([int(fits)], dtype=torch.int32), op=mpi_ops.Min,
                               name=f"{prefix}broadcast_optimizer_state.fits")
    if not int(agreed.item()):
        raise ValueError(f"broadcast_optimizer_state: rank {root_rank}'s optimizer has "
                         f"{layout['params']} parameters in {layout['groups']} groups, "
                         f"{'this rank' if not fits else 'another rank'}'s has "
                         f"{len(params) if not fits else 'a different number'}: every rank must "
                         "wrap the same model's parameters")
    if not layout["tensors"] and not any(k[0] == "state" for k in layout["scalars"]) \
            and not options_of_stateless:
        return  # stateless (plain SGD): as in Horovod, its options stay each rank's own
    wanted = {(pid, key) for pid, key, _, _ in layout["tensors"]}
    for pid, p in enumerate(params):
        if p in optimizer.state:
            state = optimizer.state[p]
            for key in [k for k, v in state.items() if torch.is_tensor(v)
                        and (pid, k) not in wanted]:
                del state[key]
    tensors = []
    for pid, key, dtype, shape in layout["tensors"]:
        state = optimizer.state[params[pid]]
        have = state.get(key)
        if not torch.is_tensor(have) or have.dtype != dtype or tuple(have.shape) != shape:
            device = have.device if torch.is_tensor(have) else (
                params[pid].device if shape == tuple(params[pid].shape) else "cpu")
            state[key] = torch.zeros(shape, dtype=dtype, device=device)
        tensors.append((f"{prefix}optimizer.state.{pid}.{key}", state[key]))
    broadcast_parameters(tensors, root_rank)
    for (where, index, key), value in layout["scalars"].items():
        if where == "group":
            optimizer.param_groups[index][key] = value
        else:
            optimizer.state[params[index]][key] = value


__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
           "allgather_object", "mpi_ops"]
