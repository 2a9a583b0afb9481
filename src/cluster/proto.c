/* proto.c - parse and render the agent messages (see proto.h and
 * docs/internals/cluster.md).
 *
 * Every parse builds a local struct and copies it to *ret only when the
 * whole message checked out, so a refused message leaves nothing behind.
 * Each field's rule lives in one place: the field tables below (get_int /
 * get_str bounds) and the per-element parsers (parse_gpu, parse_id, ...).
 * Messages name the offending field with its path ("runs[3].epoch"). */
#include "cluster/proto.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base64.h"
#include "base/text.h"
#include "base/util.h"

#define INT53 ((int64_t)1 << 53) /* the largest integer every JSON reader keeps exactly */

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...) {
        if (err && errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

bool gp_proto_node_name_ok(const char *s) {
        size_t n = strnlen(s, GP_NODE_MAX);
        return n < GP_NODE_MAX && gp_id_ok(s, n) && strcmp(s, "local") != 0;
}

static bool secret_ok(const char *s, const char *prefix) {
        if (strncmp(s, prefix, 4) != 0)
                return false;
        for (int i = 0; i < 64; i++)
                if (!((s[4 + i] >= '0' && s[4 + i] <= '9') || (s[4 + i] >= 'a' && s[4 + i] <= 'f')))
                        return false;
        return s[68] == '\0';
}

bool gp_proto_join_token_ok(const char *s) {
        return secret_ok(s, "gpj_");
}

bool gp_proto_credential_ok(const char *s) {
        return secret_ok(s, "gpn_");
}

int gp_proto_join_token_split(const char *s, char ret_secret[GP_PROTO_CRED_LEN + 1],
                              char ret_ca_hash[GP_PROTO_CA_HASH_LEN]) {
        char secret[GP_PROTO_CRED_LEN + 1];
        size_t n = strnlen(s, GP_PROTO_JOIN_TOKEN_MAX + 1);
        if (n != GP_PROTO_CRED_LEN && n != GP_PROTO_JOIN_TOKEN_MAX)
                return -EINVAL;
        memcpy(secret, s, GP_PROTO_CRED_LEN);
        secret[GP_PROTO_CRED_LEN] = '\0';
        if (!secret_ok(secret, "gpj_"))
                return -EINVAL;
        const char *pin = s + GP_PROTO_CRED_LEN;
        if (n == GP_PROTO_JOIN_TOKEN_MAX) {
                if (*pin != '.')
                        return -EINVAL;
                for (int i = 1; i <= 64; i++)
                        if (!((pin[i] >= '0' && pin[i] <= '9') || (pin[i] >= 'a' && pin[i] <= 'f')))
                                return -EINVAL;
        }
        memcpy(ret_secret, secret, sizeof(secret));
        if (n == GP_PROTO_JOIN_TOKEN_MAX)
                snprintf(ret_ca_hash, GP_PROTO_CA_HASH_LEN, "sha256:%s", pin + 1);
        else
                ret_ca_hash[0] = '\0';
        explicit_bzero(secret, sizeof(secret));
        return 0;
}

bool gp_proto_machine_ok(const char *s) {
        for (int i = 0; i < GP_PROTO_MACHINE_LEN; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return s[GP_PROTO_MACHINE_LEN] == '\0';
}

static const char *const end_names[] = {"exited", "signaled", "timeout", "cancelled", "spawn_failed", "fenced"};
static const char *const stop_names[] = {"cancel", "preempt", "stale"};

const char *gp_proto_end_name(gp_exec_end end) {
        return (unsigned)end < GP_ARRAY_SIZE(end_names) ? end_names[end] : "exited";
}

int gp_proto_end_parse(const char *s, gp_exec_end *ret) {
        for (size_t i = 0; i < GP_ARRAY_SIZE(end_names); i++)
                if (!strcmp(s, end_names[i])) {
                        *ret = (gp_exec_end)i;
                        return 0;
                }
        return -EINVAL;
}

const char *gp_proto_stop_name(gp_proto_stop_why why) {
        return (unsigned)why < GP_ARRAY_SIZE(stop_names) ? stop_names[why] : "stale";
}

int gp_proto_stop_parse(const char *s, gp_proto_stop_why *ret) {
        for (size_t i = 0; i < GP_ARRAY_SIZE(stop_names); i++)
                if (!strcmp(s, stop_names[i])) {
                        *ret = (gp_proto_stop_why)i;
                        return 0;
                }
        return -EINVAL;
}

/* ---- field readers ---- */

/* The integer at key into [min, max]; absent: def when !required. */
static int get_int(const json_t *o, const char *key, bool required, int64_t min, int64_t max, int64_t def,
                   int64_t *out, const char *where, char *err, size_t errlen) {
        const json_t *v = json_object_get(o, key);
        if (!v) {
                if (required)
                        return fail(err, errlen, "%s%s%s is missing", where, *where ? "." : "", key);
                *out = def;
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
                return fail(err, errlen, "%s%s%s must be an integer %lld..%lld", where, *where ? "." : "", key,
                            (long long)min, (long long)max);
        *out = json_integer_value(v);
        return 0;
}

static int get_int32(const json_t *o, const char *key, bool required, int min, int max, int def, int *out,
                     const char *where, char *err, size_t errlen) {
        int64_t v;
        int r = get_int(o, key, required, min, max, def, &v, where, err, errlen);
        if (r == 0)
                *out = (int)v;
        return r;
}

static int get_bool(const json_t *o, const char *key, bool required, bool def, bool *out, const char *where,
                    char *err, size_t errlen) {
        const json_t *v = json_object_get(o, key);
        if (!v) {
                if (required)
                        return fail(err, errlen, "%s%s%s is missing", where, *where ? "." : "", key);
                *out = def;
                return 0;
        }
        if (!json_is_boolean(v))
                return fail(err, errlen, "%s%s%s must be true or false", where, *where ? "." : "", key);
        *out = json_is_true(v);
        return 0;
}

static int set(json_t *o, const char *key, json_t *v);

/* "max_body" of an answer: absent 0, else GP_PROTO_MIN_BODY..INT53. */
static int get_max_body(const json_t *o, int64_t *out, char *err, size_t errlen) {
        return get_int(o, "max_body", false, GP_PROTO_MIN_BODY, INT53, 0, out, "", err, errlen);
}

enum { STR_ANY = 0, STR_CLEAN = 1 };

/* A JSON string of at most max bytes without NUL (STR_CLEAN: base/text.h
 * text).  *ret_s/ret_n point into v (valid while the JSON lives). */
static int str_of(const json_t *v, size_t max, int kind, const char **ret_s, size_t *ret_n, const char *where,
                  const char *key, char *err, size_t errlen) {
        const char *sep = *where && *key ? "." : "";
        if (!json_is_string(v))
                return fail(err, errlen, "%s%s%s must be a string", where, sep, key);
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n > max)
                return fail(err, errlen, "%s%s%s is longer than %zu bytes", where, sep, key, max);
        if (memchr(s, '\0', n))
                return fail(err, errlen, "%s%s%s contains a NUL character", where, sep, key);
        const char *why = NULL;
        if (kind == STR_CLEAN && gp_text_check(s, n, max, &why) < 0)
                return fail(err, errlen, "%s%s%s %s", where, sep, key, why ? why : "is not acceptable text");
        *ret_s = s;
        *ret_n = n;
        return 0;
}

/* The string at key into out[size] (at most size-1 bytes). */
static int get_str(const json_t *o, const char *key, bool required, int kind, char *out, size_t size,
                   const char *where, char *err, size_t errlen) {
        const json_t *v = json_object_get(o, key);
        if (!v) {
                if (required)
                        return fail(err, errlen, "%s%s%s is missing", where, *where ? "." : "", key);
                out[0] = '\0';
                return 0;
        }
        const char *s;
        size_t n;
        int r = str_of(v, size - 1, kind, &s, &n, where, key, err, errlen);
        if (r < 0)
                return r;
        memcpy(out, s, n);
        out[n] = '\0';
        return 0;
}

/* The array at key (absent: *ret NULL) of at most max entries. */
static int get_array(const json_t *o, const char *key, size_t max, const json_t **ret, char *err, size_t errlen) {
        const json_t *v = json_object_get(o, key);
        *ret = NULL;
        if (!v)
                return 0;
        if (!json_is_array(v))
                return fail(err, errlen, "%s must be an array", key);
        if (json_array_size(v) > max)
                return fail(err, errlen, "%s has more than %zu entries", key, max);
        *ret = v;
        return 0;
}

static int load(const char *data, size_t len, size_t max, json_t **ret, char *err, size_t errlen) {
        if (len > max)
                return fail(err, errlen, "message of %zu bytes, at most %zu", len, max);
        json_error_t je;
        json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
        if (!j)
                return fail(err, errlen, "not JSON: %s (line %d)", je.text, je.line);
        if (!json_is_object(j)) {
                json_decref(j);
                return fail(err, errlen, "the message must be a JSON object");
        }
        *ret = j;
        return 0;
}

/* ---- elements ---- */

static int parse_id(const json_t *o, gp_proto_run_id *id, const char *where, char *err, size_t errlen) {
        int r;
        if (!json_is_object(o))
                return fail(err, errlen, "%s must be an object", where);
        if ((r = get_int(o, "task", true, 1, INT53, 0, &id->task, where, err, errlen)) < 0 ||
            (r = get_int(o, "epoch", true, 1, INT53, 0, &id->epoch, where, err, errlen)) < 0 ||
            (r = get_int32(o, "rank", false, 0, GP_PROTO_MAX_RANK, 0, &id->rank, where, err, errlen)) < 0)
                return r;
        return 0;
}

static int id_cmp(const void *a, const void *b) {
        const gp_proto_run_id *x = a, *y = b;
        if (x->task != y->task)
                return x->task < y->task ? -1 : 1;
        if (x->epoch != y->epoch)
                return x->epoch < y->epoch ? -1 : 1;
        return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Refuse a run named twice: n ids at stride bytes from first. */
static int ids_unique(const void *first, size_t stride, int n, const char *what, char *err, size_t errlen) {
        if (n < 2)
                return 0;
        gp_proto_run_id *ids = malloc((size_t)n * sizeof(*ids));
        if (!ids)
                return -ENOMEM;
        for (int i = 0; i < n; i++)
                memcpy(&ids[i], (const char *)first + (size_t)i * stride, sizeof(*ids));
        qsort(ids, (size_t)n, sizeof(*ids), id_cmp);
        int r = 0;
        for (int i = 1; i < n && r == 0; i++)
                if (id_cmp(&ids[i - 1], &ids[i]) == 0)
                        r = fail(err, errlen, "%s names run %lld.%lld.%d twice", what, (long long)ids[i].task,
                                 (long long)ids[i].epoch, ids[i].rank);
        free(ids);
        return r;
}

static int parse_gpus(const json_t *arr, gp_proto_gpu **ret, int *ret_n, char *err, size_t errlen) {
        size_t n = json_array_size(arr);
        gp_proto_gpu *g = NULL;
        bool seen[GP_PROTO_MAX_GPUS] = {false};
        if (n > GP_PROTO_MAX_GPUS)
                return fail(err, errlen, "gpus has more than %d entries", GP_PROTO_MAX_GPUS);
        if (n > 0 && !(g = calloc(n, sizeof(*g))))
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < n && r == 0; i++) {
                const json_t *o = json_array_get(arr, i);
                char where[32];
                int64_t mem;
                snprintf(where, sizeof(where), "gpus[%zu]", i);
                if (!json_is_object(o)) {
                        r = fail(err, errlen, "%s must be an object", where);
                        break;
                }
                if ((r = get_int32(o, "index", true, 0, GP_PROTO_MAX_GPUS - 1, 0, &g[i].index, where, err,
                                   errlen)) < 0 ||
                    (r = get_str(o, "uuid", true, STR_CLEAN, g[i].uuid, sizeof(g[i].uuid), where, err, errlen)) < 0 ||
                    (r = get_str(o, "name", false, STR_CLEAN, g[i].name, sizeof(g[i].name), where, err, errlen)) <
                            0 ||
                    (r = get_int(o, "memory_mb", true, 0, (int64_t)1 << 40, 0, &mem, where, err, errlen)) < 0 ||
                    (r = get_bool(o, "healthy", false, true, &g[i].healthy, where, err, errlen)) < 0)
                        break;
                g[i].memory_mb = mem;
                if (!g[i].uuid[0])
                        r = fail(err, errlen, "%s.uuid is empty", where);
                else if (seen[g[i].index])
                        r = fail(err, errlen, "%s.index %d given twice", where, g[i].index);
                seen[g[i].index] = true;
        }
        if (r < 0) {
                free(g);
                return r;
        }
        *ret = g;
        *ret_n = (int)n;
        return 0;
}

int gp_proto_labels_from_json(const json_t *obj, char out[GP_LABELS_MAX], char *err, size_t errlen) {
        if (!json_is_object(obj))
                return fail(err, errlen, "labels must be an object");
        if (json_object_size(obj) > GP_LABELS_N)
                return fail(err, errlen, "more than %d labels", GP_LABELS_N);
        /* every key and value is checked before it is joined, so no ',' or
         * '=' can smuggle in another label */
        char flat[GP_LABELS_N * (2 * GP_LABEL_PART_MAX + 2) + 1] = ""; /* {} is no labels */
        size_t o = 0;
        const char *k;
        json_t *v;
        flat[0] = '\0';
        json_object_foreach((json_t *)obj, k, v) {
                size_t kn = strlen(k);
                if (!gp_label_key_ok(k, kn))
                        return fail(err, errlen, "label keys must be 1..%d bytes of [A-Za-z0-9._/-]",
                                    GP_LABEL_PART_MAX);
                if (!json_is_string(v) || !gp_label_value_ok(json_string_value(v), json_string_length(v)))
                        return fail(err, errlen, "label %s: value must be a string of 0..%d bytes of [A-Za-z0-9._/-]",
                                    k, GP_LABEL_PART_MAX);
                o += (size_t)snprintf(flat + o, sizeof(flat) - o, "%s%s=%s", o ? "," : "", k, json_string_value(v));
        }
        return gp_labels_canon(flat, out, GP_LABELS_MAX, err, errlen);
}

json_t *gp_proto_labels_to_json(const char *canon) {
        json_t *o = json_object();
        size_t pos = 0, kn, vn;
        const char *k, *v;
        while (o && gp_labels_next(canon, &pos, &k, &kn, &v, &vn)) {
                char key[GP_LABEL_PART_MAX + 1];
                if (kn > GP_LABEL_PART_MAX)
                        break;
                memcpy(key, k, kn);
                key[kn] = '\0';
                if (json_object_set_new(o, key, json_stringn(v, vn)) < 0) {
                        json_decref(o);
                        return NULL;
                }
        }
        return o;
}

/* ---- join ---- */

void gp_proto_join_done(gp_proto_join *m) {
        if (!m)
                return;
        free(m->gpus);
        memset(m, 0, sizeof(*m));
}

static int check_backend(const char *b, char *err, size_t errlen) {
        if (b[0] && strcmp(b, "nvml") && strcmp(b, "sim"))
                return fail(err, errlen, "backend must be nvml or sim");
        return 0;
}

static int check_name(const char *name, const char *key, char *err, size_t errlen) {
        if (!gp_proto_node_name_ok(name))
                return fail(err, errlen, "%s must be 1..%d bytes of [A-Za-z0-9._-] and not 'local'", key,
                            GP_NODE_MAX - 1);
        return 0;
}

int gp_proto_join_parse(const char *data, size_t len, gp_proto_join *ret, char *err, size_t errlen) {
        json_t *j;
        gp_proto_join m = {0};
        const json_t *arr, *labels;
        int r = load(data, len, GP_PROTO_MAX_BODY, &j, err, errlen);
        if (r < 0)
                return r;
        if ((r = get_str(j, "name", true, STR_CLEAN, m.name, sizeof(m.name), "", err, errlen)) < 0 ||
            (r = check_name(m.name, "name", err, errlen)) < 0 ||
            (r = get_str(j, "version", false, STR_CLEAN, m.version, sizeof(m.version), "", err, errlen)) < 0 ||
            (r = get_str(j, "address", false, STR_CLEAN, m.address, sizeof(m.address), "", err, errlen)) < 0 ||
            (r = get_str(j, "backend", false, STR_CLEAN, m.backend, sizeof(m.backend), "", err, errlen)) < 0 ||
            (r = check_backend(m.backend, err, errlen)) < 0 ||
            (r = get_str(j, "machine", false, STR_ANY, m.machine, sizeof(m.machine), "", err, errlen)) < 0 ||
            (m.machine[0] && !gp_proto_machine_ok(m.machine) &&
             (r = fail(err, errlen, "machine must be %d lowercase hex digits", GP_PROTO_MACHINE_LEN)) < 0) ||
            (r = get_int(j, "seq", false, 1, INT64_MAX, 0, &m.seq, "", err, errlen)) < 0 ||
            (r = get_bool(j, "resize", false, false, &m.resize, "", err, errlen)) < 0 ||
            (r = get_array(j, "gpus", GP_PROTO_MAX_GPUS, &arr, err, errlen)) < 0 ||
            (arr && (r = parse_gpus(arr, &m.gpus, &m.n_gpus, err, errlen)) < 0))
                goto out;
        if ((labels = json_object_get(j, "labels")) &&
            (r = gp_proto_labels_from_json(labels, m.labels, err, errlen)) < 0)
                goto out;
        *ret = m;
        memset(&m, 0, sizeof(m));
out:
        gp_proto_join_done(&m);
        json_decref(j);
        return r;
}

static json_t *gpus_to_json(const gp_proto_gpu *g, int n) {
        json_t *a = json_array();
        for (int i = 0; a && i < n; i++)
                if (json_array_append_new(a, json_pack("{s:i, s:s, s:s, s:I, s:b}", "index", g[i].index, "uuid",
                                                       g[i].uuid, "name", g[i].name, "memory_mb",
                                                       (json_int_t)g[i].memory_mb, "healthy", g[i].healthy)) < 0) {
                        json_decref(a);
                        return NULL;
                }
        return a;
}

/* Dump j (stolen) compactly into *ret. */
static int dump(json_t *j, char **ret) {
        if (!j)
                return -ENOMEM;
        char *s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int gp_proto_join_render(const gp_proto_join *m, char **ret) {
        if (m->n_gpus < 0 || m->n_gpus > GP_PROTO_MAX_GPUS || m->seq < 0)
                return -EINVAL;
        json_t *j = json_pack("{s:s, s:s, s:s, s:o*, s:s, s:o*}", "name", m->name, "version", m->version, "address",
                              m->address, "labels", gp_proto_labels_to_json(m->labels), "backend", m->backend,
                              "gpus", gpus_to_json(m->gpus, m->n_gpus));
        int r = j ? 0 : -ENOMEM;
        if (r == 0 && m->machine[0])
                r = set(j, "machine", json_string(m->machine));
        if (r == 0 && m->seq > 0)
                r = set(j, "seq", json_integer(m->seq));
        if (r == 0 && m->resize)
                r = set(j, "resize", json_true());
        if (r < 0) {
                json_decref(j);
                return r;
        }
        return dump(j, ret);
}

int gp_proto_join_answer_parse(const char *data, size_t len, gp_proto_join_answer *ret, char *err, size_t errlen) {
        json_t *j;
        gp_proto_join_answer m = {0};
        int r = load(data, len, GP_PROTO_MAX_ANSWER, &j, err, errlen);
        if (r < 0)
                return r;
        if ((r = get_str(j, "node", true, STR_CLEAN, m.node, sizeof(m.node), "", err, errlen)) < 0 ||
            (r = check_name(m.node, "node", err, errlen)) < 0 ||
            (r = get_str(j, "credential", true, STR_ANY, m.credential, sizeof(m.credential), "", err, errlen)) <
                    0 ||
            (r = get_int32(j, "heartbeat_s", false, 1, 60, 2, &m.heartbeat_s, "", err, errlen)) < 0 ||
            (r = get_int32(j, "node_timeout_s", false, 2, 3600, 10, &m.node_timeout_s, "", err, errlen)) < 0 ||
            (r = get_int32(j, "fence_s", false, 0, 3600, 0, &m.fence_s, "", err, errlen)) < 0 ||
            (r = get_max_body(j, &m.max_body, err, errlen)) < 0)
                goto out;
        if (!gp_proto_credential_ok(m.credential)) {
                r = fail(err, errlen, "credential must be gpn_ and 64 lowercase hex digits");
                goto out;
        }
        *ret = m;
out:
        json_decref(j);
        return r;
}

int gp_proto_join_answer_render(const gp_proto_join_answer *m, char **ret) {
        if (m->max_body)
                return dump(json_pack("{s:s, s:s, s:i, s:i, s:i, s:I}", "node", m->node, "credential",
                                      m->credential, "heartbeat_s", m->heartbeat_s, "node_timeout_s",
                                      m->node_timeout_s, "fence_s", m->fence_s, "max_body", (json_int_t)m->max_body),
                            ret);
        return dump(json_pack("{s:s, s:s, s:i, s:i, s:i}", "node", m->node, "credential", m->credential,
                              "heartbeat_s", m->heartbeat_s, "node_timeout_s", m->node_timeout_s, "fence_s",
                              m->fence_s),
                    ret);
}

/* ---- sync ---- */

void gp_proto_sync_done(gp_proto_sync *m) {
        if (!m)
                return;
        free(m->gpus);
        free(m->runs);
        for (int i = 0; i < m->n_logs; i++)
                free(m->logs[i].data);
        free(m->logs);
        for (int i = 0; i < m->n_tele; i++)
                free(m->tele[i].procs);
        free(m->tele);
        memset(m, 0, sizeof(m[0]));
}

static int parse_result(const json_t *o, gp_exec_result *res, const char *where, char *err, size_t errlen) {
        char w[64], end[16];
        int r;
        snprintf(w, sizeof(w), "%s.result", where);
        if (!json_is_object(o))
                return fail(err, errlen, "%s must be an object", w);
        if ((r = get_str(o, "end", true, STR_ANY, end, sizeof(end), w, err, errlen)) < 0)
                return r;
        if (gp_proto_end_parse(end, &res->end) < 0)
                return fail(err, errlen, "%s.end must be exited, signaled, timeout, cancelled or spawn_failed", w);
        if ((r = get_int32(o, "exit_code", false, -1, 65535, 0, &res->exit_code, w, err, errlen)) < 0 ||
            (r = get_int32(o, "signal", false, 0, 128, 0, &res->signal, w, err, errlen)) < 0 ||
            (r = get_int(o, "finished_ms", false, 0, INT53, 0, &res->finished_ms, w, err, errlen)) < 0 ||
            (r = get_str(o, "message", false, STR_CLEAN, res->message, sizeof(res->message), w, err, errlen)) < 0)
                return r;
        return 0;
}

/* ---- GPU sets ---- */

int gp_proto_mask_parse(const char *s, gp_proto_mask *ret) {
        gp_proto_mask m = {{0}};
        int n = 0;
        for (const char *p = s; *p;) {
                if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
                        return -EINVAL; /* digits only, no leading zeros, no sign or space */
                long v = 0;
                while (*p >= '0' && *p <= '9' && v < GP_PROTO_MAX_GPUS)
                        v = v * 10 + (*p++ - '0');
                if (v >= GP_PROTO_MAX_GPUS || (*p && *p != ',') || (*p == ',' && !p[1]))
                        return -EINVAL;
                if (m.w[v / 64] & ((uint64_t)1 << (v % 64)))
                        return -EINVAL; /* twice */
                m.w[v / 64] |= (uint64_t)1 << (v % 64);
                if (++n > GP_PROTO_MAX_GPUS)
                        return -EINVAL;
                p += *p == ',';
        }
        *ret = m;
        return 0;
}

void gp_proto_mask_format(const gp_proto_mask *m, char *buf, size_t size) {
        size_t o = 0;
        if (size)
                buf[0] = '\0';
        for (int i = 0; i < GP_PROTO_MAX_GPUS && o < size; i++)
                if (m->w[i / 64] & ((uint64_t)1 << (i % 64)))
                        o += (size_t)snprintf(buf + o, size - o, "%s%d", o ? "," : "", i);
}

int gp_proto_mask_count(const gp_proto_mask *m) {
        int n = 0;
        for (size_t i = 0; i < GP_ARRAY_SIZE(m->w); i++)
                n += __builtin_popcountll(m->w[i]);
        return n;
}

/* A GPU set under key (optional; a present one must name at least one GPU). */
static int get_mask(const json_t *o, const char *key, bool *has, gp_proto_mask *ret, const char *where, char *err,
                    size_t errlen) {
        char text[GP_PROTO_MASK_TEXT];
        int r;
        *has = json_object_get(o, key) != NULL;
        if (!*has)
                return 0;
        if ((r = get_str(o, key, true, STR_ANY, text, sizeof(text), where, err, errlen)) < 0)
                return r;
        if (!text[0] || gp_proto_mask_parse(text, ret) < 0)
                return fail(err, errlen, "%s.%s must be GPU indexes below %d as \"0,1,...\", each once", where, key,
                            GP_PROTO_MAX_GPUS);
        return 0;
}

static int get_alloc(const json_t *o, gp_proto_run *run, const char *where, char *err, size_t errlen) {
        return get_mask(o, "alloc", &run->has_alloc, &run->alloc, where, err, errlen);
}

static json_t *mask_to_json(const gp_proto_mask *m) {
        char text[GP_PROTO_MASK_TEXT];
        gp_proto_mask_format(m, text, sizeof(text));
        return json_string(text);
}

static int parse_runs(const json_t *arr, gp_proto_sync *m, char *err, size_t errlen) {
        size_t n = json_array_size(arr);
        if (n == 0)
                return 0;
        if (!(m->runs = calloc(n, sizeof(*m->runs))))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                gp_proto_run *run = &m->runs[i];
                char where[32], state[16];
                int r;
                snprintf(where, sizeof(where), "runs[%zu]", i);
                if ((r = parse_id(o, &run->id, where, err, errlen)) < 0 ||
                    (r = get_str(o, "state", true, STR_ANY, state, sizeof(state), where, err, errlen)) < 0)
                        return r;
                if ((r = get_alloc(o, run, where, err, errlen)) < 0)
                        return r;
                if (!strcmp(state, "running")) {
                        run->state = GP_PROTO_RUNNING;
                } else if (!strcmp(state, "exited")) {
                        const json_t *res = json_object_get(o, "result");
                        run->state = GP_PROTO_EXITED;
                        if (!res)
                                return fail(err, errlen, "%s is exited without a result", where);
                        if ((r = parse_result(res, &run->result, where, err, errlen)) < 0)
                                return r;
                } else {
                        return fail(err, errlen, "%s.state must be running or exited", where);
                }
                m->n_runs = (int)i + 1;
        }
        return ids_unique(&m->runs[0].id, sizeof(m->runs[0]), m->n_runs, "runs", err, errlen);
}

static int parse_logs(const json_t *arr, gp_proto_sync *m, char *err, size_t errlen) {
        size_t n = json_array_size(arr), total = 0;
        if (n == 0)
                return 0;
        if (!(m->logs = calloc(n, sizeof(*m->logs))))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                gp_proto_log *lg = &m->logs[i];
                char where[32];
                const char *s;
                size_t sn;
                int r;
                snprintf(where, sizeof(where), "logs[%zu]", i);
                if ((r = parse_id(o, &lg->id, where, err, errlen)) < 0 ||
                    (r = get_int(o, "offset", true, 0, INT53, 0, &lg->offset, where, err, errlen)) < 0)
                        return r;
                const json_t *d = json_object_get(o, "data");
                if (!d)
                        return fail(err, errlen, "%s.data is missing", where);
                if ((r = str_of(d, gp_base64_encoded_len(GP_PROTO_LOG_CHUNK), STR_ANY, &s, &sn, where, "data", err,
                                errlen)) < 0)
                        return r;
                if (sn == 0)
                        return fail(err, errlen, "%s.data is empty", where);
                size_t max = gp_base64_decoded_max(sn);
                if (!(lg->data = malloc(max)))
                        return -ENOMEM;
                m->n_logs = (int)i + 1;
                if (gp_base64_decode(s, sn, lg->data, max, &lg->len) < 0)
                        return fail(err, errlen, "%s.data is not base64", where);
                if (lg->len > GP_PROTO_LOG_CHUNK)
                        return fail(err, errlen, "%s.data has more than %d bytes", where, GP_PROTO_LOG_CHUNK);
                total += lg->len;
                if (total > GP_PROTO_LOG_TOTAL)
                        return fail(err, errlen, "logs carry more than %d bytes", GP_PROTO_LOG_TOTAL);
        }
        return ids_unique(&m->logs[0].id, sizeof(m->logs[0]), m->n_logs, "logs", err, errlen);
}

/* A reading: absent -1, else min..max. */
static int get_reading(const json_t *o, const char *key, int64_t max, int64_t *out, const char *where, char *err,
                       size_t errlen) {
        return get_int(o, key, false, 0, max, -1, out, where, err, errlen);
}

static int get_reading32(const json_t *o, const char *key, int max, int *out, const char *where, char *err,
                         size_t errlen) {
        return get_int32(o, key, false, 0, max, -1, out, where, err, errlen);
}

static int parse_procs(const json_t *o, gp_proto_tele *t, const char *where, char *err, size_t errlen) {
        const json_t *arr = json_object_get(o, "procs");
        if (!arr)
                return 0;
        t->procs_known = true;
        if (!json_is_array(arr))
                return fail(err, errlen, "%s.procs must be an array", where);
        size_t n = json_array_size(arr);
        if (n > GP_PROTO_MAX_PROCS)
                return fail(err, errlen, "%s.procs has more than %d entries", where, GP_PROTO_MAX_PROCS);
        if (n == 0)
                return 0;
        if (!(t->procs = calloc(n, sizeof(*t->procs))))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const json_t *e = json_array_get(arr, i);
                gp_proto_proc *p = &t->procs[i];
                char w[48];
                int r;
                snprintf(w, sizeof(w), "%s.procs[%zu]", where, i);
                if (!json_is_object(e))
                        return fail(err, errlen, "%s must be an object", w);
                if ((r = get_int32(e, "pid", true, 1, GP_PROTO_MAX_PID, 0, &p->pid, w, err, errlen)) < 0 ||
                    (r = get_int(e, "used_mb", true, 0, (int64_t)1 << 40, 0, &p->used_mb, w, err, errlen)) < 0 ||
                    (r = get_int(e, "task", false, 0, INT53, 0, &p->task, w, err, errlen)) < 0 ||
                    (r = get_int32(e, "rank", false, 0, GP_PROTO_MAX_RANK, 0, &p->rank, w, err, errlen)) < 0)
                        return r;
                t->n_procs = (int)i + 1;
                for (size_t k = 0; k < i; k++)
                        if (t->procs[k].pid == p->pid)
                                return fail(err, errlen, "%s.pid %d given twice", w, p->pid);
        }
        return 0;
}

static int parse_tele(const json_t *arr, gp_proto_sync *m, char *err, size_t errlen) {
        size_t n = json_array_size(arr);
        bool seen[GP_PROTO_MAX_GPUS] = {false};
        if (n == 0)
                return 0;
        if (!(m->tele = calloc(n, sizeof(*m->tele))))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                gp_proto_tele *t = &m->tele[i];
                char where[32];
                int r;
                snprintf(where, sizeof(where), "telemetry[%zu]", i);
                if (!json_is_object(o))
                        return fail(err, errlen, "%s must be an object", where);
                m->n_tele = (int)i + 1; /* owns what parse_procs allocates */
                if ((r = get_int32(o, "index", true, 0, GP_PROTO_MAX_GPUS - 1, 0, &t->index, where, err, errlen)) <
                            0 ||
                    (r = get_reading(o, "used_mb", (int64_t)1 << 40, &t->used_mb, where, err, errlen)) < 0 ||
                    (r = get_reading32(o, "util_pct", 100, &t->util_pct, where, err, errlen)) < 0 ||
                    (r = get_reading32(o, "temp_c", 300, &t->temp_c, where, err, errlen)) < 0 ||
                    (r = get_reading32(o, "power_mw", 100000000, &t->power_mw, where, err, errlen)) < 0 ||
                    (r = get_reading32(o, "sm_clock_mhz", 100000, &t->sm_clock_mhz, where, err, errlen)) < 0 ||
                    (r = get_reading32(o, "mem_clock_mhz", 100000, &t->mem_clock_mhz, where, err, errlen)) < 0 ||
                    (r = get_reading(o, "ecc_corrected", INT53, &t->ecc_corrected, where, err, errlen)) < 0 ||
                    (r = get_reading(o, "ecc_uncorrected", INT53, &t->ecc_uncorrected, where, err, errlen)) < 0 ||
                    (r = get_reading(o, "throttle", INT53, &t->throttle, where, err, errlen)) < 0 ||
                    (r = get_reading(o, "xid_errors", INT53, &t->xid_errors, where, err, errlen)) < 0 ||
                    (r = get_str(o, "reason", false, STR_CLEAN, t->reason, sizeof(t->reason), where, err, errlen)) <
                            0 ||
                    (r = parse_procs(o, t, where, err, errlen)) < 0)
                        return r;
                if (seen[t->index])
                        return fail(err, errlen, "%s.index %d given twice", where, t->index);
                seen[t->index] = true;
        }
        return 0;
}

static int parse_host(const json_t *o, gp_host_info *h, char *err, size_t errlen) {
        int r;
        if (!json_is_object(o))
                return fail(err, errlen, "host must be an object");
        if ((r = get_int32(o, "cpus", true, 1, 65536, 0, &h->cpus, "host", err, errlen)) < 0 ||
            (r = get_reading(o, "mem_total_mb", (int64_t)1 << 40, &h->mem_total_mb, "host", err, errlen)) < 0 ||
            (r = get_reading(o, "mem_avail_mb", (int64_t)1 << 40, &h->mem_avail_mb, "host", err, errlen)) < 0 ||
            (r = get_reading(o, "disk_total_mb", (int64_t)1 << 40, &h->disk_total_mb, "host", err, errlen)) < 0 ||
            (r = get_reading(o, "disk_free_mb", (int64_t)1 << 40, &h->disk_free_mb, "host", err, errlen)) < 0 ||
            (r = get_int32(o, "cgroup", false, 0, 2, 0, &h->cgroup, "host", err, errlen)) < 0)
                return r;
        return 0;
}

int gp_proto_sync_parse(const char *data, size_t len, gp_proto_sync *ret, char *err, size_t errlen) {
        json_t *j;
        gp_proto_sync m = {0};
        const json_t *gpus, *runs, *logs, *tele, *host;
        int r = load(data, len, GP_PROTO_MAX_BODY, &j, err, errlen);
        if (r < 0)
                return r;
        if ((r = get_str(j, "node", true, STR_CLEAN, m.node, sizeof(m.node), "", err, errlen)) < 0 ||
            (r = check_name(m.node, "node", err, errlen)) < 0 ||
            (r = get_int(j, "seq", true, 1, INT64_MAX, 0, &m.seq, "", err, errlen)) < 0 ||
            (r = get_bool(j, "full", false, false, &m.full, "", err, errlen)) < 0 ||
            (r = get_int32(j, "page", false, 0, GP_PROTO_MAX_PAGE, 0, &m.page, "", err, errlen)) < 0 ||
            (r = get_bool(j, "more", false, false, &m.more, "", err, errlen)) < 0 ||
            (!m.full && (m.page || m.more) && (r = fail(err, errlen, "page and more belong to a full sync")) < 0) ||
            (r = get_int32(j, "wait_ms", false, 0, GP_PROTO_MAX_WAIT_MS, 0, &m.wait_ms, "", err, errlen)) < 0 ||
            (r = get_array(j, "gpus", GP_PROTO_MAX_GPUS, &gpus, err, errlen)) < 0 ||
            (r = get_array(j, "runs", GP_PROTO_MAX_RUNS, &runs, err, errlen)) < 0 ||
            (r = get_array(j, "logs", GP_PROTO_MAX_RUNS, &logs, err, errlen)) < 0 ||
            (r = get_array(j, "telemetry", GP_PROTO_MAX_GPUS, &tele, err, errlen)) < 0)
                goto out;
        m.has_gpus = gpus != NULL;
        host = json_object_get(j, "host");
        m.has_host = host != NULL;
        if ((gpus && (r = parse_gpus(gpus, &m.gpus, &m.n_gpus, err, errlen)) < 0) ||
            (runs && (r = parse_runs(runs, &m, err, errlen)) < 0) ||
            (logs && (r = parse_logs(logs, &m, err, errlen)) < 0) ||
            (tele && (r = parse_tele(tele, &m, err, errlen)) < 0) ||
            (host && (r = parse_host(host, &m.host, err, errlen)) < 0))
                goto out;
        *ret = m;
        memset(&m, 0, sizeof(m));
out:
        gp_proto_sync_done(&m);
        json_decref(j);
        return r;
}

static json_t *id_to_json(const gp_proto_run_id *id) {
        return json_pack("{s:I, s:I, s:i}", "task", (json_int_t)id->task, "epoch", (json_int_t)id->epoch, "rank",
                         id->rank);
}

/* Append o (stolen) to a; -ENOMEM (o freed) when either is NULL. */
static int append(json_t *a, json_t *o) {
        if (!a || !o || json_array_append_new(a, o) < 0) {
                json_decref(o);
                return -ENOMEM;
        }
        return 0;
}

/* Set key of o to v (stolen) unless v is NULL (-ENOMEM). */
static int set(json_t *o, const char *key, json_t *v) {
        if (!v || json_object_set_new(o, key, v) < 0)
                return -ENOMEM;
        return 0;
}

/* A run id with one more field, key: v (stolen).  NULL when out of memory. */
static json_t *id_with(const gp_proto_run_id *id, const char *key, json_t *v) {
        json_t *o = id_to_json(id);
        if (!o) {
                json_decref(v);
                return NULL;
        }
        if (set(o, key, v) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *run_to_json(const gp_proto_run *run) {
        json_t *o = id_to_json(&run->id);
        if (!o)
                return NULL;
        const gp_exec_result *res = &run->result;
        if (set(o, "state", json_string(run->state == GP_PROTO_EXITED ? "exited" : "running")) < 0 ||
            (run->has_alloc && set(o, "alloc", mask_to_json(&run->alloc)) < 0) ||
            (run->state == GP_PROTO_EXITED &&
             set(o, "result",
                 json_pack("{s:s, s:i, s:i, s:I, s:s}", "end", gp_proto_end_name(res->end), "exit_code",
                           res->exit_code, "signal", res->signal, "finished_ms", (json_int_t)res->finished_ms,
                           "message", res->message)) < 0)) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *log_to_json(const gp_proto_log *lg) {
        size_t n = gp_base64_encoded_len(lg->len) + 1;
        char *b = malloc(n);
        json_t *o = b ? id_to_json(&lg->id) : NULL;
        if (o && (gp_base64_encode(lg->data, lg->len, b, n) < 0 ||
                  set(o, "offset", json_integer(lg->offset)) < 0 || set(o, "data", json_stringn(b, n - 1)) < 0)) {
                json_decref(o);
                o = NULL;
        }
        free(b);
        return o;
}

/* Set key to v unless it is unknown (< 0). */
static int set_reading(json_t *o, const char *key, int64_t v) {
        return v < 0 ? 0 : set(o, key, json_integer(v));
}

static json_t *tele_to_json(const gp_proto_tele *t) {
        json_t *o = json_pack("{s:i}", "index", t->index);
        int r = o ? 0 : -ENOMEM;
        if (r == 0)
                r = set_reading(o, "used_mb", t->used_mb) | set_reading(o, "util_pct", t->util_pct) |
                    set_reading(o, "temp_c", t->temp_c) | set_reading(o, "power_mw", t->power_mw) |
                    set_reading(o, "sm_clock_mhz", t->sm_clock_mhz) |
                    set_reading(o, "mem_clock_mhz", t->mem_clock_mhz) |
                    set_reading(o, "ecc_corrected", t->ecc_corrected) |
                    set_reading(o, "ecc_uncorrected", t->ecc_uncorrected) | set_reading(o, "throttle", t->throttle) |
                    set_reading(o, "xid_errors", t->xid_errors);
        if (r == 0 && t->reason[0])
                r = set(o, "reason", json_string(t->reason));
        if (r == 0 && (t->procs_known || t->n_procs > 0)) {
                json_t *a = json_array();
                for (int i = 0; r == 0 && i < t->n_procs; i++) {
                        const gp_proto_proc *p = &t->procs[i];
                        r = append(a, p->task > 0 ? json_pack("{s:i, s:I, s:I, s:i}", "pid", p->pid, "used_mb",
                                                              (json_int_t)p->used_mb, "task", (json_int_t)p->task,
                                                              "rank", p->rank)
                                                  : json_pack("{s:i, s:I}", "pid", p->pid, "used_mb",
                                                              (json_int_t)p->used_mb));
                }
                if (r == 0)
                        r = set(o, "procs", a);
                else
                        json_decref(a);
        }
        if (r < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *host_to_json(const gp_host_info *h) {
        json_t *o = json_pack("{s:i,s:i}", "cpus", h->cpus, "cgroup", h->cgroup);
        if (o && (set_reading(o, "mem_total_mb", h->mem_total_mb) | set_reading(o, "mem_avail_mb", h->mem_avail_mb) |
                  set_reading(o, "disk_total_mb", h->disk_total_mb) |
                  set_reading(o, "disk_free_mb", h->disk_free_mb)) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

int gp_proto_sync_render(const gp_proto_sync *m, char **ret) {
        if (m->n_runs < 0 || m->n_runs > GP_PROTO_MAX_RUNS || m->n_logs < 0 || m->n_logs > GP_PROTO_MAX_RUNS ||
            m->n_gpus < 0 || m->n_gpus > GP_PROTO_MAX_GPUS || m->page < 0 || m->page > GP_PROTO_MAX_PAGE ||
            (!m->full && (m->page || m->more)) || m->n_tele < 0 || m->n_tele > GP_PROTO_MAX_GPUS ||
            (m->has_host && m->host.cpus < 1))
                return -EINVAL;
        for (int i = 0; i < m->n_tele; i++)
                if (m->tele[i].n_procs < 0 || m->tele[i].n_procs > GP_PROTO_MAX_PROCS)
                        return -EINVAL;
        for (int i = 0; i < m->n_logs; i++)
                if (m->logs[i].len > GP_PROTO_LOG_CHUNK)
                        return -EINVAL;
        json_t *j = json_pack("{s:s, s:I, s:i}", "node", m->node, "seq", (json_int_t)m->seq, "wait_ms", m->wait_ms);
        if (!j)
                return -ENOMEM;
        int r = 0;
        if (m->full)
                r = set(j, "full", json_true());
        if (r == 0 && m->page)
                r = set(j, "page", json_integer(m->page));
        if (r == 0 && m->more)
                r = set(j, "more", json_true());
        if (r == 0 && m->has_gpus)
                r = set(j, "gpus", gpus_to_json(m->gpus, m->n_gpus));
        if (r == 0 && m->n_runs > 0) {
                json_t *a = json_array();
                for (int i = 0; r == 0 && i < m->n_runs; i++)
                        r = append(a, run_to_json(&m->runs[i]));
                if (r == 0)
                        r = set(j, "runs", a);
                else
                        json_decref(a);
        }
        if (r == 0 && m->n_logs > 0) {
                json_t *a = json_array();
                for (int i = 0; r == 0 && i < m->n_logs; i++)
                        r = append(a, log_to_json(&m->logs[i]));
                if (r == 0)
                        r = set(j, "logs", a);
                else
                        json_decref(a);
        }
        if (r == 0 && m->n_tele > 0) {
                json_t *a = json_array();
                for (int i = 0; r == 0 && i < m->n_tele; i++)
                        r = append(a, tele_to_json(&m->tele[i]));
                if (r == 0)
                        r = set(j, "telemetry", a);
                else
                        json_decref(a);
        }
        if (r == 0 && m->has_host)
                r = set(j, "host", host_to_json(&m->host));
        if (r < 0) {
                json_decref(j);
                return r;
        }
        return dump(j, ret);
}

/* ---- sync answer ---- */

void gp_proto_start_done(gp_proto_start *s) {
        if (!s)
                return;
        for (int i = 0; s->argv && i < s->n_argv; i++)
                free(s->argv[i]);
        free(s->argv);
        for (int i = 0; s->env && i < s->n_env; i++)
                free(s->env[i]);
        free(s->env);
        free(s->workdir);
        memset(s, 0, sizeof(*s));
}

void gp_proto_sync_answer_done(gp_proto_sync_answer *m) {
        if (!m)
                return;
        free(m->ack);
        for (int i = 0; m->start && i < m->n_start; i++)
                gp_proto_start_done(&m->start[i]);
        free(m->start);
        free(m->stop);
        free(m->offsets);
        free(m->resize);
        memset(m, 0, sizeof(*m));
}

static bool env_key_ok(const char *k) {
        if (!((k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z') || k[0] == '_'))
                return false;
        for (const char *p = k + 1; *p; p++)
                if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
                        return false;
        return strlen(k) <= 255;
}

static int parse_start(const json_t *o, gp_proto_start *s, const char *where, char *err, size_t errlen) {
        int r;
        const json_t *argv = json_object_get(o, "argv"), *env = json_object_get(o, "env"),
                     *wd = json_object_get(o, "workdir");
        if ((r = parse_id(o, &s->id, where, err, errlen)) < 0 ||
            (r = get_int32(o, "nnodes", false, 1, GP_PROTO_MAX_RANK + 1, 1, &s->nnodes, where, err, errlen)) < 0 ||
            (r = get_str(o, "master_addr", false, STR_CLEAN, s->master_addr, sizeof(s->master_addr), where, err,
                         errlen)) < 0 ||
            (r = get_int32(o, "master_port", false, 0, 65535, 0, &s->master_port, where, err, errlen)) < 0 ||
            (r = get_str(o, "tenant", false, STR_CLEAN, s->tenant, sizeof(s->tenant), where, err, errlen)) < 0 ||
            (r = get_str(o, "cuda_visible_devices", false, STR_CLEAN, s->cuda_visible_devices,
                         sizeof(s->cuda_visible_devices), where, err, errlen)) < 0 ||
            (r = get_str(o, "gpus", false, STR_CLEAN, s->gpus, sizeof(s->gpus), where, err, errlen)) < 0 ||
            (r = get_int(o, "timeout_s", false, 0, INT53, 0, &s->timeout_s, where, err, errlen)) < 0 ||
            (r = get_int32(o, "kill_grace_s", false, 0, 86400, 10, &s->kill_grace_s, where, err, errlen)) < 0 ||
            (r = get_int32(o, "preempt_grace_s", false, 0, 86400, 30, &s->preempt_grace_s, where, err, errlen)) <
                    0 ||
            (r = get_int(o, "max_log_bytes", false, 1, (int64_t)1 << 50, 100 << 20, &s->max_log_bytes, where, err,
                         errlen)) < 0 ||
            (r = get_str(o, "run_as", false, STR_CLEAN, s->run_as, sizeof(s->run_as), where, err, errlen)) < 0 ||
            (r = get_int(o, "array_id", false, 0, INT53, 0, &s->array_id, where, err, errlen)) < 0 ||
            (r = get_int(o, "array_index", false, 0, INT_MAX, 0, &s->array_index, where, err, errlen)) < 0 ||
            (r = get_bool(o, "fence", false, false, &s->fence, where, err, errlen)) < 0 ||
            (r = get_int32(o, "elastic_min", false, 0, GP_PROTO_MAX_GPUS, 0, &s->elastic_min, where, err, errlen)) < 0 ||
            (r = get_int32(o, "elastic_max", false, 0, GP_PROTO_MAX_GPUS, 0, &s->elastic_max, where, err, errlen)) < 0 ||
            (r = get_int32(o, "nodes_min", false, 0, GP_PROTO_MAX_RANK + 1, 0, &s->nodes_min, where, err, errlen)) < 0 ||
            (r = get_int32(o, "nodes_max", false, 0, GP_PROTO_MAX_RANK + 1, 0, &s->nodes_max, where, err, errlen)) < 0 ||
            (r = get_int(o, "mps_memory_mb", false, 0, 16 * 1024 * 1024, 0, &s->mps_memory_mb, where, err, errlen)) <
                    0 ||
            (r = get_int32(o, "mps_compute_pct", false, 0, 100, 0, &s->mps_compute_pct, where, err, errlen)) < 0 ||
            (r = get_str(o, "mps_uuid", false, STR_CLEAN, s->mps_uuid, sizeof(s->mps_uuid), where, err, errlen)) < 0)
                return r;
        if ((s->elastic_min == 0) != (s->elastic_max == 0) || s->elastic_min > s->elastic_max)
                return fail(err, errlen, "%s.elastic_min and elastic_max must be 1 <= min <= max, or both absent", where);
        if ((s->nodes_min == 0) != (s->nodes_max == 0) || s->nodes_min > s->nodes_max)
                return fail(err, errlen, "%s.nodes_min and nodes_max must be 1 <= min <= max, or both absent", where);
        if ((s->mps_memory_mb > 0) != (s->mps_compute_pct > 0))
                return fail(err, errlen, "%s.mps_memory_mb and mps_compute_pct go together", where);
        char notice[GP_NOTICE_TEXT_MAX], why[128];
        if ((r = get_str(o, "notice", false, STR_CLEAN, notice, sizeof(notice), where, err, errlen)) < 0)
                return r;
        if (notice[0] && gp_notice_parse(notice, &s->notice, why, sizeof(why)) < 0)
                return fail(err, errlen, "%s.notice: %s", where, why);
        if (gp_cgroup_limits_get(o, &s->limits) < 0)
                return fail(err, errlen, "%s.cpus and %s.host_memory_mb must be positive integers (at most %d and %lld)",
                            where, where, GP_CGROUP_MAX_CPUS, (long long)GP_CGROUP_MAX_MEMORY_MB);
        if (s->id.rank >= s->nnodes)
                return fail(err, errlen, "%s.rank must be below nnodes", where);
        if (s->run_as[0] && !gp_id_ok(s->run_as, strlen(s->run_as)))
                return fail(err, errlen, "%s.run_as must be a user name of [A-Za-z0-9._-]", where);
        if (!json_is_array(argv) || json_array_size(argv) < 1 || json_array_size(argv) > GP_PROTO_MAX_ARGV)
                return fail(err, errlen, "%s.argv must be an array of 1..%d strings", where, GP_PROTO_MAX_ARGV);
        size_t na = json_array_size(argv);
        if (!(s->argv = calloc(na + 1, sizeof(char *))))
                return -ENOMEM;
        for (size_t i = 0; i < na; i++) {
                const char *str;
                size_t n;
                char key[24];
                snprintf(key, sizeof(key), "argv[%zu]", i);
                if ((r = str_of(json_array_get(argv, i), GP_PROTO_ARG_MAX, STR_ANY, &str, &n, where, key, err,
                                errlen)) < 0)
                        return r;
                if (i == 0 && n == 0)
                        return fail(err, errlen, "%s.argv[0] is empty", where);
                if (!(s->argv[i] = strndup(str, n)))
                        return -ENOMEM;
                s->n_argv = (int)i + 1;
        }
        if (env && (!json_is_object(env) || json_object_size(env) > GP_PROTO_MAX_ENV))
                return fail(err, errlen, "%s.env must be an object of at most %d strings", where, GP_PROTO_MAX_ENV);
        if (!(s->env = calloc(json_object_size(env) + 1, sizeof(char *))))
                return -ENOMEM;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)env, k, v) {
                const char *str;
                size_t n;
                if (!env_key_ok(k))
                        return fail(err, errlen, "%s.env: a key must be [A-Za-z_][A-Za-z0-9_]*, at most 255 bytes",
                                    where);
                if ((r = str_of(v, GP_PROTO_ARG_MAX, STR_ANY, &str, &n, where, "env value", err, errlen)) < 0)
                        return r;
                size_t kn = strlen(k);
                char *e = malloc(kn + 1 + n + 1);
                if (!e)
                        return -ENOMEM;
                memcpy(e, k, kn);
                e[kn] = '=';
                memcpy(e + kn + 1, str, n);
                e[kn + 1 + n] = '\0';
                s->env[s->n_env++] = e;
        }
        const char *wds = "";
        size_t wdn = 0;
        if (wd && (r = str_of(wd, PATH_MAX - 1, STR_ANY, &wds, &wdn, where, "workdir", err, errlen)) < 0)
                return r;
        if (!(s->workdir = strndup(wds, wdn)))
                return -ENOMEM;
        return 0;
}

int gp_proto_start_copy(const gp_proto_start *s, gp_proto_start *ret) {
        gp_proto_start c = *s;
        c.argv = calloc((size_t)s->n_argv + 1, sizeof(char *));
        c.env = calloc((size_t)s->n_env + 1, sizeof(char *));
        c.workdir = strdup(s->workdir ? s->workdir : "");
        c.n_argv = c.n_env = 0;
        bool ok = c.argv && c.env && c.workdir;
        for (int i = 0; ok && i < s->n_argv; i++) {
                c.argv[i] = strdup(s->argv[i]);
                ok = c.argv[i] != NULL;
                c.n_argv += ok;
        }
        for (int i = 0; ok && i < s->n_env; i++) {
                c.env[i] = strdup(s->env[i]);
                ok = c.env[i] != NULL;
                c.n_env += ok;
        }
        if (!ok) {
                if (!c.argv)
                        c.n_argv = 0;
                if (!c.env)
                        c.n_env = 0;
                gp_proto_start_done(&c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

/* Parse an array of run ids into *ret (stride bytes apart, the id at the
 * start of each element), calling extra for the rest of each element. */
typedef int (*elem_fn)(const json_t *o, void *elem, const char *where, char *err, size_t errlen);

static int parse_list(const json_t *arr, const char *name, size_t size, void **ret, int *ret_n, elem_fn fn,
                      char *err, size_t errlen) {
        size_t n = json_array_size(arr);
        if (n == 0)
                return 0;
        char *a = calloc(n, size);
        if (!a)
                return -ENOMEM;
        *ret = a;
        for (size_t i = 0; i < n; i++) {
                char where[40];
                snprintf(where, sizeof(where), "%s[%zu]", name, i);
                *ret_n = (int)i + 1;
                int r = fn(json_array_get(arr, i), a + i * size, where, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int ack_fn(const json_t *o, void *elem, const char *where, char *err, size_t errlen) {
        return parse_id(o, elem, where, err, errlen);
}

static int start_fn(const json_t *o, void *elem, const char *where, char *err, size_t errlen) {
        if (!json_is_object(o))
                return fail(err, errlen, "%s must be an object", where);
        return parse_start(o, elem, where, err, errlen);
}

static int stop_fn(const json_t *o, void *elem, const char *where, char *err, size_t errlen) {
        gp_proto_stop *s = elem;
        char why[16];
        int r;
        if ((r = parse_id(o, &s->id, where, err, errlen)) < 0 ||
            (r = get_str(o, "why", true, STR_ANY, why, sizeof(why), where, err, errlen)) < 0)
                return r;
        if (gp_proto_stop_parse(why, &s->why) < 0)
                return fail(err, errlen, "%s.why must be cancel, preempt or stale", where);
        return 0;
}

static int resize_fn(const json_t *o, void *elem, const char *where, char *err, size_t errlen) {
        gp_proto_resize *s = elem;
        bool has;
        int r;
        if ((r = parse_id(o, &s->id, where, err, errlen)) < 0 ||
            (r = get_mask(o, "cuda_visible_devices", &has, &s->gpus, where, err, errlen)) < 0)
                return r;
        if (!has)
                return fail(err, errlen, "%s.cuda_visible_devices is missing", where);
        return 0;
}

static int offset_fn(const json_t *o, void *elem, const char *where, char *err, size_t errlen) {
        gp_proto_offset *s = elem;
        int r;
        if ((r = parse_id(o, &s->id, where, err, errlen)) < 0 ||
            (r = get_int(o, "offset", true, 0, INT53, 0, &s->offset, where, err, errlen)) < 0)
                return r;
        return 0;
}

int gp_proto_sync_answer_parse(const char *data, size_t len, gp_proto_sync_answer *ret, char *err, size_t errlen) {
        json_t *j;
        gp_proto_sync_answer m = {0};
        const json_t *ack, *start, *stop, *offs, *rsz;
        int r = load(data, len, GP_PROTO_MAX_ANSWER, &j, err, errlen);
        if (r < 0)
                return r;
        if ((r = get_int(j, "seq", true, 1, INT64_MAX, 0, &m.seq, "", err, errlen)) < 0 ||
            (r = get_int32(j, "heartbeat_s", false, 1, 60, 2, &m.heartbeat_s, "", err, errlen)) < 0 ||
            (r = get_int32(j, "fence_s", false, 0, 3600, 0, &m.fence_s, "", err, errlen)) < 0 ||
            (r = get_bool(j, "want_full", false, false, &m.want_full, "", err, errlen)) < 0 ||
            (r = get_max_body(j, &m.max_body, err, errlen)) < 0 ||
            (r = get_int32(j, "gpu_poll_ms", false, 100, 3600000, 0, &m.gpu_poll_ms, "", err, errlen)) < 0 ||
            (r = get_array(j, "ack", GP_PROTO_MAX_RUNS, &ack, err, errlen)) < 0 ||
            (r = get_array(j, "start", GP_PROTO_MAX_RUNS, &start, err, errlen)) < 0 ||
            (r = get_array(j, "stop", GP_PROTO_MAX_RUNS, &stop, err, errlen)) < 0 ||
            (r = get_array(j, "log_offsets", GP_PROTO_MAX_RUNS, &offs, err, errlen)) < 0 ||
            (r = get_array(j, "resize", GP_PROTO_MAX_RUNS, &rsz, err, errlen)) < 0)
                goto out;
        if ((ack && (r = parse_list(ack, "ack", sizeof(*m.ack), (void **)&m.ack, &m.n_ack, ack_fn, err, errlen)) <
                            0) ||
            (start && (r = parse_list(start, "start", sizeof(*m.start), (void **)&m.start, &m.n_start, start_fn, err,
                                      errlen)) < 0) ||
            (stop && (r = parse_list(stop, "stop", sizeof(*m.stop), (void **)&m.stop, &m.n_stop, stop_fn, err,
                                     errlen)) < 0) ||
            (offs && (r = parse_list(offs, "log_offsets", sizeof(*m.offsets), (void **)&m.offsets, &m.n_offsets,
                                     offset_fn, err, errlen)) < 0) ||
            (rsz && (r = parse_list(rsz, "resize", sizeof(*m.resize), (void **)&m.resize, &m.n_resize, resize_fn,
                                    err, errlen)) < 0) ||
            (r = ids_unique(m.start ? &m.start[0].id : NULL, sizeof(*m.start), m.n_start, "start", err, errlen)) < 0 ||
            (r = ids_unique(m.resize ? &m.resize[0].id : NULL, sizeof(*m.resize), m.n_resize, "resize", err,
                            errlen)) < 0)
                goto out;
        *ret = m;
        memset(&m, 0, sizeof(m));
out:
        gp_proto_sync_answer_done(&m);
        json_decref(j);
        return r;
}

static json_t *start_to_json(const gp_proto_start *s) {
        json_t *o = id_to_json(&s->id), *argv = json_array(), *env = json_object();
        int r = o && argv && env ? 0 : -ENOMEM;
        for (int i = 0; r == 0 && i < s->n_argv; i++)
                r = append(argv, json_string(s->argv[i]));
        for (int i = 0; r == 0 && i < s->n_env; i++) {
                const char *eq = strchr(s->env[i], '=');
                if (!eq)
                        continue;
                char key[256];
                size_t kn = (size_t)(eq - s->env[i]);
                if (kn >= sizeof(key))
                        continue;
                memcpy(key, s->env[i], kn);
                key[kn] = '\0';
                r = set(env, key, json_string(eq + 1));
        }
        json_t *rest = r == 0 ? json_pack("{s:i, s:s, s:i, s:s, s:s, s:s, s:s, s:I, s:i, s:i, s:I, s:s, s:I, s:I, s:b}",
                                          "nnodes", s->nnodes, "master_addr", s->master_addr, "master_port",
                                          s->master_port, "tenant", s->tenant, "workdir",
                                          s->workdir ? s->workdir : "", "cuda_visible_devices",
                                          s->cuda_visible_devices, "gpus", s->gpus, "timeout_s",
                                          (json_int_t)s->timeout_s, "kill_grace_s", s->kill_grace_s,
                                          "preempt_grace_s", s->preempt_grace_s, "max_log_bytes",
                                          (json_int_t)s->max_log_bytes, "run_as", s->run_as, "array_id",
                                          (json_int_t)s->array_id, "array_index", (json_int_t)s->array_index,
                                          "fence", s->fence)
                                : NULL;
        if (rest && s->mps_memory_mb > 0 &&
            (set(rest, "mps_memory_mb", json_integer(s->mps_memory_mb)) < 0 ||
             set(rest, "mps_compute_pct", json_integer(s->mps_compute_pct)) < 0 ||
             set(rest, "mps_uuid", json_string(s->mps_uuid)) < 0)) {
                json_decref(rest);
                rest = NULL;
        }
        char notice[GP_NOTICE_TEXT_MAX];
        if (rest && ((s->elastic_max && (set(rest, "elastic_min", json_integer(s->elastic_min)) < 0 ||
                                         set(rest, "elastic_max", json_integer(s->elastic_max)) < 0)) ||
                     (s->nodes_max && (set(rest, "nodes_min", json_integer(s->nodes_min)) < 0 ||
                                       set(rest, "nodes_max", json_integer(s->nodes_max)) < 0)))) {
                json_decref(rest);
                rest = NULL;
        }
        if (rest && s->notice.signo &&
            (gp_notice_format(&s->notice, notice, sizeof(notice)) < 0 ||
             set(rest, "notice", json_string(notice)) < 0)) {
                json_decref(rest);
                rest = NULL;
        }
        if (rest && gp_cgroup_limits_set(rest, &s->limits) < 0) {
                json_decref(rest);
                rest = NULL;
        }
        if (!rest || json_object_update(o, rest) < 0 || set(o, "argv", argv) < 0) {
                json_decref(rest);
                json_decref(o);
                json_decref(argv);
                json_decref(env);
                return NULL;
        }
        json_decref(rest);
        argv = NULL;
        if (set(o, "env", env) < 0) {
                json_decref(o);
                json_decref(env);
                return NULL;
        }
        return o;
}

int gp_proto_sync_answer_render(const gp_proto_sync_answer *m, char **ret) {
        if (m->n_ack < 0 || m->n_ack > GP_PROTO_MAX_RUNS || m->n_start < 0 || m->n_start > GP_PROTO_MAX_RUNS ||
            m->n_stop < 0 || m->n_stop > GP_PROTO_MAX_RUNS || m->n_offsets < 0 || m->n_offsets > GP_PROTO_MAX_RUNS ||
            m->n_resize < 0 || m->n_resize > GP_PROTO_MAX_RUNS)
                return -EINVAL;
        json_t *j = json_pack("{s:I, s:i, s:i, s:b}", "seq", (json_int_t)m->seq, "heartbeat_s", m->heartbeat_s,
                              "fence_s", m->fence_s, "want_full", m->want_full);
        json_t *ack = json_array(), *start = json_array(), *stop = json_array(), *offs = json_array();
        int r = j ? 0 : -ENOMEM;
        if (r == 0 && m->max_body)
                r = set(j, "max_body", json_integer(m->max_body));
        if (r == 0 && m->gpu_poll_ms)
                r = set(j, "gpu_poll_ms", json_integer(m->gpu_poll_ms));
        for (int i = 0; r == 0 && i < m->n_ack; i++)
                r = append(ack, id_to_json(&m->ack[i]));
        for (int i = 0; r == 0 && i < m->n_start; i++)
                r = append(start, start_to_json(&m->start[i]));
        for (int i = 0; r == 0 && i < m->n_stop; i++)
                r = append(stop, id_with(&m->stop[i].id, "why", json_string(gp_proto_stop_name(m->stop[i].why))));
        for (int i = 0; r == 0 && i < m->n_offsets; i++)
                r = append(offs, id_with(&m->offsets[i].id, "offset", json_integer(m->offsets[i].offset)));
        if (r == 0)
                r = set(j, "ack", ack);
        else
                json_decref(ack);
        ack = NULL;
        if (r == 0)
                r = set(j, "start", start);
        else
                json_decref(start);
        start = NULL;
        if (r == 0)
                r = set(j, "stop", stop);
        else
                json_decref(stop);
        stop = NULL;
        if (r == 0)
                r = set(j, "log_offsets", offs);
        else
                json_decref(offs);
        if (r == 0 && m->n_resize) {
                json_t *rsz = json_array();
                for (int i = 0; r == 0 && i < m->n_resize; i++)
                        r = append(rsz, id_with(&m->resize[i].id, "cuda_visible_devices",
                                                mask_to_json(&m->resize[i].gpus)));
                if (r == 0)
                        r = set(j, "resize", rsz);
                else
                        json_decref(rsz);
        }
        if (r < 0) {
                json_decref(j);
                return r;
        }
        return dump(j, ret);
}

char *gp_proto_error_render(const char *msg) {
        char *s = NULL;
        return dump(json_pack("{s:s}", "error", msg), &s) == 0 ? s : NULL;
}

char *gp_proto_replay_render(const char *msg, int64_t last) {
        char *s = NULL;
        return dump(json_pack("{s:s, s:I}", "error", msg, "seq", (json_int_t)last), &s) == 0 ? s : NULL;
}

int gp_proto_replay_parse(const char *data, size_t len, int64_t *ret) {
        json_t *j;
        char err[8];
        int64_t v;
        int r = load(data, len, GP_PROTO_MAX_ANSWER, &j, err, sizeof(err));
        if (r < 0)
                return -EINVAL;
        r = json_object_get(j, "seq") ? get_int(j, "seq", true, 0, INT64_MAX, 0, &v, "", err, sizeof(err)) : -EINVAL;
        json_decref(j);
        if (r < 0)
                return -EINVAL;
        *ret = v;
        return 0;
}
