/* reason-code.c - the server's reasons read back as a code and arguments
 * (reason-code.h).
 *
 * Invariants: the table holds the templates exactly as the server writes
 * the text (server/daemon.c, daemon-open.c, spawner.c, nodes.c,
 * exec/exec.c, base/notice.c, agent/agent.c), {N} where a text argument
 * goes, [N] where an integer goes; the first template that matches the
 * whole text wins, so a template that another one would also match (a
 * longer literal tail, a wrapper of another reason) comes first.  {N}
 * matches the shortest text that lets the rest match, [N] the digits (an
 * optional '-' first) that do.  Texts are bounded by GP_REASON_MAX
 * (core/task.h); longer ones are not read. */
#include "server/reason-code.h"

#include <stdbool.h>
#include <string.h>

#include "core/task.h"

typedef struct def {
        const char *code;
        const char *tmpl;
        unsigned nested; /* bit N: argument N is itself a reason */
} def;

static const def defs[] = {
        /* wrappers of another reason first */
        {"requeued", "requeued (retry [0] of [1]): {2}", 1u << 2},
        {"stopping", "stopping: {0}", 1u << 0},
        {"oom_more", "{0}; it asks [1] MB now (was [2])", 1u << 0},
        {"notice_exit", "{0}; exited with code [1] within its notice ({2})", 1u << 0},
        {"could_not_requeue", "could not be queued again after restart: {0}", 0},
        /* why a task ended or is stopping (daemon.c, exec.c, notice.c) */
        {"cancelled_request", "cancelled by request", 0},
        {"cancelling_notice", "cancelling: SIG{0} sent, SIGTERM after [1] s (its notice), SIGKILL [2] s later", 0},
        {"cancelling", "cancelling: SIGTERM sent, SIGKILL after [0] s", 0},
        {"cancelled", "cancelled", 0},
        {"preempted", "preempted", 0},
        {"released_unstarted", "released before it started", 0},
        {"released_exit_preempted", "released by the holder with exit code [0] after it was preempted", 0},
        {"released_exit", "released by the holder with exit code [0]", 0},
        {"released_preempted", "released by the holder after it was preempted", 0},
        {"released", "released by the holder", 0},
        {"no_result", "its supervisor ended without recording a result", 0},
        {"no_result", "its supervisor ended without a result", 0}, /* an agent's words (agent.c) */
        {"preempted_gpus", "preempted ([0] time{1}): its GPUs went to a more urgent task or back to their guarantee", 0},
        {"preempted_lease", "preempted ([0] time{1}): the lease was lost after the [2] s grace period", 0},
        {"preempted_run", "its GPUs went to a more urgent task or back to their guarantee", 0},
        {"queue_timeout", "waited longer than queue_timeout_s ([0] s)", 0},
        {"borrowing_backfill",
         "borrowing: started by backfill; started on GPUs guaranteed to other tenants, who may take them back (it is "
         "preempted then, like a preemptible task)",
         0},
        {"borrowing",
         "borrowing: started on GPUs guaranteed to other tenants, who may take them back (it is preempted then, like "
         "a preemptible task)",
         0},
        {"backfill", "started by backfill", 0},
        {"lease_expired", "lease expired: no heartbeat for [0] s", 0},
        {"lease_timeout", "lease held longer than timeout_s ([0] s)", 0},
        {"supervisor_failed", "could not start its supervisor: {0}", 0},
        {"timed_out", "timed out after [0] s", 0},
        {"fenced_unstarted", "fenced before it started: its node lost contact with the server", 0},
        {"fenced", "fenced: its node lost contact with the server", 0},
        {"killed_signal", "killed by signal [0]", 0},
        {"exited", "exited with code [0]", 0},
        {"workdir_run_as", "cannot enter workdir {0} as run_as: {1}", 0},
        {"workdir", "cannot enter workdir {0}: {1}", 0},
        {"run_as_user", "run_as {0}: cannot become that user: {1}", 0},
        {"cannot_run", "cannot run {0}: {1}", 0},
        {"supervisor_exec", "supervisor cannot start the command: {0}", 0},
        /* why a run was stopped or requeued (nodes.c, daemon.c, daemon-open.c) */
        {"node_lost_fenced", "node {0} lost: no heartbeat for [1] s; its run there was fenced", 0},
        {"node_lost", "node {0} lost: no heartbeat for [1] s", 0},
        {"node_fenced", "node {0} lost contact with the server; its run was fenced", 0},
        {"node_removed", "node {0} was removed from the pool", 0},
        {"node_lost_run", "node {0} lost its run", 0},
        {"gpus_gone", "its GPUs are no longer in the pool", 0},
        {"gpu_failed_why", "GPU {0}:[1] failed: {2}", 0},
        {"gpu_failed", "GPU {0}:[1] failed", 0},
        {"memory_exceeded", "memory_exceeded: used [0] MB of [1] on one of its GPUs", 0},
        {"gpu_oom", "gpu_out_of_memory: its output says \"{0}\" ({1})", 0},
        /* a queued task no node can hold, while the pool may grow (daemon.c
         * gp_daemon_task_reason, core/sched-task.c gp_sched_check_feasible,
         * nodes.c gp_nodes_growable) */
        {"pool_may_grow", "no node in the pool can hold it now ({0}); it waits for one to join: {1}", 3u},
        {"grow_token", "a join token is live", 0},
        {"grow_node_lost", "node {0} is lost and may come back", 0},
        {"no_gpus", "the pool has no GPUs", 0},
        {"no_labels", "no node has the labels '{0}' (node_selector)", 0},
        {"no_model", "no GPU matches gpu_model '{0}'", 0},
        {"no_gpu_memory", "no GPU has [0] MB usable (largest: [1] MB after the [2] MB safety margin)", 0},
        {"no_whole_node", "needs whole nodes with [0] GPUs in all, and no node fits whole", 0},
        {"too_few_nodes", "needs [0] whole nodes of [1] GPUs, [2] exist{3}", 0},
        {"elastic_one_node", "an elastic task runs on one node: no node has [0] GPUs that fit (most on one node: [1])",
         0},
        {"no_node_fits", "no node has [0] GPUs that fit (most on one node: [1])", 0},
};

#define NARGS 4
#define DEPTH 3 /* a wrapper of a wrapper of a reason: as deep as the server nests them */

typedef struct span {
        const char *p;
        size_t n;
        bool set;
} span;

/* 1: {N} here, 2: [N], 0: neither */
static int is_arg(const char *t) {
        if (t[1] < '0' || t[1] >= '0' + NARGS)
                return 0;
        return t[0] == '{' && t[2] == '}' ? 1 : t[0] == '[' && t[2] == ']' ? 2 : 0;
}

/* Does s match t whole?  a[] gets the arguments when it does. */
static bool match(const char *t, const char *s, span *a) {
        while (*t) {
                int kind = is_arg(t);
                if (kind) {
                        int i = t[1] - '0';
                        for (size_t k = 0;; k++) {
                                bool num = k > 0 && (s[k - 1] >= '0' && s[k - 1] <= '9');
                                if ((kind == 1 || num) && match(t + 3, s + k, a)) {
                                        a[i] = (span){s, k, true};
                                        return true;
                                }
                                if (!s[k] || (kind == 2 && !(s[k] >= '0' && s[k] <= '9') && !(k == 0 && s[k] == '-')))
                                        return false;
                        }
                }
                if (*t != *s)
                        return false;
                t++;
                s++;
        }
        return *s == '\0';
}

static json_t *code_of(const char *text, int depth) {
        if (!text || strnlen(text, GP_REASON_MAX) >= GP_REASON_MAX || depth > DEPTH)
                return NULL;
        for (size_t d = 0; d < sizeof(defs) / sizeof(defs[0]); d++) {
                span a[NARGS] = {{0}};
                if (!match(defs[d].tmpl, text, a))
                        continue;
                json_t *args = json_array();
                int n = 0;
                for (int i = 0; i < NARGS; i++)
                        if (a[i].set)
                                n = i + 1;
                for (int i = 0; args && i < n; i++) {
                        char v[GP_REASON_MAX];
                        size_t l = a[i].n < sizeof(v) ? a[i].n : sizeof(v) - 1;
                        memcpy(v, a[i].p ? a[i].p : "", l);
                        v[l] = '\0';
                        json_t *sv = json_string(v); /* NULL: not UTF-8 (a text cut mid-character) */
                        json_t *sub = sv && (defs[d].nested >> i & 1u) ? code_of(v, depth + 1) : NULL;
                        if (sub) /* on failure set_new has freed sv */
                                sv = json_object_set_new(sub, "text", sv) == 0 ? sub : (json_decref(sub), NULL);
                        if (!sv || json_array_append_new(args, sv) < 0) {
                                json_decref(args); /* no code for a text that is not UTF-8 */
                                return NULL;
                        }
                }
                return args ? json_pack("{s:s,s:o}", "code", defs[d].code, "args", args) : NULL;
        }
        return NULL;
}

json_t *gp_reason_code(const char *text) {
        return code_of(text, 0);
}

void gp_reason_code_note(json_t *detail, const char *note) {
        for (const char *p = note ? strstr(note, "; ") : NULL; detail && p; p = strstr(p + 2, "; ")) {
                json_t *o = gp_reason_code(p + 2);
                if (o && json_object_set_new(o, "text", json_string(p + 2)) == 0) {
                        json_object_set_new(detail, "note_reason", o);
                        return;
                }
                json_decref(o);
        }
}

json_t *gp_reason_code_queued(const char *core, const char *shown) {
        size_t n = core ? strlen(core) : 0;
        if (!n || !shown || strncmp(shown, core, n) != 0)
                return NULL;
        json_t *o = gp_reason_code(core);
        if (o && json_object_set_new(o, "note", json_string(shown + n)) < 0) {
                json_decref(o); /* the note is not UTF-8: no code for any of it */
                return NULL;
        }
        gp_reason_code_note(o, shown + n);
        return o;
}
