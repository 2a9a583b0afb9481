/* sha256.h - SHA-256 (FIPS 180-4), for hashing API keys.  Thread-safe. */
#ifndef GP_BASE_SHA256_H
#define GP_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* out = SHA-256(data[0..len)). */
void gp_sha256(const void *data, size_t len, uint8_t out[32]);
/* "sha256:" followed by 64 lowercase hex digits, NUL-terminated (72 bytes). */
void gp_sha256_key_hash(const char *key, char out[72]);

#endif
