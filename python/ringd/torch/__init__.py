# Horovod's PyTorch API over ringd: `import ringd.torch as hvd` for `import horovod.torch as hvd`.
"""Horovod's PyTorch API, with the same names and semantics, served by the node's ringd.

    import ringd.torch as hvd
    hvd.init()                                    # RINGD_JOB, RINGD_WORLD_SIZE, ...
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)

What differs from Horovod: ranks, sizes and the job come from the ringd daemon (no MPI, no
horovodrun); only the global process set exists; Adasum is not offered; join() is a barrier
that every rank must reach after the same collectives (see mpi_ops.join); failures raise
ringd.Error subclasses (HorovodInternalError is ringd.Error), carrying the daemon's message
naming the tensor and the ranks. Unnamed ops get deterministic per-process names (mpi_ops).

Devices. Tensors must be CPU tensors for now; a CUDA tensor raises TypeError. The seam is
ringd.session._as_buf, where a tensor becomes what libringd is given: today an address in host
memory (copied through the arena, or the arena itself). CUDA tensors will become a device
descriptor instead: the C layer takes ringd_tensor_t {kind RINGD_MEM_DEVICE, device, handle,
offset}, the handle naming device memory registered with the daemon (the VMM allocation under
the tensor, exported as a POSIX fd and passed over the socket), and the op is ordered on the
caller's CUDA stream by events. Nothing above _as_buf changes: these functions pass tensors
through, and the daemon reduces on the device.
"""
from .compression import Compression
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, NotInitialized,
                      ProcessSet, Product, Sum, allgather, allgather_async, allreduce,
                      allreduce_, allreduce_async, allreduce_async_, barrier, broadcast,
                      broadcast_, broadcast_async, broadcast_async_, ccl_built, cuda_built,
                      ddl_built, generation, global_process_set, gloo_built, gloo_enabled,
                      grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                      grouped_allreduce_async_, init, is_initialized, join, local_rank,
                      local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                      poll, rank, rocm_built, session, shutdown, size, synchronize)
from .optimizer import DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

from . import elastic  # hvd.elastic.TorchState, hvd.elastic.run
