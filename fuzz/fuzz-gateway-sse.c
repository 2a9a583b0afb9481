/* fuzz-gateway-sse.c - libFuzzer target for what the gateway reads from
 * upstreams and clients without a full parser: the SSE filter of streamed
 * answers (src/gateway/sse.c), the prompt token estimate of request bodies
 * and X-Priority values.
 *
 * Checks the contract: fed the same bytes in pieces of any size, the
 * filter emits the same output (it works on whole lines); without
 * stripping, the output is the input byte for byte; the output is never
 * longer than the input; the estimate is never negative.  Any violation
 * aborts. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "gateway/gateway.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int out(void *ud, const char *p, size_t n) {
        return gp_buf_append(ud, p, n);
}

/* Run the filter over data in pieces of step bytes; 0 or the feed error. */
static int run(const char *data, size_t size, size_t step, bool strip, gp_buf *b, gp_gw_sse *s) {
        memset(s, 0, sizeof(*s));
        s->strip = strip;
        int r = 0;
        for (size_t i = 0; r == 0 && i < size; i += step)
                r = gp_gw_sse_feed(s, data + i, i + step > size ? size - i : step, out, b);
        if (r == 0)
                r = gp_gw_sse_end(s, out, b);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        size_t step = (size_t)(data[0] % 17) + 1;
        bool strip = data[0] & 0x80;
        const char *p = (const char *)data + 1;
        size--;
        gp_buf whole, parts;
        gp_buf_init(&whole, 0);
        gp_buf_init(&parts, 0);
        gp_gw_sse a, b;
        int ra = run(p, size, size ? size : 1, strip, &whole, &a);
        int rb = run(p, size, step, strip, &parts, &b);
        if (ra != rb || (ra < 0 && ra != -E2BIG && ra != -ENOMEM))
                abort();
        if (ra == 0) {
                if (whole.len != parts.len || (whole.len && memcmp(whole.data, parts.data, whole.len)))
                        abort();
                if (whole.len > size)
                        abort();
                if (!strip && (whole.len != size || (size && memcmp(whole.data, p, size))))
                        abort();
                if (a.usage_seen != b.usage_seen || a.chunks != b.chunks || a.chunks < 0)
                        abort();
        }
        gp_gw_sse_done(&a);
        gp_gw_sse_done(&b);
        gp_buf_done(&whole);
        gp_buf_done(&parts);

        /* the same bytes as a request body and as an X-Priority value */
        json_t *j = json_loadb(p, size, 0, NULL);
        if (j && gp_gw_estimate_tokens(j) < 0)
                abort();
        json_decref(j);
        char prio[16];
        size_t n = size < sizeof(prio) - 1 ? size : sizeof(prio) - 1;
        memcpy(prio, p, n);
        prio[n] = '\0';
        int t = gp_gw_parse_priority(prio);
        if (t != -EINVAL && (t < 0 || t > 9))
                abort();
        return 0;
}
