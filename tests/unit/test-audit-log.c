/* test-audit-log.c - the audit log's segments in the store (audit-log.h):
 * what is stored comes back (the newest GP_AUDIT_MAX entries, the next
 * sequence number) across many batches and wraps of the slots; a batch
 * rewrites only the segments of its new entries; the single "audit" array
 * of before is read and converted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/audit-log.h"
#include "store/store.h"

#define MAX 1000

static gp_store *open_tmp(char *dir, size_t size) {
        snprintf(dir, size, "/tmp/gp-audit-XXXXXX");
        assert_non_null(mkdtemp(dir));
        char url[512], err[256];
        snprintf(url, sizeof(url), "sqlite://%s/s.db", dir);
        gp_store *s = NULL;
        assert_int_equal(gp_store_open(url, NULL, &s, err, sizeof(err)), 0);
        return s;
}

static void close_tmp(gp_store *s, const char *dir) {
        gp_store_close(s);
        char path[600];
        const char *files[] = {"s.db", "s.db-wal", "s.db-shm"};
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
                unlink(path);
        }
        rmdir(dir);
}

/* Append entry number seq to mem (the newest MAX kept), as tenants.c does. */
static void append(json_t *mem, int64_t seq) {
        json_array_append_new(mem, json_pack("{s:I}", "n", (json_int_t)seq));
        while (json_array_size(mem) > MAX)
                json_array_remove(mem, 0);
}

static void store(gp_store *s, json_t *mem, int64_t seq, int64_t saved, bool legacy) {
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_audit_log_store(s, mem, seq, saved, legacy), 0);
        assert_int_equal(gp_store_commit(s), 0);
}

static void test_empty_store_has_no_entries(void **state) {
        (void)state;
        char dir[64];
        gp_store *s = open_tmp(dir, sizeof(dir));
        json_t *e = NULL;
        int64_t seq = -1;
        bool legacy = true;
        assert_int_equal(gp_audit_log_load(s, MAX, &e, &seq, &legacy), 0);
        assert_int_equal(json_array_size(e), 0);
        assert_int_equal(seq, 0);
        assert_false(legacy);
        json_decref(e);
        close_tmp(s, dir);
}

static void test_entries_come_back_across_batches_and_wraps(void **state) {
        (void)state;
        char dir[64];
        gp_store *s = open_tmp(dir, sizeof(dir));
        json_t *mem = json_array();
        int64_t seq = 0, saved = 0;
        /* batches of 1..13 entries, past several wraps of the slots */
        for (int b = 0; seq < 3 * GP_AUDIT_SEG * GP_AUDIT_NSEG + 17; b++) {
                for (int i = 0; i <= b % 13; i++)
                        append(mem, seq++);
                store(s, mem, seq, saved, false);
                saved = seq;
                if (b % 50 == 0 || seq < 30) { /* what a restart would read */
                        json_t *e = NULL;
                        int64_t lseq = 0;
                        bool legacy = true;
                        assert_int_equal(gp_audit_log_load(s, MAX, &e, &lseq, &legacy), 0);
                        assert_int_equal(lseq, seq);
                        assert_false(legacy);
                        assert_true(json_equal(e, mem));
                        json_decref(e);
                }
        }
        json_t *e = NULL;
        int64_t lseq = 0;
        bool legacy = true;
        assert_int_equal(gp_audit_log_load(s, MAX, &e, &lseq, &legacy), 0);
        assert_int_equal(json_array_size(e), MAX);
        assert_true(json_equal(e, mem));
        assert_int_equal(json_integer_value(json_object_get(json_array_get(e, MAX - 1), "n")), seq - 1);
        json_decref(e);
        /* a batch rewrote only its segment: the slot of an older one still holds what it held */
        char buf[1 << 16];
        int64_t cur = (seq - 1) / GP_AUDIT_SEG;
        char key[32];
        snprintf(key, sizeof(key), "audit.%d", (int)((cur - 1) % GP_AUDIT_NSEG));
        assert_int_equal(gp_store_meta_get(s, key, buf, sizeof(buf)), 0);
        json_t *old = json_loads(buf, 0, NULL);
        assert_int_equal(json_integer_value(json_object_get(old, "seg")), cur - 1);
        assert_int_equal(json_array_size(json_object_get(old, "entries")), GP_AUDIT_SEG);
        json_decref(old);
        json_decref(mem);
        close_tmp(s, dir);
}

static void test_single_array_of_before_is_read_and_converted(void **state) {
        (void)state;
        char dir[64];
        gp_store *s = open_tmp(dir, sizeof(dir));
        assert_int_equal(gp_store_begin(s), 0);
        assert_int_equal(gp_store_meta_set(s, "audit", "[{\"n\":0},{\"n\":1},{\"n\":2}]"), 0);
        assert_int_equal(gp_store_commit(s), 0);
        json_t *mem = NULL;
        int64_t seq = 0;
        bool legacy = false;
        assert_int_equal(gp_audit_log_load(s, MAX, &mem, &seq, &legacy), 0);
        assert_int_equal(json_array_size(mem), 3);
        assert_int_equal(seq, 3);
        assert_true(legacy);
        append(mem, seq++);
        store(s, mem, seq, seq - 1, true); /* legacy: all of it goes into segments */
        json_t *e = NULL;
        int64_t lseq = 0;
        assert_int_equal(gp_audit_log_load(s, MAX, &e, &lseq, &legacy), 0);
        assert_false(legacy);
        assert_int_equal(lseq, 4);
        assert_true(json_equal(e, mem));
        char buf[256];
        assert_int_equal(gp_store_meta_get(s, "audit", buf, sizeof(buf)), 0);
        assert_string_equal(buf, "[]");
        json_decref(e);
        json_decref(mem);
        close_tmp(s, dir);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_empty_store_has_no_entries),
                cmocka_unit_test(test_entries_come_back_across_batches_and_wraps),
                cmocka_unit_test(test_single_array_of_before_is_read_and_converted),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
