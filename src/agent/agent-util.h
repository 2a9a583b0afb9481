/* agent-util.h - the pure pieces of `gpupool agent` (src/agent/agent.c),
 * kept apart so unit tests reach them: run directory names, the retry
 * backoff, the sync sequence number and the run table's bookkeeping of
 * what was reported, which server URL may go in clear.  No I/O; thread-safe as their arguments are. */
#ifndef GP_AGENT_UTIL_H
#define GP_AGENT_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/proto.h"

/* A run's directory name under DATA_DIR/runs: "TASK.EPOCH.RANK".  0, or
 * -ENAMETOOLONG when size is short. */
int gp_agent_run_name(const gp_proto_run_id *id, char *out, size_t size);
/* Parse such a name (strict: decimal, no sign, no leading zeros, in the
 * protocol's ranges).  0 or -EINVAL. */
int gp_agent_run_name_parse(const char *name, gp_proto_run_id *ret);

#define GP_AGENT_BACKOFF_MIN_MS 200
#define GP_AGENT_BACKOFF_MAX_MS GP_PROTO_RETRY_MAX_MS

/* Delay before retry number `failures` (1 = after the first failure):
 * 200 ms doubling up to 10 s, then "full jitter" between half of that and
 * all of it, from rnd (any 32-bit value).  Always within
 * [GP_AGENT_BACKOFF_MIN_MS / 2, GP_AGENT_BACKOFF_MAX_MS]. */
int64_t gp_agent_backoff_ms(int failures, uint32_t rnd);

/* The next sync seq: now_us, or last + 1 when the clock went back. */
int64_t gp_agent_next_seq(int64_t last, int64_t now_us);

/* The machine value a join of node `name` carries: hex SHA-256 of
 * "KEY:NAME" (KEY: DATA_DIR/machine-key), so that each simulated node of
 * one agent has its own and the key itself never leaves the machine. */
void gp_agent_machine(const char *key, const char *name, char out[GP_PROTO_MACHINE_LEN + 1]);

/* Does a run in state `state`, last reported in an answered sync as
 * `reported` (-1: never), go in a delta sync?  Changed runs do, and an
 * exited run is repeated until the server acknowledges it. */
bool gp_agent_run_in_delta(int state, int reported);

/* Is url's host this machine's loopback: "localhost", an IPv4 literal in
 * 127.0.0.0/8, or [::1]?  No name is looked up; user info ('@'), an
 * unknown scheme or a malformed authority is "no".  The agent sends
 * plaintext (http://) only to such a host, unless --insecure-plaintext. */
bool gp_agent_url_loopback(const char *url);

/* GPU readings in a sync (docs/internals/cluster.md "Telemetry"): a GPU's
 * go in the next sync when they differ from what was last sent
 * (GP_AGENT_TELE_CHANGED: with the heartbeat), and make a sync at once
 * when the difference matters to someone watching or placing work
 * (GP_AGENT_TELE_URGENT): utilisation by 10 points, memory in use by
 * 256 MiB or 2 % of total_mb, temperature by 5 C, power by 25 W or 10 %,
 * health, uncorrectable ECC errors, or a process that came, went or grew
 * by 256 MiB.  Procs compare as sets of pids in the order given. */
enum { GP_AGENT_TELE_SAME = 0, GP_AGENT_TELE_CHANGED, GP_AGENT_TELE_URGENT };
int gp_agent_tele_diff(const gp_proto_tele *sent, const gp_proto_tele *now, int64_t total_mb);
/* The same for the machine: URGENT when its CPUs or a total changed (a
 * new machine, or one resized), CHANGED when available memory moved by
 * 1 % of the total (at least 64 MiB) or free disk by 256 MiB: what is free
 * is never worth a sync of its own (a busy disk would make one at every
 * reading, and a failover must not wait on them). */
int gp_agent_host_diff(const gp_host_info *sent, const gp_host_info *now);

/* The allocation file of an elastic run (GPUPOOL_ALLOC_FILE), as the
 * server writes it for its own: {"task_id", "n_gpus", "min_gpus",
 * "max_gpus", "cuda_visible_devices", "gpus": [{index, node, uuid}]}, the
 * uuids from the node's inventory (gpus[0..ngpus)).  malloc'd; NULL when
 * out of memory. */
char *gp_agent_alloc_json(int64_t task, const char *node, int min, int max, const gp_proto_mask *m,
                          const gp_proto_gpu *gpus, int ngpus);
/* The GPU set, minimum and maximum back from such a file (at most 64 KiB):
 * 0, -ENOENT or -EINVAL. */
int gp_agent_alloc_load(const char *path, gp_proto_mask *ret, int *ret_min, int *ret_max);

#endif
