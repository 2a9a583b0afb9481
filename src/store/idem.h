/* idem.h - the answers of requests sent with an Idempotency-Key, kept in
 * the store (docs/api.md "Idempotency-Key", internals/store.md).
 *
 * One table beside the tasks, created if missing at every open (like the
 * coordinator's): idempotency (caller, key, fingerprint, status, ctype,
 * body, created_ms), primary key (caller, key).  A row is written in the
 * transaction that stores the request's change (gp_store_idem_put inside
 * gp_store_begin/commit), so the answer is kept if and only if the change
 * is: a server that died, or a deposed leader whose commit was fenced,
 * left neither.  Sizes are bounded here: key 1..GP_IDEM_KEY_MAX printable
 * bytes, caller 1..GP_IDEM_CALLER_MAX, fingerprint 64 hex digits, body at
 * most GP_IDEM_BODY_MAX bytes (the caller keeps larger answers out).
 */
#ifndef GP_STORE_IDEM_H
#define GP_STORE_IDEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define GP_IDEM_KEY_MAX 255        /* bytes of an Idempotency-Key */
#define GP_IDEM_CALLER_MAX 96      /* bytes of the caller's identity */
#define GP_IDEM_FP_LEN 64          /* hex digits of the request's SHA-256 */
#define GP_IDEM_CTYPE_MAX 96       /* bytes of the answer's Content-Type */
#define GP_IDEM_BODY_MAX (1 << 20) /* bytes of an answer kept */

typedef struct gp_store_idem {
        char caller[GP_IDEM_CALLER_MAX + 1]; /* who sent it: "admin" or "tenant:ID" */
        char key[GP_IDEM_KEY_MAX + 1];       /* the Idempotency-Key */
        char fp[GP_IDEM_FP_LEN + 1];         /* SHA-256 hex of method, path and body */
        int status;                          /* the first answer's HTTP status */
        char ctype[GP_IDEM_CTYPE_MAX + 1];   /* its Content-Type ("" = JSON) */
        char *body;                          /* its body (get: malloc'd, the caller frees) */
        int64_t created_ms;                  /* when it was stored (ms since the epoch) */
} gp_store_idem;

/* Is k (n bytes) a valid key: 1..GP_IDEM_KEY_MAX bytes 0x20..0x7e? */
bool gp_store_idem_key_ok(const char *k, size_t n);

/* out = SHA-256 hex of "METHOD\nPATH\nBODY", PATH under /api/v1/ when
 * path is under the /api/ alias (the same request either way).  path is
 * percent-decoded, without its query.  0, -E2BIG (path over 1 KiB),
 * -ENOMEM.  Pure. */
int gp_store_idem_fingerprint(const char *method, const char *path, const char *body, size_t len,
                              char out[GP_IDEM_FP_LEN + 1]);
/* Inside a transaction: keep rec's answer (a row that exists already is
 * left as it is: the first answer wins).  0 or -EINVAL (bad sizes, not in a
 * transaction) or -GP_ESTORE (the transaction is doomed). */
int gp_store_idem_put(gp_store *s, const gp_store_idem *rec);
/* Outside a transaction: the kept answer of (caller, key) into *ret (its
 * body malloc'd, the caller frees it).  0, -ENOENT, -EINVAL, -ENOMEM,
 * -GP_ESTORE. */
int gp_store_idem_get(gp_store *s, const char *caller, const char *key, gp_store_idem *ret);
/* Outside a transaction: the kept answer for key whose fingerprint is fp,
 * whoever the caller (a follower resolving a write it forwarded, which
 * knows no caller).  0 with *ret (body malloc'd), -ENOENT (no row has the
 * key), -EEXIST (rows have the key, none with fp), -GP_ESTORE, -EINVAL. */
int gp_store_idem_find(gp_store *s, const char *key, const char *fp, gp_store_idem *ret);
/* Inside a transaction: drop the rows created before before_ms, and the
 * oldest beyond keep_max rows.  0 or -GP_ESTORE. */
int gp_store_idem_prune(gp_store *s, int64_t before_ms, int64_t keep_max);

#endif
