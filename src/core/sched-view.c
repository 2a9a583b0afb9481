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

static void fmt_need(const stask *t, char *buf, size_t size) {
        if (t->excl)
                snprintf(buf, size, "%d whole GPU%s", t->ngpus, t->ngpus > 1 ? "s" : "");
        else
                snprintf(buf, size, "%d GPU%s with %" PRId64 " MB free", t->ngpus, t->ngpus > 1 ? "s" : "",
                         t->mem);
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

/* The reason of a task held by its tenant's quota or its group's share. */
static void rule_reason(const gp_sched *s, const stask *t, int code, int64_t a1, int64_t a2, int64_t a3, char *buf,
                        size_t size) {
        const char *tn = intern_name(&s->tenants, t->tenant);
        if (!*tn)
                tn = "(none)";
        char used[32], max[32], need[32];
        switch (code) {
        case R_QUOTA_TASKS:
                snprintf(buf, size, "tenant %s quota: %" PRId64 " of %" PRId64 " tasks running", tn, a1, a2);
                break;
        case R_QUOTA_GPUS:
                fmt_milli(used, sizeof(used), a1, true);
                fmt_milli(max, sizeof(max), a2, false);
                fmt_milli(need, sizeof(need), a3, true);
                if (a3 > a2)
                        snprintf(buf, size, "tenant %s quota: this task needs %s GPUs, more than its max of %s", tn,
                                 need, max);
                else if (a1 >= a2)
                        snprintf(buf, size, "tenant %s quota: %s of %s GPUs in use", tn, used, max);
                else
                        snprintf(buf, size, "tenant %s quota: %s of %s GPUs in use, this task needs %s", tn, used,
                                 max, need);
                break;
        default:
                snprintf(buf, size, "group %s is at its %" PRId64 "%% share", intern_name(&s->groups, (uint32_t)a1),
                         a2);
                break;
        }
}

int gp_sched_task_reason(gp_sched *s, int64_t id, char *buf, size_t size) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        if (size)
                buf[0] = '\0';
        if (t->running)
                return 0;
        char need[96];
        fmt_need(t, need, sizeof(need));
        const char *kindtxt = t->gpu_model ? t->gpu_model : NULL;
        int code = t->rstamp == s->last_run_stamp ? t->rcode : R_NONE;
        int64_t a1 = t->ra1, a2 = t->ra2, a3 = t->ra3;
        if (code == R_NONE && array_full(t)) {
                code = R_ARRAY;
                a1 = t->arr->id;
                a2 = t->arr->limit;
        }
        if (code == R_NONE) /* not examined by the last run: its rules as they are now */
                code = gate(s, t, share_lb(s, t), &a1, &a2, &a3);
        if (code == R_ARRAY) {
                snprintf(buf, size, "array %" PRId64 " runs %" PRId64 " at once (%%%" PRId64 ")", a1, a2, a2);
                return 0;
        }
        if (code == R_QUOTA_TASKS || code == R_QUOTA_GPUS || code == R_GROUP) {
                rule_reason(s, t, code, a1, a2, a3, buf, size);
                return 0;
        }
        char extra[192] = "";
        if (kindtxt)
                snprintf(extra, sizeof(extra), " matching '%s'", kindtxt);
        for (int i = 0; i < t->nsel; i++) {
                size_t l = strlen(extra);
                snprintf(extra + l, sizeof(extra) - l, "%s%s", i ? "," : " on nodes labelled ",
                         t->sel[i] == NIL ? "?" : intern_name(&s->labels, t->sel[i]));
        }
        switch (code) {
        case R_NO_MEM:
                if (t->ra2 >= 0)
                        snprintf(buf, size, "no GPU%s has %" PRId64 " MB free (most free: %" PRId64 " MB)", extra,
                                 t->ra1, t->ra2);
                else
                        snprintf(buf, size, "no GPU%s has %" PRId64 " MB free", extra, t->ra1);
                break;
        case R_NO_WHOLE:
                if (t->ngpus == 1)
                        snprintf(buf, size, "no whole GPU%s is free", extra);
                else if (t->ra2 >= 0)
                        snprintf(buf, size,
                                 "waiting for a gang of %d whole GPUs%s on one node (most free on one node: %" PRId64
                                 ")",
                                 t->ngpus, extra, t->ra2);
                else
                        snprintf(buf, size, "waiting for a gang of %d whole GPUs%s on one node", t->ngpus, extra);
                break;
        case R_MODELS:
                snprintf(buf, size, "every GPU%s that fits holds %" PRId64 " models (max_models_per_gpu)", extra,
                         t->ra1);
                break;
        case R_NODES:
                if (t->ra2 >= 0)
                        snprintf(buf, size,
                                 "waiting for whole nodes%s with %" PRId64 " GPUs in all (free whole nodes hold %" PRId64
                                 ")",
                                 extra, t->ra1, t->ra2);
                else
                        snprintf(buf, size, "waiting for whole nodes%s with %" PRId64 " GPUs in all", extra, t->ra1);
                break;
        case R_GANG_SHARED:
                snprintf(buf, size, "waiting for a gang of %d GPUs%s with %" PRId64 " MB free each on one node",
                         (int)t->ra1, extra, t->ra2);
                break;
        case R_NO_USABLE:
                snprintf(buf, size, "every GPU%s is drained, unhealthy or reserved", extra);
                break;
        case R_BEHIND_HIGHER:
                snprintf(buf, size,
                         "waiting behind task %" PRId64 " (P%" PRId64
                         "), which is next in line for GPUs; set timeout_s to let it backfill",
                         t->ra1, t->ra2);
                break;
        case R_WOULD_DELAY:
                if (t->ra2 >= 0)
                        snprintf(buf, size,
                                 "fits only on GPUs reserved for task %" PRId64 "; backfill needs timeout_s <= %" PRId64
                                 " s",
                                 t->ra1, t->ra2);
                else
                        snprintf(buf, size,
                                 "fits only on GPUs reserved for task %" PRId64
                                 ", whose start time is unknown",
                                 t->ra1);
                break;
        case R_DEPTH:
                snprintf(buf, size, "waiting: more than %" PRId64 " tasks ahead are examined first", t->ra1);
                break;
        case R_HOL:
                snprintf(buf, size, "waiting behind task %" PRId64 " (backfill is off)", t->ra1);
                break;
        default:
                if (s->last_resv_id && s->last_resv_id != t->id)
                        snprintf(buf, size, "waiting behind task %" PRId64 ", which is next in line for GPUs",
                                 s->last_resv_id);
                else
                        snprintf(buf, size, "waiting to be scheduled (needs %s)", need);
                return 0;
        }
        if (t->resv_holder && code != R_NONE) {
                size_t l = strlen(buf);
                if (l + 40 < size)
                        snprintf(buf + l, size - l, "; next in line, GPUs reserved");
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
