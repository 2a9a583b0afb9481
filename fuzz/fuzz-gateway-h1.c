/* fuzz-gateway-h1.c - libFuzzer target for the gateway's HTTP/1.1 framing
 * (src/base/h1.c): the input after its first byte is parsed as a
 * response head, as a request head and as a chunked body.  The first byte
 * picks the chunked piece size (low 5 bits) and the heads' max (high 3).
 *
 * Checks the contract: a parsed head lies within the input (head_len <= n
 * and max, every name, value and target inside it) and its fields are in
 * range; -EAGAIN only when n < max; every prefix of a head that parsed is
 * -EAGAIN and the head alone parses the same; bytes past max change
 * nothing.  The chunked decoder gives the same result, output and bytes
 * used whatever the piece size, never more out than in, and stays ended.
 * Prefixes and pieces are parsed from exact-size copies, so ASan sees a
 * read past their end.  Any violation aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/h1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                  \
        do {                         \
                if (!(cond))         \
                        abort();     \
        } while (0)

/* Does [q, q + len) lie within [p, p + n)? */
static bool inside(const char *p, size_t n, const char *q, size_t len) {
        return q >= p && q <= p + n && len <= (size_t)(p + n - q);
}

static void check_headers(const char *p, size_t head_len, const gp_h1_header *h, size_t nh) {
        CHECK(nh <= GP_H1_MAX_HEADERS);
        for (size_t i = 0; i < nh; i++) {
                CHECK(h[i].name_len >= 1 && inside(p, head_len, h[i].name, h[i].name_len));
                CHECK(inside(p, head_len, h[i].value, h[i].value_len));
                if (i < 8) {
                        char *name = malloc(h[i].name_len + 1);
                        CHECK(name);
                        memcpy(name, h[i].name, h[i].name_len);
                        name[h[i].name_len] = '\0';
                        const gp_h1_header *f = gp_h1_find(h, nh, name);
                        CHECK(f && f <= &h[i] && f->name_len == h[i].name_len);
                        (void)gp_h1_hop_by_hop(h[i].name, h[i].name_len);
                        free(name);
                }
        }
}

static bool same_headers(const char *pa, const gp_h1_header *a, const char *pb, const gp_h1_header *b, size_t nh) {
        for (size_t i = 0; i < nh; i++)
                if (a[i].name - pa != b[i].name - pb || a[i].name_len != b[i].name_len ||
                    a[i].value - pa != b[i].value - pb || a[i].value_len != b[i].value_len)
                        return false;
        return true;
}

static int rc_ok(int rc) {
        return rc == 0 || rc == -EAGAIN || rc == -E2BIG || rc == -EINVAL;
}

/* The prefix lengths worth checking below head_len: all of them for a
 * short head, about a hundred for a long one. */
static size_t prefix_step(size_t head_len) {
        return head_len <= 512 ? 1 : head_len / 100;
}

static int parse_response_copy(const char *p, size_t k, size_t max, gp_h1_response *r, char **copy) {
        *copy = malloc(k ? k : 1);
        CHECK(*copy);
        memcpy(*copy, p, k);
        return gp_h1_parse_response(*copy, k, max, r);
}

static bool same_response(const char *pa, const gp_h1_response *a, const char *pb, const gp_h1_response *b) {
        return a->minor == b->minor && a->status == b->status && a->content_length == b->content_length &&
               a->chunked == b->chunked && a->keep_alive == b->keep_alive && a->head_len == b->head_len &&
               a->nheaders == b->nheaders && same_headers(pa, a->headers, pb, b->headers, a->nheaders);
}

static void check_response(const char *p, size_t n, size_t max) {
        static gp_h1_response r, s;
        int rc = gp_h1_parse_response(p, n, max, &r);
        CHECK(rc_ok(rc));
        CHECK(rc != -EAGAIN || n < max);
        if (n > max) {
                char *copy;
                int rc2 = parse_response_copy(p, max, max, &s, &copy);
                CHECK(rc2 == rc && (rc || same_response(p, &r, copy, &s)));
                free(copy);
        }
        if (rc)
                return;
        CHECK(r.head_len >= 2 && r.head_len <= n && r.head_len <= max && p[r.head_len - 1] == '\n');
        CHECK(r.minor == 0 || r.minor == 1);
        CHECK(r.status >= 100 && r.status <= 599);
        CHECK(r.content_length >= -1 && r.content_length <= GP_H1_MAX_CONTENT_LENGTH);
        CHECK(!r.chunked || r.content_length == -1);
        bool bodyless = r.status < 200 || r.status == 204 || r.status == 304;
        CHECK(r.chunked || r.content_length >= 0 || bodyless || !r.keep_alive);
        check_headers(p, r.head_len, r.headers, r.nheaders);
        /* the prefixes, the last one shy of the head, then the head alone */
        for (size_t k = 0, step = prefix_step(r.head_len); k <= r.head_len;
             k = k + step < r.head_len - 1 ? k + step : k + 1 < r.head_len - 1 ? r.head_len - 1 : k + 1) {
                char *copy;
                int rc2 = parse_response_copy(p, k, max, &s, &copy);
                CHECK(k < r.head_len ? rc2 == -EAGAIN : rc2 == 0 && same_response(p, &r, copy, &s));
                free(copy);
        }
}

static int parse_request_copy(const char *p, size_t k, size_t max, gp_h1_request *r, char **copy) {
        *copy = malloc(k ? k : 1);
        CHECK(*copy);
        memcpy(*copy, p, k);
        return gp_h1_parse_request(*copy, k, max, r);
}

static bool same_request(const char *pa, const gp_h1_request *a, const char *pb, const gp_h1_request *b) {
        return !strcmp(a->method, b->method) && a->target - pa == b->target - pb && a->target_len == b->target_len &&
               a->minor == b->minor && a->content_length == b->content_length && a->chunked == b->chunked &&
               a->keep_alive == b->keep_alive && a->expect_continue == b->expect_continue &&
               a->head_len == b->head_len && a->nheaders == b->nheaders &&
               same_headers(pa, a->headers, pb, b->headers, a->nheaders);
}

static void check_request(const char *p, size_t n, size_t max) {
        static gp_h1_request r, s;
        int rc = gp_h1_parse_request(p, n, max, &r);
        CHECK(rc_ok(rc));
        CHECK(rc != -EAGAIN || n < max);
        if (n > max) {
                char *copy;
                int rc2 = parse_request_copy(p, max, max, &s, &copy);
                CHECK(rc2 == rc && (rc || same_request(p, &r, copy, &s)));
                free(copy);
        }
        if (rc)
                return;
        CHECK(r.head_len >= 2 && r.head_len <= n && r.head_len <= max && p[r.head_len - 1] == '\n');
        size_t mlen = strnlen(r.method, sizeof(r.method));
        CHECK(mlen >= 1 && mlen < sizeof(r.method));
        CHECK(r.target_len >= 1 && inside(p, r.head_len, r.target, r.target_len) && r.target[0] == '/');
        CHECK(r.minor == 0 || r.minor == 1);
        CHECK(r.content_length >= -1 && r.content_length <= GP_H1_MAX_CONTENT_LENGTH);
        CHECK(!r.chunked || r.content_length == -1);
        check_headers(p, r.head_len, r.headers, r.nheaders);
        for (size_t k = 0, step = prefix_step(r.head_len); k <= r.head_len;
             k = k + step < r.head_len - 1 ? k + step : k + 1 < r.head_len - 1 ? r.head_len - 1 : k + 1) {
                char *copy;
                int rc2 = parse_request_copy(p, k, max, &s, &copy);
                CHECK(k < r.head_len ? rc2 == -EAGAIN : rc2 == 0 && same_request(p, &r, copy, &s));
                free(copy);
        }
}

static int out(void *ud, const char *p, size_t n) {
        CHECK(n > 0); /* never called for nothing */
        return gp_buf_append(ud, p, n);
}

/* Decode p[0..n) in pieces of step bytes (each an exact-size copy when
 * copy); the result, the data in *b and the bytes used in *consumed. */
static int decode(const char *p, size_t n, size_t step, bool copy, gp_buf *b, size_t *consumed) {
        gp_h1_chunked c = {0};
        size_t i = 0;
        int rc = 0;
        while (i < n && rc == 0) {
                size_t k = n - i < step ? n - i : step, used = 0;
                char *piece = NULL;
                if (copy) {
                        piece = malloc(k);
                        CHECK(piece);
                        memcpy(piece, p + i, k);
                }
                rc = gp_h1_chunked_feed(&c, piece ? piece : p + i, k, &used, out, b);
                free(piece);
                CHECK(used <= k && (rc != 0 || used == k));
                i += used;
        }
        if (rc == 1) {
                size_t used = 1;
                CHECK(gp_h1_chunked_feed(&c, p, n, &used, out, b) == 1 && used == 0);
        }
        *consumed = i;
        return rc;
}

static void check_chunked(const char *p, size_t n, size_t step) {
        gp_buf whole, parts;
        size_t uw, up;
        gp_buf_init(&whole, 0);
        gp_buf_init(&parts, 0);
        int rw = decode(p, n, n ? n : 1, false, &whole, &uw);
        int rp = decode(p, n, step, n <= 4096, &parts, &up);
        if (rw != -ENOMEM && rp != -ENOMEM) {
                CHECK(rw == 0 || rw == 1 || rw == -EINVAL);
                CHECK(rw == rp && uw == up && uw <= n);
                CHECK(rw != 0 || uw == n);
                CHECK(whole.len == parts.len && (whole.len == 0 || !memcmp(whole.data, parts.data, whole.len)));
                CHECK(whole.len <= uw);
        }
        gp_buf_done(&whole);
        gp_buf_done(&parts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        const char *p = (const char *)data + 1;
        size_t n = size - 1;
        size_t step = (size_t)(data[0] & 0x1f) + 1;
        static const size_t fixed[] = {16, 65536, 65536, 65536};
        unsigned m = data[0] >> 5;
        size_t max = m == 0 ? n : m == 1 ? n + 1 : m == 2 ? n / 2 : m == 3 ? n + 7 : fixed[m - 4];
        check_response(p, n, max);
        check_request(p, n, max);
        check_chunked(p, n, step);
        return 0;
}
