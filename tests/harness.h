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

/* Waits until cond, an expression evaluated again every every_ms, holds, for at most timeout_ms.
 * Evaluates to 1 when it held, 0 at the deadline. TH_WAIT looks every 5 ms; a condition that asks
 * a daemon (a status request, which its debug log records) had better look less often. */
#define TH_WAIT_EVERY(cond, timeout_ms, every_ms)                                                  \
    __extension__({                                                                                \
        int64_t th_end_ = th_now_ms() + (timeout_ms);                                              \
        int th_ok_;                                                                                \
        while (!(th_ok_ = !!(cond)) && th_now_ms() < th_end_)                                      \
            th_sleep_ms(every_ms);                                                                 \
        th_ok_;                                                                                    \
    })
#define TH_WAIT(cond, timeout_ms) TH_WAIT_EVERY(cond, timeout_ms, 5)

typedef struct {
    pid_t pid; /* 0 once stopped or killed */
    char dir[128];
    char sock[192];
    char log[192];
    char args[1024]; /* the extra arguments it was started with, each NUL-terminated */
    int nargs;
} th_daemon;

/* Starts $RINGD_BIN with --socket in a new temporary directory plus extra (NULL-terminated, may
 * be NULL), logging to a file there; returns 0 once the socket answers a status request (10 s at
 * most), -1 otherwise. The daemon dies with the test process. */
int th_daemon_start(th_daemon *d, const char *const *extra);

/* Starts another daemon on d's socket (for conflict tests); returns its exit status, waiting at
 * most timeout_ms, or -1 if it was still running (it is then killed). Its stderr goes to log. */
int th_daemon_run_again(const th_daemon *d, const char *log, int timeout_ms);

/* SIGTERM (and SIGCONT, in case it was stopped), then waits up to 10 s (SIGKILL after). Returns
 * the exit status (0: clean shutdown, which under the sanitizers also means no leaks), or -1 if it
 * had to be killed, crashed or was not running. Removes the temporary directory. */
int th_daemon_stop(th_daemon *d);

/* Fixture teardown: stops a daemon a failed test left running, without judging it, and removes
 * the directory of one that was killed. */
void th_daemon_teardown(th_daemon *d);

/* Sends sig (SIGSTOP, SIGCONT, SIGTERM, ...) to the daemon; 0, or -1 when it is not running. */
int th_daemon_signal(const th_daemon *d, int sig);

/* SIGKILL, as a crash or a lost host: reaps it and keeps its directory (log, socket path) for
 * th_daemon_restart. No-op when it is not running. */
void th_daemon_kill(th_daemon *d);

/* Waits up to timeout_ms for the daemon to exit by itself (after a SIGTERM, say). Returns its exit
 * code, -1 when a signal ended it, -2 when it still runs at the deadline (it is left running).
 * Once it exited the log is printed unless the code is 0; the directory stays. */
int th_daemon_wait_exit(th_daemon *d, int timeout_ms);

/* Starts a daemon that was killed or exited again, in the same directory with the same arguments
 * (so the same socket path and, for th_ring, node name), its log appended to the old one. Returns
 * 0 once it answers a status request (10 s at most), -1 otherwise or when it still runs. */
int th_daemon_restart(th_daemon *d);

/* The end of every test, in its body where failures count: the daemon must still run and shut
 * down cleanly, which under the sanitizers also means it leaked nothing. */
void th_daemon_finish(th_daemon *d);

/* 1 while the daemon process runs. */
int th_daemon_alive(const th_daemon *d);

/* The daemon's log so far (malloc'd, NUL-terminated). */
char *th_daemon_log(const th_daemon *d);

/* A whole file as text (malloc'd, NUL-terminated), or NULL when it cannot be read. */
char *th_file_text(const char *path);

/* Removes path and, when it is a directory, everything under it (not following symbolic links).
 * Returns 0, or -1 when something could not be removed. NULL or "" is a no-op. */
int th_rm_rf(const char *path);

/* Forks argv (execvp) with stdout and stderr appended to log; the child dies with the test
 * process. Returns its pid, or -1. */
pid_t th_spawn(const char *log, const char *const *argv);

/* th_spawn with the environment envp ("NAME=value", NULL-terminated) instead of the test's;
 * argv[0] is still looked up in the test's PATH. envp NULL: the test's environment. */
pid_t th_spawn_env(const char *log, const char *const *argv, const char *const *envp);

/* Waits for pid up to timeout_ms; returns its wait status, -1 while it still runs, -2 when it
 * is not a child. */
int th_wait_pid(pid_t pid, int timeout_ms);

/* Runs argv (NULL-terminated) with stdout and stderr together into *out (malloc'd, NUL-terminated;
 * the caller frees it, also on failure), waiting at most timeout_ms. Returns its exit code, or -1
 * when a signal ended it or it ran past the deadline (it is then killed). */
int th_command(char **out, int timeout_ms, const char *const *argv);

/* th_command with the environment envp (see th_spawn_env). */
int th_command_env(char **out, int timeout_ms, const char *const *argv, const char *const *envp);

/* th_command for "$RINGCTL_BIN --socket sock" and the further arguments (NULL-terminated). */
int th_ringctl(const char *sock, char **out, int timeout_ms, ...) __attribute__((sentinel));

/* Runs fn(arg) with the calling thread in network namespace ns (a name under /run/netns);
 * processes forked meanwhile stay there. Returns fn's result, or -1 when ns cannot be entered. */
int th_in_netns(const char *ns, int (*fn)(void *arg), void *arg);

/* In a Criterion test: unless cond, calls evidence() (which prints what the test saw: logs,
 * client events) and fails the test with the message. */
#define TH_MUST(evidence, cond, ...)                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            evidence();                                                                            \
            cr_assert_fail(__VA_ARGS__);                                                           \
        }                                                                                          \
    } while (0)

/* One step line of bench/ringd-train: "rank R size N gen G step S loss L checksum C". */
typedef struct {
    int rank, size, step, pod; /* pod: the caller's, set to tag for every line */
    uint64_t gen;
    char checksum[64];
} th_train_line;

/* Parses the step lines of a ringd-train log into out (at most max), each tagged with tag;
 * returns how many, 0 when the log does not exist yet, or -1 after printing a malformed one. */
int th_train_log(const char *log, int tag, th_train_line *out, int max);

/* Runs a shell command (printf-style, up to 1 KiB); returns its exit status, or -1. */
int th_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The daemon's StatusReply (a Msg: rd_frame_free it) within 2 s, or NULL. */
rd_msg *th_status(const char *sock);

/* 1 when a status request on the socket gets a StatusReply within 2 s. */
int th_status_ok(const char *sock);

/* Collectives the clients of job have outstanding, from a status request; -1 on failure. */
int th_job_in_flight(const char *sock, const char *job);

/* A daemon's view of one job (and of itself), from one status request. */
typedef struct {
    int found;           /* the daemon knows the job */
    int redis_connected; /* StatusReply.redis_connected */
    int draining;        /* StatusReply.draining */
    uint64_t generation; /* JobInfo.generation */
    uint32_t world_size, local_size, min_size, clients;
    uint64_t ops_completed, ops_failed;
    int has_ring; /* JobInfo.ring is set (a job spanning nodes) */
    uint64_t ring_generation;
    char ring_state[16]; /* "waiting", "connecting", "up", ... */
    int nmembers;
    char members[128]; /* the members' node names in ring order, comma-separated: "n0,n1" */
    int nstalls;
    char stall_name[64]; /* the first stall's tensor, and its missing ranks and nodes */
    char stall_missing[128];
    uint64_t stall_age_ms;
} th_jobinfo;

/* Fills *info from one status request on sock (info->found says whether job was there).
 * Returns 0, or -1 when the daemon did not answer within 2 s. */
int th_job_info(const char *sock, const char *job, th_jobinfo *info);

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

/* In a client process of th_run: returns 20 from the enclosing function when call does not
 * return RINGD_OK, after printing the call, its result, the rank and ringd_errmsg(r). */
#define TH_CHECK_OK(r, call)                                                                       \
    do {                                                                                           \
        ringd_result_t rc_ = (call);                                                               \
        if (rc_ != RINGD_OK) {                                                                     \
            fprintf(stderr, "%s:%d: rank %d: %s: %s: %s\n", __FILE__, __LINE__, ringd_rank(r),     \
                    #call, ringd_strerror(rc_), ringd_errmsg(r));                                  \
            return 20;                                                                             \
        }                                                                                          \
    } while (0)

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

/* In a process of th_run(n, ...): closes r once all n of them are here, done with their
 * collectives (30 s at most). A node whose clients all left would end the job's ring under
 * another node's last op still in flight (its last Ready on the way, or its data: recursive
 * doubling's folding nodes finish an exchange after the others), and a node that loses one of
 * several clients breaks the ring; either way the others' ranks would hear a membership
 * change. */
void th_close_together(struct ringd *r, int n);

/* ---- a client looping allreduces, for membership changes ----
 *
 * th_loop_start forks a client process that opens a session on sock (job, world, local, min_size
 * through RINGD_MIN_SIZE) and loops, until th_loop_stop:
 *  - a synchronising broadcast "sync.g<generation>" of its op counter from rank 0, first after
 *    the open and again after every failed call and every call that brought a new generation (as
 *    an elastic training loop re-synchronises; a failed sync is retried after 10 ms);
 *  - allreduces "loop.<counter>" (SUM of count int32s) whose results it checks exactly: element 0
 *    is rank + 1 on every rank (checked when the generation did not change during the call),
 *    the others the same value on every rank, size times it after the reduction (where the
 *    generation changed, the size before or after the call).
 * It counts the calls and keeps an event for every call that failed (a failure just like the
 * previous event only counts in its repeats), every sync, and every success whose rank, size or
 * generation differ from the previous call's or that follows a failure: enough to see when and
 * how a membership change reached it. The th_loop lives in shared memory: the test reads it while
 * the client runs. */

#define TH_LOOP_EVENTS 128

typedef struct {
    int64_t t0_ms, t1_ms; /* th_now_ms() when the call began and returned */
    int repeats;          /* failures: how many more calls right after it failed the same way */
    int64_t last_t1_ms;   /* when the last of those returned */
    int seq;              /* the op counter: the allreduce's name, or what the sync adopted */
    int sync;             /* 1: the synchronising broadcast; 0: an allreduce */
    int rc;               /* its ringd_result_t, or TH_LOOP_WRONG: a wrong result */
    int rank, size, local_rank, local_size; /* the session's after the call */
    uint64_t generation;
    char msg[224]; /* ringd_errmsg after a failure, or what was wrong */
} th_loop_event;

#define TH_LOOP_WRONG (-1)

enum { TH_LOOP_STARTING, TH_LOOP_OPEN, TH_LOOP_DONE, TH_LOOP_OPEN_FAILED, TH_LOOP_KILLED };

typedef struct {
    /* settings: th_loop_alloc fills defaults; change them before th_loop_start */
    char sock[192];
    char job[96];
    int world, local;    /* the job's world_size, this client's local_size (default 1, 1) */
    int min_size;        /* 0: RINGD_MIN_SIZE left unset */
    int open_timeout_ms; /* default 20000 */
    int op_timeout_ms;   /* default 20000 */
    size_t count;        /* int32 elements per allreduce (default 65536: they take the ring) */
    int pause_ms;        /* between calls (default 0) */
    /* written by the client process */
    pid_t pid;          /* 0 before th_loop_start and after it ended */
    volatile int state; /* TH_LOOP_* */
    volatile int opened_rank, opened_size;
    volatile uint64_t opened_generation;
    volatile int ok;     /* allreduces that succeeded with the right result */
    volatile int failed; /* calls (allreduce or sync) that failed */
    volatile int wrong;  /* allreduces that succeeded with a wrong result */
    volatile int rank, size;
    volatile uint64_t generation; /* the session's after the last call */
    volatile int64_t last_ok_ms;  /* when the last allreduce succeeded */
    volatile int nevents, dropped;
    th_loop_event ev[TH_LOOP_EVENTS];
    char open_msg[224]; /* why ringd_open failed */
    /* written by the test */
    volatile int stop;
} th_loop;

/* n zeroed loops in shared memory with the defaults set; NULL on failure. */
th_loop *th_loop_alloc(int n);

/* Forks the client. Returns 0, or -1 when fork failed. */
int th_loop_start(th_loop *l);

/* Waits up to timeout_ms for ringd_open; 1 when it succeeded, 0 otherwise. */
int th_loop_wait_open(const th_loop *l, int timeout_ms);

/* Asks the client to close its session and exit, waiting up to timeout_ms for the call it is in
 * to end. Returns 0 when it exited 0, else -1 (it is then killed). 0 when it is not running. */
int th_loop_stop(th_loop *l, int timeout_ms);

/* SIGKILL: the training process crashes. */
void th_loop_kill(th_loop *l);

/* Kills whatever still runs and unmaps the n loops; NULL is fine. For fixture teardown. */
void th_loop_free(th_loop *l, int n);

/* The number of events so far; events below it are complete and stay as they are. */
int th_loop_nevents(const th_loop *l);

/* The index of the first event at or after index from that failed (rc != RINGD_OK) or, for
 * th_loop_next_ok, succeeded, and returned at or after t_ms; -1 when there is none yet. */
int th_loop_next_failure(const th_loop *l, int from, int64_t t_ms);
int th_loop_next_ok(const th_loop *l, int from, int64_t t_ms);

/* Prints the loop's counters and events to stderr, each line starting with label. t0_ms: times
 * are printed relative to it. */
void th_loop_print(const th_loop *l, const char *label, int64_t t0_ms);

#endif
