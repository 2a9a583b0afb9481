/* follower-idem.c - a follower's writes at a failover (follower-idem.h).
 *
 * Invariant: "not carried out" is said only after the lease row showed an
 * epoch newer than the one the request was sent under (or this server
 * took the lease), and then the store had no answer for its key: the old
 * leader's later commits fail its fence, and a commit that came first
 * kept the answer in the same transaction. */
#include "server/follower-idem.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include <jansson.h>

#include "base/url.h"
#include "base/util.h"
#include "config/config.h"
#include "store/store.h"

#define POLL_MS 200

struct gp_fres {
        pthread_mutex_t mu; /* the store handle */
        gp_store *s;        /* opened at the first resolution; NULL until then (or after a failure) */
        char *url;          /* store.url */
        int64_t lease_ms;
        _Atomic int64_t epoch; /* the leader's, as the follower knows it */
        atomic_bool leads;     /* this server took the lease */
};

/* Under r->mu: the handle, opened if needed. */
static gp_store *handle(gp_fres *r) {
        if (!r->s) {
                char err[256];
                gp_store_options so = {.busy_timeout_ms = 5000};
                if (gp_store_open(r->url, &so, &r->s, err, sizeof(err)) < 0)
                        r->s = NULL;
        }
        return r->s;
}

int gp_fres_new(const gp_config *cfg, gp_fres **ret) {
        gp_fres *r = calloc(1, sizeof(*r));
        if (!r || !(r->url = strdup(cfg->store_url))) {
                free(r);
                return -ENOMEM;
        }
        pthread_mutex_init(&r->mu, NULL);
        r->lease_ms = (int64_t)cfg->lease_s * 1000;
        atomic_init(&r->epoch, 0);
        atomic_init(&r->leads, false);
        /* opened now, while nothing is in doubt: an open runs the schema's
         * statements, which a leader frozen mid-batch could hold up later */
        pthread_mutex_lock(&r->mu);
        handle(r);
        pthread_mutex_unlock(&r->mu);
        *ret = r;
        return 0;
}

void gp_fres_free(gp_fres *r) {
        if (!r)
                return;
        gp_store_close(r->s);
        explicit_bzero(r->url, strlen(r->url));
        free(r->url);
        pthread_mutex_destroy(&r->mu);
        free(r);
}

void gp_fres_set_epoch(gp_fres *r, int64_t epoch) {
        if (r)
                atomic_store(&r->epoch, epoch);
}

int64_t gp_fres_epoch(gp_fres *r) {
        return r ? atomic_load(&r->epoch) : 0;
}

void gp_fres_leads(gp_fres *r) {
        if (r)
                atomic_store(&r->leads, true);
}

static bool is_write(const char *m) {
        return !strcmp(m, "POST") || !strcmp(m, "PUT") || !strcmp(m, "DELETE");
}

int gp_fres_key_add(gp_fres *r, const char *method, const char *target, const char *body, size_t len, gp_fwd_header *h,
                    size_t *n, size_t max, gp_fres_req *ret) {
        memset(ret, 0, sizeof(*ret));
        if (!is_write(method) || !strncmp(target, "/v1/", 4) || !strncmp(target, "/agent/", 7))
                return 0; /* the gateway and the agents take no key */
        const char *have = NULL;
        for (size_t i = 0; i < *n; i++)
                if (!strcasecmp(h[i].name, "Idempotency-Key"))
                        have = h[i].value;
        if (have) {
                if (!gp_store_idem_key_ok(have, strlen(have)))
                        return 0; /* the leader refuses it (400) */
                gp_strlcpy(ret->key, have, sizeof(ret->key));
        } else {
                unsigned char b[16];
                if (*n >= max)
                        return 0; /* no room: the leader answers 431 anyway */
                if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
                        return -EIO;
                memcpy(ret->line, "gpf-", 4);
                for (size_t i = 0; i < sizeof(b); i++)
                        snprintf(ret->line + 4 + 2 * i, 3, "%02x", b[i]);
                gp_strlcpy(ret->key, ret->line, sizeof(ret->key));
                h[(*n)++] = (gp_fwd_header){"Idempotency-Key", ret->line};
        }
        /* the path as the leader's MHD hands it on: no query, percent-decoded (base/url.h) */
        size_t plen = strcspn(target, "?");
        char *path = strndup(target, plen);
        if (!path)
                return -ENOMEM;
        gp_url_unescape(path);
        int rc = gp_store_idem_fingerprint(method, path, body, len, ret->fp);
        if (rc < 0) {
                free(path);
                return rc;
        }
        ret->epoch = gp_fres_epoch(r);
        ret->keyed = true;
        ret->by_owner = !strncmp(path, "/api/v1/coordinator/", 20) || !strncmp(path, "/api/coordinator/", 17);
        free(path);
        return 0;
}

static void pause_ms(int64_t ms) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

/* Is the leader of epoch fenced now (the lease row shows a newer epoch)?
 * 1 yes, 0 not yet, -1 the store cannot be read. */
static int fenced(gp_fres *r, int64_t epoch) {
        if (atomic_load(&r->leads))
                return 1;
        pthread_mutex_lock(&r->mu);
        gp_store *s = handle(r);
        gp_store_lease l = {.epoch = 0};
        int rc = s ? gp_store_lease_get(s, &l) : -1;
        pthread_mutex_unlock(&r->mu);
        if (rc < 0)
                return -1;
        return l.epoch > epoch ? 1 : 0;
}

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, char *body, const char *ctype,
                             const gp_fres_req *q, bool replayed, bool retry, const char *fwd_by) {
        if (!body)
                return MHD_NO;
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", ctype && ctype[0] ? ctype : "application/json");
        MHD_add_response_header(resp, "Idempotency-Key", q->key);
        MHD_add_response_header(resp, GP_FWD_BY, fwd_by);
        if (replayed)
                MHD_add_response_header(resp, "Idempotent-Replayed", "true");
        if (retry)
                MHD_add_response_header(resp, "Retry-After", "1");
        enum MHD_Result ret = MHD_queue_response(c, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static char *error_body(const char *code, const char *msg) {
        json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

enum MHD_Result gp_fres_answer(gp_fres *r, struct MHD_Connection *c, const gp_fres_req *q, const atomic_bool *stopping,
                               const char *fwd_by) {
        char msg[600];
        if (q->by_owner) /* the store has no answer to look for: the caller sends it again */
                return queue(c, 503,
                             error_body("leader_unreachable",
                                        "the leader went away while this coordinator call was on its way; "
                                        "coordinator calls are idempotent for their owner (a renewal, the same "
                                        "fencing token): send it again"),
                             NULL, q, false, true, fwd_by);
        int64_t until = gp_mono_ms() + 2 * r->lease_ms + 5000;
        int f = 0;
        /* a stop that is not a takeover by this server decides nothing */
        while ((f = fenced(r, q->epoch)) != 1 && gp_mono_ms() < until &&
               !(atomic_load(stopping) && !atomic_load(&r->leads)))
                pause_ms(POLL_MS);
        if (f == 1) {
                gp_store_idem rec;
                pthread_mutex_lock(&r->mu);
                gp_store *s = handle(r);
                int rc = s ? gp_store_idem_find(s, q->key, q->fp, &rec) : -1;
                pthread_mutex_unlock(&r->mu);
                if (rc == 0)
                        return queue(c, (unsigned)rec.status, rec.body, rec.ctype, q, true, false, fwd_by);
                if (rc == -ENOENT)
                        return queue(c, 503,
                                     error_body("not_carried_out",
                                                "the leader went away before it carried this out, and another "
                                                "server leads now (the old one can no longer store anything): "
                                                "nothing was done; send it again"),
                                     NULL, q, false, true, fwd_by);
        }
        snprintf(msg, sizeof(msg),
                 "the leader went away while this request was on its way and no server could tell yet whether "
                 "it was carried out; send it again with the header Idempotency-Key: %s (as in this answer): "
                 "it is then carried out at most once, or its first answer is given",
                 q->key);
        return queue(c, 503, error_body("leader_unreachable", msg), NULL, q, false, true, fwd_by);
}
