/* fuzz-proto.c - libFuzzer target for the agent messages
 * (src/cluster/proto.c): join, join answer, sync and sync answer.
 *
 * The first byte picks the parser (low 2 bits; bit 2: the 409 answer's seq).  Checks the contract, not
 * only the absence of crashes: a failure is -EINVAL with a non-empty
 * NUL-terminated message (or -ENOMEM) and leaves the output struct byte
 * for byte unchanged; a success is within the documented bounds, renders,
 * and the rendering parses again to a struct that renders the same (a
 * fixed point after one round). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/labels.h"
#include "cluster/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int r, const char *err, size_t n, const void *out, const void *before, size_t osize) {
        if ((r != -EINVAL && r != -ENOMEM) || !memchr(err, '\0', n) || (r == -EINVAL && !err[0]) ||
            memcmp(out, before, osize))
                abort();
}

static void check_id(const gp_proto_run_id *id) {
        if (id->task < 1 || id->epoch < 1 || id->rank < 0 || id->rank > GP_PROTO_MAX_RANK)
                abort();
}

/* render a (typed) struct, parse it back, render again: same text */
#define ROUND(type, render, parse, done, m)                                                                           \
        do {                                                                                                          \
                char *s1 = NULL, *s2 = NULL, e2[256];                                                                 \
                type m2;                                                                                              \
                if (render(m, &s1) < 0)                                                                               \
                        break;                                                                                        \
                if (parse(s1, strlen(s1), &m2, e2, sizeof(e2)) < 0)                                                   \
                        abort();                                                                                      \
                if (render(&m2, &s2) == 0 && strcmp(s1, s2))                                                          \
                        abort();                                                                                      \
                done(&m2);                                                                                            \
                free(s1);                                                                                             \
                free(s2);                                                                                             \
        } while (0)

static void noop_done(gp_proto_join_answer *m) {
        (void)m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        int kind = data[0] & 3;
        if (data[0] & 4) { /* the 409 answer's seq (gp_proto_replay_parse): 0 and >= 0, or -EINVAL */
                int64_t last = -7;
                int rr = gp_proto_replay_parse((const char *)data + 1, size - 1, &last);
                if ((rr == 0 && last < 0) || (rr < 0 && (rr != -EINVAL || last != -7)))
                        abort();
                return 0;
        }
        const char *msg = (const char *)data + 1;
        size_t n = size - 1;
        char err[256];
        memset(err, 'x', sizeof(err));
        int r;
        if (kind == 0) {
                gp_proto_join m, before;
                memset(&m, 0x5a, sizeof(m));
                before = m;
                r = gp_proto_join_parse(msg, n, &m, err, sizeof(err));
                if (r < 0) {
                        check_err(r, err, sizeof(err), &m, &before, sizeof(m));
                        return 0;
                }
                if (!gp_proto_node_name_ok(m.name) || m.n_gpus < 0 || m.n_gpus > GP_PROTO_MAX_GPUS ||
                    !memchr(m.labels, '\0', sizeof(m.labels)) || m.seq < 0 ||
                    (m.machine[0] && !gp_proto_machine_ok(m.machine)))
                        abort();
                char canon[GP_LABELS_MAX], e[200];
                if (gp_labels_canon(m.labels, canon, sizeof(canon), e, sizeof(e)) < 0 || strcmp(canon, m.labels))
                        abort();
                ROUND(gp_proto_join, gp_proto_join_render, gp_proto_join_parse, gp_proto_join_done, &m);
                gp_proto_join_done(&m);
        } else if (kind == 1) {
                gp_proto_join_answer m, before;
                memset(&m, 0x5a, sizeof(m));
                before = m;
                r = gp_proto_join_answer_parse(msg, n, &m, err, sizeof(err));
                if (r < 0) {
                        check_err(r, err, sizeof(err), &m, &before, sizeof(m));
                        return 0;
                }
                if (!gp_proto_credential_ok(m.credential) || !gp_proto_node_name_ok(m.node) || m.heartbeat_s < 1 ||
                    m.heartbeat_s > 60 || (m.max_body != 0 && m.max_body < GP_PROTO_MIN_BODY))
                        abort();
                ROUND(gp_proto_join_answer, gp_proto_join_answer_render, gp_proto_join_answer_parse, noop_done, &m);
        } else if (kind == 2) {
                gp_proto_sync m, before;
                memset(&m, 0x5a, sizeof(m));
                before = m;
                r = gp_proto_sync_parse(msg, n, &m, err, sizeof(err));
                if (r < 0) {
                        check_err(r, err, sizeof(err), &m, &before, sizeof(m));
                        return 0;
                }
                size_t total = 0;
                if (m.seq < 1 || m.wait_ms < 0 || m.wait_ms > GP_PROTO_MAX_WAIT_MS || m.n_runs > GP_PROTO_MAX_RUNS ||
                    m.page < 0 || m.page > GP_PROTO_MAX_PAGE || (!m.full && (m.page || m.more)))
                        abort();
                for (int i = 0; i < m.n_runs; i++)
                        check_id(&m.runs[i].id);
                for (int i = 0; i < m.n_logs; i++) {
                        check_id(&m.logs[i].id);
                        if (m.logs[i].len < 1 || m.logs[i].len > GP_PROTO_LOG_CHUNK || m.logs[i].offset < 0)
                                abort();
                        total += m.logs[i].len;
                }
                if (total > GP_PROTO_LOG_TOTAL)
                        abort();
                ROUND(gp_proto_sync, gp_proto_sync_render, gp_proto_sync_parse, gp_proto_sync_done, &m);
                gp_proto_sync_done(&m);
        } else {
                gp_proto_sync_answer m, before;
                memset(&m, 0x5a, sizeof(m));
                before = m;
                r = gp_proto_sync_answer_parse(msg, n, &m, err, sizeof(err));
                if (r < 0) {
                        check_err(r, err, sizeof(err), &m, &before, sizeof(m));
                        return 0;
                }
                if (m.max_body != 0 && m.max_body < GP_PROTO_MIN_BODY)
                        abort();
                for (int i = 0; i < m.n_start; i++) {
                        gp_proto_start *s = &m.start[i];
                        check_id(&s->id);
                        if (s->n_argv < 1 || s->n_argv > GP_PROTO_MAX_ARGV || s->argv[s->n_argv] ||
                            !s->argv[0][0] || s->env[s->n_env] || s->id.rank >= s->nnodes || !s->workdir ||
                            (s->notice.signo && (s->notice.signo > 31 || s->notice.seconds < 1 ||
                                                 s->notice.seconds > GP_NOTICE_MAX_S)))
                                abort();
                        for (int k = 0; k < s->n_env; k++)
                                if (!strchr(s->env[k], '='))
                                        abort();
                }
                ROUND(gp_proto_sync_answer, gp_proto_sync_answer_render, gp_proto_sync_answer_parse,
                      gp_proto_sync_answer_done, &m);
                gp_proto_sync_answer_done(&m);
        }
        return 0;
}
