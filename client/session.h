/* libringd's private view of a session and its requests, shared by its files (ringd.c:
 * sessions and single collectives; learn.c: collectives of two steps). Never installed. */
#ifndef RD_CLIENT_SESSION_H
#define RD_CLIENT_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "alloc.h"
#include "chrome_trace.h"
#include "conn.h"
#include "ctlq.h"
#include "ringd.h"

struct ringd_request {
    ringd_t *r;
    uint64_t id;
    int done;
    int abandoned; /* its caller stopped waiting: freed when its Complete comes */
    ringd_result_t status;
    char *message;            /* the daemon's detail on failure */
    uint64_t stage;           /* offset of the library's staging copy, or RD_NO_STAGE... */
    rd_alloc *stage_alloc;    /* ...in this allocator's range (the arena's or the device arena's) */
    const uint8_t *copy_from; /* where the result is read back from... */
    void *copy_to;            /* ...into this user buffer, copy_len bytes; NULL when none */
    size_t copy_len;
    int copy_device;        /* 1: either side is device memory (a CUDA copy) */
    int held;               /* kept for its group until ringd_group_end: not to wait for yet */
    ringd_request_t *outer; /* a step of this request of two steps (learn.c), or NULL */
    struct rd_learn *learn; /* a request of two steps: its state; NULL for one daemon op */
    ringd_request_t *prev, *next;
};

struct ringd {
    rd_conn conn;
    uint8_t *arena;
    uint64_t arena_size;
    rd_alloc alloc;
    int rank, size, local_rank, local_size;
    int device;           /* the session's CUDA device, as the daemon numbers it; -1: none */
    int local_device;     /* the same device as this process numbers it (found by UUID when
                             the device arena is mapped); -1: not known */
    int asked_device;     /* the one its Hello asked for; -1: none */
    char device_uuid[48]; /* its UUID; "" for none */
    uint8_t *dev_arena;   /* the device arena where this process maps it; NULL: none */
    uint64_t dev_arena_size;
    rd_alloc dev_alloc;
    void *dev_shared;   /* the mapping (rd_cuda_shared) */
    uint64_t dev_asked; /* device arena bytes its Hello asked for */
    void *stream;       /* the CUstream ordering device tensors; NULL: legacy default */
    uint64_t generation;
    int op_timeout_ms;
    int poll_us;
    rd_ctlq sq;            /* submissions to the daemon, in the arena's control area */
    rd_ctlq cq;            /* completions from it */
    ringd_result_t broken; /* RINGD_OK while the session works */
    pid_t pid;             /* the process that opened it */
    int forked;            /* this process is a child forked from that one (fork_child) */
    struct ringd *next_open, **prev_open; /* the process's open sessions (for fork) */
    uint64_t next_id;
    uint64_t auto_seq;
    uint64_t since_join;   /* collectives submitted since the last join or generation change */
    ringd_request_t *reqs; /* outstanding requests */
    int grouping;          /* between ringd_group_start and ringd_group_end */
    struct rd_learn_group *learn_group; /* that group's collectives of two steps (learn.c) */
    /* What a process set's session is opened with (pset.c): this session's own settings */
    char *socket_path, *job;
    int open_timeout_ms;
    uint64_t arena_asked;
    uint64_t psets;                /* process sets created so far (their names' serial) */
    uint64_t next_shape;           /* ringd_next_shape's, for the next Submit (0: none) */
    struct ringd *parent;          /* a process set's: the job's session it was made from */
    uint64_t parent_generation;    /* that session's generation when it was made */
    struct held *held, *held_tail; /* that group's Submits, sent at its end */
    uint32_t nheld;
    int takes_trace;  /* the daemon takes Trace (ringd_timeline_start) */
    int traced;       /* the daemon attaches traces to the Completes (Hello.timeline or Trace) */
    char *trace_path; /* RINGD_TIMELINE or ringd_timeline_start's: Completes carry their op's
                         trace */
    FILE *trace_file; /* this rank writes them there (rank 0, or each rank for %r) */
    rd_ctrace trace;
    char errmsg[1024];
};

/* One collective as the library submits it. */
typedef struct {
    int op;
    const char *name;
    const void *send;
    void *recv;
    size_t count; /* this rank's: its input, or a reducescatter's output */
    ringd_dtype_t dtype;
    ringd_redop_t redop;
    int root;
    double prescale, postscale;
    const size_t *counts; /* reducescatterv, allgatherv: every rank's (ringd_size of them) */
    int join;             /* ringd_join's allgather */
} submit_args;

/* ringd_open; traced: RINGD_TIMELINE applies (not to a process set's session, which would write
 * over its job's file). */
ringd_result_t rd_lib_open(const ringd_options_t *opts, int traced, ringd_t **out);

/* 1 when this process is a child forked after r opened (r is its parent's: see fork_child in
 * ringd.c), with errmsg saying so (RINGD_E_INVALID for the caller to return); else 0. */
int rd_lib_left_to_parent(ringd_t *r);

/* Places a's buffers and submits it (ringd.c's submit): RINGD_OK with *out a new outstanding
 * request, or the failure with ringd_errmsg set (the daemon told, so that no rank waits). */
ringd_result_t rd_lib_submit(ringd_t *r, const submit_args *a, ringd_request_t **out);

/* Tells the daemon this rank cannot run the op named name (rc, its detail already in errmsg),
 * which fails it on every rank; returns rc. */
ringd_result_t rd_lib_refuse(ringd_t *r, const submit_args *a, const char *name, ringd_result_t rc);

/* Puts q on r's list of outstanding requests / takes it off / frees it (its staging too). */
void rd_lib_req_link(ringd_t *r, ringd_request_t *q);
void rd_lib_req_unlink(ringd_request_t *q);
void rd_lib_req_free(ringd_request_t *q);

/* RINGD_OK, or RINGD_E_MEMBERSHIP with errmsg set when r is a process set whose job has changed
 * generation since it was made (pset.c). */
ringd_result_t rd_pset_current(ringd_t *r);

/* 1 after failing with RINGD_E_INVALID (errmsg set) when r is making a group: a synchronous
 * call there would wait for the group's end, which it holds up. */
int rd_lib_sync_in_group(ringd_t *r, const char *name);

/* Waits for q as a synchronous call does (given up at op_timeout_ms): its result. */
ringd_result_t rd_lib_wait(ringd_request_t *q);

/* Marks q finished with status and message (learn.c's requests, which no Complete ends). */
void rd_lib_req_complete(ringd_request_t *q, ringd_result_t status, const char *message);

/* inner, a step of a request of two steps, has finished: the next step goes, or the request
 * ends (learn.c). inner is unlinked and freed. */
void rd_learn_advance(ringd_request_t *inner);

/* ringd_group_end has sent the group: its collectives of two steps send their data steps as a
 * group of their own once all their first steps have ended (learn.c). */
void rd_learn_group_end(ringd_t *r);

/* The group the caller is making, set aside while the library submits a data step of its own
 * (which must not join the caller's group, only on the ranks that happen to handle a completion
 * inside it), and put back. */
typedef struct {
    int grouping;
    struct held *held, *held_tail;
    uint32_t nheld;
    struct rd_learn_group *learn_group;
} rd_group_aside;
void rd_lib_group_aside(ringd_t *r, rd_group_aside *save);
void rd_lib_group_restore(ringd_t *r, const rd_group_aside *save);

/* ringd_join: the collectives of two steps this rank has in their first step fail on every
 * rank, this one's as their first steps end (their data steps would need the joined rank). */
void rd_learn_refuse_all(ringd_t *r, const char *why);

/* Frees a request's two-step state (NULL is a no-op), leaving its group. */
void rd_learn_free(struct rd_learn *l);

#endif
