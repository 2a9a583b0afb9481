/* admit.h - admission control of the inference gateway: tiers, limits and
 * the order in which waiting requests go.
 *
 * Pure: no I/O, no clock reads (time is passed in as milliseconds), no
 * locks, no logging.  The gateway thread drives it; the unit tests drive the
 * same code with a fake clock.
 *
 * A request is a gp_admit_ticket the caller owns (embedded in its own
 * request record).  gp_admit_submit() puts it in its tier's queue (or
 * refuses it when max_queue requests already wait); gp_admit_next() hands
 * out the next ticket that may run now, in policy order, charging the
 * limits; gp_admit_done() ends a running ticket and corrects the token
 * reservation with the real usage.  A queued ticket leaves by
 * gp_admit_next(), gp_admit_expired() (its wait passed queue_timeout_ms) or
 * gp_admit_cancel() (its client hung up).
 *
 * Order (the scheduler's hybrid policy, core/sched.h): tier 0 strictly
 * first; tiers 1..9 by stride scheduling with the scheduler's weights
 * (weighted fair queuing: while tiers i and j both wait, they go in the
 * ratio weights[i]:weights[j]); inside a tier, tenants by stride with their
 * weight (fair share), FIFO inside one tenant.  A tenant held back by its
 * own limits (max_concurrent, rpm, tpm) is skipped without blocking others;
 * a global limit (max_concurrent, max_rps, max_tokens_per_sec) stops
 * everything until it frees.
 *
 * Limits: rates are token buckets that hold one period's worth (max_rps per
 * second, rpm and tpm per minute) and refill continuously.  A request
 * reserves `tokens` (prompt + max_tokens) from the token buckets when
 * admitted; a request larger than a bucket passes when the bucket is full
 * (the bucket goes negative), so nothing is refused for being big.
 * gp_admit_done() gives back (or takes more for) the difference from the
 * real usage.
 *
 * Not thread-safe: the caller serialises every call on one gp_admit.
 */
#ifndef GP_CORE_ADMIT_H
#define GP_CORE_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/list.h"
#include "core/task.h"

#define GP_ADMIT_MAX_TENANTS 512
#define GP_ADMIT_TENANT_MAX 64 /* tenant id, with the NUL */

typedef struct gp_admit gp_admit;

typedef struct gp_admit_limits {
        int max_concurrent;                   /* running tickets, 0 = unlimited */
        int64_t max_rps;                      /* admissions per second, 0 = unlimited */
        int64_t max_tokens_per_sec;           /* reserved tokens per second, 0 = unlimited */
        int max_queue;                        /* waiting tickets, all tiers (below 1 is taken as 1) */
        int64_t queue_timeout_ms;             /* longest wait, >= 1 */
        uint32_t weights[GP_PRIORITY_LEVELS]; /* WFQ weights, each >= 1 (tier 0's is unused) */
} gp_admit_limits;

typedef struct gp_admit_tenant_limits {
        int max_concurrent;                   /* 0 = unlimited */
        int64_t rpm;                          /* requests per minute, 0 = unlimited */
        int64_t tpm;                          /* tokens per minute, 0 = unlimited */
        uint32_t weight;                      /* fair share inside a tier, 0 is taken as 1 */
} gp_admit_tenant_limits;

typedef enum gp_admit_state {
        GP_ADMIT_NEW = 0,                     /* not submitted, or ended */
        GP_ADMIT_QUEUED,
        GP_ADMIT_RUNNING,
} gp_admit_state;

/* One request.  The caller sets tier, tenant, tokens and ud before
 * gp_admit_submit(); the rest belongs to gp_admit. */
typedef struct gp_admit_ticket {
        int tier;                             /* 0..GP_PRIORITY_LEVELS-1 */
        int tenant;                           /* from gp_admit_tenant() */
        int64_t tokens;                       /* reserved: prompt + max_tokens, >= 0 */
        void *ud;                             /* the caller's */
        /* gp_admit's */
        gp_admit_state state;
        int64_t enqueued_ms;                  /* when submitted */
        uint64_t seq;                         /* submission number */
        gp_list link;                         /* in its (tier, tenant) FIFO */
        gp_list flink;                        /* in the FIFO of all waiting tickets */
} gp_admit_ticket;

/* A new admission state.  NULL on out of memory.  Free with gp_admit_free
 * (takes NULL); queued and running tickets stay the caller's. */
gp_admit *gp_admit_new(const gp_admit_limits *lim, int64_t now_ms);
void gp_admit_free(gp_admit *a);

/* Replace the global limits (weights, timeouts, rates).  Buckets keep
 * their level, capped at the new size. */
void gp_admit_set_limits(gp_admit *a, const gp_admit_limits *lim, int64_t now_ms);

/* The index of tenant `id` (made on first use), with its limits set to
 * *tl.  -EINVAL for a bad id, -ENOSPC when GP_ADMIT_MAX_TENANTS exist. */
int gp_admit_tenant(gp_admit *a, const char *id, const gp_admit_tenant_limits *tl, int64_t now_ms);

/* Queue t (tier, tenant, tokens set).  0 = queued (call gp_admit_next);
 * -EAGAIN = max_queue tickets already wait (t untouched, counted as
 * rejected); -EINVAL = bad tier/tenant/tokens or t not new. */
int gp_admit_submit(gp_admit *a, gp_admit_ticket *t, int64_t now_ms);

/* The next queued ticket that may run now, in policy order, now RUNNING
 * and charged to the limits; NULL when none may.  Call until NULL after
 * anything changed (submit, done, time passing). */
gp_admit_ticket *gp_admit_next(gp_admit *a, int64_t now_ms);

/* A queued ticket whose wait passed queue_timeout_ms, taken out of the
 * queue (state NEW, counted as expired); NULL when none.  Oldest first. */
gp_admit_ticket *gp_admit_expired(gp_admit *a, int64_t now_ms);

/* Take a queued ticket out (client gone).  No-op for a ticket not queued. */
void gp_admit_cancel(gp_admit *a, gp_admit_ticket *t);

/* End a running ticket; real_tokens (prompt + completion actually used,
 * < 0 = unknown: keep the reservation) corrects the token buckets and is
 * added to the tenant's counters.  No-op for a ticket not running. */
void gp_admit_done(gp_admit *a, gp_admit_ticket *t, int64_t real_tokens, int64_t now_ms);

/* When something may change without a call from outside: the earliest
 * queue deadline, or when a rate bucket holding the queue back has refilled
 * enough.  INT64_MAX when nothing waits. */
int64_t gp_admit_wake_ms(const gp_admit *a, int64_t now_ms);

/* The rate-limit picture for one tenant, for x-ratelimit-* headers: the
 * tightest of the tenant's and the global request and token limits (limit
 * 0 = unlimited), what remains now, and ms until full again. */
typedef struct gp_admit_ratelimit {
        int64_t limit_requests, remaining_requests, reset_requests_ms;
        int64_t limit_tokens, remaining_tokens, reset_tokens_ms;
        int64_t retry_after_ms;               /* a hint for a refused request, >= 1 */
} gp_admit_ratelimit;
void gp_admit_ratelimit_get(gp_admit *a, int tenant, int64_t now_ms, gp_admit_ratelimit *ret);

typedef struct gp_admit_stats {
        uint64_t queued[GP_PRIORITY_LEVELS];  /* waiting now, per tier */
        uint64_t queued_total;
        uint64_t running;
        uint64_t admitted_total, rejected_total, expired_total, cancelled_total;
} gp_admit_stats;
void gp_admit_get_stats(const gp_admit *a, gp_admit_stats *ret);

typedef struct gp_admit_tenant_stats {
        char id[GP_ADMIT_TENANT_MAX];
        uint64_t running, queued;
        uint64_t requests_total;              /* admitted */
        uint64_t tokens_total;                /* real (or reserved when unknown) tokens of ended requests */
        uint64_t rejected_total, expired_total;
} gp_admit_tenant_stats;
/* Tenant i (0..count-1).  -ENOENT past the end. */
size_t gp_admit_tenant_count(const gp_admit *a);
int gp_admit_tenant_stats_get(const gp_admit *a, size_t i, gp_admit_tenant_stats *ret);

/* The waiting tickets in submission order (for listings): calls fn for
 * each until it returns non-zero. */
void gp_admit_foreach_queued(const gp_admit *a, int (*fn)(const gp_admit_ticket *t, void *ud), void *ud);

#endif
