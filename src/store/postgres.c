/* postgres.c - the PostgreSQL store backend ("postgres://..." or
 * "postgresql://...", handed to libpq as is).
 *
 * One libpq connection per gp_store handle.  Every statement but the
 * transaction commands is prepared on the connection (PQprepare) at open and
 * after a reconnect; each call sends parameters as text and reads text
 * results, decoded by store_task_from_row (store.c), which validates them.
 * Row-returning calls run in single-row mode so load_active does not hold
 * every active task in memory at once.
 *
 * A transaction is pipelined (libpq pipeline mode): BEGIN and each write
 * are sent without waiting for their answers, and commit sends the fence
 * check (a fenced handle) and COMMIT behind them, so a batch of up to
 * PIPE_MAX writes costs one round trip, not one per statement.  The answers
 * are read at the next sync point: every PIPE_MAX writes, before any other
 * call on the handle, and at commit.  A write the server refused is
 * therefore reported by that later call (naming the task id), which fails,
 * and dooms the transaction like any failure (store.c); the server skips
 * the rest of the pipeline, COMMIT included, and commit rolls it back.
 * The fence check raises an error when the lease is not ours, so a deposed
 * leader's COMMIT is skipped by the server itself.
 *
 * Invariants:
 *   - the library never prints: libpq notices are swallowed, errors go to
 *     s->errmsg (the server's primary message plus what we were doing);
 *   - a connection lost outside a transaction is re-established (a new
 *     session, statements prepared again) by the next call; one lost inside
 *     a transaction fails every call until rollback - never a silent
 *     reconnect that would run the rest of a batch outside the transaction;
 *   - a failed COMMIT leaves the connection outside any transaction (the
 *     server ends it; after an injected fault we send ROLLBACK).
 *
 * Schema: the same tables as SQLite (see docs/internals/store.md), with
 * BIGINT for every integer column (booleans 0/1) and gpus as JSON text, so
 * both backends store and validate the same values.  Tables are created in
 * the first schema of the connection's search_path.
 */
#include "store/store-int.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"

enum {
        PS_PUT,
        PS_GET,
        PS_LIST,        /* $1 before_id, $2 limit */
        PS_LIST_S,      /* + $3 state */
        PS_LIST_T,      /* + $3 tenant */
        PS_LIST_ST,     /* + $3 state, $4 tenant */
        PS_LIST_A,      /* + $3 array_id */
        PS_ACTIVE,
        PS_MAX_ID,
        PS_META_GET,
        PS_META_SET,
        PS_USAGE_ADD,
        PS_USAGE_LIST,  /* $1 tenant or NULL, $2 task id or 0, $3..$4 months, $5..$6 times */
        PS_TOKENS_ADD,
        PS_TOKENS_LIST, /* $1 tenant or NULL, $2..$3 months, $4..$5 times */
        PS_FENCE,       /* $1 server id, $2 epoch: fails (division by zero) unless the lease is theirs */
        PS_COUNT,
};

#define SELECT_TASKS "SELECT " STORE_TASK_COLUMNS " FROM tasks "

static const struct {
        const char *name;
        const char *sql;
        int nparams;
} stmts[PS_COUNT] = {
        [PS_PUT] = {"gp_task_put",
                    "INSERT INTO tasks (" STORE_TASK_COLUMNS ") VALUES "
                    "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, "
                    "$19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36) "
                    "ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, name = EXCLUDED.name, "
                    "model = EXCLUDED.model, gpu_model = EXCLUDED.gpu_model, "
                    "priority = EXCLUDED.priority, gpu_request = EXCLUDED.gpu_request, "
                    "memory_mb = EXCLUDED.memory_mb, exclusive = EXCLUDED.exclusive, "
                    "preemptible = EXCLUDED.preemptible, is_lease = EXCLUDED.is_lease, "
                    "timeout_s = EXCLUDED.timeout_s, queue_timeout_s = EXCLUDED.queue_timeout_s, "
                    "lease_ttl_s = EXCLUDED.lease_ttl_s, max_retries = EXCLUDED.max_retries, "
                    "retries = EXCLUDED.retries, preempt_count = EXCLUDED.preempt_count, "
                    "state = EXCLUDED.state, exit_code = EXCLUDED.exit_code, reason = EXCLUDED.reason, "
                    "submitted_ms = EXCLUDED.submitted_ms, started_ms = EXCLUDED.started_ms, "
                    "finished_ms = EXCLUDED.finished_ms, heartbeat_ms = EXCLUDED.heartbeat_ms, "
                    "sup_pid = EXCLUDED.sup_pid, sup_start = EXCLUDED.sup_start, spec = EXCLUDED.spec, "
                    "gpus = EXCLUDED.gpus, elastic_max = EXCLUDED.elastic_max, borrowing = EXCLUDED.borrowing, "
                    "array_id = EXCLUDED.array_id, array_index = EXCLUDED.array_index, "
                    "array_limit = EXCLUDED.array_limit, node_selector = EXCLUDED.node_selector, unix_user = EXCLUDED.unix_user, "
                    "gpu_mem_peak = EXCLUDED.gpu_mem_peak",
                    COL_COUNT},
        [PS_GET] = {"gp_task_get", SELECT_TASKS "WHERE id = $1", 1},
        [PS_LIST] = {"gp_task_list", SELECT_TASKS "WHERE id < $1 ORDER BY id DESC LIMIT $2", 2},
        [PS_LIST_S] = {"gp_task_list_s", SELECT_TASKS "WHERE state = $3 AND id < $1 ORDER BY id DESC LIMIT $2", 3},
        [PS_LIST_T] = {"gp_task_list_t", SELECT_TASKS "WHERE tenant = $3 AND id < $1 ORDER BY id DESC LIMIT $2", 3},
        [PS_LIST_ST] = {"gp_task_list_st",
                        SELECT_TASKS "WHERE tenant = $4 AND state = $3 AND id < $1 ORDER BY id DESC LIMIT $2", 4},
        [PS_LIST_A] = {"gp_task_list_a", SELECT_TASKS "WHERE array_id = $3 AND id < $1 ORDER BY id DESC LIMIT $2", 3},
        [PS_ACTIVE] = {"gp_task_active", SELECT_TASKS "WHERE state IN ('queued', 'running') ORDER BY id ASC", 0},
        [PS_MAX_ID] = {"gp_task_max_id", "SELECT COALESCE(MAX(id), 0) FROM tasks", 0},
        [PS_META_GET] = {"gp_meta_get", "SELECT value FROM meta WHERE key = $1", 1},
        [PS_META_SET] = {"gp_meta_set",
                         "INSERT INTO meta (key, value) VALUES ($1, $2) "
                         "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                         2},
        [PS_USAGE_ADD] = {"gp_usage_add",
                          "INSERT INTO usage (" STORE_USAGE_COLUMNS ") VALUES "
                          "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                          UCOL_COUNT},
        [PS_USAGE_LIST] = {"gp_usage_list",
                           "SELECT " STORE_USAGE_COLUMNS " FROM usage WHERE ($1::text IS NULL OR tenant = $1) "
                           "AND ($2::bigint = 0 OR task_id = $2) AND month >= $3 AND month <= $4 "
                           "AND end_ms >= $5 AND start_ms < $6 ORDER BY start_ms, task_id, id",
                           6},
        [PS_TOKENS_ADD] = {"gp_tokens_add",
                           "INSERT INTO usage_tokens (" STORE_TOKENS_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6)",
                           TCOL_COUNT},
        [PS_TOKENS_LIST] = {"gp_tokens_list",
                            "SELECT " STORE_TOKENS_COLUMNS " FROM usage_tokens WHERE ($1::text IS NULL OR "
                            "tenant = $1) AND month >= $2 AND month <= $3 AND at_ms >= $4 AND at_ms < $5 "
                            "ORDER BY at_ms, id",
                            5},
        /* FOR SHARE keeps a takeover (an UPDATE of the row) waiting until
         * this transaction ends, so what it commits was written under our
         * term; the error (not an empty answer) aborts the transaction in
         * the server, so a COMMIT pipelined behind it is never carried out */
        [PS_FENCE] = {"gp_fence",
                      "SELECT 1 / (SELECT count(*)::int FROM (SELECT 1 FROM leader WHERE id = 1 AND holder = $1 "
                      "AND epoch = $2::bigint FOR SHARE) l)",
                      2},
};

/* Key of the advisory lock held while migrating ("gpupool" in ASCII). */
#define MIGRATE_LOCK_KEY 0x677075706f6f6cLL
/* First key of the session advisory lock a server holds for its life
 * (gp_store_claim; "gpow" in ASCII); the second is hashtext() of the schema
 * the tables live in, so stores in two schemas of one database are two
 * stores.  The two-key form never meets the one-key migration lock. */
#define OWNER_LOCK_CLASS 0x67706f77
/* First key of the session lock a server of a cluster holds on its
 * server_id for its life (gp_store_claim_member; "gpmb"); the second is
 * hashtext() of the schema, '/' and the id.  A member also holds the owner
 * lock above in SHARE mode, so a single server (EXCLUSIVE) and the members
 * of a cluster exclude each other whichever starts first. */
#define MEMBER_LOCK_CLASS 0x67706d62

#define PIPE_MAX 128 /* writes in flight before we read their answers */

/* What a pipelined statement was, to name it in a refusal (pipe_sync). */
enum {
        PK_BEGIN,
        PK_TASK,  /* a task put: pending_id is its id */
        PK_USAGE, /* a usage row: pending_id is its task's id */
        PK_OTHER, /* meta set or tokens add */
        PK_FENCE,
        PK_COMMIT,
};

typedef struct pg_store {
        PGconn *conn;                   /* the connection */
        char *url;                      /* to reconnect (may hold a password: never shown) */
        bool prepared;                  /* stmts are prepared on the current session */
        int lock_timeout_ms;            /* from busy_timeout_ms, set on every session */
        bool pipelined;                 /* in pipeline mode (only inside a transaction) */
        int n_pending;                  /* statements sent since the last sync: < PIPE_MAX, + fence and COMMIT */
        unsigned char pending_kind[PIPE_MAX + 2]; /* PK_* of each pending statement */
        int64_t pending_id[PIPE_MAX + 2];         /* its task id (PK_TASK, PK_USAGE), else 0 */
        bool claimed;                   /* gp_store_claim succeeded: every new session claims again */
        gp_store_owner me;              /* the record claimed with */
        char member_id[64];             /* gp_store_claim_member succeeded with this id ("": not a member);
                                           every new session claims again */
} pg_store;

static pg_store *impl(gp_store *s) {
        return s->impl;
}

static void no_notices(void *arg, const char *message) {
        (void)arg;
        (void)message;
}

/* A server or libpq message without its trailing newline(s). */
static void trimmed(const char *msg, char *out, size_t size) {
        gp_strlcpy(out, msg ? msg : "", size);
        size_t n = strlen(out);
        while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
                out[--n] = '\0';
}

/* Failure of a statement: the server's primary message when there is a
 * result, libpq's otherwise.  Returns -GP_ESTORE. */
static int pg_err(gp_store *s, const PGresult *res, const char *what) {
        char msg[GP_STORE_ERRMSG_MAX];
        const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        if (state && !strcmp(state, "53100")) /* disk_full on the server */
                s->full = true;
        trimmed(primary ? primary : PQerrorMessage(impl(s)->conn), msg, sizeof(msg));
        if (!msg[0])
                gp_strlcpy(msg, "no answer from the server", sizeof(msg));
        return store_set_err(s, msg, "%s", what);
}

/* Run a simple command (no parameters, no rows).  Not a fault-injection
 * point: callers that want one call store_fault first. */
static int exec_cmd(gp_store *s, const char *sql, const char *what) {
        PGresult *res = PQexec(impl(s)->conn, sql);
        int r = 0;
        if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
                r = pg_err(s, res, what);
        PQclear(res);
        return r;
}

/* Session settings and prepared statements on a fresh connection. */
static int prepare_session(gp_store *s) {
        pg_store *p = impl(s);
        char sql[96];
        int r;
        p->prepared = false;
        if (PQsetClientEncoding(p->conn, "UTF8") != 0)
                return pg_err(s, NULL, "set client_encoding");
        snprintf(sql, sizeof(sql), "SET lock_timeout = %d", p->lock_timeout_ms);
        if ((r = exec_cmd(s, sql, "set lock_timeout")) < 0)
                return r;
        for (int i = 0; i < PS_COUNT; i++) {
                PGresult *res = PQprepare(p->conn, stmts[i].name, stmts[i].sql, stmts[i].nparams, NULL);
                if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                        char what[64];
                        snprintf(what, sizeof(what), "prepare %s", stmts[i].name);
                        r = pg_err(s, res, what);
                        PQclear(res);
                        return r;
                }
                PQclear(res);
        }
        p->prepared = true;
        return 0;
}

static int pipe_leave(gp_store *s);
static int claim_session(gp_store *s, const gp_store_owner *me, bool have_lock, gp_store_owner *ret_other);
static int member_session(gp_store *s, const char *id, const gp_store_owner *me, gp_store_owner *ret_other);

/* Outside a transaction: make sure the connection is up, reconnecting (a
 * fresh session, statements prepared again) if it was lost.
 * 0 or -GP_ESTORE. */
static int ensure_conn(gp_store *s, const char *what) {
        pg_store *p = impl(s);
        if (PQstatus(p->conn) == CONNECTION_OK && p->prepared)
                return p->pipelined ? pipe_leave(s) : 0;
        if (PQstatus(p->conn) != CONNECTION_OK) {
                p->pipelined = false;
                p->n_pending = 0;
                p->prepared = false;
                PQfinish(p->conn);
                p->conn = PQconnectdb(p->url);
                if (!p->conn)
                        return store_set_err(s, "out of memory", "%s: reconnect", what);
                PQsetNoticeProcessor(p->conn, no_notices, NULL);
                if (PQstatus(p->conn) != CONNECTION_OK)
                        return pg_err(s, NULL, what);
        }
        int r = prepare_session(s);
        if (r < 0 || (!p->claimed && !p->member_id[0]))
                return r;
        /* the claim was the lost session's: take it again, or refuse to
         * write behind the back of a server that has the store now */
        gp_store_owner other;
        r = p->member_id[0] ? member_session(s, p->member_id, &p->me, &other) : claim_session(s, &p->me, false, &other);
        if (r == 0)
                return 0;
        if (r == -EBUSY || r == -EEXIST) {
                char who[320];
                gp_store_owner_format(&other, who, sizeof(who));
                store_set_err(s, who, "%s: the connection was lost and another server has claimed the store since",
                              what);
        }
        PQfinish(p->conn); /* the next call tries again on a fresh session */
        p->conn = NULL;
        p->prepared = false;
        return -GP_ESTORE;
}

static bool pg_in_tx(gp_store *s) {
        pg_store *p = impl(s);
        if (!p || !p->conn)
                return false;
        PGTransactionStatusType st = PQtransactionStatus(p->conn);
        return st == PQTRANS_INTRANS || st == PQTRANS_INERROR || st == PQTRANS_ACTIVE;
}

/* Before a statement: outside a transaction the connection is (re)made
 * usable; inside one it must still be the session that holds it - a
 * reconnect there would silently run the rest of the batch outside any
 * transaction. */
static int start_call(gp_store *s, const char *what) {
        if (!s->in_tx)
                return ensure_conn(s, what);
        if (!pg_in_tx(s))
                return store_set_err(s, "the connection was lost, and the transaction with it", "%s", what);
        return 0;
}

/* The answer of the fence check (PS_FENCE) for what: 0 when the lease is
 * ours, else -GP_EFENCED (it raised division by zero: the transaction is
 * aborted) or -GP_ESTORE. */
static int fence_result(gp_store *s, const PGresult *res, const char *what) {
        if (PQresultStatus(res) == PGRES_TUPLES_OK)
                return 0;
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (!state || strcmp(state, "22012") != 0)
                return pg_err(s, res, what);
        char msg[160];
        snprintf(msg, sizeof(msg), "server %s lost the leader lease (epoch %" PRId64 "): nothing stored", s->fence_id,
                 s->fence_epoch);
        store_set_err(s, msg, "%s", what);
        return -GP_EFENCED;
}

/* Read the answers of the pending statements up to a sync point.  The
 * first failure is reported (a write with its task id): -GP_ESTORE, or
 * -GP_EFENCED from the fence check; the server skipped what followed it. */
static int pipe_sync(gp_store *s) {
        pg_store *p = impl(s);
        int r = 0, k = 0, nulls = 0;
        if (PQpipelineSync(p->conn) != 1) {
                p->n_pending = 0;
                return pg_err(s, NULL, "pipelined writes: sync");
        }
        for (;;) {
                PGresult *res = PQgetResult(p->conn);
                if (!res) {
                        /* one NULL ends each statement's answers; two in a
                         * row means the sync will never come (connection lost) */
                        if (++nulls > 1 || PQstatus(p->conn) != CONNECTION_OK) {
                                if (r == 0)
                                        r = pg_err(s, NULL, "pipelined writes");
                                break;
                        }
                        continue;
                }
                nulls = 0;
                ExecStatusType st = PQresultStatus(res);
                if (st == PGRES_PIPELINE_SYNC) {
                        PQclear(res);
                        break;
                }
                int kind = k < p->n_pending ? p->pending_kind[k] : PK_OTHER;
                int64_t id = k < p->n_pending ? p->pending_id[k] : 0;
                k++;
                if (st == PGRES_PIPELINE_ABORTED || r < 0) {
                        /* skipped by the server after the first failure */
                } else if (kind == PK_FENCE) {
                        r = fence_result(s, res, "commit");
                } else if (st != PGRES_COMMAND_OK) {
                        char what[64];
                        if (kind == PK_TASK)
                                snprintf(what, sizeof(what), "task put (id %" PRId64 ")", id);
                        else if (kind == PK_USAGE)
                                snprintf(what, sizeof(what), "usage add (task %" PRId64 ")", id);
                        else
                                snprintf(what, sizeof(what), "%s",
                                         kind == PK_BEGIN    ? "begin"
                                         : kind == PK_COMMIT ? "commit"
                                                             : "meta set or tokens add");
                        r = pg_err(s, res, what);
                } else if (kind == PK_COMMIT && strcmp(PQcmdStatus(res), "COMMIT") != 0) {
                        /* COMMIT of an aborted transaction answers ROLLBACK */
                        r = store_set_err(s, "the server rolled the transaction back", "commit");
                }
                PQclear(res);
        }
        p->n_pending = 0;
        return r;
}

/* Leave pipeline mode (reading what is pending) before a call that needs
 * an answer now.  0 or the first refused statement's -GP_ESTORE. */
static int pipe_leave(gp_store *s) {
        pg_store *p = impl(s);
        int r = 0;
        if (!p->pipelined)
                return 0;
        if (p->n_pending > 0)
                r = pipe_sync(s);
        if (PQexitPipelineMode(p->conn) != 1 && r == 0)
                r = pg_err(s, NULL, "leave pipeline mode");
        p->pipelined = PQpipelineStatus(p->conn) != PQ_PIPELINE_OFF;
        return r;
}

/* Send a statement (prepared stmts[which], or sql when which < 0) without
 * waiting for its answer, entering pipeline mode if need be.  Not a
 * fault-injection point.  0 or -GP_ESTORE. */
static int pipe_send(gp_store *s, int which, const char *sql, const char *const *vals, int kind, int64_t id,
                     const char *what) {
        pg_store *p = impl(s);
        if (!p->pipelined) {
                if (PQenterPipelineMode(p->conn) != 1)
                        return pg_err(s, NULL, what);
                p->pipelined = true;
        }
        int ok = which < 0 ? PQsendQueryParams(p->conn, sql, 0, NULL, NULL, NULL, NULL, 0)
                           : PQsendQueryPrepared(p->conn, stmts[which].name, stmts[which].nparams, vals, NULL, NULL, 0);
        if (ok != 1)
                return pg_err(s, NULL, what);
        p->pending_kind[p->n_pending] = (unsigned char)kind;
        p->pending_id[p->n_pending++] = id;
        return 0;
}

/* Send a write inside a transaction without waiting for its answer. */
static int send_write(gp_store *s, int which, const char *const *vals, int kind, int64_t id, const char *what) {
        pg_store *p = impl(s);
        int r = start_call(s, what);
        if (r < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        if ((r = pipe_send(s, which, NULL, vals, kind, id, what)) < 0)
                return r;
        return p->n_pending >= PIPE_MAX ? pipe_sync(s) : 0;
}

/* gp_store_ops.write: a write with n text parameters inside a
 * transaction, pipelined like the task puts (no round trip before the
 * commit: a leader frozen mid-batch never holds the rows of an open
 * transaction for long); its answer is read at the commit. */
static int pg_write(gp_store *s, const char *sql, int n, const char *const *params, const char *what) {
        pg_store *p = impl(s);
        int r = start_call(s, what);
        if (r < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        if (!p->pipelined) {
                if (PQenterPipelineMode(p->conn) != 1)
                        return pg_err(s, NULL, what);
                p->pipelined = true;
        }
        if (PQsendQueryParams(p->conn, sql, n, NULL, params, NULL, NULL, 0) != 1)
                return pg_err(s, NULL, what);
        p->pending_kind[p->n_pending] = PK_OTHER;
        p->pending_id[p->n_pending++] = 0;
        return p->n_pending >= PIPE_MAX ? pipe_sync(s) : 0;
}

/* Inside a transaction of a fenced handle (gp_store_set_fence): does the
 * leader row still hold our server id and epoch (PS_FENCE, which makes a
 * takeover wait for this transaction)?  0, -GP_EFENCED (the transaction is
 * aborted), -GP_ESTORE. */
static int fence_check(gp_store *s, const char *what) {
        char epoch[24];
        snprintf(epoch, sizeof(epoch), "%" PRId64, s->fence_epoch);
        const char *vals[2] = {s->fence_id, epoch};
        PGresult *res = PQexecPrepared(impl(s)->conn, stmts[PS_FENCE].name, 2, vals, NULL, NULL, 0);
        int r = fence_result(s, res, what);
        PQclear(res);
        return r;
}

/* Run a prepared statement that returns no rows (fault-injection point).
 * Outside a transaction on a fenced handle it runs in one of its own, after
 * the fence check. */
static int run_cmd(gp_store *s, int which, const char *const *vals, const char *what) {
        pg_store *p = impl(s);
        int r;
        if ((r = start_call(s, what)) < 0 || (r = pipe_leave(s)) < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        bool own_tx = !s->in_tx && s->fence_id[0];
        if (own_tx && ((r = exec_cmd(s, "BEGIN", what)) < 0 || (r = fence_check(s, what)) < 0)) {
                if (pg_in_tx(s))
                        PQclear(PQexec(p->conn, "ROLLBACK"));
                return r;
        }
        PGresult *res = PQexecPrepared(p->conn, stmts[which].name, stmts[which].nparams, vals, NULL, NULL, 0);
        r = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : pg_err(s, res, what);
        PQclear(res);
        if (own_tx) {
                if (r == 0)
                        r = exec_cmd(s, "COMMIT", what);
                if (pg_in_tx(s))
                        PQclear(PQexec(p->conn, "ROLLBACK"));
        }
        return r;
}

/* Run a prepared statement that returns one row of one column (or none);
 * *ret_res is the result for the caller to read and PQclear.
 * 0, -ENOENT (no row), -GP_ESTORE. */
static int run_one(gp_store *s, int which, const char *const *vals, const char *what, PGresult **ret_res) {
        pg_store *p = impl(s);
        int r;
        if ((r = start_call(s, what)) < 0 || (r = pipe_leave(s)) < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        PGresult *res = PQexecPrepared(p->conn, stmts[which].name, stmts[which].nparams, vals, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
                r = pg_err(s, res, what);
                PQclear(res);
                return r;
        }
        if (PQntuples(res) < 1) {
                PQclear(res);
                return -ENOENT;
        }
        *ret_res = res;
        return 0;
}

/* ---- open / close / schema ---- */

/* Schema primitives for store_migrate (store.c): the migration runs in one
 * transaction under an advisory lock, so two daemons starting together
 * against a fresh database do not race on CREATE TABLE. */
static int mig_begin(gp_store *s) {
        char sql[64];
        int r;
        if ((r = exec_cmd(s, "BEGIN", "migrate: begin")) < 0)
                return r;
        snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%lld)", (long long)MIGRATE_LOCK_KEY);
        if ((r = exec_cmd(s, sql, "migrate: lock")) < 0)
                PQclear(PQexec(impl(s)->conn, "ROLLBACK"));
        return r;
}

static int mig_commit(gp_store *s) {
        return exec_cmd(s, "COMMIT", "migrate: commit");
}

static void mig_rollback(gp_store *s) {
        PQclear(PQexec(impl(s)->conn, "ROLLBACK"));
}

static int mig_read_version(gp_store *s, char *buf, size_t size) {
        PGresult *res = PQexec(impl(s)->conn, "SELECT value FROM meta WHERE key = 'schema_version'");
        int r = 0;
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
                r = pg_err(s, res, "read schema_version");
        else if (PQntuples(res) == 0)
                r = -ENOENT;
        else if (gp_strlcpy(buf, PQgetvalue(res, 0, 0), size) >= size)
                r = -E2BIG;
        PQclear(res);
        return r;
}

static const store_schema_ops pg_schema = {
        .dialect = STORE_POSTGRES,
        .begin = mig_begin,
        .commit = mig_commit,
        .rollback = mig_rollback,
        .exec = exec_cmd,
        .read_version = mig_read_version,
};

static int pg_open(gp_store *s, const char *url, const char *target, const gp_store_options *opt) {
        pg_store *p = impl(s);
        int r;
        p->lock_timeout_ms = opt->busy_timeout_ms;
        p->url = strdup(url);
        if (!p->url)
                return store_set_err(s, "out of memory", "open postgres database");
        p->conn = PQconnectdb(url);
        if (!p->conn)
                return store_set_err(s, "out of memory", "open postgres database");
        PQsetNoticeProcessor(p->conn, no_notices, NULL);
        if (PQstatus(p->conn) != CONNECTION_OK)
                return pg_err(s, NULL, "connect to postgres");
        /* the session settings come before the migration so it runs under
         * lock_timeout too; statements are prepared again once tables exist */
        char sql[96];
        snprintf(sql, sizeof(sql), "SET lock_timeout = %d", p->lock_timeout_ms);
        if ((r = exec_cmd(s, sql, "set lock_timeout")) < 0 || (r = store_migrate(s, &pg_schema)) < 0)
                return r;
        return prepare_session(s);
}

static void pg_close(gp_store *s) {
        pg_store *p = impl(s);
        PQfinish(p->conn);
        if (p->url)
                explicit_bzero(p->url, strlen(p->url));
        free(p->url);
}

/* ---- one server per store ---- */

#define OWNER_TABLE                                                                                 \
        "CREATE TABLE IF NOT EXISTS store_owner (id BIGINT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL," \
        " listen TEXT NOT NULL, since_ms BIGINT NOT NULL)"
#define OWNER_LOCK_ARGS "%d, hashtext(current_schema())"

/* What the holder recorded, as far as it can be read (best effort: the
 * lock is the truth, the row only names who holds it). */
static void read_owner(gp_store *s, gp_store_owner *ret) {
        PGresult *res = PQexec(impl(s)->conn, "SELECT host, pid, listen, since_ms FROM store_owner WHERE id = 1");
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 4) {
                char text[1024];
                int n = snprintf(text, sizeof(text), "host=%s\npid=%s\nlisten=%s\nsince_ms=%s\n",
                                 PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2),
                                 PQgetvalue(res, 0, 3));
                if (n > 0)
                        gp_store_owner_from_text(text, (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1, ret);
        }
        PQclear(res);
}

/* The owner lock is held: by a single server (EXCLUSIVE: -EBUSY, its row
 * into *ret_other) or by the servers of a cluster (SHARE: -EADDRINUSE, the
 * message names the leader). */
static int held_by_whom(gp_store *s, gp_store_owner *ret_other) {
        char sql[160];
        snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock_shared(" OWNER_LOCK_ARGS ")", OWNER_LOCK_CLASS);
        PGresult *res = PQexec(impl(s)->conn, sql);
        bool shared = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
                      strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        if (!shared) {
                read_owner(s, ret_other);
                return -EBUSY;
        }
        snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock_shared(" OWNER_LOCK_ARGS ")", OWNER_LOCK_CLASS);
        PQclear(PQexec(impl(s)->conn, sql));
        char leader[400] = "no server leads it now";
        res = PQexec(impl(s)->conn, "SELECT holder, url, (expires_at > now()) FROM leader WHERE id = 1");
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 3)
                snprintf(leader, sizeof(leader), "%s server %.63s at %.255s",
                         strcmp(PQgetvalue(res, 0, 2), "t") == 0 ? "led by" : "last led by", PQgetvalue(res, 0, 0),
                         PQgetvalue(res, 0, 1));
        PQclear(res);
        store_set_err(s, leader,
                      "claim the store: the servers of a cluster (cluster.server_id set) are using this store; a "
                      "server without cluster.server_id would hand out the same task ids: give this one a "
                      "cluster.server_id of its own to join them, or a store of its own");
        return -EADDRINUSE;
}

/* Take the owner lock on the current session (unless have_lock: this
 * session holds it) and write the row.  0, -EBUSY or -GP_ESTORE; on
 * failure this call's lock is released. */
static int claim_session(gp_store *s, const gp_store_owner *me, bool have_lock, gp_store_owner *ret_other) {
        pg_store *p = impl(s);
        char sql[128], pid[24], since[24];
        PGresult *res;
        int r;
        if (!have_lock) {
                snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock(" OWNER_LOCK_ARGS ")", OWNER_LOCK_CLASS);
                res = PQexec(p->conn, sql);
                if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
                        r = pg_err(s, res, "claim the store: lock");
                        PQclear(res);
                        return r;
                }
                bool got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
                PQclear(res);
                if (!got)
                        return held_by_whom(s, ret_other);
        }
        snprintf(pid, sizeof(pid), "%" PRId64, me->pid);
        snprintf(since, sizeof(since), "%" PRId64, me->since_ms);
        const char *vals[4] = {me->host, pid, me->listen, since};
        if ((r = exec_cmd(s, OWNER_TABLE, "claim the store: create store_owner")) < 0)
                goto unlock;
        res = PQexecParams(p->conn,
                           "INSERT INTO store_owner (id, host, pid, listen, since_ms) VALUES (1, $1, $2, $3, $4) "
                           "ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, "
                           "listen = EXCLUDED.listen, since_ms = EXCLUDED.since_ms",
                           4, NULL, vals, NULL, NULL, 0);
        r = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : pg_err(s, res, "claim the store: record the owner");
        PQclear(res);
        if (r == 0 || have_lock)
                return r;
unlock:
        snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock(" OWNER_LOCK_ARGS ")", OWNER_LOCK_CLASS);
        PQclear(PQexec(p->conn, sql));
        return r;
}

static int pg_claim(gp_store *s, const gp_store_owner *me, gp_store_owner *ret_other) {
        pg_store *p = impl(s);
        int r = ensure_conn(s, "claim the store");
        if (r < 0)
                return r;
        /* held already: session locks stack, so only the row is rewritten */
        if ((r = claim_session(s, me, p->claimed, ret_other)) < 0)
                return r;
        p->me = *me;
        p->claimed = true;
        return 0;
}

#define MEMBER_TABLE                                                                                  \
        "CREATE TABLE IF NOT EXISTS store_members (server_id TEXT PRIMARY KEY, host TEXT NOT NULL,"         \
        " pid BIGINT NOT NULL, listen TEXT NOT NULL, since_ms BIGINT NOT NULL)"
#define MEMBER_LOCK_SQL(fn) \
        "SELECT " fn "(%d, hashtext(current_schema() || '/' || $1))"

/* One statement with the server id as $1; its one boolean. -GP_ESTORE, 0 (f), 1 (t). */
static int member_bool(gp_store *s, const char *fn, const char *id, const char *what) {
        char sql[128];
        snprintf(sql, sizeof(sql), MEMBER_LOCK_SQL("%s"), fn, MEMBER_LOCK_CLASS);
        const char *vals[1] = {id};
        PGresult *res = PQexecParams(impl(s)->conn, sql, 1, NULL, vals, NULL, NULL, 0);
        int r = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1
                        ? strcmp(PQgetvalue(res, 0, 0), "t") == 0
                        : pg_err(s, res, what);
        PQclear(res);
        return r;
}

/* The SHARE owner lock and the lock of id on the current session, and
 * id's row in store_members.  0, -EBUSY (a single server holds the
 * store), -EEXIST (a live server holds id) with *ret_other, -GP_ESTORE;
 * on failure this call's locks are released. */
static int member_session(gp_store *s, const char *id, const gp_store_owner *me, gp_store_owner *ret_other) {
        pg_store *p = impl(s);
        char sql[160], pid[24], since[24];
        snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock_shared(" OWNER_LOCK_ARGS ")", OWNER_LOCK_CLASS);
        PGresult *res = PQexec(p->conn, sql);
        if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
                int r = pg_err(s, res, "join the cluster: lock");
                PQclear(res);
                return r;
        }
        bool got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        if (!got) {
                read_owner(s, ret_other);
                return -EBUSY;
        }
        int r = member_bool(s, "pg_try_advisory_lock", id, "join the cluster: lock the server id");
        if (r == 0) {
                const char *vals[1] = {id};
                res = PQexecParams(p->conn, "SELECT host, pid, listen, since_ms FROM store_members WHERE server_id = $1",
                                   1, NULL, vals, NULL, NULL, 0);
                if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 4) {
                        char text[1024];
                        int n = snprintf(text, sizeof(text), "host=%s\npid=%s\nlisten=%s\nsince_ms=%s\n",
                                         PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2),
                                         PQgetvalue(res, 0, 3));
                        if (n > 0)
                                gp_store_owner_from_text(text, (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1,
                                                         ret_other);
                }
                PQclear(res);
                r = -EEXIST;
                goto unlock_shared;
        }
        if (r < 0)
                goto unlock_shared;
        snprintf(pid, sizeof(pid), "%" PRId64, me->pid);
        snprintf(since, sizeof(since), "%" PRId64, me->since_ms);
        const char *vals[5] = {id, me->host, pid, me->listen, since};
        if ((r = exec_cmd(s, MEMBER_TABLE, "join the cluster: create store_members")) < 0)
                goto unlock;
        res = PQexecParams(p->conn,
                           "INSERT INTO store_members (server_id, host, pid, listen, since_ms) "
                           "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (server_id) DO UPDATE SET host = EXCLUDED.host, "
                           "pid = EXCLUDED.pid, listen = EXCLUDED.listen, since_ms = EXCLUDED.since_ms",
                           5, NULL, vals, NULL, NULL, 0);
        r = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : pg_err(s, res, "join the cluster: record the server");
        PQclear(res);
        if (r == 0)
                return 0;
unlock:
        member_bool(s, "pg_advisory_unlock", id, "join the cluster: unlock");
unlock_shared:
        snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock_shared(" OWNER_LOCK_ARGS ")", OWNER_LOCK_CLASS);
        PQclear(PQexec(p->conn, sql));
        return r;
}

static int pg_claim_member(gp_store *s, const char *id, const gp_store_owner *me, gp_store_owner *ret_other) {
        pg_store *p = impl(s);
        if (p->claimed || p->member_id[0])
                return store_set_err(s, "this handle has claimed the store already", "join the cluster");
        int r = ensure_conn(s, "join the cluster");
        if (r < 0 || (r = member_session(s, id, me, ret_other)) < 0)
                return r;
        p->me = *me;
        gp_strlcpy(p->member_id, id, sizeof(p->member_id));
        return 0;
}

/* ---- the leader lease (store.h) ---- */

static void fmt_i64(char *buf, size_t size, int64_t v);

static int lease_exec(gp_store *s, const char *sql, int n, const char *const *vals, const char *what,
                      PGresult **ret_res) {
        int r = ensure_conn(s, what);
        if (r < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        PGresult *res = PQexecParams(impl(s)->conn, sql, n, NULL, vals, NULL, NULL, 0);
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
                r = pg_err(s, res, what);
                PQclear(res);
                return r;
        }
        *ret_res = res;
        return 0;
}

static int pg_lease_get(gp_store *s, gp_store_lease *ret) {
        PGresult *res;
        int r = lease_exec(s,
                           "SELECT holder, epoch, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint, url "
                           "FROM leader WHERE id = 1",
                           0, NULL, "read the leader lease", &res);
        if (r < 0)
                return r;
        gp_store_lease l = {.epoch = 0};
        if (PQntuples(res) == 1 && (gp_parse_i64(PQgetvalue(res, 0, 1), 0, INT64_MAX, &l.epoch) < 0 ||
                                    gp_parse_i64(PQgetvalue(res, 0, 2), INT64_MIN, INT64_MAX, &l.left_ms) < 0)) {
                PQclear(res);
                return store_set_err(s, "not a number", "read the leader lease");
        }
        if (PQntuples(res) == 1) {
                gp_strlcpy(l.holder, PQgetvalue(res, 0, 0), sizeof(l.holder));
                gp_strlcpy(l.url, PQgetvalue(res, 0, 3), sizeof(l.url));
        }
        PQclear(res);
        *ret = l;
        return 0;
}

static int pg_lease_acquire(gp_store *s, const char *id, const char *url, int64_t lease_ms, int64_t *ret_epoch) {
        char ms[24];
        fmt_i64(ms, sizeof(ms), lease_ms);
        const char *vals[3] = {id, ms, url};
        PGresult *res;
        /* one statement: two servers trying at once are serialised on the
         * row, and the second sees the first's unexpired lease */
        int r = lease_exec(s,
                           "INSERT INTO leader (id, holder, epoch, expires_at, url) "
                           "VALUES (1, $1, 1, now() + $2::bigint * interval '1 millisecond', $3) "
                           "ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder, epoch = leader.epoch + 1, "
                           "expires_at = EXCLUDED.expires_at, url = EXCLUDED.url "
                           "WHERE leader.holder = EXCLUDED.holder OR leader.expires_at <= now() RETURNING epoch",
                           3, vals, "acquire the leader lease", &res);
        if (r < 0)
                return r;
        int64_t epoch = 0;
        if (PQntuples(res) == 1) {
                r = gp_parse_i64(PQgetvalue(res, 0, 0), 1, INT64_MAX, &epoch) < 0
                            ? store_set_err(s, "not a number", "acquire the leader lease")
                            : 0;
                PQclear(res);
                if (r == 0)
                        *ret_epoch = epoch;
                return r;
        }
        PQclear(res);
        gp_store_lease held;
        char msg[160];
        if ((r = pg_lease_get(s, &held)) < 0)
                return r;
        snprintf(msg, sizeof(msg), "held by server %s (epoch %" PRId64 ") for %" PRId64 " ms more", held.holder,
                 held.epoch, held.left_ms);
        store_set_err(s, msg, "acquire the leader lease");
        return -EBUSY;
}

static int pg_lease_renew(gp_store *s, const char *id, int64_t epoch, int64_t lease_ms) {
        char ms[24], ep[24];
        fmt_i64(ms, sizeof(ms), lease_ms);
        fmt_i64(ep, sizeof(ep), epoch);
        const char *vals[3] = {id, ep, ms};
        PGresult *res;
        int r = lease_exec(s,
                           "UPDATE leader SET expires_at = now() + $3::bigint * interval '1 millisecond' "
                           "WHERE id = 1 AND holder = $1 AND epoch = $2::bigint",
                           3, vals, "renew the leader lease", &res);
        if (r < 0)
                return r;
        bool ours = !strcmp(PQcmdTuples(res), "1");
        PQclear(res);
        if (!ours) {
                store_set_err(s, "another server took it over", "renew the leader lease");
                return -ESTALE;
        }
        return 0;
}

static int pg_lease_release(gp_store *s, const char *id, int64_t epoch) {
        char ep[24];
        fmt_i64(ep, sizeof(ep), epoch);
        const char *vals[2] = {id, ep};
        PGresult *res;
        int r = lease_exec(s,
                           "UPDATE leader SET expires_at = now() - interval '1 millisecond' "
                           "WHERE id = 1 AND holder = $1 AND epoch = $2::bigint",
                           2, vals, "release the leader lease", &res);
        if (r == 0)
                PQclear(res);
        return r;
}

/* ---- transactions ---- */

static int tx_cmd(gp_store *s, const char *sql, const char *what) {
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        return exec_cmd(s, sql, what);
}

/* BEGIN goes out with the batch's first writes (pipelined): its answer is
 * read at the first sync point, and a refusal is reported there. */
static int pg_begin(gp_store *s) {
        int r = ensure_conn(s, "begin");
        if (r < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "begin");
        return pipe_send(s, -1, "BEGIN", NULL, PK_BEGIN, 0, "begin");
}

static int pg_rollback(gp_store *s) {
        char msg[GP_STORE_ERRMSG_MAX];
        gp_strlcpy(msg, s->errmsg, sizeof(msg));
        pipe_leave(s); /* a refused write does not matter now */
        gp_strlcpy(s->errmsg, msg, sizeof(s->errmsg));
        if (!pg_in_tx(s))
                return 0; /* the server already ended it (or the connection is gone) */
        return tx_cmd(s, "ROLLBACK", "rollback");
}

/* The fence check (a fenced handle) and COMMIT go out behind the pending
 * writes, and one sync reads every answer: a batch's last round trip.  A
 * refused write or a failed fence check makes the server skip the COMMIT;
 * store_commit_failed then rolls back. */
static int pg_commit(gp_store *s) {
        pg_store *p = impl(s);
        int r = 0;
        if (store_fault(s)) {
                r = store_set_err(s, "injected fault", "commit");
        } else {
                char epoch[24];
                snprintf(epoch, sizeof(epoch), "%" PRId64, s->fence_epoch);
                const char *vals[2] = {s->fence_id, epoch};
                if (s->fence_id[0])
                        r = pipe_send(s, PS_FENCE, NULL, vals, PK_FENCE, 0, "commit");
                if (r == 0)
                        r = pipe_send(s, -1, "COMMIT", NULL, PK_COMMIT, 0, "commit");
                int r2 = pipe_sync(s); /* reads whatever was sent, even after a failed send */
                if (r == 0)
                        r = r2;
                if (PQexitPipelineMode(p->conn) != 1 && r == 0)
                        r = pg_err(s, NULL, "leave pipeline mode");
                p->pipelined = PQpipelineStatus(p->conn) != PQ_PIPELINE_OFF;
        }
        return r < 0 ? store_commit_failed(s, r) : 0;
}

/* ---- tasks ---- */

static void fmt_i64(char *buf, size_t size, int64_t v) {
        snprintf(buf, size, "%" PRId64, v);
}

static int pg_task_put(gp_store *s, const gp_task *t) {
        char num[COL_COUNT][24];
        const char *vals[COL_COUNT];
        char *gpus = NULL;
        char what[64];
        snprintf(what, sizeof(what), "task put (id %" PRId64 ")", t->id);
        if (store_gpus_to_json(t, &gpus) < 0)
                return store_set_err(s, "out of memory", "%s", what);

        static const int int_cols[] = {
                COL_ID, COL_PRIORITY, COL_GPU_REQUEST, COL_MEMORY_MB, COL_EXCLUSIVE, COL_PREEMPTIBLE,
                COL_IS_LEASE, COL_TIMEOUT_S, COL_QUEUE_TIMEOUT_S, COL_LEASE_TTL_S, COL_MAX_RETRIES,
                COL_RETRIES, COL_PREEMPT_COUNT, COL_EXIT_CODE, COL_SUBMITTED_MS, COL_STARTED_MS,
                COL_FINISHED_MS, COL_HEARTBEAT_MS, COL_SUP_PID, COL_SUP_START, COL_ELASTIC_MAX,
                COL_BORROWING, COL_ARRAY_ID, COL_ARRAY_INDEX, COL_ARRAY_LIMIT, COL_GPU_MEM_PEAK,
        };
        const int64_t ints[] = {
                t->id, t->priority, t->gpu_request, t->memory_mb, t->exclusive, t->preemptible,
                t->is_lease, t->timeout_s, t->queue_timeout_s, t->lease_ttl_s, t->max_retries,
                t->retries, t->preempt_count, t->exit_code, t->submitted_ms, t->started_ms,
                t->finished_ms, t->heartbeat_ms, t->sup_pid, t->sup_start, t->elastic_max_gpus,
                t->borrowing, t->array_id, t->array_index, t->array_limit,
                t->gpu_mem_seen ? t->gpu_mem_peak_mb : -1,
        };
        for (size_t i = 0; i < GP_ARRAY_SIZE(int_cols); i++) {
                fmt_i64(num[int_cols[i]], sizeof(num[0]), ints[i]);
                vals[int_cols[i]] = num[int_cols[i]];
        }
        if (!t->has_exit_code)
                vals[COL_EXIT_CODE] = NULL;
        vals[COL_TENANT] = t->tenant;
        vals[COL_NAME] = t->name;
        vals[COL_MODEL] = t->model;
        vals[COL_GPU_MODEL] = t->gpu_model;
        vals[COL_NODE_SELECTOR] = t->node_selector;
        vals[COL_UNIX_USER] = t->user;
        vals[COL_STATE] = gp_task_state_name(t->state);
        vals[COL_REASON] = t->reason;
        vals[COL_SPEC] = t->spec;
        vals[COL_GPUS] = gpus;

        int r = s->in_tx ? send_write(s, PS_PUT, vals, PK_TASK, t->id, what) : run_cmd(s, PS_PUT, vals, what);
        free(gpus); /* libpq copied the parameters into its output buffer */
        return r;
}

/* store_row over one row of a PGresult (text format). */
typedef struct pg_row {
        const PGresult *res;
        int row;
} pg_row;

static int col_i64(void *ctx, int col, bool *ret_null, int64_t *ret) {
        pg_row *pr = ctx;
        if (PQgetisnull(pr->res, pr->row, col)) {
                *ret_null = true;
                return 0;
        }
        *ret_null = false;
        return gp_parse_i64(PQgetvalue(pr->res, pr->row, col), INT64_MIN, INT64_MAX, ret) < 0 ? -EINVAL : 0;
}

static int col_text(void *ctx, int col, const char **ret, size_t *ret_len) {
        pg_row *pr = ctx;
        if (PQgetisnull(pr->res, pr->row, col)) {
                *ret = NULL;
                *ret_len = 0;
                return 0;
        }
        *ret = PQgetvalue(pr->res, pr->row, col);
        *ret_len = (size_t)PQgetlength(pr->res, pr->row, col);
        return 0;
}

static int check_shape(gp_store *s, const PGresult *res, const char *what) {
        if (PQnfields(res) != COL_COUNT)
                return store_set_err(s, "unexpected number of columns", "%s", what);
        return 0;
}

static int pg_task_get(gp_store *s, int64_t id, gp_task *ret) {
        char idbuf[24], what[64];
        const char *vals[1] = {idbuf};
        PGresult *res = NULL;
        fmt_i64(idbuf, sizeof(idbuf), id);
        snprintf(what, sizeof(what), "task get (id %" PRId64 ")", id);
        int r = run_one(s, PS_GET, vals, what, &res);
        if (r == -ENOENT)
                store_set_err(s, "no such task", "%s", what);
        if (r < 0)
                return r;
        pg_row pr = {res, 0};
        store_row row = {.ctx = &pr, .get_i64 = col_i64, .get_text = col_text};
        r = check_shape(s, res, what);
        if (r == 0)
                r = store_task_from_row(s, &row, ret);
        PQclear(res);
        return r;
}

/* Run a row-returning statement in single-row mode, handing each decoded
 * record to cb.  After cb stops or a row fails to decode the remaining rows
 * are read and dropped, so the connection is idle again on return. */
static int each_row(gp_store *s, int which, const char *const *vals, const char *what, gp_task_cb cb,
                    void *ud) {
        pg_store *p = impl(s);
        int r;
        if ((r = start_call(s, what)) < 0 || (r = pipe_leave(s)) < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        if (!PQsendQueryPrepared(p->conn, stmts[which].name, stmts[which].nparams, vals, NULL, NULL, 0))
                return pg_err(s, NULL, what);
        /* if single-row mode is refused the whole result comes at once and
         * the loop below handles it the same way */
        PQsetSingleRowMode(p->conn);
        r = 0;
        bool stopped = false;
        PGresult *res;
        while ((res = PQgetResult(p->conn)) != NULL) {
                ExecStatusType st = PQresultStatus(res);
                if (st == PGRES_SINGLE_TUPLE || st == PGRES_TUPLES_OK) {
                        for (int i = 0; !stopped && i < PQntuples(res); i++) {
                                pg_row pr = {res, i};
                                store_row row = {.ctx = &pr, .get_i64 = col_i64, .get_text = col_text};
                                gp_task t;
                                if ((r = check_shape(s, res, what)) < 0 ||
                                    (r = store_task_from_row(s, &row, &t)) < 0) {
                                        stopped = true;
                                        break;
                                }
                                r = cb(&t, ud);
                                gp_task_done(&t);
                                stopped = r != 0;
                        }
                } else if (!stopped) {
                        r = pg_err(s, res, what);
                        stopped = true;
                }
                PQclear(res);
        }
        return r;
}

static int pg_task_list(gp_store *s, const gp_task_filter *f, gp_task_cb cb, void *ud) {
        char before[24], limit[24];
        const char *vals[4] = {before, limit, NULL, NULL};
        int which;
        fmt_i64(before, sizeof(before), f->before_id > 0 ? f->before_id : INT64_MAX);
        fmt_i64(limit, sizeof(limit), f->limit);
        char arr[24];
        if (f->array_id > 0) {
                which = PS_LIST_A;
                fmt_i64(arr, sizeof(arr), f->array_id);
                vals[2] = arr;
        } else if (f->state >= 0 && f->tenant) {
                which = PS_LIST_ST;
                vals[2] = gp_task_state_name(f->state);
                vals[3] = f->tenant;
        } else if (f->state >= 0) {
                which = PS_LIST_S;
                vals[2] = gp_task_state_name(f->state);
        } else if (f->tenant) {
                which = PS_LIST_T;
                vals[2] = f->tenant;
        } else {
                which = PS_LIST;
        }
        return each_row(s, which, vals, "task list", cb, ud);
}

static int pg_task_load_active(gp_store *s, gp_task_cb cb, void *ud) {
        return each_row(s, PS_ACTIVE, NULL, "task load_active", cb, ud);
}

static int pg_task_max_id(gp_store *s, int64_t *ret) {
        PGresult *res = NULL;
        int64_t v;
        int r = run_one(s, PS_MAX_ID, NULL, "task max_id", &res);
        if (r == -ENOENT)
                return store_set_err(s, "no row", "task max_id");
        if (r < 0)
                return r;
        if (gp_parse_i64(PQgetvalue(res, 0, 0), 0, INT64_MAX, &v) < 0)
                r = store_set_err(s, "not a number", "task max_id");
        else
                *ret = v;
        PQclear(res);
        return r;
}

/* ---- meta ---- */

static int pg_meta_get(gp_store *s, const char *key, char *buf, size_t size) {
        const char *vals[1] = {key};
        PGresult *res = NULL;
        char what[GP_STORE_META_KEY_MAX + 32];
        snprintf(what, sizeof(what), "meta get %s", key);
        int r = run_one(s, PS_META_GET, vals, what, &res);
        if (r == -ENOENT)
                store_set_err(s, "no such key", "%s", what);
        if (r < 0)
                return r;
        r = store_meta_copy(s, what, PQgetisnull(res, 0, 0) ? NULL : PQgetvalue(res, 0, 0),
                            (size_t)PQgetlength(res, 0, 0), buf, size);
        PQclear(res);
        return r;
}

static int pg_meta_set(gp_store *s, const char *key, const char *value) {
        const char *vals[2] = {key, value};
        char what[GP_STORE_META_KEY_MAX + 32];
        snprintf(what, sizeof(what), "meta set %s", key);
        return s->in_tx ? send_write(s, PS_META_SET, vals, PK_OTHER, 0, what) : run_cmd(s, PS_META_SET, vals, what);
}

/* ---- metering ---- */

static int pg_usage_add(gp_store *s, const gp_bill_segment *g) {
        char num[UCOL_COUNT][24];
        const char *vals[UCOL_COUNT];
        const int64_t ints[UCOL_COUNT] = {
                [UCOL_TASK_ID] = g->task_id, [UCOL_GPUS_MILLI] = g->gpus_milli, [UCOL_MEMORY_MB] = g->memory_mb,
                [UCOL_START_MS] = g->start_ms, [UCOL_END_MS] = g->end_ms, [UCOL_GPU_MS] = g->gpu_ms,
                [UCOL_RUN_START_MS] = g->run_start_ms, [UCOL_END_KIND] = g->end_kind, [UCOL_MONTH] = g->month,
        };
        for (int i = 0; i < UCOL_COUNT; i++) {
                fmt_i64(num[i], sizeof(num[i]), ints[i]);
                vals[i] = num[i];
        }
        vals[UCOL_TENANT] = g->tenant;
        vals[UCOL_GPU_MODEL] = g->gpu_model;
        return s->in_tx ? send_write(s, PS_USAGE_ADD, vals, PK_USAGE, g->task_id, "usage add")
                        : run_cmd(s, PS_USAGE_ADD, vals, "usage add");
}

static int pg_tokens_add(gp_store *s, const gp_bill_tokens *t) {
        char num[TCOL_COUNT][24];
        const char *vals[TCOL_COUNT];
        const int64_t ints[TCOL_COUNT] = {
                [TCOL_PROMPT] = t->prompt_tokens, [TCOL_COMPLETION] = t->completion_tokens,
                [TCOL_AT_MS] = t->at_ms, [TCOL_MONTH] = t->month,
        };
        for (int i = 0; i < TCOL_COUNT; i++) {
                fmt_i64(num[i], sizeof(num[i]), ints[i]);
                vals[i] = num[i];
        }
        vals[TCOL_TENANT] = t->tenant;
        vals[TCOL_MODEL] = t->model;
        return s->in_tx ? send_write(s, PS_TOKENS_ADD, vals, PK_OTHER, 0, "tokens add")
                        : run_cmd(s, PS_TOKENS_ADD, vals, "tokens add");
}

/* Like each_row, for the metering tables (store_bill_row decodes). */
static int bill_rows(gp_store *s, int which, int kind, const char *const *vals, void *cb, void *ud,
                     const char *what) {
        pg_store *p = impl(s);
        int r;
        if ((r = start_call(s, what)) < 0 || (r = pipe_leave(s)) < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        if (!PQsendQueryPrepared(p->conn, stmts[which].name, stmts[which].nparams, vals, NULL, NULL, 0))
                return pg_err(s, NULL, what);
        PQsetSingleRowMode(p->conn);
        r = 0;
        bool stopped = false;
        int ncols = kind == 0 ? UCOL_COUNT : TCOL_COUNT;
        PGresult *res;
        while ((res = PQgetResult(p->conn)) != NULL) {
                ExecStatusType st = PQresultStatus(res);
                if (st == PGRES_SINGLE_TUPLE || st == PGRES_TUPLES_OK) {
                        for (int i = 0; !stopped && i < PQntuples(res); i++) {
                                pg_row pr = {res, i};
                                store_row row = {.ctx = &pr, .get_i64 = col_i64, .get_text = col_text};
                                if (PQnfields(res) != ncols)
                                        r = store_set_err(s, "unexpected number of columns", "%s", what);
                                else
                                        r = store_bill_row(s, &row, kind, cb, ud);
                                stopped = r != 0;
                        }
                } else if (!stopped) {
                        r = pg_err(s, res, what);
                        stopped = true;
                }
                PQclear(res);
        }
        return r;
}

static int pg_usage_list(gp_store *s, const gp_usage_filter *f, gp_segment_cb cb, void *ud) {
        char n[5][24];
        fmt_i64(n[0], sizeof(n[0]), f->task_id);
        fmt_i64(n[1], sizeof(n[1]), f->month_min);
        fmt_i64(n[2], sizeof(n[2]), f->month_max ? f->month_max : 999912);
        fmt_i64(n[3], sizeof(n[3]), f->from_ms);
        fmt_i64(n[4], sizeof(n[4]), f->to_ms ? f->to_ms : INT64_MAX);
        const char *vals[6] = {f->tenant, n[0], n[1], n[2], n[3], n[4]};
        return bill_rows(s, PS_USAGE_LIST, 0, vals, (void *)cb, ud, "usage list");
}

static int pg_tokens_list(gp_store *s, const gp_usage_filter *f, gp_tokens_cb cb, void *ud) {
        char n[4][24];
        fmt_i64(n[0], sizeof(n[0]), f->month_min);
        fmt_i64(n[1], sizeof(n[1]), f->month_max ? f->month_max : 999912);
        fmt_i64(n[2], sizeof(n[2]), f->from_ms);
        fmt_i64(n[3], sizeof(n[3]), f->to_ms ? f->to_ms : INT64_MAX);
        const char *vals[5] = {f->tenant, n[0], n[1], n[2], n[3]};
        return bill_rows(s, PS_TOKENS_LIST, 1, vals, (void *)cb, ud, "tokens list");
}

/* ---- the coordinator's statements (coord.c) ---- */

/* Unprepared (PQexecParams, text in and out); they are few and small. */
static int pg_query(gp_store *s, const char *sql, int n, const char *const *params, store_text_cb cb, void *ud,
                    const char *what) {
        pg_store *p = impl(s);
        int r;
        if ((r = start_call(s, what)) < 0 || (r = pipe_leave(s)) < 0)
                return r;
        if (store_fault(s))
                return store_set_err(s, "injected fault", "%s", what);
        PGresult *res = PQexecParams(p->conn, sql, n, NULL, params, NULL, NULL, 0);
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
                r = pg_err(s, res, what);
                PQclear(res);
                return r;
        }
        int nc = PQnfields(res);
        if (nc > STORE_QUERY_MAX_COLS)
                nc = STORE_QUERY_MAX_COLS;
        for (int row = 0; cb && row < PQntuples(res) && r == 0; row++) {
                const char *cols[STORE_QUERY_MAX_COLS];
                for (int i = 0; i < nc; i++)
                        cols[i] = PQgetisnull(res, row, i) ? NULL : PQgetvalue(res, row, i);
                r = cb(ud, nc, cols);
        }
        PQclear(res);
        return r;
}

const gp_store_ops gp_store_postgres_ops = {
        .name = "postgres",
        .impl_size = sizeof(pg_store),
        .open = pg_open,
        .close = pg_close,
        .begin = pg_begin,
        .commit = pg_commit,
        .rollback = pg_rollback,
        .in_tx = pg_in_tx,
        .task_put = pg_task_put,
        .task_get = pg_task_get,
        .task_list = pg_task_list,
        .task_load_active = pg_task_load_active,
        .task_max_id = pg_task_max_id,
        .meta_get = pg_meta_get,
        .meta_set = pg_meta_set,
        .claim = pg_claim,
        .claim_member = pg_claim_member,
        .usage_add = pg_usage_add,
        .usage_list = pg_usage_list,
        .tokens_add = pg_tokens_add,
        .tokens_list = pg_tokens_list,
        .query = pg_query,
        .write = pg_write,
        .lease_acquire = pg_lease_acquire,
        .lease_renew = pg_lease_renew,
        .lease_get = pg_lease_get,
        .lease_release = pg_lease_release,
};
