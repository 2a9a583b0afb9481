/* keyhash.h - the "sha256:<64 hex>" form of a key's hash as a config holds
 * it (auth.admin_keys, tenants[].keys, cluster.join_tokens), read the ways
 * people paste it.  Pure; thread-safe. */
#ifndef GP_BASE_KEYHASH_H
#define GP_BASE_KEYHASH_H

#include <stdbool.h>
#include <stddef.h>

/* s[0..n) as a key hash: "sha256:" and 64 lowercase hex digits, or what
 * `printf %s KEY | sha256sum` prints (64 hex digits, blanks, "-"), with or
 * without "sha256:" before it.  true with out = "sha256:<hex>" (NUL-
 * terminated, 72 bytes), false for anything else (out untouched). */
bool gp_key_hash_parse(const char *s, size_t n, char out[72]);

#endif
