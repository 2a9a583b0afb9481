/* submit.c - strict parser of task submissions (see submit.h). */
#include "server/submit.h"

#include "base/labels.h"
#include "cluster/proto.h"
#include "core/sched.h"
#include "base/notice.h"

#include "base/text.h"
#include "base/util.h"
#include "exec/cgroup.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* A string field into a fixed buffer: must be text (base/text.h) and fit. */
static int get_str(json_t *v, const char *key, char *dst, size_t size, char *err, size_t errlen) {
        if (!json_is_string(v))
                return fail(err, errlen, "%s: must be a string", key);
        size_t n = json_string_length(v);
        const char *s = json_string_value(v), *why;
        if (n >= size)
                return fail(err, errlen, "%s: longer than %zu bytes", key, size - 1);
        if (gp_text_check(s, n, size - 1, &why) < 0)
                return fail(err, errlen, "%s: %s", key, why);
        memcpy(dst, s, n + 1);
        return 0;
}

static int get_int(json_t *v, const char *key, int64_t min, int64_t max, int64_t *ret, char *err,
                   size_t errlen) {
        if (!json_is_integer(v))
                return fail(err, errlen, "%s: must be an integer", key);
        json_int_t x = json_integer_value(v);
        if (x < min || x > max)
                return fail(err, errlen, "%s: must be %" PRId64 "..%" PRId64 ", got %" JSON_INTEGER_FORMAT, key,
                            min, max, x);
        *ret = x;
        return 0;
}

static int get_bool(json_t *v, const char *key, bool *ret, char *err, size_t errlen) {
        if (!json_is_boolean(v))
                return fail(err, errlen, "%s: must be true or false", key);
        *ret = json_is_true(v);
        return 0;
}

int gp_submit_seed_tier(int p) {
        return ((100 - p) * 9 + 50) / 100;
}

static int parse_priority(json_t *v, bool seed, int *ret, char *err, size_t errlen) {
        static const char msg[] = "priority: must be 0..9 or a name (critical, high, normal, low, background)";
        static const char seed_msg[] = "priority: on /api/tasks must be 0..100 (higher is more urgent; "
                                       "/api/v1/tasks takes tiers 0..9) or a name (critical, high, normal, low, "
                                       "background)";
        if (seed && json_is_integer(v)) {
                json_int_t x = json_integer_value(v);
                if (x < 0 || x > 100)
                        return fail(err, errlen, "%s, got %" JSON_INTEGER_FORMAT, seed_msg, x);
                *ret = gp_submit_seed_tier((int)x);
                return 0;
        }
        if (json_is_integer(v)) {
                json_int_t x = json_integer_value(v);
                if (x < 0 || x > 9)
                        return fail(err, errlen, "%s, got %" JSON_INTEGER_FORMAT, msg, x);
                *ret = (int)x;
                return 0;
        }
        if (json_is_string(v) && json_string_length(v) < 16 && gp_priority_parse(json_string_value(v), ret) == 0)
                return 0;
        return fail(err, errlen, "%s", seed ? seed_msg : msg);
}

/* command, env, workdir, on_node_lost, compute_pct -> the spec JSON
 * stored with the task (script: command[4] is a stored script, allowed its
 * own size bound; "on_node_lost" only when "requeue": the default,
 * "fence", is its absence, so specs stored before it mean the same;
 * "compute_pct" only when asked, 0 = not). */
static int build_spec(json_t *cmd, json_t *env, json_t *workdir, bool script, json_t *onl, const char *notice,
                      int compute_pct, const gp_task *t, char **ret, char *err, size_t errlen) {
        if (!json_is_array(cmd))
                return fail(err, errlen, "command: must be an array of strings, e.g. [\"python3\", \"train.py\"]");
        size_t n = json_array_size(cmd);
        if (n == 0)
                return fail(err, errlen, "command: must not be empty");
        if (n > GP_SUBMIT_MAX_ARGS)
                return fail(err, errlen, "command: at most %d arguments", GP_SUBMIT_MAX_ARGS);
        size_t i;
        json_t *a;
        json_array_foreach(cmd, i, a) {
                if (!json_is_string(a))
                        return fail(err, errlen, "command[%zu]: must be a string", i);
                size_t l = json_string_length(a);
                if ((l > GP_SUBMIT_MAX_ARG_BYTES && !(script && i == 4)) || memchr(json_string_value(a), '\0', l))
                        return fail(err, errlen, "command[%zu]: longer than %d bytes or contains NUL", i,
                                    GP_SUBMIT_MAX_ARG_BYTES);
                if (i == 0 && l == 0)
                        return fail(err, errlen, "command[0]: must not be empty");
        }
        if (env) {
                if (!json_is_object(env))
                        return fail(err, errlen, "env: must be an object of strings");
                if (json_object_size(env) > GP_SUBMIT_MAX_ENV)
                        return fail(err, errlen, "env: at most %d variables", GP_SUBMIT_MAX_ENV);
                const char *k;
                json_t *v;
                json_object_foreach(env, k, v) {
                        size_t kl = strlen(k);
                        if (kl == 0 || kl > 256 || strchr(k, '=') || (k[0] >= '0' && k[0] <= '9'))
                                return fail(err, errlen, "env: bad variable name '%.64s'", k);
                        for (const char *p = k; *p; p++)
                                if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                                      (*p >= '0' && *p <= '9') || *p == '_'))
                                        return fail(err, errlen, "env: bad variable name '%.64s'", k);
                        if (!json_is_string(v) || json_string_length(v) > GP_SUBMIT_MAX_ARG_BYTES ||
                            memchr(json_string_value(v), '\0', json_string_length(v)))
                                return fail(err, errlen, "env.%s: must be a string of at most %d bytes", k,
                                            GP_SUBMIT_MAX_ARG_BYTES);
                        if (!strcmp(k, "CUDA_VISIBLE_DEVICES") || !strncmp(k, "GPUPOOL_", 8))
                                return fail(err, errlen, "env.%s: set by gpupool, not by the caller", k);
                }
        }
        if (workdir) {
                if (!json_is_string(workdir) || json_string_length(workdir) == 0 ||
                    json_string_length(workdir) > 4096 || json_string_value(workdir)[0] != '/' ||
                    memchr(json_string_value(workdir), '\0', json_string_length(workdir)))
                        return fail(err, errlen, "workdir: must be an absolute path");
        }
        bool requeue = false;
        if (onl && !json_is_null(onl)) {
                const char *o = json_string_value(onl);
                if (!o || (strcmp(o, "fence") && strcmp(o, "requeue")))
                        return fail(err, errlen, "on_node_lost: must be \"fence\" (the default: a run on a node "
                                                 "that lost contact is stopped before the task starts elsewhere) "
                                                 "or \"requeue\" (at once; the task may run twice at once)");
                requeue = !strcmp(o, "requeue");
        }
        json_t *spec = json_object();
        if (!spec)
                return -ENOMEM;
        json_object_set(spec, "command", cmd);
        if (env)
                json_object_set(spec, "env", env);
        if (workdir)
                json_object_set(spec, "workdir", workdir);
        if (requeue)
                json_object_set_new(spec, "on_node_lost", json_string("requeue"));
        if (notice) /* "[B:]SIG@SECS", canonical (base/notice.h) */
                json_object_set_new(spec, "signal", json_string(notice));
        /* its cgroup's limits (exec/cgroup.h), kept in the spec: no column */
        gp_cgroup_limits lim = {.cpus = t->cpus, .host_memory_mb = t->host_memory_mb};
        if (gp_cgroup_limits_set(spec, &lim) < 0) {
                json_decref(spec);
                return -ENOMEM;
        }
        if (compute_pct > 0) /* an MPS client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (server/mps.h) */
                json_object_set_new(spec, "compute_pct", json_integer(compute_pct));
        char *s = json_dumps(spec, JSON_COMPACT);
        json_decref(spec);
        if (!s)
                return -ENOMEM;
        if (strlen(s) > GP_SUBMIT_MAX_SPEC_BYTES) {
                free(s);
                return fail(err, errlen, "command%s and env together exceed %d bytes", script ? ", script" : "",
                            GP_SUBMIT_MAX_SPEC_BYTES);
        }
        *ret = s;
        return 0;
}

/* The runner of a task submitted with "script" (as sbatch stores the
 * script at submit): sh writes $1, the script, to a fresh private
 * directory, runs it with its own #! interpreter and the arguments after
 * it, and removes the directory when it ends (also on SIGTERM/SIGINT; a
 * SIGKILL leaves it in $TMPDIR).  Its exit status is the script's. */
static const char script_runner[] =
        "d=$(mktemp -d \"${TMPDIR:-/tmp}/gpupool-script.XXXXXX\") || exit 127\n"
        "trap 'rm -rf \"$d\"' EXIT\n"
        "trap 'exit 143' TERM\n"
        "trap 'exit 130' INT\n"
        "printf '%s' \"$1\" >\"$d/script\" && chmod 700 \"$d/script\" || exit 127\n"
        "shift\n"
        "\"$d/script\" \"$@\"\n";

/* The same for a script whose notice goes to its batch shell alone
 * (--signal B:SIG@SECS): the supervisor signals the runner, which passes
 * SIG on to the script (kill -s SIG).  The script runs in the background so
 * that the runner's wait can be interrupted; a SIGTERM or SIGINT (sent to
 * the whole group) only wakes the runner, which waits on until the script
 * ends, as the plain runner's deferred traps do. */
static const char script_runner_b[] =
        "d=$(mktemp -d \"${TMPDIR:-/tmp}/gpupool-script.XXXXXX\") || exit 127\n"
        "trap 'rm -rf \"$d\"' EXIT\n"
        "trap '[ -n \"$c\" ] && kill -s %s \"$c\" 2>/dev/null' %s\n"
        "trap : TERM INT\n"
        "printf '%%s' \"$1\" >\"$d/script\" && chmod 700 \"$d/script\" || exit 127\n"
        "shift\n"
        "\"$d/script\" \"$@\" &\n"
        "c=$!\n"
        "while :; do\n"
        "        wait \"$c\"; s=$?\n"
        "        [ $s -le 128 ] && exit $s\n"
        "        kill -0 \"$c\" 2>/dev/null && continue\n"
        "        wait \"$c\"; t=$?\n"
        "        [ $t -eq 127 ] && exit $s\n"
        "        exit $t\n"
        "done\n";

/* "script" with "command" as its arguments (absent = none) -> the command
 * that runs it (a new array in *ret).  The script: text starting with "#!",
 * at most GP_SUBMIT_MAX_SCRIPT_BYTES, no NUL.  nt: its notice (batch_only:
 * the runner that passes it on). */
static int script_command(json_t *script, json_t *args, const gp_notice *nt, json_t **ret, char *err,
                          size_t errlen) {
        if (!json_is_string(script))
                return fail(err, errlen, "script: must be a string (the script's text)");
        size_t n = json_string_length(script);
        const char *s = json_string_value(script);
        if (n > GP_SUBMIT_MAX_SCRIPT_BYTES)
                return fail(err, errlen, "script: longer than %d bytes", GP_SUBMIT_MAX_SCRIPT_BYTES);
        if (n < 2 || s[0] != '#' || s[1] != '!' || memchr(s, '\0', n))
                return fail(err, errlen, "script: must start with #! and an interpreter (e.g. #!/bin/bash), "
                            "without NUL bytes");
        if (args && !json_is_array(args))
                return fail(err, errlen, "command: with script, the script's arguments: an array of strings");
        char rb[sizeof(script_runner_b) + 32];
        if (nt->batch_only) /* SIG by its name (signal names are [A-Z0-9]) */
                snprintf(rb, sizeof(rb), script_runner_b, sigabbrev_np(nt->signo), sigabbrev_np(nt->signo));
        json_t *cmd = json_pack("[s, s, s, s, O]", "/bin/sh", "-c", nt->batch_only ? rb : script_runner,
                                GP_SUBMIT_SCRIPT_ARGV0, script);
        if (!cmd)
                return -ENOMEM;
        size_t i;
        json_t *a;
        json_array_foreach(args, i, a) {
                if (!json_is_string(a) || json_string_length(a) > GP_SUBMIT_MAX_ARG_BYTES ||
                    memchr(json_string_value(a), '\0', json_string_length(a))) {
                        json_decref(cmd);
                        return fail(err, errlen, "command[%zu]: a string of at most %d bytes without NUL", i,
                                    GP_SUBMIT_MAX_ARG_BYTES);
                }
                if (json_array_append(cmd, a) < 0) {
                        json_decref(cmd);
                        return -ENOMEM;
                }
        }
        *ret = cmd;
        return 0;
}

/* elastic: {min_gpus, max_gpus}.  min_gpus becomes gpu_request (a
 * gpu_request given too must equal it); the task holds whole GPUs. */
static int parse_elastic(json_t *v, json_t *gpu_request, gp_task *t, char *err, size_t errlen) {
        if (!json_is_object(v))
                return fail(err, errlen, "elastic: must be an object {\"min_gpus\": N, \"max_gpus\": M}");
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) {
                if (strcmp(key, "min_gpus") != 0 && strcmp(key, "max_gpus") != 0)
                        return fail(err, errlen, "elastic: unknown field '%.64s'", key);
        }
        int64_t min = t->gpu_request, max;
        int rc;
        if ((x = json_object_get(v, "min_gpus")) &&
            (rc = get_int(x, "elastic.min_gpus", 1, GP_NODE_MAX_GPUS - 1, &min, err, errlen)) < 0)
                return rc;
        if (!(x = json_object_get(v, "max_gpus")))
                return fail(err, errlen, "elastic.max_gpus: missing");
        if ((rc = get_int(x, "elastic.max_gpus", 2, GP_NODE_MAX_GPUS, &max, err, errlen)) < 0)
                return rc;
        if (max <= min)
                return fail(err, errlen, "elastic: max_gpus (%" PRId64 ") must be greater than min_gpus (%" PRId64 ")",
                            max, min);
        if (gpu_request && json_object_get(v, "min_gpus") && min != t->gpu_request)
                return fail(err, errlen, "elastic.min_gpus (%" PRId64 ") and gpu_request (%d) differ; give one",
                            min, t->gpu_request);
        if (t->memory_mb > 0)
                return fail(err, errlen, "elastic: elastic tasks hold whole GPUs; leave out memory_mb");
        t->gpu_request = (int)min;
        t->elastic_max_gpus = (int)max;
        t->memory_mb = 0;
        t->exclusive = true;
        return 0;
}

/* elastic_nodes: {min_nodes, max_nodes}: whole nodes, min..max of them
 * (sched.h "Elastic in whole nodes"); gpu_request becomes min_nodes (a
 * lower bound of its GPUs), and the spec keeps it (gp_submit_spec_nodes). */
static int parse_elastic_nodes(json_t *v, json_t *root, gp_task *t, char *err, size_t errlen) {
        if (!json_is_object(v))
                return fail(err, errlen, "elastic_nodes: must be an object {\"min_nodes\": N, \"max_nodes\": M}");
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) {
                if (strcmp(key, "min_nodes") != 0 && strcmp(key, "max_nodes") != 0)
                        return fail(err, errlen, "elastic_nodes: unknown field '%.64s'", key);
        }
        int64_t min = 1, max;
        int rc;
        if ((x = json_object_get(v, "min_nodes")) &&
            (rc = get_int(x, "elastic_nodes.min_nodes", 1, GP_SCHED_MAX_ENODES, &min, err, errlen)) < 0)
                return rc;
        if (!(x = json_object_get(v, "max_nodes")))
                return fail(err, errlen, "elastic_nodes.max_nodes: missing");
        if ((rc = get_int(x, "elastic_nodes.max_nodes", 1, GP_SCHED_MAX_ENODES, &max, err, errlen)) < 0)
                return rc;
        if (max < min)
                return fail(err, errlen, "elastic_nodes: max_nodes (%" PRId64 ") is below min_nodes (%" PRId64 ")",
                            max, min);
        if (json_object_get(root, "gpu_request") || json_object_get(root, "memory_mb") ||
            (json_object_get(root, "elastic") && !json_is_null(json_object_get(root, "elastic"))))
                return fail(err, errlen, "elastic_nodes: the task holds whole nodes; leave out gpu_request, memory_mb "
                                         "and elastic");
        t->gpu_request = (int)min;
        t->elastic_min_nodes = (int)min;
        t->elastic_max_nodes = (int)max;
        t->memory_mb = 0;
        t->exclusive = true;
        return 0;
}

int gp_submit_spec_set(gp_task *t, const char *key, json_t *value) {
        json_t *spec = json_loads(t->spec ? t->spec : "", 0, NULL);
        char *s = spec && value && json_object_set_new(spec, key, value) == 0 ? json_dumps(spec, JSON_COMPACT) : NULL;
        if (!spec)
                json_decref(value);
        json_decref(spec);
        if (!s)
                return -ENOMEM;
        free(t->spec);
        t->spec = s;
        return 0;
}

/* Keep "elastic_nodes" in t's spec (its only stored copy).  0, -ENOMEM. */
static int spec_add_nodes(gp_task *t) {
        return gp_submit_spec_set(t, "elastic_nodes", json_pack("{s:i, s:i}", "min_nodes", t->elastic_min_nodes,
                                                                "max_nodes", t->elastic_max_nodes));
}

void gp_submit_spec_nodes(gp_task *t) {
        t->elastic_min_nodes = t->elastic_max_nodes = 0;
        if (!t->spec || !strstr(t->spec, "\"elastic_nodes\""))
                return;
        json_t *spec = json_loads(t->spec, 0, NULL);
        json_t *en = json_object_get(spec, "elastic_nodes");
        json_int_t min = json_integer_value(json_object_get(en, "min_nodes")),
                   max = json_integer_value(json_object_get(en, "max_nodes"));
        if (min >= 1 && min <= max && max <= GP_SCHED_MAX_ENODES) {
                t->elastic_min_nodes = (int)min;
                t->elastic_max_nodes = (int)max;
        }
        json_decref(spec);
}

/* "node_selector": {"k": "v", ...}: the labels its nodes must have, kept
 * in their canonical text (base/labels.h). */
static int parse_selector(json_t *v, gp_task *t, char *err, size_t errlen) {
        char canon[GP_LABELS_MAX], why[200];
        if (!json_is_object(v))
                return fail(err, errlen, "node_selector: expected an object of labels, e.g. {\"zone\": \"a\"}");
        if (json_object_size(v) > 16)
                return fail(err, errlen, "node_selector: at most 16 labels");
        if (gp_proto_labels_from_json(v, canon, why, sizeof(why)) < 0)
                return fail(err, errlen, "node_selector: %s", why);
        if (strlen(canon) >= sizeof(t->node_selector))
                return fail(err, errlen, "node_selector: longer than %zu bytes in all", sizeof(t->node_selector) - 1);
        memcpy(t->node_selector, canon, strlen(canon) + 1);
        return 0;
}

int gp_submit_parse(const char *body, size_t len, const gp_submit_limits *lim, gp_task *ret, char *err,
                    size_t errlen) {
        return gp_submit_parse_array(body, len, lim, ret, NULL, err, errlen);
}

/* "array": a spec string into *arr. */
static int parse_array(json_t *v, const gp_submit_limits *lim, gp_array_spec *arr, char *err, size_t errlen) {
        if (!json_is_string(v))
                return fail(err, errlen, "array: must be a string such as \"0-99\", \"1,3,5-9\" or \"0-15:4%%2\"");
        size_t max = lim->max_array_size > 0 ? (size_t)lim->max_array_size : GP_ARRAY_MAX_ELEMS;
        int rc = gp_array_spec_parse(json_string_value(v), json_string_length(v), max, arr, err, errlen);
        return rc == -E2BIG ? -EINVAL : rc;
}

int gp_submit_parse_array(const char *body, size_t len, const gp_submit_limits *lim, gp_task *ret,
                          gp_array_spec *ret_array, char *err, size_t errlen) {
        static const char *const known[] = {
                "tenant_id", "name", "gpu_request", "memory_mb", "exclusive", "priority", "command",
                "env", "workdir", "model", "gpu_model", "preemptible", "timeout_s", "queue_timeout_s",
                "lease_ttl_s", "max_retries", "elastic", "array", "node_selector", "script", "on_node_lost",
                "signal", "elastic_nodes", "compute_pct", "cpus", "host_memory_mb", NULL,
        };
        gp_array_spec arr = {0};
        if (errlen)
                err[0] = '\0';
        json_error_t jerr;
        json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return fail(err, errlen, "body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                            jerr.column);
        gp_task t;
        memset(&t, 0, sizeof(t));
        int rc = 0;
        int64_t x;
        if (!json_is_object(root)) {
                rc = fail(err, errlen, "body must be a JSON object");
                goto out;
        }
        const char *key;
        json_t *v;
        json_object_foreach(root, key, v) {
                bool ok = false;
                for (int i = 0; known[i]; i++)
                        if (!strcmp(key, known[i]) && (ret_array || strcmp(key, "array") != 0))
                                ok = true;
                if (!ok) {
                        rc = fail(err, errlen, "unknown field '%.64s'", key);
                        goto out;
                }
        }
        gp_strlcpy(t.tenant, lim->tenant ? lim->tenant : "default", sizeof(t.tenant));
        t.priority = lim->default_priority;
        t.gpu_request = 1;
        t.lease_ttl_s = lim->default_lease_ttl_s;
        t.max_retries = lim->default_max_retries;
        t.queue_timeout_s = lim->default_queue_timeout_s; /* an explicit 0 below means none */

        if ((v = json_object_get(root, "tenant_id"))) {
                if ((rc = get_str(v, "tenant_id", t.tenant, sizeof(t.tenant), err, errlen)) < 0)
                        goto out;
                if (!gp_id_ok(t.tenant, strlen(t.tenant))) {
                        rc = fail(err, errlen, "tenant_id: only letters, digits, '-', '_' and '.'");
                        goto out;
                }
                if (lim->tenant && strcmp(t.tenant, lim->tenant) != 0) {
                        snprintf(err, errlen, "tenant_id: this key belongs to tenant %s", lim->tenant);
                        rc = -EPERM;
                        goto out;
                }
        }
        if ((v = json_object_get(root, "name")) && (rc = get_str(v, "name", t.name, sizeof(t.name), err, errlen)) < 0)
                goto out;
        if ((v = json_object_get(root, "model")) &&
            (rc = get_str(v, "model", t.model, sizeof(t.model), err, errlen)) < 0)
                goto out;
        if ((v = json_object_get(root, "node_selector")) && (rc = parse_selector(v, &t, err, errlen)) < 0)
                goto out;
        if ((v = json_object_get(root, "gpu_model")) &&
            (rc = get_str(v, "gpu_model", t.gpu_model, sizeof(t.gpu_model), err, errlen)) < 0)
                goto out;
        if ((v = json_object_get(root, "gpu_request"))) {
                if ((rc = get_int(v, "gpu_request", 1, GP_MAX_GPUS, &x, err, errlen)) < 0)
                        goto out;
                t.gpu_request = (int)x;
        }
        if ((v = json_object_get(root, "memory_mb"))) {
                if ((rc = get_int(v, "memory_mb", 0, 16 * 1024 * 1024, &x, err, errlen)) < 0)
                        goto out;
                t.memory_mb = x;
        }
        if ((v = json_object_get(root, "exclusive")) && (rc = get_bool(v, "exclusive", &t.exclusive, err, errlen)) < 0)
                goto out;
        if ((v = json_object_get(root, "cpus")) && !json_is_null(v)) { /* its cgroup's CPU quota */
                if ((rc = get_int(v, "cpus", 1, GP_CGROUP_MAX_CPUS, &x, err, errlen)) < 0)
                        goto out;
                t.cpus = (int)x;
        }
        if ((v = json_object_get(root, "host_memory_mb")) && !json_is_null(v)) { /* its cgroup's RAM */
                if ((rc = get_int(v, "host_memory_mb", 1, GP_CGROUP_MAX_MEMORY_MB, &x, err, errlen)) < 0)
                        goto out;
                t.host_memory_mb = x;
        }
        if ((v = json_object_get(root, "preemptible")) &&
            (rc = get_bool(v, "preemptible", &t.preemptible, err, errlen)) < 0)
                goto out;
        if ((v = json_object_get(root, "priority")) && (rc = parse_priority(v, lim->seed_priority, &t.priority, err, errlen)) < 0)
                goto out;
        if (t.priority < lim->max_priority) {
                if (!lim->clamp_priority) {
                        snprintf(err, errlen, "priority: P%d is more urgent than this key allows (P%d at most)",
                                 t.priority, lim->max_priority);
                        rc = -EPERM;
                        goto out;
                }
                t.priority = lim->max_priority;
        }
        if ((v = json_object_get(root, "timeout_s"))) {
                if ((rc = get_int(v, "timeout_s", 0, 366LL * 86400, &x, err, errlen)) < 0)
                        goto out;
                t.timeout_s = x;
        }
        if ((v = json_object_get(root, "queue_timeout_s"))) {
                if ((rc = get_int(v, "queue_timeout_s", 0, 366LL * 86400, &x, err, errlen)) < 0)
                        goto out;
                t.queue_timeout_s = x;
        }
        if ((v = json_object_get(root, "max_retries"))) {
                if ((rc = get_int(v, "max_retries", 0, 100, &x, err, errlen)) < 0)
                        goto out;
                t.max_retries = (int)x;
        }
        if ((v = json_object_get(root, "elastic")) && !json_is_null(v) &&
            (rc = parse_elastic(v, json_object_get(root, "gpu_request"), &t, err, errlen)) < 0)
                goto out;
        if ((v = json_object_get(root, "elastic_nodes")) && !json_is_null(v) &&
            (rc = parse_elastic_nodes(v, root, &t, err, errlen)) < 0)
                goto out;
        json_t *cmd = json_object_get(root, "command");
        json_t *env = json_object_get(root, "env");
        json_t *wd = json_object_get(root, "workdir");
        json_t *onl = json_object_get(root, "on_node_lost");
        json_t *script = json_object_get(root, "script"), *runner = NULL;
        json_t *sig = json_object_get(root, "signal");
        char notice[GP_NOTICE_TEXT_MAX], *nt = NULL;
        gp_notice n = {0};
        int cpct = 0; /* compute_pct: a share of the GPU's compute, for a share of its memory */
        if ((v = json_object_get(root, "compute_pct")) && !json_is_null(v)) {
                if ((rc = get_int(v, "compute_pct", 1, 100, &x, err, errlen)) < 0)
                        goto out;
                bool batch = (cmd && !json_is_null(cmd)) || (script && !json_is_null(script));
                if (t.memory_mb <= 0 || !batch) {
                        rc = fail(err, errlen, "compute_pct: only for batch tasks that share a GPU (memory_mb)");
                        goto out;
                }
                cpct = (int)x;
        }
        if (sig && !json_is_null(sig)) {
                if ((rc = gp_notice_from_json(sig, &n, err, errlen)) < 0 ||
                    (rc = gp_notice_format(&n, notice, sizeof(notice))) < 0)
                        goto out;
                nt = notice;
        }
        if (script && !json_is_null(script)) {
                /* a script: "command" holds its arguments */
                if ((rc = script_command(script, json_is_null(cmd) ? NULL : cmd, &n, &runner, err, errlen)) < 0)
                        goto out;
                rc = build_spec(runner, env, wd, true, onl, nt, cpct, &t, &t.spec, err, errlen);
                json_decref(runner);
                if (rc < 0)
                        goto out;
                cmd = script;
        }
        if (cmd && !json_is_null(cmd)) {
                if (!t.spec && (rc = build_spec(cmd, env, wd, false, onl, nt, cpct, &t, &t.spec, err, errlen)) < 0)
                        goto out;
                if (json_object_get(root, "lease_ttl_s")) {
                        rc = fail(err, errlen, "lease_ttl_s: only for leases (tasks without command)");
                        goto out;
                }
                t.lease_ttl_s = 0;
        } else {
                if (env || wd || (onl && !json_is_null(onl)) || nt || t.cpus || t.host_memory_mb) {
                        rc = fail(err, errlen, "%s: only for batch tasks (with command)%s",
                                  env ? "env" : wd ? "workdir" : nt ? "signal" : t.cpus ? "cpus" :
                                  t.host_memory_mb ? "host_memory_mb" : "on_node_lost",
                                  nt ? ": a lease has no process to signal" : "");
                        goto out;
                }
                t.is_lease = true;
                if (t.elastic_max_nodes) {
                        rc = fail(err, errlen, "elastic_nodes: only for batch tasks (with command): each node runs it");
                        goto out;
                }
                if ((v = json_object_get(root, "lease_ttl_s"))) {
                        if ((rc = get_int(v, "lease_ttl_s", 1, lim->max_lease_ttl_s, &x, err, errlen)) < 0)
                                goto out;
                        t.lease_ttl_s = x;
                }
        }
        if (t.memory_mb == 0)
                t.exclusive = true;
        if (t.elastic_max_nodes && (rc = spec_add_nodes(&t)) < 0)
                goto out;
        if ((v = json_object_get(root, "array")) && !json_is_null(v)) {
                if (t.is_lease) {
                        rc = fail(err, errlen, "array: only for batch tasks (with command)");
                        goto out;
                }
                if ((rc = parse_array(v, lim, &arr, err, errlen)) < 0)
                        goto out;
                /* each element stores its own copy of the spec (a script's too) */
                if (script && !json_is_null(script) && arr.n * strlen(t.spec) > GP_SUBMIT_MAX_ARRAY_SCRIPT_BYTES) {
                        rc = fail(err, errlen, "script: %zu elements each storing this %zu-byte script exceed %d "
                                  "bytes in all; use fewer elements or a smaller script",
                                  arr.n, strlen(t.spec), GP_SUBMIT_MAX_ARRAY_SCRIPT_BYTES);
                        goto out;
                }
        }
        *ret = t;
        if (ret_array)
                *ret_array = arr;
        json_decref(root);
        return 0;
out:
        gp_array_spec_done(&arr);
        gp_task_done(&t);
        json_decref(root);
        return rc;
}
