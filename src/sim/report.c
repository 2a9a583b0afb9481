/* report.c - metrics of a replay (definitions in report.h).
 * Sums are kept in integer milliseconds where they can be, so the results
 * do not depend on summation order; only the final ratios are doubles. */
#include "sim/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double gp_report_percentile(const double *sorted, size_t n, double p) {
        if (n == 0)
                return 0;
        if (p <= 0)
                return sorted[0];
        double r = ceil(p / 100.0 * (double)n);
        size_t k = r < 1 ? 1 : (size_t)r;
        if (k > n)
                k = n;
        return sorted[k - 1];
}

double gp_report_jain(const double *x, size_t n) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < n; i++) {
                s += x[i];
                s2 += x[i] * x[i];
        }
        if (n == 0 || s2 == 0)
                return 1;
        return s * s / ((double)n * s2);
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* Distribution of v[0..n) (sorted in place); sum_ms is the exact sum. */
static gp_report_dist dist(double *v, size_t n, int64_t sum_ms) {
        gp_report_dist d = {0};
        if (!n)
                return d;
        qsort(v, n, sizeof(*v), cmp_double);
        d.avg = (double)sum_ms / 1000.0 / (double)n;
        d.p50 = gp_report_percentile(v, n, 50);
        d.p95 = gp_report_percentile(v, n, 95);
        d.p99 = gp_report_percentile(v, n, 99);
        d.max = v[n - 1];
        return d;
}

void gp_report_done(gp_report *rep) {
        if (!rep)
                return;
        free(rep->tenants);
        rep->tenants = NULL;
}

int gp_report_compute(const gp_sim_job *jobs, size_t n, const gp_sim_result *r, const char *const *tenant_names,
                      int gpus, gp_report *ret) {
        gp_report rep = {.jobs = n, .preemptions = r->preemptions, .ntenants = r->ntenants};
        double *jct = malloc((n ? n : 1) * sizeof(double));
        double *wait = malloc((n ? n : 1) * sizeof(double));
        rep.tenants = calloc(r->ntenants ? r->ntenants : 1, sizeof(*rep.tenants));
        int64_t *t_jct = calloc(r->ntenants ? r->ntenants : 1, sizeof(int64_t));
        int64_t *t_wait = calloc(r->ntenants ? r->ntenants : 1, sizeof(int64_t));
        int64_t *t_dur = calloc(r->ntenants ? r->ntenants : 1, sizeof(int64_t));
        double *x = calloc(r->ntenants ? r->ntenants : 1, sizeof(double));
        int rc = 0;
        if (!jct || !wait || !rep.tenants || !t_jct || !t_wait || !t_dur || !x) {
                rc = -ENOMEM;
                goto out;
        }
        int64_t sum_jct = 0, sum_wait = 0;
        for (size_t i = 0; i < n; i++) {
                const gp_sim_job_result *jr = &r->jobs[i];
                int64_t c = jr->finish_ms - jobs[i].submit_ms;
                int64_t w = c - jobs[i].duration_ms;
                jct[i] = (double)c / 1000.0;
                wait[i] = (double)w / 1000.0;
                sum_jct += c;
                sum_wait += w;
                uint32_t k = jobs[i].tenant;
                rep.tenants[k].jobs++;
                t_jct[k] += c;
                t_wait[k] += w;
                t_dur[k] += jobs[i].duration_ms;
                if (jr->preemptions)
                        rep.preempted_jobs++;
        }
        rep.jct = dist(jct, n, sum_jct);
        rep.wait = dist(wait, n, sum_wait);
        int64_t span = r->last_finish_ms - r->first_submit_ms;
        rep.makespan_s = (double)span / 1000.0;
        rep.utilisation = span > 0 && gpus > 0 ? (double)r->busy_gpu_ms / ((double)gpus * (double)span) : 0;
        int64_t total_gpu_ms = 0;
        for (uint32_t k = 0; k < r->ntenants; k++)
                total_gpu_ms += r->tenant_gpu_ms[k];
        size_t nx = 0;
        for (uint32_t k = 0; k < r->ntenants; k++) {
                gp_report_tenant *t = &rep.tenants[k];
                t->name = tenant_names[k];
                t->gpu_hours = (double)r->tenant_gpu_ms[k] / 3600000.0;
                t->share = total_gpu_ms ? (double)r->tenant_gpu_ms[k] / (double)total_gpu_ms : 0;
                t->share_contended =
                        r->contended_gpu_ms ? (double)r->tenant_contended_gpu_ms[k] / (double)r->contended_gpu_ms : 0;
                if (!t->jobs)
                        continue;
                t->avg_jct_s = (double)t_jct[k] / 1000.0 / (double)t->jobs;
                t->avg_wait_s = (double)t_wait[k] / 1000.0 / (double)t->jobs;
                t->slowdown = (double)t_jct[k] / (double)t_dur[k];
                x[nx++] = 1.0 / t->slowdown;
        }
        rep.fairness = gp_report_jain(x, nx);
        *ret = rep;
        rep.tenants = NULL;
out:
        free(rep.tenants);
        free(jct);
        free(wait);
        free(t_jct);
        free(t_wait);
        free(t_dur);
        free(x);
        return rc;
}
