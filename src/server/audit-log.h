/* audit-log.h - the audit log's form in the store (audit-log.c): the
 * entries of GET /admin/audit in segments of GP_AUDIT_SEG under the meta
 * keys "audit.0" .. "audit.<GP_AUDIT_NSEG - 1>", so a batch that adds an
 * entry rewrites one segment, not the whole log.  tenants.c keeps the log
 * in memory and calls these on the loop's store; not thread-safe (the
 * caller's lock), no logging. */
#ifndef GP_SERVER_AUDIT_LOG_H
#define GP_SERVER_AUDIT_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;
struct gp_store;

#define GP_AUDIT_SEG 100                       /* entries per segment */
#define GP_AUDIT_NSEG (1000 / GP_AUDIT_SEG + 1) /* slots: more than GP_AUDIT_MAX (1000) entries */

/* The stored log: its last max entries (a new array: the caller owns it),
 * the sequence number the next entry gets (how many were ever appended),
 * and whether it came from the single "audit" array of before (then the
 * next gp_audit_log_store writes every entry as segments).  A missing or
 * unreadable segment is skipped.  0 or -ENOMEM. */
int gp_audit_log_load(struct gp_store *ws, size_t max, struct json_t **ret_entries, int64_t *ret_seq,
                      bool *ret_legacy);
/* Inside the caller's transaction: store the segments holding entries
 * from sequence number saved (the first not stored yet) to seq - 1;
 * entries holds the newest entries, the last of them numbered seq - 1.
 * legacy: every segment in memory, and the old "audit" key emptied.
 * Changes nothing in memory (a failed commit is stored again).  0,
 * -ENOMEM or a store error. */
int gp_audit_log_store(struct gp_store *ws, const struct json_t *entries, int64_t seq, int64_t saved,
                       bool legacy);

#endif
