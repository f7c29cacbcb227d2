/* Test harness: starting and stopping real daemons, raw protocol I/O, forked clients. */
#define _GNU_SOURCE
#include "harness.h"

#include "ringd.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

static pid_t spawn_daemon(const char *sock, const char *log, const char *const *extra)
{
    const char *bin = getenv("RINGD_BIN");
    const char *argv[32] = {bin ? bin : "ringd", "--socket", sock, "--log-level", "debug"};
    int n = 5;
    for (; extra != NULL && *extra != NULL && n < 30; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return th_spawn(log, argv);
}

int th_daemon_start(th_daemon *d, const char *const *extra)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/ringd-test.XXXXXX");
    if (mkdtemp(d->dir) == NULL)
        return -1;
    snprintf(d->sock, sizeof(d->sock), "%s/run/ringd.sock", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/ringd.log", d->dir);
    d->pid = spawn_daemon(d->sock, d->log, extra);
    if (d->pid < 0)
        return -1;
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

int th_daemon_stop(th_daemon *d)
{
    int rc = -1;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        int ws = th_wait_pid(d->pid, 10000);
        if (ws == -1) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
        } else if (ws >= 0 && WIFEXITED(ws)) {
            rc = WEXITSTATUS(ws);
        }
        d->pid = 0;
    }
    if (rc != 0) {
        /* Keep the evidence in the test output. */
        char *log = th_daemon_log(d);
        if (log != NULL)
            fprintf(stderr, "---- ringd log (%s) ----\n%s\n----\n", d->log, log);
        free(log);
    }
    if (d->dir[0] != '\0')
        nftw(d->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    return rc;
}

void th_daemon_teardown(th_daemon *d)
{
    if (d->pid > 0)
        th_daemon_stop(d);
}

void th_daemon_finish(th_daemon *d)
{
    cr_assert(th_daemon_alive(d), "ringd died during the test");
    cr_assert_eq(th_daemon_stop(d), 0, "ringd did not shut down cleanly (log above)");
}

char *th_daemon_log(const th_daemon *d)
{
    FILE *f = fopen(d->log, "r");
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

int th_run(int n, int (*fn)(int i, void *arg), void *arg, int timeout_ms)
{
    pid_t kids[64];
    int failed = 0;
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
