/* The op table of a job: its ops by name and by state, the one function that moves an op from
 * state to state (checked against the table of legal moves, and logged), and the ways an op
 * ends. Loop thread only. */
#ifndef RD_OPTAB_H
#define RD_OPTAB_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* 1 for the states of an op that failed here and stays as a tombstone (UNTOLD, TOLD,
 * TOMBSTONE). */
int rd_optab_failed(op_state st);

/* Moves o to st: a move the table does not allow is a programmer error (an assertion, and an
 * error in the log where assertions are compiled out). */
void rd_optab_set_state(rd_op *o, op_state st);

/* A pending op named name with parameters p, first submitted by local rank `rank`, in j's table
 * and counted in flight. Returns NULL when out of memory. */
rd_op *rd_optab_new(rd_job *j, const char *name, const rd_op_params *p, uint32_t rank);

/* The op named name that local rank `rank` should join: the oldest one it has not submitted to;
 * *dup is set when rank already has that name pending or running. NULL when there is none. */
rd_op *rd_optab_find(rd_job *j, const char *name, uint32_t rank, int *dup);

/* Unlinks o from j's table and frees it (its arena references, buffers and strings). */
void rd_optab_remove(rd_job *j, rd_op *o);

/* Removes every failed op (UNTOLD, TOLD, TOMBSTONE): the ranks they wait for were renumbered, or
 * belong to a generation that is over. */
void rd_optab_drop_failed(rd_job *j);

/* Frees every op of j, at the job's end (the in-flight counter forgets those still live). */
void rd_optab_clear(rd_job *j);

/* Tells client c how its request ended (with trace when c asked for traces), with the job as it
 * is now (current), or leaving c's view of it as it was (see rd_client_events.complete). */
void rd_optab_answer(const rd_job *j, rd_client *c, uint64_t request_id, rd_status status,
                     const char *message, const rd_trace_op *trace, int current);

/* Ends o: answers its ranks, counts it, removes and frees it. */
void rd_optab_finish(rd_op *o, rd_status status, const char *message);

/* Ends a pending op for good: its ranks that submitted hear status and msg now, and it stays
 * as a tombstone answering those yet to come alike (UNTOLD when the other nodes have yet to hear
 * of it). */
void rd_optab_tombstone(rd_op *o, rd_status status, const char *msg);

/* Fails o with a message made from fmt: a mismatch leaves a tombstone, any other failure
 * removes the op at once. */
void rd_optab_fail(rd_op *o, rd_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Local rank `rank` (client c, request_id) came to the failed op o: it hears status and
 * message. */
void rd_optab_visit(rd_op *o, rd_client *c, uint32_t rank, uint64_t request_id, rd_status status,
                    const char *message);

/* A tombstone every node knows of goes once all its ranks have come. Returns 1 when o is gone. */
int rd_optab_bury(rd_op *o);

/* The ring failed under o: its ranks hear why once the job is back, or when the wait ends. */
void rd_optab_doom(rd_op *o, const char *why);

/* The ring failed under o (how, with or without o's "tensor '<name>': ") and the job has since
 * moved on (why: what changed): o fails with RINGD_E_MEMBERSHIP saying first what changed, then
 * how the ring failed under it (often a link a neighbour closed when it heard of the loss first).
 */
void rd_optab_fail_changed(rd_op *o, const char *why, const char *how);

/* Ends every op that is not moving data with why, and drops the failed ones: the job moved to
 * a generation its clients must re-synchronise with. */
void rd_optab_fail_unstarted(rd_job *j, const char *why);

/* o, a member of a group, failed here (status, message): the group fails, and so do its members
 * that have not gone on: those not announced fail here (their ranks hear it, the other nodes on
 * a later turn), those negotiated and waiting for the rest of the group end now. A no-op when
 * o is in no group, or its group failed already. */
void rd_optab_group_failed(rd_op *o, rd_status status, const char *message);

/* Bytes of o's whole result: what each rank receives, and of a reducescatter the whole reduced
 * input (each rank receives its block of it), as a direct op's negotiation carries it. */
uint64_t rd_optab_result_bytes(const rd_op *o);

/* Bytes of local rank k's input (*in) and output (*out) in o: its count, or its entries of o's
 * counts (a reducescatter's output and an allgatherv's input its own count; an alltoall's input
 * its row of the matrix, its output its column), the ranks numbered as when the counts came.
 * Loop thread (an allgather's reads the job's size). */
void rd_optab_part_bytes(const rd_op *o, uint32_t k, uint64_t *in, uint64_t *out);

#endif
