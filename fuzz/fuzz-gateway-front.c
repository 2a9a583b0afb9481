/* fuzz-gateway-front.c - libFuzzer target for how the gateway's own /v1
 * server reads a request head (gw_front_parse_head in src/gateway/front.c:
 * the h1 parser plus what the front takes from it: the target up to its
 * query, X-Priority, Authorization, the browser check's headers, body
 * framing), and for the first-bytes test that decides whether a connection
 * is the front's or MHD's.
 *
 * The input is copied into a buffer of exactly its size, so ASan catches a
 * read past the bytes received (the front's buffers are never
 * NUL-terminated).  Checks the contract: -EAGAIN only before the head's end
 * and then for every prefix of it too; a refusal is 400, 414 or 431; a /v1
 * head has head_len <= n, a url that is the target's start and begins with
 * "/v1", no NUL inside its strings, and a body length >= -1.  Any violation
 * aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gw-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_string(const char *s, size_t cap) {
        size_t n = strnlen(s, cap);
        if (n == cap)
                abort(); /* not terminated */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *in = malloc(size ? size : 1);
        if (!in)
                return 0;
        memcpy(in, data, size);
        gw_front_head h;
        int rc = gw_front_parse_head(in, size, &h);
        if (rc != 0 && rc != -EAGAIN && rc != 400 && rc != 414 && rc != 431)
                abort();
        if (rc == 0) {
                if (h.head_len == 0 || h.head_len > size)
                        abort();
                if (h.v1) {
                        check_string(h.url, sizeof(h.url));
                        check_string(h.method, sizeof(h.method));
                        check_string(h.xprio, sizeof(h.xprio));
                        check_string(h.authz, sizeof(h.authz));
                        check_string(h.ctype, sizeof(h.ctype));
                        check_string(h.origin, sizeof(h.origin));
                        check_string(h.sfs, sizeof(h.sfs));
                        check_string(h.host, sizeof(h.host));
                        size_t ul = strlen(h.url);
                        if (ul < 3 || memcmp(h.url, "/v1", 3) != 0 || !memmem(in, h.head_len, h.url, ul))
                                abort();
                        if (strchr(h.url, '?') || h.clen < -1)
                                abort();
                }
                /* the first-bytes test never keeps a connection whose head is
                 * not for /v1 */
                if (size && in[0] != '\r' && in[0] != '\n' &&
                    gw_front_sniff(in, size < 16 ? size : 16) == 1 && !h.v1)
                        abort();
                /* the head alone parses the same */
                gw_front_head h2;
                char *cut = malloc(h.head_len);
                if (cut) {
                        memcpy(cut, in, h.head_len);
                        if (gw_front_parse_head(cut, h.head_len, &h2) != 0 || h2.head_len != h.head_len ||
                            h2.v1 != h.v1)
                                abort();
                        free(cut);
                }
        }
        free(in);
        return 0;
}
