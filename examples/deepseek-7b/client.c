/* client.c - ask gpupool's OpenAI-compatible gateway one question and print
 * the answer as it streams in.
 *
 * Build:  cc -O2 -o deepseek-client client.c -lcurl -ljansson
 *         (Debian 12: apt-get install libcurl4-openssl-dev libjansson-dev)
 * Run:    GPUPOOL_API=http://127.0.0.1:8080 GPUPOOL_API_KEY=sk-... \
 *           ./deepseek-client [-m MODEL] [-n MAX_TOKENS] [-p PRIORITY] [-s] "your question"
 *   GPUPOOL_API      the gateway's base URL (default http://127.0.0.1:8080);
 *                    the client calls $GPUPOOL_API/v1/chat/completions
 *   GPUPOOL_API_KEY  the tenant key, sent as "Authorization: Bearer KEY"
 *                    (none: no header, which gpupool accepts from loopback
 *                    when it has no keys configured)
 *   -m MODEL         default deepseek-7b (the name in gpupool's config)
 *   -n MAX_TOKENS    default 256
 *   -p PRIORITY      sent as X-Priority (0..9, P0..P9, or critical, high,
 *                    normal, low, background): asks for a less urgent tier
 *                    than the key's default; never more urgent than its max
 *   -s               no streaming: one JSON answer, printed when complete
 * The answer goes to stdout; token usage ("[usage] prompt P, completion C")
 * and errors go to stderr.  Exit status: 0 answered, 1 the gateway or the
 * network failed (the OpenAI-shaped error message is printed), 2 bad usage.
 *
 * Streaming is Server-Sent Events: lines "data: {chunk}" each carrying
 * choices[0].delta.content, a last chunk with usage (we ask for it with
 * stream_options.include_usage), then "data: [DONE]".  A line longer than
 * 1 MiB or an answer body over 16 MiB is refused.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* asprintf */
#endif
#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINE (1024 * 1024)
#define MAX_BODY (16 * 1024 * 1024)

struct answer {
        CURL *curl;
        bool stream;
        long status;            /* HTTP status, read on the first bytes */
        char *buf;              /* the partial SSE line, or the whole body (errors, -s) */
        size_t len, cap;
        bool done;              /* [DONE] seen */
        bool printed;           /* some answer text is on stdout */
        bool too_big;
        long long prompt_tokens, completion_tokens; /* -1 until reported */
};

static int append(struct answer *a, const char *p, size_t n, size_t max)
{
        if (a->len + n + 1 > max) {
                a->too_big = true;
                return -1;
        }
        if (a->len + n + 1 > a->cap) {
                size_t cap = a->cap ? a->cap : 4096;
                while (cap < a->len + n + 1)
                        cap *= 2;
                char *b = realloc(a->buf, cap);
                if (!b)
                        return -1;
                a->buf = b;
                a->cap = cap;
        }
        memcpy(a->buf + a->len, p, n);
        a->len += n;
        a->buf[a->len] = 0;
        return 0;
}

static void take_usage(struct answer *a, json_t *chunk)
{
        json_t *u = json_object_get(chunk, "usage");
        if (json_is_object(u)) {
                a->prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
                a->completion_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
        }
}

/* One SSE line (without its newline). */
static void sse_line(struct answer *a, const char *line)
{
        if (strncmp(line, "data:", 5))
                return;         /* blank separators, comments, event:/id: lines */
        line += 5;
        while (*line == ' ')
                line++;
        if (!strcmp(line, "[DONE]")) {
                a->done = true;
                return;
        }
        json_t *chunk = json_loads(line, 0, NULL);
        if (!chunk)
                return;
        json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
        const char *text = json_string_value(json_object_get(json_object_get(choice, "delta"), "content"));
        if (text) {
                fputs(text, stdout);
                fflush(stdout); /* show each token as it comes */
                a->printed = true;
        }
        take_usage(a, chunk);
        json_decref(chunk);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
        struct answer *a = ud;
        size_t n = size * nmemb;
        if (!a->status)
                curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &a->status);
        if (!a->stream || a->status != 200)
                return append(a, p, n, MAX_BODY) ? 0 : n;
        /* split into lines; keep a partial line for the next call */
        for (size_t i = 0; i < n;) {
                const char *nl = memchr(p + i, '\n', n - i);
                size_t k = nl ? (size_t)(nl - (p + i)) : n - i;
                if (append(a, p + i, k, MAX_LINE))
                        return 0;
                i += k;
                if (!nl)
                        break;
                i++;
                if (a->len && a->buf[a->len - 1] == '\r')
                        a->buf[--a->len] = 0;
                sse_line(a, a->buf);
                a->len = 0;
        }
        return n;
}

/* The message of an OpenAI-shaped error body, or the body itself. */
static void print_error(const struct answer *a)
{
        json_t *j = a->buf ? json_loads(a->buf, 0, NULL) : NULL;
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        const char *code = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
        fprintf(stderr, "deepseek-client: HTTP %ld: %s%s%s%s\n", a->status,
                msg ? msg : a->buf ? a->buf : "(no body)", code ? " (" : "", code ? code : "", code ? ")" : "");
        json_decref(j);
}

static void usage(void)
{
        fprintf(stderr, "usage: deepseek-client [-m MODEL] [-n MAX_TOKENS] [-p PRIORITY] [-s] QUESTION\n");
        exit(2);
}

int main(int argc, char **argv)
{
        const char *model = "deepseek-7b", *priority = NULL;
        long max_tokens = 256;
        bool stream = true;
        int opt;
        while ((opt = getopt(argc, argv, "m:n:p:s")) != -1) {
                char *end;
                switch (opt) {
                case 'm': model = optarg; break;
                case 'p': priority = optarg; break;
                case 's': stream = false; break;
                case 'n':
                        max_tokens = strtol(optarg, &end, 10);
                        if (*end || end == optarg || max_tokens < 1 || max_tokens > 1000000)
                                usage();
                        break;
                default: usage();
                }
        }
        if (optind != argc - 1)
                usage();
        const char *base = getenv("GPUPOOL_API");
        const char *key = getenv("GPUPOOL_API_KEY");
        if (!base || !*base)
                base = "http://127.0.0.1:8080";
        size_t bl = strlen(base);
        while (bl > 0 && base[bl - 1] == '/')
                bl--;

        int rc = 1;
        char *url = NULL, *auth = NULL, *prio = NULL, *body = NULL;
        struct curl_slist *hdrs = NULL;
        struct answer a = {.stream = stream, .prompt_tokens = -1, .completion_tokens = -1};
        json_t *req = json_pack("{s:s, s:[{s:s, s:s}], s:I, s:b}", "model", model, "messages", "role", "user",
                                "content", argv[optind], "max_tokens", (json_int_t)max_tokens, "stream", stream);
        if (req && stream)
                json_object_set_new(req, "stream_options", json_pack("{s:b}", "include_usage", 1));
        body = req ? json_dumps(req, JSON_COMPACT) : NULL;
        json_decref(req);
        if (!body || asprintf(&url, "%.*s/v1/chat/completions", (int)bl, base) < 0) {
                url = NULL;
                fprintf(stderr, "deepseek-client: out of memory (or the question is not UTF-8)\n");
                goto out;
        }
        if (curl_global_init(CURL_GLOBAL_DEFAULT) || !(a.curl = curl_easy_init())) {
                fprintf(stderr, "deepseek-client: libcurl failed to start\n");
                goto out;
        }
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        hdrs = curl_slist_append(hdrs, stream ? "Accept: text/event-stream" : "Accept: application/json");
        if (key && *key) {
                if (asprintf(&auth, "Authorization: Bearer %s", key) < 0) {
                        auth = NULL;
                        goto out;
                }
                hdrs = curl_slist_append(hdrs, auth);
        }
        if (priority) {
                if (asprintf(&prio, "X-Priority: %s", priority) < 0) {
                        prio = NULL;
                        goto out;
                }
                hdrs = curl_slist_append(hdrs, prio);
        }
        curl_easy_setopt(a.curl, CURLOPT_URL, url);
        curl_easy_setopt(a.curl, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(a.curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(a.curl, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(a.curl, CURLOPT_WRITEDATA, &a);
        curl_easy_setopt(a.curl, CURLOPT_CONNECTTIMEOUT, 10L);
        curl_easy_setopt(a.curl, CURLOPT_NOSIGNAL, 1L);
        CURLcode cr = curl_easy_perform(a.curl);
        if (!a.status)
                curl_easy_getinfo(a.curl, CURLINFO_RESPONSE_CODE, &a.status);
        if (a.too_big) {
                fprintf(stderr, "deepseek-client: the answer is too large\n");
                goto out;
        }
        if (cr != CURLE_OK) {
                if (a.printed)
                        putchar('\n');
                fflush(stdout);
                fprintf(stderr, "deepseek-client: %s: %s\n", url, curl_easy_strerror(cr));
                goto out;
        }
        if (a.status != 200) {
                print_error(&a);
                goto out;
        }
        if (stream) {
                if (a.len)
                        sse_line(&a, a.buf);    /* a last line without a newline */
                putchar('\n');
                fflush(stdout); /* before the usage line on stderr */
                if (!a.done) {
                        fprintf(stderr, "deepseek-client: the stream ended without [DONE]\n");
                        goto out;
                }
        } else {
                json_t *j = json_loads(a.buf ? a.buf : "", 0, NULL);
                const char *text = json_string_value(json_object_get(
                        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content"));
                if (!text) {
                        fprintf(stderr, "deepseek-client: no choices[0].message.content in the answer\n");
                        json_decref(j);
                        goto out;
                }
                printf("%s\n", text);
                take_usage(&a, j);
                json_decref(j);
        }
        if (a.prompt_tokens >= 0)
                fprintf(stderr, "[usage] prompt %lld, completion %lld\n", a.prompt_tokens, a.completion_tokens);
        rc = 0;
out:
        curl_slist_free_all(hdrs);
        if (a.curl)
                curl_easy_cleanup(a.curl);
        curl_global_cleanup();
        free(a.buf);
        free(url);
        free(auth);
        free(prio);
        free(body);
        return rc;
}
