/* Unit tests for the daemon's status as plain values and the StatusReply it becomes
 * (proto/report.c): what goes in comes out of a frame intact, field by field. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "report.h"

/* Encodes r as a framed Msg and decodes it back; the caller frees the result (rd_frame_free). */
static rd_msg *round_trip(Ringd__StatusReply *r)
{
    rd_msg m = RINGD__MSG__INIT, *out = NULL;
    m.body_case = RINGD__MSG__BODY_STATUS_REPLY;
    m.status_reply = r;
    size_t len = rd_frame_size(&m), consumed = 0;
    uint8_t *buf = malloc(len);
    char err[128] = "";
    cr_assert_not_null(buf);
    cr_assert_eq(rd_frame_pack(&m, buf), len);
    cr_assert_eq(rd_frame_decode(buf, len, 1u << 20, &out, &consumed, err, sizeof(err)),
                 RD_FRAME_OK, "decode failed: %s", err);
    cr_assert_eq(consumed, len);
    cr_assert_eq(out->body_case, RINGD__MSG__BODY_STATUS_REPLY);
    free(buf);
    return out;
}

/* n zeroed elements of size bytes, for a status to own (rd_daemon_status_free releases them). */
static void *zeroed(size_t n, size_t size)
{
    void *p = calloc(n, size);
    cr_assert_not_null(p);
    return p;
}

/* A ring of three nodes, the third set aside, with both links up. */
static rd_world_status *ring_of_three(void)
{
    static const char *const nodes[] = {"n0", "n1", "n2"};
    static const char *const addrs[] = {"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"};
    rd_world_status *r = zeroed(1, sizeof(*r));
    r->generation = 12;
    r->state = "up";
    r->position = 1;
    r->coordinator = "n0";
    r->members = zeroed(3, sizeof(*r->members));
    r->nmembers = 3;
    for (size_t i = 0; i < 3; i++) {
        r->members[i].first_rank = (uint32_t)(4 * i);
        r->members[i].node = nodes[i];
        r->members[i].address = addrs[i];
        r->members[i].local_size = i < 2 ? 4 : 0;
    }
    snprintf(r->members[0].state, sizeof(r->members[0].state), "up");
    snprintf(r->members[1].state, sizeof(r->members[1].state), "up");
    snprintf(r->members[2].state, sizeof(r->members[2].state), "set aside: %s",
             "its links broke twice");
    r->links[0] = (rd_link_status){"n2", "send", 2, UINT64_C(1) << 40, 1.25e9};
    r->links[1] = (rd_link_status){"n0", "recv", 2, (UINT64_C(1) << 40) + 7, 0.5};
    r->nlinks = 2;
    return r;
}

/* A status with every field set: job0 spans nodes with waiting tensors and stalls, job1 is
 * alone on this node with nothing under way, and three clients. */
static rd_daemon_status *status_filled(void)
{
    rd_daemon_status *s = rd_daemon_status_new();
    cr_assert_not_null(s);
    s->version = "0.3.1";
    s->pid = 4242;
    s->uptime_ms = 86400001;
    s->ops_in_flight = 3;
    s->ops_completed = 1000;
    s->ops_failed = 2;
    s->bytes_reduced = UINT64_C(1) << 50;
    s->ring_passes = 77;
    s->ring_ops = 301;
    s->control_sent = 1234;
    s->control_bytes_sent = 56789;
    s->keepalives_sent = 42;
    s->node = "n1";
    s->listen = "10.0.0.2:7070";
    s->redis = "redis://redis:6379/0";
    s->redis_connected = 1;
    s->draining = 1;
    s->drain_timeout_ms = 30000;

    s->jobs = zeroed(2, sizeof(*s->jobs));
    s->njobs = 2;
    rd_job_status *j = &s->jobs[0];
    j->name = "job0";
    j->world_size = 8;
    j->local_size = 4;
    j->min_size = 2;
    j->clients = 3;
    j->generation = 12;
    j->ops_in_flight = 5;
    j->ops_completed = 999;
    j->ops_failed = 1;
    j->pending = zeroed(3, sizeof(*j->pending));
    j->pending[0] = "a.grad";
    j->pending[1] = "b.grad";
    j->pending[2] = "c.grad";
    j->npending = 3;
    j->stalls = zeroed(2, sizeof(*j->stalls));
    j->nstalls = 2;
    j->stalls[0].name = "a.grad";
    j->stalls[0].age_ms = 61000;
    snprintf(j->stalls[0].missing, sizeof(j->stalls[0].missing), "rank 2 (node n1)");
    j->stalls[1].name = "b.grad";
    j->stalls[1].age_ms = 5;
    snprintf(j->stalls[1].missing, sizeof(j->stalls[1].missing), "ranks 4-7 (node n2)");
    j->ring = ring_of_three();
    s->jobs[1].name = "job1";
    s->jobs[1].world_size = 1;
    s->jobs[1].local_size = 1;

    s->clients = zeroed(3, sizeof(*s->clients));
    s->nclients = 3;
    for (uint32_t i = 0; i < 3; i++)
        s->clients[i] =
            (rd_client_status){i < 2 ? "job0" : "job1", 1000 + i,  500, i, i, 10 * (uint64_t)i,
                               UINT64_C(1) << (30 + i), (int)i - 1};
    s->devices = zeroed(2, sizeof(*s->devices));
    s->ndevices = 2;
    s->devices[0] = (rd_device_status){0,
                                       "NVIDIA H100 80GB HBM3",
                                       "GPU-00000000-1111-2222-3333-444444444444",
                                       UINT64_C(85) << 30,
                                       1,
                                       UINT64_C(5) << 40,
                                       UINT64_C(3) << 30};
    s->devices[1] = (rd_device_status){3,
                                       "NVIDIA H100 80GB HBM3",
                                       "GPU-55555555-6666-7777-8888-999999999999",
                                       UINT64_C(80) << 30,
                                       0,
                                       0,
                                       0};
    s->devices_why = "a reason, checked even beside devices";
    return s;
}

static void check_ring(const Ringd__RingInfo *o, const rd_world_status *r)
{
    cr_assert_not_null(o);
    cr_assert_eq(o->generation, r->generation);
    cr_assert_str_eq(o->state, r->state);
    cr_assert_eq(o->position, r->position);
    cr_assert_str_eq(o->coordinator, r->coordinator != NULL ? r->coordinator : "");
    cr_assert_eq(o->n_members, r->nmembers);
    for (size_t i = 0; i < r->nmembers; i++) {
        cr_assert_eq(o->members[i]->first_rank, r->members[i].first_rank);
        cr_assert_str_eq(o->members[i]->node, r->members[i].node);
        cr_assert_str_eq(o->members[i]->address, r->members[i].address);
        cr_assert_eq(o->members[i]->local_size, r->members[i].local_size);
        cr_assert_str_eq(o->members[i]->state, r->members[i].state);
    }
    cr_assert_eq(o->n_links, r->nlinks);
    for (size_t k = 0; k < r->nlinks; k++) {
        cr_assert_str_eq(o->links[k]->peer, r->links[k].peer);
        cr_assert_str_eq(o->links[k]->direction, r->links[k].direction);
        cr_assert_eq(o->links[k]->conns, r->links[k].conns);
        cr_assert_eq(o->links[k]->bytes, r->links[k].bytes);
        cr_assert_eq(o->links[k]->throughput_bps, r->links[k].throughput_bps);
    }
}

static void check_job(const Ringd__JobInfo *o, const rd_job_status *j)
{
    cr_assert_str_eq(o->name, j->name);
    cr_assert_eq(o->world_size, j->world_size);
    cr_assert_eq(o->local_size, j->local_size);
    cr_assert_eq(o->min_size, j->min_size);
    cr_assert_eq(o->clients, j->clients);
    cr_assert_eq(o->generation, j->generation);
    cr_assert_eq(o->ops_in_flight, j->ops_in_flight);
    cr_assert_eq(o->ops_completed, j->ops_completed);
    cr_assert_eq(o->ops_failed, j->ops_failed);
    cr_assert_eq(o->n_pending, j->npending);
    for (size_t k = 0; k < j->npending; k++)
        cr_assert_str_eq(o->pending[k], j->pending[k]);
    cr_assert_eq(o->n_stalls, j->nstalls);
    for (size_t k = 0; k < j->nstalls; k++) {
        cr_assert_str_eq(o->stalls[k]->name, j->stalls[k].name);
        cr_assert_eq(o->stalls[k]->age_ms, j->stalls[k].age_ms);
        cr_assert_str_eq(o->stalls[k]->missing, j->stalls[k].missing);
    }
    if (j->ring == NULL)
        cr_assert_null(o->ring, "job %s has no ring, but its reply has one", j->name);
    else
        check_ring(o->ring, j->ring);
}

/* Every field of the reply o against the status s it was made from. */
static void check_status(const Ringd__StatusReply *o, const rd_daemon_status *s)
{
    cr_assert_str_eq(o->version, s->version != NULL ? s->version : "");
    cr_assert_eq(o->pid, s->pid);
    cr_assert_eq(o->uptime_ms, s->uptime_ms);
    cr_assert_eq(o->ops_in_flight, s->ops_in_flight);
    cr_assert_eq(o->ops_completed, s->ops_completed);
    cr_assert_eq(o->ops_failed, s->ops_failed);
    cr_assert_eq(o->bytes_reduced, s->bytes_reduced);
    cr_assert_eq(o->ring_passes, s->ring_passes);
    cr_assert_eq(o->ring_ops, s->ring_ops);
    cr_assert_eq(o->control_sent, s->control_sent);
    cr_assert_eq(o->control_bytes_sent, s->control_bytes_sent);
    cr_assert_eq(o->keepalives_sent, s->keepalives_sent);
    cr_assert_str_eq(o->node, s->node != NULL ? s->node : "");
    cr_assert_str_eq(o->listen, s->listen != NULL ? s->listen : "");
    cr_assert_str_eq(o->redis, s->redis != NULL ? s->redis : "");
    cr_assert_eq(o->redis_connected, s->redis_connected);
    cr_assert_eq(o->draining, s->draining);
    cr_assert_eq(o->drain_timeout_ms, s->drain_timeout_ms);
    cr_assert_eq(o->n_jobs, s->njobs);
    for (size_t i = 0; i < s->njobs; i++)
        check_job(o->jobs[i], &s->jobs[i]);
    cr_assert_eq(o->n_clients, s->nclients);
    for (size_t i = 0; i < s->nclients; i++) {
        const Ringd__ClientInfo *c = o->clients[i];
        cr_assert_str_eq(c->job, s->clients[i].job);
        cr_assert_eq(c->pid, s->clients[i].pid);
        cr_assert_eq(c->uid, s->clients[i].uid);
        cr_assert_eq(c->local_rank, s->clients[i].local_rank);
        cr_assert_eq(c->ops_in_flight, s->clients[i].ops_in_flight);
        cr_assert_eq(c->ops_completed, s->clients[i].ops_completed);
        cr_assert_eq(c->arena_size, s->clients[i].arena_size);
        cr_assert_eq(c->has_device, s->clients[i].device >= 0);
        cr_assert_eq(c->device, s->clients[i].device >= 0 ? (uint32_t)s->clients[i].device : 0);
    }
    cr_assert_eq(o->n_devices, s->ndevices);
    for (size_t i = 0; i < s->ndevices; i++) {
        const Ringd__DeviceInfo *d = o->devices[i];
        cr_assert_eq(d->index, s->devices[i].index);
        cr_assert_str_eq(d->name, s->devices[i].name);
        cr_assert_str_eq(d->uuid, s->devices[i].uuid);
        cr_assert_eq(d->memory, s->devices[i].memory);
        cr_assert_eq(d->clients, s->devices[i].clients);
        cr_assert_eq(d->bytes_reduced, s->devices[i].bytes_reduced);
        cr_assert_eq(d->arena_bytes, s->devices[i].arena_bytes);
    }
    cr_assert_str_eq(o->devices_why, s->devices_why != NULL ? s->devices_why : "");
}

/* Makes the reply of s, sends it through a frame and checks every field; frees both. */
static void round_trip_checked(rd_daemon_status *s)
{
    Ringd__StatusReply *r = rd_report_reply_new(s);
    cr_assert_not_null(r);
    rd_msg *out = round_trip(r);
    check_status(out->status_reply, s);
    rd_frame_free(out);
    rd_report_reply_free(r);
    rd_daemon_status_free(s);
}

Test(report, reply_carries_every_field_through_a_frame)
{
    round_trip_checked(status_filled());
}

Test(report, empty_status_makes_a_reply_of_empty_strings_and_no_jobs)
{
    rd_daemon_status *s = rd_daemon_status_new();
    cr_assert_not_null(s);
    round_trip_checked(s);
}

Test(report, a_ring_before_its_first_view_is_still_a_ring)
{
    /* A job spanning nodes whose ring has no view yet: JobInfo.ring is there (ringctl prints a
     * ring for it), with no members, no links and no coordinator (""). */
    rd_daemon_status *s = rd_daemon_status_new();
    cr_assert_not_null(s);
    s->jobs = zeroed(1, sizeof(*s->jobs));
    s->njobs = 1;
    s->jobs[0].name = "job0";
    s->jobs[0].ring = zeroed(1, sizeof(*s->jobs[0].ring));
    s->jobs[0].ring->state = "waiting";
    round_trip_checked(s);
}

Test(report, free_accepts_null)
{
    rd_daemon_status_free(NULL);
    rd_report_reply_free(NULL);
}
