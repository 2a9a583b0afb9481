/* predict.h - run-time estimates learned from history (pure; issue 26).
 *
 * The same user submits the same kind of job again and again (Helios,
 * SC'21), so a job's run time is predicted from the finished runs of the
 * jobs most like it: first those of the same tenant, user, name, GPU count
 * and command; when that group has too little history, wider groups, down
 * to every job with the same GPU count.  Each group keeps a recency-
 * weighted mean of log(run time) (run times are heavy-tailed: the estimate
 * is a geometric mean, and one long run does not swamp it) and its spread,
 * so an estimate comes with how many runs stand behind it and a confidence.
 *
 * Memory is bounded: one open-addressing table of at most max_entries
 * groups; a group that finds no room within a short probe replaces the
 * group with the least history there.  Not thread-safe: one owner.
 */
#ifndef GP_CORE_PREDICT_H
#define GP_CORE_PREDICT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gp_pred gp_pred;

/* What a job is known by.  NULL or "" strings and 0 numbers are "not
 * known" and still form groups (all jobs without a name, ...). */
typedef struct gp_pred_key {
        const char *tenant;
        const char *user;
        const char *name;
        int gpus;
        uint64_t cmd_hash;          /* e.g. FNV-1a of argv; 0 = unknown */
} gp_pred_key;

/* The levels, most specific first. */
enum {
        GP_PRED_TASK,       /* tenant, user, name, GPUs, command */
        GP_PRED_NAME,       /* tenant, user, name */
        GP_PRED_USER,       /* tenant, user, GPUs */
        GP_PRED_TENANT,     /* tenant, GPUs */
        GP_PRED_SIZE,       /* GPUs (every tenant) */
        GP_PRED_LEVELS
};

typedef struct gp_pred_est {
        int64_t ms;                 /* the estimate, 0 = none */
        int level;                  /* the group that answered (GP_PRED_*), -1 = none */
        int n;                      /* finished runs behind it (saturates at INT32_MAX) */
        double confidence;          /* 0..1: more runs and a narrower spread are surer */
} gp_pred_est;

/* A predictor of at most max_entries groups (rounded up to a power of two,
 * at least 64).  0, -EINVAL (0 or over 2^26), -ENOMEM. */
int gp_pred_new(size_t max_entries, gp_pred **ret);
void gp_pred_free(gp_pred *p);

/* A run of such a job took run_ms (> 0; others are ignored).  Updates the
 * job's group at every level. */
void gp_pred_observe(gp_pred *p, const gp_pred_key *k, int64_t run_ms);

/* The estimate for a job like k: the most specific group with at least
 * min_runs runs (GP_PRED_SIZE answers from one run).  upper_ms > 0 caps it
 * (a time limit is an upper bound).  Always fills *ret (ms 0 when nothing
 * is known); returns the level or -1. */
#define GP_PRED_MIN_RUNS 2
int gp_pred_estimate(const gp_pred *p, const gp_pred_key *k, int64_t upper_ms, gp_pred_est *ret);

/* Groups held now (for tests and the memory bound). */
size_t gp_pred_groups(const gp_pred *p);

#endif
