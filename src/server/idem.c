/* idem.c - Idempotency-Key on the API's write routes (see idem.h).
 *
 * Invariants: a key is in the in-flight set from gp_idem_begin until its
 * answer is queued (after its batch was committed and made durable: the
 * loop's answers wait for that), so a repeat either finds it in flight
 * (409) or finds its row in the store (replay) or, when the first one
 * changed nothing, runs again.
 * Rows are written only by the loop, in the batch's transaction. */
#include "server/idem.h"

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "base/vec.h"
#include "server/routes.h"
#include "server/server-int.h"
#include "store/idem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct gp_idem_req {
        struct gp_idem_req *next; /* in the in-flight list */
        char caller[GP_IDEM_CALLER_MAX + 1];
        char key[GP_IDEM_KEY_MAX + 1];
        char fp[GP_IDEM_FP_LEN + 1];
} gp_idem_req;

typedef struct gp_idem {
        pthread_mutex_t mu; /* leaf: the in-flight list */
        gp_idem_req *inflight;
        size_t ninflight;
        /* loop thread only */
        gp_store_idem *rows; /* recorded in this batch */
        size_t nrows, caprows;
        int64_t last_prune_ms;
} gp_idem;

int gp_idem_open(gp_daemon *d) {
        gp_idem *x = calloc(1, sizeof(*x));
        if (!x)
                return -ENOMEM;
        pthread_mutex_init(&x->mu, NULL);
        d->idem = x;
        return 0;
}

void gp_idem_close(gp_daemon *d) {
        gp_idem *x = d->idem;
        if (!x)
                return;
        gp_idem_batch_done(d);
        free(x->rows);
        while (x->inflight) { /* requests MHD never completed (it is gone) */
                gp_idem_req *n = x->inflight->next;
                free(x->inflight);
                x->inflight = n;
        }
        pthread_mutex_destroy(&x->mu);
        free(x);
        d->idem = NULL;
}

static bool is_write(const char *method) {
        return !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "DELETE");
}

/* The request's fingerprint (store/idem.h: the same a follower computes). */
static int fingerprint(const hreq *r, const char *url, const char *method, char out[GP_IDEM_FP_LEN + 1]) {
        return gp_store_idem_fingerprint(method, url, r->body.data, r->body.len, out);
}

static int answer_err(hreq *r, int status, const char *code, int retry_after, const char *msg) {
        return gp_http_send(r, status, gp_http_error_body(code, "%s", msg), retry_after);
}

int gp_idem_begin(hreq *r, const gp_route_match *m, const char *url, const char *method, int *ret) {
        gp_idem *x = r->d->idem;
        const char *key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
        if (!key || !x || !m->row || m->bad || !is_write(method) || m->row->who == GP_ROUTE_AGENT ||
            m->row->who == GP_ROUTE_OPEN || (m->row->who == GP_ROUTE_ADMIN && !r->admin) || r->body_too_big)
                return 0; /* the route answers as without a key (403, 413, ...) */
        char msg[512];
        size_t klen = strlen(key);
        if (!gp_store_idem_key_ok(key, klen)) {
                *ret = answer_err(r, 400, "invalid_request", 0,
                                  "Idempotency-Key must be 1..255 printable ASCII characters");
                return 1;
        }
        gp_idem_req *q = calloc(1, sizeof(*q));
        if (!q) {
                *ret = answer_err(r, 503, "unavailable", 1, "out of memory");
                return 1;
        }
        if (r->admin)
                gp_strlcpy(q->caller, "admin", sizeof(q->caller));
        else
                snprintf(q->caller, sizeof(q->caller), "tenant:%s", r->tenant);
        gp_strlcpy(q->key, key, sizeof(q->key));
        if (fingerprint(r, url, method, q->fp) < 0) {
                free(q);
                *ret = answer_err(r, 503, "unavailable", 1, "out of memory");
                return 1;
        }
        /* in flight first: a row that is not in the store now is not
         * written behind our back while we hold the key */
        pthread_mutex_lock(&x->mu);
        bool busy = x->ninflight >= GP_IDEM_INFLIGHT_MAX;
        for (gp_idem_req *p = x->inflight; p && !busy; p = p->next)
                busy = !strcmp(p->caller, q->caller) && !strcmp(p->key, q->key);
        if (!busy) {
                q->next = x->inflight;
                x->inflight = q;
                x->ninflight++;
                r->idem = q;
        }
        pthread_mutex_unlock(&x->mu);
        if (busy) {
                free(q);
                *ret = answer_err(r, 409, "idempotency_in_flight", 1,
                                  "a request with this Idempotency-Key is still being handled; send it again "
                                  "once it is answered (the same request gets the same answer)");
                return 1;
        }
        gp_store_idem rec;
        pthread_mutex_lock(&r->d->rs_lock);
        int rc = gp_store_idem_get(r->d->rs, q->caller, q->key, &rec);
        if (rc < 0 && rc != -ENOENT)
                snprintf(msg, sizeof(msg), "cannot read the answers kept for Idempotency-Key: %s",
                         gp_store_errmsg(r->d->rs));
        pthread_mutex_unlock(&r->d->rs_lock);
        if (rc == -ENOENT)
                return 0; /* the first of its key: r->idem stays, the loop keeps its answer */
        if (rc < 0) {
                *ret = answer_err(r, 503, "unavailable", 1, msg);
                return 1;
        }
        if (strcmp(rec.fp, q->fp) != 0) {
                free(rec.body);
                *ret = answer_err(r, 422, "idempotency_key_reused", 0,
                                  "this Idempotency-Key was sent with another request (method, path or body "
                                  "differ); use a new key for a new request");
                return 1;
        }
        r->idem_replayed = true;
        *ret = gp_http_send_type(r, rec.status, rec.body, rec.ctype[0] ? rec.ctype : NULL);
        return 1;
}

void gp_idem_end(hreq *r) {
        gp_idem_req *q = r->idem;
        if (!q)
                return;
        gp_idem *x = r->d->idem;
        pthread_mutex_lock(&x->mu);
        for (gp_idem_req **pp = &x->inflight; *pp; pp = &(*pp)->next)
                if (*pp == q) {
                        *pp = q->next;
                        x->ninflight--;
                        break;
                }
        pthread_mutex_unlock(&x->mu);
        free(q);
        r->idem = NULL;
}

void gp_idem_record(gp_daemon *d, hreq *r, int status, const char *ctype, const char *body) {
        gp_idem *x = d->idem;
        gp_idem_req *q = r ? r->idem : NULL;
        /* a "try again later" changed nothing: sent again, it is judged again */
        if (!x || !q || status >= 500 || status < 100 || status == 429)
                return;
        gp_store_idem *v = gp_vec_grow(x->rows, &x->caprows, x->nrows + 1, sizeof(*x->rows), 16);
        if (!v) {
                gp_error("out of memory keeping an idempotent answer; stopping");
                _exit(70);
        }
        x->rows = v;
        gp_store_idem *row = &x->rows[x->nrows];
        memset(row, 0, sizeof(*row));
        gp_strlcpy(row->caller, q->caller, sizeof(row->caller));
        gp_strlcpy(row->key, q->key, sizeof(row->key));
        gp_strlcpy(row->fp, q->fp, sizeof(row->fp));
        row->status = status;
        if (ctype)
                gp_strlcpy(row->ctype, ctype, sizeof(row->ctype));
        size_t blen = body ? strlen(body) : 0;
        if (blen > GP_IDEM_BODY_MAX) { /* the request ran once; its answer is too big to keep whole */
                row->ctype[0] = '\0';
                row->body = gp_http_error_body("replay_too_large",
                                               "the first answer (%zu bytes) was carried out "
                                               "once; it is over 1 MiB and was not kept",
                                               blen);
        } else {
                row->body = strdup(body ? body : "");
        }
        if (!row->body) {
                gp_error("out of memory keeping an idempotent answer; stopping");
                _exit(70);
        }
        row->created_ms = gp_now_ms();
        x->nrows++;
}

bool gp_idem_pending(gp_daemon *d) {
        return d->idem && d->idem->nrows > 0;
}

int gp_idem_store(gp_daemon *d) {
        gp_idem *x = d->idem;
        if (!x || !x->nrows)
                return 0;
        int64_t now = gp_now_ms();
        int rc = 0;
        if (now - x->last_prune_ms >= 60000) {
                rc = gp_store_idem_prune(d->ws, now - GP_IDEM_KEEP_MS, GP_IDEM_KEEP_MAX);
                if (rc == 0)
                        x->last_prune_ms = now;
        }
        for (size_t i = 0; rc == 0 && i < x->nrows; i++)
                rc = gp_store_idem_put(d->ws, &x->rows[i]);
        return rc;
}

void gp_idem_batch_done(gp_daemon *d) {
        gp_idem *x = d->idem;
        if (!x)
                return;
        for (size_t i = 0; i < x->nrows; i++)
                free(x->rows[i].body);
        x->nrows = 0;
}
