# The ringd package: Python over libringd's C ABI (ctypes), and ringd.torch with Horovod's API.
"""Collectives for training processes, served by the node's ringd daemon.

    import ringd
    with ringd.Session(job="resnet", world_size=4, local_size=2) as s:
        g = s.array((1024,), "float32")          # in the shared arena: no copy
        s.allreduce("grad.0", g, out=g, op=ringd.AVG)
        h = s.allreduce_async("grad.1", some_numpy_array)
        result = h.wait()

`import ringd.torch as hvd` gives Horovod's PyTorch API over the same sessions.

Why ctypes: libringd's C ABI (client/include/ringd.h) is the only coupling between Python and
ringd. ctypes is in the standard library, so the package is pure Python: no compiled extension
per Python version or per PyTorch version (the rebuild Horovod needs), no cffi or compiler on
the training machine. The cost, a few microseconds per call, is small next to a collective's
round trip through the daemon. Every collective goes through libringd; nothing here reduces,
copies or matches tensors itself.

Errors are ringd.Error subclasses, one per ringd_result_t (ringd.errors), carrying the code,
ringd_errmsg's detail (the tensor, the ranks, the nodes) and ringd_strerror's advice.

Where libringd comes from (ringd._lib): $RINGD_LIBRARY, else the copy installed with the
package (a wheel's own, or `meson install`'s), else the system's. ringd.__version__ is the
package's version, ringd.library_version() the loaded library's.
"""
from . import _version
from .errors import (Closed, ConnectError, Error, InvalidArgument, MembershipChanged, Mismatch,
                     OutOfMemory, ProtocolError, Refused, Result, Stalled, SystemCallError,
                     Timeout)
from .session import DType, Handle, ReduceOp, Session

__version__: str = _version.version()  # the top meson.build's project version

SUM = ReduceOp.SUM
AVG = ReduceOp.AVG
MIN = ReduceOp.MIN
MAX = ReduceOp.MAX
PROD = ReduceOp.PROD


def library_version() -> str:
    """The version of the libringd this process loaded ("MAJOR.MINOR.PATCH")."""
    from . import _lib

    return _lib.lib().ringd_version().decode()


def library_path() -> str:
    """Where the loaded libringd came from (see ringd._lib for the lookup order)."""
    from . import _lib

    return _lib.path()


__all__ = [
    "Session", "Handle", "DType", "ReduceOp", "SUM", "AVG", "MIN", "MAX", "PROD",
    "Error", "Result", "InvalidArgument", "ConnectError", "ProtocolError", "Timeout",
    "Mismatch", "MembershipChanged", "OutOfMemory", "Stalled", "Closed", "SystemCallError",
    "Refused", "library_version", "library_path",
]
