/* audit-log.c - how the audit log is kept in the store's metadata
 * (audit-log.h).
 *
 * The log is cut into segments of GP_AUDIT_SEG entries by sequence number
 * (entry s is in segment s / GP_AUDIT_SEG); segment k lives under the meta
 * key "audit.<k mod GP_AUDIT_NSEG>" as {"seg": k, "entries": [...]}.  A
 * batch rewrites only the segments its new entries fall in (usually one,
 * at most GP_AUDIT_SEG entries), not the whole log: a coordinator that
 * audits every lock grant stores a few KiB per write, not the last 1,000
 * entries each time.  GP_AUDIT_NSEG slots hold more than GP_AUDIT_MAX
 * entries, so the newest GP_AUDIT_MAX are always there.  Invariants: the
 * slots are written in order of k, so the newest segment K and the ones
 * before it down to K - GP_AUDIT_NSEG + 1 are in their slots; each
 * segment is stored whole (all its entries are in memory whenever it is
 * written, since GP_AUDIT_SEG <= GP_AUDIT_MAX).
 */
#include "server/audit-log.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

#define META_MAX (2 * 1024 * 1024) /* one meta value, as tenants.c reads them */

static void slot_key(int64_t seg, char *out, size_t size) {
        snprintf(out, size, "audit.%" PRId64, seg % GP_AUDIT_NSEG);
}

static json_t *meta_get(gp_store *ws, const char *key, char *buf) {
        return gp_store_meta_get(ws, key, buf, META_MAX) == 0 ? json_loads(buf, 0, NULL) : NULL;
}

int gp_audit_log_load(gp_store *ws, size_t max, json_t **ret_entries, int64_t *ret_seq, bool *ret_legacy) {
        char *buf = malloc(META_MAX);
        json_t *segs[GP_AUDIT_NSEG] = {NULL};
        json_t *out = json_array();
        int rc = -ENOMEM;
        if (!buf || !out)
                goto done;
        int64_t newest = -1;
        for (int i = 0; i < GP_AUDIT_NSEG; i++) {
                char key[32];
                slot_key(i, key, sizeof(key));
                json_t *j = meta_get(ws, key, buf);
                json_t *k = json_object_get(j, "seg");
                if (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) % GP_AUDIT_NSEG != i ||
                    !json_is_array(json_object_get(j, "entries"))) {
                        json_decref(j);
                        continue;
                }
                segs[i] = j;
                if (json_integer_value(k) > newest)
                        newest = json_integer_value(k);
        }
        bool legacy = newest < 0;
        int64_t seq = 0;
        if (legacy) { /* written before segments: one array under "audit" */
                json_t *old = meta_get(ws, "audit", buf);
                if (json_is_array(old))
                        json_array_extend(out, old);
                json_decref(old);
                seq = (int64_t)json_array_size(out);
        } else {
                for (int64_t k = newest - GP_AUDIT_NSEG + 1; k <= newest; k++) {
                        if (k < 0)
                                continue;
                        json_t *j = segs[k % GP_AUDIT_NSEG];
                        if (!j || json_integer_value(json_object_get(j, "seg")) != k)
                                continue; /* a slot not written since an older segment: nothing of k */
                        json_t *e = json_object_get(j, "entries");
                        json_array_extend(out, e);
                        if (k == newest)
                                seq = k * GP_AUDIT_SEG + (int64_t)json_array_size(e);
                }
        }
        while (json_array_size(out) > max)
                json_array_remove(out, 0);
        *ret_entries = out;
        *ret_seq = seq;
        *ret_legacy = legacy && json_array_size(out) > 0;
        out = NULL;
        rc = 0;
done:
        for (int i = 0; i < GP_AUDIT_NSEG; i++)
                json_decref(segs[i]);
        json_decref(out);
        free(buf);
        return rc;
}

int gp_audit_log_store(gp_store *ws, const json_t *entries, int64_t seq, int64_t saved, bool legacy) {
        size_t n = json_array_size(entries);
        int64_t first = seq - (int64_t)n; /* the sequence number of entries[0] */
        if (legacy || saved < first)
                saved = first;
        if (saved >= seq)
                return 0;
        for (int64_t k = saved / GP_AUDIT_SEG; k <= (seq - 1) / GP_AUDIT_SEG; k++) {
                json_t *e = json_array();
                int64_t from = k * GP_AUDIT_SEG > first ? k * GP_AUDIT_SEG : first;
                int64_t to = (k + 1) * GP_AUDIT_SEG < seq ? (k + 1) * GP_AUDIT_SEG : seq;
                for (int64_t s = from; e && s < to; s++)
                        json_array_append(e, json_array_get(entries, (size_t)(s - first)));
                json_t *j = e ? json_pack("{s:I,s:o}", "seg", (json_int_t)k, "entries", e) : NULL;
                char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
                json_decref(j);
                if (!text)
                        return -ENOMEM;
                char key[32];
                slot_key(k, key, sizeof(key));
                int rc = gp_store_meta_set(ws, key, text);
                free(text);
                if (rc < 0)
                        return rc;
        }
        /* the old single array is replaced by the segments: emptied once */
        return legacy ? gp_store_meta_set(ws, "audit", "[]") : 0;
}
