/* ringctl: asks the node's ringd for its status (once, or refreshed in place), its Prometheus
 * metrics, a job's timeline, or to leave its jobs (drain). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chrome_trace.h"
#include "conn.h"
#include "ringd_build.h"

/* Exit codes scripts can rely on. */
enum { EXIT_OK = 0, EXIT_DAEMON = 1, EXIT_USAGE = 2, EXIT_UNCLEAN = 3 };

/* The largest drain timeout accepted: one day. */
#define RD_DRAIN_MAX_MS 86400000

/* One row of ringctl's usage: a global option, a command with its own options, or an exit
 * status. These tables are the one source of `ringctl --help` and of the ringctl(1) page the
 * build writes with the hidden `ringctl --man`. */
typedef struct {
    const char *name; /* "--socket PATH", "drain [--timeout MS] [--json]", "3" */
    const char *help; /* plain text */
} ctl_usage;

#define CTL_SYNOPSIS "[--socket PATH] [--timeout MS] [--json] COMMAND"

static const ctl_usage ctl_options[] = {
    {"--socket PATH", "the daemon's socket (env RINGD_SOCKET, default /run/ringd/ringd.sock)"},
    {"--timeout MS",
     "how long to wait for the daemon's answer (default 5000; for drain, on top of the drain's "
     "own timeout)"},
    {"--json", "print a JSON object"},
    {"--help", "print this help"},
    {"--version", "print the version"},
};

static const ctl_usage ctl_commands[] = {
    {"status [--json]",
     "the daemon, its jobs (rings, stalled tensors), its clients and GPUs; says \"draining\" "
     "while it leaves its jobs"},
    {"watch [--interval MS] [--count N]",
     "status, refreshed in place every MS (default 1000) until interrupted, or N times"},
    {"metrics", "the Prometheus metrics (as ringd --metrics-listen serves them)"},
    {"timeline --job J --seconds N --out FILE",
     "records job J's ops on this node for N seconds (1..3600) and writes them as a Chrome "
     "trace (chrome://tracing, ui.perfetto.dev); FILE - is standard output"},
    {"drain [--timeout MS] [--json]",
     "leave every job gracefully: ops under way finish, new ones are refused, the other nodes "
     "go on without this one; the daemon then keeps running, refusing new clients. MS bounds "
     "the drain (0 or none: the daemon's --drain-timeout, which ringctl asks it for)"},
};

static const ctl_usage ctl_exits[] = {
    {"0", "ok (drain: drained cleanly)"},
    {"1", "daemon unreachable or failing, or it refused (a drain by a user not its admin)"},
    {"2", "usage error"},
    {"3", "drained but not cleanly (ops cut at the timeout; the message says which)"},
};

#define NROWS(t) (sizeof(t) / sizeof(t[0]))

/* Prints rows as "  NAME  help", the help from column col wrapped before column 80, starting
 * on the next line where NAME reaches col. */
static void print_rows(FILE *out, const ctl_usage *rows, size_t n, int col)
{
    for (size_t i = 0; i < n; i++) {
        int at = fprintf(out, "  %s", rows[i].name);
        if (at >= col - 1) {
            fputc('\n', out);
            at = 0;
        }
        for (const char *h = rows[i].help; *h != '\0'; at = 0) {
            size_t take = strlen(h), room = (size_t)(79 - col);
            if (take > room) { /* break at the last space that fits, or the first one */
                take = room;
                while (take > 0 && h[take] != ' ')
                    take--;
                if (take == 0)
                    take = strcspn(h, " ");
            }
            fprintf(out, "%*s%.*s\n", col - at, "", (int)take, h);
            h += take;
            h += strspn(h, " ");
        }
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: ringctl %s\n", CTL_SYNOPSIS);
    print_rows(out, ctl_options, NROWS(ctl_options), 18);
    fprintf(out, "commands:\n");
    print_rows(out, ctl_commands, NROWS(ctl_commands), 34);
    fprintf(out, "exit status:\n");
    print_rows(out, ctl_exits, NROWS(ctl_exits), 6);
}

/* Writes s as roff text: hyphens and backslashes escaped. */
static void roff_text(FILE *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '-' || *s == '\\')
            fputs(*s == '-' ? "\\-" : "\\e", out);
        else
            fputc(*s, out);
    }
}

/* Writes a usage row's NAME in roff: option and command words in bold, metavariables (all
 * capitals) in italics, brackets as they are. */
static void roff_name(FILE *out, const char *s)
{
    while (*s != '\0') {
        size_t n = strcspn(s, " []"), caps = 0;
        if (n == 0) {
            fputc(*s++, out);
            continue;
        }
        for (size_t k = 0; k < n; k++)
            caps += s[k] >= 'A' && s[k] <= 'Z';
        fputs(caps == n ? "\\fI" : "\\fB", out);
        for (size_t k = 0; k < n; k++) {
            if (s[k] == '-')
                fputs("\\-", out);
            else
                fputc(s[k], out);
        }
        fputs("\\fR", out);
        s += n;
    }
}

/* Writes rows as a section of tagged paragraphs. */
static void roff_rows(FILE *out, const char *section, const ctl_usage *rows, size_t n)
{
    fprintf(out, ".SH %s\n", section);
    for (size_t i = 0; i < n; i++) {
        fputs(".TP\n", out);
        roff_name(out, rows[i].name);
        fputs("\n", out);
        roff_text(out, rows[i].help);
        fputs(".\n", out);
    }
}

/* The ringctl(1) manual page, in roff, from the tables --help prints. */
static void print_man(FILE *out)
{
    fprintf(out,
            ".TH RINGCTL 1 \"\" \"ringd %s\" \"User Commands\"\n"
            ".SH NAME\nringctl \\- ask the node's ringd for its status, metrics or a timeline, "
            "or drain it\n.SH SYNOPSIS\n.B ringctl\n",
            RINGD_VERSION);
    roff_name(out, CTL_SYNOPSIS);
    fputs("\n.SH DESCRIPTION\n.B ringctl\ntalks to the\n.BR ringd (8)\n"
          "of this node over its Unix socket: it shows the daemon's jobs, rings, clients and "
          "GPUs, prints its Prometheus metrics, records a timeline of a job's ops, or makes it "
          "leave its jobs before the node goes away (a pod's preStop hook).\n",
          out);
    roff_rows(out, "OPTIONS", ctl_options, NROWS(ctl_options));
    roff_rows(out, "COMMANDS", ctl_commands, NROWS(ctl_commands));
    roff_rows(out, "EXIT STATUS", ctl_exits, NROWS(ctl_exits));
    fputs(".SH ENVIRONMENT\n.TP\n.B RINGD_SOCKET\nthe daemon's socket, where "
          "\\fB\\-\\-socket\\fR is not given.\n.SH SEE ALSO\n.BR ringd (8)\n",
          out);
}

/* Parses a millisecond count in [lo, hi] from s into *out. Returns 0, or -1 when s is not one. */
static int parse_ms(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* A Tuning's autotune field in words. */
static const char *tuning_state(const Ringd__Tuning *u)
{
    return u->autotune == 1 ? "tuning" : u->autotune == 2 ? "settled" : "off";
}

/* The ring of a job spanning nodes: members in ring order, then this node's two links. */
static void print_ring(const Ringd__RingInfo *ri)
{
    printf("    ring: %s, generation %" PRIu64 ", this node at position %u, coordinator %s\n",
           ri->state, ri->generation, ri->position, ri->coordinator);
    if (ri->gpu_transport[0] != '\0') {
        printf("    device tensors across nodes: %s", ri->gpu_transport);
        if (ri->gpu_transport_why[0] != '\0')
            printf(" (%s)", ri->gpu_transport_why);
        printf("\n");
    }
    const Ringd__Tuning *u = ri->tuning;
    if (u != NULL) {
        printf("    tuning: fusion threshold %.2f MiB, cycle %u us, segments of %.0f KiB, %u "
               "connection%s per link, recursive doubling up to %.0f KiB",
               (double)u->fusion_threshold / (1 << 20), u->cycle_us,
               (double)u->segment_size / 1024.0, u->conns, u->conns == 1 ? "" : "s",
               (double)u->doubling_bytes / 1024.0);
        if (u->autotune == 0)
            printf(" (the coordinator's flags)\n");
        else if (ri->autotune_trials == 0) /* shown on another node than the coordinator */
            printf(" (autotune %s, by the coordinator)\n", tuning_state(u));
        else
            printf(" (autotune %s, %u settings tried, best %.3f GB/s)\n", tuning_state(u),
                   ri->autotune_trials, ri->autotune_best_bps / 1e9);
    }
    printf("      %-5s %-20s %-24s %6s %s\n", "rank", "node", "address", "ranks", "state");
    for (size_t k = 0; k < ri->n_members; k++) {
        const Ringd__MemberInfo *m = ri->members[k];
        printf("      %-5u %-20s %-24s %6u %s\n", m->first_rank, m->node, m->address, m->local_size,
               m->state);
    }
    for (size_t k = 0; k < ri->n_links; k++) {
        const Ringd__LinkInfo *l = ri->links[k];
        printf("      link %s %s %s: %u conns, %.3f GB, %.3f GB/s now\n", l->direction,
               strcmp(l->direction, "send") == 0 ? "to" : "from", l->peer, l->conns,
               (double)l->bytes / 1e9, l->throughput_bps / 1e9);
    }
    if (ri->pair_links > 0 || ri->pair_bytes > 0)
        printf("      direct links (alltoall, recursive doubling): %u open, %.3f GB moved\n",
               ri->pair_links, (double)ri->pair_bytes / 1e9);
}

static void print_text(const Ringd__StatusReply *r)
{
    printf("ringd %s, pid %u, up %.1f s%s\n", r->version, r->pid, (double)r->uptime_ms / 1000.0,
           r->draining ? ", draining: leaving every job, refusing new clients" : "");
    if (r->redis[0] != '\0') {
        printf("node %s, peers connect to %s, rendezvous %s (%s", r->node, r->listen, r->redis,
               r->redis_connected ? "connected" : "DISCONNECTED");
        if (r->redis_rtt_us >= 0)
            printf(", %.2f ms round trip", (double)r->redis_rtt_us / 1e3);
        printf("); %" PRIu64 " ops in %" PRIu64 " ring passes; %" PRIu64
               " control messages sent (%.3f MB)\n",
               r->ring_ops, r->ring_passes, r->control_sent, (double)r->control_bytes_sent / 1e6);
    }
    if (r->metrics[0] != '\0')
        printf("metrics at http://%s/metrics\n", r->metrics);
    printf("ops: %" PRIu64 " in flight, %" PRIu64 " completed, %" PRIu64 " failed, %.3f GB moved\n",
           r->ops_in_flight, r->ops_completed, r->ops_failed, (double)r->bytes_reduced / 1e9);
    printf("jobs: %zu\n", r->n_jobs);
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Ringd__JobInfo *j = r->jobs[i];
        printf("  %-20s generation %" PRIu64 ", clients %u/%u, world %u, min %u, ops %" PRIu64
               " in flight, %" PRIu64 " completed, %" PRIu64 " failed\n",
               j->name, j->generation, j->clients, j->local_size, j->world_size, j->min_size,
               j->ops_in_flight, j->ops_completed, j->ops_failed);
        for (size_t k = 0; k < j->n_pending; k++)
            printf("    waiting: %s\n", j->pending[k]);
        for (size_t k = 0; k < j->n_stalls; k++) {
            const Ringd__StallInfo *st = j->stalls[k];
            printf("    stalled: %s for %.1f s, never submitted by %s\n", st->name,
                   (double)st->age_ms / 1000.0, st->missing);
        }
        if (j->ring != NULL)
            print_ring(j->ring);
    }
    printf("clients: %zu\n", r->n_clients);
    if (r->n_clients > 0)
        printf("  %-20s %8s %6s %5s %9s %10s %10s %4s\n", "job", "pid", "uid", "lrank", "in-flight",
               "completed", "arena(MB)", "gpu");
    for (size_t i = 0; i < r->n_clients; i++) {
        const Ringd__ClientInfo *c = r->clients[i];
        char gpu[16] = "-", pid[16] = "-"; /* pid 0: another user's process, not shown */
        if (c->has_device)
            snprintf(gpu, sizeof(gpu), "%u", c->device);
        if (c->pid != 0)
            snprintf(pid, sizeof(pid), "%u", c->pid);
        printf("  %-20s %8s %6u %5u %9" PRIu64 " %10" PRIu64 " %10.1f %4s\n", c->job, pid, c->uid,
               c->local_rank, c->ops_in_flight, c->ops_completed,
               (double)c->arena_size / (1024.0 * 1024.0), gpu);
    }
    if (r->n_devices == 0)
        printf("gpus: none (%s)\n", r->devices_why);
    else if (r->devices_why[0] != '\0')
        printf("gpus: %zu (%s)\n", r->n_devices, r->devices_why);
    else
        printf("gpus: %zu\n", r->n_devices);
    for (size_t i = 0; i < r->n_devices; i++) {
        const Ringd__DeviceInfo *d = r->devices[i];
        printf("  %u: %s (%s), %.1f GiB, clients %u, device arenas %.1f MB, reduced %.1f MB\n",
               d->index, d->name, d->uuid, (double)d->memory / (1024.0 * 1024.0 * 1024.0),
               d->clients, (double)d->arena_bytes / (1024.0 * 1024.0),
               (double)d->bytes_reduced / (1024.0 * 1024.0));
    }
}

static json_object *ring_json(const Ringd__RingInfo *ri)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "generation", json_object_new_int64((int64_t)ri->generation));
    json_object_object_add(o, "state", json_object_new_string(ri->state));
    json_object_object_add(o, "position", json_object_new_int64(ri->position));
    json_object_object_add(o, "coordinator", json_object_new_string(ri->coordinator));
    json_object_object_add(o, "gpu_transport", json_object_new_string(ri->gpu_transport));
    json_object_object_add(o, "gpu_transport_why", json_object_new_string(ri->gpu_transport_why));
    if (ri->tuning != NULL) {
        const Ringd__Tuning *u = ri->tuning;
        json_object *t = json_object_new_object();
        json_object_object_add(t, "fusion_threshold",
                               json_object_new_int64((int64_t)u->fusion_threshold));
        json_object_object_add(t, "cycle_us", json_object_new_int64(u->cycle_us));
        json_object_object_add(t, "segment_size", json_object_new_int64((int64_t)u->segment_size));
        json_object_object_add(t, "conns", json_object_new_int64(u->conns));
        json_object_object_add(t, "doubling_bytes",
                               json_object_new_int64((int64_t)u->doubling_bytes));
        json_object_object_add(t, "autotune", json_object_new_string(tuning_state(u)));
        json_object_object_add(t, "autotune_trials", json_object_new_int64(ri->autotune_trials));
        json_object_object_add(t, "autotune_best_bps",
                               json_object_new_double(ri->autotune_best_bps));
        json_object_object_add(o, "tuning", t);
    }
    json_object *members = json_object_new_array();
    for (size_t k = 0; k < ri->n_members; k++) {
        const Ringd__MemberInfo *m = ri->members[k];
        json_object *x = json_object_new_object();
        json_object_object_add(x, "first_rank", json_object_new_int64(m->first_rank));
        json_object_object_add(x, "node", json_object_new_string(m->node));
        json_object_object_add(x, "address", json_object_new_string(m->address));
        json_object_object_add(x, "local_size", json_object_new_int64(m->local_size));
        json_object_object_add(x, "state", json_object_new_string(m->state));
        json_object_array_add(members, x);
    }
    json_object_object_add(o, "members", members);
    json_object *links = json_object_new_array();
    for (size_t k = 0; k < ri->n_links; k++) {
        const Ringd__LinkInfo *l = ri->links[k];
        json_object *x = json_object_new_object();
        json_object_object_add(x, "peer", json_object_new_string(l->peer));
        json_object_object_add(x, "direction", json_object_new_string(l->direction));
        json_object_object_add(x, "conns", json_object_new_int64(l->conns));
        json_object_object_add(x, "bytes", json_object_new_int64((int64_t)l->bytes));
        json_object_object_add(x, "throughput_bps", json_object_new_double(l->throughput_bps));
        json_object_array_add(links, x);
    }
    json_object_object_add(o, "links", links);
    json_object_object_add(o, "pair_links", json_object_new_int64(ri->pair_links));
    json_object_object_add(o, "pair_bytes", json_object_new_int64((int64_t)ri->pair_bytes));
    return o;
}

static void print_json(const Ringd__StatusReply *r)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "version", json_object_new_string(r->version));
    json_object_object_add(root, "pid", json_object_new_int64(r->pid));
    json_object_object_add(root, "uptime_ms", json_object_new_int64((int64_t)r->uptime_ms));
    json_object_object_add(root, "node", json_object_new_string(r->node));
    json_object_object_add(root, "listen", json_object_new_string(r->listen));
    json_object_object_add(root, "redis", json_object_new_string(r->redis));
    json_object_object_add(root, "redis_connected", json_object_new_boolean(r->redis_connected));
    json_object_object_add(root, "redis_rtt_us", json_object_new_int64(r->redis_rtt_us));
    json_object_object_add(root, "metrics", json_object_new_string(r->metrics));
    json_object_object_add(root, "ring_passes", json_object_new_int64((int64_t)r->ring_passes));
    json_object_object_add(root, "ring_ops", json_object_new_int64((int64_t)r->ring_ops));
    json_object_object_add(root, "control_sent", json_object_new_int64((int64_t)r->control_sent));
    json_object_object_add(root, "control_bytes_sent",
                           json_object_new_int64((int64_t)r->control_bytes_sent));
    json_object_object_add(root, "keepalives_sent",
                           json_object_new_int64((int64_t)r->keepalives_sent));
    json_object_object_add(root, "draining", json_object_new_boolean(r->draining));
    json_object *ops = json_object_new_object();
    json_object_object_add(ops, "in_flight", json_object_new_int64((int64_t)r->ops_in_flight));
    json_object_object_add(ops, "completed", json_object_new_int64((int64_t)r->ops_completed));
    json_object_object_add(ops, "failed", json_object_new_int64((int64_t)r->ops_failed));
    json_object_object_add(ops, "bytes", json_object_new_int64((int64_t)r->bytes_reduced));
    json_object_object_add(root, "ops", ops);

    json_object *jobs = json_object_new_array();
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Ringd__JobInfo *j = r->jobs[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(j->name));
        json_object_object_add(o, "generation", json_object_new_int64((int64_t)j->generation));
        json_object_object_add(o, "world_size", json_object_new_int64(j->world_size));
        json_object_object_add(o, "local_size", json_object_new_int64(j->local_size));
        json_object_object_add(o, "min_size", json_object_new_int64(j->min_size));
        json_object_object_add(o, "uid", json_object_new_int64(j->uid));
        json_object_object_add(o, "clients", json_object_new_int64(j->clients));
        json_object_object_add(o, "ops_in_flight",
                               json_object_new_int64((int64_t)j->ops_in_flight));
        json_object_object_add(o, "ops_completed",
                               json_object_new_int64((int64_t)j->ops_completed));
        json_object_object_add(o, "ops_failed", json_object_new_int64((int64_t)j->ops_failed));
        json_object *pending = json_object_new_array();
        for (size_t k = 0; k < j->n_pending; k++)
            json_object_array_add(pending, json_object_new_string(j->pending[k]));
        json_object_object_add(o, "pending", pending);
        json_object *stalls = json_object_new_array();
        for (size_t k = 0; k < j->n_stalls; k++) {
            const Ringd__StallInfo *st = j->stalls[k];
            json_object *x = json_object_new_object();
            json_object_object_add(x, "name", json_object_new_string(st->name));
            json_object_object_add(x, "age_ms", json_object_new_int64((int64_t)st->age_ms));
            json_object_object_add(x, "missing", json_object_new_string(st->missing));
            json_object_array_add(stalls, x);
        }
        json_object_object_add(o, "stalls", stalls);
        if (j->ring != NULL)
            json_object_object_add(o, "ring", ring_json(j->ring));
        json_object_array_add(jobs, o);
    }
    json_object_object_add(root, "jobs", jobs);

    json_object *clients = json_object_new_array();
    for (size_t i = 0; i < r->n_clients; i++) {
        const Ringd__ClientInfo *c = r->clients[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "job", json_object_new_string(c->job));
        json_object_object_add(o, "pid", c->pid != 0 ? json_object_new_int64(c->pid) : NULL);
        json_object_object_add(o, "uid", json_object_new_int64(c->uid));
        json_object_object_add(o, "local_rank", json_object_new_int64(c->local_rank));
        json_object_object_add(o, "ops_in_flight",
                               json_object_new_int64((int64_t)c->ops_in_flight));
        json_object_object_add(o, "ops_completed",
                               json_object_new_int64((int64_t)c->ops_completed));
        json_object_object_add(o, "arena_bytes", json_object_new_int64((int64_t)c->arena_size));
        json_object_object_add(o, "device",
                               c->has_device ? json_object_new_int64(c->device) : NULL);
        json_object_array_add(clients, o);
    }
    json_object_object_add(root, "clients", clients);

    json_object *gpus = json_object_new_array();
    for (size_t i = 0; i < r->n_devices; i++) {
        const Ringd__DeviceInfo *d = r->devices[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "index", json_object_new_int64(d->index));
        json_object_object_add(o, "name", json_object_new_string(d->name));
        json_object_object_add(o, "uuid", json_object_new_string(d->uuid));
        json_object_object_add(o, "memory_bytes", json_object_new_int64((int64_t)d->memory));
        json_object_object_add(o, "clients", json_object_new_int64(d->clients));
        json_object_object_add(o, "arena_bytes", json_object_new_int64((int64_t)d->arena_bytes));
        json_object_object_add(o, "bytes_reduced",
                               json_object_new_int64((int64_t)d->bytes_reduced));
        json_object_array_add(gpus, o);
    }
    json_object_object_add(root, "gpus", gpus);
    json_object_object_add(root, "gpus_why", json_object_new_string(r->devices_why));
    printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
}

/* Sends m to the daemon at path and receives its answer, a message of type expect, within
 * timeout_ms into *reply (owned by the caller: rd_frame_free). Returns EXIT_OK, or EXIT_DAEMON
 * after printing why (no answer, an Error, another type; *reply is then NULL). */
static int ask(const char *path, const rd_msg *m, int timeout_ms, int expect, rd_msg **reply)
{
    char err[1024];
    if (rd_conn_ask(path, m, timeout_ms, reply, err, sizeof(err)) != RINGD_OK) {
        fprintf(stderr, "ringctl: %s\n", err);
        *reply = NULL;
        return EXIT_DAEMON;
    }
    if ((int)(*reply)->body_case == expect)
        return EXIT_OK;
    if ((*reply)->body_case == RINGD__MSG__BODY_ERROR)
        fprintf(stderr, "ringctl: %s: ringd answered: %s\n", path, (*reply)->error->message);
    else
        fprintf(stderr, "ringctl: %s: unexpected reply type %d\n", path, (int)(*reply)->body_case);
    rd_frame_free(*reply);
    *reply = NULL;
    return EXIT_DAEMON;
}

/* Asks for the daemon's StatusReply into *reply (the caller frees it with rd_frame_free).
 * Returns EXIT_OK, or another exit status after printing why. */
static int ask_status(const char *path, int timeout_ms, rd_msg **reply)
{
    Ringd__StatusRequest q = RINGD__STATUS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m.status_request = &q;
    return ask(path, &m, timeout_ms, RINGD__MSG__BODY_STATUS_REPLY, reply);
}

/* `status`: prints the daemon's StatusReply. */
static int run_status(const char *path, int timeout_ms, int json)
{
    rd_msg *reply;
    int rc = ask_status(path, timeout_ms, &reply);
    if (rc != EXIT_OK)
        return rc;
    if (json)
        print_json(reply->status_reply);
    else
        print_text(reply->status_reply);
    rd_frame_free(reply);
    return EXIT_OK;
}

static void print_drain(const Ringd__DrainReply *d, int json)
{
    if (!json) {
        printf("drained: left %u job(s) in %" PRIu64 " ms; %" PRIu64 " ops finished, %" PRIu64
               " failed\n",
               d->jobs, d->elapsed_ms, d->ops_finished, d->ops_failed);
        return;
    }
    json_object *o = json_object_new_object();
    json_object_object_add(o, "clean", json_object_new_boolean(d->status == RINGD_OK));
    json_object_object_add(o, "status", json_object_new_int64(d->status));
    json_object_object_add(o, "message", json_object_new_string(d->message));
    json_object_object_add(o, "jobs", json_object_new_int64(d->jobs));
    json_object_object_add(o, "ops_finished", json_object_new_int64((int64_t)d->ops_finished));
    json_object_object_add(o, "ops_failed", json_object_new_int64((int64_t)d->ops_failed));
    json_object_object_add(o, "elapsed_ms", json_object_new_int64((int64_t)d->elapsed_ms));
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

/* The daemon's --drain-timeout, from its StatusReply, into *ms. Returns EXIT_OK, or EXIT_DAEMON
 * after printing why. */
static int daemon_drain_timeout(const char *path, int timeout_ms, int *ms)
{
    rd_msg *reply;
    int rc = ask_status(path, timeout_ms, &reply);
    if (rc != EXIT_OK)
        return rc;
    /* 0 from a daemon older than the field: no drain is longer than the longest one accepted */
    uint32_t v = reply->status_reply->drain_timeout_ms;
    *ms = v > 0 && v <= RD_DRAIN_MAX_MS ? (int)v : RD_DRAIN_MAX_MS;
    rd_frame_free(reply);
    return EXIT_OK;
}

/* `drain`: asks the daemon to leave every job within drain_ms (0: its --drain-timeout, which it
 * is asked for first) and waits for the outcome that long plus timeout_ms. */
static int run_drain(const char *path, int timeout_ms, int drain_ms, int json)
{
    Ringd__DrainRequest q = RINGD__DRAIN_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT, *reply;
    q.timeout_ms = (uint32_t)drain_ms;
    m.body_case = RINGD__MSG__BODY_DRAIN_REQUEST;
    m.drain_request = &q;
    int bound = drain_ms, rc;
    if (bound == 0 && (rc = daemon_drain_timeout(path, timeout_ms, &bound)) != EXIT_OK)
        return rc;
    int64_t wait = (int64_t)bound + timeout_ms;
    rc = ask(path, &m, wait > INT_MAX ? INT_MAX : (int)wait, RINGD__MSG__BODY_DRAIN_REPLY, &reply);
    if (rc != EXIT_OK)
        return rc;
    const Ringd__DrainReply *d = reply->drain_reply;
    if (json || d->status != RINGD_E_REFUSED)
        print_drain(d, json);
    rc = EXIT_OK;
    if (d->status == RINGD_E_REFUSED) {
        fprintf(stderr, "ringctl: no drain: %s\n", d->message);
        rc = EXIT_DAEMON;
    } else if (d->status != RINGD_OK) {
        fprintf(stderr, "ringctl: the drain was not clean (status %u): %s\n", d->status,
                d->message[0] != '\0' ? d->message : "no detail from ringd");
        rc = EXIT_UNCLEAN;
    }
    rd_frame_free(reply);
    return rc;
}

/* `watch`: the status view, refreshed in place every interval_ms (count times; 0: until
 * interrupted). A daemon that does not answer is shown as such, and watched again. */
static int run_watch(const char *path, int timeout_ms, int interval_ms, long count)
{
    int tty = isatty(STDOUT_FILENO);
    int rc = EXIT_OK;
    for (long n = 0; count == 0 || n < count; n++) {
        if (n > 0) {
            struct timespec ts = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
        time_t now = time(NULL);
        char when[32];
        strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
        /* In place on a terminal (home, clear); one frame after another into a pipe or file. */
        printf(tty ? "\033[H\033[2J" : "%s", tty ? "" : (n > 0 ? "\n" : ""));
        printf("ringctl watch %s: every %.1f s, %s\n", path, interval_ms / 1000.0, when);
        fflush(stdout);
        rd_msg *reply;
        rc = ask_status(path, timeout_ms, &reply);
        if (rc == EXIT_OK) {
            print_text(reply->status_reply);
            rd_frame_free(reply);
        }
        fflush(stdout);
    }
    return rc;
}

/* `metrics`: the Prometheus exposition, as --metrics-listen serves it. */
static int run_metrics(const char *path, int timeout_ms)
{
    Ringd__MetricsRequest q = RINGD__METRICS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT, *reply;
    m.body_case = RINGD__MSG__BODY_METRICS_REQUEST;
    m.metrics_request = &q;
    int rc = ask(path, &m, timeout_ms, RINGD__MSG__BODY_METRICS_REPLY, &reply);
    if (rc != EXIT_OK)
        return rc;
    fputs(reply->metrics_reply->text, stdout);
    rd_frame_free(reply);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_DAEMON;
}

/* `timeline`: records job on the daemon for seconds, then writes the trace to out_path. */
static int run_timeline(const char *path, int timeout_ms, const char *job, int seconds,
                        const char *out_path)
{
    Ringd__TimelineRequest q = RINGD__TIMELINE_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT, *reply;
    q.job = (char *)job;
    q.seconds = (uint32_t)seconds;
    m.body_case = RINGD__MSG__BODY_TIMELINE_REQUEST;
    m.timeline_request = &q;
    /* Into a file beside out_path, renamed once written: fails on an unwritable place before
     * recording for minutes, and leaves an earlier trace at out_path as it was when this one
     * fails. */
    char tmp_path[PATH_MAX];
    if (snprintf(tmp_path, sizeof(tmp_path), "%s.XXXXXX", out_path) >= (int)sizeof(tmp_path)) {
        fprintf(stderr, "ringctl: timeline: %s: path too long\n", out_path);
        return EXIT_USAGE;
    }
    int to_stdout = strcmp(out_path, "-") == 0, tfd = to_stdout ? -1 : mkstemp(tmp_path);
    FILE *f = to_stdout ? stdout : tfd >= 0 ? fdopen(tfd, "w") : NULL;
    if (f == NULL) {
        fprintf(stderr, "ringctl: timeline: %s: %s\n", out_path, strerror(errno));
        if (tfd >= 0) {
            close(tfd);
            remove(tmp_path);
        }
        return EXIT_USAGE;
    }
    fprintf(stderr, "ringctl: recording job '%s' for %d s\n", job, seconds);
    int64_t wait = (int64_t)seconds * 1000 + timeout_ms;
    int rc = ask(path, &m, wait > INT_MAX ? INT_MAX : (int)wait, RINGD__MSG__BODY_TIMELINE_REPLY,
                 &reply);
    if (rc == EXIT_OK && reply->timeline_reply->status != RINGD_OK) {
        fprintf(stderr, "ringctl: timeline: %s\n", reply->timeline_reply->message);
        rd_frame_free(reply);
        rc = EXIT_DAEMON;
    }
    if (rc != EXIT_OK) {
        if (f != stdout) {
            fclose(f);
            remove(tmp_path);
        }
        return rc;
    }
    const Ringd__TimelineReply *r = reply->timeline_reply;
    rd_ctrace t;
    rd_ctrace_open(&t, f, r->node);
    /* Ops and marks in time order: each list is, so merge them. */
    size_t i = 0, k = 0;
    while (i < r->n_ops || k < r->n_marks) {
        if (k < r->n_marks && (i == r->n_ops || r->marks[k]->t_us <= r->ops[i]->end_us)) {
            rd_ctrace_mark(&t, r->marks[k]->t_us, r->marks[k]->generation, r->marks[k]->what);
            k++;
        } else {
            rd_ctrace_op(&t, r->ops[i++]);
        }
    }
    int bad = rd_ctrace_close(&t) != 0;
    if (f != stdout) {
        bad = fclose(f) != 0 || bad;
        /* mkstemp's 0600, as a file the user made would be */
        mode_t um = umask(0);
        umask(um);
        bad = bad || chmod(tmp_path, 0666 & ~um) != 0 || rename(tmp_path, out_path) != 0;
        if (bad)
            remove(tmp_path);
    }
    if (bad) {
        fprintf(stderr, "ringctl: timeline: writing %s: %s\n", out_path, strerror(errno));
    } else {
        fprintf(stderr, "ringctl: %s; %zu ring changes", r->message, r->n_marks);
        if (r->dropped > 0)
            fprintf(stderr, "; %" PRIu64 " older records dropped (ringd --timeline-max-ops)",
                    r->dropped);
        fprintf(stderr, "; written to %s\n", out_path);
    }
    rd_frame_free(reply);
    return bad ? EXIT_DAEMON : EXIT_OK;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, 's'},
        {"timeout", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"man", no_argument, NULL, 'M'},
        {NULL, 0, NULL, 0},
    };
    const char *path = getenv("RINGD_SOCKET");
    int timeout = 5000, json = 0, drain_ms = 0;

    for (;;) {
        int c = getopt_long(argc, argv, "+s:t:jhV", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 's': path = optarg; break;
        case 't':
            if (parse_ms(optarg, 1, INT_MAX, &timeout) != 0) {
                fprintf(stderr, "ringctl: --timeout must be a positive number of milliseconds\n");
                return EXIT_USAGE;
            }
            break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return EXIT_OK;
        case 'V': printf("ringctl %s\n", RINGD_VERSION); return EXIT_OK;
        case 'M': print_man(stdout); return EXIT_OK; /* for the build */
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "ringctl: missing command\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[optind];
    int drain = strcmp(cmd, "drain") == 0, watch = strcmp(cmd, "watch") == 0;
    int timeline = strcmp(cmd, "timeline") == 0, metrics = strcmp(cmd, "metrics") == 0;
    if (!drain && !watch && !timeline && !metrics && strcmp(cmd, "status") != 0) {
        fprintf(stderr, "ringctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    int interval = 1000, seconds = 0;
    long count = 0;
    const char *job = NULL, *out_path = NULL;
    for (int i = optind + 1; i < argc; i++) {
        const char *a = argv[i], *ms = NULL;
        if (strcmp(a, "--json") == 0 && !timeline && !metrics && !watch) {
            json = 1;
            continue;
        }
        /* The other commands' options take a value, as --opt V or --opt=V. */
        static const char *const valued[] = {"--interval", "--count", "--job", "--seconds",
                                             "--out"};
        const char *opt = NULL, *val = NULL;
        for (size_t v = 0; v < sizeof(valued) / sizeof(valued[0]); v++) {
            size_t len = strlen(valued[v]);
            if (strcmp(a, valued[v]) == 0) {
                opt = valued[v];
                val = i + 1 < argc ? argv[++i] : "";
            } else if (strncmp(a, valued[v], len) == 0 && a[len] == '=') {
                opt = valued[v];
                val = a + len + 1;
            }
        }
        int ok = 1;
        if (watch && opt != NULL && strcmp(opt, "--interval") == 0) {
            ok = parse_ms(val, 100, 3600000, &interval) == 0;
        } else if (watch && opt != NULL && strcmp(opt, "--count") == 0) {
            int c;
            ok = parse_ms(val, 1, INT_MAX, &c) == 0;
            count = c;
        } else if (timeline && opt != NULL && strcmp(opt, "--job") == 0 && *val != '\0') {
            job = val;
        } else if (timeline && opt != NULL && strcmp(opt, "--seconds") == 0) {
            ok = parse_ms(val, 1, 3600, &seconds) == 0;
        } else if (timeline && opt != NULL && strcmp(opt, "--out") == 0 && *val != '\0') {
            out_path = val;
        } else if (opt != NULL) {
            ok = 0;
        }
        if (!ok) {
            fprintf(stderr, "ringctl: %s: bad value '%s' for %s\n", cmd, val, opt);
            usage(stderr);
            return EXIT_USAGE;
        }
        if (opt != NULL)
            continue;
        if (drain && strcmp(a, "--timeout") == 0)
            ms = i + 1 < argc ? argv[++i] : "";
        else if (drain && strncmp(a, "--timeout=", 10) == 0)
            ms = a + 10;
        if (ms == NULL) {
            fprintf(stderr, "ringctl: %s: unknown argument '%s'\n", cmd, a);
            usage(stderr);
            return EXIT_USAGE;
        }
        if (parse_ms(ms, 0, RD_DRAIN_MAX_MS, &drain_ms) != 0) {
            fprintf(stderr,
                    "ringctl: drain --timeout wants milliseconds from 0 (the daemon's "
                    "--drain-timeout) to %d, not '%s'\n",
                    RD_DRAIN_MAX_MS, ms);
            return EXIT_USAGE;
        }
    }
    if (path == NULL || *path == '\0')
        path = "/run/ringd/ringd.sock";
    if (timeline && (job == NULL || seconds == 0 || out_path == NULL)) {
        fprintf(stderr, "ringctl: timeline needs --job J, --seconds N (1..3600) and --out FILE\n");
        return EXIT_USAGE;
    }
    if (timeline)
        return run_timeline(path, timeout, job, seconds, out_path);
    if (metrics)
        return run_metrics(path, timeout);
    if (watch)
        return run_watch(path, timeout, interval, count);
    if (drain)
        return run_drain(path, timeout, drain_ms, json);
    return run_status(path, timeout, json);
}
