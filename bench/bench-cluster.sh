#!/bin/sh
# bench-cluster.sh - one server and many simulated nodes (issue 15): tasks/s
# through the agents against the same client's lease submits/s, the server's
# CPU for idle nodes' heartbeats, and the time from a node's death to its
# task queued again.
#
# Each round starts a fresh server (gpus.backend none: a control plane;
# store.sync at its default, full; data under /tmp, not a tmpfs here) with
# agent.heartbeat_s 2 and cluster.node_timeout_s 10, one agent
# `--sim-nodes 1 --name victim` holding a task `sleep 600` (node_selector
# gpupool/node=victim-0000), and one agent `--sim-nodes NODES` (8 simulated
# H100s a node; a simulated node runs no command: `true` succeeds at once,
# `sleep S` ends after S s). Then, on that server (bench/cluster.py):
#   idle   server CPU (utime+stime of /proc/PID/stat) over IDLE s, % of a core
#   death  SIGSTOP the victim agent, poll its task every 50 ms until it is
#          queued again: seconds from its last heartbeat (as the server saw
#          it) and from the SIGSTOP
#   batch  wrk -t1 -c8 (bench/cluster.lua) POSTs TASKS one-GPU tasks `true`,
#          one per request; tasks/s = TASKS / (last finished_at - first
#          submitted_at), the server's timestamps: the figure of the issue
#   array  the same TASKS tasks in one POST (a job array): the scheduling and
#          dispatch path alone
#   lease  the same wrk client for LEASE_S s: bare lease submits/s
# Each round does all of it twice, one fresh server after the other (issue
# 22): plain (agents and wrk on http:// loopback) and tls (agents on https://
# with a join token carrying the CA's hash, so they pin and verify the CA;
# wrk on https://).  Prints each round, then median [min-max] over the
# rounds and the goals, the two legs side by side.
# BASE_REV=REV adds a leg "base": the plain leg on REV's binaries (built in
# a temporary worktree), first in odd rounds and last in even ones (the legs'
# order turns every round: the second leg of a round runs slower), so that a change's
# figures stand beside its parent's, measured in the same run; BASE_LEGS
# (default base) names the legs on REV's binaries: base,basetls adds the
# tls leg on them too.
# Usage: bench/bench-cluster.sh [ROUNDS [NODES [TASKS [IDLE_S]]]]
#        (default 3 1000 20000 30); env BUILD (build), LEASE_S (5),
#        LEGS (plain,tls; or plain, or tls), BASE_REV (none), BASE_LEGS (base)
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-3}; nodes=${2:-1000}; tasks=${3:-20000}; idle=${4:-30}
build=${BUILD:-build}
command -v wrk >/dev/null || { echo "bench-cluster: needs wrk (apt-get install wrk)" >&2; exit 1; }
make -s "$build/gpupool" "$build/gpupool-server" >/dev/null
legs=${LEGS:-plain,tls}
set -- --build "$build" --rounds "$rounds" --nodes "$nodes" --tasks "$tasks" --idle "$idle" --lease-s "${LEASE_S:-5}"
if [ -n "${BASE_REV:-}" ]; then
        base_sha=$(git rev-parse --short "$BASE_REV^{commit}") || { echo "bench-cluster: $BASE_REV is not a commit" >&2; exit 2; }
        tmp=$(mktemp -d /tmp/gp-bcbase-XXXXXX)
        trap 'git worktree remove --force "$tmp/base" 2>/dev/null || true; rm -rf "$tmp"' EXIT INT TERM
        git worktree add -q --detach "$tmp/base" "$base_sha"
        [ -e "$tmp/shared" ] || ln -s "$PWD/../shared" "$tmp/shared"
        echo "bench-cluster: building $base_sha (leg base)" >&2
        make -s -C "$tmp/base" -j2 build/gpupool build/gpupool-server >/dev/null
        /usr/bin/python3 bench/cluster.py "$@" --legs "${BASE_LEGS:-base},$legs" --base-build "$tmp/base/build"
        exit $?
fi
exec /usr/bin/python3 bench/cluster.py "$@" --legs "$legs"
