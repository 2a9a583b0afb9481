/* tenants.h - tenants, API keys and the audit log of the daemon.
 *
 * The tenants of the config, changed at run time by PUT /admin/tenants/{id}
 * and joined by keys made with POST /admin/tenants/{id}/keys.  Run-time
 * changes are stored in the store's metadata ("tenants", "keys", "weights",
 * the audit log's segments "audit.N": audit-log.h) in the loop thread's
 * transaction, so they survive a restart
 * and are stored before they are acknowledged.  Keys are kept only as
 * SHA-256 hashes.  The audit log keeps the last GP_AUDIT_MAX changes (who,
 * when, what, old value, new value).  The time rules in force decide the
 * quotas, weights and group shares pushed into the scheduler.
 *
 * gp_tenants is opaque: its tables, the audit log, the time rules in force
 * and what is left to store are its own.  It keeps pointers to the
 * config, the loop thread's store and the scheduler it was opened with
 * (the daemon's, which outlive it).
 *
 * Threads: not thread-safe; the daemon's lock (d->lock) guards it.
 * Lookups run on HTTP threads under that lock; changes run on the loop
 * thread under it (gp_tenants_apply, _audit, _tick, _store).
 */
#ifndef GP_SERVER_TENANTS_H
#define GP_SERVER_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

struct hreq;
struct cmd;
struct gp_sched;
struct gp_store;

typedef struct gp_tenants gp_tenants;

#define GP_AUDIT_MAX 1000
#define GP_KEYS_MAX 4096

/* Build the tenant and key tables from cfg and what ws holds (stored
 * run-time changes win over the file); load the time rules' zones.
 * cfg, ws and sched must outlive it.  Start-up only.  0 with *ret, or a
 * negative code with a message in err. */
int gp_tenants_open(gp_tenants **ret, const gp_config *cfg, struct gp_store *ws, struct gp_sched *sched,
                    char *err, size_t errlen);
/* Takes NULL. */
void gp_tenants_close(gp_tenants *ts);

/* true when any key exists (config admin or tenant keys, or made at run
 * time): then every request but probes and the page needs a key. */
bool gp_tenants_auth_required(const gp_tenants *ts);

/* Who holds this key (the raw bearer token)?  0 with *ret_admin, or with
 * the tenant's id copied to ret_tenant; -ENOENT for an unknown key.
 * d->lock held. */
int gp_tenants_authenticate(gp_tenants *ts, const char *key, bool *ret_admin, char *ret_tenant,
                            size_t size);

/* The Unix user the tenant's batch tasks run as (tenants[].run_as of the
 * config file), or NULL.  Only the file sets it: run-time changes and
 * tenants made at run time never do, so no API key can choose it.  The
 * config does not change after start: no lock needed, any thread. */
const char *gp_tenants_run_as(const gp_tenants *ts, const char *id);

/* The tenant's record, or NULL. d->lock held; valid until the lock is
 * released. */
const gp_cfg_tenant *gp_tenants_find(const gp_tenants *ts, const char *id);
/* The i-th tenant (0 <= i < gp_tenants_count), for walking them all.
 * d->lock held; valid until the lock is released. */
/* The most GPUs (1/1000) the tenant may ever hold at once: its
 * quota.max_gpus, or a time rule's when that is larger; 0 when some rule
 * (or the quota itself) sets no limit, or the tenant is unknown.  A task
 * needing more can never be admitted.  d->lock held. */
int64_t gp_tenants_max_gpus_ever(const gp_tenants *ts, const char *id);
/* The tenant's gateway limits now: tenants[].gateway, overlaid by the
 * time rules in force (each rule's entry for the tenant's group, then its
 * entry for the tenant; later rules win).  0 = unlimited.  d->lock held. */
void gp_tenants_gw_limits(const gp_tenants *ts, const gp_cfg_tenant *t, int *ret_max_concurrent, int64_t *ret_rpm,
                          int64_t *ret_tpm);
size_t gp_tenants_count(const gp_tenants *ts);
const gp_cfg_tenant *gp_tenants_at(const gp_tenants *ts, size_t i);

/* Which time rules are in force at now_ms; when that changed (or force),
 * push the effective weights, group shares and tenant settings into the
 * scheduler, log and audit the switch.  Returns true when something
 * changed.  d->lock held (loop thread, or start-up). */
bool gp_tenants_tick(gp_tenants *ts, int64_t now_ms, bool force);

/* Names of the time rules in force, comma-separated, into buf ("" if
 * none). d->lock held. */
void gp_tenants_rules_in_force(const gp_tenants *ts, char *buf, size_t size);

/* For /admin/scheduler/stats: the time rules (and whether each is in
 * force) and every tenant's usage against its quota in force.  Caller
 * json_decref's. d->lock held. */
struct json_t *gp_tenants_stats_json(gp_tenants *ts);

/* For the alert tenant_quota_used_pct: fn(ud, id, pct) for each tenant
 * with a quota in force (gp_monitor_quota_used_pct; tenants without one
 * are skipped).  d->lock held. */
void gp_tenants_quota_used(gp_tenants *ts, int64_t now_ms,
                           void (*fn)(void *ud, const char *tenant, double pct), void *ud);

/* HTTP: GET /api/v1/tenants[/{id}], GET|PUT /admin/tenants/{id},
 * POST /admin/tenants/{id}/keys, GET /admin/audit and GET|PUT
 * /admin/scheduler/weights are gp_tenants_routes (routes.h). */

/* Loop thread: apply a CMD_TENANT_PUT / CMD_KEY_CREATE / CMD_WEIGHTS.
 * Marks what must be stored in this batch and gives the answer to send
 * once the batch is stored (*ret_body malloc'd). */
void gp_tenants_apply(gp_tenants *ts, struct cmd *c, int64_t now_ms, int *ret_status, char **ret_body);
/* Loop thread (d->lock held): append a change to the audit log (stored
 * with the batch).  Takes ownership of old and new (either may be NULL). */
void gp_tenants_audit(gp_tenants *ts, const char *who, const char *action, const char *target,
                      struct json_t *old, struct json_t *new, int64_t now_ms);
/* The audit log, newest last (a copy: caller json_decref's; NULL when
 * the memory is short).  d->lock held. */
struct json_t *gp_tenants_audit_list(const gp_tenants *ts);
/* true when a change waits to be stored (gp_tenants_store). */
bool gp_tenants_pending(const gp_tenants *ts);
/* Loop thread, inside the batch transaction: store what changed (still
 * marked changed: a failed commit is tried again).  0 or a store error. */
int gp_tenants_store(gp_tenants *ts);
/* Loop thread, after the batch's commit succeeded: nothing left to store. */
void gp_tenants_stored(gp_tenants *ts);

#endif
