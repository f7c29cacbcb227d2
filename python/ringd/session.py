# A session with the node's ringd: its arena, and named collectives on arrays and tensors.
"""ringd.Session: one libringd session (ringd_t) and the collectives over it.

Buffers are numpy arrays, CPU torch tensors or any buffer-protocol object (memoryview,
bytearray, the arena buffers of Session.alloc); they must be C-contiguous and of a ringd dtype.
Buffers outside the arena are copied through it by libringd; arena buffers are not copied.

Ownership: a Session owns its ringd_t, the requests of its pending Handles and its arena
buffers. A pending Handle holds references to the arrays it reads and writes, and the Session
holds every pending Handle, so no buffer libringd may still write is freed before its request
finished or the session closed, even when the caller drops the Handle. Threads: every call takes
the session's lock, so one thread at a time is inside libringd (ringd.h's rule); a wait holds it.
"""
import contextlib
import ctypes
import hashlib
import os
import enum
import functools
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, Union

from . import _lib
from .errors import (Closed, Error, InvalidArgument, MembershipChanged, Mismatch, OutOfMemory,
                     Result, error_for)

if TYPE_CHECKING:
    import numpy
    import torch

# What a collective takes and returns: a numpy array, a torch tensor or a buffer-protocol
# object (memoryview, bytearray, an alloc() buffer). Any: numpy and torch are optional.
Buffer = Any
# A collective's name: matched across ranks (None: libringd's per-session counter).
Name = Optional[str]


class DType(enum.IntEnum):
    """ringd_dtype_t: what libringd reduces (f16 and bf16 accumulate in float)."""

    F32 = 0
    F64 = 1
    F16 = 2
    BF16 = 3
    I32 = 4
    I64 = 5
    U8 = 6


class ReduceOp(enum.IntEnum):
    """ringd_redop_t. AVG is the sum divided by the job's size (integers truncate toward 0)."""

    SUM = 0
    AVG = 1
    MIN = 2
    MAX = 3
    PROD = 4


# (numpy kind, itemsize) and torch dtype names that are ringd dtypes.
_NUMPY_DTYPES = {("f", 4): DType.F32, ("f", 8): DType.F64, ("f", 2): DType.F16,
                 ("i", 4): DType.I32, ("i", 8): DType.I64, ("u", 1): DType.U8}
_TORCH_DTYPES = {"torch.float32": DType.F32, "torch.float64": DType.F64,
                 "torch.float16": DType.F16, "torch.bfloat16": DType.BF16,
                 "torch.int32": DType.I32, "torch.int64": DType.I64, "torch.uint8": DType.U8}
_SUPPORTED = "float32, float64, float16, bfloat16 (torch only), int32, int64, uint8"


class _Buf:
    """One buffer as libringd sees it: the object kept alive, its address, elements, dtype."""

    __slots__ = ("obj", "ptr", "count", "dtype")

    def __init__(self, obj, ptr, count, dtype):
        self.obj, self.ptr, self.count, self.dtype = obj, ptr, count, dtype


def _torch_buf(t, what, writable):
    torch = sys.modules["torch"]
    if t.device.type not in ("cpu", "cuda"):
        raise TypeError(f"{what} is a {t.device.type} tensor: ringd takes CPU and CUDA tensors; "
                        "pass t.cpu()")
    if t.layout != torch.strided:
        raise TypeError(f"{what} is a {t.layout} tensor: ringd takes dense tensors; "
                        "pass t.to_dense()")
    dtype = _TORCH_DTYPES.get(str(t.dtype))
    if dtype is None:
        raise TypeError(f"{what} has dtype {t.dtype}: ringd takes {_SUPPORTED}")
    if not t.is_contiguous():
        raise ValueError(f"{what} is not contiguous (shape {tuple(t.shape)}, strides "
                         f"{t.stride()}): pass t.contiguous()")
    if t.is_neg() or t.is_conj():
        raise ValueError(f"{what} is a lazily negated view: pass t.resolve_neg()")
    return _Buf(t, t.data_ptr(), t.numel(), dtype)


def _numpy_buf(a, what, writable, keep=None):
    dt = a.dtype
    dtype = _NUMPY_DTYPES.get((dt.kind, dt.itemsize))
    if dtype is None:
        raise TypeError(f"{what} has dtype {dt}: ringd takes {_SUPPORTED}")
    if not dt.isnative:
        raise TypeError(f"{what} has non-native byte order ({dt.str}): pass "
                        "a.astype(a.dtype.newbyteorder('='))")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous (shape {a.shape}, strides {a.strides}): "
                         "pass numpy.ascontiguousarray(a)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{what} is read-only: the result needs a writable buffer")
    return _Buf(a if keep is None else keep, a.__array_interface__["data"][0], a.size, dtype)


def _as_buf(obj, what, writable):
    """Describes obj for libringd, or raises TypeError/ValueError saying what to pass instead."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _torch_buf(obj, what, writable)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return _numpy_buf(obj, what, writable)
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what} is a {type(obj).__name__}: pass a numpy array, a torch "
                        "tensor or a buffer (memoryview, bytearray, Session.alloc)") from None
    import numpy

    return _numpy_buf(numpy.asarray(mv), what, writable, keep=obj)


def _empty_like(buf, shape):
    """A new output of buf's kind and dtype with the given shape (numpy for plain buffers)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(buf.obj, torch.Tensor):
        return torch.empty(shape, dtype=buf.obj.dtype, device=buf.obj.device)
    import numpy

    src = buf.obj if isinstance(buf.obj, numpy.ndarray) else numpy.asarray(memoryview(buf.obj))
    return numpy.empty(shape, dtype=src.dtype)


def _shape_of(obj):
    shape = getattr(obj, "shape", None)
    if shape is None:
        shape = memoryview(obj).shape
    return tuple(shape)


def _name_bytes(name):
    if name is None or isinstance(name, bytes):
        return name
    if isinstance(name, str):
        return name.encode("utf-8")
    raise TypeError(f"a collective's name is a str, not {type(name).__name__}")


def _describe_name(name):
    return "an unnamed tensor" if name is None else f"tensor '{name}'"


_PAGE = 4096
_PROT_RW = 0x1 | 0x2
_MAP_PRIVATE_ANON_FIXED_NOREPLACE = 0x02 | 0x20 | 0x100000
_libc = None


def _libc_mmap():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_long]
        _libc.munmap.restype = ctypes.c_int
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return _libc


# Every session's state, for a forked child to give each a lock of its own.
_STATES = weakref.WeakSet()
_PID = os.getpid()  # this process's, kept by _forked_child (os.getpid() is a system call); a
# child forked by C code that skips Python's fork hooks keeps its parent's: libringd still
# refuses that child the parent's sessions


def _forked_child():
    """After fork(), in the child: another thread of the parent may have held a session's lock
    (a wait holds it), which nothing in the child would ever release. The child gets unheld
    locks; the parent's sessions refuse it (require_open, and libringd below), so its calls
    raise InvalidArgument, and closing them at exit tells the daemon nothing."""
    global _PID
    _PID = os.getpid()
    for st in list(_STATES):
        st.lock = threading.RLock()


os.register_at_fork(after_in_child=_forked_child)


class _State:
    """What a Session owns, apart from the Session object, so finalizers can reach it:
    the ringd_t, the lock, pending Handles, live arena buffers, and after close the anonymous
    mappings that keep views of dead arena buffers from faulting."""

    def __init__(self):
        self.ptr = None  # ringd_t *, None once closed
        self.lock = threading.RLock()
        self.pid = _PID  # the process that opens it (a forked child is refused it)
        _STATES.add(self)
        self.pending = set()  # _Requests libringd still holds
        self.orphans = []  # pending _Requests whose Handle was dropped unwaited
        self.names = set()  # names of pending _Requests (one outstanding op per name)
        self.live = {}  # arena address -> (bytes, weakref.finalize) of buffers from alloc
        self.to_free = []  # arena addresses whose buffers died while the lock was taken
        self.sets = []  # weak references to the _States of this session's process sets
        self.tombstones = {}  # (start, end) of an anonymous mapping -> live buffer addresses
        self.closed_why = "the session is closed"
        self.expected = None  # the generation collectives must be submitted in (None: any)

    def require_open(self):
        if self.ptr is None:
            raise Closed(Result.CLOSED, f"{self.closed_why}: open a new ringd.Session")
        if _PID != self.pid:
            raise InvalidArgument(
                Result.INVALID,
                f"this process (pid {_PID}) was forked from the one that opened the "
                f"session (pid {self.pid}): the session, its queues and its arena stay the "
                "parent's; open a session of its own",
                "a forked child (a DataLoader worker, a multiprocessing fork) opens its own "
                "session, or makes no collectives")
        return self.ptr

    def error(self, rc):
        """The exception for rc, with ringd_errmsg of the last call (lock held)."""
        lib = _lib.lib()
        msg = lib.ringd_errmsg(self.ptr).decode("utf-8", "replace") if self.ptr else ""
        return error_for(rc, msg or lib.ringd_strerror(rc).decode(),
                         lib.ringd_strerror(rc).decode())

    def orphan(self, request):
        """Finalizer of a Handle: its request, if still pending, is reaped by a later call."""
        if not request.finished:
            self.orphans.append(request)

    def reap(self):
        """Releases the requests of dropped Handles that finished, and frees arena buffers
        that died while another thread held the lock (lock held)."""
        if self.ptr is None:
            return
        if self.orphans:
            self.orphans = [r for r in self.orphans if not r.finished and not r.test()]
        while self.to_free:
            addr = self.to_free.pop()
            if self.live.pop(addr, None) is not None:
                _lib.lib().ringd_free(self.ptr, addr)

    def buffer_died(self, addr):
        """Finalizer of an arena buffer: gives its memory back (or its tombstone, once closed)."""
        if self.ptr is None:
            self.live.pop(addr, None)
            for span, addrs in list(self.tombstones.items()):
                addrs.discard(addr)
                if not addrs:
                    del self.tombstones[span]
                    _libc_mmap().munmap(span[0], span[1] - span[0])
            return
        self.to_free.append(addr)
        if self.lock.acquire(blocking=False):
            try:
                self.reap()
            finally:
                self.lock.release()

    def close(self):
        """ringd_close, once; pending Handles fail with Closed; live arena views stay mapped."""
        for ref in self.sets:  # a process set's session goes before its job's
            child = ref()
            if child is not None:
                child.close()
        with self.lock:
            if self.ptr is None:
                return
            for r in list(self.pending):
                r.abandon(self.closed_why)
            self.pending.clear()
            self.orphans.clear()
            self.names.clear()
            for addr in self.to_free:  # dead already: no view needs a tombstone
                self.live.pop(addr, None)
            self.to_free.clear()
            if self.pid == _PID:  # a forked child's is the parent's: libringd's own is left be
                _lib.lib().ringd_close(self.ptr)
            self.ptr = None
            self._tombstone()

    def _tombstone(self):
        """Maps zeroed anonymous memory where live arena buffers were: a numpy array or tensor
        still viewing one then reads zeros instead of crashing the process. Each mapping goes
        when the last buffer in it dies."""
        spans = sorted((a & ~(_PAGE - 1), (a + n + _PAGE - 1) & ~(_PAGE - 1), a)
                       for a, (n, _) in self.live.items())
        merged = []
        for start, end, addr in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
                merged[-1][2].add(addr)
            else:
                merged.append([start, end, {addr}])
        libc = _libc_mmap()
        for start, end, addrs in merged:
            got = libc.mmap(start, end - start, _PROT_RW, _MAP_PRIVATE_ANON_FIXED_NOREPLACE, -1, 0)
            if got == start:
                self.tombstones[(start, end)] = addrs
            elif got not in (None, ctypes.c_void_p(-1).value):
                libc.munmap(got, end - start)  # a kernel without MAP_FIXED_NOREPLACE


class _Later:
    """A collective's output that exists only once the ranks learnt each other's counts: the
    receive callback sets value (and counts, every rank's)."""

    __slots__ = ("value", "counts", "fix", "error")

    def __init__(self, fix=None):
        self.value = None
        self.counts = None
        self.fix = fix  # rewrites the op's Error for the caller, or None
        self.error = None  # what the receive callback raised: this rank's own failure


class _Request:
    """One libringd request (ringd_request_t) and what it needs until it finishes: the buffers
    it reads and writes, and the output to return. Owned by its session's pending set until
    libringd released it (ringd_wait or ringd_test reported it finished) or the session closed."""

    def __init__(self, state, req, name, keep, result):
        self.st = state
        self.req = req
        self.name = name
        self.keep = keep
        self.result = result
        self.failure = None  # (code, message, hint) once it failed
        self.finished = False

    def finish(self, rc):
        """Records the result libringd gave when it released the request (lock held)."""
        if rc != Result.OK:
            e = self.st.error(rc)
            self.failure = (e.code, e.message, e.hint)
        self.req = None
        self.keep = None
        self.finished = True
        self.st.pending.discard(self)
        self.st.names.discard(self.name)

    def abandon(self, why):
        """The session closed under it (lock held): ringd_close freed the request."""
        self.failure = (Result.CLOSED, f"{_describe_name(self.name)}: {why} before it finished",
                        "")
        self.req = None
        self.keep = None
        self.finished = True

    def test(self):
        """ringd_test: True once finished (lock held, session open)."""
        flag = ctypes.c_int(0)
        rc = _lib.lib().ringd_test(self.req, ctypes.byref(flag))
        if flag.value:
            self.finish(rc)
        return self.finished


class Handle:
    """One asynchronous collective. done() polls, wait() blocks and returns the result (the
    output array, or None for a barrier) or raises the collective's Error. The buffers stay
    referenced until the collective finished, even when the Handle is dropped unwaited (the
    session then reaps the request on a later call)."""

    def __init__(self, request):
        self._r = request
        weakref.finalize(self, request.st.orphan, request).atexit = False

    @property
    def name(self) -> Name:
        return self._r.name

    def __repr__(self) -> str:
        what = "finished" if self._r.finished else "pending"
        return f"<ringd.Handle {_describe_name(self._r.name)} {what}>"

    def _outcome(self):
        result = self._r.result
        if self._r.failure is not None:
            if isinstance(result, _Later) and result.error is not None:
                raise result.error
            e = error_for(*self._r.failure)
            raise result.fix(e) if isinstance(result, _Later) and result.fix else e
        return result.value if isinstance(result, _Later) else result

    @property
    def counts(self) -> Optional[List[int]]:
        """Every rank's count of an allgatherv whose counts the ranks learnt, once known
        (None before, and for every other collective)."""
        result = self._r.result
        return result.counts if isinstance(result, _Later) else None

    def done(self) -> bool:
        """True once the collective finished (successfully or not); never blocks: False while
        another thread is inside libringd with this session (it finds out on a later call)."""
        r = self._r
        if not r.finished and r.st.lock.acquire(blocking=False):
            try:
                if not r.finished:
                    r.st.require_open()
                    r.test()
            finally:
                r.st.lock.release()
        return r.finished

    def wait(self) -> Buffer:
        """Blocks until the collective finished (at most the session's op_timeout_ms: then
        Timeout, and the Handle stays pending) and returns its output or raises its Error."""
        r = self._r
        if not r.finished:
            with r.st.lock:
                if not r.finished:
                    r.st.require_open()
                    rc = _lib.lib().ringd_wait(r.req)
                    if rc == Result.TIMEOUT:
                        raise r.st.error(rc)  # still pending: libringd keeps the request
                    r.finish(rc)
        return self._outcome()


class Session:
    """A session with the node's ringd daemon: a rank in a job, an arena, collectives.

    Every argument left None takes its RINGD_* environment variable or libringd's default
    (ringd.h's ringd_options_t): socket (RINGD_SOCKET, /run/ringd/ringd.sock), job (RINGD_JOB,
    "default"), world_size (RINGD_WORLD_SIZE), local_size (RINGD_LOCAL_SIZE, 1), min_size
    (RINGD_MIN_SIZE, 1), open_timeout_ms (30000), op_timeout_ms (0: no limit of its own),
    arena_size (the daemon's default), poll_us (RINGD_POLL_US, 100; -1 never polls), local_rank
    (RINGD_LOCAL_RANK: the local rank this process asks for, as a launcher's LOCAL_RANK gives it;
    ringd.Refused when another process of the job on this node asked for it first; else the
    lowest free one), device (RINGD_DEVICE: the CUDA device index this process asks for;
    ringd.InvalidArgument when the daemon does not serve it; else the daemon gives the local
    rank's share of its GPUs, or none), device_arena_size (RINGD_DEVICE_ARENA: bytes of device
    memory on that GPU that collectives on CUDA tensors are staged in, device to device; without
    one they are staged through host memory).

    CUDA tensors go through libringd as it documents (ringd.h, "Device memory"): before each
    collective the library waits for the work queued on the legacy default stream (PyTorch's
    default current stream); work on other streams must be synchronised by the caller.

    Opening blocks until the job's local ranks joined (and, across nodes, the ring formed), at
    most open_timeout_ms; it raises ConnectError when no daemon answers on the socket.
    Use it as a context manager, or close() it.
    """

    _FIELDS = ("socket_path", "job", "world_size", "local_size", "open_timeout_ms",
               "op_timeout_ms", "arena_size", "poll_us", "min_size", "local_rank", "device",
               "device_arena_size")

    def __init__(self, job: Optional[str] = None, world_size: Optional[int] = None,
                 local_size: Optional[int] = None, socket: Optional[str] = None,
                 min_size: Optional[int] = None, open_timeout_ms: Optional[int] = None,
                 op_timeout_ms: Optional[int] = None, arena_size: Optional[int] = None,
                 poll_us: Optional[int] = None, local_rank: Optional[int] = None,
                 device: Optional[int] = None, device_arena_size: Optional[int] = None) -> None:
        lib = _lib.lib()
        self._st = _State()
        self._finalizer = weakref.finalize(self, self._st.close)
        values = {"socket_path": socket, "job": job, "world_size": world_size,
                  "local_size": local_size, "open_timeout_ms": open_timeout_ms,
                  "op_timeout_ms": op_timeout_ms, "arena_size": arena_size,
                  "poll_us": poll_us, "min_size": min_size, "local_rank": local_rank,
                  "device": device, "device_arena_size": device_arena_size}
        o = _lib.Options()
        lib.ringd_options_init(ctypes.byref(o), ctypes.sizeof(o))
        for field, value in values.items():
            if value is None:
                continue
            if getattr(_lib.Options, field).offset >= _lib.options_size():
                raise InvalidArgument(Result.INVALID,
                                      f"Session({field}=...): the libringd at {_lib.path()} "
                                      "predates this option; install a newer libringd")
            if field in ("socket_path", "job"):
                value = _name_bytes(value)
            elif not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"Session({field}=...) takes an int, not "
                                f"{type(value).__name__}")
            setattr(o, field, value)
            if field == "local_rank":
                o.ask_local_rank = 1
            elif field == "device":
                o.ask_device = 1
        self.job = job
        self.op_timeout_ms = op_timeout_ms or 0  # how long a wait waits (0: no limit of its own)
        r = ctypes.c_void_p()
        rc = lib.ringd_open(ctypes.byref(o), ctypes.byref(r))
        if rc != Result.OK:
            msg = lib.ringd_errmsg(r).decode("utf-8", "replace") if r else "out of memory"
            lib.ringd_close(r)
            self._finalizer.detach()
            raise error_for(rc, msg, lib.ringd_strerror(rc).decode())
        self._st.ptr = r.value

    def process_set(self, ranks: Sequence[int], name: Optional[str] = None) -> Optional["Session"]:
        """A process set of this job (ringd_process_set_create): every rank calls it with the
        same ranks (increasing) in the same order of creations. A member gets a Session of the
        set, whose collectives run among its ranks alone (its own rank, size and names); a rank
        outside gets None. With a name (ringd_process_set_open), only the members call it, each
        with that name, unique in the job's generation. Close the set before this session;
        after a membership change its collectives raise MembershipChanged: create it again."""
        ranks = [int(x) for x in ranks]
        arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
        ps = ctypes.c_void_p()
        lib = _lib.lib()
        with self._st.lock:
            if name is None:
                rc = lib.ringd_process_set_create(self._st.require_open(), arr, len(ranks),
                                                  ctypes.byref(ps))
            else:
                rc = lib.ringd_process_set_open(self._st.require_open(), _name_bytes(name), arr,
                                                len(ranks), ctypes.byref(ps))
            if rc != Result.OK:
                raise self._st.error(rc)
        if not ps.value:
            return None
        child = Session.__new__(Session)
        child._st = _State()
        child._st.ptr = ps.value
        child._finalizer = weakref.finalize(child, child._st.close)
        child.job = self.job
        child.op_timeout_ms = self.op_timeout_ms
        child._parent = self  # kept alive while the set is
        self._st.sets.append(weakref.ref(child._st))
        return child

    def join(self) -> int:
        """This rank has run out of data (ringd_join, Horovod's join): returns once every rank
        has joined, with the rank that joined last (the one that had submitted the most
        collectives since its last join; of ranks tied, the highest). Until then the other
        ranks' allreduces complete with this rank contributing zeros, and any other collective
        they run raises Error. Waits without op_timeout_ms."""
        last = ctypes.c_int(-1)
        lib = _lib.lib()
        with self._st.lock:
            rc = lib.ringd_join(self._st.require_open(), ctypes.byref(last))
            if rc != Result.OK:
                raise self._st.error(rc)
        return last.value

    # ---- lifetime ----

    def close(self) -> None:
        """Leaves the job and unmaps the arena (in a child forked after the session opened, only
        the child's mapping goes: the session is the parent's). Pending Handles then raise
        Closed; views of arena buffers read zeros from then on. Calls after close raise Closed.
        Idempotent."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._st.ptr is None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._st.ptr is None:
            return "<ringd.Session closed>"
        return (f"<ringd.Session rank {self.rank} of {self.size} (local {self.local_rank} of "
                f"{self.local_size}) generation {self.generation}>")

    def _get(self, fn):
        with self._st.lock:
            return fn(self._st.require_open())

    @property
    def rank(self) -> int:
        """This rank in the job, as of the daemon's last answer (changes only with membership)."""
        return self._get(_lib.lib().ringd_rank)

    @property
    def size(self) -> int:
        return self._get(_lib.lib().ringd_size)

    @property
    def local_rank(self) -> int:
        return self._get(_lib.lib().ringd_local_rank)

    @property
    def local_size(self) -> int:
        return self._get(_lib.lib().ringd_local_size)

    @property
    def device(self) -> Optional[int]:
        """The CUDA device index the daemon gave this session (fixed while it lives), or None:
        the daemon serves no GPU."""
        d = self._get(_lib.lib().ringd_device)
        return d if d >= 0 else None

    @property
    def device_uuid(self) -> Optional[str]:
        """That device's UUID ("GPU-...", "MIG-..."): the same device in every container, where device is
        the daemon's index (a pod that sees one GPU calls it 0). None when there is none."""
        u = self._get(_lib.lib().ringd_device_uuid).decode()
        return u or None

    @property
    def generation(self) -> int:
        """The job's membership generation: it grows whenever ranks join or leave."""
        return self._get(_lib.lib().ringd_generation)

    def expect_generation(self, generation: Optional[int]) -> None:
        """From now on, a collective submitted while the session's generation is not
        generation raises MembershipChanged on this rank instead of reaching the daemon (None:
        no check, the default). Elastic training sets it to the generation its state was
        synchronised in: a rank that has heard of a new membership must not submit the next
        op of the old step, which the other ranks (restoring and re-synchronising under names
        of the new generation) would never match. The generation changes only with the
        answers of collectives, so the check is exact, not a race."""
        if generation is not None and (not isinstance(generation, int)
                                       or isinstance(generation, bool) or generation < 0):
            raise TypeError(f"expect_generation({generation!r}): a generation is an int >= 0, "
                            "or None")
        with self._st.lock:
            self._st.require_open()
            self._st.expected = generation

    @property
    def expected_generation(self) -> Optional[int]:
        """What expect_generation() set (None: collectives go out in any generation)."""
        return self._st.expected

    # ---- the arena ----

    def alloc(self, nbytes: int) -> "ctypes.Array[ctypes.c_uint8]":
        """A writable buffer of nbytes (64-byte aligned) in the shared arena, a ctypes array of
        uint8: collectives on it, or on memoryview(buf), numpy.frombuffer(buf, dtype) and
        torch.frombuffer(buf, dtype=...) views of it, copy nothing. Its memory goes back to
        the arena when the buffer and every view of it are gone, by free(), or with the
        session."""
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"alloc({nbytes!r}): need a positive number of bytes")
        st = self._st
        with st.lock:
            ptr = st.require_open()
            st.reap()
            addr = _lib.lib().ringd_alloc(ptr, nbytes)
            if not addr:
                raise OutOfMemory(Result.NOMEM,
                                  f"alloc({nbytes}): the arena has no room: free buffers or "
                                  "open the session with a larger arena_size")
            buf = _arena_buffer_type(nbytes).from_address(addr)
            fin = weakref.finalize(buf, st.buffer_died, addr)
            fin.atexit = False
            st.live[addr] = (nbytes, fin)
        return buf

    def array(self, shape: Union[int, Sequence[int]], dtype: Any) -> "numpy.ndarray":
        """A numpy array of shape and dtype in the arena (see alloc)."""
        import numpy

        dt = numpy.dtype(dtype)
        n = int(numpy.prod(shape, dtype=numpy.int64)) if shape != () else 1
        return numpy.frombuffer(self.alloc(max(n, 1) * dt.itemsize), dtype=dt)[:n].reshape(shape)

    def tensor(self, shape: Union[int, Sequence[int]], dtype: "torch.dtype") -> "torch.Tensor":
        """A CPU torch tensor of shape and dtype in the arena (see alloc)."""
        import torch

        shape = tuple(shape) if not isinstance(shape, int) else (shape,)
        n = 1
        for d in shape:
            n *= d
        esize = torch.empty((), dtype=dtype).element_size()
        return torch.frombuffer(self.alloc(max(n, 1) * esize), dtype=dtype)[:n].view(shape)

    def free(self, buf: Buffer) -> None:
        """Gives an alloc() buffer back now. Any view of it still in use then aliases memory
        that later allocations reuse: only for callers that know no view remains."""
        addr = _address_of(buf)
        st = self._st
        with st.lock:
            ptr = st.require_open()
            entry = st.live.pop(addr, None)
            if entry is None:
                raise ValueError("free(): not the start of a buffer this session allocated "
                                 "(or freed already)")
            entry[1].detach()
            _lib.lib().ringd_free(ptr, addr)

    def in_arena(self, buf: Buffer) -> bool:
        """True when buf lies wholly in this session's arena (collectives on it copy nothing)."""
        b = _as_buf(buf, "in_arena's buffer", False)
        nbytes = b.count * _lib.DTYPE_SIZES[b.dtype]
        t = _lib.TensorDesc()
        with self._st.lock:
            ptr = self._st.require_open()
            rc = _lib.lib().ringd_tensor_locate(ptr, b.ptr, nbytes, ctypes.byref(t))
        return rc == Result.OK

    # ---- collectives ----

    @contextlib.contextmanager
    def group(self) -> Iterator[None]:
        """The asynchronous collectives started inside the with block are one group to the daemon
        (ringd_group_start/end): they run together, or all fail with one reason on every rank.
        Synchronous calls inside raise InvalidArgument. Every rank groups the same collectives in
        the same order."""
        lib = _lib.lib()
        with self._st.lock:
            rc = lib.ringd_group_start(self._st.require_open())
            if rc != Result.OK:
                raise self._st.error(rc)
        try:
            yield
        finally:
            with self._st.lock:
                rc = lib.ringd_group_end(self._st.require_open())
            if rc != Result.OK:
                raise self._st.error(rc)

    def start_timeline(self, path: str) -> None:
        """Writes the timeline of this session's collectives from now on to path, a Chrome trace
        (as RINGD_TIMELINE does from the start): rank 0 writes path, or every rank its own when
        path has "%r" (replaced by the rank). Raises InvalidArgument while one is written (stop
        it first) or inside a group. A process set's session has a timeline of its own."""
        with self._st.lock:
            ptr = self._st.require_open()
            rc = _lib.lib().ringd_timeline_start(ptr, os.fsencode(path))
            if rc != 0:
                raise self._st.error(rc)

    def stop_timeline(self) -> None:
        """Stops the timeline being written and closes its file (nothing when none is)."""
        with self._st.lock:
            ptr = self._st.require_open()
            rc = _lib.lib().ringd_timeline_stop(ptr)
            if rc != 0:
                raise self._st.error(rc)

    def refuse(self, name: Name, why: str, code: Result = Result.INVALID) -> None:
        """This rank cannot run the collective named name (None: its next unnamed one): every
        rank's copy fails with code and why (naming this rank) instead of waiting for it."""
        with self._st.lock:
            ptr = self._st.require_open()
            _lib.lib().ringd_refuse(ptr, _name_bytes(name), int(code), str(why).encode("utf-8",
                                                                                     "replace"))

    def _refusing(self, name, impl, *args):
        """impl(*args), telling the other ranks when it finds its arguments wrong before any of
        it reached libringd (which tells them itself of what it refuses)."""
        try:
            return impl(*args)
        except Error:
            raise
        except (TypeError, ValueError) as e:
            self._refuse_for(name, e)
            raise

    def _refuse_for(self, name, e):
        """refuse(name) with exception e's words, once per exception (a binding above this one
        may catch it too: a second refusal would fail the next collective of that name)."""
        if getattr(e, "_ringd_told", False):
            return
        try:
            e._ringd_told = True
            self.refuse(name, f"{type(e).__name__}: {e}")
        except (Error, TypeError, AttributeError):
            pass  # a closed session, or a name libringd cannot carry: nobody to tell

    def _run(self, name, sync_fn, async_fn, args, sync, keep, result, shape=None):
        """Calls libringd's sync or async form under the lock; raises its Error on failure.
        shape: the tensor's, which ranks must agree on (ringd_next_shape), or None."""
        st = self._st
        with st.lock:
            ptr = st.require_open()
            st.reap()
            if st.expected is not None:
                lib = _lib.lib()
                gen = lib.ringd_generation(ptr)
                if gen != st.expected:
                    # The other ranks, restoring and re-synchronising, will not submit it.
                    raise MembershipChanged(
                        Result.MEMBERSHIP,
                        f"{_describe_name(name)} was not submitted: the job moved from "
                        f"generation {st.expected} to {gen} (this process is now rank "
                        f"{lib.ringd_rank(ptr)} of {lib.ringd_size(ptr)}); restore the state "
                        "and synchronise it from one rank first (ringd.torch.elastic.run "
                        "does), then expect_generation() the new generation")
            if name is not None and name in st.names:
                # The daemon would refuse it on this rank only, and the other ranks' second
                # submissions of the name would then wait for it in vain.
                raise InvalidArgument(Result.INVALID,
                                      f"{_describe_name(name)} is still outstanding on this "
                                      "rank (a Handle not finished yet): wait for it first, "
                                      "or give this collective another name")
            # every call sets it, 0 without a shape: none left over from a failed one
            _lib.lib().ringd_next_shape(ptr, 0 if shape is None else self._shape(tuple(shape)))
            if sync:
                rc = sync_fn(ptr, *args)
                if rc != Result.OK:
                    raise st.error(rc)
                return result
            req = ctypes.c_void_p()
            rc = async_fn(ptr, *args, ctypes.byref(req))
            if rc != Result.OK:
                raise st.error(rc)
            r = _Request(st, req, name, keep, result)
            st.pending.add(r)
            if name is not None:
                st.names.add(name)
            return Handle(r)

    def _inout(self, op, name, send, out, out_count_factor, out_shape):
        """The input and output buffers of a collective; a new output when out is None."""
        what = f"{op} {_describe_name(name)}"
        sb = _as_buf(send, f"{what}: the input", False)
        if out is None:
            out = _empty_like(sb, out_shape(_shape_of(send)))
        ob = sb if out is send else _as_buf(out, f"{what}: the output", True)
        if ob.dtype != sb.dtype:
            raise TypeError(f"{what}: the output is {ob.dtype.name}, the input "
                            f"{sb.dtype.name}: they must match")
        if ob.count != sb.count * out_count_factor:
            raise ValueError(f"{what}: the output has {ob.count} elements, it needs "
                             f"{sb.count * out_count_factor}")
        return sb, ob, out

    def _allreduce(self, name, send, out, op, prescale, postscale, sync, shape):
        sb, ob, out = self._inout("allreduce", name, send, out, 1, lambda s: s)
        op = ReduceOp(op)
        lib = _lib.lib()
        nb = _name_bytes(name)
        if prescale == 1.0 and postscale == 1.0:
            args = (nb, sb.ptr, ob.ptr, sb.count, sb.dtype, op)
            return self._run(name, lib.ringd_allreduce, lib.ringd_allreduce_async, args, sync,
                             (sb.obj, ob.obj), out, shape)
        args = (nb, sb.ptr, ob.ptr, sb.count, sb.dtype, op, float(prescale), float(postscale))
        return self._run(name, lib.ringd_allreduce_scaled, lib.ringd_allreduce_scaled_async,
                         args, sync, (sb.obj, ob.obj), out, shape)

    def allreduce(self, name: Name, send: Buffer, out: Optional[Buffer] = None,
                  op: Union[ReduceOp, int] = ReduceOp.SUM, prescale: float = 1.0,
                  postscale: float = 1.0, shape: Optional[Sequence[int]] = None) -> Buffer:
        """Reduces every rank's send with op into out (a new array when None; out=send works in
        place) and returns out. Each input is multiplied by prescale before, the result by
        postscale after (floating dtypes only). name matches the tensor across ranks (None:
        libringd's per-session counter, which matches only when every rank calls in order).
        shape: the tensor's, which ranks that give one must agree on (Mismatch otherwise,
        naming both), not only its element count."""
        return self._refusing(name, self._allreduce, name, send, out, op, prescale, postscale, True,
                              shape)

    def allreduce_async(self, name: Name, send: Buffer, out: Optional[Buffer] = None,
                        op: Union[ReduceOp, int] = ReduceOp.SUM, prescale: float = 1.0,
                        postscale: float = 1.0, shape: Optional[Sequence[int]] = None) -> Handle:
        """allreduce without waiting: a Handle whose wait() returns out."""
        return self._refusing(name, self._allreduce, name, send, out, op, prescale, postscale,
                              False, shape)

    def _broadcast(self, name, buf, root, sync, shape):
        b = _as_buf(buf, f"broadcast {_describe_name(name)}: the buffer", True)
        lib = _lib.lib()
        args = (_name_bytes(name), b.ptr, b.count, b.dtype, int(root))
        return self._run(name, lib.ringd_broadcast, lib.ringd_broadcast_async, args, sync,
                         (b.obj,), buf, shape)

    def broadcast(self, name: Name, buf: Buffer, root: int,
                  shape: Optional[Sequence[int]] = None) -> Buffer:
        """Copies root's buf into every rank's buf (in place) and returns buf. shape: as
        allreduce's."""
        return self._refusing(name, self._broadcast, name, buf, root, True, shape)

    def broadcast_async(self, name: Name, buf: Buffer, root: int,
                        shape: Optional[Sequence[int]] = None) -> Handle:
        """broadcast without waiting: a Handle whose wait() returns buf."""
        return self._refusing(name, self._broadcast, name, buf, root, False, shape)

    def _allgather(self, name, send, out, sync):
        size = self.size

        def gathered(shape):
            return (size * shape[0],) + shape[1:] if shape else (size,)

        sb, ob, out = self._inout("allgather", name, send, out, size, gathered)
        lib = _lib.lib()
        args = (_name_bytes(name), sb.ptr, ob.ptr, sb.count, sb.dtype)
        return self._run(name, lib.ringd_allgather, lib.ringd_allgather_async, args, sync,
                         (sb.obj, ob.obj), out)

    def allgather(self, name: Name, send: Buffer, out: Optional[Buffer] = None) -> Buffer:
        """Gathers every rank's send, in rank order, into out (size x send's elements; a new
        array stacked along the first dimension when None) and returns out. Every rank sends
        the same number of elements (ringd.torch.allgather handles differing first dims)."""
        return self._refusing(name, self._allgather, name, send, out, True)

    def allgather_async(self, name: Name, send: Buffer,
                        out: Optional[Buffer] = None) -> Handle:
        """allgather without waiting: a Handle whose wait() returns out."""
        return self._refusing(name, self._allgather, name, send, out, False)

    def _counts(self, what, counts, total=None):
        """counts as a size_t array of one entry per rank, checked against total when given."""
        counts = [int(c) for c in counts]
        size = self.size
        if len(counts) != size or any(c < 0 for c in counts):
            raise ValueError(f"{what}: {len(counts)} counts for a job of {size} ranks: give one "
                             "count (>= 0) per rank, in rank order")
        if total is not None and sum(counts) != total:
            raise ValueError(f"{what}: the counts add up to {sum(counts)}, the input has {total} "
                             "elements")
        return counts, (ctypes.c_size_t * size)(*counts)

    @staticmethod
    def _rows(shape, count):
        """The shape of count elements cut from a buffer of shape along its first dimension,
        or (count,) when they are not whole rows."""
        if len(shape) < 2:
            return (count,)
        row = 1
        for d in shape[1:]:
            row *= d
        return (count // row,) + tuple(shape[1:]) if row and count % row == 0 else (count,)

    def _reducescatter(self, name, send, out, op, prescale, postscale, recvcounts, sync):
        what = f"reducescatter {_describe_name(name)}"
        sb = _as_buf(send, f"{what}: the input", False)
        size, rank = self.size, self.rank
        if recvcounts is None:
            if sb.count % size:
                raise ValueError(f"{what}: the input has {sb.count} elements, not a multiple of "
                                 f"the job's {size} ranks: pass recvcounts")
            counts, carr = [sb.count // size] * size, None
        else:
            counts, carr = self._counts(what, recvcounts, sb.count)
        if out is None:
            out = _empty_like(sb, self._rows(_shape_of(send), counts[rank]))
        ob = _as_buf(out, f"{what}: the output", True)
        if ob.dtype != sb.dtype:
            raise TypeError(f"{what}: the output is {ob.dtype.name}, the input "
                            f"{sb.dtype.name}: they must match")
        if ob.count != counts[rank]:
            raise ValueError(f"{what}: the output has {ob.count} elements, rank {rank} "
                             f"receives {counts[rank]}")
        op = ReduceOp(op)
        lib = _lib.lib()
        nb = _name_bytes(name)
        if carr is None and prescale == 1.0 and postscale == 1.0:
            args = (nb, sb.ptr, ob.ptr, counts[rank], sb.dtype, op)
            return self._run(name, lib.ringd_reducescatter, lib.ringd_reducescatter_async, args,
                             sync, (sb.obj, ob.obj), out)
        if carr is None:
            carr = (ctypes.c_size_t * size)(*counts)
        args = (nb, sb.ptr, ob.ptr, carr, sb.dtype, op, float(prescale), float(postscale))
        return self._run(name, lib.ringd_reducescatterv, lib.ringd_reducescatterv_async, args,
                         sync, (sb.obj, ob.obj), out)

    def reducescatter(self, name: Name, send: Buffer, out: Optional[Buffer] = None,
                      op: Union[ReduceOp, int] = ReduceOp.SUM, prescale: float = 1.0,
                      postscale: float = 1.0,
                      recvcounts: Optional[Sequence[int]] = None) -> Buffer:
        """Reduces every rank's send with op; this rank receives its block of the result into
        out (a new array when None) and gets out back. recvcounts: every rank's elements, the
        same list on every rank, adding up to send's; None: send split evenly (its element
        count a multiple of the size). A new output keeps send's trailing dimensions when the
        block is whole rows of it."""
        return self._refusing(name, self._reducescatter, name, send, out, op, prescale, postscale,
                              recvcounts, True)

    def reducescatter_async(self, name: Name, send: Buffer, out: Optional[Buffer] = None,
                            op: Union[ReduceOp, int] = ReduceOp.SUM, prescale: float = 1.0,
                            postscale: float = 1.0,
                            recvcounts: Optional[Sequence[int]] = None) -> Handle:
        """reducescatter without waiting: a Handle whose wait() returns out."""
        return self._refusing(name, self._reducescatter, name, send, out, op, prescale, postscale,
                              recvcounts, False)

    @staticmethod
    def _layout(trailing):
        """What ranks of one allgatherv must agree on: their rows' shape, packed into 63 bits
        when it fits (up to 3 dimensions below 2**20: the message can show it), else a hash
        with the top bit set."""
        n = len(trailing)
        if n <= 3 and all(0 <= d < (1 << 20) for d in trailing):
            v = n << 60
            for k, d in enumerate(trailing):
                v |= d << (20 * (n - 1 - k))
            return v
        return Session._digest(trailing)

    @staticmethod
    def _digest(dims):
        """A stable 63-bit digest of dims with the top bit set (the same in every process)."""
        digest = hashlib.blake2b(repr(tuple(dims)).encode(), digest_size=8).digest()
        return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) | (1 << 63)

    @staticmethod
    def _shape(dims):
        """ringd_next_shape's packing of a tensor's shape: _layout's, and a digest for a 0-d
        tensor (whose _layout would be 0, no shape)."""
        return Session._layout(dims) if dims else Session._digest(dims)

    @staticmethod
    def _describe_layout(v):
        if v >> 63:
            return "a shape of over 3 dimensions or 2**20 elements"
        n = v >> 60
        dims = [(v >> (20 * (n - 1 - k))) & ((1 << 20) - 1) for k in range(n)]
        return "(" + ", ".join(str(d) for d in dims) + ("," if n == 1 else "") + ")"

    def _layout_mismatch(self, e, what):
        """Mismatch e of libringd's layout check, saying the rows' shapes instead."""
        import re

        m = re.search(r"rank (\d+) passed layout (\d+), rank (\d+) layout (\d+)", e.message)
        if m is None or "mismatch (layout)" not in e.message:
            return e
        a, la, b, lb = (int(x) for x in m.groups())
        # in a group, the member whose rows differ may be another one
        other = re.search(r"tensor '([^']*)' mismatch \(layout\)", e.message)
        if other is not None and f"'{other.group(1)}'" not in what:
            what = f"{what} (in a group with '{other.group(1)}')"
        return Mismatch(Result.MISMATCH,
                        f"{what}: rank {a}'s rows have shape {self._describe_layout(la)}, rank "
                        f"{b}'s {self._describe_layout(lb)}: only the first dimension may differ "
                        "across ranks", e.hint)

    def _learn(self, op, name, send, sync, splits, shape_of):
        """allgatherv (splits None) or alltoallv (splits: elements for each rank) whose receive
        counts the ranks learn (ringd_allgatherv_into, ringd_alltoallv_into): the output is made
        by the receive callback, of shape_of(total elements), once they are known."""
        what = f"{op} {_describe_name(name)}"
        if name is None:
            raise ValueError(f"{what}: a collective whose counts the ranks learn needs a name")
        sb = _as_buf(send, f"{what}: the input", False)
        later = _Later(lambda e: self._layout_mismatch(e, what))

        def recv(ctx, counts, size, total):
            # Called inside libringd: an exception must not cross it. The op fails on every
            # rank (this one had no buffer), and this rank raises what went wrong here.
            try:
                later.counts = [counts[k] for k in range(size)]
                later.value = _empty_like(sb, shape_of(total))
                return _as_buf(later.value, f"{what}: the output", True).ptr or None
            except BaseException as e:  # noqa: BLE001 - re-raised by the Handle or the call
                later.error = e
                return None

        fn = _lib.RECV_FN(recv)
        lib = _lib.lib()
        layout = self._layout(tuple(_shape_of(send)[1:]))
        if splits is None:
            args = (_name_bytes(name), sb.ptr, sb.count, layout, sb.dtype, fn, None, None)
            calls = (lib.ringd_allgatherv_into, lib.ringd_allgatherv_into_async)
        else:
            splits, carr = self._counts(what, splits, sb.count)
            args = (_name_bytes(name), sb.ptr, carr, layout, sb.dtype, fn, None, None)
            calls = (lib.ringd_alltoallv_into, lib.ringd_alltoallv_into_async)
        try:
            got = self._run(name, *calls, args, sync, (sb.obj, fn, later), later)
        except Mismatch as e:
            raise self._layout_mismatch(e, what) from None
        except Error:
            if later.error is not None:
                raise later.error from None
            raise
        return later.value if sync else got

    def _allgatherv(self, name, send, counts, out, sync):
        what = f"allgatherv {_describe_name(name)}"
        if counts is None:
            if out is not None:
                raise ValueError(f"{what}: out needs counts (without them the output is made "
                                 "once every rank's count is known)")
            trailing = tuple(_shape_of(send)[1:])
            return self._learn("allgatherv", name, send, sync, None,
                               lambda total: self._rows((0,) + trailing, total))
        sb = _as_buf(send, f"{what}: the input", False)
        counts, carr = self._counts(what, counts)
        rank = self.rank
        if counts[rank] != sb.count:
            raise ValueError(f"{what}: the input has {sb.count} elements, rank {rank}'s count "
                             f"is {counts[rank]}")
        if out is None:
            out = _empty_like(sb, self._rows(_shape_of(send), sum(counts)))
        ob = _as_buf(out, f"{what}: the output", True)
        if ob.dtype != sb.dtype:
            raise TypeError(f"{what}: the output is {ob.dtype.name}, the input "
                            f"{sb.dtype.name}: they must match")
        if ob.count != sum(counts):
            raise ValueError(f"{what}: the output has {ob.count} elements, it needs "
                             f"{sum(counts)}")
        lib = _lib.lib()
        args = (_name_bytes(name), sb.ptr, sb.count, ob.ptr, carr, sb.dtype)
        return self._run(name, lib.ringd_allgatherv, lib.ringd_allgatherv_async, args, sync,
                         (sb.obj, ob.obj), out)

    def allgatherv(self, name: Name, send: Buffer, counts: Optional[Sequence[int]] = None,
                   out: Optional[Buffer] = None) -> Buffer:
        """Gathers every rank's send, in rank order, into out (the sum of counts elements; a
        new array when None) and returns out. counts: every rank's elements, the same list on
        every rank (this rank's is send's); any may be 0. None: the ranks learn each other's
        counts (libringd's ringd_allgatherv_into; the op needs a name), and the new output is
        stacked along the first dimension when send's trailing dimensions are the same on
        every rank (Mismatch on every rank otherwise)."""
        return self._refusing(name, self._allgatherv, name, send, counts, out, True)

    def allgatherv_async(self, name: Name, send: Buffer, counts: Optional[Sequence[int]] = None,
                         out: Optional[Buffer] = None) -> Handle:
        """allgatherv without waiting: a Handle whose wait() returns out."""
        return self._refusing(name, self._allgatherv, name, send, counts, out, False)

    def _alltoallv(self, name, send, splits, recv_splits, out, sync):
        what = f"alltoall {_describe_name(name)}"
        sb = _as_buf(send, f"{what}: the input", False)
        splits, sarr = self._counts(what, splits, sb.count)
        recv_splits, rarr = self._counts(f"{what} (recv_splits)", recv_splits)
        total = sum(recv_splits)
        if out is None:
            out = _empty_like(sb, self._rows(_shape_of(send), total))
        ob = _as_buf(out, f"{what}: the output", True)
        if ob.dtype != sb.dtype:
            raise TypeError(f"{what}: the output is {ob.dtype.name}, the input "
                            f"{sb.dtype.name}: they must match")
        if ob.count != total:
            raise ValueError(f"{what}: the output has {ob.count} elements, recv_splits add up "
                             f"to {total}")
        lib = _lib.lib()
        args = (_name_bytes(name), sb.ptr, sarr, ob.ptr, rarr, sb.dtype)
        return self._run(name, lib.ringd_alltoallv, lib.ringd_alltoallv_async, args, sync,
                         (sb.obj, ob.obj, sarr, rarr), out)

    def _alltoall(self, name, send, splits, out, sync, recv_splits=None):
        what = f"alltoall {_describe_name(name)}"
        if recv_splits is not None:
            if splits is None:
                raise ValueError(f"{what}: recv_splits needs splits")
            return self._alltoallv(name, send, splits, recv_splits, out, sync)
        if splits is not None:
            if out is not None:
                raise ValueError(f"{what}: out needs even splits or recv_splits (with splits "
                                 "alone the output is made once every rank's are known)")
            trailing = tuple(_shape_of(send)[1:])
            return self._learn("alltoall", name, send, sync, splits,
                               lambda total: self._rows((0,) + trailing, total))
        sb, ob, out = self._inout("alltoall", name, send, out, 1, lambda s: s)
        size = self.size
        if sb.count % size:
            raise ValueError(f"{what}: the input has {sb.count} elements, not a multiple of the "
                             f"job's {size} ranks: pass splits")
        lib = _lib.lib()
        args = (_name_bytes(name), sb.ptr, ob.ptr, sb.count // size, sb.dtype)
        return self._run(name, lib.ringd_alltoall, lib.ringd_alltoall_async, args, sync,
                         (sb.obj, ob.obj), out)

    def alltoall(self, name: Name, send: Buffer, splits: Optional[Sequence[int]] = None,
                 out: Optional[Buffer] = None,
                 recv_splits: Optional[Sequence[int]] = None) -> Buffer:
        """Sends each rank its block of send and returns out with every rank's block for this
        one, in rank order. splits: the elements of send for each rank in turn (a new output is
        made once the ranks have learnt each other's: Handle.counts then says how many came
        from each); None: send split evenly, out (a new array when None) as large as send.
        recv_splits (with splits): the elements this rank receives from each rank, known
        beforehand (MPI_Alltoallv: Mismatch on every rank when a sender disagrees), into out
        (a new array when None)."""
        return self._refusing(name, self._alltoall, name, send, splits, out, True, recv_splits)

    def alltoall_async(self, name: Name, send: Buffer, splits: Optional[Sequence[int]] = None,
                       out: Optional[Buffer] = None,
                       recv_splits: Optional[Sequence[int]] = None) -> Handle:
        """alltoall without waiting: a Handle whose wait() returns out."""
        return self._refusing(name, self._alltoall, name, send, splits, out, False, recv_splits)

    def barrier(self, name: Name = None) -> None:
        """Returns once every rank entered the barrier of this name."""
        lib = _lib.lib()
        return self._run(name, lib.ringd_barrier, lib.ringd_barrier_async,
                         (_name_bytes(name),), True, (), None)

    def barrier_async(self, name: Name = None) -> Handle:
        """barrier without waiting: a Handle whose wait() returns None."""
        lib = _lib.lib()
        return self._run(name, lib.ringd_barrier, lib.ringd_barrier_async,
                         (_name_bytes(name),), False, (), None)


@functools.lru_cache(maxsize=256)
def _arena_buffer_type(nbytes):
    """The class of arena buffers of nbytes: a ctypes uint8 array that owns nothing (the arena
    does). Being a Python subclass, its instances take weak references, and every numpy array,
    tensor or memoryview made from one keeps it alive: so its finalizer runs only once the
    last view is gone."""
    return type("ArenaBuffer", (ctypes.c_uint8 * nbytes,), {})


def _address_of(buf):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(buf, torch.Tensor):
        return buf.data_ptr()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(buf, np.ndarray):
        return buf.__array_interface__["data"][0]
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(buf))
    except (TypeError, ValueError):
        raise TypeError(f"a {type(buf).__name__} is no buffer of the arena") from None
