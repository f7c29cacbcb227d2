/* A device communicator's queue of collectives: the rules of backend.h's rd_transport_ops
 * (init, poll, run, abort) over a library of communicators and a device's streams and events
 * reached through rd_commq_api. NCCL on CUDA is one such (gpu/nccl.c); tests/test_commq.c runs
 * the same rules on the CPU over a fake one that records call order, timing and threads.
 *
 * - Collectives go to the library one at a time and in order: a non-blocking communicator may
 *   still be queueing the last one after the call returns, and nothing may follow it until its
 *   state is idle again; an event recorded after each says when it ran.
 * - The watchdog times the oldest collective the device has from when it reached the head of
 *   the queue, never the time spent queued behind earlier ones.
 * - The library's asynchronous errors are polled while anything is pending: a peer that died
 *   mid-collective is noticed within a tick.
 * - Abort and the stream's drain run on a thread of their own: a wedged device never stops the
 *   event loop. Each pending done is reported on the loop once they returned (0 for a collective
 *   whose event had happened, -1 otherwise); if they have not returned within the transport's
 *   timeout, the dones are reported failed then, saying the device may be wedged. */
#ifndef RD_COMMQ_H
#define RD_COMMQ_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct event_base;

/* One collective as the library takes it: count elements per rank; root a rank. */
typedef struct {
    int coll; /* RD_COLL_ALLREDUCE, _BROADCAST or _ALLGATHER */
    rd_dtype dt;
    rd_redop op; /* SUM, MIN, MAX or PROD */
    const void *in;
    void *out;
    size_t count;
    int root;
} rd_commq_coll;

/* The library and the device. Every call but comm_abort, stream_sync and stream_free comes from
 * the loop thread, after use(device). */
typedef struct {
    /* A communicator for rank of nranks from id on device, started without blocking. NULL with
     * err set. */
    void *(*comm_init)(const uint8_t *id, size_t id_len, int nranks, int rank, int device,
                       char *err, size_t errlen);
    /* 0: idle; 1: busy (forming, or still queueing the last collective); -1: failed (err). */
    int (*comm_state)(void *comm, char *err, size_t errlen);
    /* Gives c to comm, on stream. Returns 0, or -1 with err set. */
    int (*comm_issue)(void *comm, void *stream, const rd_commq_coll *c, char *err, size_t errlen);
    /* Ends comm, cutting short what it runs. Blocks (on a wedged device, maybe for ever); the
     * ending thread calls it, after use(device). */
    void (*comm_abort)(void *comm);
    /* The communicator made from id formed, or ended: whatever served its id may go. May be
     * NULL. */
    void (*id_done)(const uint8_t *id, size_t id_len);
    /* The device current on the calling thread. Returns 0, or -1 with err set. */
    int (*use)(int device, char *err, size_t errlen);
    void *(*stream_new)(int device, char *err, size_t errlen);
    int (*stream_sync)(int device, void *stream, char *err, size_t errlen);
    void (*stream_free)(int device, void *stream);
    void *(*event_new)(int device, char *err, size_t errlen);
    int (*event_record)(int device, void *event, void *stream, char *err, size_t errlen);
    /* 1: happened; 0: not yet; -1: the device failed (err). */
    int (*event_done)(int device, void *event, char *err, size_t errlen);
    void (*event_free)(int device, void *event);
} rd_commq_api;

/* rd_transport_ops.init over api (borrowed for the transport's life). */
rd_transport *rd_commq_init(const rd_commq_api *api, const uint8_t *id, size_t id_len, int nranks,
                            int rank, int device, int64_t timeout_ms, char *err, size_t errlen);

/* rd_transport_ops.poll, run, abort and forget. */
int rd_commq_poll(rd_transport *t, char *err, size_t errlen);
int rd_commq_run(rd_transport *t, struct event_base *base, const rd_commq_coll *c,
                 rd_backend_done_fn done, void *arg, char *err, size_t errlen);
void rd_commq_abort(rd_transport *t);
void rd_commq_forget(rd_transport *t);

/* How often the loop looks at a transport's collectives while any is pending. */
#define RD_COMMQ_TICK_US 100

#endif
