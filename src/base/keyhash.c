/* keyhash.c - a key's hash as people paste it (see keyhash.h).
 * Invariant: only 64 lowercase hex digits ever reach out; a pasted
 * `sha256sum FILE` line (a file's hash, not the key's) is refused. */
#include "base/keyhash.h"

#include <string.h>

bool gp_key_hash_parse(const char *s, size_t n, char out[72]) {
        bool prefix = n >= 7 && memcmp(s, "sha256:", 7) == 0;
        size_t at = prefix ? 7 : 0;
        if (n < at + 64)
                return false;
        for (size_t i = at; i < at + 64; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        size_t rest = at + 64;
        if (rest < n) {
                /* sha256sum's "  -": blanks, then "-" (stdin), then nothing */
                size_t k = rest;
                while (k < n && (s[k] == ' ' || s[k] == '\t'))
                        k++;
                if (k == rest || k + 1 != n || s[k] != '-')
                        return false;
        } else if (!prefix) {
                return false; /* 64 bare hex digits could be a key itself: say so */
        }
        memcpy(out, "sha256:", 7);
        memcpy(out + 7, s + at, 64);
        out[71] = '\0';
        return true;
}
