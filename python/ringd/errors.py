# ringd's result codes as Python exceptions: one class per ringd_result_t value.
"""Exceptions raised by the ringd package.

Every failure of a libringd call becomes an `Error` carrying the `ringd_result_t` (`code`), what
happened (`message`: ringd_errmsg, or the daemon's Complete message, which names the tensor, the
ranks and the nodes) and what to do about it (`hint`: ringd_strerror). Each code has its own
subclass, so callers catch what they can handle (`MembershipChanged`, `Stalled`, ...).
"""
import enum
from typing import Union


class Result(enum.IntEnum):
    """ringd_result_t (ringd.h)."""

    OK = 0
    INVALID = 1
    CONNECT = 2
    PROTOCOL = 3
    TIMEOUT = 4
    MISMATCH = 5
    MEMBERSHIP = 6
    NOMEM = 7
    STALLED = 8
    CLOSED = 9
    SYSTEM = 10
    REFUSED = 11


class Error(RuntimeError):
    """A libringd call failed: code (a Result), message (what happened), hint (what to do). A
    RuntimeError, as Horovod's HorovodInternalError is: `except RuntimeError` written for
    Horovod catches every ringd error; the finer classes below sit under it."""

    code: Union[Result, int]  # an int for a code this binding does not know
    message: str
    hint: str

    def __init__(self, code: int, message: str, hint: str = "") -> None:
        try:
            code = Result(code)
        except ValueError:
            pass  # a code this binding does not know: kept as the int
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, Result) else str(self.code)
        tail = f" [{name}: {self.hint}]" if self.hint else f" [{name}]"
        return f"{self.message}{tail}"


class InvalidArgument(Error, ValueError):
    """RINGD_E_INVALID: a bad argument; fix the call."""


class ConnectError(Error):
    """RINGD_E_CONNECT: the daemon is not reachable (not running, or the wrong socket)."""


class ProtocolError(Error):
    """RINGD_E_PROTOCOL: library and daemon disagree; are they the same version?"""


class Timeout(Error):
    """RINGD_E_TIMEOUT: a deadline passed (open_timeout_ms, op_timeout_ms)."""


class Mismatch(Error):
    """RINGD_E_MISMATCH: ranks submitted one name with different parameters."""


class MembershipChanged(Error):
    """RINGD_E_MEMBERSHIP: ranks joined or left; restore state, broadcast it, go on."""


class OutOfMemory(Error, MemoryError):
    """RINGD_E_NOMEM: out of memory, or the arena is full."""


class Stalled(Error):
    """RINGD_E_STALLED: some ranks never submitted the tensor (the message names them)."""


class Closed(Error):
    """RINGD_E_CLOSED: the session is closed or broken; open a new one."""


class SystemCallError(Error):
    """RINGD_E_SYSTEM: a system call failed (the message says which)."""


class Refused(Error):
    """RINGD_E_REFUSED: the daemon refused the session (job full, inconsistent sizes)."""


_BY_CODE = {
    Result.INVALID: InvalidArgument,
    Result.CONNECT: ConnectError,
    Result.PROTOCOL: ProtocolError,
    Result.TIMEOUT: Timeout,
    Result.MISMATCH: Mismatch,
    Result.MEMBERSHIP: MembershipChanged,
    Result.NOMEM: OutOfMemory,
    Result.STALLED: Stalled,
    Result.CLOSED: Closed,
    Result.SYSTEM: SystemCallError,
    Result.REFUSED: Refused,
}


def error_for(code: int, message: str, hint: str = "") -> Error:
    """The exception for a ringd_result_t (the base Error for a code this binding lacks)."""
    try:
        cls = _BY_CODE.get(Result(code), Error)
    except ValueError:
        cls = Error
    return cls(code, message, hint)
