/* fake-openai.c - an OpenAI-compatible model server for tests and benchmarks.
 *
 * One process, one thread, one epoll loop; non-blocking sockets, HTTP/1.1
 * keep-alive (pipelined requests are answered in order), request bodies
 * with Content-Length or chunked encoding, "Expect: 100-continue".  It is
 * the upstream the gateway tests and bench/bench-gateway.sh talk to, so it
 * is built to be fast (buffers reused across requests; per request little
 * more than jansson's parse is allocated).
 *
 * Usage:
 *   fake-openai --listen 127.0.0.1:PORT [--model NAME]... [--name ID]
 *               [--log FILE] [--fail-all] [--context N] [--tokens N]
 *               [--dims N] [--max-body BYTES] [--die-with-parent]
 *   --listen      address to bind; PORT 0 picks a free port.  When it
 *                 listens it prints "ready PORT" (one line) on stdout.
 *   --model NAME  a model it serves (repeatable).  With none given it
 *                 accepts any model name; with some, another name gets 404
 *                 code model_not_found (like vLLM).  Default list entry for
 *                 GET /v1/models: "fake-model".
 *   --name ID     sent as the header "x-upstream-id: ID" on every answer
 *                 (default "fake"), so failover tests can tell upstreams
 *                 apart.
 *   --log FILE    appends one JSON line per model request when it is
 *                 accepted (before any delay):
 *                   {"seq":N,"t_ms":MONOTONIC_MS,"upstream":ID,
 *                    "path":"/v1/...","model":M,"text":LAST_USER_TEXT,
 *                    "x_priority":HEADER_OR_NULL}
 *                 text is cut to 256 bytes.  Tests read the serving order
 *                 from it.
 *   --fail-all    answer 503 (OpenAI-shaped error) to everything, /health
 *                 included.  POST /fake/fail-all and POST /fake/recover
 *                 switch this at run time.
 *   --context N   maximum context in tokens (default 0 = no limit); a
 *                 request whose prompt tokens + completion tokens exceed
 *                 it gets 400 code context_length_exceeded.
 *   --tokens N    completion tokens when the request sets no max_tokens
 *                 and no #tokens marker (default 16).
 *   --dims N      embedding dimensions when the request sets none (16).
 *   --max-body B  largest request body accepted (default 4 MiB, 413 above).
 *   --die-with-parent  exit when the process that started it dies (a test
 *                 runner or bench script killed with SIGKILL leaves no
 *                 upstream behind).
 *
 * Endpoints:
 *   GET  /v1/models           {"object":"list","data":[{"id":M,...}]}
 *   POST /v1/chat/completions chat.completion / chat.completion.chunk
 *   POST /v1/completions      text_completion (stream too)
 *   POST /v1/embeddings       float or base64 (encoding_format) vectors
 *   POST /tokenize            vLLM style: {"model","prompt"} or
 *                             {"model","messages"} -> {"count":N,
 *                             "max_model_len":C,"tokens":[...]}
 *   GET  /health              200, empty body (503 when failing)
 *   GET  /fake/stats          {"name","requests","open","held","failing"}
 *   POST /fake/fail-all, POST /fake/recover
 *   POST /fake/release        answers every #hold request: {"released":N}
 *
 * Tokens: a token is a whitespace-separated word.  Prompt tokens of a chat
 * request are the words of every message's text content; of a completion,
 * the words of the prompt (or the count of its token ids).  The answer is
 * "tok0 tok1 ... tokN-1"; N = the #tokens marker, else --tokens, capped by
 * max_tokens / max_completion_tokens (finish_reason "length" when capped,
 * else "stop").  usage = {prompt_tokens, completion_tokens, total_tokens}.
 *
 * Streaming (stream:true): text/event-stream, chunked transfer encoding;
 * one "data: {chunk}" event per token (the first carries role assistant),
 * a final chunk with finish_reason, then a chunk with "choices":[] and
 * usage if stream_options.include_usage is true, then "data: [DONE]".
 *
 * Behaviour markers, looked for in the last user message (chat), the
 * prompt (completions) or the input (embeddings):
 *   #fail500      answer 500 with an error JSON (#fail=CODE: any 400..599)
 *   #stall        accept the request and never answer (the connection stays
 *                 open until the client closes it)
 *   #slow=MS      take MS ms per completion token: streaming sends the
 *                 first token at once, then one every MS ms; a plain answer
 *                 comes after N*MS ms
 *   #delay=MS     wait MS ms before the first byte of the answer
 *   #close        close the connection mid-answer (streaming: after half of
 *                 the tokens; plain: after half of the body)
 *   #tokens=N     N completion tokens (0..100000), still capped by max_tokens
 *   #hold         wait, without a deadline, until POST /fake/release (then
 *                 answer as usual); lets a test fill the gateway's queue
 *                 behind a request that ends exactly when it says so
 *
 * Limits: 16 KiB of request headers, --max-body of body, 4096 open
 * connections (more are closed at once), delays up to 600000 ms.  Bad JSON
 * or a wrong field type gets 400 invalid_request_error.
 *
 * Invariant: a connection handles one request at a time (busy); bytes of a
 * following request wait in its input buffer until the answer is complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADER (16 * 1024)
#define MAX_CONNS 4096
#define MAX_DELAY_MS 600000
#define MAX_TOKENS 100000
#define MAX_MODELS 32
#define MAX_DIMS 4096
#define LOG_TEXT_MAX 256

/* ---- growing byte buffer ---- */

struct buf {
        char *p;                /* bytes, NUL-terminated when len < cap */
        size_t len;             /* bytes used */
        size_t cap;             /* bytes allocated */
};

static void die(const char *what)
{
        fprintf(stderr, "fake-openai: %s\n", what);
        exit(1);
}

static void buf_reserve(struct buf *b, size_t more)
{
        if (b->len + more + 1 <= b->cap)
                return;
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + more + 1)
                cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
                die("out of memory");
        b->p = p;
        b->cap = cap;
}

static void buf_add(struct buf *b, const void *data, size_t n)
{
        buf_reserve(b, n);
        memcpy(b->p + b->len, data, n);
        b->len += n;
        b->p[b->len] = 0;
}

static void buf_str(struct buf *b, const char *s)
{
        buf_add(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3)))
static void buf_printf(struct buf *b, const char *fmt, ...)
{
        va_list ap;
        for (;;) {
                size_t room = b->cap > b->len ? b->cap - b->len : 0;
                va_start(ap, fmt);
                int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
                va_end(ap);
                if (n < 0)
                        die("vsnprintf failed");
                if ((size_t)n < room) {
                        b->len += (size_t)n;
                        return;
                }
                buf_reserve(b, (size_t)n + 1);
        }
}

/* JSON string literal of s (with quotes). */
static void buf_json_str(struct buf *b, const char *s)
{
        buf_add(b, "\"", 1);
        for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
                if (*c == '"' || *c == '\\') {
                        char e[2] = {'\\', (char)*c};
                        buf_add(b, e, 2);
                } else if (*c < 0x20) {
                        buf_printf(b, "\\u%04x", *c);
                } else {
                        buf_add(b, c, 1);
                }
        }
        buf_add(b, "\"", 1);
}

static void buf_free(struct buf *b)
{
        free(b->p);
        b->p = NULL;
        b->len = b->cap = 0;
}

/* ---- options and global state ---- */

static const char *opt_name = "fake";
static const char *opt_models[MAX_MODELS];
static int opt_nmodels;
static FILE *opt_log;
static bool opt_fail_all;
static long opt_context;
static long opt_tokens = 16;
static long opt_dims = 16;
static size_t opt_max_body = 4 * 1024 * 1024;

static int epfd;
static int nconns;
static unsigned long long nrequests;
static unsigned long long next_id;
static struct buf scratch;      /* response body being built */

enum kind { K_CHAT, K_COMPLETION };

/* One request being answered over time (delay, slow streaming). */
struct job {
        enum kind kind;
        bool stream;
        bool include_usage;
        bool close_mid;         /* #close */
        bool headers_sent;
        bool capped;            /* finish_reason length */
        long ntok;              /* completion tokens */
        long sent;              /* tokens sent so far (stream) */
        long prompt_tokens;
        long slow_ms;
        unsigned long long id;
        char *model;            /* owned */
};

struct conn {
        int fd;
        struct buf in;          /* received bytes; request starts at in_off */
        size_t in_off;
        struct buf out;         /* bytes to send; out_off already sent */
        size_t out_off;
        bool want_out;          /* EPOLLOUT registered */
        bool busy;              /* a request is being answered */
        bool stalled;           /* #stall: never answers */
        bool close_after;       /* close once out is flushed */
        bool continue_sent;     /* 100 Continue sent for the pending request */
        bool held;              /* #hold: wake_at is LLONG_MAX until /fake/release */
        long long wake_at;      /* monotonic ms of the next job step, 0 none */
        struct job job;
        struct conn *tprev, *tnext;     /* list of conns with wake_at */
};

static struct conn *timed_head;

static long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void timer_set(struct conn *c, long long at)
{
        if (!c->wake_at) {
                c->tnext = timed_head;
                c->tprev = NULL;
                if (timed_head)
                        timed_head->tprev = c;
                timed_head = c;
        }
        c->wake_at = at;
}

static void timer_clear(struct conn *c)
{
        if (!c->wake_at)
                return;
        if (c->tprev)
                c->tprev->tnext = c->tnext;
        else
                timed_head = c->tnext;
        if (c->tnext)
                c->tnext->tprev = c->tprev;
        c->tprev = c->tnext = NULL;
        c->wake_at = 0;
}

static void conn_close(struct conn *c)
{
        timer_clear(c);
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        buf_free(&c->in);
        buf_free(&c->out);
        free(c->job.model);
        free(c);
        nconns--;
}

static void set_out_interest(struct conn *c, bool want)
{
        if (c->want_out == want)
                return;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0), .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = want;
}

/* Sends what it can; returns -1 if the connection was closed. */
static int conn_flush(struct conn *c)
{
        while (c->out_off < c->out.len) {
                ssize_t n = write(c->fd, c->out.p + c->out_off, c->out.len - c->out_off);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                set_out_interest(c, true);
                                return 0;
                        }
                        conn_close(c);
                        return -1;
                }
                c->out_off += (size_t)n;
        }
        c->out.len = c->out_off = 0;
        set_out_interest(c, false);
        if (c->close_after) {
                conn_close(c);
                return -1;
        }
        return 0;
}

/* ---- HTTP answers ---- */

static const char *reason(int status)
{
        switch (status) {
        case 200: return "OK";
        case 400: return "Bad Request";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 411: return "Length Required";
        case 413: return "Payload Too Large";
        case 429: return "Too Many Requests";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        default: return "Status";
        }
}

static void head(struct conn *c, int status, const char *ctype, long long length)
{
        buf_printf(&c->out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nx-upstream-id: %s\r\n", status,
                   reason(status), ctype, opt_name);
        if (length >= 0)
                buf_printf(&c->out, "Content-Length: %lld\r\n", length);
        else
                buf_str(&c->out, "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n");
        if (c->close_after)
                buf_str(&c->out, "Connection: close\r\n");
        buf_str(&c->out, "\r\n");
}

static void respond(struct conn *c, int status, const char *ctype, const char *body, size_t len)
{
        head(c, status, ctype, (long long)len);
        buf_add(&c->out, body, len);
}

static const char *err_type(int status)
{
        if (status == 429)
                return "rate_limit_exceeded";
        if (status >= 500)
                return "server_error";
        return "invalid_request_error";
}

static void respond_error(struct conn *c, int status, const char *msg, const char *param, const char *code)
{
        struct buf *b = &scratch;
        b->len = 0;
        buf_str(b, "{\"error\":{\"message\":");
        buf_json_str(b, msg);
        buf_printf(b, ",\"type\":\"%s\",\"param\":", err_type(status));
        if (param)
                buf_json_str(b, param);
        else
                buf_str(b, "null");
        buf_str(b, ",\"code\":");
        if (code)
                buf_json_str(b, code);
        else
                buf_str(b, "null");
        buf_str(b, "}}");
        respond(c, status, "application/json", b->p, b->len);
}

/* ---- request content helpers ---- */

static long count_words(const char *s)
{
        long n = 0;
        bool in = false;
        for (; *s; s++) {
                bool sp = *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v';
                if (!sp && !in)
                        n++;
                in = !sp;
        }
        return n;
}

/* Text of a message content: a string or an array of {type:"text",text}.
 * Appends to b; returns words counted, or -1 if content has a bad type. */
static long content_text(json_t *content, struct buf *b)
{
        if (!content || json_is_null(content))
                return 0;
        if (json_is_string(content)) {
                if (b)
                        buf_str(b, json_string_value(content));
                return count_words(json_string_value(content));
        }
        if (!json_is_array(content))
                return -1;
        long n = 0;
        size_t i;
        json_t *part;
        json_array_foreach(content, i, part) {
                json_t *t = json_object_get(part, "text");
                if (json_is_string(t)) {
                        if (b) {
                                if (b->len)
                                        buf_str(b, " ");
                                buf_str(b, json_string_value(t));
                        }
                        n += count_words(json_string_value(t));
                }
        }
        return n;
}

/* Prompt of a completion: string, [string], [int], [[int]].  Appends text
 * to b (may be NULL); returns tokens, -1 on a bad type. */
static long prompt_text(json_t *prompt, struct buf *b)
{
        if (json_is_string(prompt)) {
                if (b)
                        buf_str(b, json_string_value(prompt));
                return count_words(json_string_value(prompt));
        }
        if (!json_is_array(prompt))
                return -1;
        long n = 0;
        size_t i;
        json_t *x;
        json_array_foreach(prompt, i, x) {
                if (json_is_string(x)) {
                        if (b) {
                                if (b->len)
                                        buf_str(b, " ");
                                buf_str(b, json_string_value(x));
                        }
                        n += count_words(json_string_value(x));
                } else if (json_is_integer(x)) {
                        n++;
                } else if (json_is_array(x)) {
                        n += (long)json_array_size(x);
                } else {
                        return -1;
                }
        }
        return n;
}

/* Value of "#NAME=N" in text, bounded to [0, max]; def if absent. */
static long marker_num(const char *text, const char *name, long def, long max)
{
        const char *p = strstr(text, name);
        if (!p)
                return def;
        p += strlen(name);
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0)
                return def;
        return v > max ? max : v;
}

struct markers {
        int fail;               /* HTTP status to fail with, 0 none */
        bool stall;
        bool hold;
        bool close_mid;
        long slow_ms;
        long delay_ms;
        long tokens;            /* -1: not set */
};

static void parse_markers(const char *text, struct markers *m)
{
        memset(m, 0, sizeof(*m));
        if (strstr(text, "#fail500"))
                m->fail = 500;
        long f = marker_num(text, "#fail=", 0, 599);
        if (f >= 400)
                m->fail = (int)f;
        m->stall = strstr(text, "#stall") != NULL;
        m->hold = strstr(text, "#hold") != NULL;
        m->close_mid = strstr(text, "#close") != NULL;
        m->slow_ms = marker_num(text, "#slow=", 0, MAX_DELAY_MS);
        m->delay_ms = marker_num(text, "#delay=", 0, MAX_DELAY_MS);
        m->tokens = marker_num(text, "#tokens=", -1, MAX_TOKENS);
}

static bool model_ok(const char *model)
{
        if (opt_nmodels == 0)
                return true;
        for (int i = 0; i < opt_nmodels; i++)
                if (!strcmp(opt_models[i], model))
                        return true;
        return false;
}

static void log_request(const char *path, const char *model, const char *text, const char *xprio)
{
        if (!opt_log)
                return;
        struct buf b = {0};
        char cut[LOG_TEXT_MAX + 1];
        size_t n = strlen(text);
        if (n > LOG_TEXT_MAX) {
                /* cut at a UTF-8 character boundary (text is valid UTF-8: jansson checked it) */
                n = LOG_TEXT_MAX;
                while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80)
                        n--;
        }
        memcpy(cut, text, n);
        cut[n] = 0;
        buf_printf(&b, "{\"seq\":%llu,\"t_ms\":%lld,\"upstream\":", nrequests, now_ms());
        buf_json_str(&b, opt_name);
        buf_str(&b, ",\"path\":");
        buf_json_str(&b, path);
        buf_str(&b, ",\"model\":");
        buf_json_str(&b, model);
        buf_str(&b, ",\"text\":");
        buf_json_str(&b, cut);
        buf_str(&b, ",\"x_priority\":");
        if (xprio)
                buf_json_str(&b, xprio);
        else
                buf_str(&b, "null");
        buf_str(&b, "}\n");
        fwrite(b.p, 1, b.len, opt_log);
        fflush(opt_log);
        buf_free(&b);
}

/* ---- answers of the model endpoints ---- */

static void tokens_text(struct buf *b, long from, long to)
{
        for (long i = from; i < to; i++)
                buf_printf(b, i ? " tok%ld" : "tok%ld", i);
}

static void usage_json(struct buf *b, const struct job *j)
{
        buf_printf(b, "\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld}",
                   j->prompt_tokens, j->ntok, j->prompt_tokens + j->ntok);
}

static const char *finish(const struct job *j)
{
        return j->capped ? "length" : "stop";
}

static void full_body(struct buf *b, const struct job *j)
{
        long long created = (long long)time(NULL);
        b->len = 0;
        if (j->kind == K_CHAT) {
                buf_printf(b, "{\"id\":\"chatcmpl-%llu\",\"object\":\"chat.completion\",\"created\":%lld,\"model\":",
                           j->id, created);
                buf_json_str(b, j->model);
                buf_str(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"");
                tokens_text(b, 0, j->ntok);
                buf_printf(b, "\"},\"logprobs\":null,\"finish_reason\":\"%s\"}],", finish(j));
        } else {
                buf_printf(b, "{\"id\":\"cmpl-%llu\",\"object\":\"text_completion\",\"created\":%lld,\"model\":",
                           j->id, created);
                buf_json_str(b, j->model);
                buf_str(b, ",\"choices\":[{\"index\":0,\"text\":\"");
                tokens_text(b, 0, j->ntok);
                buf_printf(b, "\",\"logprobs\":null,\"finish_reason\":\"%s\"}],", finish(j));
        }
        usage_json(b, j);
        buf_str(b, "}");
}

/* Appends one SSE event "data: <json>\n\n" as an HTTP chunk. */
static void sse_event(struct conn *c, const char *data, size_t len)
{
        buf_printf(&c->out, "%zx\r\ndata: ", len + 8);
        buf_add(&c->out, data, len);
        buf_str(&c->out, "\n\n\r\n");
}

static void chunk_prefix(struct buf *b, const struct job *j)
{
        b->len = 0;
        buf_printf(b, "{\"id\":\"%s-%llu\",\"object\":\"%s\",\"created\":%lld,\"model\":",
                   j->kind == K_CHAT ? "chatcmpl" : "cmpl", j->id,
                   j->kind == K_CHAT ? "chat.completion.chunk" : "text_completion", (long long)time(NULL));
        buf_json_str(b, j->model);
}

static void sse_token(struct conn *c, const struct job *j, long i)
{
        struct buf *b = &scratch;
        chunk_prefix(b, j);
        if (j->kind == K_CHAT)
                buf_printf(b, ",\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"%stok%ld\"},"
                           "\"logprobs\":null,\"finish_reason\":null}]}",
                           i == 0 ? "\"role\":\"assistant\"," : "", i ? " " : "", i);
        else
                buf_printf(b, ",\"choices\":[{\"index\":0,\"text\":\"%stok%ld\",\"logprobs\":null,"
                           "\"finish_reason\":null}]}", i ? " " : "", i);
        sse_event(c, b->p, b->len);
}

static void sse_end(struct conn *c, const struct job *j)
{
        struct buf *b = &scratch;
        chunk_prefix(b, j);
        if (j->kind == K_CHAT)
                buf_printf(b, ",\"choices\":[{\"index\":0,\"delta\":{%s},\"logprobs\":null,"
                           "\"finish_reason\":\"%s\"}]}", j->ntok ? "" : "\"role\":\"assistant\",\"content\":\"\"",
                           finish(j));
        else
                buf_printf(b, ",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
                           "\"finish_reason\":\"%s\"}]}", finish(j));
        sse_event(c, b->p, b->len);
        if (j->include_usage) {
                chunk_prefix(b, j);
                buf_str(b, ",\"choices\":[],");
                usage_json(b, j);
                buf_str(b, "}");
                sse_event(c, b->p, b->len);
        }
        sse_event(c, "[DONE]", 6);
        buf_str(&c->out, "0\r\n\r\n");
}

static void job_done(struct conn *c)
{
        free(c->job.model);
        memset(&c->job, 0, sizeof(c->job));
        c->busy = false;
}

/* Advances the job of c: queues what is due now in c->out and arms the
 * timer for the rest.  Never closes c (it may set close_after); the caller
 * flushes. */
static void job_step(struct conn *c)
{
        struct job *j = &c->job;
        if (!j->stream) {
                full_body(&scratch, j);
                if (j->close_mid) {
                        head(c, 200, "application/json", (long long)scratch.len);
                        buf_add(&c->out, scratch.p, scratch.len / 2);
                        c->close_after = true;
                } else {
                        respond(c, 200, "application/json", scratch.p, scratch.len);
                }
                job_done(c);
                return;
        }
        if (!j->headers_sent) {
                head(c, 200, "text/event-stream", -1);
                j->headers_sent = true;
        }
        long stop_at = j->close_mid ? j->ntok / 2 : j->ntok;
        for (;;) {
                if (j->sent >= stop_at) {
                        if (j->close_mid) {
                                c->close_after = true;
                        } else {
                                sse_end(c, j);
                        }
                        job_done(c);
                        return;
                }
                sse_token(c, j, j->sent);
                j->sent++;
                if (j->slow_ms && j->sent < j->ntok) {
                        timer_set(c, now_ms() + j->slow_ms);
                        return;
                }
        }
}

static void handle_models(struct conn *c)
{
        struct buf *b = &scratch;
        b->len = 0;
        buf_str(b, "{\"object\":\"list\",\"data\":[");
        int n = opt_nmodels ? opt_nmodels : 1;
        for (int i = 0; i < n; i++) {
                buf_str(b, i ? ",{\"id\":" : "{\"id\":");
                buf_json_str(b, opt_nmodels ? opt_models[i] : "fake-model");
                buf_printf(b, ",\"object\":\"model\",\"created\":1700000000,\"owned_by\":\"fake-openai\","
                           "\"max_model_len\":%ld}", opt_context);
        }
        buf_str(b, "]}");
        respond(c, 200, "application/json", b->p, b->len);
}

static uint32_t fnv1a(const char *s, size_t n, uint32_t h)
{
        for (size_t i = 0; i < n; i++) {
                h ^= (unsigned char)s[i];
                h *= 16777619u;
        }
        return h;
}

static void base64(struct buf *b, const unsigned char *p, size_t n)
{
        static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16;
                if (i + 1 < n)
                        v |= (uint32_t)p[i + 1] << 8;
                if (i + 2 < n)
                        v |= p[i + 2];
                char o[4] = {tab[(v >> 18) & 63], tab[(v >> 12) & 63],
                             i + 1 < n ? tab[(v >> 6) & 63] : '=', i + 2 < n ? tab[v & 63] : '='};
                buf_add(b, o, 4);
        }
}

static void handle_embeddings(struct conn *c, json_t *req, const char *model, const char *xprio)
{
        json_t *input = json_object_get(req, "input");
        json_t *items = json_is_array(input) ? input : NULL;
        size_t nitems = items ? json_array_size(items) : 1;
        /* [int, int, ...] is one tokenised input */
        if (items && nitems && json_is_integer(json_array_get(items, 0)))
                nitems = 1, items = NULL;
        if (!input || (!json_is_string(input) && !json_is_array(input)) || nitems == 0) {
                respond_error(c, 400, "input must be a string or a non-empty array", "input", NULL);
                return;
        }
        long dims = opt_dims;
        json_t *d = json_object_get(req, "dimensions");
        if (d) {
                if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > MAX_DIMS) {
                        respond_error(c, 400, "dimensions must be an integer in 1..4096", "dimensions", NULL);
                        return;
                }
                dims = (long)json_integer_value(d);
        }
        const char *fmt = json_string_value(json_object_get(req, "encoding_format"));
        bool b64 = fmt && !strcmp(fmt, "base64");
        struct buf text = {0};
        long ptok = 0;
        for (size_t i = 0; i < nitems; i++) {
                json_t *x = items ? json_array_get(items, i) : input;
                long n = -1;
                if (json_is_string(x)) {
                        if (text.len)
                                buf_str(&text, " ");
                        buf_str(&text, json_string_value(x));
                        n = count_words(json_string_value(x));
                } else if (json_is_array(x)) {
                        n = (long)json_array_size(x);
                }
                if (n < 0) {
                        buf_free(&text);
                        respond_error(c, 400, "input items must be strings or token arrays", "input", NULL);
                        return;
                }
                ptok += n;
        }
        const char *t = text.p ? text.p : "";
        log_request("/v1/embeddings", model, t, xprio);
        struct markers m;
        parse_markers(t, &m);
        buf_free(&text);
        if (m.fail) {
                respond_error(c, m.fail, "fake-openai: failure requested by #fail", NULL, NULL);
                return;
        }
        if (m.stall) {
                c->busy = c->stalled = true;
                return;
        }
        struct buf *b = &scratch;
        b->len = 0;
        buf_str(b, "{\"object\":\"list\",\"data\":[");
        float *vec = malloc(sizeof(float) * (size_t)dims);
        if (!vec)
                die("out of memory");
        for (size_t i = 0; i < nitems; i++) {
                json_t *x = items ? json_array_get(items, i) : input;
                const char *s = json_is_string(x) ? json_string_value(x) : "";
                uint32_t h = fnv1a(s, strlen(s), 2166136261u);
                for (long k = 0; k < dims; k++) {
                        h = h * 1103515245u + 12345u;
                        vec[k] = (float)((h >> 8) & 0xffff) / 65535.0f - 0.5f;
                }
                buf_printf(b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
                if (b64) {
                        buf_str(b, "\"");
                        base64(b, (const unsigned char *)vec, sizeof(float) * (size_t)dims);
                        buf_str(b, "\"");
                } else {
                        buf_str(b, "[");
                        for (long k = 0; k < dims; k++)
                                buf_printf(b, k ? ",%.6f" : "%.6f", (double)vec[k]);
                        buf_str(b, "]");
                }
                buf_str(b, "}");
        }
        free(vec);
        buf_str(b, "],\"model\":");
        buf_json_str(b, model);
        buf_printf(b, ",\"usage\":{\"prompt_tokens\":%ld,\"total_tokens\":%ld}}", ptok, ptok);
        if (m.delay_ms) {
                /* answered from the timer: keep the body in the job's model slot */
                c->busy = true;
                c->job.kind = K_COMPLETION;
                c->job.model = strdup(b->p);
                c->job.ntok = -1;               /* marks "canned body" */
                if (!c->job.model)
                        die("out of memory");
                timer_set(c, now_ms() + m.delay_ms);
                return;
        }
        respond(c, 200, "application/json", b->p, b->len);
}

static void handle_generate(struct conn *c, enum kind kind, json_t *req, const char *path, const char *model,
                            const char *xprio)
{
        struct buf text = {0};
        long ptok = 0;
        if (kind == K_CHAT) {
                json_t *msgs = json_object_get(req, "messages");
                if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
                        respond_error(c, 400, "messages must be a non-empty array", "messages", NULL);
                        return;
                }
                size_t i, last_user = (size_t)-1;
                json_t *msg;
                json_array_foreach(msgs, i, msg) {
                        if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "role"))) {
                                respond_error(c, 400, "each message needs a role", "messages", NULL);
                                return;
                        }
                        long n = content_text(json_object_get(msg, "content"), NULL);
                        if (n < 0) {
                                respond_error(c, 400, "message content must be a string or an array of parts",
                                              "messages", NULL);
                                return;
                        }
                        ptok += n;
                        if (!strcmp(json_string_value(json_object_get(msg, "role")), "user"))
                                last_user = i;
                }
                if (last_user != (size_t)-1)
                        content_text(json_object_get(json_array_get(msgs, last_user), "content"), &text);
        } else {
                json_t *prompt = json_object_get(req, "prompt");
                ptok = prompt ? prompt_text(prompt, &text) : -1;
                if (ptok < 0) {
                        buf_free(&text);
                        respond_error(c, 400, "prompt must be a string or an array", "prompt", NULL);
                        return;
                }
        }
        const char *t = text.p ? text.p : "";
        log_request(path, model, t, xprio);
        struct markers m;
        parse_markers(t, &m);
        buf_free(&text);

        long max_tokens = -1;
        json_t *mt = json_object_get(req, "max_completion_tokens");
        if (!mt || json_is_null(mt))
                mt = json_object_get(req, "max_tokens");
        if (mt && !json_is_null(mt)) {
                if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
                        respond_error(c, 400, "max_tokens must be a positive integer", "max_tokens", NULL);
                        return;
                }
                json_int_t v = json_integer_value(mt);
                max_tokens = v > MAX_TOKENS * 100 ? MAX_TOKENS * 100 : (long)v;
        }
        json_t *st = json_object_get(req, "stream");
        if (st && !json_is_boolean(st) && !json_is_null(st)) {
                respond_error(c, 400, "stream must be a boolean", "stream", NULL);
                return;
        }
        long want = m.tokens >= 0 ? m.tokens : opt_tokens;
        long ntok = want;
        bool capped = false;
        if (max_tokens >= 0 && max_tokens < want) {
                ntok = max_tokens;
                capped = true;
        }
        if (opt_context > 0) {
                long need = ptok + (max_tokens >= 0 ? max_tokens : ntok);
                if (need > opt_context) {
                        char msg[320];
                        snprintf(msg, sizeof(msg), "This model's maximum context length is %ld tokens. However, "
                                 "you requested %ld tokens (%ld in the messages, %ld in the completion). Please "
                                 "reduce the length of the messages or completion.", opt_context, need, ptok,
                                 need - ptok);
                        respond_error(c, 400, msg, kind == K_CHAT ? "messages" : "prompt",
                                      "context_length_exceeded");
                        return;
                }
        }
        if (m.fail) {
                respond_error(c, m.fail, "fake-openai: failure requested by #fail", NULL, NULL);
                return;
        }
        if (m.stall) {
                c->busy = c->stalled = true;
                return;
        }
        struct job *j = &c->job;
        j->kind = kind;
        j->stream = json_is_true(st);
        j->include_usage = json_is_true(json_object_get(json_object_get(req, "stream_options"), "include_usage"));
        j->close_mid = m.close_mid;
        j->capped = capped;
        j->ntok = ntok;
        j->prompt_tokens = ptok;
        j->slow_ms = m.slow_ms;
        j->id = ++next_id;
        j->model = strdup(model);
        if (!j->model)
                die("out of memory");
        c->busy = true;
        long long wait = m.delay_ms;
        if (!j->stream)
                wait += (long long)m.slow_ms * ntok;
        if (m.hold) {
                c->held = true;
                timer_set(c, LLONG_MAX);
                return;
        }
        if (wait > 0) {
                timer_set(c, now_ms() + wait);
                return;
        }
        job_step(c);
}

static void handle_tokenize(struct conn *c, json_t *req)
{
        long n;
        json_t *msgs = json_object_get(req, "messages");
        if (json_is_array(msgs)) {
                n = 0;
                size_t i;
                json_t *msg;
                json_array_foreach(msgs, i, msg) {
                        long k = content_text(json_object_get(msg, "content"), NULL);
                        if (k < 0) {
                                respond_error(c, 400, "bad message content", "messages", NULL);
                                return;
                        }
                        n += k;
                }
        } else {
                json_t *prompt = json_object_get(req, "prompt");
                n = prompt ? prompt_text(prompt, NULL) : -1;
                if (n < 0) {
                        respond_error(c, 400, "prompt must be a string or an array", "prompt", NULL);
                        return;
                }
        }
        struct buf *b = &scratch;
        b->len = 0;
        buf_printf(b, "{\"count\":%ld,\"max_model_len\":%ld,\"tokens\":[", n, opt_context);
        for (long i = 0; i < n; i++)
                buf_printf(b, i ? ",%ld" : "%ld", i + 1000);
        buf_str(b, "]}");
        respond(c, 200, "application/json", b->p, b->len);
}

struct request {
        char method[8];
        char path[256];
        const char *body;       /* points into the conn's input or into dechunked */
        size_t body_len;
        char xprio[32];         /* X-Priority header, "" if none */
};

static void handle(struct conn *c, struct request *r)
{
        nrequests++;
        bool get = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
        if (!strcmp(r->path, "/fake/stats") && get) {
                struct buf *b = &scratch;
                b->len = 0;
                buf_str(b, "{\"name\":");
                buf_json_str(b, opt_name);
                int held = 0;
                for (struct conn *h = timed_head; h; h = h->tnext)
                        held += h->held;
                buf_printf(b, ",\"requests\":%llu,\"open\":%d,\"held\":%d,\"failing\":%s}", nrequests,
                           nconns, held, opt_fail_all ? "true" : "false");
                respond(c, 200, "application/json", b->p, b->len);
                return;
        }
        if (!strcmp(r->path, "/fake/fail-all") && post) {
                opt_fail_all = true;
                respond(c, 200, "application/json", "{}", 2);
                return;
        }
        if (!strcmp(r->path, "/fake/release") && post) {
                int n = 0;
                long long now = now_ms();
                for (struct conn *h = timed_head; h; h = h->tnext)
                        if (h->held) {
                                h->held = false;
                                h->wake_at = now;
                                n++;
                        }
                char body[64];
                int len = snprintf(body, sizeof(body), "{\"released\":%d}", n);
                respond(c, 200, "application/json", body, (size_t)len);
                return;
        }
        if (!strcmp(r->path, "/fake/recover") && post) {
                opt_fail_all = false;
                respond(c, 200, "application/json", "{}", 2);
                return;
        }
        if (opt_fail_all) {
                respond_error(c, 503, "fake-openai: this upstream is failing (--fail-all)", NULL, NULL);
                return;
        }
        if (!strcmp(r->path, "/health")) {
                respond(c, 200, "application/json", "", 0);
                return;
        }
        if (!strcmp(r->path, "/v1/models")) {
                if (!get) {
                        respond_error(c, 405, "use GET", NULL, NULL);
                        return;
                }
                handle_models(c);
                return;
        }
        enum { P_CHAT, P_COMPL, P_EMB, P_TOK, P_NONE } which = P_NONE;
        if (!strcmp(r->path, "/v1/chat/completions"))
                which = P_CHAT;
        else if (!strcmp(r->path, "/v1/completions"))
                which = P_COMPL;
        else if (!strcmp(r->path, "/v1/embeddings"))
                which = P_EMB;
        else if (!strcmp(r->path, "/tokenize"))
                which = P_TOK;
        if (which == P_NONE) {
                respond_error(c, 404, "no such endpoint", NULL, "not_found");
                return;
        }
        if (!post) {
                respond_error(c, 405, "use POST", NULL, NULL);
                return;
        }
        json_error_t jerr;
        json_t *req = json_loadb(r->body, r->body_len, 0, &jerr);
        if (!req || !json_is_object(req)) {
                char msg[256];
                snprintf(msg, sizeof(msg), "the body is not a JSON object: %s", req ? "wrong type" : jerr.text);
                json_decref(req);
                respond_error(c, 400, msg, NULL, NULL);
                return;
        }
        json_t *jm = json_object_get(req, "model");
        const char *model = json_string_value(jm);
        if (!model && which != P_TOK) {
                json_decref(req);
                respond_error(c, 400, "model must be a string", "model", NULL);
                return;
        }
        if (model && !model_ok(model)) {
                char msg[300];
                snprintf(msg, sizeof(msg), "The model `%.200s` does not exist.", model);
                json_decref(req);
                respond_error(c, 404, msg, "model", "model_not_found");
                return;
        }
        const char *xp = r->xprio[0] ? r->xprio : NULL;
        switch (which) {
        case P_CHAT: handle_generate(c, K_CHAT, req, r->path, model, xp); break;
        case P_COMPL: handle_generate(c, K_COMPLETION, req, r->path, model, xp); break;
        case P_EMB: handle_embeddings(c, req, model, xp); break;
        default: handle_tokenize(c, req); break;
        }
        json_decref(req);
}

/* ---- HTTP request parsing ---- */

static bool hdr_is(const char *line, size_t len, const char *name, const char **ret_val, size_t *ret_len)
{
        size_t n = strlen(name);
        if (len <= n || strncasecmp(line, name, n) || line[n] != ':')
                return false;
        const char *v = line + n + 1;
        const char *end = line + len;
        while (v < end && (*v == ' ' || *v == '\t'))
                v++;
        while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
                end--;
        *ret_val = v;
        *ret_len = (size_t)(end - v);
        return true;
}

/* Decodes a chunked body starting at p (n bytes available) into out.
 * Returns bytes consumed when complete, 0 if more is needed, -1 if bad. */
static long dechunk(const char *p, size_t n, struct buf *out, size_t max)
{
        size_t i = 0;
        out->len = 0;
        for (;;) {
                const char *nl = memmem(p + i, n - i, "\r\n", 2);
                if (!nl)
                        return n - i > 32 ? -1 : 0;
                char *end;
                unsigned long sz = strtoul(p + i, &end, 16);
                if (end == p + i)
                        return -1;
                size_t data = (size_t)(nl - p) + 2;
                if (sz > max || out->len + sz > max)
                        return -1;
                if (sz == 0) {
                        /* no trailers supported: expect the final CRLF */
                        if (n < data + 2)
                                return 0;
                        if (memcmp(p + data, "\r\n", 2))
                                return -1;
                        return (long)(data + 2);
                }
                if (n < data + sz + 2)
                        return 0;
                buf_add(out, p + data, sz);
                if (memcmp(p + data + sz, "\r\n", 2))
                        return -1;
                i = data + sz + 2;
        }
}

/* Parses and answers requests waiting in c's input.  Returns -1 if c was
 * closed. */
static int process(struct conn *c)
{
        static struct buf dechunked;
        while (!c->busy && !c->close_after) {
                const char *p = c->in.p + c->in_off;
                size_t avail = c->in.len - c->in_off;
                if (avail == 0)
                        break;
                const char *eoh = memmem(p, avail, "\r\n\r\n", 4);
                if (!eoh) {
                        if (avail > MAX_HEADER) {
                                c->close_after = true;
                                respond_error(c, 400, "request headers too large", NULL, NULL);
                        }
                        break;
                }
                size_t hlen = (size_t)(eoh - p) + 4;
                if (hlen > MAX_HEADER) {
                        c->close_after = true;
                        respond_error(c, 400, "request headers too large", NULL, NULL);
                        break;
                }
                struct request r = {0};
                const char *le = memmem(p, hlen, "\r\n", 2);
                const char *sp1 = memchr(p, ' ', (size_t)(le - p));
                const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(le - sp1 - 1)) : NULL;
                if (!sp1 || !sp2 || (size_t)(sp1 - p) >= sizeof(r.method)) {
                        c->close_after = true;
                        respond_error(c, 400, "bad request line", NULL, NULL);
                        break;
                }
                memcpy(r.method, p, (size_t)(sp1 - p));
                size_t plen = (size_t)(sp2 - sp1 - 1);
                const char *q = memchr(sp1 + 1, '?', plen);
                if (q)
                        plen = (size_t)(q - sp1 - 1);
                if (plen >= sizeof(r.path)) {
                        c->close_after = true;
                        respond_error(c, 404, "path too long", NULL, NULL);
                        break;
                }
                memcpy(r.path, sp1 + 1, plen);
                bool http10 = (size_t)(le - sp2 - 1) == 8 && !memcmp(sp2 + 1, "HTTP/1.0", 8);
                bool keep = !http10, chunked = false, expect = false;
                long long clen = -1;
                for (const char *l = le + 2; l < eoh;) {
                        const char *e = memmem(l, (size_t)(eoh + 2 - l), "\r\n", 2);
                        size_t ll = (size_t)(e - l);
                        const char *v;
                        size_t vl;
                        if (hdr_is(l, ll, "content-length", &v, &vl)) {
                                char num[24];
                                if (vl == 0 || vl >= sizeof(num)) {
                                        clen = -2;
                                } else {
                                        memcpy(num, v, vl);
                                        num[vl] = 0;
                                        char *end;
                                        clen = strtoll(num, &end, 10);
                                        if (*end || clen < 0)
                                                clen = -2;
                                }
                        } else if (hdr_is(l, ll, "transfer-encoding", &v, &vl)) {
                                chunked = vl == 7 && !strncasecmp(v, "chunked", 7);
                                if (!chunked)
                                        clen = -2;
                        } else if (hdr_is(l, ll, "connection", &v, &vl)) {
                                if (vl == 5 && !strncasecmp(v, "close", 5))
                                        keep = false;
                                else if (vl == 10 && !strncasecmp(v, "keep-alive", 10))
                                        keep = true;
                        } else if (hdr_is(l, ll, "expect", &v, &vl)) {
                                expect = vl == 12 && !strncasecmp(v, "100-continue", 12);
                        } else if (hdr_is(l, ll, "x-priority", &v, &vl)) {
                                snprintf(r.xprio, sizeof(r.xprio), "%.*s", (int)vl, v);
                        }
                        l = e + 2;
                }
                if (clen == -2) {
                        c->close_after = true;
                        respond_error(c, 400, "bad Content-Length or Transfer-Encoding", NULL, NULL);
                        break;
                }
                if (clen > (long long)opt_max_body) {
                        c->close_after = true;
                        respond_error(c, 413, "request body too large", NULL, NULL);
                        break;
                }
                size_t total;
                if (chunked) {
                        long used = dechunk(p + hlen, avail - hlen, &dechunked, opt_max_body);
                        if (used < 0) {
                                c->close_after = true;
                                respond_error(c, 400, "bad chunked body (or too large)", NULL, NULL);
                                break;
                        }
                        if (used == 0) {
                                if (expect && !c->continue_sent) {
                                        buf_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
                                        c->continue_sent = true;
                                }
                                break;
                        }
                        r.body = dechunked.p ? dechunked.p : "";
                        r.body_len = dechunked.len;
                        total = hlen + (size_t)used;
                } else {
                        size_t bl = clen > 0 ? (size_t)clen : 0;
                        if (avail - hlen < bl) {
                                if (expect && !c->continue_sent) {
                                        buf_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
                                        c->continue_sent = true;
                                }
                                break;
                        }
                        r.body = p + hlen;
                        r.body_len = bl;
                        total = hlen + bl;
                }
                c->continue_sent = false;
                if (!keep)
                        c->close_after = true;
                /* handle() may arm a job; c stays valid until conn_flush */
                handle(c, &r);
                c->in_off += total;
                if (c->in_off == c->in.len)
                        c->in.len = c->in_off = 0;
                if (c->out.len - c->out_off > 1024 * 1024)
                        break;  /* let the client read first */
        }
        if (c->out.len > c->out_off)
                return conn_flush(c);
        if (c->close_after && !c->busy) {
                conn_close(c);
                return -1;
        }
        return 0;
}

static void on_readable(struct conn *c)
{
        for (;;) {
                if (c->in_off > 0 && c->in_off == c->in.len)
                        c->in.len = c->in_off = 0;
                if (c->in.len - c->in_off > MAX_HEADER + opt_max_body * 2 + 64) {
                        conn_close(c);  /* a client that sends and never reads */
                        return;
                }
                if (c->in_off > 0 && c->in.cap - c->in.len < 4096) {
                        memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
                        c->in.len -= c->in_off;
                        c->in_off = 0;
                }
                buf_reserve(&c->in, 16384);
                ssize_t n = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1);
                if (n > 0) {
                        c->in.len += (size_t)n;
                        c->in.p[c->in.len] = 0;
                        if ((size_t)n < c->in.cap - c->in.len)
                                break;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                conn_close(c);  /* EOF or error: the client is gone */
                return;
        }
        process(c);
}

static void on_timer(struct conn *c)
{
        timer_clear(c);
        if (c->job.ntok == -1) {        /* canned embeddings body */
                respond(c, 200, "application/json", c->job.model, strlen(c->job.model));
                job_done(c);
                if (conn_flush(c) < 0)
                        return;
                process(c);
                return;
        }
        job_step(c);
        if (conn_flush(c) < 0)
                return;
        if (!c->busy)
                process(c);
}

static void on_accept(int lfd)
{
        for (;;) {
                int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return;
                }
                if (nconns >= MAX_CONNS) {
                        close(fd);
                        continue;
                }
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                struct conn *c = calloc(1, sizeof(*c));
                if (!c)
                        die("out of memory");
                c->fd = fd;
                struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
                if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                        close(fd);
                        free(c);
                        continue;
                }
                nconns++;
        }
}

static void usage(void)
{
        fprintf(stderr, "usage: fake-openai --listen HOST:PORT [--model NAME]... [--name ID] [--log FILE]\n"
                        "                   [--fail-all] [--context N] [--tokens N] [--dims N] [--max-body BYTES]\n"
                        "                   [--die-with-parent]\n");
        exit(2);
}

static long num_arg(const char *s, long lo, long hi)
{
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || *end || end == s || v < lo || v > hi)
                usage();
        return v;
}

int main(int argc, char **argv)
{
        const char *listen_at = NULL;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                bool has = i + 1 < argc;
                if (!strcmp(a, "--listen") && has)
                        listen_at = argv[++i];
                else if (!strcmp(a, "--model") && has && opt_nmodels < MAX_MODELS)
                        opt_models[opt_nmodels++] = argv[++i];
                else if (!strcmp(a, "--name") && has)
                        opt_name = argv[++i];
                else if (!strcmp(a, "--log") && has) {
                        opt_log = fopen(argv[++i], "a");
                        if (!opt_log)
                                die("cannot open the --log file");
                } else if (!strcmp(a, "--die-with-parent")) {
                        /* the parent may already be gone: then exit now */
                        pid_t parent = getppid();
                        if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
                                return 1;
                } else if (!strcmp(a, "--fail-all"))
                        opt_fail_all = true;
                else if (!strcmp(a, "--context") && has)
                        opt_context = num_arg(argv[++i], 0, 100000000);
                else if (!strcmp(a, "--tokens") && has)
                        opt_tokens = num_arg(argv[++i], 0, MAX_TOKENS);
                else if (!strcmp(a, "--dims") && has)
                        opt_dims = num_arg(argv[++i], 1, MAX_DIMS);
                else if (!strcmp(a, "--max-body") && has)
                        opt_max_body = (size_t)num_arg(argv[++i], 1, 256L * 1024 * 1024);
                else
                        usage();
        }
        if (!listen_at)
                usage();
        for (const char *s = opt_name; *s; s++)
                if ((unsigned char)*s < 0x21 || *s == 0x7f)
                        die("--name must be printable without spaces");
        const char *colon = strrchr(listen_at, ':');
        if (!colon)
                usage();
        char host[64];
        snprintf(host, sizeof(host), "%.*s", (int)(colon - listen_at), listen_at);
        long port = num_arg(colon + 1, 0, 65535);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (inet_pton(AF_INET, host[0] ? host : "127.0.0.1", &sa.sin_addr) != 1)
                die("--listen needs an IPv4 address");
        signal(SIGPIPE, SIG_IGN);
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4096) < 0) {
                perror("fake-openai: listen");
                return 1;
        }
        socklen_t sl = sizeof(sa);
        getsockname(lfd, (struct sockaddr *)&sa, &sl);
        epfd = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0)
                die("epoll failed");
        printf("ready %d\n", ntohs(sa.sin_port));
        fflush(stdout);

        struct epoll_event evs[256];
        for (;;) {
                int timeout = -1;
                long long now = 0;
                if (timed_head) {
                        now = now_ms();
                        long long soonest = timed_head->wake_at;
                        for (struct conn *c = timed_head; c; c = c->tnext)
                                if (c->wake_at < soonest)
                                        soonest = c->wake_at;
                        if (soonest == LLONG_MAX)
                                timeout = -1;   /* only #hold requests */
                        else
                                timeout = soonest <= now ? 0 : soonest - now > 60000 ? 60000 : (int)(soonest - now);
                }
                int n = epoll_wait(epfd, evs, 256, timeout);
                if (n < 0 && errno != EINTR)
                        die("epoll_wait failed");
                for (int i = 0; i < n; i++) {
                        struct conn *c = evs[i].data.ptr;
                        if (!c) {
                                on_accept(lfd);
                                continue;
                        }
                        uint32_t e = evs[i].events;
                        if (e & EPOLLOUT) {
                                if (conn_flush(c) < 0)
                                        continue;
                                if (!c->busy && c->in.len > c->in_off) {
                                        if (process(c) < 0)
                                                continue;
                                }
                        }
                        if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                                on_readable(c);
                }
                if (timed_head) {
                        now = now_ms();
                        /* one pass; a fired conn may be freed, so restart after each */
                        for (struct conn *c = timed_head; c;) {
                                if (c->wake_at <= now) {
                                        on_timer(c);
                                        c = timed_head;
                                        continue;
                                }
                                c = c->tnext;
                        }
                }
        }
}
