/* http.c - the client's HTTP exchanges with the server, over libcurl.
 *
 * Each call uses its own easy handle, so calls may run on several threads
 * at once (run.c heartbeats from a thread).  Bounds: connect timeout 5 s,
 * a caller-given total timeout for in-memory answers, answers read into a
 * gp_buf capped at GP_CLI_BODY_MAX; a streamed answer (logs) is copied to
 * its FILE as it arrives and kept nowhere.  A transfer can be aborted from
 * a signal handler through gp_cli_conn.abort_flag (checked by curl's
 * progress callback, which runs at least once a second).
 */
#include "cli/cli-int.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

#define ERRBODY_MAX (64 * 1024)   /* non-2xx body kept from a stream */
#define TEXT_SNIPPET 200          /* bytes of a non-JSON body kept for messages */

struct xfer {
        CURL *h;
        gp_buf body;              /* in-memory answer (or error body of a stream) */
        FILE *out;                /* stream: 2xx bytes go here */
        int64_t *io_bytes;        /* stream: bytes written to out */
        int status_seen;          /* stream: 0 unknown, 1 copy to out, 2 keep in body */
        bool too_big;             /* body hit its cap */
        bool out_failed;          /* writing out failed */
        int out_errno;            /* errno of that failure */
        long retry_after;         /* from the Retry-After header, -1 if none */
        const volatile sig_atomic_t *abort_flag;
};

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

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
        struct xfer *x = ud;
        size_t len = size * n;
        if (gp_buf_append(&x->body, p, len) < 0) {
                x->too_big = true;
                return 0; /* CURLE_WRITE_ERROR */
        }
        return len;
}

static size_t on_stream(char *p, size_t size, size_t n, void *ud) {
        struct xfer *x = ud;
        size_t len = size * n;
        if (!x->status_seen) {
                long st = 0;
                curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &st);
                x->status_seen = (st >= 200 && st < 300) ? 1 : 2;
        }
        if (x->status_seen == 2) {
                /* error body: keep the start, drop the rest */
                size_t room = x->body.len < ERRBODY_MAX ? ERRBODY_MAX - x->body.len : 0;
                if (gp_buf_append(&x->body, p, len < room ? len : room) < 0)
                        x->too_big = true;
                return len;
        }
        if (fwrite(p, 1, len, x->out) != len || fflush(x->out) != 0) {
                x->out_failed = true;
                x->out_errno = errno;
                return 0;
        }
        *x->io_bytes += (int64_t)len;
        return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
        struct xfer *x = ud;
        size_t len = size * n;
        static const char name[] = "retry-after:";
        if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
                char v[32];
                size_t k = 0;
                for (size_t i = sizeof(name) - 1; i < len && k + 1 < sizeof(v); i++)
                        if (p[i] >= '0' && p[i] <= '9')
                                v[k++] = p[i];
                        else if (k > 0)
                                break;
                v[k] = '\0';
                int64_t s;
                if (gp_parse_i64(v, 0, 86400 * 365, &s) == 0)
                        x->retry_after = (long)s;
        }
        return len;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
        struct xfer *x = ud;
        return (x->abort_flag && *x->abort_flag) ? 1 : 0;
}

/* Fill ret from x's body: JSON when it parses, else a snippet of text. */
static int take_answer(struct xfer *x, gp_cli_resp *ret) {
        gp_cli_resp r = {.retry_after = x->retry_after};
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &r.status);
        if (x->body.len > 0) {
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

static int curl_failure(const gp_cli_conn *c, CURLcode cc, struct xfer *x, const char *errbuf,
                        long timeout_s, gp_buf *err) {
        if (cc == CURLE_ABORTED_BY_CALLBACK)
                return -ECANCELED;
        if (cc == CURLE_OUT_OF_MEMORY)
                return -ENOMEM;
        if (x->too_big) {
                gp_buf_printf(err, "the answer from %s is larger than %zu MiB", c->api,
                              GP_CLI_BODY_MAX >> 20);
                return -E2BIG;
        }
        if (x->out_failed) {
                gp_buf_printf(err, "cannot write the output: %s", strerror(x->out_errno));
                return -EPIPE;
        }
        if (cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL) {
                gp_buf_printf(err, "bad server URL %s: %s", c->api, curl_easy_strerror(cc));
                return -EINVAL;
        }
        gp_buf_printf(err, "cannot reach %s: ", c->api);
        long oserr = 0;
        curl_easy_getinfo(x->h, CURLINFO_OS_ERRNO, &oserr);
        switch (cc) {
        case CURLE_COULDNT_CONNECT:
                gp_buf_printf(err, "%s (is `gpupool server` running?)",
                              oserr ? strerror((int)oserr) : "connection failed");
                break;
        case CURLE_COULDNT_RESOLVE_HOST:
                gp_buf_printf(err, "unknown host (%s)", errbuf[0] ? errbuf : curl_easy_strerror(cc));
                break;
        case CURLE_OPERATION_TIMEDOUT:
                if (timeout_s > 0)
                        gp_buf_printf(err, "no answer within %ld s", timeout_s);
                else
                        gp_buf_printf(err, "timed out (%s)", errbuf[0] ? errbuf : curl_easy_strerror(cc));
                break;
        default:
                gp_buf_puts(err, errbuf[0] ? errbuf : curl_easy_strerror(cc));
                break;
        }
        return -EHOSTUNREACH;
}

/* Common handle setup.  Returns the header list to free, or NULL with *rc set. */
static struct curl_slist *setup(const gp_cli_conn *c, struct xfer *x, const char *url,
                                bool json_body, char *errbuf, int *rc) {
        struct curl_slist *h = NULL, *t;
        gp_buf auth;
        *rc = -ENOMEM;
        gp_buf_init(&auth, GP_CLI_KEY_MAX + 64);
        if (curl_easy_setopt(x->h, CURLOPT_URL, url) != CURLE_OK) {
                *rc = -EINVAL;
                goto fail;
        }
        curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT, GP_CLI_CONNECT_TIMEOUT_S);
        curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(x->h, CURLOPT_USERAGENT, "gpupool-cli/" GP_VERSION);
        curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(x->h, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
        if (x->abort_flag) {
                curl_easy_setopt(x->h, CURLOPT_NOPROGRESS, 0L);
                curl_easy_setopt(x->h, CURLOPT_XFERINFOFUNCTION, on_progress);
                curl_easy_setopt(x->h, CURLOPT_XFERINFODATA, x);
        }
        if (!(t = curl_slist_append(h, "Accept: application/json, text/plain")))
                goto fail;
        h = t;
        if (!(t = curl_slist_append(h, "Expect:")))
                goto fail;
        h = t;
        if (json_body) {
                if (!(t = curl_slist_append(h, "Content-Type: application/json")))
                        goto fail;
                h = t;
        }
        if (c->key) {
                if (gp_buf_printf(&auth, "Authorization: Bearer %s", c->key) < 0)
                        goto fail;
                if (!(t = curl_slist_append(h, auth.data)))
                        goto fail;
                h = t;
        }
        curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, h);
        gp_buf_done(&auth);
        *rc = 0;
        return h;
fail:
        curl_slist_free_all(h);
        gp_buf_done(&auth);
        return NULL;
}

static int make_url(const gp_cli_conn *c, const char *path, gp_buf *url) {
        gp_buf_init(url, GP_CLI_URL_MAX + 4096);
        int r = gp_buf_puts(url, c->api);
        return r ? r : gp_buf_puts(url, path);
}

int gp_cli_http_json(const gp_cli_conn *c, const char *method, const char *path,
                     const json_t *body, long timeout_s, gp_cli_resp *ret, gp_buf *err) {
        struct xfer x = {.retry_after = -1, .abort_flag = c->abort_flag};
        char errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hdrs = NULL;
        char *payload = NULL;
        gp_buf url;
        int rc;

        gp_buf_init(&x.body, GP_CLI_BODY_MAX);
        rc = make_url(c, path, &url);
        if (rc < 0)
                goto out;
        x.h = curl_easy_init();
        if (!x.h) {
                rc = -ENOMEM;
                goto out;
        }
        /* a POST without a body is sent with CURLOPT_POSTFIELDS "", for which curl would
         * name a form type: the server refuses any type but JSON on a write (415) */
        hdrs = setup(c, &x, url.data, body != NULL || strcmp(method, "POST") == 0, errbuf, &rc);
        if (rc < 0)
                goto out;
        curl_easy_setopt(x.h, CURLOPT_TIMEOUT, timeout_s);
        curl_easy_setopt(x.h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(x.h, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(x.h, CURLOPT_CUSTOMREQUEST, method);
        if (body) {
                payload = json_dumps(body, JSON_COMPACT);
                if (!payload) {
                        rc = -ENOMEM;
                        goto out;
                }
                curl_easy_setopt(x.h, CURLOPT_POSTFIELDS, payload);
                curl_easy_setopt(x.h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
        } else if (strcmp(method, "POST") == 0) {
                curl_easy_setopt(x.h, CURLOPT_POSTFIELDS, "");
                curl_easy_setopt(x.h, CURLOPT_POSTFIELDSIZE, 0L);
        }
        CURLcode cc = curl_easy_perform(x.h);
        if (cc != CURLE_OK) {
                rc = curl_failure(c, cc, &x, errbuf, timeout_s, err);
                goto out;
        }
        rc = take_answer(&x, ret);
out:
        free(payload);
        curl_slist_free_all(hdrs);
        if (x.h)
                curl_easy_cleanup(x.h);
        gp_buf_done(&x.body);
        gp_buf_done(&url);
        return rc;
}

int gp_cli_http_stream(const gp_cli_conn *c, const char *path, FILE *out, int64_t *io_bytes,
                       gp_cli_resp *ret, gp_buf *err) {
        struct xfer x = {.retry_after = -1, .abort_flag = c->abort_flag, .out = out,
                         .io_bytes = io_bytes};
        char errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hdrs = NULL;
        gp_buf url;
        int rc;

        gp_buf_init(&x.body, ERRBODY_MAX + 1);
        rc = make_url(c, path, &url);
        if (rc < 0)
                goto out;
        x.h = curl_easy_init();
        if (!x.h) {
                rc = -ENOMEM;
                goto out;
        }
        hdrs = setup(c, &x, url.data, false, errbuf, &rc);
        if (rc < 0)
                goto out;
        curl_easy_setopt(x.h, CURLOPT_WRITEFUNCTION, on_stream);
        curl_easy_setopt(x.h, CURLOPT_WRITEDATA, &x);
        CURLcode cc = curl_easy_perform(x.h);
        if (cc != CURLE_OK) {
                rc = curl_failure(c, cc, &x, errbuf, 0, err);
                goto out;
        }
        rc = take_answer(&x, ret);
        if (rc == 0 && ret->status >= 200 && ret->status < 300) {
                /* the body went to out; nothing to parse */
                json_decref(ret->json);
                ret->json = NULL;
                free(ret->text);
                ret->text = NULL;
        }
out:
        curl_slist_free_all(hdrs);
        if (x.h)
                curl_easy_cleanup(x.h);
        gp_buf_done(&x.body);
        gp_buf_done(&url);
        return rc;
}
