/* Blocking connection to the daemon for libringd and ringctl: connect, send and receive frames
 * with deadlines, receive a passed fd. */
#ifndef RD_CONN_H
#define RD_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "ringd.h"

typedef struct {
    int fd;
    uint8_t *buf; /* received bytes not yet decoded: buf[0..len) */
    size_t len, cap;
    int passed_fd[2]; /* fds that arrived with SCM_RIGHTS, in order (the arena's, then the
                         device arena's), or -1; more are closed */
    uint32_t max_frame;
} rd_conn;

/* Connects to the Unix socket at path. Returns RINGD_OK or RINGD_E_CONNECT with err set. */
ringd_result_t rd_conn_open(rd_conn *c, const char *path, char *err, size_t errlen);

void rd_conn_close(rd_conn *c);

/* Sends one frame. Returns RINGD_OK or RINGD_E_CLOSED with err set. */
ringd_result_t rd_conn_send(rd_conn *c, const rd_msg *msg, char *err, size_t errlen);

/* Receives one message, waiting at most timeout_ms (< 0: forever; 0: only what is already
 * there). Returns RINGD_OK with *msg owned by the caller (rd_frame_free), RINGD_E_TIMEOUT,
 * RINGD_E_CLOSED or RINGD_E_PROTOCOL with err set. */
ringd_result_t rd_conn_recv(rd_conn *c, int timeout_ms, rd_msg **msg, char *err, size_t errlen);

/* One question: connects to path, sends m and receives the answer within timeout_ms into *reply
 * (owned by the caller: rd_frame_free; it may be an Error). Returns RINGD_OK, or a failure with
 * err set naming path. */
ringd_result_t rd_conn_ask(const char *path, const rd_msg *m, int timeout_ms, rd_msg **reply,
                           char *err, size_t errlen);

/* Milliseconds, and microseconds, on the monotonic clock (the daemon's too: one kernel). */
int64_t rd_now_ms(void);
int64_t rd_now_us(void);

#endif
