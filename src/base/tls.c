/* tls.c - pins, generated certificates and refcounted credentials on
 * GnuTLS (see tls.h).
 *
 * Invariants: a gp_tls_creds is immutable once made (a reload makes a new
 * one), so a reference is all a reader needs; its count is atomic.  Every
 * PEM we read is bounded by GP_TLS_PEM_MAX.  Keys are generated with
 * GnuTLS's own random generator. */
#include "base/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/sha256.h"

struct gp_tls_creds {
        int refs;                             /* atomic */
        gnutls_certificate_credentials_t gc;  /* certificate and key for handshakes */
        char *ca_pem;                         /* the CA that clients pin, NUL-terminated */
        size_t ca_len;                        /* its length */
        char ca_hash[GP_TLS_HASH_LEN];        /* its pin */
        time_t not_after;                     /* the server certificate's */
};

static gnutls_datum_t datum(const char *s, size_t len) {
        gnutls_datum_t d = {(unsigned char *)(uintptr_t)s, (unsigned int)len};
        return d;
}

int gp_tls_ca_hash_pem(const char *pem, size_t len, char out[GP_TLS_HASH_LEN]) {
        gnutls_x509_crt_t crt = NULL;
        gnutls_pubkey_t pub = NULL;
        gnutls_datum_t der = {NULL, 0};
        int r = -GP_EPARSE;

        if (!pem || len == 0 || len > GP_TLS_PEM_MAX)
                return -GP_EPARSE;
        if (gnutls_x509_crt_init(&crt) < 0)
                return -ENOMEM;
        gnutls_datum_t in = datum(pem, len);
        if (gnutls_x509_crt_import(crt, &in, GNUTLS_X509_FMT_PEM) < 0)
                goto out;
        if (gnutls_pubkey_init(&pub) < 0) {
                r = -ENOMEM;
                goto out;
        }
        if (gnutls_pubkey_import_x509(pub, crt, 0) < 0 || gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &der) < 0)
                goto out;
        uint8_t d[32];
        gp_sha256(der.data, der.size, d);
        memcpy(out, "sha256:", 7);
        for (int i = 0; i < 32; i++)
                snprintf(out + 7 + 2 * i, 3, "%02x", d[i]);
        r = 0;
out:
        gnutls_free(der.data);
        if (pub)
                gnutls_pubkey_deinit(pub);
        gnutls_x509_crt_deinit(crt);
        return r;
}

/* A malloc'd NUL-terminated copy of a GnuTLS datum, which it frees. */
static char *take_datum(gnutls_datum_t *d) {
        char *s = malloc((size_t)d->size + 1);
        if (s) {
                memcpy(s, d->data, d->size);
                s[d->size] = 0;
        }
        gnutls_free(d->data);
        d->data = NULL;
        return s;
}

static int new_p256(gnutls_x509_privkey_t *ret) {
        gnutls_x509_privkey_t k;
        if (gnutls_x509_privkey_init(&k) < 0)
                return -ENOMEM;
        if (gnutls_x509_privkey_generate(k, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0) <
            0) {
                gnutls_x509_privkey_deinit(k);
                return -EIO;
        }
        *ret = k;
        return 0;
}

/* Version, a random 16-byte positive serial, the name, the validity and the
 * key (key, or when it is NULL the public key pub). */
static int fill_common(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, gnutls_pubkey_t pub, const char *cn,
                       long start_offset_s, int days) {
        unsigned char serial[16];
        if (gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof(serial)) < 0)
                return -EIO;
        serial[0] = (serial[0] & 0x7f) | 0x01; /* positive, and no leading zero byte */
        time_t now = time(NULL);
        time_t from = start_offset_s ? now + start_offset_s : now - 3600;
        if (gnutls_x509_crt_set_version(crt, 3) < 0 || gnutls_x509_crt_set_serial(crt, serial, sizeof(serial)) < 0 ||
            gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn, (unsigned)strlen(cn)) < 0 ||
            gnutls_x509_crt_set_activation_time(crt, from) < 0 ||
            gnutls_x509_crt_set_expiration_time(crt, from + (time_t)days * 86400) < 0 ||
            (key ? gnutls_x509_crt_set_key(crt, key) : gnutls_x509_crt_set_pubkey(crt, pub)) < 0)
                return -EIO;
        unsigned char kid[64];
        size_t kidlen = sizeof(kid);
        if (gnutls_x509_crt_get_key_id(crt, GNUTLS_KEYID_USE_SHA1, kid, &kidlen) < 0 ||
            gnutls_x509_crt_set_subject_key_id(crt, kid, kidlen) < 0)
                return -EIO;
        return 0;
}

static int export_pair(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, char **ret_cert, char **ret_key) {
        gnutls_datum_t c = {NULL, 0}, k = {NULL, 0};
        if (gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &c) < 0)
                return -EIO;
        if (gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &k) < 0) {
                gnutls_free(c.data);
                return -EIO;
        }
        char *cs = take_datum(&c), *ks = take_datum(&k);
        if (!cs || !ks) {
                free(cs);
                if (ks)
                        explicit_bzero(ks, strlen(ks));
                free(ks);
                return -ENOMEM;
        }
        *ret_cert = cs;
        *ret_key = ks;
        return 0;
}

int gp_tls_make_ca(const char *cn, int days, char **ret_cert_pem, char **ret_key_pem) {
        gnutls_x509_privkey_t key = NULL;
        gnutls_x509_crt_t crt = NULL;
        int r;

        if (!cn || !*cn || days <= 0 || days > 100 * 366)
                return -EINVAL;
        r = new_p256(&key);
        if (r < 0)
                return r;
        if (gnutls_x509_crt_init(&crt) < 0) {
                r = -ENOMEM;
                goto out;
        }
        r = fill_common(crt, key, NULL, cn, 0, days);
        if (r < 0)
                goto out;
        r = -EIO;
        if (gnutls_x509_crt_set_basic_constraints(crt, 1, -1) < 0 ||
            gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN |
                                                       GNUTLS_KEY_DIGITAL_SIGNATURE) < 0 ||
            gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0) < 0)
                goto out;
        r = export_pair(crt, key, ret_cert_pem, ret_key_pem);
out:
        if (crt)
                gnutls_x509_crt_deinit(crt);
        gnutls_x509_privkey_deinit(key);
        return r;
}

/* Adds one subjectAltName: an iPAddress when s parses as one, else a dNSName. */
static int add_san(gnutls_x509_crt_t crt, const char *s) {
        unsigned char a[16];
        if (inet_pton(AF_INET, s, a) == 1)
                return gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, a, 4, GNUTLS_FSAN_APPEND);
        if (inet_pton(AF_INET6, s, a) == 1)
                return gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, a, 16, GNUTLS_FSAN_APPEND);
        return gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, s, (unsigned)strlen(s),
                                                    GNUTLS_FSAN_APPEND);
}

/* A server certificate's extensions (not a CA, digital signature, TLS
 * server, the subjectAltNames) and the CA's signature. */
static int finish_leaf(gnutls_x509_crt_t crt, gnutls_x509_crt_t ca, gnutls_x509_privkey_t cakey,
                       const char *const *sans, size_t nsans) {
        if (gnutls_x509_crt_set_basic_constraints(crt, 0, -1) < 0 ||
            gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE) < 0 ||
            gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0) < 0)
                return -EIO;
        for (size_t i = 0; i < nsans; i++) {
                if (!sans[i] || !*sans[i])
                        return -EINVAL;
                int dup = 0;
                for (size_t j = 0; j < i && !dup; j++)
                        dup = strcmp(sans[i], sans[j]) == 0;
                if (!dup && add_san(crt, sans[i]) < 0)
                        return -EIO;
        }
        unsigned char kid[64];
        size_t kidlen = sizeof(kid);
        if (gnutls_x509_crt_get_subject_key_id(ca, kid, &kidlen, NULL) >= 0 &&
            gnutls_x509_crt_set_authority_key_id(crt, kid, kidlen) < 0)
                return -EIO;
        if (gnutls_x509_crt_sign2(crt, ca, cakey, GNUTLS_DIG_SHA256, 0) < 0)
                return -EIO;
        return 0;
}

/* The CA's certificate and key from PEM: 0, -ENOMEM, -EINVAL. */
static int import_ca(const char *ca_cert_pem, const char *ca_key_pem, gnutls_x509_crt_t *ret_ca,
                     gnutls_x509_privkey_t *ret_key) {
        gnutls_x509_crt_t ca = NULL;
        gnutls_x509_privkey_t key = NULL;
        if (gnutls_x509_crt_init(&ca) < 0 || gnutls_x509_privkey_init(&key) < 0) {
                if (ca)
                        gnutls_x509_crt_deinit(ca);
                return -ENOMEM;
        }
        gnutls_datum_t cd = datum(ca_cert_pem, strlen(ca_cert_pem)), kd = datum(ca_key_pem, strlen(ca_key_pem));
        if (gnutls_x509_crt_import(ca, &cd, GNUTLS_X509_FMT_PEM) < 0 ||
            gnutls_x509_privkey_import2(key, &kd, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN) < 0) {
                gnutls_x509_crt_deinit(ca);
                gnutls_x509_privkey_deinit(key);
                return -EINVAL;
        }
        *ret_ca = ca;
        *ret_key = key;
        return 0;
}

int gp_tls_make_cert(const char *ca_cert_pem, const char *ca_key_pem, const char *cn, const char *const *sans,
                     size_t nsans, long start_offset_s, int days, char **ret_cert_pem, char **ret_key_pem) {
        gnutls_x509_crt_t ca = NULL, crt = NULL;
        gnutls_x509_privkey_t cakey = NULL, key = NULL;
        int r;

        if (!ca_cert_pem || !ca_key_pem || !cn || !*cn || days <= 0 || days > 100 * 366 || (nsans && !sans))
                return -EINVAL;
        if ((r = import_ca(ca_cert_pem, ca_key_pem, &ca, &cakey)) < 0)
                return r;
        if (gnutls_x509_crt_init(&crt) < 0) {
                r = -ENOMEM;
                goto out;
        }
        r = new_p256(&key);
        if (r < 0)
                goto out;
        r = fill_common(crt, key, NULL, cn, start_offset_s, days);
        if (r < 0)
                goto out;
        r = finish_leaf(crt, ca, cakey, sans, nsans);
        if (r < 0)
                goto out;
        r = export_pair(crt, key, ret_cert_pem, ret_key_pem);
out:
        if (key)
                gnutls_x509_privkey_deinit(key);
        if (cakey)
                gnutls_x509_privkey_deinit(cakey);
        if (crt)
                gnutls_x509_crt_deinit(crt);
        if (ca)
                gnutls_x509_crt_deinit(ca);
        return r;
}

int gp_tls_make_key(char **ret_key_pem, char **ret_pub_pem) {
        gnutls_x509_privkey_t key = NULL;
        gnutls_pubkey_t pub = NULL;
        gnutls_privkey_t abs = NULL;
        gnutls_datum_t k = {NULL, 0}, p = {NULL, 0};
        int r = new_p256(&key);
        if (r < 0)
                return r;
        r = -EIO;
        if (gnutls_privkey_init(&abs) < 0 || gnutls_pubkey_init(&pub) < 0) {
                r = -ENOMEM;
                goto out;
        }
        if (gnutls_privkey_import_x509(abs, key, 0) < 0 || gnutls_pubkey_import_privkey(pub, abs, 0, 0) < 0 ||
            gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &k) < 0 ||
            gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_PEM, &p) < 0)
                goto out;
        size_t klen = k.size;
        char *ks = take_datum(&k), *ps = take_datum(&p);
        if (!ks || !ps) {
                if (ks)
                        explicit_bzero(ks, klen);
                free(ks);
                free(ps);
                r = -ENOMEM;
                goto out;
        }
        *ret_key_pem = ks;
        *ret_pub_pem = ps;
        r = 0;
out:
        if (k.data) {
                explicit_bzero(k.data, k.size);
                gnutls_free(k.data);
        }
        gnutls_free(p.data);
        if (pub)
                gnutls_pubkey_deinit(pub);
        if (abs)
                gnutls_privkey_deinit(abs); /* not key: imported without AUTO_RELEASE */
        gnutls_x509_privkey_deinit(key);
        return r;
}

int gp_tls_sign_pubkey(const char *ca_cert_pem, const char *ca_key_pem, const char *pub_pem, size_t pub_len,
                       const char *cn, const char *const *sans, size_t nsans, int days, char **ret_cert_pem) {
        gnutls_x509_crt_t ca = NULL, crt = NULL;
        gnutls_x509_privkey_t cakey = NULL;
        gnutls_pubkey_t pub = NULL;
        gnutls_datum_t c = {NULL, 0};
        int r;

        if (!ca_cert_pem || !ca_key_pem || !pub_pem || pub_len == 0 || pub_len > GP_TLS_PEM_MAX || !cn || !*cn ||
            days <= 0 || days > 100 * 366 || (nsans && !sans))
                return -EINVAL;
        if ((r = import_ca(ca_cert_pem, ca_key_pem, &ca, &cakey)) < 0)
                return r;
        if (gnutls_pubkey_init(&pub) < 0 || gnutls_x509_crt_init(&crt) < 0) {
                r = -ENOMEM;
                goto out;
        }
        gnutls_datum_t pd = datum(pub_pem, pub_len);
        unsigned bits = 0;
        if (gnutls_pubkey_import(pub, &pd, GNUTLS_X509_FMT_PEM) < 0 ||
            gnutls_pubkey_get_pk_algorithm(pub, &bits) != GNUTLS_PK_ECDSA || bits != 256) {
                r = -GP_EPARSE; /* only the keys gp_tls_make_key makes: ECDSA P-256 */
                goto out;
        }
        if ((r = fill_common(crt, NULL, pub, cn, 0, days)) < 0 || (r = finish_leaf(crt, ca, cakey, sans, nsans)) < 0)
                goto out;
        if (gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &c) < 0) {
                r = -EIO;
                goto out;
        }
        char *cs = take_datum(&c);
        if (!cs) {
                r = -ENOMEM;
                goto out;
        }
        *ret_cert_pem = cs;
        r = 0;
out:
        if (pub)
                gnutls_pubkey_deinit(pub);
        if (crt)
                gnutls_x509_crt_deinit(crt);
        gnutls_x509_privkey_deinit(cakey);
        gnutls_x509_crt_deinit(ca);
        return r;
}

int gp_tls_cert_check(const char *cert_pem, size_t len, const char *ca_pem, size_t ca_len, const char *host,
                      time_t *ret_not_after) {
        gnutls_x509_crt_t crt = NULL, ca = NULL;
        int r = -GP_EPARSE;
        if (!cert_pem || len == 0 || len > GP_TLS_PEM_MAX || !ca_pem || ca_len == 0 || ca_len > GP_TLS_PEM_MAX)
                return -GP_EPARSE;
        if (gnutls_x509_crt_init(&crt) < 0 || gnutls_x509_crt_init(&ca) < 0) {
                r = -ENOMEM;
                goto out;
        }
        gnutls_datum_t cd = datum(cert_pem, len), ad = datum(ca_pem, ca_len);
        if (gnutls_x509_crt_import(crt, &cd, GNUTLS_X509_FMT_PEM) < 0 ||
            gnutls_x509_crt_import(ca, &ad, GNUTLS_X509_FMT_PEM) < 0)
                goto out;
        unsigned status = 0;
        if (gnutls_x509_crt_verify(crt, &ca, 1, GNUTLS_VERIFY_DISABLE_TIME_CHECKS, &status) < 0 || status) {
                r = -EPERM;
                goto out;
        }
        if (host && *host && !gnutls_x509_crt_check_hostname2(crt, host, 0)) {
                r = -ENOENT;
                goto out;
        }
        if (ret_not_after)
                *ret_not_after = gnutls_x509_crt_get_expiration_time(crt);
        r = 0;
out:
        if (crt)
                gnutls_x509_crt_deinit(crt);
        if (ca)
                gnutls_x509_crt_deinit(ca);
        return r;
}

int gp_tls_read_pem(const char *path, char **ret, size_t *ret_len) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        if (!S_ISREG(st.st_mode) || st.st_size > GP_TLS_PEM_MAX) {
                close(fd);
                return S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
        }
        char *b = malloc((size_t)st.st_size + 1);
        if (!b) {
                close(fd);
                return -ENOMEM;
        }
        size_t n = 0;
        for (;;) {
                ssize_t k = read(fd, b + n, (size_t)st.st_size - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        int e = -errno;
                        close(fd);
                        free(b);
                        return e;
                }
                if (k == 0 || (n += (size_t)k) == (size_t)st.st_size)
                        break;
        }
        close(fd);
        b[n] = 0;
        *ret = b;
        if (ret_len)
                *ret_len = n;
        return 0;
}

/* The last "-----BEGIN CERTIFICATE-----" block of pem, or NULL. */
static const char *last_cert(const char *pem, size_t *ret_len) {
        static const char B[] = "-----BEGIN CERTIFICATE-----", E[] = "-----END CERTIFICATE-----";
        const char *last = NULL, *p = pem;
        while ((p = strstr(p, B)) != NULL) {
                last = p;
                p += sizeof(B) - 1;
        }
        if (!last)
                return NULL;
        const char *e = strstr(last, E);
        if (!e)
                return NULL;
        e += sizeof(E) - 1;
        if (*e == '\n')
                e++;
        *ret_len = (size_t)(e - last);
        return last;
}

int gp_tls_creds_new(const char *cert_pem, const char *key_pem, const char *ca_pem, gp_tls_creds **ret, char *err,
                     size_t errlen) {
        gp_tls_creds *c = calloc(1, sizeof(*c));
        gnutls_x509_crt_t crt = NULL;
        int r;

        if (!c)
                return -ENOMEM;
        c->refs = 1;
        size_t calen = 0;
        const char *ca = ca_pem ? ca_pem : last_cert(cert_pem, &calen);
        if (ca_pem)
                calen = strlen(ca_pem);
        if (!ca || gp_tls_ca_hash_pem(ca, calen, c->ca_hash) < 0) {
                snprintf(err, errlen, "%s holds no certificate", ca_pem ? "the CA file" : "the certificate file");
                r = -EINVAL;
                goto fail;
        }
        c->ca_pem = strndup(ca, calen);
        if (!c->ca_pem || gnutls_certificate_allocate_credentials(&c->gc) < 0) {
                r = -ENOMEM;
                goto fail;
        }
        c->ca_len = calen;
        gnutls_datum_t cd = datum(cert_pem, strlen(cert_pem)), kd = datum(key_pem, strlen(key_pem));
        int g = gnutls_certificate_set_x509_key_mem(c->gc, &cd, &kd, GNUTLS_X509_FMT_PEM);
        if (g < 0) {
                snprintf(err, errlen, "certificate and key: %s", gnutls_strerror(g));
                r = -EINVAL;
                goto fail;
        }
        if (gnutls_x509_crt_init(&crt) < 0) {
                r = -ENOMEM;
                goto fail;
        }
        if (gnutls_x509_crt_import(crt, &cd, GNUTLS_X509_FMT_PEM) < 0) {
                snprintf(err, errlen, "the certificate file holds no certificate");
                r = -EINVAL;
                goto fail;
        }
        c->not_after = gnutls_x509_crt_get_expiration_time(crt);
        gnutls_x509_crt_deinit(crt);
        *ret = c;
        return 0;
fail:
        if (crt)
                gnutls_x509_crt_deinit(crt);
        gp_tls_creds_unref(c);
        return r;
}

int gp_tls_creds_load(const char *cert_path, const char *key_path, const char *ca_path, gp_tls_creds **ret,
                      char *err, size_t errlen) {
        char *cert = NULL, *key = NULL, *ca = NULL;
        size_t keylen = 0;
        int r = gp_tls_read_pem(cert_path, &cert, NULL);
        if (r < 0) {
                snprintf(err, errlen, "%s: %s", cert_path, strerror(-r));
                return r == -EFBIG || r == -ENOMEM ? r : -EINVAL;
        }
        r = gp_tls_read_pem(key_path, &key, &keylen);
        if (r < 0) {
                snprintf(err, errlen, "%s: %s", key_path, strerror(-r));
                goto out;
        }
        if (ca_path && *ca_path) {
                r = gp_tls_read_pem(ca_path, &ca, NULL);
                if (r < 0) {
                        snprintf(err, errlen, "%s: %s", ca_path, strerror(-r));
                        goto out;
                }
        }
        r = gp_tls_creds_new(cert, key, ca, ret, err, errlen);
out:
        if (key)
                explicit_bzero(key, keylen);
        free(key);
        free(cert);
        free(ca);
        return r;
}

gp_tls_creds *gp_tls_creds_ref(gp_tls_creds *c) {
        if (c)
                __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
        return c;
}

void gp_tls_creds_unref(gp_tls_creds *c) {
        if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        if (c->gc)
                gnutls_certificate_free_credentials(c->gc);
        free(c->ca_pem);
        free(c);
}

void *gp_tls_creds_gnutls(const gp_tls_creds *c) {
        return c->gc;
}

const char *gp_tls_creds_ca_pem(const gp_tls_creds *c, size_t *ret_len) {
        if (ret_len)
                *ret_len = c->ca_len;
        return c->ca_pem;
}

const char *gp_tls_creds_ca_hash(const gp_tls_creds *c) {
        return c->ca_hash;
}

time_t gp_tls_creds_not_after(const gp_tls_creds *c) {
        return c->not_after;
}

int gp_tls_client_creds(const char *ca_pem, size_t ca_len, void **ret) {
        gnutls_certificate_credentials_t gc;
        if (gnutls_certificate_allocate_credentials(&gc) < 0)
                return -ENOMEM;
        if (ca_pem && ca_len) {
                gnutls_datum_t d = datum(ca_pem, ca_len);
                if (gnutls_certificate_set_x509_trust_mem(gc, &d, GNUTLS_X509_FMT_PEM) <= 0) {
                        gnutls_certificate_free_credentials(gc);
                        return -EINVAL;
                }
        }
        *ret = gc;
        return 0;
}
