# Horovod's SyncBatchNorm for ringd.torch: batch statistics over every rank's batch.
"""SyncBatchNorm normalises with the mean and variance of the batch of all ranks together.

Forward: every rank allgathers (count, mean, variance) of its own batch per channel, and each
combines them the same way (the parallel variance formula). Backward: the two per-channel sums
the input gradient needs are allreduced. The weight and bias gradients stay local, as in any
layer: DistributedOptimizer averages them. Works on CPU tensors (Horovod's needs CUDA kernels).
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from .mpi_ops import _require, size


def _channels_view(t, ndim):
    """t (C,) shaped to broadcast against an (N, C, ...) input of ndim dimensions."""
    return t.view((1, -1) + (1,) * (ndim - 2))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        s = _require()
        input = input.contiguous()
        dims = [0] + list(range(2, input.dim()))
        count = input.numel() // input.size(1)
        mean = input.mean(dims, dtype=torch.float64)
        var = input.double().var(dims, unbiased=False)
        local = torch.cat([torch.tensor([float(count)], dtype=torch.float64), mean, var])
        c = mean.numel()
        table = s.allgather_async("sync_batch_norm.stats", local).wait().view(s.size, -1)
        counts, means, variances = table[:, :1], table[:, 1:1 + c], table[:, 1 + c:]
        total = counts.sum()
        gmean = (counts * means).sum(0) / total
        gvar = (counts * (variances + (means - gmean) ** 2)).sum(0) / total
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(gmean.to(running_mean.dtype), alpha=momentum)
                unbiased = gvar * (total / max(total.item() - 1, 1))
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        mean_c = gmean.to(input.dtype)
        invstd = torch.rsqrt(gvar + eps).to(input.dtype)
        xhat = (input - _channels_view(mean_c, input.dim())) * _channels_view(invstd, input.dim())
        out = xhat
        if weight is not None:
            out = out * _channels_view(weight, input.dim()) + _channels_view(bias, input.dim())
        ctx.save_for_backward(input, weight, mean_c, invstd)
        ctx.total = float(total.item())
        return out

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, mean, invstd = ctx.saved_tensors
        grad_output = grad_output.contiguous()
        nd = input.dim()
        dims = [0] + list(range(2, nd))
        xmu = input - _channels_view(mean, nd)
        sum_dy = grad_output.sum(dims)
        sum_dy_xmu = (grad_output * xmu).sum(dims)
        grad_input = grad_weight = grad_bias = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xmu * invstd
        if weight is not None and ctx.needs_input_grad[2]:
            grad_bias = sum_dy
        if ctx.needs_input_grad[0]:
            s = _require()
            sums = s.allreduce_async("sync_batch_norm.grads",
                                     torch.cat([sum_dy, sum_dy_xmu])).wait()
            c = sum_dy.numel()
            mean_dy = sums[:c] / ctx.total
            mean_dy_xmu = sums[c:] / ctx.total
            scale = invstd if weight is None else invstd * weight
            grad_input = (grad_output - _channels_view(mean_dy, nd)
                          - xmu * _channels_view(invstd * invstd * mean_dy_xmu, nd))
            grad_input = grad_input * _channels_view(scale, nd)
        return grad_input, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over the batches of all ranks (see the module docstring); in eval mode, or
    with one rank, a plain BatchNorm."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training and self.track_running_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, False, factor, self.eps)
        if size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, True, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.running_mean,
                                            self.running_var, self.eps, factor)
