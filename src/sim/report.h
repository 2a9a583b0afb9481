/* report.h - metrics of a replay: job completion time, queueing delay,
 * makespan, utilisation, per-tenant share and Jain's fairness index.
 *
 * Definitions (docs/simulate.md explains them for readers of the table):
 *   JCT of a job      = finish - submit
 *   wait of a job     = JCT - duration (time not running: queued at first
 *                       and again after preemptions, plus restart overhead)
 *   percentiles       = nearest rank: the value at rank ceil(p/100 * n) of
 *                       the sorted values (1-based); p0 is the minimum
 *   makespan          = last finish - first submit
 *   utilisation       = busy GPU time / (cluster GPUs x makespan)
 *   tenant slowdown   = sum of its jobs' JCTs / sum of their durations (>= 1)
 *   fairness          = Jain's index over tenants of 1 / slowdown:
 *                       (sum x)^2 / (n * sum x^2), 1 when every tenant's
 *                       work is stretched equally, 1/n at worst
 *   share             = tenant's GPU time / all GPU time; share_contended
 *                       the same over the times when some job was waiting
 * Pure computation; no I/O; thread-safe.
 */
#ifndef GP_SIM_REPORT_H
#define GP_SIM_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "sim/sim.h"

typedef struct gp_report_dist {
        double avg, p50, p95, p99, max;  /* seconds */
} gp_report_dist;

typedef struct gp_report_tenant {
        const char *name;           /* borrowed from the caller's tenant names */
        size_t jobs;
        double gpu_hours;           /* GPU time held */
        double share;               /* of all GPU time, 0..1 */
        double share_contended;     /* of the GPU time while some job waited, 0..1 (0 if never) */
        double avg_jct_s, avg_wait_s;
        double slowdown;            /* sum JCT / sum duration */
} gp_report_tenant;

typedef struct gp_report {
        size_t jobs;
        gp_report_dist jct, wait;
        double makespan_s;
        double utilisation;         /* 0..1 */
        double fairness;            /* Jain's index over tenants with jobs, 1/n..1 */
        uint64_t preemptions;
        size_t preempted_jobs;      /* jobs preempted at least once */
        gp_report_tenant *tenants;  /* ntenants, in the caller's tenant order (tenants without jobs too) */
        uint32_t ntenants;
} gp_report;

/* Nearest-rank percentile of sorted[0..n) (n > 0), p in 0..100. */
double gp_report_percentile(const double *sorted, size_t n, double p);
/* Jain's fairness index of x[0..n): (sum x)^2 / (n sum x^2); 1 for n == 0
 * or all zero. */
double gp_report_jain(const double *x, size_t n);

/* Compute the report of replay r of jobs[0..n) on a cluster of `gpus`
 * GPUs.  tenant_names has r->ntenants entries and must outlive the report.
 * 0 or -ENOMEM (*ret untouched); free with gp_report_done. */
int gp_report_compute(const gp_sim_job *jobs, size_t n, const gp_sim_result *r, const char *const *tenant_names,
                      int gpus, gp_report *ret);
/* Takes a zeroed or computed report. */
void gp_report_done(gp_report *rep);

#endif
