/* sse.c - the gateway's pure helpers: the SSE filter of streamed answers,
 * the prompt token estimate, the exact count's helpers (when to ask an
 * upstream's /tokenize, what to send it, reading its answer) and
 * X-Priority parsing (see gateway.h).
 *
 * The SSE filter works on whole lines: a line is passed on as soon as its
 * newline arrives, so nothing waits for more than the rest of one line.
 * Only "data:" lines that mention "usage" are parsed as JSON: by a reader
 * of its own for the plain shapes upstreams send (usage_fast), by jansson
 * for the rest.
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

/* What the filter needs of a "data:" line that mentions "usage": whether
 * it is JSON at all, whether its top-level "usage" is an object (with
 * prompt_tokens and completion_tokens, 0 where not integers, as
 * json_integer_value reads them) and whether its "choices" are absent or
 * empty (a usage-only chunk).  Duplicate keys: the last one counts, as in
 * a jansson object. */
typedef struct line_usage {
        bool json, usage, usage_only;
        int64_t prompt, completion;
} line_usage;

/* The fast reader: a subset of JSON read in place, without building a
 * tree (json_loadb of every usage chunk was the largest user-space cost of
 * a streamed request).  It answers only for text it is sure jansson reads
 * the same way: ASCII strings without escapes, integers of at most 18
 * digits, reals without an exponent, nesting up to 32.  Anything else
 * (escapes, other bytes, errors, deeper nesting) is -1, and the caller
 * asks jansson, so what it accepts gives jansson's answer and what it
 * refuses costs what it cost before. */
typedef struct jscan {
        const char *p, *end;
        int depth;
} jscan;

typedef struct jval {
        char type; /* 'o' object, 'a' array, 'i' integer, 'x' anything else */
        size_t items;
        int64_t i;
        const char *at; /* an object's '{' */
} jval;

typedef int jkey_fn(void *ud, const char *k, size_t kn, const jval *v);

static void js_ws(jscan *s) {
        while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
                s->p++;
}

static int js_string(jscan *s, const char **k, size_t *kn) {
        if (s->p >= s->end || *s->p != '"')
                return -1;
        const char *a = ++s->p;
        for (; s->p < s->end; s->p++) {
                unsigned char c = (unsigned char)*s->p;
                if (c == '"') {
                        *k = a;
                        *kn = (size_t)(s->p++ - a);
                        return 0;
                }
                if (c == '\\' || c < 0x20 || c >= 0x80)
                        return -1;
        }
        return -1;
}

static bool js_digit(const jscan *s) {
        return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

static int js_number(jscan *s, jval *v) {
        bool neg = s->p < s->end && *s->p == '-';
        if (neg)
                s->p++;
        const char *d = s->p;
        while (js_digit(s))
                s->p++;
        size_t nd = (size_t)(s->p - d);
        if (nd == 0 || nd > 18 || (nd > 1 && *d == '0'))
                return -1;
        v->type = 'i';
        if (s->p < s->end && *s->p == '.') {
                s->p++;
                if (!js_digit(s))
                        return -1;
                while (js_digit(s))
                        s->p++;
                v->type = 'x';
        }
        if (s->p < s->end && (*s->p == 'e' || *s->p == 'E'))
                return -1;
        if (v->type == 'i') {
                int64_t x = 0;
                for (const char *c = d; c < d + nd; c++)
                        x = x * 10 + (*c - '0');
                v->i = neg ? -x : x;
        }
        return 0;
}

static int js_value(jscan *s, jval *v, jkey_fn *key, void *ud);

/* An object (s at its '{'): key(ud, ...) for each member when key is set. */
static int js_object(jscan *s, jval *v, jkey_fn *key, void *ud) {
        if (++s->depth > 32)
                return -1;
        v->type = 'o';
        v->at = s->p++;
        js_ws(s);
        if (s->p < s->end && *s->p == '}') {
                s->p++;
                s->depth--;
                return 0;
        }
        for (;;) {
                const char *k;
                size_t kn;
                jval m = {0};
                js_ws(s);
                if (js_string(s, &k, &kn) < 0)
                        return -1;
                js_ws(s);
                if (s->p >= s->end || *s->p != ':')
                        return -1;
                s->p++;
                if (js_value(s, &m, NULL, NULL) < 0 || (key && key(ud, k, kn, &m) < 0))
                        return -1;
                js_ws(s);
                if (s->p >= s->end)
                        return -1;
                if (*s->p++ == '}')
                        break;
                if (s->p[-1] != ',')
                        return -1;
        }
        s->depth--;
        return 0;
}

static int js_array(jscan *s, jval *v) {
        if (++s->depth > 32)
                return -1;
        v->type = 'a';
        v->items = 0;
        s->p++;
        js_ws(s);
        if (s->p < s->end && *s->p == ']') {
                s->p++;
                s->depth--;
                return 0;
        }
        for (;;) {
                jval m = {0};
                if (js_value(s, &m, NULL, NULL) < 0)
                        return -1;
                v->items++;
                js_ws(s);
                if (s->p >= s->end)
                        return -1;
                if (*s->p++ == ']')
                        break;
                if (s->p[-1] != ',')
                        return -1;
        }
        s->depth--;
        return 0;
}

static int js_word(jscan *s, jval *v, const char *w, size_t n) {
        if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
                return -1;
        s->p += n;
        v->type = 'x';
        return 0; /* what follows is judged by the container ("nullx" is refused there) */
}

static int js_value(jscan *s, jval *v, jkey_fn *key, void *ud) {
        js_ws(s);
        if (s->p >= s->end)
                return -1;
        const char *k;
        size_t kn;
        switch (*s->p) {
        case '{':
                return js_object(s, v, key, ud);
        case '[':
                return js_array(s, v);
        case '"':
                v->type = 'x';
                return js_string(s, &k, &kn);
        case 't':
                return js_word(s, v, "true", 4);
        case 'f':
                return js_word(s, v, "false", 5);
        case 'n':
                return js_word(s, v, "null", 4);
        default:
                return *s->p == '-' || js_digit(s) ? js_number(s, v) : -1;
        }
}

static bool js_is(const char *k, size_t kn, const char *name) {
        size_t n = strlen(name);
        return kn == n && !memcmp(k, name, n);
}

/* The members of the usage object. */
static int usage_key(void *ud, const char *k, size_t kn, const jval *v) {
        line_usage *r = ud;
        int64_t x = v->type == 'i' ? v->i : 0;
        if (js_is(k, kn, "prompt_tokens"))
                r->prompt = x;
        else if (js_is(k, kn, "completion_tokens"))
                r->completion = x;
        return 0;
}

typedef struct top_keys {
        const char *end;
        line_usage *r;
        bool choices;     /* a "choices" member was seen */
        bool choices_empty;
} top_keys;

static int top_key(void *ud, const char *k, size_t kn, const jval *v) {
        top_keys *t = ud;
        if (js_is(k, kn, "usage")) {
                t->r->usage = v->type == 'o';
                t->r->prompt = t->r->completion = 0;
                if (t->r->usage) {
                        /* read its members (a second pass over a few bytes, already checked) */
                        jscan u = {.p = v->at, .end = t->end};
                        jval o;
                        return js_object(&u, &o, usage_key, t->r);
                }
        } else if (js_is(k, kn, "choices")) {
                t->choices = true;
                t->choices_empty = v->type == 'a' && v->items == 0;
        }
        return 0;
}

static int usage_fast(const char *d, size_t dn, line_usage *r) {
        jscan s = {.p = d, .end = d + dn};
        top_keys t = {.end = d + dn, .r = r};
        jval v;
        *r = (line_usage){0};
        js_ws(&s);
        if (s.p >= s.end || *s.p != '{' || js_object(&s, &v, top_key, &t) < 0)
                return -1;
        js_ws(&s);
        if (s.p != s.end)
                return -1;
        r->json = true;
        r->usage_only = !t.choices || t.choices_empty;
        return 0;
}

/* The same read by jansson, for the lines usage_fast does not take. */
static void usage_jansson(const char *d, size_t dn, line_usage *r) {
        *r = (line_usage){0};
        json_t *j = json_loadb(d, dn, 0, NULL);
        json_t *u = j ? json_object_get(j, "usage") : NULL;
        r->json = j != NULL;
        if (json_is_object(u)) {
                r->usage = true;
                r->prompt = json_integer_value(json_object_get(u, "prompt_tokens"));
                r->completion = json_integer_value(json_object_get(u, "completion_tokens"));
                json_t *ch = json_object_get(j, "choices");
                r->usage_only = !ch || (json_is_array(ch) && json_array_size(ch) == 0);
        }
        json_decref(j);
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
                        line_usage r;
                        if (usage_fast(d, dn, &r) < 0)
                                usage_jansson(d, dn, &r);
                        if (r.usage) {
                                s->usage_seen = true;
                                s->prompt_tokens = r.prompt;
                                s->completion_tokens = r.completion;
                                if (s->strip && r.usage_only) {
                                        s->drop_blank = true;
                                        return 0;
                                }
                                if (!r.usage_only)
                                        s->chunks++;
                        } else if (r.json) {
                                s->chunks++;
                        }
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
