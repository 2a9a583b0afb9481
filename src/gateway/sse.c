/* sse.c - the gateway's pure helpers: the SSE filter of streamed answers,
 * the prompt token estimate, the exact count's helpers (when to ask an
 * upstream's /tokenize, what to send it, reading its answer) and
 * X-Priority parsing (see gateway.h).
 *
 * The SSE filter works on whole lines: a line is passed on as soon as its
 * newline arrives, so nothing waits for more than the rest of one line.
 * Only "data:" lines that mention "usage" are parsed as JSON.
 */
#include "gateway/gateway.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SSE_LINE_MAX ((size_t)1 << 20)

static int64_t text_tokens(size_t bytes) {
        return (int64_t)((bytes + 3) / 4);
}

static size_t content_bytes(const json_t *c) {
        if (json_is_string(c))
                return json_string_length(c);
        size_t n = 0, i;
        json_t *v;
        if (json_is_array(c))
                json_array_foreach(c, i, v) {
                        if (json_is_string(v))
                                n += json_string_length(v);
                        else if (json_is_object(v) && json_is_string(json_object_get(v, "text")))
                                n += json_string_length(json_object_get(v, "text"));
                        else if (json_is_integer(v))
                                n += 4; /* a token id */
                        else if (json_is_array(v))
                                n += 4 * json_array_size(v);
                }
        return n;
}

int64_t gp_gw_estimate_tokens(const json_t *req) {
        const json_t *msgs = json_object_get(req, "messages");
        int64_t t = 0;
        if (json_is_array(msgs)) {
                size_t i;
                json_t *m;
                json_array_foreach(msgs, i, m) t += 4 + text_tokens(content_bytes(json_object_get(m, "content")));
                return t + 3;
        }
        const json_t *p = json_object_get(req, "prompt");
        if (!p)
                p = json_object_get(req, "input");
        return text_tokens(content_bytes(p));
}

bool gp_gw_near_context(int64_t estimate, int64_t max_tokens, int64_t context) {
        if (estimate > context || max_tokens > context)
                return true; /* (max_tokens comes from the client: keep the sum below from overflowing) */
        /* est + max > 0.8 * context, in integers */
        return (estimate + max_tokens) * 5 > context * 4;
}

char *gp_gw_tokenize_body(const json_t *req) {
        const json_t *model = json_object_get(req, "model");
        const json_t *msgs = json_object_get(req, "messages");
        const json_t *prompt = json_object_get(req, "prompt");
        json_t *o = NULL;
        if (!json_is_string(model))
                return NULL;
        if (json_is_array(msgs))
                o = json_pack("{s:O,s:O}", "model", model, "messages", msgs);
        else if (json_is_string(prompt))
                o = json_pack("{s:O,s:O}", "model", model, "prompt", prompt);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        return s;
}

int gp_gw_tokenize_count(const char *p, size_t n, int64_t *ret_count) {
        static const char key[] = "\"count\"";
        const size_t klen = sizeof(key) - 1;
        if (!p)
                return -ENOENT;
        const char *end = p + n;
        while ((size_t)(end - p) > klen) {
                const char *k = memmem(p, (size_t)(end - p), key, klen);
                if (!k)
                        break;
                const char *v = k + klen;
                while (v < end && (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n'))
                        v++;
                if (v == end || *v != ':') {
                        p = k + 1; /* a string "count", not the key */
                        continue;
                }
                v++;
                while (v < end && (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n'))
                        v++;
                int64_t x = 0;
                const char *d = v;
                while (v < end && *v >= '0' && *v <= '9' && v - d < 12)
                        x = x * 10 + (*v++ - '0');
                if (v == d || v == end || (*v >= '0' && *v <= '9'))
                        return -EINVAL; /* not a number, cut short, or over 12 digits */
                if (*v != ',' && *v != '}' && *v != ' ' && *v != '\t' && *v != '\r' && *v != '\n')
                        return -EINVAL; /* 1.5, 1e3, ... */
                *ret_count = x;
                return 0;
        }
        return -ENOENT;
}

int gp_gw_context_message(char *buf, size_t size, int64_t context, int64_t prompt, int64_t max_tokens) {
        int n = snprintf(buf, size,
                         "This model's maximum context length is %" PRId64 " tokens. However, you requested %" PRId64
                         " tokens (%" PRId64 " in the messages, %" PRId64
                         " in the completion). Please reduce the length of the messages or completion.",
                         context, max_tokens > INT64_MAX - prompt ? INT64_MAX : prompt + max_tokens, prompt,
                         max_tokens);
        return n < 0 || (size_t)n >= size ? -E2BIG : 0;
}

int gp_gw_parse_priority(const char *s) {
        static const struct {
                const char *name;
                int tier;
        } names[] = {{"critical", 0}, {"high", 2}, {"normal", 5}, {"low", 7}, {"background", 9}};
        if (!s)
                return -EINVAL;
        if ((s[0] == 'P' || s[0] == 'p') && s[1] >= '0' && s[1] <= '9' && !s[2])
                return s[1] - '0';
        if (s[0] >= '0' && s[0] <= '9' && !s[1])
                return s[0] - '0';
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (!strcasecmp(s, names[i].name))
                        return names[i].tier;
        return -EINVAL;
}

/* One complete line (without its '\n', maybe with '\r'). */
static int sse_line(gp_gw_sse *s, const char *p, size_t n, int (*out)(void *, const char *, size_t), void *ud) {
        size_t body = n && p[n - 1] == '\r' ? n - 1 : n;
        if (body == 0) {
                if (s->drop_blank) {
                        s->drop_blank = false;
                        return 0;
                }
                return out(ud, p, n + 1);
        }
        s->drop_blank = false;
        if (body > 5 && !memcmp(p, "data:", 5)) {
                const char *d = p + 5;
                size_t dn = body - 5;
                while (dn && *d == ' ') {
                        d++;
                        dn--;
                }
                bool done = dn == 6 && !memcmp(d, "[DONE]", 6);
                if (!done && memmem(d, dn, "\"usage\"", 7)) {
                        json_t *j = json_loadb(d, dn, 0, NULL);
                        json_t *u = j ? json_object_get(j, "usage") : NULL;
                        if (json_is_object(u)) {
                                s->usage_seen = true;
                                s->prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
                                s->completion_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
                                json_t *ch = json_object_get(j, "choices");
                                bool usage_only = !ch || (json_is_array(ch) && json_array_size(ch) == 0);
                                if (s->strip && usage_only) {
                                        json_decref(j);
                                        s->drop_blank = true;
                                        return 0;
                                }
                                if (!usage_only)
                                        s->chunks++;
                        } else if (j) {
                                s->chunks++;
                        }
                        json_decref(j);
                } else if (!done) {
                        s->chunks++;
                }
        }
        return out(ud, p, n + 1);
}

int gp_gw_sse_feed(gp_gw_sse *s, const char *p, size_t n, int (*out)(void *, const char *, size_t), void *ud) {
        while (n) {
                const char *nl = memchr(p, '\n', n);
                if (!nl) {
                        if (s->len + n > SSE_LINE_MAX)
                                return -E2BIG;
                        if (s->len + n > s->cap) {
                                size_t cap = s->cap ? s->cap : 256;
                                while (cap < s->len + n)
                                        cap *= 2;
                                char *l = realloc(s->line, cap);
                                if (!l)
                                        return -ENOMEM;
                                s->line = l;
                                s->cap = cap;
                        }
                        memcpy(s->line + s->len, p, n);
                        s->len += n;
                        return 0;
                }
                size_t k = (size_t)(nl - p);
                int r;
                if (s->len) {
                        /* finish the carried line: it needs its own copy with the newline */
                        if (s->len + k + 1 > SSE_LINE_MAX)
                                return -E2BIG;
                        if (s->len + k + 1 > s->cap) {
                                size_t cap = s->cap ? s->cap : 256;
                                while (cap < s->len + k + 1)
                                        cap *= 2;
                                char *l = realloc(s->line, cap);
                                if (!l)
                                        return -ENOMEM;
                                s->line = l;
                                s->cap = cap;
                        }
                        memcpy(s->line + s->len, p, k + 1);
                        size_t ln = s->len + k;
                        s->len = 0;
                        r = sse_line(s, s->line, ln, out, ud);
                } else {
                        r = sse_line(s, p, k, out, ud);
                }
                if (r < 0)
                        return r;
                p += k + 1;
                n -= k + 1;
        }
        return 0;
}

int gp_gw_sse_end(gp_gw_sse *s, int (*out)(void *, const char *, size_t), void *ud) {
        if (!s->len)
                return 0;
        size_t n = s->len;
        s->len = 0;
        return out(ud, s->line, n);
}

void gp_gw_sse_done(gp_gw_sse *s) {
        free(s->line);
        s->line = NULL;
        s->len = s->cap = 0;
}
