/* store.c - the public store API: URL dispatch, transaction bookkeeping,
 * argument checks and the helpers every backend shares.
 *
 * Invariants kept here, for every backend:
 *   - s->in_tx mirrors whether the backend connection is inside a
 *     transaction (asked of the backend after every begin/commit/rollback);
 *   - once an operation inside a transaction failed with -GP_ESTORE the
 *     transaction is doomed: every further operation but rollback is refused,
 *     and commit rolls back and fails.  A database may end a transaction on
 *     its own after an error (SQLite on I/O errors, PostgreSQL aborts it);
 *     refusing keeps later puts from being stored one by one outside it;
 *   - error messages never contain a postgres URL (it may hold a password);
 *   - the schema is written in one place: migrations[] below, run by
 *     store_migrate for every backend through its store_schema_ops.
 */
#include "store/store-int.h"

#include <errno.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/util.h"

#define URL_MAX 4096

int store_set_err(gp_store *s, const char *detail, const char *what_fmt, ...) {
        char what[256];
        va_list ap;
        va_start(ap, what_fmt);
        vsnprintf(what, sizeof(what), what_fmt, ap);
        va_end(ap);
        if (detail && *detail)
                snprintf(s->errmsg, sizeof(s->errmsg), "%s: %s", what, detail);
        else
                snprintf(s->errmsg, sizeof(s->errmsg), "%s", what);
        return -GP_ESTORE;
}

static void set_open_err(char *err, size_t errlen, const char *msg) {
        if (err && errlen)
                snprintf(err, errlen, "%s", msg);
}

static const gp_store_ops *ops_for(const char *url, const char **ret_target) {
        static const struct {
                const char *prefix;
                const gp_store_ops *ops;
                bool whole_url; /* backend gets the whole URL (libpq parses it) */
        } schemes[] = {
                {"sqlite://", &gp_store_sqlite_ops, false},
                {"postgres://", &gp_store_postgres_ops, true},
                {"postgresql://", &gp_store_postgres_ops, true},
        };
        for (size_t i = 0; i < GP_ARRAY_SIZE(schemes); i++) {
                size_t n = strlen(schemes[i].prefix);
                if (strncmp(url, schemes[i].prefix, n) == 0) {
                        *ret_target = schemes[i].whole_url ? url : url + n;
                        return schemes[i].ops;
                }
        }
        return NULL;
}

int gp_store_open(const char *url, const gp_store_options *opt, gp_store **ret, char *err,
                  size_t errlen) {
        gp_store_options defaults = {.sync_full = false, .busy_timeout_ms = 5000};
        const char *target = NULL;
        char msg[GP_STORE_ERRMSG_MAX];

        if (!url || !*url) {
                set_open_err(err, errlen, "store URL is empty (expected sqlite://PATH or postgres://...)");
                return -EINVAL;
        }
        if (strnlen(url, URL_MAX + 1) > URL_MAX) {
                snprintf(msg, sizeof(msg), "store URL is longer than %d bytes", URL_MAX);
                set_open_err(err, errlen, msg);
                return -EINVAL;
        }
        const gp_store_ops *ops = ops_for(url, &target);
        if (!ops) {
                /* name only the scheme: the rest may hold a password */
                const char *colon = strchr(url, ':');
                int n = colon ? (int)(colon - url) : (int)strnlen(url, 32);
                if (n > 32)
                        n = 32;
                snprintf(msg, sizeof(msg),
                         "unsupported store URL scheme \"%.*s\" (expected sqlite://PATH, "
                         "postgres://... or postgresql://...)",
                         n, url);
                set_open_err(err, errlen, msg);
                return -EINVAL;
        }
        if (!*target) {
                set_open_err(err, errlen, "store URL \"sqlite://\" has no path (expected sqlite://PATH)");
                return -EINVAL;
        }
        if (opt) {
                defaults.sync_full = opt->sync_full;
                defaults.manual_checkpoint = opt->manual_checkpoint;
                defaults.deferred_sync = opt->deferred_sync;
                if (opt->busy_timeout_ms < 0) {
                        set_open_err(err, errlen, "store busy_timeout_ms is negative");
                        return -EINVAL;
                }
                if (opt->busy_timeout_ms > 0)
                        defaults.busy_timeout_ms = opt->busy_timeout_ms;
        }

        gp_store *s = calloc(1, sizeof(*s));
        if (!s) {
                set_open_err(err, errlen, "out of memory opening the store");
                return -ENOMEM;
        }
        s->ops = ops;
        s->impl = calloc(1, ops->impl_size);
        if (!s->impl) {
                free(s);
                set_open_err(err, errlen, "out of memory opening the store");
                return -ENOMEM;
        }
        int r = ops->open(s, url, target, &defaults);
        if (r < 0) {
                set_open_err(err, errlen, s->errmsg);
                gp_store_close(s);
                return r;
        }
        *ret = s;
        return 0;
}

void gp_store_close(gp_store *s) {
        if (!s)
                return;
        s->ops->close(s);
        free(s->impl);
        free(s);
}

const char *gp_store_errmsg(gp_store *s) {
        return s ? s->errmsg : "";
}

bool gp_store_full(gp_store *s) {
        return s && s->full;
}

void gp_store_fail_after(gp_store *s, int n) {
        s->fail_after = n > 0 ? n : 0;
}

void gp_store_owner_format(const gp_store_owner *o, char *out, size_t size) {
        char since[40] = "";
        if (!size)
                return;
        if (o->since_ms > 0)
                gp_time_format(o->since_ms, since, sizeof(since));
        int n = snprintf(out, size, "host %s, pid ", o->host[0] ? o->host : "(unknown)");
        if (n < 0 || (size_t)n >= size)
                return;
        if (o->pid > 0)
                n += snprintf(out + n, size - (size_t)n, "%" PRId64, o->pid);
        else
                n += snprintf(out + n, size - (size_t)n, "(unknown)");
        if (n < 0 || (size_t)n >= size)
                return;
        snprintf(out + n, size - (size_t)n, ", listening on %s, since %s", o->listen[0] ? o->listen : "(unknown)",
                 since[0] ? since : "(unknown)");
}

int gp_store_owner_to_text(const gp_store_owner *o, char *out, size_t size) {
        int n = snprintf(out, size, "host=%s\npid=%" PRId64 "\nlisten=%s\nsince_ms=%" PRId64 "\n", o->host, o->pid,
                         o->listen, o->since_ms);
        if (n < 0 || (size_t)n >= size)
                return -ENOSPC;
        return n;
}

/* Copy a field's text (up to the end of its line) without control
 * characters, so a hostile file cannot forge lines of the message. */
static void owner_field(const char *v, size_t len, char *out, size_t size) {
        size_t k = 0;
        for (size_t i = 0; i < len && k + 1 < size; i++)
                if ((unsigned char)v[i] >= 0x20 && v[i] != 0x7f)
                        out[k++] = v[i];
        out[k] = '\0';
}

/* The record in fd names a process of this host that is gone. */
static bool holder_gone(int fd, gp_store_owner *ret) {
        char text[4096], host[256] = "";
        ssize_t n = pread(fd, text, sizeof(text), 0);
        gp_store_owner_from_text(text, n > 0 ? (size_t)n : 0, ret);
        if (gethostname(host, sizeof(host) - 1) < 0 || strcmp(host, ret->host) || ret->pid <= 0 ||
            ret->pid > INT32_MAX)
                return false;
        return kill((pid_t)ret->pid, 0) < 0 && errno == ESRCH;
}

int gp_store_flock_owner_file(int fd, gp_store_owner *ret_other) {
        int64_t deadline = gp_mono_ms() + GP_STORE_DEAD_HOLDER_MS;
        for (;;) {
                if (flock(fd, LOCK_EX | LOCK_NB) == 0)
                        return 0;
                if (errno != EWOULDBLOCK)
                        return -errno;
                gp_store_owner other;
                if (!holder_gone(fd, &other) || gp_mono_ms() >= deadline) {
                        *ret_other = other;
                        return -EWOULDBLOCK;
                }
                struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
}

void gp_store_owner_from_text(const char *text, size_t len, gp_store_owner *ret) {
        memset(ret, 0, sizeof(*ret));
        size_t i = 0;
        while (i < len) {
                const char *line = text + i;
                const char *nl = memchr(line, '\n', len - i);
                size_t n = nl ? (size_t)(nl - line) : len - i;
                i += n + 1;
                const char *eq = memchr(line, '=', n);
                if (!eq)
                        continue;
                size_t klen = (size_t)(eq - line), vlen = n - klen - 1;
                const char *v = eq + 1;
                char num[24];
                int64_t x;
                if (klen == 4 && memcmp(line, "host", 4) == 0) {
                        owner_field(v, vlen, ret->host, sizeof(ret->host));
                } else if (klen == 6 && memcmp(line, "listen", 6) == 0) {
                        owner_field(v, vlen, ret->listen, sizeof(ret->listen));
                } else if ((klen == 3 && memcmp(line, "pid", 3) == 0) ||
                           (klen == 8 && memcmp(line, "since_ms", 8) == 0)) {
                        if (vlen >= sizeof(num))
                                continue;
                        memcpy(num, v, vlen);
                        num[vlen] = '\0';
                        if (gp_parse_i64(num, 0, INT64_MAX, &x) == 0) {
                                if (klen == 3)
                                        ret->pid = x;
                                else
                                        ret->since_ms = x;
                        }
                }
        }
}

/* Book-keeping after an operation: a store failure inside a transaction
 * dooms it. */
static int track(gp_store *s, int r) {
        if (r == -GP_ESTORE && s->in_tx)
                s->doomed = true;
        if (r == -GP_EFENCED && s->on_fenced)
                s->on_fenced(s->on_fenced_ud);
        return r;
}

/* Refuse re-entry from a list callback, and work inside a doomed
 * transaction. */
static int enter(gp_store *s, const char *what) {
        if (!s->in_tx)
                s->full = false; /* outside a transaction each call starts afresh */
        if (s->in_cb) {
                store_set_err(s, "the handle is busy running a list callback", "%s", what);
                return -EBUSY;
        }
        if (s->in_tx && s->doomed)
                return store_set_err(s, "an earlier operation in this transaction failed; roll it back",
                                     "%s", what);
        return 0;
}

/* After begin/commit/rollback: mirror the backend's transaction state. */
static void sync_tx(gp_store *s) {
        s->in_tx = s->ops->in_tx(s);
        if (!s->in_tx)
                s->doomed = false;
}

int gp_store_claim(gp_store *s, const gp_store_owner *me, gp_store_owner *ret_other) {
        int r = enter(s, "claim the store");
        if (r < 0)
                return r;
        if (s->in_tx) {
                store_set_err(s, "inside a transaction", "claim the store");
                return -EINVAL;
        }
        if (!memchr(me->host, '\0', sizeof(me->host)) || !memchr(me->listen, '\0', sizeof(me->listen))) {
                store_set_err(s, "owner record has a string that is not NUL-terminated", "claim the store");
                return -EINVAL;
        }
        gp_store_owner other;
        memset(&other, 0, sizeof(other));
        r = s->ops->claim(s, me, &other);
        if (r == -EBUSY) {
                char who[320]; /* the message fits s->errmsg */
                gp_store_owner_format(&other, who, sizeof(who));
                snprintf(s->errmsg, sizeof(s->errmsg),
                         "another gpupool server is using this store (%.200s); stop it first, or give this server "
                         "a store of its own (servers share a PostgreSQL store only as a cluster: each with its "
                         "own cluster.server_id)",
                         who);
                if (ret_other)
                        *ret_other = other;
        }
        return r;
}

int gp_store_claim_member(gp_store *s, const char *server_id, const gp_store_owner *me, gp_store_owner *ret_other) {
        int r = enter(s, "join the cluster");
        if (r < 0)
                return r;
        if (s->in_tx) {
                store_set_err(s, "inside a transaction", "join the cluster");
                return -EINVAL;
        }
        if (!server_id || !server_id[0] || strnlen(server_id, sizeof(s->fence_id)) >= sizeof(s->fence_id) ||
            !memchr(me->host, '\0', sizeof(me->host)) || !memchr(me->listen, '\0', sizeof(me->listen))) {
                store_set_err(s, "server id empty or longer than 63 bytes, or a string not NUL-terminated",
                              "join the cluster");
                return -EINVAL;
        }
        if (!s->ops->claim_member) {
                store_set_err(s, "only a PostgreSQL store has a cluster", "join the cluster");
                return -ENOTSUP;
        }
        gp_store_owner other;
        memset(&other, 0, sizeof(other));
        r = s->ops->claim_member(s, server_id, me, &other);
        char who[320];
        gp_store_owner_format(&other, who, sizeof(who));
        if (r == -EBUSY)
                snprintf(s->errmsg, sizeof(s->errmsg),
                         "a gpupool server without cluster.server_id is using this store (%.200s): a cluster and a "
                         "single server on one store would hand out the same task ids; stop it, or give it a "
                         "cluster.server_id of its own so that it joins the cluster",
                         who);
        else if (r == -EEXIST)
                snprintf(s->errmsg, sizeof(s->errmsg),
                         "server_id '%.63s' is in use by a live server of this store (%.200s): every server of a "
                         "cluster needs a cluster.server_id (or GPUPOOL_SERVER_ID) of its own; give this one "
                         "another, or stop the other",
                         server_id, who);
        if ((r == -EBUSY || r == -EEXIST) && ret_other)
                *ret_other = other;
        return r;
}

/* ---- the leader lease ---- */

static int lease_args(gp_store *s, const char *what, const char *id, int64_t lease_ms) {
        int r = enter(s, what);
        if (r < 0)
                return r;
        if (s->in_tx) {
                store_set_err(s, "inside a transaction", "%s", what);
                return -EINVAL;
        }
        if (id && (!id[0] || strnlen(id, sizeof(s->fence_id)) >= sizeof(s->fence_id))) {
                store_set_err(s, "server id empty or longer than 63 bytes", "%s", what);
                return -EINVAL;
        }
        if (lease_ms < 1 || lease_ms > 86400000) {
                store_set_err(s, "lease out of range (1 ms..1 day)", "%s", what);
                return -EINVAL;
        }
        return 0;
}

int gp_store_lease_acquire(gp_store *s, const char *server_id, const char *url, int64_t lease_ms,
                           int64_t *ret_epoch) {
        int r = lease_args(s, "acquire the leader lease", server_id, lease_ms);
        if (r < 0)
                return r;
        size_t n = url ? strnlen(url, GP_STORE_LEASE_URL_MAX + 1) : 0;
        if (!url || n > GP_STORE_LEASE_URL_MAX || !gp_str_is_clean(url, n)) {
                store_set_err(s, "url missing, longer than 255 bytes or not clean text", "acquire the leader lease");
                return -EINVAL;
        }
        if (!s->ops->lease_acquire)
                return -ENOTSUP;
        return s->ops->lease_acquire(s, server_id, url, lease_ms, ret_epoch);
}

int gp_store_lease_renew(gp_store *s, const char *server_id, int64_t epoch, int64_t lease_ms) {
        int r = lease_args(s, "renew the leader lease", server_id, lease_ms);
        if (r < 0)
                return r;
        if (!s->ops->lease_renew)
                return -ENOTSUP;
        return s->ops->lease_renew(s, server_id, epoch, lease_ms);
}

int gp_store_lease_get(gp_store *s, gp_store_lease *ret) {
        int r = lease_args(s, "read the leader lease", NULL, 1);
        if (r < 0)
                return r;
        if (!s->ops->lease_get)
                return -ENOTSUP;
        return s->ops->lease_get(s, ret);
}

int gp_store_lease_release(gp_store *s, const char *server_id, int64_t epoch) {
        int r = lease_args(s, "release the leader lease", server_id, 1);
        if (r < 0)
                return r;
        if (!s->ops->lease_release)
                return -ENOTSUP;
        return s->ops->lease_release(s, server_id, epoch);
}

int gp_store_set_fence(gp_store *s, const char *server_id, int64_t epoch, void (*on_fenced)(void *ud),
                       void *ud) {
        int r = lease_args(s, "fence the handle", server_id, 1);
        if (r < 0)
                return r;
        if (!s->ops->lease_acquire)
                return -ENOTSUP;
        gp_strlcpy(s->fence_id, server_id, sizeof(s->fence_id));
        s->fence_epoch = epoch;
        s->on_fenced = on_fenced;
        s->on_fenced_ud = ud;
        return 0;
}

int gp_store_begin(gp_store *s) {
        int r = enter(s, "begin");
        if (r < 0)
                return r;
        if (s->in_tx)
                return store_set_err(s, "a transaction is already open", "begin");
        s->full = false;
        r = s->ops->begin(s);
        s->doomed = false;
        sync_tx(s);
        if (r < 0 && s->in_tx)
                s->doomed = true;
        return r;
}

int gp_store_commit(gp_store *s) {
        if (s->in_cb) {
                store_set_err(s, "the handle is busy running a list callback", "commit");
                return -EBUSY;
        }
        if (!s->in_tx)
                return store_set_err(s, "no transaction is open", "commit");
        if (s->doomed) {
                char prev[GP_STORE_ERRMSG_MAX];
                gp_strlcpy(prev, s->errmsg, sizeof(prev));
                s->ops->rollback(s);
                sync_tx(s);
                return store_set_err(s, prev, "commit refused, transaction rolled back after an earlier failure");
        }
        int r = s->ops->commit(s);
        /* on failure the backend has rolled back; if even that failed the
         * handle stays in the transaction, doomed, until rollback works */
        sync_tx(s);
        if (s->in_tx)
                s->doomed = true;
        if (r == -GP_EFENCED && s->on_fenced)
                s->on_fenced(s->on_fenced_ud);
        return r;
}

bool gp_store_sync_deferred(const gp_store *s) {
        return s->deferred_sync;
}

int gp_store_sync(gp_store *s, char *err, size_t errlen) {
        if (!s->deferred_sync || !s->ops->sync)
                return 0;
        return s->ops->sync(s, err, errlen);
}

int store_commit_failed(gp_store *s, int r) {
        if (!s->ops->in_tx(s))
                return r;
        char msg[GP_STORE_ERRMSG_MAX];
        gp_strlcpy(msg, s->errmsg, sizeof(msg));
        if (s->ops->rollback(s) == 0)
                store_set_err(s, msg, "transaction rolled back");
        else
                store_set_err(s, s->errmsg, "%s; then", msg);
        return r;
}

int gp_store_rollback(gp_store *s) {
        if (s->in_cb) {
                store_set_err(s, "the handle is busy running a list callback", "rollback");
                return -EBUSY;
        }
        if (!s->in_tx)
                return 0;
        int r = s->ops->rollback(s);
        sync_tx(s);
        return r;
}

static bool str_fits(const char *buf, size_t size) {
        return memchr(buf, '\0', size) != NULL;
}

int store_task_check(gp_store *s, const gp_task *t) {
        const char *bad = NULL;
        if ((unsigned)t->state >= GP_TASK_STATE_COUNT)
                bad = "state out of range";
        else if (t->n_gpus < 0 || t->n_gpus > GP_MAX_GPUS)
                bad = "n_gpus outside 0..GP_MAX_GPUS";
        else if (t->n_gpus > 0 && !t->gpus)
                bad = "n_gpus > 0 but gpus is NULL";
        else if (!str_fits(t->tenant, sizeof(t->tenant)) || !str_fits(t->name, sizeof(t->name)) ||
                 !str_fits(t->model, sizeof(t->model)) ||
                 !str_fits(t->gpu_model, sizeof(t->gpu_model)) ||
                 !str_fits(t->node_selector, sizeof(t->node_selector)) ||
                 !str_fits(t->user, sizeof(t->user)) ||
                 !str_fits(t->reason, sizeof(t->reason)))
                bad = "a string field is not NUL-terminated";
        else if (t->spec && strnlen(t->spec, GP_STORE_SPEC_MAX + 1) > GP_STORE_SPEC_MAX)
                bad = "spec longer than 1 MiB";
        for (int i = 0; !bad && i < t->n_gpus; i++)
                if (!str_fits(t->gpus[i].node, sizeof(t->gpus[i].node)) ||
                    !str_fits(t->gpus[i].uuid, sizeof(t->gpus[i].uuid)))
                        bad = "a gpu's node or uuid is not NUL-terminated";
        if (!bad)
                return 0;
        store_set_err(s, bad, "task put (id %" PRId64 ")", t->id);
        return -EINVAL;
}

int store_gpus_to_json(const gp_task *t, char **ret) {
        if (t->n_gpus <= 0) {
                *ret = NULL;
                return 0;
        }
        json_t *arr = json_array();
        if (!arr)
                return -ENOMEM;
        for (int i = 0; i < t->n_gpus; i++) {
                json_t *o = json_pack("{s:s, s:i, s:s}", "node", t->gpus[i].node, "index",
                                      (json_int_t)t->gpus[i].index, "uuid", t->gpus[i].uuid);
                if (!o || json_array_append_new(arr, o) < 0) {
                        json_decref(arr);
                        return -ENOMEM;
                }
        }
        char *text = json_dumps(arr, JSON_COMPACT);
        json_decref(arr);
        if (!text)
                return -ENOMEM;
        *ret = text;
        return 0;
}

/* Copy text of known length into a fixed buffer; -E2BIG when it does not
 * fit, -EINVAL when it holds a NUL byte. */
static int copy_str(char *dst, size_t size, const char *src, size_t len) {
        if (len >= size)
                return -E2BIG;
        if (len && memchr(src, '\0', len))
                return -EINVAL;
        memcpy(dst, src, len);
        dst[len] = '\0';
        return 0;
}

static int copy_json_str(char *dst, size_t size, json_t *v) {
        if (!json_is_string(v))
                return -EINVAL;
        return copy_str(dst, size, json_string_value(v), json_string_length(v));
}

/* Parse stored gpus JSON into a malloc'd array (NULL and 0 for "[]").
 * Rejects anything but an array of at most GP_MAX_GPUS objects with node
 * (string < GP_NODE_MAX), index (integer >= 0 that fits an int) and uuid
 * (string < GP_UUID_MAX), and text over GP_STORE_GPUS_JSON_MAX.
 * 0, -GP_EPARSE (reason in why), -ENOMEM. */
static int gpus_from_json(const char *text, size_t len, gp_task_gpu **ret, int *ret_n, char *why,
                          size_t whylen) {
        gp_task_gpu *gpus = NULL;
        json_t *root = NULL;
        json_error_t jerr;
        int r = -GP_EPARSE;

        if (len > GP_STORE_GPUS_JSON_MAX) {
                snprintf(why, whylen, "gpus JSON longer than %d bytes", GP_STORE_GPUS_JSON_MAX);
                return -GP_EPARSE;
        }
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                snprintf(why, whylen, "gpus is not valid JSON: %.100s", jerr.text);
                return -GP_EPARSE;
        }
        if (!json_is_array(root)) {
                snprintf(why, whylen, "gpus JSON is not an array");
                goto out;
        }
        size_t n = json_array_size(root);
        if (n > GP_MAX_GPUS) {
                snprintf(why, whylen, "gpus JSON has %zu entries, more than %d", n, GP_MAX_GPUS);
                goto out;
        }
        if (n > 0) {
                gpus = calloc(n, sizeof(*gpus));
                if (!gpus) {
                        r = -ENOMEM;
                        snprintf(why, whylen, "out of memory");
                        goto out;
                }
        }
        for (size_t i = 0; i < n; i++) {
                json_t *o = json_array_get(root, i);
                json_t *idx = json_object_get(o, "index");
                if (!json_is_object(o) || !json_is_integer(idx) || json_integer_value(idx) < 0 ||
                    json_integer_value(idx) > INT32_MAX) {
                        snprintf(why, whylen, "gpus[%zu] is not {node, index >= 0, uuid}", i);
                        goto out;
                }
                if (copy_json_str(gpus[i].node, sizeof(gpus[i].node), json_object_get(o, "node")) < 0 ||
                    copy_json_str(gpus[i].uuid, sizeof(gpus[i].uuid), json_object_get(o, "uuid")) < 0) {
                        snprintf(why, whylen, "gpus[%zu] node or uuid missing, not a string or too long", i);
                        goto out;
                }
                gpus[i].index = (int)json_integer_value(idx);
        }
        *ret = gpus;
        *ret_n = (int)n;
        gpus = NULL;
        r = 0;
out:
        free(gpus);
        json_decref(root);
        return r;
}

int store_gpus_from_json(const char *text, size_t len, gp_task_gpu **ret, int *ret_n, char *why, size_t whylen) {
        return gpus_from_json(text, len, ret, ret_n, why, whylen);
}

/* Column names for messages, in enum store_col order. */
static const char *const col_names[COL_COUNT] = {
        "id", "tenant", "name", "model", "gpu_model", "priority", "gpu_request", "memory_mb",
        "exclusive", "preemptible", "is_lease", "timeout_s", "queue_timeout_s", "lease_ttl_s",
        "max_retries", "retries", "preempt_count", "state", "exit_code", "reason", "submitted_ms",
        "started_ms", "finished_ms", "heartbeat_ms", "sup_pid", "sup_start", "spec", "gpus", "elastic_max",
        "borrowing", "array_id", "array_index", "array_limit", "node_selector", "unix_user", "gpu_mem_peak",
};

static int row_err(gp_store *s, int64_t id, int col, const char *why) {
        return store_set_err(s, why, "reading task %" PRId64 ": column %s", id, col_names[col]);
}

/* An integer column that must not be NULL, within [min, max]. */
static int row_i64(gp_store *s, const store_row *row, int64_t id, int col, int64_t min, int64_t max,
                   int64_t *ret) {
        bool null = false;
        int64_t v = 0;
        if (row->get_i64(row->ctx, col, &null, &v) < 0)
                return row_err(s, id, col, "not an integer");
        if (null)
                return row_err(s, id, col, "NULL");
        if (v < min || v > max)
                return row_err(s, id, col, "out of range");
        *ret = v;
        return 0;
}

static int row_int(gp_store *s, const store_row *row, int64_t id, int col, int *ret) {
        int64_t v;
        int r = row_i64(s, row, id, col, INT32_MIN, INT32_MAX, &v);
        if (r == 0)
                *ret = (int)v;
        return r;
}

static int row_bool(gp_store *s, const store_row *row, int64_t id, int col, bool *ret) {
        int64_t v;
        int r = row_i64(s, row, id, col, 0, 1, &v);
        if (r == 0)
                *ret = v != 0;
        return r;
}

/* A text column that must not be NULL, into a fixed buffer. */
static int row_str(gp_store *s, const store_row *row, int64_t id, int col, char *dst, size_t size) {
        const char *p;
        size_t n;
        if (row->get_text(row->ctx, col, &p, &n) < 0)
                return row_err(s, id, col, "not text");
        if (!p)
                return row_err(s, id, col, "NULL");
        int r = copy_str(dst, size, p, n);
        if (r == -E2BIG)
                return row_err(s, id, col, "too long");
        if (r < 0)
                return row_err(s, id, col, "contains a NUL byte");
        return 0;
}

int store_task_from_row(gp_store *s, const store_row *row, gp_task *ret) {
        gp_task t;
        int64_t v;
        bool null = false;
        const char *p;
        size_t n;
        char state[16];
        char why[160];
        int r;

        memset(&t, 0, sizeof(t));
        if (row->get_i64(row->ctx, COL_ID, &null, &v) < 0 || null || v <= 0)
                return row_err(s, 0, COL_ID, "not a positive integer");
        t.id = v;
        if ((r = row_str(s, row, t.id, COL_TENANT, t.tenant, sizeof(t.tenant))) < 0 ||
            (r = row_str(s, row, t.id, COL_NAME, t.name, sizeof(t.name))) < 0 ||
            (r = row_str(s, row, t.id, COL_MODEL, t.model, sizeof(t.model))) < 0 ||
            (r = row_str(s, row, t.id, COL_GPU_MODEL, t.gpu_model, sizeof(t.gpu_model))) < 0 ||
            (r = row_str(s, row, t.id, COL_NODE_SELECTOR, t.node_selector, sizeof(t.node_selector))) < 0 ||
            (r = row_str(s, row, t.id, COL_UNIX_USER, t.user, sizeof(t.user))) < 0 ||
            (r = row_int(s, row, t.id, COL_PRIORITY, &t.priority)) < 0 ||
            (r = row_int(s, row, t.id, COL_GPU_REQUEST, &t.gpu_request)) < 0 ||
            (r = row_i64(s, row, t.id, COL_MEMORY_MB, INT64_MIN, INT64_MAX, &t.memory_mb)) < 0 ||
            (r = row_bool(s, row, t.id, COL_EXCLUSIVE, &t.exclusive)) < 0 ||
            (r = row_bool(s, row, t.id, COL_PREEMPTIBLE, &t.preemptible)) < 0 ||
            (r = row_bool(s, row, t.id, COL_IS_LEASE, &t.is_lease)) < 0 ||
            (r = row_i64(s, row, t.id, COL_TIMEOUT_S, INT64_MIN, INT64_MAX, &t.timeout_s)) < 0 ||
            (r = row_i64(s, row, t.id, COL_QUEUE_TIMEOUT_S, INT64_MIN, INT64_MAX, &t.queue_timeout_s)) < 0 ||
            (r = row_i64(s, row, t.id, COL_LEASE_TTL_S, INT64_MIN, INT64_MAX, &t.lease_ttl_s)) < 0 ||
            (r = row_int(s, row, t.id, COL_MAX_RETRIES, &t.max_retries)) < 0 ||
            (r = row_int(s, row, t.id, COL_RETRIES, &t.retries)) < 0 ||
            (r = row_int(s, row, t.id, COL_PREEMPT_COUNT, &t.preempt_count)) < 0 ||
            (r = row_str(s, row, t.id, COL_STATE, state, sizeof(state))) < 0 ||
            (r = row_str(s, row, t.id, COL_REASON, t.reason, sizeof(t.reason))) < 0 ||
            (r = row_i64(s, row, t.id, COL_SUBMITTED_MS, INT64_MIN, INT64_MAX, &t.submitted_ms)) < 0 ||
            (r = row_i64(s, row, t.id, COL_STARTED_MS, INT64_MIN, INT64_MAX, &t.started_ms)) < 0 ||
            (r = row_i64(s, row, t.id, COL_FINISHED_MS, INT64_MIN, INT64_MAX, &t.finished_ms)) < 0 ||
            (r = row_i64(s, row, t.id, COL_HEARTBEAT_MS, INT64_MIN, INT64_MAX, &t.heartbeat_ms)) < 0 ||
            (r = row_i64(s, row, t.id, COL_SUP_PID, INT64_MIN, INT64_MAX, &t.sup_pid)) < 0 ||
            (r = row_i64(s, row, t.id, COL_SUP_START, INT64_MIN, INT64_MAX, &t.sup_start)) < 0 ||
            (r = row_i64(s, row, t.id, COL_ELASTIC_MAX, 0, GP_MAX_GPUS, &v)) < 0)
                return r;
        t.elastic_max_gpus = (int)v;
        if ((r = row_i64(s, row, t.id, COL_BORROWING, 0, 1, &v)) < 0)
                return r;
        t.borrowing = v != 0;
        if ((r = row_i64(s, row, t.id, COL_ARRAY_ID, 0, INT64_MAX, &t.array_id)) < 0 ||
            (r = row_i64(s, row, t.id, COL_ARRAY_INDEX, 0, INT32_MAX, &v)) < 0)
                return r;
        t.array_index = (int)v;
        if ((r = row_i64(s, row, t.id, COL_ARRAY_LIMIT, 0, INT32_MAX, &v)) < 0)
                return r;
        t.array_limit = (int)v;
        if ((r = row_i64(s, row, t.id, COL_GPU_MEM_PEAK, -1, (int64_t)1 << 50, &v)) < 0)
                return r;
        t.gpu_mem_seen = v >= 0; /* the peak of the run it is on (or ended) */
        t.gpu_mem_peak_mb = t.gpu_mem_peak_stored = v >= 0 ? v : 0;
        if (gp_task_state_parse(state, &t.state) < 0)
                return row_err(s, t.id, COL_STATE, "unknown state name");

        if (row->get_i64(row->ctx, COL_EXIT_CODE, &null, &v) < 0)
                return row_err(s, t.id, COL_EXIT_CODE, "not an integer");
        if (!null) {
                if (v < INT32_MIN || v > INT32_MAX)
                        return row_err(s, t.id, COL_EXIT_CODE, "out of range");
                t.has_exit_code = true;
                t.exit_code = (int)v;
        }

        if (row->get_text(row->ctx, COL_GPUS, &p, &n) < 0)
                return row_err(s, t.id, COL_GPUS, "not text");
        if (p) {
                r = gpus_from_json(p, n, &t.gpus, &t.n_gpus, why, sizeof(why));
                if (r == -ENOMEM)
                        return store_set_err(s, "out of memory", "reading task %" PRId64, t.id);
                if (r < 0)
                        return row_err(s, t.id, COL_GPUS, why);
        }

        if (row->get_text(row->ctx, COL_SPEC, &p, &n) < 0) {
                r = row_err(s, t.id, COL_SPEC, "not text");
                goto fail;
        }
        if (p) {
                if (n > GP_STORE_SPEC_MAX || memchr(p, '\0', n)) {
                        r = row_err(s, t.id, COL_SPEC, "longer than 1 MiB or contains a NUL byte");
                        goto fail;
                }
                t.spec = strndup(p, n);
                if (!t.spec) {
                        r = -ENOMEM;
                        store_set_err(s, "out of memory", "reading task %" PRId64, t.id);
                        goto fail;
                }
        }
        *ret = t;
        return 0;
fail:
        gp_task_done(&t);
        return r;
}

int gp_store_task_put(gp_store *s, const gp_task *t) {
        int r = enter(s, "task put");
        if (r < 0)
                return r;
        r = store_task_check(s, t);
        if (r < 0)
                return r;
        return track(s, s->ops->task_put(s, t));
}

int gp_store_task_get(gp_store *s, int64_t id, gp_task *ret) {
        int r = enter(s, "task get");
        if (r < 0)
                return r;
        return track(s, s->ops->task_get(s, id, ret));
}

int gp_store_task_list(gp_store *s, const gp_task_filter *f, gp_task_cb cb, void *ud) {
        int r = enter(s, "task list");
        if (r < 0)
                return r;
        if (f->limit < 1 || f->limit > GP_STORE_LIST_MAX) {
                store_set_err(s, NULL, "task list: limit %d outside 1..%d", f->limit, GP_STORE_LIST_MAX);
                return -EINVAL;
        }
        if (f->state < -1 || f->state >= GP_TASK_STATE_COUNT) {
                store_set_err(s, NULL, "task list: state %d out of range", f->state);
                return -EINVAL;
        }
        if (f->tenant && strnlen(f->tenant, GP_TENANT_MAX) >= GP_TENANT_MAX) {
                store_set_err(s, NULL, "task list: tenant longer than %d bytes", GP_TENANT_MAX - 1);
                return -EINVAL;
        }
        if (f->before_id < 0) {
                store_set_err(s, NULL, "task list: before_id %" PRId64 " is negative", f->before_id);
                return -EINVAL;
        }
        s->in_cb = true;
        r = s->ops->task_list(s, f, cb, ud);
        s->in_cb = false;
        return track(s, r);
}

int gp_store_task_load_active(gp_store *s, gp_task_cb cb, void *ud) {
        int r = enter(s, "task load_active");
        if (r < 0)
                return r;
        s->in_cb = true;
        r = s->ops->task_load_active(s, cb, ud);
        s->in_cb = false;
        return track(s, r);
}

int gp_store_task_max_id(gp_store *s, int64_t *ret) {
        int r = enter(s, "task max_id");
        if (r < 0)
                return r;
        return track(s, s->ops->task_max_id(s, ret));
}

static int check_key(gp_store *s, const char *what, const char *key) {
        size_t n = key ? strnlen(key, GP_STORE_META_KEY_MAX + 1) : 0;
        if (n == 0 || n > GP_STORE_META_KEY_MAX) {
                store_set_err(s, NULL, "%s: key empty or longer than %d bytes", what, GP_STORE_META_KEY_MAX);
                return -EINVAL;
        }
        return 0;
}

int gp_store_meta_get(gp_store *s, const char *key, char *buf, size_t size) {
        int r = enter(s, "meta get");
        if (r < 0)
                return r;
        if ((r = check_key(s, "meta get", key)) < 0)
                return r;
        if (!buf || size == 0) {
                store_set_err(s, NULL, "meta get %s: no buffer", key);
                return -EINVAL;
        }
        return track(s, s->ops->meta_get(s, key, buf, size));
}

int store_meta_copy(gp_store *s, const char *what, const char *p, size_t n, char *buf, size_t size) {
        if (!p)
                return store_set_err(s, "value is NULL", "%s", what);
        if (n >= size) {
                store_set_err(s, "value does not fit the buffer", "%s", what);
                return -E2BIG;
        }
        memcpy(buf, p, n);
        buf[n] = '\0';
        return 0;
}

int gp_store_checkpoint(gp_store *s, int *ret_wal_pages) {
        int r = enter(s, "checkpoint");
        if (r < 0)
                return r;
        if (s->in_tx)
                return store_set_err(s, "a transaction is open on this handle", "checkpoint");
        if (!s->ops->checkpoint) {
                if (ret_wal_pages)
                        *ret_wal_pages = 0;
                return 0;
        }
        return s->ops->checkpoint(s, ret_wal_pages);
}

int gp_store_meta_set(gp_store *s, const char *key, const char *value) {
        int r = enter(s, "meta set");
        if (r < 0)
                return r;
        if ((r = check_key(s, "meta set", key)) < 0)
                return r;
        if (strcmp(key, "schema_version") == 0) {
                store_set_err(s, NULL, "meta set: key \"schema_version\" is reserved for the store");
                return -EINVAL;
        }
        if (!value || strnlen(value, GP_STORE_META_VALUE_MAX + 1) > GP_STORE_META_VALUE_MAX) {
                store_set_err(s, NULL, "meta set %s: value missing or longer than %d bytes", key,
                              GP_STORE_META_VALUE_MAX);
                return -EINVAL;
        }
        return track(s, s->ops->meta_set(s, key, value));
}

/* ------------------------------------------------------------------ */
/* schema                                                              */

/* The tasks table of schema version 1; INT is the integer column type
 * (SQLite INTEGER, so id is the rowid; PostgreSQL BIGINT). */
#define TASKS_V1(INT)                                       \
        "CREATE TABLE tasks ("                              \
        " id " INT " PRIMARY KEY,"                          \
        " tenant TEXT NOT NULL,"                            \
        " name TEXT NOT NULL,"                              \
        " model TEXT NOT NULL,"                             \
        " gpu_model TEXT NOT NULL,"                         \
        " priority " INT " NOT NULL,"                       \
        " gpu_request " INT " NOT NULL,"                    \
        " memory_mb " INT " NOT NULL,"                      \
        " exclusive " INT " NOT NULL,"                      \
        " preemptible " INT " NOT NULL,"                    \
        " is_lease " INT " NOT NULL,"                       \
        " timeout_s " INT " NOT NULL,"                      \
        " queue_timeout_s " INT " NOT NULL,"                \
        " lease_ttl_s " INT " NOT NULL,"                    \
        " max_retries " INT " NOT NULL,"                    \
        " retries " INT " NOT NULL,"                        \
        " preempt_count " INT " NOT NULL,"                  \
        " state TEXT NOT NULL,"                             \
        " exit_code " INT ","                               \
        " reason TEXT NOT NULL,"                            \
        " submitted_ms " INT " NOT NULL,"                   \
        " started_ms " INT " NOT NULL,"                     \
        " finished_ms " INT " NOT NULL,"                    \
        " heartbeat_ms " INT " NOT NULL,"                   \
        " sup_pid " INT " NOT NULL,"                        \
        " sup_start " INT " NOT NULL,"                      \
        " spec TEXT,"                                       \
        " gpus TEXT);"                                      \
        "CREATE INDEX tasks_state_id ON tasks (state, id);" \
        "CREATE INDEX tasks_tenant_id ON tasks (tenant, id);"

/* Migration 8: the task runs table (made at every open, after the
 * migrations: made here first where it is missing) gets its array
 * columns, 0 for the runs kept before, and an index to find an array's
 * runs by (history -j 12: made once, here, not at every open). */
static int runs_array_columns(gp_store *s, const store_schema_ops *ops) {
        static const char *const add[STORE_DIALECTS] = {
                [STORE_SQLITE] = "ALTER TABLE task_runs ADD COLUMN array_id INTEGER NOT NULL DEFAULT 0;"
                                 "ALTER TABLE task_runs ADD COLUMN array_index INTEGER NOT NULL DEFAULT 0;"
                                 "CREATE INDEX task_runs_array ON task_runs (array_id, id)",
                [STORE_POSTGRES] = "ALTER TABLE task_runs ADD COLUMN array_id BIGINT NOT NULL DEFAULT 0, "
                                   "ADD COLUMN array_index BIGINT NOT NULL DEFAULT 0; "
                                   "CREATE INDEX task_runs_array ON task_runs (array_id, id)",
        };
        int r = ops->exec(s, store_runs_schema_sql[ops->dialect], "migrate to schema version 8: task runs");
        return r < 0 ? r : ops->exec(s, add[ops->dialect], "migrate to schema version 8: task runs' array columns");
}

/* Schema migrations, applied in order by store_migrate.  To change the
 * schema append a version (SQL for every dialect, and/or fn for what SQL
 * cannot say), raise GP_STORE_SCHEMA_VERSION and extend the column lists;
 * never edit an applied migration.  The meta table (which holds
 * schema_version) exists before any of them. */
static const struct store_migration {
        int version;
        const char *sql[STORE_DIALECTS];                     /* run first; NULL: none */
        int (*fn)(gp_store *s, const store_schema_ops *ops); /* then this, if set */
} migrations[] = {
        {1, {[STORE_SQLITE] = TASKS_V1("INTEGER"), [STORE_POSTGRES] = TASKS_V1("BIGINT")}, NULL},
        /* an elastic task's most GPUs */
        {2,
         {[STORE_SQLITE] = "ALTER TABLE tasks ADD COLUMN elastic_max INTEGER NOT NULL DEFAULT 0",
          [STORE_POSTGRES] = "ALTER TABLE tasks ADD COLUMN elastic_max BIGINT NOT NULL DEFAULT 0"},
         NULL},
        /* 0/1: the run started on GPUs guaranteed to other tenants */
        {3,
         {[STORE_SQLITE] = "ALTER TABLE tasks ADD COLUMN borrowing INTEGER NOT NULL DEFAULT 0",
          [STORE_POSTGRES] = "ALTER TABLE tasks ADD COLUMN borrowing BIGINT NOT NULL DEFAULT 0"},
         NULL},
        /* job arrays (SQLite adds one column per ALTER) */
        {4,
         {[STORE_SQLITE] = "ALTER TABLE tasks ADD COLUMN array_id INTEGER NOT NULL DEFAULT 0;"
                           "ALTER TABLE tasks ADD COLUMN array_index INTEGER NOT NULL DEFAULT 0;"
                           "ALTER TABLE tasks ADD COLUMN array_limit INTEGER NOT NULL DEFAULT 0;"
                           "CREATE INDEX tasks_array ON tasks (array_id, id)",
          [STORE_POSTGRES] = "ALTER TABLE tasks ADD COLUMN array_id BIGINT NOT NULL DEFAULT 0, "
                             "ADD COLUMN array_index BIGINT NOT NULL DEFAULT 0, "
                             "ADD COLUMN array_limit BIGINT NOT NULL DEFAULT 0; "
                             "CREATE INDEX tasks_array ON tasks (array_id, id)"},
         NULL},
        /* the labels a task's nodes must have (issue 15) */
        {5,
         {[STORE_SQLITE] = "ALTER TABLE tasks ADD COLUMN node_selector TEXT NOT NULL DEFAULT ''",
          [STORE_POSTGRES] = "ALTER TABLE tasks ADD COLUMN node_selector TEXT NOT NULL DEFAULT ''"},
         NULL},
        /* the Unix user a task runs as, its submitter's (issue 23) */
        {6,
         {[STORE_SQLITE] = "ALTER TABLE tasks ADD COLUMN unix_user TEXT NOT NULL DEFAULT ''",
          [STORE_POSTGRES] = "ALTER TABLE tasks ADD COLUMN unix_user TEXT NOT NULL DEFAULT ''"},
         NULL},
        /* its run's GPU memory peak, MiB, -1 = not read (issue 24): kept across a restart */
        {7,
         {[STORE_SQLITE] = "ALTER TABLE tasks ADD COLUMN gpu_mem_peak INTEGER NOT NULL DEFAULT -1",
          [STORE_POSTGRES] = "ALTER TABLE tasks ADD COLUMN gpu_mem_peak BIGINT NOT NULL DEFAULT -1"},
         NULL},
        /* a run of a job array's element keeps its array id and index, for history's 12_3 */
        {8, {NULL}, runs_array_columns},
};

_Static_assert(GP_ARRAY_SIZE(migrations) == GP_STORE_SCHEMA_VERSION,
               "one migration per schema version, the last one GP_STORE_SCHEMA_VERSION");

#define META_TABLE_SQL "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)"

/* The metering tables, created if missing at every open, after the
 * versioned migrations (no schema version of their own: CREATE ... IF NOT
 * EXISTS is the migration). */
#define BILLING_SCHEMA(INTEGER, SERIAL)                                                                \
        "CREATE TABLE IF NOT EXISTS usage (id " SERIAL ", task_id " INTEGER " NOT NULL,"               \
        " tenant TEXT NOT NULL, gpu_model TEXT NOT NULL, gpus_milli " INTEGER " NOT NULL,"             \
        " memory_mb " INTEGER " NOT NULL, start_ms " INTEGER " NOT NULL, end_ms " INTEGER " NOT NULL," \
        " gpu_ms " INTEGER " NOT NULL, run_start_ms " INTEGER " NOT NULL,"                             \
        " end_kind " INTEGER " NOT NULL, month " INTEGER " NOT NULL);"                                 \
        "CREATE INDEX IF NOT EXISTS usage_tenant_month ON usage (tenant, month);"                      \
        "CREATE INDEX IF NOT EXISTS usage_task ON usage (task_id);"                                    \
        "CREATE TABLE IF NOT EXISTS usage_tokens (id " SERIAL ", tenant TEXT NOT NULL,"                \
        " model TEXT NOT NULL, prompt_tokens " INTEGER " NOT NULL,"                                    \
        " completion_tokens " INTEGER " NOT NULL, at_ms " INTEGER " NOT NULL,"                         \
        " month " INTEGER " NOT NULL);"                                                                \
        "CREATE INDEX IF NOT EXISTS usage_tokens_tenant_month ON usage_tokens (tenant, month);"

static const char *const billing_sql[STORE_DIALECTS] = {
        [STORE_SQLITE] = BILLING_SCHEMA("INTEGER", "INTEGER PRIMARY KEY"),
        [STORE_POSTGRES] = BILLING_SCHEMA("BIGINT", "BIGSERIAL PRIMARY KEY")
                /* the leader lease of several servers (gp_store_lease_*) */
                "CREATE TABLE IF NOT EXISTS leader (id INT PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL,"
                " epoch BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL, url TEXT NOT NULL DEFAULT '');",
};

static int read_schema_version(gp_store *s, const store_schema_ops *ops, int64_t *ret) {
        char text[32];
        int r = ops->read_version(s, text, sizeof(text));
        if (r == -ENOENT) {
                *ret = 0;
                return 0;
        }
        if (r == -E2BIG || (r == 0 && gp_parse_i64(text, 0, INT32_MAX, ret) < 0))
                return store_set_err(s, "not a number", "read schema_version");
        return r;
}

int store_migrate(gp_store *s, const store_schema_ops *ops) {
        int64_t version = 0;
        int r = ops->begin(s);
        if (r < 0)
                return r;
        if ((r = ops->exec(s, META_TABLE_SQL, "migrate: create meta table")) < 0 ||
            (r = read_schema_version(s, ops, &version)) < 0)
                goto rollback;
        if (version > GP_STORE_SCHEMA_VERSION) {
                char msg[128];
                snprintf(msg, sizeof(msg), "database schema version %" PRId64 " is newer than this gpupool's (%d)",
                         version, GP_STORE_SCHEMA_VERSION);
                r = store_set_err(s, msg, "migrate");
                goto rollback;
        }
        for (size_t i = 0; i < GP_ARRAY_SIZE(migrations); i++) {
                const struct store_migration *m = &migrations[i];
                if (m->version <= version)
                        continue;
                char what[64], sql[160];
                snprintf(what, sizeof(what), "migrate to schema version %d", m->version);
                if (m->sql[ops->dialect] && (r = ops->exec(s, m->sql[ops->dialect], what)) < 0)
                        goto rollback;
                if (m->fn && (r = m->fn(s, ops)) < 0)
                        goto rollback;
                snprintf(sql, sizeof(sql),
                         "INSERT INTO meta (key, value) VALUES ('schema_version', '%d') "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         m->version);
                if ((r = ops->exec(s, sql, what)) < 0)
                        goto rollback;
        }
        if ((r = ops->exec(s, billing_sql[ops->dialect], "create metering tables")) < 0 ||
            (r = ops->exec(s, store_coord_schema_sql, "create coordinator tables")) < 0 ||
            (r = ops->exec(s, store_idem_schema_sql, "create the idempotency table")) < 0 ||
            (r = ops->exec(s, store_runs_schema_sql[ops->dialect], "create the task runs table")) < 0 ||
            (r = ops->commit(s)) < 0)
                goto rollback;
        return 0;
rollback:
        ops->rollback(s);
        return r;
}

/* ------------------------------------------------------------------ */
/* metering                                                            */

static bool month_ok(int m) {
        return m >= 197001 && m <= 999912 && m % 100 >= 1 && m % 100 <= 12;
}

static int bill_err(gp_store *s, int kind, const char *col, const char *why) {
        return store_set_err(s, why, "reading a %s row: column %s", kind ? "usage_tokens" : "usage", col);
}

static int bill_i64(gp_store *s, const store_row *row, int kind, int col, const char *name, int64_t min,
                    int64_t max, int64_t *ret) {
        bool null = false;
        int64_t v = 0;
        if (row->get_i64(row->ctx, col, &null, &v) < 0)
                return bill_err(s, kind, name, "not an integer");
        if (null)
                return bill_err(s, kind, name, "NULL");
        if (v < min || v > max)
                return bill_err(s, kind, name, "out of range");
        *ret = v;
        return 0;
}

static int bill_str(gp_store *s, const store_row *row, int kind, int col, const char *name, char *dst,
                    size_t size) {
        const char *p;
        size_t n;
        if (row->get_text(row->ctx, col, &p, &n) < 0 || !p)
                return bill_err(s, kind, name, "not text");
        int r = copy_str(dst, size, p, n);
        if (r < 0)
                return bill_err(s, kind, name, r == -E2BIG ? "too long" : "contains a NUL byte");
        return 0;
}

int store_bill_row(gp_store *s, const store_row *row, int kind, void *cb, void *ud) {
        int64_t v[8];
        int r;
        if (kind == 0) {
                gp_bill_segment g;
                memset(&g, 0, sizeof(g));
                if ((r = bill_i64(s, row, 0, UCOL_TASK_ID, "task_id", 0, INT64_MAX, &g.task_id)) < 0 ||
                    (r = bill_str(s, row, 0, UCOL_TENANT, "tenant", g.tenant, sizeof(g.tenant))) < 0 ||
                    (r = bill_str(s, row, 0, UCOL_GPU_MODEL, "gpu_model", g.gpu_model, sizeof(g.gpu_model))) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_GPUS_MILLI, "gpus_milli", 0, INT32_MAX, &g.gpus_milli)) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_MEMORY_MB, "memory_mb", 0, INT64_MAX, &g.memory_mb)) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_START_MS, "start_ms", 0, INT64_MAX / 2, &g.start_ms)) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_END_MS, "end_ms", g.start_ms, INT64_MAX / 2, &g.end_ms)) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_GPU_MS, "gpu_ms", 0, INT64_MAX, &g.gpu_ms)) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_RUN_START_MS, "run_start_ms", 0, INT64_MAX / 2, &g.run_start_ms)) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_END_KIND, "end_kind", 0, 2, &v[0])) < 0 ||
                    (r = bill_i64(s, row, 0, UCOL_MONTH, "month", 197001, 999912, &v[1])) < 0)
                        return r;
                g.end_kind = (int)v[0];
                g.month = (int)v[1];
                return ((gp_segment_cb)cb)(&g, ud);
        }
        gp_bill_tokens t;
        memset(&t, 0, sizeof(t));
        if ((r = bill_str(s, row, 1, TCOL_TENANT, "tenant", t.tenant, sizeof(t.tenant))) < 0 ||
            (r = bill_str(s, row, 1, TCOL_MODEL, "model", t.model, sizeof(t.model))) < 0 ||
            (r = bill_i64(s, row, 1, TCOL_PROMPT, "prompt_tokens", 0, INT64_MAX / 4, &t.prompt_tokens)) < 0 ||
            (r = bill_i64(s, row, 1, TCOL_COMPLETION, "completion_tokens", 0, INT64_MAX / 4, &t.completion_tokens)) < 0 ||
            (r = bill_i64(s, row, 1, TCOL_AT_MS, "at_ms", 0, INT64_MAX / 2, &t.at_ms)) < 0 ||
            (r = bill_i64(s, row, 1, TCOL_MONTH, "month", 197001, 999912, &v[0])) < 0)
                return r;
        t.month = (int)v[0];
        return ((gp_tokens_cb)cb)(&t, ud);
}

int gp_store_usage_add(gp_store *s, const gp_bill_segment *g) {
        int r = enter(s, "usage add");
        if (r < 0)
                return r;
        if (!str_fits(g->tenant, sizeof(g->tenant)) || !str_fits(g->gpu_model, sizeof(g->gpu_model)) ||
            g->start_ms < 0 || g->end_ms < g->start_ms || g->run_start_ms < 0 || g->gpus_milli < 0 ||
            g->gpus_milli > INT32_MAX || g->gpu_ms < 0 || g->memory_mb < 0 || g->task_id < 0 ||
            g->end_kind < 0 || g->end_kind > 2 || !month_ok(g->month)) {
                store_set_err(s, NULL, "usage add (task %" PRId64 "): record out of range", g->task_id);
                return -EINVAL;
        }
        return track(s, s->ops->usage_add(s, g));
}

int gp_store_tokens_add(gp_store *s, const gp_bill_tokens *t) {
        int r = enter(s, "tokens add");
        if (r < 0)
                return r;
        if (!str_fits(t->tenant, sizeof(t->tenant)) || !str_fits(t->model, sizeof(t->model)) ||
            t->prompt_tokens < 0 || t->completion_tokens < 0 || t->prompt_tokens > INT64_MAX / 4 ||
            t->completion_tokens > INT64_MAX / 4 || t->at_ms < 0 || !month_ok(t->month)) {
                store_set_err(s, NULL, "tokens add: record out of range");
                return -EINVAL;
        }
        return track(s, s->ops->tokens_add(s, t));
}

static int usage_filter_check(gp_store *s, const gp_usage_filter *f, const char *what) {
        if ((f->tenant && strnlen(f->tenant, GP_TENANT_MAX) >= GP_TENANT_MAX) || f->task_id < 0 ||
            f->from_ms < 0 || f->to_ms < 0 || (f->month_min && !month_ok(f->month_min)) ||
            (f->month_max && !month_ok(f->month_max))) {
                store_set_err(s, NULL, "%s: filter out of range", what);
                return -EINVAL;
        }
        return 0;
}

int gp_store_usage_list(gp_store *s, const gp_usage_filter *f, gp_segment_cb cb, void *ud) {
        int r = enter(s, "usage list");
        if (r < 0 || (r = usage_filter_check(s, f, "usage list")) < 0)
                return r;
        s->in_cb = true;
        r = s->ops->usage_list(s, f, cb, ud);
        s->in_cb = false;
        return track(s, r);
}

int gp_store_tokens_list(gp_store *s, const gp_usage_filter *f, gp_tokens_cb cb, void *ud) {
        int r = enter(s, "tokens list");
        if (r < 0 || (r = usage_filter_check(s, f, "tokens list")) < 0)
                return r;
        s->in_cb = true;
        r = s->ops->tokens_list(s, f, cb, ud);
        s->in_cb = false;
        return track(s, r);
}

int store_q(gp_store *s, const char *sql, int n, const char *const *params, store_text_cb cb, void *ud,
            const char *what) {
        int r = s->ops->query(s, sql, n, params, cb, ud, what);
        if (r == -GP_ESTORE && s->in_tx)
                s->doomed = true;
        return r;
}

int store_w(gp_store *s, const char *sql, int n, const char *const *params, const char *what) {
        if (!s->ops->write)
                return store_q(s, sql, n, params, NULL, NULL, what);
        int r = s->ops->write(s, sql, n, params, what);
        if (r == -GP_ESTORE)
                s->doomed = true;
        return r;
}
