/* sched-task.c - tasks: checking and building a request, queueing it,
 * starting it on GPUs and stopping it (shares, usage, counts), restoring
 * running tasks, removing and requeueing. */
#include "core/sched-int.h"

/* ------------------------------------------------------------------ */
/* tasks                                                              */

SCHED_PRIVATE void task_free(gp_sched *s, stask *t) {
        if (!t)
                return;
        if (t->arr && --t->arr->members == 0) {
                gp_i64map_del(&s->arrays, t->arr->id);
                free(t->arr);
        }
        free(t->gpu_model);
        free(t->pre_by);
        free(t->sel);
        if (t->gpus != t->gpu1)
                free(t->gpus);
        free(t);
}

static int req_check(const gp_sched_req *r) {
        if (!r || r->id <= 0 || r->priority < 0 || r->priority >= GP_PRIORITY_LEVELS || r->gpus < 1 ||
            r->gpus > GP_MAX_GPUS || r->memory_mb < 0 || r->timeout_ms < 0 || r->estimate_ms < 0 || r->queue_deadline_ms < 0 ||
            (r->elastic_max_gpus != 0 &&
             (r->elastic_max_gpus <= r->gpus || r->elastic_max_gpus > GP_NODE_MAX_GPUS)) ||
            r->array_id < 0 || r->array_limit < 0 || pairs_parse(NULL, NULL, r->node_selector, NULL, 0) < 0 ||
            r->cpus < 0 || r->cpus > GP_SCHED_MAX_CPUS || r->host_memory_mb < 0 ||
            r->host_memory_mb > GP_SCHED_MAX_HOST_MB ||
            (r->elastic_max_nodes != 0 &&
             (r->elastic_max_gpus != 0 || r->elastic_min_nodes < 1 || r->elastic_min_nodes != r->gpus ||
              r->elastic_max_nodes < r->elastic_min_nodes || r->elastic_max_nodes > GP_SCHED_MAX_ENODES)) ||
            (r->elastic_max_nodes == 0 && r->elastic_min_nodes != 0))
                return -EINVAL;
        return 0;
}

/* Room for n GPU ids in t->gpus (the two inline slots, else the heap);
 * the ids held are kept.  0 or -ENOMEM. */
SCHED_PRIVATE int task_gpus_cap(stask *t, uint32_t n) {
        if (n <= t->gcap)
                return 0;
        uint32_t *v = malloc((size_t)n * sizeof(*v));
        if (!v)
                return -ENOMEM;
        memcpy(v, t->gpus, (size_t)t->gcap * sizeof(*v));
        if (t->gpus != t->gpu1)
                free(t->gpus);
        t->gpus = v;
        t->gcap = n;
        return 0;
}

static int task_from_req(gp_sched *s, const gp_sched_req *r, stask **ret) {
        stask *t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->id = r->id;
        t->prio = (uint8_t)r->priority;
        t->ngpus = (uint16_t)r->gpus;
        t->gpus = t->gpu1;
        t->gcap = (uint32_t)(sizeof(t->gpu1) / sizeof(t->gpu1[0]));
        t->excl = r->exclusive || r->memory_mb == 0;
        t->preemptible = r->preemptible;
        t->mem = r->memory_mb;
        t->timeout_ms = r->timeout_ms;
        t->estimate_ms = r->estimate_ms;
        t->submit_ms = r->submit_ms;
        t->deadline_ms = r->queue_deadline_ms;
        t->nmin = (uint16_t)r->gpus;
        t->nmax = (uint16_t)r->elastic_max_gpus;
        t->nodes_min = (uint16_t)r->elastic_min_nodes;
        t->nodes_max = (uint16_t)r->elastic_max_nodes;
        if (t->nodes_max) { /* whole nodes: whole GPUs */
                t->excl = true;
                t->multi = true;
                t->multi_gen = s->node_gen;
        }
        if (t->nmax) {
                /* elastic tasks hold whole GPUs */
                t->excl = true;
                t->mem = 0;
        }
        t->excl_req = t->excl;
        t->cpus = r->cpus;
        t->hmem = (int32_t)r->host_memory_mb;
        t->host = r->cpus > 0 || r->host_memory_mb > 0;
        if (r->node_selector && *r->node_selector) {
                uint32_t ids[GP_LABELS_MAX];
                int n = pairs_parse(&s->labels, NULL, r->node_selector, ids, GP_LABELS_MAX);
                if (n < 0) {
                        task_free(s, t);
                        return n;
                }
                if (n > 0) {
                        if (!(t->sel = malloc((size_t)n * sizeof(*t->sel))))
                                goto oom;
                        memcpy(t->sel, ids, (size_t)n * sizeof(*ids));
                        t->nsel = n;
                }
        }
        if (intern_get(&s->tenants, r->tenant, &t->tenant) < 0 || tenant_ensure(s, t->tenant) < 0 ||
            intern_get(&s->models, r->model, &t->model) < 0)
                goto oom;
        if (r->gpu_model && *r->gpu_model) {
                if (!(t->gpu_model = strdup(r->gpu_model)))
                        goto oom;
        }
        t->kinds = kinds_for_glob(s, t->gpu_model);
        t->q = (uint8_t)queue_of(s, t);
        t->okey = s->pol->order_key ? s->pol->order_key(s, t) : 0;
        if (r->array_id > 0) {
                sarray *a = gp_i64map_get(&s->arrays, r->array_id);
                if (!a) {
                        if (!(a = calloc(1, sizeof(*a))))
                                goto oom;
                        a->id = r->array_id;
                        if (gp_i64map_put(&s->arrays, a->id, a) < 0) {
                                free(a);
                                goto oom;
                        }
                }
                a->limit = r->array_limit; /* every member carries the same */
                a->members++;
                t->arr = a;
        }
        *ret = t;
        return 0;
oom:
        task_free(s, t);
        return -ENOMEM;
}

int gp_sched_check_feasible(const gp_sched *s, const gp_sched_req *r, char *why, size_t size) {
        if (why && size)
                why[0] = '\0';
        if (req_check(r) < 0) {
                if (why)
                        snprintf(why, size, "invalid request");
                return -EINVAL;
        }
        uint64_t kinds = kinds_for_glob(s, (r->gpu_model && *r->gpu_model) ? r->gpu_model : NULL);
        int64_t mem = r->elastic_max_gpus ? 0 : r->memory_mb; /* elastic: whole GPUs */
        uint32_t sel[GP_LABELS_MAX];
        int nsel = pairs_parse(NULL, &s->labels, r->node_selector, sel, GP_LABELS_MAX);
        if (nsel < 0)
                nsel = 0; /* (cannot happen: req_check parsed it) */
        int64_t largest = 0;
        int most_on_node = 0, most_kind = 0, whole_n = 0, whole_max = 0;
        int64_t whole_sum = 0;
        bool kind_seen = false, any_gpu = false, sel_seen = false, host_seen = false;
        int most_cpus = 0;
        int64_t most_mem = 0;
        for (uint32_t ni = 0; ni < s->nnodes; ni++) {
                const snode *nd = &s->nodes[ni];
                if (!nd->kinds)
                        continue; /* removed */
                any_gpu = true;
                if (!labels_hold(nd, sel, nsel))
                        continue;
                sel_seen = true;
                if (r->elastic_max_gpus && !(nd->allow & GP_SCHED_NODE_ELASTIC))
                        continue;
                const shost *h = &s->nhost[ni];
                if ((r->cpus || r->host_memory_mb) && !host_seen) { /* the largest capacities, for why */
                        most_cpus = h->cpus > most_cpus ? h->cpus : most_cpus;
                        most_mem = h->mem_mb > most_mem ? h->mem_mb : most_mem;
                }
                if ((h->cpus && h->cpus < r->cpus) || (h->mem_mb && h->mem_mb < r->host_memory_mb))
                        continue; /* could never hold its host CPUs or RAM */
                host_seen = true;
                int cnt = 0, cnt_kind = 0;
                bool whole = nd->size > 0 && !(nd->wkinds & ~kinds) && (nd->allow & GP_SCHED_NODE_MULTI);
                for (int i = 0; i < nd->ngpus; i++) {
                        const sgpu *g = &s->gpus[nd->gpus[i]];
                        if (g->reserved || g->removed)
                                continue;
                        if (!((kinds >> g->kind) & 1))
                                continue;
                        kind_seen = true;
                        cnt_kind++;
                        /* what it could ever hold: foreign memory comes and goes */
                        int64_t cap = g->usable + g->foreign;
                        if (cap > largest)
                                largest = cap;
                        if (cap >= mem && cap > 0)
                                cnt++;
                        else
                                whole = false;
                }
                if (cnt >= r->gpus)
                        return 0;
                if (cnt > most_on_node)
                        most_on_node = cnt;
                if (cnt_kind > most_kind)
                        most_kind = cnt_kind;
                if (whole) {
                        whole_n++;
                        whole_sum += nd->size;
                        if (nd->size > whole_max)
                                whole_max = nd->size;
                }
        }
        /* more GPUs than the largest node it may use: whole nodes */
        bool multi = !r->elastic_max_gpus && most_kind > 0 && r->gpus > most_kind;
        if (multi && whole_sum >= r->gpus)
                return 0;
        if (!why)
                return -EINVAL;
        if (!any_gpu)
                snprintf(why, size, "the pool has no GPUs");
        else if (!sel_seen)
                snprintf(why, size, "no node has the labels '%s' (node_selector)", r->node_selector);
        else if (!host_seen && most_cpus && most_cpus < r->cpus)
                snprintf(why, size, "no node has %d CPUs (most on a node: %d)", r->cpus, most_cpus);
        else if (!host_seen)
                snprintf(why, size, "no node has %" PRId64 " MB of RAM (most on a node: %" PRId64 " MB)",
                         r->host_memory_mb, most_mem);
        else if (!kind_seen)
                snprintf(why, size, "no GPU matches gpu_model '%s'",
                         r->gpu_model && *r->gpu_model ? r->gpu_model : "*");
        else if (largest < mem)
                snprintf(why, size,
                         "no GPU has %" PRId64 " MB usable (largest: %" PRId64 " MB after the %" PRId64
                         " MB safety margin)",
                         r->memory_mb, largest, s->cfg.memory_safety_margin_mb);
        else if (multi && whole_n == 0)
                snprintf(why, size, "needs whole nodes with %d GPUs in all, and no node fits whole", r->gpus);
        else if (multi)
                snprintf(why, size, "needs %d whole nodes of %d GPUs, %d exist%s", (r->gpus + whole_max - 1) / whole_max,
                         whole_max, whole_n, whole_n == 1 ? "s" : "");
        else if (r->elastic_max_gpus)
                snprintf(why, size, "an elastic task runs on one node: no node has %d GPUs that fit (most on one node: %d)",
                         r->gpus, most_on_node);
        else
                snprintf(why, size, "no node has %d GPUs that fit (most on one node: %d)", r->gpus, most_on_node);
        return -EINVAL;
}

int gp_sched_enqueue_room(const gp_sched *s, const char *tenant, int priority, size_t n) {
        if (priority < 0 || priority >= GP_PRIORITY_LEVELS)
                return -EINVAL;
        if (s->tiers[s->pol->queue_of(s, priority, 0)].n + n > (size_t)s->cfg.max_queue_depth)
                return -GP_EQUEUEFULL;
        uint32_t tid;
        if (tenant && intern_find(&s->tenants, tenant, &tid) == 0 && tid < s->tn_cap && s->tn[tid].max_queued > 0 &&
            (size_t)s->tn[tid].queued + n > (size_t)s->tn[tid].max_queued)
                return -EDQUOT;
        return 0;
}

int gp_sched_enqueue(gp_sched *s, const gp_sched_req *r) {
        if (req_check(r) < 0)
                return -EINVAL;
        if (map_get(s, r->id))
                return -EEXIST;
        /* a new task enters tier = its priority (LAS: queue 0) */
        if (s->tiers[s->pol->queue_of(s, r->priority, 0)].n >= (size_t)s->cfg.max_queue_depth)
                return -GP_EQUEUEFULL;
        uint32_t tid;
        if (!r->readmit && intern_find(&s->tenants, r->tenant, &tid) == 0 && tid < s->tn_cap &&
            s->tn[tid].max_queued > 0 && s->tn[tid].queued >= s->tn[tid].max_queued)
                return -EDQUOT;
        stask *t;
        int rc = task_from_req(s, r, &t);
        if (rc < 0)
                return rc;
        if (map_put(s, t) < 0) {
                task_free(s, t);
                return -ENOMEM;
        }
        if (t->deadline_ms > 0 && heap_push(&s->heap, &s->heap_n, &s->heap_cap, t->deadline_ms, t->id) < 0) {
                map_del(s, t->id);
                task_free(s, t);
                return -ENOMEM;
        }
        if (queue_add(s, t) < 0) {
                map_del(s, t->id);
                task_free(s, t);
                return -ENOMEM;
        }
        return 0;
}

/* Would t, holding share milli-GPUs, take capacity another tenant is
 * guaranteed?  It would not if it stays within its own tenant's guarantee,
 * or fits in what is free beyond the other tenants' unused guarantees
 * (free = usable GPUs minus every running share).  Called before t's share
 * is counted.  O(1) while no tenant has a guarantee, else O(tenants). */
static bool borrows(const gp_sched *s, const stask *t, int64_t share) {
        const stenant *T = &s->tn[t->tenant];
        if (s->n_guar == 0 || (T->guar_milli > 0 && T->run_milli + share <= T->guar_milli))
                return false;
        int64_t used = 0, lent = 0;
        bool any = false;
        for (uint32_t i = 0; i < s->tn_cap; i++) {
                const stenant *U = &s->tn[i];
                used += U->run_milli;
                if (U->guar_milli > 0 && i != t->tenant) {
                        any = true;
                        if (U->guar_milli > U->run_milli)
                                lent += U->guar_milli - U->run_milli;
                }
        }
        if (!any)
                return false;
        int64_t free_milli = (int64_t)s->usable_gpus * 1000 - used;
        return share > free_milli - lent;
}

/* Add (sign 1) or take back (-1) t's host CPUs and RAM on each node of its
 * GPUs (they are grouped by node). */
static void host_charge(gp_sched *s, const stask *t, int sign) {
        for (int i = 0; i < t->ngpus; i++) {
                uint32_t ni = s->gpus[t->gpus[i]].node;
                if (i > 0 && s->gpus[t->gpus[i - 1]].node == ni)
                        continue;
                host_node(s, t, ni, sign);
        }
}

/* Start t on gpus.  borrow: 1 or 0 says whether it runs borrowing (a
 * restore), -1 decides it (see borrows(); preemptible tasks never borrow:
 * they are reclaimable anyway). */
SCHED_PRIVATE int start_on(gp_sched *s, stask *t, const uint32_t *gpus, int n, int64_t now, int borrow) {
        if (t->nmax || t->nodes_max) {
                stask **el = grow(s->el, sizeof(*el), &s->el_cap, s->nel + 1);
                if (!el)
                        return -ENOMEM;
                s->el = el;
        }
        if (task_gpus_cap(t, (uint32_t)(n > t->nmax ? n : t->nmax)) < 0)
                return -ENOMEM;
        t->charge = t->excl ? 0 : t->mem;
        int i;
        for (i = 0; i < n; i++) {
                if (t->excl)
                        t->charge = s->gpus[gpus[i]].usable;
                int rc = gpu_attach(s, gpus[i], t);
                if (rc < 0)
                        goto undo;
                t->gpus[i] = gpus[i];
        }
        t->running = true;
        t->ngpus = (uint16_t)n;
        if (t->host)
                host_charge(s, t, 1);
        t->start_ms = t->seg_ms = now;
        t->start_stamp = s->stamp;
        if (t->nmax || t->nodes_max) {
                t->el_idx = s->nel;
                s->el[s->nel++] = t;
        }
        s->running++;
        t->share = fit_share(s, t, gpus, n);
        t->borrowing = !t->preemptible && (borrow >= 0 ? borrow > 0 : borrows(s, t, t->share));
        stenant *T = &s->tn[t->tenant];
        tenant_out(s, T);
        usage_advance(s, T, now);
        T->running++;
        T->run_milli += t->share;
        tenant_in(s, T);
        if (t->arr)
                t->arr->running++;
        pre_count(s, t, 1);
        return 0;
undo:
        while (i-- > 0) {
                if (t->excl)
                        t->charge = s->gpus[gpus[i]].usable;
                gpu_detach(s, gpus[i], t);
        }
        return -ENOMEM;
}

/* Free t's GPUs; its run up to `now` counts as attained service. */
SCHED_PRIVATE void stop(gp_sched *s, stask *t, int64_t now) {
        t->attained = attained_at(t, now);
        pre_count(s, t, -1);
        t->borrowing = false;
        for (int i = 0; i < t->ngpus; i++) {
                if (t->excl)
                        t->charge = s->gpus[t->gpus[i]].usable;
                gpu_detach(s, t->gpus[i], t);
        }
        if (t->host)
                host_charge(s, t, -1);
        t->running = false;
        s->running--;
        stenant *T = &s->tn[t->tenant];
        tenant_out(s, T);
        usage_advance(s, T, now);
        T->running--;
        T->run_milli -= t->share;
        tenant_in(s, T);
        if (t->arr)
                t->arr->running--;
        t->share = 0;
        if (t->nmax || t->nodes_max) {
                stask *last = s->el[--s->nel];
                s->el[t->el_idx] = last;
                last->el_idx = t->el_idx;
        }
        t->ngpus = t->nmin; /* queued again asking for what it asked (elastic: its minimum) */
}

int gp_sched_restore_running(gp_sched *s, const gp_sched_req *r, const uint32_t *gpus, int n,
                             int64_t start_ms) {
        /* a multi-node task holds whole nodes: more GPUs than it asked for */
        if (req_check(r) < 0 || n < r->gpus || n > (r->elastic_max_gpus ? r->elastic_max_gpus : GP_MAX_GPUS))
                return -EINVAL;
        if (map_get(s, r->id))
                return -EEXIST;
        for (int i = 0; i < n; i++) {
                if (gpus[i] >= s->ngpus)
                        return -EINVAL;
                for (int j = 0; j < i; j++)
                        if (gpus[j] == gpus[i])
                                return -EINVAL;
        }
        stask *t;
        int rc = task_from_req(s, r, &t);
        if (rc < 0)
                return rc;
        if (t->nodes_max) {
                /* elastic in nodes: whole nodes, as many as it may hold */
                int k = 0;
                for (int i = 0; i < n; i++)
                        k += i == 0 || s->gpus[gpus[i]].node != s->gpus[gpus[i - 1]].node;
                if (k < t->nodes_min || k > t->nodes_max) {
                        task_free(s, t);
                        return -EINVAL;
                }
        } else if (n > r->gpus && !t->nmax) {
                /* only a multi-node task holds more than it asked for */
                bool nodes = false;
                for (int i = 1; i < n && !nodes; i++)
                        nodes = s->gpus[gpus[i]].node != s->gpus[gpus[0]].node;
                if (!nodes) {
                        task_free(s, t);
                        return -EINVAL;
                }
                /* it ran on whole nodes: whole GPUs; whether it is still
                 * multi-node is decided again if it is queued again */
                t->excl = true;
                t->multi = true;
                t->multi_gen = s->node_gen - 1;
        }
        for (int i = 0; i < n; i++) {
                const sgpu *g = &s->gpus[gpus[i]];
                /* restore is lenient about health (the task is already
                 * there) but not about double-booking */
                if (g->excl || (t->excl && g->ntasks > 0) || (!t->excl && gpu_free(g) < t->mem)) {
                        task_free(s, t);
                        return -EINVAL;
                }
        }
        if (map_put(s, t) < 0) {
                task_free(s, t);
                return -ENOMEM;
        }
        if ((rc = start_on(s, t, gpus, n, start_ms, r->borrowing ? 1 : 0)) < 0) {
                map_del(s, t->id);
                task_free(s, t);
                return rc;
        }
        for (int i = t->nmin; i < n; i++)
                s->gpus[gpus[i]].grow_seq = ++s->grow_seq; /* grown in the order given */
        s->gen++;
        return 0;
}

int gp_sched_remove(gp_sched *s, int64_t id) {
        return gp_sched_remove_at(s, id, s->last_run_ms);
}

int gp_sched_remove_at(gp_sched *s, int64_t id, int64_t now_ms) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        if (t->running)
                stop(s, t, now_ms);
        else
                queue_del(s, t);
        map_del(s, id);
        task_free(s, t);
        s->gen++;
        return 0;
}

int gp_sched_task_attained(const gp_sched *s, int64_t id, int64_t now_ms, int64_t *ret_gpu_ms) {
        const stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        *ret_gpu_ms = attained_at(t, now_ms);
        return 0;
}

int gp_sched_requeue(gp_sched *s, int64_t id) {
        return gp_sched_requeue_at(s, id, s->last_run_ms);
}

int gp_sched_requeue_at(gp_sched *s, int64_t id, int64_t now_ms) {
        stask *t = map_get(s, id);
        if (!t)
                return -ENOENT;
        if (!t->running)
                return -GP_ESTATE;
        stop(s, t, now_ms);
        t->rcode = R_NONE;
        t->q = (uint8_t)queue_of(s, t);
        if (queue_add(s, t) < 0) {
                /* cannot queue it again: it is forgotten, the caller must end it */
                map_del(s, t->id);
                task_free(s, t);
                return -ENOMEM;
        }
        return 0;
}
