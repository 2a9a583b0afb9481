/* coord.h - the coordinator API (docs/api.md "Coordinator"): the server
 * registry with heartbeats, the cluster's view, named distributed locks
 * with fencing tokens, and this server's health.
 *
 * State lives in the store (store/coord.h), written through a handle this
 * module owns (store handles are per thread: one for the coordinator,
 * used under its own mutex by the HTTP handlers and the heartbeat thread),
 * each change a transaction of its own, durable before the answer.  The
 * heartbeat thread records this server's own heartbeat every
 * cluster.heartbeat_interval_s directly in the store.  A server is active
 * while its last heartbeat is within cluster.server_timeout_s of the
 * store's clock.  Single server on SQLite: a registry of one, working
 * locks.
 *
 * Audit: every API write that changes the registry or a lock (register,
 * unregister, a heartbeat that adds a server, changes its url or role or
 * brings it back from inactive, lock acquire, renew, steal, release) is
 * answered by the loop thread: the handler stores the change, then posts
 * CMD_COORD_AUDIT with its audit entry and answer; the loop appends the
 * entry to the audit log (tenants.h, the one mechanism of GET
 * /admin/audit) and sends the answer once the batch holding it is durable.
 * Heartbeats that change nothing but the time and load are not audited.
 */
#ifndef GP_SERVER_COORD_H
#define GP_SERVER_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/routes.h"

struct gp_daemon;
struct gp_config;

/* This server's id (cluster.server_id, or the host name when that is "")
 * and url (cluster.advertise_url, or http://server.listen); opens the
 * coordinator's store handle and registers this server.  0 or a negative
 * code with err.  Before gp_daemon_start. */
int gp_coord_open(struct gp_daemon *d, char *err, size_t errlen);
/* This server's url as the registry shows it: cluster.advertise_url, or
 * http://server.listen (https:// when the listener serves TLS and
 * plaintext to loopback only, and that address is not loopback).
 * Truncated to size. */
void gp_coord_self_url(const struct gp_config *cfg, char *out, size_t size);
/* A server's heartbeat in the registry on s (its row: id, url, role
 * "leader" or "follower", load 0..1000; register_ sets its start): the
 * leader's thread and a follower (server.c) both write theirs so.  0 or
 * gp_store_coord_heartbeat's code; *ret_now (if not NULL) gets the
 * store's time of the heartbeat. */
struct gp_store;
int gp_coord_record(struct gp_store *s, const char *id, const char *url, const char *role, int64_t load_milli,
                    bool register_, int64_t *ret_now);
/* Start / stop the heartbeat thread.  start: 0 or -errno. */
int gp_coord_start(struct gp_daemon *d);
void gp_coord_stop(struct gp_daemon *d);
/* Close the handle (takes a daemon without one). */
void gp_coord_close(struct gp_daemon *d);

/* The id of the server that leads the cluster: this one, since only the
 * leader (or the one server of a store) opens the daemon; followers keep
 * their registry rows from server.c. */
const char *gp_coord_leader(struct gp_daemon *d);

/* CMD_COORD_AUDIT (the loop thread, d->lock held): append a's entries to
 * the audit log (stored with the batch) and hand over its answer
 * (*ret_body malloc'd).  Takes the entries' JSON; the command keeps a. */
struct gp_coord_audit;
void gp_coord_audit_apply(struct gp_daemon *d, struct gp_coord_audit *a, int *ret_status, char **ret_body);
/* Free a CMD_COORD_AUDIT payload (gp_cmd_free); takes NULL. */
void gp_coord_audit_free(struct gp_coord_audit *a);

extern const gp_route gp_coord_routes[];

#endif
