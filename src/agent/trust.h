/* trust.h - how `gpupool agent` knows it talks to its server (issue 22;
 * docs/security.md "The agent channel").
 *
 * Before the agent sends anything secret (the join token, its node
 * credential, its runs' logs) it settles how every connection is checked:
 *   - http:// only to a loopback host (gp_agent_url_loopback), unless
 *     --insecure-plaintext (a warning at start and in /health);
 *   - https:// verified against one CA, the cluster's, kept in
 *     DATA_DIR/ca.crt: from --ca-cert FILE, or fetched once from the
 *     server's open route GET /agent/v1/ca with verification off and kept
 *     only if its pin (SHA-256 of its SubjectPublicKeyInfo) is the one the
 *     join token carries (gpj_SECRET.PIN, as kubeadm's discovery hash), and
 *     only if the same server's certificate then verifies against it.  A
 *     restarted agent uses the CA it kept.  --insecure-skip-verify turns
 *     verification off (a warning), for a token without a pin only.
 * Every https:// URL of the agent's list is verified the same way, peer
 * and host name, against that CA alone (no system CAs).
 *
 * Not thread-safe: the agent's one thread calls it, before its loop. */
#ifndef GP_AGENT_TRUST_H
#define GP_AGENT_TRUST_H

#include <curl/curl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#define GP_AGENT_EXIT_UNTRUSTED 79 /* the server failed the check: nothing secret was sent */

typedef struct gp_agent_trust {
        char ca_file[PATH_MAX];       /* the CA https:// connections are verified against; "" = none */
        char ca_hash[72];             /* its pin, "sha256:<hex>"; "" = none */
        bool skip_verify;             /* --insecure-skip-verify in force */
        bool plaintext;               /* --insecure-plaintext in force for a URL off loopback */
        char mode[16];                /* "verified", "skip-verify", "plaintext" or "loopback" (/health "tls") */
        char warning[400];            /* what is insecure, "" = nothing (/health "warning") */
} gp_agent_trust;

typedef struct gp_agent_trust_opts {
        const char *data_dir;         /* where ca.crt is kept */
        const char *ca_cert;          /* --ca-cert FILE, or NULL */
        const char *ca_hash;          /* the join token's pin "sha256:<hex>", or "" / NULL */
        bool insecure_plaintext;      /* --insecure-plaintext */
        bool insecure_skip_verify;    /* --insecure-skip-verify */
        char *const *urls;            /* the server URLs (http:// or https://, no trailing '/') */
        int n_urls;
        const volatile sig_atomic_t *stop; /* set by a signal: give up waiting for a server */
} gp_agent_trust_opts;

/* The URLs' rules alone, no I/O: 0, or -EINVAL with the reason in err (an
 * http:// URL off loopback without --insecure-plaintext). */
int gp_agent_trust_check_urls(const gp_agent_trust_opts *o, char *err, size_t errlen);

/* Settle the trust (above) into *ret: may wait for a server to answer
 * GET /agent/v1/ca (retrying with backoff, the URLs in turn) and writes
 * DATA_DIR/ca.crt.  curl_global_init must have been called.  Returns 0;
 * -EINVAL (usage: the reason in err), -EPERM (the server failed the check:
 * a CA whose pin is not the token's, or a certificate it did not sign;
 * nothing secret was sent), -ECANCELED (*stop was raised), -EIO and other
 * -errno (cannot read --ca-cert or keep ca.crt; err says which).  *ret is
 * written only on success. */
int gp_agent_trust_setup(const gp_agent_trust_opts *o, gp_agent_trust *ret, char *err, size_t errlen);

/* Verification options for an easy handle that goes to one of the URLs:
 * the CA file, peer and host checks on (or off with skip_verify). */
void gp_agent_trust_apply(const gp_agent_trust *t, CURL *h);

/* Is a transfer's result a failed check of the server (its certificate,
 * or the CA file)?  Such a failure means nothing was sent. */
bool gp_agent_trust_failed(CURLcode cc);

#endif
