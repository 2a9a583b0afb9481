/* cli-int.h - internals of the command-line client, shared by the src/cli/ files
 * and tests/unit/test-cli.c.
 *
 * The client is split so that everything but the network can be tested:
 *   args.c    argv -> gp_cli_cmd (validated; the submit body as JSON)
 *   format.c  server JSON -> status block and aligned tables (pure)
 *   http.c    one HTTP exchange (bounded, timed out): direct http:// itself,
 *   curl.c    https:// and proxied http:// through libcurl, loaded with
 *             dlopen (http-int.h)
 *   cli.c     gp_cli_main: dispatch, one function per command
 *   run.c     `gpupool run`: lease, wait, exec locally, heartbeat, release
 * Nothing here keeps global state except run.c's signal bookkeeping.
 */
#ifndef GP_CLI_CLI_INT_H
#define GP_CLI_CLI_INT_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "base/util.h"
#include "cli/cli.h"

#define GP_CLI_DEFAULT_API "http://127.0.0.1:8080"
#define GP_CLI_BODY_MAX ((size_t)16 << 20)  /* largest JSON answer read */
#define GP_CLI_CONNECT_TIMEOUT_S 5L
#define GP_CLI_REQUEST_TIMEOUT_S 70L        /* non-streaming calls; the long poll is <= 60 s */
#define GP_CLI_URL_MAX 2048                 /* --api length */
#define GP_CLI_KEY_MAX 1024                 /* --key length */
#define GP_CLI_ENV_MAX 256                  /* --env entries */
#define GP_CLI_ARGS_MAX 4096                /* words in COMMAND */
#define GP_CLI_ARG_LEN_MAX (128 * 1024)     /* bytes in one word (Linux MAX_ARG_STRLEN) */
#define GP_CLI_MEM_MAX_MB ((int64_t)1 << 24)  /* --mem bound: 16 TiB */
#define GP_CLI_CPUS_MAX 4096                  /* --cpus bound (the server's GP_CGROUP_MAX_CPUS) */
#define GP_CLI_HOST_MEM_MAX_MB ((int64_t)1 << 30) /* --host-mem bound: 1 PiB (GP_CGROUP_MAX_MEMORY_MB) */
#define GP_CLI_ENODES_MAX 1024               /* --elastic-nodes bound (the server's GP_SCHED_MAX_ENODES) */
#define GP_CLI_SECONDS_MAX ((int64_t)10 * 366 * 86400)  /* --timeout/--queue-timeout: 10 years */
#define GP_CLI_TTL_DEFAULT 30
#define GP_CLI_TTL_MIN 3
#define GP_CLI_TTL_MAX 86400
#define GP_CLI_LIMIT_MAX 1000
#define GP_CLI_SELECTOR_MAX 16              /* --node-selector pairs */
#define GP_CLI_LABEL_KEY_MAX 63             /* label key 1..63 bytes of [A-Za-z0-9._/-] */
#define GP_CLI_LABEL_VALUE_MAX 63           /* label value 0..63 bytes of the same */
#define GP_CLI_NODE_NAME_MAX 47             /* node name 1..47 bytes of [A-Za-z0-9._-] */
#define GP_CLI_NODE_LABEL "gpupool/node"    /* the label every node carries: its name */
#define GP_CLI_JOIN_TTL_MAX ((int64_t)10 * 366 * 86400)  /* join-token create --ttl: 10 years */
#define GP_CLI_CANCEL_IDS_MAX 1000          /* ids on one cancel command line */
#define GP_CLI_SCRIPT_MAX ((size_t)48 * 1024) /* a submitted script (= server/submit.h's GP_SUBMIT_MAX_SCRIPT_BYTES) */
#define GP_CLI_SCRIPT_ARGV0 "gpupool-script"  /* how a stored script's runner names it (= GP_SUBMIT_SCRIPT_ARGV0) */

typedef enum gp_cli_verb {
        GP_CLI_HELP = 0,
        GP_CLI_VERSION,
        GP_CLI_SUBMIT,
        GP_CLI_RUN,
        GP_CLI_PS,
        GP_CLI_STATUS,
        GP_CLI_CANCEL,
        GP_CLI_LOGS,
        GP_CLI_GPUS,
        GP_CLI_QUEUE,
        GP_CLI_NODES,
        GP_CLI_NODE,
        GP_CLI_JOIN_TOKEN,
        GP_CLI_TENANTS,
        GP_CLI_KEY,
        GP_CLI_USAGE,
        GP_CLI_INVOICE,
        GP_CLI_SERVERS,
        GP_CLI_CONFIG,
        GP_CLI_CA,
        GP_CLI_HISTORY,          /* history (alias acct): ended runs, as sacct */
        GP_CLI_VERB_COUNT,
} gp_cli_verb;

/* A parsed command line.  Strings marked "borrowed" point into argv or the
 * environment and live as long as they do. */
/* One id on the command line: a task (ID), an element of a job array
 * (ID_INDEX, index >= 0) or a whole array (cancel --array ID, index -1). */
typedef struct gp_cli_ref {
        int64_t id;              /* task id, or the array's id */
        bool array;              /* id names a job array */
        int64_t index;           /* ID_INDEX: the element; -1 = every element */
} gp_cli_ref;

typedef struct gp_cli_cmd {
        gp_cli_verb verb;
        char *api;               /* base URL without trailing '/', owned */
        const char *key;         /* bearer key, borrowed, NULL = none */
        const char *cacert;      /* --cacert / GPUPOOL_CACERT: the CA https:// servers are checked against
                                  * (set by the caller before gp_cli_parse for the variable), borrowed,
                                  * NULL = the system's CAs */
        bool json;               /* print the server's JSON */
        bool help;               /* `CMD --help`: print CMD's help, exit 0 */
        const char *topic;       /* `help TOPIC`, borrowed, NULL = overview */
        int64_t id;              /* status/cancel/logs: task id, > 0 */
        bool follow;             /* logs -f */
        int64_t log_run;         /* logs --run N, 0 = the task's current or last run */
        int64_t log_rank;        /* logs --rank N, default 0 */
        bool all;                /* ps --all */
        const char *state;       /* ps --state, borrowed, NULL = default */
        const char *tenant;      /* ps --tenant filter, borrowed */
        int64_t limit;           /* ps/queue --limit, 0 = server default */
        int64_t ttl_s;           /* run --ttl */
        json_t *body;            /* submit/run: the POST /api/v1/tasks body, owned */
        char **argv_cmd;         /* run: the local command, borrowed, NULL-terminated */
        int argc_cmd;            /* run: words in argv_cmd */
        const char **env;        /* run: "K=V" from --env, array owned, strings borrowed */
        int n_env;               /* run: entries in env */
        const char *workdir;     /* run: directory for the local command, borrowed */
        const char *from, *to;   /* usage --from/--to (YYYY-MM-DD or RFC 3339), borrowed */
        const char *group_by;    /* usage --group-by day|model|task, borrowed */
        const char *month;       /* invoice --month YYYY-MM, borrowed */
        bool array;              /* cancel: id is a job array's (cancel --array ID, or ID_INDEX) */
        int64_t array_index;     /* cancel ID_INDEX: the element, -1 = every element */
        bool expand;             /* ps --expand / -r: one line per array element */
        const char *sub;         /* node / join-token: the subcommand ("drain", "create"), borrowed */
        const char *target;      /* node NAME / join-token revoke ID, borrowed */
        int64_t join_ttl_s;      /* join-token create --ttl, 0 = no expiry */
        gp_cli_ref *refs;        /* cancel: every id given, in order (owned); refs[0] mirrors id/array/array_index */
        size_t n_refs;           /* entries in refs */
        const char *cancel_state; /* cancel --state: only tasks in this state, borrowed */
        bool wait;               /* submit --wait: until the task ends, exit with its code */
        bool admin;              /* key create --admin: a new admin key, made here */
        const char *file;        /* config check FILE, borrowed */
        int verb_at;             /* argv index of the command word */
        int cmd_at;              /* submit: argv index where COMMAND starts (argc when none) */
        bool no_command;         /* submit: no COMMAND given (the script comes from stdin) */
        const char *script;      /* submit: the script's text (set by cli.c, borrowed), NULL = none */
        const char *export_env;  /* submit --export ALL|NONE|NAME[=V],..., borrowed, NULL = not given */
        const char *user;        /* ps/cancel -u USER, borrowed, NULL = none */
        bool me;                 /* ps/cancel --me: -u of this process's user */
        const char *since, *until; /* history -S/--since, -E/--until (gp_cli_when_parse), borrowed */
        bool has_job;            /* history -j/--jobs given: */
        gp_cli_ref job;          /* ... task ID (and array ID's elements), or element ID_INDEX */
        const char *env_node;    /* set by the caller before gp_cli_parse: GPUPOOL_NODE (run's
                                  * default --node), borrowed, NULL = unset */
} gp_cli_cmd;

/* args.c */
void gp_cli_cmd_init(gp_cli_cmd *c);
/* Frees what the command owns (api, body, env array).  Takes NULL. */
void gp_cli_cmd_done(gp_cli_cmd *c);
/* Parse argv (argv[argc] == NULL) into c, which must be freshly initialised.
 * env_api / env_key are the values of GPUPOOL_API / GPUPOOL_API_KEY (NULL if
 * unset).  Returns 0, or -EINVAL with a message for the user in err: the
 * problem on the first line, then "usage: ..." for the command; -ENOMEM.
 * On failure c may be partly filled; gp_cli_cmd_done still frees it. */
int gp_cli_parse(int argc, char **argv, const char *env_api, const char *env_key,
                 gp_cli_cmd *c, gp_buf *err);
/* The one-line usage of a command ("gpupool ps [--all] ..."). Static. */
const char *gp_cli_usage(gp_cli_verb v);
/* The command's name ("ps"). Static. */
const char *gp_cli_verb_name(gp_cli_verb v);
/* Help text: the overview (topic NULL) or one command's.  0, -ENOENT for an
 * unknown topic, -ENOMEM. */
int gp_cli_help(const char *topic, gp_buf *out);

/* format.c: pure functions from the server's JSON to text.  Each appends
 * to out and returns 0, -ENOMEM or -E2BIG.  Strings from the server are
 * printed with control characters replaced by '?'.  now_ms (wall clock)
 * is used for ages; 0 leaves them out. */
int gp_cli_format_status(const json_t *task, int64_t now_ms, gp_buf *out);
int gp_cli_format_ps(const json_t *resp, int64_t now_ms, bool filtered, gp_buf *out);
/* The array ids named by a task list's entries ("array_id"), distinct, in
 * list order: up to max written to ids, returns how many there are. */
size_t gp_cli_ps_array_ids(const json_t *resp, int64_t *ids, size_t max);
/* A task list with each job array folded into one entry: the entry of its
 * newest listed element is replaced by {"kind": "array", "array_id",
 * "array", "count", "counts", ... from arrays[i] (GET /api/v1/arrays/{id}
 * answers, NULL entries for arrays that could not be read: those elements
 * stay unfolded)} plus the element's name, tenant_id, priority, gpu_request
 * and submitted_at; the other listed elements are left out.  Returns a new
 * reference (NULL: out of memory). */
json_t *gp_cli_ps_fold(const json_t *resp, json_t *const *arrays, const int64_t *ids, size_t n);
int gp_cli_format_queue(const json_t *resp, gp_buf *out);
int gp_cli_format_gpus(const json_t *resp, gp_buf *out);
/* GET /api/v1/nodes: NAME STATE GPUS(busy/total) GPU MODEL LABELS (without
 * gpupool/node) HEARTBEAT ("2s ago", from last_heartbeat_ms) ADDRESS. */
int gp_cli_format_nodes(const json_t *resp, int64_t now_ms, gp_buf *out);
/* GET /api/v1/coordinator/servers: SERVER URL ROLE STATE HEARTBEAT LOAD,
 * "no servers" when empty. */
int gp_cli_format_servers(const json_t *resp, int64_t now_ms, gp_buf *out);
/* GET /admin/join-tokens: ID CREATED EXPIRES STATE SOURCE. */
int gp_cli_format_join_tokens(const json_t *resp, int64_t now_ms, gp_buf *out);
int gp_cli_format_tenants(const json_t *resp, gp_buf *out);
/* GET /api/v1/usage and /api/v1/invoices answers as tables. */
int gp_cli_format_usage(const json_t *resp, gp_buf *out);
int gp_cli_format_invoice(const json_t *resp, gp_buf *out);
/* GET /api/v1/tasks/{id}/runs: "runs:" and one line per run (RUN STATE
 * EXIT START ELAPSED GPUS PEAK MEM REASON), as `status ID` ends. */
int gp_cli_format_runs(const json_t *resp, gp_buf *out);
/* GET /api/v1/runs: sacct's table, one line per run: JOBID (ID.RUN) NAME
 * USER TENANT STATE EXITCODE START END ELAPSED GPUS PEAKMEM; times local. */
int gp_cli_format_history(const json_t *resp, gp_buf *out);
/* A time as sacct -S/-E take it, into ms since the epoch: YYYY-MM-DD,
 * YYYY-MM-DDTHH:MM[:SS] (local time), RFC 3339 with a zone, today or
 * midnight (00:00 today, local), now, now-N[UNIT] (UNIT s (default), m, h,
 * d, w or seconds, minutes, hours, days, weeks).  now_ms: the clock.
 * 0 or -EINVAL.  Pure but for the local time zone. */
int gp_cli_when_parse(const char *s, int64_t now_ms, int64_t *ret_ms);
/* Columns a UTF-8 string takes on a terminal (East Asian wide = 2,
 * combining marks = 0, invalid bytes = 1 each). */
size_t gp_cli_display_width(const char *s);
/* Append s made safe for a terminal (control characters and invalid UTF-8
 * become '?'), cut to max_cols columns with an ellipsis (0 = no limit);
 * NULL appends nothing. */
int gp_cli_put_clean(gp_buf *out, const char *s, size_t max_cols);
/* Append s shell-quoted (only when needed) to out. */
int gp_cli_shell_quote(const char *s, gp_buf *out);

/* http.c */
typedef struct gp_cli_conn {
        const char *api;                         /* base URL, no trailing '/' */
        const char *key;                         /* bearer key or NULL */
        const char *cacert;                      /* CA file for https:// (libcurl CAINFO), NULL = system CAs */
        const volatile sig_atomic_t *abort_flag; /* non-NULL: a transfer stops (-ECANCELED) within ~1 s of it becoming non-zero */
} gp_cli_conn;

typedef struct gp_cli_resp {
        long status;             /* HTTP status */
        json_t *json;            /* parsed body (owned) or NULL when empty or not JSON */
        char *text;              /* when the body is not JSON: its first bytes, owned, else NULL */
        long retry_after;        /* Retry-After in seconds, -1 if absent */
} gp_cli_resp;

void gp_cli_resp_done(gp_cli_resp *r);
/* Percent-encode s for a query string and append it. 0 or -ENOMEM/-E2BIG. */
int gp_cli_url_escape(const char *s, gp_buf *out);
/* One request with a JSON (or no) body, answer read into memory (at most
 * GP_CLI_BODY_MAX) and parsed when it is JSON.  path starts with '/'.
 * timeout_s bounds the whole exchange.  Returns 0 when an HTTP answer came
 * (any status; ret is then filled and owned by the caller), or:
 *   -EHOSTUNREACH  connect/resolve/timeout/transfer failure (message in err,
 *                  "cannot reach URL: why")
 *   -ECANCELED     abort_flag was raised
 *   -E2BIG         the answer is larger than GP_CLI_BODY_MAX
 *   -ENOMEM, -EINVAL (bad URL; message in err)
 * Thread-safe (each call has its own socket or curl handle). */
int gp_cli_http_json(const gp_cli_conn *c, const char *method, const char *path,
                     const json_t *body, long timeout_s, gp_cli_resp *ret, gp_buf *err);
/* GET path and copy a 2xx body to out as it arrives (fflush after every
 * chunk); a non-2xx body is kept instead (parsed into ret's json/text).
 * *io_bytes is increased by the bytes written to out (even on failure).
 * No overall timeout.  Returns as gp_cli_http_json, plus -EPIPE when out
 * cannot be written. */
int gp_cli_http_stream(const gp_cli_conn *c, const char *path, FILE *out, int64_t *io_bytes,
                       gp_cli_resp *ret, gp_buf *err);

/* cli.c */
/* gp_cli_main with explicit streams (tests pass tmpfiles). */
int gp_cli_main_io(int argc, char **argv, FILE *out, FILE *err);
/* Turn the outcome of gp_cli_http_json into an exit code, printing the
 * reason to err: 0 if rc == 0 and the status is 2xx with a JSON object,
 * else 1 (the server said no / answered nonsense) or 3 (unreachable). */
int gp_cli_check(FILE *err, int rc, const gp_cli_resp *r, const gp_buf *msg);

/* One JSON call through gp_cli_http_json with the command's API and key;
 * on GP_CLI_EXIT_OK *ret holds the answer (gp_cli_resp_done it), else the
 * reason has been printed to err and *ret is empty.  Returns an exit code. */
int gp_cli_call(const gp_cli_cmd *c, FILE *err, const char *method, const char *path, const json_t *body,
                gp_cli_resp *ret);
/* ID_INDEX -> the element's task id, from GET /api/v1/arrays/{id} (its
 * spec and first task id).  A plain id is returned as is.  Returns an exit
 * code (1 with a message when the array has no such element). */
int gp_cli_resolve_ref(const gp_cli_cmd *c, FILE *err, const gp_cli_ref *ref, int64_t *ret_id);

/* batch.c: `gpupool submit` (a COMMAND, a script file or stdin; --wait).
 * argv is the whole command line (a script's directives are parsed again
 * with it, so that its own options win). */
int gp_cli_cmd_submit(int argc, char **argv, const gp_cli_cmd *c, FILE *out, FILE *err);

/* run.c */
int gp_cli_cmd_run(const gp_cli_cmd *c, FILE *out, FILE *err);

#endif
