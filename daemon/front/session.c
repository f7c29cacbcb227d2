/* Client sessions: connection state machine, framed reads, immediate writes with a queued tail. */
#define _GNU_SOURCE
#include "session.h"

#include <assert.h>
#include <errno.h>
#include <event2/buffer.h>
#include <grp.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "arena.h"
#include "job.h"
#include "ops.h"
#include "log.h"
#include "trace.h"

/* A peer that lets this much output pile up without reading it is dropped. */
#define RD_SESSION_OUT_MAX (64u << 20)
#define RD_READ_CHUNK 65536

static const char *const state_names[RD_SESSION_NSTATES] = {"new", "joining", "active", "closing"};

/* The moves set_state allows: session_moves[from] has bit 1 << to. A session is freed only from
 * CLOSING; nothing leaves CLOSING. */
#define S_BIT(st) (1u << (st))
static const unsigned session_moves[RD_SESSION_NSTATES] = {
    [RD_SESSION_NEW] = S_BIT(RD_SESSION_JOINING) | S_BIT(RD_SESSION_CLOSING),
    [RD_SESSION_JOINING] = S_BIT(RD_SESSION_ACTIVE) | S_BIT(RD_SESSION_CLOSING),
    [RD_SESSION_ACTIVE] = S_BIT(RD_SESSION_CLOSING),
    [RD_SESSION_CLOSING] = 0,
};

/* The one place a session changes state (staying is no move: a failed write may have closed it
 * while it was being closed): the move must be one session_moves allows (a programmer error
 * otherwise: an assertion, and an error in the log where assertions are compiled out), and is
 * logged. */
static void set_state(rd_session *s, rd_session_state st)
{
    if (s->state == st)
        return;
    if (!(session_moves[s->state] & S_BIT(st))) {
        rd_log(RD_LOG_ERROR, "session", "#%llu pid %d: illegal move %s -> %s",
               (unsigned long long)s->id, (int)s->c.pid, state_names[s->state], state_names[st]);
        assert(!"illegal session state move");
    }
    rd_log(RD_LOG_DEBUG, "session", "#%llu pid %d: %s -> %s", (unsigned long long)s->id,
           (int)s->c.pid, state_names[s->state], state_names[st]);
    s->state = st;
}
#undef S_BIT

/* Writes as much queued output as the socket takes; waits for writability for the rest. */
static void flush_out(rd_session *s)
{
    while (evbuffer_get_length(s->out) > 0) {
        int n = evbuffer_write(s->out, s->fd);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            break;
        if (s->state != RD_SESSION_CLOSING) {
            rd_log(RD_LOG_INFO, "session", "#%llu pid %d: write: %s", (unsigned long long)s->id,
                   (int)s->c.pid, n < 0 ? strerror(errno) : "closed");
            set_state(s, RD_SESSION_CLOSING);
            event_active(s->ev_close, 0, 0);
        }
        evbuffer_drain(s->out, evbuffer_get_length(s->out));
        return;
    }
    if (evbuffer_get_length(s->out) > 0)
        event_add(s->ev_write, NULL);
    else
        event_del(s->ev_write);
}

static void session_close(rd_session *s, rd_status status, int tell, const char *why);

/* Queues msg's frame on s's output. Returns 0, or -1 when out of memory (nothing queued). */
static int queue_frame(rd_session *s, const rd_msg *msg)
{
    size_t n = rd_frame_size(msg);
    struct evbuffer_iovec v;
    if (evbuffer_reserve_space(s->out, n, &v, 1) < 1)
        return -1;
    v.iov_len = rd_frame_pack(msg, v.iov_base);
    evbuffer_commit_space(s->out, &v, 1);
    return 0;
}

void rd_session_send(rd_session *s, const rd_msg *msg)
{
    if (s->state == RD_SESSION_CLOSING)
        return;
    if (queue_frame(s, msg) != 0) {
        rd_session_close(s, RINGD_E_NOMEM, "out of memory queueing %zu bytes", rd_frame_size(msg));
        return;
    }
    size_t queued = evbuffer_get_length(s->out);
    if (queued > RD_SESSION_OUT_MAX) {
        /* It reads nothing: what it left goes, and so does the goodbye (after a frame the socket
         * may have taken only in part, no Error could be read whole). */
        char why[128];
        snprintf(why, sizeof(why), "peer left %zu bytes of replies unread", queued);
        evbuffer_drain(s->out, queued);
        session_close(s, RINGD_E_PROTOCOL, 0, why);
        return;
    }
    flush_out(s);
}

rd_status rd_session_send_fds(rd_session *s, const rd_msg *msg, const int *fds, int nfds)
{
    uint8_t buf[512];
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int) * 2)];
    } ctl;
    size_t n = rd_frame_size(msg);

    if (s->state == RD_SESSION_CLOSING)
        return RINGD_E_CLOSED;
    /* The fd must ride on this frame's first byte, so nothing may be queued before it. */
    if (n > sizeof(buf) || evbuffer_get_length(s->out) > 0) {
        rd_session_close(s, RINGD_E_PROTOCOL, "cannot pass the arena: output is backed up");
        return RINGD_E_PROTOCOL;
    }
    rd_frame_pack(msg, buf);
    struct iovec iov = {.iov_base = buf, .iov_len = n};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    assert(nfds >= 1 && nfds <= 2);
    memset(&ctl, 0, sizeof(ctl));
    mh.msg_control = ctl.space;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);

    ssize_t w;
    do
        w = sendmsg(s->fd, &mh, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        rd_session_close(s, RINGD_E_SYSTEM, "sendmsg with arena fd: %s", strerror(errno));
        return RINGD_E_SYSTEM;
    }
    if ((size_t)w < n && evbuffer_add(s->out, buf + w, n - (size_t)w) != 0) {
        /* The frame's tail is lost: whatever followed, an Error too, would be read as its rest. */
        rd_log(RD_LOG_ERROR, "session", "#%llu pid %d: out of memory queueing %zu bytes; closing",
               (unsigned long long)s->id, (int)s->c.pid, n - (size_t)w);
        set_state(s, RD_SESSION_CLOSING);
        event_del(s->ev_read);
        event_active(s->ev_close, 0, 0);
        return RINGD_E_NOMEM;
    }
    flush_out(s);
    return s->state == RD_SESSION_CLOSING ? RINGD_E_CLOSED : RINGD_OK; /* a write failed */
}

/* Sends msg to an active client through its control queue, Poking it when it sleeps; falls back
 * to the socket when the queue is full. */
static void send_shared(rd_session *s, const rd_msg *msg)
{
    switch (rd_ctlq_put(&s->cq, msg)) {
    case RD_CTLQ_OK:
        if (rd_ctlq_consumer_asleep(&s->cq)) {
            Ringd__Poke p = RINGD__POKE__INIT;
            rd_msg m = RINGD__MSG__INIT;
            m.body_case = RINGD__MSG__BODY_POKE;
            m.poke = &p;
            rd_session_send(s, &m);
        }
        return;
    case RD_CTLQ_FULL: rd_session_send(s, msg); return;
    default:
        rd_session_close(s, RINGD_E_PROTOCOL, "the completion queue's shared indices are corrupt");
        return;
    }
}

/* The session of an engine client. */
static rd_session *session_of(rd_client *c)
{
    return (rd_session *)((char *)c - offsetof(rd_session, c));
}

/* Sends Complete{request_id, status, message, trace} with the job as the client sees it now
 * (current), or with no view: generation 0, the client's stays. */
static void client_complete(rd_client *cl, uint64_t request_id, rd_status status,
                            const char *message, const rd_trace_op *trace, int current)
{
    rd_session *s = session_of(cl);
    Ringd__Complete c = RINGD__COMPLETE__INIT;
    Ringd__OpTrace tr;
    if (trace != NULL) {
        rd_trace_msg(&tr, trace);
        c.trace = &tr;
    }
    rd_msg m = RINGD__MSG__INIT;
    rd_client_view v;
    c.request_id = request_id;
    c.status = (uint32_t)status;
    c.message = (char *)(message != NULL ? message : "");
    if (current && s->c.job != NULL && rd_job_client_view(s->c.job, s->c.local_rank, &v)) {
        c.generation = v.generation;
        c.rank = v.rank;
        c.size = v.size;
        c.local_rank = v.local_rank;
        c.local_size = v.local_size;
    }
    m.body_case = RINGD__MSG__BODY_COMPLETE;
    m.complete = &c;
    if (s->c.ops_in_flight > 0)
        s->c.ops_in_flight--;
    s->c.ops_completed++;
    if (s->state == RD_SESSION_ACTIVE)
        send_shared(s, &m);
    else
        rd_session_send(s, &m);
}

/* Closes s for why (logged); tell: with an Error frame saying so when status is a failure. */
static void session_close(rd_session *s, rd_status status, int tell, const char *why)
{
    rd_log(status == RINGD_OK ? RD_LOG_INFO : RD_LOG_WARN, "session", "#%llu pid %d: closing: %s",
           (unsigned long long)s->id, (int)s->c.pid, why);
    if (tell && status != RINGD_OK) {
        Ringd__Error e = RINGD__ERROR__INIT;
        rd_msg m = RINGD__MSG__INIT;
        e.status = (uint32_t)status;
        e.message = (char *)why;
        m.body_case = RINGD__MSG__BODY_ERROR;
        m.error = &e;
        /* Not rd_session_send: out of memory, the session goes without its Error. */
        if (queue_frame(s, &m) == 0)
            flush_out(s);
    }
    set_state(s, RD_SESSION_CLOSING);
    event_del(s->ev_read);
    event_active(s->ev_close, 0, 0);
}

void rd_session_close(rd_session *s, rd_status status, const char *fmt, ...)
{
    char why[512];
    va_list ap;

    if (s->state == RD_SESSION_CLOSING)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    session_close(s, status, 1, why);
}

/* Unlinks and frees s; the job learns it left first, so no op points at it afterwards. */
static void session_free(rd_session *s)
{
    rd_front *f = s->f;
    if (f->forget != NULL)
        f->forget(f, s);
    if (s->c.job != NULL)
        rd_job_leave(&s->c);
    rd_arena_unref(s->c.arena);
    rd_arena_unref(s->c.device_arena); /* the device memory goes once no op holds it */
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        f->sessions = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    f->nsessions--;
    event_free(s->ev_read);
    event_free(s->ev_write);
    event_free(s->ev_close);
    event_free(s->ev_handshake);
    evbuffer_free(s->in);
    evbuffer_free(s->out);
    close(s->fd);
    free(s);
}

static void on_close(evutil_socket_t fd, short what, void *arg)
{
    rd_session *s = arg;
    (void)fd;
    (void)what;
    /* Best effort for the Error frame; a peer that does not read it loses it. */
    evbuffer_write(s->out, s->fd);
    rd_log(RD_LOG_DEBUG, "session", "#%llu pid %d: freed", (unsigned long long)s->id,
           (int)s->c.pid);
    session_free(s);
}

static void on_handshake_timeout(evutil_socket_t fd, short what, void *arg)
{
    rd_session *s = arg;
    (void)fd;
    (void)what;
    if (s->state == RD_SESSION_NEW)
        rd_session_close(s, RINGD_E_TIMEOUT, "sent no Hello or status request within %lld ms",
                         (long long)s->f->cfg->handshake_ms);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flush_out(arg);
}

/* Dispatches one decoded message according to the session's state: a client's Hello and
 * Submits go to the engine, admin requests to the front's handler table. A Hello or an admin
 * request ends the handshake (a connection kept open for status is not closed under it); a
 * Poke does not, so a connection cannot hold a client slot by poking. */
static void dispatch(rd_session *s, const rd_msg *m)
{
    switch (m->body_case) {
    case RINGD__MSG__BODY_HELLO: {
        char err[512];
        if (s->state != RD_SESSION_NEW) {
            rd_session_close(s, RINGD_E_PROTOCOL, "Hello after the session was set up");
            return;
        }
        event_del(s->ev_handshake);
        set_state(s, RD_SESSION_JOINING); /* the job may welcome it at once */
        rd_hello h;
        int device;
        rd_hello_of(m->hello, &h);
        /* a device it asks for must be one served, before it takes a place in the job */
        if (h.device > RD_MAX_DEVICES ||
            rd_devices_pick(s->f->devices, (int)h.device, 0, &device, err, sizeof(err)) != 0) {
            if (h.device > RD_MAX_DEVICES)
                snprintf(err, sizeof(err), "asked for CUDA device %lld: there are at most %d",
                         (long long)h.device, RD_MAX_DEVICES);
            rd_session_close(s, RINGD_E_INVALID, "%s", err);
            return;
        }
        s->asked_device = (int)h.device;
        if (h.device_arena_size > s->f->cfg->device_arena_max) {
            rd_session_close(s, RINGD_E_INVALID,
                             "asked for a device arena of %llu bytes: this ringd gives at most "
                             "%llu (--device-arena-max)",
                             (unsigned long long)h.device_arena_size,
                             (unsigned long long)s->f->cfg->device_arena_max);
            return;
        }
        if (h.device_arena_size > 0 && s->f->devices->n == 0) {
            rd_session_close(s, RINGD_E_INVALID,
                             "asked for a device arena of %llu bytes, and this ringd serves no "
                             "GPU (%s): pass host memory",
                             (unsigned long long)h.device_arena_size, s->f->devices->why);
            return;
        }
        s->device_arena_size = h.device_arena_size;
        s->c.timeline = h.timeline;
        rd_status rc = rd_job_join(&s->c, &h, err, sizeof(err));
        if (rc != RINGD_OK)
            rd_session_close(s, rc, "%s", err);
        return;
    }
    case RINGD__MSG__BODY_SUBMIT:
        if (s->state != RD_SESSION_ACTIVE) {
            rd_session_close(s, RINGD_E_PROTOCOL, "Submit before the session joined a job");
            return;
        }
        s->c.ops_in_flight++;
        rd_submit sub;
        rd_submit_of(m->submit, &sub);
        rd_ops_submit(&s->c, &sub);
        return;
    case RINGD__MSG__BODY_POKE: return; /* the loop polls the queues after every turn */
    case RINGD__MSG__BODY_TRACE:
        if (s->state != RD_SESSION_ACTIVE) {
            rd_session_close(s, RINGD_E_PROTOCOL, "Trace before the session joined a job");
            return;
        }
        rd_job_trace(&s->c, m->trace->on);
        return;
    default: break;
    }
    for (size_t i = 0; i < s->f->nadmin; i++) {
        if (s->f->admin[i].body_case == (int)m->body_case) {
            event_del(s->ev_handshake);
            s->f->admin[i].handle(s, m);
            return;
        }
    }
    rd_session_close(s, RINGD_E_PROTOCOL, "message type %d is not one a client sends",
                     (int)m->body_case);
}

/* Reads what the socket has and handles every whole frame in it. */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    rd_session *s = arg;
    char err[256];
    (void)what;

    int n = evbuffer_read(s->in, fd, RD_READ_CHUNK);
    if (n == 0) {
        size_t left = evbuffer_get_length(s->in);
        if (left > 0)
            rd_session_close(s, RINGD_E_PROTOCOL, "hung up inside a frame (%zu bytes unread)",
                             left);
        else
            rd_session_close(s, RINGD_OK, "hung up");
        return;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        rd_session_close(s, RINGD_E_SYSTEM, "read: %s", strerror(errno));
        return;
    }
    while (s->state != RD_SESSION_CLOSING) {
        size_t len = evbuffer_get_length(s->in);
        if (len < RD_FRAME_HEADER)
            return;
        uint8_t hdr[RD_FRAME_HEADER];
        evbuffer_copyout(s->in, hdr, sizeof(hdr));
        uint32_t payload = rd_frame_payload_len(hdr);
        if (payload > s->f->cfg->max_frame) {
            rd_session_close(s, RINGD_E_PROTOCOL, "frame of %u bytes exceeds --max-frame %llu",
                             payload, (unsigned long long)s->f->cfg->max_frame);
            return;
        }
        if (len < RD_FRAME_HEADER + (size_t)payload)
            return;
        const uint8_t *buf = evbuffer_pullup(s->in, (ev_ssize_t)(RD_FRAME_HEADER + payload));
        rd_msg *m = NULL;
        size_t used = 0;
        rd_frame_status st =
            rd_frame_decode(buf, RD_FRAME_HEADER + payload, (uint32_t)s->f->cfg->max_frame, &m,
                            &used, err, sizeof(err));
        evbuffer_drain(s->in, RD_FRAME_HEADER + payload);
        if (st != RD_FRAME_OK) {
            rd_session_close(s, RINGD_E_PROTOCOL, "%s", err);
            return;
        }
        dispatch(s, m);
        rd_frame_free(m);
    }
}

int rd_session_group(const char *group, gid_t *gid, char *err, size_t errlen)
{
    errno = 0;
    const struct group *g = getgrnam(group);
    if (g != NULL) {
        *gid = g->gr_gid;
        return 0;
    }
    int lookup = errno;
    char *end;
    errno = 0;
    unsigned long n = group[0] >= '0' && group[0] <= '9' ? strtoul(group, &end, 10) : 0;
    if (group[0] >= '0' && group[0] <= '9' && *end == '\0' && errno == 0 && n < (gid_t)-1) {
        *gid = (gid_t)n;
        return 0;
    }
    snprintf(err, errlen, "--admin-group %s: no such group%s%s", group, lookup ? ": " : "",
             lookup ? strerror(lookup) : "");
    return -1;
}

/* Whether the process at the other end of fd (primary group gid) is a member of group want, by
 * its supplementary groups as the kernel saw them at connect (SO_PEERGROUPS). */
static int peer_in_group(int fd, gid_t gid, gid_t want)
{
    if (gid == want)
        return 1;
    gid_t some[64], *groups = some;
    socklen_t len = sizeof(some);
    int found = 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
        if (errno != ERANGE || (groups = malloc(len)) == NULL ||
            getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
            static int warned; /* the same for every connection: said once */
            if (!warned && (warned = 1))
                rd_log(RD_LOG_WARN, "session",
                       "getsockopt SO_PEERGROUPS: %s: --admin-group is known only by clients' "
                       "primary group",
                       strerror(errno));
            if (groups != some)
                free(groups);
            return 0;
        }
    }
    for (size_t i = 0; i < len / sizeof(gid_t); i++)
        found |= groups[i] == want;
    if (groups != some)
        free(groups);
    return found;
}

void rd_session_accept(rd_front *f, int fd)
{
    static uint64_t next_id = 1;
    struct ucred cred;
    socklen_t clen = sizeof(cred);

    if (f->nsessions >= (unsigned)f->cfg->max_clients) {
        rd_log(RD_LOG_WARN, "session", "refusing a connection: %u sessions open (--max-clients)",
               f->nsessions);
        close(fd);
        return;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
        /* uid 0 is all a session without credentials would have: root's rights */
        rd_log(RD_LOG_ERROR, "session", "refusing a connection: getsockopt SO_PEERCRED: %s",
               strerror(errno));
        close(fd);
        return;
    }
    rd_session *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        rd_log(RD_LOG_ERROR, "session", "out of memory accepting a connection");
        close(fd);
        return;
    }
    s->f = f;
    s->fd = fd;
    s->id = next_id++;
    s->asked_device = -1;
    s->c.device = -1;
    s->c.engine = f->engine;
    s->c.pid = cred.pid;
    s->c.uid = cred.uid;
    s->gid = cred.gid;
    s->admin = cred.uid == 0 || cred.uid == geteuid() ||
               (f->has_admin_gid && peer_in_group(fd, cred.gid, f->admin_gid));
    s->in = evbuffer_new();
    s->out = evbuffer_new();
    s->ev_read = event_new(f->base, fd, EV_READ | EV_PERSIST, on_readable, s);
    s->ev_write = event_new(f->base, fd, EV_WRITE, on_writable, s);
    s->ev_close = event_new(f->base, -1, 0, on_close, s);
    s->ev_handshake = evtimer_new(f->base, on_handshake_timeout, s);
    struct timeval hs = {(time_t)(f->cfg->handshake_ms / 1000),
                         (suseconds_t)(f->cfg->handshake_ms % 1000) * 1000};
    if (s->in == NULL || s->out == NULL || s->ev_read == NULL || s->ev_write == NULL ||
        s->ev_close == NULL || s->ev_handshake == NULL || event_add(s->ev_read, NULL) != 0 ||
        evtimer_add(s->ev_handshake, &hs) != 0) {
        rd_log(RD_LOG_ERROR, "session", "out of memory setting up a connection");
        if (s->ev_handshake != NULL)
            event_free(s->ev_handshake);
        if (s->ev_close != NULL)
            event_free(s->ev_close);
        if (s->ev_write != NULL)
            event_free(s->ev_write);
        if (s->ev_read != NULL)
            event_free(s->ev_read);
        if (s->out != NULL)
            evbuffer_free(s->out);
        if (s->in != NULL)
            evbuffer_free(s->in);
        free(s);
        close(fd);
        return;
    }
    s->next = f->sessions;
    if (f->sessions != NULL)
        f->sessions->prev = s;
    f->sessions = s;
    f->nsessions++;
    rd_log(RD_LOG_DEBUG, "session", "#%llu: connected, pid %d uid %d", (unsigned long long)s->id,
           (int)s->c.pid, (int)s->c.uid);
}

void rd_session_free_all(rd_front *f)
{
    /* First every session closing, so that no news of a job reaches one being torn down. */
    for (rd_session *s = f->sessions; s != NULL; s = s->next)
        set_state(s, RD_SESSION_CLOSING);
    while (f->sessions != NULL)
        session_free(f->sessions);
}

/* Sends Welcome with the arena's fd and, once sent, attaches the control queues in the arena:
 * the session is ACTIVE. */
static rd_status client_welcome(rd_client *cl, const rd_client_view *v, int arena_fd)
{
    rd_session *s = session_of(cl);
    if (s->state != RD_SESSION_JOINING)
        return RINGD_E_CLOSED;
    Ringd__Welcome w = RINGD__WELCOME__INIT;
    rd_msg m = RINGD__MSG__INIT;
    w.rank = v->rank;
    w.size = v->size;
    w.local_rank = v->local_rank;
    w.local_size = v->local_size;
    w.generation = v->generation;
    w.arena_size = s->c.arena->size;
    w.data_offset = RD_CTRL_BYTES;
    /* checked at Hello: a device asked for is served; otherwise its local rank's share */
    if (rd_devices_pick(s->f->devices, s->asked_device, v->local_rank, &s->c.device, NULL, 0) != 0)
        s->c.device = -1;
    w.has_device = s->c.device >= 0;
    w.device = s->c.device >= 0 ? (uint32_t)s->c.device : 0;
    const rd_device *dev = rd_devices_find(s->f->devices, s->c.device);
    s->c.device_uuid = dev != NULL ? dev->uuid : NULL;
    w.device_uuid = dev != NULL ? (char *)dev->uuid : (char *)"";
    int fds[2] = {arena_fd, -1};
    if (s->device_arena_size > 0 && dev != NULL) {
        char err[512];
        rd_arena *a = rd_arena_new_shared(rd_backend_cuda(), RD_MEM_DEVICE, s->c.device,
                                          s->device_arena_size, err, sizeof(err));
        if (a == NULL) {
            rd_session_close(s,
                             strstr(err, "OUT_OF_MEMORY") != NULL ? RINGD_E_NOMEM : RINGD_E_SYSTEM,
                             "a device arena of %llu bytes on GPU %d (%s): %s",
                             (unsigned long long)s->device_arena_size, s->c.device, dev->uuid, err);
            return RINGD_E_CLOSED;
        }
        s->c.device_arena = a;
        fds[1] = a->fd;
        w.device_arena_size = a->size;
    }
    w.takes_trace = 1;
    m.body_case = RINGD__MSG__BODY_WELCOME;
    m.welcome = &w;
    rd_status rc = rd_session_send_fds(s, &m, fds, fds[1] >= 0 ? 2 : 1);
    if (s->c.device_arena != NULL)
        rd_arena_close_fd(s->c.device_arena); /* the client's now, or the session is closing */
    if (rc != RINGD_OK)
        return rc;
    rd_ctrl *c = (rd_ctrl *)s->c.arena->base;
    rd_ctlq_attach_consumer(&s->sq, &c->sq);
    rd_ctlq_attach_producer(&s->cq, &c->cq);
    set_state(s, RD_SESSION_ACTIVE);
    return RINGD_OK;
}

/* Tells a joining client how far its job's ring has come. */
static void client_waiting(rd_client *cl, uint32_t ranks, uint32_t world_size, uint32_t nodes,
                           uint64_t generation, const char *detail)
{
    rd_session *s = session_of(cl);
    if (s->state != RD_SESSION_JOINING)
        return;
    Ringd__Waiting wt = RINGD__WAITING__INIT;
    wt.ranks = ranks;
    wt.world_size = world_size;
    wt.nodes = nodes;
    wt.generation = generation;
    wt.detail = (char *)detail;
    rd_msg m = RINGD__MSG__INIT;
    m.body_case = RINGD__MSG__BODY_WAITING;
    m.waiting = &wt;
    rd_session_send(s, &m);
}

const rd_client_events rd_session_client_events = {
    .welcome = client_welcome,
    .waiting = client_waiting,
    .complete = client_complete,
};

/* Frames taken from one queue per poll, so one busy client cannot starve the others. */
#define RD_POLL_BATCH 64

int rd_session_poll_queues(rd_front *f)
{
    int taken = 0;
    char err[256];
    for (rd_session *s = f->sessions; s != NULL; s = s->next) {
        for (int i = 0; i < RD_POLL_BATCH && s->state == RD_SESSION_ACTIVE; i++) {
            rd_msg *m = NULL;
            rd_ctlq_status st =
                rd_ctlq_get(&s->sq, (uint32_t)f->cfg->max_frame, &m, err, sizeof(err));
            if (st == RD_CTLQ_EMPTY)
                break;
            if (st != RD_CTLQ_OK) {
                rd_session_close(s, RINGD_E_PROTOCOL, "%s", err);
                break;
            }
            taken++;
            dispatch(s, m);
            rd_frame_free(m);
        }
    }
    return taken;
}

int rd_session_prepare_sleep(rd_front *f)
{
    for (rd_session *s = f->sessions; s != NULL; s = s->next) {
        if (s->state == RD_SESSION_ACTIVE && !rd_ctlq_prepare_sleep(&s->sq)) {
            rd_session_wake(f);
            return 0;
        }
    }
    return 1;
}

void rd_session_wake(rd_front *f)
{
    for (rd_session *s = f->sessions; s != NULL; s = s->next)
        if (s->state == RD_SESSION_ACTIVE)
            rd_ctlq_wake(&s->sq);
}
