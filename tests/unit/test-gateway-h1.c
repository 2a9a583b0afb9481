/* test-gateway-h1.c - unit tests of the HTTP/1.1 framing (src/base/h1.c):
 * response and request heads, their refusals, "more" on every prefix of a
 * valid head, and the chunked decoder fed whole and byte by byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/h1.h"

#define MAX 8192

static int resp(const char *s, gp_h1_response *r) {
        memset(r, 0, sizeof(*r));
        return gp_h1_parse_response(s, strlen(s), MAX, r);
}

static int req(const char *s, gp_h1_request *r) {
        memset(r, 0, sizeof(*r));
        return gp_h1_parse_request(s, strlen(s), MAX, r);
}

/* Is header i of h named name with value value? */
static void assert_header(const gp_h1_header *h, const char *name, const char *value) {
        assert_non_null(h);
        assert_int_equal(h->name_len, strlen(name));
        assert_memory_equal(h->name, name, h->name_len);
        assert_int_equal(h->value_len, strlen(value));
        if (h->value_len)
                assert_memory_equal(h->value, value, h->value_len);
}

static const char *VLLM =
        "HTTP/1.1 200 OK\r\n"
        "date: Sun, 22 Nov 2026 15:00:00 GMT\r\n"
        "server: uvicorn\r\n"
        "content-length: 27\r\n"
        "content-type: application/json\r\n"
        "\r\n"
        "{\"id\":\"cmpl-1\",\"object\":\"x\"}";

static void test_vllm_response_with_content_length(void **state) {
        gp_h1_response r;
        assert_int_equal(resp(VLLM, &r), 0);
        assert_int_equal(r.minor, 1);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.content_length, 27);
        assert_false(r.chunked);
        assert_true(r.keep_alive);
        assert_int_equal(r.head_len, strstr(VLLM, "\r\n\r\n") + 4 - VLLM);
        assert_int_equal(r.nheaders, 4);
        assert_header(&r.headers[0], "date", "Sun, 22 Nov 2026 15:00:00 GMT");
        assert_header(gp_h1_find(r.headers, r.nheaders, "Content-Type"), "content-type", "application/json");
        assert_null(gp_h1_find(r.headers, r.nheaders, "content-typ"));
}

static void test_chunked_response_with_bare_lf_and_blanks_trimmed(void **state) {
        const char *s = "HTTP/1.1 200 OK\n"
                        "Transfer-Encoding:  gzip ,Chunked \t\n"
                        "X-Empty:\n"
                        "\n"
                        "5\r\nhello";
        gp_h1_response r;
        assert_int_equal(resp(s, &r), 0);
        assert_true(r.chunked);
        assert_int_equal(r.content_length, -1);
        assert_true(r.keep_alive);
        assert_int_equal(r.head_len, strstr(s, "\n\n") + 2 - s);
        assert_header(&r.headers[0], "Transfer-Encoding", "gzip ,Chunked");
        assert_header(&r.headers[1], "X-Empty", "");
}

static void test_204_and_304_keep_the_connection_without_a_length(void **state) {
        gp_h1_response r;
        assert_int_equal(resp("HTTP/1.1 204 No Content\r\n\r\n", &r), 0);
        assert_int_equal(r.status, 204);
        assert_int_equal(r.content_length, -1);
        assert_true(r.keep_alive);
        assert_int_equal(resp("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", &r), 0);
        assert_int_equal(r.content_length, 10); /* as sent: the caller knows 304 has none */
        assert_true(r.keep_alive);
        assert_int_equal(resp("HTTP/1.1 100 Continue\r\n\r\n", &r), 0);
        assert_int_equal(r.status, 100);
        assert_true(r.keep_alive);
}

static void test_a_response_without_length_is_read_until_close(void **state) {
        gp_h1_response r;
        assert_int_equal(resp("HTTP/1.1 200 OK\r\n\r\n", &r), 0);
        assert_int_equal(r.content_length, -1);
        assert_false(r.chunked);
        assert_false(r.keep_alive);
        /* a last coding other than chunked: the close ends the body */
        assert_int_equal(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", &r), 0);
        assert_false(r.chunked);
        assert_int_equal(r.content_length, -1);
        assert_false(r.keep_alive);
}

static void test_http_1_0_responses_close_unless_keep_alive(void **state) {
        gp_h1_response r;
        assert_int_equal(resp("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", &r), 0);
        assert_int_equal(r.minor, 0);
        assert_false(r.keep_alive);
        assert_int_equal(resp("HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: Keep-Alive\r\n\r\n", &r), 0);
        assert_true(r.keep_alive);
        assert_int_equal(resp("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: foo\r\nConnection: x, CLOSE\r\n\r\n", &r),
                         0);
        assert_false(r.keep_alive);
}

static void test_status_line_reason_may_be_missing_or_empty(void **state) {
        gp_h1_response r;
        assert_int_equal(resp("HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", &r), 0);
        assert_int_equal(r.status, 404);
        assert_int_equal(resp("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", &r), 0);
        assert_int_equal(resp("HTTP/1.1 599 Whatever\tit is\r\n\r\n", &r), 0);
        assert_int_equal(r.status, 599);
}

static void test_bad_status_lines_are_refused(void **state) {
        static const char *bad[] = {
                "HTTP/1.2 200 OK\r\n\r\n", "HTTP/2.0 200 OK\r\n\r\n", "http/1.1 200 OK\r\n\r\n",
                "HTTP/1.1  200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n",  "HTTP/1.1 2000 OK\r\n\r\n",
                "HTTP/1.1 099 OK\r\n\r\n",  "HTTP/1.1 600 OK\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                "HTTP/1.1 200\tOK\r\n\r\n", "HTTP/1.1 200 O\001K\r\n\r\n", "HTTP/1.1\r\n\r\n",
                "HTTP/1.1 200 OK\r\r\n\r\n", "\r\nHTTP/1.1 200 OK\r\n\r\n", "XTTP/1.1",
        };
        gp_h1_response r;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(resp(bad[i], &r), -EINVAL);
}

static void test_post_with_content_length(void **state) {
        const char *s = "POST /v1/chat/completions?x=1 HTTP/1.1\r\n"
                        "Host: gw\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: 2, 2\r\n"
                        "Content-Length: 002\r\n"
                        "\r\n"
                        "{}";
        gp_h1_request r;
        assert_int_equal(req(s, &r), 0);
        assert_string_equal(r.method, "POST");
        assert_int_equal(r.target_len, strlen("/v1/chat/completions?x=1"));
        assert_memory_equal(r.target, "/v1/chat/completions?x=1", r.target_len);
        assert_int_equal(r.minor, 1);
        assert_int_equal(r.content_length, 2);
        assert_false(r.chunked);
        assert_true(r.keep_alive);
        assert_false(r.expect_continue);
        assert_int_equal(r.head_len, strlen(s) - 2);
        assert_int_equal(r.nheaders, 4);
        assert_header(gp_h1_find(r.headers, r.nheaders, "HOST"), "Host", "gw");
}

static void test_expect_100_continue_and_chunked_request(void **state) {
        gp_h1_request r;
        assert_int_equal(req("PUT /a HTTP/1.1\r\nExpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n", &r), 0);
        assert_true(r.expect_continue);
        assert_true(r.chunked);
        assert_int_equal(r.content_length, -1);
        assert_true(r.keep_alive);
        assert_int_equal(req("PUT /a HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n", &r), 0);
        assert_false(r.expect_continue);
        assert_int_equal(req("PUT /a HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", &r), 0);
        assert_false(r.expect_continue); /* a 1.0 client cannot wait for a 100 (RFC 9110 10.1.1) */
}

static void test_request_keep_alive_rules(void **state) {
        gp_h1_request r;
        assert_int_equal(req("GET / HTTP/1.1\r\n\r\n", &r), 0);
        assert_true(r.keep_alive);
        assert_int_equal(r.content_length, -1);
        assert_int_equal(req("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", &r), 0);
        assert_false(r.keep_alive);
        assert_int_equal(req("GET / HTTP/1.0\r\n\r\n", &r), 0);
        assert_int_equal(r.minor, 0);
        assert_false(r.keep_alive);
        assert_int_equal(req("GET / HTTP/1.0\r\nConnection: te, keep-alive\r\n\r\n", &r), 0);
        assert_true(r.keep_alive);
        assert_int_equal(req("GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", &r), 0);
        assert_false(r.keep_alive);
        assert_int_equal(req("GET / HTTP/1.1\r\nConnection: closed\r\n\r\n", &r), 0);
        assert_true(r.keep_alive); /* a token list, not a substring */
}

static void test_leading_empty_lines_are_skipped_a_few_times(void **state) {
        gp_h1_request r;
        const char *s = "\r\n\nGET /x HTTP/1.1\r\n\r\n";
        assert_int_equal(req(s, &r), 0);
        assert_int_equal(r.head_len, strlen(s));
        assert_memory_equal(r.target, "/x", 2);
        char many[64] = "";
        for (int i = 0; i < 8; i++)
                strcat(many, "\r\n");
        strcat(many, "GET / HTTP/1.1\r\n\r\n");
        assert_int_equal(req(many, &r), 0);
        memmove(many + 2, many, strlen(many) + 1);
        memcpy(many, "\r\n", 2);
        assert_int_equal(req(many, &r), -EINVAL);
}

static void test_methods_up_to_15_token_bytes(void **state) {
        gp_h1_request r;
        assert_int_equal(req("ABCDEFGHIJKLMNO / HTTP/1.1\r\n\r\n", &r), 0);
        assert_string_equal(r.method, "ABCDEFGHIJKLMNO");
        assert_int_equal(req("ABCDEFGHIJKLMNOP / HTTP/1.1\r\n\r\n", &r), -EINVAL);
        assert_int_equal(req("M-1.x~ / HTTP/1.1\r\n\r\n", &r), 0);
}

static void test_bad_request_lines_are_refused(void **state) {
        static const char *bad[] = {
                " / HTTP/1.1\r\n\r\n",         "GET  / HTTP/1.1\r\n\r\n",      "GET / HTTP/1.1 \r\n\r\n",
                "GET http://a/ HTTP/1.1\r\n\r\n", "GET * HTTP/1.1\r\n\r\n",     "GET /a b HTTP/1.1\r\n\r\n",
                "GET /a\tb HTTP/1.1\r\n\r\n",  "GET /\x7f HTTP/1.1\r\n\r\n",   "GET / HTTP/2.0\r\n\r\n",
                "GET / HTTP/1.1x\r\n\r\n",     "GET /\r\n\r\n",                "G(T / HTTP/1.1\r\n\r\n",
                "GET / HTTP/1.1\rX\r\n\r\n",   "GET\r\n\r\n",                  "GET / http/1.1\r\n\r\n",
        };
        gp_h1_request r;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(req(bad[i], &r), -EINVAL);
}

static void test_bad_fields_are_refused(void **state) {
        static const char *bad[] = {
                "Host : a\r\n",                /* blank before the colon */
                " folded\r\n",                 /* obsolete line folding */
                "\tfolded\r\n",
                "Ho(st: a\r\n",                /* not a token */
                ": a\r\n",                     /* empty name */
                "Host a\r\n",                  /* no colon */
                "X: a\001b\r\n",               /* control bytes */
                "X: a\x7f\r\n",
                "X: a\rb\r\n",                 /* bare CR */
                "Content-Length: 1x\r\n",      /* not digits */
                "Content-Length: -1\r\n",
                "Content-Length: +1\r\n",
                "Content-Length:\r\n",
                "Content-Length: 1,,1\r\n",
                "Content-Length: 1, 2\r\n",    /* disagreeing */
                "Content-Length: 1\r\nContent-Length: 2\r\n",
                "Content-Length: 1099511627777\r\n", /* over the limit */
                "Content-Length: 99999999999999999999999999\r\n",
                "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n",
                "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n",
                "Transfer-Encoding: ,\r\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char s[256];
                gp_h1_request q;
                gp_h1_response r;
                snprintf(s, sizeof(s), "POST / HTTP/1.1\r\n%s\r\n", bad[i]);
                assert_int_equal(req(s, &q), -EINVAL);
                snprintf(s, sizeof(s), "HTTP/1.1 200 OK\r\n%s\r\n", bad[i]);
                assert_int_equal(resp(s, &r), -EINVAL);
        }
}

static void test_a_request_coding_not_ending_in_chunked_is_refused(void **state) {
        gp_h1_request r;
        assert_int_equal(req("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", &r), -EINVAL);
        assert_int_equal(req("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", &r),
                         -EINVAL);
        assert_int_equal(req("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: CHUNKED\r\n\r\n", &r),
                         0);
        assert_true(r.chunked);
}

static void test_content_length_limit_is_accepted(void **state) {
        gp_h1_response r;
        assert_int_equal(resp("HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n", &r), 0);
        assert_int_equal(r.content_length, GP_H1_MAX_CONTENT_LENGTH);
}

static void test_over_64_headers_is_too_big(void **state) {
        char s[4096];
        size_t n = (size_t)snprintf(s, sizeof(s), "GET / HTTP/1.1\r\n");
        for (int i = 0; i < GP_H1_MAX_HEADERS; i++)
                n += (size_t)snprintf(s + n, sizeof(s) - n, "X-%d: v\r\n", i);
        gp_h1_request r;
        snprintf(s + n, sizeof(s) - n, "\r\n");
        assert_int_equal(req(s, &r), 0);
        assert_int_equal(r.nheaders, GP_H1_MAX_HEADERS);
        snprintf(s + n, sizeof(s) - n, "X-last: v\r\n\r\n");
        assert_int_equal(req(s, &r), -E2BIG);
}

static const char *VALID_HEADS[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\n",
        "HTTP/1.0 204\n\n",
        "HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\n\r\n",
        "\r\n\nPOST /v1/completions HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n",
        "GET / HTTP/1.0\nA:\n\n",
};

/* Every proper prefix of a valid head is "more", never a refusal; with max
 * at the prefix's length it is "too big"; the whole head parses. */
static void test_every_prefix_of_a_valid_head_wants_more(void **state) {
        for (size_t i = 0; i < sizeof(VALID_HEADS) / sizeof(VALID_HEADS[0]); i++) {
                const char *s = VALID_HEADS[i];
                size_t n = strlen(s);
                bool is_resp = s[0] == 'H';
                for (size_t k = 0; k <= n; k++) {
                        gp_h1_response r;
                        gp_h1_request q;
                        int rc = is_resp ? gp_h1_parse_response(s, k, MAX, &r) : gp_h1_parse_request(s, k, MAX, &q);
                        assert_int_equal(rc, k < n ? -EAGAIN : 0);
                        rc = is_resp ? gp_h1_parse_response(s, k, k, &r) : gp_h1_parse_request(s, k, k, &q);
                        assert_int_equal(rc, k < n ? -E2BIG : 0);
                        if (k == n)
                                assert_int_equal(is_resp ? r.head_len : q.head_len, n);
                }
        }
}

static void test_no_end_within_max_is_too_big(void **state) {
        const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        gp_h1_response r;
        assert_int_equal(gp_h1_parse_response(s, strlen(s), strlen(s) - 1, &r), -E2BIG);
        assert_int_equal(gp_h1_parse_response(s, strlen(s), strlen(s), &r), 0);
        assert_int_equal(gp_h1_parse_response(s, strlen(s) - 1, strlen(s), &r), -EAGAIN);
}

static void test_malformed_prefix_is_refused_early(void **state) {
        gp_h1_response r;
        gp_h1_request q;
        assert_int_equal(gp_h1_parse_response("XTTP/1.1", 8, MAX, &r), -EINVAL);
        assert_int_equal(gp_h1_parse_response("HTTP/1.1 200 OK\r\nBad Name", 25, MAX, &r), -EINVAL);
        assert_int_equal(gp_h1_parse_request("GET http:", 9, MAX, &q), -EINVAL);
        assert_int_equal(gp_h1_parse_request("GET /\r", 6, MAX, &q), -EAGAIN);
}

static void test_hop_by_hop_names(void **state) {
        static const char *hop[] = {"connection", "Keep-Alive", "proxy-connection", "Transfer-Encoding",
                                    "TE", "trailer", "upgrade", "proxy-authenticate", "Proxy-Authorization",
                                    "content-length", "DATE"};
        for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
                assert_true(gp_h1_hop_by_hop(hop[i], strlen(hop[i])));
        assert_false(gp_h1_hop_by_hop("content-type", 12));
        assert_false(gp_h1_hop_by_hop("dates", 5));
        assert_false(gp_h1_hop_by_hop("dat", 3));
        assert_false(gp_h1_hop_by_hop("connection", 4)); /* exact length */
        assert_false(gp_h1_hop_by_hop("", 0));
}

/* out() that appends to a gp_buf */
static int out(void *ud, const char *p, size_t n) {
        return gp_buf_append(ud, p, n);
}

struct counted {
        gp_buf b;
        int calls;
};

static int out_counted(void *ud, const char *p, size_t n) {
        struct counted *c = ud;
        c->calls++;
        return gp_buf_append(&c->b, p, n);
}

/* Decode s in pieces of step bytes; the result, *b the data, *consumed
 * the bytes used. */
static int decode(const char *s, size_t n, size_t step, gp_buf *b, size_t *consumed) {
        gp_h1_chunked c = {0};
        size_t i = 0;
        int rc = 0;
        while (i < n && rc == 0) {
                size_t k = n - i < step ? n - i : step, used = 0;
                rc = gp_h1_chunked_feed(&c, s + i, k, &used, out, b);
                assert_true(used <= k);
                if (rc == 0)
                        assert_int_equal(used, k);
                i += used;
        }
        *consumed = i;
        return rc;
}

static const char *BODY = "5\r\nhello\r\n"
                          "1A;name=\"v\";x\r\nabcdefghijklmnopqrstuvwxyz\n"
                          "0\r\n"
                          "Trailer-A: 1\r\n"
                          "Trailer-B: 2\n"
                          "\r\n"
                          "HTTP/1.1 200 OK\r\n";

static void test_chunked_byte_at_a_time_equals_whole(void **state) {
        size_t end = strstr(BODY, "HTTP/") - BODY;
        for (size_t step = 1; step <= strlen(BODY); step++) {
                gp_buf b;
                gp_buf_init(&b, 0);
                size_t used;
                assert_int_equal(decode(BODY, strlen(BODY), step, &b, &used), 1);
                assert_int_equal(used, end); /* the next message is left alone */
                assert_int_equal(b.len, 31);
                assert_memory_equal(b.data, "helloabcdefghijklmnopqrstuvwxyz", 31);
                gp_buf_done(&b);
        }
}

static void test_chunked_data_goes_out_in_one_call_per_span(void **state) {
        const char *s = "10\r\n0123456789abcdef\r\n0\r\n\r\n";
        struct counted c = {.calls = 0};
        gp_buf_init(&c.b, 0);
        gp_h1_chunked d = {0};
        size_t used;
        assert_int_equal(gp_h1_chunked_feed(&d, s, strlen(s), &used, out_counted, &c), 1);
        assert_int_equal(c.calls, 1);
        assert_int_equal(used, strlen(s));
        /* once ended, it stays ended and takes nothing */
        assert_int_equal(gp_h1_chunked_feed(&d, "5\r\n", 3, &used, out_counted, &c), 1);
        assert_int_equal(used, 0);
        gp_buf_done(&c.b);
}

static void test_bad_chunked_bodies_are_refused(void **state) {
        static const char *bad[] = {
                "x\r\n",                       /* not hex */
                "\r\n",                        /* no size */
                " 5\r\nhello\r\n0\r\n\r\n",
                "5 \r\nhello\r\n0\r\n\r\n",
                "-5\r\n",
                "5\r\nhelloX\r\n",             /* no CRLF after data */
                "5\r\nhello\rX",
                "5\rX",
                "10000000001\r\n",             /* over 2^40 */
                "ffffffffffffffffffff\r\n",    /* would overflow */
                "0\r\nX: \001\r\n\r\n",        /* control byte in a trailer */
                "5;a\001\r\n",                 /* ... in an extension */
                "0\r\n\rX",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                for (size_t step = 1; step <= 2; step++) {
                        gp_buf b;
                        gp_buf_init(&b, 0);
                        size_t used;
                        assert_int_equal(decode(bad[i], strlen(bad[i]), step == 1 ? 1 : 4096, &b, &used), -EINVAL);
                        gp_buf_done(&b);
                }
        }
}

static void test_chunk_sizes_up_to_the_limit_and_leading_zeros(void **state) {
        gp_h1_chunked c = {0};
        size_t used;
        const char *s = "10000000000\r\nab";
        assert_int_equal(gp_h1_chunked_feed(&c, s, strlen(s), &used, NULL, NULL), 0);
        assert_int_equal(c.left, (uint64_t)GP_H1_MAX_CONTENT_LENGTH - 2);
        memset(&c, 0, sizeof(c));
        s = "00000000000000000000001\r\nx\r\n0\r\n\r\n";
        assert_int_equal(gp_h1_chunked_feed(&c, s, strlen(s), &used, NULL, NULL), 1);
}

static void test_chunk_lines_over_4_kib_are_refused(void **state) {
        char *s = malloc(8192);
        gp_h1_chunked c = {0};
        size_t used;
        /* 4096 bytes of size line pass, 4097 do not */
        memset(s, 'x', 8192);
        s[0] = '1';
        s[1] = ';';
        memcpy(s + 4096, "\r\na\r\n0\r\n\r\n", 10);
        assert_int_equal(gp_h1_chunked_feed(&c, s, 4106, &used, NULL, NULL), 1);
        memset(&c, 0, sizeof(c));
        memset(s, 'x', 8192);
        s[0] = '1';
        s[1] = ';';
        assert_int_equal(gp_h1_chunked_feed(&c, s, 8192, &used, NULL, NULL), -EINVAL);
        assert_int_equal(used, 4096);
        memset(&c, 0, sizeof(c));
        memcpy(s, "0\r\n", 3);
        memset(s + 3, 'x', 8192 - 3);
        assert_int_equal(gp_h1_chunked_feed(&c, s, 8192, &used, NULL, NULL), -EINVAL);
        free(s);
}

static int out_fails(void *ud, const char *p, size_t n) {
        return -ENOSPC;
}

static void test_an_out_error_stops_decoding(void **state) {
        gp_h1_chunked c = {0};
        size_t used;
        assert_int_equal(gp_h1_chunked_feed(&c, "3\r\nabc\r\n0\r\n\r\n", 13, &used, out_fails, NULL), -ENOSPC);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_vllm_response_with_content_length),
                cmocka_unit_test(test_chunked_response_with_bare_lf_and_blanks_trimmed),
                cmocka_unit_test(test_204_and_304_keep_the_connection_without_a_length),
                cmocka_unit_test(test_a_response_without_length_is_read_until_close),
                cmocka_unit_test(test_http_1_0_responses_close_unless_keep_alive),
                cmocka_unit_test(test_status_line_reason_may_be_missing_or_empty),
                cmocka_unit_test(test_bad_status_lines_are_refused),
                cmocka_unit_test(test_post_with_content_length),
                cmocka_unit_test(test_expect_100_continue_and_chunked_request),
                cmocka_unit_test(test_request_keep_alive_rules),
                cmocka_unit_test(test_leading_empty_lines_are_skipped_a_few_times),
                cmocka_unit_test(test_methods_up_to_15_token_bytes),
                cmocka_unit_test(test_bad_request_lines_are_refused),
                cmocka_unit_test(test_bad_fields_are_refused),
                cmocka_unit_test(test_a_request_coding_not_ending_in_chunked_is_refused),
                cmocka_unit_test(test_content_length_limit_is_accepted),
                cmocka_unit_test(test_over_64_headers_is_too_big),
                cmocka_unit_test(test_every_prefix_of_a_valid_head_wants_more),
                cmocka_unit_test(test_no_end_within_max_is_too_big),
                cmocka_unit_test(test_malformed_prefix_is_refused_early),
                cmocka_unit_test(test_hop_by_hop_names),
                cmocka_unit_test(test_chunked_byte_at_a_time_equals_whole),
                cmocka_unit_test(test_chunked_data_goes_out_in_one_call_per_span),
                cmocka_unit_test(test_bad_chunked_bodies_are_refused),
                cmocka_unit_test(test_chunk_sizes_up_to_the_limit_and_leading_zeros),
                cmocka_unit_test(test_chunk_lines_over_4_kib_are_refused),
                cmocka_unit_test(test_an_out_error_stops_decoding),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
