/* The engine's shared state: the engine, its jobs and their ops, as the engine's files see them
 * (optab, check, ops, pass, stall, job, engine). Private to daemon/engine: the front sees only
 * engine.h and job.h. Loop thread only, except where a field says otherwise. */
#ifndef RD_ENGINE_INTERNAL_H
#define RD_ENGINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "devcomm.h"
#include "arena.h"
#include "client.h"
#include "config.h"
#include "counters.h"
#include "metrics.h"
#include "timeline.h"
#include "exec.h"
#include "local.h"
#include "negotiate.h"
#include "schedule.h"
#include "world.h"

struct event;
struct crossing;

struct rd_engine {
    struct event_base *base;
    const rd_config *cfg;
    rd_counters *counters;
    rd_metrics *metrics; /* NULL: none kept */
    rd_exec *exec;
    rd_net *net;          /* NULL: one-node jobs only */
    rd_devcomm_gpus gpus; /* the jobs' NCCL communicators on this daemon's GPUs */
    rd_client_events ev;  /* news for the clients */
    rd_job *jobs;
    struct recording *recordings; /* timelines being recorded, by job name */
    int draining;                 /* leaving every job: new clients are refused */
};

/* A timeline recording of the job of that name (there or not yet). */
struct recording {
    char *job;
    rd_timeline *tl; /* the recorder's */
    rd_viewer who;   /* the recorder: a job of another uid is not recorded for a non-admin */
    struct recording *next;
};

/* The life of an op. Every change goes through rd_optab_set_state, which checks it against
 * op_moves and logs it; the job keeps the ops of each state on a list of their own. */
typedef enum {
    OP_PENDING,    /* waiting for some local ranks to submit */
    OP_HELD,       /* every local rank submitted (multi-node): waits for a ring that takes
                      announcements (forming, or sealed for a graceful change) */
    OP_ANNOUNCED,  /* the other nodes know of it: waits until every node has announced it */
    OP_RING_READY, /* negotiated, bound for the ring: waits for the coordinator's order */
    OP_RUNNING,    /* data moving on the executor or the ring */
    OP_DOOMED,     /* the ring broke under it: its ranks hear the message once the ring is back
                      (their answer then carries the new generation), or when the wait ends */
    OP_UNTOLD,     /* failed here; the other nodes have yet to hear it (told on the next ring) */
    OP_TOLD,       /* failed here and announced: waits until every node has announced it */
    OP_TOMBSTONE,  /* failed, and every node knows: answers the ranks yet to submit it with the
                      same error until all have come, or --stall-abort passes */
    OP_NSTATES
} op_state;

/* One local rank's submission of an op. */
typedef struct {
    rd_client *s;    /* NULL once the session has gone */
    rd_arena *arena; /* referenced while submitted */
    uint64_t request_id;
    uint64_t in_off, out_off;
    int64_t submit_us; /* when it submitted (the timeline's) */
    int submitted;     /* or joined: counted as come */
    int answered;
    int joined; /* the rank had joined (ringd_join) and takes no part: it contributes zeros */
    int empty;  /* it moves no bytes (an alltoall rank that sends and receives nothing, an op of
                   count 0): its memory, host or device, matches the other ranks' either way */
} part;

typedef struct rd_op {
    rd_job *job;
    char *name;
    op_state state;
    uint32_t first_rank; /* the submission the others are checked against */
    rd_op_params p;
    uint32_t nsubmitted;
    part *parts; /* local_size entries */
    rd_status status;
    char *message;
    int warned;       /* the stall inspector has logged it (--stall-warn) */
    int64_t asked_ms; /* when the other nodes were last asked to end it (0: never) */
    uint32_t nparts;  /* the job's local size when it was created */
    int64_t since_ms; /* first submission, or the disruption that doomed it */
    uint64_t seq;     /* creation order: ops of one name are announced in it */
    /* Its path, for the metrics and the timeline (rd_trace_op says what each is): */
    int64_t first_us, ready_us, negotiated_us, started_us;
    int64_t ring_us[RD_PHASES];
    uint64_t pass;     /* the ring pass it rode in */
    uint32_t pass_ops; /* ops in that pass */
    int direct;        /* its result came with the negotiation */
    rd_local_plan plan;
    uint64_t *counts; /* reducescatter, allgatherv: every rank's count (ncounts of them, the job's
                         size when it was submitted); alltoall: the ncounts x ncounts matrix (row:
                         the sender); NULL for other ops and tombstones */
    uint32_t ncounts;
    uint32_t counts_first;       /* the job's first rank here when the counts came (they place this
                                    node's ranks by it) */
    struct rd_group *grp;        /* the group it is one of (group.h), or NULL */
    uint32_t gindex;             /* its place in it */
    int gready;                  /* every local rank submitted it: counted in the group's ready */
    int gagreed;                 /* negotiated here, waiting for the rest of its group */
    int joining;                 /* a ringd_join: the ranks that submitted it have joined */
    int outran_join;             /* on one node, a rank joined while it ran: its answer keeps
                                    the ranks' view of the job (their next Submit fails) */
    int outran_loss;             /* on one node, a rank was lost while it ran: it fails with
                                    message */
    uint8_t *zeros;              /* joined ranks' input (zeros), then their output, or NULL */
    struct rd_op *next;          /* bucket chain */
    struct rd_op *sprev, *snext; /* the list of its state */
} rd_op;

/* The life of a job on this node. Every change goes through set_phase (job.c), which checks it
 * against the job's table of moves and logs it. */
typedef enum {
    JOB_FORMING,  /* waiting for its local clients, then (across nodes) for its first ring */
    JOB_RUNNING,  /* its clients were welcomed: ops run */
    JOB_DRAINING, /* leaving (ringctl drain): new Submits are refused, what was announced ends */
    JOB_LEFT,     /* drained: has left its ring; goes once its last client has */
    JOB_FREEING,  /* being freed: callbacks of what it frees find nothing to do */
    JOB_NPHASES
} job_phase;

/* What the job knows of its ring between two rings (a multi-node job). Every change goes through
 * set_ring (job.c), checked and logged like the phase. */
typedef enum {
    RING_SOUND,     /* up, forming, or left gracefully: nothing broke */
    RING_DISRUPTED, /* it broke under running ops: the ops it fails are answered once the next
                       ring is up (their answer then carries the new generation) */
    RING_LOST,      /* no ring will come soon (this node lost its registration; lost says why):
                       what a retiring ring fails now fails at once */
    RING_NSTATES
} ring_health;

/* Whether what the coordinator ordered may cross nodes on this ring (pass.c). */
typedef enum {
    CROSS_OPEN,    /* in the coordinator's order, as each is ready */
    CROSS_BLOCKED, /* this node asked for a re-form over a crossing it will not make: nothing
                      more crosses on this ring (it would pair wrongly); open again at its end */
} cross_state;

struct rd_job {
    rd_engine *e;
    char *name;
    uint32_t world_size; /* ranks the job starts with (Hello) */
    uint32_t min_size;   /* elastic: ranks it keeps running with */
    uint32_t local_cap;  /* local clients it was declared with; slots has this many */
    uint32_t local_size; /* local ranks of the current generation */
    uint32_t nclients;
    uint32_t size;       /* ranks of the current generation, every node's */
    uint32_t first_rank; /* global rank of local rank 0 */
    uint64_t generation;
    uint64_t ranks_from;      /* the first generation whose ranks match the local ones: after local
                                 ranks changed under a multi-node ring, clients learn their ranks only
                                 from the next ring on */
    uint64_t sync_generation; /* Submits tagged with an older generation fail: the ring changed */
    char sync_why[512];       /* what changed then */
    job_phase phase;
    ring_health ring;
    char lost[512];          /* RING_LOST: why no ring will come soon */
    int64_t wait_ms;         /* how long ops wait for a ring to come back */
    struct event *ev_tick;   /* stall inspector and wait deadlines */
    rd_world *world;         /* jobs spanning nodes */
    struct event *ev_free;   /* frees the job on a later turn, out of any callback */
    struct event *ev_settle; /* tells the world, on a later turn, that device passes ended */
    struct event *ev_tell;   /* tells the other nodes, on a later turn, of failures found here */
    rd_sched *sched;         /* with world: announcements, orders, fusion */
    rd_devcomm *devcomm;     /* with world: the device transport of each generation */
    uint64_t epoch;          /* rings this job has seen end: a device pass crosses on its own */
    uint32_t ndev;           /* device passes under way */
    uint32_t ncrossing;      /* of those, the ones their transport has (it bounds them) */
    struct crossing *cross_head, *cross_tail; /* to cross nodes, in the coordinator's order */
    cross_state cross;
    uid_t uid;         /* of the first client: only that user's processes may join */
    rd_client **slots; /* by local rank */
    rd_client **order; /* slots_arrange's scratch, as many */
    rd_op **buckets;
    size_t nbuckets, nops;
    rd_op *first[OP_NSTATES], *last[OP_NSTATES]; /* ops by state, each list in order of arrival */
    size_t count[OP_NSTATES];
    uint64_t next_seq;
    uint32_t nrunning; /* ops on the executor: the job outlives its clients until they end */
    uint64_t ops_completed, ops_failed;
    rd_job_metrics *m;  /* its series (NULL: none) */
    rd_timeline *tl;    /* a recording of its timeline, or NULL */
    uint32_t ntraced;   /* clients whose Completes carry their op's trace (RINGD_TIMELINE) */
    uint32_t ring_size; /* ranks of its last ring (0: none yet): the cause of the next change */
    struct rd_group *groups; /* groups of ops with places still to fill or end (group.h) */
    rd_op *join;             /* its ringd_join under way, or NULL: ops.c says who has joined */
    uint64_t passes;         /* ring passes started */
    rd_job *next;
};

/* 1 once the job has welcomed its clients (it ran, or runs; one drained before that never
 * started: no generation). */
static inline int rd_job_started(const rd_job *j)
{
    return j->generation != 0;
}

/* 1 while the job is leaving or has left (ringctl drain). */
static inline int rd_job_draining(const rd_job *j)
{
    return j->phase == JOB_DRAINING || j->phase == JOB_LEFT;
}

/* The ops that failed here and the other nodes have yet to hear of (UNTOLD) are told on a later
 * turn, out of whatever loop over ops failed them (a group's failure fails its members). */
void rd_job_tell_later(rd_job *j);

/* Frees j now, with its ops, its ring and its scheduler (at shutdown, or once unused). */
void rd_job_free(rd_job *j);

/* The job goes on a later turn, out of any callback, once it has no clients and nothing on the
 * executor or the ring (the data plane's completion callback, say, would free it too). */
void rd_job_free_later(rd_job *j);

#endif
