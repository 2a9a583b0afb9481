/* tls.h - the server's certificates, on GnuTLS (the one TLS library of the
 * server: libmicrohttpd links it already).  Never linked into build/gpupool
 * (the CLI): only the server's objects call these functions.
 *
 * Three parts:
 *  - gp_tls_ca_hash_pem: a CA's pin, as kubeadm's discovery-token-ca-cert-hash;
 *  - gp_tls_make_ca / gp_tls_make_cert: an ECDSA P-256 CA and a server
 *    certificate it signs (the server's own CA when none is configured);
 *  - gp_tls_creds: a certificate, its key and the CA that agents pin, loaded
 *    from PEM, refcounted, so that a reload swaps in new credentials while
 *    the sessions that use the old ones keep them until they close.
 * The keeper of the server's current credentials (files, reload, re-issue)
 * is in tls-keep.h. */
#ifndef GP_BASE_TLS_H
#define GP_BASE_TLS_H

#include <stddef.h>
#include <time.h>

/* Bytes of a pin with its NUL: "sha256:" + 64 hex digits + NUL. */
#define GP_TLS_HASH_LEN 72
/* The largest PEM file read (a certificate chain or a key). */
#define GP_TLS_PEM_MAX (1 << 20)

/* out = "sha256:" + 64 lowercase hex digits of the SHA-256 of the DER
 * SubjectPublicKeyInfo of the first certificate of pem[0..len) (exactly
 * kubeadm's discovery-token-ca-cert-hash).  0, or -GP_EPARSE (no
 * certificate in it; out untouched).  Thread-safe. */
int gp_tls_ca_hash_pem(const char *pem, size_t len, char out[GP_TLS_HASH_LEN]);

/* A new ECDSA P-256 CA named cn, valid from an hour ago for days days, as
 * two malloc'd NUL-terminated PEM strings the caller frees.  0, -EINVAL,
 * -ENOMEM or -EIO (GnuTLS failed).  Thread-safe. */
int gp_tls_make_ca(const char *cn, int days, char **ret_cert_pem, char **ret_key_pem);

/* A new ECDSA P-256 key and a server certificate for it, named cn, signed
 * by the CA (ca_cert_pem, ca_key_pem), valid from start_offset_s seconds
 * from now (0: an hour ago, for clocks that disagree a little) for days
 * days, whose subjectAltNames are sans[0..nsans): each one an IPv4 or
 * IPv6 address (an iPAddress name) or else a DNS name; duplicates are
 * kept once.  Malloc'd PEM strings as gp_tls_make_ca.  0, -EINVAL (a CA
 * that does not parse, an empty name), -ENOMEM, -EIO.  Thread-safe. */
int gp_tls_make_cert(const char *ca_cert_pem, const char *ca_key_pem, const char *cn, const char *const *sans,
                     size_t nsans, long start_offset_s, int days, char **ret_cert_pem, char **ret_key_pem);

/* A node's key pair (src/agent/agent-tls.c): a new ECDSA P-256 key and its
 * public key (SubjectPublicKeyInfo), as malloc'd PEM strings the caller
 * frees (the key wiped first).  0, -ENOMEM, -EIO.  Thread-safe. */
int gp_tls_make_key(char **ret_key_pem, char **ret_pub_pem);

/* A server certificate for someone else's key (a node's): the public key
 * pub_pem[0..pub_len) (PEM SubjectPublicKeyInfo; only ECDSA P-256, what
 * gp_tls_make_key makes), named cn and sans as gp_tls_make_cert, signed by
 * the CA, valid from an hour ago for days days.  A malloc'd PEM string.
 * 0, -EINVAL (bad arguments, a CA that does not parse), -GP_EPARSE (the
 * public key does not parse or is not P-256), -ENOMEM, -EIO.  Thread-safe. */
int gp_tls_sign_pubkey(const char *ca_cert_pem, const char *ca_key_pem, const char *pub_pem, size_t pub_len,
                       const char *cn, const char *const *sans, size_t nsans, int days, char **ret_cert_pem);

/* Whether the first certificate of cert_pem[0..len) is signed by the CA
 * ca_pem[0..ca_len) (times not checked) and, unless host is NULL or "",
 * names host (a DNS name or an IP address).  0 and its notAfter in
 * *ret_not_after (may be NULL); -GP_EPARSE (either does not parse),
 * -EPERM (not signed by that CA), -ENOENT (does not name host), -ENOMEM.
 * Thread-safe. */
int gp_tls_cert_check(const char *cert_pem, size_t len, const char *ca_pem, size_t ca_len, const char *host,
                      time_t *ret_not_after);

/* Reads a whole file of at most GP_TLS_PEM_MAX bytes into a malloc'd
 * NUL-terminated string.  0, -errno, -EFBIG.  Thread-safe. */
int gp_tls_read_pem(const char *path, char **ret, size_t *ret_len);

typedef struct gp_tls_creds gp_tls_creds;

/* Credentials from PEM strings: cert_pem (the server's certificate, then
 * any intermediates), key_pem (its key) and ca_pem (the CA that agents and
 * followers pin; NULL: the last certificate of cert_pem).  On a failure
 * (bad PEM, a key that does not match the certificate) a message goes to
 * err and -EINVAL or -ENOMEM is returned.  The new object holds one
 * reference.  Thread-safe. */
int gp_tls_creds_new(const char *cert_pem, const char *key_pem, const char *ca_pem, gp_tls_creds **ret, char *err,
                     size_t errlen);
/* The same from files (ca_path NULL or "": as ca_pem NULL). */
int gp_tls_creds_load(const char *cert_path, const char *key_path, const char *ca_path, gp_tls_creds **ret,
                      char *err, size_t errlen);
/* Takes one more reference (NULL stays NULL).  Any thread. */
gp_tls_creds *gp_tls_creds_ref(gp_tls_creds *c);
/* Drops a reference; the last one frees.  Takes NULL.  Any thread. */
void gp_tls_creds_unref(gp_tls_creds *c);
/* The gnutls_certificate_credentials_t, for gnutls_credentials_set; valid
 * while the caller holds a reference. */
void *gp_tls_creds_gnutls(const gp_tls_creds *c);
/* The CA's PEM (NUL-terminated, *ret_len bytes) and pin, valid while the
 * caller holds a reference: what a join token and the CA route carry. */
const char *gp_tls_creds_ca_pem(const gp_tls_creds *c, size_t *ret_len);
const char *gp_tls_creds_ca_hash(const gp_tls_creds *c);
/* The server certificate's notAfter. */
time_t gp_tls_creds_not_after(const gp_tls_creds *c);

/* A client credential that trusts only ca_pem (NULL: none, so that every
 * certificate fails verification), for the follower's and agent's
 * connections: a gnutls_certificate_credentials_t the caller frees with
 * gnutls_certificate_free_credentials.  0, -EINVAL, -ENOMEM. */
int gp_tls_client_creds(const char *ca_pem, size_t ca_len, void **ret);

#endif
