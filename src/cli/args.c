/* args.c - the client's command line: argv -> gp_cli_cmd.
 *
 * Everything a user types is validated here, before any request: numbers
 * strictly (gp_parse_i64) within bounds, priorities by gp_priority_parse,
 * names clean UTF-8 within the task record's lengths, --env K=V, the API
 * URL and key.  Client options (--api, --key, --json, --help) are accepted
 * before the command and anywhere among its options; for submit and run
 * the first word that is not an option (or the word after "--") starts the
 * COMMAND, and everything after it belongs to COMMAND untouched.
 * No I/O; no global state.
 */
#include "cli/cli-int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/units.h"
#include "base/user.h"
#include "base/util.h"
#include "core/array.h"
#include "core/billing.h"
#include "core/task.h"
#include "base/notice.h"

enum opt_id {
        O_API, O_KEY, O_JSON, O_HELP, O_VERSION,
        O_GPUS, O_MEM, O_PRIO, O_NAME, O_MODEL, O_GPU_MODEL, O_EXCL, O_PREEMPT, O_ELASTIC, O_ELASTIC_NODES,
        O_TIMEOUT, O_QTIMEOUT, O_ENV, O_WORKDIR, O_TENANT, O_TTL,
        O_ALL, O_STATE, O_LIMIT, O_FOLLOW,
        O_FROM, O_TO, O_GROUP_BY, O_MONTH,
        O_ARRAY, O_EXPAND, O_RUN_NO, O_RANK, O_NODE_SELECTOR, O_NODE, O_ON_NODE_LOST, O_SIGNAL,
        O_TIME, O_WAIT, O_ADMIN,
        O_EXPORT, O_USER, O_ME, /* local users (unix.c) */
        O_CACERT,
        O_COMPUTE_PCT, /* an MPS client's share of the GPU's compute */
        O_SINCE, O_UNTIL, O_JOBS, /* history (sacct -S, -E, -j) */
        O_CPUS, O_HOST_MEM, /* its cgroup's limits (exec/cgroup.h) */
};

#define V(x) (1u << GP_CLI_##x)
#define PRE (1u << 31)             /* allowed before the command word */
#define ANY (0x7fffffffu | PRE)

struct opt {
        const char *name;          /* long name without "--" */
        char shortc;               /* short letter or 0 */
        bool arg;                  /* takes a value */
        enum opt_id id;
        unsigned verbs;            /* V() mask of the commands that accept it */
};

static const struct opt opts[] = {
        {"api", 0, true, O_API, ANY},
        {"key", 0, true, O_KEY, ANY},
        {"cacert", 0, true, O_CACERT, ANY},
        {"json", 0, false, O_JSON, ANY},
        {"help", 'h', false, O_HELP, ANY},
        {"version", 0, false, O_VERSION, PRE},
        {"gpus", 'G', true, O_GPUS, V(SUBMIT) | V(RUN)},
        {"mem", 0, true, O_MEM, V(SUBMIT) | V(RUN)},
        {"cpus", 'c', true, O_CPUS, V(SUBMIT)},
        {"cpus-per-task", 0, true, O_CPUS, V(SUBMIT)}, /* sbatch's */
        {"host-mem", 0, true, O_HOST_MEM, V(SUBMIT)}, /* sbatch's --mem: RAM, not GPU memory */
        {"compute-pct", 0, true, O_COMPUTE_PCT, V(SUBMIT)},
        {"priority", 0, true, O_PRIO, V(SUBMIT) | V(RUN)},
        {"name", 0, true, O_NAME, V(SUBMIT) | V(RUN)},
        {"model", 0, true, O_MODEL, V(SUBMIT) | V(RUN)},
        {"gpu-model", 0, true, O_GPU_MODEL, V(SUBMIT) | V(RUN)},
        {"exclusive", 0, false, O_EXCL, V(SUBMIT) | V(RUN)},
        {"preemptible", 0, false, O_PREEMPT, V(SUBMIT) | V(RUN)},
        {"elastic", 0, true, O_ELASTIC, V(SUBMIT)},
        {"elastic-nodes", 0, true, O_ELASTIC_NODES, V(SUBMIT)},
        {"timeout", 0, true, O_TIMEOUT, V(SUBMIT) | V(RUN)},
        {"time", 't', true, O_TIME, V(SUBMIT) | V(RUN)},          /* Slurm's: a bare number is minutes */
        {"job-name", 'J', true, O_NAME, V(SUBMIT) | V(RUN)},      /* Slurm's --name */
        {"chdir", 'D', true, O_WORKDIR, V(SUBMIT) | V(RUN)},      /* Slurm's --workdir */
        {"wait", 'W', false, O_WAIT, V(SUBMIT)},
        {"admin", 0, false, O_ADMIN, V(KEY)},
        {"queue-timeout", 0, true, O_QTIMEOUT, V(SUBMIT) | V(RUN)},
        {"env", 0, true, O_ENV, V(SUBMIT) | V(RUN)},
        {"workdir", 0, true, O_WORKDIR, V(SUBMIT) | V(RUN)},
        {"tenant", 0, true, O_TENANT, V(SUBMIT) | V(RUN) | V(PS) | V(CANCEL) | V(KEY) | V(USAGE) | V(INVOICE) |
                                              V(HISTORY)},
        {"from", 0, true, O_FROM, V(USAGE)},
        {"to", 0, true, O_TO, V(USAGE)},
        {"group-by", 0, true, O_GROUP_BY, V(USAGE)},
        {"month", 0, true, O_MONTH, V(INVOICE)},
        {"ttl", 0, true, O_TTL, V(RUN) | V(JOIN_TOKEN)},
        {"node-selector", 0, true, O_NODE_SELECTOR, V(SUBMIT) | V(RUN)},
        {"node", 0, true, O_NODE, V(RUN)},
        {"on-node-lost", 0, true, O_ON_NODE_LOST, V(SUBMIT)},
        {"signal", 0, true, O_SIGNAL, V(SUBMIT)},            /* sbatch's --signal [B:]SIG@SECS */
        {"all", 'a', false, O_ALL, V(PS)},
        {"state", 's', true, O_STATE, V(PS) | V(CANCEL) | V(HISTORY)},
        {"limit", 0, true, O_LIMIT, V(PS) | V(QUEUE) | V(HISTORY)},
        {"since", 'S', true, O_SINCE, V(HISTORY)},
        {"starttime", 0, true, O_SINCE, V(HISTORY)}, /* sacct's */
        {"until", 'E', true, O_UNTIL, V(HISTORY)},
        {"endtime", 0, true, O_UNTIL, V(HISTORY)}, /* sacct's */
        {"jobs", 'j', true, O_JOBS, V(HISTORY)},   /* sacct's -j: one task, or a job array or its element */
        {"follow", 'f', false, O_FOLLOW, V(LOGS)},
        {"run", 0, true, O_RUN_NO, V(LOGS)},
        {"rank", 0, true, O_RANK, V(LOGS)},
        {"array", 0, true, O_ARRAY, V(SUBMIT) | V(CANCEL)},
        {"expand", 'r', false, O_EXPAND, V(PS)},
        /* local users (unix.c): sbatch --export, squeue/scancel -u, --me */
        {"export", 0, true, O_EXPORT, V(SUBMIT)},
        {"user", 'u', true, O_USER, V(PS) | V(CANCEL) | V(HISTORY)},
        {"me", 0, false, O_ME, V(PS) | V(CANCEL) | V(HISTORY)},
};

static const struct verb_info {
        const char *name;
        const char *usage;
        const char *brief;      /* short usage for error messages, NULL = usage */
        const char *summary;
        const char *details;
} verbs[GP_CLI_VERB_COUNT] = {
        [GP_CLI_HELP] = {"help", "gpupool help [COMMAND]", NULL, "show help for all commands or one",
                         NULL},
        [GP_CLI_VERSION] = {"version", "gpupool version", NULL, "print the client version", NULL},
        [GP_CLI_SUBMIT] = {
                "submit",
                "gpupool submit [--gpus N] [--mem SIZE] [--cpus N] [--host-mem SIZE] [--priority P]\n"
                "                      [--name S] [--model M] [--gpu-model GLOB] [--exclusive] [--preemptible]\n"
                "                      [--timeout DURATION] [--queue-timeout DURATION] [--env K=V]...\n"
                "                      [--workdir DIR] [--tenant T]\n"
                "                      [--node-selector K=V]... [--elastic MIN:MAX] [--array SPEC] [--wait]\n"
                "                      [--on-node-lost fence|requeue] [--signal [B:]SIG@SECS] [--compute-pct P]\n"
                "                      [--] COMMAND [ARG...] | SCRIPT [ARG...] | < SCRIPT",
                "gpupool submit [--gpus N] [--mem SIZE] [--priority P] [OPTIONS] [--] COMMAND [ARG...]\n"
                "       gpupool submit [OPTIONS] SCRIPT [ARG...]     gpupool submit [OPTIONS] < SCRIPT\n"
                "       ('gpupool help submit' lists every option)",
                "queue a batch task; prints its id",
                "  --gpus N, -G N       GPUs wanted, 1..1024 (default 1); more than a node has:\n"
                "                       whole nodes (a multi-node task, e.g. torchrun)\n"
                "  --mem SIZE           GPU memory per GPU: MB, or 8G, 8192M (default: the whole GPU);\n"
                "                       as nvidia-smi counts it: the CUDA context (~0.6 GB) too\n"
                "  --cpus N, -c N       CPUs, 1..4096: the quota of its cgroup, and placed only where\n"
                "                       N CPUs are free (also --cpus-per-task; default: no limit)\n"
                "  --host-mem SIZE      RAM (host memory, not GPU memory): its cgroup's limit, over it\n"
                "                       the task is OOM-killed (reason host_memory_exceeded); placed\n"
                "                       only where that much is free (sbatch's --mem; default: none)\n"
                "  --compute-pct P      with --mem on an MPS GPU (gpus.sharing: mps): the share of the\n"
                "                       GPU's compute, 1..100 (default: its share of the memory)\n"
                "  --priority P         0..9, P0..P9 or critical|high|normal|low|background\n"
                "                       (0 most urgent; default: the tenant's default)\n"
                "  --name S, -J S       a name to recognise the task by (also --job-name)\n"
                "  --model M            model the task loads (placed near GPUs that hold it)\n"
                "  --gpu-model GLOB     only GPUs whose name matches, e.g. '*4090*'\n"
                "  --exclusive          whole GPUs, shared with no other task\n"
                "  --preemptible        the task may be stopped and requeued for a more urgent one\n"
                "  --timeout DURATION   run time limit: 3600, 90s, 30m, 12h, 7d or [D-]HH:MM:SS\n"
                "                       (0 = none)\n"
                "  --time D, -t D       the same as sbatch --time: a bare number is minutes (60 =\n"
                "                       1 hour), MM:SS, HH:MM:SS, D-HH[:MM[:SS]], or 90s, 12h...\n"
                "  --queue-timeout D    give up if not started within D (0 = none)\n"
                "  --env K=V            set an environment variable (repeatable)\n"
                "  --workdir DIR        working directory on the GPU node (also -D, --chdir; default,\n"
                "                       local server: the current directory)\n"
                "  --export ALL|NONE|NAME[=V],...  submit: the environment sent (sbatch --export;\n"
                "                       default ALL for a local server)\n"
                "  --tenant T           submit for tenant T (when the key allows it)\n"
                "  --node-selector K=V  only nodes with label K=V (repeatable, all must match;\n"
                "                       every node has gpupool/node=NAME)\n"
                "  --elastic MIN:MAX    elastic: start on MIN whole GPUs, grow to MAX when idle;\n"
                "                       the task reads its GPUs from $GPUPOOL_ALLOC_FILE on SIGUSR1\n"
                "  --elastic-nodes MIN:MAX  whole agent nodes, MIN to MAX: one process per node, ranks\n"
                "                       join and leave as nodes free up or are wanted; GPUPOOL_NNODES\n"
                "                       is MIN:MAX (torchrun --nnodes=$GPUPOOL_NNODES --rdzv-backend=c10d)\n"
                "  --array SPEC         a job array, as sbatch --array: 0-1999, 1,3,5-9, 0-15:4,\n"
                "                       each with %N to run at most N at once (0-1999%50); every\n"
                "                       element gets GPUPOOL_ARRAY_ID and GPUPOOL_ARRAY_INDEX\n"
                "                       (and SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID)\n"
                "  --wait, -W           wait until the task (every element of an array) ends and\n"
                "                       exit with its exit code (an array: 0 if all succeeded, else 1)\n"
                "  --on-node-lost fence|requeue  when its node loses contact with the server: fence\n"
                "                       (default) stops the run there before the task starts elsewhere\n"
                "                       (after cluster.fence_s); requeue starts it elsewhere at once:\n"
                "                       it may run twice at once\n"
                "  --signal [B:]SIG@SECS  as sbatch --signal: before the task is preempted, cancelled\n"
                "                       or stopped by the GPU memory watchdog, send it SIG (USR1,\n"
                "                       SIGUSR1 or 10) and give it up to SECS (120 or 2m, 1 s..1d; the\n"
                "                       server's scheduler.preemption.max_notice_s at most) to exit\n"
                "                       before SIGTERM; B: signals only the command's own process\n"
                "                       (the batch shell), not its process group.  A requeued run\n"
                "                       finds GPUPOOL_RESTART_COUNT=N (its earlier runs) to resume\n"
                "Prints the new task's id alone (or the task with --json); for an array, the\n"
                "array's id (its first element's task id).\n"
                "SCRIPT: a local file starting with #! (or, without COMMAND, the script read from\n"
                "stdin) is sent and stored with the task, as sbatch does: the task runs that copy\n"
                "with its #! interpreter, ARGs as its arguments.  Lines '#GPUPOOL OPTIONS' before\n"
                "its first command set options; '#SBATCH' lines are read too for -G/--gpus,\n"
                "--gres=gpu:N, -t/--time, -J/--job-name, --mem-per-gpu, -a/--array, -D/--chdir\n"
                "(other #SBATCH options are named on stderr and ignored).  Options given here\n"
                "override the script's.  To run a file that is on the GPU node instead: sh FILE.\n"},
        [GP_CLI_RUN] = {
                "run",
                "gpupool run [submit options] [--node NAME] [--ttl DURATION] -- COMMAND [ARG...]",
                "gpupool run [--gpus N] [--mem SIZE] [--priority P] [--node NAME] [OPTIONS] [--ttl D] -- COMMAND [ARG...]\n"
                "       ('gpupool help run' lists every option)",
                "hold GPUs, run a command here with them, release them",
                "  Takes the options of submit (--env and --workdir apply to the local command).\n"
                "  --ttl DURATION       lease time-to-live, 3s..1d: heartbeats every TTL/3 (default 30)\n"
                "  --node NAME          GPUs of node NAME, the machine COMMAND runs on (= --node-selector\n"
                "                       gpupool/node=NAME; default: $GPUPOOL_NODE when set)\n"
                "Waits while queued (\"waiting for N GPU(s): reason\" on stderr), then runs COMMAND\n"
                "with CUDA_VISIBLE_DEVICES, GPUPOOL_TASK_ID and GPUPOOL_GPUS set, forwards\n"
                "SIGINT/SIGTERM to it, releases the GPUs when it ends and exits with its code.\n"
                "Ctrl-C while waiting cancels the request.\n"},
        [GP_CLI_PS] = {"ps", "gpupool ps [--all] [--state S] [--limit N] [--tenant T] [--expand]", NULL,
                       "list tasks (queued and running; --all for every state)",
                       "  --all, -a            include finished tasks\n"
                       "  --state S            only tasks in state S (queued, running, succeeded, failed,\n"
                       "                       cancelled, timeout, lost, or active = queued+running)\n"
                       "  --limit N            at most N tasks, newest first (1..1000, default 100)\n"
                       "  --tenant T           only tasks of tenant T (admin keys)\n"
                       "  -u, --user USER      only tasks of Unix user USER (squeue -u); --me: yours\n"
                       "  --expand, -r         one line per job array element (default: one line per\n"
                       "                       array, ID_[SPEC], with its elements counted by state)\n"},
        [GP_CLI_STATUS] = {"status", "gpupool status ID | ID_INDEX", NULL, "show one task in detail",
                           "  ID_INDEX             element INDEX of job array ID (12_7)\n"
                           "Ends with the task's runs, one line each: where (its GPUs), when, how it ended,\n"
                           "its exit code and peak GPU memory ('gpupool history' lists runs of many tasks).\n"},
        [GP_CLI_HISTORY] = {"history", "gpupool history [-j ID | ID_INDEX] [-u USER | --me] [-s STATE] [-S TIME] "
                            "[-E TIME] [--tenant T] [--limit N]",
                            NULL, "list ended runs of tasks, newest first, as sacct (alias: acct)",
                            "  -j, --jobs ID        only the runs of task ID and, when ID is a job array's, of its\n"
                            "                       elements; ID_INDEX (12_3): of that element\n"
                            "  -u, --user USER      only runs of Unix user USER; --me: yours\n"
                            "  -s, --state S        only runs that ended S: succeeded, failed, cancelled, timeout,\n"
                            "                       lost, preempted or requeued\n"
                            "  -S, --since TIME     only runs that ended at or after TIME (--starttime)\n"
                            "  -E, --until TIME     only runs that ended before TIME (--endtime)\n"
                            "  --tenant T           only tenant T's (admin keys; a tenant key sees its own)\n"
                            "  --limit N            at most N runs (1..1000, default 100)\n"
                            "TIME: YYYY-MM-DD[THH:MM[:SS]] (local time), RFC 3339, today, midnight, now or\n"
                            "now-N[s|m|h|d|w] (e.g. now-2h).  A run is one start of a task: JOBID is ID.RUN\n"
                            "(run 1 is the first start; a requeue after a node or GPU loss and a preemption\n"
                            "start the next).  A task keeps its last 100 runs.\n"},
        [GP_CLI_CANCEL] = {"cancel", "gpupool cancel [--state S] [ID | ID_INDEX | --array ID]... | -u USER | --me", NULL,
                           "cancel tasks (idempotent); prints each one's resulting state",
                           "  ID                   one task (an array element too, by its task id; the\n"
                           "                       array's id names its first element: a warning says so)\n"
                           "  ID_INDEX             element INDEX of job array ID (as scancel 12_7)\n"
                           "  --array ID           every element of job array ID not yet ended (scancel 12);\n"
                           "                       prints how many were cancelled and how many are stopping\n"
                           "  --state S            only tasks in state S (queued, running or active); with no\n"
                           "                       ID: every task in state S the key may cancel (scancel\n"
                           "                       --state), --tenant T: only tenant T's\n"
                           "  -u, --user USER      every queued or running task of Unix user USER (scancel -u);\n"
                           "                       --me: yours\n"
                           "Several ids are cancelled one after the other; the exit code is 1 if any failed.\n"},
        [GP_CLI_LOGS] = {"logs", "gpupool logs [-f] [--run N] [--rank N] ID | ID_INDEX", NULL,
                         "print a batch task's output (its current or last run)",
                         "  -f, --follow         keep printing new output until the task ends; when the task\n"
                         "                       is requeued, go on with its next run after a line\n"
                         "                       '--- gpupool: run N of task ID starts (WHY)'\n"
                         "  --run N              run N instead (1 = the first start; every requeue after a\n"
                         "                       node or GPU loss and every preemption starts a new run)\n"
                         "  --rank N             rank N of a multi-node task (default 0)\n"},
        [GP_CLI_GPUS] = {"gpus", "gpupool gpus", NULL, "list GPUs with memory, load and tasks", NULL},
        [GP_CLI_QUEUE] = {"queue", "gpupool queue [--limit N]", NULL,
                          "list queued tasks in scheduling order", NULL},
        [GP_CLI_NODES] = {"nodes", "gpupool nodes", NULL, "list nodes: state, GPUs busy/total, labels, heartbeat",
                          "Labels are shown without gpupool/node (every node has it: its name).\n"},
        [GP_CLI_SERVERS] = {"servers", "gpupool servers", NULL,
                            "list the servers of the cluster: role, active, last heartbeat (admin key)",
                            "A server is active while its last heartbeat is within cluster.server_timeout_s.\n"},
        [GP_CLI_CA] = {"ca", "gpupool ca", NULL, "print the hash of the server's CA, which join tokens carry",
                       "Prints sha256:<hex> (--json: also the CA certificate, PEM). A join token of the\n"
                       "config (cluster.join_tokens) is given to agents as gpj_SECRET.HEX with HEX the\n"
                       "64 digits after sha256:, so an agent checks the server before it sends the\n"
                       "token. Use --cacert FILE (env GPUPOOL_CACERT) with the CA's PEM for https://.\n"},
        [GP_CLI_NODE] = {"node", "gpupool node drain|undrain|remove NAME", NULL,
                         "drain, undrain or remove a node (admin key); prints its new state",
                         "  drain NAME           no new work on the node; what runs there finishes\n"
                         "  undrain NAME         take new work again\n"
                         "  remove NAME          stop and requeue its runs, revoke its credential (state\n"
                         "                       left); the node 'local' cannot be removed\n"},
        [GP_CLI_JOIN_TOKEN] = {"join-token", "gpupool join-token create [--ttl DURATION] | list | revoke ID", NULL,
                               "make, list or revoke tokens agents join with (admin key)",
                               "  create [--ttl D]     a new token, printed once (only its hash is stored);\n"
                               "                       --ttl: 3600, 90s, 30m, 12h or 7d (default 0 = no expiry)\n"
                               "  list                 every token: id, created, expires, revoked, source\n"
                               "  revoke ID            the token no longer joins new nodes (joined ones stay)\n"
                               "On a GPU machine: gpupool agent --server URL --token TOKEN\n"},
        [GP_CLI_TENANTS] = {"tenants", "gpupool tenants", NULL,
                            "list tenants with their tiers, quotas and usage (a tenant key sees its own)", NULL},
        [GP_CLI_KEY] = {"key", "gpupool key create --tenant T | --admin", NULL,
                        "make an API key for tenant T (admin key), or an admin key; it is shown once",
                        "  --tenant T           the tenant the key belongs to (made by the server)\n"
                        "  --admin              an admin key, made here without a server: prints the key,\n"
                        "                       and on stderr the line to paste under auth.admin_keys\n"
                        "Prints the key. The server keeps only its SHA-256 hash, so store the key now.\n"},
        [GP_CLI_CONFIG] = {"config", "gpupool config check FILE", NULL,
                           "check a server config file without starting a server",
                           "  check FILE           read FILE as 'gpupool server --config FILE' would: every\n"
                           "                       error as FILE:LINE: message (exit 1), or a summary of\n"
                           "                       what it sets (exit 0)\n"},
        [GP_CLI_USAGE] = {"usage", "gpupool usage [--tenant T] [--from DATE] [--to DATE] [--group-by day|model|task]",
                          NULL, "GPU time, tokens and list cost (a tenant key sees its own)",
                          "  --tenant T           only tenant T (admin keys; default: every tenant)\n"
                          "  --from DATE          YYYY-MM-DD or RFC 3339 (default: start of this month, UTC)\n"
                          "  --to DATE            YYYY-MM-DD or RFC 3339 (default: now)\n"
                          "  --group-by G         day (default), model or task\n"
                          "Costs are list prices; volume discounts apply on the invoice.\n"},
        [GP_CLI_INVOICE] = {"invoice", "gpupool invoice [--tenant T] [--month YYYY-MM]", NULL,
                            "a tenant's invoice for a month (issued once the month is over)",
                            "  --tenant T           the tenant (required with an admin key)\n"
                            "  --month YYYY-MM      the month (default: this one, an open preview)\n"},
};

/* Not client commands (main.c runs them); listed by `help` for completeness. */
static const struct {
        const char *name;
        const char *usage;
        const char *summary;
} daemon_verbs[] = {
        {"server", "gpupool server [--config FILE] [--listen ADDR:PORT] [--data-dir DIR] [--user USER]",
         "run the scheduler daemon"},
        {"simulate", "gpupool simulate --trace FILE --gpus N [OPTIONS] (all of them: gpupool simulate --help)",
         "replay a job trace through the scheduler offline"},
        {"agent", "gpupool agent --server URL[,URL...] --token TOKEN [--config FILE] [--name NODE] [--listen ADDR:PORT] "
                  "[--data-dir DIR] [--sim-nodes N] [--ca-cert FILE]",
         "join this machine to a server as a node (see docs/deployment.md)"},
};

static const char client_opts_help[] =
        "Client options (before or among a command's options):\n"
        "  --api URL     server address (env GPUPOOL_API, default " GP_CLI_DEFAULT_API "); several servers:\n"
        "                URL1,URL2,... (tried in order past one that is down or standby)\n"
        "  --key KEY     API key, sent as Authorization: Bearer (env GPUPOOL_API_KEY)\n"
        "  --cacert FILE the CA (PEM) https:// servers are checked against (env GPUPOOL_CACERT;\n"
        "                default: the system's CAs); a server's own is its DATA_DIR/tls/ca.crt\n"
        "  --json        print the server's JSON instead of a table\n"
        "Exit codes: 0 ok, 1 the server said no, 2 usage error, 3 cannot reach the server.\n";

const char *gp_cli_usage(gp_cli_verb v) {
        if ((unsigned)v >= GP_CLI_VERB_COUNT)
                return "gpupool COMMAND [OPTIONS] (see 'gpupool help')";
        return verbs[v].usage;
}

static const char *brief_usage(gp_cli_verb v) {
        if ((unsigned)v < GP_CLI_VERB_COUNT && verbs[v].brief)
                return verbs[v].brief;
        return gp_cli_usage(v);
}

const char *gp_cli_verb_name(gp_cli_verb v) {
        if ((unsigned)v >= GP_CLI_VERB_COUNT)
                return "";
        return verbs[v].name;
}

static int verb_lookup(const char *name, gp_cli_verb *ret) {
        if (strcmp(name, "acct") == 0) { /* sacct's habit */
                *ret = GP_CLI_HISTORY;
                return 0;
        }
        for (int i = 0; i < GP_CLI_VERB_COUNT; i++)
                if (strcmp(name, verbs[i].name) == 0) {
                        *ret = (gp_cli_verb)i;
                        return 0;
                }
        return -ENOENT;
}

int gp_cli_help(const char *topic, gp_buf *out) {
        int r = 0;
        if (!topic) {
                r |= gp_buf_puts(out, "gpupool - share GPUs between tenants: scheduler, agent and client\n\n"
                                      "usage: gpupool [--api URL] [--key KEY] [--json] COMMAND [ARGS]\n\n"
                                      "Commands:\n");
                static const gp_cli_verb order[] = {
                        GP_CLI_SUBMIT, GP_CLI_RUN, GP_CLI_PS, GP_CLI_STATUS, GP_CLI_HISTORY, GP_CLI_CANCEL,
                        GP_CLI_LOGS, GP_CLI_GPUS, GP_CLI_QUEUE, GP_CLI_NODES, GP_CLI_NODE, GP_CLI_JOIN_TOKEN,
                        GP_CLI_SERVERS, GP_CLI_CA, GP_CLI_TENANTS, GP_CLI_KEY, GP_CLI_CONFIG,
                        GP_CLI_USAGE, GP_CLI_INVOICE, GP_CLI_VERSION,
                        GP_CLI_HELP,
                };
                for (size_t i = 0; i < GP_ARRAY_SIZE(order); i++) {
                        r |= gp_buf_printf(out, "  %-10s %s\n", verbs[order[i]].name,
                                           verbs[order[i]].summary);
                        if (order[i] == GP_CLI_HISTORY)
                                r |= gp_buf_printf(out, "  %-10s %s\n", "acct", "the same as history (sacct's name)");
                }
                for (size_t i = 0; i < GP_ARRAY_SIZE(daemon_verbs); i++)
                        r |= gp_buf_printf(out, "  %-10s %s\n", daemon_verbs[i].name,
                                           daemon_verbs[i].summary);
                r |= gp_buf_puts(out, "\n");
                r |= gp_buf_puts(out, client_opts_help);
                r |= gp_buf_puts(out, "'gpupool help COMMAND' describes one command.\n");
                return r ? -ENOMEM : 0;
        }
        gp_cli_verb v;
        if (verb_lookup(topic, &v) == 0) {
                r |= gp_buf_printf(out, "usage: %s\n\n%s.\n", verbs[v].usage, verbs[v].summary);
                if (verbs[v].details)
                        r |= gp_buf_printf(out, "\n%s", verbs[v].details);
                r |= gp_buf_printf(out, "\n%s", client_opts_help);
                return r ? -ENOMEM : 0;
        }
        for (size_t i = 0; i < GP_ARRAY_SIZE(daemon_verbs); i++)
                if (strcmp(topic, daemon_verbs[i].name) == 0) {
                        r |= gp_buf_printf(out, "usage: %s\n\n%s.\n", daemon_verbs[i].usage,
                                           daemon_verbs[i].summary);
                        return r ? -ENOMEM : 0;
                }
        return -ENOENT;
}

void gp_cli_cmd_init(gp_cli_cmd *c) {
        memset(c, 0, sizeof(*c));
        c->verb = GP_CLI_HELP;
        c->ttl_s = GP_CLI_TTL_DEFAULT;
}

void gp_cli_cmd_done(gp_cli_cmd *c) {
        if (!c)
                return;
        free(c->api);
        c->api = NULL;
        json_decref(c->body);
        c->body = NULL;
        free(c->env);
        c->env = NULL;
        c->n_env = 0;
        free(c->refs);
        c->refs = NULL;
        c->n_refs = 0;
}

/* Parsing state shared by the helpers below. */
struct parser {
        gp_cli_cmd *c;
        gp_buf *err;
        const char *who;        /* "gpupool submit" for messages */
        bool verb_known;        /* a command word has been seen */
};

static int fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct parser *p, const char *fmt, ...) {
        va_list ap;
        gp_buf_reset(p->err);
        gp_buf_printf(p->err, "%s: ", p->who);
        va_start(ap, fmt);
        gp_buf_vprintf(p->err, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static int set_one_api(struct parser *p, const char *url, const char *source);

/* --api / GPUPOOL_API: one URL, or several separated by commas (several
 * servers: http.c tries them in order), each checked and normalised. */
static int set_api(struct parser *p, const char *url, const char *source) {
        if (!strchr(url, ','))
                return set_one_api(p, url, source);
        if (strlen(url) > GP_CLI_URL_MAX)
                return fail(p, "%s: expected http:// or https:// URLs of at most %d bytes in all", source,
                            GP_CLI_URL_MAX);
        gp_buf all;
        gp_buf_init(&all, GP_CLI_URL_MAX + 16 * 64);
        for (const char *q = url;;) {
                size_t n = strcspn(q, ",");
                char one[GP_CLI_URL_MAX + 1];
                memcpy(one, q, n);
                one[n] = '\0';
                int r = set_one_api(p, one, source);
                if (r < 0 || gp_buf_printf(&all, "%s%s", all.len ? "," : "", p->c->api) < 0) {
                        gp_buf_done(&all);
                        return r < 0 ? r : -ENOMEM;
                }
                if (!q[n])
                        break;
                q += n + 1;
        }
        free(p->c->api);
        p->c->api = gp_buf_steal(&all);
        return p->c->api ? 0 : -ENOMEM;
}

static int set_one_api(struct parser *p, const char *url, const char *source) {
        size_t n = strlen(url);
        if (n == 0 || n > GP_CLI_URL_MAX)
                return fail(p, "%s: expected an http:// or https:// URL of at most %d bytes", source,
                            GP_CLI_URL_MAX);
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)url[i];
                if (ch <= 0x20 || ch >= 0x7f)
                        return fail(p, "%s: '%s' is not a URL (spaces or control characters)", source,
                                    url);
        }
        gp_buf b;
        gp_buf_init(&b, GP_CLI_URL_MAX + 16);
        const char *sep = strstr(url, "://");
        if (!sep) {
                if (gp_buf_puts(&b, "http://") < 0)
                        goto oom;
        } else if (!((sep - url == 4 && strncasecmp(url, "http", 4) == 0) ||
                     (sep - url == 5 && strncasecmp(url, "https", 5) == 0))) {
                gp_buf_done(&b);
                return fail(p, "%s: '%s' is not an http:// or https:// URL", source, url);
        }
        if (gp_buf_puts(&b, url) < 0)
                goto oom;
        /* the host starts after "://"; trailing '/' after it are dropped */
        size_t host = (size_t)(strstr(b.data, "://") - b.data) + 3;
        for (size_t i = 0; i + 3 < host; i++) /* "HTTP://" -> "http://" */
                if (b.data[i] >= 'A' && b.data[i] <= 'Z')
                        b.data[i] = (char)(b.data[i] - 'A' + 'a');
        while (b.len > host && b.data[b.len - 1] == '/')
                b.data[--b.len] = '\0';
        const char *h = b.data + host;
        if (*h == '\0' || *h == '/' || *h == '?' || *h == '#' || strchr(h, '?') || strchr(h, '#')) {
                gp_buf_done(&b);
                return fail(p, "%s: '%s' needs a host and no query (e.g. http://127.0.0.1:8080)",
                            source, url);
        }
        free(p->c->api);
        p->c->api = gp_buf_steal(&b);
        return p->c->api ? 0 : -ENOMEM;
oom:
        gp_buf_done(&b);
        return -ENOMEM;
}

static int set_key(struct parser *p, const char *key, const char *source) {
        size_t n = strlen(key);
        if (n == 0 || n > GP_CLI_KEY_MAX)
                return fail(p, "%s: expected a key of 1..%d characters", source, GP_CLI_KEY_MAX);
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)key[i];
                if (ch <= 0x20 || ch >= 0x7f)
                        return fail(p, "%s: a key is printable ASCII without spaces", source);
        }
        p->c->key = key;
        return 0;
}

static int want_int(struct parser *p, const char *opt, const char *val, int64_t min, int64_t max,
                    int64_t *ret) {
        int64_t v;
        int r = gp_parse_i64(val, min, max, &v);
        if (r == -ERANGE)
                return fail(p, "%s: %s is out of range %lld..%lld", opt, val, (long long)min,
                            (long long)max);
        if (r < 0)
                return fail(p, "%s: expected an integer %lld..%lld, got '%s'", opt, (long long)min,
                            (long long)max, val);
        *ret = v;
        return 0;
}

static int want_text(struct parser *p, const char *opt, const char *val, size_t max) {
        size_t n = strlen(val);
        if (n >= max)
                return fail(p, "%s: at most %zu bytes", opt, max - 1);
        if (!gp_str_is_clean(val, n))
                return fail(p, "%s: must be UTF-8 text without control characters", opt);
        return 0;
}

static int body_set(struct parser *p, const char *field, json_t *v, const char *opt) {
        if (!v)
                return fail(p, "%s: not valid UTF-8 text", opt);
        if (json_object_set_new(p->c->body, field, v) < 0)
                return -ENOMEM;
        return 0;
}

/* Find the option for the word at argv[*i].  Returns 1 with *ret_o and
 * *ret_val (NULL for flags) and *i advanced past it, 0 if the word is not an
 * option (left at *i), 2 for "--" (consumed), -EINVAL for a bad option. */
static int next_opt(struct parser *p, unsigned mask, int argc, char **argv, int *i,
                    const struct opt **ret_o, const char **ret_val) {
        const char *w = argv[*i];
        if (w[0] != '-' || w[1] == '\0')
                return 0;
        if (strcmp(w, "--") == 0) {
                (*i)++;
                return 2;
        }
        const struct opt *o = NULL;
        const char *val = NULL;
        size_t nlen;
        if (w[1] == '-') {
                const char *name = w + 2;
                const char *eq = strchr(name, '=');
                nlen = eq ? (size_t)(eq - name) : strlen(name);
                for (size_t k = 0; k < GP_ARRAY_SIZE(opts); k++)
                        if (strlen(opts[k].name) == nlen && strncmp(opts[k].name, name, nlen) == 0) {
                                o = &opts[k];
                                break;
                        }
                if (eq)
                        val = eq + 1;
        } else {
                /* -X, or -XVALUE for an option that takes one (-G2, -t60, as getopt) */
                for (size_t k = 0; k < GP_ARRAY_SIZE(opts); k++)
                        if (opts[k].shortc == w[1] && (w[2] == '\0' || opts[k].arg)) {
                                o = &opts[k];
                                break;
                        }
                if (o && w[2] != '\0')
                        val = w + 2;
        }
        if (!o)
                return fail(p, "unknown option '%s'", w);
        if (!(o->verbs & mask)) {
                if (!p->verb_known)
                        return fail(p, "option --%s goes after the command word", o->name);
                return fail(p, "option --%s does not apply here", o->name);
        }
        if (o->arg && !val) {
                if (*i + 1 >= argc)
                        return fail(p, "option --%s needs a value", o->name);
                val = argv[++*i];
        } else if (!o->arg && val) {
                return fail(p, "option --%s takes no value", o->name);
        }
        (*i)++;
        *ret_o = o;
        *ret_val = val;
        return 1;
}

/* Options every command takes. 1 if handled, 0 if not a client option. */
static int client_opt(struct parser *p, const struct opt *o, const char *val) {
        switch (o->id) {
        case O_API: {
                int r = set_api(p, val, "--api");
                return r < 0 ? r : 1;
        }
        case O_KEY: {
                int r = set_key(p, val, "--key");
                return r < 0 ? r : 1;
        }
        case O_CACERT:
                if (!*val || strlen(val) >= 4096)
                        return fail(p, "--cacert: a file name, 1..4095 bytes");
                p->c->cacert = val;
                return 1;
        case O_JSON:
                p->c->json = true;
                return 1;
        case O_HELP:
                p->c->help = true;
                return 1;
        default:
                return 0;
        }
}

static int add_env(struct parser *p, const char *kv, json_t **env_obj) {
        const char *eq = strchr(kv, '=');
        if (!eq)
                return fail(p, "--env: expected K=V, got '%s' (no '=')", kv);
        if (eq == kv)
                return fail(p, "--env: empty variable name in '%s'", kv);
        if (p->c->n_env >= GP_CLI_ENV_MAX)
                return fail(p, "--env: at most %d variables", GP_CLI_ENV_MAX);
        size_t klen = (size_t)(eq - kv);
        for (size_t k = 0; k < klen; k++) {
                unsigned char ch = (unsigned char)kv[k];
                if (ch <= 0x20 || ch == 0x7f)
                        return fail(p, "--env: bad variable name in '%s'", kv);
        }
        if (p->c->verb == GP_CLI_RUN) {
                const char **n = realloc(p->c->env, sizeof(*n) * (size_t)(p->c->n_env + 1));
                if (!n)
                        return -ENOMEM;
                p->c->env = n;
                n[p->c->n_env++] = kv;
                return 0;
        }
        if (!*env_obj) {
                *env_obj = json_object();
                if (!*env_obj || json_object_set_new(p->c->body, "env", *env_obj) < 0)
                        return -ENOMEM;
        }
        json_t *v = json_string(eq + 1);
        if (!v)
                return fail(p, "--env: value of '%.*s' is not valid UTF-8", (int)klen, kv);
        char *key = strndup(kv, klen);
        if (!key) {
                json_decref(v);
                return -ENOMEM;
        }
        int r = json_object_set_new(*env_obj, key, v);
        free(key);
        if (r < 0)
                return fail(p, "--env: name in '%s' is not valid UTF-8", kv);
        p->c->n_env++;
        return 0;
}

/* A label key (1..63) or value (0..63) of [A-Za-z0-9._/-]. */
static bool label_ok(const char *s, size_t n, bool key) {
        if ((key && n == 0) || n > (key ? GP_CLI_LABEL_KEY_MAX : GP_CLI_LABEL_VALUE_MAX))
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                      ch == '.' || ch == '_' || ch == '/' || ch == '-'))
                        return false;
        }
        return true;
}

/* A node name: 1..47 bytes of [A-Za-z0-9._-]. */
static bool node_name_ok(const char *s) {
        size_t n = strlen(s);
        return n > 0 && n <= GP_CLI_NODE_NAME_MAX && !strchr(s, '/') && label_ok(s, n, true);
}

/* Add key=value to the body's "node_selector" (made on first use).  what
 * names the source in messages ("--node-selector", "--node"). */
static int add_selector(struct parser *p, const char *what, const char *key, size_t klen, const char *val) {
        json_t *sel = json_object_get(p->c->body, "node_selector");
        char k[GP_CLI_LABEL_KEY_MAX + 1];
        if (!label_ok(key, klen, true))
                return fail(p, "%s: bad label key '%.*s': 1..%d characters of A-Z a-z 0-9 . _ / -", what,
                            (int)(klen > 80 ? 80 : klen), key, GP_CLI_LABEL_KEY_MAX);
        if (!label_ok(val, strlen(val), false))
                return fail(p, "%s: bad label value '%.80s': 0..%d characters of A-Z a-z 0-9 . _ / -", what, val,
                            GP_CLI_LABEL_VALUE_MAX);
        memcpy(k, key, klen);
        k[klen] = '\0';
        if (!sel) {
                sel = json_object();
                if (!sel || json_object_set_new(p->c->body, "node_selector", sel) < 0)
                        return -ENOMEM;
        }
        if (json_object_get(sel, k))
                return fail(p, "%s: label '%s' is selected twice%s", what, k,
                            strcmp(k, GP_CLI_NODE_LABEL) == 0 ? " (--node sets gpupool/node)" : "");
        if (json_object_size(sel) >= GP_CLI_SELECTOR_MAX)
                return fail(p, "%s: at most %d labels", what, GP_CLI_SELECTOR_MAX);
        if (json_object_set_new(sel, k, json_string(val)) < 0)
                return -ENOMEM;
        return 0;
}

/* --node-selector K=V */
static int add_selector_kv(struct parser *p, const char *kv) {
        const char *eq = strchr(kv, '=');
        if (!eq)
                return fail(p, "--node-selector: expected KEY=VALUE, got '%.80s' (no '=')", kv);
        return add_selector(p, "--node-selector", kv, (size_t)(eq - kv), eq + 1);
}

/* --node NAME (or GPUPOOL_NODE): the selector gpupool/node=NAME */
static int add_node(struct parser *p, const char *what, const char *name) {
        if (!node_name_ok(name))
                return fail(p, "%s: '%.80s' is not a node name (1..%d characters of A-Z a-z 0-9 . _ -)", what, name,
                            GP_CLI_NODE_NAME_MAX);
        return add_selector(p, what, GP_CLI_NODE_LABEL, strlen(GP_CLI_NODE_LABEL), name);
}

/* A duration option (base/units.h), bounded; a usage error names the forms. */
static int want_dur(struct parser *p, const char *opt, const char *val, int flags, int64_t min, int64_t max,
                    int64_t *ret) {
        int64_t v;
        int r = gp_duration_parse(val, flags, max, &v);
        if (r == 0 && v < min)
                r = -ERANGE;
        if (r == -ERANGE)
                return fail(p, "%s: '%.80s' is out of range %llds..%llds", opt, val, (long long)min, (long long)max);
        if (r < 0)
                return fail(p, "%s: expected a duration such as %s, 90s, 30m, 12h, 7d or [D-]HH:MM:SS, got '%.80s'",
                            opt, flags == GP_DUR_PLAIN_MINUTES ? "60 (minutes)" : "3600", val);
        *ret = v;
        return 0;
}

/* submit and run: options, then COMMAND. */
static int parse_submit(struct parser *p, int argc, char **argv, int i) {
        gp_cli_cmd *c = p->c;
        bool run = c->verb == GP_CLI_RUN;
        unsigned mask = 1u << c->verb;
        json_t *env_obj = NULL;
        int64_t v;
        int r;

        c->body = json_object();
        if (!c->body)
                return -ENOMEM;
        while (i < argc) {
                const struct opt *o;
                const char *val;
                r = next_opt(p, mask, argc, argv, &i, &o, &val);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (r == 2)
                        break;
                r = client_opt(p, o, val);
                if (r < 0)
                        return r;
                if (r == 1)
                        continue;
                switch (o->id) {
                case O_GPUS:
                        if ((r = want_int(p, "--gpus", val, 1, GP_MAX_GPUS, &v)) < 0 ||
                            (r = body_set(p, "gpu_request", json_integer(v), "--gpus")) < 0)
                                return r;
                        break;
                case O_MEM:
                        r = gp_size_mb_parse(val, GP_CLI_MEM_MAX_MB, &v);
                        if (r < 0)
                                return fail(p, "--mem: expected MB or a size such as 8G or 8192M (at most %lld MB), "
                                               "got '%.80s'",
                                            (long long)GP_CLI_MEM_MAX_MB, val);
                        if ((r = body_set(p, "memory_mb", json_integer(v), "--mem")) < 0)
                                return r;
                        break;
                case O_CPUS:
                        if ((r = want_int(p, "--cpus", val, 1, GP_CLI_CPUS_MAX, &v)) < 0 ||
                            (r = body_set(p, "cpus", json_integer(v), "--cpus")) < 0)
                                return r;
                        break;
                case O_HOST_MEM:
                        if (gp_size_mb_parse(val, GP_CLI_HOST_MEM_MAX_MB, &v) < 0 || v < 1)
                                return fail(p, "--host-mem: expected MB or a size such as 64G or 512M (1 MB to %lld "
                                               "MB), got '%.80s'",
                                            (long long)GP_CLI_HOST_MEM_MAX_MB, val);
                        if ((r = body_set(p, "host_memory_mb", json_integer(v), "--host-mem")) < 0)
                                return r;
                        break;
                case O_COMPUTE_PCT:
                        if ((r = want_int(p, "--compute-pct", val, 1, 100, &v)) < 0 ||
                            (r = body_set(p, "compute_pct", json_integer(v), "--compute-pct")) < 0)
                                return r;
                        break;
                case O_PRIO: {
                        int prio;
                        if (gp_priority_parse(val, &prio) < 0)
                                return fail(p, "--priority: '%s' is not a priority: expected 0..9, P0..P9 "
                                               "or critical|high|normal|low|background",
                                            val);
                        if ((r = body_set(p, "priority", json_integer(prio), "--priority")) < 0)
                                return r;
                        break;
                }
                case O_NAME:
                        if ((r = want_text(p, "--name", val, GP_NAME_MAX)) < 0 ||
                            (r = body_set(p, "name", json_string(val), "--name")) < 0)
                                return r;
                        break;
                case O_MODEL:
                        if ((r = want_text(p, "--model", val, GP_MODEL_MAX)) < 0 ||
                            (r = body_set(p, "model", json_string(val), "--model")) < 0)
                                return r;
                        break;
                case O_GPU_MODEL:
                        if ((r = want_text(p, "--gpu-model", val, GP_MODEL_MAX)) < 0 ||
                            (r = body_set(p, "gpu_model", json_string(val), "--gpu-model")) < 0)
                                return r;
                        break;
                case O_EXCL:
                        if ((r = body_set(p, "exclusive", json_true(), "--exclusive")) < 0)
                                return r;
                        break;
                case O_PREEMPT:
                        if ((r = body_set(p, "preemptible", json_true(), "--preemptible")) < 0)
                                return r;
                        break;
                case O_ELASTIC_NODES:
                case O_ELASTIC: {
                        /* MIN:MAX; the server checks MIN < MAX (nodes: MIN <= MAX) */
                        bool nodes = o->id == O_ELASTIC_NODES;
                        const char *flag = nodes ? "--elastic-nodes" : "--elastic";
                        char lo[8], hi[8];
                        const char *colon = strchr(val, ':');
                        size_t nlo = colon ? (size_t)(colon - val) : 0;
                        if (!colon || nlo == 0 || nlo >= sizeof(lo) || strlen(colon + 1) >= sizeof(hi))
                                return fail(p, "%s: expected MIN:MAX, e.g. 1:4, got '%.80s'", flag, val);
                        memcpy(lo, val, nlo);
                        lo[nlo] = '\0';
                        gp_strlcpy(hi, colon + 1, sizeof(hi));
                        int64_t mn, mx, most = nodes ? GP_CLI_ENODES_MAX : GP_NODE_MAX_GPUS;
                        if ((r = want_int(p, nodes ? "--elastic-nodes MIN" : "--elastic MIN", lo, 1, most, &mn)) < 0 ||
                            (r = want_int(p, nodes ? "--elastic-nodes MAX" : "--elastic MAX", hi, 1, most, &mx)) < 0)
                                return r;
                        json_t *e = json_pack("{s:I, s:I}", nodes ? "min_nodes" : "min_gpus", (json_int_t)mn,
                                              nodes ? "max_nodes" : "max_gpus", (json_int_t)mx);
                        if ((r = body_set(p, nodes ? "elastic_nodes" : "elastic", e, flag)) < 0)
                                return r;
                        break;
                }
                case O_TIMEOUT:
                case O_TIME:
                        if ((r = want_dur(p, o->id == O_TIME ? "--time" : "--timeout", val,
                                          o->id == O_TIME ? GP_DUR_PLAIN_MINUTES : GP_DUR_PLAIN_SECONDS, 0,
                                          GP_CLI_SECONDS_MAX, &v)) < 0 ||
                            (r = body_set(p, "timeout_s", json_integer(v), "--timeout")) < 0)
                                return r;
                        break;
                case O_WAIT:
                        c->wait = true;
                        break;
                case O_QTIMEOUT:
                        if ((r = want_dur(p, "--queue-timeout", val, GP_DUR_PLAIN_SECONDS, 0, GP_CLI_SECONDS_MAX,
                                          &v)) < 0 ||
                            (r = body_set(p, "queue_timeout_s", json_integer(v), "--queue-timeout")) < 0)
                                return r;
                        break;
                case O_ENV:
                        if ((r = add_env(p, val, &env_obj)) < 0)
                                return r;
                        break;
                case O_EXPORT:
                        if (val[0] == '\0' || strlen(val) > 65536)
                                return fail(p, "--export: expected ALL, NONE or NAME[=VALUE],...");
                        c->export_env = val;
                        break;
                case O_WORKDIR:
                        if (val[0] == '\0' || strlen(val) >= 4096)
                                return fail(p, "--workdir: expected a directory (1..4095 bytes)");
                        if (run) {
                                c->workdir = val;
                        } else if ((r = body_set(p, "workdir", json_string(val), "--workdir")) < 0) {
                                return r;
                        }
                        break;
                case O_TENANT:
                        if ((r = want_text(p, "--tenant", val, GP_TENANT_MAX)) < 0)
                                return r;
                        if (val[0] == '\0')
                                return fail(p, "--tenant: must not be empty");
                        if ((r = body_set(p, "tenant_id", json_string(val), "--tenant")) < 0)
                                return r;
                        break;
                case O_TTL:
                        if ((r = want_dur(p, "--ttl", val, GP_DUR_PLAIN_SECONDS, GP_CLI_TTL_MIN, GP_CLI_TTL_MAX,
                                          &v)) < 0)
                                return r;
                        c->ttl_s = v;
                        break;
                case O_ARRAY: {
                        /* checked here too, so a bad spec is a usage error (exit 2);
                         * the server's max_array_size may be lower */
                        gp_array_spec a;
                        char why[160];
                        r = gp_array_spec_parse(val, strlen(val), GP_ARRAY_MAX_ELEMS, &a, why, sizeof(why));
                        if (r == -ENOMEM)
                                return r;
                        if (r < 0)
                                return fail(p, "--%s", why);
                        gp_array_spec_done(&a);
                        if (run)
                                return fail(p, "--array applies to submit, not run");
                        if ((r = body_set(p, "array", json_string(val), "--array")) < 0)
                                return r;
                        break;
                }
                case O_NODE_SELECTOR:
                        if ((r = add_selector_kv(p, val)) < 0)
                                return r;
                        break;
                case O_ON_NODE_LOST:
                        if (strcmp(val, "fence") && strcmp(val, "requeue"))
                                return fail(p, "--on-node-lost: expected fence or requeue, got '%.32s'", val);
                        if ((r = body_set(p, "on_node_lost", json_string(val), "--on-node-lost")) < 0)
                                return r;
                        break;
                case O_SIGNAL: {
                        gp_notice n;
                        char why[160], text[GP_NOTICE_TEXT_MAX];
                        if (gp_notice_parse(val, &n, why, sizeof(why)) < 0)
                                return fail(p, "--%s", why);
                        if (gp_notice_format(&n, text, sizeof(text)) < 0) /* cannot happen after a parse */
                                return fail(p, "--signal: '%.32s' cannot be sent", val);
                        if ((r = body_set(p, "signal", json_string(text), "--signal")) < 0)
                                return r;
                        break;
                }
                case O_NODE:
                        if ((r = add_node(p, "--node", val)) < 0)
                                return r;
                        break;
                default:
                        return fail(p, "option --%s does not apply here", o->name);
                }
        }
        if (c->help)
                return 0;
        /* run: the GPUs of the machine it runs on, when GPUPOOL_NODE says which
         * (unless --node or --node-selector gpupool/node= chose) */
        if (run && c->env_node && *c->env_node &&
            !json_object_get(json_object_get(c->body, "node_selector"), GP_CLI_NODE_LABEL) &&
            (r = add_node(p, "GPUPOOL_NODE", c->env_node)) < 0)
                return r;
        c->cmd_at = i;
        if (i >= argc) {
                if (run)
                        return fail(p, "missing COMMAND to run (after --)");
                /* submit: the script comes from stdin (cli.c reads it, or says
                 * "missing COMMAND" when stdin is a terminal) */
                c->no_command = true;
                return 0;
        }
        int n = argc - i;
        if (n > GP_CLI_ARGS_MAX)
                return fail(p, "COMMAND has %d words; at most %d", n, GP_CLI_ARGS_MAX);
        for (int k = i; k < argc; k++)
                if (strlen(argv[k]) > GP_CLI_ARG_LEN_MAX)
                        return fail(p, "COMMAND word %d is longer than %d bytes", k - i + 1,
                                    GP_CLI_ARG_LEN_MAX);
        c->argv_cmd = &argv[i];
        c->argc_cmd = n;
        if (run) {
                if (json_object_set_new(c->body, "lease_ttl_s", json_integer(c->ttl_s)) < 0)
                        return -ENOMEM;
                return 0;
        }
        json_t *cmd = json_array();
        if (!cmd || json_object_set_new(c->body, "command", cmd) < 0)
                return -ENOMEM;
        for (int k = i; k < argc; k++) {
                json_t *s = json_string(argv[k]);
                if (!s)
                        return fail(p, "COMMAND word %d is not valid UTF-8 (the API carries text only)",
                                    k - i + 1);
                if (json_array_append_new(cmd, s) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* ID, or ID_INDEX (Slurm's 12_7: element 7 of job array 12) where the
 * command takes one. */
static int parse_ref(struct parser *p, const char *w, gp_cli_ref *ret) {
        int64_t v, ix;
        if (gp_array_ref_parse(w, &v, &ix) == 0) {
                *ret = (gp_cli_ref){.id = v, .array = ix >= 0, .index = ix};
                return 0;
        }
        if (strchr(w, '_'))
                return fail(p, "'%.80s' is not ID_INDEX (an array id, '_', an index 0..%d; e.g. 12_7)", w,
                            GP_ARRAY_INDEX_MAX);
        return fail(p, "'%.80s' is not a task id (a positive integer, or ID_INDEX such as 12_7)", w);
}

/* Add one id to the command; the first also fills id/array/array_index. */
static int add_ref(struct parser *p, const gp_cli_ref *ref) {
        gp_cli_cmd *c = p->c;
        if (c->n_refs >= GP_CLI_CANCEL_IDS_MAX)
                return fail(p, "at most %d ids at once", GP_CLI_CANCEL_IDS_MAX);
        gp_cli_ref *n = realloc(c->refs, sizeof(*n) * (c->n_refs + 1));
        if (!n)
                return -ENOMEM;
        c->refs = n;
        n[c->n_refs++] = *ref;
        if (c->n_refs == 1) {
                c->id = ref->id;
                c->array = ref->array;
                c->array_index = ref->index;
        }
        return 0;
}

/* Every other command: options anywhere, then at most `npos` positionals. */
static int parse_simple(struct parser *p, int argc, char **argv, int i) {
        gp_cli_cmd *c = p->c;
        unsigned mask = 1u << c->verb;
        int npos = 0;
        bool dashdash = false, ttl_given = false;
        int64_t v;
        int r;

        while (i < argc) {
                const char *w = argv[i];
                if (!dashdash) {
                        const struct opt *o;
                        const char *val;
                        r = next_opt(p, mask, argc, argv, &i, &o, &val);
                        if (r < 0)
                                return r;
                        if (r == 2) {
                                dashdash = true;
                                continue;
                        }
                        if (r == 1) {
                                r = client_opt(p, o, val);
                                if (r < 0)
                                        return r;
                                if (r == 1)
                                        continue;
                                switch (o->id) {
                                case O_ALL:
                                        c->all = true;
                                        break;
                                case O_STATE: {
                                        gp_task_state st;
                                        if (c->verb == GP_CLI_CANCEL) {
                                                if (strcmp(val, "active") && strcmp(val, "queued") &&
                                                    strcmp(val, "running"))
                                                        return fail(p, "--state: expected queued, running or "
                                                                       "active (the states a task can be "
                                                                       "cancelled in), got '%.80s'",
                                                                    val);
                                                c->cancel_state = val;
                                                break;
                                        }
                                        if (c->verb == GP_CLI_HISTORY) {
                                                static const char *const run_states[] = {
                                                        "succeeded", "failed", "cancelled", "timeout",
                                                        "lost",      "preempted", "requeued"};
                                                bool ok = false;
                                                for (size_t k = 0; k < GP_ARRAY_SIZE(run_states); k++)
                                                        ok = ok || !strcmp(val, run_states[k]);
                                                if (!ok)
                                                        return fail(p, "--state: '%.80s' is not how a run ends: "
                                                                       "expected succeeded, failed, cancelled, "
                                                                       "timeout, lost, preempted or requeued",
                                                                    val);
                                                c->state = val;
                                                break;
                                        }
                                        if (strcmp(val, "active") != 0 && gp_task_state_parse(val, &st) < 0)
                                                return fail(p, "--state: '%s' is not a state: expected queued, "
                                                               "running, succeeded, failed, cancelled, "
                                                               "timeout, lost or active",
                                                            val);
                                        c->state = val;
                                        break;
                                }
                                case O_LIMIT:
                                        if ((r = want_int(p, "--limit", val, 1, GP_CLI_LIMIT_MAX, &v)) < 0)
                                                return r;
                                        c->limit = v;
                                        break;
                                case O_TENANT:
                                        if ((r = want_text(p, "--tenant", val, GP_TENANT_MAX)) < 0)
                                                return r;
                                        if (val[0] == '\0')
                                                return fail(p, "--tenant: must not be empty");
                                        c->tenant = val;
                                        break;
                                case O_FOLLOW:
                                        c->follow = true;
                                        break;
                                case O_TTL:
                                        /* join-token create --ttl DURATION */
                                        if (gp_duration_parse(val, GP_DUR_PLAIN_SECONDS, GP_CLI_JOIN_TTL_MAX, &v) < 0)
                                                return fail(p, "--ttl: expected a duration such as 3600, 90s, 30m, "
                                                               "12h, 7d or [D-]HH:MM:SS (0 = no expiry; at most "
                                                               "10 years), got '%.80s'",
                                                            val);
                                        c->join_ttl_s = v;
                                        ttl_given = true;
                                        break;
                                case O_EXPAND:
                                        c->expand = true;
                                        break;
                                case O_RUN_NO:
                                        if ((r = want_int(p, "--run", val, 1, INT64_MAX, &v)) < 0)
                                                return r;
                                        c->log_run = v;
                                        break;
                                case O_RANK:
                                        if ((r = want_int(p, "--rank", val, 0, GP_MAX_GPUS - 1, &v)) < 0)
                                                return r;
                                        c->log_rank = v;
                                        break;
                                case O_USER:
                                        if (!gp_user_name_ok(val, strlen(val)) || strlen(val) >= GP_USER_NAME_MAX)
                                                return fail(p, "--user: '%.64s' is not a Unix user name", val);
                                        c->user = val;
                                        break;
                                case O_ME:
                                        c->me = true;
                                        break;
                                case O_ARRAY:
                                        /* cancel --array ID: the whole array */
                                        if (gp_parse_i64(val, 1, INT64_MAX, &v) < 0)
                                                return fail(p, "--array: '%s' is not an array id (a positive integer)",
                                                            val);
                                        if ((r = add_ref(p, &(gp_cli_ref){.id = v, .array = true, .index = -1})) < 0)
                                                return r;
                                        break;
                                case O_ADMIN:
                                        c->admin = true;
                                        break;
                                case O_FROM:
                                case O_TO: {
                                        int64_t ms;
                                        char full[40] = "";
                                        bool day = strlen(val) == 10 && val[4] == '-' && val[7] == '-';
                                        if (day)
                                                snprintf(full, sizeof(full), "%sT00:00:00Z", val);
                                        if (gp_time_parse(day ? full : val, &ms) < 0)
                                                return fail(p, "--%s: '%s' is not a date (YYYY-MM-DD or RFC 3339)",
                                                            o->name, val);
                                        if (o->id == O_FROM)
                                                c->from = val;
                                        else
                                                c->to = val;
                                        break;
                                }
                                case O_JOBS: {
                                        gp_cli_ref ref;
                                        int rr = parse_ref(p, val, &ref);
                                        if (rr < 0)
                                                return rr;
                                        c->job = ref;
                                        c->has_job = true;
                                        break;
                                }
                                case O_SINCE:
                                case O_UNTIL: {
                                        int64_t ms;
                                        if (gp_cli_when_parse(val, gp_now_ms(), &ms) < 0)
                                                return fail(p, "--%s: '%.80s' is not a time (YYYY-MM-DD[THH:MM[:SS]], "
                                                               "RFC 3339, today, midnight, now or now-N[s|m|h|d|w])",
                                                            o->name, val);
                                        if (o->id == O_SINCE)
                                                c->since = val;
                                        else
                                                c->until = val;
                                        break;
                                }
                                case O_GROUP_BY:
                                        if (strcmp(val, "day") && strcmp(val, "model") && strcmp(val, "task"))
                                                return fail(p, "--group-by: expected day, model or task");
                                        c->group_by = val;
                                        break;
                                case O_MONTH: {
                                        int m;
                                        if (gp_bill_month_parse(val, &m) < 0)
                                                return fail(p, "--month: expected YYYY-MM");
                                        c->month = val;
                                        break;
                                }
                                default:
                                        return fail(p, "option --%s does not apply here", o->name);
                                }
                                continue;
                        }
                }
                /* a positional word */
                npos++;
                switch (c->verb) {
                case GP_CLI_STATUS:
                case GP_CLI_CANCEL:
                case GP_CLI_LOGS: {
                        gp_cli_ref ref;
                        if (npos > 1 && c->verb != GP_CLI_CANCEL)
                                return fail(p, "unexpected argument '%.80s' (one task id)", w);
                        if ((r = parse_ref(p, w, &ref)) < 0 || (r = add_ref(p, &ref)) < 0)
                                return r;
                        break;
                }
                case GP_CLI_CONFIG:
                        if (npos == 1 && strcmp(w, "check") != 0)
                                return fail(p, "unknown subcommand '%.80s': expected check", w);
                        if (npos == 2)
                                c->file = w;
                        if (npos > 2)
                                return fail(p, "unexpected argument '%.80s' (one FILE)", w);
                        break;
                case GP_CLI_HELP:
                        if (npos > 1)
                                return fail(p, "unexpected argument '%s'", w);
                        c->topic = w;
                        break;
                case GP_CLI_KEY:
                        if (npos > 1 || strcmp(w, "create") != 0)
                                return fail(p, "unexpected argument '%s' (the subcommand is 'create')", w);
                        break;
                case GP_CLI_NODE:
                        if (npos == 1) {
                                if (strcmp(w, "drain") && strcmp(w, "undrain") && strcmp(w, "remove"))
                                        return fail(p, "unknown subcommand '%.80s': expected drain, undrain or "
                                                       "remove",
                                                    w);
                                c->sub = w;
                        } else if (npos == 2) {
                                if (!node_name_ok(w))
                                        return fail(p, "'%.80s' is not a node name (1..%d characters of A-Z a-z "
                                                       "0-9 . _ -)",
                                                    w, GP_CLI_NODE_NAME_MAX);
                                c->target = w;
                        } else {
                                return fail(p, "unexpected argument '%.80s' (one node NAME)", w);
                        }
                        break;
                case GP_CLI_JOIN_TOKEN:
                        if (npos == 1) {
                                if (strcmp(w, "create") && strcmp(w, "list") && strcmp(w, "revoke"))
                                        return fail(p, "unknown subcommand '%.80s': expected create, list or "
                                                       "revoke",
                                                    w);
                                c->sub = w;
                        } else if (npos == 2 && strcmp(c->sub, "revoke") == 0) {
                                if (!node_name_ok(w))
                                        return fail(p, "'%.80s' is not a token id (such as jt_3; "
                                                       "'gpupool join-token list' shows them)",
                                                    w);
                                c->target = w;
                        } else {
                                return fail(p, "unexpected argument '%.80s'", w);
                        }
                        break;
                default:
                        return fail(p, "unexpected argument '%s'", w);
                }
                i++;
        }
        if (c->help)
                return 0;
        if ((c->verb == GP_CLI_STATUS || c->verb == GP_CLI_LOGS) && c->n_refs == 0)
                return fail(p, "missing task ID");
        if (c->verb == GP_CLI_CANCEL && c->n_refs == 0 && !c->cancel_state && !c->user && !c->me)
                return fail(p, "missing task ID (or --state S, -u USER or --me to cancel many at once)");
        if (c->verb == GP_CLI_CANCEL && c->tenant && c->n_refs > 0)
                return fail(p, "--tenant applies to cancel --state without ids");
        if (c->verb == GP_CLI_KEY && (npos == 0 || !(c->tenant || c->admin)))
                return fail(p, npos == 0 ? "missing subcommand: gpupool key create --tenant T | --admin"
                                         : "missing --tenant T or --admin: whose key is it?");
        if (c->verb == GP_CLI_KEY && c->tenant && c->admin)
                return fail(p, "give --tenant T (a tenant's key) or --admin (an admin key), not both");
        if (c->verb == GP_CLI_CONFIG && !c->file)
                return fail(p, npos == 0 ? "missing subcommand: gpupool config check FILE" : "missing FILE");
        if (c->verb == GP_CLI_NODE && !c->target)
                return fail(p, npos == 0 ? "missing subcommand: drain, undrain or remove" : "missing node NAME");
        if (c->verb == GP_CLI_JOIN_TOKEN) {
                if (!c->sub)
                        return fail(p, "missing subcommand: create, list or revoke");
                if (strcmp(c->sub, "revoke") == 0 && !c->target)
                        return fail(p, "missing token ID ('gpupool join-token list' shows them)");
                if (ttl_given && strcmp(c->sub, "create") != 0)
                        return fail(p, "--ttl applies to 'create' only");
        }
        return 0;
}

int gp_cli_parse(int argc, char **argv, const char *env_api, const char *env_key, gp_cli_cmd *c,
                 gp_buf *err) {
        struct parser p = {.c = c, .err = err, .who = "gpupool"};
        int r, i = 1;

        c->verb = GP_CLI_VERB_COUNT; /* general usage until the command is known */

        if (env_api && *env_api) {
                if ((r = set_api(&p, env_api, "GPUPOOL_API")) < 0)
                        goto usage;
        } else if ((r = set_api(&p, GP_CLI_DEFAULT_API, "default")) < 0) {
                return r;
        }
        if (env_key && *env_key && (r = set_key(&p, env_key, "GPUPOOL_API_KEY")) < 0)
                goto usage;

        /* client options before the command word */
        bool version = false;
        while (i < argc) {
                const struct opt *o;
                const char *val;
                r = next_opt(&p, PRE, argc, argv, &i, &o, &val);
                if (r < 0)
                        goto usage;
                if (r == 0)
                        break;
                if (r == 2) {
                        r = fail(&p, "'--' before the command");
                        goto usage;
                }
                if (o->id == O_VERSION) {
                        version = true;
                        continue;
                }
                if ((r = client_opt(&p, o, val)) < 0)
                        goto usage;
        }
        if (i >= argc) {
                if (version) {
                        c->verb = GP_CLI_VERSION;
                        return 0;
                }
                if (c->help) {
                        c->verb = GP_CLI_HELP;
                        c->help = false;
                        return 0;
                }
                r = fail(&p, "missing command");
                goto usage;
        }
        if (verb_lookup(argv[i], &c->verb) < 0) {
                c->verb = GP_CLI_VERB_COUNT;
                r = fail(&p, "unknown command '%s'", argv[i]);
                goto usage;
        }
        p.verb_known = true;
        c->verb_at = i;
        char who[64];
        snprintf(who, sizeof(who), "gpupool %s", verbs[c->verb].name);
        p.who = who;
        i++;
        if (c->verb == GP_CLI_SUBMIT || c->verb == GP_CLI_RUN)
                r = parse_submit(&p, argc, argv, i);
        else
                r = parse_simple(&p, argc, argv, i);
        if (r < 0)
                goto usage;
        p.who = "gpupool";
        return 0;
usage:
        if (r == -EINVAL) {
                gp_buf_printf(err, "\nusage: %s\n", brief_usage(c->verb));
        }
        p.who = "gpupool";
        return r;
}
