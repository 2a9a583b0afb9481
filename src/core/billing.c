/* billing.c - pricing: a month of usage records and the price list into an
 * invoice in integer cents (see billing.h and docs/billing.md).
 *
 * Invariants: every sum is kept exact in 128-bit integers in units of
 * micro-unit x gm x ppm (x ppm for the discount) and rounded once per
 * line; the volume tiers are applied to the month's GPU time in the order
 * it was used (segments by start, then task id), so the same records give
 * the same invoice whatever order they come in.
 */
#include "core/billing.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "base/vec.h"

typedef __int128 i128;

#define PPM ((int64_t)1000000)
#define MICROS_PER_CENT ((int64_t)10000)

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

/* num / den rounded half away from zero (den > 0). */
static i128 div_round(i128 num, i128 den) {
        if (num >= 0)
                return (num + den / 2) / den;
        return -((-num + den / 2) / den);
}

static int to_i64(i128 v, int64_t *ret) {
        if (v > INT64_MAX || v < -INT64_MAX)
                return -ERANGE;
        *ret = (int64_t)v;
        return 0;
}

int64_t gp_bill_gpu_ms(int64_t start_ms, int64_t end_ms, int64_t gpus_milli) {
        if (end_ms <= start_ms || gpus_milli <= 0)
                return 0;
        return (int64_t)(((i128)(end_ms - start_ms) * gpus_milli) / 1000);
}

static int64_t gpu_price(const gp_bill_prices *p, const char *model) {
        for (int i = 0; i < p->n_gpu; i++)
                if (fnmatch(p->gpu[i].gpu_model, model, 0) == 0)
                        return p->gpu[i].per_gpu_hour;
        return 0;
}

static const gp_bill_token_price *token_price(const gp_bill_prices *p, const char *model) {
        for (int i = 0; i < p->n_tokens; i++)
                if (fnmatch(p->tokens[i].model, model, 0) == 0)
                        return &p->tokens[i];
        return NULL;
}

static int minute_of_day(const gp_tz *tz, int64_t ms) {
        if (tz)
                return gp_tz_minute_of_day(tz, ms);
        int64_t m = ms / 60000 - (ms % 60000 < 0);
        int r = (int)(m % 1440);
        return r < 0 ? r + 1440 : r;
}

static bool covers(const gp_bill_window *w, int m) {
        if (w->start_min < w->end_min)
                return m >= w->start_min && m < w->end_min;
        return m >= w->start_min || m < w->end_min;
}

/* The multiplier in force at t (first covering window, else 1.0) and the
 * next instant after t where it may change: a window's start or end, but
 * never further than the next half hour of UTC (so a change of offset in
 * a zone is seen at its own half hour). */
static int64_t window_at(const gp_bill_prices *p, const gp_bill_zones *z, int64_t t, int64_t *ret_next) {
        int64_t mult = PPM;
        bool found = false;
        int64_t next = INT64_MAX;
        if (p->n_windows == 0) {
                *ret_next = next;
                return mult;
        }
        int64_t minute_start = t - (((t % 60000) + 60000) % 60000);
        for (int i = 0; i < p->n_windows; i++) {
                const gp_bill_window *w = &p->windows[i];
                int m = minute_of_day(z ? z->tz[i] : NULL, t);
                if (!found && covers(w, m)) {
                        mult = w->multiplier_ppm;
                        found = true;
                }
                int ds = ((w->start_min - m) % 1440 + 1440) % 1440;
                int de = ((w->end_min - m) % 1440 + 1440) % 1440;
                if (ds == 0)
                        ds = 1440;
                if (de == 0)
                        de = 1440;
                int64_t cand = minute_start + (int64_t)(ds < de ? ds : de) * 60000;
                if (cand < next)
                        next = cand;
        }
        int64_t half = (t / 1800000 + 1) * 1800000;
        if (half < next)
                next = half;
        *ret_next = next;
        return mult;
}

/* ------------------------------------------------------------------ */
/* the month                                                           */

typedef struct acc_line {
        gp_bill_line l;
        i128 num;                   /* GPU: sum gm*price*mult; tokens: sum tokens*price */
} acc_line;

typedef struct acc {
        const gp_bill_prices *p;
        const gp_bill_zones *z;
        acc_line *lines;
        size_t n, cap;
        i128 cum;                   /* gm priced so far (tiers) */
        i128 disc;                  /* sum gm*price*mult*(1e6 - factor) */
        bool overflow;              /* a sum left what 128 bits hold: -ERANGE */
} acc;

/* *acc += a * b * c, flagging overflow instead of wrapping. */
static void mac3(acc *a, i128 *sum, i128 x, i128 y, i128 z) {
        i128 v;
        if (__builtin_mul_overflow(x, y, &v) || __builtin_mul_overflow(v, z, &v) || __builtin_add_overflow(*sum, v, sum))
                a->overflow = true;
}

static acc_line *line_for(acc *a, int kind, const char *name) {
        for (size_t i = 0; i < a->n; i++)
                if (a->lines[i].l.kind == kind && !strcmp(a->lines[i].l.name, name))
                        return &a->lines[i];
        acc_line *nl = gp_vec_grow(a->lines, &a->cap, a->n + 1, sizeof(*nl), 8);
        if (!nl)
                return NULL;
        a->lines = nl;
        acc_line *l = &a->lines[a->n++];
        memset(l, 0, sizeof(*l));
        l->l.kind = kind;
        gp_strlcpy(l->l.name, name, sizeof(l->l.name));
        return l;
}

/* Price gm of GPU time at multiplier mult on line l, cutting it at the
 * volume tiers' thresholds. */
static void add_gm(acc *a, acc_line *l, i128 gm, int64_t mult) {
        const gp_bill_prices *p = a->p;
        while (gm > 0) {
                int64_t factor = PPM;
                i128 band_end = -1; /* none */
                for (int k = 0; k < p->n_tiers; k++) {
                        i128 th = (i128)p->tiers[k].gpu_hours * GP_BILL_GM_PER_GPU_HOUR;
                        if (a->cum >= th) {
                                factor = p->tiers[k].factor_ppm;
                        } else {
                                band_end = th;
                                break;
                        }
                }
                i128 take = gm;
                if (band_end >= 0 && band_end - a->cum < take)
                        take = band_end - a->cum;
                mac3(a, &l->num, take, l->l.unit_price, mult);
                if (factor != PPM) {
                        i128 v;
                        if (__builtin_mul_overflow(take, (i128)l->l.unit_price * mult, &v))
                                a->overflow = true;
                        else
                                mac3(a, &a->disc, v, PPM - factor, 1);
                }
                if (a->overflow)
                        return;
                a->cum += take;
                gm -= take;
        }
}

static void add_span(acc *a, acc_line *l, int64_t start, int64_t end, int64_t gpus_milli) {
        int64_t t = start;
        while (t < end) {
                int64_t next;
                int64_t mult = window_at(a->p, a->z, t, &next);
                if (next > end)
                        next = end;
                add_gm(a, l, (i128)(next - t) * gpus_milli, mult);
                t = next;
        }
}

static int cmp_seg(const void *x, const void *y) {
        const gp_bill_segment *a = *(const gp_bill_segment *const *)x, *b = *(const gp_bill_segment *const *)y;
        if (a->start_ms != b->start_ms)
                return a->start_ms < b->start_ms ? -1 : 1;
        if (a->task_id != b->task_id)
                return a->task_id < b->task_id ? -1 : 1;
        if (a->end_ms != b->end_ms)
                return a->end_ms < b->end_ms ? -1 : 1;
        return 0;
}

static int cmp_i64(const void *x, const void *y) {
        int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
        return a < b ? -1 : a > b;
}

static int cmp_line(const void *x, const void *y) {
        const acc_line *a = x, *b = y;
        if (a->l.kind != b->l.kind)
                return a->l.kind - b->l.kind;
        return strcmp(a->l.name, b->l.name);
}

int gp_bill_price(const gp_bill_prices *p, const gp_bill_zones *z, const gp_bill_segment *segs, size_t nsegs,
                  const gp_bill_tokens *toks, size_t ntoks, gp_bill_invoice *ret) {
        acc a = {.p = p, .z = z};
        const gp_bill_segment **order = calloc(nsegs ? nsegs : 1, sizeof(*order));
        int64_t *ids = calloc(nsegs ? nsegs : 1, sizeof(*ids));
        int rc = -ENOMEM;
        gp_bill_invoice inv = {0};
        if (!order || !ids)
                goto out;
        for (size_t i = 0; i < nsegs; i++) {
                order[i] = &segs[i];
                ids[i] = segs[i].task_id;
        }
        qsort(order, nsegs, sizeof(*order), cmp_seg);
        qsort(ids, nsegs, sizeof(*ids), cmp_i64);
        for (size_t i = 0; i < nsegs; i++)
                inv.tasks += i == 0 || ids[i] != ids[i - 1];
        for (size_t i = 0; i < nsegs; i++) {
                const gp_bill_segment *s = order[i];
                /* records beyond any real use (a decade, 16 GPUs) are refused, not wrapped */
                if (s->start_ms < 0 || s->run_start_ms < 0 || s->end_ms < s->start_ms || s->gpu_ms < 0 || s->end_ms > INT64_MAX / 4 ||
                    s->end_ms - s->start_ms > GP_BILL_SPAN_MAX_MS || s->end_ms - s->run_start_ms > GP_BILL_SPAN_MAX_MS ||
                    s->gpus_milli < 0 || s->gpus_milli > GP_MAX_GPUS * 1000) {
                        rc = -ERANGE;
                        goto out;
                }
                acc_line *l = line_for(&a, GP_BILL_LINE_GPU, s->gpu_model);
                if (!l)
                        goto out;
                l->l.unit_price = gpu_price(p, s->gpu_model);
                if (__builtin_add_overflow(l->l.gpu_ms, s->gpu_ms, &l->l.gpu_ms) ||
                    __builtin_add_overflow(l->l.billed_gpu_ms, s->gpu_ms, &l->l.billed_gpu_ms))
                        a.overflow = true;
                if (s->end_ms > s->start_ms && s->gpus_milli > 0)
                        add_span(&a, l, s->start_ms, s->end_ms, s->gpus_milli);
                /* the minimum billing period: a run shorter than it is
                 * billed as if it had lasted that long, at its end's rate */
                int64_t run = s->end_ms - s->run_start_ms;
                if (s->end_kind == GP_BILL_TASK_END && p->min_billing_ms > 0 && run < p->min_billing_ms &&
                    s->gpus_milli > 0) {
                        int64_t extra = p->min_billing_ms - (run > 0 ? run : 0), next;
                        int64_t mult = window_at(p, z, s->end_ms > s->start_ms ? s->end_ms - 1 : s->end_ms, &next);
                        add_gm(&a, l, (i128)extra * s->gpus_milli, mult);
                        if (__builtin_add_overflow(l->l.billed_gpu_ms, gp_bill_gpu_ms(0, extra, s->gpus_milli),
                                                   &l->l.billed_gpu_ms))
                                a.overflow = true;
                }
        }
        for (size_t i = 0; i < ntoks; i++) {
                const gp_bill_tokens *t = &toks[i];
                acc_line *l = line_for(&a, GP_BILL_LINE_TOKENS, t->model);
                if (!l)
                        goto out;
                const gp_bill_token_price *tp = token_price(p, t->model);
                if (__builtin_add_overflow(l->l.prompt_tokens, t->prompt_tokens, &l->l.prompt_tokens) ||
                    __builtin_add_overflow(l->l.completion_tokens, t->completion_tokens, &l->l.completion_tokens))
                        a.overflow = true;
                if (tp) {
                        mac3(&a, &l->num, t->prompt_tokens, tp->per_1k_prompt, 1);
                        mac3(&a, &l->num, t->completion_tokens, tp->per_1k_completion, 1);
                }
        }
        rc = -ERANGE;
        if (a.overflow)
                goto out;
        if (a.disc > 0 && !line_for(&a, GP_BILL_LINE_DISCOUNT, "")) {
                rc = -ENOMEM;
                goto out;
        }
        const i128 gpu_den = (i128)GP_BILL_GM_PER_GPU_HOUR * PPM * MICROS_PER_CENT;
        for (size_t i = 0; i < a.n; i++) {
                acc_line *l = &a.lines[i];
                i128 cents;
                if (l->l.kind == GP_BILL_LINE_GPU)
                        cents = div_round(l->num, gpu_den);
                else if (l->l.kind == GP_BILL_LINE_TOKENS)
                        cents = div_round(l->num, (i128)1000 * MICROS_PER_CENT);
                else
                        cents = -div_round(a.disc, gpu_den * PPM);
                if (to_i64(cents, &l->l.amount_cents) < 0)
                        goto out;
                if (l->l.kind == GP_BILL_LINE_DISCOUNT) {
                        /* the discount line names the GPU time it covers */
                        for (size_t k = 0; k < a.n; k++)
                                if (a.lines[k].l.kind == GP_BILL_LINE_GPU &&
                                    (__builtin_add_overflow(l->l.gpu_ms, a.lines[k].l.gpu_ms, &l->l.gpu_ms) ||
                                     __builtin_add_overflow(l->l.billed_gpu_ms, a.lines[k].l.billed_gpu_ms,
                                                            &l->l.billed_gpu_ms)))
                                        goto out;
                }
        }
        if (a.n) /* qsort(NULL, 0) is undefined */
                qsort(a.lines, a.n, sizeof(*a.lines), cmp_line);
        inv.lines = calloc(a.n ? a.n : 1, sizeof(*inv.lines));
        if (!inv.lines) {
                rc = -ENOMEM;
                goto out;
        }
        i128 total = 0;
        for (size_t i = 0; i < a.n; i++) {
                inv.lines[i] = a.lines[i].l;
                total += a.lines[i].l.amount_cents; /* each within int64: cannot overflow 128 bits */
                if (a.lines[i].l.kind == GP_BILL_LINE_GPU &&
                    (__builtin_add_overflow(inv.gpu_ms, a.lines[i].l.gpu_ms, &inv.gpu_ms) ||
                     __builtin_add_overflow(inv.billed_gpu_ms, a.lines[i].l.billed_gpu_ms, &inv.billed_gpu_ms))) {
                        rc = -ERANGE;
                        goto out;
                }
        }
        inv.nlines = a.n;
        if (to_i64(total, &inv.total_cents) < 0)
                goto out;
        *ret = inv;
        inv.lines = NULL;
        rc = 0;
out:
        free(inv.lines);
        free(a.lines);
        free(order);
        free(ids);
        return rc;
}

void gp_bill_invoice_done(gp_bill_invoice *inv) {
        if (!inv)
                return;
        free(inv->lines);
        inv->lines = NULL;
        inv->nlines = 0;
}

int64_t gp_bill_segment_list_micros(const gp_bill_prices *p, const gp_bill_zones *z, const gp_bill_segment *s) {
        gp_bill_prices q = *p;
        q.n_tiers = 0;
        acc a = {.p = &q, .z = z};
        acc_line l;
        memset(&l, 0, sizeof(l));
        l.l.unit_price = gpu_price(p, s->gpu_model);
        if (s->end_ms > s->start_ms && s->gpus_milli > 0 && s->gpus_milli <= GP_MAX_GPUS * 1000 &&
            s->end_ms - s->start_ms <= GP_BILL_SPAN_MAX_MS)
                add_span(&a, &l, s->start_ms, s->end_ms, s->gpus_milli);
        int64_t v = 0;
        if (a.overflow)
                return INT64_MAX;
        to_i64(div_round(l.num, (i128)GP_BILL_GM_PER_GPU_HOUR * PPM), &v);
        return v;
}

int64_t gp_bill_tokens_micros(const gp_bill_prices *p, const gp_bill_tokens *t) {
        const gp_bill_token_price *tp = token_price(p, t->model);
        if (!tp)
                return 0;
        acc a = {.p = p};
        i128 num = 0;
        mac3(&a, &num, t->prompt_tokens, tp->per_1k_prompt, 1);
        mac3(&a, &num, t->completion_tokens, tp->per_1k_completion, 1);
        int64_t v = INT64_MAX;
        if (!a.overflow)
                to_i64(div_round(num, 1000), &v);
        return v;
}

/* ------------------------------------------------------------------ */
/* months and money as text                                            */

/* Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d) {
        y -= m <= 2;
        int64_t era = (y >= 0 ? y : y - 399) / 400;
        int64_t yoe = y - era * 400;
        int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + doe - 719468;
}

int gp_bill_month_of(int64_t ms) {
        time_t s = (time_t)(ms / 1000 - (ms % 1000 < 0));
        struct tm tm;
        if (!gmtime_r(&s, &tm))
                return 197001;
        return (tm.tm_year + 1900) * 100 + tm.tm_mon + 1;
}

int64_t gp_bill_month_start_ms(int month) {
        return days_from_civil(month / 100, month % 100, 1) * 86400000LL;
}

int gp_bill_month_next(int month) {
        return month % 100 == 12 ? (month / 100 + 1) * 100 + 1 : month + 1;
}

int gp_bill_month_parse(const char *s, int *ret) {
        if (!s || strlen(s) != 7 || s[4] != '-')
                return -EINVAL;
        int y = 0, m = 0;
        for (int i = 0; i < 7; i++) {
                if (i == 4)
                        continue;
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                if (i < 4)
                        y = y * 10 + (s[i] - '0');
                else
                        m = m * 10 + (s[i] - '0');
        }
        if (y < 1970 || m < 1 || m > 12)
                return -EINVAL;
        *ret = y * 100 + m;
        return 0;
}

void gp_bill_month_format(int month, char *buf, size_t size) {
        snprintf(buf, size, "%04d-%02d", month / 100, month % 100);
}

int gp_bill_parse_micros(const char *s, size_t len, int64_t max, int64_t *ret) {
        int64_t whole = 0, frac = 0;
        size_t i = 0;
        int nd = 0, nf = 0;
        if (!s || len == 0 || len > 40)
                return -EINVAL;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, nd++) {
                if (whole > (INT64_MAX / PPM) / 10)
                        return -ERANGE;
                whole = whole * 10 + (s[i] - '0');
        }
        if (i < len && s[i] == '.') {
                i++;
                for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, nf++) {
                        if (nf >= 6)
                                return -EINVAL; /* finer than a micro-unit */
                        frac = frac * 10 + (s[i] - '0');
                }
                if (nf == 0)
                        return -EINVAL;
        }
        if (i != len || nd == 0)
                return -EINVAL;
        for (int k = nf; k < 6; k++)
                frac *= 10;
        int64_t v = whole * PPM + frac;
        if (v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

void gp_bill_format_cents(int64_t cents, char *buf, size_t size) {
        uint64_t a = cents < 0 ? (uint64_t)0 - (uint64_t)cents : (uint64_t)cents;
        snprintf(buf, size, "%s%" PRIu64 ".%02" PRIu64, cents < 0 ? "-" : "", a / 100, a % 100);
}

void gp_bill_format_micros(int64_t micros, char *buf, size_t size) {
        uint64_t a = micros < 0 ? (uint64_t)0 - (uint64_t)micros : (uint64_t)micros;
        char frac[8];
        snprintf(frac, sizeof(frac), "%06" PRIu64, a % (uint64_t)PPM);
        int n = 6;
        while (n > 0 && frac[n - 1] == '0')
                frac[--n] = '\0';
        snprintf(buf, size, "%s%" PRIu64 "%s%s", micros < 0 ? "-" : "", a / (uint64_t)PPM, n ? "." : "", frac);
}
