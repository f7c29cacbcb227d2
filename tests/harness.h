/* Test harness: real ringd processes in temporary directories, raw protocol connections, and
 * forked client processes, every wait bounded. */
#ifndef TH_HARNESS_H
#define TH_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"

/* CLOCK_MONOTONIC milliseconds, and a sleep of ms milliseconds. */
int64_t th_now_ms(void);
void th_sleep_ms(int ms);

typedef struct {
    pid_t pid;
    char dir[128];
    char sock[192];
    char log[192];
} th_daemon;

/* Starts $RINGD_BIN with --socket in a new temporary directory plus extra (NULL-terminated, may
 * be NULL), logging to a file there; returns 0 once the socket answers a status request (10 s at
 * most), -1 otherwise. The daemon dies with the test process. */
int th_daemon_start(th_daemon *d, const char *const *extra);

/* Starts another daemon on d's socket (for conflict tests); returns its exit status, waiting at
 * most timeout_ms, or -1 if it was still running (it is then killed). Its stderr goes to log. */
int th_daemon_run_again(const th_daemon *d, const char *log, int timeout_ms);

/* SIGTERM, then waits up to 10 s (SIGKILL after). Returns the exit status (0: clean shutdown,
 * which under the sanitizers also means no leaks), or -1 if it had to be killed or crashed.
 * Removes the temporary directory. */
int th_daemon_stop(th_daemon *d);

/* Fixture teardown: stops a daemon a failed test left running, without judging it. */
void th_daemon_teardown(th_daemon *d);

/* The end of every test, in its body where failures count: the daemon must still run and shut
 * down cleanly, which under the sanitizers also means it leaked nothing. */
void th_daemon_finish(th_daemon *d);

/* 1 while the daemon process runs. */
int th_daemon_alive(const th_daemon *d);

/* The daemon's log so far (malloc'd, NUL-terminated). */
char *th_daemon_log(const th_daemon *d);

/* Forks argv (execvp) with stdout and stderr appended to log; the child dies with the test
 * process. Returns its pid, or -1. */
pid_t th_spawn(const char *log, const char *const *argv);

/* Waits for pid up to timeout_ms; returns its wait status, -1 while it still runs, -2 when it
 * is not a child. */
int th_wait_pid(pid_t pid, int timeout_ms);

/* The daemon's StatusReply (a Msg: rd_frame_free it) within 2 s, or NULL. */
rd_msg *th_status(const char *sock);

/* 1 when a status request on the socket gets a StatusReply within 2 s. */
int th_status_ok(const char *sock);

/* Collectives the clients of job have outstanding, from a status request; -1 on failure. */
int th_job_in_flight(const char *sock, const char *job);

/* Raw connection to sock; -1 on failure. */
int th_connect(const char *sock);

/* Writes all of buf; 0 or -1. */
int th_write(int fd, const void *buf, size_t len);

/* Sends one framed message; 0 or -1. */
int th_send(int fd, const rd_msg *m);

/* Receives one message within timeout_ms, closing any passed fd unless fd_out is given.
 * Returns NULL on timeout, EOF or a bad frame. */
rd_msg *th_recv(int fd, int timeout_ms, int *fd_out);

/* 1 when the peer closes fd within timeout_ms (after any pending bytes). */
int th_wait_eof(int fd, int timeout_ms);

struct ringd;

/* A libringd session of job on sock with n local ranks (world n), op_timeout_ms for every wait
 * and arena_size bytes (0: the daemon's default). Returns NULL after printing why. */
struct ringd *th_open(const char *sock, const char *job, int n, size_t arena_size,
                      int op_timeout_ms);

/* The same for a job of world ranks, local of them on this daemon. */
struct ringd *th_open_world(const char *sock, const char *job, int world, int local,
                            size_t arena_size, int op_timeout_ms);

/* Runs fn(i, arg) in n forked processes; returns 0 when all exit 0 within timeout_ms, else the
 * first failing index + 1 (stragglers are killed). */
int th_run(int n, int (*fn)(int i, void *arg), void *arg, int timeout_ms);

#endif
