/* fuzz-browser.c - libFuzzer target for the browser check
 * (gp_browser_check and gp_browser_origin_ok in src/base/browser.c), which
 * reads the Origin, Host, Sec-Fetch-Site and Content-Type headers any
 * client sends.
 *
 * The input is split at '\n' into: method, Content-Type, Origin,
 * Sec-Fetch-Site, Host, then allowed origins (each kept only when
 * gp_browser_origin_ok takes it, as the config does); a field "-" is an
 * absent header, and has_body is the first byte's low bit.  Each field is
 * copied into a buffer of exactly its size (plus the NUL), so ASan catches
 * a read past it.  Checks the contract: the answer is 0, 204, 403 or 415;
 * the message is terminated and says why for 403 and 415; the CORS origin
 * is NULL or one of the allowed entries, equal to the Origin but for case;
 * reads are always served and OPTIONS is never 415; an Origin that is one
 * of the allowed entries is never 403.  Any violation aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/browser.h"

#include "fuzz-fields.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static char allowed[GP_MAX_ALLOWED_ORIGINS][GP_ORIGIN_MAX];
        const uint8_t *p = data, *end = data + size;
        char *f[5] = {0};
        for (int i = 0; i < 5; i++)
                f[i] = fuzz_field(&p, end);
        size_t nallowed = 0;
        while (p < end && nallowed < GP_MAX_ALLOWED_ORIGINS) {
                char *a = fuzz_field(&p, end);
                const char *why = NULL;
                if (a && gp_browser_origin_ok(a, &why)) {
                        if (strlen(a) >= GP_ORIGIN_MAX)
                                abort();
                        strcpy(allowed[nallowed++], a); /* length checked above */
                } else if (a && !why) {
                        abort(); /* a refusal says why */
                }
                free(a);
        }
        for (int i = 0; i < 5; i++)
                if (!f[i])
                        goto out;
        gp_browser_req q = {
                .method = f[0],
                .content_type = strcmp(f[1], "-") ? f[1] : NULL,
                .has_body = size && (data[0] & 1),
                .origin = strcmp(f[2], "-") ? f[2] : NULL,
                .sec_fetch_site = strcmp(f[3], "-") ? f[3] : NULL,
                .host = strcmp(f[4], "-") ? f[4] : NULL,
        };
        char msg[512];
        const char *cors = (const char *)1;
        int st = gp_browser_check(&q, (const char (*)[GP_ORIGIN_MAX])allowed, nallowed, &cors, msg, sizeof(msg));
        if (st != 0 && st != 204 && st != 403 && st != 415)
                abort();
        if (strnlen(msg, sizeof(msg)) == sizeof(msg))
                abort();
        if ((st == 403 || st == 415) && strlen(msg) < 20)
                abort();
        bool listed = false;
        for (size_t i = 0; q.origin && i < nallowed; i++)
                listed |= !strcasecmp(q.origin, allowed[i]);
        if (cors) {
                bool in = false;
                for (size_t i = 0; i < nallowed; i++)
                        in |= cors == allowed[i];
                if (!in || !q.origin || strcasecmp(cors, q.origin))
                        abort();
        } else if (listed) {
                abort();
        }
        if ((!strcmp(q.method, "GET") || !strcmp(q.method, "HEAD")) && st != 0)
                abort();
        if (!strcmp(q.method, "OPTIONS") && st == 415)
                abort();
        if (listed && st == 403)
                abort();
        if (st == 204 && (strcmp(q.method, "OPTIONS") || !listed))
                abort();
out:
        for (int i = 0; i < 5; i++)
                free(f[i]);
        return 0;
}
