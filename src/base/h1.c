/* h1.c - HTTP/1.1 message framing (RFC 9112): request and response heads
 * and chunked bodies (see h1.h for the contract).
 *
 * A head is read one line at a time (memchr finds each line's end) and each
 * line is checked as soon as it is whole, so a bad head is refused as soon
 * as its bad line has arrived.  The last, partial line is checked too, as
 * far as it goes ("XTTP/1.1" is refused without waiting for its newline),
 * but only for what no later byte could repair: a prefix of a valid head is
 * always -EAGAIN, never -EINVAL.  Nothing at or after min(n, max) and
 * nothing after the head's blank line is read, so the result of a
 * successful parse depends on the head alone, whatever follows it.
 *
 * The chunked decoder is a byte-driven state machine, except that a
 * chunk's data goes to out() in one call per contiguous span, so bytes may
 * arrive split anywhere.
 *
 * Hot path (~40k heads/s): one pass, table lookups, no libc parsers, no
 * allocation. */
#include "base/h1.h"

#include <errno.h>
#include <string.h>

#define LEADING_EMPTY_LINES_MAX 8 /* before a request line (RFC 9112 2.2) */
#define CHUNK_LINE_MAX 4096       /* a chunk size (+ extensions) or trailer line */

/* RFC 9110 5.6.2 tchar: "!#$%&'*+-.^_`|~", DIGIT, ALPHA. */
static const unsigned char tchar[256] = {
        ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
        ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
        ['`'] = 1, ['|'] = 1, ['~'] = 1,
        ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1,
};

static bool is_tchar(char c) {
        return tchar[(unsigned char)c];
}

/* A byte no field value, reason phrase or chunk extension may hold: the
 * controls but HTAB, and DEL.  (A CR that is not part of a line's end is
 * one of them: that is what refuses a bare CR.) */
static bool is_ctl(char c) {
        unsigned char u = (unsigned char)c;
        return (u < 0x20 && u != '\t') || u == 0x7f;
}

static bool is_ows(char c) {
        return c == ' ' || c == '\t';
}

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static char lower(char c) {
        return c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c;
}

/* Is a[0..an) equal to b[0..bn), ignoring ASCII case? */
static bool eq_ci(const char *a, size_t an, const char *b, size_t bn) {
        if (an != bn)
                return false;
        for (size_t i = 0; i < an; i++)
                if (lower(a[i]) != lower(b[i]))
                        return false;
        return true;
}

#define EQ_LIT(s, n, lit) eq_ci((s), (n), (lit), sizeof(lit) - 1)

/* The line that starts at p[pos], within p[0..lim): *s and *len get its
 * bytes without the LF and one CR before it, *next the offset after its
 * LF.  false when no LF has arrived: the line is then partial, and a CR at
 * its very end is dropped too, as it may be the start of a CRLF. */
static bool next_line(const char *p, size_t pos, size_t lim, const char **s, size_t *len, size_t *next) {
        const char *lf = pos < lim ? memchr(p + pos, '\n', lim - pos) : NULL;
        size_t end = lf ? (size_t)(lf - p) : lim;
        *s = p + pos;
        *len = end - pos;
        if (*len > 0 && p[end - 1] == '\r')
                (*len)--;
        *next = lf ? end + 1 : lim;
        return lf != NULL;
}

/* What the caller of a head parser hears when the head has not ended. */
static int not_ended(size_t n, size_t max) {
        return n < max ? -EAGAIN : -E2BIG;
}

/* "HTTP/1.0" or "HTTP/1.1" at s[0..len) (len may be short when the line is
 * partial): the minor version, -EAGAIN for a valid prefix, or -EINVAL. */
static int version(const char *s, size_t len) {
        static const char v[] = "HTTP/1.";
        for (size_t i = 0; i < sizeof(v) - 1; i++) {
                if (i == len)
                        return -EAGAIN;
                if (s[i] != v[i])
                        return -EINVAL;
        }
        if (len == sizeof(v) - 1)
                return -EAGAIN;
        if (s[7] != '0' && s[7] != '1')
                return -EINVAL;
        return s[7] - '0';
}

/* The status line "HTTP/1.x NNN[ reason]" in s[0..len).  whole: the line
 * has ended; otherwise it is checked only as a prefix and 0 means "so far
 * so good". */
static int status_line(const char *s, size_t len, bool whole, gp_h1_response *r) {
        int minor = version(s, len);
        if (minor == -EAGAIN)
                return whole ? -EINVAL : 0;
        if (minor < 0)
                return minor;
        /* s[8] ' ', s[9..12) the status, its first digit 1..5 */
        for (size_t i = 8; i < 12; i++) {
                if (i == len)
                        return whole ? -EINVAL : 0;
                bool ok = i == 8 ? s[i] == ' ' : i == 9 ? s[i] >= '1' && s[i] <= '5' : is_digit(s[i]);
                if (!ok)
                        return -EINVAL;
        }
        if (len > 12 && s[12] != ' ')
                return -EINVAL;
        for (size_t i = 13; i < len; i++)
                if (is_ctl(s[i]))
                        return -EINVAL;
        r->minor = minor;
        r->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
        return 0;
}

/* The request line "METHOD /target HTTP/1.x" in s[0..len); whole as for
 * status_line. */
static int request_line(const char *s, size_t len, bool whole, gp_h1_request *r) {
        size_t m = 0;
        while (m < len && is_tchar(s[m]) && m < sizeof(r->method))
                m++;
        if (m == sizeof(r->method))
                return -EINVAL; /* a method of 16 or more bytes */
        if (m == len)
                return whole ? -EINVAL : 0;
        if (m == 0 || s[m] != ' ')
                return -EINVAL;
        size_t t = m + 1, te = t;
        if (t == len)
                return whole ? -EINVAL : 0;
        if (s[t] != '/')
                return -EINVAL; /* origin form only */
        while (te < len && s[te] != ' ') {
                if ((unsigned char)s[te] < 0x20 || s[te] == 0x7f)
                        return -EINVAL;
                te++;
        }
        if (te == len)
                return whole ? -EINVAL : 0;
        int minor = version(s + te + 1, len - te - 1);
        if (minor == -EAGAIN)
                return whole ? -EINVAL : 0;
        if (minor < 0 || len != te + 1 + 8)
                return -EINVAL;
        memcpy(r->method, s, m);
        r->method[m] = '\0';
        r->target = s + t;
        r->target_len = te - t;
        r->minor = minor;
        return 0;
}

/* One field line "name:[OWS]value[OWS]" in s[0..len) into *h; whole as for
 * status_line.  A line that starts with a blank (obsolete folding), a name
 * that is not a token or a blank before the colon is -EINVAL. */
static int field_line(const char *s, size_t len, bool whole, gp_h1_header *h) {
        size_t i = 0;
        while (i < len && is_tchar(s[i]))
                i++;
        if (i == len)
                return whole ? -EINVAL : 0;
        if (i == 0 || s[i] != ':')
                return -EINVAL;
        h->name = s;
        h->name_len = i;
        for (i++; i < len && is_ows(s[i]); i++)
                ;
        size_t b = i, e = i;
        for (; i < len; i++) {
                if (is_ctl(s[i]))
                        return -EINVAL;
                if (!is_ows(s[i]))
                        e = i + 1;
        }
        h->value = s + b;
        h->value_len = e - b;
        return 0;
}

/* The next element of the comma-separated list v[0..n) from *i on, blanks
 * trimmed, empty elements skipped (RFC 9110 5.6.1).  false at the end. */
static bool list_next(const char *v, size_t n, size_t *i, const char **e, size_t *elen) {
        while (*i < n) {
                while (*i < n && (is_ows(v[*i]) || v[*i] == ','))
                        (*i)++;
                size_t b = *i, end = *i;
                while (*i < n && v[*i] != ',') {
                        if (!is_ows(v[*i]))
                                end = *i + 1;
                        (*i)++;
                }
                if (end > b) {
                        *e = v + b;
                        *elen = end - b;
                        return true;
                }
        }
        return false;
}

/* What the fields of a head say about its framing and connection. */
struct framing {
        int64_t content_length;    /* -1 when absent */
        bool te;                   /* a Transfer-Encoding was sent */
        bool te_chunked;           /* ... and its last coding is chunked */
        bool close;                /* Connection lists close */
        bool keep;                 /* Connection lists keep-alive */
        bool expect_continue;      /* Expect: 100-continue */
};

/* Content-Length: digits, or a list of equal ones ("42, 42"); each must
 * agree with what an earlier Content-Length said. */
static int content_length(const char *v, size_t n, struct framing *f) {
        size_t i = 0;
        for (;;) {
                while (i < n && is_ows(v[i]))
                        i++;
                if (i == n || !is_digit(v[i]))
                        return -EINVAL;
                int64_t x = 0;
                for (; i < n && is_digit(v[i]); i++) {
                        x = x * 10 + (v[i] - '0');
                        if (x > GP_H1_MAX_CONTENT_LENGTH)
                                return -EINVAL; /* (and so never overflows) */
                }
                while (i < n && is_ows(v[i]))
                        i++;
                if (f->content_length >= 0 && f->content_length != x)
                        return -EINVAL;
                f->content_length = x;
                if (i == n)
                        return 0;
                if (v[i] != ',')
                        return -EINVAL;
                i++;
        }
}

/* Note what field h means for framing; -EINVAL when it is malformed. */
static int field_meaning(const gp_h1_header *h, struct framing *f) {
        const char *e;
        size_t elen, i = 0;
        bool any = false;
        switch (h->name_len) {
        case 14:
                if (EQ_LIT(h->name, h->name_len, "content-length"))
                        return content_length(h->value, h->value_len, f);
                break;
        case 17:
                if (!EQ_LIT(h->name, h->name_len, "transfer-encoding"))
                        break;
                /* several fields make one list: the last coding of the last one counts */
                f->te = true;
                while (list_next(h->value, h->value_len, &i, &e, &elen)) {
                        f->te_chunked = EQ_LIT(e, elen, "chunked");
                        any = true;
                }
                return any ? 0 : -EINVAL;
        case 10:
                if (!EQ_LIT(h->name, h->name_len, "connection"))
                        break;
                while (list_next(h->value, h->value_len, &i, &e, &elen)) {
                        f->close |= EQ_LIT(e, elen, "close");
                        f->keep |= EQ_LIT(e, elen, "keep-alive");
                }
                break;
        case 6:
                if (EQ_LIT(h->name, h->name_len, "expect") && EQ_LIT(h->value, h->value_len, "100-continue"))
                        f->expect_continue = true;
                break;
        }
        return 0;
}

/* The field lines from p[pos] to the blank line that ends the head, into
 * h[0..*nh).  0 with *end after the blank line; -EAGAIN when it has not
 * arrived within p[0..lim); -E2BIG over GP_H1_MAX_HEADERS; -EINVAL. */
static int fields(const char *p, size_t pos, size_t lim, gp_h1_header *h, size_t *nh, struct framing *f,
                  size_t *end) {
        *nh = 0;
        for (;;) {
                const char *s;
                size_t len, next;
                if (!next_line(p, pos, lim, &s, &len, &next)) {
                        gp_h1_header tmp;
                        int rc = field_line(s, len, false, &tmp);
                        return rc < 0 ? rc : -EAGAIN;
                }
                if (len == 0) {
                        *end = next;
                        return 0;
                }
                if (*nh == GP_H1_MAX_HEADERS)
                        return -E2BIG;
                int rc = field_line(s, len, true, &h[*nh]);
                if (rc == 0)
                        rc = field_meaning(&h[*nh], f);
                if (rc < 0)
                        return rc;
                (*nh)++;
                pos = next;
        }
}

/* Keep-alive as the version and Connection say (RFC 9112 9.3). */
static bool persistent(int minor, const struct framing *f) {
        return minor == 1 ? !f->close : f->keep && !f->close;
}

int gp_h1_parse_response(const char *p, size_t n, size_t max, gp_h1_response *r) {
        size_t lim = n < max ? n : max, next, len;
        const char *s;
        if (!next_line(p, 0, lim, &s, &len, &next)) {
                int rc = status_line(s, len, false, r);
                return rc < 0 ? rc : not_ended(n, max);
        }
        int rc = status_line(s, len, true, r);
        if (rc < 0)
                return rc;
        struct framing f = {.content_length = -1};
        rc = fields(p, next, lim, r->headers, &r->nheaders, &f, &r->head_len);
        if (rc == -EAGAIN)
                return not_ended(n, max);
        if (rc < 0)
                return rc;
        if (f.te && f.content_length >= 0)
                return -EINVAL; /* request smuggling's favourite ambiguity */
        r->chunked = f.te && f.te_chunked;
        r->content_length = f.te ? -1 : f.content_length;
        r->keep_alive = persistent(r->minor, &f);
        /* A coding other than chunked last, or any Transfer-Encoding in a 1.0
         * message (RFC 9112 6.1), leaves only the close to end the body. */
        if (f.te && (!f.te_chunked || r->minor == 0))
                r->keep_alive = false;
        bool bodyless = r->status < 200 || r->status == 204 || r->status == 304;
        if (!r->chunked && r->content_length < 0 && !bodyless)
                r->keep_alive = false; /* read until close */
        return 0;
}

int gp_h1_parse_request(const char *p, size_t n, size_t max, gp_h1_request *r) {
        size_t lim = n < max ? n : max, pos = 0, next, len;
        const char *s;
        for (int empty = 0;; empty++) {
                if (!next_line(p, pos, lim, &s, &len, &next)) {
                        int rc = request_line(s, len, false, r);
                        return rc < 0 ? rc : not_ended(n, max);
                }
                if (len > 0)
                        break;
                if (empty == LEADING_EMPTY_LINES_MAX)
                        return -EINVAL;
                pos = next;
        }
        int rc = request_line(s, len, true, r);
        if (rc < 0)
                return rc;
        struct framing f = {.content_length = -1};
        rc = fields(p, next, lim, r->headers, &r->nheaders, &f, &r->head_len);
        if (rc == -EAGAIN)
                return not_ended(n, max);
        if (rc < 0)
                return rc;
        if (f.te && (f.content_length >= 0 || !f.te_chunked))
                return -EINVAL; /* no length we could trust (RFC 9112 6.3) */
        r->chunked = f.te;
        r->content_length = f.content_length;
        r->keep_alive = persistent(r->minor, &f) && !(f.te && r->minor == 0);
        /* RFC 9110 10.1.1: a 1.0 client cannot wait for a 100; ignore its expectation */
        r->expect_continue = f.expect_continue && r->minor == 1;
        return 0;
}

const gp_h1_header *gp_h1_find(const gp_h1_header *h, size_t n, const char *name) {
        size_t len = strlen(name);
        for (size_t i = 0; i < n; i++)
                if (eq_ci(h[i].name, h[i].name_len, name, len))
                        return &h[i];
        return NULL;
}

bool gp_h1_hop_by_hop(const char *name, size_t len) {
        static const struct {
                const char *s;
                size_t len;
        } hop[] = {
#define HOP(lit) {lit, sizeof(lit) - 1}
                HOP("connection"), HOP("keep-alive"),          HOP("proxy-connection"),
                HOP("transfer-encoding"), HOP("te"),           HOP("trailer"),
                HOP("upgrade"), HOP("proxy-authenticate"),     HOP("proxy-authorization"),
                HOP("content-length"), HOP("date"),
#undef HOP
        };
        for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
                if (eq_ci(name, len, hop[i].s, hop[i].len))
                        return true;
        return false;
}

/* The decoder's states; a zeroed gp_h1_chunked is at the first size. */
enum {
        C_SIZE0,      /* a size line: no hex digit yet */
        C_SIZE,       /* ... hex digits */
        C_EXT,        /* ... after ';': an extension, ignored */
        C_SIZE_LF,    /* ... its CR has come, the LF must follow */
        C_DATA,       /* left bytes of data to pass on */
        C_DATA_CR,    /* the CRLF (or LF) after a chunk's data */
        C_DATA_LF,    /* ... its CR has come */
        C_TRAILER,    /* a trailer line (or the blank line that ends the body) */
        C_TRAILER_LF, /* ... its CR has come */
        C_DONE,       /* the body has ended */
};

static int hex(char ch) {
        if (ch >= '0' && ch <= '9')
                return ch - '0';
        ch = lower(ch);
        if (ch >= 'a' && ch <= 'f')
                return ch - 'a' + 10;
        return -1;
}

/* One byte of a size line, the CRLF after data, or a trailer line (never
 * data).  0 to go on, 1 at the body's end, -EINVAL. */
static int chunked_byte(gp_h1_chunked *c, char ch) {
        int d = hex(ch);
        switch (c->state) {
        case C_SIZE0:
                if (d < 0)
                        return -EINVAL;
                c->left = (uint64_t)d;
                c->line = 1;
                c->state = C_SIZE;
                return 0;
        case C_SIZE:
                if (d >= 0) {
                        c->left = c->left * 16 + (uint64_t)d;
                        if (c->left > (uint64_t)GP_H1_MAX_CONTENT_LENGTH)
                                return -EINVAL; /* (and so never overflows) */
                        break;
                }
                if (ch == ';') {
                        c->state = C_EXT;
                        break;
                }
                __attribute__((fallthrough)); /* the line may end */
        case C_EXT:
                if (ch == '\r') {
                        c->state = C_SIZE_LF;
                        return 0;
                }
                if (ch == '\n')
                        goto size_ended;
                if (c->state != C_EXT || is_ctl(ch))
                        return -EINVAL;
                break;
        case C_SIZE_LF:
                if (ch != '\n')
                        return -EINVAL;
size_ended:
                c->line = 0;
                c->state = c->left ? C_DATA : C_TRAILER;
                return 0;
        case C_DATA_CR:
                if (ch == '\r') {
                        c->state = C_DATA_LF;
                        return 0;
                }
                __attribute__((fallthrough)); /* a bare LF will do */
        case C_DATA_LF:
                if (ch != '\n')
                        return -EINVAL;
                c->state = C_SIZE0;
                return 0;
        case C_TRAILER:
                if (ch == '\r') {
                        c->state = C_TRAILER_LF;
                        return 0;
                }
                if (ch == '\n')
                        goto trailer_ended;
                if (is_ctl(ch))
                        return -EINVAL;
                break;
        case C_TRAILER_LF:
                if (ch != '\n')
                        return -EINVAL;
trailer_ended:
                if (c->line == 0) {
                        c->state = C_DONE;
                        return 1;
                }
                c->line = 0;
                c->state = C_TRAILER;
                return 0;
        default:
                return -EINVAL; /* C_DATA and C_DONE never get here; garbage state */
        }
        /* one more byte of a size or trailer line */
        if (++c->line > CHUNK_LINE_MAX)
                return -EINVAL;
        return 0;
}

int gp_h1_chunked_feed(gp_h1_chunked *c, const char *p, size_t n, size_t *used,
                       int (*out)(void *ud, const char *p, size_t n), void *ud) {
        size_t i = 0;
        int rc = 0;
        if (c->state == C_DONE) {
                *used = 0;
                return 1;
        }
        while (i < n && rc == 0) {
                if (c->state != C_DATA) {
                        rc = chunked_byte(c, p[i]);
                        if (rc >= 0)
                                i++;
                        continue;
                }
                size_t k = n - i < c->left ? n - i : (size_t)c->left;
                c->left -= k;
                if (c->left == 0)
                        c->state = C_DATA_CR;
                rc = out ? out(ud, p + i, k) : 0;
                if (rc > 0)
                        rc = 0; /* out() promised 0 or an error */
                i += k;
        }
        *used = i;
        return rc;
}
