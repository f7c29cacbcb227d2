# Horovod's elastic API for ringd.torch: state committed, restored, re-synchronised as ranks change.
"""`hvd.elastic.TorchState` and `@hvd.elastic.run`, with Horovod's names and semantics.

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    state.register_reset_callbacks([lambda: rescale_lr(hvd.size())])

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...; optimizer.step(); state.batch += 1; state.commit()

    train(state)

How a membership change reaches the training loop. ringd renumbers the ranks itself when a node
or a process joins or leaves: every rank learns it from the answer to a collective, which fails
with ringd.MembershipChanged (Horovod: HorovodInternalError) or, for ops that carried over to
the new ring, succeeds with the new generation. Then every rank must stop submitting the old
step's ops, which the others would never match. So inside run() the session expects the
generation its state was synchronised in (Session.expect_generation): a rank that has heard of
a new one raises MembershipChanged at its next collective, and commit() raises it too after
saving (Horovod's commit raises HostsUpdatedInterrupt the same way).

run() then waits out the ops still outstanding, restores the last commit (model, optimizer,
scheduler, the other attributes; gradients dropped), calls the reset callbacks (size() is
already the new one), synchronises the state from one rank under names that carry the new
generation ("elastic.<generation>.*"), and calls the function again. A rank that joins
synchronises first and so starts from the others' state.

What differs from Horovod:
- The state comes from the lowest rank among those holding the most commits, not from rank 0
  always (one small allreduce decides it): rank 0 whenever it holds the newest state, as in
  Horovod, but a restarted node that sorts first in the ring cannot hand everyone its fresh
  model.
- There is no shutdown()/init() at a reset: the session survives membership changes.
- Only MembershipChanged is retried. ringd.Closed (this node was drained, or its daemon shut
  down: the session cannot serve again) stops run: the Closed propagates to the caller after
  the reset state is left alone, as a Horovod worker on a removed host never returns from its
  training function (its driver stops it). Catch ringd.Closed to exit quietly there. Other
  errors (Timeout below min_size, Stalled, Mismatch) propagate too: a retry would not help.
- Any object with state_dict() and load_state_dict() is kept by them (schedulers, ReduceLROnPlateau
  included), not only Horovod's registered types.
- Retries are bounded: run(reset_limit=N) caps the resets of one call (Horovod's
  --reset-limit), and RESETS_WITHOUT_COMMIT resets in a row with no commit between them end
  the run with the last MembershipChanged (a job that never settles makes no progress).
- ElasticSampler is Horovod's: give it to TorchState as a keyword argument (sampler=...), record
  each batch (record_batch), and after a change the samples no rank processed since the epoch
  began are split anew among the new ranks.
"""
import collections
import copy
import functools
import math
import time
from typing import Any, Callable, Iterable, Optional, TypeVar

import torch

from ringd.errors import MembershipChanged, Result

from . import functions, mpi_ops

# Resets in a row, with no commit() in between, after which run gives up.
RESETS_WITHOUT_COMMIT = 10
# How long a reset waits for the ops still outstanding to end (see mpi_ops).
SETTLE_TIMEOUT_S = 60.0

# A rank's claim to be the source of a sync: commits, then the lower rank (see State.sync).
_RANK_BITS = 24

# run() calls in progress in this process (sync() leaves the generation expected inside one).
_running = 0


def _generation_changed(s, expected, what):
    """The MembershipChanged for a rank that expected generation expected and finds another."""
    return MembershipChanged(Result.MEMBERSHIP,
                             f"{what}: the job moved from generation {expected} to "
                             f"{s.generation} (this process is now rank {s.rank} of {s.size}); "
                             "restore the last commit and synchronise (ringd.torch.elastic.run "
                             "does)")


class State:
    """What elastic training keeps across membership changes (Horovod's State): save() copies
    it aside, restore() puts the copy back, sync() makes every rank's equal; subclasses say
    what it is. Owned by the training process; one thread uses it."""

    def __init__(self) -> None:
        self._reset_callbacks = []
        self._commits = 0  # this state's commits, since the job began (the sync source's)
        self._local_commits = 0  # commit() calls in this process

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], Any]]) -> None:
        """Adds functions that run() calls, without arguments, after each membership change,
        once the state is restored and before it is synchronised (to rescale the learning rate
        to the new size(), for one)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Runs reset() and then the reset callbacks (run() calls it after a change)."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state as the point a membership change returns to, then raises
        MembershipChanged if the job changed since the state was synchronised (the saved
        state is sound: every rank got the same results; run() re-synchronises from it).
        A commit copies the model and optimizer state: commit every few steps when steps are
        short next to that."""
        self.save()
        self._commits += 1
        self._local_commits += 1
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises MembershipChanged when the job has moved to another generation than the one
        the state was synchronised in (inside run(); elsewhere there is nothing to check)."""
        s = mpi_ops.session()
        expected = s.expected_generation
        if expected is not None and s.generation != expected:
            raise _generation_changed(s, expected, "commit")

    def save(self) -> None:
        """Copies the state aside (what restore() goes back to)."""
        raise NotImplementedError

    def restore(self) -> None:
        """Puts back what save() copied, undoing whatever changed since."""
        raise NotImplementedError

    def reset(self) -> None:
        """Called after a membership change, before the callbacks: for subclasses holding
        objects that depend on the size (samplers)."""

    def _sync_from(self, root, prefix):
        """Replaces every rank's state by root's, naming every op with prefix."""
        raise NotImplementedError

    def sync(self) -> None:
        """Makes every rank's state that of one rank, collectively (every rank of the job
        calls it): the lowest rank among those whose state has the most commits, so a rank
        that just joined receives the state and never gives it. Ops are named
        "elastic.<generation>.*" and submitted only in the generation the sync began in
        (MembershipChanged otherwise, on every rank). Afterwards the synchronised state is
        also the saved one, and unnamed ops are numbered from 0 again on every rank (a
        newcomer has made fewer of them than the others)."""
        s = mpi_ops.session()
        gen = s.generation
        s.expect_generation(gen)
        try:
            mpi_ops._noname.clear()
            prefix = f"elastic.{gen}."
            rank = s.rank
            if rank >= 1 << _RANK_BITS:
                raise ValueError(f"elastic sync: rank {rank} is beyond {1 << _RANK_BITS}")
            low = (1 << _RANK_BITS) - 1
            claim = torch.tensor([(self._commits << _RANK_BITS) | (low - rank)],
                                 dtype=torch.int64)
            mpi_ops.allreduce_(claim, name=prefix + "source", op=mpi_ops.Max)
            best = int(claim.item())
            root = low - (best & low)
            self._sync_from(root, prefix)
            # the process sets of the root, made again when a membership change ended them
            mpi_ops._renew_process_sets(functions.broadcast_object(
                mpi_ops._process_set_table(), root_rank=root, name=prefix + "process_sets"))
            # The root's count, plus one for the sync itself: ranks that took part in a sync
            # outrank a newcomer even before anyone committed.
            self._commits = (best >> _RANK_BITS) + 1
            if s.generation != gen:
                raise _generation_changed(s, gen, f"elastic sync from rank {root}")
            self.save()
        finally:
            if not _running and not s.closed:
                s.expect_generation(None)


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and kept as attributes of the
    same names (Horovod's ObjectState); they travel pickled."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._saved_state = dict(kwargs)
        self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            object.__setattr__(self, name, copy.deepcopy(value))

    def save(self) -> None:
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def _sync_from(self, root, prefix):
        if self._saved_state:
            current = {name: getattr(self, name) for name in self._saved_state}
            self._saved_state = functions.broadcast_object(current, root,
                                                           name=prefix + "objects")
            self._set_attrs()


class _Handler:
    """Keeps one torch object of a TorchState: save, restore, sync from a root."""

    def __init__(self, value):
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()


def _drop_grads(params):
    for p in params:
        p.grad = None


def _save_into(saved, value):
    """A copy of value (a state_dict: dicts, lists and tuples of tensors and plain values),
    written into saved's tensors in place where saved has the same structure, so that a commit
    per step allocates nothing (a fresh 47 MB copy of ResNet-18 costs far more than copying
    into the last one); elsewhere a new copy."""
    if torch.is_tensor(value):
        if (torch.is_tensor(saved) and saved.shape == value.shape
                and saved.dtype == value.dtype and saved.device == value.device):
            with torch.no_grad():
                saved.copy_(value)
            return saved
        return value.detach().clone()
    if type(value) in (dict, collections.OrderedDict):
        old = saved if isinstance(saved, dict) else {}
        out = type(value)((k, _save_into(old.get(k), v)) for k, v in value.items())
        if hasattr(value, "_metadata"):  # Module.state_dict's versions of its submodules
            out._metadata = copy.deepcopy(value._metadata)
        return out
    if type(value) in (list, tuple):
        old = saved if type(saved) is type(value) and len(saved) == len(value) else ()
        return type(value)(_save_into(old[i] if old else None, v) for i, v in enumerate(value))
    return copy.deepcopy(value)


class _ModuleHandler(_Handler):
    """A torch.nn.Module: its state_dict (parameters and buffers)."""

    def save(self) -> None:
        self.saved = _save_into(getattr(self, "saved", None), self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self.saved)
        _drop_grads(self.value.parameters())  # computed after the commit

    def sync(self, root, prefix):
        seen, items = set(), []
        for k, v in sorted(self.value.state_dict().items()):
            if v.data_ptr() in seen:  # a shared tensor: one broadcast writes it
                continue
            seen.add(v.data_ptr())
            items.append((prefix + k, v))
        functions.broadcast_parameters(items, root)


class _OptimizerHandler(_Handler):
    """A torch.optim.Optimizer (a DistributedOptimizer too): its state_dict."""

    def save(self) -> None:
        self.saved = _save_into(getattr(self, "saved", None), self.value.state_dict())

    def restore(self) -> None:
        # load_state_dict copies what it is given; a DistributedOptimizer's also drops the
        # gradients' handles of a step the change interrupted.
        self.value.load_state_dict(self.saved)
        _drop_grads(p for group in self.value.param_groups for p in group["params"])
        if hasattr(self.value, "_leave_arena"):  # the reset's broadcasts need the room
            self.value._leave_arena()

    def sync(self, root, prefix):
        functions._broadcast_optimizer_state(self.value, root, prefix, True)


class _StateDictHandler(_Handler):
    """Anything else with state_dict() and load_state_dict() (learning-rate schedulers, a
    GradScaler): its state_dict, pickled."""

    def save(self) -> None:
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(copy.deepcopy(self.saved))

    def sync(self, root, prefix):
        self.value.load_state_dict(functions.broadcast_object(self.value.state_dict(), root,
                                                              name=prefix + "state_dict"))


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: this rank's share of dataset's indices, the samples already
    processed this epoch left out, split anew whenever the ranks change. Keep it in a
    TorchState (sampler=...), call record_batch(batch_idx, batch_size) (or record_indices) as
    batches are done and set_epoch(epoch) at each epoch: after a membership change the samples
    no rank recorded by the last commit are shared among the new ranks. Shuffled by seed +
    epoch, the same permutation on every rank; padded by repetition to a multiple of size()."""

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.indices = []
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch epoch: every sample is to be processed again."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Records the batch_idx-th batch of batch_size samples of this rank's share as done."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices: Iterable[int]) -> None:
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> list:
        """The dataset indices of this rank's batch_idx-th batch of batch_size."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Splits the samples not processed yet among the job's ranks as they are now."""
        self.num_replicas = mpi_ops.size()
        self.rank = mpi_ops.rank()
        self.remaining_indices = [i for i in range(len(self.dataset))
                                  if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._share()

    def _share(self):
        order = self.remaining_indices
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = [order[i] for i in torch.randperm(len(order), generator=g).tolist()]
        while order and len(order) < self.total_size:  # pad by repetition
            order = order + order[:self.total_size - len(order)]
        return order[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        self.indices = self._share()
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples


class _SamplerHandler(_Handler):
    """An ElasticSampler: its epoch and processed indices; a sync takes the union of every
    rank's processed indices (each rank recorded its own share), then splits what remains."""

    def save(self) -> None:
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(copy.deepcopy(self.saved))

    def sync(self, root, prefix):
        every = functions.allgather_object(self.value.processed_indices,
                                           name=prefix + "processed")
        state = self.value.state_dict()
        state["processed_indices"] = set().union(*every)
        self.value.load_state_dict(functions.broadcast_object(state, root,
                                                              name=prefix + "state"))


def _handler_for(value):
    """The handler of an object TorchState keeps by its state_dict, else None (pickled)."""
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    if isinstance(value, torch.nn.Module):
        return _ModuleHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if callable(getattr(value, "state_dict", None)) and callable(
            getattr(value, "load_state_dict", None)) and not isinstance(value, type):
        return _StateDictHandler(value)
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training process (Horovod's TorchState): model and optimizer,
    and any other keyword arguments (more models and optimizers, and anything with
    state_dict() and load_state_dict() such as learning-rate schedulers, by their state_dict;
    anything else, such as epoch and batch, pickled), each kept as an attribute of its name.
    Assigning a new model or optimizer to its attribute saves it."""

    def __init__(self, model: Optional[torch.nn.Module] = None,
                 optimizer: Optional[torch.optim.Optimizer] = None, **kwargs: Any) -> None:
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            h = _handler_for(value)
            if h is not None:
                handlers[name] = h
            else:
                plain[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, h in handlers.items():
            object.__setattr__(self, name, h.value)
        super().__init__(**plain)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        object.__setattr__(self, name, value)

    def save(self) -> None:
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self) -> None:
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def _sync_from(self, root, prefix):
        for name, h in sorted(self._handlers.items()):
            h.sync(root, f"{prefix}{name}.")
        super()._sync_from(root, prefix)


_F = TypeVar("_F", bound=Callable[..., Any])


def run(func: Optional[_F] = None, *, reset_limit: Optional[int] = None) -> Any:
    """Decorator of the training function, whose first argument is a State: `@run` or
    `@run(reset_limit=N)`. Calling it synchronises the state (so a rank that joins starts from
    the others'), then calls the function and returns what it returns. On MembershipChanged it
    waits out the ops still outstanding, restores the last commit, calls the reset callbacks,
    synchronises again and calls the function again. ringd.Closed and every other error
    propagate (see the module docstring). reset_limit: the most resets one call allows (None:
    no limit, as Horovod without --reset-limit); RESETS_WITHOUT_COMMIT resets in a row with
    no commit between them end it as well. Like Horovod's, the function must not be called
    from inside a collective, and collectives before it must not race with a newcomer's
    sync: put the training loop inside it."""
    if func is None:
        return lambda f: run(f, reset_limit=reset_limit)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        global _running
        s = mpi_ops.session()
        resets, in_a_row, commits_seen, failed_at = 0, 0, state._local_commits, None
        reset_pending = False
        _running += 1
        try:
            while True:
                try:
                    if reset_pending:
                        mpi_ops._settle_outstanding(SETTLE_TIMEOUT_S)
                        state.restore()
                        state.on_reset()
                    state.sync()
                    return func(state, *args, **kwargs)
                except MembershipChanged as e:
                    failure = e
                reset_pending = True
                resets += 1
                in_a_row = in_a_row + 1 if state._local_commits == commits_seen else 1
                commits_seen = state._local_commits
                if reset_limit is not None and resets > reset_limit:
                    raise MembershipChanged(Result.MEMBERSHIP,
                                            f"elastic run: {resets} membership changes, more "
                                            f"than reset_limit={reset_limit}; the last: "
                                            f"{failure.message}") from failure
                if in_a_row > RESETS_WITHOUT_COMMIT:
                    raise MembershipChanged(Result.MEMBERSHIP,
                                            f"elastic run: {in_a_row} membership changes in a "
                                            "row with no commit between them: the job does not "
                                            "settle (is a node restarting in a loop?); the last: "
                                            f"{failure.message}") from failure
                if failed_at == s.generation:
                    time.sleep(0.01)  # no new generation named yet: do not spin
                failed_at = s.generation
        finally:
            _running -= 1
            if not _running and not s.closed:
                s.expect_generation(None)

    return wrapper


__all__ = ["State", "ObjectState", "TorchState", "ElasticSampler", "run",
           "RESETS_WITHOUT_COMMIT"]
