/* cli.c - gp_cli_main: parse, dispatch, one function per command.
 *
 * Every command follows the same path: gp_cli_parse (usage errors exit 2
 * before any request), one or a few HTTP calls (gp_cli_http_*), then
 * gp_cli_check turns the outcome into an exit code and a message (1: the
 * server said no, 3: unreachable), and the answer is printed either as the
 * server's JSON (--json) or through format.c.  Results go to `out`,
 * messages to `err`; nothing else is written.
 */
#include "cli/cli-int.h"
#include "cli/unix.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/exe.h"
#include "base/sha256.h"
#include "base/util.h"
#include "core/array.h"

#define LOGS_RETRIES 10   /* reconnects of `logs -f` after a dropped stream */

static void msg_clean(FILE *err, const char *s) {
        gp_buf b;
        gp_buf_init(&b, 64 * 1024);
        if (gp_cli_put_clean(&b, s, 0) == 0 && b.data)
                fputs(b.data, err);
        gp_buf_done(&b);
}

int gp_cli_check(FILE *err, int rc, const gp_cli_resp *r, const gp_buf *msg) {
        const char *m = msg && msg->data ? msg->data : "";
        switch (rc) {
        case 0:
                break;
        case -EHOSTUNREACH:
                fprintf(err, "gpupool: %s\n", m);
                return GP_CLI_EXIT_UNREACHABLE;
        case -EINVAL:
                fprintf(err, "gpupool: %s\n", m);
                return GP_CLI_EXIT_USAGE;
        case -ECANCELED:
                fprintf(err, "gpupool: interrupted\n");
                return GP_CLI_EXIT_REFUSED;
        case -ENOMEM:
                fprintf(err, "gpupool: out of memory\n");
                return GP_CLI_EXIT_REFUSED;
        default:
                fprintf(err, "gpupool: %s\n", *m ? m : gp_strerror(rc));
                return GP_CLI_EXIT_REFUSED;
        }
        if (r->status >= 200 && r->status < 300 && json_is_object(r->json))
                return GP_CLI_EXIT_OK;
        json_t *e = json_object_get(r->json, "error");
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *text = json_string_value(json_object_get(e, "message"));
        if (json_is_string(e)) /* {"error": "..."}: the agent routes' shape */
                text = json_string_value(e);
        if (r->status == 507) { /* Insufficient Storage: nothing was changed, it is worth trying again */
                fputs("gpupool: the server's disk is full; try again later", err);
                if (r->retry_after >= 0)
                        fprintf(err, " (retry after %ld s)", r->retry_after);
                if (text) {
                        fputs(": ", err);
                        msg_clean(err, text);
                }
                fputc('\n', err);
                return GP_CLI_EXIT_REFUSED;
        }
        if (r->status >= 400 && (code || text)) {
                fputs("gpupool: ", err);
                msg_clean(err, code ? code : "error");
                if (text) {
                        fputs(": ", err);
                        msg_clean(err, text);
                }
                if (r->status == 429 && r->retry_after >= 0)
                        fprintf(err, " (retry after %ld s)", r->retry_after);
                if (r->status == 401)
                        fputs(" (pass --key KEY or set GPUPOOL_API_KEY)", err);
                fputc('\n', err);
                return GP_CLI_EXIT_REFUSED;
        }
        if (r->status >= 400)
                fprintf(err, "gpupool: the server answered HTTP %ld", r->status);
        else
                fprintf(err, "gpupool: unexpected answer from the server (HTTP %ld, %s)", r->status,
                        r->json ? "not a JSON object" : "not JSON");
        if (r->text && *r->text) {
                fputs(": ", err);
                char *nl = strpbrk(r->text, "\r\n");
                if (nl)
                        *nl = '\0'; /* first line only; r is ours to spoil */
                msg_clean(err, r->text);
        }
        fputc('\n', err);
        return GP_CLI_EXIT_REFUSED;
}

static int print_json(FILE *out, const json_t *j) {
        if (json_dumpf(j, out, JSON_INDENT(2)) < 0)
                return -EIO;
        fputc('\n', out);
        return 0;
}

static int print_buf(FILE *out, FILE *err, int r, gp_buf *b) {
        if (r < 0) {
                fprintf(err, "gpupool: cannot format the answer: %s\n", gp_strerror(r));
                return GP_CLI_EXIT_REFUSED;
        }
        if (b->len)
                fwrite(b->data, 1, b->len, out);
        return GP_CLI_EXIT_OK;
}

/* One JSON call; on success *ret holds the answer.  Returns an exit code. */
static int call(const gp_cli_cmd *c, FILE *err, const char *method, const char *path,
                const json_t *body, gp_cli_resp *ret) {
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert};
        gp_buf msg;
        gp_buf_init(&msg, 4096);
        memset(ret, 0, sizeof(*ret));
        int rc = gp_cli_http_json(&conn, method, path, body, GP_CLI_REQUEST_TIMEOUT_S, ret, &msg);
        int ex = gp_cli_check(err, rc, ret, &msg);
        gp_buf_done(&msg);
        if (ex != GP_CLI_EXIT_OK)
                gp_cli_resp_done(ret);
        return ex;
}

int gp_cli_call(const gp_cli_cmd *c, FILE *err, const char *method, const char *path, const json_t *body,
                gp_cli_resp *ret) {
        return call(c, err, method, path, body, ret);
}

int gp_cli_resolve_ref(const gp_cli_cmd *c, FILE *err, const gp_cli_ref *ref, int64_t *ret_id) {
        if (!ref->array || ref->index < 0) {
                *ret_id = ref->id;
                return GP_CLI_EXIT_OK;
        }
        char path[64];
        gp_cli_resp r;
        snprintf(path, sizeof(path), "/api/v1/arrays/%" PRId64, ref->id);
        int ex = call(c, err, "GET", path, NULL, &r);
        if (ex)
                return ex;
        /* elements have consecutive task ids in index order (docs/api.md) */
        const char *spec = json_string_value(json_object_get(r.json, "array"));
        json_t *first = json_object_get(r.json, "first_task_id");
        gp_array_spec a = {0};
        char why[160];
        ex = GP_CLI_EXIT_REFUSED;
        if (!spec || !json_is_integer(first) ||
            gp_array_spec_parse(spec, strlen(spec), GP_ARRAY_MAX_ELEMS, &a, why, sizeof(why)) < 0) {
                fprintf(err, "gpupool: unexpected answer from the server (array %" PRId64 " without its spec)\n",
                        ref->id);
                goto out;
        }
        size_t lo = 0, hi = a.n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (a.idx[mid] < ref->index)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo >= a.n || a.idx[lo] != ref->index) {
                fprintf(err, "gpupool: job array %" PRId64 " has no element %" PRId64 "\n", ref->id, ref->index);
                goto out;
        }
        *ret_id = (int64_t)json_integer_value(first) + (int64_t)lo;
        ex = GP_CLI_EXIT_OK;
out:
        gp_array_spec_done(&a);
        gp_cli_resp_done(&r);
        return ex;
}

#define PS_MAX_ARRAYS 64  /* arrays ps folds (one GET each); more stay one line per element */
#define PS_MAX_PAGES 10   /* pages of 1000 tasks ps reads to fill its lines when folding */

static int cmd_ps(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_buf path, text;
        gp_cli_resp r;
        int ex = GP_CLI_EXIT_REFUSED, rc = 0;
        const char *sep = "?";
        const char *state = c->state ? c->state : (c->all ? NULL : "active");

        gp_buf_init(&path, 4096);
        gp_buf_init(&text, GP_CLI_BODY_MAX);
        rc |= gp_buf_puts(&path, "/api/v1/tasks");
        if (state) {
                rc |= gp_buf_printf(&path, "%sstate=", sep);
                rc |= gp_cli_url_escape(state, &path);
                sep = "&";
        }
        if (c->tenant) {
                rc |= gp_buf_printf(&path, "%stenant=", sep);
                rc |= gp_cli_url_escape(c->tenant, &path);
                sep = "&";
        }
        char me[64];
        const char *user = c->me && gp_cli_self_name(me, sizeof(me)) == 0 ? me : c->user;
        if (user) {
                rc |= gp_buf_printf(&path, "%suser=", sep);
                rc |= gp_cli_url_escape(user, &path);
                sep = "&";
        }
        /* folding: whole pages, so that an array's elements do not crowd
         * out the other tasks (lines are counted after folding) */
        if (!c->expand)
                rc |= gp_buf_printf(&path, "%slimit=1000", sep);
        else if (c->limit)
                rc |= gp_buf_printf(&path, "%slimit=%" PRId64, sep, c->limit);
        if (rc) {
                fprintf(err, "gpupool: out of memory\n");
                goto out;
        }
        ex = call(c, err, "GET", path.data, NULL, &r);
        if (ex)
                goto out;
        json_t *shown = r.json, *folded = NULL;
        size_t want = c->limit ? (size_t)c->limit : 100;
        for (int page = 1; !c->expand && page < PS_MAX_PAGES; page++) {
                /* more pages while the lines so far (arrays folded) are fewer than wanted */
                json_t *tasks = json_object_get(r.json, "tasks"), *next = json_object_get(r.json, "next_after");
                int64_t ids[PS_MAX_ARRAYS];
                size_t narr = gp_cli_ps_array_ids(r.json, ids, PS_MAX_ARRAYS), nplain = 0, i;
                json_t *t;
                json_array_foreach(tasks, i, t) if (!json_is_integer(json_object_get(t, "array_id"))) nplain++;
                if (!json_is_integer(next) || nplain + narr > want)
                        break;
                char more[4200];
                gp_cli_resp r2;
                snprintf(more, sizeof(more), "%s&after=%" PRId64, path.data, (int64_t)json_integer_value(next));
                if (call(c, err, "GET", more, NULL, &r2) != GP_CLI_EXIT_OK)
                        break;
                json_array_extend(tasks, json_object_get(r2.json, "tasks"));
                json_object_set(r.json, "next_after", json_object_get(r2.json, "next_after"));
                gp_cli_resp_done(&r2);
        }
        if (!c->expand) {
                /* each job array as one line: its counts from GET /api/v1/arrays/{id} */
                int64_t ids[PS_MAX_ARRAYS];
                json_t *arrays[PS_MAX_ARRAYS] = {NULL};
                size_t n = gp_cli_ps_array_ids(r.json, ids, PS_MAX_ARRAYS);
                if (n > PS_MAX_ARRAYS)
                        n = PS_MAX_ARRAYS; /* the rest stay unfolded */
                for (size_t k = 0; k < n; k++) {
                        char ap[64];
                        gp_cli_resp ar;
                        snprintf(ap, sizeof(ap), "/api/v1/arrays/%" PRId64, ids[k]);
                        if (call(c, err, "GET", ap, NULL, &ar) == GP_CLI_EXIT_OK) {
                                arrays[k] = json_incref(ar.json);
                                gp_cli_resp_done(&ar);
                        }
                }
                if (n)
                        folded = gp_cli_ps_fold(r.json, arrays, ids, n);
                for (size_t k = 0; k < n; k++)
                        json_decref(arrays[k]);
                if (folded)
                        shown = folded;
                /* at most `want` lines; the footer says when more exist */
                json_t *lines = json_object_get(shown, "tasks");
                if (json_is_array(lines) && json_array_size(lines) > want) {
                        while (json_array_size(lines) > want)
                                json_array_remove(lines, json_array_size(lines) - 1);
                        if (!json_is_integer(json_object_get(shown, "next_after")))
                                json_object_set_new(shown, "next_after", json_integer(0));
                }
        }
        if (c->json) {
                print_json(out, shown);
        } else {
                rc = gp_cli_format_ps(shown, gp_now_ms(), c->all || c->state || c->tenant, &text);
                ex = print_buf(out, err, rc, &text);
        }
        json_decref(folded);
        gp_cli_resp_done(&r);
out:
        gp_buf_done(&path);
        gp_buf_done(&text);
        return ex;
}

static int task_path(gp_buf *b, int64_t id, const char *suffix) {
        gp_buf_init(b, 256);
        return gp_buf_printf(b, "/api/v1/tasks/%" PRId64 "%s", id, suffix);
}

/* status ID, after the task: its runs, one line each.  The task was
 * shown: a server that cannot say (an older one: 404) leaves them out,
 * quietly. */
static int status_runs(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_buf path, text, msg;
        gp_cli_resp r;
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert};
        task_path(&path, c->id, "/runs");
        gp_buf_init(&msg, 4096);
        memset(&r, 0, sizeof(r));
        int rc = gp_cli_http_json(&conn, "GET", path.data, NULL, GP_CLI_REQUEST_TIMEOUT_S, &r, &msg);
        gp_buf_done(&path);
        gp_buf_done(&msg);
        if (rc < 0 || r.status != 200 || !json_is_array(json_object_get(r.json, "items"))) {
                gp_cli_resp_done(&r);
                return GP_CLI_EXIT_OK;
        }
        int ex;
        gp_buf_init(&text, GP_CLI_BODY_MAX);
        ex = print_buf(out, err, gp_cli_format_runs(r.json, &text), &text);
        gp_buf_done(&text);
        gp_cli_resp_done(&r);
        return ex;
}

static int cmd_status(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_buf path, text;
        gp_cli_resp r;
        int ex;
        task_path(&path, c->id, "");
        gp_buf_init(&text, GP_CLI_BODY_MAX);
        ex = call(c, err, "GET", path.data, NULL, &r);
        if (ex == 0) {
                if (!json_is_integer(json_object_get(r.json, "id"))) {
                        fprintf(err, "gpupool: unexpected answer from the server (no task id)\n");
                        ex = GP_CLI_EXIT_REFUSED;
                } else if (c->json) {
                        print_json(out, r.json);
                } else {
                        ex = print_buf(out, err, gp_cli_format_status(r.json, gp_now_ms(), &text), &text);
                        if (ex == 0)
                                ex = status_runs(c, out, err);
                }
                gp_cli_resp_done(&r);
        }
        gp_buf_done(&path);
        gp_buf_done(&text);
        return ex;
}

#define CANCEL_SETTLE_MS 15000  /* how long cancel waits for a running task to stop */

/* cancel --array ID, cancel ID_INDEX.  pre: "ID: " before the line when
 * several ids are cancelled. */
static int cancel_array(const gp_cli_cmd *c, const gp_cli_ref *ref, const char *pre, FILE *out, FILE *err) {
        char path[64];
        gp_cli_resp r;
        snprintf(path, sizeof(path), "/api/v1/arrays/%" PRId64 "/cancel", ref->id);
        json_t *body = ref->index >= 0 ? json_pack("{s:I}", "index", (json_int_t)ref->index) : json_object();
        if (!body) {
                fprintf(err, "gpupool: out of memory\n");
                return GP_CLI_EXIT_REFUSED;
        }
        int ex = call(c, err, "POST", path, body, &r);
        json_decref(body);
        if (ex)
                return ex;
        if (c->json) {
                print_json(out, r.json);
        } else {
                int64_t nc = json_integer_value(json_object_get(r.json, "cancelled"));
                int64_t ns = json_integer_value(json_object_get(r.json, "stopping"));
                fprintf(out, "%scancelled %" PRId64 ", stopping %" PRId64 "\n", pre, nc, ns);
        }
        gp_cli_resp_done(&r);
        return GP_CLI_EXIT_OK;
}

/* cancel -u USER / --me (scancel -u): every active task of the user. */
static int cmd_cancel_user(const gp_cli_cmd *c, FILE *out, FILE *err) {
        char me[64], path[200];
        const char *user = c->me ? (gp_cli_self_name(me, sizeof(me)) == 0 ? me : NULL) : c->user;
        if (!user) {
                fprintf(err, "gpupool: cannot tell your user name\n");
                return GP_CLI_EXIT_REFUSED;
        }
        int64_t n = 0, failed = 0;
        for (int round = 0; round < 100; round++) {
                gp_cli_resp r;
                snprintf(path, sizeof(path), "/api/v1/tasks?state=active&limit=1000&user=%s", user);
                int ex = call(c, err, "GET", path, NULL, &r);
                if (ex)
                        return ex;
                json_t *tasks = json_object_get(r.json, "tasks"), *t;
                size_t i, left = 0;
                json_array_foreach(tasks, i, t) {
                        json_int_t id = json_integer_value(json_object_get(t, "id"));
                        gp_cli_resp cr;
                        snprintf(path, sizeof(path), "/api/v1/tasks/%" JSON_INTEGER_FORMAT "/cancel", id);
                        if (call(c, err, "POST", path, NULL, &cr) == GP_CLI_EXIT_OK) {
                                gp_cli_resp_done(&cr);
                                n++;
                        } else {
                                failed++;
                        }
                        left++;
                }
                gp_cli_resp_done(&r);
                if (left < 1000)
                        break;
        }
        fprintf(out, "cancelled %" PRId64 " task(s) of %s\n", n, user);
        return failed ? GP_CLI_EXIT_REFUSED : GP_CLI_EXIT_OK;
}

/* Cancel task id; prints its resulting state (after a running one has had
 * a little time to stop). */
static int cancel_task(const gp_cli_cmd *c, int64_t id, const char *pre, FILE *out, FILE *err) {
        gp_buf path;
        gp_cli_resp r;
        int ex;
        task_path(&path, id, "/cancel");
        ex = call(c, err, "POST", path.data, NULL, &r);
        gp_buf_done(&path);
        if (ex)
                return ex;
        /* the array's id names its first element: say that only it was cancelled */
        json_t *aid = json_object_get(r.json, "array_id");
        if (json_is_integer(aid) && json_integer_value(aid) == id)
                fprintf(err, "gpupool: %" PRId64 " is job array %" PRId64 "'s first element (%" PRId64 "_%" PRId64
                             "): only it is cancelled; to cancel the whole array: gpupool cancel --array %" PRId64
                             "\n",
                        id, id, id, (int64_t)json_integer_value(json_object_get(r.json, "array_index")), id);
        /* A running batch task stops asynchronously (its supervisor gets
         * SIGTERM); wait a little so the state printed is the result. */
        const char *state = json_string_value(json_object_get(r.json, "state"));
        int64_t deadline = gp_mono_ms() + CANCEL_SETTLE_MS;
        task_path(&path, id, "");
        while (state && strcmp(state, "running") == 0 && gp_mono_ms() < deadline) {
                gp_cli_resp again;
                usleep(200 * 1000);
                if (call(c, err, "GET", path.data, NULL, &again) != GP_CLI_EXIT_OK)
                        break;
                gp_cli_resp_done(&r);
                r = again;
                state = json_string_value(json_object_get(r.json, "state"));
        }
        gp_buf_done(&path);
        if (c->json) {
                print_json(out, r.json);
        } else {
                gp_buf b;
                gp_buf_init(&b, 256);
                gp_cli_put_clean(&b, state ? state : "unknown", 32);
                fprintf(out, "%s%s\n", pre, b.data ? b.data : "");
                gp_buf_done(&b);
        }
        if (state && strcmp(state, "running") == 0)
                fprintf(err, "gpupool: task %" PRId64 " is still stopping; 'gpupool status %" PRId64
                             "' shows when it has\n", id, id);
        else if (state && strcmp(state, "cancelled") != 0 && strcmp(state, "queued") != 0)
                fprintf(err, "gpupool: task %" PRId64 " had already ended\n", id);
        gp_cli_resp_done(&r);
        return GP_CLI_EXIT_OK;
}

#define CANCEL_LIST_MAX 100000  /* tasks one cancel --state may name (the largest job array) */

static bool state_matches(const char *want, const char *st) {
        if (!st)
                return false;
        if (!strcmp(want, "active"))
                return !strcmp(st, "queued") || !strcmp(st, "running");
        return !strcmp(want, st);
}

/* The ids of the tasks in state c->cancel_state that a list query names
 * (GET /api/v1/tasks?state=..., every page), at most CANCEL_LIST_MAX. */
static int list_ids(const gp_cli_cmd *c, FILE *err, int64_t array_id, int64_t **ret, size_t *ret_n) {
        int64_t *ids = NULL, after = 0;
        size_t n = 0, cap = 0;
        for (;;) {
                gp_buf path;
                gp_cli_resp r;
                gp_buf_init(&path, 4096);
                int rc = gp_buf_printf(&path, "/api/v1/tasks?limit=1000&state=");
                rc |= gp_cli_url_escape(c->cancel_state, &path);
                if (c->tenant) {
                        rc |= gp_buf_puts(&path, "&tenant=");
                        rc |= gp_cli_url_escape(c->tenant, &path);
                }
                if (array_id > 0)
                        rc |= gp_buf_printf(&path, "&array=%" PRId64, array_id);
                if (after > 0)
                        rc |= gp_buf_printf(&path, "&after=%" PRId64, after);
                int ex = rc ? GP_CLI_EXIT_REFUSED : call(c, err, "GET", path.data, NULL, &r);
                gp_buf_done(&path);
                if (ex) {
                        free(ids);
                        return ex;
                }
                size_t i;
                json_t *t;
                json_array_foreach(json_object_get(r.json, "tasks"), i, t) {
                        json_t *id = json_object_get(t, "id");
                        if (!json_is_integer(id) ||
                            !state_matches(c->cancel_state, json_string_value(json_object_get(t, "state"))))
                                continue;
                        if (n >= CANCEL_LIST_MAX)
                                break;
                        if (n == cap) {
                                size_t nc = cap ? cap * 2 : 64;
                                int64_t *g = realloc(ids, nc * sizeof(*g));
                                if (!g) {
                                        free(ids);
                                        gp_cli_resp_done(&r);
                                        return GP_CLI_EXIT_REFUSED;
                                }
                                ids = g;
                                cap = nc;
                        }
                        ids[n++] = (int64_t)json_integer_value(id);
                }
                json_t *next = json_object_get(r.json, "next_after");
                after = json_is_integer(next) ? (int64_t)json_integer_value(next) : 0;
                gp_cli_resp_done(&r);
                if (after <= 0 || n >= CANCEL_LIST_MAX)
                        break;
        }
        *ret = ids;
        *ret_n = n;
        return GP_CLI_EXIT_OK;
}

/* cancel --state S [--tenant T] (no id), or cancel --state S --array ID:
 * every task listed in state S, one line each. */
static int cancel_listed(const gp_cli_cmd *c, int64_t array_id, FILE *out, FILE *err) {
        int64_t *ids = NULL;
        size_t n = 0;
        int ex = list_ids(c, err, array_id, &ids, &n), worst = ex;
        for (size_t i = 0; i < n; i++) {
                char pre[32];
                snprintf(pre, sizeof(pre), "%" PRId64 ": ", ids[i]);
                ex = cancel_task(c, ids[i], pre, out, err);
                if (ex > worst)
                        worst = ex;
        }
        if (worst == GP_CLI_EXIT_OK && n == 0)
                fprintf(err, "gpupool: no task is %s\n", c->cancel_state);
        free(ids);
        return worst;
}

static int cancel_ref(const gp_cli_cmd *c, const gp_cli_ref *ref, bool several, FILE *out, FILE *err) {
        char pre[48] = "";
        if (several) {
                if (ref->array && ref->index >= 0)
                        snprintf(pre, sizeof(pre), "%" PRId64 "_%" PRId64 ": ", ref->id, ref->index);
                else
                        snprintf(pre, sizeof(pre), "%" PRId64 ": ", ref->id);
        }
        if (ref->array && ref->index < 0)
                return c->cancel_state ? cancel_listed(c, ref->id, out, err) : cancel_array(c, ref, pre, out, err);
        if (c->cancel_state) {
                /* only when the task is in that state now */
                int64_t id;
                gp_buf path;
                gp_cli_resp r;
                int ex = gp_cli_resolve_ref(c, err, ref, &id);
                if (ex)
                        return ex;
                task_path(&path, id, "");
                ex = call(c, err, "GET", path.data, NULL, &r);
                gp_buf_done(&path);
                if (ex)
                        return ex;
                const char *st = json_string_value(json_object_get(r.json, "state"));
                bool match = state_matches(c->cancel_state, st);
                if (!match) {
                        gp_buf b;
                        gp_buf_init(&b, 256);
                        gp_cli_put_clean(&b, st ? st : "unknown", 32);
                        fprintf(out, "%s%s (not %s: left alone)\n", pre, b.data ? b.data : "", c->cancel_state);
                        gp_buf_done(&b);
                }
                gp_cli_resp_done(&r);
                if (!match)
                        return GP_CLI_EXIT_OK;
                if (ref->array)
                        return cancel_array(c, ref, pre, out, err);
                return cancel_task(c, id, pre, out, err);
        }
        if (ref->array)
                return cancel_array(c, ref, pre, out, err);
        return cancel_task(c, ref->id, pre, out, err);
}

/* cancel [--state S] [ID | ID_INDEX | --array ID]...: each in turn; the
 * exit code is the worst one's. */
static int cmd_cancel(const gp_cli_cmd *c, FILE *out, FILE *err) {
        if ((c->user || c->me) && c->n_refs == 0 && !c->cancel_state)
                return cmd_cancel_user(c, out, err); /* scancel -u */
        if (c->n_refs == 0)
                return cancel_listed(c, 0, out, err);
        int worst = GP_CLI_EXIT_OK;
        for (size_t i = 0; i < c->n_refs; i++) {
                int ex = cancel_ref(c, &c->refs[i], c->n_refs > 1, out, err);
                if (ex > worst)
                        worst = ex;
        }
        return worst;
}

/* The task's state into *ret_state ("" if missing).  Returns an exit code. */
static int task_state(const gp_cli_cmd *c, FILE *err, char *ret_state, size_t size) {
        gp_buf path;
        gp_cli_resp r;
        task_path(&path, c->id, "");
        int ex = call(c, err, "GET", path.data, NULL, &r);
        gp_buf_done(&path);
        if (ex)
                return ex;
        const char *st = json_string_value(json_object_get(r.json, "state"));
        gp_strlcpy(ret_state, st ? st : "", size);
        gp_cli_resp_done(&r);
        return GP_CLI_EXIT_OK;
}

/* How many runs the task has had (its "runs"); 0 when none, when the
 * server does not say, or when it cannot be asked (the logs request that
 * follows reports that). */
static int64_t task_runs(const gp_cli_cmd *c) {
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert};
        gp_buf path, msg;
        gp_cli_resp r = {0};
        int64_t n = 0;
        task_path(&path, c->id, "");
        gp_buf_init(&msg, 4096);
        if (gp_cli_http_json(&conn, "GET", path.data, NULL, GP_CLI_REQUEST_TIMEOUT_S, &r, &msg) == 0 &&
            r.status == 200) {
                json_int_t v = json_integer_value(json_object_get(r.json, "runs"));
                n = v > 0 ? (int64_t)v : 0;
        }
        gp_cli_resp_done(&r);
        gp_buf_done(&msg);
        gp_buf_done(&path);
        return n;
}

/* logs [-f] [--run N] [--rank N] ID.  A follow pins the run it starts at
 * (the task's last when --run is not given), so that a stream taken up
 * again after a break asks for the same bytes: the server's follow stream
 * runs from that run into every later one, with a line before each. */
static int cmd_logs(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_cli_conn conn = {.api = c->api, .key = c->key, .cacert = c->cacert};
        int64_t bytes = 0, run = c->log_run;
        int ex = GP_CLI_EXIT_OK;
        int tries = 0, idle_ends = 0;
        bool follow = c->follow, last_read = false;

        if (run == 0) {
                int64_t runs = task_runs(c);
                if (runs > 1)
                        fprintf(err, "gpupool: task %" PRId64 " has run %" PRId64 " times; this is run %" PRId64
                                     "%s (--run N shows another)\n",
                                c->id, runs, runs, follow ? " and what follows" : "");
                if (follow) /* run 1 before the first start: it stays the run a reconnect asks for */
                        run = runs > 0 ? runs : 1;
        }
        for (;;) {
                gp_buf path, msg;
                gp_cli_resp r = {0};
                int64_t before = bytes;
                task_path(&path, c->id, "/logs");
                gp_buf_init(&msg, 4096);
                int rc = 0;
                char sep = '?';
                if (follow) {
                        rc |= gp_buf_puts(&path, "?follow=1");
                        sep = '&';
                }
                if (run > 0) {
                        rc |= gp_buf_printf(&path, "%crun=%" PRId64, sep, run);
                        sep = '&';
                }
                if (c->log_rank > 0) {
                        rc |= gp_buf_printf(&path, "%crank=%" PRId64, sep, c->log_rank);
                        sep = '&';
                }
                if (bytes > 0)
                        rc |= gp_buf_printf(&path, "%coffset=%" PRId64, sep, bytes);
                if (rc == 0)
                        rc = gp_cli_http_stream(&conn, path.data, out, &bytes, &r, &msg);
                gp_buf_done(&path);
                /* a follow whose stream broke after it had started: pick it up again */
                if (rc == -EHOSTUNREACH && follow && (bytes > 0 || tries > 0) && tries < LOGS_RETRIES) {
                        if (bytes > before)
                                tries = 0;
                        tries++;
                        gp_buf_done(&msg);
                        gp_cli_resp_done(&r);
                        sleep(1);
                        continue;
                }
                bool ok = rc == 0 && r.status >= 200 && r.status < 300;
                if (!ok) {
                        /* make gp_cli_check see a failure even if the error body was JSON */
                        ex = gp_cli_check(err, rc, &r, &msg);
                        if (ex == GP_CLI_EXIT_OK)
                                ex = GP_CLI_EXIT_REFUSED;
                }
                gp_buf_done(&msg);
                gp_cli_resp_done(&r);
                if (!ok || !follow || last_read)
                        break;
                /* The stream ended, normally because the task did.  Check; if
                 * it still runs (the server or a proxy cut the stream), go on
                 * from where we are, else read once more (a follow of an
                 * ended task sends what is left and ends) for anything
                 * written after the stream closed. */
                char state[32];
                if ((ex = task_state(c, err, state, sizeof(state))) != GP_CLI_EXIT_OK)
                        break;
                if (strcmp(state, "queued") != 0 && strcmp(state, "running") != 0) {
                        last_read = true;
                        continue;
                }
                idle_ends = bytes > before ? 0 : idle_ends + 1;
                if (idle_ends > 2)
                        sleep(1);
                else
                        usleep(200 * 1000);
        }
        return ex;
}

static int cmd_list(const gp_cli_cmd *c, FILE *out, FILE *err, const char *path,
                    int (*fmt)(const json_t *, gp_buf *)) {
        gp_cli_resp r;
        gp_buf text;
        int ex = call(c, err, "GET", path, NULL, &r);
        if (ex)
                return ex;
        gp_buf_init(&text, GP_CLI_BODY_MAX);
        if (c->json)
                print_json(out, r.json);
        else
                ex = print_buf(out, err, fmt(r.json, &text), &text);
        gp_buf_done(&text);
        gp_cli_resp_done(&r);
        return ex;
}

static int cmd_queue(const gp_cli_cmd *c, FILE *out, FILE *err) {
        char path[64];
        if (c->limit)
                snprintf(path, sizeof(path), "/api/v1/queue?limit=%" PRId64, c->limit);
        else
                snprintf(path, sizeof(path), "/api/v1/queue");
        return cmd_list(c, out, err, path, gp_cli_format_queue);
}

/* key create --admin: made here, as nothing but the config can hold an
 * admin key.  The key alone on stdout; its config line on stderr. */
static int key_create_admin(bool json, FILE *out, FILE *err) {
        static const char hex[] = "0123456789abcdef";
        uint8_t raw[24];
        char key[4 + 2 * sizeof(raw) + 1] = "gpa_", hash[72];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
                fprintf(err, "gpupool key: no randomness for a key: %s\n", strerror(errno));
                return GP_CLI_EXIT_REFUSED;
        }
        for (size_t i = 0; i < sizeof(raw); i++) {
                key[4 + 2 * i] = hex[raw[i] >> 4];
                key[5 + 2 * i] = hex[raw[i] & 15];
        }
        key[sizeof(key) - 1] = '\0';
        gp_sha256_key_hash(key, hash);
        if (json) {
                /* key and hash are [a-z0-9_:] only: nothing to escape */
                fprintf(out, "{\n  \"key\": \"%s\",\n  \"hash\": \"%s\"\n}\n", key, hash);
                return GP_CLI_EXIT_OK;
        }
        fprintf(out, "%s\n", key);
        fprintf(err, "gpupool: admin key made; nothing stores it, so keep it now. Paste its hash into the server's "
                     "config and restart the server:\n"
                     "auth:\n"
                     "  admin_keys:\n"
                     "    - \"%s\"\n",
                hash);
        return GP_CLI_EXIT_OK;
}

/* config check FILE: gpupool-server --check-config FILE (the config parser
 * links libyaml, which this client does not), its output and exit code. */
static int cmd_config_check(const gp_cli_cmd *c, FILE *out, FILE *err) {
        char path[PATH_MAX];
        int rc = gp_exe_sibling(GP_EXE_SERVER, path, sizeof(path));
        if (rc < 0) {
                fprintf(err, "gpupool config: cannot run %s (it is installed next to gpupool): %s\n", GP_EXE_SERVER,
                        strerror(-rc));
                return GP_CLI_EXIT_REFUSED;
        }
        fflush(out);
        fflush(err);
        pid_t pid = fork();
        if (pid < 0) {
                fprintf(err, "gpupool config: fork: %s\n", strerror(errno));
                return GP_CLI_EXIT_REFUSED;
        }
        if (pid == 0) {
                char *argv[] = {(char *)GP_EXE_SERVER, (char *)"--check-config", (char *)c->file, NULL};
                if (dup2(fileno(out), STDOUT_FILENO) < 0 || dup2(fileno(err), STDERR_FILENO) < 0)
                        _exit(GP_CLI_EXIT_REFUSED);
                execv(path, argv);
                _exit(127);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return GP_CLI_EXIT_REFUSED;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127) {
                fprintf(err, "gpupool config: cannot run %s\n", path);
                return GP_CLI_EXIT_REFUSED;
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : GP_CLI_EXIT_REFUSED;
}

/* POST /admin/tenants/T/keys: prints the new key once. */
static int cmd_key_create(const gp_cli_cmd *c, FILE *out, FILE *err) {
        char path[128];
        if (c->admin)
                return key_create_admin(c->json, out, err);
        if (snprintf(path, sizeof(path), "/admin/tenants/%s/keys", c->tenant) >= (int)sizeof(path)) {
                fprintf(err, "gpupool key: --tenant is too long\n");
                return GP_CLI_EXIT_USAGE;
        }
        gp_cli_resp r;
        int ex = call(c, err, "POST", path, NULL, &r);
        if (ex)
                return ex;
        if (c->json) {
                print_json(out, r.json);
        } else {
                const char *key = json_string_value(json_object_get(r.json, "key"));
                fprintf(out, "%s\n", key ? key : "");
                fprintf(err, "gpupool: key for tenant %s made; only its hash is stored, so keep it now\n", c->tenant);
        }
        gp_cli_resp_done(&r);
        return GP_CLI_EXIT_OK;
}

/* The tables that show ages ("2s ago") take the time now. */
static int fmt_nodes(const json_t *resp, gp_buf *out) {
        return gp_cli_format_nodes(resp, gp_now_ms(), out);
}

static int fmt_join_tokens(const json_t *resp, gp_buf *out) {
        return gp_cli_format_join_tokens(resp, gp_now_ms(), out);
}

static int cmd_servers(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_cli_resp r;
        gp_buf text;
        int ex = call(c, err, "GET", "/api/v1/coordinator/servers", NULL, &r);
        if (ex)
                return ex;
        gp_buf_init(&text, GP_CLI_BODY_MAX);
        if (c->json)
                print_json(out, r.json);
        else
                ex = print_buf(out, err, gp_cli_format_servers(r.json, gp_now_ms(), &text), &text);
        gp_buf_done(&text);
        gp_cli_resp_done(&r);
        return ex;
}

/* node drain|undrain|remove NAME: prints "NAME: STATE" (the node's new state). */
static int cmd_node(const gp_cli_cmd *c, FILE *out, FILE *err) {
        char path[128];
        gp_cli_resp r;
        /* the name is [A-Za-z0-9._-] (args.c): nothing to escape */
        snprintf(path, sizeof(path), "/admin/nodes/%s/%s", c->target, c->sub);
        int ex = call(c, err, "POST", path, NULL, &r);
        if (ex)
                return ex;
        if (c->json) {
                print_json(out, r.json);
        } else {
                const char *name = json_string_value(json_object_get(r.json, "name"));
                const char *st = json_string_value(json_object_get(r.json, "state"));
                gp_buf b;
                gp_buf_init(&b, 4096);
                gp_cli_put_clean(&b, name ? name : c->target, 64);
                gp_buf_puts(&b, ": ");
                gp_cli_put_clean(&b, st ? st : "unknown", 32);
                fprintf(out, "%s\n", b.data ? b.data : "");
                gp_buf_done(&b);
        }
        gp_cli_resp_done(&r);
        return GP_CLI_EXIT_OK;
}

/* ca: GET /agent/v1/ca (open): the CA's pin, or with --json the CA too */
static int cmd_ca(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_cli_resp r;
        int ex = call(c, err, "GET", "/agent/v1/ca", NULL, &r);
        if (ex)
                return ex;
        const char *h = json_string_value(json_object_get(r.json, "ca_hash"));
        if (c->json) {
                print_json(out, r.json);
        } else if (!h || strncmp(h, "sha256:", 7) || strlen(h) != 71 || strspn(h + 7, "0123456789abcdef") != 64) {
                fprintf(err, "gpupool: the server's answer has no CA hash\n");
                ex = GP_CLI_EXIT_REFUSED;
        } else {
                fprintf(out, "%s\n", h);
        }
        gp_cli_resp_done(&r);
        return ex;
}

/* join-token create|list|revoke */
static int cmd_join_token(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_cli_resp r;
        int ex;
        if (strcmp(c->sub, "list") == 0)
                return cmd_list(c, out, err, "/admin/join-tokens", fmt_join_tokens);
        if (strcmp(c->sub, "revoke") == 0) {
                char path[128];
                snprintf(path, sizeof(path), "/admin/join-tokens/%s", c->target); /* [A-Za-z0-9._-] (args.c) */
                if ((ex = call(c, err, "DELETE", path, NULL, &r)))
                        return ex;
                if (c->json) {
                        print_json(out, r.json);
                } else {
                        gp_buf b;
                        gp_buf_init(&b, 4096);
                        const char *id = json_string_value(json_object_get(r.json, "id"));
                        gp_cli_put_clean(&b, id ? id : c->target, 64);
                        fprintf(out, "%s: revoked\n", b.data ? b.data : "");
                        gp_buf_done(&b);
                }
                gp_cli_resp_done(&r);
                return GP_CLI_EXIT_OK;
        }
        /* create: the token alone on stdout (shown only now), how to use it on stderr */
        json_t *body = json_pack("{s:I}", "ttl_s", (json_int_t)c->join_ttl_s);
        if (!body) {
                fprintf(err, "gpupool: out of memory\n");
                return GP_CLI_EXIT_REFUSED;
        }
        ex = call(c, err, "POST", "/admin/join-tokens", body, &r);
        json_decref(body);
        if (ex)
                return ex;
        const char *tok = json_string_value(json_object_get(r.json, "token"));
        if (c->json) {
                print_json(out, r.json);
        } else if (!tok || !*tok || strspn(tok, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
                                               strlen(tok)) {
                fprintf(err, "gpupool: the server's answer has no usable token\n");
                ex = GP_CLI_EXIT_REFUSED;
        } else {
                fprintf(out, "%s\n", tok);
                /* c->api is checked printable ASCII without spaces (args.c) */
                fprintf(err, "gpupool: join token made; only its hash is stored, so keep it now. On each GPU "
                             "machine:\n  gpupool agent --server %s --token %s\n", c->api, tok);
                if (!strchr(tok, '.'))
                        fprintf(err, "gpupool: this server serves no TLS: the token carries no CA hash, and "
                                     "agents send it in clear\n");
        }
        gp_cli_resp_done(&r);
        return ex;
}

/* Append "&name=value" (first one with '?'), escaped. */
static int query_add(gp_buf *b, const char *name, const char *value) {
        if (!value)
                return 0;
        int r = gp_buf_printf(b, "%c%s=", strchr(b->data ? b->data : "", '?') ? '&' : '?', name);
        return r ? r : gp_cli_url_escape(value, b);
}

/* GET /api/v1/usage or /api/v1/invoices with the command's filters. */
static int cmd_billing(const gp_cli_cmd *c, FILE *out, FILE *err) {
        gp_buf path;
        gp_buf_init(&path, 8192);
        bool usage = c->verb == GP_CLI_USAGE;
        int r = gp_buf_puts(&path, usage ? "/api/v1/usage" : "/api/v1/invoices");
        r = r ? r : query_add(&path, "tenant", c->tenant);
        if (usage) {
                r = r ? r : query_add(&path, "from", c->from);
                r = r ? r : query_add(&path, "to", c->to);
                r = r ? r : query_add(&path, "group_by", c->group_by);
        } else {
                r = r ? r : query_add(&path, "month", c->month);
        }
        if (r < 0) {
                gp_buf_done(&path);
                fprintf(err, "gpupool: %s\n", gp_strerror(r));
                return GP_CLI_EXIT_USAGE;
        }
        int ex = cmd_list(c, out, err, path.data, usage ? gp_cli_format_usage : gp_cli_format_invoice);
        gp_buf_done(&path);
        return ex;
}

/* history / acct: GET /api/v1/runs with the command's filters (times made
 * ms here, so "now-2h" means now on this machine). */
static int cmd_history(const gp_cli_cmd *c, FILE *out, FILE *err) {
        char me[64], num[24];
        const char *user = c->me ? (gp_cli_self_name(me, sizeof(me)) == 0 ? me : NULL) : c->user;
        if (c->me && !user) {
                fprintf(err, "gpupool: cannot tell your user name\n");
                return GP_CLI_EXIT_REFUSED;
        }
        gp_buf path;
        gp_buf_init(&path, 8192);
        int r = gp_buf_puts(&path, "/api/v1/runs");
        r = r ? r : query_add(&path, "tenant", c->tenant);
        r = r ? r : query_add(&path, "user", user);
        r = r ? r : query_add(&path, "state", c->state);
        if (r == 0 && c->has_job) {
                if (c->job.index >= 0)
                        snprintf(num, sizeof(num), "%" PRId64 "_%" PRId64, c->job.id, c->job.index);
                else
                        snprintf(num, sizeof(num), "%" PRId64, c->job.id);
                r = query_add(&path, "job", num);
        }
        const char *when[2] = {c->since, c->until}, *key[2] = {"since", "until"};
        for (int i = 0; i < 2 && r == 0; i++) {
                int64_t ms;
                if (!when[i])
                        continue;
                if (gp_cli_when_parse(when[i], gp_now_ms(), &ms) < 0)
                        r = -EINVAL;
                snprintf(num, sizeof(num), "%" PRId64, ms);
                r = r ? r : query_add(&path, key[i], num);
        }
        if (r == 0 && c->limit) {
                snprintf(num, sizeof(num), "%" PRId64, c->limit);
                r = query_add(&path, "limit", num);
        }
        if (r < 0) {
                gp_buf_done(&path);
                fprintf(err, "gpupool: %s\n", gp_strerror(r));
                return GP_CLI_EXIT_USAGE;
        }
        int ex = cmd_list(c, out, err, path.data, gp_cli_format_history);
        gp_buf_done(&path);
        return ex;
}

static int cmd_help(const char *topic, FILE *out, FILE *err) {
        gp_buf b;
        gp_buf_init(&b, 1 << 20);
        int r = gp_cli_help(topic, &b), ex = GP_CLI_EXIT_OK;
        if (r == -ENOENT) {
                fprintf(err, "gpupool: no command '%s'; 'gpupool help' lists them\n", topic);
                ex = GP_CLI_EXIT_USAGE;
        } else {
                ex = print_buf(out, err, r, &b);
        }
        gp_buf_done(&b);
        return ex;
}

int gp_cli_main_io(int argc, char **argv, FILE *out, FILE *err) {
        gp_cli_cmd c;
        gp_buf msg;
        int ex;

        gp_cli_cmd_init(&c);
        c.env_node = getenv("GPUPOOL_NODE");
        c.cacert = getenv("GPUPOOL_CACERT") && *getenv("GPUPOOL_CACERT") ? getenv("GPUPOOL_CACERT") : NULL;
        gp_buf_init(&msg, 64 * 1024);
        int r = gp_cli_parse(argc, argv, getenv("GPUPOOL_API"), getenv("GPUPOOL_API_KEY"), &c, &msg);
        if (r < 0) {
                if (r == -EINVAL)
                        fprintf(err, "%s", msg.data ? msg.data : "gpupool: usage error\n");
                else
                        fprintf(err, "gpupool: %s\n", gp_strerror(r));
                ex = r == -EINVAL ? GP_CLI_EXIT_USAGE : GP_CLI_EXIT_REFUSED;
                goto out;
        }
        if (c.help) {
                ex = cmd_help(gp_cli_verb_name(c.verb), out, err);
                goto out;
        }
        switch (c.verb) {
        case GP_CLI_HELP:
                ex = cmd_help(c.topic, out, err);
                break;
        case GP_CLI_VERSION:
                if (c.json)
                        fprintf(out, "{\n  \"version\": \"%s\"\n}\n", GP_VERSION);
                else
                        fprintf(out, "gpupool %s\n", GP_VERSION);
                ex = GP_CLI_EXIT_OK;
                break;
        case GP_CLI_SUBMIT: {
                /* where it was made: directory and environment (unix.h) */
                int orc = gp_cli_add_origin(&c, err);
                if (orc < 0) {
                        if (orc == -ENOMEM)
                                fprintf(err, "gpupool: out of memory\n");
                        ex = orc == -ENOMEM ? GP_CLI_EXIT_REFUSED : GP_CLI_EXIT_USAGE;
                        break;
                }
                ex = gp_cli_cmd_submit(argc, argv, &c, out, err);
                break;
        }
        case GP_CLI_RUN:
                ex = gp_cli_cmd_run(&c, out, err);
                break;
        case GP_CLI_PS:
                ex = cmd_ps(&c, out, err);
                break;
        case GP_CLI_STATUS:
        case GP_CLI_LOGS:
                /* ID_INDEX: the element's own task id */
                if ((ex = gp_cli_resolve_ref(&c, err, &c.refs[0], &c.id)) != GP_CLI_EXIT_OK)
                        break;
                ex = c.verb == GP_CLI_STATUS ? cmd_status(&c, out, err) : cmd_logs(&c, out, err);
                break;
        case GP_CLI_CANCEL:
                ex = cmd_cancel(&c, out, err);
                break;
        case GP_CLI_GPUS:
                ex = cmd_list(&c, out, err, "/api/v1/gpus", gp_cli_format_gpus);
                break;
        case GP_CLI_QUEUE:
                ex = cmd_queue(&c, out, err);
                break;
        case GP_CLI_NODES:
                ex = cmd_list(&c, out, err, "/api/v1/nodes", fmt_nodes);
                break;
        case GP_CLI_SERVERS:
                ex = cmd_servers(&c, out, err);
                break;
        case GP_CLI_CA:
                ex = cmd_ca(&c, out, err);
                break;
        case GP_CLI_NODE:
                ex = cmd_node(&c, out, err);
                break;
        case GP_CLI_JOIN_TOKEN:
                ex = cmd_join_token(&c, out, err);
                break;
        case GP_CLI_TENANTS:
                ex = cmd_list(&c, out, err, "/api/v1/tenants", gp_cli_format_tenants);
                break;
        case GP_CLI_KEY:
                ex = cmd_key_create(&c, out, err);
                break;
        case GP_CLI_USAGE:
        case GP_CLI_INVOICE:
                ex = cmd_billing(&c, out, err);
                break;
        case GP_CLI_HISTORY:
                ex = cmd_history(&c, out, err);
                break;
        case GP_CLI_CONFIG:
                ex = cmd_config_check(&c, out, err);
                break;
        default:
                ex = GP_CLI_EXIT_USAGE;
                break;
        }
        if (fflush(out) != 0 && ex == GP_CLI_EXIT_OK) {
                fprintf(err, "gpupool: cannot write the output: %s\n", strerror(errno));
                ex = GP_CLI_EXIT_REFUSED;
        }
out:
        gp_buf_done(&msg);
        gp_cli_cmd_done(&c);
        return ex;
}

int gp_cli_main(int argc, char **argv) {
        return gp_cli_main_io(argc, argv, stdout, stderr);
}
