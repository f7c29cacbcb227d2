# Horovod's PyTorch API over ringd: `import ringd.torch as hvd` for `import horovod.torch as hvd`.
"""Horovod's PyTorch API, with the same names and semantics, served by the node's ringd.

    import ringd.torch as hvd
    hvd.init()                                    # RINGD_JOB, RINGD_WORLD_SIZE, ...
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)

What differs from Horovod: ranks, sizes and the job come from the ringd daemon (no MPI, no
horovodrun); process sets are Horovod's (add_process_set, process_set= on every collective; each
member keeps a ringd session of the set, whose ops run among its ranks alone); Adasum is not
offered; join() is Horovod's
(the daemons let the others' allreduces go on with zeros for ranks that joined; any other
collective raises meanwhile, and so does an allreduce of tensors in device memory); failures raise
ringd.Error subclasses (HorovodInternalError is ringd.Error), carrying the daemon's message
naming the tensor and the ranks. Unnamed ops get deterministic per-process names (mpi_ops).

Devices. CPU and CUDA tensors are taken alike: ringd.session._as_buf hands libringd the
tensor's address, and libringd tells device memory from host memory itself. A CUDA tensor from
PyTorch's caching allocator is copied device to device into the session's device arena
(RINGD_DEVICE_ARENA) and reduced there by the daemon's CUDA kernels, or, without a device arena
or in a job across nodes, staged through host memory. Before each collective libringd waits for
the work queued on the legacy default stream (PyTorch's default current stream); a script that
computes gradients on other streams synchronises them first. DistributedOptimizer keeps CUDA
gradients where they are (only CPU gradients move into the host arena).
"""
from .compression import Compression
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, NotInitialized,
                      ProcessSet, Product, Sum, add_process_set, allgather, allgather_async,
                      allreduce,
                      alltoall, alltoall_async,
                      allreduce_, allreduce_async, allreduce_async_, barrier, broadcast,
                      broadcast_, broadcast_async, broadcast_async_, ccl_built, cuda_built,
                      ddl_built, generation, global_process_set, gloo_built, gloo_enabled,
                      grouped_allgather, grouped_allgather_async, grouped_allreduce,
                      grouped_allreduce_, grouped_allreduce_async, grouped_reducescatter,
                      grouped_reducescatter_async,
                      grouped_allreduce_async_, init, is_initialized, join, local_rank,
                      local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                      poll, rank, reducescatter, reducescatter_async, remove_process_set,
                      rocm_built, session, sparse_allreduce_async,
                      shutdown, size, start_timeline, stop_timeline, synchronize)
from .optimizer import DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

from . import elastic  # hvd.elastic.TorchState, hvd.elastic.run
