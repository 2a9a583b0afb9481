/* billing.h - metering records and the pricing rules: usage in, money out.
 *
 * Pure: no I/O, no clock, no allocation other than the invoice's lines.
 * The daemon (server/billing.c) records usage segments and token counts,
 * the store keeps them, and this module turns a month of them plus the
 * price list (config `billing:`) into an invoice.  docs/billing.md states
 * the rules with a worked example that tests/unit/test-billing.c repeats.
 *
 * Money: every amount is an integer.  Prices are held in micro-units of
 * the currency (1/1,000,000: "2.5" per GPU-hour = 2500000); invoice and
 * balance amounts are in cents (1/100), each line rounded half away from
 * zero once from its exact value, and a total is the sum of its lines.
 * Factors (volume tiers, time-window multipliers) are in parts per million
 * (0.9 = 900000).  No floating point is used anywhere on the way.
 *
 * GPU time is counted in milli-GPU-milliseconds (gm): a segment of d ms
 * holding gpus_milli/1000 GPUs uses d * gpus_milli gm; one GPU-hour is
 * 3,600,000,000 gm.
 */
#ifndef GP_CORE_BILLING_H
#define GP_CORE_BILLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/tz.h"
#include "core/task.h"

#define GP_BILL_MAX_GPU_PRICES 32
#define GP_BILL_MAX_TOKEN_PRICES 32
#define GP_BILL_MAX_TIERS 8
#define GP_BILL_MAX_WINDOWS 8
#define GP_BILL_GM_PER_GPU_HOUR 3600000000LL
#define GP_BILL_MONEY_MAX 1000000000000LL /* largest price or credit in micro-units / cents (1e12) */
#define GP_BILL_SPAN_MAX_MS (3660LL * 86400 * 1000) /* longest segment or run priced: ten years */

/* How a usage segment ended. */
enum gp_bill_end {
        GP_BILL_INTERVAL = 0,  /* the task still ran: the next segment starts at end_ms */
        GP_BILL_RUN_END = 1,   /* the run stopped (preempted, requeued after a GPU failure) */
        GP_BILL_TASK_END = 2,  /* the task ended: minimum billing period applies to its run */
};

/* One stretch of a task's run on its GPUs, [start_ms, end_ms). */
typedef struct gp_bill_segment {
        int64_t task_id;
        char tenant[GP_TENANT_MAX];
        char gpu_model[GP_MODEL_MAX];   /* name of the GPU it ran on ("" unknown) */
        int64_t gpus_milli;             /* GPUs held, in 1/1000 (a shared GPU counts its share) */
        int64_t memory_mb;              /* memory asked for, per GPU (0 = whole GPU) */
        int64_t start_ms, end_ms;       /* wall clock, start_ms <= end_ms */
        int64_t gpu_ms;                 /* (end - start) * gpus_milli / 1000, rounded down */
        int64_t run_start_ms;           /* when this run started (minimum billing period) */
        int end_kind;                   /* enum gp_bill_end */
        int month;                      /* billing month YYYYMM: when the segment was recorded (UTC) */
} gp_bill_segment;

/* Tokens of gateway requests (one record per request or per batch). */
typedef struct gp_bill_tokens {
        char tenant[GP_TENANT_MAX];
        char model[GP_MODEL_MAX];
        int64_t prompt_tokens, completion_tokens; /* >= 0 */
        int64_t at_ms;
        int month;                      /* YYYYMM of at_ms (UTC) */
} gp_bill_tokens;

typedef struct gp_bill_gpu_price {
        char gpu_model[GP_MODEL_MAX];   /* glob on the GPU's name ("*", "*A100*") */
        int64_t per_gpu_hour;           /* micro-units */
} gp_bill_gpu_price;

typedef struct gp_bill_token_price {
        char model[GP_MODEL_MAX];       /* glob on the model name */
        int64_t per_1k_prompt;          /* micro-units per 1000 prompt tokens */
        int64_t per_1k_completion;      /* micro-units per 1000 completion tokens */
} gp_bill_token_price;

/* Graduated volume discount: GPU-hours of a month beyond gpu_hours cost
 * factor times the list price (until the next tier starts). */
typedef struct gp_bill_tier {
        int64_t gpu_hours;              /* > 0, ascending across tiers */
        int64_t factor_ppm;             /* 0..1000000 */
} gp_bill_tier;

/* A daily time window with a price multiplier (off-peak nights). */
typedef struct gp_bill_window {
        char name[64];
        int start_min, end_min;         /* minutes after local midnight; end < start wraps midnight */
        char tz[GP_TZ_NAME_MAX];        /* IANA name, default "UTC" */
        int64_t multiplier_ppm;         /* 0..100000000 */
} gp_bill_window;

typedef struct gp_bill_prices {
        bool enabled;                   /* a `billing:` section was given */
        char currency[8];               /* label only, default "USD" */
        int record_interval_s;          /* running tasks record a segment this often, default 300 */
        int64_t min_billing_ms;         /* a task's run is billed at least this long, default 0 */
        bool enforce_balance;           /* external tenants at or below zero get 402 on submit */
        gp_bill_gpu_price gpu[GP_BILL_MAX_GPU_PRICES];  /* first match wins; none = free */
        int n_gpu;
        gp_bill_token_price tokens[GP_BILL_MAX_TOKEN_PRICES]; /* first match wins */
        int n_tokens;
        gp_bill_tier tiers[GP_BILL_MAX_TIERS];
        int n_tiers;
        gp_bill_window windows[GP_BILL_MAX_WINDOWS];  /* first window covering an instant wins */
        int n_windows;
} gp_bill_prices;

/* Zones of the windows, in the same order (NULL entries mean UTC).  The
 * caller loads them (gp_tz_load) once; pricing only reads them. */
typedef struct gp_bill_zones {
        const gp_tz *tz[GP_BILL_MAX_WINDOWS];
} gp_bill_zones;

enum gp_bill_line_kind {
        GP_BILL_LINE_GPU = 0,           /* GPU time on one GPU model */
        GP_BILL_LINE_DISCOUNT = 1,      /* volume discount (negative) */
        GP_BILL_LINE_TOKENS = 2,        /* gateway tokens of one model */
};

typedef struct gp_bill_line {
        int kind;                       /* enum gp_bill_line_kind */
        char name[GP_MODEL_MAX];        /* GPU model or model; "" for the discount */
        int64_t gpu_ms;                 /* GPU time used (GPU lines; the discount: all of them) */
        int64_t billed_gpu_ms;          /* with minimum billing periods added */
        int64_t unit_price;             /* micro-units per GPU-hour (GPU lines) */
        int64_t prompt_tokens, completion_tokens;
        int64_t amount_cents;           /* rounded once; negative for the discount */
} gp_bill_line;

typedef struct gp_bill_invoice {
        gp_bill_line *lines;            /* owned; GPU lines by name, the discount, token lines by name */
        size_t nlines;
        int64_t total_cents;            /* sum of the lines */
        int64_t gpu_ms, billed_gpu_ms;  /* over all GPU lines */
        int64_t tasks;                  /* distinct task ids among the segments */
} gp_bill_invoice;

/* Price one month: segs (any order) and toks of one tenant and month into
 * *ret (caller calls gp_bill_invoice_done).  Everything else - which
 * records belong to the month - is the caller's business.
 * 0, -ENOMEM, -ERANGE (a segment longer than GP_BILL_SPAN_MAX_MS or with
 * more than GP_MAX_GPUS GPUs, or an amount beyond what the sums hold). */
int gp_bill_price(const gp_bill_prices *p, const gp_bill_zones *z, const gp_bill_segment *segs, size_t nsegs,
                  const gp_bill_tokens *toks, size_t ntoks, gp_bill_invoice *ret);
void gp_bill_invoice_done(gp_bill_invoice *inv);

/* List price of one segment in micro-units (time windows applied, no
 * minimum period, no volume discount), rounded half up; for usage reports.
 * INT64_MAX when it does not fit; 0 for a segment gp_bill_price refuses. */
int64_t gp_bill_segment_list_micros(const gp_bill_prices *p, const gp_bill_zones *z, const gp_bill_segment *s);
/* List price of a token record in micro-units, rounded half up. */
int64_t gp_bill_tokens_micros(const gp_bill_prices *p, const gp_bill_tokens *t);

/* gpu_ms of a segment from its span and share (rounded down). */
int64_t gp_bill_gpu_ms(int64_t start_ms, int64_t end_ms, int64_t gpus_milli);

/* Month helpers (UTC).  YYYYMM of an instant; the first instant of a
 * month; the month after.  "YYYY-MM" text: parse 0 or -EINVAL (years
 * 1970..9999), format into size >= 8. */
int gp_bill_month_of(int64_t ms);
int64_t gp_bill_month_start_ms(int month);
int gp_bill_month_next(int month);
int gp_bill_month_parse(const char *s, int *ret);
void gp_bill_month_format(int month, char *buf, size_t size);

/* A decimal amount "12", "2.5", "0.000001" into micro-units (at most six
 * decimals, 0..GP_BILL_MONEY_MAX micro-units unless allow_big, no sign, no
 * exponent).  Also for factors: "0.9" -> 900000 ppm.  0, -EINVAL, -ERANGE. */
int gp_bill_parse_micros(const char *s, size_t len, int64_t max, int64_t *ret);
/* Cents as "-12.34" into buf (size >= 24). */
void gp_bill_format_cents(int64_t cents, char *buf, size_t size);
/* Micro-units as a decimal without trailing zeros ("2.5", "0.000001"). */
void gp_bill_format_micros(int64_t micros, char *buf, size_t size);

#endif
