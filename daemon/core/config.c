/* Daemon options: the table, and parsing from defaults, environment and flags, in that order. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "ringd_build.h"
#include "units.h"

typedef enum { OPT_STRING, OPT_SIZE, OPT_INT, OPT_CHOICE, OPT_FLAG } opt_type;

typedef struct {
    const char *name;
    const char *env;
    opt_type type;
    const char *def;
    int64_t min, max; /* inclusive range for sizes and integers */
    size_t offset;
    const char *help;
    const char *const *choices; /* OPT_CHOICE: the values' names, NULL-terminated; the value
                                   stored is the index of the name given */
} opt_spec;

static const char *const gpu_transports[] = {"auto", "nccl", "tcp", NULL};

#define OFF(f) offsetof(rd_config, f)

static const opt_spec options[] = {
    {"socket", "RINGD_SOCKET", OPT_STRING, "/run/ringd/ringd.sock", 1, RD_PATH_MAX - 1,
     OFF(socket_path), "Unix socket clients connect to; its directory is created", NULL},
    {"arena-size", "RINGD_ARENA_SIZE", OPT_SIZE, "1G", 131072, INT64_MAX, OFF(arena_size),
     "shared-memory arena per client when it asks for none (pages are used only when touched)",
     NULL},
    {"arena-max", "RINGD_ARENA_MAX", OPT_SIZE, "16G", 131072, INT64_MAX, OFF(arena_max),
     "largest arena a client may ask for", NULL},
    {"device-arena-max", "RINGD_DEVICE_ARENA_MAX", OPT_SIZE, "8G", 0, INT64_MAX,
     OFF(device_arena_max),
     "largest device arena (GPU memory) a client may ask for; 0: none are given", NULL},
    {"max-frame", "RINGD_MAX_FRAME", OPT_SIZE, "1M", 4096, 1 << 30, OFF(max_frame),
     "largest control message accepted; larger ones close the connection; the nodes of a ring "
     "must agree (at least 4K: the announcement of an op of the longest name, failed with the "
     "longest message, fits with half of it for --direct-bytes)",
     NULL},
    {"inline-bytes", "RINGD_INLINE_BYTES", OPT_SIZE, "1M", 0, INT64_MAX, OFF(inline_bytes),
     "collectives moving fewer bytes run on the event loop instead of the worker threads", NULL},
    {"threads", "RINGD_THREADS", OPT_INT, "0", 0, 256, OFF(threads),
     "data-path worker threads (0: one per online CPU, at most 8)", NULL},
    {"max-clients", "RINGD_MAX_CLIENTS", OPT_INT, "1024", 1, 65536, OFF(max_clients),
     "connections served at once; more are refused", NULL},
    {"poll-us", "RINGD_POLL_US", OPT_INT, "100", 0, 1000000, OFF(poll_us),
     "microseconds to keep polling clients' control queues after the last message before sleeping "
     "(0: sleep at once; each wake-up then costs a system call)",
     NULL},
    {"max-pending", "RINGD_MAX_PENDING", OPT_INT, "4096", 1, 1 << 24, OFF(max_pending),
     "collectives one client may have outstanding; more are refused", NULL},
    {"handshake-ms", "RINGD_HANDSHAKE_MS", OPT_INT, "10000", 10, 3600000, OFF(handshake_ms),
     "a connection that sends no Hello or status request within this is closed", NULL},
    {"log-level", "RINGD_LOG_LEVEL", OPT_CHOICE, "info", 0, 3, OFF(log_level),
     "debug, info, warn or error", rd_log_level_names},
    {"redis", "RINGD_REDIS", OPT_STRING, "", 0, 255, OFF(redis_url),
     "redis://HOST:PORT[/DB] for rendezvous with other nodes (empty: this node alone)", NULL},
    {"redis-password-file", "RINGD_REDIS_PASSWORD_FILE", OPT_STRING, "", 0, 255,
     OFF(redis_password_file), "file holding the Redis password (AUTH)", NULL},
    {"listen", "RINGD_LISTEN", OPT_STRING, "", 0, 127, OFF(listen),
     "HOST:PORT where peers connect (port 0: any free port); needed with --redis", NULL},
    {"advertise", "RINGD_ADVERTISE", OPT_STRING, "", 0, 127, OFF(advertise),
     "HOST:PORT peers are told to connect to (default: the --listen address)", NULL},
    {"node", "RINGD_NODE", OPT_STRING, "", 0, 256, OFF(node),
     "this node's name in rings (default: the host name)", NULL},
    {"admin-group", "RINGD_ADMIN_GROUP", OPT_STRING, "", 0, 64, OFF(admin_group),
     "group (name or number) whose members see every user's jobs in full (tensor names, pids, "
     "timelines), as root and the daemon's own user do; others see their own uid's jobs",
     NULL},
    {"key-file", "RINGD_KEY_FILE", OPT_STRING, "", 0, 255, OFF(key_file),
     "file holding the ring's shared key (at least 16 bytes); peers must prove it", NULL},
    {"insecure", "RINGD_INSECURE", OPT_FLAG, "0", 0, 1, OFF(insecure),
     "run a multi-node ring without a key: anyone reaching --listen may join", NULL},
    {"encrypt", "RINGD_ENCRYPT", OPT_FLAG, "0", 0, 1, OFF(encrypt),
     "seal every link with other daemons (control, ring data, direct links): "
     "AES-256-GCM where the CPU has AES-NI, else ChaCha20-Poly1305, keys per link from the ring "
     "key; every daemon of a ring must agree; needs --key-file",
     NULL},
    {"lease-ttl", "RINGD_LEASE_TTL", OPT_INT, "3000", 100, 600000, OFF(lease_ttl),
     "milliseconds a node stays a member without refreshing its lease", NULL},
    {"direct-bytes", "RINGD_DIRECT_BYTES", OPT_SIZE, "16K", 0, 16 << 20, OFF(direct_bytes),
     "collectives whose result is at most this big skip the ring: each node sends its part with "
     "the announcement every node sends to all, and computes the result itself (one hop); all "
     "nodes must agree; at most half of --max-frame",
     NULL},
    {"doubling-bytes", "RINGD_DOUBLING_BYTES", OPT_SIZE, "64K", 0, 16 << 20, OFF(doubling_bytes),
     "allreduces, broadcasts, allgathers and reducescatters of a ring of 3 nodes or more that "
     "go past the negotiation (over --direct-bytes) and are at most this big (an allgather's "
     "gathered result, a reducescatter's whole vector) run by recursive doubling over direct "
     "links (log2 N exchanges, a link each from the --pair-links pool; a binomial tree for a "
     "broadcast, recursive halving for a reducescatter) instead of round the ring (2(N - 1) or "
     "N - 1 steps) wherever that takes fewer steps (not a broadcast, allgather or "
     "reducescatter of 3 or 5 nodes, where folding pairs add two); the coordinator's value "
     "holds for every node; 0: always the ring",
     NULL},
    {"fusion-threshold", "RINGD_FUSION_THRESHOLD", OPT_SIZE, "64M", 0, 1 << 30,
     OFF(fusion_threshold), "small allreduces ready together are fused into one buffer up to this",
     NULL},
    {"segment-size", "RINGD_SEGMENT_SIZE", OPT_SIZE, "1M", 4096, 64 << 20, OFF(segment_size),
     "bytes per ring frame; segments pipeline through the ring", NULL},
    {"fusion-cycle-us", "RINGD_FUSION_CYCLE_US", OPT_INT, "0", 0, 1000000, OFF(fusion_cycle_us),
     "the coordinator orders the ops ready on every node at most this often, so that more of "
     "them fuse (0: at the end of each turn of its event loop)",
     NULL},
    {"conns-per-link", "RINGD_CONNS_PER_LINK", OPT_INT, "2", 1, 16, OFF(conns_per_link),
     "TCP connections between neighbours of a ring, each way", NULL},
    {"pair-links", "RINGD_PAIR_LINKS", OPT_INT, "32", 0, 256, OFF(pair_links),
     "the most direct links this node keeps open for alltoall and recursive doubling, every "
     "job's together (least recently used idle ones closed first): an alltoall of a ring of N >= "
     "3 nodes goes straight to each node over N - 1 of them, opened on first use, when N - 1 is "
     "at most this, else round the ring; an allreduce, broadcast or allgather under "
     "--doubling-bytes needs log2 N of them (one more when N is not a power of two), else goes "
     "round the ring (0: always round the ring); all nodes must agree",
     NULL},
    {"autotune", "RINGD_AUTOTUNE", OPT_FLAG, "0", 0, 1, OFF(autotune),
     "the coordinator tries fusion thresholds, fusion cycles, segment sizes (up to "
     "--segment-size) and connections per link (up to --conns-per-link) on the running job, "
     "keeps what moves the most bytes per second, and sends it to every node with its orders",
     NULL},
    {"autotune-window-ms", "RINGD_AUTOTUNE_WINDOW_MS", OPT_INT, "1000", 10, 600000,
     OFF(autotune_window_ms), "milliseconds --autotune measures each setting for", NULL},
    {"peer-timeout", "RINGD_PEER_TIMEOUT", OPT_INT, "10000", 100, 3600000, OFF(peer_timeout),
     "milliseconds a link may make no progress mid-op before it counts as failed", NULL},
    {"stall-warn", "RINGD_STALL_WARN", OPT_INT, "60000", 10, 86400000, OFF(stall_warn),
     "milliseconds an op may wait for ranks that have not submitted it before a warning", NULL},
    {"stall-abort", "RINGD_STALL_ABORT", OPT_INT, "300000", 0, 86400000, OFF(stall_abort),
     "milliseconds before such an op fails with RINGD_E_STALLED on every rank; 0: never", NULL},
    {"drain-timeout", "RINGD_DRAIN_TIMEOUT", OPT_INT, "20000", 100, 3600000, OFF(drain_timeout),
     "milliseconds ringctl drain and SIGTERM wait for ops under way before leaving anyway", NULL},
    {"devices", "RINGD_DEVICES", OPT_STRING, "all", 1, 255, OFF(devices),
     "CUDA devices this daemon serves: all (the visible ones; none without a driver), none, or "
     "indices such as 0,2; each client gets the one it asks for (RINGD_DEVICE) or its local rank "
     "modulo their number",
     NULL},
    {"metrics-listen", "RINGD_METRICS_LISTEN", OPT_STRING, "", 0, 127, OFF(metrics_listen),
     "HOST:PORT serving Prometheus metrics at /metrics over HTTP (empty: none; port 0: any "
     "free port, logged)",
     NULL},
    {"timeline-max-ops", "RINGD_TIMELINE_MAX_OPS", OPT_INT, "100000", 16, 10000000,
     OFF(timeline_max_ops),
     "ops one `ringctl timeline` recording keeps; past this the oldest are dropped (and counted)",
     NULL},
    {"gpu-transport", "RINGD_GPU_TRANSPORT", OPT_CHOICE, "auto", 0, 2, OFF(gpu_transport),
     "how device tensors cross nodes: auto (NCCL when every node of the ring can run it and "
     "its ranks pass device memory, else the TCP ring through host memory), nccl (NCCL, or "
     "device ops fail saying why not), or tcp",
     gpu_transports},
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* Stores text as the value of spec in cfg. Returns 0, or -1 with err set. */
static int opt_set(rd_config *cfg, const opt_spec *o, const char *text, const char *origin,
                   char *err, size_t errlen)
{
    char *field = (char *)cfg + o->offset;
    switch (o->type) {
    case OPT_STRING: {
        size_t n = strlen(text);
        if (n < (size_t)o->min || n > (size_t)o->max) {
            snprintf(err, errlen, "%s --%s: length %zu is outside %" PRId64 "..%" PRId64, origin,
                     o->name, n, o->min, o->max);
            return -1;
        }
        memcpy(field, text, n + 1);
        return 0;
    }
    case OPT_SIZE: {
        uint64_t v;
        if (rd_units_parse_size(text, &v) != 0 || v < (uint64_t)o->min || v > (uint64_t)o->max) {
            snprintf(err, errlen,
                     "%s --%s: '%s' is not a size in %" PRId64 "..%" PRId64
                     " bytes (suffixes K, M, G)",
                     origin, o->name, text, o->min, o->max);
            return -1;
        }
        memcpy(field, &v, sizeof(v));
        return 0;
    }
    case OPT_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0' || v < o->min || v > o->max) {
            snprintf(err, errlen, "%s --%s: '%s' is not an integer in %" PRId64 "..%" PRId64,
                     origin, o->name, text, o->min, o->max);
            return -1;
        }
        int64_t v64 = v;
        memcpy(field, &v64, sizeof(v64));
        return 0;
    }
    case OPT_FLAG: {
        int64_t v64;
        if (strcmp(text, "1") == 0 || strcmp(text, "true") == 0 || strcmp(text, "yes") == 0)
            v64 = 1;
        else if (strcmp(text, "0") == 0 || strcmp(text, "false") == 0 || strcmp(text, "no") == 0)
            v64 = 0;
        else {
            snprintf(err, errlen, "%s --%s: '%s' is not one of 1, 0, true, false, yes, no", origin,
                     o->name, text);
            return -1;
        }
        memcpy(field, &v64, sizeof(v64));
        return 0;
    }
    case OPT_CHOICE: {
        char names[128] = "";
        for (int64_t i = 0; o->choices[i] != NULL; i++) {
            if (strcmp(text, o->choices[i]) == 0) {
                memcpy(field, &i, sizeof(i));
                return 0;
            }
            size_t used = strlen(names);
            snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "", o->choices[i]);
        }
        snprintf(err, errlen, "%s --%s: '%s' is not one of %s", origin, o->name, text, names);
        return -1;
    }
    }
    return -1;
}

static void print_help(FILE *out)
{
    fprintf(out, "usage: ringd [OPTIONS]\n"
                 "The ringd collective-communication daemon. Without --redis it serves the\n"
                 "processes of this node as a one-node ring.\n\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt_spec *o = &options[i];
        fprintf(out, "  --%-14s %s\n  %16s [env %s, default %s]\n", o->name, o->help, "", o->env,
                o->def);
    }
    fprintf(out, "  --%-14s %s\n  --%-14s %s\n", "help", "print this help", "version",
            "print the version");
}

/* Writes s as roff text: backslashes and hyphens escaped, `quoted` words in bold, and a line
 * never starting with a control character. */
static void roff_text(FILE *out, const char *s)
{
    int bold = 0;
    if (*s == '.' || *s == '\'')
        fputs("\\&", out);
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            fputs("\\e", out);
        else if (*s == '-')
            fputs("\\-", out);
        else if (*s == '`')
            fputs((bold = !bold) ? "\\fB" : "\\fR", out);
        else
            fputc(*s, out);
    }
    if (bold)
        fputs("\\fR", out);
}

/* What an option's value looks like, from its type. */
static void roff_value(FILE *out, const opt_spec *o)
{
    switch (o->type) {
    case OPT_STRING: fputs(" \\fIVALUE\\fR", out); break;
    case OPT_SIZE: fputs(" \\fISIZE\\fR", out); break;
    case OPT_INT: fputs(" \\fIN\\fR", out); break;
    case OPT_CHOICE:
        for (size_t k = 0; o->choices[k] != NULL; k++)
            fprintf(out, "%s\\fB%s\\fR", k == 0 ? " " : "|", o->choices[k]);
        break;
    case OPT_FLAG: break;
    }
}

/* The ringd(8) manual page, in roff, from the same table as --help: the build writes it with
 * `ringd --man`, so the page cannot drift from the options. */
static void print_man(FILE *out)
{
    fprintf(out,
            ".TH RINGD 8 \"\" \"ringd %s\" \"System Administration\"\n"
            ".SH NAME\nringd \\- per\\-node collective\\-communication daemon for "
            "data\\-parallel training\n"
            ".SH SYNOPSIS\n.B ringd\n[\\fIOPTIONS\\fR]\n"
            ".SH DESCRIPTION\n"
            ".B ringd\nserves the training processes of one node: they link\n.B libringd\n"
            "(or import the Python package\n.BR ringd ),\n"
            "put their tensors in a shared\\-memory arena the daemon hands them, and run named\n"
            "allreduce, broadcast, allgather and barrier through it.\n"
            "Without\n.B \\-\\-redis\nit serves this node's processes as a one\\-node ring.\n"
            "With it, the daemons of a job find each other through Redis and form a ring over\n"
            "TCP, each proving the ring's shared key\n(\\fB\\-\\-key\\-file\\fR).\n"
            ".PP\nThe options below are the daemon's one table of options; each can also be set "
            "by its environment variable. A flag overrides the variable, which overrides the "
            "default. Sizes take the suffixes K, M and G (powers of 1024); durations are in the "
            "unit their name says.\n"
            ".SH OPTIONS\n",
            RINGD_VERSION);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt_spec *o = &options[i];
        fputs(".TP\n\\fB\\-\\-", out);
        roff_text(out, o->name);
        fputs("\\fR", out);
        roff_value(out, o);
        fputs("\n", out);
        roff_text(out, o->help);
        fputs(".\n.br\nEnvironment: \\fB", out);
        roff_text(out, o->env);
        fputs("\\fR; default: ", out);
        roff_text(out, o->def[0] != '\0' ? o->def : "none");
        fputs(".\n", out);
    }
    fputs(".TP\n.B \\-\\-help\nprints the options, their variables and defaults, and exits.\n"
          ".TP\n.B \\-\\-version\nprints the version and exits.\n"
          ".SH SIGNALS\n.TP\n.B SIGTERM\nleaves every job gracefully (as\n.B ringctl drain\n"
          "does, within \\fB\\-\\-drain\\-timeout\\fR), then exits; a second SIGTERM "
          "exits at once.\n.TP\n.B SIGINT\nexits at once.\n"
          ".SH EXIT STATUS\n.TP\n0\nstopped by a signal, or \\fB\\-\\-help\\fR or "
          "\\fB\\-\\-version\\fR printed.\n.TP\n1\nstart\\-up or event loop failure "
          "(the log says which call failed).\n"
          ".TP\n2\na bad option or value (the message names it).\n"
          ".SH SEE ALSO\n.BR ringctl (1)\n",
          out);
}

/* Looks name up in envp ("NAME=value"); the daemon reads its environment only here. */
static const char *env_lookup(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

rd_config_result rd_config_parse(rd_config *cfg, int argc, char **argv, char **envp, FILE *out,
                                 char *err, size_t errlen)
{
    struct option longopts[NOPTIONS + 4];

    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NOPTIONS; i++)
        if (opt_set(cfg, &options[i], options[i].def, "default", err, errlen) != 0)
            return RD_CONFIG_ERROR;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const char *v = env_lookup(envp, options[i].env);
        if (v != NULL && opt_set(cfg, &options[i], v, options[i].env, err, errlen) != 0)
            return RD_CONFIG_ERROR;
    }

    for (size_t i = 0; i < NOPTIONS; i++)
        longopts[i] = (struct option){options[i].name,
                                      options[i].type == OPT_FLAG ? no_argument : required_argument,
                                      NULL, (int)i};
    longopts[NOPTIONS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTIONS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[NOPTIONS + 2] = (struct option){"man", no_argument, NULL, 'M'}; /* for the build */
    longopts[NOPTIONS + 3] = (struct option){NULL, 0, NULL, 0};

    optind = 0; /* glibc: 0 also resets getopt's internal state for a second parse */
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":hV", longopts, NULL);
        if (c == -1)
            break;
        if (c == 'h') {
            print_help(out);
            return RD_CONFIG_EXIT;
        }
        if (c == 'M') {
            print_man(out);
            return RD_CONFIG_EXIT;
        }
        if (c == 'V') {
            fprintf(out, "ringd %s\n", RINGD_VERSION);
            return RD_CONFIG_EXIT;
        }
        if (c == ':') {
            snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
            return RD_CONFIG_ERROR;
        }
        if (c == '?' || c < 0 || (size_t)c >= NOPTIONS) {
            snprintf(err, errlen, "unknown option %s (see --help)", argv[optind - 1]);
            return RD_CONFIG_ERROR;
        }
        if (opt_set(cfg, &options[c], options[c].type == OPT_FLAG ? "1" : optarg, "flag", err,
                    errlen) != 0)
            return RD_CONFIG_ERROR;
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
        return RD_CONFIG_ERROR;
    }
    if (cfg->arena_size > cfg->arena_max) {
        snprintf(err, errlen, "--arena-size %" PRIu64 " exceeds --arena-max %" PRIu64,
                 cfg->arena_size, cfg->arena_max);
        return RD_CONFIG_ERROR;
    }
    if (cfg->redis_url[0] != '\0') {
        if (cfg->listen[0] == '\0') {
            snprintf(err, errlen, "--redis needs --listen HOST:PORT for the other nodes");
            return RD_CONFIG_ERROR;
        }
        if (cfg->key_file[0] == '\0' && !cfg->insecure) {
            snprintf(err, errlen,
                     "a multi-node ring needs --key-file, or an explicit --insecure "
                     "to run without authentication");
            return RD_CONFIG_ERROR;
        }
        if (cfg->key_file[0] != '\0' && cfg->insecure) {
            snprintf(err, errlen, "--key-file and --insecure exclude each other");
            return RD_CONFIG_ERROR;
        }
        if (cfg->encrypt && cfg->insecure) {
            snprintf(err, errlen,
                     "--encrypt needs --key-file: the key of --insecure is public, so sealing "
                     "with it would protect nothing");
            return RD_CONFIG_ERROR;
        }
    }
    if (cfg->direct_bytes > cfg->max_frame / 2) /* small ops travel in control frames */
        cfg->direct_bytes = cfg->max_frame / 2;
    if (cfg->node[0] == '\0' && gethostname(cfg->node, sizeof(cfg->node) - 1) != 0)
        snprintf(cfg->node, sizeof(cfg->node), "node-%ld", (long)getpid());
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n < 1 ? 1 : n > 8 ? 8 : n;
    }
    return RD_CONFIG_RUN;
}

void rd_config_dump(const rd_config *cfg)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt_spec *o = &options[i];
        const char *field = (const char *)cfg + o->offset;
        int64_t v;
        switch (o->type) {
        case OPT_STRING: rd_log(RD_LOG_INFO, "config", "%s = %s", o->name, field); break;
        case OPT_SIZE:
        case OPT_INT:
        case OPT_FLAG:
            memcpy(&v, field, sizeof(v));
            rd_log(RD_LOG_INFO, "config", "%s = %" PRId64, o->name, v);
            break;
        case OPT_CHOICE:
            memcpy(&v, field, sizeof(v));
            rd_log(RD_LOG_INFO, "config", "%s = %s", o->name, o->choices[v]);
            break;
        }
    }
}
