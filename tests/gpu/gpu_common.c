/* What the GPU tests share (gpu_common.h). */
#include "gpu_common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_dev.h"
#include "ringd.h"

double gpu_input_value(int k, size_t i, rd_dtype dt)
{
    long v = (long)((i * 7 + (size_t)k * 13) % 23) - 11;
    if (dt == RD_DT_U8)
        return (double)(v + 11);
    return rd_dtype_is_float(dt) ? v * 0.25 : (double)v;
}

int gpu_devices(char *why, size_t len)
{
    int p[2];
    why[0] = '\0';
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        char w[256] = "";
        int n = rd_cuda_load(w, sizeof(w));
        if (n > 0 && rd_cuda_check(0, w, sizeof(w)) != 0)
            n = 0;
        if (write(p[1], w, strlen(w)) < 0)
            _exit(255);
        _exit(n < 0 ? 255 : n > 250 ? 250 : n);
    }
    close(p[1]);
    ssize_t got = read(p[0], why, len - 1);
    why[got > 0 ? got : 0] = '\0';
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) != 255 ? WEXITSTATUS(status) : -1;
}

/* Element e of rank k's reducescatter input (x its index in the whole input): small integers,
 * exact in f32 and i32 in any sum of a few. */
static int32_t rs_value(int k, uint64_t x)
{
    return (int32_t)((k + 1) * 10 + (int)(x % 97));
}

/* Rank k's count in the unequal cases: rank 1's block lies partly over itself in MPI's in-place
 * form (its offset, 64000, below its count), rank 2's is 0. */
static size_t uneven_count(int k)
{
    return k == 2 ? 0 : (size_t)64 * (1000 + 4000 * (size_t)k) + (size_t)k;
}

/* The alltoall's matrix: what rank k sends rank l (some 0). */
static size_t a2a_count(int k, int l)
{
    return (k + l) % 3 == 1
               ? 0
               : (size_t)20000 * (size_t)(k + 1) + (size_t)1000 * (size_t)l + (size_t)k;
}

static int32_t a2a_value(int k, int l, size_t e)
{
    return k * 1000000 + l * 10000 + (int32_t)(e % 9973);
}

/* Fails with code after printing what, the result and the session's message. */
static int sharded_fail(ringd_t *r, const char *what, ringd_result_t rc, int code)
{
    fprintf(stderr, "rank %d: %s: %s: %s\n", ringd_rank(r), what, ringd_strerror(rc),
            ringd_errmsg(r));
    return code;
}

int gpu_sharded_cases(ringd_t *r, const char *tag)
{
    char why[256], name[96];
    int n = ringd_size(r), me = ringd_rank(r), dev = ringd_device(r);
    size_t counts[64], total = 0, own = 0, sc[64], rc_[64], sent = 0, got = 0;
    if (n > 64)
        return 50;
    for (int k = 0; k < n; k++) {
        counts[k] = uneven_count(k);
        own += k < me ? counts[k] : 0;
        total += counts[k];
        sc[k] = a2a_count(me, k);
        rc_[k] = a2a_count(k, me);
        sent += sc[k];
        got += rc_[k];
    }
    size_t most = total > sent ? total : sent;
    most = most > got ? most : got;
    int32_t *h = malloc(most * 4), *back = malloc(most * 4);
    uint8_t *d = ringd_alloc_device(r, most * 4), *o = ringd_alloc_device(r, most * 4);
    if (h == NULL || back == NULL || d == NULL || o == NULL) {
        fprintf(stderr, "rank %d: no room for %zu bytes (host or device arena)\n", me, most * 4);
        return 51;
    }
    ringd_result_t rc;
    int code = 0;

    /* reducescatterv of i32 (sum), apart then in place where the block lies (NCCL's form) */
    for (int form = 0; form < 2 && code == 0; form++) {
        for (size_t x = 0; x < total; x++)
            h[x] = rs_value(me, x);
        snprintf(name, sizeof(name), "%s.rs.%d", tag, form);
        uint8_t *out = form == 0 ? o : d + own * 4;
        if (rd_cuda_copy(dev, d, h, total * 4, why, sizeof(why)) != 0)
            return 52;
        rc = ringd_reducescatterv(r, name, d, out, counts, RINGD_I32, RINGD_SUM, 1.0, 1.0);
        if (rc != RINGD_OK)
            return sharded_fail(r, name, rc, 53);
        if (counts[me] > 0 && rd_cuda_copy(dev, back, out, counts[me] * 4, why, sizeof(why)) != 0)
            return 54;
        for (size_t e = 0; e < counts[me] && code == 0; e++) {
            int32_t w = 0;
            for (int k = 0; k < n; k++)
                w += rs_value(k, own + e);
            if (back[e] != w) {
                fprintf(stderr, "rank %d: %s: element %zu is %" PRId32 ", not %" PRId32 "\n", me,
                        name, e, back[e], w);
                code = 55;
            }
        }
    }

    /* reducescatter of equal counts in f32, scaled, in MPI's place (the start of the buffer) */
    enum { C = 50003 };
    size_t eq[64];
    float *fh = (float *)h, *fb = (float *)back;
    for (int k = 0; k < n; k++)
        eq[k] = C;
    for (size_t x = 0; x < (size_t)C * (size_t)n; x++)
        fh[x] = (float)rs_value(me, x);
    snprintf(name, sizeof(name), "%s.rsf", tag);
    if (code == 0) {
        if (rd_cuda_copy(dev, d, fh, (size_t)C * (size_t)n * 4, why, sizeof(why)) != 0)
            return 56;
        rc = ringd_reducescatterv(r, name, d, d, eq, RINGD_F32, RINGD_SUM, 0.5, 4.0);
        if (rc != RINGD_OK)
            return sharded_fail(r, name, rc, 57);
        if (rd_cuda_copy(dev, fb, d, (size_t)C * 4, why, sizeof(why)) != 0)
            return 58;
        for (size_t e = 0; e < C && code == 0; e++) {
            float w = 0;
            for (int k = 0; k < n; k++)
                w += (float)rs_value(k, (size_t)me * C + e);
            if (fb[e] != 2 * w) {
                fprintf(stderr, "rank %d: %s: element %zu is %g, not %g\n", me, name, e,
                        (double)fb[e], (double)(2 * w));
                code = 59;
            }
        }
    }

    /* allgatherv of i32, apart then in place (MPI's form: the input at its block) */
    for (int form = 0; form < 2 && code == 0; form++) {
        for (size_t e = 0; e < counts[me]; e++)
            h[e] = me * 100000 + (int32_t)e;
        uint8_t *in = form == 0 ? d : o + own * 4;
        snprintf(name, sizeof(name), "%s.agv.%d", tag, form);
        if (counts[me] > 0 && rd_cuda_copy(dev, in, h, counts[me] * 4, why, sizeof(why)) != 0)
            return 60;
        rc = ringd_allgatherv(r, name, in, counts[me], o, counts, RINGD_I32);
        if (rc != RINGD_OK)
            return sharded_fail(r, name, rc, 61);
        if (rd_cuda_copy(dev, back, o, total * 4, why, sizeof(why)) != 0)
            return 62;
        size_t at = 0;
        for (int k = 0; k < n && code == 0; k++)
            for (size_t e = 0; e < counts[k] && code == 0; e++, at++)
                if (back[at] != k * 100000 + (int32_t)e) {
                    fprintf(stderr, "rank %d: %s: rank %d's element %zu is %" PRId32 "\n", me, name,
                            k, e, back[at]);
                    code = 63;
                }
    }

    /* alltoallv of i32 (the daemon learns the matrix), some blocks empty */
    if (code == 0) {
        size_t at = 0;
        for (int l = 0; l < n; l++)
            for (size_t e = 0; e < sc[l]; e++)
                h[at++] = a2a_value(me, l, e);
        snprintf(name, sizeof(name), "%s.a2a", tag);
        if (sent > 0 && rd_cuda_copy(dev, d, h, sent * 4, why, sizeof(why)) != 0)
            return 64;
        rc = ringd_alltoallv(r, name, d, sc, o, rc_, RINGD_I32);
        if (rc != RINGD_OK)
            return sharded_fail(r, name, rc, 65);
        if (got > 0 && rd_cuda_copy(dev, back, o, got * 4, why, sizeof(why)) != 0)
            return 66;
        at = 0;
        for (int k = 0; k < n && code == 0; k++)
            for (size_t e = 0; e < rc_[k] && code == 0; e++, at++)
                if (back[at] != a2a_value(k, me, e)) {
                    fprintf(stderr, "rank %d: %s: element %zu from rank %d is %" PRId32 "\n", me,
                            name, e, k, back[at]);
                    code = 67;
                }
    }

    /* MPI's in-place reducescatter where rank 1's block would be written over itself: refused,
     * and every rank hears it */
    if (code == 0) {
        snprintf(name, sizeof(name), "%s.rs.over", tag);
        rc = ringd_reducescatterv(r, name, d, d, counts, RINGD_I32, RINGD_SUM, 1.0, 1.0);
        if (rc == RINGD_OK) {
            fprintf(stderr, "rank %d: %s: a block written over itself ran\n", me, name);
            code = 68;
        } else if (me == 1 && strstr(ringd_errmsg(r), "written over itself") == NULL) {
            code = sharded_fail(r, name, rc, 69);
        }
    }
    ringd_free(r, d);
    ringd_free(r, o);
    free(h);
    free(back);
    return code;
}

/* The matrix of gpu_either_memory_cases' alltoall: rank `last` neither sends nor receives. */
static size_t either_count(int k, int l, int last)
{
    return k == last || l == last ? 0 : (size_t)3000 * (size_t)(k + 1) + (size_t)l;
}

int gpu_either_memory_cases(ringd_t *r, const char *tag, int on_device, int empty)
{
    char why[256], name[96];
    int n = ringd_size(r), me = ringd_rank(r), dev = ringd_device(r), last = empty;
    size_t sc[64], rcv[64], sent = 0, got = 0, counts[64], total = 0;
    if (n > 64)
        return 70;
    for (int k = 0; k < n; k++) {
        sc[k] = either_count(me, k, last);
        rcv[k] = either_count(k, me, last);
        sent += sc[k];
        got += rcv[k];
        counts[k] = (size_t)7000 * (size_t)(k + 1);
        total += counts[k];
    }
    size_t most = total > sent ? total : sent;
    most = most > got ? most : got;
    int32_t *h = malloc(most * 4), *back = malloc(most * 4);
    uint8_t *in = NULL, *out = NULL;
    if (h == NULL || back == NULL)
        return 71;
    if (on_device) {
        in = ringd_alloc_device(r, most * 4);
        out = ringd_alloc_device(r, most * 4);
    } else {
        in = malloc(most * 4);
        out = malloc(most * 4);
    }
    if (in == NULL || out == NULL) {
        fprintf(stderr, "rank %d: no room for %zu bytes\n", me, most * 4);
        return 72;
    }
    /* fills in from h (bytes), and reads out into back */
#define PUT(bytes)                                                                                 \
    (on_device ? rd_cuda_copy(dev, in, h, bytes, why, sizeof(why)) : (memcpy(in, h, bytes), 0))
#define GET(bytes)                                                                                 \
    (on_device ? rd_cuda_copy(dev, back, out, bytes, why, sizeof(why))                             \
               : (memcpy(back, out, bytes), 0))
    int code = 0;
    size_t at = 0;
    for (int l = 0; l < n; l++)
        for (size_t e = 0; e < sc[l]; e++)
            h[at++] = a2a_value(me, l, e);
    snprintf(name, sizeof(name), "%s.either.a2a", tag);
    if (sent > 0 && PUT(sent * 4) != 0)
        return 73;
    ringd_result_t rc = ringd_alltoallv(r, name, me == last ? NULL : in, sc,
                                        me == last ? NULL : out, rcv, RINGD_I32);
    if (rc != RINGD_OK)
        return sharded_fail(r, name, rc, 74);
    if (got > 0 && GET(got * 4) != 0)
        return 75;
    at = 0;
    for (int k = 0; k < n && code == 0; k++)
        for (size_t e = 0; e < rcv[k] && code == 0; e++, at++)
            if (back[at] != a2a_value(k, me, e)) {
                fprintf(stderr, "rank %d: %s: element %zu from rank %d is %" PRId32 "\n", me, name,
                        e, k, back[at]);
                code = 76;
            }
    for (size_t e = 0; e < counts[me]; e++)
        h[e] = me * 100000 + (int32_t)e;
    snprintf(name, sizeof(name), "%s.either.agv", tag);
    if (code == 0 && PUT(counts[me] * 4) != 0)
        return 77;
    if (code == 0) {
        rc = ringd_allgatherv(r, name, in, counts[me], out, counts, RINGD_I32);
        if (rc != RINGD_OK)
            return sharded_fail(r, name, rc, 78);
        if (GET(total * 4) != 0)
            return 79;
        at = 0;
        for (int k = 0; k < n && code == 0; k++)
            for (size_t e = 0; e < counts[k] && code == 0; e++, at++)
                if (back[at] != k * 100000 + (int32_t)e) {
                    fprintf(stderr, "rank %d: %s: rank %d's element %zu is %" PRId32 "\n", me, name,
                            k, e, back[at]);
                    code = 80;
                }
    }
#undef PUT
#undef GET
    if (on_device) {
        ringd_free(r, in);
        ringd_free(r, out);
    } else {
        free(in);
        free(out);
    }
    free(h);
    free(back);
    return code;
}
