# Horovod's torch collectives (horovod.torch.mpi_ops: names, arguments, handles) over ringd.
"""The process's ringd session and Horovod's collective functions on torch tensors.

State owned here: the Session opened by init() and closed by shutdown(), the table of
outstanding handles (int -> work; each work holds its tensors until synchronize()), and the
per-process counters that name unnamed ops.

Naming. Every op is named "<kind>.<name>" (Horovod's scheme); an op without a name gets
"<kind>.noname.<k>", k counting that kind's unnamed ops in this process since init(). The daemon
matches ops across ranks by name, so unnamed ops match only when every rank makes its unnamed
calls of each kind in the same order (as in Horovod, whose counter is the handle number).
Named ops may be submitted in any order on different ranks.
"""
import collections
import os
import time
import warnings
import weakref
from typing import Any, List, Optional, Sequence, Type

import torch

import ringd
from ringd.errors import Closed, Mismatch, Result
from ringd.session import Session, _as_buf

from . import _dtypes, _worlds
from .compression import Compression, Compressor

# Reduction ops, as Horovod numbers them.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_RINGD_OPS = {Average: ringd.AVG, Sum: ringd.SUM, Min: ringd.MIN, Max: ringd.MAX,
              Product: ringd.PROD}
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}

# Horovod's errors from the backend; here every failure is a ringd.Error subclass.
HorovodInternalError = ringd.Error


class NotInitialized(Closed, ValueError):
    """A call before init() or after shutdown()."""


class ProcessSet:
    """Horovod's process set: ranks of the job (global ranks, increasing) that run collectives
    among themselves, with their own names; ranks outside never wait. A set is usable once
    added (add_process_set, or init(process_sets=...)), which every rank of the job does
    together, in the same order. global_process_set is the whole job. Each member keeps a
    ringd Session of the set (ringd_process_set_create). Within a set, size() and rank() are
    the set's (None, as in Horovod, while it is not added); a broadcast's root_rank is a global
    rank, as in Horovod."""

    def __init__(self, ranks_or_comm: Optional[Sequence[int]] = None) -> None:
        if ranks_or_comm is not None and not hasattr(ranks_or_comm, "__iter__"):
            raise TypeError(f"ProcessSet({ranks_or_comm!r}): ringd takes a list of global ranks "
                            "(there is no MPI communicator)")
        ranks = ranks_or_comm
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = None  # 0: the global set; None: not added (or removed)
        self._session = None  # this rank's Session of the set; None outside it
        self._gone = None  # why a set added once cannot run (removed, the job too small now)

    def _global(self):
        return self.process_set_id == 0

    def _added(self):
        """Raises unless the set may run collectives now (the global set always may)."""
        if self._global():
            return
        if self._gone is not None:
            raise ValueError(self._gone)
        if self.process_set_id is None:
            raise ValueError(f"process set of ranks {self.ranks} has not been added: every "
                             "rank calls hvd.add_process_set(...) first")

    def size(self) -> Optional[int]:
        """The set's number of ranks; None while it is not added (or once removed)."""
        if self._global():
            return size()
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self) -> Optional[int]:
        """This process's rank in the set; -1 outside it; None while it is not added."""
        if self._global():
            return rank()
        if self.process_set_id is None:
            return None
        return self._session.rank if self._session is not None else -1

    def included(self) -> Optional[bool]:
        """Whether this process is in the set; None while it is not added."""
        if self._global():
            return True
        if self.process_set_id is None:
            return None
        return self._session is not None

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet()
global_process_set.process_set_id = 0
_process_sets = {}  # process_set_id -> ProcessSet, the sets added since init()
_next_set_id = 1
_sets_generation = 0  # the job's generation when the last set was added or renewed

_session = None
_handles = {}  # handle number -> _Work
_next_handle = 0
_noname = collections.Counter()  # (process set id, kind) -> unnamed ops of that kind so far
_in_flight = {}  # full name -> the _Work of this rank's outstanding op of that name
_arena_users = weakref.WeakSet()  # DistributedOptimizers holding gradients in the arena
_detached = []  # (work, name) of synchronous calls that timed out: reaped once finished


def init(comm: Any = None, process_sets: Any = None, **session_options: Any) -> Session:
    """Opens this process's session with the node's ringd (RINGD_SOCKET, RINGD_JOB,
    RINGD_WORLD_SIZE, RINGD_LOCAL_SIZE, ..., or ringd.Session's keyword arguments). Returns
    once the job's ranks have joined. A second init() while initialized does nothing.

    A launcher's LOCAL_RANK (torchrun, and most that set LOCAL_RANK) is the local rank asked for
    when neither local_rank= nor RINGD_LOCAL_RANK says otherwise, so that local_rank() is the one
    the launcher gave (and a GPU pinned by it stays pinned)."""
    global _session
    if comm is not None:
        raise ValueError("ringd.torch.init(comm=...): there is no MPI communicator; ranks come "
                         "from the ringd daemon (RINGD_JOB, RINGD_WORLD_SIZE, RINGD_LOCAL_SIZE)")
    if _session is not None:
        return
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError(f"init(process_sets={process_sets!r}): pass a list of ProcessSets "
                             "(or of rank lists), or 'dynamic'")
        process_sets = None  # every set is dynamic here: add_process_set any time
    _reset()
    launcher = os.environ.get("LOCAL_RANK")
    if ("local_rank" not in session_options and not os.environ.get("RINGD_LOCAL_RANK")
            and launcher is not None and launcher.isdigit()):
        session_options["local_rank"] = int(launcher)
    _session = _worlds.open_world(**session_options)
    try:
        for ps in process_sets or ():
            add_process_set(ps)
    except BaseException:
        shutdown()
        raise


def shutdown() -> None:
    """Closes the session: outstanding handles are dropped, later calls raise NotInitialized."""
    global _session
    for user in list(_arena_users):
        user._leave_arena()
    _arena_users.clear()
    s, _session = _session, None
    _reset()
    _close_process_sets("ringd.torch was shut down")
    if s is not None:
        s.close()


def _reset():
    global _next_handle
    _handles.clear()
    _in_flight.clear()
    _detached.clear()
    _noname.clear()
    _next_handle = 0


def _close_process_sets(why):
    """Closes this rank's sessions of every added set (before the job's), which then raise
    why."""
    global _next_set_id
    for ps in _process_sets.values():
        if ps._session is not None:
            ps._session.close()
        ps._session, ps.process_set_id, ps._gone = None, None, why
    _process_sets.clear()
    _next_set_id = 1


def add_process_set(process_set: Any) -> ProcessSet:
    """Adds a process set (a ProcessSet, or its global ranks), collectively: every rank of the
    job calls it with the same ranks, in the same order of additions (ranks that pass other
    ranks fail alike with ringd.Mismatch). Returns the set, now usable by every collective's
    process_set argument on its members."""
    global _next_set_id, _sets_generation
    s = _require()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None or ps is global_process_set:
        raise ValueError(f"{ps!r} was added already")
    # ranks that are not distinct ranks of the job fail on every rank alike (libringd's check)
    ps._session = s.process_set(ps.ranks or [])
    _sets_generation = s.generation
    ps.process_set_id, ps._gone = _next_set_id, None
    _process_sets[ps.process_set_id] = ps
    _next_set_id += 1
    return ps


def _close_set_session(ps):
    """Closes this rank's session of ps, first moving the gradients optimizers keep in its
    arena to ordinary memory (they would read zeros once it is gone)."""
    if ps._session is None:
        return
    for user in list(_arena_users):
        if user._arena_session is ps._session:
            user._leave_arena()
            _arena_users.discard(user)
    ps._session.close()
    ps._session = None


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes an added set: its members leave its ringd job (every member calls it once its
    collectives are done). Returns False for the global set or a set not added."""
    if process_set is global_process_set or process_set.process_set_id is None or \
            _process_sets.get(process_set.process_set_id) is not process_set:
        return False
    del _process_sets[process_set.process_set_id]
    _close_set_session(process_set)
    process_set.process_set_id = None
    process_set._gone = f"process set of ranks {process_set.ranks} was removed"
    return True


def _process_set_table():
    """This rank's added sets as _renew_process_sets takes them."""
    return (_sets_generation, [(i, list(ps.ranks)) for i, ps in sorted(_process_sets.items())],
            _next_set_id)


def _renew_process_sets(table):
    """elastic.State.sync, every rank of the job calling with one rank's _process_set_table:
    when its sets are of an older generation (a membership change ended them; a rank that
    joined has none), they are made again, the same on every rank; a set whose ranks the job
    no longer has is gone, saying so."""
    global _next_set_id, _sets_generation
    s = _require()
    made_in, sets, next_id = table
    _next_set_id = next_id  # the sets added next get the same ids on every rank
    if made_in == s.generation or not sets and not _process_sets:
        return
    _sets_generation = s.generation
    old = dict(_process_sets)
    for ps in old.values():
        _close_set_session(ps)
    _process_sets.clear()
    made = set()
    try:
        for set_id, ranks in sets:
            ps = old.pop(set_id, None) or ProcessSet(ranks)
            ps.ranks, ps.process_set_id, ps._gone = list(ranks), set_id, None
            if ranks[-1] >= s.size:
                ps.process_set_id = None
                ps._gone = (f"process set of ranks {ranks}: the job has {s.size} ranks now "
                            f"(generation {s.generation}): add a set of ranks it has")
                continue
            _process_sets[set_id] = ps
            ps._session = s.process_set(ranks)
            made.add(set_id)
    except BaseException as e:  # the sets not made again cannot run: they say why
        for ps in list(_process_sets.values()) + list(old.values()):
            if ps.process_set_id not in made:
                _process_sets.pop(ps.process_set_id, None)
                ps.process_set_id = None
                ps._gone = f"process set of ranks {ps.ranks} could not be made again: {e}"
        raise
    for ps in old.values():  # sets the others do not have
        ps.process_set_id, ps._gone = None, "process set no longer exists after a membership change"


def _session_of(process_set):
    """The Session a collective on process_set runs in: the job's, or this rank's of the set
    (ValueError outside it, or for a set not added)."""
    s = _require()
    if process_set is None or process_set is global_process_set:
        return s
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"process_set: expected a ProcessSet, got {type(process_set).__name__}")
    if process_set._global():
        return s
    process_set._added()
    if _process_sets.get(process_set.process_set_id) is not process_set:
        raise ValueError(f"{process_set!r} was added under another init(): add it again")
    if process_set._session is None:
        raise ValueError(f"rank {s.rank} is not in {process_set!r}: only its ranks call its "
                         "collectives")
    return process_set._session


def _set_id(process_set):
    return 0 if process_set is None else (process_set.process_set_id or 0)


def is_initialized() -> bool:
    return _session is not None


def _require():
    if _session is None:
        raise NotInitialized(Result.CLOSED,
                             "ringd.torch has not been initialized (or was shut down); "
                             "use hvd.init()")
    return _session


def session() -> Session:
    """The ringd.Session under this module (for ringd's own API next to Horovod's)."""
    return _require()


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Horovod's: writes a timeline of the collectives from now on to file_path, a Chrome trace
    (rank 0 writes it; every rank its own when the path has "%r"); one being written (this
    function's or RINGD_TIMELINE's) ends first, as Horovod switches files. mark_cycles is taken
    and changes nothing: ringd has no cycles (ringctl timeline marks each ring pass)."""
    s = _require()
    s.stop_timeline()
    s.start_timeline(file_path)


def stop_timeline() -> None:
    """Horovod's: stops the timeline start_timeline() began and closes its file."""
    _require().stop_timeline()


def rank() -> int:
    return _require().rank


def size() -> int:
    return _require().size


def local_rank() -> int:
    return _require().local_rank


def local_size() -> int:
    return _require().local_size


def generation() -> int:
    """The job's membership generation (ringd's; Horovod has none)."""
    return _require().generation


def _false() -> bool:
    return False


def cuda_built() -> bool:
    """True: ringd takes CUDA tensors (libringd loads the CUDA driver itself when it meets
    device memory; the node's daemon reduces them on its GPUs or stages them through host
    memory), as a Horovod built with CUDA does."""
    return True


# What Horovod scripts ask of the build, answered for ringd: no MPI, Gloo, DDL, oneCCL or ROCm
# in the training process. nccl_built() is False too: where the daemons use NCCL between nodes
# (ringd --gpu-transport) is the daemons' choice, not something the script selects or sees.
mpi_built = mpi_enabled = mpi_threads_supported = gloo_built = gloo_enabled = _false
nccl_built = ddl_built = ccl_built = rocm_built = _false


def _op_name(kind, name, process_set=None):
    """The op's name as the daemon sees it (see the module docstring); unnamed ops are counted
    per process set, whose ranks alone make them."""
    if name is None:
        key = (_set_id(process_set), kind)
        k = _noname[key]
        _noname[key] += 1
        return f"{kind}.noname.{k}"
    return f"{kind}.{name}"


def _key(full, process_set=None):
    """What marks an op outstanding on this rank: its name, within its process set."""
    set_id = _set_id(process_set)
    return full if set_id == 0 else f"{full} (process set {set_id})"


def _handle_average_backwards_compatibility(op, average):
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one "
                             "of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    return Average


def _checked(s, names, fn, *args):
    """fn(*args). A TypeError or ValueError it raises (what this rank found wrong before
    libringd saw the op) also fails, on every rank, the ops named names (Session.refuse), once:
    no rank waits for an op this one will never submit."""
    try:
        return fn(*args)
    except ringd.Error:
        raise
    except (TypeError, ValueError) as e:
        if not getattr(e, "_ringd_told", False):
            for n in names:
                try:
                    s.refuse(n, f"{type(e).__name__}: {e}")
                except ringd.Error:
                    break  # the session is gone: nobody to tell
            e._ringd_told = True
        raise


def _check_tensor(tensor, what):
    """Raises the TypeError/ValueError ringd gives for a tensor it cannot take (every dtype
    travels: see _dtypes)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous() and not _dtypes.native(tensor):
        raise ValueError(f"{what} is not contiguous (shape {tuple(tensor.shape)}): pass "
                         "t.contiguous()")
    _as_buf(_dtypes.as_bytes(tensor), what, False)


def _progress():
    """Releases the names of timed-out synchronous calls that have finished since. Never
    blocks."""
    for entry in list(_detached):
        work, name = entry
        if work.poll():
            try:
                work.wait()
            except ringd.Error:
                pass  # its caller heard Timeout already; what came after is nobody's
            _detached.remove(entry)
            _release(name, work)


def _sync(handle):
    """synchronize(handle) for Horovod's synchronous calls, whose callers never see the
    handle: on Timeout the op is given up like libringd's synchronous calls give theirs up
    (its name stays taken until it finishes; the next calls reap it)."""
    try:
        return synchronize(handle)
    except ringd.Timeout:
        _detached.append(_handles.pop(handle))
        raise


def _sync_all(handles):
    """_sync of each handle in order; on the first error the rest are given up too (their
    names are released as they finish) and the error raised."""
    try:
        return [_sync(h) for h in handles]
    except BaseException:
        for h in handles:
            if h in _handles:
                _detached.append(_handles.pop(h))
        raise


class _Work:
    """An outstanding op behind a handle: poll() never blocks, wait() returns the output."""

    def poll(self):
        raise NotImplementedError

    def wait(self):
        raise NotImplementedError


class _Single(_Work):
    """One ringd request; finish(), when given, makes the output of what the request wrote."""

    def __init__(self, handle, output, finish=None):
        self.handle = handle
        self.output = output
        self.finish = finish

    def poll(self):
        return self.handle.done()

    def wait(self):
        self.handle.wait()
        if self.finish is not None:
            self.finish, finish = None, self.finish
            finish()
        return self.output


class _Group(_Work):
    """Several works finished together (grouped allreduce); wait() gives their outputs."""

    def __init__(self, works):
        self.works = works

    def poll(self):
        return all(w.poll() for w in self.works)

    def wait(self):
        outputs, failure = [], None
        for w in self.works:  # every request finishes before the first failure is raised
            try:
                outputs.append(w.wait())
            except ringd.Error as e:
                failure = failure or e
        if failure is not None:
            raise failure
        return outputs


class _Allgather(_Work):
    """Horovod's allgather, whose first dimensions may differ across ranks: one ringd allgatherv
    whose counts the ranks learn (libringd's ringd_allgatherv_into, "<name>"), the output made
    once they are known; ranks whose trailing dimensions differ fail alike (Mismatch). A tensor
    of rows of no elements cannot tell its rows by its count: its first dimension travels in
    an allgather instead."""

    def __init__(self, s, tensor, name):
        if tensor.dim() == 0:
            raise ValueError(f"allgather '{name}': a 0-d tensor has no first dimension to "
                             "concatenate along; pass tensor.reshape(1)")
        self.dtype = tensor.dtype
        tensor = _dtypes.as_bytes(tensor)
        self.tensor, self.name = tensor, name
        self.row = 1
        for d in tensor.shape[1:]:
            self.row *= d
        self.dims = None  # every rank's first dimension, once known
        if self.row == 0:
            self.handle = s.allgather_async(name, torch.tensor([tensor.shape[0]]))
        else:
            self.handle = s.allgatherv_async(name, tensor)

    def poll(self):
        return self.handle.done()

    def wait(self):
        got = self.handle.wait()
        if self.row == 0:
            self.dims = got.tolist()
            got = self.tensor.new_empty((sum(self.dims),) + tuple(self.tensor.shape[1:]))
        else:
            self.dims = [c // self.row for c in self.handle.counts]
        return _dtypes.from_bytes(got, self.dtype)


def _register(work, name):
    global _next_handle
    h = _next_handle
    _next_handle += 1
    _handles[h] = (work, name)
    if name is not None:
        _in_flight[name] = work
    return h


def _release(name, work):
    """name is free again, unless a later op of that name holds it now."""
    if _in_flight.get(name) is work:
        del _in_flight[name]


def _claim(name):
    """Refuses a second outstanding op of one name on this rank (the daemon would take it for
    the next instance of the op). The name stays taken until its op is synchronized, finished
    or not: were it free once finished, ranks that see it finish at different times would
    accept and refuse the second op differently, and those that accepted it would wait for
    the others in vain."""
    if _detached:
        _progress()
    if name in _in_flight:
        raise ValueError(f"an op named '{name}' is still outstanding on this rank: synchronize "
                         "it first, or give this one another name")


def poll(handle: int) -> bool:
    """True once the op behind handle finished; synchronize() then returns at once."""
    if handle not in _handles:
        raise ValueError(f"poll({handle!r}): no such outstanding handle")
    _progress()
    return _handles[handle][0].poll()


def synchronize(handle: Any) -> Any:
    """Waits for the op behind handle and returns its output (a list for grouped ops), or
    raises its ringd.Error. The handle is released either way, except on ringd.Timeout (the
    session's op_timeout_ms passed): the op is still pending, synchronize it again. A
    sparse_allreduce_async handle (a callable, as Horovod's) is called."""
    if callable(handle):
        return handle()
    if handle not in _handles:
        return None
    work, name = _handles[handle]
    pending = False
    try:
        return work.wait()
    except ringd.Timeout:
        pending = True
        raise
    finally:
        if not pending:
            del _handles[handle]
            _release(name, work)


def _settle_outstanding(timeout):
    """Waits for every outstanding handle, dropping its result or error, and releases it: after
    a membership change, before state is restored (an op still writing into a tensor would undo
    the restore) and before a retry reuses the names. Every op of an older generation ends at a
    new one (fails, or finishes moving data), so this does not wait long; past timeout seconds
    it raises ringd.Timeout naming what is left."""
    end = time.monotonic() + timeout
    while _handles:
        for h in list(_handles):
            if _handles[h][0].poll():
                try:
                    synchronize(h)
                except ringd.Error:
                    pass
        if not _handles:
            break
        if time.monotonic() >= end:
            names = sorted(name for _, name in _handles.values())
            raise ringd.Timeout(Result.TIMEOUT,
                                f"{len(names)} ops still outstanding {timeout:g} s after a "
                                f"membership change: {', '.join(names[:8])}: is the daemon "
                                "stuck? (ringctl status shows its ops)")
        time.sleep(0.001)


# ---- allreduce ----

def _check_reducible(tensor, what):
    """Raises TypeError for a tensor ringd cannot reduce (see _reduced_here)."""
    if not _dtypes.native(tensor) and tensor.dtype not in _dtypes.WIDENED:
        raise TypeError(f"{what} has dtype {tensor.dtype}: ringd reduces float32, float64, "
                        "float16, bfloat16, int8, int16, int32, int64, uint8 and bool")


def _reduced_here(tensor, op, prescale_factor, postscale_factor, size):
    """None when libringd reduces tensor as it is, scales included (floating dtypes; the other
    ringd dtypes unscaled). Else (send, ringd's op, finish): send is tensor in the dtype it is
    reduced in (int32 for int8, int16 and bool), prescaled as Horovod scales integers (in
    float64, truncated back); finish(recv, output) postscales what came back likewise into
    output, Average being a Sum postscaled by 1/size (Horovod's)."""
    if tensor.is_floating_point() or (tensor.dtype not in _dtypes.WIDENED
                                      and prescale_factor == 1.0 and postscale_factor == 1.0):
        return None
    if op == Average and (prescale_factor != 1.0 or postscale_factor != 1.0):
        op, postscale_factor = Sum, postscale_factor / size
    kind = torch.int32 if tensor.dtype in _dtypes.WIDENED else tensor.dtype
    send = tensor.to(kind)
    if prescale_factor != 1.0:
        send = (send.to(torch.float64) * prescale_factor).to(kind)

    def finish(recv, output):
        if postscale_factor != 1.0:
            recv = (recv.to(torch.float64) * postscale_factor).to(kind)
        output.copy_(recv)

    return send, op, finish


def _allreduce_work(s, full, tensor, output, op, prescale_factor, postscale_factor):
    """The allreduce of tensor into output named full (see _reduced_here)."""
    here = _reduced_here(tensor, op, prescale_factor, postscale_factor, s.size)
    if here is None:
        h = s.allreduce_async(full, tensor, out=output, op=_RINGD_OPS[op],
                              prescale=prescale_factor, postscale=postscale_factor,
                              shape=tensor.shape)
        return _Single(h, output)
    send, op, finish = here
    recv = torch.empty_like(send)
    h = s.allreduce_async(full, send, out=recv, op=_RINGD_OPS[op], shape=tensor.shape)
    return _Single(h, output, lambda: finish(recv, output))


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    s = _session_of(process_set)
    _reduce_op(op)
    full = _op_name("allreduce", name, process_set)
    _claim(_key(full, process_set))
    _checked(s, [full], _check_tensor, tensor, f"allreduce '{full}'")
    _checked(s, [full], _check_reducible, tensor, f"allreduce '{full}'")
    work = _allreduce_work(s, full, tensor, output, op, prescale_factor, postscale_factor)
    return _register(work, _key(full, process_set))


def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None,
                    name: Optional[str] = None, op: Optional[int] = None,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing tensor over all ranks (op: Average by default, Sum, Min, Max, Product;
    inputs scaled by prescale_factor, the result by postscale_factor); the input is not
    modified. Returns a handle for poll() and synchronize()."""
    op = _handle_average_backwards_compatibility(op, average)
    _check_tensor(tensor, "allreduce_async")
    return _allreduce_async(tensor, torch.empty_like(tensor), name, op, prescale_factor,
                            postscale_factor, process_set)


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None,
                     name: Optional[str] = None, op: Optional[int] = None,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """allreduce_async in place: the result lands in tensor."""
    op = _handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None,
               name: Optional[str] = None, op: Optional[int] = None,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """allreduce in place; returns tensor."""
    return _sync(allreduce_async_(tensor, average, name, op, prescale_factor,
                                  postscale_factor, process_set))


class HorovodAllreduce(torch.autograd.Function):
    """allreduce with a gradient: the gradient is allreduced the same way."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return _sync(allreduce_async(tensor, average, name, op, prescale_factor,
                                     postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        average, op, pre, post, process_set = ctx.args
        grad = allreduce(grad_output.contiguous(), average=average, op=op, prescale_factor=pre,
                         postscale_factor=post, process_set=process_set)
        return grad, None, None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression: Type[Compressor] = Compression.none, op: Optional[int] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns tensor reduced over all ranks (see allreduce_async), differentiably; the input
    is not modified. compression (Compression.fp16) shrinks what travels."""
    compressed, cctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(compressed, average, name, op, prescale_factor,
                                     postscale_factor, process_set)
    return compression.decompress(reduced, cctx)


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    s = _session_of(process_set)
    _reduce_op(op)
    base = _op_name("grouped_allreduce", name, process_set)
    _claim(_key(base, process_set))
    works = []
    with s.group():  # one unit to the daemon: all run, or all fail alike
        for i, (t, o) in enumerate(zip(tensors, outputs)):
            names = [f"{base}.{k}" for k in range(len(tensors))]
            _checked(s, names, _check_tensor, t, f"grouped allreduce '{base}' tensor {i}")
            _checked(s, names, _check_reducible, t, f"grouped allreduce '{base}' tensor {i}")
        for i, (t, o) in enumerate(zip(tensors, outputs)):
            works.append(_allreduce_work(s, f"{base}.{i}", t, o, op, prescale_factor,
                                         postscale_factor))
    return _register(_Group(works), _key(base, process_set))


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                            name: Optional[str] = None, op: Optional[int] = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts allreduces of a list of tensors as one group (ringd fuses the small ones);
    synchronize() returns the list of results."""
    op = _handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, [torch.empty_like(t) for t in tensors], name, op,
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                             name: Optional[str] = None, op: Optional[int] = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """grouped_allreduce_async in place."""
    op = _handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, list(tensors), name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """grouped allreduce in place; returns the tensors."""
    return _sync(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                          postscale_factor, process_set))


class HorovodGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce with gradients."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set,
                *tensors):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return tuple(_sync(grouped_allreduce_async(list(tensors), average, name, op,
                                                   prescale_factor, postscale_factor,
                                                   process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        average, op, pre, post, process_set = ctx.args
        grads = grouped_allreduce([g.contiguous() for g in grad_output], average=average, op=op,
                                  prescale_factor=pre, postscale_factor=post,
                                  process_set=process_set)
        return (None, None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                      name: Optional[str] = None,
                      compression: Type[Compressor] = Compression.none, op: Optional[int] = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Returns the list of tensors reduced over all ranks, as one group, differentiably."""
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor,
                                            postscale_factor, process_set,
                                            *[c for c, _ in compressed])
    return [compression.decompress(r, cctx) for r, (_, cctx) in zip(reduced, compressed)]


# ---- allgather ----

def _allgather_work(tensor, name, process_set):
    s = _session_of(process_set)
    full = _op_name("allgather", name, process_set)
    _claim(_key(full, process_set))
    _checked(s, [full], _check_tensor, tensor, f"allgather '{full}'")
    return _checked(s, [full], _Allgather, s, tensor, full), _key(full, process_set)


def allgather_async(tensor: torch.Tensor, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts concatenating every rank's tensor along the first dimension (which may differ
    across ranks; the others must match). Returns a handle."""
    work, key = _allgather_work(tensor, name, process_set)
    return _register(work, key)


class HorovodAllgather(torch.autograd.Function):
    """allgather with a gradient: the averaged gradient of this rank's rows."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        work, key = _allgather_work(tensor, name, process_set)
        output = _sync(_register(work, key))
        ctx.offset = sum(work.dims[:_session_of(process_set).rank])
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return output

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        return grad.narrow(0, ctx.offset, ctx.rows), None, None


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns every rank's tensor concatenated along the first dimension, differentiably."""
    return HorovodAllgather.apply(tensor, name, process_set)


def _allgather_with_dims(tensor, name, process_set=None):
    """allgather, also giving every rank's first dimension (for allgather_object)."""
    work, key = _allgather_work(tensor, name, process_set)
    output = _sync(_register(work, key))
    return output, work.dims


# ---- sparse tensors ----

class _SparseHandle:
    """Horovod's sparse allreduce handle: calling it (or synchronize(it)) waits for the two
    allgathers and returns the reduced sparse tensor."""

    def __init__(self, tensor, indices, values, op, size):
        self.tensor, self.indices, self.values = tensor, indices, values
        self.op, self.size = op, size
        self.result = None

    def __call__(self):
        if self.result is None:
            try:
                values = synchronize(self.values)
            except ringd.Timeout:
                raise  # both still pending: call again
            except BaseException:
                try:
                    synchronize(self.indices)  # released too; the values' error is the one
                except Exception:  # noqa: BLE001 - its own failure says nothing more
                    pass
                raise
            indices = synchronize(self.indices)
            if self.op == Average:
                values = values / self.size
            self.result = torch.sparse_coo_tensor(indices.t(), values, self.tensor.size(),
                                                  dtype=self.tensor.dtype,
                                                  device=self.tensor.device)
        return self.result


def sparse_allreduce_async(tensor: torch.Tensor, name: str, op: int,
                           process_set: ProcessSet = global_process_set) -> _SparseHandle:
    """Starts reducing a sparse COO tensor over all ranks as Horovod does: every rank's indices
    and values gathered ("<name>.indices", "<name>.values"), the values divided by the size for
    Average (Sum keeps them); the result is the uncoalesced sum. Returns a callable handle:
    handle() (or synchronize(handle)) gives the result."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise TypeError("sparse_allreduce_async takes a sparse COO tensor; allreduce_async "
                        "takes dense ones")
    if op not in (Average, Sum):
        raise ValueError(f"sparse_allreduce_async reduces with Average or Sum, not {op}")
    indices = allgather_async(tensor._indices().t().contiguous(), name=f"{name}.indices",
                              process_set=process_set)
    values = allgather_async(tensor._values().contiguous(), name=f"{name}.values",
                             process_set=process_set)
    return _SparseHandle(tensor, indices, values, op, _session_of(process_set).size)


# ---- reducescatter ----

def _scatter_rows(rows, n):
    """Horovod's split of a first dimension of rows over n ranks: rows // n each, and one more
    for each of the first rows % n ranks."""
    base, extra = divmod(rows, n)
    return [base + (1 if r < extra else 0) for r in range(n)]


def _reduce_op(op):
    """Raises for a reduce op ringd does not run."""
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by ringd; use Average or Sum")
    if op not in _RINGD_OPS:
        raise ValueError(f"unknown reduction op {op!r}: use Average, Sum, Min, Max or Product")


def _reducescatter_work(s, tensor, full, names, op, prescale_factor, postscale_factor):
    """The reducescatter of tensor named full (its name claimed): this rank's rows. A wrong
    tensor fails the ops named names on every rank."""

    def check():
        _check_tensor(tensor, f"reducescatter '{full}'")
        _check_reducible(tensor, f"reducescatter '{full}'")
        if tensor.dim() == 0:
            raise ValueError(f"reducescatter '{full}': a 0-d tensor has no first dimension to "
                             "scatter along; pass tensor.reshape(1)")

    _checked(s, names, check)
    rows = _scatter_rows(tensor.shape[0], s.size)
    row = 1
    for d in tensor.shape[1:]:
        row *= d
    output = tensor.new_empty((rows[s.rank],) + tuple(tensor.shape[1:]))
    counts = [r * row for r in rows]
    here = _reduced_here(tensor, op, prescale_factor, postscale_factor, s.size)
    if here is None:
        h = s.reducescatter_async(full, tensor, out=output, op=_RINGD_OPS[op],
                                  prescale=prescale_factor, postscale=postscale_factor,
                                  recvcounts=counts)
        return _Single(h, output)
    send, op, finish = here
    recv = output.to(send.dtype)
    h = s.reducescatter_async(full, send, out=recv, op=_RINGD_OPS[op], recvcounts=counts)
    return _Single(h, output, lambda: finish(recv, output))


def _reducescatter_async(tensor, name, op, prescale_factor, postscale_factor, process_set):
    s = _session_of(process_set)
    _reduce_op(op)
    full = _op_name("reducescatter", name, process_set)
    _claim(_key(full, process_set))
    return _register(_reducescatter_work(s, tensor, full, [full], op, prescale_factor,
                                         postscale_factor), _key(full, process_set))


def reducescatter_async(tensor: torch.Tensor, name: Optional[str] = None,
                        op: int = Average, process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts reducing tensor over all ranks (op: Average by default, Sum, Min, Max, Product)
    and scattering the result along the first dimension: this rank receives its rows, the
    first (rows % size) ranks one more than the others, as Horovod splits them. Returns a
    handle; synchronize() gives this rank's rows."""
    return _reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                                process_set)


class HorovodReducescatter(torch.autograd.Function):
    """reducescatter with a gradient: every rank's gradient gathered (and, for Average, divided
    by the size), scaled as the forward pass scaled."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.scale = prescale_factor * postscale_factor
        ctx.process_set = process_set
        return _sync(_reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                                          process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(grad_output.contiguous(), process_set=ctx.process_set)
        if ctx.op == Average:
            grad = grad / _session_of(ctx.process_set).size
        return grad * ctx.scale, None, None, None, None, None


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None,
                  compression: Type[Compressor] = Compression.none, op: int = Average,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Returns this rank's rows of the reduction of every rank's tensor (see
    reducescatter_async), differentiably."""
    compressed, cctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                     postscale_factor)
    return compression.decompress(out, cctx)


# ---- grouped allgather and reducescatter ----

def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts allgathers of a list of tensors ("<name>.<i>") as one group: all run, or all fail
    alike on every rank (the counts of every one are learnt first, then the data of all moves as
    one group). synchronize() returns the list of results."""
    s = _session_of(process_set)
    base = _op_name("grouped_allgather", name, process_set)
    _claim(_key(base, process_set))
    names = [f"{base}.{i}" for i in range(len(tensors))]
    for i, t in enumerate(tensors):
        _checked(s, names, _check_tensor, t, f"grouped allgather '{base}' tensor {i}")
    with s.group():  # one unit to the daemon: all run, or all fail alike
        works = [_checked(s, names[i:], _Allgather, s, t, names[i])
                 for i, t in enumerate(tensors)]
    return _register(_Group(works), _key(base, process_set))


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Every rank's tensors concatenated along the first dimension, tensor by tensor."""
    return _sync(grouped_allgather_async(tensors, name, process_set))


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                                op: int = Average,
                                process_set: ProcessSet = global_process_set,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Starts reducescatters of a list of tensors ("<name>.<i>", split as reducescatter splits)
    as one group: all run, or all fail alike on every rank. synchronize() returns this rank's
    rows of each."""
    s = _session_of(process_set)
    _reduce_op(op)
    base = _op_name("grouped_reducescatter", name, process_set)
    _claim(_key(base, process_set))
    names = [f"{base}.{i}" for i in range(len(tensors))]
    with s.group():  # one unit to the daemon: all run, or all fail alike
        works = [_reducescatter_work(s, t, names[i], names[i:], op, prescale_factor,
                                     postscale_factor) for i, t in enumerate(tensors)]
    return _register(_Group(works), _key(base, process_set))


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          op: int = Average, process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """This rank's rows of the reduction of every rank's tensors, tensor by tensor."""
    return _sync(grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                             postscale_factor))


# ---- alltoall ----

_ALLTOALL_LEARNT_MAX = 512  # ranks up to which an even alltoall learns every rank's rows


class _Alltoall(_Work):
    """Horovod's alltoall: rows of the tensor to each rank in turn (splits, or an even split),
    every rank's rows for this one back, with how many came from each: one ringd alltoallv
    whose receive counts the ranks learn (libringd's ringd_alltoallv_into, the output made once
    they are known), also for an even split, as each rank splits its own first dimension, which
    may differ between ranks (Horovod's rule); beyond _ALLTOALL_LEARNT_MAX ranks an even split
    is one alltoall of equal counts. Rows of no elements cannot tell their number by their
    count: the splits travel in an alltoall of their own instead."""

    def __init__(self, s, tensor, splits, name):
        if tensor.dim() == 0:
            raise ValueError(f"alltoall '{name}': a 0-d tensor has no first dimension to split; "
                             "pass tensor.reshape(1)")
        self.dtype = tensor.dtype
        tensor = _dtypes.as_bytes(tensor)
        n, rows = s.size, tensor.shape[0]
        self.tensor, self.trailing = tensor, tuple(tensor.shape[1:])
        self.row = 1
        for d in self.trailing:
            self.row *= d
        self.even = False
        if splits is None:
            if rows % n:
                raise ValueError(f"alltoall '{name}': the first dimension ({rows}) does not split "
                                 f"evenly over {n} ranks: pass splits")
            self.splits = [rows // n] * n
            # the n * n counts a learnt alltoallv carries no longer fit one control frame: an
            # alltoall of equal counts, which needs the same first dimension on every rank
            self.even = n > _ALLTOALL_LEARNT_MAX
        else:
            self.splits = [int(x) for x in (splits.tolist() if isinstance(splits, torch.Tensor)
                                            else splits)]
            if len(self.splits) != n or any(x < 0 for x in self.splits) or \
                    sum(self.splits) != rows:
                raise ValueError(f"alltoall '{name}': splits {self.splits} must be {n} counts "
                                 f"(>= 0) of rows adding up to the first dimension ({rows})")
        self.received = None
        if self.row == 0:
            self.handle = s.alltoall_async(name, torch.tensor(self.splits, dtype=torch.int64))
        elif self.even:
            self.handle = s.alltoall_async(name, tensor)
        else:
            self.handle = s.alltoall_async(name, tensor, splits=[k * self.row for k in self.splits])

    def poll(self):
        return self.handle.done()

    def wait(self):
        got = self.handle.wait()
        if self.row == 0:
            rows = got.tolist()
            got = self.tensor.new_empty((sum(rows),) + self.trailing)
        elif self.even:
            rows = list(self.splits)
        else:
            rows = [c // self.row for c in self.handle.counts]
        self.received = torch.tensor(rows, dtype=torch.int32)
        return _dtypes.from_bytes(got, self.dtype), self.received


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Starts sending each rank its rows of tensor (splits: rows for each rank in turn, a list or
    a tensor; None: an even split) and gathering every rank's rows for this one. Returns a
    handle; synchronize() gives (output, received_splits)."""
    s = _session_of(process_set)
    full = _op_name("alltoall", name, process_set)
    _claim(_key(full, process_set))
    _checked(s, [full], _check_tensor, tensor, f"alltoall '{full}'")
    return _register(_checked(s, [full], _Alltoall, s, tensor, splits, full),
                     _key(full, process_set))


class HorovodAlltoall(torch.autograd.Function):
    """alltoall with a gradient: the gradient's rows sent back where they came from."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = _sync(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        # an even split of equal counts (beyond _ALLTOALL_LEARNT_MAX ranks) goes back as one
        ctx.even = splits is None and len(received) > _ALLTOALL_LEARNT_MAX
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        if ctx.even:
            return alltoall(grad_output.contiguous(), process_set=ctx.process_set), None, None, \
                None
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received,
                           process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
             process_set: ProcessSet = global_process_set) -> Any:
    """Sends each rank its rows of tensor and returns every rank's rows for this one, in rank
    order, differentiably: the output alone when splits is None (an even split), else
    (output, received_splits), as Horovod's alltoall."""
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# ---- broadcast ----

def _set_root(process_set, root_rank):
    """root_rank (a global rank, as Horovod's) as a rank of process_set."""
    if process_set is None or process_set._global():
        return int(root_rank)
    if int(root_rank) not in process_set.ranks:
        raise ValueError(f"root_rank {root_rank} is not in {process_set!r}")
    return process_set.ranks.index(int(root_rank))


def _broadcast_async(tensor, root_rank, name, process_set):
    s = _session_of(process_set)
    full = _op_name("broadcast", name, process_set)
    _claim(_key(full, process_set))
    root = _checked(s, [full], _set_root, process_set, root_rank)
    _checked(s, [full], _check_tensor, tensor, f"broadcast '{full}'")
    h = s.broadcast_async(full, _dtypes.as_bytes(tensor), root, shape=tensor.shape)
    return _register(_Single(h, tensor), _key(full, process_set))


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts copying root_rank's tensor to every rank into a new tensor (the input is not
    modified). Returns a handle."""
    _check_tensor(tensor, "broadcast_async")
    return _broadcast_async(tensor.clone(), root_rank, name, process_set)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts copying root_rank's tensor into every rank's tensor, in place. Returns a handle."""
    return _broadcast_async(tensor, root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """broadcast in place; returns tensor."""
    return _sync(broadcast_async_(tensor, root_rank, name, process_set))


class HorovodBroadcast(torch.autograd.Function):
    """broadcast with a gradient: the averaged gradient, on the root rank only."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _sync(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns root_rank's tensor on every rank (a new tensor), differentiably."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


# ---- synchronisation ----

def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank (of process_set) called barrier()."""
    s = _session_of(process_set)
    s.barrier_async(_op_name("barrier", None, process_set)).wait()


def join(device: int = -1) -> int:
    """This rank has run out of data: returns once every rank has called join(), with the rank
    that joined last (Horovod's join). Until then the other ranks' allreduces (the
    DistributedOptimizer's among them) complete with this rank contributing zeros; any other
    collective they call raises while a rank has joined, as in Horovod. device is accepted for
    Horovod's signature: the join itself moves no tensor."""
    return _require().join()
