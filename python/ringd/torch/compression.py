# Horovod's gradient compression for ringd.torch: none, and fp16 on the wire.
"""Compressors turn a tensor into what travels (compress) and back (decompress)."""
from typing import Any, Tuple

import torch


class Compressor:
    """compress(tensor) -> (tensor to reduce, context); decompress(tensor, context) -> tensor."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (ringd sums them in float, rounds once per
    hop) and gives them back in their own dtype; other dtypes travel unchanged."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor if ctx is None else tensor.type(ctx)


class Compression:
    """The compressors by name: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
