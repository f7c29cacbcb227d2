/* Rendezvous through Redis: leases, atomic membership scripts, stream watchers (the connections
 * themselves: rendezvous_conn.c; records and replies: rendezvous_parse.c). */
#define _GNU_SOURCE
#include "rendezvous.h"

#include "counters.h"
#include "log.h"
#include "rendezvous_conn.h"
#include "resolve.h"

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUBSYS "rendezvous"

#define RDV_REPLY_LIMIT_MS 3000 /* a command or connect with no answer for this long: reconnect */
#define RDV_BLOCK_MS 5000       /* XREAD BLOCK */
#define RDV_WATCHDOG_MS 500
#define RDV_KEY_MAX (RD_NAME_MAX * 2 + 32)
#define RDV_NKEYS                                                                                  \
    6                /* members hash, generation, event stream, this node's lease, started flag,   \
                        lease deadlines */
#define RDV_NFIXED 7 /* ARGV every script takes: see RDV_LUA_STATE */
#define RDV_SWEEP_SLACK_MS 5 /* a sweep this long after the earliest lease can expire */
#define RDV_REASON_MAX 200   /* bytes of an eviction's reason */

/* Every script starts with these helpers. KEYS: members hash, generation counter, event stream,
 * this node's lease, started flag, lease deadlines (a sorted set: each member's lease deadline in
 * Redis's ms clock). ARGV: lease key prefix, node, incarnation, record, lease ms, generation floor
 * (the highest generation the caller has seen), the generation of the whole view the caller
 * holds (-1: none), then the script's own. A member whose lease key is gone is swept out with an
 * 'expire' event; the deadlines find the candidates in O(log N), so a refresh costs the same
 * whatever the job's size. Every change bumps the generation to max(stored, floor) + 1 (so it
 * never goes back, even after Redis lost it) and appends an event in the same script, so watchers
 * never miss one; a script that changed something settles the started flag before it answers
 * (set once the members agree on a world size their local sizes reach; deleted when no member is
 * left). lost(): Redis lost the job (no member, generation not past the floor), as opposed to
 * this node alone being gone. Records start with "<version> <incarnation> ", which is how a
 * script tells our record from another incarnation's. The answer is {status, generation, last
 * stream id, {node, record, ...} or nil, started, the least time left on the other members'
 * leases or -1}; the members are nil (the caller's are current) on a plain 'ok' at the
 * generation of the caller's view, so the job's membership is read once per change. */
#define RDV_LUA_STATE                                                                              \
    "if redis.replicate_commands then redis.replicate_commands() end\n"                            \
    "local members, genk, events, lease, startk, dl = KEYS[1], KEYS[2], KEYS[3], KEYS[4], "        \
    "KEYS[5], KEYS[6]\n"                                                                           \
    "local prefix, node, inc, rec, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]\n"            \
    "local low = tonumber(ARGV[6]) or 0\n"                                                         \
    "local have = tonumber(ARGV[7]) or -1\n"                                                       \
    "local t = redis.call('TIME')\n"                                                               \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                      \
    "local changed = false\n"                                                                      \
    "local function stored()\n"                                                                    \
    "  return tonumber(redis.call('GET', genk)) or 0\n"                                            \
    "end\n"                                                                                        \
    "local function bump(kind, who, why)\n"                                                        \
    "  local g = string.format('%d', math.max(stored(), low) + 1)\n"                               \
    "  redis.call('SET', genk, g)\n"                                                               \
    "  if why then\n"                                                                              \
    "    redis.call('XADD', events, 'MAXLEN', '~', '1000', '*', 'gen', g, 'type', kind, "          \
    "'node', who, 'reason', why)\n"                                                                \
    "  else\n"                                                                                     \
    "    redis.call('XADD', events, 'MAXLEN', '~', '1000', '*', 'gen', g, 'type', kind, "          \
    "'node', who)\n"                                                                               \
    "  end\n"                                                                                      \
    "  changed = true\n"                                                                           \
    "end\n"                                                                                        \
    "local function lease_set(who, what)\n"                                                        \
    "  redis.call('SET', prefix .. who, what, 'PX', ttl)\n"                                        \
    "  redis.call('ZADD', dl, now + tonumber(ttl), who)\n"                                         \
    "end\n"                                                                                        \
    "local function drop(who)\n"                                                                   \
    "  redis.call('DEL', prefix .. who)\n"                                                         \
    "  redis.call('ZREM', dl, who)\n"                                                              \
    "  return redis.call('HDEL', members, who) == 1\n"                                             \
    "end\n"                                                                                        \
    "local function expired(who)\n"                                                                \
    "  redis.call('ZREM', dl, who)\n"                                                              \
    "  if redis.call('HDEL', members, who) == 1 then bump('expire', who) end\n"                    \
    "end\n"                                                                                        \
    "local function deadline(n, p)\n"                                                              \
    "  if p == -2 then expired(n)\n"                                                               \
    "  elseif p == -1 then redis.call('ZADD', dl, '+inf', n)\n"                                    \
    "  else redis.call('ZADD', dl, now + p, n) end\n"                                              \
    "end\n"                                                                                        \
    "local function reconcile()\n"                                                                 \
    "  for _, n in ipairs(redis.call('ZRANGE', dl, 0, -1)) do\n"                                   \
    "    if redis.call('HEXISTS', members, n) == 0 then redis.call('ZREM', dl, n) end\n"           \
    "  end\n"                                                                                      \
    "  for _, n in ipairs(redis.call('HKEYS', members)) do\n"                                      \
    "    if not redis.call('ZSCORE', dl, n) then deadline(n, redis.call('PTTL', prefix .. n)) "    \
    "end\n"                                                                                        \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "local function sweep()\n"                                                                     \
    "  if redis.call('HLEN', members) ~= redis.call('ZCARD', dl) then reconcile() end\n"           \
    "  for _, n in ipairs(redis.call('ZRANGEBYSCORE', dl, '-inf', now)) do\n"                      \
    "    deadline(n, redis.call('PTTL', prefix .. n))\n"                                           \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "local function join()\n"                                                                      \
    "  redis.call('HSET', members, node, rec)\n"                                                   \
    "  lease_set(node, inc)\n"                                                                     \
    "  sweep()\n"                                                                                  \
    "  bump('join', node)\n"                                                                       \
    "end\n"

#define RDV_LUA_VIEW                                                                               \
    "local function ours(r)\n"                                                                     \
    "  return type(r) == 'string' and string.match(r, '^%d+ (%d+) ') == inc\n"                     \
    "end\n"                                                                                        \
    "local function settle()\n"                                                                    \
    "  if redis.call('HLEN', members) == 0 then\n"                                                 \
    "    redis.call('DEL', startk)\n"                                                              \
    "    return\n"                                                                                 \
    "  end\n"                                                                                      \
    "  if redis.call('EXISTS', startk) == 1 then return end\n"                                     \
    "  local sum, world, newest = 0, nil, 0\n"                                                     \
    "  for _, r in ipairs(redis.call('HVALS', members)) do\n"                                      \
    "    local l, w = string.match(r, '^%d+ %d+ (%d+) (%d+) ')\n"                                  \
    "    local since = string.match(r, '^3 %d+ %d+ %d+ %d+ (%d+) ')\n"                             \
    "    if l then\n"                                                                              \
    "      if world and world ~= tonumber(w) then return end\n"                                    \
    "      world = tonumber(w)\n"                                                                  \
    "      sum = sum + tonumber(l)\n"                                                              \
    "      if since and tonumber(since) > newest then newest = tonumber(since) end\n"              \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  if world and world > 0 and sum >= world then\n"                                             \
    "    redis.call('SET', startk, string.format('%d', newest))\n"                                 \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "local function view(status)\n"                                                                \
    "  if changed then settle() end\n"                                                             \
    "  local last = redis.call('XREVRANGE', events, '+', '-', 'COUNT', 1)\n"                       \
    "  local id = '0-0'\n"                                                                         \
    "  if last[1] then id = last[1][1] end\n"                                                      \
    "  local soonest = -1\n"                                                                       \
    "  local two = redis.call('ZRANGE', dl, 0, 1, 'WITHSCORES')\n"                                 \
    "  for i = 1, #two - 1, 2 do\n"                                                                \
    "    local at = tonumber(two[i + 1])\n"                                                        \
    "    if soonest < 0 and two[i] ~= node and at and at < math.huge then\n"                       \
    "      soonest = math.max(0, at - now)\n"                                                      \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  local g = stored()\n"                                                                       \
    "  local all = false\n"                                                                        \
    "  if status ~= 'ok' or g ~= have then all = redis.call('HGETALL', members) end\n"             \
    "  return {status, g, id, all, redis.call('GET', startk), soonest}\n"                          \
    "end\n"                                                                                        \
    "local function lost()\n"                                                                      \
    "  return redis.call('HLEN', members) == 0 and stored() <= low\n"                              \
    "end\n"                                                                                        \
    "local function refresh()\n"                                                                   \
    "  local cur = redis.call('HGET', members, node)\n"                                            \
    "  if cur and not ours(cur) and redis.call('EXISTS', lease) == 1 then\n"                       \
    "    sweep()\n"                                                                                \
    "    return view('superseded')\n"                                                              \
    "  end\n"                                                                                      \
    "  if cur == rec and stored() >= low and redis.call('PEXPIRE', lease, ttl) == 1 then\n"        \
    "    redis.call('ZADD', dl, now + tonumber(ttl), node)\n"                                      \
    "    sweep()\n"                                                                                \
    "    return view('ok')\n"                                                                      \
    "  end\n"                                                                                      \
    "  join()\n"                                                                                   \
    "  return view('rejoined')\n"                                                                  \
    "end\n"

enum { RDV_JOIN, RDV_REFRESH, RDV_LEAVE, RDV_VIEW, RDV_EVICT, RDV_RESTORE, RDV_BUMP, RDV_NSCRIPTS };

static const char *const rdv_script_name[RDV_NSCRIPTS] = {"JOIN",  "REFRESH", "LEAVE", "VIEW",
                                                          "EVICT", "RESTORE", "BUMP"};

/* Each script's own part: its text is RDV_LUA_STATE RDV_LUA_VIEW then this (joined at start-up:
 * C compilers need not take string literals that long). */
static const char *const rdv_script_body[RDV_NSCRIPTS] = {
    /* JOIN: (re)writes our lease and record. */
    "join()\n"
    "return view('joined')\n",
    /* REFRESH (ARGV[8]: '1' when we hold a view to restore): extends our lease; answers 'lost'
     * without a change when Redis lost the job, for a RESTORE; re-joins (above our floor, so
     * every daemon moves to the next generation) when our record or lease is gone (expired,
     * evicted), when our record is not the one we wrote (someone restored an older view) or when
     * Redis's generation is below ours; leaves alone a record a newer incarnation of this node
     * wrote. */
    "if ARGV[8] == '1' and lost() then return view('lost') end\n"
    "return refresh()\n",
    /* LEAVE: removes our record and lease, never another incarnation's. */
    "if ours(redis.call('HGET', members, node)) then\n"
    "  drop(node)\n"
    "  bump('leave', node)\n"
    "elseif redis.call('GET', lease) == inc then\n"
    "  redis.call('DEL', lease)\n"
    "  if redis.call('HEXISTS', members, node) == 1 then redis.call('ZADD', dl, now, node)\n"
    "  else redis.call('ZREM', dl, node) end\n"
    "end\n"
    "return view('left')\n",
    /* VIEW: read only. */
    "return view('ok')\n",
    /* EVICT: node, inc and rec are the evicted member, its incarnation and the reason; removes
     * it only while its record has that incarnation. */
    "if ours(redis.call('HGET', members, node)) then\n"
    "  drop(node)\n"
    "  bump('evict', node, rec)\n"
    "  sweep()\n"
    "  return view('evicted')\n"
    "end\n"
    "return view('absent')\n",
    /* RESTORE (ARGV[8]: started '1' or '0'; then node, record pairs): when Redis still lost the
     * job, writes back the view we knew at the generation floor, without a bump, each member
     * with a fresh lease; then our own record if it changed meanwhile (a join, bumped). When
     * someone restored or joined first, a plain refresh. */
    "if not lost() then return refresh() end\n"
    "for i = 9, #ARGV - 1, 2 do\n"
    "  redis.call('HSET', members, ARGV[i], ARGV[i + 1])\n"
    "  lease_set(ARGV[i], string.match(ARGV[i + 1], '^%d+ (%d+) ') or '0')\n"
    "end\n"
    "local g = string.format('%d', math.max(stored(), low))\n"
    "redis.call('SET', genk, g)\n"
    "if ARGV[8] ~= '-' then redis.call('SET', startk, ARGV[8]) "
    "else redis.call('DEL', startk) end\n"
    "redis.call('XADD', events, 'MAXLEN', '~', '1000', '*', 'gen', g, "
    "'type', 'restore', 'node', node)\n"
    "if redis.call('HGET', members, node) ~= rec then join() end\n"
    "return view('restored')\n",
    /* BUMP (rec: the reason; the floor: the generation that broke): moves the job past that
     * generation unless someone already has, so both ends of a broken link bump it once. */
    "if stored() <= low then bump('reform', node, rec) end\n"
    "return view('ok')\n",
};

typedef struct rdv_job rdv_job;

struct rdv_job {
    rdv_job *next;
    rd_rdv *r;
    char name[RD_NAME_MAX + 1];
    uint64_t uid; /* tells this job from a later one of the same name */
    rd_rdv_member self;
    uint64_t join_seq;   /* bumped by each rd_rdv_join */
    uint64_t joined_seq; /* join_seq of the last JOIN Redis confirmed: dirty while they differ */
    int refreshing;      /* a JOIN, REFRESH or RESTORE is in flight */
    int again;           /* rd_rdv_sweep_soon while refreshing: refresh once more */
    int superseded;      /* logged that another incarnation holds our record */
    int behind_logged;   /* logged that Redis answered a generation below ours */
    char lastid[RD_RDV_ID_MAX]; /* last stream id seen, "" until a script reply says where it is */
    int reading;                /* an XREAD is in flight */
    rd_rdv_view *view;      /* newest view taken (its generation the highest seen), NULL before */
    uint64_t high_gen;      /* the highest generation seen: every bump goes above it */
    int undelivered;        /* view has a generation on_view has not had yet */
    uint64_t delivered_gen; /* the last generation delivered, 0 before */
    int want_all;           /* the next script asks for the members whatever its generation */
    int64_t next_tick_ms;   /* when tick fires */
    int64_t confirmed_ms;   /* when Redis last confirmed our registration (0: never) */
    struct event *tick;     /* the next refresh: lease / 3, or sooner for a sweep */
    rd_rdv_conn watch;      /* XREAD BLOCK on the job's event stream */
};

/* One script call, kept whole so a NOSCRIPT answer can be retried with EVAL. */
typedef struct rdv_req {
    struct rdv_req *next; /* in rd_rdv.queued while waiting for a connection */
    rd_rdv *r;
    int script;
    int retried;
    uint64_t seq;    /* job's join_seq when a JOIN was sent */
    int64_t sent_us; /* when it was last sent: its answer times the round trip */
    char job[RD_NAME_MAX + 1];
    int nargs;   /* RDV_NKEYS keys, then ARGV */
    char **args; /* owned, each string too */
} rdv_req;

struct rd_rdv {
    rd_rdv_server srv;
    int64_t rtt_us; /* the last script's round trip (Redis running it included); -1: none yet */
    int64_t lease_ms;
    rd_rdv_view_fn on_view;
    void *arg;
    rd_rdv_conn cmd;            /* the scripts */
    char sha[RDV_NSCRIPTS][41]; /* from SCRIPT LOAD on the command connection, "" unknown */
    char *script[RDV_NSCRIPTS]; /* each script's whole text */
    rd_rdv_scripts scripts;     /* rdv_script, loaded into sha */
    rdv_job *jobs;
    uint64_t next_uid;
    rdv_req *queued; /* LEAVEs and EVICTs waiting for the command connection */
    struct event *watchdog;
    struct event *deliver;
    int freeing;
    int *gone; /* set while on_view runs: rd_rdv_free raises it */
};

static void watch_read(rdv_job *j);
static int send_script(rd_rdv *r, rdv_job *j, int script);

/* ---- jobs ---- */

static rdv_job *job_find(rd_rdv *r, const char *name)
{
    for (rdv_job *j = r->jobs; j != NULL; j = j->next)
        if (strcmp(j->name, name) == 0)
            return j;
    return NULL;
}

/* (Re)arms j's tick to fire in ms (at least 1). */
static void tick_in(rdv_job *j, int64_t ms)
{
    if (ms < 1)
        ms = 1;
    j->next_tick_ms = rd_now_ms() + ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(j->tick, &tv);
}

/* Deferred delivery: runs on_view for each job whose newest view has a generation above the last
 * delivered one. Runs from the loop, never inside hiredis, so on_view may call anything (leave
 * the job, free r). */
static void on_deliver(evutil_socket_t fd, short what, void *arg)
{
    rd_rdv *r = arg;
    (void)fd;
    (void)what;
    for (;;) {
        rdv_job *j = r->jobs;
        while (j != NULL && !j->undelivered)
            j = j->next;
        if (j == NULL)
            return;
        j->undelivered = 0;
        rd_rdv_view *v = j->view;
        if (v == NULL || v->generation <= j->delivered_gen)
            continue;
        j->delivered_gen = v->generation;
        /* Out of j's reach while on_view runs, which may free j; put back after if j lives. */
        j->view = NULL;
        uint64_t uid = j->uid;
        char name[RD_NAME_MAX + 1];
        memcpy(name, j->name, sizeof(name));
        int gone = 0;
        r->gone = &gone;
        r->on_view(r->arg, name, v);
        if (gone) {
            rd_rdv_view_free(v);
            return;
        }
        r->gone = NULL;
        j = job_find(r, name);
        if (j != NULL && j->uid == uid && j->view == NULL)
            j->view = v;
        else
            rd_rdv_view_free(v);
    }
}

static int send_script(rd_rdv *r, rdv_job *j, int script);

/* Refreshes j now, or once more after the refresh in flight. */
static void refresh_now(rd_rdv *r, rdv_job *j)
{
    if (j->refreshing)
        j->again = 1;
    else
        send_script(r, j, RDV_REFRESH);
}

/* Takes a parsed view of j (script's answer): tracks the stream id and keeps the view, queued
 * for delivery when its generation is new. A generation below the highest seen means Redis lost
 * the job's data (its stream restarted too): not taken; the next REFRESH repairs it, sent now
 * when the view came from a watch event. Takes v. */
static void job_take_view(rd_rdv *r, rdv_job *j, rd_rdv_view *v, const char *id, int script)
{
    if (v->generation < j->high_gen) {
        if (!j->behind_logged)
            rd_log(RD_LOG_WARN, SUBSYS,
                   "job %s: Redis answered generation %" PRIu64 ", below %" PRIu64
                   " seen before (it lost its data?); restoring the membership",
                   j->name, v->generation, j->high_gen);
        j->behind_logged = 1;
        snprintf(j->lastid, sizeof(j->lastid), "%s", id);
        rd_rdv_view_free(v);
        if (script == RDV_VIEW)
            refresh_now(r, j);
    } else {
        j->behind_logged = 0;
        if (j->lastid[0] == '\0' || rd_rdv_id_after(id, j->lastid))
            snprintf(j->lastid, sizeof(j->lastid), "%s", id);
        j->high_gen = v->generation;
        rd_rdv_view_free(j->view);
        j->view = v;
        if (v->generation > j->delivered_gen) {
            j->undelivered = 1;
            event_active(r->deliver, 0, 0);
        }
    }
    if (!j->reading)
        watch_read(j);
}

/* ---- scripts on the command connection ---- */

static void req_free(rdv_req *q)
{
    if (q == NULL)
        return;
    for (int i = 0; i < q->nargs; i++)
        free(q->args[i]);
    free(q->args);
    free(q);
}

/* Appends a copy of s to q's arguments; 0, or -1 when out of memory. */
static int req_push(rdv_req *q, const char *s)
{
    char **args = realloc(q->args, (size_t)(q->nargs + 1) * sizeof(*args));
    if (args == NULL)
        return -1;
    q->args = args;
    if ((q->args[q->nargs] = strdup(s)) == NULL)
        return -1;
    q->nargs++;
    return 0;
}

/* Builds a call of script for job with the keys and the fixed ARGV (node, its incarnation,
 * record, generation floor, the generation of the whole view held or -1); the caller pushes the
 * script's own ARGV. NULL when out of memory. */
static rdv_req *req_new(rd_rdv *r, const char *job, const char *node, uint64_t incarnation,
                        const char *record, int script, uint64_t floor, int64_t have)
{
    char buf[RDV_NKEYS + RDV_NFIXED][RDV_KEY_MAX + RD_RDV_RECORD_MAX];
    rdv_req *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->r = r;
    q->script = script;
    snprintf(q->job, sizeof(q->job), "%s", job);
    snprintf(buf[0], sizeof(buf[0]), "ringd:{%s}:members", job);
    snprintf(buf[1], sizeof(buf[1]), "ringd:{%s}:gen", job);
    snprintf(buf[2], sizeof(buf[2]), "ringd:{%s}:events", job);
    snprintf(buf[3], sizeof(buf[3]), "ringd:{%s}:lease:%s", job, node);
    snprintf(buf[4], sizeof(buf[4]), "ringd:{%s}:started", job);
    snprintf(buf[5], sizeof(buf[5]), "ringd:{%s}:deadlines", job);
    snprintf(buf[6], sizeof(buf[6]), "ringd:{%s}:lease:", job);
    snprintf(buf[7], sizeof(buf[7]), "%s", node);
    snprintf(buf[8], sizeof(buf[8]), "%" PRIu64, incarnation);
    snprintf(buf[9], sizeof(buf[9]), "%s", record);
    snprintf(buf[10], sizeof(buf[10]), "%" PRId64, r->lease_ms);
    snprintf(buf[11], sizeof(buf[11]), "%" PRIu64, floor);
    snprintf(buf[12], sizeof(buf[12]), "%" PRId64, have);
    for (int i = 0; i < RDV_NKEYS + RDV_NFIXED; i++) {
        if (req_push(q, buf[i]) != 0) {
            req_free(q);
            return NULL;
        }
    }
    return q;
}

/* A call of script for j as itself. NULL when out of memory. */
static rdv_req *req_self(rd_rdv *r, const rdv_job *j, int script)
{
    char rec[RD_RDV_RECORD_MAX];
    rd_rdv_record_format(&j->self, rec, sizeof(rec));
    int64_t have = j->view != NULL && !j->want_all ? (int64_t)j->view->generation : -1;
    return req_new(r, j->name, j->self.node, j->self.incarnation, rec, script, j->high_gen, have);
}

/* q's command line: EVAL (or EVALSHA when usesha) script, key count, arguments; NULL when out of
 * memory. Caller frees the array (not the strings). */
static const char **req_argv(const rd_rdv *r, const rdv_req *q, int usesha)
{
    static const char nkeys[] = {'0' + RDV_NKEYS, '\0'};
    const char **argv = malloc((size_t)(3 + q->nargs) * sizeof(*argv));
    if (argv == NULL)
        return NULL;
    argv[0] = usesha ? "EVALSHA" : "EVAL";
    argv[1] = usesha ? r->sha[q->script] : r->script[q->script];
    argv[2] = nkeys;
    for (int i = 0; i < q->nargs; i++)
        argv[3 + i] = q->args[i];
    return argv;
}

static void on_script(redisAsyncContext *ac, void *reply, void *privdata);

/* Sends q on the command connection (EVALSHA when the script is loaded, else EVAL); takes q.
 * Returns 0, or -1 when it could not be queued (q freed). */
static int req_send(rd_rdv *r, rdv_req *q)
{
    int usesha = r->sha[q->script][0] != '\0' && r->sha[q->script][0] != '!' && !q->retried;
    const char **argv = req_argv(r, q, usesha);
    if (argv == NULL)
        rd_log(RD_LOG_ERROR, SUBSYS, "job %s: out of memory sending %s", q->job,
               rdv_script_name[q->script]);
    if (argv == NULL || r->cmd.ac == NULL ||
        redisAsyncCommandArgv(r->cmd.ac, on_script, q, 3 + q->nargs, argv, NULL) != REDIS_OK) {
        free(argv);
        req_free(q);
        return -1;
    }
    free(argv);
    rd_rdv_conn_sent(&r->cmd);
    q->sent_us = rd_now_us();
    return 0;
}

/* Sends q now when the command connection is up, else queues it for cmd_ready; takes q. */
static void req_send_or_queue(rd_rdv *r, rdv_req *q)
{
    if (r->cmd.state == RD_RDV_READY) {
        req_send(r, q);
    } else {
        q->next = r->queued;
        r->queued = q;
    }
}

/* Redis lost j's data: sends a RESTORE of j's newest view at its generation. Returns 0 or -1
 * (not connected, no view, out of memory: the next REFRESH tries again). */
static int send_restore(rd_rdv *r, rdv_job *j)
{
    const rd_rdv_view *v = j->view;
    char rec[RD_RDV_RECORD_MAX];
    if (r->cmd.state != RD_RDV_READY || v == NULL)
        return -1;
    rdv_req *q = req_self(r, j, RDV_RESTORE);
    char at[32] = "-";
    if (v->started)
        snprintf(at, sizeof(at), "%" PRIu64, v->started_at);
    int ok = q != NULL && req_push(q, at) == 0;
    for (size_t i = 0; ok && i < v->nmembers; i++) {
        rd_rdv_record_format(&v->members[i], rec, sizeof(rec));
        ok = req_push(q, v->members[i].node) == 0 && req_push(q, rec) == 0;
    }
    if (!ok) {
        rd_log(RD_LOG_ERROR, SUBSYS, "job %s: out of memory restoring the membership", j->name);
        req_free(q);
        return -1;
    }
    rd_log(RD_LOG_WARN, SUBSYS,
           "job %s: Redis lost the job's membership; restoring generation %" PRIu64
           " (%zu member(s))",
           j->name, v->generation, v->nmembers);
    if (req_send(r, q) != 0)
        return -1;
    j->refreshing = 1;
    return 0;
}

/* A script's answer: a view for a joined job, a re-join or restore noticed, the next sweep
 * scheduled, or a failure logged. */
static void on_script(redisAsyncContext *ac, void *reply, void *privdata)
{
    rdv_req *q = privdata;
    rd_rdv *r = q->r;
    redisReply *rep = reply;
    char status[32], id[RD_RDV_ID_MAX];
    int64_t soonest = -1;
    rd_rdv_conn_answered(&r->cmd, ac);
    rdv_job *j = r->freeing ? NULL : job_find(r, q->job);
    int refresh = q->script == RDV_JOIN || q->script == RDV_REFRESH || q->script == RDV_RESTORE;
    if (j != NULL && refresh)
        j->refreshing = 0;
    if (rep == NULL || r->freeing) {
        req_free(q);
        return;
    }
    r->rtt_us = rd_now_us() - q->sent_us;
    if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0 && !q->retried) {
        q->retried = 1;
        r->sha[q->script][0] = '\0';
        if (j != NULL && refresh)
            j->refreshing = 1;
        if (req_send(r, q) != 0 && j != NULL)
            j->refreshing = 0;
        return;
    }
    size_t nbad = 0;
    int same = 0;
    rd_rdv_view *v =
        rd_rdv_view_parse(rep, q->job, status, sizeof(status), id, &soonest, &nbad, &same);
    if (v != NULL && q->script == RDV_EVICT)
        rd_log(strcmp(status, "evicted") == 0 ? RD_LOG_INFO : RD_LOG_DEBUG, SUBSYS,
               "job %s: %s node %s (incarnation %s): %s", q->job,
               strcmp(status, "evicted") == 0 ? "evicted" : "nothing to evict: no",
               q->args[RDV_NKEYS + 1], q->args[RDV_NKEYS + 2], q->args[RDV_NKEYS + 3]);
    if (v == NULL || j == NULL) {
        rd_rdv_view_free(v);
        req_free(q);
        return;
    }
    /* No members: those of the view held, at this generation, are current. Held no longer (a
     * newer view came meanwhile): the next script reads them whole. */
    if (same && (j->view == NULL || j->view->generation != v->generation)) {
        rd_rdv_view_free(v);
        j->want_all = 1;
        if (q->script == RDV_VIEW || !refresh)
            send_script(r, j, RDV_VIEW);
        else
            refresh_now(r, j);
        req_free(q);
        return;
    }
    if (same) {
        v->members = j->view->members;
        v->nmembers = j->view->nmembers;
        j->view->members = NULL;
        j->view->nmembers = 0;
    } else {
        j->want_all = 0;
    }
    /* Once per generation, not on every refresh. */
    if (nbad > 0 && v->generation != j->high_gen)
        rd_log(RD_LOG_WARN, SUBSYS,
               "job %s: %zu malformed member record(s) in Redis ignored (generation %" PRIu64 ")",
               j->name, nbad, v->generation);
    if (q->script == RDV_JOIN && q->seq == j->join_seq)
        j->joined_seq = q->seq;
    if ((q->script == RDV_JOIN || q->script == RDV_REFRESH || q->script == RDV_RESTORE) &&
        strcmp(status, "superseded") != 0 && strcmp(status, "lost") != 0)
        j->confirmed_ms = rd_now_ms();
    if (strcmp(status, "rejoined") == 0)
        rd_log(RD_LOG_INFO, SUBSYS,
               "job %s: registration was gone or stale (lease expired, evicted, Redis lost data); "
               "joined again at "
               "generation %" PRIu64,
               j->name, v->generation);
    if (strcmp(status, "restored") == 0)
        rd_log(RD_LOG_WARN, SUBSYS,
               "job %s: restored the membership in Redis at generation %" PRIu64 " (%zu member(s))",
               j->name, v->generation, v->nmembers);
    if (strcmp(status, "superseded") == 0) {
        if (!j->superseded)
            rd_log(RD_LOG_WARN, SUBSYS,
                   "job %s: node %s is registered by another incarnation "
                   "(a restarted daemon with this node name?); not refreshing",
                   j->name, j->self.node);
        j->superseded = 1;
    } else {
        j->superseded = 0;
    }
    job_take_view(r, j, v, id, q->script);
    /* Sweep a few ms after the earliest lease of another member can expire. */
    if (soonest >= 0 && q->script != RDV_EVICT &&
        rd_now_ms() + soonest + RDV_SWEEP_SLACK_MS < j->next_tick_ms)
        tick_in(j, soonest + RDV_SWEEP_SLACK_MS);
    if (strcmp(status, "lost") == 0) {
        send_restore(r, j);
    } else if (refresh && j->again && !j->refreshing) {
        j->again = 0;
        send_script(r, j, RDV_REFRESH);
    }
    req_free(q);
}

/* Sends script for j (JOIN when its record is not yet confirmed, in place of REFRESH). Returns 0
 * or -1 (not connected, or out of memory). */
static int send_script(rd_rdv *r, rdv_job *j, int script)
{
    if (r->cmd.state != RD_RDV_READY)
        return -1;
    if (script == RDV_REFRESH && j->joined_seq != j->join_seq)
        script = RDV_JOIN;
    rdv_req *q = req_self(r, j, script);
    /* A view to restore should Redis have lost the job. */
    int restorable = j->view != NULL && j->view->generation > 0;
    if (q != NULL && script == RDV_REFRESH && req_push(q, restorable ? "1" : "0") != 0) {
        req_free(q);
        q = NULL;
    }
    if (q == NULL) {
        rd_log(RD_LOG_ERROR, SUBSYS, "job %s: out of memory sending %s", j->name,
               rdv_script_name[script]);
        return -1;
    }
    q->seq = j->join_seq;
    if (req_send(r, q) != 0)
        return -1;
    if (script == RDV_JOIN || script == RDV_REFRESH)
        j->refreshing = 1;
    return 0;
}

/* The command connection is READY: queued LEAVEs and EVICTs go out, then every job re-registers
 * (REFRESH restores or re-joins when Redis lost the record). */
static void cmd_ready(void *arg)
{
    rd_rdv *r = arg;
    /* Oldest first. */
    rdv_req *list = NULL;
    while (r->queued != NULL) {
        rdv_req *q = r->queued;
        r->queued = q->next;
        q->next = list;
        list = q;
    }
    while (list != NULL) {
        rdv_req *q = list;
        list = q->next;
        q->next = NULL;
        req_send(r, q);
    }
    for (rdv_job *j = r->jobs; j != NULL; j = j->next)
        send_script(r, j, RDV_REFRESH);
}

/* j's lease timer: every lease_ms / 3, or sooner when another member's lease expires sooner;
 * refreshes (and so sweeps) unless a refresh is in flight. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rdv_job *j = arg;
    rd_rdv *r = j->r;
    (void)fd;
    (void)what;
    tick_in(j, r->lease_ms / 3);
    if (!j->refreshing)
        send_script(r, j, RDV_REFRESH);
}

/* Watchdog timer: checks the command connection and every watch connection. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    rd_rdv *r = arg;
    int64_t now = rd_now_ms();
    (void)fd;
    (void)what;
    rd_rdv_conn_check(&r->cmd, RDV_REPLY_LIMIT_MS, now);
    for (rdv_job *j = r->jobs; j != NULL; j = j->next)
        rd_rdv_conn_check(&j->watch, RDV_BLOCK_MS + RDV_REPLY_LIMIT_MS, now);
}

/* ---- watching ---- */

/* XREAD's answer: entries mean something changed, so the command connection reads the view. */
static void on_xread(redisAsyncContext *ac, void *reply, void *privdata)
{
    rdv_job *j = privdata;
    redisReply *rep = reply;
    rd_rdv_conn_answered(&j->watch, ac);
    if (j->watch.ac != ac)
        return;
    j->reading = 0;
    if (rep == NULL || j->watch.state == RD_RDV_CLOSED)
        return;
    rd_rdv *r = j->r;
    if (rep->type == REDIS_REPLY_ERROR) {
        rd_rdv_conn_complain(&j->watch, RD_LOG_WARN, "XREAD: %s (reconnecting)", rep->str);
        redisAsyncFree(ac);
        return;
    }
    if (rep->type == REDIS_REPLY_ARRAY) {
        const char *last = NULL;
        size_t lastlen = 0;
        if (rd_rdv_stream_last_id(rep, &last, &lastlen) != 0) {
            rd_log(RD_LOG_WARN, SUBSYS, "job %s: malformed XREAD reply; reading the view", j->name);
        } else {
            memcpy(j->lastid, last, lastlen);
            j->lastid[lastlen] = '\0';
        }
        send_script(r, j, RDV_VIEW);
    }
    watch_read(j);
}

/* Issues XREAD BLOCK from the last id seen, when the watch connection is READY and the first
 * script reply told us where the stream stands. */
static void watch_read(rdv_job *j)
{
    rd_rdv_conn *c = &j->watch;
    char key[RDV_KEY_MAX], block[24];
    if (c->state != RD_RDV_READY || j->reading || j->lastid[0] == '\0')
        return;
    snprintf(key, sizeof(key), "ringd:{%s}:events", j->name);
    snprintf(block, sizeof(block), "%d", RDV_BLOCK_MS);
    const char *argv[] = {"XREAD", "BLOCK", block, "STREAMS", key, j->lastid};
    if (redisAsyncCommandArgv(c->ac, on_xread, j, 6, argv, NULL) != REDIS_OK)
        return;
    rd_rdv_conn_sent(c);
    j->reading = 1;
}

/* The watch connection is READY (again): read the view, whatever happened meanwhile, and
 * resume XREAD from the stream id that view answers with (not the last one seen: the stream
 * restarted if Redis lost its data), or from the next script answer's. */
static void watch_ready(void *arg)
{
    rdv_job *j = arg;
    rd_rdv *r = j->r;
    if (j->lastid[0] != '\0') {
        j->lastid[0] = '\0';
        send_script(r, j, RDV_VIEW);
    }
    watch_read(j);
}

/* Closes j's watch connection and frees j (already unlinked). */
static void job_free(rdv_job *j)
{
    if (j == NULL)
        return;
    rd_rdv_conn_fini(&j->watch);
    if (j->tick != NULL)
        event_free(j->tick);
    rd_rdv_view_free(j->view);
    free(j);
}

/* ---- API ---- */

/* See rendezvous.h. Starts the lease, watchdog and delivery events and the command connection. */
rd_rdv *rd_rdv_new(struct event_base *base, const rd_rdv_options *o, char *err, size_t errlen)
{
    rd_rdv *r = NULL;
    if (base == NULL || o == NULL || o->on_view == NULL) {
        snprintf(err, errlen, "rd_rdv_new: missing event base, options or on_view");
        return NULL;
    }
    if (o->lease_ms < 30 || o->lease_ms > 24LL * 3600 * 1000) {
        snprintf(err, errlen, "rendezvous lease %" PRId64 " ms: out of range 30..86400000",
                 o->lease_ms);
        return NULL;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto oom;
    if (rd_rdv_url_parse(o->url, r->srv.host, sizeof(r->srv.host), &r->srv.port, &r->srv.db, err,
                         errlen) != RINGD_OK) {
        free(r);
        return NULL;
    }
    r->srv.base = base;
    r->rtt_us = -1;
    r->lease_ms = o->lease_ms;
    r->on_view = o->on_view;
    r->arg = o->arg;
    if (o->password != NULL && (r->srv.password = strdup(o->password)) == NULL)
        goto oom;
    /* The system's resolver configuration (resolv.conf, hosts); a name it cannot give now is
     * looked up again at each reconnect. */
    r->srv.resolver = rd_resolver_new(base);
    if (r->srv.resolver == NULL) {
        snprintf(err, errlen, "rd_rdv_new: cannot start the resolver (evdns)");
        rd_rdv_free(r);
        return NULL;
    }
    static const char helpers[] = RDV_LUA_STATE, views[] = RDV_LUA_VIEW;
    for (int i = 0; i < RDV_NSCRIPTS; i++) {
        size_t n = sizeof(helpers) + sizeof(views) + strlen(rdv_script_body[i]);
        if ((r->script[i] = malloc(n)) == NULL)
            goto oom;
        snprintf(r->script[i], n, "%s%s%s", helpers, views, rdv_script_body[i]);
    }
    r->scripts =
        (rd_rdv_scripts){RDV_NSCRIPTS, (const char *const *)r->script, rdv_script_name, r->sha};
    if (rd_rdv_conn_init(&r->cmd, &r->srv, "command", &r->scripts, cmd_ready, r) != 0)
        goto oom;
    r->watchdog = event_new(base, -1, EV_PERSIST, on_watchdog, r);
    r->deliver = event_new(base, -1, 0, on_deliver, r);
    if (r->watchdog == NULL || r->deliver == NULL)
        goto oom;
    struct timeval wd = {0, RDV_WATCHDOG_MS * 1000};
    evtimer_add(r->watchdog, &wd);
    rd_rdv_conn_start(&r->cmd);
    return r;
oom:
    snprintf(err, errlen, "rd_rdv_new: out of memory");
    rd_rdv_free(r);
    return NULL;
}

/* Checks (and frees) a reply on the blocking connection; 0, or -1 after logging what failed. */
static int sync_ok(rd_rdv *r, redisContext *c, void *reply, const char *what)
{
    redisReply *rep = reply;
    int ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
    if (!ok)
        rd_log(RD_LOG_WARN, SUBSYS, "leaving on exit: %s %s:%d: %s; the leases will expire", what,
               r->srv.host, r->srv.port, rep != NULL ? rep->str : c->errstr);
    freeReplyObject(rep);
    return ok ? 0 : -1;
}

/* Best-effort LEAVE of every joined job, and the queued LEAVEs and EVICTs, on a short-lived
 * blocking connection, bounded by about a second in all. */
static void leave_all_sync(rd_rdv *r)
{
    struct timeval ctv = {0, 400 * 1000}, rtv = {0, 500 * 1000};
    int sent = 0;
    if (r->jobs == NULL && r->queued == NULL)
        return;
    /* The address last resolved, so that leaving never waits for a resolver at exit; a name
     * that never resolved is not looked up now (the leases expire instead). */
    if (r->srv.ip[0] == '\0' && !rd_rdv_host_numeric(&r->srv)) {
        rd_log(RD_LOG_WARN, SUBSYS, "leaving on exit: %s never resolved; the leases will expire",
               r->srv.host);
        return;
    }
    redisContext *c =
        redisConnectWithTimeout(r->srv.ip[0] != '\0' ? r->srv.ip : r->srv.host, r->srv.port, ctv);
    if (c == NULL || c->err) {
        rd_log(RD_LOG_WARN, SUBSYS, "leaving on exit: connect %s:%d: %s; the leases will expire",
               r->srv.host, r->srv.port, c != NULL ? c->errstr : "out of memory");
        redisFree(c);
        return;
    }
    redisSetTimeout(c, rtv);
    if (r->srv.password != NULL) {
        const char *argv[] = {"AUTH", r->srv.password};
        if (sync_ok(r, c, redisCommandArgv(c, 2, argv, NULL), "AUTH") != 0)
            goto out;
    }
    if (r->srv.db != 0 && sync_ok(r, c, redisCommand(c, "SELECT %d", r->srv.db), "SELECT") != 0)
        goto out;
    for (rdv_job *j = r->jobs; j != NULL; j = j->next) {
        rdv_req *q = req_self(r, j, RDV_LEAVE);
        if (q == NULL)
            continue;
        q->next = r->queued;
        r->queued = q;
    }
    for (rdv_req *q = r->queued; q != NULL; q = q->next) {
        const char **argv = req_argv(r, q, 0);
        if (argv != NULL)
            sent += redisAppendCommandArgv(c, 3 + q->nargs, argv, NULL) == REDIS_OK;
        free(argv);
    }
    for (int i = 0; i < sent; i++) {
        void *reply = NULL;
        if (redisGetReply(c, &reply) != REDIS_OK) {
            rd_log(RD_LOG_WARN, SUBSYS, "leaving on exit: %s:%d: %s; the leases will expire",
                   r->srv.host, r->srv.port, c->errstr);
            break;
        }
        redisReply *rep = reply;
        if (rep->type == REDIS_REPLY_ERROR)
            rd_log(RD_LOG_WARN, SUBSYS, "leaving on exit: %s", rep->str);
        freeReplyObject(reply);
    }
out:
    redisFree(c);
}

/* See rendezvous.h. Leaves synchronously first, then frees in reverse order of creation. */
void rd_rdv_free(rd_rdv *r)
{
    if (r == NULL)
        return;
    r->freeing = 1;
    if (r->gone != NULL)
        *r->gone = 1;
    leave_all_sync(r);
    while (r->jobs != NULL) {
        rdv_job *j = r->jobs;
        r->jobs = j->next;
        job_free(j);
    }
    rd_rdv_conn_fini(&r->cmd);
    while (r->queued != NULL) {
        rdv_req *q = r->queued;
        r->queued = q->next;
        req_free(q);
    }
    if (r->deliver != NULL)
        event_free(r->deliver);
    if (r->watchdog != NULL)
        event_free(r->watchdog);
    rd_resolver_free(r->srv.resolver);
    free(r->srv.password);
    for (int i = 0; i < RDV_NSCRIPTS; i++)
        free(r->script[i]);
    free(r);
}

/* See rendezvous.h. */
rd_status rd_rdv_join(rd_rdv *r, const char *job, const rd_rdv_member *self)
{
    if (!rd_name_valid(job) || self == NULL || !rd_rdv_member_valid(self)) {
        rd_log(RD_LOG_ERROR, SUBSYS, "join %s: invalid job name, node name or address",
               rd_name_valid(job) ? job : "(invalid)");
        return RINGD_E_INVALID;
    }
    rdv_job *j = job_find(r, job);
    if (j == NULL) {
        j = calloc(1, sizeof(*j));
        if (j == NULL || rd_rdv_conn_init(&j->watch, &r->srv, j->name, NULL, watch_ready, j) != 0 ||
            (j->tick = evtimer_new(r->srv.base, on_tick, j)) == NULL) {
            if (j != NULL)
                job_free(j);
            rd_log(RD_LOG_ERROR, SUBSYS, "join %s: out of memory", job);
            return RINGD_E_NOMEM;
        }
        snprintf(j->name, sizeof(j->name), "%s", job);
        j->r = r;
        j->uid = ++r->next_uid;
        j->next = r->jobs;
        r->jobs = j;
        tick_in(j, r->lease_ms / 3);
        rd_rdv_conn_start(&j->watch);
    }
    j->self = *self;
    j->join_seq++;
    j->superseded = 0;
    send_script(r, j, RDV_JOIN);
    return RINGD_OK;
}

/* See rendezvous.h. The LEAVE waits for the command connection when it is down. */
void rd_rdv_leave(rd_rdv *r, const char *job)
{
    rdv_job **pp = &r->jobs;
    while (*pp != NULL && strcmp((*pp)->name, job) != 0)
        pp = &(*pp)->next;
    rdv_job *j = *pp;
    if (j == NULL)
        return;
    *pp = j->next;
    rdv_req *q = req_self(r, j, RDV_LEAVE);
    if (q == NULL)
        rd_log(RD_LOG_ERROR, SUBSYS, "leave %s: out of memory; the lease will expire", job);
    else
        req_send_or_queue(r, q);
    job_free(j);
}

/* See rendezvous.h. The EVICT waits for the command connection when it is down. */
rd_status rd_rdv_evict(rd_rdv *r, const char *job, const char *node, uint64_t incarnation,
                       const char *reason)
{
    char why[RDV_REASON_MAX + 1];
    if (!rd_name_valid(job) || node == NULL || !rd_name_valid(node)) {
        rd_log(RD_LOG_ERROR, SUBSYS, "evict from %s: invalid job or node name",
               rd_name_valid(job) ? job : "(invalid)");
        return RINGD_E_INVALID;
    }
    snprintf(why, sizeof(why), "%s", reason != NULL && reason[0] != '\0' ? reason : "evicted");
    const rdv_job *j = job_find(r, job);
    rdv_req *q =
        req_new(r, job, node, incarnation, why, RDV_EVICT, j != NULL ? j->high_gen : 0, -1);
    if (q == NULL) {
        rd_log(RD_LOG_ERROR, SUBSYS, "evict %s from %s: out of memory", node, job);
        return RINGD_E_NOMEM;
    }
    req_send_or_queue(r, q);
    return RINGD_OK;
}

/* See rendezvous.h. */
rd_status rd_rdv_bump(rd_rdv *r, const char *job, uint64_t above, const char *reason)
{
    char why[RDV_REASON_MAX + 1];
    rdv_job *j = rd_name_valid(job) ? job_find(r, job) : NULL;
    if (j == NULL)
        return RINGD_E_INVALID;
    snprintf(why, sizeof(why), "%s", reason != NULL && reason[0] != '\0' ? reason : "re-form");
    rdv_req *q = req_new(r, job, j->self.node, j->self.incarnation, why, RDV_BUMP, above, -1);
    if (q == NULL) {
        rd_log(RD_LOG_ERROR, SUBSYS, "bump %s: out of memory", job);
        return RINGD_E_NOMEM;
    }
    req_send_or_queue(r, q);
    return RINGD_OK;
}

/* See rendezvous.h. */
void rd_rdv_sweep_soon(rd_rdv *r, const char *job)
{
    rdv_job *j = job != NULL ? job_find(r, job) : NULL;
    if (j != NULL)
        refresh_now(r, j);
}

/* See rendezvous.h. */
int rd_rdv_lapsed(const rd_rdv *r, const char *job)
{
    const rdv_job *j = rd_name_valid(job) ? job_find((rd_rdv *)r, job) : NULL;
    return j != NULL && j->confirmed_ms != 0 && rd_now_ms() - j->confirmed_ms > r->lease_ms;
}

/* See rendezvous.h. */
int rd_rdv_connected(const rd_rdv *r)
{
    return r != NULL && r->cmd.state == RD_RDV_READY;
}

int64_t rd_rdv_rtt_us(const rd_rdv *r)
{
    return r != NULL ? r->rtt_us : -1;
}
