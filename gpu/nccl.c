/* NCCL behind the backend's transport seam (backend.h, rd_transport_ops): NCCL's communicators
 * and CUDA's streams and events as commq.h's library (commq.c keeps the queue's rules), the
 * unique ids and their roots, and the process's set-up. libnccl.so.2 is opened with dlopen when
 * first needed, never linked: a machine without it loses this transport only, and make_id says
 * why. */
#define _GNU_SOURCE /* pipe2 */
#include "nccl_transport.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h> /* types and constants only: every function comes through dlsym */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commq.h"
#include "cuda_dev.h"
#include "dl.h"
#include "gpu_util.h"

extern char **environ;

/* The NCCL entry points ringd uses. */
static struct {
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank_config)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*get_async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    const char *(*error_string)(ncclResult_t);
    const char *(*last_error)(ncclComm_t);
} nccl;

static const rd_dl_symbol nccl_symbols[] = {
#define SYM(field, name)                                                                           \
    {                                                                                              \
        name, offsetof(__typeof__(nccl), field)                                                    \
    }
    SYM(get_version, "ncclGetVersion"),
    SYM(get_unique_id, "ncclGetUniqueId"),
    SYM(init_rank_config, "ncclCommInitRankConfig"),
    SYM(get_async_error, "ncclCommGetAsyncError"),
    SYM(abort, "ncclCommAbort"),
    SYM(all_reduce, "ncclAllReduce"),
    SYM(broadcast, "ncclBroadcast"),
    SYM(all_gather, "ncclAllGather"),
    SYM(error_string, "ncclGetErrorString"),
    SYM(last_error, "ncclGetLastError"),
#undef SYM
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded; /* 1: every symbol found */
static char load_why[256];

static void load(void)
{
    int version = 0;
    const char *missing;
    char why[256];
    void *lib =
        rd_dl_open("libnccl.so.2", nccl_symbols, sizeof(nccl_symbols) / sizeof(nccl_symbols[0]),
                   &nccl, sizeof(nccl), &missing, why, sizeof(why));
    if (lib == NULL) {
        if (missing == NULL)
            rd_gpu_say(load_why, sizeof(load_why), "no NCCL library: %s", why);
        else
            rd_gpu_say(load_why, sizeof(load_why),
                       "libnccl.so.2 lacks %s (NCCL 2.28 or newer needed)", missing);
        return;
    }
    /* the communicator config's fields and non-blocking behaviour as nccl.h describes them */
    if (nccl.get_version(&version) != ncclSuccess || version < NCCL_VERSION(2, 28, 0)) {
        rd_gpu_say(load_why, sizeof(load_why),
                   "libnccl.so.2 is version %d; ringd needs 2.28 or newer", version);
        dlclose(lib);
        return;
    }
    loaded = 1; /* the library stays open: its functions are in use */
}

/* 0 once NCCL is loaded; -1 with err set when it cannot be. */
static int nccl_ready(char *err, size_t errlen)
{
    pthread_once(&load_once, load);
    if (!loaded) {
        rd_gpu_say(err, errlen, "%s", load_why);
        return -1;
    }
    return 0;
}

/* "call: unhandled cuda error (NCCL's last error: ...)" for a failed call's result. NCCL's last
 * error is the process's latest, which may be another communicator's: labelled as such. */
static void nccl_error(ncclComm_t comm, ncclResult_t rc, const char *call, char *err, size_t errlen)
{
    const char *last = comm != NULL ? nccl.last_error(comm) : "";
    rd_gpu_say(err, errlen, "%s: %s%s%s%s", call, nccl.error_string(rc),
               last[0] ? " (NCCL's last error: " : "", last, last[0] ? ")" : "");
}

/* ---- set-up ---- */

static int nccl_setup(const char *ifname, char *err, size_t errlen)
{
    char value[80];
    if (ifname == NULL || ifname[0] == '\0' || getenv("NCCL_SOCKET_IFNAME") != NULL)
        return 0;                                  /* NCCL's own choice, or the operator's */
    snprintf(value, sizeof(value), "=%s", ifname); /* '=': that interface exactly */
    if (setenv("NCCL_SOCKET_IFNAME", value, 1) != 0) {
        rd_gpu_say(err, errlen, "setenv NCCL_SOCKET_IFNAME: %s", strerror(errno));
        return -1;
    }
    return 1;
}

/* ---- unique ids: each one's root in a process of its own ----
 *
 * ncclGetUniqueId starts a root thread and a listening socket in the calling process that stay
 * until every rank of the id's communicator has checked in: an id whose communicator never
 * forms would leave them for the life of the daemon. So the id is made, and its root held, by a
 * helper: this very program (/proc/self/exe, the binary running now even after an upgrade
 * replaced the file) started again with RD_NCCL_ROOT_ARG (rd_nccl_root_main), which writes the
 * id to its stdout and then waits for its stdin to close. The transport closes it when the id's
 * communicator formed or ended (commq's id_done): every communicator does, within the
 * agreement's deadlines. At most RD_NCCL_ROOTS are held at once; past that make_id fails (the
 * ring then crosses on TCP, saying why) rather than end a root some communicator still needs.
 * A helper dies with its parent. */

#define RD_NCCL_ROOT_ARG "--nccl-id-root"
#define RD_NCCL_ROOTS 64
#define RD_NCCL_ROOT_WAIT_MS 5000 /* for the helper to start and load NCCL: the loop waits */

typedef struct {
    pid_t pid; /* 0: a free slot */
    int stdin_fd;
    uint8_t id[NCCL_UNIQUE_ID_BYTES];
} id_root;

static pthread_mutex_t roots_lock = PTHREAD_MUTEX_INITIALIZER;
static id_root roots[RD_NCCL_ROOTS];
static int serving; /* this program's main called rd_nccl_root_main: it can be a helper */

int rd_nccl_root_main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], RD_NCCL_ROOT_ARG) != 0) {
        serving = 1;
        return -1;
    }
    /* the helper: dies with its parent, holds none of its files, keeps its stdout for the
     * reply (what NCCL prints goes to stderr), answers 'I' and the id, or 'E' and why */
    char why[512] = "", reply[1 + NCCL_UNIQUE_ID_BYTES];
    ncclUniqueId u;
    ncclResult_t rc;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    if (close_range(3, ~0u, 0) != 0)
        for (int fd = 3; fd < 4096; fd++)
            close(fd);
    int out = dup(1);
    if (out < 0 || dup2(2, 1) < 0)
        return 1;
    if (nccl_ready(why, sizeof(why)) != 0) {
        reply[0] = 'E';
    } else if ((rc = nccl.get_unique_id(&u)) != ncclSuccess) {
        nccl_error(NULL, rc, "ncclGetUniqueId", why, sizeof(why));
        reply[0] = 'E';
    } else {
        reply[0] = 'I';
        memcpy(reply + 1, &u, sizeof(u));
    }
    size_t len = reply[0] == 'I' ? sizeof(reply) : 1;
    if (write(out, reply, len) != (ssize_t)len ||
        (reply[0] == 'E' && write(out, why, strlen(why)) < 0))
        return 1;
    close(out);
    for (;;) { /* until the parent closes our stdin, or dies */
        char c;
        ssize_t n = read(0, &c, 1);
        if (n == 0 || (n < 0 && errno != EINTR))
            return 0;
    }
}

/* Ends root r (lock held): its helper goes, and with it NCCL's root thread and socket. */
static void root_end(id_root *r)
{
    if (r->pid == 0)
        return;
    close(r->stdin_fd);
    kill(r->pid, SIGKILL);
    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    r->pid = 0;
}

static void nccl_id_done(const uint8_t *id, size_t id_len)
{
    pthread_mutex_lock(&roots_lock);
    for (int i = 0; i < RD_NCCL_ROOTS; i++)
        if (roots[i].pid != 0 && id_len == sizeof(roots[i].id) &&
            memcmp(roots[i].id, id, id_len) == 0)
            root_end(&roots[i]);
    pthread_mutex_unlock(&roots_lock);
}

int rd_nccl_roots_held(void)
{
    int n = 0;
    pthread_mutex_lock(&roots_lock);
    for (int i = 0; i < RD_NCCL_ROOTS; i++)
        n += roots[i].pid != 0;
    pthread_mutex_unlock(&roots_lock);
    return n;
}

/* Reads len bytes from fd within ms; returns what it read (less on EOF or timeout). */
static size_t read_within(int fd, char *buf, size_t len, int64_t ms)
{
    size_t got = 0;
    int64_t deadline = rd_gpu_now_ms() + ms;
    while (got < len) {
        int64_t left = deadline - rd_gpu_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        int ready = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            break;
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static int nccl_make_id(uint8_t *id, size_t *id_len, char *err, size_t errlen)
{
    _Static_assert(NCCL_UNIQUE_ID_BYTES <= RD_TRANSPORT_ID_MAX, "an NCCL id fits a transport id");
    int in[2] = {-1, -1}, out[2] = {-1, -1}, rc = -1;
    char reply[1 + NCCL_UNIQUE_ID_BYTES + 400];
    posix_spawn_file_actions_t fa;
    pid_t pid = 0;

    if (nccl_ready(err, errlen) != 0)
        return -1;
    if (!serving) {
        rd_gpu_say(err, errlen,
                   "this program holds no NCCL id roots (rd_nccl_root_main is not "
                   "called in its main)");
        return -1;
    }
    pthread_mutex_lock(&roots_lock);
    id_root *slot = NULL;
    for (int i = 0; i < RD_NCCL_ROOTS && slot == NULL; i++)
        if (roots[i].pid == 0)
            slot = &roots[i];
    if (slot == NULL) {
        rd_gpu_say(err, errlen,
                   "%d NCCL ids are held whose communicators have neither formed nor "
                   "ended",
                   RD_NCCL_ROOTS);
        goto out;
    }
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        rd_gpu_say(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    char *argv[] = {"ringd-nccl-id-root", RD_NCCL_ROOT_ARG, NULL};
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    int sp = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (sp != 0) {
        pid = 0;
        rd_gpu_say(err, errlen, "starting this program again (/proc/self/exe) for an NCCL id: %s",
                   strerror(sp));
        goto out;
    }
    close(in[0]);
    close(out[1]);
    in[0] = out[1] = -1;
    size_t got = read_within(out[0], reply, sizeof(reply) - 1, RD_NCCL_ROOT_WAIT_MS);
    reply[got] = '\0';
    if (got == 1 + NCCL_UNIQUE_ID_BYTES && reply[0] == 'I') {
        memcpy(id, reply + 1, NCCL_UNIQUE_ID_BYTES);
        *id_len = NCCL_UNIQUE_ID_BYTES;
        memcpy(slot->id, id, NCCL_UNIQUE_ID_BYTES);
        slot->pid = pid;
        slot->stdin_fd = in[1];
        in[1] = -1;
        pid = 0;
        rc = 0;
    } else if (got >= 1 && reply[0] == 'E') {
        rd_gpu_say(err, errlen, "%s", reply + 1);
    } else {
        rd_gpu_say(err, errlen, "the NCCL id helper (ringd %s) gave no id within %d ms",
                   RD_NCCL_ROOT_ARG, RD_NCCL_ROOT_WAIT_MS);
    }
out:
    if (pid != 0) { /* a helper that failed */
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    pthread_mutex_unlock(&roots_lock);
    return rc;
}

/* ---- NCCL and CUDA as commq's library ---- */

static void *nccl_comm_init(const uint8_t *id, size_t id_len, int nranks, int rank, int device,
                            char *err, size_t errlen)
{
    ncclUniqueId u;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t comm = NULL;
    if (nccl_ready(err, errlen) != 0)
        return NULL;
    if (id_len != sizeof(u)) {
        rd_gpu_say(err, errlen, "an NCCL id of %zu bytes, not %zu", id_len, sizeof(u));
        return NULL;
    }
    memcpy(&u, id, sizeof(u));
    (void)device;        /* current on this thread (commq's use) */
    config.blocking = 0; /* membership changes must never hang the loop in NCCL */
    ncclResult_t rc = nccl.init_rank_config(&comm, nranks, u, rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        nccl_error(comm, rc, "ncclCommInitRankConfig", err, errlen);
        if (comm != NULL)
            nccl.abort(comm);
        return NULL;
    }
    return comm;
}

static int nccl_comm_state(void *comm, char *err, size_t errlen)
{
    ncclResult_t state = ncclSuccess, rc;
    if ((rc = nccl.get_async_error(comm, &state)) != ncclSuccess) {
        nccl_error(comm, rc, "ncclCommGetAsyncError", err, errlen);
        return -1;
    }
    if (state == ncclInProgress)
        return 1;
    if (state != ncclSuccess) {
        nccl_error(comm, state, "the NCCL communicator", err, errlen);
        return -1;
    }
    return 0;
}

static int nccl_comm_issue(void *comm, void *stream, const rd_commq_coll *c, char *err,
                           size_t errlen)
{
    /* A new dtype or reduce op needs its NCCL name here (0 would be ncclInt8, or ncclSum). */
    _Static_assert(RD_DT_COUNT == 7 && RD_OP_COUNT == 5, "name the new dtype or op for NCCL");
    static const ncclDataType_t types[RD_DT_COUNT] = {
        [RD_DT_F32] = ncclFloat32,   [RD_DT_F64] = ncclFloat64, [RD_DT_F16] = ncclFloat16,
        [RD_DT_BF16] = ncclBfloat16, [RD_DT_I32] = ncclInt32,   [RD_DT_I64] = ncclInt64,
        [RD_DT_U8] = ncclUint8};
    static const ncclRedOp_t ops[RD_OP_COUNT] = {[RD_OP_SUM] = ncclSum,
                                                 [RD_OP_MIN] = ncclMin,
                                                 [RD_OP_MAX] = ncclMax,
                                                 [RD_OP_PROD] = ncclProd};
    ncclResult_t rc;
    switch (c->coll) {
    case RD_COLL_ALLREDUCE:
        rc = nccl.all_reduce(c->in, c->out, c->count, types[c->dt], ops[c->op], comm, stream);
        break;
    case RD_COLL_BROADCAST:
        rc = nccl.broadcast(c->in, c->out, c->count, types[c->dt], c->root, comm, stream);
        break;
    default: rc = nccl.all_gather(c->in, c->out, c->count, types[c->dt], comm, stream); break;
    }
    if (rc != ncclSuccess && rc != ncclInProgress) {
        nccl_error(comm, rc, "queueing an NCCL collective", err, errlen);
        return -1;
    }
    return 0;
}

static void nccl_comm_abort(void *comm)
{
    nccl.abort(comm);
}

static const rd_commq_api nccl_api = {
    .comm_init = nccl_comm_init,
    .comm_state = nccl_comm_state,
    .comm_issue = nccl_comm_issue,
    .comm_abort = nccl_comm_abort,
    .id_done = nccl_id_done,
    .use = rd_cuda_use,
    .stream_new = rd_cuda_stream_new,
    .stream_sync = rd_cuda_stream_sync,
    .stream_free = rd_cuda_stream_free,
    .event_new = rd_cuda_event_new,
    .event_record = rd_cuda_event_record,
    .event_done = rd_cuda_event_done,
    .event_free = rd_cuda_event_free,
};

static rd_transport *nccl_init(const uint8_t *id, size_t id_len, int nranks, int rank, int device,
                               int64_t timeout_ms, char *err, size_t errlen)
{
    if (nccl_ready(err, errlen) != 0)
        return NULL;
    rd_transport *t =
        rd_commq_init(&nccl_api, id, id_len, nranks, rank, device, timeout_ms, err, errlen);
    if (t == NULL)
        nccl_id_done(id, id_len); /* made here for a communicator that will not be */
    return t;
}

static int nccl_run(rd_transport *t, struct event_base *base, int coll, rd_dtype dt, rd_redop op,
                    const void *in, void *out, size_t count, int root, rd_backend_done_fn done,
                    void *arg, char *err, size_t errlen)
{
    /* AVG: ringd's engine runs SUM and divides as its own kernels do (NCCL's ncclAvg scales
     * each input first, in the element type) */
    rd_commq_coll c = {coll, dt, op, in, out, count, root};
    return rd_commq_run(t, base, &c, done, arg, err, errlen);
}

const rd_transport_ops rd_nccl_ops = {
    .setup = nccl_setup,
    .probe = nccl_ready,
    .make_id = nccl_make_id,
    .init = nccl_init,
    .poll = rd_commq_poll,
    .run = nccl_run,
    .abort = rd_commq_abort,
    .forget = rd_commq_forget,
};
