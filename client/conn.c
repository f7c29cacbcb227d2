/* Blocking connection to the daemon: framed send and receive with deadlines and fd passing. */
#define _GNU_SOURCE
#include "conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Replies can hold a whole status; anything bigger is a broken daemon. */
#define RD_CONN_MAX_FRAME (64u << 20)

/* Received bytes are spun on this long before sleeping in poll: a collective answered within
 * it costs no wake-up. */
#define RD_CONN_SPIN_US 300

int64_t rd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rd_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

ringd_result_t rd_conn_open(rd_conn *c, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sun;
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->passed_fd[0] = c->passed_fd[1] = -1;
    c->max_frame = RD_CONN_MAX_FRAME;
    if (strlen(path) >= sizeof(sun.sun_path)) {
        snprintf(err, errlen, "socket path %s is too long", path);
        return RINGD_E_CONNECT;
    }
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return RINGD_E_CONNECT;
    }
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, path, strlen(path) + 1);
    if (connect(c->fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        snprintf(err, errlen, "connect %s: %s (is ringd running there?)", path, strerror(errno));
        close(c->fd);
        c->fd = -1;
        return RINGD_E_CONNECT;
    }
    return RINGD_OK;
}

void rd_conn_close(rd_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    for (int i = 0; i < 2; i++)
        if (c->passed_fd[i] >= 0)
            close(c->passed_fd[i]);
    free(c->buf);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->passed_fd[0] = c->passed_fd[1] = -1;
}

ringd_result_t rd_conn_send(rd_conn *c, const rd_msg *msg, char *err, size_t errlen)
{
    uint8_t small[512];
    size_t n = rd_frame_size(msg);
    uint8_t *buf = n <= sizeof(small) ? small : malloc(n);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory framing %zu bytes", n);
        return RINGD_E_NOMEM;
    }
    rd_frame_pack(msg, buf);
    size_t off = 0;
    ringd_result_t rc = RINGD_OK;
    while (off < n) {
        ssize_t w = send(c->fd, buf + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(err, errlen, "send to ringd: %s", w < 0 ? strerror(errno) : "closed");
            rc = RINGD_E_CLOSED;
            break;
        }
        off += (size_t)w;
    }
    if (buf != small)
        free(buf);
    return rc;
}

/* Reads what is available into the buffer, keeping any passed fd. Returns bytes read, 0 at EOF,
 * -1 with errno (EAGAIN when nothing is there). */
static ssize_t fill(rd_conn *c)
{
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        while (cap - c->len < 65536)
            cap *= 2;
        uint8_t *b = realloc(c->buf, cap);
        if (b == NULL) {
            errno = ENOMEM;
            return -1;
        }
        c->buf = b;
        c->cap = cap;
    }
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int) * 4)];
    } ctl;
    struct iovec iov = {.iov_base = c->buf + c->len, .iov_len = c->cap - c->len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    mh.msg_control = ctl.space;
    mh.msg_controllen = sizeof(ctl.space);
    ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -1;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h != NULL; h = CMSG_NXTHDR(&mh, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            if (c->passed_fd[0] < 0)
                c->passed_fd[0] = fd;
            else if (c->passed_fd[1] < 0)
                c->passed_fd[1] = fd;
            else
                close(fd);
        }
    }
    c->len += (size_t)n;
    return n;
}

ringd_result_t rd_conn_recv(rd_conn *c, int timeout_ms, rd_msg **msg, char *err, size_t errlen)
{
    int64_t deadline = timeout_ms < 0 ? -1 : rd_now_ms() + timeout_ms;

    for (;;) {
        size_t used = 0;
        rd_frame_status st = rd_frame_decode(c->buf, c->len, c->max_frame, msg, &used, err, errlen);
        if (st == RD_FRAME_OK) {
            memmove(c->buf, c->buf + used, c->len - used);
            c->len -= used;
            return RINGD_OK;
        }
        if (st == RD_FRAME_BAD)
            return RINGD_E_PROTOCOL;

        ssize_t n = fill(c);
        if (n > 0)
            continue;
        if (n == 0) {
            snprintf(err, errlen, "ringd closed the connection");
            return RINGD_E_CLOSED;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "recv from ringd: %s", strerror(errno));
            return errno == ENOMEM ? RINGD_E_NOMEM : RINGD_E_CLOSED;
        }
        if (timeout_ms == 0) {
            snprintf(err, errlen, "no reply yet");
            return RINGD_E_TIMEOUT;
        }
        int wait = -1;
        if (deadline >= 0) {
            int64_t left = deadline - rd_now_ms();
            if (left <= 0) {
                snprintf(err, errlen, "no reply from ringd within %d ms", timeout_ms);
                return RINGD_E_TIMEOUT;
            }
            wait = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, wait) < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return RINGD_E_SYSTEM;
        }
    }
}

ringd_result_t rd_conn_ask(const char *path, const rd_msg *m, int timeout_ms, rd_msg **reply,
                           char *err, size_t errlen)
{
    char why[512];
    rd_conn c;
    *reply = NULL;
    ringd_result_t rc = rd_conn_open(&c, path, err, errlen);
    if (rc != RINGD_OK) {
        rd_conn_close(&c);
        return rc;
    }
    if ((rc = rd_conn_send(&c, m, why, sizeof(why))) != RINGD_OK ||
        (rc = rd_conn_recv(&c, timeout_ms, reply, why, sizeof(why))) != RINGD_OK)
        snprintf(err, errlen, "%s: %s", path, why);
    rd_conn_close(&c);
    return rc;
}
