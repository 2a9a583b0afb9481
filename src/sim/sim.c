/* sim.c - event-driven replay through the scheduling core (see sim.h).
 *
 * State: the core (gp_sched), the next arrival index, and a min-heap of
 * job ends keyed by (time, job).  A job's end entry carries the job's run
 * generation; a preemption bumps the generation, so a stale end entry is
 * skipped when it surfaces (lazy deletion).  Between two event times
 * nothing changes, so the integrals (busy GPU time, per-tenant GPU time)
 * are accumulated as count x interval at each event.
 * Invariants: busy == sum of gpus of running jobs; queued + running ==
 * jobs arrived and not finished; the core holds exactly those jobs.
 */
#include "sim/sim.h"

#include "base/err.h"
#include "base/vec.h"
#include "core/predict.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EV_END = 0, EV_RELEASE, EV_BEGIN }; /* EV_END only, unless notice_ms */

typedef struct end_ent {
        int64_t t;
        size_t job;
        uint32_t gen;
        int kind;                  /* EV_*: a job's end; a preempted job's GPUs freed after its notice;
                                      a start delayed by a draining preemption begins */
        int gpus;                  /* EV_RELEASE/EV_BEGIN: GPUs freed / taken */
} end_ent;

typedef struct jstate {
        int64_t remaining_ms;      /* run time still owed (excluding restart overhead) */
        int64_t run_len_ms;        /* length of the current run (remaining + overhead) */
        int64_t run_start_ms;
        uint32_t gen;
        int held;                  /* GPUs held while running (whole nodes: more than asked) */
        bool counted;              /* held is in busy (false while a delayed start has not begun) */
        bool started, running;
} jstate;

typedef struct heap {
        end_ent *v;
        size_t n, cap;
} heap;

static bool ent_less(const end_ent *a, const end_ent *b) {
        return a->t < b->t || (a->t == b->t && (a->job < b->job || (a->job == b->job && a->kind < b->kind)));
}

static int heap_push(heap *h, end_ent e) {
        end_ent *v = gp_vec_grow(h->v, &h->cap, h->n + 1, sizeof(*v), 1024);
        if (!v)
                return -ENOMEM;
        h->v = v;
        size_t i = h->n++;
        while (i > 0) {
                size_t p = (i - 1) / 2;
                if (!ent_less(&e, &h->v[p]))
                        break;
                h->v[i] = h->v[p];
                i = p;
        }
        h->v[i] = e;
        return 0;
}

static void heap_pop(heap *h) {
        end_ent last = h->v[--h->n];
        size_t i = 0, n = h->n;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= n)
                        break;
                if (c + 1 < n && ent_less(&h->v[c + 1], &h->v[c]))
                        c++;
                if (!ent_less(&h->v[c], &last))
                        break;
                h->v[i] = h->v[c];
                i = c;
        }
        if (n)
                h->v[i] = last;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
        if (!errlen)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

void gp_sim_node_name(int k, int nodes, char *buf, size_t size) {
        if (nodes <= 1) {
                snprintf(buf, size, "local");
                return;
        }
        /* zero-padded to the width of the largest number, at least 2 */
        if (nodes < 100)
                snprintf(buf, size, "node%02d", (k + 1) % 100);
        else if (nodes < 1000)
                snprintf(buf, size, "node%03d", (k + 1) % 1000);
        else if (nodes < 10000)
                snprintf(buf, size, "node%04d", (k + 1) % 10000);
        else
                snprintf(buf, size, "node%06d", (k + 1) % 1000000);
}

void gp_sim_result_free(gp_sim_result *r) {
        if (!r)
                return;
        for (size_t i = 0; r->jobs && i < r->n; i++)
                free(r->jobs[i].gpus);
        free(r->jobs);
        free(r->tenant_gpu_ms);
        free(r->tenant_contended_gpu_ms);
        free(r->timeline);
        if (r->gpu_labels)
                for (int i = 0; i < r->ngpus; i++)
                        free(r->gpu_labels[i]);
        free(r->gpu_labels);
        free(r);
}

static int check_options(const gp_sim_job *jobs, size_t n, const gp_sim_options *o, char *err, size_t errlen) {
        if (!o || o->gpus < 1 || o->gpus > GP_SIM_MAX_GPUS || o->gpus_per_node < 1 ||
            o->gpus_per_node > GP_SIM_MAX_GPUS_PER_NODE || !o->gpu_name || !*o->gpu_name || o->gpu_memory_mb <= 0 ||
            o->restart_overhead_ms < 0 || o->tick_ms < 0 || o->notice_ms < 0 || (!o->tenant_names && o->ntenants) || (!jobs && n) ||
            (o->ncfg_tenants && (!o->cfg_tenant_names || !o->cfg_tenants)) ||
            (o->ngroups && (!o->group_names || !o->group_shares))) {
                set_err(err, errlen, "invalid simulation options");
                return -EINVAL;
        }
        for (size_t i = 0; i < n; i++) {
                const gp_sim_job *j = &jobs[i];
                if (j->submit_ms < 0 || j->duration_ms <= 0 || j->gpus < 1 || j->priority < 0 ||
                    j->priority >= GP_PRIORITY_LEVELS || j->tenant >= o->ntenants ||
                    (i && j->submit_ms < jobs[i - 1].submit_ms)) {
                        set_err(err, errlen, "job %zu: invalid (times, gpus, priority or tenant)", i);
                        return -EINVAL;
                }
        }
        return 0;
}

static int add_inventory(gp_sched *s, const gp_sim_options *o, gp_sim_result *r, char *err, size_t errlen) {
        int nodes = (o->gpus + o->gpus_per_node - 1) / o->gpus_per_node;
        r->nodes = nodes;
        if (!(r->gpu_labels = calloc((size_t)o->gpus, sizeof(char *))))
                return -ENOMEM;
        for (int g = 0; g < o->gpus; g++) {
                char node[32], uuid[64], label[48];
                int k = g / o->gpus_per_node, idx = g % o->gpus_per_node;
                gp_sim_node_name(k, nodes, node, sizeof(node));
                if (nodes == 1) /* the daemon's sim backend names */
                        snprintf(uuid, sizeof(uuid), "SIM-%08d-0000-0000-0000-000000000000", idx);
                else
                        snprintf(uuid, sizeof(uuid), "SIM-%s-%d", node, idx);
                gp_sched_gpu_desc d = {.node = node, .index = idx, .uuid = uuid, .name = o->gpu_name,
                                       .memory_total_mb = o->gpu_memory_mb};
                uint32_t id;
                int rc = gp_sched_gpu_add(s, &d, &id);
                if (rc < 0) {
                        set_err(err, errlen, "GPU %s:%d: %s", node, idx, gp_strerror(rc));
                        return rc;
                }
                if (id != (uint32_t)g) {
                        set_err(err, errlen, "GPU ids out of order");
                        return -EINVAL;
                }
                snprintf(label, sizeof(label), "%s:%d", node, idx);
                if (!(r->gpu_labels[g] = strdup(label)))
                        return -ENOMEM;
                r->ngpus = g + 1;
        }
        return 0;
}

typedef struct sim {
        const gp_sim_job *jobs;
        size_t n;
        const gp_sim_options *o;
        gp_sim_result *r;
        gp_sched *s;
        jstate *st;
        heap ends;
        int busy, queued, running;
        int *tenant_busy;
        size_t nstarted;
        size_t timeline_cap;
        gp_pred *pred;               /* learned_estimates */
        int64_t *est;                /* per job: its estimate at arrival, 0 = none */
        int64_t drain_until;         /* notice_ms: when the last preempted run lets go */
} sim;

static int sample(sim *m, int64_t t) {
        gp_sim_result *r = m->r;
        if (r->ntimeline) {
                gp_sim_sample *last = &r->timeline[r->ntimeline - 1];
                if (last->busy_gpus == m->busy && last->queued == m->queued && last->running == m->running)
                        return 0;
                if (last->t_ms == t) {
                        *last = (gp_sim_sample){t, m->busy, m->queued, m->running};
                        return 0;
                }
        }
        gp_sim_sample *v = gp_vec_grow(r->timeline, &m->timeline_cap, r->ntimeline + 1, sizeof(*v), 4096);
        if (!v)
                return -ENOMEM;
        r->timeline = v;
        r->timeline[r->ntimeline++] = (gp_sim_sample){t, m->busy, m->queued, m->running};
        return 0;
}

/* Apply the decisions of one run at time t. */
static int apply(sim *m, const gp_sched_decision *d, size_t nd, int64_t t, char *err, size_t errlen) {
        for (size_t i = 0; i < nd; i++) {
                if (d[i].id < 1 || (size_t)d[i].id > m->n) {
                        set_err(err, errlen, "core decided about unknown task %" PRId64, d[i].id);
                        return -EINVAL;
                }
                size_t k = (size_t)(d[i].id - 1);
                const gp_sim_job *j = &m->jobs[k];
                jstate *js = &m->st[k];
                gp_sim_job_result *jr = &m->r->jobs[k];
                switch (d[i].kind) {
                case GP_DECIDE_START:
                        if (js->running || d[i].n_gpus < j->gpus) {
                                set_err(err, errlen, "core started job %zu twice or on %d GPUs", k, d[i].n_gpus);
                                return -EINVAL;
                        }
                        /* nothing starts while a preempted run drains (notice_ms) */
                        bool delayed = m->drain_until > t;
                        int64_t at = delayed ? m->drain_until : t;
                        if (!js->started) {
                                js->started = true;
                                jr->start_ms = at;
                                jr->start_seq = m->nstarted++;
                                if (!(jr->gpus = malloc((size_t)d[i].n_gpus * sizeof(uint32_t))))
                                        return -ENOMEM;
                                memcpy(jr->gpus, d[i].gpus, (size_t)d[i].n_gpus * sizeof(uint32_t));
                                jr->n_gpus = d[i].n_gpus;
                                js->run_len_ms = js->remaining_ms;
                        } else {
                                js->run_len_ms = js->remaining_ms + m->o->restart_overhead_ms;
                        }
                        js->running = true;
                        js->run_start_ms = at;
                        if (heap_push(&m->ends, (end_ent){at + js->run_len_ms, k, js->gen, EV_END, 0}) < 0)
                                return -ENOMEM;
                        js->held = d[i].n_gpus;
                        js->counted = !delayed;
                        if (delayed && heap_push(&m->ends, (end_ent){at, k, js->gen, EV_BEGIN, js->held}) < 0)
                                return -ENOMEM;
                        if (!delayed) {
                                m->busy += js->held;
                                m->tenant_busy[j->tenant] += js->held;
                        }
                        m->queued--;
                        m->running++;
                        break;
                case GP_DECIDE_PREEMPT: {
                        if (!js->running) {
                                set_err(err, errlen, "core preempted job %zu, which is not running", k);
                                return -EINVAL;
                        }
                        int64_t ran = t - js->run_start_ms;
                        /* time spent on the restart overhead is lost; the rest is progress */
                        int64_t overhead = js->run_len_ms - js->remaining_ms;
                        int64_t progress = ran > overhead ? ran - overhead : 0;
                        js->remaining_ms = m->o->preempt_loses_work ? j->duration_ms : js->remaining_ms - progress;
                        js->running = false;
                        js->gen++;
                        jr->preemptions++;
                        m->r->preemptions++;
                        if (js->counted && m->o->notice_ms > 0) { /* it checkpoints, then lets go */
                                int64_t until = t + m->o->notice_ms;
                                if (heap_push(&m->ends, (end_ent){until, k, 0, EV_RELEASE, js->held}) < 0)
                                        return -ENOMEM;
                                if (until > m->drain_until)
                                        m->drain_until = until;
                        } else if (js->counted) {
                                m->busy -= js->held;
                                m->tenant_busy[j->tenant] -= js->held;
                        }
                        js->counted = false;
                        m->queued++;
                        m->running--;
                        break;
                }
                default:
                        set_err(err, errlen, "core made a decision of kind %d for job %zu; the replay sets no queue deadline",
                                (int)d[i].kind, k);
                        return -EINVAL;
                }
        }
        return 0;
}

static int replay(sim *m, char *err, size_t errlen) {
        const gp_sim_options *o = m->o;
        gp_sim_result *r = m->r;
        gp_sched_decision *dec = NULL;
        size_t ndec = 0, capdec = 0, next = 0;
        int64_t last_t = m->n ? m->jobs[0].submit_ms : 0, wake = INT64_MAX;
        int rc = 0;
        /* nothing changed in the core since its last run, which decided
         * nothing (see gp_sched_run_idle) */
        bool quiet = false;
        r->first_submit_ms = last_t;
        r->last_finish_ms = last_t;
        for (;;) {
                int64_t t = INT64_MAX;
                if (next < m->n)
                        t = m->jobs[next].submit_ms;
                if (m->ends.n && m->ends.v[0].t < t)
                        t = m->ends.v[0].t;
                if (wake < t)
                        t = wake;
                if (o->tick_ms > 0 && m->queued > 0 && last_t + o->tick_ms < t)
                        t = last_t + o->tick_ms;
                if (t == INT64_MAX)
                        break;
                /* integrals over [last_t, t): nothing changed in between */
                int64_t dt = t - last_t;
                if (dt > 0) {
                        r->busy_gpu_ms += (int64_t)m->busy * dt;
                        for (uint32_t k = 0; k < r->ntenants; k++)
                                if (m->tenant_busy[k])
                                        r->tenant_gpu_ms[k] += (int64_t)m->tenant_busy[k] * dt;
                        if (m->queued > 0) {
                                r->contended_gpu_ms += (int64_t)m->busy * dt;
                                for (uint32_t k = 0; k < r->ntenants; k++)
                                        if (m->tenant_busy[k])
                                                r->tenant_contended_gpu_ms[k] += (int64_t)m->tenant_busy[k] * dt;
                        }
                }
                last_t = t;
                /* ends at t */
                while (m->ends.n && m->ends.v[0].t == t) {
                        end_ent e = m->ends.v[0];
                        heap_pop(&m->ends);
                        jstate *js = &m->st[e.job];
                        const gp_sim_job *j = &m->jobs[e.job];
                        if (e.kind == EV_RELEASE || (e.kind == EV_BEGIN && e.gen == js->gen && js->running)) {
                                int g = e.kind == EV_RELEASE ? -e.gpus : e.gpus;
                                m->busy += g;
                                m->tenant_busy[j->tenant] += g;
                                js->counted |= e.kind == EV_BEGIN;
                                continue;
                        }
                        if (e.kind != EV_END || e.gen != js->gen || !js->running)
                                continue; /* preempted since: stale */
                        if ((rc = gp_sched_remove_at(m->s, (int64_t)e.job + 1, t)) < 0) {
                                set_err(err, errlen, "job %zu: the core lost it (%s)", e.job, gp_strerror(rc));
                                goto out;
                        }
                        quiet = false;
                        js->running = false;
                        js->remaining_ms = 0;
                        r->jobs[e.job].finish_ms = t;
                        r->last_finish_ms = t;
                        if (m->pred) {
                                gp_pred_key k = {.tenant = m->o->tenant_names[j->tenant], .gpus = j->gpus};
                                gp_pred_observe(m->pred, &k, j->duration_ms);
                        }
                        m->busy -= js->held;
                        m->tenant_busy[j->tenant] -= js->held;
                        m->running--;
                }
                /* arrivals at t */
                while (next < m->n && m->jobs[next].submit_ms == t) {
                        const gp_sim_job *j = &m->jobs[next];
                        gp_sched_req q = {.id = (int64_t)next + 1, .tenant = o->tenant_names[j->tenant],
                                          .priority = j->priority, .gpus = j->gpus, .memory_mb = 0,
                                          .preemptible = true,
                                          .timeout_ms = o->exact_estimates ? j->duration_ms : 0,
                                          .submit_ms = j->submit_ms};
                        if (m->pred) {
                                gp_pred_key k = {.tenant = o->tenant_names[j->tenant], .gpus = j->gpus};
                                gp_pred_est e;
                                gp_pred_estimate(m->pred, &k, 0, &e);
                                q.estimate_ms = m->est[next] = e.ms;
                        }
                        char why[256];
                        rc = gp_sched_check_feasible(m->s, &q, why, sizeof(why));
                        if (rc == 0)
                                rc = gp_sched_enqueue(m->s, &q);
                        if (rc < 0) {
                                set_err(err, errlen, "job %zu (%d GPUs): the core refuses it: %s", next, j->gpus,
                                        rc == -EINVAL && why[0] ? why : gp_strerror(rc));
                                goto out;
                        }
                        quiet = false;
                        m->queued++;
                        next++;
                }
                /* a run the core says would decide nothing is left out
                 * (and counted: the daemon would have made it) */
                ndec = 0;
                if (!gp_sched_run_idle(m->s, t, quiet)) {
                        rc = gp_sched_run(m->s, t, &dec, &ndec, &capdec);
                        quiet = rc == 0 && ndec == 0;
                }
                r->runs++;
                if (rc < 0) {
                        set_err(err, errlen, "scheduling at %" PRId64 " ms: %s", t, gp_strerror(rc));
                        goto out;
                }
                if ((rc = apply(m, dec, ndec, t, err, errlen)) < 0)
                        goto out;
                if (o->timeline && (rc = sample(m, t)) < 0)
                        goto out;
                wake = gp_sched_next_wakeup(m->s, t);
        }
        if (m->queued || m->running) {
                set_err(err, errlen, "replay ended with %d jobs queued and %d running", m->queued, m->running);
                rc = -EINVAL;
        }
out:
        free(dec);
        if (rc == -ENOMEM && errlen && !err[0])
                set_err(err, errlen, "out of memory");
        return rc;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* How right the learned estimates were: |ln(estimate / run time)| of every
 * job that had one, its median, and the share within a factor of 2. */
static int estimate_errors(sim *m) {
        double *e = malloc((m->n ? m->n : 1) * sizeof(*e));
        if (!e)
                return -ENOMEM;
        size_t k = 0, close = 0;
        for (size_t i = 0; i < m->n; i++) {
                if (m->est[i] <= 0)
                        continue;
                e[k] = fabs(log((double)m->est[i] / (double)m->jobs[i].duration_ms));
                close += e[k] <= log(2.0);
                k++;
        }
        m->r->est_n = k;
        if (k) {
                qsort(e, k, sizeof(*e), cmp_double);
                m->r->est_err_median = k % 2 ? e[k / 2] : (e[k / 2 - 1] + e[k / 2]) / 2;
                m->r->est_within_2x = (double)close / (double)k;
        }
        free(e);
        return 0;
}

int gp_sim_run(const gp_sim_job *jobs, size_t n, const gp_sim_options *opt, gp_sim_result **ret, char *err,
               size_t errlen) {
        if (errlen)
                err[0] = '\0';
        int rc = check_options(jobs, n, opt, err, errlen);
        if (rc < 0)
                return rc;
        sim m = {.jobs = jobs, .n = n, .o = opt};
        gp_sim_result *r = calloc(1, sizeof(*r));
        if (!r) {
                set_err(err, errlen, "out of memory");
                return -ENOMEM;
        }
        m.r = r;
        r->n = n;
        r->ntenants = opt->ntenants;
        r->jobs = calloc(n ? n : 1, sizeof(*r->jobs));
        r->tenant_gpu_ms = calloc(opt->ntenants ? opt->ntenants : 1, sizeof(int64_t));
        r->tenant_contended_gpu_ms = calloc(opt->ntenants ? opt->ntenants : 1, sizeof(int64_t));
        m.tenant_busy = calloc(opt->ntenants ? opt->ntenants : 1, sizeof(int));
        m.st = calloc(n ? n : 1, sizeof(*m.st));
        if (!r->jobs || !r->tenant_gpu_ms || !r->tenant_contended_gpu_ms || !m.tenant_busy || !m.st) {
                rc = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < n; i++)
                m.st[i].remaining_ms = jobs[i].duration_ms;
        gp_sched_config c = opt->sched;
        c.max_queue_depth = 1 << 30; /* every trace job is queued, as the daemon queues what it stored */
        if ((rc = gp_sched_new(&c, &m.s)) < 0) {
                set_err(err, errlen, "scheduler configuration: %s", gp_strerror(rc));
                goto out;
        }
        if ((rc = add_inventory(m.s, opt, r, err, errlen)) < 0)
                goto out;
        for (uint32_t i = 0; i < opt->ngroups; i++)
                if ((rc = gp_sched_group_set(m.s, opt->group_names[i], opt->group_shares[i])) < 0) {
                        set_err(err, errlen, "group %s: the scheduler refuses its share", opt->group_names[i]);
                        goto out;
                }
        for (uint32_t i = 0; i < opt->ncfg_tenants; i++)
                if ((rc = gp_sched_tenant_set(m.s, opt->cfg_tenant_names[i], &opt->cfg_tenants[i])) < 0) {
                        set_err(err, errlen, "tenant %s: the scheduler refuses its settings", opt->cfg_tenant_names[i]);
                        goto out;
                }
        if (opt->learned_estimates) {
                m.est = calloc(n ? n : 1, sizeof(*m.est));
                if (!m.est || (rc = gp_pred_new(4096, &m.pred)) < 0) {
                        rc = -ENOMEM;
                        goto out;
                }
        }
        rc = replay(&m, err, errlen);
        if (rc == 0 && m.est)
                rc = estimate_errors(&m);
out:
        gp_pred_free(m.pred);
        free(m.est);
        gp_sched_free(m.s);
        free(m.st);
        free(m.tenant_busy);
        free(m.ends.v);
        if (rc < 0) {
                if (rc == -ENOMEM && errlen && !err[0])
                        set_err(err, errlen, "out of memory");
                gp_sim_result_free(r);
                return rc;
        }
        *ret = r;
        return 0;
}
