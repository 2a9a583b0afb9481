/* test-gateway-sse.c - unit tests of the gateway's pure helpers: the SSE
 * filter of streamed answers, X-Priority parsing, the token estimate and
 * the exact count's helpers (/tokenize). */
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

/* The usage read from one event: the plain shapes and every way off them
 * (escapes, other bytes, duplicates, reals, bad JSON) give what jansson
 * reads, whichever reader takes the line. */
static void test_usage_is_read_the_same_from_every_shape(void **state) {
        static const struct {
                const char *json;
                bool seen, dropped;
                int64_t prompt, completion, chunks;
        } cases[] = {
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}", true, true, 5, 2, 0},
                {"{\"choices\":[{\"delta\":{}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}", true, false, 5,
                 2, 1},
                {"{\"usage\":{\"prompt_tokens\":5.0,\"completion_tokens\":\"2\"}}", true, true, 0, 0, 0},
                {"{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},\"choices\":[],"
                 "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}",
                 true, true, 7, 3, 0},
                {"{\"usage\":{\"prompt_tokens\":1},\"usage\":null}", false, false, 0, 0, 1},
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1},\"x\":\"\\u00e9\\n\"}", true,
                 true, 4, 1, 0},
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1},\"x\":\"\xc3\xa9\"}", true,
                 true, 4, 1, 0},
                {"{\"usage\":{\"prompt_tokens\":4}", false, false, 0, 0, 0},
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}} x", false, false, 0, 0, 0},
                {"{\"usage\":nullx}", false, false, 0, 0, 0},
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":1e2,\"completion_tokens\":1}}", true, true, 0, 1, 0},
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":99999999999999999999,\"completion_tokens\":1}}", false,
                 false, 0, 0, 0},
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":123456789012345678,\"completion_tokens\":1}}", true,
                 true, 123456789012345678, 1, 0},
                {"{\"usage\":{\"prompt_tokens\":01}}", false, false, 0, 0, 0},
                {"[\"usage\"]", false, false, 0, 0, 1},
                {"{\"choices\":[],\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":0}}", true, true, -3, 0, 0},
                {"{\"choices\":{},\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2}}", true, false, 2, 2, 1},
                {"{\"choices\":[{\"usage\":{\"prompt_tokens\":9}}]}", false, false, 0, 0, 1},
                {"{ \"choices\" : [ ] , \"usage\" : { \"prompt_tokens\" : 6 ,\t\"completion_tokens\" : 1 } } ", true,
                 true, 6, 1, 0},
                {"{\"usage\":{},\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
                 true, true, 0, 0, 0},
                {"{\"usage\":{\"prompt_tokens\":true,\"completion_tokens\":null},\"choices\":[1]}", true, false, 0, 0,
                 1},
                {"{\"usage\":{\"prompt_tokens\":3}", false, false, 0, 0, 0},
                {"{\"usage\":{\"prompt_tokens\":3},}", false, false, 0, 0, 0},
                {"{\"usage\":{\"prompt_tokens\":-}}", false, false, 0, 0, 0},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char in[512];
                snprintf(in, sizeof(in), "data: %s\n\n", cases[i].json);
                gp_gw_sse s = {.strip = true};
                gp_buf b;
                gp_buf_init(&b, 0);
                feed(&s, &b, in, 1000);
                print_message("case %zu: %s\n", i, cases[i].json);
                assert_int_equal(s.usage_seen, cases[i].seen);
                assert_int_equal(s.prompt_tokens, cases[i].prompt);
                assert_int_equal(s.completion_tokens, cases[i].completion);
                assert_int_equal(s.chunks, cases[i].chunks);
                assert_string_equal(b.data ? b.data : "", cases[i].dropped ? "" : in);
                gp_gw_sse_done(&s);
                gp_buf_done(&b);
        }
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

static void test_only_prompts_near_the_context_are_counted_exactly(void **state) {
        assert_false(gp_gw_near_context(100, 16, 4096));
        assert_false(gp_gw_near_context(3200, 0, 4000));   /* exactly 80%: estimate enough */
        assert_true(gp_gw_near_context(3201, 0, 4000));
        assert_true(gp_gw_near_context(3000, 300, 4000));  /* max_tokens counts */
        assert_true(gp_gw_near_context(5000, 0, 4000));    /* over: confirm before refusing */
        assert_true(gp_gw_near_context(50000000, 50000000, 100000000));
}

static void test_tokenize_body_sends_messages_for_chat_and_a_string_prompt(void **state) {
        json_t *j = json_loads("{\"model\":\"m\",\"max_tokens\":5,\"stream\":true,"
                               "\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}]}", 0, NULL);
        char *b = gp_gw_tokenize_body(j);
        assert_non_null(b);
        json_t *o = json_loads(b, 0, NULL);
        assert_string_equal(json_string_value(json_object_get(o, "model")), "m");
        assert_int_equal(json_array_size(json_object_get(o, "messages")), 1);
        assert_int_equal(json_object_size(o), 2); /* nothing else of the request */
        json_decref(o);
        free(b);
        json_decref(j);
        j = json_loads("{\"model\":\"m\",\"prompt\":\"a b c\"}", 0, NULL);
        b = gp_gw_tokenize_body(j);
        assert_string_equal(b, "{\"model\":\"m\",\"prompt\":\"a b c\"}");
        free(b);
        json_decref(j);
        /* token ids and prompt lists are not sent: the estimate decides for them */
        j = json_loads("{\"model\":\"m\",\"prompt\":[1,2,3]}", 0, NULL);
        assert_null(gp_gw_tokenize_body(j));
        json_decref(j);
        j = json_loads("{\"prompt\":\"x\"}", 0, NULL);
        assert_null(gp_gw_tokenize_body(j));
        json_decref(j);
}

static void test_tokenize_count_is_read_from_the_answer(void **state) {
        int64_t n = -1;
        const char *vllm = "{\"count\":3,\"max_model_len\":4096,\"tokens\":[1,2,3]}";
        assert_int_equal(gp_gw_tokenize_count(vllm, strlen(vllm), &n), 0);
        assert_int_equal(n, 3);
        const char *spaced = "{\n \"tokens\": [7],\n \"count\" : 12345 \n}";
        assert_int_equal(gp_gw_tokenize_count(spaced, strlen(spaced), &n), 0);
        assert_int_equal(n, 12345);
        /* a token string "count" is not the key */
        const char *strs = "{\"token_strs\":[\"count\",\"x\"],\"count\":2}";
        assert_int_equal(gp_gw_tokenize_count(strs, strlen(strs), &n), 0);
        assert_int_equal(n, 2);
        n = 99;
        const char *bad[] = {"{\"tokens\":[1]}", "{\"count\":-1}", "{\"count\":1.5}", "{\"count\":\"3\"}",
                             "{\"count\":12", "{\"count\":1234567890123}", ""};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_true(gp_gw_tokenize_count(bad[i], strlen(bad[i]), &n) < 0);
        assert_true(gp_gw_tokenize_count(NULL, 0, &n) < 0);
        assert_int_equal(n, 99); /* untouched on failure */
}

static void test_context_message_has_the_numbers(void **state) {
        char msg[400];
        assert_int_equal(gp_gw_context_message(msg, sizeof(msg), 100, 90, 20), 0);
        assert_non_null(strstr(msg, "maximum context length is 100 tokens"));
        assert_non_null(strstr(msg, "you requested 110 tokens (90 in the messages, 20 in the completion)"));
        char small[16];
        assert_int_equal(gp_gw_context_message(small, sizeof(small), 100, 90, 20), -E2BIG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_usage_chunk_is_stripped_when_the_client_did_not_ask),
                cmocka_unit_test(test_stream_passes_unchanged_when_usage_was_asked),
                cmocka_unit_test(test_usage_is_read_the_same_from_every_shape),
                cmocka_unit_test(test_crlf_lines_and_a_last_line_without_newline_pass),
                cmocka_unit_test(test_a_line_over_1_mib_is_refused),
                cmocka_unit_test(test_x_priority_values),
                cmocka_unit_test(test_prompt_tokens_are_estimated_from_the_text),
                cmocka_unit_test(test_only_prompts_near_the_context_are_counted_exactly),
                cmocka_unit_test(test_tokenize_body_sends_messages_for_chat_and_a_string_prompt),
                cmocka_unit_test(test_tokenize_count_is_read_from_the_answer),
                cmocka_unit_test(test_context_message_has_the_numbers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
