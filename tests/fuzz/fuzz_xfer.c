/* Fuzzes the ring data plane's receive path: a real rd_xfer (its own thread, position 0 of a
 * two-node ring) runs one collective while the input arrives as everything the previous node
 * sends: data-segment headers and payloads. */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "counters.h"
#include "log.h"
#include "xfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The ring every input runs in; tests/fuzz/capture.c records seeds from the same one. */
#define FUZZ_XFER_GENERATION 7
#define FUZZ_XFER_SEGMENT 65536
#define FUZZ_XFER_LIMIT_MS 10000

static struct event_base *base;
static int tasks_done;

static void on_done(void *arg, rd_xfer_task *t)
{
    (void)arg;
    if (t->status == RINGD_OK && t->message[0] != '\0' && memchr(t->message, '\0', 320) == NULL)
        abort();
    tasks_done++;
}

/* Reads and drops what the node sends to its next neighbour, so it never blocks on it. */
static void drain(int fd)
{
    uint8_t sink[65536];
    while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
        ;
}

/* The first byte picks the collective and its size (as capture.c does); the rest is the previous
 * node's byte stream, after which it hangs up. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (base == NULL) {
        signal(SIGPIPE, SIG_IGN);
        rd_log_set_level(RD_LOG_ERROR);
        if ((base = event_base_new()) == NULL)
            abort();
    }
    if (size < 1)
        return 0;
    int to_next[2], from_prev[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, to_next) != 0)
        return 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, from_prev) != 0) {
        close(to_next[0]);
        close(to_next[1]);
        return 0;
    }
    uint32_t local[2] = {1, 1};
    rd_xfer_config cfg = {
        .nnodes = 2,
        .position = 0,
        .local_sizes = local,
        .generation = FUZZ_XFER_GENERATION,
        .segment_size = FUZZ_XFER_SEGMENT,
        .conns = 1,
        .send_fds = &to_next[0],
        .recv_fds = &from_prev[0],
        .timeout_ms = FUZZ_XFER_LIMIT_MS,
        .poll_us = 0,
        .next_node = "next",
        .prev_node = "prev",
    };
    char err[256];
    rd_xfer *x = rd_xfer_new(base, &cfg, on_done, NULL, err, sizeof(err));
    if (x == NULL) {
        fprintf(stderr, "fuzz_xfer: %s\n", err);
        abort();
    }

    uint64_t count = 1 + (uint64_t)(data[0] >> 2) * 997; /* up to 63 segments */
    uint8_t *in = calloc(count, 4), *out = calloc(count * 2, 4);
    const uint8_t *ins[1] = {in};
    uint8_t *outs[1] = {out};
    rd_xfer_member m = {.in = ins, .out = outs, .count = count};
    rd_xfer_task t;
    memset(&t, 0, sizeof(t));
    t.backend = rd_backend_cpu();
    t.coll = (rd_coll)(data[0] % 3); /* allreduce, broadcast, allgather */
    t.dtype = RD_DT_I32;
    t.redop = RD_OP_SUM;
    t.args = (rd_reduce_args)RD_REDUCE_ARGS_INIT;
    t.root = 1;
    t.nmembers = 1;
    t.members = &m;
    tasks_done = 0;
    rd_xfer_submit(x, &t);

    const uint8_t *p = data + 1;
    size_t left = size - 1;
    int64_t until = rd_now_ms() + 2 * FUZZ_XFER_LIMIT_MS;
    int hung_up = 0;
    while (tasks_done == 0) {
        if (rd_now_ms() > until) {
            fprintf(stderr, "fuzz_xfer: the task did not end after the previous node hung up\n");
            abort();
        }
        if (left > 0) {
            ssize_t w = send(from_prev[1], p, left, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0) {
                p += w;
                left -= (size_t)w;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                left = 0;
            }
        }
        if (left == 0 && !hung_up) {
            shutdown(from_prev[1], SHUT_WR);
            hung_up = 1;
        }
        drain(to_next[1]);
        struct timeval tv = {0, 200};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    rd_xfer_free(x, RINGD_E_MEMBERSHIP, "fuzz input over");
    close(to_next[1]);
    close(from_prev[1]);
    free(in);
    free(out);
    return 0;
}
