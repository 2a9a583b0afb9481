/* sim.h - replay of a job list through the scheduling core on a virtual
 * clock.
 *
 * The replay drives gp_sched_* the way the daemon does: a job is enqueued
 * at its submit time, a finished job is removed with gp_sched_remove_at
 * (its run counted up to its end), and
 * gp_sched_run is called once per distinct event time (all arrivals and
 * ends at that time first, like one daemon batch), then START and PREEMPT
 * decisions are applied.  Besides arrivals and ends, the replay also runs
 * the core at gp_sched_next_wakeup() (queue deadlines; LAS demotions) and,
 * with tick_ms, periodically while jobs wait.  With notice_ms a preempted
 * job's GPUs stay busy for the notice, and starts wait until it is over.
 * Every job asks for whole GPUs (memory_mb 0), is preemptible, and has no
 * run-time estimate unless exact_estimates is set (the core is told each
 * job's duration) or learned_estimates (a core/predict.h predictor, fed
 * each job's run time as it ends, estimates each arrival from its tenant's
 * and its size's history, as the daemon would from its users' jobs).
 *
 * Deterministic: the same input gives the same result, bit for bit.
 * No I/O, no clock reads; not thread-safe per call but calls share nothing.
 */
#ifndef GP_SIM_SIM_H
#define GP_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sched.h"

#define GP_SIM_MAX_GPUS 100000         /* cluster size */
#define GP_SIM_MAX_GPUS_PER_NODE 256

typedef struct gp_sim_job {
        int64_t submit_ms;           /* >= 0, non-decreasing over the array */
        int64_t duration_ms;         /* > 0: run time when never preempted */
        int gpus;                    /* 1..GP_MAX_GPUS; more than gpus_per_node: whole nodes */
        int priority;                /* 0..9 */
        uint32_t tenant;             /* index into options.tenant_names */
} gp_sim_job;

typedef struct gp_sim_options {
        gp_sched_config sched;       /* policy and knobs; max_queue_depth is ignored (unbounded) */
        int gpus;                    /* cluster size, 1..GP_SIM_MAX_GPUS */
        int gpus_per_node;           /* 1..256; nodes = ceil(gpus / gpus_per_node) */
        const char *gpu_name;        /* model name of every GPU */
        int64_t gpu_memory_mb;       /* > 0 */
        bool exact_estimates;        /* tell the core each job's duration (timeout_ms) */
        bool learned_estimates;      /* tell it what a predictor learned so far (estimate_ms) */
        int64_t restart_overhead_ms; /* added to the remaining time at each restart after a preemption */
        bool preempt_loses_work;     /* a preempted job starts over (the daemon kills a batch task)
                                        instead of resuming where it stopped (checkpointing) */
        int64_t notice_ms;           /* > 0: a preempted job keeps its GPUs this long (its notice,
                                        --signal SIG@SECS: it checkpoints, progress counts up to the
                                        preemption) before they are free; as in the daemon, nothing
                                        starts while a preempted run drains: a start decided meanwhile
                                        begins when the last one has let go.  0: freed at once */
        const char *const *tenant_names; /* ntenants names for the core's tenant field */
        uint32_t ntenants;
        /* tenant and group settings given to the core before the replay
         * (gp_sched_tenant_set / gp_sched_group_set), as the daemon does
         * from its config; may be empty */
        const char *const *cfg_tenant_names;
        const gp_sched_tenant_cfg *cfg_tenants;
        uint32_t ncfg_tenants;
        const char *const *group_names;
        const uint32_t *group_shares;  /* percent, 1..100 */
        uint32_t ngroups;
        bool timeline;               /* keep samples of busy GPUs and queue length */
        int64_t tick_ms;             /* > 0: also run the core this long after the previous run
                                        while jobs wait (the daemon runs it at least every
                                        second); 0: only at events and wake-ups */
} gp_sim_options;

typedef struct gp_sim_job_result {
        int64_t start_ms;            /* first start */
        int64_t finish_ms;
        int preemptions;
        size_t start_seq;            /* rank of its first START among all first starts (0-based) */
        uint32_t *gpus;              /* GPUs (gp_sim_result.gpu_labels index) of the first start,
                                        n_gpus of them (a multi-node job: every GPU of its nodes) */
        int n_gpus;
} gp_sim_job_result;

typedef struct gp_sim_sample {
        int64_t t_ms;
        int busy_gpus;
        int queued;
        int running;
} gp_sim_sample;

typedef struct gp_sim_result {
        gp_sim_job_result *jobs;     /* one per input job, same order */
        size_t n;
        int64_t first_submit_ms, last_finish_ms;
        int64_t busy_gpu_ms;         /* integral of GPUs in use over time */
        int64_t contended_gpu_ms;    /* GPU-ms used while some job was waiting */
        int64_t *tenant_gpu_ms;      /* per tenant: GPU-ms held (whole replay) */
        int64_t *tenant_contended_gpu_ms; /* per tenant: GPU-ms held while some job was waiting */
        uint32_t ntenants;
        uint64_t preemptions;        /* PREEMPT decisions */
        uint64_t runs;               /* gp_sched_run calls */
        gp_sim_sample *timeline;     /* ntimeline samples when asked (a row per change) */
        size_t ntimeline;
        char **gpu_labels;           /* "node:index" per GPU id */
        int ngpus;
        int nodes;
        /* learned_estimates: how right they were, over the jobs given one */
        size_t est_n;                /* jobs that had an estimate at arrival */
        double est_err_median;       /* median of |ln(estimate / run time)| */
        double est_within_2x;        /* share of them within a factor of 2 */
} gp_sim_result;

/* Replay jobs[0..n).  On success *ret is a new result (gp_sim_result_free).
 * -EINVAL (bad options or a job the core refuses, reason in err), -ENOMEM.
 * err is always NUL-terminated when errlen > 0. */
int gp_sim_run(const gp_sim_job *jobs, size_t n, const gp_sim_options *opt, gp_sim_result **ret, char *err,
               size_t errlen);
/* Takes NULL. */
void gp_sim_result_free(gp_sim_result *r);
/* Name of node k of a cluster of `nodes` nodes ("local" when there is one,
 * as the daemon names its own machine; else "node01".. zero-padded). */
void gp_sim_node_name(int k, int nodes, char *buf, size_t size);

#endif
