/* A local client of a job as the engine sees it, the job as one client sees it, and the news
 * the engine gives the front about its clients. Loop thread only. */
#ifndef RD_CLIENT_H
#define RD_CLIENT_H

#include <stdint.h>
#include <sys/types.h>

#include "report.h"
#include "trace.h"
#include "status.h"

struct rd_arena;

typedef struct rd_engine rd_engine;
typedef struct rd_job rd_job;

/* A local client of a job as the engine sees it. The front embeds one in each client
 * connection and fills engine, pid and uid; the engine sets the rest from rd_job_join on. */
typedef struct rd_client {
    rd_engine *engine;
    pid_t pid; /* of the client process (SO_PEERCRED) */
    uid_t uid;
    struct rd_job *job;            /* from rd_job_join until rd_job_leave */
    uint32_t local_rank;           /* in the job's current generation */
    int64_t asked_rank;            /* the local rank it asked for (Hello), -1: any */
    struct rd_arena *arena;        /* one reference, from rd_job_join on; the front drops it */
    struct rd_arena *device_arena; /* its device arena (MEM_DEVICE handle 1) on device, once
                                      welcomed with one: one reference the front holds */
    int device;                    /* the CUDA device the front gave it; -1: none */
    const char *device_uuid;       /* its UUID ("GPU-..."), static; NULL: none */
    uint64_t ops_in_flight;        /* Submits not yet answered (the front counts them) */
    uint64_t ops_completed;
    int timeline; /* its Completes carry their op's trace (Hello.timeline) */
} rd_client;

/* The job as one client sees it. */
typedef struct {
    uint64_t generation;
    uint32_t rank, size, local_rank, local_size;
} rd_client_view;

/* Who asks to see a job: a user sees only its own uid's jobs in full, an admin (root, the
 * daemon's own user, a member of --admin-group) every job. */
typedef struct {
    uid_t uid;
    int admin;
} rd_viewer;

/* News for clients, sent by the front. Loop thread. */
typedef struct {
    /* The job has started: sends c Welcome with v and its arena's memfd (passed once: the
     * engine closes its copy after). Returns RINGD_OK once sent (the client may then submit),
     * else why not (RINGD_E_CLOSED: c is not waiting for it, going away). */
    rd_status (*welcome)(rd_client *c, const rd_client_view *v, int arena_fd);
    /* c waits for the job's ring: ranks of world_size registered on nodes at generation. */
    void (*waiting)(rd_client *c, uint32_t ranks, uint32_t world_size, uint32_t nodes,
                    uint64_t generation, const char *detail);
    /* c's request ended with status (message: why, "" on success); trace: the op's path, when
     * c asked for traces and the request became an op (valid during the call), else NULL.
     * current 0: the answer leaves c with the job as it last heard it (an op that ran on one node
     * while a rank joined: c's next Submit, tagged with that generation, tells it of the join). */
    void (*complete)(rd_client *c, uint64_t request_id, rd_status status, const char *message,
                     const rd_trace_op *trace, int current);
} rd_client_events;

#endif
