/* test-gateway-sse.c - unit tests of the gateway's pure helpers: the SSE
 * filter of streamed answers, X-Priority parsing and the token estimate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "gateway/gateway.h"

static int out(void *ud, const char *p, size_t n) {
        return gp_buf_append(ud, p, n);
}

static const char *STREAM =
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
        "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":null}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n"
        "data: [DONE]\n\n";

/* Feed the stream in pieces of `step` bytes. */
static void feed(gp_gw_sse *s, gp_buf *b, const char *text, size_t step) {
        size_t n = strlen(text);
        for (size_t i = 0; i < n; i += step)
                assert_int_equal(gp_gw_sse_feed(s, text + i, i + step > n ? n - i : step, out, b), 0);
        assert_int_equal(gp_gw_sse_end(s, out, b), 0);
}

static void test_usage_chunk_is_stripped_when_the_client_did_not_ask(void **state) {
        for (size_t step = 1; step <= 64; step *= 2) {
                gp_gw_sse s = {.strip = true};
                gp_buf b;
                gp_buf_init(&b, 0);
                feed(&s, &b, STREAM, step);
                assert_string_equal(b.data, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
                                            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":null}\n\n"
                                            "data: [DONE]\n\n");
                assert_true(s.usage_seen);
                assert_int_equal(s.prompt_tokens, 5);
                assert_int_equal(s.completion_tokens, 2);
                assert_int_equal(s.chunks, 2);
                gp_gw_sse_done(&s);
                gp_buf_done(&b);
        }
}

static void test_stream_passes_unchanged_when_usage_was_asked(void **state) {
        gp_gw_sse s = {.strip = false};
        gp_buf b;
        gp_buf_init(&b, 0);
        feed(&s, &b, STREAM, 7);
        assert_string_equal(b.data, STREAM);
        assert_true(s.usage_seen);
        gp_gw_sse_done(&s);
        gp_buf_done(&b);
}

static void test_crlf_lines_and_a_last_line_without_newline_pass(void **state) {
        const char *in = "event: x\r\ndata: {\"choices\":[{}]}\r\n\r\ndata: [DONE]";
        gp_gw_sse s = {.strip = true};
        gp_buf b;
        gp_buf_init(&b, 0);
        feed(&s, &b, in, 3);
        assert_string_equal(b.data, in);
        assert_false(s.usage_seen);
        assert_int_equal(s.chunks, 1);
        gp_gw_sse_done(&s);
        gp_buf_done(&b);
}

static void test_a_line_over_1_mib_is_refused(void **state) {
        gp_gw_sse s = {0};
        gp_buf b;
        gp_buf_init(&b, 0);
        char *big = malloc(64 * 1024);
        memset(big, 'x', 64 * 1024);
        int r = 0;
        for (int i = 0; i < 20 && r == 0; i++)
                r = gp_gw_sse_feed(&s, big, 64 * 1024, out, &b);
        assert_int_equal(r, -E2BIG);
        free(big);
        gp_gw_sse_done(&s);
        gp_buf_done(&b);
}

static void test_x_priority_values(void **state) {
        assert_int_equal(gp_gw_parse_priority("0"), 0);
        assert_int_equal(gp_gw_parse_priority("9"), 9);
        assert_int_equal(gp_gw_parse_priority("P3"), 3);
        assert_int_equal(gp_gw_parse_priority("critical"), 0);
        assert_int_equal(gp_gw_parse_priority("High"), 2);
        assert_int_equal(gp_gw_parse_priority("normal"), 5);
        assert_int_equal(gp_gw_parse_priority("low"), 7);
        assert_int_equal(gp_gw_parse_priority("background"), 9);
        assert_int_equal(gp_gw_parse_priority("10"), -EINVAL);
        assert_int_equal(gp_gw_parse_priority("-1"), -EINVAL);
        assert_int_equal(gp_gw_parse_priority(""), -EINVAL);
        assert_int_equal(gp_gw_parse_priority("urgent"), -EINVAL);
}

static void test_prompt_tokens_are_estimated_from_the_text(void **state) {
        json_t *j = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"12345678\"},"
                               "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"abcd\"}]}]}",
                               0, NULL);
        assert_int_equal(gp_gw_estimate_tokens(j), (4 + 2) + (4 + 1) + 3);
        json_decref(j);
        j = json_loads("{\"prompt\":\"abcdefghi\"}", 0, NULL);
        assert_int_equal(gp_gw_estimate_tokens(j), 3);
        json_decref(j);
        j = json_loads("{\"prompt\":[1,2,3]}", 0, NULL);
        assert_int_equal(gp_gw_estimate_tokens(j), 3);
        json_decref(j);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_usage_chunk_is_stripped_when_the_client_did_not_ask),
                cmocka_unit_test(test_stream_passes_unchanged_when_usage_was_asked),
                cmocka_unit_test(test_crlf_lines_and_a_last_line_without_newline_pass),
                cmocka_unit_test(test_a_line_over_1_mib_is_refused),
                cmocka_unit_test(test_x_priority_values),
                cmocka_unit_test(test_prompt_tokens_are_estimated_from_the_text),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
