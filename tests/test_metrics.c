/* The per-job metrics registry (daemon/core/metrics.h), the timeline's bounded recording
 * (daemon/core/timeline.h) and the Chrome trace writer (client/chrome_trace.h). */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chrome_trace.h"
#include "metrics.h"
#include "ringd.pb-c.h"
#include "timeline.h"

Test(metrics, says_why_a_ring_changed)
{
    cr_assert_eq(rd_change_cause_of(0, 4, 0), RD_CHANGE_CAUSE_START);
    cr_assert_eq(rd_change_cause_of(0, 4, 1), RD_CHANGE_CAUSE_START);
    cr_assert_eq(rd_change_cause_of(2, 4, 1), RD_CHANGE_CAUSE_JOIN);
    cr_assert_eq(rd_change_cause_of(4, 2, 0), RD_CHANGE_CAUSE_LEAVE);
    cr_assert_eq(rd_change_cause_of(4, 2, 1), RD_CHANGE_CAUSE_SHRINK);
    cr_assert_eq(rd_change_cause_of(4, 4, 1), RD_CHANGE_CAUSE_REFORM);
    cr_assert_eq(rd_change_cause_of(4, 4, 0), RD_CHANGE_CAUSE_REFORM);
}

Test(metrics, classes_sizes_with_each_limit_in_the_class_below)
{
    cr_assert_eq(rd_metrics_size_class(0), 0);
    cr_assert_eq(rd_metrics_size_class(4096), 0);
    cr_assert_eq(rd_metrics_size_class(4097), 1);
    cr_assert_eq(rd_metrics_size_class(1 << 20), 2);
    cr_assert_eq(rd_metrics_size_class((1 << 20) + 1), 3);
    cr_assert_eq(rd_metrics_size_class(16 << 20), 3);
    cr_assert_eq(rd_metrics_size_class(UINT64_MAX), RD_METRICS_SIZES - 1);
}

Test(metrics, puts_an_observation_in_the_first_bucket_that_holds_it)
{
    rd_histogram h;
    memset(&h, 0, sizeof(h));
    rd_histogram_observe(&h, rd_metrics_latency_bounds, RD_METRICS_LATENCY_BUCKETS, 0);
    rd_histogram_observe(&h, rd_metrics_latency_bounds, RD_METRICS_LATENCY_BUCKETS, 10e-6);
    rd_histogram_observe(&h, rd_metrics_latency_bounds, RD_METRICS_LATENCY_BUCKETS, 11e-6);
    rd_histogram_observe(&h, rd_metrics_latency_bounds, RD_METRICS_LATENCY_BUCKETS, 1e6);
    cr_assert_eq(h.bucket[0], 2);                          /* le 10us: 0 and 10us */
    cr_assert_eq(h.bucket[1], 1);                          /* le 25us */
    cr_assert_eq(h.bucket[RD_METRICS_LATENCY_BUCKETS], 1); /* +Inf */
    cr_assert_eq(h.count, 4);
    cr_assert_float_eq(h.sum, 1e6 + 21e-6, 1e-9);
}

Test(metrics, counts_ops_by_kind_and_result_and_bytes_only_of_successes)
{
    rd_metrics *m = rd_metrics_new();
    rd_job_metrics *jm = rd_metrics_acquire(m, "j");
    cr_assert_not_null(jm);
    rd_metrics_op(jm, 0, RINGD_OK, 100, 400, 30);
    rd_metrics_op(jm, 0, RINGD_E_MEMBERSHIP, 100, 400, 30);
    rd_metrics_op(jm, 2, (ringd_result_t)99, 1 << 24, 5, 3000000); /* out of range: protocol */
    rd_metrics_op(jm, 7, RINGD_OK, 1, 1, 1);                       /* no such kind: ignored */
    rd_metrics_op(NULL, 0, RINGD_OK, 1, 1, 1);
    cr_assert_eq(jm->ops[0][RINGD_OK], 1);
    cr_assert_eq(jm->ops[0][RINGD_E_MEMBERSHIP], 1);
    cr_assert_eq(jm->ops[2][RINGD_E_PROTOCOL], 1);
    cr_assert_eq(jm->bytes[0], 400);
    cr_assert_eq(jm->bytes[2], 0);
    cr_assert_eq(jm->latency[0][0].count, 2);
    cr_assert_eq(jm->latency[2][3].count, 1);
    cr_assert_eq(jm->latency[2][3].bucket[16 /* le 2.5 s */], 0);
    cr_assert_eq(jm->latency[2][3].bucket[17 /* le 5 s: 3 s */], 1);
    rd_metrics_free(m);
}

Test(metrics, keeps_a_jobs_series_across_its_restart_and_past_its_end)
{
    rd_metrics *m = rd_metrics_new();
    rd_job_metrics *a = rd_metrics_acquire(m, "train");
    a->stall_warnings = 3;
    rd_metrics_release(m, a);
    cr_assert_eq(rd_metrics_jobs(m), a, "an ended job's series stay for Prometheus");
    rd_job_metrics *b = rd_metrics_acquire(m, "train");
    cr_assert_eq(b, a, "a job of the same name continues its counters");
    cr_assert_eq(b->stall_warnings, 3);
    cr_assert_eq(b->live, 1);
    rd_metrics_release(m, b);
    rd_metrics_release(m, b); /* once too often: no underflow */
    cr_assert_eq(b->live, 0);
    rd_metrics_free(m);
}

Test(metrics, forgets_the_oldest_ended_jobs_beyond_its_bound_never_a_live_one)
{
    rd_metrics *m = rd_metrics_new();
    char name[32];
    rd_job_metrics *live = rd_metrics_acquire(m, "live");
    for (int i = 0; i < RD_METRICS_JOBS_MAX + 50; i++) {
        snprintf(name, sizeof(name), "ended.%d", i);
        rd_metrics_release(m, rd_metrics_acquire(m, name));
    }
    size_t n = 0;
    int has_live = 0, has_first = 0, has_last = 0;
    for (rd_job_metrics *jm = rd_metrics_jobs(m); jm != NULL; jm = jm->next) {
        n++;
        has_live |= jm == live;
        has_first |= strcmp(jm->name, "ended.0") == 0;
        snprintf(name, sizeof(name), "ended.%d", RD_METRICS_JOBS_MAX + 49);
        has_last |= strcmp(jm->name, name) == 0;
    }
    cr_assert_leq(n, RD_METRICS_JOBS_MAX + 1);
    cr_assert(has_live && has_last && !has_first);
    rd_metrics_free(m);
}

Test(timeline, keeps_the_newest_ops_within_its_bound_and_counts_the_rest)
{
    rd_timeline *t = rd_timeline_new(3);
    int64_t sub[2] = {5, 6};
    char name[16];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        rd_trace_op op = {.seq = (uint64_t)i, .name = name, .nranks = 2, .submit_us = sub};
        rd_timeline_op(t, &op);
    }
    cr_assert_eq(rd_timeline_nops(t), 3);
    cr_assert_eq(rd_timeline_dropped(t), 7);
    cr_assert_str_eq(rd_timeline_ops(t, 0)->name, "t7");
    cr_assert_str_eq(rd_timeline_ops(t, 2)->name, "t9");
    cr_assert_eq(rd_timeline_ops(t, 2)->submit_us[1], 6);
    cr_assert_null(rd_timeline_ops(t, 3));
    for (int i = 0; i < 5; i++)
        rd_timeline_mark(t, (uint64_t)i, "change");
    cr_assert_eq(rd_timeline_nmarks(t), 3);
    cr_assert_eq(rd_timeline_marks(t, 0)->generation, 2);
    rd_timeline_free(t);
    rd_timeline_free(NULL);
}

/* Writes one op through the Chrome trace writer and parses the result. */
static json_object *trace_of(const Ringd__OpTrace *op, const char *node)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    rd_ctrace t;
    cr_assert_eq(rd_ctrace_open(&t, f, node), 0);
    rd_ctrace_op(&t, op);
    rd_ctrace_mark(&t, 99, 2, "leave: \"n1\"\n");
    cr_assert_eq(rd_ctrace_close(&t), 0);
    fclose(f);
    json_object *j = json_tokener_parse(buf);
    cr_assert_not_null(j, "not JSON: %s", buf);
    free(buf);
    return j;
}

Test(chrome_trace, writes_json_whatever_the_names_and_only_phases_an_op_passed)
{
    int64_t sub[2] = {10, 0}; /* rank 1 never submitted */
    int64_t ring[5] = {30, 31, 0, 40, 41};
    Ringd__OpTrace op = RINGD__OP_TRACE__INIT;
    op.name = "a \"quoted\\ name";
    op.kind = 0;
    op.n_submit_us = 2;
    op.submit_us = sub;
    op.ready_us = 20;
    op.negotiated_us = 25;
    op.started_us = 29;
    op.n_ring_us = 5;
    op.ring_us = ring;
    op.end_us = 50;
    op.pass = 7;
    op.pass_ops = 3;
    json_object *j = trace_of(&op, "node \"x\"");
    size_t n = json_object_array_length(j);
    int ring_phase = 0, scatter = 0, submits = 0, pass = 0, titled = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(j, i), *v;
        json_object_object_get_ex(e, "name", &v);
        const char *name = json_object_get_string(v);
        if (strcmp(name, "process_name") == 0) {
            json_object *a, *t;
            json_object_object_get_ex(e, "args", &a);
            json_object_object_get_ex(a, "name", &t);
            titled += strcmp(json_object_get_string(t), "a \"quoted\\ name") == 0;
        }
        ring_phase += strcmp(name, "RING") == 0;
        scatter += strcmp(name, "REDUCE_SCATTER") == 0;
        submits += strncmp(name, "SUBMIT rank", 11) == 0;
        pass += strcmp(name, "PASS 7") == 0;
    }
    cr_assert_eq(titled, 1);
    cr_assert_eq(ring_phase, 1, "no reduce-scatter time: one RING span");
    cr_assert_eq(scatter, 0);
    cr_assert_eq(submits, 1, "only the rank that submitted");
    cr_assert_eq(pass, 1);
    json_object_put(j);
}
