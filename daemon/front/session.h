/* Client sessions: one per connection; reads framed control messages, dispatches them, writes
 * replies. */
#ifndef RD_SESSION_H
#define RD_SESSION_H

#include <stdint.h>
#include <sys/types.h>

#include "frame.h"
#include "front.h"
#include "job.h"
#include "ctlq.h"
#include "ringd.h"
#include "status.h"

struct evbuffer;
struct event;

typedef enum {
    RD_SESSION_NEW,     /* connected; its first message says whether it is a client or a query */
    RD_SESSION_JOINING, /* Hello accepted; waiting for the job's other local clients */
    RD_SESSION_ACTIVE,  /* Welcome sent: submits collectives */
    RD_SESSION_CLOSING, /* failed or hung up: reads nothing more, torn down on the next loop turn */
    RD_SESSION_NSTATES
} rd_session_state;

typedef struct rd_session {
    rd_front *f;
    uint64_t id;
    int fd;
    rd_session_state state;
    struct event *ev_read;
    struct event *ev_write;
    struct event *ev_close;
    struct event *ev_handshake; /* closes a connection whose first message is late */
    struct evbuffer *in;
    struct evbuffer *out;
    gid_t gid;                  /* SO_PEERCRED, with c.pid and c.uid */
    int admin;                  /* root, the daemon's user or of --admin-group: sees every job */
    rd_client c;                /* the engine's view of the client: job, local rank, arena */
    int asked_device;           /* the CUDA device its Hello asked for; -1: the daemon's pick */
    uint64_t device_arena_size; /* device arena bytes its Hello asked for; 0: none */
    rd_ctlq sq;                 /* client -> daemon, consumed here; attached from ACTIVE on */
    rd_ctlq cq;                 /* daemon -> client, produced here */
    struct rd_session *prev, *next;
} rd_session;

/* The group --admin-group names (a name in the group database, else a number) into *gid.
 * Returns 0, or -1 with err set. Any thread, at start-up. */
int rd_session_group(const char *group, gid_t *gid, char *err, size_t errlen);

/* Takes ownership of an accepted connection. */
void rd_session_accept(rd_front *f, int fd);

/* Queues msg for the peer. A peer that cannot take it is closed on the next loop turn. */
void rd_session_send(rd_session *s, const rd_msg *msg);

/* Sends msg with fds[0..nfds) attached (SCM_RIGHTS, 1 or 2 of them). Returns RINGD_OK, or the
 * failure after scheduling the close. */
rd_status rd_session_send_fds(rd_session *s, const rd_msg *msg, const int *fds, int nfds);

/* The front's answers to the engine's news for a client (rd_client_events). */
extern const rd_client_events rd_session_client_events;

/* Logs why, sends Error{status, why} best-effort and closes the session on the next loop turn. */
void rd_session_close(rd_session *s, rd_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Takes the frames waiting in every active session's control queue (a bounded number each) and
 * dispatches them. Returns how many were taken. */
int rd_session_poll_queues(rd_front *f);

/* The loop is about to sleep: tells every active client to Poke the socket for its next
 * message. Returns 0 when a frame arrived meanwhile (then nothing is announced). */
int rd_session_prepare_sleep(rd_front *f);

/* The loop woke up: withdraws the announcement. */
void rd_session_wake(rd_front *f);

/* Tears down every session at once (daemon shutdown). */
void rd_session_free_all(rd_front *f);

#endif
