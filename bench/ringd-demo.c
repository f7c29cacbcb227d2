/* ringd-demo: N client processes of one job run named collectives through the local ringd (and,
 * for a job spanning nodes, the ring of daemons), submitted in a different order on each rank, and
 * print what they got next to what they expected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "ringd.h"

#define COUNT 4

static void show_f32(char **p, size_t *left, const char *label, const float *got, const float *want,
                     size_t n)
{
    int w = snprintf(*p, *left, "  %-28s got [", label);
    for (size_t i = 0; i < n; i++)
        w += snprintf(*p + w, *left - (size_t)w, "%s%g", i ? " " : "", got[i]);
    w += snprintf(*p + w, *left - (size_t)w, "]  expected [");
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        w += snprintf(*p + w, *left - (size_t)w, "%s%g", i ? " " : "", want[i]);
        ok &= got[i] == want[i];
    }
    w += snprintf(*p + w, *left - (size_t)w, "]  %s\n", ok ? "ok" : "WRONG");
    *p += w;
    *left -= (size_t)w;
}

/* One rank: submits four collectives asynchronously in a rank-dependent order, waits, checks. */
static int rank_main(const char *job, int nprocs, int world)
{
    ringd_options_t o = RINGD_OPTIONS_INIT;
    ringd_t *r = NULL;
    o.job = job;
    o.local_size = nprocs;
    o.world_size = world;
    o.arena_size = 1 << 20;
    ringd_result_t rc = ringd_open(&o, &r);
    if (rc != RINGD_OK) {
        fprintf(stderr, "demo: ringd_open: %s: %s\n", ringd_strerror(rc), ringd_errmsg(r));
        ringd_close(r);
        return 1;
    }
    int me = ringd_rank(r), n = ringd_size(r);

    /* Zero-copy buffers in the arena, and one ordinary heap buffer the library stages. */
    float *grad = ringd_alloc(r, COUNT * sizeof(float));
    float *params = ringd_alloc(r, COUNT * sizeof(float));
    float *gathered = ringd_alloc(r, (size_t)n * 2 * sizeof(float));
    float mine[2] = {(float)me, (float)(10 * me)};
    float *loss = malloc(sizeof(float));
    for (int i = 0; i < COUNT; i++) {
        grad[i] = (float)((me + 1) * (i + 1));
        params[i] = me == 1 ? (float)(100 + i) : -1.0f;
    }
    *loss = 0.5f * (float)(me + 1);

    ringd_request_t *req[4];
    const int orders[3][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}};
    for (int k = 0; k < 4; k++) {
        switch (orders[me % 3][k]) {
        case 0:
            rc = ringd_allreduce_async(r, "grad.w", grad, grad, COUNT, RINGD_F32, RINGD_SUM,
                                       &req[0]);
            break;
        case 1:
            rc = ringd_broadcast_async(r, "params", params, COUNT, RINGD_F32, 1, &req[1]);
            break;
        case 2: rc = ringd_allgather_async(r, "ids", mine, gathered, 2, RINGD_F32, &req[2]); break;
        case 3:
            rc = ringd_allreduce_async(r, "loss", loss, loss, 1, RINGD_F32, RINGD_AVG, &req[3]);
            break;
        }
        if (rc != RINGD_OK) {
            fprintf(stderr, "demo rank %d: submit: %s\n", me, ringd_errmsg(r));
            return 1;
        }
    }
    for (int k = 0; k < 4; k++) {
        if ((rc = ringd_wait(req[k])) != RINGD_OK) {
            fprintf(stderr, "demo rank %d: %s\n", me, ringd_errmsg(r));
            return 1;
        }
    }

    float want_grad[COUNT], want_params[COUNT], want_gathered[64], want_loss = 0.0f;
    for (int i = 0; i < COUNT; i++) {
        want_grad[i] = 0.0f;
        for (int k = 0; k < n; k++)
            want_grad[i] += (float)((k + 1) * (i + 1));
        want_params[i] = (float)(100 + i);
    }
    for (int k = 0; k < n; k++) {
        want_gathered[2 * k] = (float)k;
        want_gathered[2 * k + 1] = (float)(10 * k);
        want_loss += 0.5f * (float)(k + 1);
    }
    want_loss /= (float)n;

    char out[2048], *p = out;
    size_t left = sizeof(out);
    int w = snprintf(p, left, "rank %d of %d (local rank %d, generation %llu, pid %d):\n", me, n,
                     ringd_local_rank(r), (unsigned long long)ringd_generation(r), (int)getpid());
    p += w;
    left -= (size_t)w;
    show_f32(&p, &left, "allreduce sum 'grad.w'", grad, want_grad, COUNT);
    show_f32(&p, &left, "broadcast root 1 'params'", params, want_params, COUNT);
    show_f32(&p, &left, "allgather 'ids'", gathered, want_gathered, (size_t)(2 * n));
    show_f32(&p, &left, "allreduce avg 'loss' (heap)", loss, &want_loss, 1);
    int bad = strstr(out, "WRONG") != NULL;

    /* Print in rank order: each rank waits for the barrier of the rank before it. */
    for (int k = 0; k < n; k++) {
        char name[32];
        if (k == me) {
            fputs(out, stdout);
            fflush(stdout);
        }
        snprintf(name, sizeof(name), "print.%d", k);
        if (ringd_barrier(r, name) != RINGD_OK)
            bad = 1;
    }
    /* While every client is still attached, show the daemon's view (scripts/demo passes the
     * ringctl command line). */
    const char *status_cmd = getenv("RINGD_DEMO_STATUS");
    if (me == 0 && status_cmd != NULL) {
        printf("\n$ %s\n", status_cmd);
        fflush(stdout);
        if (system(status_cmd) != 0)
            bad = 1;
    }
    if (ringd_barrier(r, "done") != RINGD_OK)
        bad = 1;
    free(loss);
    ringd_close(r);
    return bad;
}

int main(int argc, char **argv)
{
    int nprocs = argc > 1 ? atoi(argv[1]) : 3;
    int world = argc > 2 ? atoi(argv[2]) : nprocs;
    char job[64];
    if (nprocs < 1 || nprocs > 16 || world < nprocs || world > 64 || world < 2 || argc > 4) {
        fprintf(stderr, "usage: ringd-demo [NPROCS 1..16 [WORLD [JOB]]]   (socket from "
                        "RINGD_SOCKET)\n  WORLD: ranks of the job on all nodes (default NPROCS); "
                        "run one ringd-demo per node with the same JOB\n");
        return 2;
    }
    if (argc > 3)
        snprintf(job, sizeof(job), "%s", argv[3]);
    else
        snprintf(job, sizeof(job), "demo.%d", (int)getpid());
    printf("ringd-demo: job '%s', %d client processes here, %d ranks in all\n", job, nprocs, world);
    fflush(stdout);
    pid_t kids[16];
    for (int i = 0; i < nprocs; i++)
        if ((kids[i] = fork()) == 0)
            _exit(rank_main(job, nprocs, world));
    int status = 0;
    for (int i = 0; i < nprocs; i++) {
        int ws;
        if (kids[i] < 0 || waitpid(kids[i], &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws))
            status = 1;
    }
    printf("ringd-demo: %s\n", status ? "FAILED" : "all results as expected");
    return status;
}
