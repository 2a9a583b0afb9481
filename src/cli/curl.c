/* curl.c - the client's exchanges that need libcurl: https://, and
 * http:// through a proxy (http_proxy / all_proxy); libcurl is loaded with
 * dlopen on first use.
 *
 * The gpupool binary does not link libcurl: direct http:// (the common
 * case, and every test) is http.c's own HTTP/1.1, and a command that never
 * needs libcurl never maps it, its TLS library and their dependencies.
 * The library is "libcurl.so.4" (Debian's libcurl4), or the file or name
 * in the environment variable GPUPOOL_LIBCURL; when it cannot be loaded
 * the call fails with -ENOPKG and says so.  It is loaded and
 * curl_global_init'ed once (pthread_once), and never unloaded.  libcurl
 * applies the proxy variables (and no_proxy) itself, as it always did.
 *
 * Each call uses its own easy handle (calls may run on several threads),
 * CURLOPT_NOSIGNAL, connect timeout 5 s, the caller's total timeout, and
 * curl's progress callback (at least once a second) to honour abort_flag.
 * The answer goes to the gp_cli_xfer (http-int.h), which applies the caps.
 */
#include "cli/http-int.h"

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LIBCURL "libcurl.so.4"

static struct {
        CURLcode (*global_init)(long);
        CURL *(*init)(void);
        CURLcode (*setopt)(CURL *, CURLoption, ...);
        CURLcode (*perform)(CURL *);
        CURLcode (*getinfo)(CURL *, CURLINFO, ...);
        void (*cleanup)(CURL *);
        const char *(*strerror)(CURLcode);
        struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
        void (*slist_free_all)(struct curl_slist *);
} cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static char cu_error[512]; /* why libcurl is not usable; "" once loaded */

#define SYM(field, name)                                                                   \
        do {                                                                               \
                void *p_ = dlsym(dl, name);                                                \
                if (!p_) {                                                                 \
                        snprintf(cu_error, sizeof(cu_error), "%s lacks %s", lib, name);    \
                        return;                                                            \
                }                                                                          \
                cu.field = (__typeof__(cu.field))p_;                                       \
        } while (0)

static void cu_load(void) {
        const char *lib = getenv("GPUPOOL_LIBCURL");
        if (!lib || !*lib)
                lib = LIBCURL;
        snprintf(cu_error, sizeof(cu_error), "not loaded");
        void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!dl) {
                const char *e = dlerror();
                snprintf(cu_error, sizeof(cu_error), "%s", e ? e : lib);
                return;
        }
        SYM(global_init, "curl_global_init");
        SYM(init, "curl_easy_init");
        SYM(setopt, "curl_easy_setopt");
        SYM(perform, "curl_easy_perform");
        SYM(getinfo, "curl_easy_getinfo");
        SYM(cleanup, "curl_easy_cleanup");
        SYM(strerror, "curl_easy_strerror");
        SYM(slist_append, "curl_slist_append");
        SYM(slist_free_all, "curl_slist_free_all");
        if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                snprintf(cu_error, sizeof(cu_error), "curl_global_init failed");
                return;
        }
        cu_error[0] = '\0';
}

struct cx {
        gp_cli_xfer *x;
        CURL *h;
        int sink_rc;              /* what gp_cli_xfer_body refused with */
};

static void status_once(struct cx *k) {
        if (k->x->status)
                return;
        long st = 0;
        cu.getinfo(k->h, CURLINFO_RESPONSE_CODE, &st);
        gp_cli_xfer_status(k->x, st);
}

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
        struct cx *k = ud;
        size_t len = size * n;
        status_once(k);
        int r = gp_cli_xfer_body(k->x, p, len);
        if (r < 0) {
                k->sink_rc = r;
                return 0; /* CURLE_WRITE_ERROR */
        }
        return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
        struct cx *k = ud;
        size_t len = size * n;
        static const char name[] = "retry-after:";
        if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0)
                gp_cli_xfer_retry_after(k->x, p + sizeof(name) - 1, len - (sizeof(name) - 1));
        return len;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
        struct cx *k = ud;
        const volatile sig_atomic_t *a = k->x->c->abort_flag;
        return (a && *a) ? 1 : 0;
}

static int curl_failure(struct cx *k, CURLcode cc, const char *errbuf) {
        gp_cli_xfer *x = k->x;
        if (cc == CURLE_ABORTED_BY_CALLBACK)
                return -ECANCELED;
        if (cc == CURLE_OUT_OF_MEMORY)
                return -ENOMEM;
        if (k->sink_rc < 0)
                return k->sink_rc; /* -E2BIG, -EPIPE (message written), -ENOMEM */
        if (cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL) {
                gp_buf_printf(x->err, "bad server URL %s: %s", x->c->api, cu.strerror(cc));
                return -EINVAL;
        }
        gp_buf_printf(x->err, "cannot reach %s: ", x->c->api);
        long oserr = 0;
        cu.getinfo(k->h, CURLINFO_OS_ERRNO, &oserr);
        switch (cc) {
        case CURLE_COULDNT_CONNECT:
                gp_buf_printf(x->err, "%s (is `gpupool server` running?)",
                              oserr ? strerror((int)oserr) : "connection failed");
                break;
        case CURLE_COULDNT_RESOLVE_HOST:
                gp_buf_printf(x->err, "unknown host (%s)", errbuf[0] ? errbuf : cu.strerror(cc));
                break;
        case CURLE_OPERATION_TIMEDOUT:
                if (x->timeout_s > 0)
                        gp_buf_printf(x->err, "no answer within %ld s", x->timeout_s);
                else
                        gp_buf_printf(x->err, "timed out (%s)", errbuf[0] ? errbuf : cu.strerror(cc));
                break;
        case CURLE_PEER_FAILED_VERIFICATION:
                /* nothing was sent: the server's certificate failed the check */
                gp_buf_printf(x->err, "%s (its certificate is not signed by %s; a gpupool server's own CA is its "
                              "DATA_DIR/tls/ca.crt: pass --cacert FILE or set GPUPOOL_CACERT)",
                              errbuf[0] ? errbuf : cu.strerror(cc),
                              x->c->cacert ? x->c->cacert : "a CA of this system");
                break;
        default:
                gp_buf_puts(x->err, errbuf[0] ? errbuf : cu.strerror(cc));
                break;
        }
        return -EHOSTUNREACH;
}

/* The request's header list; NULL on allocation failure. */
static struct curl_slist *headers(const gp_cli_xfer *x) {
        struct curl_slist *h = NULL, *t;
        char auth[GP_CLI_KEY_MAX + 64];
        /* a POST without a body goes out with CURLOPT_POSTFIELDS "", for which curl
         * would name a form type: the server refuses any type but JSON on a write (415) */
        bool json = x->payload || strcmp(x->method, "POST") == 0;
        char idem[GP_CLI_IDEM_KEY_MAX + 32];
        const char *lines[5] = {"Accept: application/json, text/plain", "Expect:",
                                json ? "Content-Type: application/json" : NULL, NULL, NULL};
        if (x->c->key) {
                if (snprintf(auth, sizeof(auth), "Authorization: Bearer %s", x->c->key) >= (int)sizeof(auth))
                        return NULL;
                lines[3] = auth;
        }
        if (x->idem_key) {
                if (snprintf(idem, sizeof(idem), "Idempotency-Key: %s", x->idem_key) >= (int)sizeof(idem))
                        return NULL;
                lines[4] = idem;
        }
        for (size_t i = 0; i < 5; i++) {
                if (!lines[i])
                        continue;
                if (!(t = cu.slist_append(h, lines[i]))) {
                        cu.slist_free_all(h);
                        return NULL;
                }
                h = t;
        }
        return h;
}

int gp_cli_curl_exchange(gp_cli_xfer *x, const char *url) {
        char errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hdrs = NULL;
        struct cx k = {.x = x};
        int rc;

        pthread_once(&cu_once, cu_load);
        if (cu_error[0]) {
                gp_buf_printf(x->err, "%s needs libcurl, which cannot be loaded (%s); install Debian's "
                              "libcurl4%s", strncmp(url, "https:", 6) ? "a proxy (http_proxy, all_proxy)"
                                                                      : "https://", cu_error,
                              strncmp(url, "https:", 6) ? " or set no_proxy" : " or use an http:// URL");
                return -ENOPKG;
        }
        k.h = cu.init();
        if (!k.h)
                return -ENOMEM;
        if (!(hdrs = headers(x))) {
                rc = -ENOMEM;
                goto out;
        }
        if (cu.setopt(k.h, CURLOPT_URL, url) != CURLE_OK) {
                gp_buf_printf(x->err, "bad server URL %s", x->c->api);
                rc = -EINVAL;
                goto out;
        }
        cu.setopt(k.h, CURLOPT_NOSIGNAL, 1L);
        cu.setopt(k.h, CURLOPT_CONNECTTIMEOUT, GP_CLI_CONNECT_TIMEOUT_S);
        cu.setopt(k.h, CURLOPT_TIMEOUT, x->timeout_s);
        cu.setopt(k.h, CURLOPT_ERRORBUFFER, errbuf);
        cu.setopt(k.h, CURLOPT_USERAGENT, "gpupool-cli/" GP_VERSION);
        cu.setopt(k.h, CURLOPT_PROTOCOLS_STR, "http,https");
        cu.setopt(k.h, CURLOPT_TCP_KEEPALIVE, 1L);
        if (x->c->cacert) { /* that CA alone, peer and host checked (libcurl's default) */
                cu.setopt(k.h, CURLOPT_CAINFO, x->c->cacert);
                cu.setopt(k.h, CURLOPT_CAPATH, NULL);
        }
        cu.setopt(k.h, CURLOPT_HEADERFUNCTION, on_header);
        cu.setopt(k.h, CURLOPT_HEADERDATA, &k);
        cu.setopt(k.h, CURLOPT_WRITEFUNCTION, on_body);
        cu.setopt(k.h, CURLOPT_WRITEDATA, &k);
        cu.setopt(k.h, CURLOPT_HTTPHEADER, hdrs);
        cu.setopt(k.h, CURLOPT_CUSTOMREQUEST, x->method);
        if (x->c->abort_flag) {
                cu.setopt(k.h, CURLOPT_NOPROGRESS, 0L);
                cu.setopt(k.h, CURLOPT_XFERINFOFUNCTION, on_progress);
                cu.setopt(k.h, CURLOPT_XFERINFODATA, &k);
        }
        if (x->payload) {
                cu.setopt(k.h, CURLOPT_POSTFIELDS, x->payload);
                cu.setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->payload_len);
        } else if (strcmp(x->method, "POST") == 0) {
                cu.setopt(k.h, CURLOPT_POSTFIELDS, "");
                cu.setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        }
        CURLcode cc = cu.perform(k.h);
        if (cc != CURLE_OK) {
                /* nothing reached a server only when none was connected to */
                x->sent = cc != CURLE_COULDNT_CONNECT && cc != CURLE_COULDNT_RESOLVE_HOST &&
                          cc != CURLE_COULDNT_RESOLVE_PROXY;
                rc = curl_failure(&k, cc, errbuf);
                goto out;
        }
        status_once(&k);
        rc = 0;
out:
        if (hdrs)
                cu.slist_free_all(hdrs);
        cu.cleanup(k.h);
        return rc;
}
