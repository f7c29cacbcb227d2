/* Test harness: starting and stopping real daemons, raw protocol I/O, forked clients. */
#define _GNU_SOURCE
#include "harness.h"

#include "ringd.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int th_wait_pid(pid_t pid, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        int ws;
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid)
            return ws;
        if (r < 0)
            return -2;
        if (th_now_ms() >= end)
            return -1;
        th_sleep_ms(5);
    }
}

pid_t th_spawn(const char *log, const char *const *argv)
{
    return th_spawn_env(log, argv, NULL);
}

pid_t th_spawn_env(const char *log, const char *const *argv, const char *const *envp)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    if (envp != NULL)
        execvpe(argv[0], (char *const *)argv, (char *const *)envp);
    else
        execvp(argv[0], (char *const *)argv);
    _exit(127);
}

static pid_t spawn_daemon(const char *sock, const char *log, const char *const *extra)
{
    const char *bin = getenv("RINGD_BIN");
    const char *argv[48] = {bin ? bin : "ringd", "--socket", sock, "--log-level", "debug"};
    int n = 5;
    for (; extra != NULL && *extra != NULL && n < 46; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return th_spawn(log, argv);
}

/* Starts the daemon with its stored arguments and waits for its socket to answer. */
static int launch(th_daemon *d)
{
    const char *extra[41];
    const char *p = d->args;
    int n = 0;
    for (; n < d->nargs && n < 40; n++, p += strlen(p) + 1)
        extra[n] = p;
    extra[n] = NULL;
    d->pid = spawn_daemon(d->sock, d->log, extra);
    if (d->pid < 0) {
        d->pid = 0;
        return -1;
    }
    int64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        if (!th_daemon_alive(d))
            return -1;
        if (th_status_ok(d->sock))
            return 0;
        th_sleep_ms(10);
    }
    return -1;
}

int th_daemon_start(th_daemon *d, const char *const *extra)
{
    memset(d, 0, sizeof(*d));
    size_t used = 0;
    for (; extra != NULL && extra[d->nargs] != NULL; d->nargs++) {
        size_t len = strlen(extra[d->nargs]) + 1;
        if (d->nargs == 40 || used + len > sizeof(d->args))
            return -1;
        memcpy(d->args + used, extra[d->nargs], len);
        used += len;
    }
    snprintf(d->dir, sizeof(d->dir), "/tmp/ringd-test.XXXXXX");
    if (mkdtemp(d->dir) == NULL) {
        d->dir[0] = '\0';
        return -1;
    }
    snprintf(d->sock, sizeof(d->sock), "%s/run/ringd.sock", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/ringd.log", d->dir);
    return launch(d);
}

int th_daemon_restart(th_daemon *d)
{
    if (d->dir[0] == '\0' || th_daemon_alive(d))
        return -1;
    FILE *f = fopen(d->log, "a");
    if (f != NULL) {
        fprintf(f, "---- th_daemon_restart ----\n");
        fclose(f);
    }
    return launch(d);
}

int th_daemon_signal(const th_daemon *d, int sig)
{
    return d->pid > 0 ? kill(d->pid, sig) : -1;
}

void th_daemon_kill(th_daemon *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
}

static void print_log(const th_daemon *d)
{
    char *log = th_daemon_log(d);
    if (log != NULL)
        fprintf(stderr, "---- ringd log (%s) ----\n%s\n----\n", d->log, log);
    free(log);
}

int th_daemon_wait_exit(th_daemon *d, int timeout_ms)
{
    if (d->pid <= 0)
        return -1;
    int ws = th_wait_pid(d->pid, timeout_ms);
    if (ws == -1)
        return -2;
    d->pid = 0;
    int rc = ws >= 0 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    if (rc != 0)
        print_log(d);
    return rc;
}

int th_daemon_run_again(const th_daemon *d, const char *log, int timeout_ms)
{
    pid_t pid = spawn_daemon(d->sock, log, NULL);
    int ws = th_wait_pid(pid, timeout_ms);
    if (ws == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

int th_daemon_alive(const th_daemon *d)
{
    int ws;
    return d->pid > 0 && waitpid(d->pid, &ws, WNOHANG) == 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int th_rm_rf(const char *path)
{
    if (path == NULL || path[0] == '\0')
        return 0;
    return nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

static void remove_dir(th_daemon *d)
{
    th_rm_rf(d->dir);
    d->dir[0] = '\0';
}

int th_daemon_stop(th_daemon *d)
{
    int rc = -1;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        kill(d->pid, SIGCONT);
        int ws = th_wait_pid(d->pid, 10000);
        if (ws == -1) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
        } else if (ws >= 0 && WIFEXITED(ws)) {
            rc = WEXITSTATUS(ws);
        }
        d->pid = 0;
    }
    if (rc != 0)
        print_log(d); /* keep the evidence in the test output */
    remove_dir(d);
    return rc;
}

void th_daemon_teardown(th_daemon *d)
{
    if (d->pid > 0)
        th_daemon_stop(d);
    else
        remove_dir(d);
}

void th_daemon_finish(th_daemon *d)
{
    cr_assert(th_daemon_alive(d), "ringd died during the test");
    cr_assert_eq(th_daemon_stop(d), 0, "ringd did not shut down cleanly (log above)");
}

char *th_file_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
        if (cap - len < 4096) {
            char *b = realloc(buf, cap * 2);
            if (b == NULL)
                break;
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

char *th_daemon_log(const th_daemon *d)
{
    return th_file_text(d->log);
}

int th_connect(const char *sock)
{
    struct sockaddr_un sun;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock);
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int th_write(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int th_send(int fd, const rd_msg *m)
{
    size_t n = rd_frame_size(m);
    uint8_t *buf = malloc(n);
    if (buf == NULL)
        return -1;
    rd_frame_pack(m, buf);
    int rc = th_write(fd, buf, n);
    free(buf);
    return rc;
}

/* Reads exactly len bytes before the deadline, collecting a passed fd. */
static int read_full(int fd, uint8_t *buf, size_t len, int64_t deadline, int *passed)
{
    while (len > 0) {
        int left = (int)(deadline - th_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        union {
            struct cmsghdr h;
            char space[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec iov = {.iov_base = buf, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        mh.msg_control = ctl.space;
        mh.msg_controllen = sizeof(ctl.space);
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n <= 0)
            return -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (c != NULL && c->cmsg_type == SCM_RIGHTS) {
            int got;
            memcpy(&got, CMSG_DATA(c), sizeof(int));
            if (*passed < 0)
                *passed = got;
            else
                close(got);
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

rd_msg *th_recv(int fd, int timeout_ms, int *fd_out)
{
    int64_t deadline = th_now_ms() + timeout_ms;
    uint8_t hdr[RD_FRAME_HEADER];
    int passed = -1;
    rd_msg *m = NULL;
    if (read_full(fd, hdr, sizeof(hdr), deadline, &passed) != 0)
        goto out;
    uint32_t n = rd_frame_payload_len(hdr);
    if (n > (64u << 20))
        goto out;
    uint8_t *buf = malloc(RD_FRAME_HEADER + (size_t)n + 1);
    if (buf == NULL)
        goto out;
    memcpy(buf, hdr, sizeof(hdr));
    if (read_full(fd, buf + RD_FRAME_HEADER, n, deadline, &passed) == 0) {
        size_t used;
        char err[128];
        if (rd_frame_decode(buf, RD_FRAME_HEADER + n, 64u << 20, &m, &used, err, sizeof(err)) !=
            RD_FRAME_OK)
            m = NULL;
    }
    free(buf);
out:
    if (fd_out != NULL)
        *fd_out = passed;
    else if (passed >= 0)
        close(passed);
    return m;
}

int th_wait_eof(int fd, int timeout_ms)
{
    int64_t deadline = th_now_ms() + timeout_ms;
    uint8_t buf[4096];
    for (;;) {
        int left = (int)(deadline - th_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return 0;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 1;
        if (n < 0)
            return 0;
    }
}

rd_msg *th_status(const char *sock)
{
    int fd = th_connect(sock);
    if (fd < 0)
        return NULL;
    Ringd__StatusRequest q = RINGD__STATUS_REQUEST__INIT;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_STATUS_REQUEST;
    m.status_request = &q;
    rd_msg *r = th_send(fd, &m) == 0 ? th_recv(fd, 2000, NULL) : NULL;
    close(fd);
    if (r != NULL && r->body_case != RINGD__MSG__BODY_STATUS_REPLY) {
        rd_frame_free(r);
        r = NULL;
    }
    return r;
}

int th_status_ok(const char *sock)
{
    rd_msg *r = th_status(sock);
    rd_frame_free(r);
    return r != NULL;
}

int th_job_in_flight(const char *sock, const char *job)
{
    rd_msg *r = th_status(sock);
    if (r == NULL)
        return -1;
    int total = 0;
    for (size_t i = 0; i < r->status_reply->n_clients; i++)
        if (strcmp(r->status_reply->clients[i]->job, job) == 0)
            total += (int)r->status_reply->clients[i]->ops_in_flight;
    rd_frame_free(r);
    return total;
}

struct ringd *th_open(const char *sock, const char *job, int n, size_t arena_size,
                      int op_timeout_ms)
{
    return th_open_world(sock, job, n, n, arena_size, op_timeout_ms);
}

struct ringd *th_open_world(const char *sock, const char *job, int world, int local,
                            size_t arena_size, int op_timeout_ms)
{
    ringd_options_t o = RINGD_OPTIONS_INIT;
    ringd_t *r = NULL;
    o.socket_path = sock;
    o.job = job;
    o.local_size = local;
    o.world_size = world;
    o.arena_size = arena_size;
    o.open_timeout_ms = 10000;
    o.op_timeout_ms = op_timeout_ms;
    ringd_result_t rc = ringd_open(&o, &r);
    if (rc == RINGD_OK)
        return r;
    fprintf(stderr, "ringd_open: %s: %s\n", ringd_strerror(rc), ringd_errmsg(r));
    ringd_close(r);
    return NULL;
}

static _Atomic int *closing_; /* th_run's processes done with their collectives (shared) */

int th_run(int n, int (*fn)(int i, void *arg), void *arg, int timeout_ms)
{
    pid_t kids[64];
    int failed = 0;
    if (n > 64) {
        fprintf(stderr, "th_run: %d processes, at most 64\n", n);
        return 1;
    }
    if (closing_ == NULL) {
        void *p = mmap(NULL, sizeof(*closing_), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED)
            return 1;
        closing_ = p;
    }
    atomic_store(closing_, 0);
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(fn(i, arg));
        }
    }
    int64_t end = th_now_ms() + timeout_ms;
    for (int i = 0; i < n; i++) {
        int left = (int)(end - th_now_ms());
        int ws = kids[i] > 0 ? th_wait_pid(kids[i], left > 0 ? left : 0) : -1;
        if (ws == -1 && kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
        if (!failed && (ws < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0))
            failed = i + 1;
    }
    return failed;
}

void th_close_together(struct ringd *r, int n)
{
    if (closing_ != NULL) { /* NULL outside th_run's processes: nobody to wait for */
        atomic_fetch_add(closing_, 1);
        for (int64_t end = th_now_ms() + 30000; atomic_load(closing_) < n && th_now_ms() < end;)
            th_sleep_ms(1);
    }
    ringd_close(r);
}

int th_command(char **out, int timeout_ms, const char *const *argv)
{
    return th_command_env(out, timeout_ms, argv, NULL);
}

int th_command_env(char **out, int timeout_ms, const char *const *argv, const char *const *envp)
{
    char path[] = "/tmp/ringd-cmd.XXXXXX";
    int fd = mkstemp(path);
    *out = NULL;
    if (fd < 0)
        return -1;
    close(fd);
    fflush(NULL);
    pid_t pid = th_spawn_env(path, argv, envp);
    int rc = -1;
    if (pid > 0) {
        int ws = th_wait_pid(pid, timeout_ms);
        if (ws == -1) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        } else if (ws >= 0 && WIFEXITED(ws)) {
            rc = WEXITSTATUS(ws);
        }
    }
    *out = th_file_text(path);
    if (*out == NULL)
        *out = strdup("");
    unlink(path);
    return rc;
}

int th_ringctl(const char *sock, char **out, int timeout_ms, ...)
{
    const char *bin = getenv("RINGCTL_BIN");
    const char *argv[32] = {bin != NULL ? bin : "ringctl", "--socket", sock};
    int n = 3;
    va_list ap;
    va_start(ap, timeout_ms);
    for (const char *a; n < 31 && (a = va_arg(ap, const char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    return th_command(out, timeout_ms, argv);
}

int th_train_log(const char *log, int tag, th_train_line *out, int max)
{
    FILE *f = fopen(log, "r");
    if (f == NULL)
        return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL && n < max) {
        if (strncmp(line, "rank ", 5) != 0)
            continue; /* other output: open, re-synchronisation notes, the summary */
        th_train_line *t = &out[n];
        double loss;
        t->pod = tag;
        if (sscanf(line, "rank %d size %d gen %" SCNu64 " step %d loss %lf checksum %63s", &t->rank,
                   &t->size, &t->gen, &t->step, &loss, t->checksum) != 6) {
            fprintf(stderr, "%s: cannot parse: %s", log, line);
            n = -1;
            break;
        }
        n++;
    }
    fclose(f);
    return n;
}

int th_sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int ws = system(cmd);
    return ws != -1 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

int th_in_netns(const char *ns, int (*fn)(void *arg), void *arg)
{
    char path[160];
    snprintf(path, sizeof(path), "/run/netns/%s", ns);
    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    int there = open(path, O_RDONLY | O_CLOEXEC);
    int rc = -1;
    if (self >= 0 && there >= 0 && setns(there, CLONE_NEWNET) == 0) {
        rc = fn(arg);
        if (setns(self, CLONE_NEWNET) != 0)
            abort(); /* the rest of the test must not run in the wrong namespace */
    }
    if (self >= 0)
        close(self);
    if (there >= 0)
        close(there);
    return rc;
}

int th_job_info(const char *sock, const char *job, th_jobinfo *info)
{
    memset(info, 0, sizeof(*info));
    rd_msg *m = th_status(sock);
    if (m == NULL)
        return -1;
    const Ringd__StatusReply *s = m->status_reply;
    info->redis_connected = s->redis_connected;
    info->draining = s->draining;
    for (size_t i = 0; i < s->n_jobs; i++) {
        const Ringd__JobInfo *j = s->jobs[i];
        if (strcmp(j->name, job) != 0)
            continue;
        info->found = 1;
        info->generation = j->generation;
        info->world_size = j->world_size;
        info->local_size = j->local_size;
        info->min_size = j->min_size;
        info->clients = j->clients;
        info->ops_completed = j->ops_completed;
        info->ops_failed = j->ops_failed;
        if (j->ring != NULL) {
            const Ringd__RingInfo *g = j->ring;
            size_t used = 0;
            info->has_ring = 1;
            info->ring_generation = g->generation;
            snprintf(info->ring_state, sizeof(info->ring_state), "%s", g->state);
            info->nmembers = (int)g->n_members;
            for (size_t k = 0; k < g->n_members && used < sizeof(info->members); k++)
                used += (size_t)snprintf(info->members + used, sizeof(info->members) - used, "%s%s",
                                         k ? "," : "", g->members[k]->node);
        }
        info->nstalls = (int)j->n_stalls;
        if (j->n_stalls > 0) {
            snprintf(info->stall_name, sizeof(info->stall_name), "%s", j->stalls[0]->name);
            snprintf(info->stall_missing, sizeof(info->stall_missing), "%s", j->stalls[0]->missing);
            info->stall_age_ms = j->stalls[0]->age_ms;
        }
        break;
    }
    rd_frame_free(m);
    return 0;
}

/* ---- the looping client ---- */

th_loop *th_loop_alloc(int n)
{
    size_t size = sizeof(th_loop) * (size_t)n;
    th_loop *l = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l == MAP_FAILED)
        return NULL;
    memset(l, 0, size);
    for (int i = 0; i < n; i++) {
        l[i].world = l[i].local = 1;
        l[i].open_timeout_ms = 20000;
        l[i].op_timeout_ms = 20000;
        l[i].count = 65536;
    }
    return l;
}

/* Keeps an event of the call that just returned (when there is room) and publishes it. */
static void loop_note(th_loop *l, const ringd_t *r, int64_t t0, int seq, int sync, int rc,
                      const char *msg)
{
    int n = __atomic_load_n(&l->nevents, __ATOMIC_RELAXED);
    if (n > 0 && rc != RINGD_OK) {
        /* the same failure again (a retry storm): counted on the event it repeats */
        th_loop_event *p = &l->ev[n - 1];
        if (p->rc == rc && p->sync == sync && p->rank == ringd_rank(r) &&
            p->size == ringd_size(r) && p->generation == ringd_generation(r) &&
            strncmp(p->msg, msg != NULL ? msg : "", sizeof(p->msg) - 1) == 0) {
            p->last_t1_ms = th_now_ms();
            __atomic_add_fetch(&p->repeats, 1, __ATOMIC_RELEASE);
            return;
        }
    }
    if (n == TH_LOOP_EVENTS) {
        l->dropped++;
        return;
    }
    th_loop_event *e = &l->ev[n];
    e->t0_ms = t0;
    e->t1_ms = e->last_t1_ms = th_now_ms();
    e->repeats = 0;
    e->seq = seq;
    e->sync = sync;
    e->rc = rc;
    e->rank = ringd_rank(r);
    e->size = ringd_size(r);
    e->local_rank = ringd_local_rank(r);
    e->local_size = ringd_local_size(r);
    e->generation = ringd_generation(r);
    snprintf(e->msg, sizeof(e->msg), "%s", msg != NULL ? msg : "");
    __atomic_store_n(&l->nevents, n + 1, __ATOMIC_RELEASE);
}

/* The value every rank contributes at element k > 0 of allreduce seq. */
static int32_t loop_value(int seq, size_t k)
{
    return (int32_t)(((size_t)seq * 31 + k) % 1009) + 1;
}

/* Checks an allreduce's result; returns NULL or what is wrong (in why). */
static const char *loop_check(const int32_t *x, size_t count, int seq, int n0, int n1, int same,
                              char *why, size_t len)
{
    if (same && x[0] != n1 * (n1 + 1) / 2) {
        snprintf(why, len, "element 0 is %d, want %d (size %d, generation unchanged)", x[0],
                 n1 * (n1 + 1) / 2, n1);
        return why;
    }
    /* every element > 0 is the same number of ranks' contributions: the size after the call, or
     * where the generation changed during it, perhaps the size before */
    int n = count > 1 && x[1] == n0 * loop_value(seq, 1) && !same ? n0 : n1;
    for (size_t k = 1; k < count; k++) {
        if (x[k] != n * loop_value(seq, k)) {
            snprintf(why, len,
                     "element %zu of %zu is %d, want %d (%d ranks; size %d before, %d after)", k,
                     count, x[k], n * loop_value(seq, k), n, n0, n1);
            return why;
        }
    }
    return NULL;
}

static int loop_main(th_loop *l)
{
    char num[16];
    if (l->min_size > 0) {
        snprintf(num, sizeof(num), "%d", l->min_size);
        setenv("RINGD_MIN_SIZE", num, 1);
    }
    ringd_options_t o = RINGD_OPTIONS_INIT;
    ringd_t *r = NULL;
    o.socket_path = l->sock;
    o.job = l->job;
    o.world_size = l->world;
    o.local_size = l->local;
    o.open_timeout_ms = l->open_timeout_ms;
    o.op_timeout_ms = l->op_timeout_ms;
    o.arena_size = l->count * sizeof(int32_t) + (1u << 20);
    ringd_result_t rc = ringd_open(&o, &r);
    if (rc != RINGD_OK) {
        snprintf(l->open_msg, sizeof(l->open_msg), "%s: %s", ringd_strerror(rc), ringd_errmsg(r));
        ringd_close(r);
        l->state = TH_LOOP_OPEN_FAILED;
        return 1;
    }
    l->opened_rank = l->rank = ringd_rank(r);
    l->opened_size = l->size = ringd_size(r);
    l->opened_generation = l->generation = ringd_generation(r);
    l->state = TH_LOOP_OPEN;
    int32_t *x = ringd_alloc(r, l->count * sizeof(int32_t));
    if (x == NULL) {
        snprintf(l->open_msg, sizeof(l->open_msg), "ringd_alloc of %zu int32 failed", l->count);
        ringd_close(r);
        return 1;
    }
    int seq = 0, need_sync = 1, prev_failed = 0, prev_rank = -1, prev_size = -1;
    uint64_t prev_gen = 0;
    char name[64], why[224];
    while (!l->stop) {
        int64_t t0 = th_now_ms();
        if (need_sync) {
            int64_t v = seq;
            snprintf(name, sizeof(name), "sync.g%" PRIu64, ringd_generation(r));
            rc = ringd_broadcast(r, name, &v, 1, RINGD_I64, 0);
            if (rc == RINGD_OK) {
                seq = (int)v;
                need_sync = 0;
            } else {
                l->failed++;
            }
            loop_note(l, r, t0, seq, 1, (int)rc, rc == RINGD_OK ? NULL : ringd_errmsg(r));
        } else {
            int n0 = ringd_size(r);
            uint64_t g0 = ringd_generation(r);
            x[0] = ringd_rank(r) + 1;
            for (size_t k = 1; k < l->count; k++)
                x[k] = loop_value(seq, k);
            snprintf(name, sizeof(name), "loop.%d", seq);
            rc = ringd_allreduce(r, name, x, x, l->count, RINGD_I32, RINGD_SUM);
            const char *wrong = NULL;
            if (rc == RINGD_OK) {
                wrong = loop_check(x, l->count, seq, n0, ringd_size(r), g0 == ringd_generation(r),
                                   why, sizeof(why));
                if (wrong == NULL) {
                    l->ok++;
                    l->last_ok_ms = th_now_ms();
                } else {
                    l->wrong++;
                }
                seq++;
                /* a new generation, learnt from a Complete: re-synchronise, as after a failure */
                need_sync = ringd_generation(r) != g0;
            } else {
                l->failed++;
                need_sync = 1;
            }
            int rank = ringd_rank(r), size = ringd_size(r);
            uint64_t gen = ringd_generation(r);
            if (rc != RINGD_OK || wrong != NULL || prev_failed || rank != prev_rank ||
                size != prev_size || gen != prev_gen)
                loop_note(l, r, t0, seq - (rc == RINGD_OK), 0,
                          wrong != NULL ? TH_LOOP_WRONG : (int)rc,
                          wrong != NULL    ? wrong
                          : rc == RINGD_OK ? NULL
                                           : ringd_errmsg(r));
            prev_rank = rank;
            prev_size = size;
            prev_gen = gen;
        }
        prev_failed = rc != RINGD_OK;
        l->rank = ringd_rank(r);
        l->size = ringd_size(r);
        l->generation = ringd_generation(r);
        if (rc != RINGD_OK)
            th_sleep_ms(10);
        else if (l->pause_ms > 0)
            th_sleep_ms(l->pause_ms);
    }
    ringd_close(r);
    l->state = TH_LOOP_DONE;
    return 0;
}

int th_loop_start(th_loop *l)
{
    fflush(NULL);
    l->stop = 0;
    l->state = TH_LOOP_STARTING;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(loop_main(l));
    }
    l->pid = pid;
    return 0;
}

int th_loop_wait_open(const th_loop *l, int timeout_ms)
{
    TH_WAIT(l->state != TH_LOOP_STARTING, timeout_ms);
    return l->state == TH_LOOP_OPEN || l->state == TH_LOOP_DONE;
}

int th_loop_stop(th_loop *l, int timeout_ms)
{
    if (l->pid <= 0)
        return 0;
    l->stop = 1;
    int ws = th_wait_pid(l->pid, timeout_ms);
    if (ws == -1) {
        kill(l->pid, SIGKILL);
        waitpid(l->pid, NULL, 0);
    }
    l->pid = 0;
    return ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -1;
}

void th_loop_kill(th_loop *l)
{
    if (l->pid <= 0)
        return;
    kill(l->pid, SIGKILL);
    waitpid(l->pid, NULL, 0);
    l->pid = 0;
    l->state = TH_LOOP_KILLED;
}

void th_loop_free(th_loop *l, int n)
{
    if (l == NULL)
        return;
    for (int i = 0; i < n; i++)
        th_loop_kill(&l[i]);
    munmap(l, sizeof(th_loop) * (size_t)n);
}

int th_loop_nevents(const th_loop *l)
{
    return __atomic_load_n(&l->nevents, __ATOMIC_ACQUIRE);
}

static int next_event(const th_loop *l, int from, int64_t t_ms, int want_ok)
{
    int n = th_loop_nevents(l);
    for (int i = from < 0 ? 0 : from; i < n; i++)
        if (l->ev[i].t1_ms >= t_ms && (l->ev[i].rc == RINGD_OK) == want_ok)
            return i;
    return -1;
}

int th_loop_next_failure(const th_loop *l, int from, int64_t t_ms)
{
    return next_event(l, from, t_ms, 0);
}

int th_loop_next_ok(const th_loop *l, int from, int64_t t_ms)
{
    return next_event(l, from, t_ms, 1);
}

void th_loop_print(const th_loop *l, const char *label, int64_t t0_ms)
{
    static const char *const states[] = {"starting", "open", "done", "open failed", "killed"};
    fprintf(stderr,
            "%s: %s on %s, pid %d, opened as rank %d of %d (generation %" PRIu64 "); %d ok, "
            "%d failed, %d wrong; now rank %d of %d (generation %" PRIu64 ")%s%s\n",
            label, states[l->state], l->sock, (int)l->pid, l->opened_rank, l->opened_size,
            l->opened_generation, l->ok, l->failed, l->wrong, l->rank, l->size, l->generation,
            l->open_msg[0] ? ": " : "", l->open_msg);
    int n = th_loop_nevents(l);
    for (int i = 0; i < n; i++) {
        const th_loop_event *e = &l->ev[i];
        fprintf(stderr,
                "%s:   [%d] %+lld..%+lld ms %s %d: %s, rank %d of %d (local %d of %d), "
                "generation %" PRIu64 "%s%s\n",
                label, i, (long long)(e->t0_ms - t0_ms), (long long)(e->t1_ms - t0_ms),
                e->sync ? "sync ->" : "loop.", e->seq,
                e->rc == TH_LOOP_WRONG ? "WRONG RESULT" : ringd_strerror((ringd_result_t)e->rc),
                e->rank, e->size, e->local_rank, e->local_size, e->generation,
                e->msg[0] ? ": " : "", e->msg);
        if (e->repeats > 0)
            fprintf(stderr, "%s:       the same %d more times, the last ending at %+lld ms\n",
                    label, e->repeats, (long long)(e->last_t1_ms - t0_ms));
    }
    if (l->dropped)
        fprintf(stderr, "%s:   (%d more events not kept)\n", label, l->dropped);
}
