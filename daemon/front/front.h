/* The front's shared state: the client connections, the engine they talk to, and the table of
 * admin requests (status, drain, metrics, timeline) that main wires in. Loop thread only. */
#ifndef RD_FRONT_H
#define RD_FRONT_H

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "config.h"
#include "counters.h"
#include "devices.h"
#include "frame.h"
#include "job.h"
#include "metrics.h"
#include "world.h"

struct event_base;
struct rd_session;
struct rd_drain;
struct rd_recording;

/* Answers one admin request m (its body is the handler's body_case) on connection s. */
typedef void (*rd_admin_fn)(struct rd_session *s, const rd_msg *m);

typedef struct {
    int body_case; /* RINGD__MSG__BODY_* of the request */
    rd_admin_fn handle;
} rd_admin_handler;

typedef struct rd_front {
    struct event_base *base;
    const rd_config *cfg;
    const rd_devices *devices; /* the GPUs served (none: host memory only) */
    rd_counters *counters;
    rd_metrics *metrics; /* the jobs' series; NULL: none */
    rd_engine *engine;
    rd_net *net;                 /* NULL without --redis */
    struct timespec started;     /* CLOCK_MONOTONIC */
    struct rd_session *sessions; /* every open connection */
    unsigned nsessions;
    const rd_admin_handler *admin; /* admin requests a connection may send */
    size_t nadmin;
    /* A connection goes away: the admin handlers drop what they hold of it. */
    void (*forget)(struct rd_front *f, struct rd_session *s);
    struct rd_drain *drain;          /* the drain under way */
    struct rd_recording *recordings; /* ringctl timeline recordings under way */
    char metrics_address[128];       /* where /metrics is served ("": nowhere) */
    int has_admin_gid;               /* --admin-group was given: admin_gid is its group */
    gid_t admin_gid;
} rd_front;

#endif
