/* ringd: parses options and wires the layers to one event loop: the front (listener, sessions,
 * admin requests) over the engine (jobs) over the network (rings, rendezvous) over the core. */
#include <event2/event.h>
#include <event2/thread.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ringd_build.h"
#include "admin.h"
#include "backend.h"
#include "config.h"
#include "counters.h"
#include "devices.h"
#include "drain.h"
#include "exec.h"
#include "job.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "prometheus.h"
#include "session.h"
#include "timeline_request.h"
#include "world.h"

extern char **environ;

/* One line per GPU this daemon serves, or one saying why it serves none (no driver, no device, a
 * build without CUDA, --devices none): the driver is loaded at run time, so its absence is a
 * line in the log, not a failed start. */
static void log_devices(const rd_devices *dv)
{
    if (dv->n == 0)
        rd_log(dv->troubled ? RD_LOG_WARN : RD_LOG_INFO, "gpu",
               "no GPU served (%s): clients use host memory", dv->why);
    else if (dv->why[0] != '\0')
        rd_log(RD_LOG_WARN, "gpu", "%s", dv->why);
    for (int i = 0; i < dv->n; i++)
        rd_log(RD_LOG_INFO, "gpu", "CUDA device %d: %s, %.1f GiB", dv->dev[i].index,
               dv->dev[i].name, (double)dv->dev[i].memory / (1u << 30));
}

/* libevent's own warnings (a failed accept, a bad HTTP request) go to ringd's log. */
static void on_libevent_log(int severity, const char *msg)
{
    rd_log(severity >= EVENT_LOG_ERR    ? RD_LOG_ERROR
           : severity == EVENT_LOG_WARN ? RD_LOG_WARN
                                        : RD_LOG_DEBUG,
           "libevent", "%s", msg);
}

/* Raises the soft limit on open files to the hard one, as servers do: clients, peers' links and
 * metrics connections each hold one, and running out stops accepting any of them. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            rd_log(RD_LOG_DEBUG, "main", "open files: %llu (was %llu)",
                   (unsigned long long)rl.rlim_cur, (unsigned long long)was);
    }
}

/* NCCL picks the interface of its sockets once per process, at its first call: the one peers
 * reach this node on (--advertise), chosen here, before any thread that may read the
 * environment, unless the operator chose one (NCCL_SOCKET_IFNAME). */
static void transport_setup(const rd_net *net)
{
    const rd_backend *b = rd_backend_cuda();
    char ifname[64], err[256];
    if (b == NULL || b->transport == NULL || rd_net_interface(net, ifname, sizeof(ifname)) != 0)
        return;
    int rc = b->transport->setup(ifname, err, sizeof(err));
    if (rc > 0)
        rd_log(RD_LOG_INFO, "main", "NCCL's sockets use interface %s (--advertise %s)", ifname,
               rd_net_address(net));
    else if (rc < 0)
        rd_log(RD_LOG_WARN, "main", "NCCL's sockets: %s", err);
}

/* The daemon: one of each layer's contexts, and what they share. */
typedef struct {
    rd_config cfg;
    rd_devices devices;
    rd_counters counters;
    rd_metrics *metrics;
    struct event_base *base;
    rd_exec *exec;
    rd_net *net; /* NULL without --redis */
    rd_engine *engine;
    rd_front front;
    int has_admin_gid; /* --admin-group, resolved */
    gid_t admin_gid;
    int terms; /* SIGTERMs so far */
} rd_daemon;

static void on_accept(int fd, void *arg)
{
    rd_session_accept(&((rd_daemon *)arg)->front, fd);
}

/* The event loop, with the clients' control queues polled between turns: while messages keep
 * coming (within --poll-us of the last one) it neither sleeps nor holds the CPU from the
 * clients it waits for (sched_yield); once idle it tells the clients to Poke the socket and
 * sleeps in the event loop. Returns -1 if the event loop failed. */
static int run_loop(rd_daemon *d)
{
    int64_t last = rd_now_us();
    uint64_t seen = d->counters.activity;
    while (!event_base_got_break(d->base)) {
        int rc;
        if (rd_session_poll_queues(&d->front) > 0 || d->counters.activity != seen) {
            seen = d->counters.activity;
            last = rd_now_us();
        }
        if (rd_now_us() - last < d->cfg.poll_us) {
            rc = event_base_loop(d->base, EVLOOP_NONBLOCK);
            sched_yield();
        } else if (rd_session_prepare_sleep(&d->front)) {
            rc = event_base_loop(d->base, EVLOOP_ONCE);
            rd_session_wake(&d->front);
            last = rd_now_us();
        } else {
            continue;
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* SIGINT: stop now. SIGTERM (a pod going away): drain first, so the other nodes go on without a
 * failed op; a second SIGTERM stops at once. */
static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    rd_daemon *d = arg;
    (void)what;
    /* Also after ringctl drain (a pod's preStop): the daemon ends once that drain is done and
     * its left rings no longer need it to pass messages on. */
    if (sig == SIGTERM && d->terms++ == 0) {
        rd_log(RD_LOG_INFO, "main", "SIGTERM: %s, then shutting down",
               rd_engine_draining(d->engine) ? "finishing the drain under way" : "draining");
        if (rd_drain_start(&d->front, NULL, d->cfg.drain_timeout, 1) == 0)
            return;
    }
    rd_log(RD_LOG_INFO, "main", "signal %d: shutting down", (int)sig);
    event_base_loopbreak(d->base);
}

/* Reads the options into d->cfg, opens the devices it names and sets up the process (signals,
 * libevent's log, file limits, malloc). Returns -1 to run, else the exit code (--help: 0, a bad
 * option or device: 2, said on stderr). */
static int configure(rd_daemon *d, int argc, char **argv)
{
    char err[512];
    switch (rd_config_parse(&d->cfg, argc, argv, environ, stdout, err, sizeof(err))) {
    case RD_CONFIG_EXIT: return 0;
    case RD_CONFIG_ERROR: fprintf(stderr, "ringd: %s\n", err); return 2;
    case RD_CONFIG_RUN: break;
    }
    rd_log_set_level((rd_log_level)d->cfg.log_level);
    if (d->cfg.admin_group[0] != '\0') {
        if (rd_session_group(d->cfg.admin_group, &d->admin_gid, err, sizeof(err)) != 0) {
            fprintf(stderr, "ringd: %s\n", err);
            return 2;
        }
        d->has_admin_gid = 1;
    }
    if (rd_devices_open(&d->devices, d->cfg.devices, err, sizeof(err)) != 0) {
        fprintf(stderr, "ringd: %s\n", err);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    event_set_log_callback(on_libevent_log);
    raise_fd_limit();
    /* Buffers made per op (fused passes, direct results, frames) of 128 KiB and more would each
     * be a fresh mmap, faulted in page by page and unmapped again at free; a profile of 256 KiB
     * ops across nodes spent a third of its time in those faults. Keep them in the heap for
     * reuse, up to malloc's largest threshold (32 MiB), and give memory back above 256 MiB. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return -1;
}

int main(int argc, char **argv)
{
    rd_daemon d;
    char err[512];
    int rc = rd_backend_helper_main(argc, argv); /* ringd started as a backend's helper */
    rd_listener *l = NULL;
    rd_prom_http *http = NULL;
    struct event *ev_term = NULL, *ev_int = NULL;

    if (rc >= 0)
        return rc;
    memset(&d, 0, sizeof(d));
    if ((rc = configure(&d, argc, argv)) >= 0)
        return rc;
    rc = 1;

    d.base = event_base_new();
    if (d.base == NULL) {
        rd_log(RD_LOG_ERROR, "main", "event_base_new failed");
        return 1;
    }
    if (d.cfg.redis_url[0] != '\0') {
        if ((d.net = rd_net_new(d.base, &d.cfg, &d.counters, err, sizeof(err))) == NULL) {
            rd_log(RD_LOG_ERROR, "main", "%s", err);
            goto out;
        }
        transport_setup(d.net); /* before the executor's threads */
    }
    d.exec = rd_exec_new(d.base, (int)d.cfg.threads, err, sizeof(err));
    if (d.exec == NULL) {
        rd_log(RD_LOG_ERROR, "main", "%s", err);
        goto out;
    }
    d.metrics = rd_metrics_new();
    d.engine = d.metrics == NULL ? NULL
                                 : rd_engine_new(d.base, &d.cfg, &d.counters, d.metrics, d.exec,
                                                 d.net, &rd_session_client_events);
    if (d.engine == NULL) {
        rd_log(RD_LOG_ERROR, "main", "out of memory");
        goto out;
    }
    d.front = (rd_front){
        .base = d.base,
        .cfg = &d.cfg,
        .devices = &d.devices,
        .counters = &d.counters,
        .metrics = d.metrics,
        .engine = d.engine,
        .net = d.net,
        .admin = rd_admin_handlers,
        .nadmin = rd_admin_nhandlers,
        .forget = rd_admin_forget,
        .has_admin_gid = d.has_admin_gid,
        .admin_gid = d.admin_gid,
    };
    clock_gettime(CLOCK_MONOTONIC, &d.front.started);
    l = rd_listener_new(d.base, d.cfg.socket_path, on_accept, &d, err, sizeof(err));
    if (l == NULL) {
        rd_log(RD_LOG_ERROR, "main", "%s", err);
        goto out;
    }
    if (d.cfg.metrics_listen[0] != '\0' &&
        (http = rd_prom_http_new(&d.front, d.cfg.metrics_listen, err, sizeof(err))) == NULL) {
        rd_log(RD_LOG_ERROR, "main", "%s", err);
        goto out;
    }
    ev_term = evsignal_new(d.base, SIGTERM, on_signal, &d);
    ev_int = evsignal_new(d.base, SIGINT, on_signal, &d);
    if (ev_term == NULL || ev_int == NULL || event_add(ev_term, NULL) != 0 ||
        event_add(ev_int, NULL) != 0) {
        rd_log(RD_LOG_ERROR, "main", "cannot install signal handlers");
        goto out;
    }
    rd_log(RD_LOG_INFO, "main", "ringd %s listening on %s (%s, %d worker threads)", RINGD_VERSION,
           d.cfg.socket_path, d.net != NULL ? "multi-node" : "one-node ring", (int)d.cfg.threads);
    rd_config_dump(&d.cfg);
    log_devices(&d.devices);

    if (run_loop(&d) < 0)
        rd_log(RD_LOG_ERROR, "main", "event loop failed");
    else
        rc = 0;

out:
    rd_prom_http_free(http);
    rd_listener_free(l);
    rd_exec_free(d.exec);
    rd_session_free_all(&d.front);
    rd_drain_free(&d.front);
    rd_tlreq_free_all(&d.front);
    rd_engine_free(d.engine);
    rd_metrics_free(d.metrics);
    rd_net_free(d.net);
    /* One more turn: name lookups cancelled just now report back, and their resolvers go. */
    if (d.base != NULL)
        event_base_loop(d.base, EVLOOP_NONBLOCK);
    if (ev_int != NULL)
        event_free(ev_int);
    if (ev_term != NULL)
        event_free(ev_term);
    event_base_free(d.base);
    rd_log(RD_LOG_INFO, "main", "stopped");
    return rc;
}
