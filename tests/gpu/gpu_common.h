/* What the GPU tests share: inputs exact in every dtype, and whether ringd has a device here. */
#ifndef GPU_COMMON_H
#define GPU_COMMON_H

#include <stddef.h>

#include "backend.h"

/* Element i of rank k's input: small integers and quarters, exact in every dtype and in any
 * sum of a few of them. */
double gpu_input_value(int k, size_t i, rd_dtype dt);

/* How many CUDA devices ringd can use here (a device it cannot use, for its compute capability
 * or driver, counts as none): 0 with why, or -1 with why when the driver fails. Asked in a
 * forked child: a process that initialised the driver cannot fork a working child. */
int gpu_devices(char *why, size_t len);

struct ringd;

/* Reducescatter, allgatherv and alltoall on device-arena buffers of r's session (at least 8 MiB
 * of device arena), names prefixed with tag: counts unequal with a 0 among them (from 3 ranks)
 * and equal, apart and in place in each form the daemon takes, checked against values computed
 * here; then the in-place reducescatter a device refuses (a block written over itself), which
 * must fail on every rank. Returns 0, or a code after printing why. */
int gpu_sharded_cases(struct ringd *r, const char *tag);

/* An alltoallv in which rank `empty` sends and receives nothing (its buffers NULL, which the
 * library passes as host memory), and an allgatherv, with this rank's buffers in its device
 * arena (on_device 1) or in host memory (0): a rank that moves nothing matches the other ranks
 * of its node whatever they pass, and nodes may differ in device or host memory, as these
 * collectives cross nodes through host memory either way. Returns 0, or a code after printing
 * why. */
int gpu_either_memory_cases(struct ringd *r, const char *tag, int on_device, int empty);

#endif
