/* http.c - the client's HTTP exchanges with the server.
 *
 * Plain http:// is done here, without libcurl: one TCP connection per call
 * ("Connection: close"), the request written in one go, the answer's head
 * parsed by base/h1.c (gp_h1_parse_response) and its body framed by
 * Content-Length, chunked coding (gp_h1_chunked_feed) or the connection's
 * end.  https://, and http:// when a proxy variable applies to it (see
 * proxied()), go to curl.c (libcurl, loaded with dlopen when first
 * needed), so `gpupool ps` loads neither libcurl nor its TLS stack.
 *
 * Each call has its own socket and state, so calls may run on several
 * threads at once (run.c heartbeats from a thread).  Bounds: connect 5 s
 * (per address tried; within the total), a caller-given total timeout for
 * in-memory answers, an answer's head at most HEAD_MAX, an in-memory body
 * at most GP_CLI_BODY_MAX (refused as soon as its Content-Length says so);
 * a streamed answer (logs) is copied to its FILE as it arrives and kept
 * nowhere.  A transfer can be aborted from a signal handler through
 * gp_cli_conn.abort_flag: every wait is a poll of at most SLICE_MS that
 * looks at the flag.  Name resolution (getaddrinfo) is the one wait that
 * is not sliced; numeric addresses and /etc/hosts names do not wait.
 * Sockets are close-on-exec (run.c forks the user's command) and written
 * with MSG_NOSIGNAL (a closed peer is an error, not SIGPIPE).
 */
#include "cli/http-int.h"
#include "cli/unix.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/h1.h"
#include "base/url.h"
#include "base/util.h"

#define TEXT_SNIPPET 200          /* bytes of a non-JSON body kept for messages */
#define HEAD_MAX (64 * 1024)      /* an answer's head, its blank line included */
#define READ_CHUNK (16 * 1024)
#define SLICE_MS 200              /* abort_flag is looked at this often while waiting */
#define INTERIM_MAX 8             /* 1xx heads skipped before the answer */

void gp_cli_resp_done(gp_cli_resp *r) {
        if (!r)
                return;
        json_decref(r->json);
        r->json = NULL;
        free(r->text);
        r->text = NULL;
}

int gp_cli_url_escape(const char *s, gp_buf *out) {
        static const char hex[] = "0123456789ABCDEF";
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                int r;
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    *p == '-' || *p == '_' || *p == '.' || *p == '~') {
                        char c = (char)*p;
                        r = gp_buf_append(out, &c, 1);
                } else {
                        char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
                        r = gp_buf_append(out, e, 3);
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- what both transports deliver to ------------------------------- */

void gp_cli_xfer_status(gp_cli_xfer *x, long status) {
        x->status = status;
        x->copy = x->out && status >= 200 && status < 300;
}

void gp_cli_xfer_retry_after(gp_cli_xfer *x, const char *v, size_t n) {
        char d[32];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 1 < sizeof(d); i++)
                if (v[i] >= '0' && v[i] <= '9')
                        d[k++] = v[i];
                else if (k > 0)
                        break;
        d[k] = '\0';
        int64_t s;
        if (gp_parse_i64(d, 0, 86400 * 365, &s) == 0)
                x->retry_after = (long)s;
}

int gp_cli_xfer_body(gp_cli_xfer *x, const char *p, size_t n) {
        if (n == 0)
                return 0;
        if (x->copy) {
                if (fwrite(p, 1, n, x->out) != n || fflush(x->out) != 0) {
                        int e = errno;
                        gp_buf_printf(x->err, "cannot write the output: %s", strerror(e));
                        return -EPIPE;
                }
                *x->io_bytes += (int64_t)n;
                return 0;
        }
        if (x->out) {
                /* a stream's error body: keep the start, drop the rest */
                size_t room = x->body.len < GP_CLI_ERRBODY_MAX ? GP_CLI_ERRBODY_MAX - x->body.len : 0;
                int r = gp_buf_append(&x->body, p, n < room ? n : room);
                return r == -ENOMEM ? r : 0;
        }
        int r = gp_buf_append(&x->body, p, n);
        if (r == -E2BIG)
                gp_buf_printf(x->err, "the answer from %s is larger than %zu MiB", x->c->api,
                              GP_CLI_BODY_MAX >> 20);
        return r;
}

/* Fill ret from x: JSON when the body parses, else a snippet of text. */
static int take_answer(gp_cli_xfer *x, gp_cli_resp *ret) {
        gp_cli_resp r = {.status = x->status, .retry_after = x->retry_after};
        if (!x->copy && x->body.len > 0) {
                json_error_t je;
                r.json = json_loadb(x->body.data, x->body.len, JSON_REJECT_DUPLICATES, &je);
                if (!r.json) {
                        size_t k = x->body.len < TEXT_SNIPPET ? x->body.len : TEXT_SNIPPET;
                        r.text = strndup(x->body.data, k);
                        if (!r.text)
                                return -ENOMEM;
                }
        }
        *ret = r;
        return 0;
}

/* ---- plain http:// -------------------------------------------------- */

/* Wait until fd is ready for ev.  0, -ETIMEDOUT when the deadline
 * (gp_mono_ms, 0 = none) has passed, -ECANCELED when abort is raised. */
static int wait_fd(int fd, short ev, int64_t deadline, const volatile sig_atomic_t *abort) {
        for (;;) {
                if (abort && *abort)
                        return -ECANCELED;
                int ms = abort ? SLICE_MS : -1;
                if (deadline) {
                        int64_t left = deadline - gp_mono_ms();
                        if (left <= 0)
                                return -ETIMEDOUT;
                        if (ms < 0 || left < ms)
                                ms = left > INT_MAX ? INT_MAX : (int)left;
                }
                struct pollfd p = {.fd = fd, .events = ev};
                int n = poll(&p, 1, ms);
                if (n > 0)
                        return 0; /* readable, writable, or an error the next call reports */
                if (n < 0 && errno != EINTR)
                        return -errno;
        }
}

/* Some bytes into p: their count, 0 at the connection's end, or -errno
 * (-ETIMEDOUT, -ECANCELED as wait_fd). */
static ssize_t read_some(int fd, char *p, size_t n, int64_t deadline, const volatile sig_atomic_t *abort) {
        for (;;) {
                if (abort && *abort)
                        return -ECANCELED;
                if (deadline && gp_mono_ms() >= deadline)
                        return -ETIMEDOUT;
                ssize_t k = recv(fd, p, n, 0);
                if (k >= 0)
                        return k;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                        return -errno;
                int r = wait_fd(fd, POLLIN, deadline, abort);
                if (r < 0)
                        return r;
        }
}

static int write_all(int fd, const char *p, size_t n, int flags, int64_t deadline,
                     const volatile sig_atomic_t *abort) {
        while (n > 0) {
                ssize_t k = send(fd, p, n, MSG_NOSIGNAL | flags);
                if (k > 0) {
                        p += k;
                        n -= (size_t)k;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                        return -errno;
                int r = wait_fd(fd, POLLOUT, deadline, abort);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The message and code for a failed exchange: -ECANCELED and -E2BIG /
 * -EPIPE (message already written) pass through; the rest becomes
 * "cannot reach API: why" and -EHOSTUNREACH. */
static int net_failure(gp_cli_xfer *x, int r, const char *why) {
        if (r == -ECANCELED || r == -E2BIG || r == -EPIPE || r == -ENOMEM)
                return r;
        gp_buf_printf(x->err, "cannot reach %s: ", x->c->api);
        if (why)
                gp_buf_puts(x->err, why);
        else if (r == -ETIMEDOUT && x->timeout_s > 0)
                gp_buf_printf(x->err, "no answer within %ld s", x->timeout_s);
        else
                gp_buf_printf(x->err, "the connection failed (%s)", strerror(-r));
        return -EHOSTUNREACH;
}

/* Connect to the URL's host, each of its addresses in turn, each within
 * the connect timeout (and the total deadline).  0 and *ret_fd, or the
 * result of net_failure. */
static int dial(gp_cli_xfer *x, const gp_http_url *u, int64_t deadline, int *ret_fd) {
        char host[256], why[320];
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV};
        struct addrinfo *ai = NULL;

        if (u->host_len >= sizeof(host))
                return net_failure(x, -EINVAL, "host name too long");
        memcpy(host, u->host, u->host_len);
        host[u->host_len] = '\0';
        int ufd = gp_cli_unix_dial(u->host, u->host_len, u->port); /* a local server's socket (unix.h) */
        if (ufd >= 0) {
                *ret_fd = ufd;
                return 0;
        }
        int g = getaddrinfo(host, u->port, &hints, &ai);
        if (g != 0) {
                snprintf(why, sizeof(why), "unknown host (%s)",
                         g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
                return net_failure(x, -ENOENT, why);
        }
        int64_t cdl = gp_mono_ms() + GP_CLI_CONNECT_TIMEOUT_S * 1000;
        bool total = false;
        if (deadline && deadline <= cdl) {
                cdl = deadline;
                total = true;
        }
        int last = ECONNREFUSED;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
                int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0) {
                        last = errno;
                        continue;
                }
                int r = 0;
                if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
                        if (errno != EINPROGRESS) {
                                r = -errno;
                        } else if ((r = wait_fd(fd, POLLOUT, cdl, x->c->abort_flag)) == 0) {
                                int e = 0;
                                socklen_t len = sizeof(e);
                                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
                                        e = errno;
                                r = -e;
                        }
                }
                if (r == 0) {
                        int one = 1;
                        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
                        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                        freeaddrinfo(ai);
                        *ret_fd = fd;
                        return 0;
                }
                close(fd);
                if (r == -ECANCELED) {
                        freeaddrinfo(ai);
                        return r;
                }
                if (r == -ETIMEDOUT && gp_mono_ms() >= cdl) {
                        freeaddrinfo(ai);
                        if (total)
                                return net_failure(x, r, NULL);
                        snprintf(why, sizeof(why), "no connection within %ld s", GP_CLI_CONNECT_TIMEOUT_S);
                        return net_failure(x, r, why);
                }
                last = -r;
        }
        freeaddrinfo(ai);
        snprintf(why, sizeof(why), "%s (is `gpupool server` running?)", strerror(last));
        return net_failure(x, -last, why);
}

/* The request head (the payload is sent after it). */
static int request_head(const gp_cli_xfer *x, const gp_http_url *u, gp_buf *req) {
        for (const char *p = x->path; *p; p++)
                if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
                        return -EINVAL;
        int r = gp_buf_printf(req,
                              "%s %s%s HTTP/1.1\r\nHost: %.*s\r\nUser-Agent: gpupool-cli/" GP_VERSION
                              "\r\nAccept: application/json, text/plain\r\n",
                              x->method, u->path, x->path, (int)u->auth_len, u->auth);
        if (r == 0 && x->payload)
                r = gp_buf_puts(req, "Content-Type: application/json\r\n");
        if (r == 0 && x->c->key)
                r = gp_buf_printf(req, "Authorization: Bearer %s\r\n", x->c->key);
        if (r == 0 && (x->payload || strcmp(x->method, "POST") == 0 || strcmp(x->method, "PUT") == 0))
                r = gp_buf_printf(req, "Content-Length: %zu\r\n", x->payload ? x->payload_len : 0);
        if (r == 0)
                r = gp_buf_puts(req, "Connection: close\r\n\r\n");
        return r;
}

static int chunk_out(void *ud, const char *p, size_t n) {
        return gp_cli_xfer_body(ud, p, n);
}

/* Read the answer on fd: head, then body, delivered to x. */
static int read_answer(gp_cli_xfer *x, int fd, int64_t deadline) {
        const volatile sig_atomic_t *abort = x->c->abort_flag;
        gp_h1_response h;
        gp_buf in;
        int rc, interim = 0;
        ssize_t n;

        gp_buf_init(&in, HEAD_MAX + READ_CHUNK);
        for (;;) {
                rc = in.len ? gp_h1_parse_response(in.data, in.len, HEAD_MAX, &h) : -EAGAIN;
                if (rc == 0 && h.status >= 200)
                        break;
                if (rc == 0) { /* 100 Continue and the like: skip */
                        if (++interim > INTERIM_MAX) {
                                rc = net_failure(x, -EPROTO, "too many interim (1xx) answers");
                                goto out;
                        }
                        memmove(in.data, in.data + h.head_len, in.len - h.head_len);
                        in.len -= h.head_len;
                        in.data[in.len] = '\0';
                        continue;
                }
                if (rc == -E2BIG) {
                        rc = net_failure(x, -EPROTO, "the answer's header is too large");
                        goto out;
                }
                if (rc != -EAGAIN) {
                        rc = net_failure(x, -EPROTO, "the answer is not HTTP/1.x");
                        goto out;
                }
                char buf[READ_CHUNK];
                n = read_some(fd, buf, sizeof(buf), deadline, abort);
                if (n == 0) {
                        rc = net_failure(x, -ECONNRESET, in.len ? "the connection closed within the answer's header"
                                                                : "the connection closed without an answer");
                        goto out;
                }
                if (n < 0) {
                        rc = net_failure(x, (int)n, NULL);
                        goto out;
                }
                if ((rc = gp_buf_append(&in, buf, (size_t)n)) < 0) /* -ENOMEM: HEAD_MAX stops it first */
                        goto out;
        }
        gp_cli_xfer_status(x, h.status);
        const gp_h1_header *ra = gp_h1_find(h.headers, h.nheaders, "retry-after");
        if (ra)
                gp_cli_xfer_retry_after(x, ra->value, ra->value_len);

        const char *rest = in.data + h.head_len;
        size_t nrest = in.len - h.head_len;
        if (h.status == 204 || h.status == 304 || strcmp(x->method, "HEAD") == 0) {
                rc = 0;
                goto out;
        }
        char buf[READ_CHUNK];
        if (h.chunked) {
                gp_h1_chunked ch = {0};
                for (;;) {
                        size_t used = 0;
                        rc = gp_h1_chunked_feed(&ch, rest, nrest, &used, chunk_out, x);
                        if (rc == 1) {
                                rc = 0;
                                break;
                        }
                        if (rc < 0) {
                                rc = net_failure(x, rc, rc == -EINVAL ? "bad chunked coding in the answer" : NULL);
                                break;
                        }
                        n = read_some(fd, buf, sizeof(buf), deadline, abort);
                        if (n <= 0) {
                                rc = net_failure(x, n < 0 ? (int)n : -ECONNRESET,
                                                 n < 0 ? NULL : "the connection closed before the answer's end");
                                break;
                        }
                        rest = buf;
                        nrest = (size_t)n;
                }
        } else if (h.content_length >= 0) {
                uint64_t left = (uint64_t)h.content_length;
                if (!x->out && left > GP_CLI_BODY_MAX) { /* refused before reading it */
                        rc = -E2BIG;
                        gp_buf_printf(x->err, "the answer from %s is larger than %zu MiB", x->c->api,
                                      GP_CLI_BODY_MAX >> 20);
                        goto out;
                }
                for (;;) {
                        size_t k = nrest < left ? nrest : (size_t)left;
                        if ((rc = gp_cli_xfer_body(x, rest, k)) < 0) {
                                rc = net_failure(x, rc, NULL);
                                break;
                        }
                        left -= k;
                        if (left == 0)
                                break;
                        n = read_some(fd, buf, sizeof(buf), deadline, abort);
                        if (n <= 0) {
                                rc = net_failure(x, n < 0 ? (int)n : -ECONNRESET,
                                                 n < 0 ? NULL : "the connection closed before the answer's end");
                                break;
                        }
                        rest = buf;
                        nrest = (size_t)n;
                }
        } else { /* the body ends with the connection */
                for (;;) {
                        if ((rc = gp_cli_xfer_body(x, rest, nrest)) < 0) {
                                rc = net_failure(x, rc, NULL);
                                break;
                        }
                        n = read_some(fd, buf, sizeof(buf), deadline, abort);
                        if (n <= 0) {
                                rc = n < 0 ? net_failure(x, (int)n, NULL) : 0;
                                break;
                        }
                        rest = buf;
                        nrest = (size_t)n;
                }
        }
out:
        gp_buf_done(&in);
        return rc;
}

static int h1_exchange(gp_cli_xfer *x) {
        gp_http_url u;
        gp_buf req;
        int fd = -1, rc;
        int64_t deadline = x->timeout_s > 0 ? gp_mono_ms() + (int64_t)x->timeout_s * 1000 : 0;

        if (gp_http_url_parse(x->c->api, &u) < 0) {
                gp_buf_printf(x->err, "bad server URL %s (expected http://HOST[:PORT][/PATH])", x->c->api);
                return -EINVAL;
        }
        gp_buf_init(&req, GP_CLI_URL_MAX + GP_CLI_KEY_MAX + 8192);
        rc = request_head(x, &u, &req);
        if (rc < 0) {
                if (rc != -ENOMEM)
                        gp_buf_printf(x->err, "bad request path for %s", x->c->api);
                rc = rc == -ENOMEM ? rc : -EINVAL;
                goto out;
        }
        if ((rc = dial(x, &u, deadline, &fd)) < 0)
                goto out;
        rc = write_all(fd, req.data, req.len, x->payload_len ? MSG_MORE : 0, deadline, x->c->abort_flag);
        if (rc == 0 && x->payload_len)
                rc = write_all(fd, x->payload, x->payload_len, 0, deadline, x->c->abort_flag);
        if (rc < 0) {
                /* a server that answers early and closes (e.g. 413) is still an answer */
                if (rc == -EPIPE || rc == -ECONNRESET)
                        rc = read_answer(x, fd, deadline);
                else
                        rc = net_failure(x, rc, NULL);
                goto out;
        }
        rc = read_answer(x, fd, deadline);
out:
        if (fd >= 0)
                close(fd);
        gp_buf_done(&req);
        return rc;
}

/* Would libcurl send this http:// URL through a proxy?  Yes when
 * http_proxy, all_proxy or ALL_PROXY is set (libcurl's variables for
 * http://; it ignores HTTP_PROXY), unless no_proxy (or NO_PROXY) is "*" or
 * has an entry that is the host or a domain the host is in (a leading '.'
 * allowed).  An entry read differently here than by libcurl (an address
 * range, a port) can only make this say yes: libcurl, which then gets the
 * exchange, applies its own rules. */
static bool proxied(const char *api) {
        static const char *const vars[] = {"http_proxy", "all_proxy", "ALL_PROXY"};
        const char *px = NULL;
        for (size_t i = 0; i < GP_ARRAY_SIZE(vars) && !(px && *px); i++)
                px = getenv(vars[i]);
        if (!px || !*px)
                return false;
        gp_http_url u;
        if (gp_http_url_parse(api, &u) < 0)
                return true; /* libcurl says what is wrong with it */
        const char *np = getenv("no_proxy");
        if (!np || !*np)
                np = getenv("NO_PROXY");
        if (!np)
                return true;
        if (strcmp(np, "*") == 0)
                return false;
        for (const char *p = np; *p;) {
                p += strspn(p, ", ");
                size_t n = strcspn(p, ", ");
                const char *e = p + n;
                if (n && *p == '.') {
                        p++;
                        n--;
                }
                if (n && n <= u.host_len && strncasecmp(u.host + u.host_len - n, p, n) == 0 &&
                    (n == u.host_len || u.host[u.host_len - n - 1] == '.'))
                        return false;
                p = e;
        }
        return true;
}

static int exchange(gp_cli_xfer *x) {
        if (strncmp(x->c->api, "https://", 8) != 0 && !proxied(x->c->api))
                return h1_exchange(x);
        gp_buf url;
        gp_buf_init(&url, GP_CLI_URL_MAX + 8192);
        int rc = gp_buf_puts(&url, x->c->api);
        if (rc == 0)
                rc = gp_buf_puts(&url, x->path);
        if (rc == 0)
                rc = gp_cli_curl_exchange(x, url.data);
        gp_buf_done(&url);
        return rc;
}

/* Several servers (c->api "URL1,URL2,..."): is this outcome one to try the
 * next URL after?  Unreachable, or a standby's 503 (it did nothing). */
static bool move_on(int rc, const gp_cli_resp *r) {
        if (rc == -EHOSTUNREACH)
                return true;
        if (rc < 0 || r->status != 503 || !r->json)
                return false;
        const char *code = json_string_value(json_object_get(json_object_get(r->json, "error"), "code"));
        return code && !strcmp(code, "standby");
}

static int http_json_one(const gp_cli_conn *c, const char *method, const char *path, const json_t *body,
                         long timeout_s, gp_cli_resp *ret, gp_buf *err);
static int http_stream_one(const gp_cli_conn *c, const char *path, FILE *out, int64_t *io_bytes,
                           gp_cli_resp *ret, gp_buf *err);

/* Each URL of the list in turn, while the outcome says move on; the last
 * URL's outcome is the answer.  The messages of the ones passed over are
 * dropped (the last one says what went wrong). */
static int each_api(const gp_cli_conn *c, const char *method, const char *path, const json_t *body,
                    long timeout_s, FILE *out, int64_t *io_bytes, gp_cli_resp *ret, gp_buf *err) {
        char one[GP_CLI_URL_MAX + 1];
        gp_cli_conn c1 = *c;
        for (const char *q = c->api;;) {
                size_t n = strcspn(q, ",");
                if (n > GP_CLI_URL_MAX)
                        n = GP_CLI_URL_MAX;
                memcpy(one, q, n);
                one[n] = '\0';
                c1.api = one;
                bool last = !q[strcspn(q, ",")];
                size_t mark = err ? err->len : 0;
                int64_t before = io_bytes ? *io_bytes : 0;
                gp_cli_resp r = {.retry_after = -1};
                int rc = out ? http_stream_one(&c1, path, out, io_bytes, &r, err)
                             : http_json_one(&c1, method, path, body, timeout_s, &r, err);
                if (last || !move_on(rc, &r) || (io_bytes && *io_bytes != before)) {
                        if (rc == 0)
                                *ret = r;
                        return rc;
                }
                gp_cli_resp_done(&r);
                if (err && err->data) { /* the next server answers instead */
                        err->len = mark;
                        err->data[mark] = '\0';
                }
                q += strcspn(q, ",") + 1;
        }
}

int gp_cli_http_json(const gp_cli_conn *c, const char *method, const char *path,
                     const json_t *body, long timeout_s, gp_cli_resp *ret, gp_buf *err) {
        if (strchr(c->api, ','))
                return each_api(c, method, path, body, timeout_s, NULL, NULL, ret, err);
        return http_json_one(c, method, path, body, timeout_s, ret, err);
}

static int http_json_one(const gp_cli_conn *c, const char *method, const char *path, const json_t *body,
                         long timeout_s, gp_cli_resp *ret, gp_buf *err) {
        gp_cli_xfer x = {.c = c, .method = method, .path = path, .timeout_s = timeout_s,
                         .retry_after = -1, .err = err};
        char *payload = NULL;
        int rc;

        gp_buf_init(&x.body, GP_CLI_BODY_MAX);
        if (body) {
                payload = json_dumps(body, JSON_COMPACT);
                if (!payload) {
                        rc = -ENOMEM;
                        goto out;
                }
                x.payload = payload;
                x.payload_len = strlen(payload);
        }
        rc = exchange(&x);
        if (rc == 0)
                rc = take_answer(&x, ret);
out:
        free(payload);
        gp_buf_done(&x.body);
        return rc;
}

int gp_cli_http_stream(const gp_cli_conn *c, const char *path, FILE *out, int64_t *io_bytes,
                       gp_cli_resp *ret, gp_buf *err) {
        if (strchr(c->api, ','))
                return each_api(c, "GET", path, NULL, 0, out, io_bytes, ret, err);
        return http_stream_one(c, path, out, io_bytes, ret, err);
}

static int http_stream_one(const gp_cli_conn *c, const char *path, FILE *out, int64_t *io_bytes,
                           gp_cli_resp *ret, gp_buf *err) {
        gp_cli_xfer x = {.c = c, .method = "GET", .path = path, .out = out, .io_bytes = io_bytes,
                         .retry_after = -1, .err = err};
        gp_buf_init(&x.body, GP_CLI_ERRBODY_MAX + 1);
        int rc = exchange(&x);
        if (rc == 0)
                rc = take_answer(&x, ret); /* a 2xx body went to out: nothing to parse */
        gp_buf_done(&x.body);
        return rc;
}
