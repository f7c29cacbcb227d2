/* ringd-train: a data-parallel training loop, written as a user of ringd would write one; the
 * end-to-end example of elastic membership.
 *
 * Linear regression on generated data. The global batch of step s is samples s*B .. s*B+B-1 and
 * rank r of n takes the samples i with i % n == r, so a step's work does not depend on how many
 * ranks share it. Each rank rounds its samples' gradients to fixed point and the ranks sum them
 * as i64, which is exact in any order: every rank applies the same update, so the parameters stay
 * bitwise equal everywhere, and the checksum after step s is the same for any size and any
 * history of membership changes (a one-rank run gives the reference).
 *
 * The state is {step, params}, committed after every step. On RINGD_E_MEMBERSHIP, or when a
 * step's gradient was summed in another generation than the one its shards were cut for, a rank
 * restores the committed state and re-synchronises: the ranks agree on the most advanced step
 * and the lowest rank holding it ("sync.<generation>.step"), which broadcasts its state
 * ("sync.<generation>"); a newcomer does the same right after ringd_open and so receives the
 * model. Rank 0 alone would not do: a restarted node may sort first in the ring, and its fresh
 * process would hand everyone step 0.
 *
 * Prints one line per step, `rank R size N gen G step S loss L checksum C` (C: FNV-1a of the
 * parameters' bytes), notes on re-synchronisation to stderr; exits 0 after --steps steps. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "elastic.h"
#include "ringd.h"

/* Gradients are summed in units of 2^-FIXED_BITS; a per-sample term beyond TERM_LIMIT means the
 * model diverged (and a batch of them could overflow the i64 sum). */
#define FIXED_BITS 24
#define TERM_LIMIT 0x1p38
/* How long a rank keeps retrying a re-synchronisation that fails with RINGD_E_MEMBERSHIP. */
#define RESYNC_LIMIT_MS 60000

typedef struct {
    uint64_t steps, dim, batch, seed, sleep_ms;
    double lr;
    ringd_options_t ro;
} train_opts;

typedef struct {
    uint64_t step;
    double params[]; /* dim of them */
} train_state;

/* Uniform in [-1, 1). */
static double unit(uint64_t h)
{
    return (double)(h >> 11) * 0x1p-52 - 1.0;
}

/* This rank's share of the step's gradient and loss, summed in fixed point: g[0..dim) the
 * gradient of the mean squared error times the batch size, g[dim] the loss times the batch size.
 * Returns 0, or -1 when a term is out of range (the model diverged). */
static int local_gradient(const train_opts *o, const train_state *st, int n, int me, int64_t *g)
{
    size_t d = (size_t)o->dim;
    memset(g, 0, (d + 1) * sizeof(*g));
    uint64_t first = st->step * o->batch, ranks = (uint64_t)n;
    uint64_t begin = first + ((uint64_t)me + ranks - first % ranks) % ranks;
    for (uint64_t i = begin; i < first + o->batch; i += ranks) {
        double pred = 0.0, y = 0.1 * unit(rb_mix64(o->seed, i, UINT64_MAX));
        for (size_t j = 0; j < d; j++) {
            double x = unit(rb_mix64(o->seed, i, j));
            pred += st->params[j] * x;
            y += unit(rb_mix64(o->seed, UINT64_MAX, j)) * x; /* the true weights */
        }
        double e = pred - y;
        for (size_t j = 0; j <= d; j++) {
            double t = j < d ? e * unit(rb_mix64(o->seed, i, j)) : 0.5 * e * e;
            t = ldexp(t, FIXED_BITS);
            if (!(fabs(t) < TERM_LIMIT))
                return -1;
            g[j] += llround(t);
        }
    }
    return 0;
}

/* FNV-1a of the parameters' bytes. */
static uint64_t checksum(const train_state *st, size_t dim)
{
    const unsigned char *p = (const unsigned char *)st->params;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < dim * sizeof(double); i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Brings every rank to the most advanced committed state (see the top of the file), starting from
 * *st = committed. Retries while the job keeps changing; on success *st and *committed both hold
 * the agreed state. Returns RINGD_OK or the error that stopped it, detail in ringd_errmsg(r). */
static ringd_result_t resync(ringd_t *r, train_state *st, train_state *committed, size_t bytes)
{
    int64_t deadline = rb_elastic_now_ms() + RESYNC_LIMIT_MS;
    for (;;) {
        char name[64];
        uint64_t gen = ringd_generation(r), step = 0;
        int root = 0;
        memcpy(st, committed, bytes);
        snprintf(name, sizeof(name), "sync.%" PRIu64 ".step", gen);
        ringd_result_t rc = rb_agree_step(r, name, st->step, &step, &root);
        if (rc == RINGD_OK) {
            snprintf(name, sizeof(name), "sync.%" PRIu64, gen);
            rc = ringd_broadcast(r, name, st, bytes, RINGD_U8, root);
        }
        if (rc == RINGD_OK && ringd_generation(r) == gen) {
            memcpy(committed, st, bytes);
            fprintf(stderr,
                    "ringd-train: rank %d of %d, generation %" PRIu64 ": at step %" PRIu64
                    ", state from rank %d\n",
                    ringd_rank(r), ringd_size(r), gen, st->step, root);
            return RINGD_OK;
        }
        if (rc != RINGD_OK && rc != RINGD_E_MEMBERSHIP)
            return rc;
        if (rb_elastic_now_ms() > deadline)
            return RINGD_E_MEMBERSHIP;
        /* Until the daemon names a new generation, a retry would fail the same way at once. */
        if (ringd_generation(r) == gen)
            rb_sleep_us(10000);
    }
}

/* Trains until the state's step reaches o->steps. Returns the exit status. */
static int train(const train_opts *o, ringd_t *r)
{
    size_t d = (size_t)o->dim, bytes = sizeof(train_state) + d * sizeof(double);
    train_state *st = calloc(1, bytes), *committed = calloc(1, bytes);
    int64_t *g = calloc(d + 1, sizeof(*g));
    const char *what = "re-synchronising";
    char name[64];
    int status = 1;
    if (st == NULL || committed == NULL || g == NULL) {
        fprintf(stderr, "ringd-train: out of memory\n");
        goto out;
    }
    ringd_result_t rc = resync(r, st, committed, bytes);
    while (rc == RINGD_OK && st->step < o->steps) {
        uint64_t gen = ringd_generation(r);
        if (local_gradient(o, st, ringd_size(r), ringd_rank(r), g) != 0) {
            fprintf(stderr, "ringd-train: step %" PRIu64 ": the model diverged: lower --lr\n",
                    st->step);
            goto out;
        }
        snprintf(name, sizeof(name), "grad.%" PRIu64, st->step);
        rc = ringd_allreduce(r, name, g, g, d + 1, RINGD_I64, RINGD_SUM);
        /* A sum that came back in a new generation may lack shards (a graceful leave carries
         * ops over to the remaining ranks): it is dropped like a failed one, and the step done
         * again at the new size. */
        int stale = rc == RINGD_OK && ringd_generation(r) != gen;
        if (rc == RINGD_E_MEMBERSHIP || stale) {
            fprintf(stderr, "ringd-train: rank %d: step %" PRIu64 ": %s; re-synchronising\n",
                    ringd_rank(r), st->step,
                    stale ? "the gradient was summed in a new generation" : ringd_errmsg(r));
            rc = resync(r, st, committed, bytes);
            continue;
        }
        if (rc != RINGD_OK) {
            what = name;
            break;
        }
        for (size_t j = 0; j < d; j++)
            st->params[j] -= o->lr * ldexp((double)g[j], -FIXED_BITS) / (double)o->batch;
        st->step++;
        memcpy(committed, st, bytes);
        printf("rank %d size %d gen %" PRIu64 " step %" PRIu64 " loss %.9g checksum %016" PRIx64
               "\n",
               ringd_rank(r), ringd_size(r), ringd_generation(r), st->step,
               ldexp((double)g[d], -FIXED_BITS) / (double)o->batch, checksum(st, d));
        fflush(stdout);
        rb_sleep_us((int64_t)o->sleep_ms * 1000);
    }
    if (rc != RINGD_OK)
        fprintf(stderr, "ringd-train: rank %d: %s: %s: %s\n", ringd_rank(r), what,
                ringd_strerror(rc), ringd_errmsg(r));
    else
        status = 0;
out:
    free(g);
    free(committed);
    free(st);
    return status;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ringd-train [--steps N] [--dim D] [--batch B] [--seed S] [--lr RATE]\n"
            "                   [--sleep-ms MS] [--socket PATH] [--job NAME] [--world N]\n"
            "                   [--local N] [--min-size N]\n"
            "  --steps N      steps to train; exit 0 once the state has done them (default 100)\n"
            "  --dim D        parameters of the model (default 16)\n"
            "  --batch B      samples per step over all ranks (default 256)\n"
            "  --seed S       seed of the generated data set (default 1)\n"
            "  --lr RATE      learning rate (default 0.5)\n"
            "  --sleep-ms MS  pause after every step, to leave time to kill things (default 0)\n"
            "  --socket PATH  ringd's socket (env RINGD_SOCKET)\n"
            "  --job NAME     the job, the same on every node (env RINGD_JOB)\n"
            "  --world N      ranks the job starts with, on all nodes (env RINGD_WORLD_SIZE)\n"
            "  --local N      ranks of the job on this node (env RINGD_LOCAL_SIZE)\n"
            "  --min-size N   the job goes on while it has N ranks (env RINGD_MIN_SIZE)\n"
            "output: one line per step, 'rank R size N gen G step S loss L checksum C'\n"
            "exit status: 0 trained --steps steps, 1 a ringd error or divergence, 2 usage\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"steps", required_argument, NULL, 's'},
        {"dim", required_argument, NULL, 'd'},
        {"batch", required_argument, NULL, 'b'},
        {"seed", required_argument, NULL, 'S'},
        {"lr", required_argument, NULL, 'l'},
        {"sleep-ms", required_argument, NULL, 'z'},
        {"socket", required_argument, NULL, 'k'},
        {"job", required_argument, NULL, 'j'},
        {"world", required_argument, NULL, 'W'},
        {"local", required_argument, NULL, 'L'},
        {"min-size", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    train_opts o = {
        .steps = 100, .dim = 16, .batch = 256, .seed = 1, .lr = 0.5, .ro = RINGD_OPTIONS_INIT};
    uint64_t v = 0;
    char *end;
    int c;
    for (int at = -1; (c = getopt_long(argc, argv, "h", longopts, &at)) != -1; at = -1) {
        int bad = 0;
        switch (c) {
        case 's': bad = rb_parse_u64(optarg, 0, UINT64_C(1) << 40, &o.steps); break;
        case 'd': bad = rb_parse_u64(optarg, 1, 1 << 16, &o.dim); break;
        case 'b': bad = rb_parse_u64(optarg, 1, 1 << 20, &o.batch); break;
        case 'S': bad = rb_parse_u64(optarg, 0, UINT64_MAX, &o.seed); break;
        case 'z': bad = rb_parse_u64(optarg, 0, 3600000, &o.sleep_ms); break;
        case 'l':
            o.lr = strtod(optarg, &end);
            bad = *end != '\0' || !(o.lr > 0.0 && o.lr < 1e6);
            break;
        case 'k': o.ro.socket_path = optarg; break;
        case 'j': o.ro.job = optarg; break;
        case 'W':
        case 'L':
        case 'm':
            bad = rb_parse_u64(optarg, 1, 1 << 30, &v);
            *(c == 'W' ? &o.ro.world_size : c == 'L' ? &o.ro.local_size : &o.ro.min_size) = (int)v;
            break;
        case 'h': usage(stdout); return 0;
        default: bad = 1;
        }
        if (bad) {
            if (at >= 0)
                fprintf(stderr, "ringd-train: bad value for --%s: %s\n", longopts[at].name, optarg);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }

    ringd_t *r = NULL;
    ringd_result_t rc = ringd_open(&o.ro, &r);
    if (rc != RINGD_OK) {
        fprintf(stderr, "ringd-train: ringd_open: %s: %s\n", ringd_strerror(rc), ringd_errmsg(r));
        ringd_close(r);
        return 1;
    }
    int status = train(&o, r);
    ringd_close(r);
    return status;
}
