/* simulate.h - `gpupool simulate`: replay a job trace through the
 * scheduling core on a virtual clock and report JCT, queueing delay,
 * makespan, utilisation, per-tenant share, fairness and preemptions, for one
 * or several policies side by side (docs/simulate.md). */
#ifndef GP_SIM_SIMULATE_H
#define GP_SIM_SIMULATE_H

/* argv[0] is "simulate".  Prints to stdout (results) and stderr (errors).
 * Returns the process exit code: 0 ok, 1 failure (bad trace, map or
 * config; cannot write an output file), 2 usage error.  Not thread-safe
 * (writes to stdio). */
int gp_simulate_main(int argc, char **argv);

#endif
