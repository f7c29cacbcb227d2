# Horovod's DistributedOptimizer for ringd.torch: each gradient allreduced by name once it exists.
"""DistributedOptimizer wraps a torch optimizer so that step() applies gradients averaged
(op) over every rank.

How: a hook on each parameter's gradient accumulator starts the parameter's allreduce (in place
on .grad, named after the parameter, so the daemon matches and fuses them whatever order the
ranks produce them in) as soon as backward has accumulated it the backward_passes_per_step-th
time; step() or synchronize() waits for them all. The wrapper owns the hooks and the handles
of one step; the gradients stay the parameters'.
"""
import contextlib
import warnings
from typing import Any, Iterable, Optional, Tuple, Type

import torch

import ringd

from . import mpi_ops
from .compression import Compression, Compressor
from .mpi_ops import (Adasum, Average, allreduce_async_, global_process_set,
                      sparse_allreduce_async, synchronize)


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class (see DistributedOptimizer)."""

    _ringd_distributed = True

    def __init__(self, params, state, named_parameters, compression, backward_passes_per_step,
                 op, gradient_predivide_factor, sparse_as_dense, process_set):
        super().__init__(params)
        self.process_set = process_set
        for p, st in state.items():  # state the wrapped optimizer already had (a checkpoint)
            self.state[p] = st
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self._made_dense = {}  # parameter -> sparse_dim of its sparse gradient, sent dense
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
            if any(not isinstance(p, tuple) for p in named_parameters):
                raise ValueError("named_parameters should be a sequence of tuples (name, "
                                 "parameter), usually produced by model.named_parameters().")
        else:
            # Not "noname.{i}": unnamed allreduces are "allreduce.noname.{k}" (mpi_ops), and a
            # script's k-th one would collide with gradient k's.
            named_parameters = [(f"DistributedOptimizer.noname.{i}", p)
                                for i, p in enumerate(all_params)]
        names = [n for n, _ in named_parameters]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found "
                             f"duplicates: {', '.join(dups)}")
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [i for i, p in enumerate(all_params) if id(p) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named (positions in the optimizer's parameter list: "
                             f"{', '.join(map(str, unnamed))})")
        self._parameter_names = {p: n for n, p in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}  # parameter -> (handle or None, compression context)
        self._arena_grads = {}  # parameter -> its gradient's arena tensor
        self._arena_session = None  # the session whose arena holds them
        self._arena_fits = False  # whether that arena has room for them (_arena_has_room)
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        # Horovod skips the hooks on one rank unless the job is elastic; a ringd job may grow
        # past its size at any time (nodes join a running job), so a rank alone allreduces
        # too: through its own daemon, cheaply, and ready for the ranks that join. A rank
        # outside the process set averages nothing (Horovod's): its step() is local.
        if process_set.included():
            self._register_hooks()

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)  # hooks live as long as their nodes

    def _allreduce_grad_async(self, p):
        """Starts p's gradient's allreduce; returns (handle, compression context)."""
        if p.grad is None:  # unused on this rank: the others still wait for its allreduce
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            if not self.sparse_as_dense:  # Horovod's: indices and values allgathered
                return sparse_allreduce_async(p.grad, name=self._parameter_names[p],
                                              op=self.op, process_set=self.process_set), None
            self._made_dense[p] = p.grad.sparse_dim()  # sparse again once reduced (SparseAdam)
            p.grad = p.grad.to_dense()
        if self._compression is Compression.none:
            self._grad_into_arena(p)
        compressed, ctx = self._compression.compress(p.grad)
        if self.op == Average:
            # The daemon divides by the size after the sum; the factor splits the averaging.
            pre, post = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            pre, post = 1.0, 1.0
        handle = allreduce_async_(compressed, name=self._parameter_names[p], op=self.op,
                                  prescale_factor=pre, postscale_factor=post,
                                  process_set=self.process_set)
        return handle, ctx

    def _grad_into_arena(self, p):
        """Makes p.grad a tensor in the session's shared arena, so that its allreduce copies
        nothing: neither into the arena when submitted nor out of it when waited for (which
        would be on the step's critical path). Backward then accumulates straight into it
        (zero_grad() zeroes it in place); where zero_grad(set_to_none=True) left backward to
        make a new gradient, this copies it in once, as libringd would have. Where the arena
        cannot hold the gradients twice over (_arena_has_room), or runs out, they all stay in
        ordinary memory and libringd stages each allreduce."""
        grad = p.grad
        if grad.device.type != "cpu" or grad.layout != torch.strided:
            return
        s = mpi_ops._session_of(self.process_set)  # the session its allreduces run in
        if self._arena_session is not s:  # the first step, hvd.init() again, or a reset
            self._arena_grads.clear()
            self._arena_session = s
            mpi_ops._arena_users.add(self)
            self._arena_fits = self._arena_has_room(s)
        if not self._arena_fits:
            return
        buf = self._arena_grads.get(p)
        if buf is not None and (buf.shape != grad.shape or buf.dtype != grad.dtype):
            buf = None  # the parameter changed shape or dtype: a new buffer
        if buf is None:
            try:
                buf = s.tensor(grad.shape, grad.dtype)
            except ringd.OutOfMemory:  # all or nothing: the rest must still be staged
                self._leave_arena()
                self._arena_session, self._arena_fits = s, False
                return
            self._arena_grads[p] = buf
        if grad.data_ptr() == buf.data_ptr():
            return
        buf.copy_(grad)
        p.grad = buf

    def _arena_has_room(self, s):
        """True when s's arena holds every gradient twice over (one probe allocation): the
        gradients, and the staging copies of other allreduces and of an elastic reset's
        broadcasts beside them. Otherwise gradients stay in ordinary memory and libringd
        stages each allreduce, as it does for any tensor outside the arena."""
        need = sum(2 * p.numel() * p.element_size() for p in self._requires_update
                   if p.device.type == "cpu")
        if need == 0:
            return False
        try:
            s.free(s.alloc(need))
        except ringd.OutOfMemory:
            return False
        return True

    def _leave_arena(self):
        """Gradients in the arena move to ordinary memory, keeping their values, and the
        arena's buffers go back: before the session closes (hvd.shutdown(); arena views read
        zeros once it is gone), at an elastic reset (its broadcasts need the room), and when
        the arena ran out."""
        for p, buf in self._arena_grads.items():
            if (buf is not None and p.grad is not None and not p.grad.is_sparse
                    and p.grad.data_ptr() == buf.data_ptr()):
                p.grad = buf.clone()
        self._arena_grads.clear()
        self._arena_session = None

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those backward has not reached, with
        zeros for gradients this rank never made) and puts the results in .grad."""
        self.process_set._added()  # removed since: say so rather than skip the averaging
        if not self.process_set.included():
            return
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        failure = None
        for p in list(self._handles):
            handle, ctx = self._handles[p]
            try:
                output = synchronize(handle)
            except ringd.Timeout:
                # op_timeout_ms: this allreduce and those after it are still pending and stay
                # in _handles, so synchronize() or step() again waits for them
                raise
            except Exception as e:  # wait for the rest before raising
                failure = failure or e
            else:
                if output.is_sparse:
                    p.grad = output
                elif output is not p.grad:
                    p.grad.set_(self._compression.decompress(output, ctx))
                if p in self._made_dense:  # row-sparse as the embedding made it
                    p.grad = p.grad.to_sparse(self._made_dense[p])
            self._made_dense.pop(p, None)
            del self._handles[p]
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._synchronized = True
        if failure is not None:
            for p in self._allreduce_delay:
                self._allreduce_delay[p] = self.backward_passes_per_step
            raise failure

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within it step() does not synchronize: for callers that called synchronize() to
        work on the reduced gradients first (clipping)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def _local_step(self):
        """The wrapped optimizer's step, without any allreduce (broadcast_optimizer_state)."""
        return super().step()

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super().zero_grad(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super().load_state_dict(*args, **kwargs)


def DistributedOptimizer(optimizer: torch.optim.Optimizer,
                         named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
                         compression: Type[Compressor] = Compression.none,
                         backward_passes_per_step: int = 1, op: int = Average,
                         gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                         groups: Any = None, sparse_as_dense: bool = False,
                         process_set: mpi_ops.ProcessSet = global_process_set
                         ) -> torch.optim.Optimizer:
    """An optimizer of optimizer's class and settings (its state carried over) whose step()
    first averages (op) every gradient over all ranks; see the module docstring.

    named_parameters names the allreduces (model.named_parameters(); default: by position).
    backward_passes_per_step: backward passes accumulated locally before the allreduce.
    gradient_predivide_factor: with op=Average, gradients are scaled by 1/factor before the
    sum and factor/size after it. compression: Compression.none or Compression.fp16.
    num_groups and groups (Horovod's explicit fusion) are accepted and not needed: the daemon
    fuses small allreduces by itself. process_set: the ranks whose gradients are averaged (an
    added ProcessSet); on a rank outside it, step() is the wrapped optimizer's alone.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by ringd; use Average or Sum")
    if process_set is not global_process_set:
        process_set._added()  # ValueError for a set not added (or removed)
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be at least 1")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {})
    return cls(optimizer.param_groups, dict(optimizer.state), named_parameters, compression,
               backward_passes_per_step, op, gradient_predivide_factor, sparse_as_dense,
               process_set)
