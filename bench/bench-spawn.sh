#!/bin/sh
# bench-spawn.sh - fork+exec, vfork+exec and posix_spawn, measured against
# each other for starting batch tasks (issue 13).
#
# bench/spawn (bench/spawn.c, built by mk/bench.mk) allocates HEAP_MB MiB
# and writes every page, as a long-running daemon's resident memory, then
# starts N short processes per method, one after the other (start, then
# waitpid), the methods interleaved round by round.  Each child gets what
# the daemon gives a batch supervisor (src/exec/exec.c, gp_exec_launch): a
# session of its own and stdin/stdout on /dev/null.  Two commands:
#   /bin/true                  the cost of the start itself
#   build/gpupool version      the supervisor's own binary (gp_exec_launch
#                              execs "gpupool __supervise DIR"; "version"
#                              goes as far as main with the same libraries,
#                              without a task directory to write)
# Prints per method the median [min - max] over the rounds of processes/s
# and of the parent's time blocked in the start call.
#
# Usage: bench/bench-spawn.sh [N [ROUNDS [HEAP_MB]]]   (default 2000 3 200)
# Env: BUILD (default build) - the make build dir to use and build into.
set -eu
cd "$(dirname "$0")/.."
n=${1:-2000}
rounds=${2:-3}
heap=${3:-200}
build=${BUILD:-build}
make -s BUILD="$build" "$build/gpupool" "$build/bench/spawn" >/dev/null
case $build in /*) abs=$build ;; *) abs=$PWD/$build ;; esac
echo "bench-spawn: $(nproc) cores, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for cmd in /bin/true "$abs/gpupool version"; do
        # shellcheck disable=SC2086 # the command's words
        "$abs/bench/spawn" -n "$n" -r "$rounds" -m "$heap" $cmd
done
