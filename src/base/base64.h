/* base64.h - standard base64 (RFC 4648 section 4, '+' '/' and '=' padding),
 * strict: decoding refuses whitespace, a missing or misplaced '=', and
 * non-zero bits in the last symbol (so every byte string has exactly one
 * encoding).  Used for log chunks in agent messages (cluster/proto.h).
 * Pure; thread-safe; allocates nothing. */
#ifndef GP_BASE_BASE64_H
#define GP_BASE_BASE64_H

#include <stddef.h>

/* Characters the encoding of n bytes takes (without the NUL). */
size_t gp_base64_encoded_len(size_t n);
/* Most bytes an encoding of len characters can decode to. */
size_t gp_base64_decoded_max(size_t len);

/* Encode src[0..n) into out (NUL-terminated).  0, or -E2BIG when out_size
 * < gp_base64_encoded_len(n) + 1 (out untouched). */
int gp_base64_encode(const void *src, size_t n, char *out, size_t out_size);

/* Decode s[0..len) into out.  0 with *ret_n bytes written; -EINVAL (not
 * strict base64: out may hold garbage) or -E2BIG (out_size below the length the
 * padding announces, at most gp_base64_decoded_max(len); out untouched). */
int gp_base64_decode(const char *s, size_t len, void *out, size_t out_size, size_t *ret_n);

#endif
