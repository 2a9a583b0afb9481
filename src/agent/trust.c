/* trust.c - the agent's check of its server before any secret goes out
 * (see trust.h).
 *
 * Invariants: nothing this file sends carries a secret (its only request
 * is GET /agent/v1/ca, no Authorization header); DATA_DIR/ca.crt holds a
 * CA whose pin is the one the operator gave (the token's, or --ca-cert's
 * file), written atomically; every easy handle of the agent that goes to
 * an https:// URL trusts that CA alone. */
#include "agent/trust.h"
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent-util.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/tls.h"
#include "base/util.h"

#define CA_ROUTE "/agent/v1/ca"
#define CA_ANSWER_MAX ((size_t)GP_TLS_PEM_MAX + 4096) /* {"ca": PEM, "ca_hash": ...} */

static bool is_https(const char *url) {
        return !strncmp(url, "https://", 8);
}

int gp_agent_trust_check_urls(const gp_agent_trust_opts *o, char *err, size_t errlen) {
        for (int i = 0; i < o->n_urls; i++) {
                const char *u = o->urls[i];
                if (is_https(u) || gp_agent_url_loopback(u) || o->insecure_plaintext)
                        continue;
                snprintf(err, errlen,
                         "refusing to send the join token, the node credential, task env and logs in clear to %s: "
                         "use https:// (the server serves TLS on the same port; its CA is in its data dir's "
                         "tls/ca.crt), or --insecure-plaintext to accept that anyone on the network path can run "
                         "commands as root on this node",
                         u);
                return -EINVAL;
        }
        return 0;
}

/* A whole small file into a NUL-terminated malloc'd string. */
static int read_file(const char *path, char **ret, size_t *ret_len) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        gp_buf b;
        gp_buf_init(&b, GP_TLS_PEM_MAX);
        char chunk[8192];
        int rc = 0;
        for (;;) {
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        rc = -errno;
                        break;
                }
                if (n == 0)
                        break;
                if ((rc = gp_buf_append(&b, chunk, (size_t)n)) < 0)
                        break;
        }
        close(fd);
        if (rc == 0 && !b.data)
                rc = gp_buf_append(&b, "", 0);
        if (rc < 0) {
                gp_buf_done(&b);
                return rc == -E2BIG ? -EFBIG : rc;
        }
        *ret = b.data;
        *ret_len = b.len;
        return 0;
}

/* ca.crt, atomically, 0644: a CA certificate is public. */
static int keep_ca(const char *dir, const char *path, const char *pem, size_t len) {
        return gp_file_write_atomic(dir, path, pem, len, 0644);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud) {
        return gp_buf_append(ud, p, size * nmemb) == 0 ? size * nmemb : 0;
}

/* GET url/agent/v1/ca: verified against ca_file, or unverified when
 * ca_file is NULL.  0 with the answer's PEM (malloc'd) when pem is not
 * NULL; 1 when the server could not be reached or answered no CA (why in
 * err); -EPERM when the check of its certificate failed. */
static int get_ca(const char *url, const char *ca_file, char **pem, char *err, size_t errlen) {
        char full[1100];
        gp_buf b;
        gp_buf_init(&b, CA_ANSWER_MAX);
        CURL *h = curl_easy_init();
        if (!h) {
                snprintf(err, errlen, "out of memory");
                return 1;
        }
        snprintf(full, sizeof(full), "%s" CA_ROUTE, url);
        curl_easy_setopt(h, CURLOPT_URL, full);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        if (ca_file) {
                gp_agent_trust t = {.skip_verify = false};
                gp_strlcpy(t.ca_file, ca_file, sizeof(t.ca_file));
                gp_agent_trust_apply(&t, h);
        } else {
                /* the one unverified exchange: it sends nothing secret, and what it brings is
                 * kept only if its pin is the token's */
                curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
                curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
        }
        CURLcode cc = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        int rc = 1;
        if (cc != CURLE_OK) {
                snprintf(err, errlen, "%s", curl_easy_strerror(cc));
                rc = ca_file && gp_agent_trust_failed(cc) ? -EPERM : 1;
        } else if (status != 200) {
                snprintf(err, errlen, "answered GET " CA_ROUTE " with %ld (a server older than this agent?)", status);
        } else if (pem) {
                json_t *j = json_loadb(b.data ? b.data : "", b.len, 0, NULL);
                const char *s = json_string_value(json_object_get(j, "ca"));
                if (!s || !*s) {
                        snprintf(err, errlen, "answered GET " CA_ROUTE " without a CA certificate");
                } else if (!(*pem = strdup(s))) {
                        snprintf(err, errlen, "out of memory");
                } else {
                        rc = 0;
                }
                json_decref(j);
        } else {
                rc = 0;
        }
        gp_buf_done(&b);
        return rc;
}

/* Fetch the CA from the https:// URLs in turn until one answers; keep it
 * in path if its pin is want, then check that the same server's
 * certificate verifies against it. */
static int bootstrap(const gp_agent_trust_opts *o, const char *path, const char *want, char *err, size_t errlen) {
        int failures = 0;
        gp_info("fetching the server's CA to check it against the join token's %s", want);
        for (;;) {
                for (int i = 0; i < o->n_urls; i++) {
                        const char *u = o->urls[i];
                        char why[512] = "", got[72];
                        char *pem = NULL;
                        if (o->stop && *o->stop)
                                return -ECANCELED;
                        if (!is_https(u))
                                continue;
                        int rc = get_ca(u, NULL, &pem, why, sizeof(why));
                        if (rc != 0) {
                                gp_warn("%s: no CA yet: %s", u, why);
                                continue;
                        }
                        if (gp_tls_ca_hash_pem(pem, strlen(pem), got) < 0) {
                                free(pem);
                                gp_warn("%s: answered GET " CA_ROUTE " with no certificate in it", u);
                                continue;
                        }
                        if (strcmp(got, want)) {
                                free(pem);
                                snprintf(err, errlen,
                                         "%s presents a CA whose hash is %s, not the join token's %s: refusing to "
                                         "send it anything (a server of another cluster, or someone in the middle)",
                                         u, got, want);
                                return -EPERM;
                        }
                        rc = keep_ca(o->data_dir, path, pem, strlen(pem));
                        free(pem);
                        if (rc < 0) {
                                snprintf(err, errlen, "cannot keep the server's CA in %s: %s", path, strerror(-rc));
                                return rc;
                        }
                        rc = get_ca(u, path, NULL, why, sizeof(why));
                        if (rc == -EPERM) {
                                snprintf(err, errlen,
                                         "%s sent the CA the join token names, but its certificate is not signed "
                                         "by that CA (%s): refusing to send it anything (someone in the middle?)",
                                         u, why);
                                return -EPERM;
                        }
                        if (rc == 0) {
                                gp_info("%s: its CA %s is the join token's; kept in %s", u, want, path);
                                return 0;
                        }
                        gp_warn("%s: %s", u, why);
                }
                failures++;
                int64_t d = gp_agent_backoff_ms(failures, (uint32_t)random());
                for (int64_t waited = 0; waited < d; waited += 100) {
                        if (o->stop && *o->stop)
                                return -ECANCELED;
                        struct timespec ts = {0, 100 * 1000 * 1000};
                        nanosleep(&ts, NULL);
                }
        }
}

int gp_agent_trust_setup(const gp_agent_trust_opts *o, gp_agent_trust *ret, char *err, size_t errlen) {
        gp_agent_trust t;
        memset(&t, 0, sizeof(t));
        gp_strlcpy(t.mode, "loopback", sizeof(t.mode));
        int rc = gp_agent_trust_check_urls(o, err, errlen);
        if (rc < 0)
                return rc;
        bool https = false;
        for (int i = 0; i < o->n_urls; i++) {
                https |= is_https(o->urls[i]);
                if (!is_https(o->urls[i]) && !gp_agent_url_loopback(o->urls[i]) && !t.plaintext) {
                        t.plaintext = true;
                        gp_strlcpy(t.mode, "plaintext", sizeof(t.mode));
                        snprintf(t.warning, sizeof(t.warning),
                                 "--insecure-plaintext: the join token, the node credential, task env and logs go "
                                 "in clear to %s; anyone on the network path can run commands as root on this node",
                                 o->urls[i]);
                }
        }
        const char *want = o->ca_hash && o->ca_hash[0] ? o->ca_hash : NULL;
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/ca.crt", o->data_dir) >= (int)sizeof(path)) {
                snprintf(err, errlen, "data dir path too long");
                return -ENAMETOOLONG;
        }
        if (!https)
                goto done;
        if (o->insecure_skip_verify && !want && !o->ca_cert) {
                t.skip_verify = true;
                gp_strlcpy(t.mode, "skip-verify", sizeof(t.mode));
                snprintf(t.warning, sizeof(t.warning),
                         "--insecure-skip-verify: the server's certificate is not checked; whoever is on the "
                         "network path can take the join token and the node credential and run commands as root "
                         "on this node");
                goto done;
        }
        if (o->insecure_skip_verify)
                gp_warn("--insecure-skip-verify ignored: the server is checked against %s",
                        o->ca_cert ? o->ca_cert : "the join token's CA hash");
        char *pem = NULL, have[72] = "";
        size_t len = 0;
        if (o->ca_cert) {
                if ((rc = read_file(o->ca_cert, &pem, &len)) < 0) {
                        snprintf(err, errlen, "cannot read --ca-cert %s: %s", o->ca_cert,
                                 rc == -EFBIG ? "larger than 1 MiB" : strerror(-rc));
                        return rc;
                }
                if (gp_tls_ca_hash_pem(pem, len, have) < 0) {
                        free(pem);
                        snprintf(err, errlen, "--ca-cert %s holds no PEM certificate", o->ca_cert);
                        return -EINVAL;
                }
                if (want && strcmp(have, want)) {
                        free(pem);
                        snprintf(err, errlen, "--ca-cert %s is the CA %s, but the join token names %s", o->ca_cert,
                                 have, want);
                        return -EINVAL;
                }
                rc = keep_ca(o->data_dir, path, pem, len);
                free(pem);
                if (rc < 0) {
                        snprintf(err, errlen, "cannot keep the CA in %s: %s", path, strerror(-rc));
                        return rc;
                }
        } else if (read_file(path, &pem, &len) == 0) {
                rc = gp_tls_ca_hash_pem(pem, len, have);
                free(pem);
                if (rc < 0 && !want) {
                        snprintf(err, errlen, "%s holds no PEM certificate: remove it and join with a token that "
                                              "carries the CA hash, or give --ca-cert FILE", path);
                        return -EINVAL;
                }
                if (want && (rc < 0 || strcmp(have, want))) {
                        gp_info("%s is not the CA the join token names (%s): fetching the server's again", path, want);
                        if ((rc = bootstrap(o, path, want, err, errlen)) < 0)
                                return rc;
                        gp_strlcpy(have, want, sizeof(have));
                }
        } else if (want) {
                if ((rc = bootstrap(o, path, want, err, errlen)) < 0)
                        return rc;
                gp_strlcpy(have, want, sizeof(have));
        } else {
                snprintf(err, errlen,
                         "an https:// server is checked against its CA: give a join token that carries the CA's hash "
                         "(gpj_SECRET.HASH, as `gpupool join-token create` prints it; `gpupool ca` shows the hash), "
                         "or --ca-cert FILE (the server's DATA_DIR/tls/ca.crt), or --insecure-skip-verify");
                return -EINVAL;
        }
        gp_strlcpy(t.ca_file, path, sizeof(t.ca_file));
        gp_strlcpy(t.ca_hash, have, sizeof(t.ca_hash));
        if (!t.plaintext)
                gp_strlcpy(t.mode, "verified", sizeof(t.mode));
done:
        if (t.warning[0])
                gp_warn("%s", t.warning);
        *ret = t;
        return 0;
}

void gp_agent_trust_apply(const gp_agent_trust *t, CURL *h) {
        if (t->skip_verify) {
                curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
                curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
                return;
        }
        /* the cluster's CA alone: no system bundle, no directory of CAs */
        curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file[0] ? t->ca_file : "/dev/null");
        curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
}

bool gp_agent_trust_failed(CURLcode cc) {
        return cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
               cc == CURLE_SSL_ISSUER_ERROR || cc == CURLE_SSL_PINNEDPUBKEYNOTMATCH;
}
