/* tls-keep.h - the server's current TLS credentials: where they come from
 * (configured PEM files, or a CA and a certificate the server makes in its
 * data dir), and their reload without a restart.
 *
 * A keeper holds one gp_tls_creds at a time; a handshake takes a reference
 * (gp_tls_keep_get) and keeps it for the life of its session, so a reload
 * swaps in new credentials for new handshakes only.  A reload that fails
 * (a missing or bad file, a key that does not match) leaves the current
 * credentials in place and says why in the log.
 *
 * Generated mode (no cert and key configured): DIR/ca.crt, ca.key (0600),
 * server.crt, server.key (0600); an ECDSA P-256 CA valid for ten years,
 * made once, and a server certificate it signs for a year, made again
 * when it is within 30 days of its end, when it lacks a name asked for, or
 * when the CA did not sign it.
 *
 * Thread-safety: every function may be called from any thread, except
 * that gp_tls_keep_free must not race with the others. */
#ifndef GP_BASE_TLS_KEEP_H
#define GP_BASE_TLS_KEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/tls.h"

/* Seconds between two looks at the files' mtimes. */
#define GP_TLS_CHECK_S 2
/* A generated server certificate is made again this close to its end. */
#define GP_TLS_RENEW_S (30 * 86400)
/* Days a generated CA and server certificate are valid. */
#define GP_TLS_CA_DAYS 3650
#define GP_TLS_CERT_DAYS 365

typedef struct gp_tls_keep gp_tls_keep;

typedef struct gp_tls_keep_opts {
        const char *dir;         /* generated mode: the files' directory (made 0700) */
        const char *cert, *key;  /* configured PEM files; NULL or "" (both) = generated mode */
        const char *ca;          /* the CA agents pin; NULL or "" = the cert file's last certificate */
        const char *const *sans; /* generated mode: the names of the server certificate */
        size_t nsans;
        bool plaintext_any;      /* server.tls.plaintext: any */
} gp_tls_keep_opts;

/* Loads (or first makes) the credentials.  0, or a negative code with a
 * message in err (nothing is running then).  The strings of o are copied. */
int gp_tls_keep_open(const gp_tls_keep_opts *o, gp_tls_keep **ret, char *err, size_t errlen);
/* Stops the watching thread and drops the keeper's reference (sessions
 * holding theirs keep them).  Takes NULL. */
void gp_tls_keep_free(gp_tls_keep *k);
/* A reference to the current credentials (never NULL): the caller drops it
 * with gp_tls_creds_unref. */
gp_tls_creds *gp_tls_keep_get(gp_tls_keep *k);
/* Looks at the files now: 1 (new credentials are in use), 0 (nothing
 * changed: with force, the files were read again all the same and nothing
 * differed... or failed, see the return) or a negative code (a change was
 * refused: the old credentials stay; logged). */
int gp_tls_keep_check(gp_tls_keep *k, bool force);
/* Starts a thread that calls gp_tls_keep_check every GP_TLS_CHECK_S
 * seconds, and at once after gp_tls_keep_poke.  0 or -errno. */
int gp_tls_keep_start(gp_tls_keep *k);
/* Ask the thread for a forced check now (SIGHUP); returns at once. */
void gp_tls_keep_poke(gp_tls_keep *k);
/* Whether plaintext is served to peers off loopback (server.tls.plaintext: any). */
bool gp_tls_keep_plaintext_any(const gp_tls_keep *k);
/* Whether the credentials are the generated ones. */
bool gp_tls_keep_generated(const gp_tls_keep *k);

/* Writes s to dir/name through a temporary file and a rename, fsync'd;
 * the file has mode from its creation (0600 for a key).  0 or -errno. */
int gp_tls_write_file(const char *dir, const char *name, const char *s, mode_t mode);

/* The keeper of this process's listeners (the server's main listener and
 * a follower's), set once at start-up before they accept; NULL: no TLS,
 * plaintext for everyone (the simulator, unit tests). */
void gp_tls_set_listener(gp_tls_keep *k);
gp_tls_keep *gp_tls_listener(void);

#endif
