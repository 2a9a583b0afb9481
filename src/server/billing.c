/* billing.c - metering, balances and invoices of the daemon (billing.h).
 *
 * Invariants:
 *   - d->bill->runs holds one entry per running task being metered: where
 *     its next segment starts (`from`), where its run started, its GPU
 *     share and GPU model.  An entry exists from the run's start (or
 *     recovery) until gp_billing_run_end removes it, so a run's end is
 *     billed once.
 *   - a segment is queued under d->lock by the loop thread and stored by
 *     gp_billing_store in the same transaction as the task changes of the
 *     batch; `from` moves to the segment's end when it is queued, and a
 *     failed store stops the daemon (so `from` never runs ahead of what a
 *     restart will find stored).
 *   - a segment belongs to the billing month in which it is recorded
 *     (the batch's clock); an invoice is only issued once that month has
 *     ended, by the same loop thread, so no segment can join a month after
 *     its invoice was issued.
 *   - money is integer cents (credits, balances, invoices) or micro-units
 *     (prices), never floating point (core/billing.h).
 */
#include "server/billing.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/tz.h"
#include "base/util.h"
#include "base/vec.h"
#include "core/billing.h"
#include "server/routes.h"
#include "server/server-int.h"
#include "server/tenants.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVOICE_MAX (1 << 20)      /* bytes of a stored invoice */
#define META_MAX (1 << 20)         /* bytes of a metadata value (the store's limit) */
#define PENDING_MAX 100000         /* queued records before the loop refuses token records */
#define USAGE_GROUPS_MAX 100000    /* groups in one usage answer */
#define RANGE_MAX_MS (400LL * 86400 * 1000) /* longest from..to of a usage query */
#define TOKENS_FLUSH_MS 1000       /* gateway token sums are stored this often */
#define TOKEN_SUMS_MAX 4096        /* (tenant, model) pairs summed between flushes */

typedef struct run {
        int64_t from;               /* next segment starts here */
        int64_t run_start;          /* this run's start (minimum billing period) */
        int64_t gpus_milli;
        int64_t memory_mb;
        char tenant[GP_TENANT_MAX];
        char model[GP_MODEL_MAX];
} run;

typedef struct pending_invoice {
        char key[GP_TENANT_MAX + 24];
        char *json;
} pending_invoice;

typedef struct bal {
        char tenant[GP_TENANT_MAX];
        int month;                  /* the current month when computed */
        bool closed_ok, cur_ok;
        int64_t closed;             /* charges of the months before `month`, cents */
        int64_t cur;                /* charges of `month` so far */
} bal;

typedef struct gp_billing {
        gp_bill_zones zones;
        gp_tz tz[GP_BILL_MAX_WINDOWS];
        gp_i64map runs;             /* task id -> run*, loop */
        gp_bill_segment *segs;      /* queued for this batch, loop */
        size_t nsegs, capsegs;
        gp_bill_tokens *toks;
        size_t ntoks, captoks;
        pending_invoice *invs;
        size_t ninvs, capinvs;
        json_t *credits;            /* {tenant: cents}, under d->lock */
        bool meta_credits;          /* store "credits" in this batch */
        bal *bals;                  /* balance cache, under d->lock */
        size_t nbals, capbals;
        /* gateway tokens summed per (tenant, model) between flushes, under
         * tok_lock (any thread adds, the loop takes them) */
        pthread_mutex_t tok_lock;
        gp_bill_tokens *acc;
        size_t nacc, capacc;
        int64_t acc_since_ms;       /* when the oldest sum began, 0 = none */
        /* external tenants whose balance is used up (enforce_balance), for
         * the gateway: the loop recomputes it every GP_BILL_DEBT_EVERY_MS
         * and swaps it in under tok_lock; gateway threads read it there */
        char (*debt)[GP_TENANT_MAX];
        size_t ndebt;
        int64_t debt_at_ms;         /* when the loop last recomputed it */
} gp_billing;

static void flush_tokens(gp_daemon *d, int64_t now, bool force);
static int charges(gp_daemon *d, gp_store *s, const char *tenant, int64_t now, int64_t *ret_total,
                   int64_t *ret_month);
static int64_t credits_of(gp_daemon *d, const char *tenant);

static gp_billing *B(gp_daemon *d) {
        return d->bill;
}

/* Room for element n (the next one) of an array. */
static void *grow(void *p, size_t *cap, size_t n, size_t elem) {
        return gp_vec_grow(p, cap, n + 1, elem, 16);
}

static void oom_stop(void) {
        gp_error("out of memory recording usage; stopping");
        _exit(70);
}

/* ------------------------------------------------------------------ */
/* start-up                                                            */

int gp_billing_init(gp_daemon *d, char *err, size_t errlen) {
        gp_billing *b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        d->bill = b;
        gp_i64map_init(&b->runs);
        pthread_mutex_init(&b->tok_lock, NULL);
        const gp_bill_prices *p = &d->cfg.billing;
        for (int i = 0; i < p->n_windows; i++) {
                if (gp_tz_load(p->windows[i].tz, &b->tz[i]) < 0) {
                        snprintf(err, errlen, "billing time window %s: cannot load time zone %s", p->windows[i].name,
                                 p->windows[i].tz);
                        return -EINVAL;
                }
                b->zones.tz[i] = &b->tz[i];
        }
        char *buf = malloc(META_MAX + 1);
        if (!buf)
                return -ENOMEM;
        if (gp_store_meta_get(d->ws, "credits", buf, META_MAX + 1) == 0)
                b->credits = json_loads(buf, 0, NULL);
        free(buf);
        if (!json_is_object(b->credits)) {
                json_decref(b->credits);
                b->credits = json_object();
        }
        return b->credits ? 0 : -ENOMEM;
}

void gp_billing_done(gp_daemon *d) {
        gp_billing *b = B(d);
        if (!b)
                return;
        size_t pos = 0;
        run *r;
        while ((r = gp_i64map_next(&b->runs, &pos, NULL)))
                free(r);
        gp_i64map_done(&b->runs);
        for (size_t i = 0; i < b->ninvs; i++)
                free(b->invs[i].json);
        free(b->invs);
        free(b->segs);
        free(b->toks);
        free(b->acc);
        free(b->debt);
        pthread_mutex_destroy(&b->tok_lock);
        free(b->bals);
        json_decref(b->credits);
        free(b);
        d->bill = NULL;
}

/* ------------------------------------------------------------------ */
/* metering (loop thread)                                              */

/* GPU share and model of a running task: from the scheduler while it
 * holds the task, else from its record (whole GPUs). */
static void share_of(gp_daemon *d, const gp_task *t, int64_t *ret_milli, char *model, size_t size) {
        gp_sched_task_view v;
        gp_sched_gpu_view g;
        uint32_t gid;
        model[0] = '\0';
        if (gp_sched_task_get(d->sched, t->id, &v) == 0 && v.running && v.n_gpus > 0) {
                *ret_milli = v.gpus_milli;
                if (gp_sched_gpu_get(d->sched, v.gpus[0], &g) == 0 && g.name)
                        gp_strlcpy(model, g.name, size);
                return;
        }
        *ret_milli = (int64_t)(t->n_gpus > 0 ? t->n_gpus : t->gpu_request) * 1000;
        if (t->n_gpus > 0 && gp_sched_gpu_find_uuid(d->sched, t->gpus[0].uuid, &gid) == 0 &&
            gp_sched_gpu_get(d->sched, gid, &g) == 0 && g.name)
                gp_strlcpy(model, g.name, size);
}

static run *run_put(gp_daemon *d, const gp_task *t) {
        gp_billing *b = B(d);
        run *r = gp_i64map_get(&b->runs, t->id);
        if (!r) {
                r = calloc(1, sizeof(*r));
                if (!r || gp_i64map_put(&b->runs, t->id, r) < 0)
                        oom_stop();
                r->from = r->run_start = t->started_ms;
        }
        gp_strlcpy(r->tenant, t->tenant, sizeof(r->tenant));
        r->memory_mb = t->memory_mb;
        share_of(d, t, &r->gpus_milli, r->model, sizeof(r->model));
        return r;
}

void gp_billing_run_start(gp_daemon *d, const gp_task *t) {
        run *r = run_put(d, t);
        r->from = r->run_start = t->started_ms;
}

typedef struct last_end {
        int64_t run_start, end;
} last_end;

static int last_end_cb(const gp_bill_segment *g, void *ud) {
        last_end *le = ud;
        if (g->run_start_ms == le->run_start && g->end_ms > le->end)
                le->end = g->end_ms;
        return 0;
}

void gp_billing_recover(gp_daemon *d, const gp_task *t) {
        bool known = gp_i64map_get(&B(d)->runs, t->id) != NULL;
        run *r = run_put(d, t);
        if (known)
                return;
        /* the reader handle: the writer is busy loading the active tasks */
        last_end le = {t->started_ms, t->started_ms};
        gp_usage_filter f = {.task_id = t->id, .from_ms = t->started_ms};
        pthread_mutex_lock(&d->rs_lock);
        int rc = gp_store_usage_list(d->rs, &f, last_end_cb, &le);
        pthread_mutex_unlock(&d->rs_lock);
        if (rc < 0)
                gp_warn("task %" PRId64 ": cannot read its usage (%s); metering from its start", t->id,
                        gp_store_errmsg(d->rs));
        r->from = le.end;
        r->run_start = t->started_ms;
}

static void invalidate(gp_daemon *d, const char *tenant) {
        gp_billing *b = B(d);
        for (size_t i = 0; i < b->nbals; i++)
                if (!strcmp(b->bals[i].tenant, tenant))
                        b->bals[i].cur_ok = false;
}

static void queue_segment(gp_daemon *d, int64_t id, const run *r, int64_t end, int kind, int64_t now) {
        gp_billing *b = B(d);
        gp_bill_segment *p = grow(b->segs, &b->capsegs, b->nsegs, sizeof(*p));
        if (!p)
                oom_stop();
        b->segs = p;
        gp_bill_segment *g = &b->segs[b->nsegs++];
        memset(g, 0, sizeof(*g));
        g->task_id = id;
        gp_strlcpy(g->tenant, r->tenant, sizeof(g->tenant));
        gp_strlcpy(g->gpu_model, r->model, sizeof(g->gpu_model));
        g->gpus_milli = r->gpus_milli;
        g->memory_mb = r->memory_mb;
        g->start_ms = r->from;
        g->end_ms = end > r->from ? end : r->from;
        g->gpu_ms = gp_bill_gpu_ms(g->start_ms, g->end_ms, g->gpus_milli);
        g->run_start_ms = r->run_start;
        g->end_kind = kind;
        g->month = gp_bill_month_of(now);
}

void gp_billing_run_end(gp_daemon *d, const gp_task *t, int64_t end_ms, int kind, int64_t now) {
        run *r = gp_i64map_del(&B(d)->runs, t->id);
        if (!r)
                return;
        queue_segment(d, t->id, r, end_ms, kind, now);
        free(r);
}

void gp_billing_run_resize(gp_daemon *d, const gp_task *t, int64_t now) {
        run *r = gp_i64map_get(&B(d)->runs, t->id);
        if (!r)
                return;
        if (now > r->from) {
                queue_segment(d, t->id, r, now, GP_BILL_INTERVAL, now);
                r->from = now;
        }
        run_put(d, t); /* the new share, as the scheduler holds it now */
}

/* The external tenants in debt, recomputed (loop, d->lock held). */
static void refresh_debt(gp_daemon *d, int64_t now) {
        gp_billing *b = B(d);
        if (!d->cfg.billing.enforce_balance || now - b->debt_at_ms < GP_BILL_DEBT_EVERY_MS)
                return;
        b->debt_at_ms = now;
        size_t n = gp_tenants_count(d->tenants), k = 0;
        char(*v)[GP_TENANT_MAX] = n ? calloc(n, sizeof(*v)) : NULL;
        if (n && !v)
                return; /* the old set stays; tried again next time */
        for (size_t i = 0; i < n; i++) {
                const gp_cfg_tenant *t = gp_tenants_at(d->tenants, i);
                int64_t total = 0;
                if (strcmp(t->kind, "external") || charges(d, d->ws, t->id, now, &total, NULL) < 0)
                        continue; /* as on submit: a balance that cannot be computed does not stop anyone */
                if (credits_of(d, t->id) - total <= 0)
                        gp_strlcpy(v[k++], t->id, GP_TENANT_MAX);
        }
        pthread_mutex_lock(&b->tok_lock);
        char(*old)[GP_TENANT_MAX] = b->debt;
        b->debt = v;
        b->ndebt = k;
        pthread_mutex_unlock(&b->tok_lock);
        free(old);
}

int gp_billing_check_gateway(gp_daemon *d, const char *tenant, char *msg, size_t msglen) {
        gp_billing *b = B(d);
        if (!d->cfg.billing.enforce_balance || !b)
                return 0;
        bool debt = false;
        pthread_mutex_lock(&b->tok_lock);
        for (size_t i = 0; i < b->ndebt && !debt; i++)
                debt = !strcmp(b->debt[i], tenant);
        pthread_mutex_unlock(&b->tok_lock);
        if (!debt)
                return 0;
        snprintf(msg, msglen,
                 "tenant %s has used up its balance: add credit (POST /admin/tenants/%s/credit) before sending "
                 "more requests",
                 tenant, tenant);
        return 402;
}

void gp_billing_tick(gp_daemon *d, int64_t now) {
        gp_billing *b = B(d);
        refresh_debt(d, now);
        flush_tokens(d, now, false);
        int64_t every = (int64_t)d->cfg.billing.record_interval_s * 1000;
        size_t pos = 0;
        int64_t id;
        run *r;
        while ((r = gp_i64map_next(&b->runs, &pos, &id))) {
                if (now - r->from < every)
                        continue;
                queue_segment(d, id, r, now, GP_BILL_INTERVAL, now);
                r->from = now;
        }
}

int64_t gp_billing_next_ms(gp_daemon *d) {
        gp_billing *b = B(d);
        int64_t every = (int64_t)d->cfg.billing.record_interval_s * 1000, next = INT64_MAX;
        size_t pos = 0;
        run *r;
        while ((r = gp_i64map_next(&b->runs, &pos, NULL)))
                if (r->from + every < next)
                        next = r->from + every;
        pthread_mutex_lock(&b->tok_lock);
        if (b->nacc && b->acc_since_ms + TOKENS_FLUSH_MS < next)
                next = b->acc_since_ms + TOKENS_FLUSH_MS;
        pthread_mutex_unlock(&b->tok_lock);
        if (d->cfg.billing.enforce_balance && b->debt_at_ms + GP_BILL_DEBT_EVERY_MS < next)
                next = b->debt_at_ms + GP_BILL_DEBT_EVERY_MS;
        return next;
}

bool gp_billing_pending(gp_daemon *d) {
        gp_billing *b = B(d);
        return b->nsegs || b->ntoks || b->ninvs || b->meta_credits;
}

int gp_billing_store(gp_daemon *d) {
        gp_billing *b = B(d);
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < b->nsegs; i++) {
                rc = gp_store_usage_add(d->ws, &b->segs[i]);
                invalidate(d, b->segs[i].tenant);
        }
        for (size_t i = 0; rc == 0 && i < b->ntoks; i++) {
                rc = gp_store_tokens_add(d->ws, &b->toks[i]);
                invalidate(d, b->toks[i].tenant);
        }
        for (size_t i = 0; rc == 0 && i < b->ninvs; i++)
                rc = gp_store_meta_set(d->ws, b->invs[i].key, b->invs[i].json);
        if (rc == 0 && b->meta_credits) {
                char *s = json_dumps(b->credits, JSON_COMPACT | JSON_SORT_KEYS);
                rc = s ? gp_store_meta_set(d->ws, "credits", s) : -ENOMEM;
                free(s);
        }
        return rc;
}

void gp_billing_stored(gp_daemon *d) {
        gp_billing *b = B(d);
        b->nsegs = b->ntoks = 0;
        for (size_t i = 0; i < b->ninvs; i++)
                free(b->invs[i].json);
        b->ninvs = 0;
        b->meta_credits = false;
}

/* ------------------------------------------------------------------ */
/* months, invoices, balances                                          */

typedef struct month_data {
        gp_bill_segment *segs;
        size_t nsegs, capsegs;
        gp_bill_tokens *toks;
        size_t ntoks, captoks;
        bool oom;
} month_data;

static int collect_seg(const gp_bill_segment *g, void *ud) {
        month_data *m = ud;
        gp_bill_segment *p = grow(m->segs, &m->capsegs, m->nsegs, sizeof(*p));
        if (!p) {
                m->oom = true;
                return -ENOMEM;
        }
        m->segs = p;
        m->segs[m->nsegs++] = *g;
        return 0;
}

static int collect_tok(const gp_bill_tokens *t, void *ud) {
        month_data *m = ud;
        gp_bill_tokens *p = grow(m->toks, &m->captoks, m->ntoks, sizeof(*p));
        if (!p) {
                m->oom = true;
                return -ENOMEM;
        }
        m->toks = p;
        m->toks[m->ntoks++] = *t;
        return 0;
}

static void month_data_done(month_data *m) {
        free(m->segs);
        free(m->toks);
}

/* Records of tenant in months min..max (0 = unbounded). */
static int load_months(gp_store *s, const char *tenant, int min, int max, month_data *m) {
        gp_usage_filter f = {.tenant = tenant, .month_min = min, .month_max = max};
        int rc = gp_store_usage_list(s, &f, collect_seg, m);
        if (rc == 0)
                rc = gp_store_tokens_list(s, &f, collect_tok, m);
        return m->oom ? -ENOMEM : rc;
}

static void invoice_key(const char *tenant, int month, char *buf, size_t size) {
        char ms[16];
        gp_bill_month_format(month, ms, sizeof(ms));
        snprintf(buf, size, "invoice/%s/%s", tenant, ms);
}

static json_t *money(int64_t cents) {
        char b[32];
        gp_bill_format_cents(cents, b, sizeof(b));
        return json_string(b);
}

static json_t *hours(int64_t gpu_ms) {
        /* for people: GPU-hours with 6 decimals, as text (never summed) */
        char b[40];
        /* micro-hours = gpu_ms / 3.6e6 * 1e6 = gpu_ms * 10 / 36, rounded down, without overflow */
        int64_t micro_h = gpu_ms / 36 * 10 + gpu_ms % 36 * 10 / 36;
        gp_bill_format_micros(micro_h, b, sizeof(b));
        return json_string(b);
}

/* The invoice as the API shows (and stores) it. */
static json_t *invoice_json(gp_daemon *d, const char *tenant, int month, const gp_bill_invoice *inv,
                            const char *status, int64_t now) {
        const gp_bill_prices *p = &d->cfg.billing;
        char ms[16], at[40], from[40], to[40];
        gp_bill_month_format(month, ms, sizeof(ms));
        gp_time_format(now, at, sizeof(at));
        gp_time_format(gp_bill_month_start_ms(month), from, sizeof(from));
        gp_time_format(gp_bill_month_start_ms(gp_bill_month_next(month)), to, sizeof(to));
        json_t *lines = json_array();
        for (size_t i = 0; i < inv->nlines; i++) {
                const gp_bill_line *l = &inv->lines[i];
                json_t *o;
                if (l->kind == GP_BILL_LINE_TOKENS) {
                        o = json_pack("{s:s,s:s,s:I,s:I}", "kind", "tokens", "model", l->name, "prompt_tokens",
                                      (json_int_t)l->prompt_tokens, "completion_tokens",
                                      (json_int_t)l->completion_tokens);
                } else {
                        char up[40];
                        gp_bill_format_micros(l->unit_price, up, sizeof(up));
                        o = json_pack("{s:s,s:I,s:I,s:o,s:o}", "kind",
                                      l->kind == GP_BILL_LINE_GPU ? "gpu" : "volume_discount", "gpu_ms",
                                      (json_int_t)l->gpu_ms, "billed_gpu_ms", (json_int_t)l->billed_gpu_ms,
                                      "gpu_hours", hours(l->gpu_ms), "billed_gpu_hours", hours(l->billed_gpu_ms));
                        if (l->kind == GP_BILL_LINE_GPU) {
                                json_object_set_new(o, "gpu_model", json_string(l->name));
                                json_object_set_new(o, "price_per_gpu_hour", json_string(up));
                        }
                }
                json_object_set_new(o, "amount_cents", json_integer(l->amount_cents));
                json_object_set_new(o, "amount", money(l->amount_cents));
                json_array_append_new(lines, o);
        }
        json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:I,s:o,s:I,s:I,s:I}", "tenant_id", tenant, "month", ms,
                              "status", status, "currency", p->currency, "period_start", from, "period_end", to,
                              "lines", lines, "total_cents", (json_int_t)inv->total_cents, "total",
                              money(inv->total_cents), "gpu_ms", (json_int_t)inv->gpu_ms, "billed_gpu_ms",
                              (json_int_t)inv->billed_gpu_ms, "tasks", (json_int_t)inv->tasks);
        json_object_set_new(j, !strcmp(status, "issued") ? "issued_at" : "as_of", json_string(at));
        return j;
}

/* Price a month of a tenant from store s. */
static int price_month(gp_daemon *d, gp_store *s, const char *tenant, int month, gp_bill_invoice *ret) {
        month_data m = {0};
        int rc = load_months(s, tenant, month, month, &m);
        if (rc == 0)
                rc = gp_bill_price(&d->cfg.billing, &B(d)->zones, m.segs, m.nsegs, m.toks, m.ntoks, ret);
        month_data_done(&m);
        return rc;
}

/* Stored invoice text of a closed month (malloc'd) or NULL. */
static char *stored_invoice(gp_store *s, const char *tenant, int month) {
        char key[GP_TENANT_MAX + 24];
        invoice_key(tenant, month, key, sizeof(key));
        char *buf = malloc(INVOICE_MAX + 1);
        if (!buf)
                return NULL;
        if (gp_store_meta_get(s, key, buf, INVOICE_MAX + 1) < 0) {
                free(buf);
                return NULL;
        }
        return buf;
}

static int64_t credits_of(gp_daemon *d, const char *tenant) {
        return json_integer_value(json_object_get(B(d)->credits, tenant));
}

static int cmp_month(const void *x, const void *y) {
        const gp_bill_segment *a = x, *b = y;
        return a->month - b->month;
}

static int cmp_tok_month(const void *x, const void *y) {
        const gp_bill_tokens *a = x, *b = y;
        return a->month - b->month;
}

/* Charges of every month before `month` (issued invoices as issued). */
static int closed_charges(gp_daemon *d, gp_store *s, const char *tenant, int month, int64_t *ret) {
        month_data m = {0};
        int rc = load_months(s, tenant, 0, month % 100 == 1 ? (month / 100 - 1) * 100 + 12 : month - 1, &m);
        int64_t sum = 0;
        if (rc < 0)
                goto out;
        if (m.nsegs) /* qsort(NULL, 0) is undefined */
                qsort(m.segs, m.nsegs, sizeof(*m.segs), cmp_month);
        if (m.ntoks)
                qsort(m.toks, m.ntoks, sizeof(*m.toks), cmp_tok_month);
        size_t i = 0, k = 0;
        while (i < m.nsegs || k < m.ntoks) {
                int mo = i < m.nsegs ? m.segs[i].month : 999999;
                if (k < m.ntoks && m.toks[k].month < mo)
                        mo = m.toks[k].month;
                size_t i0 = i, k0 = k;
                while (i < m.nsegs && m.segs[i].month == mo)
                        i++;
                while (k < m.ntoks && m.toks[k].month == mo)
                        k++;
                char *text = stored_invoice(s, tenant, mo);
                json_t *j = text ? json_loads(text, 0, NULL) : NULL;
                free(text);
                if (json_is_integer(json_object_get(j, "total_cents"))) {
                        sum += json_integer_value(json_object_get(j, "total_cents"));
                } else {
                        gp_bill_invoice inv;
                        rc = gp_bill_price(&d->cfg.billing, &B(d)->zones, m.segs + i0, i - i0, m.toks + k0, k - k0,
                                           &inv);
                        if (rc == 0) {
                                sum += inv.total_cents;
                                gp_bill_invoice_done(&inv);
                        }
                }
                json_decref(j);
                if (rc < 0)
                        goto out;
        }
        *ret = sum;
out:
        month_data_done(&m);
        return rc;
}

static bal *bal_for(gp_daemon *d, const char *tenant) {
        gp_billing *b = B(d);
        for (size_t i = 0; i < b->nbals; i++)
                if (!strcmp(b->bals[i].tenant, tenant))
                        return &b->bals[i];
        bal *p = grow(b->bals, &b->capbals, b->nbals, sizeof(*p));
        if (!p)
                return NULL;
        b->bals = p;
        bal *x = &b->bals[b->nbals++];
        memset(x, 0, sizeof(*x));
        gp_strlcpy(x->tenant, tenant, sizeof(x->tenant));
        return x;
}

/* Charges of all months (closed + this one) through store s.  d->lock held. */
static int charges(gp_daemon *d, gp_store *s, const char *tenant, int64_t now, int64_t *ret_total,
                   int64_t *ret_month) {
        int month = gp_bill_month_of(now);
        bal *x = bal_for(d, tenant);
        if (!x)
                return -ENOMEM;
        if (x->month != month) {
                x->month = month;
                x->closed_ok = x->cur_ok = false;
        }
        int rc;
        if (!x->closed_ok) {
                if ((rc = closed_charges(d, s, tenant, month, &x->closed)) < 0)
                        return rc;
                x->closed_ok = true;
        }
        if (!x->cur_ok) {
                gp_bill_invoice inv;
                if ((rc = price_month(d, s, tenant, month, &inv)) < 0)
                        return rc;
                x->cur = inv.total_cents;
                x->cur_ok = true;
                gp_bill_invoice_done(&inv);
        }
        *ret_total = x->closed + x->cur;
        if (ret_month)
                *ret_month = x->cur;
        return 0;
}

json_t *gp_billing_tenant_json(gp_daemon *d, const char *tenant) {
        int64_t total = 0, mtd = 0;
        pthread_mutex_lock(&d->rs_lock);
        int rc = charges(d, d->rs, tenant, gp_now_ms(), &total, &mtd);
        pthread_mutex_unlock(&d->rs_lock);
        if (rc < 0)
                return NULL;
        int64_t cr = credits_of(d, tenant);
        /* billed: a billing section is configured and the tenant is not an internal department */
        const gp_cfg_tenant *t = gp_tenants_find(d->tenants, tenant);
        bool billed = d->cfg.billing.enabled && !(t && !strcmp(t->kind, "internal"));
        return json_pack("{s:b,s:s,s:I,s:o,s:I,s:o,s:I,s:o,s:I,s:o}", "billed", billed, "currency",
                         d->cfg.billing.currency,
                         "credits_cents", (json_int_t)cr, "credits", money(cr), "charges_cents", (json_int_t)total,
                         "charges", money(total), "balance_cents", (json_int_t)(cr - total), "balance",
                         money(cr - total), "month_to_date_cents", (json_int_t)mtd, "month_to_date", money(mtd));
}

int gp_billing_check_submit(gp_daemon *d, const char *tenant, char **ret_body) {
        if (!d->cfg.billing.enforce_balance)
                return 0;
        const gp_cfg_tenant *t = gp_tenants_find(d->tenants, tenant);
        if (!t || strcmp(t->kind, "external"))
                return 0; /* internal departments get statements, not a stop */
        int64_t total = 0;
        int rc = charges(d, d->ws, tenant, gp_now_ms(), &total, NULL);
        if (rc < 0) {
                gp_warn("tenant %s: cannot compute its balance (%s); accepting the task", tenant,
                        rc == -ENOMEM ? "out of memory" : gp_store_errmsg(d->ws));
                return 0;
        }
        int64_t balance = credits_of(d, tenant) - total;
        if (balance > 0)
                return 0;
        char b[32];
        gp_bill_format_cents(balance, b, sizeof(b));
        *ret_body = gp_http_error_body("insufficient_balance",
                                       "tenant %s has a balance of %s %s: add credit (POST /admin/tenants/%s/credit) "
                                       "before submitting new work; running tasks are not stopped",
                                       tenant, b, d->cfg.billing.currency, tenant);
        return -EDQUOT;
}

/* ------------------------------------------------------------------ */
/* CSV                                                                 */

static int csv_field(gp_buf *b, const char *s) {
        if (!strpbrk(s, ",\"\n\r"))
                return gp_buf_puts(b, s);
        int r = gp_buf_puts(b, "\"");
        for (const char *p = s; r == 0 && *p; p++)
                r = *p == '"' ? gp_buf_puts(b, "\"\"") : gp_buf_append(b, p, 1);
        return r ? r : gp_buf_puts(b, "\"");
}

static const char *jstr(json_t *o, const char *k) {
        const char *s = json_string_value(json_object_get(o, k));
        return s ? s : "";
}

/* The invoice JSON (stored or fresh) as CSV: one row per line, then the total. */
static char *invoice_csv(const char *text) {
        json_t *j = json_loads(text, 0, NULL);
        if (!j)
                return NULL;
        gp_buf b;
        gp_buf_init(&b, 0);
        int r = gp_buf_puts(&b, "tenant_id,month,status,kind,name,gpu_hours,billed_gpu_hours,price_per_gpu_hour,"
                                "prompt_tokens,completion_tokens,amount,currency\r\n");
        size_t i;
        json_t *l;
        json_array_foreach(json_object_get(j, "lines"), i, l) {
                const char *kind = jstr(l, "kind");
                bool tok = !strcmp(kind, "tokens");
                r = r ? r : csv_field(&b, jstr(j, "tenant_id"));
                r = r ? r : gp_buf_printf(&b, ",%s,%s,%s,", jstr(j, "month"), jstr(j, "status"), kind);
                r = r ? r : csv_field(&b, tok ? jstr(l, "model") : jstr(l, "gpu_model"));
                if (tok)
                        r = r ? r : gp_buf_printf(&b, ",,,,%" JSON_INTEGER_FORMAT ",%" JSON_INTEGER_FORMAT,
                                                  json_integer_value(json_object_get(l, "prompt_tokens")),
                                                  json_integer_value(json_object_get(l, "completion_tokens")));
                else
                        r = r ? r : gp_buf_printf(&b, ",%s,%s,%s,,", jstr(l, "gpu_hours"), jstr(l, "billed_gpu_hours"),
                                                  jstr(l, "price_per_gpu_hour"));
                r = r ? r : gp_buf_printf(&b, ",%s,%s\r\n", jstr(l, "amount"), jstr(j, "currency"));
        }
        r = r ? r : csv_field(&b, jstr(j, "tenant_id"));
        r = r ? r : gp_buf_printf(&b, ",%s,%s,total,,,,,,,%s,%s\r\n", jstr(j, "month"), jstr(j, "status"),
                                  jstr(j, "total"), jstr(j, "currency"));
        json_decref(j);
        if (r) {
                gp_buf_done(&b);
                return NULL;
        }
        return gp_buf_steal(&b);
}

/* ------------------------------------------------------------------ */
/* commands (loop thread)                                              */

#define CSV_TYPE "text/csv; charset=utf-8"

static void apply_credit(gp_daemon *d, cmd *c, int64_t now, int *ret_status, char **ret_body) {
        gp_billing *b = B(d);
        gp_bill_cmd *bc = c->bill.p;
        if (!gp_tenants_find(d->tenants, bc->tenant)) {
                *ret_status = 404;
                *ret_body = gp_http_error_body("not_found", "no tenant %s", bc->tenant);
                return;
        }
        int64_t old = credits_of(d, bc->tenant), nw = old + bc->amount_cents;
        if (nw > GP_BILL_MONEY_MAX || nw < -GP_BILL_MONEY_MAX) {
                *ret_status = 400;
                *ret_body = gp_http_error_body("invalid_request", "the credits of %s would leave the range of "
                                               "+-10^12 cents", bc->tenant);
                return;
        }
        if (json_object_set_new(b->credits, bc->tenant, json_integer(nw)) < 0) {
                *ret_status = 503;
                *ret_body = gp_http_error_body("unavailable", "out of memory");
                return;
        }
        b->meta_credits = true;
        json_t *o = json_pack("{s:I,s:o}", "credits_cents", (json_int_t)old, "credits", money(old));
        json_t *n = json_pack("{s:I,s:o,s:I,s:o,s:s}", "credits_cents", (json_int_t)nw, "credits", money(nw),
                              "amount_cents", (json_int_t)bc->amount_cents, "amount", money(bc->amount_cents), "note",
                              bc->note);
        gp_tenants_audit(d->tenants, c->bill.who, "tenant.credit", bc->tenant, o, n, now);
        gp_info("tenant %s credited %" PRId64 " cents by %s", bc->tenant, bc->amount_cents, c->bill.who);
        int64_t total = 0;
        int rc = charges(d, d->ws, bc->tenant, now, &total, NULL);
        json_t *ans = json_pack("{s:s,s:s,s:I,s:o,s:I,s:o}", "tenant_id", bc->tenant, "currency",
                                d->cfg.billing.currency, "amount_cents", (json_int_t)bc->amount_cents, "amount",
                                money(bc->amount_cents), "credits_cents", (json_int_t)nw, "credits", money(nw));
        if (rc == 0) {
                json_object_set_new(ans, "balance_cents", json_integer(nw - total));
                json_object_set_new(ans, "balance", money(nw - total));
        }
        *ret_status = 200;
        *ret_body = json_dumps(ans, JSON_COMPACT);
        json_decref(ans);
}

static void apply_invoice(gp_daemon *d, cmd *c, int64_t now, int *ret_status, char **ret_body,
                          const char **ret_ctype) {
        gp_billing *b = B(d);
        gp_bill_cmd *bc = c->bill.p;
        char key[GP_TENANT_MAX + 24];
        invoice_key(bc->tenant, bc->month, key, sizeof(key));
        char *text = NULL;
        for (size_t i = 0; i < b->ninvs && !text; i++) /* issued earlier in this batch */
                if (!strcmp(b->invs[i].key, key))
                        text = strdup(b->invs[i].json);
        if (!text)
                text = stored_invoice(d->ws, bc->tenant, bc->month);
        if (!text) {
                if (now < gp_bill_month_start_ms(gp_bill_month_next(bc->month))) {
                        *ret_status = 409;
                        *ret_body = gp_http_error_body("conflict", "the month is not over yet");
                        return;
                }
                gp_bill_invoice inv;
                int rc = price_month(d, d->ws, bc->tenant, bc->month, &inv);
                if (rc < 0) {
                        *ret_status = 503;
                        *ret_body = gp_http_error_body("unavailable", "cannot price the month: %s",
                                                       rc == -GP_ESTORE ? gp_store_errmsg(d->ws) : gp_strerror(rc));
                        return;
                }
                json_t *j = invoice_json(d, bc->tenant, bc->month, &inv, "issued", now);
                gp_bill_invoice_done(&inv);
                text = json_dumps(j, JSON_COMPACT);
                json_decref(j);
                pending_invoice *p = grow(b->invs, &b->capinvs, b->ninvs, sizeof(*p));
                char *copy = text ? strdup(text) : NULL;
                if (!text || !p || !copy) {
                        free(text);
                        free(copy);
                        if (p)
                                b->invs = p;
                        *ret_status = 503;
                        *ret_body = gp_http_error_body("unavailable", "out of memory");
                        return;
                }
                b->invs = p;
                gp_strlcpy(b->invs[b->ninvs].key, key, sizeof(b->invs[b->ninvs].key));
                b->invs[b->ninvs++].json = copy;
                /* from now on the balance counts the issued total */
                for (size_t i = 0; i < b->nbals; i++)
                        if (!strcmp(b->bals[i].tenant, bc->tenant))
                                b->bals[i].closed_ok = false;
                gp_info("invoice %s issued", key);
        }
        *ret_status = 200;
        if (bc->csv) {
                *ret_body = invoice_csv(text);
                *ret_ctype = CSV_TYPE;
                free(text);
        } else {
                *ret_body = text;
        }
}

void gp_billing_apply(gp_daemon *d, cmd *c, int64_t now, int *ret_status, char **ret_body, const char **ret_ctype) {
        gp_billing *b = B(d);
        if (!c->bill.p) {
                *ret_status = 503;
                *ret_body = gp_http_error_body("unavailable", "out of memory");
                return;
        }
        if (c->kind == CMD_CREDIT) {
                apply_credit(d, c, now, ret_status, ret_body);
        } else if (c->kind == CMD_INVOICE) {
                apply_invoice(d, c, now, ret_status, ret_body, ret_ctype);
        } else { /* CMD_USAGE_TOKENS */
                gp_bill_tokens *p = grow(b->toks, &b->captoks, b->ntoks, sizeof(*p));
                if (!p || b->ntoks >= PENDING_MAX) {
                        gp_warn("token record of %s dropped: %s", c->bill.p->tenant, p ? "too many queued" : "out of memory");
                        if (p)
                                b->toks = p;
                        return;
                }
                b->toks = p;
                gp_bill_tokens *t = &b->toks[b->ntoks++];
                memset(t, 0, sizeof(*t));
                gp_strlcpy(t->tenant, c->bill.p->tenant, sizeof(t->tenant));
                gp_strlcpy(t->model, c->bill.p->model, sizeof(t->model));
                t->prompt_tokens = c->bill.p->prompt_tokens;
                t->completion_tokens = c->bill.p->completion_tokens;
                t->at_ms = c->bill.p->at_ms > 0 ? c->bill.p->at_ms : now;
                t->month = gp_bill_month_of(now); /* recorded now: see the invariants */
                *ret_status = 200;
                if (c->req) { /* POST /admin/usage/tokens: answered once stored */
                        json_t *j = json_pack("{s:s,s:s,s:I,s:I,s:b}", "tenant_id", t->tenant, "model", t->model,
                                              "prompt_tokens", (json_int_t)t->prompt_tokens, "completion_tokens",
                                              (json_int_t)t->completion_tokens, "recorded", 1);
                        *ret_body = j ? json_dumps(j, JSON_COMPACT) : NULL;
                        json_decref(j);
                }
        }
}

int gp_billing_record_tokens(gp_daemon *d, const char *tenant, const char *model, int64_t prompt, int64_t completion,
                             int64_t at_ms) {
        if (!tenant || !model || !gp_id_ok(tenant, strlen(tenant)) || strlen(tenant) >= GP_TENANT_MAX ||
            strlen(model) >= GP_MODEL_MAX || !gp_str_is_clean(model, strlen(model)) || prompt < 0 || completion < 0 ||
            prompt > INT64_MAX / 4 || completion > INT64_MAX / 4 || at_ms < 0)
                return -EINVAL;
        gp_billing *b = B(d);
        int rc = 0;
        pthread_mutex_lock(&b->tok_lock);
        size_t i;
        for (i = 0; i < b->nacc; i++)
                if (!strcmp(b->acc[i].tenant, tenant) && !strcmp(b->acc[i].model, model))
                        break;
        if (i == b->nacc) {
                gp_bill_tokens *p = b->nacc < TOKEN_SUMS_MAX ? grow(b->acc, &b->capacc, b->nacc, sizeof(*p)) : NULL;
                if (!p) {
                        rc = b->nacc < TOKEN_SUMS_MAX ? -ENOMEM : -E2BIG;
                        goto out;
                }
                b->acc = p;
                memset(&b->acc[i], 0, sizeof(b->acc[i]));
                gp_strlcpy(b->acc[i].tenant, tenant, sizeof(b->acc[i].tenant));
                gp_strlcpy(b->acc[i].model, model, sizeof(b->acc[i].model));
                b->nacc++;
        }
        if (b->acc[i].prompt_tokens > INT64_MAX / 4 - prompt ||
            b->acc[i].completion_tokens > INT64_MAX / 4 - completion) {
                rc = -EOVERFLOW;
                goto out;
        }
        b->acc[i].prompt_tokens += prompt;
        b->acc[i].completion_tokens += completion;
        if (!b->acc_since_ms)
                b->acc_since_ms = at_ms ? at_ms : gp_now_ms();
out:
        pthread_mutex_unlock(&b->tok_lock);
        return rc;
}

/* Loop: the summed gateway tokens become records of this batch once the
 * oldest sum is TOKENS_FLUSH_MS old (or now, with force). */
static void flush_tokens(gp_daemon *d, int64_t now, bool force) {
        gp_billing *b = B(d);
        pthread_mutex_lock(&b->tok_lock);
        if (!b->nacc || (!force && now - b->acc_since_ms < TOKENS_FLUSH_MS)) {
                pthread_mutex_unlock(&b->tok_lock);
                return;
        }
        gp_bill_tokens *acc = b->acc;
        size_t n = b->nacc;
        b->acc = NULL;
        b->nacc = b->capacc = 0;
        b->acc_since_ms = 0;
        pthread_mutex_unlock(&b->tok_lock);
        for (size_t i = 0; i < n; i++) {
                gp_bill_tokens *p = grow(b->toks, &b->captoks, b->ntoks, sizeof(*p));
                if (!p)
                        oom_stop();
                b->toks = p;
                gp_bill_tokens *t = &b->toks[b->ntoks++];
                *t = acc[i];
                t->at_ms = now;
                t->month = gp_bill_month_of(now);
        }
        free(acc);
}

void gp_billing_flush(gp_daemon *d, int64_t now) {
        flush_tokens(d, now, true);
}

/* ------------------------------------------------------------------ */
/* HTTP                                                                */

static int answer(hreq *r, int status, char *body, const char *ctype) {
        return gp_http_send_type(r, status, body, ctype);
}

static int answer_err(hreq *r, int status, const char *code, const char *msg) {
        return answer(r, status, gp_http_error_body(code, "%s", msg), NULL);
}

static bool wants_csv(hreq *r) {
        const char *f = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "format");
        if (f)
                return !strcmp(f, "csv");
        const char *a = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Accept");
        return a && strstr(a, "text/csv");
}

/* The tenant a request is about: a tenant key sees only its own (another
 * id answers 404, as for tenants and tasks); admin names any one or, when
 * allow_all, none (all tenants, ""). 0 or the answer was sent (*ret). */
static int which_tenant(hreq *r, bool allow_all, char *out, int *ret) {
        const char *t = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "tenant");
        if (t && !*t)
                t = NULL;
        if (t && (!gp_id_ok(t, strlen(t)) || strlen(t) >= GP_TENANT_MAX)) {
                *ret = answer_err(r, 404, "not_found", "no such tenant");
                return -1;
        }
        if (!r->admin) {
                if (t && strcmp(t, r->tenant)) {
                        *ret = answer_err(r, 404, "not_found", "no such tenant");
                        return -1;
                }
                gp_strlcpy(out, r->tenant, GP_TENANT_MAX);
                return 0;
        }
        if (!t) {
                if (allow_all) {
                        out[0] = '\0';
                        return 0;
                }
                *ret = answer_err(r, 400, "invalid_request",
                                  "which tenant? an invoice is per tenant: add ?tenant=ID "
                                  "(gpupool invoice --tenant ID)");
                return -1;
        }
        /* admin: any tenant id, configured or only named by tasks (an
         * admin may submit for any); one without usage has none */
        gp_strlcpy(out, t, GP_TENANT_MAX);
        return 0;
}

/* "2026-11-22" (UTC midnight) or RFC 3339. */
static int parse_when(const char *s, int64_t *ret) {
        if (strlen(s) == 10 && s[4] == '-' && s[7] == '-') {
                char full[32];
                snprintf(full, sizeof(full), "%sT00:00:00Z", s);
                return gp_time_parse(full, ret);
        }
        return gp_time_parse(s, ret);
}

typedef struct group {
        char key[GP_MODEL_MAX + 8];
        int64_t gpu_ms, segments, prompt, completion, micros;
        int64_t last_task;
        int64_t tasks;
} group;

typedef struct usage_ctx {
        gp_daemon *d;
        int by;                     /* 0 day, 1 model, 2 task, 3 tenant */
        int64_t from, to;
        group *g;
        size_t n, cap;
        bool oom, too_many;
} usage_ctx;

static group *group_for(usage_ctx *u, const char *key) {
        for (size_t i = u->n; i-- > 0;) /* recent groups first: segments come in time order */
                if (!strcmp(u->g[i].key, key))
                        return &u->g[i];
        if (u->n >= USAGE_GROUPS_MAX) {
                u->too_many = true;
                return NULL;
        }
        group *p = grow(u->g, &u->cap, u->n, sizeof(*p));
        if (!p) {
                u->oom = true;
                return NULL;
        }
        u->g = p;
        group *x = &u->g[u->n++];
        memset(x, 0, sizeof(*x));
        gp_strlcpy(x->key, key, sizeof(x->key));
        return x;
}

static void day_key(int64_t ms, char *buf, size_t size) {
        char t[40];
        gp_time_format(ms > 0 ? ms : 1, t, sizeof(t));
        snprintf(buf, size, "%.10s", t);
}

static void add_piece(usage_ctx *u, const gp_bill_segment *g, int64_t s, int64_t e, const char *key) {
        group *x = group_for(u, key);
        if (!x)
                return;
        gp_bill_segment piece = *g;
        piece.start_ms = s;
        piece.end_ms = e;
        x->gpu_ms += gp_bill_gpu_ms(s, e, g->gpus_milli);
        x->micros += gp_bill_segment_list_micros(&u->d->cfg.billing, &B(u->d)->zones, &piece);
        x->segments++;
        if (x->last_task != g->task_id) {
                x->tasks++;
                x->last_task = g->task_id;
        }
}

static int usage_seg(const gp_bill_segment *g, void *ud) {
        usage_ctx *u = ud;
        /* only the part inside from..to */
        int64_t s = g->start_ms > u->from ? g->start_ms : u->from;
        int64_t e = g->end_ms < u->to ? g->end_ms : u->to;
        if (e < s)
                return 0;
        char key[GP_MODEL_MAX + 8];
        if (u->by == 3) {
                add_piece(u, g, s, e, g->tenant);
        } else if (u->by == 1) {
                add_piece(u, g, s, e, g->gpu_model);
        } else if (u->by == 2) {
                snprintf(key, sizeof(key), "%" PRId64, g->task_id);
                add_piece(u, g, s, e, key);
        } else {
                /* split at UTC midnights */
                do {
                        int64_t midnight = (s / 86400000 + 1) * 86400000;
                        int64_t pe = e < midnight ? e : midnight;
                        day_key(s, key, sizeof(key));
                        add_piece(u, g, s, pe, key);
                        s = pe;
                } while (s < e);
        }
        return u->oom || u->too_many ? -ENOMEM : 0;
}

static int usage_tok(const gp_bill_tokens *t, void *ud) {
        usage_ctx *u = ud;
        char key[GP_MODEL_MAX + 8];
        if (u->by == 3)
                gp_strlcpy(key, t->tenant, sizeof(key));
        else if (u->by == 2)
                snprintf(key, sizeof(key), "tokens:%s", t->model);
        else if (u->by == 1)
                gp_strlcpy(key, t->model, sizeof(key));
        else
                day_key(t->at_ms, key, sizeof(key));
        group *x = group_for(u, key);
        if (!x)
                return -ENOMEM;
        x->prompt += t->prompt_tokens;
        x->completion += t->completion_tokens;
        x->micros += gp_bill_tokens_micros(&u->d->cfg.billing, t);
        return 0;
}

static int cmp_group(const void *x, const void *y) {
        const group *a = x, *b = y;
        return strcmp(a->key, b->key);
}

static int cmp_group_task(const void *x, const void *y) {
        const group *a = x, *b = y;
        int64_t ia = strtoll(a->key, NULL, 10), ib = strtoll(b->key, NULL, 10);
        if (ia != ib)
                return ia < ib ? -1 : 1;
        return strcmp(a->key, b->key);
}

static int64_t micros_to_cents(int64_t micros) {
        return micros >= 0 ? (micros + 5000) / 10000 : -((-micros + 5000) / 10000);
}

static int get_usage(hreq *r) {
        gp_daemon *d = r->d;
        char tenant[GP_TENANT_MAX];
        int ret;
        if (which_tenant(r, true, tenant, &ret) < 0)
                return ret;
        int64_t now = gp_now_ms();
        usage_ctx u = {.d = d, .from = gp_bill_month_start_ms(gp_bill_month_of(now)), .to = now};
        const char *v;
        if ((v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "from")) && parse_when(v, &u.from) < 0)
                return answer_err(r, 400, "invalid_request", "from: expected YYYY-MM-DD or an RFC 3339 time");
        if ((v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "to")) && parse_when(v, &u.to) < 0)
                return answer_err(r, 400, "invalid_request", "to: expected YYYY-MM-DD or an RFC 3339 time");
        if (u.from < 0 || u.to <= u.from || u.to - u.from > RANGE_MAX_MS)
                return answer_err(r, 400, "invalid_request", "from must be before to, at most 400 days apart");
        const char *by = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "group_by");
        if (!by || !strcmp(by, "day"))
                u.by = 0, by = "day";
        else if (!strcmp(by, "model"))
                u.by = 1;
        else if (!strcmp(by, "task"))
                u.by = 2;
        else if (!strcmp(by, "tenant"))
                u.by = 3;
        else
                return answer_err(r, 400, "invalid_request", "group_by: one of day, model, task, tenant");
        gp_usage_filter f = {.tenant = tenant[0] ? tenant : NULL, .from_ms = u.from, .to_ms = u.to};
        gp_usage_filter ft = f;
        pthread_mutex_lock(&d->rs_lock);
        int rc = gp_store_usage_list(d->rs, &f, usage_seg, &u);
        if (rc == 0)
                rc = gp_store_tokens_list(d->rs, &ft, usage_tok, &u);
        char emsg[256];
        gp_strlcpy(emsg, gp_store_errmsg(d->rs), sizeof(emsg));
        pthread_mutex_unlock(&d->rs_lock);
        if (rc < 0) {
                free(u.g);
                if (u.too_many)
                        return answer_err(r, 400, "invalid_request", "too many groups: narrow from..to");
                return answer_err(r, 503, "unavailable", u.oom ? "out of memory" : emsg);
        }
        if (u.n)
                qsort(u.g, u.n, sizeof(*u.g), u.by == 2 ? cmp_group_task : cmp_group);
        char fs[40], ts[40];
        gp_time_format(u.from, fs, sizeof(fs));
        gp_time_format(u.to, ts, sizeof(ts));
        int64_t tot_ms = 0, tot_micros = 0, tot_p = 0, tot_c = 0;
        if (wants_csv(r)) {
                gp_buf b;
                gp_buf_init(&b, 0);
                int e = gp_buf_printf(&b, "%s,gpu_seconds,segments,tasks,prompt_tokens,completion_tokens,cost,currency\r\n", by);
                for (size_t i = 0; e == 0 && i < u.n; i++) {
                        group *g = &u.g[i];
                        char cost[32];
                        gp_bill_format_cents(micros_to_cents(g->micros), cost, sizeof(cost));
                        e = csv_field(&b, g->key);
                        e = e ? e : gp_buf_printf(&b, ",%" PRId64 ".%03" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
                                                      ",%" PRId64 ",%s,%s\r\n",
                                                  g->gpu_ms / 1000, g->gpu_ms % 1000, g->segments, g->tasks, g->prompt,
                                                  g->completion, cost, d->cfg.billing.currency);
                }
                free(u.g);
                if (e) {
                        gp_buf_done(&b);
                        return answer_err(r, 503, "unavailable", "out of memory");
                }
                return answer(r, 200, gp_buf_steal(&b), CSV_TYPE);
        }
        json_t *groups = json_array();
        for (size_t i = 0; i < u.n; i++) {
                group *g = &u.g[i];
                int64_t cents = micros_to_cents(g->micros);
                json_array_append_new(groups, json_pack("{s:s,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:o}", "key", g->key,
                                                        "gpu_ms", (json_int_t)g->gpu_ms, "gpu_seconds",
                                                        (double)g->gpu_ms / 1000.0, "segments", (json_int_t)g->segments,
                                                        "tasks", (json_int_t)g->tasks, "prompt_tokens",
                                                        (json_int_t)g->prompt, "completion_tokens",
                                                        (json_int_t)g->completion, "cost_cents", (json_int_t)cents,
                                                        "cost", money(cents)));
                tot_ms += g->gpu_ms;
                tot_micros += g->micros;
                tot_p += g->prompt;
                tot_c += g->completion;
        }
        free(u.g);
        int64_t tc = micros_to_cents(tot_micros);
        json_t *out = json_pack("{s:o,s:s,s:s,s:s,s:s,s:o,s:{s:I,s:f,s:I,s:I,s:I,s:o}}", "tenant_id",
                                tenant[0] ? json_string(tenant) : json_null(), "from", fs, "to", ts, "group_by", by,
                                "currency", d->cfg.billing.currency, "groups", groups, "total", "gpu_ms",
                                (json_int_t)tot_ms, "gpu_seconds", (double)tot_ms / 1000.0, "prompt_tokens",
                                (json_int_t)tot_p, "completion_tokens", (json_int_t)tot_c, "cost_cents", (json_int_t)tc,
                                "cost", money(tc));
        char *s = json_dumps(out, JSON_COMPACT);
        json_decref(out);
        return answer(r, 200, s, NULL);
}

static int park_cmd(hreq *r, cmd *c) {
        c->req = r;
        gp_strlcpy(c->bill.who, r->who, sizeof(c->bill.who));
        r->suspended = true;
        MHD_suspend_connection(r->conn);
        gp_daemon_post(r->d, c);
        return MHD_YES;
}

static int get_invoice(hreq *r) {
        gp_daemon *d = r->d;
        char tenant[GP_TENANT_MAX];
        int ret;
        if (which_tenant(r, false, tenant, &ret) < 0)
                return ret;
        int64_t now = gp_now_ms();
        int month = gp_bill_month_of(now);
        const char *m = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "month");
        if (m && gp_bill_month_parse(m, &month) < 0)
                return answer_err(r, 400, "invalid_request", "month: expected YYYY-MM");
        bool csv = wants_csv(r);
        bool closed = now >= gp_bill_month_start_ms(gp_bill_month_next(month));
        if (closed) {
                pthread_mutex_lock(&d->rs_lock);
                char *text = stored_invoice(d->rs, tenant, month);
                pthread_mutex_unlock(&d->rs_lock);
                if (text) {
                        if (!csv)
                                return answer(r, 200, text, NULL);
                        char *c = invoice_csv(text);
                        free(text);
                        return answer(r, c ? 200 : 503, c ? c : gp_http_error_body("unavailable", "out of memory"),
                                      c ? CSV_TYPE : NULL);
                }
                /* first request after the month closed: the loop issues and stores it */
                cmd *c = gp_cmd_new(CMD_INVOICE);
                gp_bill_cmd *bc = calloc(1, sizeof(*bc));
                if (!c || !bc) {
                        free(c);
                        free(bc);
                        return answer_err(r, 503, "unavailable", "out of memory");
                }
                c->bill.p = bc;
                gp_strlcpy(bc->tenant, tenant, sizeof(bc->tenant));
                bc->month = month;
                bc->csv = csv;
                return park_cmd(r, c);
        }
        /* open month (or a future one): a preview with today's prices */
        gp_bill_invoice inv;
        pthread_mutex_lock(&d->rs_lock);
        int rc = price_month(d, d->rs, tenant, month, &inv);
        char emsg[256];
        gp_strlcpy(emsg, gp_store_errmsg(d->rs), sizeof(emsg));
        pthread_mutex_unlock(&d->rs_lock);
        if (rc < 0)
                return answer_err(r, 503, "unavailable", rc == -GP_ESTORE ? emsg : gp_strerror(rc));
        json_t *j = invoice_json(d, tenant, month, &inv, "open", now);
        gp_bill_invoice_done(&inv);
        char *text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (text && csv) {
                char *c = invoice_csv(text);
                free(text);
                return answer(r, c ? 200 : 503, c ? c : gp_http_error_body("unavailable", "out of memory"),
                              c ? CSV_TYPE : NULL);
        }
        return answer(r, text ? 200 : 503, text ? text : gp_http_error_body("unavailable", "out of memory"), NULL);
}

/* An amount of money as JSON: a decimal string ("100.50", "-5") or an
 * integer of whole units; amount_cents as an integer.  Never a float. */
static int parse_amount(json_t *j, int64_t *ret, char *err, size_t errlen) {
        json_t *a = json_object_get(j, "amount"), *c = json_object_get(j, "amount_cents");
        if ((a != NULL) == (c != NULL)) {
                snprintf(err, errlen, "give one of amount (\"100.50\") or amount_cents (10050)");
                return -EINVAL;
        }
        if (c) {
                if (!json_is_integer(c) || json_integer_value(c) < -GP_BILL_MONEY_MAX ||
                    json_integer_value(c) > GP_BILL_MONEY_MAX) {
                        snprintf(err, errlen, "amount_cents: an integer within +-10^12");
                        return -EINVAL;
                }
                *ret = json_integer_value(c);
                return 0;
        }
        if (json_is_integer(a)) {
                json_int_t v = json_integer_value(a);
                if (v < -GP_BILL_MONEY_MAX / 100 || v > GP_BILL_MONEY_MAX / 100) {
                        snprintf(err, errlen, "amount: out of range");
                        return -EINVAL;
                }
                *ret = v * 100;
                return 0;
        }
        const char *s = json_string_value(a);
        if (!s) {
                snprintf(err, errlen, "amount: a decimal string such as \"100.50\" (numbers with a fraction are "
                                      "refused: money is never a float)");
                return -EINVAL;
        }
        bool neg = s[0] == '-';
        int64_t micros;
        if (gp_bill_parse_micros(s + neg, strlen(s + neg), GP_BILL_MONEY_MAX, &micros) < 0 || micros % 10000) {
                snprintf(err, errlen, "amount: a decimal with at most 2 decimals, e.g. \"100.50\"");
                return -EINVAL;
        }
        *ret = neg ? -(micros / 10000) : micros / 10000;
        return 0;
}

static int post_credit(hreq *r, const char *tenant) {
        json_error_t je;
        json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, JSON_REJECT_DUPLICATES, &je);
        char err[200];
        int64_t cents = 0;
        if (!json_is_object(j)) {
                json_decref(j);
                return answer_err(r, 400, "invalid_request", "body must be a JSON object {\"amount\": \"100.00\"}");
        }
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
                if (strcmp(k, "amount") && strcmp(k, "amount_cents") && strcmp(k, "note")) {
                        snprintf(err, sizeof(err), "unknown field '%.64s' (amount, amount_cents, note)", k);
                        json_decref(j);
                        return answer_err(r, 400, "invalid_request", err);
                }
        }
        json_t *note = json_object_get(j, "note");
        if (parse_amount(j, &cents, err, sizeof(err)) < 0 ||
            (note && (!json_is_string(note) || json_string_length(note) >= sizeof(((gp_bill_cmd *)0)->note) ||
                      !gp_str_is_clean(json_string_value(note), json_string_length(note))))) {
                if (note && !json_is_string(note))
                        snprintf(err, sizeof(err), "note: text of at most 159 bytes");
                json_decref(j);
                return answer_err(r, 400, "invalid_request", err[0] ? err : "note: text of at most 159 bytes");
        }
        cmd *c = gp_cmd_new(CMD_CREDIT);
        gp_bill_cmd *bc = calloc(1, sizeof(*bc));
        if (!c || !bc) {
                free(c);
                free(bc);
                json_decref(j);
                return answer_err(r, 503, "unavailable", "out of memory");
        }
        c->bill.p = bc;
        gp_strlcpy(bc->tenant, tenant, sizeof(bc->tenant));
        bc->amount_cents = cents;
        if (note)
                gp_strlcpy(bc->note, json_string_value(note), sizeof(bc->note));
        json_decref(j);
        return park_cmd(r, c);
}

/* POST /admin/usage/tokens {"tenant_id","model","prompt_tokens","completion_tokens"}:
 * what gp_billing_record_tokens does, over HTTP, for a gateway outside the
 * daemon (and for tests); answered once the record is stored. */
static int post_tokens(hreq *r) {
        json_error_t je;
        json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, JSON_REJECT_DUPLICATES, &je);
        const char *tenant = json_string_value(json_object_get(j, "tenant_id"));
        const char *model = json_string_value(json_object_get(j, "model"));
        json_t *pt = json_object_get(j, "prompt_tokens"), *ct = json_object_get(j, "completion_tokens");
        bool ok = json_is_object(j) && json_object_size(j) == 4 && tenant && model && json_is_integer(pt) &&
                  json_is_integer(ct) && gp_id_ok(tenant, strlen(tenant)) && strlen(tenant) < GP_TENANT_MAX &&
                  *model && strlen(model) < GP_MODEL_MAX && gp_str_is_clean(model, strlen(model)) &&
                  json_integer_value(pt) >= 0 && json_integer_value(ct) >= 0 &&
                  json_integer_value(pt) <= INT64_MAX / 4 && json_integer_value(ct) <= INT64_MAX / 4;
        cmd *c = ok ? gp_cmd_new(CMD_USAGE_TOKENS) : NULL;
        gp_bill_cmd *bc = ok ? calloc(1, sizeof(*bc)) : NULL;
        if (!ok || !c || !bc) {
                json_decref(j);
                free(c);
                free(bc);
                return ok ? answer_err(r, 503, "unavailable", "out of memory")
                          : answer_err(r, 400, "invalid_request",
                                       "body must be {\"tenant_id\": ID, \"model\": TEXT, \"prompt_tokens\": N, "
                                       "\"completion_tokens\": N}");
        }
        c->bill.p = bc;
        gp_strlcpy(bc->tenant, tenant, sizeof(bc->tenant));
        gp_strlcpy(bc->model, model, sizeof(bc->model));
        bc->prompt_tokens = json_integer_value(pt);
        bc->completion_tokens = json_integer_value(ct);
        json_decref(j);
        return park_cmd(r, c);
}

/* this module's rows of the route table (routes.h) */

static int h_usage(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_usage(r);
}

static int h_invoices(hreq *r, const gp_route_arg *a) {
        (void)a;
        return get_invoice(r);
}

static int h_tokens(hreq *r, const gp_route_arg *a) {
        (void)a;
        return post_tokens(r);
}

static int h_credit(hreq *r, const gp_route_arg *a) {
        return post_credit(r, a->name);
}

const gp_route gp_billing_routes[] = {
        {GP_GET, "/api/v1/usage", GP_ROUTE_TENANT, h_usage, NULL, 0},
        {GP_GET, "/api/v1/invoices", GP_ROUTE_TENANT, h_invoices, NULL, 0},
        {GP_POST, "/admin/usage/tokens", GP_ROUTE_ADMIN, h_tokens, NULL, 0},
        {GP_POST, "/admin/tenants/{tenant}/credit", GP_ROUTE_ADMIN, h_credit, NULL, 0},
        {0, NULL, 0, NULL, NULL, 0},
};
