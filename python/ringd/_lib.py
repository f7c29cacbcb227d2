# libringd through ctypes: where the library is found, the C prototypes, and the ABI checks.
"""Loads libringd once per process and declares the functions of ringd.h.

Lookup order (the first that exists wins; RINGD_LIBRARY, when set, must work):
  1. $RINGD_LIBRARY, a path to libringd.so (a build tree's: build/client/libringd.so);
  2. the copy installed with this package, as ringd/_install.py records it: a wheel's own
     ringd/libringd.so.N, or the libdir of `meson install` (relative to the package first, so a
     DESTDIR or moved tree works; then as configured);
  3. the system's: the dynamic loader's search (LD_LIBRARY_PATH, ld.so's cache) for
     libringd.so.N, then ctypes.util.find_library("ringd").
A source checkout's build folders are never searched: tests and scripts name the library they
mean with RINGD_LIBRARY.

This module owns the one CDLL object; everything else calls through `lib()`.
"""
import ctypes
import ctypes.util
import os
from typing import List, Optional

# The ringd.h this binding mirrors (RINGD_VERSION_MAJOR/MINOR). A library with the same major and
# at least this minor keeps its ABI (ringd.h: struct_size lets the options grow).
ABI_MAJOR = 0
ABI_MINOR = 2

c_size_t = ctypes.c_size_t
c_int = ctypes.c_int
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_double = ctypes.c_double


class Options(ctypes.Structure):
    """ringd_options_t, field for field (ringd.h)."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("socket_path", c_char_p),
        ("job", c_char_p),
        ("world_size", c_int),
        ("local_size", c_int),
        ("open_timeout_ms", c_int),
        ("op_timeout_ms", c_int),
        ("arena_size", c_size_t),
        ("poll_us", c_int),
        ("reserved", c_int),
        ("min_size", c_int),
        ("ask_local_rank", c_int),
        ("local_rank", c_int),
        ("ask_device", c_int),
        ("device", c_int),
        ("device_arena_size", c_size_t),
        ("cuda_stream", c_void_p),
    ]


class TensorDesc(ctypes.Structure):
    """ringd_tensor_t: where a buffer lies as the daemon reaches it."""

    _fields_ = [
        ("kind", c_int),
        ("device", c_int),
        ("handle", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
    ]


# name: (restype, argtypes). ringd_t* and ringd_request_t* travel as c_void_p.
_PROTOTYPES = {
    "ringd_options_init": (None, [c_void_p, c_size_t]),
    "ringd_open": (c_int, [c_void_p, ctypes.POINTER(c_void_p)]),
    "ringd_close": (None, [c_void_p]),
    "ringd_rank": (c_int, [c_void_p]),
    "ringd_size": (c_int, [c_void_p]),
    "ringd_local_rank": (c_int, [c_void_p]),
    "ringd_device": (c_int, [c_void_p]),
    "ringd_device_uuid": (c_char_p, [c_void_p]),
    "ringd_local_size": (c_int, [c_void_p]),
    "ringd_generation": (ctypes.c_uint64, [c_void_p]),
    "ringd_errmsg": (c_char_p, [c_void_p]),
    "ringd_strerror": (c_char_p, [c_int]),
    "ringd_version": (c_char_p, []),
    "ringd_dtype_size": (c_size_t, [c_int]),
    "ringd_alloc": (c_void_p, [c_void_p, c_size_t]),
    "ringd_free": (None, [c_void_p, c_void_p]),
    "ringd_next_shape": (None, [c_void_p, ctypes.c_uint64]),
    "ringd_tensor_locate": (c_int, [c_void_p, c_void_p, c_size_t, ctypes.POINTER(TensorDesc)]),
    "ringd_allreduce": (c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "ringd_allreduce_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                ctypes.POINTER(c_void_p)]),
    "ringd_allreduce_scaled": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_double,
                c_double]),
    "ringd_allreduce_scaled_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_double,
                c_double, ctypes.POINTER(c_void_p)]),
    "ringd_broadcast": (c_int, [c_void_p, c_char_p, c_void_p, c_size_t, c_int, c_int]),
    "ringd_broadcast_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_size_t, c_int, c_int, ctypes.POINTER(c_void_p)]),
    "ringd_allgather": (c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int]),
    "ringd_allgather_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int,
                ctypes.POINTER(c_void_p)]),
    "ringd_reducescatter": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "ringd_reducescatter_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                ctypes.POINTER(c_void_p)]),
    "ringd_reducescatterv": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, ctypes.POINTER(c_size_t), c_int, c_int,
                c_double, c_double]),
    "ringd_reducescatterv_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, ctypes.POINTER(c_size_t), c_int, c_int,
                c_double, c_double, ctypes.POINTER(c_void_p)]),
    "ringd_allgatherv": (
        c_int, [c_void_p, c_char_p, c_void_p, c_size_t, c_void_p, ctypes.POINTER(c_size_t),
                c_int]),
    "ringd_allgatherv_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_size_t, c_void_p, ctypes.POINTER(c_size_t), c_int,
                ctypes.POINTER(c_void_p)]),
    "ringd_allgatherv_into": (
        c_int, [c_void_p, c_char_p, c_void_p, c_size_t, ctypes.c_uint64, c_int, c_void_p,
                c_void_p, ctypes.POINTER(c_size_t)]),
    "ringd_allgatherv_into_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_size_t, ctypes.c_uint64, c_int, c_void_p,
                c_void_p, ctypes.POINTER(c_size_t), ctypes.POINTER(c_void_p)]),
    "ringd_alltoall": (c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int]),
    "ringd_alltoall_async": (
        c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int,
                ctypes.POINTER(c_void_p)]),
    "ringd_alltoallv": (
        c_int, [c_void_p, c_char_p, c_void_p, ctypes.POINTER(c_size_t), c_void_p,
                ctypes.POINTER(c_size_t), c_int]),
    "ringd_alltoallv_async": (
        c_int, [c_void_p, c_char_p, c_void_p, ctypes.POINTER(c_size_t), c_void_p,
                ctypes.POINTER(c_size_t), c_int, ctypes.POINTER(c_void_p)]),
    "ringd_alltoallv_into": (
        c_int, [c_void_p, c_char_p, c_void_p, ctypes.POINTER(c_size_t), ctypes.c_uint64, c_int,
                c_void_p, c_void_p, ctypes.POINTER(c_size_t)]),
    "ringd_alltoallv_into_async": (
        c_int, [c_void_p, c_char_p, c_void_p, ctypes.POINTER(c_size_t), ctypes.c_uint64, c_int,
                c_void_p, c_void_p, ctypes.POINTER(c_size_t), ctypes.POINTER(c_void_p)]),
    "ringd_barrier": (c_int, [c_void_p, c_char_p]),
    "ringd_join": (c_int, [c_void_p, ctypes.POINTER(c_int)]),
    "ringd_barrier_async": (c_int, [c_void_p, c_char_p, ctypes.POINTER(c_void_p)]),
    "ringd_refuse": (c_int, [c_void_p, c_char_p, c_int, c_char_p]),
    "ringd_timeline_start": (c_int, [c_void_p, c_char_p]),
    "ringd_timeline_stop": (c_int, [c_void_p]),
    "ringd_group_start": (c_int, [c_void_p]),
    "ringd_process_set_create": (
        c_int, [c_void_p, ctypes.POINTER(c_int), c_int, ctypes.POINTER(c_void_p)]),
    "ringd_process_set_open": (
        c_int, [c_void_p, c_char_p, ctypes.POINTER(c_int), c_int, ctypes.POINTER(c_void_p)]),
    "ringd_group_end": (c_int, [c_void_p]),
    "ringd_wait": (c_int, [c_void_p]),
    "ringd_test": (c_int, [c_void_p, ctypes.POINTER(c_int)]),
}

# ringd_recv_fn: where a collective of learnt counts puts its result.
RECV_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, ctypes.POINTER(c_size_t), c_int, c_size_t)

# Element sizes of ringd_dtype_t in ringd.h's order, checked against the library at load time.
DTYPE_SIZES = (4, 8, 2, 2, 4, 8, 1)

_lib = None
_path = None
_options_size = 0


def _pkg_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def _installed_candidates() -> List[str]:
    """The copies of libringd installed with this package, as ringd/_install.py records them
    (none in a source checkout, which has no _install.py)."""
    try:
        from . import _install  # written by `meson install` and by setup.py (python/install.py.in)
    except ImportError:
        return []
    out = []
    if _install.LIBRARY_FROM_PACKAGE:
        out.append(os.path.normpath(os.path.join(_pkg_dir(), _install.LIBRARY_FROM_PACKAGE)))
    if _install.LIBRARY:
        out.append(_install.LIBRARY)
    return out


def _system_candidate() -> Optional[str]:
    """The name under which the dynamic loader finds a libringd of this ABI, or None."""
    soname = f"libringd.so.{ABI_MAJOR}"
    # A path where one can be had: _needs_asan_preload reads the file before dlopen.
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d and os.path.exists(os.path.join(d, soname)):
            return os.path.join(d, soname)
    return ctypes.util.find_library("ringd")


def _find() -> str:
    """The path (or loader name) of the libringd to load, or raises ImportError naming the
    three places it looked and how to fix it."""
    env = os.environ.get("RINGD_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise ImportError(f"RINGD_LIBRARY={env}: no such file; point it at libringd.so "
                              "(build/client/libringd.so in a build tree)")
        return env
    installed = _installed_candidates()
    for p in installed:
        if os.path.exists(p):
            return p
    system = _system_candidate()
    if system:
        return system
    with_package = (", ".join(installed) + ": missing") if installed else \
        "none recorded (a source checkout, or a package built without the library)"
    raise ImportError(
        "libringd not found. Looked at: (1) RINGD_LIBRARY: not set; (2) the copy installed "
        f"with this package ({_pkg_dir()}): {with_package}; (3) the system's: no "
        f"libringd.so.{ABI_MAJOR} on LD_LIBRARY_PATH or in ld.so's cache. Fix: set "
        "RINGD_LIBRARY to a libringd.so (build/client/libringd.so of a build tree), install a "
        "wheel built with the library (python/build_wheel.py), or `meson install` ringd "
        "(then ldconfig)")


def _needs_asan_preload(path):
    """1 when path is an AddressSanitizer build and this process has no ASan runtime loaded:
    dlopen would then abort the interpreter instead of failing."""
    try:
        with open(path, "rb") as f:
            if b"libasan.so" not in f.read():
                return False
        with open("/proc/self/maps") as f:
            return "libasan.so" not in f.read()
    except OSError:
        return False


def _check_abi(lib, path):
    """Refuses a library whose version or options struct this binding cannot work with."""
    global _options_size
    version = lib.ringd_version().decode()
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        raise ImportError(f"{path}: ringd_version() gave {version!r}, not MAJOR.MINOR.PATCH")
    if major != ABI_MAJOR or minor < ABI_MINOR:
        raise ImportError(
            f"{path} is libringd {version}, but this ringd package speaks ringd.h "
            f"{ABI_MAJOR}.{ABI_MINOR}: install the package and the library from the same "
            "release, or set RINGD_LIBRARY to a matching libringd.so")
    o = Options()
    lib.ringd_options_init(ctypes.byref(o), ctypes.sizeof(o))
    # struct_size is the smaller of ours and the library's: less than ours means the library
    # predates some field (Session refuses to set those).
    if o.struct_size == 0 or o.struct_size > ctypes.sizeof(o):
        raise ImportError(f"{path}: ringd_options_init wrote struct_size {o.struct_size}; this "
                          f"binding's ringd_options_t has {ctypes.sizeof(o)} bytes")
    _options_size = o.struct_size
    for code, size in enumerate(DTYPE_SIZES):
        if lib.ringd_dtype_size(code) != size:
            raise ImportError(f"{path}: dtype {code} has {lib.ringd_dtype_size(code)} bytes in "
                              f"the library, {size} in this binding: versions differ")


def lib():
    """The loaded libringd (a ctypes.CDLL), loading and checking it on first use."""
    global _lib, _path
    if _lib is not None:
        return _lib
    path = _find()
    if _needs_asan_preload(path):
        raise ImportError(
            f"{path} is built with AddressSanitizer and its runtime is not in this process: run "
            "Python with LD_PRELOAD=$(gcc -print-file-name=libasan.so) "
            "ASAN_OPTIONS=detect_leaks=0, or use a build without -Db_sanitize")
    try:
        cdll = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"cannot load libringd from {path}: {e}") from None
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            raise ImportError(f"{path} does not export {name}: it is not a libringd this "
                              "binding knows (too old?)") from None
        fn.restype = restype
        fn.argtypes = argtypes
    _check_abi(cdll, path)
    _lib, _path = cdll, path
    return _lib


def path():
    """Where the loaded library came from (after lib())."""
    lib()
    return _path


def options_size():
    """The bytes of ringd_options_t both this binding and the library know."""
    lib()
    return _options_size
