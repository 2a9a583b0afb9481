/* nodes-record.c - the node registry's stored records (nodes-int.h): a
 * node's ("node:NAME" in the store's meta table) and the join tokens'
 * ("join_tokens"), to JSON and back, and a node's GPU list.  No store
 * access and no lock of its own: nodes.c reads and writes the records,
 * under d->lock. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "base/vec.h"
#include "server/nodes-int.h"

static const char *const state_names[] = {"ready", "draining", "lost", "left"};

const char *gp_node_state_name(gp_node_state s) {
        return (unsigned)s < GP_ARRAY_SIZE(state_names) ? state_names[s] : "unknown";
}

static int state_parse(const char *s, gp_node_state *ret) {
        for (size_t i = 0; i < GP_ARRAY_SIZE(state_names); i++)
                if (s && !strcmp(s, state_names[i])) {
                        *ret = (gp_node_state)i;
                        return 0;
                }
        return -EINVAL;
}

void gp_node_set_gpus(gp_node *n, const gp_proto_gpu *g, int ng) {
        node_gpu *v = ng ? calloc((size_t)ng, sizeof(*v)) : NULL;
        if (ng && !v) {
                gp_error("out of memory in the node registry; stopping");
                _exit(70);
        }
        for (int i = 0; i < ng; i++) {
                v[i].g = g[i];
                v[i].sid = UINT32_MAX;
        }
        free(n->gpus);
        n->gpus = v;
        n->ngpus = ng;
}

static json_t *gpus_json(const node_gpu *g, int n) {
        json_t *a = json_array();
        for (int i = 0; a && i < n; i++)
                json_array_append_new(a, json_pack("{s:i,s:s,s:s,s:I,s:b}", "index", g[i].g.index, "uuid", g[i].g.uuid,
                                                   "name", g[i].g.name, "memory_mb", (json_int_t)g[i].g.memory_mb,
                                                   "healthy", g[i].g.healthy));
        return a;
}

char *gp_node_record(const gp_node *n) {
        json_t *j = json_pack("{s:s,s:s,s:b,s:b,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:o,s:s,s:I,s:I,s:b}", "name", n->name, "state",
                              gp_node_state_name(n->state), "drain", n->drain, "removing", n->removing, "cred", n->cred, "address", n->address,
                              "labels", n->labels, "version", n->version, "backend", n->backend, "joined_ms",
                              (json_int_t)n->joined_ms, "left_ms", (json_int_t)n->left_ms, "gpus",
                              gpus_json(n->gpus, n->ngpus), "machine", n->machine, "join_seq", (json_int_t)n->join_seq,
                              "seq_floor", (json_int_t)n->seq_floor, "resize", n->resize);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

static int str_field(json_t *j, const char *key, char *dst, size_t size) {
        const char *v = json_string_value(json_object_get(j, key));
        if (!v || strlen(v) >= size)
                return -EINVAL;
        memcpy(dst, v, strlen(v) + 1);
        return 0;
}

int gp_node_from_record(gp_node *n, const char *text) {
        json_t *j = json_loads(text, 0, NULL);
        char st[16];
        int rc = -EINVAL;
        if (!j || str_field(j, "state", st, sizeof(st)) < 0 || state_parse(st, &n->state) < 0 ||
            str_field(j, "cred", n->cred, sizeof(n->cred)) < 0 || str_field(j, "address", n->address, sizeof(n->address)) < 0 ||
            str_field(j, "labels", n->labels, sizeof(n->labels)) < 0 ||
            str_field(j, "version", n->version, sizeof(n->version)) < 0 ||
            str_field(j, "backend", n->backend, sizeof(n->backend)) < 0)
                goto out;
        n->drain = json_is_true(json_object_get(j, "drain"));
        n->removing = json_is_true(json_object_get(j, "removing"));
        n->resize = json_is_true(json_object_get(j, "resize"));
        n->joined_ms = json_integer_value(json_object_get(j, "joined_ms"));
        n->left_ms = json_integer_value(json_object_get(j, "left_ms"));
        n->join_seq = json_integer_value(json_object_get(j, "join_seq"));
        n->seq = n->seq_floor = json_integer_value(json_object_get(j, "seq_floor"));
        if (json_object_get(j, "machine") && str_field(j, "machine", n->machine, sizeof(n->machine)) < 0)
                goto out;
        json_t *ga = json_object_get(j, "gpus");
        size_t ng = json_array_size(ga);
        if (ng > GP_PROTO_MAX_GPUS)
                goto out;
        gp_proto_gpu g[GP_PROTO_MAX_GPUS];
        for (size_t i = 0; i < ng; i++) {
                json_t *x = json_array_get(ga, i);
                memset(&g[i], 0, sizeof(g[i]));
                g[i].index = (int)json_integer_value(json_object_get(x, "index"));
                g[i].memory_mb = json_integer_value(json_object_get(x, "memory_mb"));
                g[i].healthy = json_is_true(json_object_get(x, "healthy"));
                if (str_field(x, "uuid", g[i].uuid, sizeof(g[i].uuid)) < 0 ||
                    str_field(x, "name", g[i].name, sizeof(g[i].name)) < 0 || g[i].index < 0 ||
                    g[i].index >= GP_PROTO_MAX_GPUS)
                        goto out;
        }
        gp_node_set_gpus(n, g, (int)ng);
        rc = 0;
out:
        json_decref(j);
        return rc;
}

char *gp_nodes_tokens_record(const gp_nodes *ns) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < ns->ntok; i++)
                json_array_append_new(a, json_pack("{s:s,s:s,s:I,s:I,s:b}", "id", ns->tok[i].id, "hash", ns->tok[i].hash,
                                                   "created_ms", (json_int_t)ns->tok[i].created_ms, "expires_ms",
                                                   (json_int_t)ns->tok[i].expires_ms, "revoked", ns->tok[i].revoked));
        json_t *j = json_pack("{s:I,s:o}", "next", (json_int_t)ns->next_tok, "tokens", a);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        return s;
}

int gp_nodes_tokens_from_record(gp_nodes *ns, const char *text) {
        json_t *j = json_loads(text, 0, NULL);
        json_t *a = json_object_get(j, "tokens");
        int rc = -EINVAL;
        if (!j || !json_is_array(a) || json_array_size(a) > GP_NODES_MAX_TOKENS)
                goto out;
        ns->next_tok = json_integer_value(json_object_get(j, "next"));
        for (size_t i = 0; i < json_array_size(a); i++) {
                json_t *x = json_array_get(a, i);
                jtoken t = {0};
                if (str_field(x, "id", t.id, sizeof(t.id)) < 0 || str_field(x, "hash", t.hash, sizeof(t.hash)) < 0)
                        goto out;
                t.created_ms = json_integer_value(json_object_get(x, "created_ms"));
                t.expires_ms = json_integer_value(json_object_get(x, "expires_ms"));
                t.revoked = json_is_true(json_object_get(x, "revoked"));
                jtoken *v = gp_vec_grow(ns->tok, &ns->captok, ns->ntok + 1, sizeof(*v), 8);
                if (!v) {
                        rc = -ENOMEM;
                        goto out;
                }
                ns->tok = v;
                v[ns->ntok++] = t;
        }
        rc = 0;
out:
        json_decref(j);
        return rc;
}
