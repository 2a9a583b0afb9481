/* agent.h - `gpupool agent`: a GPU machine's side of a cluster
 * (docs/internals/cluster.md).  It joins a server once with a join token,
 * keeps the node credential in DATA_DIR/node.json, then syncs in a loop:
 * reports its runs, GPUs and logs, takes starts, stops and acks, and runs
 * each start under exec.c's supervisor in DATA_DIR/runs/TASK.EPOCH.RANK/.
 * `--sim-nodes N` plays N nodes in one process (no commands executed).
 * Exit codes: 0 SIGTERM/SIGINT (runs keep running), 1 could not start,
 * 2 usage, 77 join token or credential refused, 78 node removed (its runs
 * were stopped). */
#ifndef GP_AGENT_AGENT_H
#define GP_AGENT_AGENT_H

/* Run the agent; argv[0] is "agent".  Returns the exit code above.  Call
 * once per process (it installs signal handlers). */
int gp_agent_main(int argc, char **argv);

#endif
