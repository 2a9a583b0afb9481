/* test-tls.c - unit tests of src/base/tls.c against the openssl command:
 * the CA pin equals kubeadm's recipe computed by openssl, the generated CA
 * and server certificate form a chain `openssl verify` accepts for the
 * names asked, and credentials refuse a key of another certificate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/tls-keep.h"
#include "base/tls.h"

static char dir[64];

static int setup(void **state) {
        (void)state;
        snprintf(dir, sizeof(dir), "/tmp/test-tls-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
        (void)state;
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        return system(cmd) == 0 ? 0 : -1;
}

/* Runs a shell command in dir; its exit status; its first line of output in out. */
static int sh(char *out, size_t outlen, const char *fmt, ...) {
        char cmd[2048], full[2200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        snprintf(full, sizeof(full), "cd %s && (%s) 2>/dev/null", dir, cmd);
        FILE *p = popen(full, "r");
        assert_non_null(p);
        char line[4096] = "";
        if (out && outlen) {
                out[0] = 0;
                while (fgets(line, sizeof(line), p))
                        if (!out[0])
                                snprintf(out, outlen, "%s", line);
        } else {
                while (fgets(line, sizeof(line), p))
                        ;
        }
        int st = pclose(p);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *name) {
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        char *s = NULL;
        assert_int_equal(gp_tls_read_pem(path, &s, NULL), 0);
        return s;
}

static void spit(const char *name, const char *s) {
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(fputs(s, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
}

/* kubeadm's recipe: sha256 of the DER public key of the certificate in file. */
static void openssl_pin(const char *file, char out[GP_TLS_HASH_LEN]) {
        char line[256];
        assert_int_equal(sh(line, sizeof(line),
                            "openssl x509 -in %s -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum", file),
                         0);
        assert_true(strlen(line) > 64);
        snprintf(out, GP_TLS_HASH_LEN, "sha256:%.64s", line);
}

static void expect_pin_of(const char *file) {
        char want[GP_TLS_HASH_LEN], got[GP_TLS_HASH_LEN];
        openssl_pin(file, want);
        char *pem = slurp(file);
        assert_int_equal(gp_tls_ca_hash_pem(pem, strlen(pem), got), 0);
        assert_string_equal(got, want);
        free(pem);
}

static void test_ca_hash_equals_openssl_pubkey_sha256(void **state) {
        (void)state;
        assert_int_equal(sh(NULL, 0,
                            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ec.key "
                            "-out ec.crt -days 30 -subj /CN=ec-ca"),
                         0);
        expect_pin_of("ec.crt");
        assert_int_equal(sh(NULL, 0,
                            "openssl req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.crt -days 30 "
                            "-subj /CN=rsa-ca"),
                         0);
        expect_pin_of("rsa.crt");
        /* a bundle: the pin is the first certificate's */
        char *ec = slurp("ec.crt"), *rsa = slurp("rsa.crt");
        char both[16384], a[GP_TLS_HASH_LEN], b[GP_TLS_HASH_LEN];
        snprintf(both, sizeof(both), "%s%s", rsa, ec);
        assert_int_equal(gp_tls_ca_hash_pem(both, strlen(both), a), 0);
        assert_int_equal(gp_tls_ca_hash_pem(rsa, strlen(rsa), b), 0);
        assert_string_equal(a, b);
        free(ec);
        free(rsa);
}

static void test_ca_hash_refuses_what_is_no_certificate(void **state) {
        (void)state;
        char out[GP_TLS_HASH_LEN] = "untouched";
        static const char junk[] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_int_equal(gp_tls_ca_hash_pem(junk, sizeof(junk) - 1, out), -GP_EPARSE);
        assert_int_equal(gp_tls_ca_hash_pem("", 0, out), -GP_EPARSE);
        assert_int_equal(gp_tls_ca_hash_pem("hello", 5, out), -GP_EPARSE);
        assert_string_equal(out, "untouched");
}

static void test_generated_chain_verifies_with_the_sans_asked(void **state) {
        (void)state;
        char *ca = NULL, *cakey = NULL, *crt = NULL, *key = NULL;
        assert_int_equal(gp_tls_make_ca("gpupool-ca", 3650, &ca, &cakey), 0);
        static const char *const sans[] = {"localhost", "127.0.0.1", "::1", "gp.example.org", "10.1.2.3", "localhost"};
        assert_int_equal(gp_tls_make_cert(ca, cakey, "gpupool-server", sans, 6, 0, 365, &crt, &key), 0);
        spit("gca.crt", ca);
        spit("gserver.crt", crt);
        spit("gserver.key", key);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile gca.crt gserver.crt"), 0);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile gca.crt -verify_hostname gp.example.org gserver.crt"), 0);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile gca.crt -verify_ip 10.1.2.3 gserver.crt"), 0);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile gca.crt -verify_ip ::1 gserver.crt"), 0);
        /* a name not asked is not in it */
        assert_int_not_equal(sh(NULL, 0, "openssl verify -CAfile gca.crt -verify_hostname other.org gserver.crt"), 0);
        assert_int_not_equal(sh(NULL, 0, "openssl verify -CAfile gca.crt -verify_ip 10.1.2.4 gserver.crt"), 0);
        /* the CA is a P-256 CA valid for ten years; the key matches the certificate */
        char line[512];
        assert_int_equal(sh(line, sizeof(line), "openssl x509 -in gca.crt -noout -text | grep -c 'CA:TRUE'"), 0);
        assert_int_equal(sh(line, sizeof(line), "openssl x509 -in gca.crt -noout -text | grep 'NIST CURVE'"), 0);
        assert_non_null(strstr(line, "P-256"));
        assert_int_equal(sh(NULL, 0, "openssl x509 -in gca.crt -noout -checkend %d", 3640 * 86400), 0);
        assert_int_not_equal(sh(NULL, 0, "openssl x509 -in gca.crt -noout -checkend %d", 3651 * 86400), 0);
        assert_int_equal(sh(NULL, 0,
                            "test \"$(openssl x509 -in gserver.crt -pubkey -noout)\" = "
                            "\"$(openssl pkey -in gserver.key -pubout)\""),
                         0);
        expect_pin_of("gca.crt");

        /* the credentials pin the CA given, or else the last certificate of the file */
        gp_tls_creds *c = NULL;
        char err[256] = "";
        assert_int_equal(gp_tls_creds_new(crt, key, ca, &c, err, sizeof(err)), 0);
        char want[GP_TLS_HASH_LEN];
        openssl_pin("gca.crt", want);
        assert_string_equal(gp_tls_creds_ca_hash(c), want);
        size_t len = 0;
        assert_string_equal(gp_tls_creds_ca_pem(c, &len), ca);
        assert_int_equal(len, strlen(ca));
        time_t na = gp_tls_creds_not_after(c);
        assert_true(na > time(NULL) + 363 * 86400 && na < time(NULL) + 366 * 86400);
        assert_ptr_equal(gp_tls_creds_ref(c), c);
        gp_tls_creds_unref(c);
        gp_tls_creds_unref(c);
        char chain[16384];
        snprintf(chain, sizeof(chain), "%s%s", crt, ca);
        assert_int_equal(gp_tls_creds_new(chain, key, NULL, &c, err, sizeof(err)), 0);
        assert_string_equal(gp_tls_creds_ca_hash(c), want);
        gp_tls_creds_unref(c);

        /* a certificate that starts later (for tests of not-yet-valid peers) */
        char *late = NULL, *latekey = NULL;
        assert_int_equal(gp_tls_make_cert(ca, cakey, "late", sans, 1, 86400, 1, &late, &latekey), 0);
        spit("late.crt", late);
        assert_int_not_equal(sh(NULL, 0, "openssl verify -CAfile gca.crt late.crt"), 0);
        free(late);
        free(latekey);
        free(ca);
        free(cakey);
        free(crt);
        free(key);
}

static void test_creds_refuse_a_key_of_another_certificate(void **state) {
        (void)state;
        char *ca = NULL, *cakey = NULL, *crt = NULL, *key = NULL, *crt2 = NULL, *key2 = NULL;
        static const char *const sans[] = {"localhost"};
        assert_int_equal(gp_tls_make_ca("ca", 10, &ca, &cakey), 0);
        assert_int_equal(gp_tls_make_cert(ca, cakey, "a", sans, 1, 0, 10, &crt, &key), 0);
        assert_int_equal(gp_tls_make_cert(ca, cakey, "b", sans, 1, 0, 10, &crt2, &key2), 0);
        gp_tls_creds *c = NULL;
        char err[256] = "";
        assert_int_equal(gp_tls_creds_new(crt, key2, ca, &c, err, sizeof(err)), -EINVAL);
        assert_null(c);
        assert_true(strlen(err) > 0);
        assert_int_equal(gp_tls_creds_new("garbage", key, NULL, &c, err, sizeof(err)), -EINVAL);
        assert_null(c);
        /* files: a missing one is named in the message */
        assert_int_equal(gp_tls_creds_load("/nonexistent/x.crt", "/nonexistent/x.key", NULL, &c, err, sizeof(err)),
                         -EINVAL);
        assert_non_null(strstr(err, "/nonexistent/x.crt"));
        /* a CA that is not a certificate is refused */
        assert_int_equal(gp_tls_make_cert("junk", cakey, "x", sans, 1, 0, 10, &crt2, &key2), -EINVAL);
        assert_int_equal(gp_tls_make_ca("", 10, &crt2, &key2), -EINVAL);
        free(ca);
        free(cakey);
        free(crt);
        free(key);
        free(crt2);
        free(key2);
}

/* A node's certificate: its own key (only the public half goes to the CA),
 * a chain `openssl verify` accepts for the names given, and the checks the
 * agent makes (signed by that CA, names its host, for its key). */
static void test_node_key_is_signed_for_its_names_and_checked(void **state) {
        (void)state;
        char *ca = NULL, *cakey = NULL, *ca2 = NULL, *cakey2 = NULL, *key = NULL, *pub = NULL, *crt = NULL;
        char *key2 = NULL, *pub2 = NULL, *junk = NULL;
        static const char *const sans[] = {"127.0.0.1", "gpu-a.example", "10.9.8.7"};
        assert_int_equal(gp_tls_make_ca("cluster", 10, &ca, &cakey), 0);
        assert_int_equal(gp_tls_make_ca("other", 10, &ca2, &cakey2), 0);
        assert_int_equal(gp_tls_make_key(&key, &pub), 0);
        assert_non_null(strstr(key, "PRIVATE KEY"));
        assert_null(strstr(pub, "PRIVATE"));
        assert_int_equal(gp_tls_sign_pubkey(ca, cakey, pub, strlen(pub), "gpupool node a", sans, 3, 90, &crt), 0);
        spit("nca.crt", ca);
        spit("node.crt", crt);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile nca.crt -verify_ip 10.9.8.7 node.crt"), 0);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile nca.crt -verify_hostname gpu-a.example node.crt"), 0);
        assert_int_not_equal(sh(NULL, 0, "openssl verify -CAfile nca.crt -verify_hostname gpu-b.example node.crt"), 0);
        time_t na = 0;
        assert_int_equal(gp_tls_cert_check(crt, strlen(crt), ca, strlen(ca), "gpu-a.example", &na), 0);
        assert_true(na > time(NULL) + 89 * 86400 && na < time(NULL) + 91 * 86400);
        assert_int_equal(gp_tls_cert_check(crt, strlen(crt), ca, strlen(ca), "10.9.8.7", NULL), 0);
        assert_int_equal(gp_tls_cert_check(crt, strlen(crt), ca, strlen(ca), "10.9.8.8", NULL), -ENOENT);
        assert_int_equal(gp_tls_cert_check(crt, strlen(crt), ca2, strlen(ca2), NULL, NULL), -EPERM);
        assert_int_equal(gp_tls_cert_check("x", 1, ca, strlen(ca), NULL, NULL), -GP_EPARSE);
        /* the certificate goes with its key, not with another */
        gp_tls_creds *c = NULL;
        char err[256];
        assert_int_equal(gp_tls_creds_new(crt, key, NULL, &c, err, sizeof(err)), 0);
        gp_tls_creds_unref(c);
        assert_int_equal(gp_tls_make_key(&key2, &pub2), 0);
        assert_int_equal(gp_tls_creds_new(crt, key2, NULL, &c, err, sizeof(err)), -EINVAL);
        /* what is no P-256 public key is refused: garbage, an RSA key */
        static const char bad[] = "-----BEGIN PUBLIC KEY-----\nAA==\n-----END PUBLIC KEY-----\n";
        assert_int_equal(gp_tls_sign_pubkey(ca, cakey, bad, strlen(bad), "n", sans, 1, 90, &junk), -GP_EPARSE);
        assert_int_equal(sh(NULL, 0, "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out rsa.key && "
                                     "openssl pkey -in rsa.key -pubout -out rsa.pub"),
                         0);
        char *rsa = slurp("rsa.pub");
        assert_int_equal(gp_tls_sign_pubkey(ca, cakey, rsa, strlen(rsa), "n", sans, 1, 90, &junk), -GP_EPARSE);
        assert_int_equal(gp_tls_sign_pubkey(ca, "junk", pub, strlen(pub), "n", sans, 1, 90, &junk), -EINVAL);
        assert_null(junk);
        free(rsa);
        free(ca);
        free(cakey);
        free(ca2);
        free(cakey2);
        free(key);
        free(pub);
        free(key2);
        free(pub2);
        free(crt);
}

static gp_tls_keep *open_generated(const char *sub, const char *const *sans, size_t nsans) {
        char d[256], err[512] = "";
        snprintf(d, sizeof(d), "%s/%s", dir, sub);
        gp_tls_keep_opts o = {.dir = d, .sans = sans, .nsans = nsans};
        gp_tls_keep *k = NULL;
        int r = gp_tls_keep_open(&o, &k, err, sizeof(err));
        if (r < 0)
                fail_msg("gp_tls_keep_open: %s", err);
        return k;
}

static void test_keeper_makes_files_once_and_reissues_when_due(void **state) {
        (void)state;
        static const char *const sans[] = {"localhost", "127.0.0.1"};
        gp_tls_keep *k = open_generated("gen", sans, 2);
        assert_true(gp_tls_keep_generated(k));
        char line[256];
        assert_int_equal(sh(line, sizeof(line), "stat -c %%a gen/ca.key gen/server.key | sort -u"), 0);
        assert_string_equal(line, "600\n");
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile gen/ca.crt -verify_ip 127.0.0.1 gen/server.crt"), 0);
        gp_tls_creds *c = gp_tls_keep_get(k);
        char pin[GP_TLS_HASH_LEN];
        openssl_pin("gen/ca.crt", pin);
        assert_string_equal(gp_tls_creds_ca_hash(c), pin);
        time_t na = gp_tls_creds_not_after(c);
        gp_tls_creds_unref(c);
        gp_tls_keep_free(k);
        char fp1[256], fp2[256];
        assert_int_equal(sh(fp1, sizeof(fp1), "openssl x509 -in gen/server.crt -noout -fingerprint"), 0);

        /* opened again: the same CA and certificate */
        k = open_generated("gen", sans, 2);
        c = gp_tls_keep_get(k);
        assert_string_equal(gp_tls_creds_ca_hash(c), pin);
        gp_tls_creds_unref(c);
        gp_tls_keep_free(k);
        assert_int_equal(sh(fp2, sizeof(fp2), "openssl x509 -in gen/server.crt -noout -fingerprint"), 0);
        assert_string_equal(fp1, fp2);

        /* a name asked that the certificate lacks: a new one, from the same CA */
        static const char *const more[] = {"localhost", "127.0.0.1", "gp.example.net"};
        k = open_generated("gen", more, 3);
        gp_tls_keep_free(k);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile gen/ca.crt -verify_hostname gp.example.net "
                                     "gen/server.crt"), 0);
        openssl_pin("gen/ca.crt", fp2);
        assert_string_equal(fp2, pin);

        /* a certificate within 30 days of its end: made again, for a year */
        char *ca = slurp("gen/ca.crt"), *cakey = slurp("gen/ca.key"), *crt = NULL, *key = NULL;
        assert_int_equal(gp_tls_make_cert(ca, cakey, "short", more, 3, 0, 20, &crt, &key), 0);
        spit("gen/server.crt", crt);
        spit("gen/server.key", key);
        k = open_generated("gen", more, 3);
        c = gp_tls_keep_get(k);
        assert_true(gp_tls_creds_not_after(c) >= na - 86400);
        gp_tls_creds_unref(c);
        /* a check does nothing more while nothing changed */
        assert_int_equal(gp_tls_keep_check(k, false), 0);
        /* while running: a certificate that comes within 30 days of its end is made again by the
         * next look (here one put in place by hand: the first look loads it, the next renews it) */
        free(crt);
        free(key);
        assert_int_equal(gp_tls_make_cert(ca, cakey, "short", more, 3, 0, 20, &crt, &key), 0);
        spit("gen/server.key", key);
        spit("gen/server.crt", crt);
        assert_int_equal(gp_tls_keep_check(k, false), 1);
        c = gp_tls_keep_get(k);
        assert_true(gp_tls_creds_not_after(c) < time(NULL) + 21 * 86400);
        gp_tls_creds_unref(c);
        assert_int_equal(gp_tls_keep_check(k, false), 1);
        c = gp_tls_keep_get(k);
        assert_true(gp_tls_creds_not_after(c) > time(NULL) + 360 * 86400);
        gp_tls_creds_unref(c);
        assert_int_equal(sh(NULL, 0, "openssl verify -CAfile gen/ca.crt -verify_hostname gp.example.net "
                                     "gen/server.crt"), 0);
        gp_tls_keep_free(k);
        free(ca);
        free(cakey);
        free(crt);
        free(key);
}

static void test_keeper_refuses_a_bad_new_file_and_keeps_the_old(void **state) {
        (void)state;
        char *ca = NULL, *cakey = NULL, *crt = NULL, *key = NULL, *crt2 = NULL, *key2 = NULL;
        static const char *const sans[] = {"localhost"};
        assert_int_equal(gp_tls_make_ca("ca", 10, &ca, &cakey), 0);
        assert_int_equal(gp_tls_make_cert(ca, cakey, "one", sans, 1, 0, 10, &crt, &key), 0);
        assert_int_equal(gp_tls_make_cert(ca, cakey, "two", sans, 1, 0, 20, &crt2, &key2), 0);
        spit("k.crt", crt);
        spit("k.key", key);
        char c1[256], k1[256];
        snprintf(c1, sizeof(c1), "%s/k.crt", dir);
        snprintf(k1, sizeof(k1), "%s/k.key", dir);
        gp_tls_keep_opts o = {.cert = c1, .key = k1};
        gp_tls_keep *k = NULL;
        char err[512];
        assert_int_equal(gp_tls_keep_open(&o, &k, err, sizeof(err)), 0);
        assert_false(gp_tls_keep_generated(k));
        gp_tls_creds *old = gp_tls_keep_get(k);
        time_t na = gp_tls_creds_not_after(old);
        assert_int_equal(gp_tls_keep_check(k, false), 0);
        /* a key of another certificate: refused, the old credentials stay */
        spit("k.key", key2);
        assert_true(gp_tls_keep_check(k, false) < 0);
        gp_tls_creds *c = gp_tls_keep_get(k);
        assert_ptr_equal(c, old);
        gp_tls_creds_unref(c);
        /* refused once: not read again until it changes */
        assert_int_equal(gp_tls_keep_check(k, false), 0);
        /* now both: the new ones; the old ones live on while referenced */
        spit("k.crt", crt2);
        assert_int_equal(gp_tls_keep_check(k, false), 1);
        c = gp_tls_keep_get(k);
        assert_ptr_not_equal(c, old);
        assert_true(gp_tls_creds_not_after(c) > na + 5 * 86400);
        assert_int_equal(gp_tls_creds_not_after(old), na);
        gp_tls_creds_unref(c);
        gp_tls_creds_unref(old);
        gp_tls_keep_free(k);
        free(ca);
        free(cakey);
        free(crt);
        free(key);
        free(crt2);
        free(key2);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ca_hash_equals_openssl_pubkey_sha256),
                cmocka_unit_test(test_ca_hash_refuses_what_is_no_certificate),
                cmocka_unit_test(test_generated_chain_verifies_with_the_sans_asked),
                cmocka_unit_test(test_creds_refuse_a_key_of_another_certificate),
                cmocka_unit_test(test_node_key_is_signed_for_its_names_and_checked),
                cmocka_unit_test(test_keeper_makes_files_once_and_reissues_when_due),
                cmocka_unit_test(test_keeper_refuses_a_bad_new_file_and_keeps_the_old),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
