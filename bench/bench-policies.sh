#!/bin/sh
# bench-policies.sh - replay the one-day Philly and ITP slices on contended
# clusters under every policy (fifo, strict, hybrid, las; backfill on and
# off) and print one table; then time the full Philly trace.
#
#   bench/bench-policies.sh              build build/gpupool if needed, run
#   GPUPOOL_BIN=/path/gpupool bench/...  use that binary (no build)
#   GPUPOOL_TRACES=DIR                   traces (default ../shared/traces)
#   RESTART_OVERHEAD=30                  seconds a preempted job loses at each restart
#
# Reading the table: docs/simulate.md.  Ratios are against fifo with
# backfill on, measured in the same run on the same trace and cluster.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
traces=${GPUPOOL_TRACES:-$here/../shared/traces}
overhead=${RESTART_OVERHEAD:-30}
if [ -z "${GPUPOOL_BIN:-}" ]; then
        build=${BUILD:-build}
        make -C "$here" -s BUILD="$build" "$build/gpupool" >&2
        GPUPOOL_BIN=$here/$build/gpupool
        case $build in /*) GPUPOOL_BIN=$build/gpupool ;; esac
fi
for f in philly_pollux_2017-10-16.csv itp_elasticflow_day27.csv philly_pollux.csv; do
        [ -r "$traces/$f" ] || { echo "bench-policies: $traces/$f not found (set GPUPOOL_TRACES)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/gpupool-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

# name | trace | GPUs | extra options
scenarios="philly-1d|philly_pollux_2017-10-16.csv|32|
philly-1d|philly_pollux_2017-10-16.csv|64|
philly-1d e-commerce map|philly_pollux_2017-10-16.csv|32|--map $here/bench/maps/philly-ecommerce.map
itp-1d|itp_elasticflow_day27.csv|128|--oversize skip"
i=0
echo "$scenarios" | while IFS='|' read -r name trace gpus extra; do
        i=$((i + 1))
        # shellcheck disable=SC2086
        "$GPUPOOL_BIN" simulate --trace "$traces/$trace" --gpus "$gpus" --policy all --backfill both \
                --restart-overhead "$overhead" --json --timing $extra > "$tmp/run-$i.json"
        echo "$name" > "$tmp/run-$i.name"
done

/usr/bin/python3 - "$tmp" "$overhead" <<'PY'
import glob, json, os, sys
tmp, overhead = sys.argv[1], sys.argv[2]
print("Policies on one-day slices (restart overhead %s s per preemption; run time unknown to the scheduler)" % overhead)
print()
print("| trace | GPUs | policy | backfill | avg JCT h | vs fifo | p99 JCT h | util | fairness | preemptions | wall ms |")
print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(os.path.join(tmp, "run-*.json")), key=lambda p: int(p.split("-")[-1][:-5])):
    out = json.load(open(path))
    name = open(path[:-5] + ".name").read().strip()
    skipped = " (%d wider jobs left out)" % out["skipped_jobs"] if out["skipped_jobs"] else ""
    for r in out["runs"]:
        print("| %s%s | %d | %s | %s | %.1f | %.3f | %.1f | %.1f%% | %.3f | %d | %.0f |" % (
            name, skipped, out["cluster"]["gpus"], r["policy"], "on" if r["backfill"] else "off",
            r["jct_s"]["avg"] / 3600, r["jct_vs_fifo"], r["jct_s"]["p99"] / 3600, 100 * r["utilisation"],
            r["fairness"], r["preemptions"], r["wall_ms"]))
PY

echo
echo "Full Philly trace ($(($(wc -l < "$traces/philly_pollux.csv") - 1)) jobs; jobs wider than a node left out), wall time of the whole command:"
for spec in "512 hybrid" "512 fifo" "512 las" "256 hybrid"; do
        set -- $spec
        t0=$(date +%s%N)
        "$GPUPOOL_BIN" simulate --trace "$traces/philly_pollux.csv" --gpus "$1" --policy "$2" --oversize skip \
                --restart-overhead "$overhead" --json > "$tmp/full.json"
        t1=$(date +%s%N)
        /usr/bin/python3 - "$tmp/full.json" "$1" "$2" "$(( (t1 - t0) / 1000000 ))" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
r = out["runs"][0]
print("  %s GPUs, %-6s: %6d ms  (%d jobs, avg JCT %.1f h, utilisation %.1f%%, %d scheduler runs)" % (
    sys.argv[2], sys.argv[3], int(sys.argv[4]), out["jobs"], r["jct_s"]["avg"] / 3600, 100 * r["utilisation"],
    r["scheduler_runs"]))
PY
done
