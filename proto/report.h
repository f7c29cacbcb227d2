/* The daemon's status as plain values (what `ringctl status` shows), and the StatusReply it
 * becomes on the wire: built here, the only place that knows that format, so that the layers
 * filling it (the front: the daemon-wide part and the clients; the engine: the jobs; the net:
 * each job's ring) never handle generated protobuf types.
 *
 * Strings are borrowed from the daemon's state, which the status does not outlive: it is built,
 * sent and freed within one callback of the loop. Texts made for the status are stored in it. */
#ifndef RD_REPORT_H
#define RD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "schedmsg.h"

#define RD_STATUS_STATE_MAX 640   /* a member's state text, terminator included */
#define RD_STATUS_MISSING_MAX 512 /* a stall's missing ranks, terminator included */

/* A node of a job's ring: the view's members in ring order, then those this node set aside. */
typedef struct {
    uint32_t first_rank; /* the node's first rank (0 for a member set aside) */
    const char *node;
    const char *address;
    uint32_t local_size;
    char state[RD_STATUS_STATE_MAX]; /* "up", "member", "unreachable: why", "set aside: why"... */
} rd_member_status;

/* One of this node's two data links, while the ring is up. */
typedef struct {
    const char *peer;
    const char *direction; /* "send" or "recv" */
    uint32_t conns;
    uint64_t bytes;
    double throughput_bps; /* bytes per second over the last sampling interval */
} rd_link_status;

/* A job's ring as this node sees it (the net layer calls a job's ring its world). */
typedef struct {
    uint64_t generation;
    const char *state;
    uint32_t position;             /* this node's, in ring order */
    const char *coordinator;       /* NULL before the first view */
    const char *gpu_transport;     /* how device ops cross nodes at this generation ("nccl", "tcp",
                                      or how far the nodes' agreement came); NULL: not known */
    const char *gpu_transport_why; /* why not NCCL, or why it failed ("" otherwise) */
    int has_tuning;                /* 0 before the coordinator's first order */
    rd_tuning tuning;              /* the coordinator's, as its last order carried */
    uint32_t autotune_trials;      /* coordinator with --autotune: settings tried */
    double autotune_best_bps;      /* the best one's bytes ordered per second */
    rd_member_status *members;     /* nmembers, malloc'd: released with the status */
    size_t nmembers;
    rd_link_status links[2]; /* the first nlinks: to the next node, from the previous one */
    size_t nlinks;
    uint32_t pair_links; /* direct links of alltoall open for the job on this node */
    uint64_t pair_bytes; /* payload moved over them, both ways, in all generations */
} rd_world_status;

/* An op some ranks submitted long ago (past --stall-warn) and others never did. */
typedef struct {
    const char *name;
    uint64_t age_ms;
    char missing[RD_STATUS_MISSING_MAX]; /* "ranks 2-3 (node n1)" */
} rd_stall_status;

/* One job of this node. Arrays are malloc'd and released with the status. */
typedef struct {
    const char *name;
    uint32_t uid; /* whose it is: only that user's processes join it */
    uint32_t world_size, local_size, min_size;
    uint32_t size;    /* ranks at its generation, every node's */
    uint32_t clients; /* local clients joined */
    uint64_t generation;
    uint64_t ops_in_flight, ops_completed, ops_failed;
    const char **pending; /* npending names of tensors waiting for local ranks */
    size_t npending;
    rd_stall_status *stalls; /* nstalls */
    size_t nstalls;
    rd_world_status *ring; /* NULL: the job has no ring (one node without --redis) */
} rd_job_status;

/* One client connection that joined a job. */
typedef struct {
    const char *job;
    uint32_t pid, uid;
    uint32_t local_rank;
    uint64_t ops_in_flight, ops_completed;
    uint64_t arena_size;
    int32_t device; /* the CUDA device it was given; -1: none (host memory only) */
} rd_client_status;

/* A GPU the daemon serves. */
typedef struct {
    uint32_t index; /* the CUDA device index */
    const char *name;
    const char *uuid;       /* "GPU-..." */
    uint64_t memory;        /* total bytes */
    uint32_t clients;       /* sessions given this device */
    uint64_t bytes_reduced; /* bytes collectives wrote into device arenas on it */
    uint64_t arena_bytes;   /* device arena bytes its sessions hold */
} rd_device_status;

typedef struct {
    const char *version;
    uint32_t pid;
    uint64_t uptime_ms;
    uint64_t ops_in_flight, ops_completed, ops_failed, bytes_reduced;
    uint64_t ring_passes; /* collectives run on rings, a fused group counting once */
    uint64_t ring_ops;    /* ops those passes carried */
    uint64_t control_sent, control_bytes_sent; /* control messages to other nodes, their bytes */
    uint64_t keepalives_sent;                  /* keepalives on the same links */
    const char *node;
    const char *listen; /* the address peers connect to */
    const char *redis;  /* NULL or "" without --redis */
    int redis_connected;
    int64_t redis_rtt_us;      /* the last rendezvous command's round trip; -1: none */
    const char *metrics;       /* the address serving /metrics ("": none) */
    int draining;              /* ringctl drain or SIGTERM: leaving every job */
    uint32_t drain_timeout_ms; /* --drain-timeout */
    rd_job_status *jobs;       /* njobs, malloc'd */
    size_t njobs;
    rd_client_status *clients; /* nclients, malloc'd */
    size_t nclients;
    rd_device_status *devices; /* ndevices, malloc'd */
    size_t ndevices;
    const char *devices_why; /* none served: why */
} rd_daemon_status;

/* An empty status (zeroed), owned by the caller: rd_daemon_status_free. NULL when out of memory. */
rd_daemon_status *rd_daemon_status_new(void);

/* Frees s and every array hanging from it (jobs and theirs, rings, clients); a partly filled
 * status is freed alike. NULL is a no-op. */
void rd_daemon_status_free(rd_daemon_status *s);

struct Ringd__StatusReply;

/* The StatusReply of s, to send: owned by the caller (rd_report_reply_free) and borrowing every
 * string of s, so valid while s is. NULL when out of memory. */
struct Ringd__StatusReply *rd_report_reply_new(const rd_daemon_status *s);

/* Frees a reply of rd_report_reply_new (never one that rd_frame_decode made). NULL is a no-op. */
void rd_report_reply_free(struct Ringd__StatusReply *r);

#endif
