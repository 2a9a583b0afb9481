/* sched-view.c - what the scheduling core shows: GPU and task views,
 * queue positions and dispatch order, the reasons a task waits (as
 * sentences), statistics. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* GPU views                                                          */

int gp_sched_gpu_get(const gp_sched *s, uint32_t gpu, gp_sched_gpu_view *ret) {
        if (gpu >= s->ngpus)
                return -ENOENT;
        const sgpu *g = &s->gpus[gpu];
        *ret = (gp_sched_gpu_view){
                .node = s->nodes[g->node].name, .uuid = g->uuid, .name = g->name,
                .index = g->index, .memory_total_mb = g->total, .memory_usable_mb = g->usable,
                .memory_foreign_mb = g->foreign,
                .memory_allocated_mb = g->alloc, .ntasks = g->ntasks, .exclusive_held = g->excl,
                .healthy = g->healthy, .drained = g->drained, .reserved = g->reserved,
                .removed = g->removed, .util_pct = g->util, .temp_c = g->temp,
        };
        return 0;
}

/* ------------------------------------------------------------------ */
/* inventory                                                          */

int gp_sched_gpu_tasks(const gp_sched *s, uint32_t gpu, int64_t *ids, int max) {
        if (gpu >= s->ngpus)
                return 0;
        const sgpu *g = &s->gpus[gpu];
        for (int i = 0; i < g->ntasks && i < max; i++)
                ids[i] = g->tasks[i]->id;
        return g->ntasks;
}

int gp_sched_gpu_models(const gp_sched *s, uint32_t gpu, const char **names, int max) {
        if (gpu >= s->ngpus)
                return 0;
        const sgpu *g = &s->gpus[gpu];
        for (int i = 0; i < g->nmodels && i < max; i++)
                names[i] = intern_name(&s->models, g->models[i].model);
        return g->nmodels;
}

/* ------------------------------------------------------------------ */
/* views                                                              */

int gp_sched_task_get(gp_sched *s, int64_t id, gp_sched_task_view *ret) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        gp_sched_task_view v = {.id = t->id, .running = t->running, .priority = t->prio,
                                .borrowing = t->running && t->borrowing};
        if (t->running) {
                v.n_gpus = t->ngpus;
                v.gpus = t->gpus;
                v.start_ms = t->start_ms;
                v.gpus_milli = t->share;
        } else {
                v.queue_position = (int)s->pol->position(s, t);
        }
        *ret = v;
        return 0;
}

size_t gp_sched_queue_order(gp_sched *s, int64_t *ids, size_t max) {
        walk w;
        uint64_t lp[GP_PRIORITY_LEVELS];
        size_t total = 0;
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                lp[i] = s->tiers[i].pass;
                total += s->tiers[i].n;
        }
        if (max == 0 || walk_init(s, &w, false) < 0)
                return total; /* out of memory: no ids */
        size_t k = 0;
        while (k < max) {
                int ti = pick_tier(s, w.cur, lp);
                if (ti < 0)
                        break;
                ids[k++] = w.cur[ti]->id;
                walk_advance(s, &w, ti);
                lp[ti] += stride(s, ti);
        }
        return total;
}

/* milli-GPUs as GPUs: "8", "7.5", "0.182"; with `point` at least one
 * decimal ("8.0"). */
static void fmt_milli(char *buf, size_t size, int64_t v, bool point) {
        if (v < 0)
                v = 0;
        int64_t frac = v % 1000;
        if (frac == 0) {
                snprintf(buf, size, point ? "%" PRId64 ".0" : "%" PRId64, v / 1000);
                return;
        }
        char f[8];
        snprintf(f, sizeof(f), "%03" PRId64, frac);
        for (int i = 2; i > 0 && f[i] == '0'; i--)
                f[i] = '\0';
        snprintf(buf, size, "%" PRId64 ".%s", v / 1000, f);
}

/* ---- reasons: a code, its arguments, and the English text ----------
 *
 * Every reason is one template of codes (the dashboard keeps the same
 * codes' templates in other languages): {0}..{3} are its arguments as
 * text, {x} the task's GPU-model glob and node labels (" matching
 * '*A100*' on nodes labelled zone=a"; r->glob and r->labels hold them
 * bare). */

static void reason_put(char *buf, size_t size, gp_sched_reason *r, const char *code, const char *tmpl,
                       const char *extra, int n, const char *a0, const char *a1, const char *a2, const char *a3) {
        const char *args[GP_SCHED_REASON_ARGS] = {a0, a1, a2, a3};
        if (r) {
                gp_strlcpy(r->code, code, sizeof(r->code));
                r->nargs = n;
                for (int i = 0; i < n; i++)
                        gp_strlcpy(r->args[i], args[i] ? args[i] : "", sizeof(r->args[i]));
        }
        size_t o = 0;
        for (const char *p = tmpl; *p && o + 1 < size; p++) {
                const char *v = NULL;
                if (p[0] == '{' && p[1] >= '0' && p[1] < '0' + n && p[2] == '}')
                        v = args[p[1] - '0'];
                else if (p[0] == '{' && p[1] == 'x' && p[2] == '}')
                        v = extra;
                if (v) {
                        o += gp_strlcpy(buf + o, v, size - o);
                        if (o >= size)
                                o = size - 1;
                        p += 2;
                        continue;
                }
                buf[o++] = *p;
        }
        if (size)
                buf[o < size ? o : size - 1] = '\0';
}

#define NUM(i, v) (snprintf(nb[i], sizeof(nb[i]), "%" PRId64, (int64_t)(v)), nb[i])

/* The reason of a task held by its tenant's quota or its group's share. */
static void rule_reason(const gp_sched *s, const stask *t, int code, int64_t a1, int64_t a2, int64_t a3, char *buf,
                        size_t size, gp_sched_reason *r) {
        const char *tn = intern_name(&s->tenants, t->tenant);
        if (!*tn)
                tn = "(none)";
        char used[32], max[32], need[32], nb[4][24];
        switch (code) {
        case R_QUOTA_TASKS:
                reason_put(buf, size, r, "quota_tasks", "tenant {0} quota: {1} of {2} tasks running", "", 3, tn,
                           NUM(0, a1), NUM(1, a2), NULL);
                break;
        case R_QUOTA_GPUS:
                fmt_milli(used, sizeof(used), a1, true);
                fmt_milli(max, sizeof(max), a2, false);
                fmt_milli(need, sizeof(need), a3, true);
                if (a3 > a2)
                        reason_put(buf, size, r, "quota_gpus_never",
                                   "tenant {0} quota: this task needs {1} GPUs, more than its max of {2}", "", 3, tn,
                                   need, max, NULL);
                else if (a1 >= a2)
                        reason_put(buf, size, r, "quota_gpus_full", "tenant {0} quota: {1} of {2} GPUs in use", "", 3,
                                   tn, used, max, NULL);
                else
                        reason_put(buf, size, r, "quota_gpus",
                                   "tenant {0} quota: {1} of {2} GPUs in use, this task needs {3}", "", 4, tn, used,
                                   max, need);
                break;
        default:
                reason_put(buf, size, r, "group_share", "group {0} is at its {1}% share", "", 2,
                           intern_name(&s->groups, (uint32_t)a1), NUM(0, a2), NULL, NULL);
                break;
        }
}

int gp_sched_task_reason(gp_sched *s, int64_t id, char *buf, size_t size) {
        return gp_sched_task_reason_ex(s, id, buf, size, NULL);
}

int gp_sched_task_reason_ex(gp_sched *s, int64_t id, char *buf, size_t size, gp_sched_reason *r) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        if (size)
                buf[0] = '\0';
        if (r)
                memset(r, 0, sizeof(*r));
        if (t->running)
                return 0;
        char nb[4][24];
        const char *kindtxt = t->gpu_model ? t->gpu_model : NULL;
        if (t->rstamp == s->last_run_stamp && t->rcode == R_DIAG) {
                /* the run left the scan of the pool to whoever asks: the
                 * pool as it is now (the answer is kept for this run) */
                diagnose(s, t);
                t->rstamp = s->last_run_stamp;
        }
        int code = t->rstamp == s->last_run_stamp ? t->rcode : R_NONE;
        int64_t a1 = t->ra1, a2 = t->ra2, a3 = t->ra3;
        if (code == R_NONE && array_full(t)) {
                code = R_ARRAY;
                a1 = t->arr->id;
                a2 = t->arr->limit;
        }
        if (code == R_NONE) /* not examined by the last run: its rules as they are now */
                code = gate(s, t, share_lb(s, t), &a1, &a2, &a3);
        /* its quota would admit it, but its tenant's quota is kept for an
         * earlier task of the tenant (giving it the GPUs would delay that one) */
        const stenant *T = &s->tn[t->tenant];
        int64_t q1, q2, q3;
        if (T->held_stamp == s->last_run_stamp && T->held_by && T->held_by != t->id &&
            (code == R_NONE || code == T->held_code) && !gate(s, t, share_lb(s, t), &q1, &q2, &q3)) {
                reason_put(buf, size, r, "behind_own",
                           "waiting behind task {0} of its tenant, for which its quota is kept (starting this one "
                           "would delay it)",
                           "", 1, NUM(0, T->held_by), NULL, NULL, NULL);
                return 0;
        }
        if (code == R_ARRAY) {
                reason_put(buf, size, r, "array_limit", "array {0} runs {1} at once (%{1})", "", 2, NUM(0, a1), NUM(1, a2),
                           NULL, NULL);
                return 0;
        }
        if (code == R_QUOTA_TASKS || code == R_QUOTA_GPUS || code == R_GROUP) {
                rule_reason(s, t, code, a1, a2, a3, buf, size, r);
                return 0;
        }
        char extra[192] = "", labels[160] = "";
        if (kindtxt)
                snprintf(extra, sizeof(extra), " matching '%s'", kindtxt);
        for (int i = 0; i < t->nsel; i++) {
                size_t l = strlen(labels);
                snprintf(labels + l, sizeof(labels) - l, "%s%s", i ? "," : "",
                         t->sel[i] == NIL ? "?" : intern_name(&s->labels, t->sel[i]));
        }
        if (labels[0]) {
                size_t l = strlen(extra);
                snprintf(extra + l, sizeof(extra) - l, " on nodes labelled %s", labels);
        }
        if (r) {
                gp_strlcpy(r->glob, kindtxt ? kindtxt : "", sizeof(r->glob));
                gp_strlcpy(r->labels, labels, sizeof(r->labels));
        }
        switch (code) {
        case R_NO_MEM:
                if (t->ra2 >= 0)
                        reason_put(buf, size, r, "no_memory_most", "no GPU{x} has {0} MB free (most free: {1} MB)",
                                   extra, 2, NUM(0, t->ra1), NUM(1, t->ra2), NULL, NULL);
                else
                        reason_put(buf, size, r, "no_memory", "no GPU{x} has {0} MB free", extra, 1, NUM(0, t->ra1), NULL,
                                   NULL, NULL);
                break;
        case R_NO_WHOLE:
                if (t->ngpus == 1)
                        reason_put(buf, size, r, "no_whole_gpu", "no whole GPU{x} is free", extra, 0, NULL, NULL, NULL,
                                   NULL);
                else if (t->ra2 >= 0)
                        reason_put(buf, size, r, "gang_whole_most",
                                   "waiting for a gang of {0} whole GPUs{x} on one node (most free on one node: {1})",
                                   extra, 2, NUM(0, t->ngpus), NUM(1, t->ra2), NULL, NULL);
                else
                        reason_put(buf, size, r, "gang_whole", "waiting for a gang of {0} whole GPUs{x} on one node",
                                   extra, 1, NUM(0, t->ngpus), NULL, NULL, NULL);
                break;
        case R_MODELS:
                reason_put(buf, size, r, "models_per_gpu",
                           "every GPU{x} that fits holds {0} models (max_models_per_gpu)", extra, 1, NUM(0, t->ra1), NULL,
                           NULL, NULL);
                break;
        case R_NODES:
                if (t->ra2 >= 0)
                        reason_put(buf, size, r, "whole_nodes_most",
                                   "waiting for whole nodes{x} with {0} GPUs in all (free whole nodes hold {1})", extra,
                                   2, NUM(0, t->ra1), NUM(1, t->ra2), NULL, NULL);
                else
                        reason_put(buf, size, r, "whole_nodes", "waiting for whole nodes{x} with {0} GPUs in all",
                                   extra, 1, NUM(0, t->ra1), NULL, NULL, NULL);
                break;
        case R_HOST_CPU:
                reason_put(buf, size, r, "no_cpus", "waiting: needs {0} CPUs, most free on a node{x} is {1}", extra, 2,
                           NUM(0, t->ra1), NUM(1, t->ra2), NULL, NULL);
                break;
        case R_HOST_MEM:
                reason_put(buf, size, r, "no_host_memory",
                           "waiting: needs {0} MB of RAM, most free on a node{x} is {1} MB", extra, 2, NUM(0, t->ra1),
                           NUM(1, t->ra2), NULL, NULL);
                break;
        case R_ENODES:
                if (t->ra2 >= 0)
                        reason_put(buf, size, r, "elastic_nodes_most",
                                   "waiting for {0} whole nodes{x} (wholly free now: {1})", extra, 2, NUM(0, t->ra1),
                                   NUM(1, t->ra2), NULL, NULL);
                else
                        reason_put(buf, size, r, "elastic_nodes", "waiting for {0} whole nodes{x}", extra, 1,
                                   NUM(0, t->ra1), NULL, NULL, NULL);
                break;
        case R_GANG_SHARED:
                reason_put(buf, size, r, "gang_shared", "waiting for a gang of {0} GPUs{x} with {1} MB free each on one node",
                           extra, 2, NUM(0, t->ra1), NUM(1, t->ra2), NULL, NULL);
                break;
        case R_NO_USABLE:
                reason_put(buf, size, r, "no_usable_gpu", "every GPU{x} is drained, unhealthy or reserved", extra, 0,
                           NULL, NULL, NULL, NULL);
                break;
        case R_BEHIND_HIGHER:
                reason_put(buf, size, r, "behind_higher",
                           "waiting behind task {0} (P{1}), which is next in line for GPUs; set timeout_s to let it "
                           "backfill",
                           "", 2, NUM(0, t->ra1), NUM(1, t->ra2), NULL, NULL);
                break;
        case R_WOULD_DELAY:
                if (t->ra2 >= 0)
                        reason_put(buf, size, r, "would_delay",
                                   "fits only on GPUs reserved for task {0}; backfill needs timeout_s <= {1} s", "", 2,
                                   NUM(0, t->ra1), NUM(1, t->ra2), NULL, NULL);
                else
                        reason_put(buf, size, r, "would_delay_unknown",
                                   "fits only on GPUs reserved for task {0}, whose start time is unknown", "", 1,
                                   NUM(0, t->ra1), NULL, NULL, NULL);
                break;
        case R_DEPTH:
                reason_put(buf, size, r, "depth", "waiting: more than {0} tasks ahead are examined first", "", 1,
                           NUM(0, t->ra1), NULL, NULL, NULL);
                break;
        case R_HOL:
                reason_put(buf, size, r, "hol", "waiting behind task {0} (backfill is off)", "", 1, NUM(0, t->ra1), NULL,
                           NULL, NULL);
                break;
        default:
                if (s->last_resv_id && s->last_resv_id != t->id)
                        reason_put(buf, size, r, "behind_next", "waiting behind task {0}, which is next in line for GPUs",
                                   "", 1, NUM(0, s->last_resv_id), NULL, NULL, NULL);
                else if (t->excl)
                        reason_put(buf, size, r, "waiting_whole", "waiting to be scheduled (needs {0} whole GPU{1})", "",
                                   2, NUM(0, t->ngpus), t->ngpus > 1 ? "s" : "", NULL, NULL);
                else
                        reason_put(buf, size, r, "waiting_shared",
                                   "waiting to be scheduled (needs {0} GPU{1} with {2} MB free)", "", 3, NUM(0, t->ngpus),
                                   t->ngpus > 1 ? "s" : "", NUM(1, t->mem), NULL);
                return 0;
        }
        if (t->resv_holder && code != R_NONE) {
                size_t l = strlen(buf);
                if (l + 40 < size)
                        snprintf(buf + l, size - l, "; next in line, GPUs reserved");
                if (r)
                        r->reserved = true;
        }
        return 0;
}

void gp_sched_get_stats(const gp_sched *s, gp_sched_stats *ret) {
        gp_sched_stats st = {0};
        for (int i = 0; i < GP_PRIORITY_LEVELS; i++) {
                st.queued[i] = s->tiers[i].n;
                st.queued_total += s->tiers[i].n;
        }
        st.running = s->running;
        st.total_scheduled = s->total_scheduled;
        st.total_backfilled = s->total_backfilled;
        st.total_expired = s->total_expired;
        st.total_preempted = s->total_preempted;
        for (uint32_t i = 0; i < s->ngpus; i++) {
                const sgpu *g = &s->gpus[i];
                if (g->removed)
                        continue;
                st.gpus_total++;
                if (gpu_usable(g)) {
                        st.gpus_usable++;
                        st.memory_usable_mb += g->usable;
                }
                if (g->ntasks > 0)
                        st.gpus_busy++;
                st.memory_allocated_mb += g->alloc;
        }
        *ret = st;
}
