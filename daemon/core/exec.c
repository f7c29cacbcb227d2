/* Data-path executor: a work queue served by worker threads, completion signalled by eventfd. */
#include "exec.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

typedef struct task {
    rd_exec_fn fn;
    rd_exec_done_fn done;
    void *ctx;
    int remaining; /* ranges not yet run; guarded by the executor's lock */
    struct task *next_done;
} task;

typedef struct item {
    task *t;
    size_t begin, end;
    struct item *next;
} item;

struct rd_exec {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    item *head, *tail; /* queued ranges */
    task *done_head;   /* finished tasks, newest first */
    int stopping;
    int nthreads;
    pthread_t *threads;
    int efd;
    struct event *ev;
};

/* Worker: takes one range at a time; the worker finishing a task's last range posts the task. */
static void *worker_main(void *arg)
{
    rd_exec *x = arg;
    pthread_mutex_lock(&x->lock);
    for (;;) {
        while (x->head == NULL && !x->stopping)
            pthread_cond_wait(&x->cond, &x->lock);
        if (x->head == NULL)
            break;
        item *it = x->head;
        x->head = it->next;
        if (x->head == NULL)
            x->tail = NULL;
        pthread_mutex_unlock(&x->lock);

        it->t->fn(it->t->ctx, it->begin, it->end);

        pthread_mutex_lock(&x->lock);
        task *t = it->t;
        free(it);
        if (--t->remaining == 0) {
            t->next_done = x->done_head;
            x->done_head = t;
            uint64_t one = 1;
            ssize_t w = write(x->efd, &one, sizeof(one));
            (void)w; /* an eventfd counter cannot overflow here */
        }
    }
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

/* Loop callback: runs the done callbacks of finished tasks, oldest first. */
static void on_wakeup(evutil_socket_t fd, short what, void *arg)
{
    rd_exec *x = arg;
    uint64_t n;
    ssize_t r = read(fd, &n, sizeof(n));
    (void)r;
    (void)what;

    pthread_mutex_lock(&x->lock);
    task *list = x->done_head;
    x->done_head = NULL;
    pthread_mutex_unlock(&x->lock);

    task *rev = NULL;
    while (list != NULL) {
        task *next = list->next_done;
        list->next_done = rev;
        rev = list;
        list = next;
    }
    while (rev != NULL) {
        task *next = rev->next_done;
        rev->done(rev->ctx);
        free(rev);
        rev = next;
    }
}

rd_exec *rd_exec_new(struct event_base *base, int nthreads, char *err, size_t errlen)
{
    rd_exec *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        snprintf(err, errlen, "executor: out of memory");
        return NULL;
    }
    int rc = pthread_mutex_init(&x->lock, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "executor: pthread_mutex_init: %s", strerror(rc));
        free(x);
        return NULL;
    }
    if ((rc = pthread_cond_init(&x->cond, NULL)) != 0) {
        snprintf(err, errlen, "executor: pthread_cond_init: %s", strerror(rc));
        pthread_mutex_destroy(&x->lock);
        free(x);
        return NULL;
    }
    x->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (x->efd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        goto fail;
    }
    x->ev = event_new(base, x->efd, EV_READ | EV_PERSIST, on_wakeup, x);
    if (x->ev == NULL || event_add(x->ev, NULL) != 0) {
        snprintf(err, errlen, "executor: cannot add the wake-up event");
        goto fail;
    }
    x->threads = calloc((size_t)nthreads, sizeof(pthread_t));
    if (x->threads == NULL) {
        snprintf(err, errlen, "executor: out of memory");
        goto fail;
    }
    for (; x->nthreads < nthreads; x->nthreads++) {
        rc = pthread_create(&x->threads[x->nthreads], NULL, worker_main, x);
        if (rc != 0) {
            snprintf(err, errlen, "pthread_create: %s", strerror(rc));
            goto fail;
        }
    }
    return x;

fail:
    rd_exec_free(x);
    return NULL;
}

void rd_exec_free(rd_exec *x)
{
    if (x == NULL)
        return;
    pthread_mutex_lock(&x->lock);
    x->stopping = 1;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
    for (int i = 0; i < x->nthreads; i++)
        pthread_join(x->threads[i], NULL);
    free(x->threads);
    while (x->done_head != NULL) {
        task *t = x->done_head;
        x->done_head = t->next_done;
        free(t);
    }
    if (x->ev != NULL)
        event_free(x->ev);
    if (x->efd >= 0)
        close(x->efd);
    pthread_cond_destroy(&x->cond);
    pthread_mutex_destroy(&x->lock);
    free(x);
}

rd_status rd_exec_submit(rd_exec *x, rd_exec_fn fn, rd_exec_done_fn done, void *ctx, size_t units,
                         size_t grain)
{
    if (grain == 0)
        grain = 1;
    size_t groups = (units + grain - 1) / grain;
    size_t nranges = groups < (size_t)x->nthreads ? groups : (size_t)x->nthreads;
    if (nranges == 0)
        nranges = 1;

    task *t = calloc(1, sizeof(*t));
    item *first = NULL, *last = NULL;
    if (t == NULL)
        return RINGD_E_NOMEM;
    t->fn = fn;
    t->done = done;
    t->ctx = ctx;
    t->remaining = (int)nranges;

    size_t per = (groups + nranges - 1) / nranges * grain, begin = 0;
    for (size_t i = 0; i < nranges; i++) {
        item *it = calloc(1, sizeof(*it));
        if (it == NULL) {
            while (first != NULL) {
                item *n = first->next;
                free(first);
                first = n;
            }
            free(t);
            return RINGD_E_NOMEM;
        }
        it->t = t;
        it->begin = begin < units ? begin : units;
        it->end = (i + 1 == nranges || begin + per > units) ? units : begin + per;
        begin = it->end;
        if (last != NULL)
            last->next = it;
        else
            first = it;
        last = it;
    }

    pthread_mutex_lock(&x->lock);
    if (x->tail != NULL)
        x->tail->next = first;
    else
        x->head = first;
    x->tail = last;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
    return RINGD_OK;
}
