#!/bin/sh
# bench-cli.sh - how fast a client command starts and ends, next to
# Slurm's sbatch and /bin/true.
#
# Starts the real daemon (sim GPUs, SQLite in a temp dir) and times, with
# bench/exectime.c (posix_spawn + waitpid, CLOCK_MONOTONIC; RUNS runs x
# ROUNDS rounds of every command, interleaved, after 10 warm-up runs):
#   gpupool version          no network
#   gpupool ps               GET /api/v1/tasks?state=active from the live daemon
#   sbatch --version         Slurm's client, if installed (optional: this
#                            script installs nothing; Debian's package is
#                            slurm-client: `apt-get install -y slurm-client`,
#                            or scripts/install-deps.sh bench).
#                            sbatch reads its configuration before it looks
#                            at --version, so unless SLURM_CONF is set it is
#                            given a four-line slurm.conf made here (no
#                            slurmctld is contacted)
#   /bin/true                the floor: a program that links libc and exits
# and, with BASE_BIN=PATH (a gpupool binary of another commit, e.g. the
# parent: `git worktree add /tmp/cli-base HEAD^ && make -C /tmp/cli-base -j2`,
# then BASE_BIN=/tmp/cli-base/build/gpupool), the same two gpupool commands
# of that binary in the same run, marked "(base)".
# Prints exectime's table (median, min, max per round and over all runs),
# the ratios of the medians to sbatch --version and /bin/true, and the
# goals: gpupool version and ps within 1.1x of sbatch --version and 2.5x of
# /bin/true.  Exits 0 whether the goals are met or not (it measures).
# Usage: bench/bench-cli.sh [RUNS [ROUNDS]]   (default 200 3)
# Env: BUILD (default build), BASE_BIN.
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
runs=${1:-200}
rounds=${2:-3}
build=${BUILD:-build}
make -s "$build/gpupool" "$build/bench/exectime" >/dev/null
case $build in /*) ;; *) build=$PWD/$build ;; esac
bin=$build/gpupool
tmp=$(mktemp -d /tmp/gp-bench-cli-XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

port=$(free_port)
url="http://127.0.0.1:$port"
printf 'gpus: {backend: sim}\n' > "$tmp/cfg.yaml"
"$bin" server --config "$tmp/cfg.yaml" --listen "127.0.0.1:$port" --data-dir "$tmp/data" 2>"$tmp/server.log" &
pid=$!
ok=""
for _ in $(seq 100); do
        "$bin" --api "$url" ps >/dev/null 2>&1 && { ok=1; break; }
        sleep 0.1
done
if [ -z "$ok" ]; then
        echo "bench-cli: the server did not come up:" >&2
        cat "$tmp/server.log" >&2
        exit 1
fi

libs() { ldd "$1" 2>/dev/null | grep -c '=>\|ld-linux' || true; }
set -- "gpupool version" "$bin" version :: "gpupool ps" "$bin" --api "$url" ps
echo "bench-cli: $(nproc) cores; libraries mapped at start (ldd): gpupool $(libs "$bin")"
if [ -n "${BASE_BIN:-}" ]; then
        set -- "$@" :: "gpupool version (base)" "$BASE_BIN" version :: "gpupool ps (base)" "$BASE_BIN" --api "$url" ps
        echo "  base: $BASE_BIN, $(libs "$BASE_BIN") libraries"
fi
refs=""
if sb=$(command -v sbatch); then
        if [ -z "${SLURM_CONF:-}" ]; then
                printf 'ClusterName=bench\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=localhost Default=YES\n' >"$tmp/slurm.conf"
                export SLURM_CONF="$tmp/slurm.conf"
        fi
        set -- "$@" :: "sbatch --version" "$sb" --version
        refs="-R sbatch --version"
        echo "  sbatch: $sb ($(sbatch --version)), $(libs "$sb") libraries"
else
        echo "  sbatch: not installed (optional: apt-get install -y slurm-client); its row is left out"
fi
set -- "$@" :: /bin/true /bin/true
echo "  /bin/true: $(libs /bin/true) libraries"
if [ -n "$refs" ]; then
        "$build/bench/exectime" -n "$runs" -r "$rounds" -R "sbatch --version" -R /bin/true "$@" >"$tmp/out"
else
        "$build/bench/exectime" -n "$runs" -r "$rounds" -R /bin/true "$@" >"$tmp/out"
fi
cat "$tmp/out"

# goals, from the ratios exectime printed (of the medians over all runs)
awk -v have_sb="$refs" '
match($0, / +all +[0-9.]+ +[0-9.]+ +[0-9.]+$/) {
        split(substr($0, RSTART), v, " "); med[substr($0, 1, RSTART - 1)] = v[2]
}
/^median \/ median of '"'"'/ { ref = $0; sub(/^median \/ median of '"'"'/, "", ref); sub(/'"'"':$/, "", ref); next }
ref != "" && match($0, / +[0-9.]+x$/) {
        r = substr($0, RSTART); gsub(/[ x]/, "", r); ratio[substr($0, 3, RSTART - 3), ref] = r
}
END {
        split("gpupool version|gpupool ps", names, "|")
        for (i = 1; i <= 2; i++) {
                n = names[i]; t = ratio[n, "/bin/true"]; s = ratio[n, "sbatch --version"]
                msg = sprintf("goal %-16s median %s ms: %sx /bin/true (goal <= 2.5x: %s)", n, med[n], t, t + 0 <= 2.5 ? "met" : "NOT met")
                if (have_sb != "")
                        msg = msg sprintf(", %sx sbatch --version (goal <= 1.1x: %s)", s, s + 0 <= 1.1 ? "met" : "NOT met")
                print msg
        }
}' "$tmp/out"
