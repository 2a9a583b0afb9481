/* commit.c - the daemon's durable commits (see commit.h). */
#include "server/commit.h"

#include "server/server-int.h"

#include "base/err.h"
#include "base/log.h"
#include "base/vec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct pending {
        struct pending *next;
        uint64_t gen;
        hreq *r;
        int status;
        char *body;
        int retry_after;
} pending;

typedef struct gp_commit {
        gp_daemon *d;
        pthread_mutex_t mu;
        pthread_cond_t work;        /* the sync thread: something committed, or stop */
        pthread_cond_t done;        /* readers and gp_commit_http_closing: durable moved, or sent */
        uint64_t applied;           /* __atomic: written by the loop under d->lock */
        uint64_t committed;         /* under mu */
        uint64_t durable;           /* __atomic; written under mu */
        bool deferred;              /* d->ws needs gp_store_sync (else committed == durable) */
        bool running, stop, closed; /* under mu */
        int sending;                /* answers being sent outside mu */
        pending *head, *tail;       /* answers waiting for the disk, in generation order */
        uint64_t wake_at;           /* write d->evfd when durable reaches it; 0 = not asked */
        pthread_t thread;
        /* loop thread only */
        gp_commit_held *held;       /* in generation order; [0, held0) given back by the last release */
        size_t held0, nheld, capheld;
} gp_commit;

static uint64_t durable_now(gp_commit *c) {
        return __atomic_load_n(&c->durable, __ATOMIC_ACQUIRE);
}

static void kick_loop(gp_daemon *d) {
        uint64_t one = 1;
        ssize_t w = write(d->evfd, &one, sizeof(one));
        (void)w;
}

/* Send what is in list: fresh, durable; else answered 503 (stopping:
 * never an unstored state).  d->lock held, not mu: completed() (http.c)
 * takes d->lock before a request is freed, so r stays valid here. */
static void send_list(pending *p, bool fresh) {
        while (p) {
                pending *next = p->next;
                if (fresh) {
                        gp_http_answer(p->r, p->status, p->body, p->retry_after);
                } else {
                        free(p->body);
                        p->r->ctype = NULL;
                        gp_http_answer(p->r, 503,
                                       gp_http_error_body("unavailable", "the server is stopping; "
                                                                         "try again when it is back"),
                                       5);
                }
                free(p);
                p = next;
        }
}

/* Make durable what was committed: the disk first, then the answers. */
/* fsync what was committed, or stop: what a failed fsync covered may be
 * lost (Linux may drop the unsynced pages), so it is never acknowledged. */
static void sync_or_stop(gp_daemon *d) {
        char err[512] = "";
        if (gp_store_sync(d->ws, err, sizeof(err)) < 0) {
                gp_error("store sync failed (%s); stopping so that nothing unstored is acknowledged", err);
                _exit(70);
        }
}

static void *sync_main(void *arg) {
        gp_commit *c = arg;
        gp_daemon *d = c->d;
        pthread_mutex_lock(&c->mu);
        for (;;) {
                while (c->committed == durable_now(c) && !c->stop)
                        pthread_cond_wait(&c->work, &c->mu);
                if (c->committed == durable_now(c))
                        break; /* stopping, all synced */
                uint64_t target = c->committed;
                pthread_mutex_unlock(&c->mu);
                sync_or_stop(d);
                pthread_mutex_lock(&c->mu);
                __atomic_store_n(&c->durable, target, __ATOMIC_RELEASE);
                pending *out = c->head, **pp = &out;
                while (*pp && (*pp)->gen <= target)
                        pp = &(*pp)->next;
                c->head = *pp;
                if (!c->head)
                        c->tail = NULL;
                *pp = NULL;
                bool wake = c->wake_at && c->wake_at <= target;
                if (wake)
                        c->wake_at = 0;
                c->sending++;
                pthread_cond_broadcast(&c->done);
                pthread_mutex_unlock(&c->mu);
                if (out) {
                        pthread_mutex_lock(&d->lock);
                        send_list(out, true);
                        pthread_mutex_unlock(&d->lock);
                }
                if (wake)
                        kick_loop(d);
                pthread_mutex_lock(&c->mu);
                c->sending--;
                pthread_cond_broadcast(&c->done);
        }
        pthread_mutex_unlock(&c->mu);
        return NULL;
}

int gp_commit_open(gp_daemon *d) {
        gp_commit *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->d = d;
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->work, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->done, &ca);
        pthread_condattr_destroy(&ca);
        d->cm = c;
        return 0;
}

int gp_commit_start(gp_daemon *d) {
        gp_commit *c = d->cm;
        c->deferred = gp_store_sync_deferred(d->ws);
        if (!c->deferred)
                return 0;
        pthread_mutex_lock(&c->mu);
        c->running = true;
        pthread_mutex_unlock(&c->mu);
        int rc = pthread_create(&c->thread, NULL, sync_main, c);
        if (rc) {
                pthread_mutex_lock(&c->mu);
                c->running = false;
                pthread_mutex_unlock(&c->mu);
                return -rc;
        }
        return 0;
}

void gp_commit_stop(gp_daemon *d) {
        gp_commit *c = d->cm;
        if (!c)
                return;
        pthread_mutex_lock(&c->mu);
        bool running = c->running;
        c->stop = true;
        pthread_cond_signal(&c->work);
        pthread_mutex_unlock(&c->mu);
        if (running)
                pthread_join(c->thread, NULL);
        pthread_mutex_lock(&c->mu);
        c->running = false;
        pthread_mutex_unlock(&c->mu);
}

void gp_commit_close(gp_daemon *d) {
        gp_commit *c = d->cm;
        if (!c)
                return;
        pending *p = c->head;
        while (p) { /* never sent: MHD is gone */
                pending *next = p->next;
                free(p->body);
                free(p);
                p = next;
        }
        free(c->held);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->work);
        pthread_cond_destroy(&c->done);
        free(c);
        d->cm = NULL;
}

uint64_t gp_commit_next(gp_daemon *d) {
        gp_commit *c = d->cm;
        uint64_t g = __atomic_load_n(&c->applied, __ATOMIC_RELAXED) + 1;
        __atomic_store_n(&c->applied, g, __ATOMIC_SEQ_CST);
        return g;
}

uint64_t gp_commit_applied(gp_daemon *d) {
        return __atomic_load_n(&d->cm->applied, __ATOMIC_SEQ_CST);
}

void gp_commit_stored(gp_daemon *d, uint64_t gen) {
        gp_commit *c = d->cm;
        pthread_mutex_lock(&c->mu);
        if (c->running) {
                c->committed = gen;
                pthread_cond_signal(&c->work);
                pthread_mutex_unlock(&c->mu);
                return;
        }
        pthread_mutex_unlock(&c->mu);
        /* no sync thread (start-up, or a store durable at its commit) */
        sync_or_stop(d);
        pthread_mutex_lock(&c->mu);
        c->committed = gen;
        __atomic_store_n(&c->durable, gen, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&c->done);
        pthread_mutex_unlock(&c->mu);
}

/* Loop thread, d->lock held. */
void gp_commit_answer(gp_daemon *d, uint64_t gen, hreq *r, int status, char *body, int retry_after) {
        gp_commit *c = d->cm;
        pending *p = calloc(1, sizeof(*p));
        if (!p) {
                gp_error("out of memory; stopping");
                _exit(70);
        }
        *p = (pending){.gen = gen, .r = r, .status = status, .body = body, .retry_after = retry_after};
        pthread_mutex_lock(&c->mu);
        bool now = durable_now(c) >= gen, closed = c->closed;
        if (!now && !closed) {
                if (c->tail)
                        c->tail->next = p;
                else
                        c->head = p;
                c->tail = p;
                pthread_mutex_unlock(&c->mu);
                return;
        }
        c->sending++;
        pthread_mutex_unlock(&c->mu);
        send_list(p, now);
        pthread_mutex_lock(&c->mu);
        c->sending--;
        pthread_cond_broadcast(&c->done);
        pthread_mutex_unlock(&c->mu);
}

void gp_commit_hold(gp_daemon *d, uint64_t gen, int64_t id, bool resized) {
        gp_commit *c = d->cm;
        gp_commit_held *v = gp_vec_grow(c->held, &c->capheld, c->nheld + 1, sizeof(*c->held), 64);
        if (!v) {
                gp_error("out of memory; stopping");
                _exit(70);
        }
        c->held = v;
        c->held[c->nheld++] = (gp_commit_held){.gen = gen, .id = id, .resized = resized};
}

const gp_commit_held *gp_commit_release(gp_daemon *d, size_t *ret_n) {
        gp_commit *c = d->cm;
        if (c->held0) { /* what the last call gave back is done with */
                memmove(c->held, c->held + c->held0, (c->nheld - c->held0) * sizeof(*c->held));
                c->nheld -= c->held0;
                c->held0 = 0;
        }
        *ret_n = 0;
        if (!c->nheld)
                return NULL;
        uint64_t dur = durable_now(c);
        size_t k = 0;
        while (k < c->nheld && c->held[k].gen <= dur)
                k++;
        c->held0 = k;
        *ret_n = k;
        if (k < c->nheld) {
                /* some wait: be woken when the first of them is durable */
                uint64_t first = c->held[k].gen;
                pthread_mutex_lock(&c->mu);
                if (durable_now(c) >= first)
                        kick_loop(d); /* it became durable just now */
                else
                        c->wake_at = first;
                pthread_mutex_unlock(&c->mu);
        }
        return c->held;
}

int gp_commit_wait(gp_daemon *d) {
        gp_commit *c = d->cm;
        if (!c)
                return 0;
        uint64_t g = __atomic_load_n(&c->applied, __ATOMIC_SEQ_CST);
        if (durable_now(c) >= g)
                return 0;
        if (gp_daemon_deposed()) /* a leader that lost the lead stores nothing more */
                return -ETIMEDOUT;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += GP_COMMIT_WAIT_MS / 1000;
        int rc = 0;
        pthread_mutex_lock(&c->mu);
        while (durable_now(c) < g && rc != ETIMEDOUT)
                rc = pthread_cond_timedwait(&c->done, &c->mu, &until);
        bool ok = durable_now(c) >= g;
        pthread_mutex_unlock(&c->mu);
        return ok ? 0 : -ETIMEDOUT;
}

void gp_commit_http_closing(gp_daemon *d) {
        gp_commit *c = d->cm;
        if (!c)
                return;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += GP_COMMIT_WAIT_MS / 1000;
        pthread_mutex_lock(&c->mu);
        int rc = 0;
        while ((c->head || c->sending) && c->running && rc != ETIMEDOUT)
                rc = pthread_cond_timedwait(&c->done, &c->mu, &until);
        c->closed = true;
        pending *rest = c->head; /* the disk is stuck: no answer waits for it any longer */
        c->head = c->tail = NULL;
        c->sending++;
        pthread_mutex_unlock(&c->mu);
        if (rest) {
                pthread_mutex_lock(&d->lock);
                send_list(rest, false);
                pthread_mutex_unlock(&d->lock);
        }
        pthread_mutex_lock(&c->mu);
        c->sending--;
        while (c->sending) /* the sync thread's last answers are out before MHD stops */
                pthread_cond_wait(&c->done, &c->mu);
        pthread_mutex_unlock(&c->mu);
}
