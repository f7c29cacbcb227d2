# Tensors of dtypes ringd has no kernel for: bytes for the collectives that move data, int32 to reduce.
"""How ringd.torch and the torch.distributed backend hand libringd a tensor whose dtype it does
not have (int8, int16, bool, complex, float8...). Collectives that only move data move its
bytes: a uint8 view. Reductions of int8, int16 and bool run in int32 and are narrowed back with
torch's own wrap-around (a sum of int8 wraps as torch's int8 arithmetic does)."""
import torch

from ..session import _TORCH_DTYPES

WIDENED = (torch.int8, torch.int16, torch.bool)  # reduced in int32


def native(t):
    """True when libringd takes t's dtype as it is."""
    return str(t.dtype) in _TORCH_DTYPES


def as_bytes(t):
    """t itself when libringd has its dtype; else a uint8 view of t (contiguous) whose last,
    added dimension holds each element's bytes, so that rows stay rows."""
    if native(t):
        return t
    return t.reshape(tuple(t.shape) + (1,)).view(torch.uint8)


def from_bytes(got, dtype):
    """A result of a collective on as_bytes(t) as a tensor of t's dtype (the bytes' dimension
    gone again); got itself when it already is one."""
    if got.dtype == dtype:
        return got
    return got.view(dtype).reshape(tuple(got.shape[:-1]))
