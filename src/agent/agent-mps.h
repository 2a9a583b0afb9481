/* agent-mps.h - MPS on an agent's GPUs.  The server says in a run's start
 * that it is an MPS client (gp_proto_start.mps_memory_mb, mps_compute_pct,
 * mps_uuid: gpus.sharing: mps in the server's config); the agent keeps
 * the control daemons of its GPUs (an exec/mps-pool.h pool under
 * gpus.mps_dir of its own config, or DATA_DIR/mps, run by its
 * gpus.mps_control) and starts the run as a client.  The agent's loop
 * thread only. */
#ifndef GP_AGENT_AGENT_MPS_H
#define GP_AGENT_AGENT_MPS_H

#include <stddef.h>

#include "cluster/proto.h"
#include "config/config.h"
#include "exec/mps-pool.h"
#include "exec/mps.h"

/* The agent's pool (its directory made).  0 with *ret, or a negative code
 * with err. */
int gp_agent_mps_open(const gp_config *cfg, const char *data_dir, gp_mps_pool **ret, char *err, size_t errlen);

/* For start s: 0 when it is no MPS client; 1 when it is, its GPU's daemon
 * running (started now if need be), *ret_index its GPU and *ret what it is
 * started with; -GP_EMPS (the daemon could not start) or -EINVAL (not
 * exactly one GPU) with why: "mps: the MPS control daemon of GPU N could
 * not start: ...".  Blocks while a daemon starts (seconds at most). */
int gp_agent_mps_prepare(gp_mps_pool *p, const gp_proto_start *s, int *ret_index, gp_mps_client *ret, char *why,
                         size_t whylen);

/* RUN_DIR/mps-gpu records that the run there is a client of GPU index's
 * daemon, so that a restarted agent knows which daemons its runs still
 * use.  0 or -errno. */
int gp_agent_mps_mark(const char *run_dir, int index);
/* The GPU index RUN_DIR/mps-gpu names, -1 when none (or garbage). */
int gp_agent_mps_marked(const char *run_dir);

#endif
