# The torch.distributed backend "ringd": a pure-Python ProcessGroup over libringd's sessions.
"""torch.distributed over ringd: `dist.init_process_group("ringd")` after `import ringd.torch.distributed`.

    import torch.distributed as dist
    import ringd.torch.distributed  # registers the backend "ringd"
    dist.init_process_group("ringd")  # under torchrun, or RANK/WORLD_SIZE/MASTER_ADDR set
    model = torch.nn.parallel.DistributedDataParallel(model)

DDP, FSDP, ZeroRedundancyOptimizer and new_group run over it unchanged. The process group is
pure Python (PyTorch 1.13 and 2.x): every collective goes to the node's ringd daemon through a
ringd.Session, and returns a Work whose wait() blocks (raising the collective's error) and whose
get_future() completes when the daemon answers: a thread of this module polls the pending ones.

Launch. The rank and size are torch's (RANK, WORLD_SIZE, as init_process_group got them); the
session asks for local rank LOCAL_RANK among LOCAL_WORLD_SIZE processes of the node (each when
set). The ringd job is RINGD_JOB, else "torch.<TORCHELASTIC_RUN_ID>" under torchrun with a run
id, else "torch.<MASTER_ADDR>:<MASTER_PORT>" (a Kubeflow PyTorchJob sets both), else ringd's
default. torch's store is never used: the daemons meet through Redis. The daemon numbers ranks
by node; the group maps torch's ranks onto ringd's (an allgather when it opens), so roots,
gathers and splits follow torch's numbering.

Names. torch's collectives have none: each is named by its group and its sequence number in the
group ("torch.<n>"; every rank calls a group's collectives in the same order), so a rank that
calls another collective, dtype or size there fails on every rank with ringd's mismatch error.

Errors are ringd.Error subclasses (RuntimeError), and also torch.distributed.DistBackendError
where torch has it (2.1 and later): a lost rank fails the collectives in flight on every other
rank within the daemons' detection time, with MembershipChanged naming who was lost, so the
workers exit and torchrun --max-restarts restarts them. The group's timeout (init_process_group's
timeout=) bounds every collective: past it, its Work fails with ringd.Timeout, as Gloo's does.

Operations. allreduce (SUM, AVG, MIN, MAX, PRODUCT; PREMUL_SUM where torch can say its factor),
its coalesced form, broadcast, allgather (the list form takes differing sizes),
_allgather_base / all_gather_into_tensor, reduce_scatter, _reduce_scatter_base /
reduce_scatter_tensor, alltoall_base / all_to_all_single (splits or not), alltoall, barrier,
torch 2.x's *_coalesced forms (one ringd group: all run or all fail). reduce is an allreduce
(the non-roots' tensors left as they were), gather and scatter are alltoalls in which only the
root receives or sends. Collectives that only move data take every dtype (as bytes where ringd
has no such dtype); reductions take ringd's dtypes, int8, int16 and bool (reduced in int32) and
complex (as pairs of reals, SUM and AVG). Point-to-point send and recv raise: ringd has none.
new_group opens a ringd process set of its members, named by torch's group name.

Device tensors go through the session as ringd.torch's do (ringd.Session): CUDA tensors are
staged through the device arena or host memory by libringd. A CUDA collective issued on a stream
other than the default one synchronises that stream first (libringd orders work on the default
stream only).
"""
import atexit
import collections
import contextlib
import datetime
import itertools
import os
import socket
import threading
import time
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup as _ProcessGroup

from .. import errors as _errors
from ..errors import Error, InvalidArgument, Result, Timeout
from .. import session as _session
from ..session import ReduceOp, Session
from . import _dtypes, _worlds

__all__ = ["BACKEND", "ProcessGroupRingd"]

BACKEND = "ringd"

_DistBackendError = getattr(dist, "DistBackendError", None)
_torch_errors = {}  # a ringd Error class -> its subclass that is also DistBackendError


def _torch_error_class(base):
    """base (a ringd.Error class) made a DistBackendError too: an attribute of this module,
    "DistBackend<Name>", so that it pickles."""
    name = f"DistBackend{base.__name__}"
    cls = type(name, (base, _DistBackendError), {"__module__": __name__, "__qualname__": name})
    globals()[name] = cls
    _torch_errors[base] = cls
    return cls


if _DistBackendError is not None:
    for _base in (Error, *_errors.Error.__subclasses__()):
        _torch_error_class(_base)


def _torch_error(e):
    """e as torch's own error type too (DistBackendError, where torch has one)."""
    if _DistBackendError is None or not isinstance(e, Error) or isinstance(e, _DistBackendError):
        return e
    cls = _torch_errors.get(type(e)) or _torch_error_class(type(e))
    out = cls(e.code, e.message, e.hint)
    out.__cause__ = e.__cause__
    return out


# ---- what a Work is, and who completes it ----


class _Work(dist.Work):
    """One collective (or a coalesced group): wait() blocks until the daemon answered and raises
    the collective's error; get_future() is a torch Future completed with the outputs, or
    failed with the error where C++ (DDP's reducer) sees it. The module's completer finishes
    it, polling its handles (never blocking inside libringd, so no wait holds up another
    group's Works or its deadline), and keeps it alive (C++ callers hold only its C++ half)
    until it finished, and then until wait() or get_future() was called (at most _UNCLAIMED
    finished Works that nobody asked for)."""

    def __init__(self, what, handles, finish, timeout):
        super().__init__()
        self._what = what
        self._handles = handles
        self._finish = finish  # () -> the outputs, after every handle finished
        self._fut = torch.futures.Future()
        self._chained = None  # what get_future() gives: errors set on the C++ side too
        self._future_asked = False  # get_future() was called: complete on the dispatcher
        self._lock = threading.Lock()
        self._settled = False
        self._result = None  # (outputs, error) once settled, before the future completes
        self._claimed = False
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._outputs = None
        self._held = False  # in a coalescing block not ended yet: not sent to the daemons
        self._done = threading.Event()  # set once the future is complete
        self._pid = _session._PID  # a forked child gets an error, not a wait on the parent's

    def _complete(self, value, err):
        """Completes the future: here when nobody asked for it (no callbacks of others can run
        and block), else on the dispatcher (DDP's communication hooks, PowerSGD's, wait on other
        collectives inside their callbacks)."""

        def complete():
            if err is not None:
                self._fut.set_exception(err)
            else:
                self._outputs = value
                self._fut.set_result(value)
            self._done.set()

        with self._lock:  # get_future() cannot chain callbacks onto an inline completion
            if not self._future_asked:
                complete()
                return
        _dispatcher.put(complete)

    def _settle(self):
        """Completes the future once every handle finished. True when the Work has finished,
        now or before; False while a handle is pending or another thread is settling it."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._settled:
                return True
            try:
                if not all(h.done() for h in self._handles):
                    return False
                for h in self._handles:
                    h.wait()  # finished: raises the first failure
                value, err = self._finish(), None
            except Exception as e:  # noqa: BLE001 - handed to the future
                value, err = None, _torch_error(e)
            self._result = (value, err)
            self._settled = True
            self._handles = None
            self._finish = None
        finally:
            self._lock.release()
        self._complete(value, err)
        return True

    def _expire(self, now):
        """Fails the Work when its deadline passed (the daemon's op stays pending in the session
        until it ends there). True when it did."""
        if self._deadline is None or now < self._deadline:
            return False
        err = _torch_error(Timeout(
            Result.TIMEOUT, f"{self._what} did not finish within the process group's timeout of "
            f"{datetime.timedelta(seconds=self._timeout)}",
            "a rank may not have called it: see `ringctl status` on each node"))
        with self._lock:
            if self._settled:
                return False
            self._result = (None, err)
            self._settled = True
            self._handles = None
            self._finish = None
        self._complete(None, err)
        return True

    def _parents(self):
        """Raises in a child forked after the Work started: its lock, its future and the threads
        that complete it are the parent's (one may have held the lock at the fork)."""
        if _session._PID != self._pid:
            raise _torch_error(InvalidArgument(
                Result.INVALID,
                f"{self._what}: this process (pid {_session._PID}) was forked from the one that "
                f"started it (pid {self._pid}): its Work stays the parent's; open a process "
                "group of its own"))

    def _claim(self):
        if not self._claimed:
            self._claimed = True
            _completer.claimed(self)

    def wait(self, timeout=None):
        """Blocks until the collective finished; raises its error (ringd.Timeout past the
        group's timeout). timeout (a timedelta) bounds this wait, as Gloo's Work.wait does:
        past it, ringd.Timeout (the collective goes on)."""
        self._parents()
        self._claim()
        if self._held:
            raise RuntimeError(f"{self._what}: waited for inside the coalescing block that holds "
                               "it; wait after the block ends")
        end = None
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            end = time.monotonic() + timeout.total_seconds()
        with _completer.waiting():
            # in slices, so that Ctrl-C and SIGTERM get through, and finishing it here when the
            # completer is gone (a collective from an atexit handler)
            while not self._done.wait(0.05 if _completer.running() else 0.0005):
                if not _completer.running():
                    self._settle() or self._expire(time.monotonic())
                if end is not None and time.monotonic() >= end:
                    raise _torch_error(Timeout(Result.TIMEOUT, f"{self._what}: Work.wait timed "
                                               f"out after {timeout}"))
        self._fut.wait()  # raises the collective's error
        return True

    def get_future(self):
        self._parents()
        self._claim()
        with self._lock:  # completed here before, or on the dispatcher from now on
            self._future_asked = True
            if self._chained is None:
                # torch's Python Future.set_exception stores the error as a value that C++
                # callers take for a result: a callback that re-raises fails the chained future
                # for C++.
                self._chained = self._fut.then(lambda f: f.wait())
        return self._chained

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        if not self._fut.done():
            return False
        try:
            self._fut.wait()
        except Exception:  # noqa: BLE001 - the question is only whether it failed
            return False
        return True

    def result(self):
        self.wait()
        return self._outputs

    def source_rank(self):
        raise RuntimeError(f"{self._what}: a ringd Work has no source rank (ringd has no recv)")


_UNCLAIMED = 4096  # finished Works kept alive for a later wait()/get_future() from C++


class _Completer:
    """The module's thread that finishes pending Works: polls their handles (ringd_test, never
    blocking inside libringd, so submissions go on), every 10 us to 200 us while nothing
    finishes (20 us at most while a thread waits for a Work), and sleeps while none is
    pending."""

    def __init__(self):
        self._cv = threading.Condition()
        self._pending = []
        self._unclaimed = collections.deque()
        self._waiters = 0
        self._thread = None
        self._stopping = False

    def add(self, works):
        with self._cv:
            self._pending.extend(works)
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="ringd-torch-completer",
                                                daemon=True)
                self._thread.start()
                atexit.register(self.stop)
            self._cv.notify()

    def forked(self):
        """In a forked child: no thread (the parent's is not there), no lock held, none of the
        parent's Works (they refuse the child: _Work._parents)."""
        self._cv = threading.Condition()
        self._pending = []
        self._unclaimed = collections.deque()
        self._waiters = 0
        self._thread = None

    def stop(self):
        """Ends the thread (at exit: a daemon thread stopped by the interpreter's finalization
        inside torch's C++ future code would abort the process)."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(5)

    def running(self):
        return self._thread is not None and not self._stopping

    def claimed(self, work):
        with self._cv:
            try:
                self._unclaimed.remove(work)
            except ValueError:
                pass

    @contextlib.contextmanager
    def waiting(self):
        """A thread blocks on a Work meanwhile: poll often."""
        with self._cv:
            self._waiters += 1
            self._cv.notify()
        try:
            yield
        finally:
            with self._cv:
                self._waiters -= 1

    def _run(self):
        delay = 0.0
        while True:
            with self._cv:
                while not self._pending and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
                batch = list(self._pending)
                cap = 20e-6 if self._waiters else 200e-6
            now = time.monotonic()
            done = [w for w in batch if w._settle() or w._expire(now)]
            if done:
                with self._cv:
                    gone = set(map(id, done))
                    self._pending = [w for w in self._pending if id(w) not in gone]
                    for w in done:
                        if not w._claimed:
                            self._unclaimed.append(w)
                    while len(self._unclaimed) > _UNCLAIMED:
                        self._unclaimed.popleft()
                delay = 0.0
            else:
                delay = min(max(delay * 2, 10e-6), cap)
                time.sleep(delay)


_completer = _Completer()


class _Dispatcher:
    """Threads that complete the futures handed out by get_future(), off the completer thread:
    their callbacks may block on other collectives, which only the completer finishes. A
    thread more is started whenever more is queued than threads are idle (at most 64); spare
    ones leave after 10 s."""

    def __init__(self):
        self._cv = threading.Condition()
        self._queue = collections.deque()
        self._idle = 0
        self._live = 0  # threads in _run
        self._threads = set()  # the threads stop() joins
        self._stopping = False  # at exit: a thread with nothing queued ends instead of waiting
        self._stopped = False  # stop() returned: what is put after runs where it is put
        self._registered = False

    def put(self, fn):
        with self._cv:
            if not self._stopped:
                self._queue.append(fn)
                # an idle thread each, not yet woken, for what is queued: a function queued
                # behind a callback that blocks might be what that callback waits for
                if len(self._queue) <= self._idle or self._live >= 64:
                    self._cv.notify()
                    return
                t = threading.Thread(target=self._run, name="ringd-torch-futures", daemon=True)
                try:
                    t.start()
                except RuntimeError:  # Python 3.12 on: no new thread once the interpreter exits
                    self._queue.pop()
                else:
                    self._live += 1
                    self._threads.add(t)
                    if not self._registered:
                        self._registered = True
                        atexit.register(self.stop)  # after the completer's: runs first
                    return
        # at exit, after stop(), or when no thread could start: here (on the completer, which
        # waits for it meanwhile)
        fn()

    def forked(self):
        """In a forked child: no threads (the parent's are not there), no lock held, none of the
        callbacks the parent had queued (the parent runs them). What stop() does at exit stays
        registered as it was."""
        self._cv = threading.Condition()
        self._queue = collections.deque()
        self._idle = 0
        self._live = 0
        self._threads = set()

    def stop(self):
        """At exit: lets the threads run what is queued, also what their callbacks queue
        meanwhile, and waits until they ended, 5 s at most. A daemon thread still running when
        the interpreter finalizes is stopped where it stands: a callback's work lost, and inside
        torch's C++ future code the process aborted."""
        deadline = time.monotonic() + 5.0
        me = threading.current_thread()
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        while True:
            with self._cv:
                alive = [t for t in self._threads if t is not me and t.is_alive()]
            left = deadline - time.monotonic()
            if not alive or left <= 0:
                break
            alive[0].join(left)  # ended as a thread, not only out of _run's loop
        with self._cv:
            self._stopped = True

    def _run(self):
        try:
            self._serve()
        finally:
            with self._cv:
                self._live -= 1

    def _serve(self):
        me = threading.current_thread()
        while True:
            with self._cv:
                self._idle += 1
                while not self._queue:
                    if self._stopping:  # stays in _threads: stop() joins it
                        self._idle -= 1
                        return
                    if (not self._cv.wait(10.0) and not self._queue and not self._stopping
                            and self._live > 1):
                        self._idle -= 1
                        self._threads.discard(me)
                        return
                self._idle -= 1
                fn = self._queue.popleft()
            try:
                fn()
            except BaseException:
                with self._cv:
                    self._threads.discard(me)  # ends here, its error reported by threading
                raise


_dispatcher = _Dispatcher()


def _forked_child():
    """After fork(), in the child: the parent's completer and dispatcher threads are not there,
    and one of them may have held a lock."""
    _completer.forked()
    _dispatcher.forked()


os.register_at_fork(after_in_child=_forked_child)


# ---- tensors as ringd takes them ----

_COMPLEX = {torch.complex64, torch.complex128}


def _reduce_op(op, what):
    """torch's ReduceOp as (ringd's op, prescale factor)."""
    for name, ringd_op in (("SUM", ReduceOp.SUM), ("AVG", ReduceOp.AVG), ("MIN", ReduceOp.MIN),
                           ("MAX", ReduceOp.MAX), ("PRODUCT", ReduceOp.PROD)):
        known = getattr(dist.ReduceOp, name, None)
        if known is not None and op == known:
            return ringd_op, 1.0
    premul = getattr(dist.ReduceOp, "PREMUL_SUM", None)
    if premul is not None and op == premul:
        state = op.__getstate__() if hasattr(op, "__getstate__") else None
        factor = state[1] if isinstance(state, tuple) and len(state) == 2 else None
        if isinstance(factor, torch.Tensor) and factor.numel() == 1:
            factor = float(factor.item())
        if isinstance(factor, (int, float)):
            return ReduceOp.SUM, float(factor)
        raise ValueError(f"{what}: this torch does not say a PREMUL_SUM's factor: multiply the "
                         "tensor and use SUM")
    kind = getattr(op, "op", op)  # torch 1.13's ReduceOp wraps a RedOpType
    raise ValueError(f"{what}: ringd reduces with SUM, AVG, MIN, MAX, PRODUCT and PREMUL_SUM, "
                     f"not {getattr(kind, 'name', kind)}")


def _flat(t):
    """t as a contiguous 1-d tensor: t's own memory when it is contiguous, else a copy."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _movable(t):
    """t's data as ringd moves it: a contiguous 1-d tensor of a ringd dtype (bytes for others),
    and the elements one of t's elements makes."""
    flat = _flat(t)
    if _dtypes.native(t):
        return flat, 1
    return flat.view(torch.uint8), t.element_size()


def _reducible(t, what, op):
    """t's data as ringd reduces it with ringd's op: a contiguous 1-d tensor of a ringd dtype,
    and how the result gets back into t (None when it lies in t already)."""
    if _dtypes.native(t):
        flat = _flat(t)
        same = flat.data_ptr() == t.data_ptr() and t.is_contiguous()
        return flat, (None if same else lambda: t.copy_(flat.view(t.shape)))
    if t.dtype == torch.bool and op == ReduceOp.AVG:
        raise TypeError(f"{what}: bool tensors have no average (NCCL refuses it too): use MAX "
                        "for any, MIN for all")
    if t.dtype in _dtypes.WIDENED:
        wide = t.reshape(-1).to(torch.int32)
        return wide, lambda: t.copy_(wide.view(t.shape).to(t.dtype))
    if t.dtype in _COMPLEX:
        if op not in (ReduceOp.SUM, ReduceOp.AVG):
            raise TypeError(f"{what}: complex tensors reduce with SUM, AVG and PREMUL_SUM "
                            f"(part by part), not {op.name}")
        flat = torch.view_as_real(_flat(t)).reshape(-1)
        same = t.is_contiguous()
        return flat, (None if same else lambda: t.copy_(torch.view_as_complex(
            flat.view(-1, 2)).view(t.shape)))
    raise TypeError(f"{what}: ringd cannot reduce {t.dtype} tensors (it reduces float32, "
                    "float64, float16, bfloat16, int8 to int64, uint8, bool and complex)")


def _tensors(xs):
    """The tensors in xs, a tensor or nested lists of them."""
    if isinstance(xs, torch.Tensor):
        yield xs
    elif isinstance(xs, (list, tuple)):
        for x in xs:
            yield from _tensors(x)


def _sync_stream(tensors):
    """libringd orders a CUDA collective after the default stream's work: work queued on any
    other current stream is waited for here."""
    for t in _tensors(tensors):
        if t.is_cuda:
            s = torch.cuda.current_stream(t.device)
            if s != torch.cuda.default_stream(t.device):
                s.synchronize()


def _one(tensors, what):
    if len(tensors) != 1:
        raise ValueError(f"{what}: {len(tensors)} tensors: ringd takes one tensor per process "
                         "(torch's multi-device forms are deprecated)")
    return tensors[0]


def _split(flat, counts):
    out, at = [], 0
    for c in counts:
        out.append(flat[at:at + c])
        at += c
    return out


# ---- the process group ----


class ProcessGroupRingd(_ProcessGroup):
    """A torch.distributed process group served by ringd (see the module's doc). Made by
    init_process_group("ringd") and new_group(); owns its ringd.Session."""

    def __init__(self, session, rank, size, r2t, timeout, group_name):
        super().__init__(rank, size)
        self._s = session
        self._r2t = list(r2t)  # ringd rank -> torch rank in this group
        self._t2r = [0] * size
        for r, t in enumerate(self._r2t):
            self._t2r[t] = r
        self._identity = self._r2t == list(range(size))
        self._timeout = timeout
        self._group_name = group_name
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._coalesced = None  # Works started since _start_coalescing, until _end_coalescing
        self._coalescing_cm = None
        weakref.finalize(self, session.close)

    def __repr__(self):
        return (f"<ringd ProcessGroup '{self._group_name}' rank {self.rank()} of "
                f"{self.size()}>")

    def getBackendName(self):
        return BACKEND

    def name(self):
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def shutdown(self):
        """Closes the group's ringd session (torch 2.x calls it from destroy_process_group)."""
        self._s.close()

    # ---- submitting ----

    def _start(self, what, submit, tensors=(), grouped=False):
        """Runs submit(name, what) -> (handles, finish) under the group's next name and returns
        its Work. A mistake found before anything reached ringd fails the collective on every
        rank (grouped: a ringd group of names "<name>.<i>", named after its first)."""
        try:
            self._s._st.require_open()  # closed, or a forked child's: before the group's lock,
        except Error as e:  # which a thread of the parent may have held at the fork
            self._abandon_coalescing()
            raise _torch_error(e) from None
        with self._lock:
            name = f"torch.{next(self._seq)}"
        what = f"{what} {name} of process group '{self._group_name}'"
        try:
            _sync_stream(tensors)
            handles, finish = submit(name, what)
        except Error as e:
            self._abandon_coalescing()
            raise _torch_error(e) from None
        except Exception as e:  # noqa: BLE001 - torch's own checks raise RuntimeError too
            self._s._refuse_for(f"{name}.0" if grouped else name, e)
            self._abandon_coalescing()
            why = str(e) if what in str(e) else f"{what}: {e}"
            raise _torch_error(InvalidArgument(Result.INVALID, why)) from e
        w = _Work(what, handles, finish, self._timeout)
        if self._coalesced is not None:  # handed to the completer once the group is sent
            w._held = True
            self._coalesced.append(w)
        else:
            _completer.add([w])
        return w

    def _group(self):
        """A ringd group for a coalesced form's collectives (inside _start_coalescing's, none
        of its own: groups do not nest)."""
        return contextlib.nullcontext() if self._coalesced is not None else self._s.group()

    def _abandon_coalescing(self):
        """A collective of a coalescing block failed on this rank: the block ends here (the
        group goes out as it is and fails on every rank, its size differing), since torch's
        coalescing manager may never call _end_coalescing after the error."""
        if self._coalesced is not None:
            try:
                self._end_coalescing()
            except Error:
                pass  # the collective's own error is the one to raise

    def _start_coalescing(self, *device):
        """torch 2.x's _coalescing_manager: the collectives until _end_coalescing are one ringd
        group (one negotiation; all run or all fail alike)."""
        if self._coalesced is not None:
            raise RuntimeError(f"process group '{self._group_name}': coalescing already started")
        cm = self._s.group()
        cm.__enter__()
        self._coalescing_cm, self._coalesced = cm, []

    def _end_coalescing(self, *device_or_reqs):
        """Sends the group and returns a Work of all its collectives."""
        if self._coalesced is None:
            raise RuntimeError(f"process group '{self._group_name}': coalescing not started")
        works, cm = self._coalesced, self._coalescing_cm
        self._coalesced = self._coalescing_cm = None
        for w in works:
            w._held = False
        try:
            cm.__exit__(None, None, None)
        except Error as e:
            raise _torch_error(e) from None
        finally:
            _completer.add(works)  # sent, or failed by the group's end: they finish either way
        handles = [h for w in works for h in (w._handles or [])]

        def finish():
            out = []
            for w in works:  # their handles finished: each settles now, or did
                while not w._settle():
                    time.sleep(10e-6)
                # not its future: a dispatcher thread may not have completed it yet
                value, err = w._result
                if err is not None:
                    raise err
                out.append(value)
            return out

        done = _Work(f"{len(works)} coalesced collectives of process group "
                     f"'{self._group_name}'", handles, finish, self._timeout)
        _completer.add([done])
        return done

    def _members(self, name, what, members, outputs, one):
        """A coalesced form: one(f"{name}.{i}", what, *members[i]) -> (handle, finish or None)
        for each member, in one ringd group; returns (the handles, a finish giving outputs)."""
        handles, finishes = [], []
        with self._group():
            for i, m in enumerate(members):
                h, f = one(f"{name}.{i}", what, *m)
                handles.append(h)
                finishes.append(f)
        return handles, lambda: ([f() for f in finishes if f], outputs)[1]

    def _unpack(self, flat, counts, outs):
        """Copies flat's blocks of counts (ringd's rank order) into outs (torch's)."""
        for r, piece in enumerate(_split(flat, counts)):
            o = outs[self._r2t[r]]
            o.copy_(piece.view(o.dtype).view(o.shape))

    def _to_ringd(self, per_torch_rank):
        """A list in torch's rank order, in ringd's."""
        return [per_torch_rank[t] for t in self._r2t]

    # ---- reductions ----

    def _allreduce_one(self, name, what, t, op):
        rop, pre = _reduce_op(op, what)
        buf, back = _reducible(t, what, rop)
        h = self._s.allreduce_async(name, buf, buf, op=rop, prescale=pre)
        return h, back

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def submit(name, what):
            h, back = self._allreduce_one(name, what, _one(tensors, what), op)
            return [h], lambda: (back and back(), tensors)[1]

        return self._start("allreduce", submit, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def submit(name, what):
            return self._members(name, what, [(t,) for t in tensors], tensors,
                                 lambda n, w, t: self._allreduce_one(n, w, t, op))

        return self._start("allreduce_coalesced", submit, tensors, grouped=True)

    def reduce(self, tensors, opts):
        root = opts.rootRank

        def submit(name, what):
            t = _one(tensors, what)
            self._check_root(root, what)
            target = t if self.rank() == root else t.clone()
            h, back = self._allreduce_one(name, what, target, opts.reduceOp)
            return [h], lambda: (back and back(), tensors)[1]

        return self._start("reduce", submit, tensors)

    def _reduce_scatter(self, name, what, out, blocks, op):
        """out receives this rank's block of the reduction of blocks (torch's rank order)."""
        if len(blocks) != self.size():
            raise ValueError(f"{what}: {len(blocks)} input blocks for a group of {self.size()}")
        rop, pre = _reduce_op(op, what)
        counts = [b.numel() for b in blocks]
        if counts[self.rank()] != out.numel():
            raise ValueError(f"{what}: the output has {out.numel()} elements, this rank's block "
                             f"{counts[self.rank()]}")
        ordered = self._to_ringd(blocks)
        send = torch.cat([b.reshape(-1) for b in ordered]) if ordered else out.new_empty(0)
        sbuf, _ = _reducible(send, what, rop)
        obuf, back = _reducible(out, what, rop)
        scale = 2 if out.dtype in _COMPLEX else 1
        recv = [c * scale for c in self._to_ringd(counts)]
        h = self._s.reducescatter_async(name, sbuf, obuf, op=rop, prescale=pre, recvcounts=recv)
        return h, back

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def submit(name, what):
            out, blocks = _one(output_tensors, what), _one(input_tensors, what)
            h, back = self._reduce_scatter(name, what, out, blocks, op)
            return [h], lambda: (back and back(), output_tensors)[1]

        return self._start("reduce_scatter", submit, [output_tensors, input_tensors])

    def _reduce_scatter_base(self, output, input, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def submit(name, what):
            h, back = self._reduce_scatter_tensor(name, what, output, input, op)
            return [h], lambda: (back and back(), [output])[1]

        return self._start("reduce_scatter_tensor", submit, [output, input])

    def _reduce_scatter_tensor(self, name, what, output, input, op):
        n = self.size()
        if input.numel() != output.numel() * n:
            raise ValueError(f"{what}: the input has {input.numel()} elements, it needs the "
                             f"output's {output.numel()} times the group's {n}")
        if input.dtype != output.dtype:
            raise TypeError(f"{what}: the output is {output.dtype}, the input {input.dtype}")
        if self._identity and input.is_contiguous():
            rop, pre = _reduce_op(op, what)
            sbuf, _ = _reducible(input, what, rop)
            obuf, back = _reducible(output, what, rop)
            return self._s.reducescatter_async(name, sbuf, obuf, op=rop, prescale=pre), back
        blocks = _split(_flat(input), [output.numel()] * n)
        return self._reduce_scatter(name, what, output, blocks, op)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def submit(name, what):
            return self._members(name, what, list(zip(outputs, inputs)), outputs,
                                 lambda n, w, o, t: self._reduce_scatter_tensor(n, w, o, t, op))

        return self._start("reduce_scatter_tensor_coalesced", submit, [*outputs, *inputs], grouped=True)

    # ---- data movement ----

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0

        def submit(name, what):
            t = _one(tensors, what)
            self._check_root(root, what)
            buf, _ = _movable(t)
            h = self._s.broadcast_async(name, buf, self._t2r[root])
            same = t.is_contiguous()
            return [h], lambda: (same or t.copy_(buf.view(t.dtype).view(t.shape)), tensors)[1]

        return self._start("broadcast", submit, tensors)

    def _allgather_list(self, name, what, outs, t):
        """outs (torch's rank order) receive every rank's t; sizes may differ."""
        if len(outs) != self.size():
            raise ValueError(f"{what}: {len(outs)} outputs for a group of {self.size()}")
        if outs[self.rank()].numel() != t.numel():
            raise ValueError(f"{what}: this rank's output has {outs[self.rank()].numel()} "
                             f"elements, its input {t.numel()}")
        send, k = _movable(t)
        counts = self._to_ringd([o.numel() * k for o in outs])
        flat = send.new_empty(sum(counts))
        h = self._s.allgatherv_async(name, send, counts, flat)

        return h, lambda: self._unpack(flat, counts, outs)

    def allgather(self, output_tensors, input_tensors, opts=None):

        def submit(name, what):
            outs, t = _one(output_tensors, what), _one(input_tensors, what)
            h, finish = self._allgather_list(name, what, outs, t)
            return [h], lambda: (finish(), output_tensors)[1]

        return self._start("allgather", submit, [output_tensors, input_tensors])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        def submit(name, what):
            # torch's layout: output_lists[rank][i] receives that rank's input_list[i]
            n = self.size()
            if len(output_lists) != n or any(len(o) != len(input_list) for o in output_lists):
                raise ValueError(f"{what}: {len(output_lists)} output lists of "
                                 f"{sorted({len(o) for o in output_lists})} tensors for a group "
                                 f"of {n} and {len(input_list)} inputs: output_lists[rank][i] "
                                 "receives rank's input i")
            members = [([o[i] for o in output_lists], t) for i, t in enumerate(input_list)]
            return self._members(name, what, members, output_lists, self._allgather_list)

        return self._start("allgather_coalesced", submit, list(input_list), grouped=True)

    def _allgather_tensor(self, name, what, output, input):
        n = self.size()
        if output.numel() != input.numel() * n:
            raise ValueError(f"{what}: the output has {output.numel()} elements, it needs the "
                             f"input's {input.numel()} times the group's {n}")
        if output.dtype != input.dtype:
            raise TypeError(f"{what}: the output is {output.dtype}, the input {input.dtype}")
        if self._identity and output.is_contiguous():
            send, _ = _movable(input)
            recv, _ = _movable(output)
            return self._s.allgather_async(name, send, recv), None
        target = output if output.is_contiguous() else output.contiguous()
        outs = _split(target.reshape(-1), [input.numel()] * n)
        h, finish = self._allgather_list(name, what, outs, input)
        if target is output:
            return h, finish
        return h, lambda: (finish(), output.copy_(target))

    def _allgather_base(self, output, input, opts=None):
        def submit(name, what):
            h, finish = self._allgather_tensor(name, what, output, input)
            return [h], lambda: (finish and finish(), [output])[1]

        return self._start("all_gather_into_tensor", submit, [output, input])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        def submit(name, what):
            return self._members(name, what, list(zip(outputs, inputs)), outputs,
                                 self._allgather_tensor)

        return self._start("allgather_into_tensor_coalesced", submit, [*outputs, *inputs], grouped=True)

    def _alltoallv(self, name, what, send_blocks, recv_shapes, dtype, device):
        """Every rank sends send_blocks[j] (torch's rank order) to rank j and receives a block of
        recv_shapes[i] from rank i; returns (handle, the received blocks in torch's order)."""
        esize = torch.empty((), dtype=dtype).element_size()
        bytewise = not _dtypes.native(torch.empty((), dtype=dtype))
        unit = esize if bytewise else 1
        ordered = self._to_ringd(send_blocks)
        parts = [_movable(b)[0] for b in ordered]
        send = torch.cat(parts)
        scounts = [p.numel() for p in parts]
        rcounts = self._to_ringd([_numel(s) * unit for s in recv_shapes])
        recv = torch.empty(sum(rcounts), dtype=torch.uint8 if bytewise else dtype, device=device)
        h = self._s.alltoall_async(name, send, scounts, recv, recv_splits=rcounts)
        return h, recv, rcounts

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        def submit(name, what):
            n = self.size()
            if output.dtype != input.dtype:
                raise TypeError(f"{what}: the output is {output.dtype}, the input {input.dtype}")
            in_splits = list(input_split_sizes) or _even(input, n, what)
            out_splits = list(output_split_sizes) or _even(output, n, what)
            if any(x < 0 for x in (*in_splits, *out_splits)):
                raise ValueError(f"{what}: split sizes {in_splits} and {out_splits} must be "
                                 ">= 0")
            if len(in_splits) != n or len(out_splits) != n:
                raise ValueError(f"{what}: splits of {len(in_splits)} and {len(out_splits)} "
                                 f"entries for a group of {n}")
            if sum(in_splits) != (input.shape[0] if input.dim() else 1) or \
                    sum(out_splits) != (output.shape[0] if output.dim() else 1):
                raise ValueError(f"{what}: the splits add up to {sum(in_splits)} and "
                                 f"{sum(out_splits)} rows, the tensors have "
                                 f"{input.shape[0] if input.dim() else 1} and "
                                 f"{output.shape[0] if output.dim() else 1}")
            in_rows = list(input.split(in_splits)) if input.dim() else [input]
            row_shape = tuple(output.shape[1:])
            shapes = [(s,) + row_shape for s in out_splits]
            even = (not input_split_sizes and not output_split_sizes and self._identity
                    and input.is_contiguous() and output.is_contiguous())
            if even:
                send, _ = _movable(input)
                recv, _ = _movable(output)
                return [self._s.alltoall_async(name, send, None, recv)], lambda: [output]
            h, recv, rcounts = self._alltoallv(name, what, in_rows, shapes, input.dtype,
                                               input.device)

            def finish():
                pieces = _split(recv, rcounts)
                blocks = [None] * n
                for r, piece in enumerate(pieces):
                    blocks[self._r2t[r]] = piece
                flat = torch.cat(blocks) if blocks else recv
                output.copy_(flat.view(output.dtype).view(output.shape))
                return [output]

            return [h], finish

        return self._start("all_to_all_single", submit, [output, input])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        def submit(name, what):
            n = self.size()
            if len(output_tensors) != n or len(input_tensors) != n:
                raise ValueError(f"{what}: {len(input_tensors)} inputs and {len(output_tensors)} "
                                 f"outputs for a group of {n}")
            dtype = input_tensors[0].dtype
            if any(t.dtype != dtype for t in (*input_tensors, *output_tensors)):
                raise TypeError(f"{what}: every input and output must be of one dtype")
            h, recv, rcounts = self._alltoallv(name, what, list(input_tensors),
                                               [tuple(o.shape) for o in output_tensors], dtype,
                                               input_tensors[0].device)

            def finish():
                self._unpack(recv, rcounts, output_tensors)
                return output_tensors

            return [h], finish

        return self._start("all_to_all", submit, [*output_tensors, *input_tensors])

    def gather(self, output_tensors, input_tensors, opts):
        root = opts.rootRank

        def submit(name, what):
            t = _one(input_tensors, what)
            self._check_root(root, what)
            n, me = self.size(), self.rank()
            outs = output_tensors[0] if output_tensors else []
            if me == root and len(outs) != n:
                raise ValueError(f"{what}: the root passes {len(outs)} outputs for a group of "
                                 f"{n}")
            send = [t.new_empty((0,)) for _ in range(n)]
            send[root] = t
            shapes = [tuple(o.shape) for o in outs] if me == root else [(0,)] * n
            h, recv, rcounts = self._alltoallv(name, what, send, shapes, t.dtype, t.device)

            def finish():
                if me == root:
                    self._unpack(recv, rcounts, outs)
                return output_tensors

            return [h], finish

        return self._start("gather", submit, [input_tensors])

    def scatter(self, output_tensors, input_tensors, opts):
        root = opts.rootRank

        def submit(name, what):
            out = _one(output_tensors, what)
            self._check_root(root, what)
            n, me = self.size(), self.rank()
            ins = input_tensors[0] if input_tensors else []
            if me == root and len(ins) != n:
                raise ValueError(f"{what}: the root passes {len(ins)} inputs for a group of {n}")
            send = list(ins) if me == root else [out.new_empty((0,)) for _ in range(n)]
            shapes = [(0,)] * n
            shapes[root] = tuple(out.shape)
            h, recv, _ = self._alltoallv(name, what, send, shapes, out.dtype, out.device)
            return [h], lambda: (out.copy_(recv.view(out.dtype).view(out.shape)),
                                 output_tensors)[1]

        return self._start("scatter", submit, [output_tensors])

    def barrier(self, opts=None):
        return self._start("barrier", lambda name, what: ([self._s.barrier_async(name)],
                                                          lambda: []))

    # ---- what ringd cannot do ----

    def _no_p2p(self, op):
        raise RuntimeError(
            f"{op}: the ringd backend has no point-to-point operations: use collectives "
            "(all_to_all_single moves blocks between every pair of ranks, broadcast from one "
            "rank), or a Gloo group for them: dist.new_group(backend='gloo')")

    def send(self, tensors, dst, tag=0):
        self._no_p2p("send")

    def recv(self, tensors, src, tag=0):
        self._no_p2p("recv")

    def recv_anysource(self, tensors, tag=0):
        self._no_p2p("recv from any source")

    def _check_root(self, root, what):
        if not 0 <= root < self.size():
            raise ValueError(f"{what}: root {root} is not a rank of a group of {self.size()}")


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _even(t, n, what):
    rows = t.shape[0] if t.dim() else 1
    if rows % n:
        raise ValueError(f"{what}: {rows} rows do not split evenly among {n} ranks: pass "
                         "split sizes")
    return [rows // n] * n


# ---- making groups ----


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"the ringd backend: {name}={v!r} is not an integer") from None


def _job_name():
    """The ringd job of this torch job (None: RINGD_JOB, or ringd's default)."""
    if os.environ.get("RINGD_JOB"):
        return None
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torch.{run_id}"
    addr = os.environ.get("MASTER_ADDR")
    if addr:
        return f"torch.{addr}:{os.environ.get('MASTER_PORT', '')}"
    return None


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
        return timeout.total_seconds()
    return None


def _gather_ranks(s, rank, size):
    """Every member's torch rank, in the order of its ringd ranks in session s (an allgather
    when the group opens)."""
    r2t = s.allgather("~torch.ranks", torch.tensor([rank], dtype=torch.int64)).tolist()
    if sorted(r2t) != list(range(size)):
        raise InvalidArgument(Result.INVALID,
                              f"torch's ranks in ringd's order are {r2t}: every process needs "
                              f"a distinct rank below the group's size {size}")
    return r2t


def _daemon_identity():
    """What tells this node's daemon from any other: the kernel's boot id (one per machine, the
    same in each of its containers) and the daemon's socket file (several daemons on one
    machine, as in tests)."""
    path = os.environ.get("RINGD_SOCKET") or "/run/ringd/ringd.sock"
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = socket.gethostname()
    try:
        st = os.stat(path)
        where = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        where = os.path.realpath(path)
    return f"{boot}:{where}"


def _local_size(store, rank, size, world, timeout):
    """How many of torch's ranks share this rank's daemon, counted through torch's store, for a
    launch that gives RANK and WORLD_SIZE but no LOCAL_WORLD_SIZE (mp.spawn, torch's own test
    harness): a counter per daemon, read once every rank has added to it (a few store calls and
    a wait a rank; a rank that tries again after a failed open adds nothing twice). Keys are
    per world this process opens (a store may outlive one)."""
    here = f"ringd.{world}.daemon.{_daemon_identity()}"
    try:
        if store.add(f"ringd.{world}.seen.{rank}", 1) == 1:
            store.add(here, 1)
            if store.add(f"ringd.{world}.arrived", 1) == size:
                store.set(f"ringd.{world}.counted", "1")
        store.wait([f"ringd.{world}.counted"], timeout)
        return store.add(here, 0)
    except RuntimeError as e:  # a timeout, or the store gone
        raise InvalidArgument(Result.INVALID,
                              f"counting the ranks on each node through torch's store, world "
                              f"{world}: {e}; every rank must open the group as its same world "
                              f"within {timeout} (set LOCAL_WORLD_SIZE to skip the count)") \
            from None


def _world(rank, size, timeout, store):
    job = _job_name()
    local_size = _env_int("LOCAL_WORLD_SIZE")
    if local_size is None and not os.environ.get("RINGD_LOCAL_SIZE") and store is not None:
        local_size = _local_size(store, rank, size, _worlds.opened(job), timeout)
    s = _worlds.open_world(job, world_size=size, local_size=local_size,
                           local_rank=_env_int("LOCAL_RANK"))
    try:
        if s.size != size:
            raise InvalidArgument(Result.INVALID,
                                  f"the ringd job '{s.job or 'default'}' has {s.size} ranks, "
                                  f"torch's world {size}: another job shares the name; set "
                                  "RINGD_JOB")
        r2t = _gather_ranks(s, rank, size)
        # torch's world never changes: once a rank is lost, every later collective fails at
        # once (the daemons re-form the ring of the survivors, which answers the ones in flight)
        s.expect_generation(s.generation)
        return ProcessGroupRingd(s, rank, size, r2t, _seconds(timeout), "0")
    except BaseException:
        s.close()
        raise


def _subgroup(world, global_ranks, rank, size, timeout, group_name):
    if not isinstance(world, ProcessGroupRingd):
        raise RuntimeError(f"new_group(backend='ringd') needs the default group on ringd too, "
                           f"not {type(world).__name__}")
    members = sorted(world._t2r[g] for g in global_ranks)
    s = world._s.process_set(members, name=f"torch.{group_name}")
    try:
        r2t = _gather_ranks(s, rank, size)
        return ProcessGroupRingd(s, rank, size, r2t, _seconds(timeout), group_name)
    except BaseException:
        s.close()
        raise


def _create(opts, pg_options=None):
    """torch's creator function (extended API): the default group or a group of
    opts.global_ranks_in_group, for this member."""
    ranks = list(opts.global_ranks_in_group)
    try:
        if not ranks and not dist.is_initialized():
            return _world(opts.group_rank, opts.group_size, opts.timeout,
                          getattr(opts, "store", None))
        world = dist.distributed_c10d._get_default_group()
        return _subgroup(world, ranks or list(range(opts.group_size)), opts.group_rank,
                         opts.group_size, opts.timeout, str(opts.group_id))
    except Error as e:
        raise _torch_error(e) from None


def _register():
    if BACKEND.upper() in dist.Backend._plugins:
        return
    kwargs = {"extended_api": True}
    import inspect

    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu", "cuda"]
    dist.Backend.register_backend(BACKEND, _create, **kwargs)


_register()
