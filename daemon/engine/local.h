/* Local collectives: the data movement of one op among the arenas of a node's clients. */
#ifndef RD_LOCAL_H
#define RD_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* One op's buffers and parameters, ready to run. in[k] and out[k] point into local rank k's
 * arena, already checked against it; for allgather out[k] holds n * count elements. A backend
 * of device memory runs the whole op as one unit (kernels and copies on the device), reducing
 * into local rank 0's output and copying the result from there. */
typedef struct {
    const rd_backend *backend;
    rd_coll coll;
    rd_dtype dtype;
    rd_redop redop; /* SUM, MIN, MAX or PROD; AVG arrives as SUM with args.divisor */
    rd_reduce_args args;
    uint32_t root;
    uint64_t count; /* elements per rank */
    int n;
    const uint8_t **in;
    uint8_t **out;
    const uint64_t *counts; /* reducescatter, allgatherv: each rank's (n of them); count is their
                               sum, the reducescatter's input and the allgatherv's output;
                               alltoall: the n x n matrix (row: the sender), count its sum */
    int serial; /* run as one range, in order: some rank's output is the start of its input */
    int device; /* a device backend's: the device of the memory (bound before it runs) */
    int failed; /* set by a run whose backend failed (a device's), why in why */
    char why[256];
} rd_local_plan;

/* Units of work in plan, for splitting across threads; 0 for a barrier. */
size_t rd_local_units(const rd_local_plan *p);

/* Bytes the op writes into arenas. */
uint64_t rd_local_bytes(const rd_local_plan *p);

/* Runs units [begin, end) of plan (an rd_local_plan *); an rd_exec_fn. A backend failure sets
 * plan->failed and why (the first unit to fail; the device's runs are one unit). */
void rd_local_run(void *plan, size_t begin, size_t end);

#endif
