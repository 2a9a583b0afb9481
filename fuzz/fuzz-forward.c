/* fuzz-forward.c - libFuzzer target for what a follower writes to the
 * leader in place of its client (gp_fwd_request_head in
 * src/server/forward.c) from the client's method, target and headers,
 * and for the leader's reading of X-Gpupool-Forwarded-For
 * (gp_fwd_loopback).
 *
 * The input is split at '\n' into: method, target, an
 * X-Gpupool-Forwarded-For value, then header lines "name:value" (at most
 * GP_H1_MAX_HEADERS - 8); each field is copied into a buffer of exactly its
 * size.  Checks the contract: the answer is 0, -EINVAL or -E2BIG; a head
 * written (0) parses back (gp_h1_parse_request) as exactly one request whose
 * head is all of it, with the same method and target, Content-Length the
 * body's length, not chunked, and exactly one X-Gpupool-Forwarded-By naming
 * the follower: no client input smuggles a second request or a header of
 * ours in.  Any violation aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/h1.h"
#include "server/forward.h"

#include "fuzz-fields.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXH (GP_H1_MAX_HEADERS - 8) /* room for Host and ours */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *p = data, *end = data + size;
        char *method = fuzz_field(&p, end), *target = fuzz_field(&p, end), *ff = fuzz_field(&p, end);
        char *lines[MAXH] = {0};
        gp_fwd_header h[MAXH];
        size_t nh = 0;
        while (p < end && nh < MAXH) {
                char *l = fuzz_field(&p, end);
                if (!l)
                        break;
                char *colon = strchr(l, ':');
                if (!colon) {
                        free(l);
                        continue;
                }
                *colon = '\0';
                lines[nh] = l;
                h[nh] = (gp_fwd_header){l, colon + 1};
                nh++;
        }
        if (!method || !target || !ff)
                goto out;
        (void)gp_fwd_loopback(ff);
        gp_buf b;
        gp_buf_init(&b, 0);
        int rc = gp_fwd_request_head(&b, method, target, h, nh, "leader:8080", "s2", "10.0.0.9", 42);
        if (rc != 0 && rc != -EINVAL && rc != -E2BIG && rc != -ENOMEM)
                abort();
        if (rc == 0) {
                gp_h1_request r;
                if (gp_h1_parse_request(b.data, b.len, b.len + 1, &r) != 0 || r.head_len != b.len ||
                    strcmp(r.method, method) || r.target_len != strlen(target) ||
                    memcmp(r.target, target, r.target_len) || r.content_length != 42 || r.chunked)
                        abort();
                size_t by = 0;
                for (size_t i = 0; i < r.nheaders; i++)
                        if (r.headers[i].name_len == strlen(GP_FWD_BY) &&
                            !strncasecmp(r.headers[i].name, GP_FWD_BY, r.headers[i].name_len)) {
                                if (r.headers[i].value_len != 2 || memcmp(r.headers[i].value, "s2", 2))
                                        abort();
                                by++;
                        }
                if (by != 1)
                        abort();
        }
        gp_buf_done(&b);
out:
        for (size_t i = 0; i < nh; i++)
                free(lines[i]);
        free(method);
        free(target);
        free(ff);
        return 0;
}
