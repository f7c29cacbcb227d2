/* Prometheus metrics: the exposition, the HTTP endpoint and the admin request. */
#include "prometheus.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "front.h"
#include "log.h"
#include "metrics.h"
#include "report.h"
#include "ringd_build.h"
#include "session.h"
#include "status_request.h"

#define RD_PROM_HTTP_TIMEOUT_S 10 /* a connection idle this long mid-request is dropped */
#define RD_PROM_HEADERS_MAX 8192

struct rd_prom_http {
    rd_front *f;
    struct evhttp *http;
    struct evconnlistener *listener; /* evhttp's */
    struct event *ev_resume;         /* accepting again after a failed accept */
    struct rd_prom_http *next;       /* in servers */
};

/* Every server, to find one by its listener: the listener's callback argument is evhttp's. */
static rd_prom_http *servers;

/* The short names of rd_status, as the result label says them. */
static const char *const result_names[RINGD_RESULT_COUNT] = {
    "ok",         "invalid", "connect", "protocol", "timeout", "mismatch",
    "membership", "nomem",   "stalled", "closed",   "system",  "refused"};

/* ---- the exposition ---- */

/* Writes s into buf as a label value: backslash, double quote and newline escaped. */
static void label_escape(char *buf, size_t len, const char *s)
{
    size_t n = 0;
    for (; s != NULL && *s != '\0' && n + 3 < len; s++) {
        if (*s == '\\' || *s == '"')
            buf[n++] = '\\';
        if (*s == '\n') {
            buf[n++] = '\\';
            buf[n++] = 'n';
            continue;
        }
        buf[n++] = *s;
    }
    buf[n] = '\0';
}

/* The exposition under way: out, and whether any append failed. */
typedef struct {
    struct evbuffer *out;
    int failed;
} expo;

static void put(expo *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(expo *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (evbuffer_add_vprintf(x->out, fmt, ap) < 0)
        x->failed = 1;
    va_end(ap);
}

/* A family's HELP and TYPE lines. */
static void family(expo *x, const char *name, const char *type, const char *help)
{
    put(x, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A double as the format writes it. */
static void put_double(expo *x, double v)
{
    if (v != v)
        put(x, "NaN");
    else
        put(x, "%.17g", v);
}

/* One histogram's series: name_bucket for each bound (cumulative) and +Inf, _sum, _count, with
 * labels (already escaped, "" for none). */
static void histogram(expo *x, const char *name, const char *labels, const rd_histogram *h,
                      const double *bounds, size_t n)
{
    const char *sep = labels[0] != '\0' ? "," : "";
    uint64_t cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += h->bucket[i];
        put(x, "%s_bucket{%s%sle=\"%.9g\"} %" PRIu64 "\n", name, labels, sep, bounds[i], cum);
    }
    put(x, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, h->count);
    put(x, "%s_sum{%s} ", name, labels);
    put_double(x, h->sum);
    put(x, "\n%s_count{%s} %" PRIu64 "\n", name, labels, h->count);
}

/* The daemon-wide series: what it is, its clients, Redis, its GPUs. */
static void daemon_series(expo *x, const rd_front *f, const rd_daemon_status *st)
{
    char node[600], v[64];
    label_escape(node, sizeof(node), st->node);
    label_escape(v, sizeof(v), st->version);
    family(x, "ringd_build_info", "gauge", "ringd's version and node name (always 1)");
    put(x, "ringd_build_info{version=\"%s\",node=\"%s\"} 1\n", v, node);
    family(x, "ringd_uptime_seconds", "gauge", "Seconds since the daemon started");
    put(x, "ringd_uptime_seconds %.3f\n", (double)st->uptime_ms / 1e3);
    family(x, "ringd_draining", "gauge", "1 while the daemon drains (ringctl drain, SIGTERM)");
    put(x, "ringd_draining %d\n", st->draining != 0);
    family(x, "ringd_connections", "gauge",
           "Connections to the daemon's socket: clients, and ringctl queries");
    put(x, "ringd_connections %u\n", f->nsessions);
    family(x, "ringd_control_messages_sent_total", "counter",
           "Control messages sent to other nodes on the rings' control links, every job's "
           "(announcements, orders, Bye, errors; keepalives aside)");
    put(x, "ringd_control_messages_sent_total %" PRIu64 "\n", st->control_sent);
    family(x, "ringd_control_bytes_sent_total", "counter",
           "Bytes of those control messages, framing included");
    put(x, "ringd_control_bytes_sent_total %" PRIu64 "\n", st->control_bytes_sent);
    family(x, "ringd_keepalives_sent_total", "counter",
           "Keepalives sent on the rings' control links (not in the control messages above)");
    put(x, "ringd_keepalives_sent_total %" PRIu64 "\n", st->keepalives_sent);
    if (st->redis != NULL && st->redis[0] != '\0') {
        family(x, "ringd_redis_up", "gauge", "1 while the connection to Redis is up");
        put(x, "ringd_redis_up %d\n", st->redis_connected != 0);
        if (st->redis_rtt_us >= 0) {
            family(x, "ringd_redis_rtt_seconds", "gauge",
                   "Round trip of the last rendezvous command (Redis running its script included)");
            put(x, "ringd_redis_rtt_seconds %.6f\n", (double)st->redis_rtt_us / 1e6);
        }
    }
    if (st->ndevices == 0)
        return;
    family(x, "ringd_gpu_bytes_total", "counter",
           "Bytes collectives wrote into device arenas, by CUDA device");
    for (size_t i = 0; i < st->ndevices; i++)
        put(x, "ringd_gpu_bytes_total{device=\"%u\"} %" PRIu64 "\n", st->devices[i].index,
            st->devices[i].bytes_reduced);
    family(x, "ringd_gpu_clients", "gauge", "Sessions given each CUDA device");
    for (size_t i = 0; i < st->ndevices; i++)
        put(x, "ringd_gpu_clients{device=\"%u\"} %u\n", st->devices[i].index,
            st->devices[i].clients);
    family(x, "ringd_device_arena_bytes", "gauge", "Device arena bytes sessions hold, by device");
    for (size_t i = 0; i < st->ndevices; i++)
        put(x, "ringd_device_arena_bytes{device=\"%u\"} %" PRIu64 "\n", st->devices[i].index,
            st->devices[i].arena_bytes);
}

/* The gauges of the jobs running here now, and their rings' links. */
static void job_gauges(expo *x, const rd_daemon_status *st)
{
    char job[600], peer[600];
    family(x, "ringd_job_generation", "gauge", "The job's membership generation on this node");
    for (size_t i = 0; i < st->njobs; i++) {
        label_escape(job, sizeof(job), st->jobs[i].name);
        put(x, "ringd_job_generation{job=\"%s\"} %" PRIu64 "\n", job, st->jobs[i].generation);
    }
    family(x, "ringd_job_ranks", "gauge", "Ranks of the job at its generation, every node's");
    for (size_t i = 0; i < st->njobs; i++) {
        label_escape(job, sizeof(job), st->jobs[i].name);
        put(x, "ringd_job_ranks{job=\"%s\"} %u\n", job, st->jobs[i].size);
    }
    family(x, "ringd_clients", "gauge", "The job's local clients on this node");
    for (size_t i = 0; i < st->njobs; i++) {
        label_escape(job, sizeof(job), st->jobs[i].name);
        put(x, "ringd_clients{job=\"%s\"} %u\n", job, st->jobs[i].clients);
    }
    family(x, "ringd_arena_bytes", "gauge", "Shared-memory arena bytes the job's clients hold");
    for (size_t i = 0; i < st->njobs; i++) {
        uint64_t bytes = 0;
        for (size_t c = 0; c < st->nclients; c++)
            if (st->clients[c].job == st->jobs[i].name)
                bytes += st->clients[c].arena_size;
        label_escape(job, sizeof(job), st->jobs[i].name);
        put(x, "ringd_arena_bytes{job=\"%s\"} %" PRIu64 "\n", job, bytes);
    }
    family(x, "ringd_ops_in_flight", "gauge", "The job's collectives submitted and not yet ended");
    for (size_t i = 0; i < st->njobs; i++) {
        label_escape(job, sizeof(job), st->jobs[i].name);
        put(x, "ringd_ops_in_flight{job=\"%s\"} %" PRIu64 "\n", job, st->jobs[i].ops_in_flight);
    }
    family(x, "ringd_stalled_ops", "gauge",
           "The job's ops waiting longer than --stall-warn for ranks that have not submitted them");
    for (size_t i = 0; i < st->njobs; i++) {
        label_escape(job, sizeof(job), st->jobs[i].name);
        put(x, "ringd_stalled_ops{job=\"%s\"} %zu\n", job, st->jobs[i].nstalls);
    }
    static const struct {
        const char *name, *type, *help;
    } links[] = {
        {"ringd_link_bytes_total", "counter",
         "Payload bytes over the ring's link to (send) or from (recv) a neighbour; starts again "
         "at 0 when the ring re-forms"},
        {"ringd_link_throughput_bytes_per_second", "gauge",
         "The link's payload bytes per second over the last sampling interval"},
        {"ringd_link_connections", "gauge", "TCP connections of the link"},
    };
    for (size_t m = 0; m < sizeof(links) / sizeof(links[0]); m++) {
        family(x, links[m].name, links[m].type, links[m].help);
        for (size_t i = 0; i < st->njobs; i++) {
            const rd_world_status *r = st->jobs[i].ring;
            label_escape(job, sizeof(job), st->jobs[i].name);
            for (size_t k = 0; r != NULL && k < r->nlinks; k++) {
                const rd_link_status *l = &r->links[k];
                label_escape(peer, sizeof(peer), l->peer);
                put(x, "%s{job=\"%s\",peer=\"%s\",direction=\"%s\"} ", links[m].name, job, peer,
                    l->direction);
                if (m == 0)
                    put(x, "%" PRIu64 "\n", l->bytes);
                else if (m == 1)
                    put(x, "%.1f\n", l->throughput_bps);
                else
                    put(x, "%u\n", l->conns);
            }
        }
    }
}

/* The series each job keeps (those that ended here recently too). */
static void job_series(expo *x, rd_metrics *reg)
{
    char job[600], labels[800];
    family(x, "ringd_ops_total", "counter",
           "Collectives that ended on this node, by kind and result");
    for (const rd_job_metrics *jm = rd_metrics_jobs(reg); jm != NULL; jm = jm->next) {
        label_escape(job, sizeof(job), jm->name);
        for (unsigned k = 0; k < RD_METRICS_KINDS; k++)
            for (unsigned r = 0; r < RINGD_RESULT_COUNT; r++)
                if (r == RINGD_OK || jm->ops[k][r] > 0)
                    put(x, "ringd_ops_total{job=\"%s\",kind=\"%s\",result=\"%s\"} %" PRIu64 "\n",
                        job, rd_coll_name((rd_coll)k), result_names[r], jm->ops[k][r]);
    }
    family(x, "ringd_bytes_total", "counter",
           "Bytes collectives wrote into the clients' arenas on this node, by kind");
    for (const rd_job_metrics *jm = rd_metrics_jobs(reg); jm != NULL; jm = jm->next) {
        label_escape(job, sizeof(job), jm->name);
        for (unsigned k = 0; k < RD_COLL_BARRIER; k++) /* a barrier (the last) moves no bytes */
            put(x, "ringd_bytes_total{job=\"%s\",kind=\"%s\"} %" PRIu64 "\n", job,
                rd_coll_name((rd_coll)k), jm->bytes[k]);
    }
    family(x, "ringd_op_duration_seconds", "histogram",
           "Collectives from their first submission on this node to their end, by kind and size "
           "per rank");
    for (const rd_job_metrics *jm = rd_metrics_jobs(reg); jm != NULL; jm = jm->next) {
        label_escape(job, sizeof(job), jm->name);
        for (unsigned k = 0; k < RD_METRICS_KINDS; k++)
            for (unsigned c = 0; c < RD_METRICS_SIZES; c++) {
                if (jm->latency[k][c].count == 0)
                    continue;
                snprintf(labels, sizeof(labels), "job=\"%s\",kind=\"%s\",size=\"%s\"", job,
                         rd_coll_name((rd_coll)k), rd_metrics_size_names[c]);
                histogram(x, "ringd_op_duration_seconds", labels, &jm->latency[k][c],
                          rd_metrics_latency_bounds, RD_METRICS_LATENCY_BUCKETS);
            }
    }
    static const struct {
        const char *name, *help;
        size_t offset; /* of the rd_histogram in rd_job_metrics */
        const double *bounds;
        size_t n;
    } per_job[] = {
        {"ringd_negotiation_wait_seconds",
         "From every local rank having submitted a collective to the nodes agreeing on it",
         offsetof(rd_job_metrics, negotiation), rd_metrics_latency_bounds,
         RD_METRICS_LATENCY_BUCKETS},
        {"ringd_ring_pass_ops", "Ops per ring pass: more than one when small allreduces fuse",
         offsetof(rd_job_metrics, pass_ops), rd_metrics_pass_bounds, RD_METRICS_PASS_BUCKETS},
    };
    for (size_t i = 0; i < sizeof(per_job) / sizeof(per_job[0]); i++) {
        family(x, per_job[i].name, "histogram", per_job[i].help);
        for (const rd_job_metrics *jm = rd_metrics_jobs(reg); jm != NULL; jm = jm->next) {
            label_escape(job, sizeof(job), jm->name);
            snprintf(labels, sizeof(labels), "job=\"%s\"", job);
            histogram(x, per_job[i].name, labels,
                      (const rd_histogram *)((const char *)jm + per_job[i].offset),
                      per_job[i].bounds, per_job[i].n);
        }
    }
    family(x, "ringd_membership_changes_total", "counter",
           "Changes of the job's ring seen on this node, by cause (start, join, leave: fewer ranks "
           "gracefully, shrink: fewer and clients re-synchronise, reform: as many)");
    for (const rd_job_metrics *jm = rd_metrics_jobs(reg); jm != NULL; jm = jm->next) {
        label_escape(job, sizeof(job), jm->name);
        for (unsigned c = 0; c < RD_CHANGE_CAUSES; c++)
            put(x, "ringd_membership_changes_total{job=\"%s\",cause=\"%s\"} %" PRIu64 "\n", job,
                rd_change_cause_names[c], jm->changes[c]);
    }
    family(x, "ringd_stall_warnings_total", "counter",
           "Ops that waited past --stall-warn for ranks that had not submitted them");
    for (const rd_job_metrics *jm = rd_metrics_jobs(reg); jm != NULL; jm = jm->next) {
        label_escape(job, sizeof(job), jm->name);
        put(x, "ringd_stall_warnings_total{job=\"%s\"} %" PRIu64 "\n", job, jm->stall_warnings);
    }
    family(x, "ringd_stall_aborts_total", "counter",
           "Ops that failed with RINGD_E_STALLED (--stall-abort)");
    for (const rd_job_metrics *jm = rd_metrics_jobs(reg); jm != NULL; jm = jm->next) {
        label_escape(job, sizeof(job), jm->name);
        put(x, "ringd_stall_aborts_total{job=\"%s\"} %" PRIu64 "\n", job, jm->stall_aborts);
    }
}

int rd_prom_text(rd_front *f, struct evbuffer *out)
{
    expo x = {.out = out};
    rd_daemon_status *st = rd_front_status_new(f);
    if (st == NULL)
        return -1;
    daemon_series(&x, f, st);
    job_gauges(&x, st);
    if (f->metrics != NULL)
        job_series(&x, f->metrics);
    rd_daemon_status_free(st);
    return x.failed ? -1 : 0;
}

/* ---- HTTP ---- */

/* GET (or HEAD) /metrics: the exposition; anything else a 404 or 405 with a line saying why. */
static void on_request(struct evhttp_request *req, void *arg)
{
    rd_prom_http *h = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
    struct evbuffer *body = evbuffer_new();
    struct evkeyvalq *headers = evhttp_request_get_output_headers(req);
    if (body == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    if (path == NULL || (strcmp(path, "/metrics") != 0 && strcmp(path, "/") != 0)) {
        evhttp_add_header(headers, "Content-Type", "text/plain; charset=utf-8");
        evbuffer_add_printf(body, "ringd serves Prometheus metrics at /metrics\n");
        evhttp_send_reply(req, HTTP_NOTFOUND, "Not Found", body);
    } else if (strcmp(path, "/") == 0) {
        evhttp_add_header(headers, "Content-Type", "text/html; charset=utf-8");
        evbuffer_add_printf(body, "<html><body><a href=\"/metrics\">ringd metrics</a></body>"
                                  "</html>\n");
        evhttp_send_reply(req, HTTP_OK, "OK", body);
    } else if (rd_prom_text(h->f, body) != 0) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory building the metrics");
    } else {
        evhttp_add_header(headers, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        evhttp_send_reply(req, HTTP_OK, "OK", body);
    }
    evbuffer_free(body);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    rd_prom_http *h = arg;
    (void)fd;
    (void)what;
    evconnlistener_enable(h->listener);
}

/* EMFILE and friends (connections hold every fd): the pending connection stays readable, so
 * accepting again at once would spin the loop every job runs on. Pause, then retry. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    rd_prom_http *h = servers;
    (void)arg;
    while (h != NULL && h->listener != l)
        h = h->next;
    if (h == NULL)
        return;
    struct timeval pause = {0, 250 * 1000};
    rd_log(RD_LOG_WARN, "metrics", "accept on %s: %s; pausing 250 ms", h->f->metrics_address,
           strerror(errno));
    evconnlistener_disable(l);
    evtimer_add(h->ev_resume, &pause);
}

/* Splits "HOST:PORT" or "[V6]:PORT" into host and port. Returns 0, or -1. */
static int split_address(const char *a, char *host, size_t hlen, int *port)
{
    const char *colon = strrchr(a, ':');
    if (colon == NULL || colon == a)
        return -1;
    const char *h = a, *he = colon;
    if (a[0] == '[') {
        if (colon[-1] != ']')
            return -1;
        h = a + 1;
        he = colon - 1;
    }
    if ((size_t)(he - h) >= hlen || he == h)
        return -1;
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || p < 0 || p > 65535)
        return -1;
    *port = (int)p;
    return 0;
}

rd_prom_http *rd_prom_http_new(rd_front *f, const char *listen, char *err, size_t errlen)
{
    char host[128];
    int port;
    if (split_address(listen, host, sizeof(host), &port) != 0) {
        snprintf(err, errlen, "--metrics-listen %s: not HOST:PORT", listen);
        return NULL;
    }
    rd_prom_http *h = calloc(1, sizeof(*h));
    if (h == NULL || (h->http = evhttp_new(f->base)) == NULL) {
        free(h);
        snprintf(err, errlen, "--metrics-listen %s: out of memory", listen);
        return NULL;
    }
    h->f = f;
    evhttp_set_timeout(h->http, RD_PROM_HTTP_TIMEOUT_S);
    evhttp_set_max_headers_size(h->http, RD_PROM_HEADERS_MAX);
    evhttp_set_max_body_size(h->http, 0);
    evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_gencb(h->http, on_request, h);
    errno = 0;
    struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(h->http, host, (uint16_t)port);
    if (bs == NULL) {
        snprintf(err, errlen, "--metrics-listen %s: %s", listen,
                 errno != 0 ? strerror(errno) : "cannot bind");
        rd_prom_http_free(h);
        return NULL;
    }
    h->listener = evhttp_bound_socket_get_listener(bs);
    if ((h->ev_resume = evtimer_new(f->base, on_resume, h)) == NULL) {
        snprintf(err, errlen, "--metrics-listen %s: out of memory", listen);
        rd_prom_http_free(h);
        return NULL;
    }
    evconnlistener_set_error_cb(h->listener, on_accept_error);
    h->next = servers;
    servers = h;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t sl = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int bound = port;
    if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
            bound = ntohs(in->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
            bound = ntohs(in6->sin6_port);
        }
    }
    snprintf(f->metrics_address, sizeof(f->metrics_address),
             ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip, bound);
    rd_log(RD_LOG_INFO, "metrics", "Prometheus metrics at http://%s/metrics", f->metrics_address);
    return h;
}

void rd_prom_http_free(rd_prom_http *h)
{
    if (h == NULL)
        return;
    for (rd_prom_http **pp = &servers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    }
    if (h->http != NULL)
        evhttp_free(h->http);
    if (h->ev_resume != NULL)
        event_free(h->ev_resume);
    free(h);
}

/* ---- ringctl metrics ---- */

void rd_prom_request(rd_session *s, const rd_msg *req)
{
    (void)req;
    struct evbuffer *b = evbuffer_new();
    if (b == NULL || rd_prom_text(s->f, b) != 0 || evbuffer_add(b, "", 1) != 0) {
        if (b != NULL)
            evbuffer_free(b);
        rd_session_close(s, RINGD_E_NOMEM, "cannot build the metrics");
        return;
    }
    Ringd__MetricsReply r = RINGD__METRICS_REPLY__INIT;
    r.text = (char *)evbuffer_pullup(b, -1);
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_METRICS_REPLY;
    m.metrics_reply = &r;
    if (r.text != NULL)
        rd_session_send(s, &m);
    else
        rd_session_close(s, RINGD_E_NOMEM, "cannot build the metrics");
    evbuffer_free(b);
}
