/* billing.h - metering, balances and invoices in the daemon (issue 7).
 *
 * Usage is recorded as segments of a task's run: when the run ends (task
 * end, preemption, requeue) and, for long runs, every
 * billing.record_interval_s.  A segment is queued by the loop thread while
 * it applies a batch and stored by gp_billing_store() inside the batch's
 * one transaction, beside the task change that ended it: a crash either
 * stores both or neither.  The next segment of a run starts where the last
 * stored one ended (after a restart: where the store says it ended), so
 * nothing is billed twice and nothing is lost.  Token counts of gateway
 * requests are recorded the same way (gp_billing_record_tokens).
 *
 * Credits (POST /admin/tenants/{id}/credit) are kept in the store's
 * metadata ("credits", cents per tenant) and audited; balance = credits -
 * charges (every month's invoice total, issued or open).  An invoice of a
 * closed month is issued (stored as JSON text in metadata
 * "invoice/<tenant>/<YYYY-MM>") the first time it is asked for and answered
 * from there byte for byte ever after.  The rules: docs/billing.md.
 *
 * Threads: everything marked "loop" runs on the loop thread under d->lock;
 * HTTP handlers read through d->rs under d->rs_lock.
 */
#ifndef GP_SERVER_BILLING_H
#define GP_SERVER_BILLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/task.h"

struct gp_daemon;
struct hreq;
struct cmd;

/* Billing payload of a command (CMD_CREDIT, CMD_USAGE_TOKENS, CMD_INVOICE);
 * owned by the cmd, freed with it. */
typedef struct gp_bill_cmd {
        char tenant[GP_TENANT_MAX];
        int month;                  /* CMD_INVOICE: YYYYMM */
        bool csv;                   /* CMD_INVOICE: answer as text/csv */
        int64_t amount_cents;       /* CMD_CREDIT (may be negative: a correction) */
        char note[160];             /* CMD_CREDIT: free text for the audit log */
        char model[GP_MODEL_MAX];   /* CMD_USAGE_TOKENS */
        int64_t prompt_tokens, completion_tokens, at_ms;
} gp_bill_cmd;

/* Start-up (after the store is open, before recovery): zones of the time
 * windows, stored credits.  0 or a negative code with a message in err. */
int gp_billing_init(struct gp_daemon *d, char *err, size_t errlen);
void gp_billing_done(struct gp_daemon *d);

/* Loop (or recovery): a run started at t->started_ms; its first segment
 * starts there.  Call once t holds its GPUs in the scheduler. */
void gp_billing_run_start(struct gp_daemon *d, const gp_task *t);
/* Recovery of a running task: its next segment starts where the store's
 * last segment of this run ended (or at started_ms).  Safe to call again
 * once the scheduler holds it (refreshes its GPU share). */
void gp_billing_recover(struct gp_daemon *d, const gp_task *t);
/* Loop: the run of t ended at end_ms (kind: enum gp_bill_end); queues its
 * last segment.  A no-op for a task with no run being metered, so calling
 * it twice bills once.  Call before t's GPUs are released. */
void gp_billing_run_end(struct gp_daemon *d, const gp_task *t, int64_t end_ms, int kind, int64_t now_ms);
/* Loop: an elastic task's GPU set changed at now_ms (the scheduler holds
 * the new one): its segment so far is queued at the old share, the next
 * one starts at now_ms with the new share. */
void gp_billing_run_resize(struct gp_daemon *d, const gp_task *t, int64_t now_ms);
/* Loop (or after it stopped, single-threaded): queue every summed token
 * count now, for a last commit. */
void gp_billing_flush(struct gp_daemon *d, int64_t now_ms);
/* Loop: interval segments of runs due at now_ms. */
void gp_billing_tick(struct gp_daemon *d, int64_t now_ms);
/* Loop: when the next interval segment is due (INT64_MAX if none). */
int64_t gp_billing_next_ms(struct gp_daemon *d);
/* Loop: anything to store in this batch? */
bool gp_billing_pending(struct gp_daemon *d);
/* Loop, inside the batch transaction: store what was queued (kept queued:
 * a commit that fails is tried again with the same rows).  0 or a store
 * error. */
int gp_billing_store(struct gp_daemon *d);
/* Loop, after the batch's commit succeeded: forget what gp_billing_store wrote. */
void gp_billing_stored(struct gp_daemon *d);

/* Loop: the 402 check of a submission.  0 when tenant may submit; else
 * -EDQUOT with *ret_body the error to answer. */
int gp_billing_check_submit(struct gp_daemon *d, const char *tenant, char **ret_body);
/* The gateway's 402 check (billing.enforce_balance covers /v1 too): 0 when
 * the tenant may send a request; 402 with the message in msg when its
 * balance is used up.  Any thread, no lock held; cheap (a lookup in the
 * set of tenants in debt that the loop recomputes every
 * GP_BILL_DEBT_EVERY_MS, so a credit takes effect within that). */
#define GP_BILL_DEBT_EVERY_MS 1000
int gp_billing_check_gateway(struct gp_daemon *d, const char *tenant, char *msg, size_t msglen);
/* Loop: apply CMD_CREDIT / CMD_USAGE_TOKENS / CMD_INVOICE; the answer is
 * sent after the batch is stored (*ret_body malloc'd, *ret_ctype static). */
void gp_billing_apply(struct gp_daemon *d, struct cmd *c, int64_t now_ms, int *ret_status, char **ret_body,
                      const char **ret_ctype);

/* The gateway's call: record the tokens of one request (or a batch) for a
 * tenant and model.  Any thread; no lock held by the caller; cheap (a sum
 * in memory, no store write per request).  Sums per (tenant, model) are
 * stored by the loop once the oldest is a second old (and when the daemon
 * stops), one record each: a crash loses at most the last second.
 * 0, -EINVAL (bad tenant/model text, negative counts), -ENOMEM, -E2BIG
 * (4096 pairs waiting), -EOVERFLOW. */
int gp_billing_record_tokens(struct gp_daemon *d, const char *tenant, const char *model, int64_t prompt_tokens,
                             int64_t completion_tokens, int64_t at_ms);

/* For GET /api/v1/tenants: {"currency","credits","charges","balance",
 * "month_to_date", each also *_cents}.  d->lock held; reads the store
 * through d->rs.  Caller json_decref's; NULL on failure. */
struct json_t *gp_billing_tenant_json(struct gp_daemon *d, const char *tenant);

/* HTTP: GET /api/v1/usage, GET /api/v1/invoices, POST /admin/usage/tokens
 * and POST /admin/tenants/{id}/credit are gp_billing_routes (routes.h). */

#endif
