/* serve.c - model servers gpupool runs itself (see serve.h).
 *
 * Invariants: one thread owns the replica table; it reads the daemon's
 * task map under d->lock only to find a replica's task by name (so a daemon
 * restart finds the servers that kept running), and submits through the
 * command queue like an HTTP client would.  A replica is an upstream of the
 * gateway exactly while its task runs and its readiness path answered 200.
 *
 * Unloading: when a replica's task has waited in the queue UNLOAD_WAIT_MS
 * and stopping one running replica of another, idle model (no request of
 * it waiting or in flight at the gateway) would let it fit where it does
 * not fit now, the replica of the least recently used such model is
 * cancelled and marked unloaded: it is not started again (not even to keep
 * the model's replicas or autoscale min) until a request for its model
 * reaches the gateway after the unload while the model has no ready
 * replica or its requests wait for admission.  Never-used models count as
 * least recently used (ties: the first in the config).  One unload at a
 * time: the next only after the previous replica's task ended.
 */
#include "server/serve.h"
#include "server/nodes.h"

#include "base/log.h"
#include "base/ownport.h"
#include "base/util.h"
#include "gateway/gateway.h"
#include "server/server-int.h"
#include "server/relay.h"
#include "server/submit.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define SERVE_TENANT "gpupool"
#define MAX_REPLICAS 64
#define TICK_MS 250

typedef struct replica {
        const gp_cfg_model *m;
        int n;                     /* replica number */
        char name[GP_NAME_MAX];    /* task name "serve:MODEL:N" */
        int64_t task_id;           /* its active task, 0 = none known */
        int port;
        char host[256];            /* where it runs: 127.0.0.1, or its agent node's host */
        gp_relay *relay;           /* on an agent node: the gateway's way there over TLS (relay.h) */
        const char *via_host;      /* what the gateway dials: host and port, or the relay's */
        int via_port;
        bool ready;                /* an upstream of the gateway now */
        char url[GP_CFG_URL_MAX];
        int64_t next_ms;           /* not before: submit (again) */
        int64_t poll_ms;           /* not before: poll readiness again */
        int64_t started_ms;        /* when its task last started running */
        int quick_fails;           /* ends soon after start, in a row (back-off) */
        bool active;               /* wanted now (autoscale turns replicas above min on and off) */
        bool stopping;             /* turned off: its task is cancelled, not started again */
        bool running;              /* its task runs (as the last tick saw) */
        int64_t queued_since_ms;   /* its task waits in the queue since, 0 = not queued */
        bool unloaded;             /* stopped as the least recently used idle model: off until a request */
        int64_t unloaded_ms;       /* when (a request after this loads it again) */
} replica;

/* Autoscale state of one served model. */
typedef struct scaler {
        const gp_cfg_model *m;
        int first, count;          /* its replicas: r[first .. first+count) */
        int64_t next_up_ms;        /* no scaling up before */
        int64_t idle_since_ms;     /* quiet enough to scale down since, 0 = not */
} scaler;

#define SCALE_UP_PAUSE_MS 10000    /* between two scale-ups of one model */
#define SCALE_DOWN_IDLE_MS 60000   /* quiet this long before a replica is stopped */
#define UNLOAD_WAIT_MS 2000        /* a replica queued this long may unload an idle model */
#define MAX_NODES 64               /* nodes looked at when unloading */

struct gp_serve {
        gp_daemon *d;
        replica r[MAX_REPLICAS];
        int n;
        scaler sc[GP_CFG_MAX_MODELS];
        int nsc;
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stop;
        CURL *probe;
};

/* A free TCP port on 127.0.0.1 (the kernel's pick).  0 on failure. */
static int free_port(void) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return 0;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sa);
        int port = 0;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
                port = ntohs(sa.sin_port);
        close(fd);
        return port;
}

/* "{port}" in s replaced by port. */
static json_t *subst(const char *s, int port) {
        char out[GP_CFG_SERVE_ARG_MAX + 16];
        size_t o = 0;
        while (*s && o + 8 < sizeof(out)) {
                if (!strncmp(s, "{port}", 6)) {
                        o += (size_t)snprintf(out + o, sizeof(out) - o, "%d", port);
                        s += 6;
                } else {
                        out[o++] = *s++;
                }
        }
        out[o] = '\0';
        return json_string(out);
}

/* Submit replica r as a task through the loop's queue. */
static void submit(gp_serve *s, replica *r, int64_t now) {
        gp_daemon *d = s->d;
        const gp_cfg_serve *sv = &r->m->serve;
        r->port = sv->port ? sv->port : free_port();
        if (!r->port) {
                gp_warn("serve %s: no free port; trying again", r->name);
                r->next_ms = now + 2000;
                return;
        }
        char port[16], tok[65];
        unsigned char raw[32];
        snprintf(port, sizeof(port), "%d", r->port);
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) { /* the agent's relay asks for it */
                r->next_ms = now + 2000;
                return;
        }
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(tok + 2 * i, 3, "%02x", raw[i]);
        json_t *argv = json_array();
        for (int i = 0; i < sv->n_command; i++)
                json_array_append_new(argv, subst(sv->command[i], r->port));
        json_t *body = json_pack("{s:s,s:s,s:i,s:I,s:i,s:o,s:{s:s,s:s,s:s},s:s,s:b}", "tenant_id", SERVE_TENANT,
                                 "name", r->name, "gpu_request", sv->gpus, "memory_mb", (json_int_t)sv->memory_mb,
                                 "priority", 0, "command", argv, "env", "SERVE_PORT", port, "PORT", port,
                                 "SERVE_RELAY_TOKEN", tok, "model", r->m->name, "preemptible", 0);
        char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        cmd *c = txt ? calloc(1, sizeof(*c)) : NULL;
        char err[256];
        gp_submit_limits lim = {.default_lease_ttl_s = d->cfg.default_lease_ttl_s,
                                .max_lease_ttl_s = d->cfg.max_lease_ttl_s,
                                .default_max_retries = d->cfg.default_max_retries,
                                .default_priority = 0};
        if (!c || gp_submit_parse(txt, strlen(txt), &lim, &c->submit.task, err, sizeof(err)) < 0) {
                gp_error("serve %s: cannot make its task: %s", r->name, c ? err : "out of memory");
                free(c);
                free(txt);
                r->next_ms = now + 10000;
                return;
        }
        free(txt);
        c->kind = CMD_SUBMIT;
        gp_daemon_post(d, c);
        gp_info("serve %s: submitted (port %d)", r->name, r->port);
        /* it shows up in the task map once the loop applied it; do not submit twice meanwhile */
        r->next_ms = now + 5000;
}

/* The port a running replica was given (from its task's env), and its
 * relay token into tok ("" when none: a replica of an older server). */
static int spec_port(const char *spec, char *tok, size_t toklen) {
        json_t *j = spec ? json_loads(spec, 0, NULL) : NULL;
        const char *p = json_string_value(json_object_get(json_object_get(j, "env"), "SERVE_PORT"));
        const char *t = json_string_value(json_object_get(json_object_get(j, "env"), "SERVE_RELAY_TOKEN"));
        gp_strlcpy(tok, t ? t : "", toklen);
        int64_t v = 0;
        if (!p || gp_parse_i64(p, 1, 65535, &v) < 0)
                v = 0;
        json_decref(j);
        return (int)v;
}

/* The probe's sockets: to a loopback address (the relay's end, or a
 * replica on this machine) each is bound first and its port noted as this
 * process's, as the gateway's are (the relay takes only those). */
static curl_socket_t probe_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        if (fd >= 0 && gp_ownport_bind(fd, &a->addr) < 0) {
                close(fd);
                fd = -1;
        }
        return fd >= 0 ? fd : CURL_SOCKET_BAD;
}

static int probe_close(void *ud, curl_socket_t fd) {
        gp_ownport_forget_fd(fd);
        return close(fd);
}

/* Is the replica's readiness path answering 200? */
static bool probe_ready(gp_serve *s, replica *r) {
        char url[GP_CFG_URL_MAX + 320];
        snprintf(url, sizeof(url), "http://%s:%d%s", r->via_host, r->via_port, r->m->serve.ready);
        CURL *e = s->probe;
        curl_easy_reset(e);
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 1000L);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, probe_socket);
        curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, probe_close);
        curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L); /* no relay connection kept between probes */
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, NULL);
        FILE *devnull = fopen("/dev/null", "w");
        if (devnull)
                curl_easy_setopt(e, CURLOPT_WRITEDATA, devnull);
        long code = 0;
        bool ok = curl_easy_perform(e) == CURLE_OK && curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK &&
                  code == 200;
        if (devnull)
                fclose(devnull);
        return ok;
}

/* Cancel replica r's task (autoscale down). */
static void cancel_task(gp_serve *s, replica *r) {
        cmd *c = calloc(1, sizeof(*c));
        if (!c)
                return;
        c->kind = CMD_CANCEL;
        c->op.id = r->task_id;
        gp_daemon_post(s->d, c);
}

/* Autoscale: one more replica while requests wait beyond queue_depth per
 * ready replica; one fewer after a quiet minute. */
static void scale(gp_serve *s, scaler *sc, int64_t now) {
        const gp_cfg_serve *sv = &sc->m->serve;
        int waiting = 0, in_flight = 0, active = 0, ready = 0;
        if (gp_gw_model_load(s->d->gw, sc->m->name, &waiting, &in_flight) < 0)
                return;
        bool starting = false;
        for (int i = sc->first; i < sc->first + sc->count; i++) {
                active += s->r[i].active;
                ready += s->r[i].active && s->r[i].ready;
                starting |= s->r[i].active && !s->r[i].ready;
        }
        int per = sv->autoscale_queue_depth;
        if (waiting > per * (ready ? ready : 1) && active < sv->autoscale_max && !starting && now >= sc->next_up_ms) {
                for (int i = sc->first; i < sc->first + sc->count; i++)
                        if (!s->r[i].active && !s->r[i].stopping) {
                                s->r[i].active = true;
                                s->r[i].unloaded = false;
                                s->r[i].next_ms = now;
                                gp_info("serve %s: %d requests wait; starting replica %d", sc->m->name, waiting,
                                        s->r[i].n);
                                break;
                        }
                sc->next_up_ms = now + SCALE_UP_PAUSE_MS;
                sc->idle_since_ms = 0;
                return;
        }
        bool quiet = waiting == 0 && active > sv->autoscale_min && in_flight * 2 <= per * (active - 1);
        if (!quiet) {
                sc->idle_since_ms = 0;
                return;
        }
        if (!sc->idle_since_ms)
                sc->idle_since_ms = now;
        if (now - sc->idle_since_ms < SCALE_DOWN_IDLE_MS)
                return;
        for (int i = sc->first + sc->count; i-- > sc->first;)
                if (s->r[i].active) {
                        replica *r = &s->r[i];
                        r->active = false;
                        r->stopping = true;
                        if (r->ready) {
                                gp_gw_upstream_set(s->d->gw, r->m->name, r->url, false);
                                r->ready = false;
                        }
                        gp_info("serve %s: quiet for %d s; stopping replica %d", sc->m->name,
                                SCALE_DOWN_IDLE_MS / 1000, r->n);
                        if (r->task_id)
                                cancel_task(s, r);
                        break;
                }
        sc->idle_since_ms = 0;
}

/* Does a GPU in view v take a replica of model `model` with mem MB per
 * GPU (0 = whole) when `gone` (a running task on it, or NULL) has left?
 * d->lock held. */
static bool gpu_takes(gp_daemon *d, uint32_t gi, const gp_sched_gpu_view *v, const char *model, int64_t mem,
                      const gp_task *gone) {
        if (!v->healthy || v->drained || v->reserved)
                return false;
        int ntasks = v->ntasks;
        int64_t alloc = v->memory_allocated_mb;
        bool gone_model_leaves = false;
        if (gone) {
                ntasks--;
                alloc -= (gone->memory_mb == 0 || gone->exclusive) ? v->memory_usable_mb : gone->memory_mb;
                /* its model leaves the GPU unless another task on it has that model */
                gone_model_leaves = gone->model[0] != '\0';
                int64_t ids[256];
                int n = gp_sched_gpu_tasks(d->sched, gi, ids, 256);
                for (int i = 0; i < n && i < 256 && gone_model_leaves; i++) {
                        const gp_task *t = gp_i64map_get(&d->tasks, ids[i]);
                        if (t && t != gone && !strcmp(t->model, gone->model))
                                gone_model_leaves = false;
                }
        }
        if (mem == 0)
                return ntasks == 0;
        if (v->exclusive_held && ntasks > 0)
                return false;
        if (v->memory_usable_mb - alloc < mem)
                return false;
        int max = d->cfg.max_models_per_gpu;
        if (max <= 0)
                return true;
        const char *names[64];
        int nm = gp_sched_gpu_models(d->sched, gi, names, 64);
        int others = 0;
        for (int i = 0; i < nm && i < 64; i++) {
                if (!strcmp(names[i], model))
                        return true; /* joins its own model */
                if (!(gone_model_leaves && !strcmp(names[i], gone->model)))
                        others++;
        }
        return others < max;
}

/* Would replica w (queued) fit on some node once task `gone` has left,
 * where it does not fit now?  d->lock held. */
static bool unload_lets_start(gp_daemon *d, const replica *w, const gp_task *gone) {
        const gp_cfg_serve *sv = &w->m->serve;
        const char *node[MAX_NODES];
        int before[MAX_NODES] = {0}, after[MAX_NODES] = {0}, nn = 0;
        uint32_t n = gp_sched_gpu_count(d->sched);
        for (uint32_t gi = 0; gi < n; gi++) {
                gp_sched_gpu_view v;
                if (gp_sched_gpu_get(d->sched, gi, &v) < 0 || v.removed)
                        continue;
                int k = 0;
                while (k < nn && strcmp(node[k], v.node))
                        k++;
                if (k == nn) {
                        if (nn == MAX_NODES)
                                continue;
                        node[nn++] = v.node;
                }
                bool on = false;
                for (int i = 0; i < gone->n_gpus; i++)
                        on |= !strcmp(gone->gpus[i].node, v.node) && gone->gpus[i].index == v.index;
                bool now_ok = gpu_takes(d, gi, &v, w->m->name, sv->memory_mb, NULL);
                before[k] += now_ok;
                after[k] += on ? gpu_takes(d, gi, &v, w->m->name, sv->memory_mb, gone) : now_ok;
        }
        for (int k = 0; k < nn; k++)
                if (after[k] >= sv->gpus && before[k] < sv->gpus)
                        return true;
        return false;
}

/* A replica that has waited in the queue UNLOAD_WAIT_MS: stop the least
 * recently used idle model's replica whose leaving lets it start. */
static void unload_lru(gp_serve *s, int64_t now) {
        gp_daemon *d = s->d;
        replica *w = NULL;
        for (int i = 0; i < s->n; i++) {
                replica *r = &s->r[i];
                if (r->unloaded && r->stopping)
                        return; /* the last unload is still under way */
                if (r->active && !r->stopping && r->queued_since_ms && now - r->queued_since_ms >= UNLOAD_WAIT_MS &&
                    (!w || r->queued_since_ms < w->queued_since_ms))
                        w = r;
        }
        if (!w)
                return;
        replica *victim = NULL;
        int64_t victim_used = 0;
        for (int i = 0; i < s->n; i++) {
                replica *v = &s->r[i];
                if (!v->active || v->stopping || !v->running || !v->task_id || v->m == w->m)
                        continue;
                int waiting = 0, in_flight = 0;
                int64_t used = 0;
                if (gp_gw_model_load(d->gw, v->m->name, &waiting, &in_flight) < 0 || waiting || in_flight ||
                    gp_gw_model_last_used(d->gw, v->m->name, &used) < 0)
                        continue; /* in use: never unloaded */
                if (victim && used >= victim_used)
                        continue;
                pthread_mutex_lock(&d->lock);
                const gp_task *t = gp_i64map_get(&d->tasks, v->task_id);
                bool lets = t && t->state == GP_TASK_RUNNING && unload_lets_start(d, w, t);
                pthread_mutex_unlock(&d->lock);
                if (lets) {
                        victim = v;
                        victim_used = used;
                }
        }
        if (!victim)
                return;
        victim->active = false;
        victim->stopping = true;
        victim->unloaded = true;
        victim->unloaded_ms = now;
        if (victim->ready) {
                gp_gw_upstream_set(d->gw, victim->m->name, victim->url, false);
                victim->ready = false;
        }
        gp_gw_model_unloaded(d->gw, victim->m->name);
        if (victim_used)
                gp_info("serve %s: unloaded, the least recently used idle model (last request %" PRId64
                        " s ago), so that %s can start",
                        victim->name, (now - victim_used) / 1000, w->name);
        else
                gp_info("serve %s: unloaded, the least recently used idle model (no request yet), so that %s can start",
                        victim->name, w->name);
        cancel_task(s, victim);
}

/* Unloaded replicas whose model got a request since the unload, while
 * none of its replicas is ready or its requests wait for admission: wanted
 * again (a model that still answers through other replicas and keeps up
 * does not load its unloaded ones back). */
static void reload(gp_serve *s, int64_t now) {
        for (int i = 0; i < s->n; i++) {
                replica *r = &s->r[i];
                int64_t used = 0;
                int waiting = 0, in_flight = 0;
                if (!r->unloaded || gp_gw_model_last_used(s->d->gw, r->m->name, &used) < 0 || used <= r->unloaded_ms ||
                    gp_gw_model_load(s->d->gw, r->m->name, &waiting, &in_flight) < 0)
                        continue;
                bool ready = false;
                for (int k = 0; k < s->n; k++)
                        ready |= s->r[k].m == r->m && s->r[k].ready;
                if (ready && waiting == 0)
                        continue;
                r->unloaded = false;
                r->active = true;
                r->next_ms = now;
                gp_info("serve %s: its model was requested; loading it again", r->name);
        }
}

static void tick(gp_serve *s, int64_t now) {
        gp_daemon *d = s->d;
        reload(s, now);
        for (int i = 0; i < s->nsc; i++)
                scale(s, &s->sc[i], now);
        for (int i = 0; i < s->n; i++) {
                replica *r = &s->r[i];
                if (!r->active && !r->stopping)
                        continue;
                /* its task, by name: also finds servers that kept running across a restart */
                bool found = false, running = false;
                int64_t id = 0;
                int port = 0;
                char addr[GP_PROTO_ADDR_MAX] = "", run[64] = "", tok[72] = "";
                pthread_mutex_lock(&d->lock);
                size_t pos = 0;
                gp_task *t;
                while ((t = gp_i64map_next(&d->tasks, &pos, NULL)))
                        if (!strcmp(t->tenant, SERVE_TENANT) && !strcmp(t->name, r->name)) {
                                found = true;
                                running = t->state == GP_TASK_RUNNING;
                                id = t->id;
                                port = spec_port(t->spec, tok, sizeof(tok));
                                /* on an agent node the gateway goes to that node (over TLS: relay.h) */
                                if (running && gp_nodes_remote(t)) {
                                        gp_nodes_host(d, t->gpus[0].node, r->host, sizeof(r->host));
                                        gp_nodes_address(d, t->gpus[0].node, addr, sizeof(addr));
                                        snprintf(run, sizeof(run), "%" PRId64 ".%" PRId64 ".0", t->id,
                                                 gp_task_run_epoch(t));
                                } else
                                        gp_strlcpy(r->host, "127.0.0.1", sizeof(r->host));
                                if (running && r->task_id != id)
                                        r->started_ms = t->started_ms;
                                break;
                        }
                pthread_mutex_unlock(&d->lock);
                r->running = found && running;
                if (port)
                        r->port = port;
                /* the gateway's connections and the readiness probe's one */
                gp_relay_keep(&r->relay, r->running ? addr : NULL, run, tok, d->cfg.gw.max_upstream_connections + 1,
                              r->host[0] ? r->host : "127.0.0.1", r->port, &r->via_host, &r->via_port);
                if (!found || running)
                        r->queued_since_ms = 0;
                else if (!r->queued_since_ms)
                        r->queued_since_ms = now;
                if (!found || !running) {
                        if (r->ready) {
                                gp_gw_upstream_set(d->gw, r->m->name, r->url, false);
                                r->ready = false;
                        }
                }
                if (r->stopping) {
                        /* turned off: wait for its task to end; cancel again if a submit raced */
                        if (!found) {
                                r->stopping = false;
                                r->task_id = 0;
                        } else if (id != r->task_id) {
                                r->task_id = id;
                                cancel_task(s, r);
                        }
                        continue;
                }
                if (!found) {
                        if (r->task_id) {
                                int64_t ran = r->started_ms ? gp_now_ms() - r->started_ms : 0;
                                r->quick_fails = ran < 30000 ? r->quick_fails + 1 : 0;
                                int64_t backoff = r->quick_fails ? 1000LL << (r->quick_fails < 6 ? r->quick_fails : 6) : 0;
                                gp_warn("serve %s: its task %" PRId64 " ended; starting it again in %" PRId64 " ms", r->name,
                                        r->task_id, backoff);
                                r->task_id = 0;
                                r->started_ms = 0;
                                r->next_ms = now + backoff;
                        }
                        if (now >= r->next_ms)
                                submit(s, r, now);
                        continue;
                }
                r->task_id = id;
                if (!running || r->ready || now < r->poll_ms || !r->via_port)
                        continue;
                if (probe_ready(s, r)) {
                        snprintf(r->url, sizeof(r->url), "http://%s:%d", r->via_host, r->via_port);
                        int rc = gp_gw_upstream_set(d->gw, r->m->name, r->url, true);
                        if (rc < 0) {
                                gp_error("serve %s: cannot add %s to the gateway: %s", r->name, r->url,
                                         strerror(-rc));
                        } else {
                                r->ready = true;
                                gp_info("serve %s: ready at %s (task %" PRId64 ")", r->name, r->url, id);
                        }
                }
                r->poll_ms = now + 500;
        }
        unload_lru(s, now);
}

static void *serve_thread(void *arg) {
        gp_serve *s = arg;
        pthread_mutex_lock(&s->mu);
        while (!s->stop) {
                pthread_mutex_unlock(&s->mu);
                tick(s, gp_now_ms());
                pthread_mutex_lock(&s->mu);
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += TICK_MS * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                if (!s->stop)
                        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
        pthread_mutex_unlock(&s->mu);
        return NULL;
}

int gp_serve_start(gp_daemon *d, gp_serve **ret) {
        *ret = NULL;
        int n = 0;
        for (int i = 0; i < d->cfg.gw.n_models; i++)
                if (d->cfg.gw.models[i].serve.enabled)
                        n++;
        if (n == 0 || !d->gw)
                return 0;
        gp_serve *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->d = d;
        for (int i = 0; i < d->cfg.gw.n_models; i++) {
                const gp_cfg_model *m = &d->cfg.gw.models[i];
                if (!m->serve.enabled)
                        continue;
                int reps = m->serve.autoscale ? m->serve.autoscale_max : m->serve.replicas;
                int on = m->serve.autoscale ? m->serve.autoscale_min : m->serve.replicas;
                int first = s->n;
                for (int k = 0; k < reps && s->n < MAX_REPLICAS; k++) {
                        replica *r = &s->r[s->n++];
                        r->m = m;
                        r->n = k;
                        r->active = k < on;
                        snprintf(r->name, sizeof(r->name), "serve:%.100s:%d", m->name, k);
                }
                if (m->serve.autoscale && s->nsc < GP_CFG_MAX_MODELS)
                        s->sc[s->nsc++] = (scaler){.m = m, .first = first, .count = s->n - first};
        }
        s->probe = curl_easy_init();
        if (!s->probe) {
                free(s);
                return -ENOMEM;
        }
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        if (pthread_create(&s->thread, NULL, serve_thread, s) != 0) {
                curl_easy_cleanup(s->probe);
                free(s);
                return -EAGAIN;
        }
        *ret = s;
        return 0;
}

void gp_serve_stop(gp_serve *s) {
        if (!s)
                return;
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        for (int i = 0; i < s->n; i++)
                gp_relay_close(s->r[i].relay);
        curl_easy_cleanup(s->probe);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
}
