/* idem.h - Idempotency-Key on the API's write routes (docs/api.md
 * "Idempotency-Key", docs/internals/store.md "Idempotency").
 *
 * A POST, PUT or DELETE of the route table (not the agent routes, which
 * have their seq, nor the /v1 gateway) may carry `Idempotency-Key: K`
 * (1..255 bytes 0x20..0x7e).  Per caller (the tenant of a tenant key, or
 * "admin"):
 *   - the first request with K runs as usual; the answer the loop makes
 *     for it is kept in the store IN THE SAME TRANSACTION as its change
 *     (gp_idem_record, then gp_idem_store from the batch's commit), with a
 *     fingerprint (SHA-256 of method, path and body);
 *   - a request with K and the same fingerprint gets that answer again,
 *     with `Idempotent-Replayed: true`, and changes nothing;
 *   - K with another fingerprint: 422; K while its first request is still
 *     being handled: 409 with Retry-After.
 * Answers that change nothing are not kept (a 4xx a handler gives before
 * the loop, a 429, 503 or 507 refusal): sent again, the request is judged
 * again.
 * Kept for at least 24 h; at most GP_IDEM_KEEP_MAX rows (the oldest go).
 *
 * Threads: begin/end on MHD threads (in-flight set under its own leaf
 * mutex; the store read on d->rs under d->rs_lock); record/store/pending/
 * batch_done on the loop thread (d->lock held for record).
 */
#ifndef GP_SERVER_IDEM_H
#define GP_SERVER_IDEM_H

#include <stdbool.h>
#include <stdint.h>

struct gp_daemon;
struct hreq;
struct gp_route_match;

#define GP_IDEM_KEEP_MS (24LL * 3600 * 1000)
#define GP_IDEM_KEEP_MAX 100000
#define GP_IDEM_INFLIGHT_MAX 4096

/* d->idem; 0 or -ENOMEM. */
int gp_idem_open(struct gp_daemon *d);
void gp_idem_close(struct gp_daemon *d);

/* Before the route's handler: 1 when r was answered here (*ret: MHD's
 * result): a bad key (400), a replay, 422, 409, a store failure (503);
 * 0 to go on (r->idem set when the request carries a key to keep). */
int gp_idem_begin(struct hreq *r, const struct gp_route_match *m, const char *url, const char *method, int *ret);
/* r's answer is queued (or r is done): its key is no longer in flight.
 * Takes r without a key; MHD thread of r. */
void gp_idem_end(struct hreq *r);

/* Loop thread, d->lock held, before the batch's commit: keep r's answer
 * (copied) with the batch when r carries a key and the answer is final
 * (not 429 nor 5xx). */
void gp_idem_record(struct gp_daemon *d, struct hreq *r, int status, const char *ctype, const char *body);
/* Inside the batch's transaction on d->ws: write what was recorded.
 * 0 or a store error. */
int gp_idem_store(struct gp_daemon *d);
bool gp_idem_pending(struct gp_daemon *d);
/* After the batch's commit (stored or not): forget what was recorded. */
void gp_idem_batch_done(struct gp_daemon *d);

#endif
