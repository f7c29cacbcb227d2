/* Daemon options: one table drives flag parsing, RINGD_* environment variables, --help, the
 * ringd(8) page and the start-up dump. */
#ifndef RD_CONFIG_H
#define RD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

#define RD_PATH_MAX 108 /* sun_path */

typedef struct {
    char socket_path[RD_PATH_MAX];
    uint64_t arena_size;       /* default arena bytes per client */
    uint64_t arena_max;        /* largest arena a client may ask for */
    uint64_t device_arena_max; /* largest device arena a client may ask for; 0: none */
    uint64_t max_frame;        /* largest control message accepted */
    uint64_t inline_bytes;     /* ops moving fewer bytes run on the event loop */
    int64_t threads;           /* data-path worker threads */
    int64_t log_level;
    int64_t max_clients;
    int64_t poll_us;      /* keep polling the control queues this long after activity */
    int64_t max_pending;  /* collectives one client may have outstanding */
    int64_t handshake_ms; /* a connection must say what it is within this */

    /* Multi-node: empty redis_url means a one-node ring. */
    char redis_url[256];
    char redis_password_file[256];
    char listen[128];    /* HOST:PORT for peers; port 0 picks one */
    char advertise[128]; /* what peers are told; empty: the bound listen address */
    char node[257];      /* this node's name in the ring; empty: the host name */
    char key_file[256];
    char admin_group[65];      /* --admin-group: name or number; empty: none */
    int64_t insecure;          /* run without a ring key */
    int64_t encrypt;           /* seal every daemon link */
    int64_t lease_ttl;         /* ms */
    uint64_t direct_bytes;     /* results up to this go through the coordinator */
    uint64_t doubling_bytes;   /* allreduces, broadcasts, allgathers up to this by doubling */
    uint64_t fusion_threshold; /* bytes */
    uint64_t segment_size;     /* bytes per ring frame */
    int64_t fusion_cycle_us;   /* the coordinator orders at most this often; 0: each loop turn */
    int64_t conns_per_link;
    int64_t pair_links;         /* direct links for alltoall, every job's together */
    int64_t autotune;           /* the coordinator tunes the four above on the running job */
    int64_t autotune_window_ms; /* each setting is measured this long */
    int64_t peer_timeout;       /* ms without progress on a link before it counts as failed */
    int64_t stall_warn;         /* ms an op may wait for some ranks before a warning */
    int64_t stall_abort;        /* ms before it fails with RINGD_E_STALLED; 0: never */
    int64_t drain_timeout;      /* ms a drain waits for ops under way */

    char devices[256];     /* the GPUs served: all, none, or indices ("0,2"); see gpu/devices.h */
    int64_t gpu_transport; /* device ops across nodes: RD_GPU_TRANSPORT_* */

    char metrics_listen[128]; /* HOST:PORT of the Prometheus endpoint; empty: none */
    int64_t timeline_max_ops; /* ops a timeline recording keeps */
} rd_config;

/* --gpu-transport: how device ops cross nodes (values as DevOffer carries them). */
typedef enum {
    RD_GPU_TRANSPORT_AUTO = 0, /* NCCL when every node can and passes device memory, else TCP */
    RD_GPU_TRANSPORT_NCCL = 1, /* NCCL or a clear error */
    RD_GPU_TRANSPORT_TCP = 2,  /* the TCP ring, through the host */
} rd_gpu_transport;

typedef enum {
    RD_CONFIG_RUN = 0,  /* options parsed: start the daemon */
    RD_CONFIG_EXIT = 1, /* --help, --version or --man printed: exit 0 */
    RD_CONFIG_ERROR = 2 /* err holds the reason: exit 2 */
} rd_config_result;

/* Fills cfg from defaults, then the environment (envp, NULL-terminated "NAME=value" strings),
 * then argv. Prints --help / --version to out, and --man (hidden: the build's ringd(8) page, in
 * roff, from the same table as --help). */
rd_config_result rd_config_parse(rd_config *cfg, int argc, char **argv, char **envp, FILE *out,
                                 char *err, size_t errlen);

/* Logs every option and its value at info level. */
void rd_config_dump(const rd_config *cfg);

#endif
