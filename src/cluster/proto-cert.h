/* proto-cert.h - the node certificate messages of the agent channel
 * (POST /agent/v1/cert; docs/internals/cluster.md "Node certificates"):
 * the agent sends its node's name and the public key of a key it made
 * (the key never leaves the node); the server answers a certificate for
 * it, signed by the cluster's CA, with that CA.
 *
 * Pure as proto.h: jansson and memory only.  Parsing bounds every string
 * (a PEM block of printable ASCII and newlines, starting with its BEGIN
 * line, at most GP_PROTO_CERT_PEM_MAX bytes) and fails with -EINVAL and a
 * message in err (-ENOMEM when memory is short), the output untouched.
 * Unknown keys are ignored.  A parsed struct owns its strings: free them
 * with gp_proto_cert_*_done (takes a zeroed struct).  Thread-safe. */
#ifndef GP_CLUSTER_PROTO_CERT_H
#define GP_CLUSTER_PROTO_CERT_H

#include <stddef.h>
#include <stdint.h>

#include "core/task.h"

#define GP_PROTO_CERT_PEM_MAX (16 * 1024) /* a public key, a certificate or a CA, as PEM */
#define GP_PROTO_CERT_NAMES 8             /* names of a node certificate */
#define GP_PROTO_CERT_NAME_MAX 256        /* bytes of one name */

/* POST /agent/v1/cert (Authorization: Bearer gpn_...) */
typedef struct gp_proto_cert_req {
        char node[GP_NODE_MAX];  /* gp_proto_node_name_ok */
        char *public_key;        /* PEM "-----BEGIN PUBLIC KEY-----", owned */
} gp_proto_cert_req;

typedef struct gp_proto_cert_answer {
        char *cert;              /* PEM "-----BEGIN CERTIFICATE-----", owned */
        char *ca;                /* PEM, the CA that signed it, owned */
        int64_t not_after_ms;    /* > 0 */
        int n_names;             /* 0..GP_PROTO_CERT_NAMES: what the certificate names */
        char names[GP_PROTO_CERT_NAMES][GP_PROTO_CERT_NAME_MAX];
} gp_proto_cert_answer;

int gp_proto_cert_req_parse(const char *data, size_t len, gp_proto_cert_req *ret, char *err, size_t errlen);
int gp_proto_cert_req_render(const gp_proto_cert_req *m, char **ret);
void gp_proto_cert_req_done(gp_proto_cert_req *m);

int gp_proto_cert_answer_parse(const char *data, size_t len, gp_proto_cert_answer *ret, char *err, size_t errlen);
int gp_proto_cert_answer_render(const gp_proto_cert_answer *m, char **ret);
void gp_proto_cert_answer_done(gp_proto_cert_answer *m);

/* The first line of a relay to a model replica (agent/agent-relay.h,
 * server/relay.c), sent inside TLS to the agent's port:
 *     "GPUPOOL-RELAY TASK.EPOCH.RANK TOKEN\n"
 * TOKEN: GP_PROTO_RELAY_TOKEN_MIN or more lowercase hex digits. */
#define GP_PROTO_RELAY_MAGIC "GPUPOOL-RELAY "
#define GP_PROTO_RELAY_LINE_MAX 160 /* the line, '\n' included */
#define GP_PROTO_RELAY_TOKEN_MIN 32

/* line[0..len) (its '\n' last): 0 and NUL-terminated copies of the run's
 * name (digits and two dots, no more) and the token, or -EINVAL (nothing
 * written). */
int gp_proto_relay_parse(const char *line, size_t len, char *name, size_t name_size, char *token, size_t token_size);

/* The answer a relay that cannot reach the replica gives in its place (the
 * agent's, and the server's to the gateway): a 502 whose JSON body says
 * why (a literal of ours, not escaped), the connection closed after.  Its
 * length in buf (size 600 holds any of ours), or -1 when it does not fit. */
int gp_proto_relay_refusal(char *buf, size_t size, const char *why);

#endif
