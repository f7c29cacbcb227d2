/* libringd: sessions with the local daemon, the arena, and named collectives over it. */
#define _GNU_SOURCE
#include "ringd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "session.h"
#include "chrome_trace.h"
#include "conn.h"
#include "cuda_ptr.h"
#include "dtype.h"
#include "ctlq.h"
#include "ringd_build.h"
#if RINGD_HAVE_CUDA
#include "cuda_dev.h"
#endif

/* ringd.h and meson.build each state the version: a release that bumps one must bump both. */
_Static_assert(RINGD_VERSION_MAJOR == RINGD_PROJECT_VERSION_MAJOR &&
                   RINGD_VERSION_MINOR == RINGD_PROJECT_VERSION_MINOR,
               "ringd.h's RINGD_VERSION_MAJOR/MINOR differ from meson.build's project version");

#define RD_DEFAULT_SOCKET "/run/ringd/ringd.sock"
#define RD_DEFAULT_OPEN_TIMEOUT_MS 30000
#define RD_NO_STAGE UINT64_MAX
#define RD_DEFAULT_POLL_US 100

/* ringd_options_t as version 0.1 had it: a caller built against it passes its size, and every
 * field added since must lie beyond it, or the library would read that caller's padding. */
typedef struct {
    size_t struct_size;
    const char *socket_path, *job;
    int world_size, local_size, open_timeout_ms, op_timeout_ms;
    size_t arena_size;
    int poll_us;
} options_v0_1;
_Static_assert(offsetof(ringd_options_t, min_size) >= sizeof(options_v0_1),
               "ringd_options_t: new fields must start past the 0.1 struct_size");

/* ...and as it was while min_size was its last field: 64 bytes, its tail padding where
 * ask_local_rank lies now, so only a struct_size reaching local_rank says the caller's header
 * had them. */
typedef struct {
    options_v0_1 v0_1;
    int reserved, min_size;
} options_min_size;
_Static_assert(offsetof(ringd_options_t, local_rank) >= sizeof(options_min_size),
               "ringd_options_t: local_rank must lie past that struct_size");

/* ...and as 0.2 had it, device its last field: the device arena's size and the stream lie past
 * its struct_size. */
typedef struct {
    options_min_size v0_1;
    int ask_local_rank, local_rank, ask_device, device;
} options_v0_2;
_Static_assert(offsetof(ringd_options_t, device_arena_size) >= sizeof(options_v0_2),
               "ringd_options_t: device_arena_size must lie past 0.2's struct_size");

static const char *const result_text[RINGD_RESULT_COUNT] = {
    [RINGD_OK] = "success",
    [RINGD_E_INVALID] = "invalid argument: check the call's parameters",
    [RINGD_E_CONNECT] =
        "cannot reach ringd: check that the daemon runs and RINGD_SOCKET points at it",
    [RINGD_E_PROTOCOL] =
        "protocol error between libringd and ringd: check that their versions match",
    [RINGD_E_TIMEOUT] = "timed out: some ranks did not arrive in time",
    [RINGD_E_MISMATCH] = "ranks submitted the same tensor name with different parameters",
    [RINGD_E_MEMBERSHIP] = "the job's ranks changed (ringd_rank and ringd_size give the new ones): "
                           "restore the last committed state, broadcast it from rank 0 under a "
                           "name that includes ringd_generation, then go on",
    [RINGD_E_NOMEM] = "out of memory or arena space: free buffers or ask for a larger arena",
    [RINGD_E_STALLED] = "stalled: some ranks never submitted the tensor; ringd_errmsg names them: "
                        "check that every rank submits it",
    [RINGD_E_CLOSED] = "the session with ringd is closed: open a new one",
    [RINGD_E_SYSTEM] = "a system call failed",
    [RINGD_E_REFUSED] =
        "ringd refused the session: job full or sizes inconsistent with its other clients",
};

const char *ringd_strerror(ringd_result_t rc)
{
    if ((int)rc < 0 || rc >= RINGD_RESULT_COUNT)
        return "unknown result code";
    return result_text[rc];
}

const char *ringd_version(void)
{
    return RINGD_VERSION;
}

size_t ringd_dtype_size(ringd_dtype_t dtype)
{
    return rd_dtype_size((rd_dtype)dtype); /* the values are the same: proto/dtype.c checks */
}

/* Records a failure's detail on r and returns rc, so callers can `return fail(...)`. */
static ringd_result_t fail(ringd_t *r, ringd_result_t rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ringd_result_t fail(ringd_t *r, ringd_result_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
    va_end(ap);
    return rc;
}

/* A byte count from the environment: digits, optionally followed by K, M or G, or KiB, MiB or
 * GiB (powers of 1024). Unset or empty leaves *out. Returns 0, or -1 when set but not such a count.
 */
static int env_bytes(const char *name, uint64_t *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift > 0)
        end += strcmp(end + 1, "iB") == 0 ? 3 : 1;
    if (errno != 0 || v[0] < '0' || v[0] > '9' || *end != '\0' || x > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)x << shift;
    return 0;
}

/* Reads integer environment variable name into *out (def when unset). Returns 0, or -1 when it
 * is set but not an integer in [lo, hi]. */
static int env_int(const char *name, int def, int lo, int hi, int *out)
{
    const char *v = getenv(name);
    *out = def;
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

int ringd_rank(const ringd_t *r)
{
    return r->rank;
}
int ringd_size(const ringd_t *r)
{
    return r->size;
}
int ringd_local_rank(const ringd_t *r)
{
    return r->local_rank;
}

int ringd_device(const ringd_t *r)
{
    return r->device;
}

const char *ringd_device_uuid(const ringd_t *r)
{
    return r->device_uuid;
}
int ringd_local_size(const ringd_t *r)
{
    return r->local_size;
}
uint64_t ringd_generation(const ringd_t *r)
{
    return r->generation;
}
const char *ringd_errmsg(const ringd_t *r)
{
    return r != NULL ? r->errmsg : "out of memory";
}

/* Maps the device arena of size bytes whose fd came with Welcome (0: none asked or given).
 * Returns RINGD_OK, or the failure with errmsg set. */
static ringd_result_t map_device_arena(ringd_t *r, uint64_t size)
{
    int fd = r->conn.passed_fd[1];
    r->conn.passed_fd[1] = -1;
    if (size == 0 && fd < 0)
        return r->dev_asked > 0 ? fail(r, RINGD_E_PROTOCOL,
                                       "asked for a device arena, and ringd gave none (a ringd "
                                       "older than device arenas?)")
                                : RINGD_OK;
    if (size == 0 || fd < 0 || r->device < 0) {
        if (fd >= 0)
            close(fd);
        return fail(r, RINGD_E_PROTOCOL,
                    "Welcome's device arena (%" PRIu64 " bytes) came "
                    "without its descriptor or device",
                    size);
    }
#if RINGD_HAVE_CUDA
    char why[256], why_local[256];
    r->local_device = rd_cuda_device_by_uuid(r->device_uuid, why_local, sizeof(why_local));
    if (r->local_device < 0) {
        close(fd);
        return fail(r, RINGD_E_INVALID,
                    "ringd gave this session GPU %s (its device %d) with a device arena, and "
                    "this process cannot see that GPU: %s (check the pod's GPU resources and "
                    "CUDA_VISIBLE_DEVICES)",
                    r->device_uuid, r->device, why_local);
    }
    void *ctx = rd_cuda_context();
    rd_cuda_shared *sh = rd_cuda_shared_import(r->local_device, fd, (size_t)size, why, sizeof(why));
    rd_cuda_set_context(ctx);
    close(fd);
    if (sh == NULL)
        return fail(r, RINGD_E_SYSTEM, "mapping the device arena (%" PRIu64 " bytes on GPU %s): %s",
                    size, r->device_uuid, why);
    if (rd_alloc_init(&r->dev_alloc, size) != 0) {
        ctx = rd_cuda_context();
        rd_cuda_shared_free(sh);
        rd_cuda_set_context(ctx);
        return fail(r, RINGD_E_NOMEM, "out of memory");
    }
    r->dev_shared = sh;
    r->dev_arena = rd_cuda_shared_ptr(sh);
    r->dev_arena_size = size;
    return RINGD_OK;
#else
    close(fd);
    return fail(r, RINGD_E_INVALID,
                "ringd gave a device arena, and this libringd was built without CUDA");
#endif
}

/* Waits for Welcome (and the arena fd) or Error after Hello. */
static ringd_result_t await_welcome(ringd_t *r, const char *job, int local_size, int timeout_ms)
{
    char err[512], progress[400] = "";
    rd_msg *m = NULL;
    int64_t deadline = rd_now_ms() + timeout_ms;
    ringd_result_t rc;
    /* Waiting messages say how far a ring across nodes has come, for the timeout's message. */
    for (;;) {
        int64_t left = deadline - rd_now_ms();
        rc = rd_conn_recv(&r->conn, left > 0 ? (int)left : 0, &m, err, sizeof(err));
        if (rc != RINGD_OK || m->body_case != RINGD__MSG__BODY_WAITING)
            break;
        const Ringd__Waiting *wt = m->waiting;
        snprintf(progress, sizeof(progress),
                 "%u of %u ranks have joined (on %u nodes, generation %" PRIu64 ")%s%s", wt->ranks,
                 wt->world_size, wt->nodes, wt->generation, wt->detail[0] != '\0' ? ": " : "",
                 wt->detail);
        rd_frame_free(m);
        m = NULL;
    }
    if (rc == RINGD_E_TIMEOUT && progress[0] != '\0')
        return fail(r, rc, "job '%s': the ring did not complete within %d ms: %s", job, timeout_ms,
                    progress);
    if (rc == RINGD_E_TIMEOUT)
        return fail(r, rc, "job '%s': not all %d local clients joined within %d ms", job,
                    local_size, timeout_ms);
    if (rc != RINGD_OK)
        return fail(r, rc, "joining job '%s': %s", job, err);
    if (m->body_case == RINGD__MSG__BODY_ERROR) {
        rc = m->error->status > 0 && m->error->status < RINGD_RESULT_COUNT
                 ? (ringd_result_t)m->error->status
                 : RINGD_E_PROTOCOL;
        fail(r, rc, "ringd refused job '%s': %s", job, m->error->message);
        rd_frame_free(m);
        return rc;
    }
    if (m->body_case != RINGD__MSG__BODY_WELCOME || r->conn.passed_fd[0] < 0) {
        rd_frame_free(m);
        return fail(r, RINGD_E_PROTOCOL, "joining job '%s': expected Welcome with the arena", job);
    }
    Ringd__Welcome *w = m->welcome;
    struct stat st;
    int fd = r->conn.passed_fd[0];
    r->conn.passed_fd[0] = -1;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < w->arena_size || w->arena_size == 0) {
        close(fd);
        rd_frame_free(m);
        return fail(r, RINGD_E_PROTOCOL, "the arena ringd passed is smaller than announced");
    }
    void *p = mmap(NULL, w->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        rd_frame_free(m);
        return fail(r, RINGD_E_SYSTEM, "mmap arena of %" PRIu64 " bytes: %s", w->arena_size,
                    strerror(errno));
    }
    if (w->data_offset < sizeof(rd_ctrl) || w->data_offset >= w->arena_size || !rd_ctrl_valid(p)) {
        munmap(p, w->arena_size);
        rd_frame_free(m);
        return fail(r, RINGD_E_PROTOCOL,
                    "the arena's control area is not one this library "
                    "knows: are libringd and ringd the same version?");
    }
    r->arena = p;
    r->arena_size = w->arena_size;
    rd_ctlq_attach_producer(&r->sq, &((rd_ctrl *)p)->sq);
    rd_ctlq_attach_consumer(&r->cq, &((rd_ctrl *)p)->cq);
    r->rank = (int)w->rank;
    r->size = (int)w->size;
    r->local_rank = (int)w->local_rank;
    r->local_size = (int)w->local_size;
    r->generation = w->generation;
    r->takes_trace = w->takes_trace;
    int asked = r->asked_device;
    r->device = w->has_device ? (int)w->device : -1;
    snprintf(r->device_uuid, sizeof(r->device_uuid), "%s", w->has_device ? w->device_uuid : "");
    uint64_t data_offset = w->data_offset, ctrl, dev_size = w->device_arena_size;
    rd_frame_free(m);
    if (asked >= 0 && r->device != asked)
        return fail(r, RINGD_E_INVALID,
                    "asked for CUDA device %d, and ringd did not give it (a ringd older than "
                    "device assignment?)",
                    asked);
    rc = map_device_arena(r, dev_size);
    if (rc != RINGD_OK)
        return rc;
    /* The control area is the allocator's first, permanent block. */
    if (rd_alloc_init(&r->alloc, r->arena_size) != 0 ||
        rd_alloc_get(&r->alloc, data_offset, &ctrl) != 0 || ctrl != 0)
        return fail(r, RINGD_E_NOMEM, "out of memory");
    return RINGD_OK;
}

/* Writes at most size bytes (the caller's struct), so a caller built against an older, smaller
 * header or a binding with its own copy of the struct is never written past its end; struct_size
 * then tells ringd_open how much of it there is. */
void ringd_options_init(ringd_options_t *o, size_t size)
{
    if (o == NULL || size < sizeof(o->struct_size))
        return;
    ringd_options_t init = RINGD_OPTIONS_INIT;
    init.struct_size = size < sizeof(init) ? size : sizeof(init);
    memcpy(o, &init, init.struct_size);
}

/* The sessions this process has open, for fork(): in a child each one is the parent's alone
 * (fork_child). The fork holds sessions_lock (fork_prepare), so the child inherits the list
 * whole. */
static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;
static ringd_t *sessions;
static pthread_once_t forks_watched = PTHREAD_ONCE_INIT;
static int watching_forks; /* pthread_atfork's result */

static void fork_prepare(void)
{
    pthread_mutex_lock(&sessions_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&sessions_lock);
}

/* In a forked child, its only thread: every open session is the parent's, whose socket, queues
 * and arena the child shares (glibc resets stdio's locks in the child, so the FILEs can be
 * purged here and flushed at the child's exit). Its socket closes here, so the daemon sees the
 * parent leave when the parent does, not when its last child ends; what the parent's timeline
 * buffered is dropped, or the child's exit would write it a second time. Nothing else is touched,
 * then or later (rd_lib_left_to_parent refuses every call, ringd_close frees nothing): another
 * thread of the parent may have been changing it. */
static void fork_child(void)
{
    for (ringd_t *r = sessions; r != NULL; r = r->next_open) {
        r->forked = 1;
        if (r->conn.fd >= 0)
            close(r->conn.fd);
        r->conn.fd = -1;
        for (int i = 0; i < 2; i++) {
            if (r->conn.passed_fd[i] >= 0)
                close(r->conn.passed_fd[i]);
            r->conn.passed_fd[i] = -1;
        }
        if (r->trace_file != NULL)
            __fpurge(r->trace_file);
    }
    sessions = NULL; /* the child's own sessions, if it opens any, start a new list */
    pthread_mutex_unlock(&sessions_lock);
}

static void watch_forks(void)
{
    watching_forks = pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Adds r to the sessions a fork hands over; 0, or an errno value when forks cannot be watched. */
static int session_listed(ringd_t *r)
{
    pthread_once(&forks_watched, watch_forks);
    if (watching_forks != 0)
        return watching_forks;
    pthread_mutex_lock(&sessions_lock);
    r->next_open = sessions;
    if (sessions != NULL)
        sessions->prev_open = &r->next_open;
    r->prev_open = &sessions;
    sessions = r;
    pthread_mutex_unlock(&sessions_lock);
    return 0;
}

/* Takes r off the list (sessions_lock held). */
static void session_unlisted(ringd_t *r)
{
    if (r->prev_open == NULL)
        return;
    *r->prev_open = r->next_open;
    if (r->next_open != NULL)
        r->next_open->prev_open = r->prev_open;
    r->prev_open = NULL;
}

int rd_lib_left_to_parent(ringd_t *r)
{
    if (!r->forked)
        return 0;
    fail(r, RINGD_E_INVALID,
         "this process (pid %ld) was forked from the one that opened the session (pid %ld): "
         "the session, its queues and its arena stay the parent's; open a session of its own",
         (long)getpid(), (long)r->pid);
    return 1;
}

/* RINGD_TIMELINE=path (or ringd_timeline_start's): once welcomed, the session's rank writes its
 * Completes' traces to path, with %r replaced by the rank (every rank writes its own), or only
 * rank 0 when path has no %r (Horovod's HOROVOD_TIMELINE). Returns RINGD_OK, or RINGD_E_SYSTEM
 * when the file cannot be made. */
static ringd_result_t trace_open(ringd_t *r)
{
    char path[4096], node[64];
    const char *pct = strstr(r->trace_path, "%r");
    if (pct == NULL && r->rank != 0)
        return RINGD_OK;
    if (pct != NULL)
        snprintf(path, sizeof(path), "%.*s%d%s", (int)(pct - r->trace_path), r->trace_path, r->rank,
                 pct + 2);
    else
        snprintf(path, sizeof(path), "%s", r->trace_path);
    pthread_mutex_lock(&sessions_lock); /* a fork sees the FILE whole, or none */
    r->trace_file = fopen(path, "w");
    int bad = errno;
    pthread_mutex_unlock(&sessions_lock);
    if (r->trace_file == NULL)
        return fail(r, RINGD_E_SYSTEM, "timeline: cannot create %s: %s", path, strerror(bad));
    snprintf(node, sizeof(node), "rank %d's", r->rank);
    rd_ctrace_open(&r->trace, r->trace_file, node);
    char what[128];
    snprintf(what, sizeof(what), "generation %" PRIu64 ": rank %d of %d (opened)", r->generation,
             r->rank, r->size);
    rd_ctrace_mark(&r->trace, rd_now_us(), r->generation, what);
    return RINGD_OK;
}

ringd_result_t ringd_open(const ringd_options_t *opts, ringd_t **out)
{
    return rd_lib_open(opts, 1, out);
}

ringd_result_t rd_lib_open(const ringd_options_t *opts, int traced, ringd_t **out)
{
    ringd_options_t o;
    char err[512];

    *out = NULL;
    ringd_options_init(&o, sizeof(o));
    ringd_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return RINGD_E_NOMEM;
    *out = r;
    r->conn.fd = -1;
    r->conn.passed_fd[0] = r->conn.passed_fd[1] = -1;
    r->next_id = 1;
    r->broken = RINGD_E_CLOSED; /* until Welcome */
    r->pid = getpid();
    r->device = -1;
    r->local_device = -1;

    /* The fields the caller's header had; those it did not keep their defaults. A size below
     * 0.1's is a struct nobody initialised; one above ours, a newer header or garbage: either
     * way the fields cannot be trusted. */
    if (opts != NULL) {
        size_t n = opts->struct_size;
        if (n < sizeof(options_v0_1))
            return fail(r, RINGD_E_INVALID,
                        "ringd_options_t.struct_size is %zu, less than any ringd.h had (%zu): "
                        "start from ringd_options_init() or RINGD_OPTIONS_INIT, which set it",
                        n, sizeof(options_v0_1));
        if (n > sizeof(o))
            return fail(r, RINGD_E_INVALID,
                        "ringd_options_t.struct_size is %zu, more than the %zu bytes libringd %s "
                        "knows: start from ringd_options_init() or RINGD_OPTIONS_INIT, and run "
                        "with a libringd at least as new as the ringd.h the program was built with",
                        n, sizeof(o), RINGD_VERSION);
        memcpy(&o, opts, n);
        if (n < offsetof(ringd_options_t, local_rank) + sizeof(o.local_rank))
            o.ask_local_rank = 0; /* the caller's padding, not an option */
        if (n < offsetof(ringd_options_t, device) + sizeof(o.device))
            o.ask_device = 0;
    }

    const char *path = o.socket_path ? o.socket_path : getenv("RINGD_SOCKET");
    const char *job = o.job ? o.job : getenv("RINGD_JOB");
    int local_size = o.local_size, world_size = o.world_size, poll_us = o.poll_us;
    int min_size = o.min_size, local_rank = o.ask_local_rank ? o.local_rank : -1;
    int device = o.ask_device ? o.device : -1;
    uint64_t dev_arena = o.device_arena_size;
    if (dev_arena == 0 && env_bytes("RINGD_DEVICE_ARENA", &dev_arena) != 0)
        return fail(r, RINGD_E_INVALID,
                    "RINGD_DEVICE_ARENA is set but not a byte count (digits, then K, M or G)");
    if (dev_arena > 0 && !RINGD_HAVE_CUDA)
        return fail(r, RINGD_E_INVALID,
                    "a device arena of %" PRIu64 " bytes: this libringd was built without CUDA "
                    "and cannot map one",
                    dev_arena);
    if ((!local_size && env_int("RINGD_LOCAL_SIZE", 1, 1, 1 << 20, &local_size) != 0) ||
        (!world_size && env_int("RINGD_WORLD_SIZE", local_size, 1, 1 << 30, &world_size) != 0) ||
        (!poll_us && env_int("RINGD_POLL_US", RD_DEFAULT_POLL_US, -1, 1000000, &poll_us) != 0) ||
        (!min_size && env_int("RINGD_MIN_SIZE", 1, 0, 1 << 30, &min_size) != 0) ||
        (!o.ask_local_rank && env_int("RINGD_LOCAL_RANK", -1, 0, 1 << 20, &local_rank) != 0) ||
        (!o.ask_device && env_int("RINGD_DEVICE", -1, 0, 1023, &device) != 0))
        return fail(r, RINGD_E_INVALID,
                    "RINGD_LOCAL_SIZE, RINGD_WORLD_SIZE, RINGD_POLL_US, RINGD_MIN_SIZE, "
                    "RINGD_LOCAL_RANK or RINGD_DEVICE is set but not an integer in range");
    if (min_size == 0)
        min_size = 1;
    int timeout = o.open_timeout_ms > 0 ? o.open_timeout_ms : RD_DEFAULT_OPEN_TIMEOUT_MS;
    if (path == NULL || *path == '\0')
        path = RD_DEFAULT_SOCKET;
    if (job == NULL || *job == '\0')
        job = "default";
    if (local_size < 1 || world_size < local_size || o.op_timeout_ms < 0)
        return fail(r, RINGD_E_INVALID,
                    "local_size %d / world_size %d / op_timeout_ms %d: need local_size >= 1, "
                    "world_size >= local_size, timeouts >= 0 (check RINGD_LOCAL_SIZE and "
                    "RINGD_WORLD_SIZE)",
                    local_size, world_size, o.op_timeout_ms);
    /* A min_size above world_size would leave the job below it the moment it starts. */
    if (min_size < 1 || min_size > world_size)
        return fail(r, RINGD_E_INVALID,
                    "min_size %d: need 1 <= min_size <= world_size %d (check RINGD_MIN_SIZE)",
                    min_size, world_size);
    if ((o.ask_local_rank && local_rank < 0) || local_rank >= local_size)
        return fail(r, RINGD_E_INVALID,
                    "local_rank %d: need 0 <= local_rank < local_size %d (check "
                    "RINGD_LOCAL_RANK)",
                    local_rank, local_size);
    if (o.ask_device && device < 0)
        return fail(r, RINGD_E_INVALID, "device %d: need a CUDA device index >= 0", device);
    if (!rd_job_name_valid(job))
        return fail(r, RINGD_E_INVALID,
                    "job name '%.64s' must be 1..%d printable ASCII bytes, not starting with '%c' "
                    "(ringd's own jobs)",
                    job, RD_NAME_MAX, RD_JOB_RESERVED);
    r->op_timeout_ms = o.op_timeout_ms;
    r->poll_us = poll_us;
    r->open_timeout_ms = o.open_timeout_ms;
    r->arena_asked = o.arena_size;
    if ((r->socket_path = strdup(path)) == NULL || (r->job = strdup(job)) == NULL)
        return fail(r, RINGD_E_NOMEM, "out of memory");
    r->stream = o.cuda_stream;
    r->dev_asked = dev_arena;

    ringd_result_t rc = rd_conn_open(&r->conn, path, err, sizeof(err));
    if (rc != RINGD_OK)
        return fail(r, rc, "%s", err);
    int bad = session_listed(r); /* once its socket is set: a fork closes that in the child */
    if (bad != 0)
        return fail(r, RINGD_E_SYSTEM, "pthread_atfork: %s", strerror(bad));

    Ringd__Hello h = RINGD__HELLO__INIT;
    rd_msg m = RINGD__MSG__INIT;
    h.protocol = RD_PROTOCOL_VERSION;
    h.job = (char *)job;
    h.world_size = (uint32_t)world_size;
    h.local_size = (uint32_t)local_size;
    h.arena_size = o.arena_size;
    h.min_size = (uint32_t)min_size;
    h.open_timeout_ms = (uint32_t)timeout; /* also bounds waits below min_size later */
    h.asks_local_rank = local_rank >= 0;
    h.local_rank = h.asks_local_rank ? (uint32_t)local_rank : 0;
    h.asks_device = device >= 0;
    h.device = h.asks_device ? (uint32_t)device : 0;
    h.device_arena_size = dev_arena;
    const char *trace_path = traced ? getenv("RINGD_TIMELINE") : NULL;
    if (trace_path != NULL && *trace_path != '\0') {
        if ((r->trace_path = strdup(trace_path)) == NULL)
            return fail(r, RINGD_E_NOMEM, "out of memory");
        h.timeline = 1;
        r->traced = 1;
    }
    r->asked_device = device; /* what Welcome must give, when asked */
    m.body_case = RINGD__MSG__BODY_HELLO;
    m.hello = &h;
    rc = rd_conn_send(&r->conn, &m, err, sizeof(err));
    if (rc != RINGD_OK)
        return fail(r, rc, "%s", err);
    rc = await_welcome(r, job, local_size, timeout);
    if (rc == RINGD_OK && r->trace_path != NULL)
        rc = trace_open(r);
    if (rc == RINGD_OK)
        r->broken = RINGD_OK;
    return rc;
}

static void req_unlink(ringd_request_t *q)
{
    ringd_t *r = q->r;
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        r->reqs = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
}

static void req_free(ringd_request_t *q)
{
    if (q->stage != RD_NO_STAGE)
        rd_alloc_put(q->stage_alloc, q->stage);
    rd_learn_free(q->learn);
    free(q->message);
    free(q);
}

void rd_lib_req_unlink(ringd_request_t *q)
{
    req_unlink(q);
}

void rd_lib_req_free(ringd_request_t *q)
{
    req_free(q);
}

/* bytes from src to dst, either or both device memory (a CUDA copy, done when it returns).
 * Returns 0, or -1 with err set. */
static int copy_any(ringd_t *r, void *dst, const void *src, size_t bytes, char *err, size_t errlen)
{
#if RINGD_HAVE_CUDA
    int dev = rd_cuda_pointer_device(dst);
    if (dev < 0)
        dev = rd_cuda_pointer_device(src);
    if (dev < 0)
        dev = r->local_device;
    char why[256];
    void *ctx = rd_cuda_context();
    int rc = rd_cuda_copy(dev, dst, src, bytes, why, sizeof(why));
    rd_cuda_set_context(ctx);
    if (rc != 0) {
        snprintf(err, errlen, "copying %zu bytes of device memory: %s", bytes, why);
        return -1;
    }
    return 0;
#else
    (void)r, (void)dst, (void)src, (void)bytes;
    snprintf(err, errlen, "this libringd was built without CUDA: it cannot copy device memory");
    return -1;
#endif
}

/* Marks q finished: copies a staged result out and frees the staging. */
static void req_complete(ringd_request_t *q, ringd_result_t status, const char *message)
{
    q->done = 1;
    q->status = status;
    if (status == RINGD_OK && q->copy_to != NULL && !q->copy_device)
        memcpy(q->copy_to, q->copy_from, q->copy_len);
    if (status == RINGD_OK && q->copy_to != NULL && q->copy_device &&
        copy_any(q->r, q->copy_to, q->copy_from, q->copy_len, q->r->errmsg, sizeof(q->r->errmsg)) !=
            0) {
        status = q->status = RINGD_E_SYSTEM;
        message = q->r->errmsg;
    }
    if (status != RINGD_OK && message != NULL && *message != '\0')
        q->message = strdup(message);
}

void rd_lib_req_complete(ringd_request_t *q, ringd_result_t status, const char *message)
{
    req_complete(q, status, message);
}

/* The session broke: every outstanding request fails with rc. */
static void break_session(ringd_t *r, ringd_result_t rc, const char *why)
{
    if (r->broken == RINGD_OK)
        r->broken = rc;
    fail(r, rc, "%s", why);
    for (ringd_request_t *q = r->reqs; q != NULL; q = q->next)
        if (!q->done)
            req_complete(q, rc, why);
}

/* Takes the job as of a Complete (generation 0: unchanged) as the session's, before the
 * request's result reaches the caller. Completes come through the control queue and, when it is
 * full, the socket, which are read in turns: one may overtake another, so an older generation
 * never replaces a newer one. Returns 0, or -1 after breaking the session on numbers that do not
 * fit together. */
static int take_membership(ringd_t *r, const Ringd__Complete *c)
{
    char why[256];
    if (c->generation == 0 || c->generation < r->generation)
        return 0;
    if (c->size == 0 || c->size > INT32_MAX || c->rank >= c->size || c->local_size == 0 ||
        c->local_size > c->size || c->local_rank >= c->local_size) {
        snprintf(why, sizeof(why),
                 "ringd sent generation %" PRIu64 " as rank %u of %u, local rank %u of %u",
                 c->generation, c->rank, c->size, c->local_rank, c->local_size);
        break_session(r, RINGD_E_PROTOCOL, why);
        return -1;
    }
    if (r->trace_file != NULL && c->generation != r->generation) {
        snprintf(why, sizeof(why), "generation %" PRIu64 ": rank %u of %u", c->generation, c->rank,
                 c->size);
        rd_ctrace_mark(&r->trace, rd_now_us(), c->generation, why);
    }
    if (c->generation != r->generation)
        r->since_join = 0; /* every rank starts counting for its next join again */
    r->generation = c->generation;
    r->rank = (int)c->rank;
    r->size = (int)c->size;
    r->local_rank = (int)c->local_rank;
    r->local_size = (int)c->local_size;
    return 0;
}

/* Handles one message from the daemon. */
static void handle(ringd_t *r, const rd_msg *m)
{
    char why[640];
    switch (m->body_case) {
    case RINGD__MSG__BODY_COMPLETE:
        if (take_membership(r, m->complete) != 0)
            return;
        for (ringd_request_t *q = r->reqs; q != NULL; q = q->next) {
            if (q->id == m->complete->request_id && !q->done) {
                uint32_t st = m->complete->status;
                if (q->abandoned) { /* the daemon is done with its staging now */
                    req_unlink(q);
                    req_free(q);
                    return;
                }
                req_complete(q, st < RINGD_RESULT_COUNT ? (ringd_result_t)st : RINGD_E_PROTOCOL,
                             m->complete->message);
                if (r->trace_file != NULL && m->complete->trace != NULL)
                    rd_ctrace_op(&r->trace, m->complete->trace);
                if (q->outer != NULL)
                    rd_learn_advance(q);
                return;
            }
        }
        return;                         /* a request the caller gave up on */
    case RINGD__MSG__BODY_POKE: return; /* the completion queue is read on every turn */
    case RINGD__MSG__BODY_ERROR:
        snprintf(why, sizeof(why), "ringd closed the session: %s", m->error->message);
        break_session(r,
                      m->error->status > 0 && m->error->status < RINGD_RESULT_COUNT
                          ? (ringd_result_t)m->error->status
                          : RINGD_E_PROTOCOL,
                      why);
        return;
    default:
        snprintf(why, sizeof(why), "unexpected message type %d from ringd", (int)m->body_case);
        break_session(r, RINGD_E_PROTOCOL, why);
        return;
    }
}

/* Handles every message waiting in the completion queue and on the socket, without blocking.
 * Returns RINGD_OK, or the error that broke the session (RINGD_E_INVALID, reading nothing, in a
 * forked child). */
static ringd_result_t drain(ringd_t *r, int socket_too)
{
    char err[512];
    rd_msg *m = NULL;
    if (rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    for (;;) {
        rd_ctlq_status st = rd_ctlq_get(&r->cq, RD_FRAME_MAX_DEFAULT, &m, err, sizeof(err));
        if (st == RD_CTLQ_EMPTY)
            break;
        if (st != RD_CTLQ_OK) {
            break_session(r, RINGD_E_PROTOCOL, err);
            return r->broken;
        }
        handle(r, m);
        rd_frame_free(m);
    }
    while (socket_too && r->broken == RINGD_OK) {
        ringd_result_t rc = rd_conn_recv(&r->conn, 0, &m, err, sizeof(err));
        if (rc == RINGD_E_TIMEOUT)
            break;
        if (rc != RINGD_OK) {
            break_session(r, rc, err);
            break;
        }
        handle(r, m);
        rd_frame_free(m);
    }
    return r->broken;
}

/* Handles messages until q is done (q NULL: only what is already there), waiting at most
 * timeout_ms (-1 forever, 0 not at all). Polls the completion queue for poll_us, yielding the
 * CPU to the daemon and the other ranks, then sleeps on the socket, where the daemon Pokes. */
static ringd_result_t pump(ringd_t *r, ringd_request_t *q, int timeout_ms)
{
    int64_t start = rd_now_us();
    int64_t deadline = timeout_ms > 0 ? start + (int64_t)timeout_ms * 1000 : 0;
    /* The socket carries only errors, Pokes and overflow here: look at it now and then. A call
     * that only polls looks at once; a wait looks first after 15 turns, so that a collective
     * answered through the queue costs no system call on the socket. */
    unsigned look = q == NULL || timeout_ms == 0 ? 0 : 15;
    for (unsigned spin = 0;; spin++) {
        ringd_result_t rc = drain(r, spin % 16 == look);
        if (rc != RINGD_OK)
            return rc;
        if (q == NULL || q->done)
            return RINGD_OK;
        if (timeout_ms == 0)
            return RINGD_E_TIMEOUT;
        int64_t now = rd_now_us();
        if (deadline && now >= deadline) { /* the socket, once more: the answer may be there */
            if ((rc = drain(r, 1)) != RINGD_OK)
                return rc;
            return q->done ? RINGD_OK : RINGD_E_TIMEOUT;
        }
        if (now - start < r->poll_us) {
            sched_yield();
            continue;
        }
        if (!rd_ctlq_prepare_sleep(&r->cq))
            continue;
        struct pollfd p = {.fd = r->conn.fd, .events = POLLIN};
        int wait = deadline ? (int)((deadline - now + 999) / 1000) : -1;
        int n = poll(&p, 1, wait);
        rd_ctlq_wake(&r->cq);
        if (n < 0 && errno != EINTR) {
            break_session(r, RINGD_E_SYSTEM, "poll on the ringd socket failed");
            return r->broken;
        }
        spin = look + 15; /* read the socket on the next turn */
    }
}

/* Sends one message to the daemon: through the control queue when it has room (Poking a sleeping
 * daemon), else on the socket. */
static ringd_result_t send_to_daemon(ringd_t *r, const rd_msg *m, char *err, size_t errlen)
{
    if (r->forked) { /* refused before: this is a last guard */
        snprintf(err, errlen, "a forked child cannot use its parent's session");
        return RINGD_E_INVALID;
    }
    rd_ctlq_status st = rd_ctlq_put(&r->sq, m);
    if (st == RD_CTLQ_FULL)
        return rd_conn_send(&r->conn, m, err, errlen);
    if (st != RD_CTLQ_OK) {
        snprintf(err, errlen, "the submission queue's shared indices are corrupt");
        return RINGD_E_PROTOCOL;
    }
    if (!rd_ctlq_consumer_asleep(&r->sq))
        return RINGD_OK;
    Ringd__Poke p = RINGD__POKE__INIT;
    rd_msg poke = RINGD__MSG__INIT;
    poke.body_case = RINGD__MSG__BODY_POKE;
    poke.poke = &p;
    return rd_conn_send(&r->conn, &poke, err, errlen);
}

/* Ends a finished request: its result, its detail into errmsg, and its memory. */
static ringd_result_t req_finish(ringd_request_t *q)
{
    ringd_t *r = q->r;
    ringd_result_t rc = q->status;
    if (rc != RINGD_OK)
        fail(r, rc, "%s", q->message ? q->message : ringd_strerror(rc));
    req_unlink(q);
    req_free(q);
    return rc;
}

/* Waits for q up to op_timeout_ms. Finished: its result (q is freed). Not finished: TIMEOUT,
 * with q kept pending, or given up (abandon: its buffers outside the arena are never touched
 * again). */
static ringd_result_t wait_req(ringd_request_t *q, int abandon)
{
    ringd_t *r = q->r;
    ringd_result_t rc = pump(r, q, r->op_timeout_ms > 0 ? r->op_timeout_ms : -1);
    if (rc != RINGD_E_TIMEOUT || q->done)
        return req_finish(q);
    if (abandon) {
        q->abandoned = 1;
        q->copy_to = NULL;
        for (ringd_request_t *s = r->reqs; s != NULL; s = s->next)
            if (s->outer == q) /* its step: nothing more is written for the caller */
                s->copy_to = NULL;
        return fail(r, rc, "request %" PRIu64 ": no completion within %d ms; given up", q->id,
                    r->op_timeout_ms);
    }
    return fail(r, rc,
                "request %" PRIu64 ": no completion within %d ms; it is still "
                "pending (wait again or close the session)",
                q->id, r->op_timeout_ms);
}

ringd_result_t rd_lib_wait(ringd_request_t *q)
{
    return wait_req(q, 1);
}

/* 1 after failing q's wait: it is kept for its group, which has not been sent yet. */
static int held_back(ringd_request_t *q)
{
    if (!q->held)
        return 0;
    fail(q->r, RINGD_E_INVALID,
         "request %" PRIu64 " belongs to a group not ended yet: call ringd_group_end first", q->id);
    return 1;
}

ringd_result_t ringd_wait(ringd_request_t *q)
{
    if (q == NULL || rd_lib_left_to_parent(q->r))
        return RINGD_E_INVALID;
    if (held_back(q))
        return RINGD_E_INVALID;
    return wait_req(q, 0);
}

ringd_result_t ringd_test(ringd_request_t *q, int *done)
{
    if (q == NULL || done == NULL)
        return RINGD_E_INVALID;
    *done = 0;
    if (rd_lib_left_to_parent(q->r))
        return RINGD_E_INVALID;
    if (held_back(q))
        return RINGD_E_INVALID;
    if (!q->done)
        pump(q->r, q, 0);
    if (!q->done)
        return RINGD_OK;
    *done = 1;
    return req_finish(q);
}

/* 1 when [p, p+len) lies in [base, base+size), 0 when wholly outside, -1 when it straddles an
 * edge. */
static int in_range(const uint8_t *base, uint64_t size, const void *p, uint64_t len)
{
    uintptr_t a = (uintptr_t)base, e = a + size, x = (uintptr_t)p;
    if (base == NULL)
        return 0;
    if (x >= a && x < e)
        return len <= e - x ? 1 : -1;
    if (x < a && len > a - x)
        return -1;
    return 0;
}

static int in_arena(const ringd_t *r, const void *p, uint64_t len)
{
    return in_range(r->arena, r->arena_size, p, len);
}

static int in_dev_arena(const ringd_t *r, const void *p, uint64_t len)
{
    return in_range(r->dev_arena, r->dev_arena_size, p, len);
}

/* Where an op's buffers are as the daemon takes them, in bytes. */
typedef struct {
    uint64_t in_len, out_len;
    uint64_t in_at;  /* the input's place in a staged output that holds it (in place) */
    uint64_t out_at; /* the output's place in a staged input that holds it */
    int apart;       /* no in-place form: staged together, the output follows the input */
} layout;

/* Puts q on r's list of outstanding requests. */
static void req_link(ringd_t *r, ringd_request_t *q)
{
    q->next = r->reqs;
    if (r->reqs != NULL)
        r->reqs->prev = q;
    r->reqs = q;
}

void rd_lib_req_link(ringd_t *r, ringd_request_t *q)
{
    req_link(r, q);
}

/* A Submit of a group, kept until ringd_group_end: the message and what it points to. */
struct held {
    ringd_request_t *q; /* its request (NULL: a refusal's, abandoned) */
    Ringd__Submit s;
    Ringd__TensorRef in, out;
    char *name, *refusal;
    uint64_t *counts;
    struct held *next;
};

static void held_free(struct held *h)
{
    free(h->name);
    free(h->refusal);
    free(h->counts);
    free(h);
}

/* Sends Submit s now, or keeps it for the group being made (taking counts, which it frees
 * either way). Returns RINGD_OK, or what sending failed with (err set). */
static ringd_result_t send_submit(ringd_t *r, ringd_request_t *q, const Ringd__Submit *s,
                                  uint64_t *counts, char *err, size_t errlen)
{
    if (!r->grouping) {
        rd_msg m = RINGD__MSG__INIT;
        m.body_case = RINGD__MSG__BODY_SUBMIT;
        m.submit = (Ringd__Submit *)s;
        ringd_result_t rc = send_to_daemon(r, &m, err, errlen);
        free(counts);
        return rc;
    }
    struct held *h = calloc(1, sizeof(*h));
    if (h == NULL || (h->name = strdup(s->name)) == NULL ||
        (s->refusal != NULL && (h->refusal = strdup(s->refusal)) == NULL)) {
        if (h != NULL)
            held_free(h);
        free(counts);
        snprintf(err, errlen, "out of memory keeping a collective for its group");
        return RINGD_E_NOMEM;
    }
    h->s = *s;
    h->q = q;
    if (q != NULL)
        q->held = 1;
    h->s.name = h->name;
    h->s.refusal = h->refusal != NULL ? h->refusal : (char *)"";
    h->counts = counts;
    h->s.counts = counts;
    if (s->input != NULL) {
        h->in = *s->input;
        h->s.input = &h->in;
    }
    if (s->output != NULL) {
        h->out = *s->output;
        h->s.output = &h->out;
    }
    if (r->held_tail != NULL)
        r->held_tail->next = h;
    else
        r->held = h;
    r->held_tail = h;
    r->nheld++;
    return RINGD_OK;
}

/* The library cannot run the op named name (rc, its detail already in errmsg): tells the daemon,
 * which fails that op on every other rank with this reason rather than letting them wait, and
 * returns rc. The daemon's answer to it is dropped (the request is abandoned). */
static ringd_result_t refuse(ringd_t *r, const submit_args *a, const char *name, ringd_result_t rc)
{
    char err[512];
    ringd_request_t *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return rc; /* the other ranks still learn of it from the stall inspector */
    q->r = r;
    q->id = r->next_id++;
    q->stage = RD_NO_STAGE;
    q->abandoned = 1;
    Ringd__Submit s = RINGD__SUBMIT__INIT;
    s.request_id = q->id;
    s.op = (Ringd__OpType)a->op;
    s.name = (char *)name;
    s.generation = r->generation;
    s.refused = (uint32_t)rc;
    s.refusal = r->errmsg;
    if (send_submit(r, NULL, &s, NULL, err, sizeof(err)) != RINGD_OK) {
        req_free(q);
        return rc;
    }
    req_link(r, q);
    return rc;
}

/* Puts a's buffers (lay's bytes) where the daemon reaches them, into *in_off and *out_off: in
 * the device arena (*on_device = 1) when both are device memory, the session has a device arena
 * and the op runs on it (the daemon moves it across nodes itself: NCCL, or host staging);
 * otherwise in the host arena. What lies elsewhere is staged in q (a copy in now, the result
 * copied back at completion; a CUDA copy where device memory is involved, after the session's
 * stream has run). A buffer of no bytes needs no place. Returns RINGD_OK, or the failure with
 * errmsg set (q's staging released). */
static ringd_result_t place(ringd_t *r, const submit_args *a, const char *name, ringd_request_t *q,
                            const layout *lay, int *on_device, uint64_t *in_off, uint64_t *out_off)
{
    uint64_t in_len = lay->in_len, out_len = lay->out_len;
    int sh = in_len ? in_arena(r, a->send, in_len) : 0,
        rh = out_len ? in_arena(r, a->recv, out_len) : 0;
    int sd = in_len ? in_dev_arena(r, a->send, in_len) : 0;
    int rdv = out_len ? in_dev_arena(r, a->recv, out_len) : 0;
    if (sh < 0 || rh < 0 || sd < 0 || rdv < 0)
        return fail(r, RINGD_E_INVALID, "tensor '%s': a buffer straddles the %sarena's edge", name,
                    sh < 0 || rh < 0 ? "" : "device ");
    int send_gpu = in_len && (sd || (!sh && rd_cuda_ptr_is_device(a->send)));
    int recv_gpu = out_len && (rdv || (!rh && rd_cuda_ptr_is_device(a->recv)));
#if !RINGD_HAVE_CUDA
    if (send_gpu || recv_gpu)
        return fail(r, RINGD_E_INVALID,
                    "tensor '%s': a buffer is CUDA device memory, and this libringd was built "
                    "without CUDA: pass host memory (tensor.cpu())",
                    name);
#else
    if (send_gpu || recv_gpu) {
        /* the daemon and the copies below read what the caller's stream has queued so far */
        char why[256];
        /* the tensors' device (as this process numbers it): its context owns the stream */
        int dev = rd_cuda_pointer_device(send_gpu ? a->send : a->recv);
        void *ctx = rd_cuda_context();
        int rc = rd_cuda_stream_sync(dev, r->stream, why, sizeof(why));
        rd_cuda_set_context(ctx);
        if (rc != 0)
            return fail(r, RINGD_E_SYSTEM, "tensor '%s': waiting for the CUDA stream: %s", name,
                        why);
    }
#endif
    int dev = (send_gpu || !in_len) && (recv_gpu || !out_len) && r->dev_arena != NULL;
    uint8_t *base = dev ? r->dev_arena : r->arena;
    rd_alloc *al = dev ? &r->dev_alloc : &r->alloc;
    /* already where the daemon reaches them, or nothing to place */
    int si = !in_len || (dev ? sd : sh), ri = !out_len || (dev ? rdv : rh);
    *on_device = dev;
    *in_off = in_len ? (uint64_t)((const uint8_t *)a->send - base) : 0;
    *out_off = out_len ? (uint64_t)((uint8_t *)a->recv - base) : 0;
    if (si && ri)
        return RINGD_OK;
    /* One staging area: both buffers in the daemon's in-place layout, or the one that is not in
     * the arena. */
    uint64_t len = !si && !ri ? (lay->apart         ? in_len + out_len
                                 : in_len > out_len ? in_len
                                                    : out_len)
                   : !si      ? in_len
                              : out_len;
    if (rd_alloc_get(al, len, &q->stage) != 0) {
        q->stage = RD_NO_STAGE;
        return fail(r, RINGD_E_NOMEM,
                    "tensor '%s': no room in the %sarena to stage %" PRIu64
                    " bytes (ringd_alloc%s buffers avoid the copy)",
                    name, dev ? "device " : "", len, dev ? "_device" : "");
    }
    q->stage_alloc = al;
    if (!si && !ri && lay->apart) {
        *in_off = q->stage;
        *out_off = q->stage + in_len;
    } else if (!si && !ri) {
        *in_off = q->stage + (out_len >= in_len ? lay->in_at : 0);
        *out_off = q->stage + (out_len >= in_len ? 0 : lay->out_at);
    } else if (!si) {
        *in_off = q->stage;
    } else {
        *out_off = q->stage;
    }
    if (!si && (send_gpu || dev)) {
        char why[512];
        if (copy_any(r, base + *in_off, a->send, in_len, why, sizeof(why)) != 0) {
            rd_alloc_put(al, q->stage);
            q->stage = RD_NO_STAGE;
            return fail(r, RINGD_E_SYSTEM, "tensor '%s': %s", name, why);
        }
    } else if (!si) {
        memcpy(base + *in_off, a->send, in_len);
    }
    if (!ri) {
        q->copy_to = a->recv;
        q->copy_from = base + *out_off;
        q->copy_len = out_len;
        q->copy_device = recv_gpu || dev;
    }
    return RINGD_OK;
}

/* The bytes of a's buffers and their in-place layout, or a failure (errmsg set) when its counts
 * do not describe this job. */
/* lay_out of an alltoall: this rank's row of the matrix (or count for every rank) is what it
 * sends, its column what it receives; never in place. */
static ringd_result_t lay_out_alltoall(ringd_t *r, const submit_args *a, const char *name,
                                       layout *lay)
{
    uint64_t esz = ringd_dtype_size(a->dtype), n = (uint64_t)r->size, me = (uint64_t)r->rank;
    uint64_t room = (r->arena_size > r->dev_arena_size ? r->arena_size : r->dev_arena_size) / esz;
    uint64_t sent = 0, got = 0;
    if (a->counts == NULL) {
        if (a->count > room / n)
            return fail(r, RINGD_E_INVALID,
                        "tensor '%s': %" PRIu64 " x %zu elements do not fit the arena of %" PRIu64
                        " bytes",
                        name, n, a->count, room * esz);
        sent = got = a->count * n;
    } else {
        for (uint64_t j = 0; j < n; j++) {
            uint64_t out = a->counts[me * n + j], in = a->counts[j * n + me];
            if (out > room - sent || in > room - got)
                return fail(r, RINGD_E_INVALID,
                            "tensor '%s': this rank's counts add up to more elements than fit "
                            "the arena of %" PRIu64 " bytes",
                            name, room * esz);
            sent += out;
            got += in;
        }
    }
    lay->in_len = sent * esz;
    lay->out_len = got * esz;
    lay->apart = 1;
    return RINGD_OK;
}

static ringd_result_t lay_out(ringd_t *r, const submit_args *a, const char *name, layout *lay)
{
    uint64_t esz = a->op == RINGD__OP_TYPE__OP_BARRIER ? 1 : ringd_dtype_size(a->dtype);
    uint64_t room = (r->arena_size > r->dev_arena_size ? r->arena_size : r->dev_arena_size) / esz;
    uint64_t total = 0, own = 0, count = a->op == RINGD__OP_TYPE__OP_BARRIER ? 0 : a->count;
    int counted =
        a->op == RINGD__OP_TYPE__OP_REDUCESCATTER || a->op == RINGD__OP_TYPE__OP_ALLGATHERV;
    memset(lay, 0, sizeof(*lay));
    if (a->op == RINGD__OP_TYPE__OP_ALLTOALL)
        return lay_out_alltoall(r, a, name, lay);
    if (counted && a->counts != NULL) {
        for (int i = 0; i < r->size; i++) {
            if (a->counts[i] > room - total)
                return fail(r, RINGD_E_INVALID,
                            "tensor '%s': the counts add up to more elements than fit the arena "
                            "of %" PRIu64 " bytes",
                            name, room * esz);
            own += i < r->rank ? a->counts[i] : 0;
            total += a->counts[i];
        }
        count = a->counts[r->rank];
        if (a->op == RINGD__OP_TYPE__OP_ALLGATHERV && a->count != count)
            return fail(r, RINGD_E_INVALID,
                        "tensor '%s': sendcount %zu differs from this rank's entry of recvcounts "
                        "(%zu, rank %d)",
                        name, a->count, a->counts[r->rank], r->rank);
    } else if (counted) {
        if (count > room / (uint64_t)r->size)
            return fail(r, RINGD_E_INVALID,
                        "tensor '%s': %u x %" PRIu64 " elements do not fit the arena of %" PRIu64
                        " bytes",
                        name, r->size, count, room * esz);
        own = count * (uint64_t)r->rank;
        total = count * (uint64_t)r->size;
    }
    uint64_t gather = a->op == RINGD__OP_TYPE__OP_ALLGATHER ? (uint64_t)r->size : 1;
    if (count > room / gather)
        return fail(r, RINGD_E_INVALID,
                    "tensor '%s': %" PRIu64 " elements do not fit the arena of %" PRIu64 " bytes",
                    name, count, room * esz);
    lay->in_len = lay->out_len = count * esz;
    switch (a->op) {
    case RINGD__OP_TYPE__OP_ALLGATHER:
        lay->out_len *= gather;
        lay->in_at = lay->in_len * (uint64_t)r->rank;
        break;
    case RINGD__OP_TYPE__OP_REDUCESCATTER:
        lay->in_len = total * esz;
        lay->out_at = own * esz;
        break;
    case RINGD__OP_TYPE__OP_ALLGATHERV:
        lay->out_len = total * esz;
        lay->in_at = own * esz;
        break;
    default: break;
    }
    return RINGD_OK;
}

/* Places the buffers in the arena (staging what lies outside), sends Submit, and returns the
 * request. An op with a valid name that cannot be run is refused (see refuse). */
static ringd_result_t submit(ringd_t *r, const submit_args *a, ringd_request_t **out)
{
    char namebuf[48];
    char err[512];
    *out = NULL;
    if (r == NULL)
        return RINGD_E_INVALID;
    uint64_t shape = r->next_shape; /* this submission's, whatever becomes of it */
    r->next_shape = 0;
    if (rd_lib_left_to_parent(r)) /* before staging anything into the parent's arena */
        return RINGD_E_INVALID;
    if (r->broken != RINGD_OK) {
        static const char closed[] = "the session is closed: ";
        char why[sizeof(r->errmsg)]; /* errmsg is fail's output: never its input too */
        if (strncmp(r->errmsg, closed, sizeof(closed) - 1) == 0)
            return r->broken; /* said so already */
        snprintf(why, sizeof(why), "%s", r->errmsg);
        return fail(r, r->broken, "%s%s", closed, why);
    }
    const char *name = a->name;
    if (name == NULL) {
        snprintf(namebuf, sizeof(namebuf), "~auto.%" PRIu64, r->auto_seq++);
        name = namebuf;
    }
    if (!rd_name_valid(name))
        return fail(r, RINGD_E_INVALID, "tensor names are 1..%d printable ASCII bytes",
                    RD_NAME_MAX);
    ringd_result_t prc = rd_pset_current(r); /* every member hears why, not only this one */
    if (prc != RINGD_OK)
        return refuse(r, a, name, prc);

    if (a->op != RINGD__OP_TYPE__OP_BARRIER && ringd_dtype_size(a->dtype) == 0)
        return refuse(
            r, a, name,
            fail(r, RINGD_E_INVALID, "tensor '%s': unknown dtype %d", name, (int)a->dtype));
    int counted = a->op == RINGD__OP_TYPE__OP_REDUCESCATTER ||
                  a->op == RINGD__OP_TYPE__OP_ALLGATHERV || a->op == RINGD__OP_TYPE__OP_ALLTOALL;
    if (a->op == RINGD__OP_TYPE__OP_ALLGATHERV && a->counts == NULL)
        return refuse(r, a, name,
                      fail(r, RINGD_E_INVALID, "tensor '%s': recvcounts is NULL", name));
    layout lay;
    ringd_result_t lrc = lay_out(r, a, name, &lay);
    if (lrc != RINGD_OK)
        return refuse(r, a, name, lrc);
    if ((lay.in_len > 0 && a->send == NULL) || (lay.out_len > 0 && a->recv == NULL))
        return refuse(r, a, name, fail(r, RINGD_E_INVALID, "tensor '%s': a NULL buffer", name));
    uint64_t count = a->op == RINGD__OP_TYPE__OP_BARRIER ? 0 : a->count;
    size_t ncounts =
        a->op == RINGD__OP_TYPE__OP_ALLTOALL ? (size_t)r->size * (size_t)r->size : (size_t)r->size;
    if (counted && a->counts != NULL)
        count = a->op == RINGD__OP_TYPE__OP_ALLTOALL ? lay.in_len / ringd_dtype_size(a->dtype)
                                                     : a->counts[r->rank];
    uint64_t *counts = NULL;
    if (counted && a->counts != NULL) {
        size_t wire = 1024; /* the rest of the Submit, amply */
        for (size_t i = 0; i < ncounts; i++)
            for (uint64_t v = a->counts[i];; v >>= 7) { /* its varint's bytes */
                wire++;
                if (v < 128)
                    break;
            }
        if (wire > RD_FRAME_MAX_DEFAULT)
            return refuse(r, a, name,
                          fail(r, RINGD_E_INVALID,
                               "tensor '%s': its %zu counts take about %zu bytes, more than one "
                               "control frame holds (%u): at this job size, use equal counts "
                               "(ringd_alltoall)",
                               name, ncounts, wire, (unsigned)RD_FRAME_MAX_DEFAULT));
        counts = malloc(ncounts * sizeof(*counts));
        if (counts == NULL)
            return refuse(r, a, name, fail(r, RINGD_E_NOMEM, "out of memory"));
        for (size_t i = 0; i < ncounts; i++)
            counts[i] = a->counts[i];
    }

    ringd_request_t *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        free(counts);
        return refuse(r, a, name, fail(r, RINGD_E_NOMEM, "out of memory"));
    }
    q->r = r;
    q->id = r->next_id++;
    q->stage = RD_NO_STAGE;

    uint64_t in_off = 0, out_off = 0;
    int on_device = 0;
    if (lay.in_len > 0 || lay.out_len > 0) {
        ringd_result_t rc = place(r, a, name, q, &lay, &on_device, &in_off, &out_off);
        if (rc != RINGD_OK) {
            free(q);
            free(counts);
            return refuse(r, a, name, rc);
        }
    }

    Ringd__Submit s = RINGD__SUBMIT__INIT;
    s.request_id = q->id;
    s.op = (Ringd__OpType)a->op;
    s.name = (char *)name;
    s.dtype = (Ringd__DataType)a->dtype;
    s.count = count;
    s.in_offset = in_off;
    s.out_offset = out_off;
    s.redop = (Ringd__ReduceOp)a->redop;
    s.root = a->root < 0 ? UINT32_MAX : (uint32_t)a->root;
    s.prescale = a->prescale;
    s.postscale = a->postscale;
    s.generation = r->generation;
    Ringd__TensorRef tin = RINGD__TENSOR_REF__INIT, tout = RINGD__TENSOR_REF__INIT;
    tin.kind = tout.kind =
        on_device ? RINGD__MEMORY_KIND__MEM_DEVICE : RINGD__MEMORY_KIND__MEM_ARENA;
    tin.device = tout.device = on_device ? (uint32_t)r->device : 0;
    tin.handle = tout.handle = on_device ? 1 : 0;
    tin.offset = in_off;
    tout.offset = out_off;
    s.input = &tin;
    s.output = &tout;
    s.counts = counts;
    s.n_counts = counts != NULL ? ncounts : 0;
    s.join = a->join;
    s.shape = shape;
    ringd_result_t rc = send_submit(r, q, &s, counts, err, sizeof(err));
    if (rc != RINGD_OK) {
        req_free(q);
        break_session(r, rc, err);
        return rc;
    }
    req_link(r, q);
    r->since_join = a->join ? 0 : r->since_join + 1;
    *out = q;
    return RINGD_OK;
}

ringd_result_t rd_lib_submit(ringd_t *r, const submit_args *a, ringd_request_t **out)
{
    return submit(r, a, out);
}

ringd_result_t rd_lib_refuse(ringd_t *r, const submit_args *a, const char *name, ringd_result_t rc)
{
    return refuse(r, a, name, rc);
}

void rd_lib_group_aside(ringd_t *r, rd_group_aside *save)
{
    *save = (rd_group_aside){r->grouping, r->held, r->held_tail, r->nheld, r->learn_group};
    r->grouping = 0;
    r->held = r->held_tail = NULL;
    r->nheld = 0;
    r->learn_group = NULL;
}

void rd_lib_group_restore(ringd_t *r, const rd_group_aside *save)
{
    r->grouping = save->grouping;
    r->held = save->held;
    r->held_tail = save->held_tail;
    r->nheld = save->nheld;
    r->learn_group = save->learn_group;
}

ringd_result_t ringd_group_start(ringd_t *r)
{
    if (r == NULL || rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    if (r->grouping)
        return fail(r, RINGD_E_INVALID, "ringd_group_start: a group is already being made");
    r->grouping = 1;
    return RINGD_OK;
}

ringd_result_t ringd_group_end(ringd_t *r)
{
    char err[512];
    if (r == NULL || rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    if (!r->grouping)
        return fail(r, RINGD_E_INVALID, "ringd_group_end: no ringd_group_start before it");
    r->grouping = 0;
    struct held *h = r->held;
    const char *group = h != NULL ? h->name : "";
    uint32_t i = 0, n = r->nheld;
    ringd_result_t rc = RINGD_OK;
    for (; h != NULL; h = h->next, i++) {
        if (h->q != NULL)
            h->q->held = 0;
        h->s.group = (char *)group;
        h->s.group_size = n;
        h->s.group_index = i;
        rd_msg m = RINGD__MSG__INIT;
        m.body_case = RINGD__MSG__BODY_SUBMIT;
        m.submit = &h->s;
        if (rc == RINGD_OK && r->broken == RINGD_OK &&
            (rc = send_to_daemon(r, &m, err, sizeof(err))) != RINGD_OK)
            break_session(r, rc, err);
    }
    while (r->held != NULL) {
        h = r->held;
        r->held = h->next;
        held_free(h);
    }
    r->held_tail = NULL;
    r->nheld = 0;
    rd_learn_group_end(r);
    return rc != RINGD_OK ? rc : r->broken;
}

ringd_result_t ringd_refuse(ringd_t *r, const char *name, ringd_result_t rc, const char *why)
{
    char namebuf[48];
    if (r == NULL || rc <= RINGD_OK || rc >= RINGD_RESULT_COUNT || rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    if (r->broken != RINGD_OK)
        return r->broken;
    if (name == NULL) { /* the name the rank's next unnamed collective would have had */
        snprintf(namebuf, sizeof(namebuf), "~auto.%" PRIu64, r->auto_seq++);
        name = namebuf;
    }
    if (!rd_name_valid(name))
        return fail(r, RINGD_E_INVALID, "tensor names are 1..%d printable ASCII bytes",
                    RD_NAME_MAX);
    submit_args a = {
        RINGD__OP_TYPE__OP_BARRIER, name, NULL, NULL, 0, RINGD_U8, RINGD_SUM, 0, 1.0, 1.0, NULL, 0};
    char said[sizeof(r->errmsg)]; /* why may be ringd_errmsg(r), which fail writes */
    snprintf(said, sizeof(said), "%.900s", why != NULL && *why ? why : ringd_strerror(rc));
    fail(r, rc, "%s", said);
    refuse(r, &a, name, rc);
    return RINGD_OK;
}

int rd_lib_sync_in_group(ringd_t *r, const char *name)
{
    if (r == NULL || r->forked || !r->grouping) /* it would wait for the group's end, which it
                                                   holds up (a forked child's is refused later) */
        return 0;
    fail(r, RINGD_E_INVALID,
         "tensor '%s': a synchronous collective inside a group (ringd_group_start): use its "
         "_async form, and wait after ringd_group_end",
         name != NULL ? name : "(unnamed)");
    return 1;
}

/* Submits and waits: the synchronous form of every collective. */
static ringd_result_t submit_wait(ringd_t *r, const submit_args *a)
{
    ringd_request_t *q;
    if (rd_lib_sync_in_group(r, a->name))
        return RINGD_E_INVALID;
    ringd_result_t rc = submit(r, a, &q);
    if (rc != RINGD_OK)
        return rc;
    /* The caller gets no handle and may free its buffers: a request that does not finish in time
     * is given up. */
    return wait_req(q, 1);
}

/* The submission of a collective that reduces nothing (broadcast, the gathers, alltoall). */
static submit_args coll_args(int op, const char *name, const void *send, void *recv, size_t count,
                             ringd_dtype_t dtype, const size_t *counts)
{
    submit_args a = {op, name, send, recv, count, dtype, RINGD_SUM, 0, 1.0, 1.0, counts, 0};
    return a;
}

/* The submission of an allreduce; every allreduce call, sync or async, scaled or not. */
static submit_args allreduce_args(const char *name, const void *sendbuf, void *recvbuf,
                                  size_t count, ringd_dtype_t dtype, ringd_redop_t op,
                                  double prescale, double postscale)
{
    submit_args a = {RINGD__OP_TYPE__OP_ALLREDUCE,
                     name,
                     sendbuf,
                     recvbuf,
                     count,
                     dtype,
                     op,
                     0,
                     prescale,
                     postscale,
                     NULL,
                     0};
    return a;
}

ringd_result_t ringd_allreduce_scaled_async(ringd_t *r, const char *name, const void *sendbuf,
                                            void *recvbuf, size_t count, ringd_dtype_t dtype,
                                            ringd_redop_t op, double prescale, double postscale,
                                            ringd_request_t **req)
{
    submit_args a = allreduce_args(name, sendbuf, recvbuf, count, dtype, op, prescale, postscale);
    if (req == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_allreduce_scaled(ringd_t *r, const char *name, const void *sendbuf,
                                      void *recvbuf, size_t count, ringd_dtype_t dtype,
                                      ringd_redop_t op, double prescale, double postscale)
{
    submit_args a = allreduce_args(name, sendbuf, recvbuf, count, dtype, op, prescale, postscale);
    return submit_wait(r, &a);
}

ringd_result_t ringd_allreduce(ringd_t *r, const char *name, const void *sendbuf, void *recvbuf,
                               size_t count, ringd_dtype_t dtype, ringd_redop_t op)
{
    submit_args a = allreduce_args(name, sendbuf, recvbuf, count, dtype, op, 1.0, 1.0);
    return submit_wait(r, &a);
}

ringd_result_t ringd_allreduce_async(ringd_t *r, const char *name, const void *sendbuf,
                                     void *recvbuf, size_t count, ringd_dtype_t dtype,
                                     ringd_redop_t op, ringd_request_t **req)
{
    return ringd_allreduce_scaled_async(r, name, sendbuf, recvbuf, count, dtype, op, 1.0, 1.0, req);
}

ringd_result_t ringd_broadcast_async(ringd_t *r, const char *name, void *buf, size_t count,
                                     ringd_dtype_t dtype, int root, ringd_request_t **req)
{
    submit_args a = {RINGD__OP_TYPE__OP_BROADCAST,
                     name,
                     buf,
                     buf,
                     count,
                     dtype,
                     RINGD_SUM,
                     root,
                     1.0,
                     1.0,
                     NULL,
                     0};
    if (req == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_broadcast(ringd_t *r, const char *name, void *buf, size_t count,
                               ringd_dtype_t dtype, int root)
{
    submit_args a = {RINGD__OP_TYPE__OP_BROADCAST,
                     name,
                     buf,
                     buf,
                     count,
                     dtype,
                     RINGD_SUM,
                     root,
                     1.0,
                     1.0,
                     NULL,
                     0};
    return submit_wait(r, &a);
}

ringd_result_t ringd_allgather_async(ringd_t *r, const char *name, const void *sendbuf,
                                     void *recvbuf, size_t count, ringd_dtype_t dtype,
                                     ringd_request_t **req)
{
    submit_args a =
        coll_args(RINGD__OP_TYPE__OP_ALLGATHER, name, sendbuf, recvbuf, count, dtype, NULL);
    if (req == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_allgather(ringd_t *r, const char *name, const void *sendbuf, void *recvbuf,
                               size_t count, ringd_dtype_t dtype)
{
    submit_args a =
        coll_args(RINGD__OP_TYPE__OP_ALLGATHER, name, sendbuf, recvbuf, count, dtype, NULL);
    return submit_wait(r, &a);
}

/* The submission of a reducescatter: equal counts (counts NULL, count each) or per-rank. */
static submit_args reducescatter_args(const char *name, const void *sendbuf, void *recvbuf,
                                      size_t count, const size_t *counts, ringd_dtype_t dtype,
                                      ringd_redop_t op, double prescale, double postscale)
{
    submit_args a = {RINGD__OP_TYPE__OP_REDUCESCATTER,
                     name,
                     sendbuf,
                     recvbuf,
                     count,
                     dtype,
                     op,
                     0,
                     prescale,
                     postscale,
                     counts,
                     0};
    return a;
}

ringd_result_t ringd_reducescatter_async(ringd_t *r, const char *name, const void *sendbuf,
                                         void *recvbuf, size_t recvcount, ringd_dtype_t dtype,
                                         ringd_redop_t op, ringd_request_t **req)
{
    submit_args a =
        reducescatter_args(name, sendbuf, recvbuf, recvcount, NULL, dtype, op, 1.0, 1.0);
    if (req == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_reducescatter(ringd_t *r, const char *name, const void *sendbuf, void *recvbuf,
                                   size_t recvcount, ringd_dtype_t dtype, ringd_redop_t op)
{
    submit_args a =
        reducescatter_args(name, sendbuf, recvbuf, recvcount, NULL, dtype, op, 1.0, 1.0);
    return submit_wait(r, &a);
}

ringd_result_t ringd_reducescatterv_async(ringd_t *r, const char *name, const void *sendbuf,
                                          void *recvbuf, const size_t *recvcounts,
                                          ringd_dtype_t dtype, ringd_redop_t op, double prescale,
                                          double postscale, ringd_request_t **req)
{
    submit_args a =
        reducescatter_args(name, sendbuf, recvbuf, 0, recvcounts, dtype, op, prescale, postscale);
    if (req == NULL || recvcounts == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_reducescatterv(ringd_t *r, const char *name, const void *sendbuf,
                                    void *recvbuf, const size_t *recvcounts, ringd_dtype_t dtype,
                                    ringd_redop_t op, double prescale, double postscale)
{
    submit_args a =
        reducescatter_args(name, sendbuf, recvbuf, 0, recvcounts, dtype, op, prescale, postscale);
    if (recvcounts == NULL)
        return RINGD_E_INVALID;
    return submit_wait(r, &a);
}

ringd_result_t ringd_allgatherv_async(ringd_t *r, const char *name, const void *sendbuf,
                                      size_t sendcount, void *recvbuf, const size_t *recvcounts,
                                      ringd_dtype_t dtype, ringd_request_t **req)
{
    submit_args a = coll_args(RINGD__OP_TYPE__OP_ALLGATHERV, name, sendbuf, recvbuf, sendcount,
                              dtype, recvcounts);
    if (req == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_allgatherv(ringd_t *r, const char *name, const void *sendbuf, size_t sendcount,
                                void *recvbuf, const size_t *recvcounts, ringd_dtype_t dtype)
{
    submit_args a = coll_args(RINGD__OP_TYPE__OP_ALLGATHERV, name, sendbuf, recvbuf, sendcount,
                              dtype, recvcounts);
    return submit_wait(r, &a);
}

ringd_result_t ringd_alltoall_async(ringd_t *r, const char *name, const void *sendbuf,
                                    void *recvbuf, size_t count, ringd_dtype_t dtype,
                                    ringd_request_t **req)
{
    submit_args a =
        coll_args(RINGD__OP_TYPE__OP_ALLTOALL, name, sendbuf, recvbuf, count, dtype, NULL);
    if (req == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_alltoall(ringd_t *r, const char *name, const void *sendbuf, void *recvbuf,
                              size_t count, ringd_dtype_t dtype)
{
    submit_args a =
        coll_args(RINGD__OP_TYPE__OP_ALLTOALL, name, sendbuf, recvbuf, count, dtype, NULL);
    return submit_wait(r, &a);
}

ringd_result_t ringd_join(ringd_t *r, int *last_rank)
{
    if (r == NULL || rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    if (r->grouping)
        return fail(r, RINGD_E_INVALID, "ringd_join: not inside a group (ringd_group_start)");
    if (r->broken == RINGD_OK) { /* their data steps would need this rank: they fail instead */
        char why[256];
        snprintf(why, sizeof(why),
                 "rank %d joined (ringd_join) while it was under way: a collective of two steps "
                 "does not run once a rank has joined (only allreduces do)",
                 r->rank);
        rd_learn_refuse_all(r, why);
    }
    /* every rank's count of collectives: the one that joined last had submitted the most */
    int64_t mine = (int64_t)r->since_join;
    int64_t *all = calloc(r->size > 0 ? (size_t)r->size : 1, sizeof(*all));
    if (all == NULL)
        return fail(r, RINGD_E_NOMEM, "ringd_join: out of memory");
    int size = r->size;
    submit_args a =
        coll_args(RINGD__OP_TYPE__OP_ALLGATHER, RD_JOIN_NAME, &mine, all, 1, RINGD_I64, NULL);
    a.join = 1;
    ringd_request_t *q;
    ringd_result_t rc = submit(r, &a, &q);
    if (rc == RINGD_OK) {
        pump(r, q, -1); /* the others may work for long: no op_timeout_ms */
        rc = req_finish(q);
    }
    if (rc == RINGD_OK && last_rank != NULL) {
        int last = 0;
        for (int i = 1; i < size; i++)
            if (all[i] >= all[last])
                last = i;
        *last_rank = last;
    }
    free(all);
    return rc;
}

ringd_result_t ringd_barrier_async(ringd_t *r, const char *name, ringd_request_t **req)
{
    submit_args a = {
        RINGD__OP_TYPE__OP_BARRIER, name, NULL, NULL, 0, RINGD_U8, RINGD_SUM, 0, 1.0, 1.0, NULL, 0};
    if (req == NULL)
        return RINGD_E_INVALID;
    return submit(r, &a, req);
}

ringd_result_t ringd_barrier(ringd_t *r, const char *name)
{
    submit_args a = {
        RINGD__OP_TYPE__OP_BARRIER, name, NULL, NULL, 0, RINGD_U8, RINGD_SUM, 0, 1.0, 1.0, NULL, 0};
    return submit_wait(r, &a);
}

void *ringd_alloc(ringd_t *r, size_t bytes)
{
    uint64_t off;
    if (r == NULL || rd_lib_left_to_parent(r) || r->arena == NULL ||
        rd_alloc_get(&r->alloc, bytes, &off) != 0)
        return NULL;
    return r->arena + off;
}

void *ringd_alloc_device(ringd_t *r, size_t bytes)
{
    uint64_t off;
    if (r == NULL || rd_lib_left_to_parent(r))
        return NULL;
    if (r->dev_arena == NULL) {
        fail(r, RINGD_E_INVALID,
             "the session has no device arena: open it with "
             "device_arena_size (RINGD_DEVICE_ARENA) on a ringd that serves a GPU");
        return NULL;
    }
    if (rd_alloc_get(&r->dev_alloc, bytes, &off) != 0) {
        fail(r, RINGD_E_NOMEM, "the device arena (%" PRIu64 " bytes) has no free %zu bytes",
             r->dev_arena_size, bytes);
        return NULL;
    }
    return r->dev_arena + off;
}

ringd_result_t ringd_tensor_locate(ringd_t *r, const void *ptr, size_t nbytes, ringd_tensor_t *t)
{
    if (r == NULL || t == NULL || ptr == NULL)
        return r != NULL ? fail(r, RINGD_E_INVALID, "ringd_tensor_locate: NULL argument")
                         : RINGD_E_INVALID;
    memset(t, 0, sizeof(*t));
    if (r->arena == NULL)
        return fail(r, RINGD_E_CLOSED, "the session has no arena (closed or broken)");
    switch (in_dev_arena(r, ptr, nbytes)) {
    case 1:
        t->kind = RINGD_MEM_DEVICE;
        t->device = r->device;
        t->handle = 1;
        t->offset = (uint64_t)((const uint8_t *)ptr - r->dev_arena);
        return RINGD_OK;
    case -1:
        return fail(r, RINGD_E_INVALID,
                    "%zu bytes at %p straddle the edge of the device arena (%" PRIu64
                    " bytes at %p)",
                    nbytes, ptr, r->dev_arena_size, (void *)r->dev_arena);
    default: break;
    }
    switch (in_arena(r, ptr, nbytes)) {
    case 1:
        t->kind = RINGD_MEM_ARENA;
        t->offset = (uint64_t)((const uint8_t *)ptr - r->arena);
        return RINGD_OK;
    case -1:
        return fail(r, RINGD_E_INVALID,
                    "%zu bytes at %p straddle the edge of the arena (%" PRIu64 " bytes at %p)",
                    nbytes, ptr, r->arena_size, (void *)r->arena);
    default:
        return fail(r, RINGD_E_INVALID,
                    "%zu bytes at %p lie outside the arena and the device arena: collectives "
                    "copy them through one (ringd_alloc and ringd_alloc_device buffers need no "
                    "copy)",
                    nbytes, ptr);
    }
}

void ringd_free(ringd_t *r, void *p)
{
    if (r == NULL || p == NULL || r->forked) /* a forked child leaves the parent's arena be */
        return;
    if (in_dev_arena(r, p, 1) == 1)
        rd_alloc_put(&r->dev_alloc, (uint64_t)((uint8_t *)p - r->dev_arena));
    else if (in_arena(r, p, 1) == 1)
        rd_alloc_put(&r->alloc, (uint64_t)((uint8_t *)p - r->arena));
}

/* Ends the trace being written, if any (sessions_lock held): 0, or an errno value when the file
 * could not be written whole (EIO when a write failed earlier, its errno gone). */
static int trace_close_locked(ringd_t *r)
{
    int bad = 0;
    if (r->trace_file != NULL) {
        if (rd_ctrace_close(&r->trace) != 0)
            bad = EIO;
        if (fclose(r->trace_file) != 0)
            bad = errno;
        r->trace_file = NULL;
    }
    free(r->trace_path);
    r->trace_path = NULL;
    return bad;
}

/* trace_close_locked under sessions_lock: a fork sees the FILE whole, or none. */
static int trace_close(ringd_t *r)
{
    pthread_mutex_lock(&sessions_lock);
    int bad = trace_close_locked(r);
    pthread_mutex_unlock(&sessions_lock);
    return bad;
}

/* Tells the daemon to attach traces to this session's Completes from now on, or no longer: by
 * the way Submits go, so the collectives submitted after it are traced. A failed send breaks the
 * session, as a Submit's does (the stream may be out of step). */
static ringd_result_t trace_set(ringd_t *r, int on)
{
    char err[256];
    Ringd__Trace t = RINGD__TRACE__INIT;
    rd_msg m = RINGD__MSG__INIT;
    t.on = on;
    m.body_case = RINGD__MSG__BODY_TRACE;
    m.trace = &t;
    ringd_result_t rc = send_to_daemon(r, &m, err, sizeof(err));
    if (rc != RINGD_OK) {
        break_session(r, rc, err);
        return rc;
    }
    r->traced = on;
    return RINGD_OK;
}

/* RINGD_OK when r may start or stop a timeline now, else the refusal (errmsg set). */
static ringd_result_t trace_usable(ringd_t *r, const char *what)
{
    if (rd_lib_left_to_parent(r))
        return RINGD_E_INVALID;
    if (r->broken != RINGD_OK) {
        char why[sizeof(r->errmsg)]; /* errmsg is fail's output: never its input too */
        snprintf(why, sizeof(why), "%s", r->errmsg);
        return fail(r, r->broken, "%s: the session is closed: %s", what, why);
    }
    if (r->grouping) /* the group's Submits are held to its end: the timeline would not match */
        return fail(r, RINGD_E_INVALID,
                    "%s inside a group (ringd_group_start): call it before "
                    "the group starts or after it ends",
                    what);
    return RINGD_OK;
}

ringd_result_t ringd_timeline_start(ringd_t *r, const char *path)
{
    if (r == NULL)
        return RINGD_E_INVALID;
    if (path == NULL || *path == '\0')
        return fail(r, RINGD_E_INVALID, "ringd_timeline_start: no file path");
    ringd_result_t rc = trace_usable(r, "ringd_timeline_start");
    if (rc != RINGD_OK)
        return rc;
    if (r->trace_path != NULL)
        return fail(r, RINGD_E_INVALID,
                    "a timeline is being written already (%s): ringd_timeline_stop first",
                    r->trace_path);
    if (!r->takes_trace)
        return fail(r, RINGD_E_PROTOCOL,
                    "this ringd is older than libringd %s and cannot start a timeline in a "
                    "session: set RINGD_TIMELINE before it opens",
                    RINGD_VERSION);
    if ((r->trace_path = strdup(path)) == NULL)
        return fail(r, RINGD_E_NOMEM, "out of memory");
    rc = trace_open(r);
    if (rc == RINGD_OK && r->trace_file != NULL && !r->traced) /* this rank writes */
        rc = trace_set(r, 1);
    if (rc != RINGD_OK) {
        char why[sizeof(r->errmsg)];
        snprintf(why, sizeof(why), "%s", r->errmsg);
        trace_close(r);
        return fail(r, rc, "%s", why);
    }
    return RINGD_OK;
}

ringd_result_t ringd_timeline_stop(ringd_t *r)
{
    if (r == NULL)
        return RINGD_E_INVALID;
    if (r->trace_path == NULL)
        return RINGD_OK;
    ringd_result_t rc = trace_usable(r, "ringd_timeline_stop");
    if (rc == RINGD_E_INVALID) /* in a group: nothing changed */
        return rc;
    if (rc == RINGD_OK && r->traced) /* also a rank that wrote nothing of RINGD_TIMELINE's */
        rc = trace_set(r, 0);
    else
        rc = RINGD_OK; /* a broken session: only the file is left to close */
    char path[4096];
    snprintf(path, sizeof(path), "%s", r->trace_path);
    int bad = trace_close(r);
    if (bad != 0)
        return fail(r, RINGD_E_SYSTEM, "timeline %s: could not be written whole: %s", path,
                    strerror(bad));
    return rc;
}

void ringd_close(ringd_t *r)
{
    if (r == NULL)
        return;
    /* The parent's, in a forked child (also one forked while this session was being closed,
     * off the list already): only this process's mapping goes (the timeline's FILE stays,
     * empty since the fork: a parent's thread may have held its lock). */
    if (r->forked || r->pid != getpid()) {
        if (r->arena != NULL)
            munmap(r->arena, r->arena_size);
        r->arena = NULL;
        return;
    }
    /* Off the list, its timeline and socket closed, as one step: a fork sees the session listed
     * and whole, or gone. */
    pthread_mutex_lock(&sessions_lock);
    session_unlisted(r);
    trace_close_locked(r);
    rd_conn_close(&r->conn);
    pthread_mutex_unlock(&sessions_lock);
    free(r->socket_path);
    free(r->job);
    while (r->held != NULL) { /* a group never ended */
        struct held *h = r->held;
        r->held = h->next;
        held_free(h);
    }
    while (r->reqs != NULL) {
        ringd_request_t *q = r->reqs;
        r->reqs = q->next;
        rd_learn_free(q->learn);
        free(q->message);
        free(q);
    }
    if (r->arena != NULL) {
        rd_alloc_destroy(&r->alloc);
        munmap(r->arena, r->arena_size);
    }
#if RINGD_HAVE_CUDA
    if (r->dev_arena != NULL) {
        void *ctx = rd_cuda_context();
        rd_alloc_destroy(&r->dev_alloc);
        rd_cuda_shared_free(r->dev_shared);
        rd_cuda_set_context(ctx);
    }
#endif
    free(r);
}

void ringd_next_shape(ringd_t *r, uint64_t shape)
{
    if (r != NULL)
        r->next_shape = shape;
}
