/* ringd-soak: a chaos soak of elastic membership on one machine.
 *
 * Starts a redis-server and K ringd daemons (nodes n0..n{K-1}) on loopback, and on each daemon L
 * client processes of one job ("soak", world K*L, --min-size). Every client loops over allreduces
 * (i32 sum) of a size and name derived from (seed, step), with a step counter the ranks keep in
 * lockstep: after a membership change they agree on the most advanced one (allreduce MAX named
 * "sync.<generation>"). Element k of rank r's input is hash(seed, step, k) + r, so every result is
 * checked exactly. Clients report each op (ok, failed with RINGD_E_MEMBERSHIP, wrong, other
 * error) to this process through a pipe.
 *
 * Meanwhile, at random intervals (--chaos-ms on average, seeded by --seed) this process kills a
 * daemon with SIGKILL, stops one with SIGSTOP for shorter or longer than the lease, drains one
 * (`ringctl drain`, then SIGTERM), kills one node's clients, or kills redis-server (started again,
 * empty, on its port after a delay), or with --netns (each daemon in a network namespace of its
 * own, on a bridge with redis-server) cuts one node's link for shorter or longer than the lease:
 * a network partition, healed after; a daemon taken down comes back after a delay with new
 * clients. No action is taken unless two nodes serve the job, nor in the
 * last 5 s of the run.
 *
 * At the end it prints one summary line: ops completed, failed with RINGD_E_MEMBERSHIP, other
 * errors, errors on clients whose daemon was being taken down ("closed", expected), wrong
 * results, hangs (a client with no op finished for --hang-ms while its daemon ran), daemons that
 * died on their own, and recovery times (from an action to the first successful op started after
 * it on another node). Exit status 0 only with no wrong result, no hang, no daemon death and at
 * least one op; other errors are printed as they happen and fail the run only with --strict,
 * since a deadline can legitimately pass while the job is being reshaped, and failures no action
 * explains (below) fail it only with --explained.
 *
 * Since each kind of fault has its own target, it then prints the lease TTL and one line per kind
 * of action: recovery times (from the SIGKILL, the SIGSTOP, the start of `ringctl drain`), and the
 * failures each action explains. Every failed call is explained by an action in force when it
 * completed (from the action until its node is back and the lease and 2 s more have passed): one
 * on the failing client's own node first, then one the failure's message names (a fault before a
 * drain), then the latest fault, and only then a drain; a failure nothing explains is printed and
 * counted as unexplained. Failures are split into those on the survivors until the acted-on node
 * comes back (its daemon started again or resumed, its clients started again), those on the
 * survivors after that ("rejoin": its joining the job again reshapes it once more), and those on
 * the acted-on node's own clients. A verdict line per target follows: after a kill, recovery within
 * 500 ms (the link break is seen directly); after a stop or a partition, within the lease TTL +
 * 1 s (a silent host is noticed when its lease runs out); after a drain, within 500 ms with no
 * failed op on the survivors. An action never recovered from misses its target. Targets are
 * reported, not enforced: they do not change the exit status. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "elastic.h"
#include "ringd.h"

#define MAX_NODES 16
#define MAX_LOCAL 16
#define START_LIMIT_MS 10000   /* a daemon must answer on its socket by then */
#define KILL_LIMIT_MS 5000     /* a SIGKILLed daemon must be reaped by then */
#define DRAIN_LIMIT_MS 20000   /* ringctl drain --timeout 10000 must have returned by then */
#define TERM_LIMIT_MS 25000    /* a drained daemon must exit after SIGTERM by then */
#define RESPAWN_DELAY_MS 500   /* before a client that exited on its own is started again */
#define SHUTDOWN_LIMIT_MS 5000 /* at the end, children get this long to exit */
#define QUIET_MS 5000          /* no chaos in the last this long (at most a quarter of the run) */
/* The targets, per kind of action, for the first successful op on the survivors after it. */
#define KILL_TARGET_MS 500  /* the link break is seen directly */
#define STOP_SLACK_MS 1000  /* a silent host: within the lease TTL plus this */
#define DRAIN_TARGET_MS 500 /* and no failed op on the survivors */

/* ---- what clients report ------------------------------------------------------------------ */

typedef enum {
    EV_OPEN,       /* ringd_open returned */
    EV_SYNC,       /* the ranks agreed on a step */
    EV_OK,         /* an allreduce completed with the right result */
    EV_MEMBERSHIP, /* an allreduce or a sync failed with RINGD_E_MEMBERSHIP */
    EV_WRONG,      /* an allreduce completed with a wrong result */
    EV_ERROR,      /* anything else failed */
    EV_RESIZED,    /* a reducescatter or allgatherv failed as the job's size changed under it:
                      its counts were for the old size (what the API promises, even for a
                      graceful leave) */
} ev_kind;

/* One report, written whole to the pipe (smaller than PIPE_BUF, so never interleaved). */
typedef struct {
    int32_t kind, node, slot, incarnation, pid, rank, size, rc;
    uint64_t gen, gen_after, step, count;
    int64_t t_start, t_end; /* rb_elastic_now_ms */
    char msg[224];
} soak_event;

typedef struct {
    int nodes, local;
    uint64_t duration_s, seed, chaos_ms, max_count, hang_ms, lease_ms, min_size, restart_ms;
    uint64_t mixed; /* non-zero: ops alternate between max_count and this many elements */
    int chaos, strict, explained, keep, verbose, encrypt, netns;
    const char *ringd, *ringctl, *redis;
    char **daemon_args; /* after "--" */
    int n_daemon_args;
} soak_opts;

/* ---- the client ---------------------------------------------------------------------------- */

/* Element k of step's input, before the rank is added: 1..65536, so sums stay exact in i32. */
static int64_t term(uint64_t seed, uint64_t step, size_t k)
{
    return (int64_t)(rb_mix64(seed, step, k) & 0xffff) + 1;
}

/* Elements of step's allreduce: log-uniform in [1, max], so small ops (each node computes the
 * result) and large ones (through the ring) mix. */
static size_t op_count(uint64_t seed, uint64_t step, uint64_t max)
{
    uint64_t h = rb_mix64(seed, step, UINT64_MAX);
    int bits = 0;
    while ((UINT64_C(2) << bits) <= max)
        bits++;
    int b = (int)(h % (uint64_t)(bits + 1));
    uint64_t c = (UINT64_C(1) << b) + (h >> 32) % (UINT64_C(1) << b);
    return (size_t)(c > max ? max : c);
}

/* Checks an allreduce of ranks contributing term + rank. In the generation it was submitted in,
 * that is ranks 0..n-1 exactly. Completed in another one (carried over a graceful leave, or
 * agreed before a join), m ranks took part, m the old or the new size, and their old ranks are
 * some m of 0..max(old, new)-1: every element must then agree on one such m and rank sum.
 * Returns -1 when right, else the first element found wrong, with the value expected there. */
static long check(const int32_t *got, size_t count, uint64_t seed, uint64_t step, int n_old,
                  int n_new, int same_gen, int64_t *want)
{
    long bad = 0;
    *want = (int64_t)n_old * term(seed, step, 0) + (int64_t)n_old * (n_old - 1) / 2;
    for (int c = 0; c < (same_gen ? 1 : 2); c++) {
        int64_t m = c == 0 ? n_old : n_new, top = n_old > n_new ? n_old : n_new;
        int64_t sum = m * (m - 1) / 2;
        if (!same_gen) {
            sum = got[0] - m * term(seed, step, 0);
            if (sum < m * (m - 1) / 2 || sum > m * (2 * top - m - 1) / 2)
                continue;
        }
        size_t k = 0;
        while (k < count && got[k] == m * term(seed, step, k) + sum)
            k++;
        if (k == count)
            return -1;
        if (c == 0) {
            bad = (long)k;
            *want = m * term(seed, step, k) + sum;
        }
    }
    return bad;
}

/* Checks a reducescatter (kind 1) or allgatherv (kind 2) of each elements per rank of the
 * step's data, n ranks contributing as they were numbered at submission: rank me keeps its
 * block of the sum, or gets every rank's block. me2, its rank once the call returned, is
 * accepted too (a graceful change that kept the size may renumber ranks). Returns -1 when
 * right, else the first element found wrong. */
static long check_share(int kind, const int32_t *got, size_t each, uint64_t seed, uint64_t step,
                        int n, int me, int me2)
{
    long first_bad = 0;
    for (int c = 0; c < 2; c++) {
        int who = c == 0 ? me : me2;
        size_t k, total = kind == 1 ? each : each * (size_t)n;
        for (k = 0; k < total; k++) {
            int64_t want;
            if (kind == 1)
                want = (int64_t)n * term(seed, step, (size_t)who * each + k) +
                       (int64_t)n * (n - 1) / 2;
            else
                want = term(seed, step, k) + (int64_t)(k / each);
            if (got[k] != want)
                break;
        }
        if (k == total)
            return -1;
        if (c == 0)
            first_bad = (long)k;
    }
    return first_bad;
}

/* Errors after which the session is of no more use. */
static int fatal(ringd_result_t rc)
{
    return rc != RINGD_OK && rc != RINGD_E_MEMBERSHIP && rc != RINGD_E_TIMEOUT &&
           rc != RINGD_E_STALLED && rc != RINGD_E_MISMATCH;
}

/* Completes ev (kind, result, the job as the call left it, a message) and sends it; a client
 * that cannot report has no reason to go on. */
static void emit(int fd, soak_event *ev, ev_kind kind, ringd_t *r, ringd_result_t rc,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void emit(int fd, soak_event *ev, ev_kind kind, ringd_t *r, ringd_result_t rc,
                 const char *fmt, ...)
{
    va_list ap;
    ev->kind = kind;
    ev->rc = rc;
    ev->t_end = rb_elastic_now_ms();
    ev->gen_after = r != NULL ? ringd_generation(r) : 0;
    va_start(ap, fmt);
    vsnprintf(ev->msg, sizeof(ev->msg), fmt, ap);
    va_end(ap);
    if (write(fd, ev, sizeof(*ev)) != (ssize_t)sizeof(*ev))
        _exit(3);
}

/* One client process: opens the job and runs allreduces (with reducescatters and allgathervs
 * among them) until killed. Returns the exit status
 * when the session breaks. */
static int client_main(const soak_opts *o, const char *sock, int node, int slot, int incarnation,
                       int fd)
{
    soak_event ev = {.node = node, .slot = slot, .incarnation = incarnation, .pid = getpid()};
    ringd_options_t ro = RINGD_OPTIONS_INIT;
    size_t bytes = (size_t)o->max_count * sizeof(int32_t);
    ro.socket_path = sock;
    ro.job = "soak";
    ro.world_size = o->nodes * o->local;
    ro.local_size = o->local;
    ro.min_size = (int)o->min_size;
    ro.open_timeout_ms = (int)o->hang_ms;
    ro.arena_size = (2 * bytes + (1u << 20) + 4095) & ~(size_t)4095;
    int32_t *send = malloc(bytes), *recv = malloc(bytes);
    ringd_t *r = NULL;
    ev.t_start = rb_elastic_now_ms();
    ringd_result_t rc = send == NULL || recv == NULL ? RINGD_E_NOMEM : ringd_open(&ro, &r);
    ev.rank = r != NULL ? ringd_rank(r) : -1;
    ev.size = r != NULL ? ringd_size(r) : 0;
    ev.gen = ev.gen_after = r != NULL ? ringd_generation(r) : 0;
    emit(fd, &ev, rc == RINGD_OK ? EV_OPEN : EV_ERROR, r, rc, "ringd_open: %s", ringd_errmsg(r));
    uint64_t step = 0;
    int synced = 0;
    if (rc != RINGD_OK)
        goto out;
    while (!fatal(rc)) {
        char name[64];
        uint64_t gen = ringd_generation(r);
        int n = ringd_size(r), me = ringd_rank(r);
        ev.t_start = rb_elastic_now_ms();
        ev.gen = gen;
        ev.rank = me;
        ev.size = n;
        ev.step = step;
        if (!synced) {
            uint64_t max_step = 0;
            int root;
            ev.count = 1;
            snprintf(name, sizeof(name), "sync.%" PRIu64, gen);
            rc = rb_agree_step(r, name, step, &max_step, &root);
            if (rc == RINGD_OK)
                step = max_step;
            synced = rc == RINGD_OK && ringd_generation(r) == gen;
            emit(fd, &ev,
                 rc == RINGD_OK             ? EV_SYNC
                 : rc == RINGD_E_MEMBERSHIP ? EV_MEMBERSHIP
                                            : EV_ERROR,
                 r, rc, "%s: %s", name, rc == RINGD_OK ? "agreed" : ringd_errmsg(r));
            /* Until the daemon names a new generation, a retry would fail the same way. */
            if (rc != RINGD_OK && ringd_generation(r) == gen)
                rb_sleep_us(10000);
            continue;
        }
        size_t count = o->mixed == 0   ? op_count(o->seed, step, o->max_count)
                       : step % 2 == 0 ? (size_t)o->max_count
                                       : (size_t)o->mixed;
        for (size_t k = 0; k < count; k++)
            send[k] = (int32_t)(term(o->seed, step, k) + me);
        ev.count = count;
        /* every fourth step a reducescatter, and its every ninth an allgatherv, of the same
         * data: each rank keeps (or contributes) its share */
        int kind = step % 4 != 3 ? 0 : step % 9 == 0 ? 2 : 1;
        size_t each = count / (size_t)n, counts[n];
        if (kind != 0 && each == 0)
            kind = 0;
        snprintf(name, sizeof(name), "soak.%" PRIu64, step);
        if (kind == 0) {
            rc = ringd_allreduce(r, name, send, recv, count, RINGD_I32, RINGD_SUM);
        } else if (kind == 1) {
            rc = ringd_reducescatter(r, name, send, recv, each, RINGD_I32, RINGD_SUM);
        } else {
            for (int q = 0; q < n; q++)
                counts[q] = each;
            rc = ringd_allgatherv(r, name, send + (size_t)me * each, each, recv, counts, RINGD_I32);
        }
        step++;
        int same_gen = ringd_generation(r) == gen;
        if (kind != 0) {
            if (rc == RINGD_OK) {
                long bad = check_share(kind, recv, each, o->seed, step - 1, n, me, ringd_rank(r));
                if (bad < 0)
                    emit(fd, &ev, EV_OK, r, rc, "%s", name);
                else
                    emit(fd, &ev, EV_WRONG, r, rc,
                         "%s (%s): element %ld of %zu per rank is wrong (rank %d of %d, then %d "
                         "of %d)",
                         name, kind == 1 ? "reducescatter" : "allgatherv", bad, each, me, n,
                         ringd_rank(r), ringd_size(r));
            } else {
                emit(fd, &ev,
                     rc != RINGD_E_MEMBERSHIP ? EV_ERROR
                     : ringd_size(r) != n     ? EV_RESIZED
                                              : EV_MEMBERSHIP,
                     r, rc, "%s: %s", name, ringd_errmsg(r));
            }
            synced = rc == RINGD_OK && same_gen;
            continue;
        }
        /* After a change, even one this op survived, the ranks agree on a step again: a newcomer
         * starts with a sync, and the old ranks must meet it there. */
        synced = rc == RINGD_OK && same_gen;
        if (rc == RINGD_OK) {
            int64_t want;
            long bad = check(recv, count, o->seed, step - 1, n, ringd_size(r), same_gen, &want);
            if (bad < 0)
                emit(fd, &ev, EV_OK, r, rc, "%s", name);
            else
                emit(fd, &ev, EV_WRONG, r, rc,
                     "%s: element %ld of %zu is %" PRId32 ", expected %" PRId64
                     " (rank %d of %d, then %d of %d)",
                     name, bad, count, recv[bad], want, me, n, ringd_rank(r), ringd_size(r));
        } else {
            emit(fd, &ev, rc == RINGD_E_MEMBERSHIP ? EV_MEMBERSHIP : EV_ERROR, r, rc, "%s: %s",
                 name, ringd_errmsg(r));
        }
    }
out:
    ringd_close(r);
    free(recv);
    free(send);
    return 1;
}

/* ---- the conductor ------------------------------------------------------------------------- */

typedef enum {
    NODE_STARTING, /* daemon started; its socket does not answer yet */
    NODE_UP,       /* daemon serving, clients started */
    NODE_STOPPED,  /* SIGSTOPped until `until` */
    NODE_CUT,      /* its network link down until `until` (--netns) */
    NODE_DRAINING, /* `ringctl drain` running (drain_pid); SIGKILLed at `until` */
    NODE_EXITING,  /* SIGTERM or SIGKILL sent; SIGKILL (again) at `until` */
    NODE_DOWN,     /* no daemon; started again at `until` */
} node_state;

static const char *const state_names[] = {"starting", "up",      "stopped", "cut",
                                          "draining", "exiting", "down"};

typedef struct {
    pid_t pid;             /* 0: none */
    int opened, hung;      /* its ringd_open returned; counted as a hang */
    int64_t last_progress; /* its last report, or when it (or its stopped daemon) resumed */
    int64_t respawn_at;    /* when to start it again; 0: not to */
    soak_event last;       /* its last report, for the hang message */
} soak_client;

typedef struct {
    char name[16], sock[PATH_MAX], log[PATH_MAX];
    node_state state;
    pid_t pid, drain_pid;
    int incarnation; /* daemons started so far; clients carry the one they were started under */
    int killed;      /* SIGKILL already sent in NODE_EXITING */
    int64_t until;
    soak_client c[MAX_LOCAL];
} soak_node;

/* ACT_PARTITION last: runs without --netns draw among the others, as they did before it. */
enum { ACT_KILL, ACT_STOP, ACT_DRAIN, ACT_RESTART, ACT_REDIS, ACT_PARTITION, ACT_COUNT };
static const char *const act_names[ACT_COUNT] = {"kill",    "stop",  "drain",
                                                 "restart", "redis", "partition"};

/* One chaos action and what followed it until the next one. Failures are counted by the time
 * they completed: those on node's own clients (its daemon was taken down under them), and those
 * on the survivors (other nodes whose daemon was not itself being taken down), split at the
 * moment node comes back, since its joining the job again fails the survivors' ops too. */
typedef struct {
    int64_t t, recovered; /* recovered: end of the first successful op after it; -1 none yet */
    int64_t back;   /* node's daemon started again, resumed, or its clients started; or INT64_MAX */
    int kind, node; /* node -1: Redis (ACT_REDIS) */
    int redis_away; /* taken while Redis was down or just back: its recovery waits on Redis and
                       is not timed against its kind's target */
    long membership, errors; /* on the survivors before back: RINGD_E_MEMBERSHIP, anything else */
    long rejoin;             /* on the survivors from back on: any failure */
    long own;                /* on node's own clients: any failure */
} soak_action;

typedef struct {
    soak_opts o;
    char dir[256], redis_url[64];
    char key[300]; /* --encrypt: the ring's key file, in dir */
    /* --netns: namespaces "<tag>n<i>", veth "<tag>a<i>" (the bridge's end) and "<tag>b<i>", the
     * bridge "<tag>br" at <net>.1, node i at <net>.<10 + i>; made (1) or not */
    char tag[16], net[16];
    int netns_made;  /* all of it, in use */
    int bridge_made; /* what of it netns_teardown removes: the bridge, the nodes' namespaces */
    uint32_t ns_made;
    pid_t redis_pid;
    int redis_port;        /* the one it listens on, again after a restart */
    int64_t redis_back_at; /* killed by ACT_REDIS: started again then; 0: up */
    int ev_fd[2];
    soak_node n[MAX_NODES];
    uint64_t rng;
    int64_t t0, next_chaos;
    int formed;
    int64_t sampled_ms; /* when the daemons' memory and descriptors were first sampled */
    long rss_kib[MAX_NODES], fds[MAX_NODES]; /* that first sample */
    pid_t sampled_pid[MAX_NODES];
    long ops, membership, errors, closed, wrong, hangs, crashes, resized;
    long unexplained; /* failures no fault in force explains (a drain or a Redis outage none) */
    long errors_by[RINGD_RESULT_COUNT];
    soak_action *act;
    int n_act, cap_act, act_count[ACT_COUNT];
    unsigned char buf[64 * sizeof(soak_event)];
    size_t have;
} soak;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

/* Prints a line stamped with the time since the start. */
static void say(const soak *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const soak *s, const char *fmt, ...)
{
    va_list ap;
    printf("soak: +%.3fs ", (double)(rb_elastic_now_ms() - s->t0) / 1000.0);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static double rnd(soak *s)
{
    return (double)(rb_mix64(s->o.seed, s->rng++, 0x50a4) >> 11) * 0x1p-53;
}

/* Uniform in [lo, hi) milliseconds. */
static int64_t rnd_ms(soak *s, double lo, double hi)
{
    return (int64_t)(lo + (hi - lo) * rnd(s));
}

/* Forks argv[0] (searched in PATH) with stdout and stderr into log (appended); the child dies
 * with this process. Returns its pid, or -1. */
static pid_t spawn(const char *log, char *const *argv)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_DFL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execvp(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* A TCP port of 127.0.0.1 that was free a moment ago, or -1. */
static int free_port(int attempt)
{
    /* Below Linux's ephemeral ports (32768 on): while Redis is down and restarts on it, no
     * daemon's --listen 127.0.0.1:0 nor any outgoing connection can take it meanwhile. */
    for (int k = 0; k < 100; k++) {
        int port =
            20000 +
            (int)(((unsigned)getpid() * 7919u + (unsigned)(attempt * 100 + k) * 131u) % 12000u);
        struct sockaddr_in sin = {.sin_family = AF_INET,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                  .sin_port = htons((uint16_t)port)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return port;
    }
    return -1;
}

/* 1 when redis-server on 127.0.0.1:port answers PING. */
static int redis_pong(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char reply[16] = "";
    int ok = 0, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {1, 0};
    if (fd < 0)
        return 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 && write(fd, "PING\r\n", 6) == 6 &&
        read(fd, reply, sizeof(reply) - 1) > 0)
        ok = strncmp(reply, "+PONG", 5) == 0;
    close(fd);
    return ok;
}

/* Runs a shell command line, its output discarded. Returns its exit status, or -1. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd + 2, sizeof(cmd) - 32, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(cmd) - 32)
        return -1;
    memcpy(cmd, "{ ", 2); /* every command of the line quiet, not only its last */
    strcat(cmd, "; } >/dev/null 2>&1");
    fflush(NULL);
    int rc = system(cmd);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* --netns: removes what netns_setup made, and nothing of another run's: each node's namespace
 * (its end of the veth pair goes with it once its processes are gone), the bridge's end of a
 * pair, and the bridge. Processes still in a namespace keep it until they exit. */
static void netns_teardown(soak *s)
{
    for (int i = 0; i < s->o.nodes; i++)
        if (s->ns_made & (1u << i)) {
            sh("ip netns del %sn%d", s->tag, i);
            sh("ip link del %sa%d", s->tag, i);
        }
    if (s->bridge_made)
        sh("ip link del %sbr", s->tag);
    s->ns_made = 0;
    s->bridge_made = s->netns_made = 0;
}

/* --netns: a bridge at <net>.1 (redis-server listens there too), and per node a namespace joined
 * to it by a veth pair, the node at <net>.<10 + i>. Returns 0, or -1 with what was made taken
 * down again (no root, no iproute2). */
static int netns_setup(soak *s)
{
    int id = (int)(getpid() % 100000);
    const char *t = s->tag;
    /* a tag and a subnet no other run here holds: a bridge of that name, or a route to that
     * subnet, sends it on to the next */
    for (int k = 0; k < 64 && !s->bridge_made; k++) {
        snprintf(s->tag, sizeof(s->tag), "rs%d", (id + k) % 100000);
        snprintf(s->net, sizeof(s->net), "10.213.%d", (id + k) % 250 + 1);
        if (sh("ip link show %sbr", t) == 0 ||
            sh("test -z \"$(ip -4 route show %s.0/24)\"", s->net) != 0)
            continue;
        if (sh("ip link add name %sbr type bridge", t) != 0)
            goto fail; /* no root, or no iproute2 */
        s->bridge_made = 1;
    }
    if (!s->bridge_made || sh("ip addr add %s.1/24 dev %sbr && ip link set %sbr up", s->net, t, t))
        goto fail;
    for (int i = 0; i < s->o.nodes; i++) {
        if (sh("ip netns add %sn%d", t, i) != 0)
            goto fail;
        s->ns_made |= 1u << i;
        if (sh("ip link add %sa%d type veth peer name %sb%d && "
               "ip link set %sb%d netns %sn%d && ip link set %sa%d master %sbr up && "
               "ip -n %sn%d addr add %s.%d/24 dev %sb%d && ip -n %sn%d link set %sb%d up && "
               "ip -n %sn%d link set lo up",
               t, i, t, i, t, i, t, i, t, i, t, t, i, s->net, 10 + i, t, i, t, i, t, i, t, i) != 0)
            goto fail;
    }
    s->netns_made = 1;
    return 0;
fail:
    netns_teardown(s);
    return -1;
}

/* Starts redis-server on a free port below the ephemeral ones, or on the one it had (a restart),
 * and waits for it to answer. Returns 0 or -1. */
static int redis_start(soak *s)
{
    char log[PATH_MAX + 16], port[16];
    snprintf(log, sizeof(log), "%s/redis.log", s->dir);
    for (int attempt = 0; attempt < 5; attempt++) {
        int p = s->redis_port > 0 ? s->redis_port : free_port(attempt);
        snprintf(port, sizeof(port), "%d", p);
        char bridge[32];
        snprintf(bridge, sizeof(bridge), "%s.1", s->net);
        char *argv[24] = {(char *)s->o.redis,
                          "--port",
                          port,
                          "--save",
                          "",
                          "--appendonly",
                          "no",
                          "--dir",
                          s->dir,
                          "--daemonize",
                          "no",
                          "--bind",
                          "127.0.0.1"};
        int k = 13;
        if (s->netns_made) { /* the namespaces reach it on the bridge, which only they share */
            argv[k++] = bridge;
            argv[k++] = "--protected-mode";
            argv[k++] = "no";
        }
        argv[k] = NULL;
        s->redis_pid = p > 0 ? spawn(log, argv) : -1;
        if (s->redis_pid < 0)
            continue;
        for (int64_t end = rb_elastic_now_ms() + 5000; rb_elastic_now_ms() < end;
             rb_sleep_us(20000)) {
            if (waitpid(s->redis_pid, NULL, WNOHANG) == s->redis_pid)
                break;
            if (redis_pong(p)) {
                snprintf(s->redis_url, sizeof(s->redis_url), "redis://%s:%d",
                         s->netns_made ? bridge : "127.0.0.1", p);
                s->redis_port = p;
                return 0;
            }
        }
        kill(s->redis_pid, SIGKILL);
        waitpid(s->redis_pid, NULL, 0);
        s->redis_pid = 0;
    }
    fprintf(stderr, "soak: %s did not start (see its log in %s)\n", s->o.redis, s->dir);
    return -1;
}

/* 1 when a daemon accepts connections on sock. */
static int socket_answers(const char *sock)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Notes that node i comes back from the actions taken on it. */
static void node_back(soak *s, int i, int64_t now)
{
    for (int a = 0; a < s->n_act; a++)
        if (s->act[a].node == i && s->act[a].back == INT64_MAX)
            s->act[a].back = now;
}

/* Writes 32 random bytes as hex into a new private file at path. Returns 0, or -1 with errno. */
static int write_key(const char *path)
{
    uint8_t raw[32];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    char hex[2 * sizeof(raw) + 1];
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    ssize_t w = write(fd, hex, 2 * sizeof(raw));
    int rc = w == (ssize_t)(2 * sizeof(raw)) ? 0 : -1;
    close(fd);
    return rc;
}

/* Starts node i's daemon; its clients follow once its socket answers. */
static void node_start(soak *s, int i)
{
    soak_node *n = &s->n[i];
    char lease[24], ns[32], listen[40], *argv[40 + 64];
    int k = 0;
    snprintf(lease, sizeof(lease), "%" PRIu64, s->o.lease_ms);
    snprintf(ns, sizeof(ns), "%sn%d", s->tag, i);
    snprintf(listen, sizeof(listen), "%s.%d:0", s->net, 10 + i);
    if (s->netns_made) { /* in its own namespace: `ip netns exec` execs ringd, same pid */
        argv[k++] = "ip";
        argv[k++] = "netns";
        argv[k++] = "exec";
        argv[k++] = ns;
    }
    const char *fixed[] = {s->o.ringd,
                           "--socket",
                           n->sock,
                           "--node",
                           n->name,
                           "--listen",
                           s->netns_made ? listen : "127.0.0.1:0",
                           "--redis",
                           s->redis_url,
                           "--lease-ttl",
                           lease};
    for (size_t j = 0; j < sizeof(fixed) / sizeof(fixed[0]); j++)
        argv[k++] = (char *)fixed[j];
    if (s->o.encrypt) { /* sealed links under a key of the soak's */
        argv[k++] = "--key-file";
        argv[k++] = s->key;
        argv[k++] = "--encrypt";
    } else {
        argv[k++] = "--insecure";
    }
    for (int j = 0; j < s->o.n_daemon_args; j++)
        argv[k++] = s->o.daemon_args[j];
    argv[k] = NULL;
    n->incarnation++;
    n->killed = 0;
    n->pid = spawn(n->log, argv);
    n->state = NODE_STARTING;
    n->until = rb_elastic_now_ms() + START_LIMIT_MS;
    node_back(s, i, rb_elastic_now_ms());
}

static void client_start(soak *s, int i, int k)
{
    soak_node *n = &s->n[i];
    soak_client *c = &n->c[k];
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        close(s->ev_fd[0]);
        _exit(client_main(&s->o, n->sock, i, k, n->incarnation, s->ev_fd[1]));
    }
    memset(c, 0, sizeof(*c));
    c->pid = pid > 0 ? pid : 0;
    c->last_progress = rb_elastic_now_ms();
    c->respawn_at = pid > 0 ? 0 : c->last_progress + RESPAWN_DELAY_MS;
    node_back(s, i, c->last_progress);
}

/* Kills node i's clients and forgets them (they are reaped whenever they exit); with respawn_ms
 * >= 0 new ones start that much later. */
static void clients_kill(soak *s, int i, int64_t respawn_ms)
{
    for (int k = 0; k < s->o.local; k++) {
        soak_client *c = &s->n[i].c[k];
        if (c->pid > 0)
            kill(c->pid, SIGKILL);
        c->pid = 0;
        c->respawn_at = respawn_ms >= 0 ? rb_elastic_now_ms() + respawn_ms : 0;
    }
}

/* A node serves the job: its daemon runs and all its clients have opened. */
static int serving(const soak *s, int i)
{
    const soak_node *n = &s->n[i];
    if (n->state != NODE_UP)
        return 0;
    for (int k = 0; k < s->o.local; k++)
        if (n->c[k].pid <= 0 || !n->c[k].opened)
            return 0;
    return 1;
}

/* Prints the last lines of a file to stderr, for the evidence. */
static void show_tail(const char *path, int lines)
{
    FILE *f = fopen(path, "r");
    char buf[512];
    long pos[64] = {0};
    int n = 0;
    if (f == NULL)
        return;
    if (lines > 64)
        lines = 64;
    for (long at = 0; fgets(buf, sizeof(buf), f) != NULL; at = ftell(f))
        pos[n++ % lines] = at;
    fseek(f, n > lines ? pos[n % lines] : 0, SEEK_SET);
    fprintf(stderr, "---- last lines of %s ----\n", path);
    while (fgets(buf, sizeof(buf), f) != NULL)
        fputs(buf, stderr);
    fprintf(stderr, "----\n");
    fclose(f);
}

/* Takes one chaos action on a node picked at random among those serving, if two serve. */
static void chaos(soak *s, int64_t now)
{
    int pick[MAX_NODES], np = 0;
    for (int i = 0; i < s->o.nodes; i++)
        if (serving(s, i))
            pick[np++] = i;
    if (np < 2)
        return;
    int i = pick[(int)(rnd(s) * np)];
    int kind = (int)(rnd(s) * (s->netns_made ? ACT_COUNT : ACT_PARTITION));
    if (kind == ACT_REDIS && s->redis_back_at != 0)
        return; /* down already */
    if (kind == ACT_REDIS)
        i = -1;
    soak_node *n = i >= 0 ? &s->n[i] : NULL;
    if (s->n_act == s->cap_act) {
        int cap = s->cap_act ? 2 * s->cap_act : 64;
        soak_action *a = realloc(s->act, (size_t)cap * sizeof(*a));
        if (a == NULL)
            return;
        s->act = a;
        s->cap_act = cap;
    }
    int away = 0;
    for (int a = 0; a < s->n_act; a++)
        away |=
            s->act[a].kind == ACT_REDIS &&
            (s->act[a].back == INT64_MAX || now < s->act[a].back + (int64_t)s->o.lease_ms + 2000);
    s->act[s->n_act++] = (soak_action){
        .t = now, .recovered = -1, .back = INT64_MAX, .kind = kind, .node = i, .redis_away = away};
    s->act_count[kind]++;
    switch (kind) {
    case ACT_KILL:
        say(s, "action %d: kill -9 %s (pid %d)", s->n_act, n->name, (int)n->pid);
        kill(n->pid, SIGKILL);
        n->state = NODE_EXITING;
        n->killed = 1;
        n->until = now + KILL_LIMIT_MS;
        break;
    case ACT_STOP: {
        double lease = (double)s->o.lease_ms;
        int64_t ms = rnd(s) < 0.5 ? rnd_ms(s, 0.2 * lease, 0.8 * lease)
                                  : rnd_ms(s, 1.5 * lease, 3.0 * lease);
        say(s, "action %d: SIGSTOP %s (pid %d) for %" PRId64 " ms (lease %" PRIu64 " ms)", s->n_act,
            n->name, (int)n->pid, ms, s->o.lease_ms);
        kill(n->pid, SIGSTOP);
        n->state = NODE_STOPPED;
        n->until = now + ms;
        break;
    }
    case ACT_PARTITION: {
        double lease = (double)s->o.lease_ms;
        int64_t ms = rnd(s) < 0.5 ? rnd_ms(s, 0.2 * lease, 0.8 * lease)
                                  : rnd_ms(s, 1.5 * lease, 3.0 * lease);
        say(s, "action %d: cut %s off the network for %" PRId64 " ms (lease %" PRIu64 " ms)",
            s->n_act, n->name, ms, s->o.lease_ms);
        if (sh("ip link set %sa%d down", s->tag, i) != 0) { /* taken back: nothing was cut */
            say(s, "%s: ip link set %sa%d down failed: no partition", n->name, s->tag, i);
            s->n_act--;
            s->act_count[kind]--;
            break;
        }
        n->state = NODE_CUT;
        n->until = now + ms;
        break;
    }
    case ACT_DRAIN: {
        char log[PATH_MAX + 16];
        char *argv[] = {(char *)s->o.ringctl, "--socket", n->sock, "drain",
                        "--timeout",          "10000",    NULL};
        snprintf(log, sizeof(log), "%s.drain", n->log);
        unlink(log);
        say(s, "action %d: ringctl drain %s (pid %d)", s->n_act, n->name, (int)n->pid);
        n->state = NODE_DRAINING;
        n->until = now + DRAIN_LIMIT_MS;
        n->drain_pid = spawn(log, argv);
        if (n->drain_pid < 0) {
            n->drain_pid = 0;
            kill(n->pid, SIGTERM);
            n->state = NODE_EXITING;
            n->until = now + TERM_LIMIT_MS;
        }
        break;
    }
    case ACT_REDIS: {
        int64_t ms = rnd_ms(s, 0.2 * (double)s->o.lease_ms, 3.0 * (double)s->o.lease_ms);
        say(s, "action %d: kill -9 redis-server (pid %d), back in %" PRId64 " ms", s->n_act,
            (int)s->redis_pid, ms);
        kill(s->redis_pid, SIGKILL);
        waitpid(s->redis_pid, NULL, 0);
        s->redis_pid = 0;
        s->redis_back_at = now + ms;
        break;
    }
    default:
        say(s, "action %d: restart the clients of %s", s->n_act, n->name);
        clients_kill(s, i, 100);
        break;
    }
}

/* Whether a failure message names node name ("node n1 is gone", "(pid 7, node n1)"). */
static int names_node(const char *msg, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strstr(msg, "node "); p != NULL; p = strstr(p + 1, "node ")) {
        const char *q = p + 5;
        if (strncmp(q, name, len) == 0 && !(q[len] >= '0' && q[len] <= '9'))
            return 1;
    }
    return 0;
}

/* The action that explains a failure on node `node` completed at t with message msg, or NULL
 * (unexplained). An action is in force from when it is taken until its node is back (daemon
 * started again or resumed, clients started again) and the job has had time to re-form after
 * it (the lease, and 2 s). Among those in force: an action on the failing client's own node
 * first (*own set); then one the message names, a fault before a drain; then the latest fault
 * on a node; then the latest Redis outage; then the latest drain. So a failure counts against a
 * drain or a Redis outage (which alone should fail nothing) only where nothing else that was
 * going on explains it. */
static soak_action *explain(soak *s, int node, int64_t t, const char *msg, int *own)
{
    int64_t settle = (int64_t)s->o.lease_ms + 2000;
    /* own, named fault, named drain, fault on a node, Redis outage */
    soak_action *pick[5] = {NULL, NULL, NULL, NULL, NULL};
    soak_action *drain = NULL;
    for (int a = 0; a < s->n_act; a++) {
        soak_action *x = &s->act[a];
        if (x->t > t || (x->back != INT64_MAX && t > x->back + settle))
            continue;
        int named = x->node >= 0 && names_node(msg, s->n[x->node].name);
        if (x->node == node)
            pick[0] = x;
        else if (named && x->kind != ACT_DRAIN)
            pick[1] = x;
        else if (named)
            pick[2] = x;
        else if (x->kind == ACT_REDIS)
            pick[4] = x;
        else if (x->kind != ACT_DRAIN)
            pick[3] = x;
        else
            drain = x;
    }
    *own = pick[0] != NULL;
    for (int k = 0; k < 5; k++)
        if (pick[k] != NULL)
            return pick[k];
    return drain;
}

/* Takes in one report. */
static void on_event(soak *s, const soak_event *ev)
{
    if (ev->node < 0 || ev->node >= s->o.nodes || ev->slot < 0 || ev->slot >= s->o.local)
        return;
    soak_node *n = &s->n[ev->node];
    soak_client *c = &n->c[ev->slot];
    int current = c->pid == ev->pid && ev->incarnation == n->incarnation;
    /* Errors of a client whose daemon is being taken down are the point of the action. */
    int expected =
        !current || n->state == NODE_DRAINING || n->state == NODE_EXITING || n->state == NODE_DOWN;
    if (current) {
        c->last_progress = ev->t_end;
        c->hung = 0;
        c->last = *ev;
        c->opened |= ev->kind == EV_OPEN;
    }
    int own = 0, failed = ev->kind == EV_MEMBERSHIP || (ev->kind == EV_ERROR && !expected);
    /* a membership change, or a deadline passing while the job re-forms: what faults cause */
    int explainable = ev->kind == EV_MEMBERSHIP || ev->rc == RINGD_E_TIMEOUT;
    soak_action *after =
        failed && explainable ? explain(s, ev->node, ev->t_end, ev->msg, &own) : NULL;
    /* a drain, and a Redis outage, should fail nothing on the other nodes before it is over */
    if (after != NULL && !own && ev->t_end < after->back &&
        (after->kind == ACT_DRAIN || after->kind == ACT_REDIS)) {
        s->unexplained++;
        say(s, "failure on %s.%d (pid %d) that only a %s explains: %s", n->name, ev->slot, ev->pid,
            after->kind == ACT_DRAIN ? "drain" : "Redis outage", ev->msg);
    }
    if (after != NULL && own)
        after->own++;
    else if (after != NULL && ev->t_end >= after->back)
        after->rejoin++;
    else if (after != NULL && ev->kind == EV_MEMBERSHIP)
        after->membership++;
    else if (after != NULL)
        after->errors++;
    else if (failed) {
        s->unexplained++;
        say(s, "unexplained failure on %s.%d (pid %d): %s", n->name, ev->slot, ev->pid, ev->msg);
    }
    switch ((ev_kind)ev->kind) {
    case EV_OPEN:
        if (s->o.verbose)
            say(s, "%s.%d (pid %d) opened: rank %d of %d, generation %" PRIu64, n->name, ev->slot,
                ev->pid, ev->rank, ev->size, ev->gen);
        break;
    case EV_SYNC: break;
    case EV_OK:
        s->ops++;
        for (int a = 0; a < s->n_act; a++)
            if (s->act[a].recovered < 0 && s->act[a].node != ev->node && ev->t_start >= s->act[a].t)
                s->act[a].recovered = ev->t_end;
        break;
    case EV_MEMBERSHIP:
        s->membership++;
        if (s->o.verbose)
            say(s, "%s.%d rank %d of %d, generation %" PRIu64 " -> %" PRIu64 ": %s", n->name,
                ev->slot, ev->rank, ev->size, ev->gen, ev->gen_after, ev->msg);
        break;
    case EV_RESIZED:
        s->resized++;
        if (s->o.verbose)
            say(s, "%s.%d: %s", n->name, ev->slot, ev->msg);
        break;
    case EV_WRONG:
        s->wrong++;
        say(s, "WRONG on %s.%d (pid %d), generation %" PRIu64 " -> %" PRIu64 ": %s", n->name,
            ev->slot, ev->pid, ev->gen, ev->gen_after, ev->msg);
        break;
    case EV_ERROR:
        if (expected) {
            s->closed++;
            if (s->o.verbose)
                say(s, "%s.%d (pid %d), its daemon going: %s: %s", n->name, ev->slot, ev->pid,
                    ringd_strerror((ringd_result_t)ev->rc), ev->msg);
            break;
        }
        s->errors++;
        if (ev->rc > 0 && ev->rc < RINGD_RESULT_COUNT)
            s->errors_by[ev->rc]++;
        say(s,
            "error on %s.%d (pid %d) rank %d of %d, generation %" PRIu64 " -> %" PRIu64
            ", after %" PRId64 " ms: %s: %s",
            n->name, ev->slot, ev->pid, ev->rank, ev->size, ev->gen, ev->gen_after,
            ev->t_end - ev->t_start, ringd_strerror((ringd_result_t)ev->rc), ev->msg);
        break;
    }
}

/* Reads whatever reports are waiting, for at most wait_ms. */
static void read_events(soak *s, int wait_ms)
{
    struct pollfd p = {s->ev_fd[0], POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0)
        return;
    for (;;) {
        ssize_t got = read(s->ev_fd[0], s->buf + s->have, sizeof(s->buf) - s->have);
        if (got <= 0)
            return;
        s->have += (size_t)got;
        size_t done = 0;
        for (; s->have - done >= sizeof(soak_event); done += sizeof(soak_event)) {
            soak_event ev;
            memcpy(&ev, s->buf + done, sizeof(ev));
            on_event(s, &ev);
        }
        memmove(s->buf, s->buf + done, s->have - done);
        s->have -= done;
    }
}

/* Takes note of one child's exit. Returns -1 when the run cannot go on. */
static int on_exit_of(soak *s, pid_t pid, int ws, int64_t now)
{
    char how[64];
    if (WIFSIGNALED(ws))
        snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(ws));
    else
        snprintf(how, sizeof(how), "exit status %d", WEXITSTATUS(ws));
    if (pid == s->redis_pid) {
        s->redis_pid = 0;
        fprintf(stderr, "soak: redis-server exited (%s)\n", how);
        return -1;
    }
    for (int i = 0; i < s->o.nodes; i++) {
        soak_node *n = &s->n[i];
        if (pid == n->pid) {
            n->pid = 0;
            if (n->state != NODE_EXITING) {
                s->crashes++;
                say(s, "%s: ringd exited on its own while %s (%s)", n->name, state_names[n->state],
                    how);
                show_tail(n->log, 30);
            } else if (!n->killed && !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) {
                say(s, "%s: ringd ended its drain with %s", n->name, how);
            }
            clients_kill(s, i, -1);
            if (n->state == NODE_CUT) /* its next daemon starts on a link that works */
                sh("ip link set %sa%d up", s->tag, i);
            n->state = NODE_DOWN;
            n->until =
                now + rnd_ms(s, 0.2 * (double)s->o.restart_ms, 1.8 * (double)s->o.restart_ms);
            return 0;
        }
        if (pid == n->drain_pid) {
            char log[PATH_MAX + 16], line[256] = "";
            snprintf(log, sizeof(log), "%s.drain", n->log);
            FILE *f = fopen(log, "r");
            if (f != NULL && fgets(line, sizeof(line), f) == NULL)
                line[0] = '\0';
            if (f != NULL)
                fclose(f);
            line[strcspn(line, "\n")] = '\0';
            say(s, "%s: ringctl drain: %s: %s", n->name, how, line);
            n->drain_pid = 0;
            if (n->state == NODE_DRAINING) {
                kill(n->pid, SIGTERM);
                n->state = NODE_EXITING;
                n->until = now + TERM_LIMIT_MS;
            }
            return 0;
        }
        for (int k = 0; k < s->o.local; k++) {
            soak_client *c = &n->c[k];
            if (pid != c->pid)
                continue;
            c->pid = 0;
            if (n->state == NODE_UP || n->state == NODE_STOPPED || n->state == NODE_CUT) {
                say(s, "%s.%d (pid %d) exited (%s); starting another", n->name, k, (int)pid, how);
                c->respawn_at = now + RESPAWN_DELAY_MS;
            }
            return 0;
        }
    }
    return 0; /* a client killed and forgotten */
}

/* Moves node i along its timers and checks its clients for hangs. Returns -1 to stop the run. */
static int node_tick(soak *s, int i, int64_t now)
{
    soak_node *n = &s->n[i];
    switch (n->state) {
    case NODE_STARTING:
        if (socket_answers(n->sock)) {
            n->state = NODE_UP;
            for (int k = 0; k < s->o.local; k++)
                client_start(s, i, k);
        } else if (now > n->until) {
            fprintf(stderr, "soak: %s: ringd did not answer on %s within %d ms\n", n->name, n->sock,
                    START_LIMIT_MS);
            show_tail(n->log, 30);
            return -1;
        }
        break;
    case NODE_UP:
        for (int k = 0; k < s->o.local; k++) {
            soak_client *c = &n->c[k];
            if (c->pid == 0 && c->respawn_at != 0 && now >= c->respawn_at)
                client_start(s, i, k);
            if (c->pid > 0 && !c->hung && now - c->last_progress > (int64_t)s->o.hang_ms) {
                c->hung = 1;
                s->hangs++;
                say(s,
                    "HANG: %s.%d (pid %d) finished no op for %" PRIu64
                    " ms; its last report: rank %d of %d, generation %" PRIu64 ", step %" PRIu64
                    ": %s",
                    n->name, k, (int)c->pid, s->o.hang_ms, c->last.rank, c->last.size, c->last.gen,
                    c->last.step, c->opened ? c->last.msg : "(still in ringd_open)");
            }
        }
        break;
    case NODE_STOPPED:
        if (now >= n->until) {
            kill(n->pid, SIGCONT);
            n->state = NODE_UP;
            node_back(s, i, now);
        }
        break;
    case NODE_CUT:
        if (now >= n->until) {
            if (sh("ip link set %sa%d up", s->tag, i) != 0 &&
                sh("ip link set %sa%d up", s->tag, i) != 0) {
                fprintf(stderr, "soak: %s: ip link set %sa%d up failed: it stays cut off\n",
                        n->name, s->tag, i);
                return -1;
            }
            n->state = NODE_UP;
            node_back(s, i, now);
        }
        break;
    case NODE_EXITING:
        if (now > n->until && !n->killed) {
            say(s, "%s: ringd (pid %d) still runs %d ms after SIGTERM: SIGKILL", n->name,
                (int)n->pid, TERM_LIMIT_MS);
            kill(n->pid, SIGKILL);
            n->killed = 1;
            n->until = now + KILL_LIMIT_MS;
        } else if (now > n->until) {
            fprintf(stderr, "soak: %s: ringd (pid %d) survives SIGKILL\n", n->name, (int)n->pid);
            return -1;
        }
        break;
    case NODE_DOWN:
        if (now >= n->until) {
            say(s, "%s: ringd starts again", n->name);
            node_start(s, i);
        }
        break;
    case NODE_DRAINING:
        if (now > n->until && n->drain_pid > 0) {
            say(s, "%s: ringctl drain (pid %d) still runs after %d ms: SIGKILL", n->name,
                (int)n->drain_pid, DRAIN_LIMIT_MS);
            kill(n->drain_pid, SIGKILL); /* its exit moves the node on */
            n->until = INT64_MAX;
        }
        break;
    }
    /* Only a client whose daemon serves can be expected to make progress. */
    if (n->state != NODE_UP)
        for (int k = 0; k < s->o.local; k++)
            n->c[k].last_progress = now;
    return 0;
}

/* The resident memory (KiB) and open descriptors of process pid; -1 each when unknown. */
static void resources(pid_t pid, long *rss_kib, long *fds)
{
    char path[64], line[256];
    *rss_kib = *fds = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_kib = strtol(line + 6, NULL, 10);
    if (f != NULL)
        fclose(f);
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    *fds = n;
}

/* Samples every daemon's memory and descriptors (first), or prints them next to the first
 * sample (at the end): a daemon that leaks grows between the two. */
static void sample_daemons(soak *s, int first)
{
    for (int i = 0; i < s->o.nodes; i++) {
        const soak_node *n = &s->n[i];
        long rss, fds;
        if (n->pid <= 0)
            continue;
        resources(n->pid, &rss, &fds);
        if (first) {
            s->rss_kib[i] = rss;
            s->fds[i] = fds;
            s->sampled_pid[i] = n->pid;
            continue;
        }
        printf("soak: resources %s: rss %ld -> %ld KiB, fds %ld -> %ld, from %.0f s to the end%s\n",
               n->name, s->rss_kib[i], rss, s->fds[i], fds,
               (double)(s->sampled_ms - s->t0) / 1000.0,
               s->sampled_pid[i] == n->pid ? "" : " (restarted in between: not comparable)");
    }
}

/* Runs the soak until --duration passes. Returns 0, or -1 when it could not go on. */
static int run(soak *s)
{
    int64_t end = s->t0 + (int64_t)s->o.duration_s * 1000;
    /* No action near the end, so that every action has had the time to recover from. */
    int64_t quiet_ms = (int64_t)s->o.duration_s * 1000 / 4;
    quiet_ms = quiet_ms < QUIET_MS ? quiet_ms : QUIET_MS;
    for (int i = 0; i < s->o.nodes; i++)
        node_start(s, i);
    while (!interrupted) {
        int64_t now = rb_elastic_now_ms();
        if (now >= end) {
            if (s->sampled_ms != 0)
                sample_daemons(s, 0);
            return 0;
        }
        /* Memory and descriptors once the job has run a while (arenas mapped, links made). */
        if (s->formed && s->sampled_ms == 0 && now >= s->t0 + 10000) {
            s->sampled_ms = now;
            sample_daemons(s, 1);
        }
        int ws;
        pid_t pid;
        while ((pid = waitpid(-1, &ws, WNOHANG)) > 0)
            if (on_exit_of(s, pid, ws, now) != 0)
                return -1;
        for (int i = 0; i < s->o.nodes; i++)
            if (node_tick(s, i, now) != 0)
                return -1;
        if (s->redis_back_at != 0 && now >= s->redis_back_at) {
            if (redis_start(s) != 0)
                return -1;
            s->redis_back_at = 0;
            say(s, "redis-server starts again (pid %d), empty", (int)s->redis_pid);
            node_back(s, -1, rb_elastic_now_ms());
        }
        if (!s->formed) {
            int all = 1;
            for (int i = 0; i < s->o.nodes; i++)
                all &= serving(s, i);
            if (all) {
                s->formed = 1;
                s->next_chaos =
                    now + rnd_ms(s, 0.5 * (double)s->o.chaos_ms, 1.5 * (double)s->o.chaos_ms);
                say(s, "job formed: %d ranks on %d nodes", s->o.nodes * s->o.local, s->o.nodes);
            }
        } else if (s->o.chaos && now >= s->next_chaos && now < end - quiet_ms) {
            chaos(s, now);
            s->next_chaos =
                now + rnd_ms(s, 0.5 * (double)s->o.chaos_ms, 1.5 * (double)s->o.chaos_ms);
        }
        read_events(s, 20);
    }
    fprintf(stderr, "soak: interrupted by signal %d\n", (int)interrupted);
    return -1;
}

/* nftw callback: removes one entry. */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Stops every child (bounded waits, then SIGKILL) and removes the directory unless --keep. */
static void stop_all(soak *s)
{
    for (int i = 0; i < s->o.nodes; i++) {
        soak_node *n = &s->n[i];
        clients_kill(s, i, -1);
        if (n->drain_pid > 0)
            kill(n->drain_pid, SIGKILL);
        if (n->pid > 0) {
            kill(n->pid, SIGCONT);
            kill(n->pid, SIGINT);
        }
    }
    if (s->redis_pid > 0)
        kill(s->redis_pid, SIGTERM);
    netns_teardown(s); /* now: a run killed while it waits below leaves nothing behind */
    int64_t deadline = rb_elastic_now_ms() + SHUTDOWN_LIMIT_MS;
    int ws;
    for (pid_t pid; (pid = waitpid(-1, &ws, WNOHANG)) >= 0;) {
        if (pid > 0)
            continue;
        if (rb_elastic_now_ms() > deadline) {
            for (int i = 0; i < s->o.nodes; i++)
                if (s->n[i].pid > 0)
                    kill(s->n[i].pid, SIGKILL);
            if (s->redis_pid > 0)
                kill(s->redis_pid, SIGKILL);
            while (waitpid(-1, &ws, 0) > 0)
                ;
            break;
        }
        rb_sleep_us(10000);
    }
    if (s->dir[0] == '\0')
        return;
    if (s->o.keep)
        printf("soak: logs kept in %s\n", s->dir);
    else
        nftw(s->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* What the actions of one kind came to. */
typedef struct {
    int count, recovered, untimed; /* untimed: taken while Redis was away */
    double median, max;            /* recovery in ms over the recovered ones timed; -1 when none */
    long membership, errors, own, rejoin;
} kind_summary;

/* Sums up the actions of one kind. */
static kind_summary summarize(const soak *s, int kind)
{
    kind_summary k = {.median = -1.0, .max = -1.0};
    double *rec = malloc(((size_t)s->n_act + 1) * sizeof(double));
    for (int a = 0; a < s->n_act; a++) {
        const soak_action *x = &s->act[a];
        if (x->kind != kind)
            continue;
        k.count++;
        k.membership += x->membership;
        k.errors += x->errors;
        k.own += x->own;
        k.rejoin += x->rejoin;
        if (x->redis_away) {
            k.untimed++;
            continue;
        }
        if (x->recovered < 0)
            continue;
        double ms = (double)(x->recovered - x->t);
        k.max = ms > k.max ? ms : k.max;
        if (rec != NULL)
            rec[k.recovered] = ms;
        k.recovered++;
    }
    if (rec != NULL && k.recovered > 0)
        k.median = rb_median(rec, k.recovered);
    free(rec);
    return k;
}

/* Prints the verdict on one kind's target: recovery within limit_ms (described by limit) and,
 * with no_failures, no failed op on the survivors. An action never recovered from misses it. */
static void print_target(const kind_summary *k, const char *kind, int no_failures, double limit_ms,
                         const char *limit)
{
    char unrec[96] = "";
    long failed = k->membership + k->errors;
    int timed = k->count - k->untimed;
    if (timed - k->recovered > 0)
        snprintf(unrec, sizeof(unrec), ", %d unrecovered", timed - k->recovered);
    if (k->untimed > 0)
        snprintf(unrec + strlen(unrec), sizeof(unrec) - strlen(unrec),
                 " (%d during a Redis outage: not timed)", k->untimed);
    if (k->count == 0) {
        printf("soak: target %s %srecovery <= %s: not exercised\n", kind,
               no_failures ? "failed ops 0 and " : "", limit);
        return;
    }
    int met = timed == k->recovered && k->max <= limit_ms && (!no_failures || failed == 0);
    if (no_failures)
        printf("soak: target %s failed ops %ld and recovery max %.0f%s <= %s: %s\n", kind, failed,
               k->max, unrec, limit, met ? "met" : "NOT met");
    else
        printf("soak: target %s recovery max %.0f ms%s <= %s: %s\n", kind, k->max, unrec, limit,
               met ? "met" : "NOT met");
}

/* Prints the per-action lines, the summary, a line per kind of action and the verdicts on the
 * targets, which are reported, not enforced. Returns the exit status. */
static int report(const soak *s, int failed)
{
    static const char *const codes[RINGD_RESULT_COUNT] = {
        "OK",         "INVALID", "CONNECT", "PROTOCOL", "TIMEOUT", "MISMATCH",
        "MEMBERSHIP", "NOMEM",   "STALLED", "CLOSED",   "SYSTEM",  "REFUSED"};
    double *rec = malloc(((size_t)s->n_act + 1) * sizeof(double));
    int n_rec = 0;
    for (int a = 0; a < s->n_act && rec != NULL; a++) {
        const soak_action *x = &s->act[a];
        int64_t ms = x->recovered >= 0 ? x->recovered - x->t : -1;
        printf(
            "soak: action %d %s %s at +%.3fs recovery_ms %" PRId64
            " failed_membership %ld other_errors %ld own_node_failures %ld rejoin_failures %ld\n",
            a + 1, act_names[x->kind], x->node >= 0 ? s->n[x->node].name : "redis-server",
            (double)(x->t - s->t0) / 1000.0, ms, x->membership, x->errors, x->own, x->rejoin);
        if (ms >= 0)
            rec[n_rec++] = (double)ms;
    }
    double max = 0.0;
    for (int k = 0; k < n_rec; k++)
        max = rec[k] > max ? rec[k] : max;
    double median = n_rec > 0 ? rb_median(rec, n_rec) : 0.0;
    free(rec);
    if (s->errors > 0) {
        printf("soak: errors by result:");
        for (int k = 1; k < RINGD_RESULT_COUNT; k++)
            if (s->errors_by[k] > 0)
                printf(" %s=%ld", codes[k], s->errors_by[k]);
        printf("\n");
    }
    printf("soak: ops %ld failed_membership %ld resized %ld errors %ld closed %ld wrong %ld "
           "hangs %ld crashes %ld unexplained %ld recovery_ms median %.0f max %.0f unrecovered %d "
           "actions kill=%d stop=%d drain=%d restart=%d redis=%d partition=%d\n",
           s->ops, s->membership, s->resized, s->errors, s->closed, s->wrong, s->hangs, s->crashes,
           s->unexplained, median, max, s->n_act - n_rec, s->act_count[ACT_KILL],
           s->act_count[ACT_STOP], s->act_count[ACT_DRAIN], s->act_count[ACT_RESTART],
           s->act_count[ACT_REDIS], s->act_count[ACT_PARTITION]);
    printf("soak: lease_ms %" PRIu64 "\n", s->o.lease_ms);
    kind_summary ks[ACT_COUNT];
    for (int k = 0; k < ACT_COUNT; k++) {
        ks[k] = summarize(s, k);
        printf("soak: kind %s count %d recovery_ms median %.0f max %.0f failed_membership %ld "
               "other_errors %ld own_node_failures %ld rejoin_failures %ld unrecovered %d\n",
               act_names[k], ks[k].count, ks[k].median, ks[k].max, ks[k].membership, ks[k].errors,
               ks[k].own, ks[k].rejoin, ks[k].count - ks[k].untimed - ks[k].recovered);
    }
    char limit[64];
    snprintf(limit, sizeof(limit), "%d ms", KILL_TARGET_MS);
    print_target(&ks[ACT_KILL], "kill", 0, KILL_TARGET_MS, limit);
    snprintf(limit, sizeof(limit), "lease %" PRIu64 " + %d ms", s->o.lease_ms, STOP_SLACK_MS);
    print_target(&ks[ACT_STOP], "stop", 0, (double)s->o.lease_ms + STOP_SLACK_MS, limit);
    if (s->o.netns) /* the namespaces are gone by now */
        print_target(&ks[ACT_PARTITION], "partition", 0, (double)s->o.lease_ms + STOP_SLACK_MS,
                     limit);
    snprintf(limit, sizeof(limit), "%d ms", DRAIN_TARGET_MS);
    print_target(&ks[ACT_DRAIN], "drain", 1, DRAIN_TARGET_MS, limit);
    print_target(&ks[ACT_REDIS], "redis", 1, DRAIN_TARGET_MS, limit);
    printf("soak: target every failed call explained by an action in force: %ld unexplained: %s\n",
           s->unexplained, s->unexplained == 0 ? "met" : "NOT met");
    int pass = !failed && s->ops > 0 && s->wrong == 0 && s->hangs == 0 && s->crashes == 0 &&
               (!s->o.strict || s->errors == 0) && (!s->o.explained || s->unexplained == 0);
    printf("soak: %s\n", pass ? "PASS" : "FAIL");
    fflush(stdout);
    return pass ? 0 : 1;
}

/* The default path of a tool built with this one: next to this executable (installed), or in
 * the build tree's folder for it; else the bare name, for PATH. */
static const char *tool_path(const char *name, const char *build_dir, char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL)
            *slash = '\0';
        int w = snprintf(buf, len, "%s/%s", self, name);
        if (w > 0 && (size_t)w < len && access(buf, X_OK) == 0)
            return buf;
        w = snprintf(buf, len, "%s/../%s/%s", self, build_dir, name);
        if (w > 0 && (size_t)w < len && access(buf, X_OK) == 0)
            return buf;
    }
    return name;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ringd-soak [OPTIONS] [-- RINGD-OPTIONS...]\n"
        "  --nodes K         daemons, n0..n{K-1} (default 3)\n"
        "  --clients L       client processes on each daemon (default 2)\n"
        "  --duration S      seconds to run (default 60)\n"
        "  --seed N          seeds op sizes and the chaos (default 1)\n"
        "  --chaos-ms MS     mean interval between chaos actions (default 3000)\n"
        "  --no-chaos        no chaos actions: ops only\n"
        "  --restart-ms MS   mean delay before a daemon taken down starts again (default 1000)\n"
        "  --max-count N     largest allreduce in i32 elements (default 256K)\n"
        "  --mixed N         ops alternate between --max-count and N elements (a steady\n"
        "                    load of two sizes) instead of log-uniform sizes\n"
        "  --min-size N      the job's min_size (default 1)\n"
        "  --lease-ttl MS    the daemons' --lease-ttl (default 1000)\n"
        "  --hang-ms MS      a client with no op finished this long hangs (default 30000)\n"
        "  --strict          errors other than RINGD_E_MEMBERSHIP fail the run too\n"
        "  --explained       failed calls no action in force explains fail the run too\n"
        "  --keep            keep the directory with the logs\n"
        "  --encrypt         the daemons seal their links (--encrypt, under a key of the soak's)\n"
        "  --netns           each daemon in a network namespace of its own, on a bridge with\n"
        "                    redis-server; chaos cuts nodes off the network too (root, iproute2)\n"
        "  --verbose         print every membership failure, client start and expected error\n"
        "  --ringd PATH, --ringctl PATH, --redis-server PATH\n"
        "                    the programs (default: next to ringd-soak or in the build tree;\n"
        "                    redis-server from PATH)\n"
        "  RINGD-OPTIONS     passed to every ringd (e.g. --peer-timeout 3000)\n"
        "exit status: 0 no wrong result, no hang, no daemon died on its own, some ops done;\n"
        "             1 otherwise; 2 bad usage or the soak could not be set up\n");
}

/* Parses the command line into s->o. Returns 0, 1 after --help, -1 on a bad one. */
static int parse(soak *s, int argc, char **argv, char *ringd_buf, char *ringctl_buf)
{
    static const struct option longopts[] = {
        {"nodes", required_argument, NULL, 'K'},
        {"clients", required_argument, NULL, 'L'},
        {"duration", required_argument, NULL, 'd'},
        {"seed", required_argument, NULL, 's'},
        {"chaos-ms", required_argument, NULL, 'c'},
        {"no-chaos", no_argument, NULL, 'C'},
        {"restart-ms", required_argument, NULL, 'R'},
        {"max-count", required_argument, NULL, 'x'},
        {"mixed", required_argument, NULL, 'X'},
        {"min-size", required_argument, NULL, 'm'},
        {"lease-ttl", required_argument, NULL, 't'},
        {"hang-ms", required_argument, NULL, 'H'},
        {"strict", no_argument, NULL, 'S'},
        {"explained", no_argument, NULL, 'E'},
        {"keep", no_argument, NULL, 'k'},
        {"encrypt", no_argument, NULL, 'Y'},
        {"netns", no_argument, NULL, 'N'},
        {"verbose", no_argument, NULL, 'v'},
        {"ringd", required_argument, NULL, 'r'},
        {"ringctl", required_argument, NULL, 'p'},
        {"redis-server", required_argument, NULL, 'e'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    soak_opts *o = &s->o;
    uint64_t nodes = 3, local = 2;
    *o = (soak_opts){.duration_s = 60,
                     .seed = 1,
                     .chaos_ms = 3000,
                     .max_count = 256 << 10,
                     .hang_ms = 30000,
                     .lease_ms = 1000,
                     .min_size = 1,
                     .restart_ms = 1000,
                     .chaos = 1};
    int c, bad = 0, at = -1;
    while (!bad && (at = -1, c = getopt_long(argc, argv, "hv", longopts, &at)) != -1) {
        switch (c) {
        case 'K': bad = rb_parse_u64(optarg, 1, MAX_NODES, &nodes); break;
        case 'L': bad = rb_parse_u64(optarg, 1, MAX_LOCAL, &local); break;
        case 'd': bad = rb_parse_u64(optarg, 1, 7 * 86400, &o->duration_s); break;
        case 's': bad = rb_parse_u64(optarg, 0, UINT64_MAX, &o->seed); break;
        case 'c': bad = rb_parse_u64(optarg, 10, 3600000, &o->chaos_ms); break;
        case 'C': o->chaos = 0; break;
        case 'R': bad = rb_parse_u64(optarg, 0, 600000, &o->restart_ms); break;
        case 'x': bad = rb_parse_u64(optarg, 1, 64 << 20, &o->max_count); break;
        case 'X': bad = rb_parse_u64(optarg, 1, 64 << 20, &o->mixed); break;
        case 'm': bad = rb_parse_u64(optarg, 1, MAX_NODES * MAX_LOCAL, &o->min_size); break;
        case 't': bad = rb_parse_u64(optarg, 100, 600000, &o->lease_ms); break;
        case 'H': bad = rb_parse_u64(optarg, 100, 3600000, &o->hang_ms); break;
        case 'S': o->strict = 1; break;
        case 'E': o->explained = 1; break;
        case 'k': o->keep = 1; break;
        case 'Y': o->encrypt = 1; break;
        case 'N': o->netns = 1; break;
        case 'v': o->verbose = 1; break;
        case 'r': o->ringd = optarg; break;
        case 'p': o->ringctl = optarg; break;
        case 'e': o->redis = optarg; break;
        case 'h': usage(stdout); return 1;
        default: bad = 1;
        }
    }
    o->nodes = (int)nodes;
    o->local = (int)local;
    o->daemon_args = argv + optind;
    o->n_daemon_args = argc - optind;
    if (bad && at >= 0 && longopts[at].has_arg)
        fprintf(stderr, "ringd-soak: bad value for --%s: %s\n", longopts[at].name, optarg);
    else if (!bad && o->min_size > nodes * local)
        fprintf(stderr, "ringd-soak: --min-size %" PRIu64 " is above the %" PRIu64 " ranks\n",
                o->min_size, nodes * local);
    else if (!bad && o->n_daemon_args > 64)
        fprintf(stderr, "ringd-soak: more than 64 ringd options\n");
    if (bad || o->min_size > nodes * local || o->n_daemon_args > 64) {
        usage(stderr);
        return -1;
    }
    if (o->ringd == NULL)
        o->ringd = tool_path("ringd", "daemon", ringd_buf, PATH_MAX);
    if (o->ringctl == NULL)
        o->ringctl = tool_path("ringctl", "client", ringctl_buf, PATH_MAX);
    if (o->redis == NULL)
        o->redis = "redis-server";
    return 0;
}

int main(int argc, char **argv)
{
    static soak s;
    static char ringd_buf[PATH_MAX], ringctl_buf[PATH_MAX];
    int rc = parse(&s, argc, argv, ringd_buf, ringctl_buf);
    if (rc != 0)
        return rc > 0 ? 0 : 2;

    s.ev_fd[0] = s.ev_fd[1] = -1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    s.t0 = rb_elastic_now_ms();
    snprintf(s.dir, sizeof(s.dir), "%s/ringd-soak.XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(s.dir) == NULL) {
        fprintf(stderr, "soak: mkdtemp %s: %s\n", s.dir, strerror(errno));
        return 2;
    }
    snprintf(s.key, sizeof(s.key), "%s/ring.key", s.dir);
    if (s.o.encrypt && write_key(s.key) != 0) {
        fprintf(stderr, "soak: cannot write the ring key %s: %s\n", s.key, strerror(errno));
        stop_all(&s);
        return 2;
    }
    if (pipe2(s.ev_fd, O_CLOEXEC) != 0 || fcntl(s.ev_fd[0], F_SETFL, O_NONBLOCK) != 0) {
        fprintf(stderr, "soak: pipe: %s\n", strerror(errno));
        stop_all(&s);
        return 2;
    }
    for (int i = 0; i < s.o.nodes; i++) {
        soak_node *n = &s.n[i];
        snprintf(n->name, sizeof(n->name), "n%d", i);
        snprintf(n->sock, sizeof(n->sock), "%s/%s/ringd.sock", s.dir, n->name);
        snprintf(n->log, sizeof(n->log), "%s/%s.log", s.dir, n->name);
    }
    printf("soak: %d nodes x %d clients, %" PRIu64 " s, seed %" PRIu64 ", chaos every %" PRIu64
           " ms on average%s, lease %" PRIu64 " ms, max count %" PRIu64 ", min_size %" PRIu64
           ", in %s\n",
           s.o.nodes, s.o.local, s.o.duration_s, s.o.seed, s.o.chaos_ms, s.o.chaos ? "" : " (off)",
           s.o.lease_ms, s.o.max_count, s.o.min_size, s.dir);
    if (s.o.netns && netns_setup(&s) != 0)
        printf("soak: --netns: cannot make network namespaces joined by a bridge here (they "
               "need root and iproute2): no partitions, every daemon on loopback\n");
    if (redis_start(&s) != 0) {
        stop_all(&s);
        return 2;
    }
    int failed = run(&s) != 0;
    read_events(&s, 0);
    stop_all(&s);
    int status = report(&s, failed);
    free(s.act);
    return status;
}
