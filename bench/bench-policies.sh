#!/bin/sh
# bench-policies.sh - replay the one-day Philly and ITP slices on contended
# clusters under every policy (fifo, strict, hybrid, las; backfill on and
# off) and print one table; then time the full Philly trace.
#
#   bench/bench-policies.sh [ROUNDS]     build build/gpupool if needed, run
#   GPUPOOL_BIN=/path/gpupool bench/...  use that binary (no build)
#   BASE_BIN=/path/gpupool               also time the full trace with that
#                                        binary (another commit), interleaved
#   GPUPOOL_TRACES=DIR                   traces (default ../shared/traces)
#   RESTART_OVERHEAD=30                  seconds a preempted job loses at each restart
#
# Reading the table: docs/simulate.md.  Ratios are against fifo with
# backfill on, measured in the same run on the same trace and cluster.  The
# table's figures are replay results (deterministic); the timings are the
# full-trace commands, ROUNDS rounds (default 3) of every command in turn
# (and of the BASE_BIN ones next to them), printed as median [min-max]
# wall time of the whole `gpupool simulate` command.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
traces=${GPUPOOL_TRACES:-$here/../shared/traces}
overhead=${RESTART_OVERHEAD:-30}
rounds=${1:-3}
case $rounds in ''|*[!0-9]*|0) echo "bench-policies: ROUNDS must be a positive number" >&2; exit 2 ;; esac
if [ -n "${BASE_BIN:-}" ] && [ ! -x "$BASE_BIN" ]; then
        echo "bench-policies: BASE_BIN=$BASE_BIN is not an executable" >&2; exit 2
fi
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
                --restart-overhead "$overhead" --json $extra > "$tmp/run-$i.json"
        echo "$name" > "$tmp/run-$i.name"
done

/usr/bin/python3 - "$tmp" "$overhead" <<'PY'
import glob, json, os, sys
tmp, overhead = sys.argv[1], sys.argv[2]
print("Policies on one-day slices (restart overhead %s s per preemption; run time unknown to the scheduler)" % overhead)
print()
print("| trace | GPUs | policy | backfill | avg JCT h | vs fifo | p99 JCT h | util | fairness | preemptions |")
print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(os.path.join(tmp, "run-*.json")), key=lambda p: int(p.split("-")[-1][:-5])):
    out = json.load(open(path))
    name = open(path[:-5] + ".name").read().strip()
    skipped = " (%d wider jobs left out)" % out["skipped_jobs"] if out["skipped_jobs"] else ""
    for r in out["runs"]:
        print("| %s%s | %d | %s | %s | %.1f | %.3f | %.1f | %.1f%% | %.3f | %d |" % (
            name, skipped, out["cluster"]["gpus"], r["policy"], "on" if r["backfill"] else "off",
            r["jct_s"]["avg"] / 3600, r["jct_vs_fifo"], r["jct_s"]["p99"] / 3600, 100 * r["utilisation"],
            r["fairness"], r["preemptions"]))
PY

echo
echo "Full Philly trace ($(($(wc -l < "$traces/philly_pollux.csv") - 1)) jobs; jobs wider than a node left out), wall time of the whole command,"
echo "$rounds rounds of every command in turn$( [ -n "${BASE_BIN:-}" ] && echo ", each next to the same command of BASE_BIN=$BASE_BIN (base)"):"
specs="512 hybrid|512 fifo|512 las|256 hybrid"
bins="new"
[ -n "${BASE_BIN:-}" ] && bins="new base"
: > "$tmp/times"
for r in $(seq "$rounds"); do
        echo "$specs" | tr '|' '\n' | while read -r gpus policy; do
                for which in $bins; do
                        bin=$GPUPOOL_BIN
                        [ "$which" = base ] && bin=$BASE_BIN
                        t0=$(date +%s%N)
                        "$bin" simulate --trace "$traces/philly_pollux.csv" --gpus "$gpus" --policy "$policy" \
                                --oversize skip --restart-overhead "$overhead" --json > "$tmp/full-$which.json"
                        t1=$(date +%s%N)
                        echo "$gpus $policy $which $(( (t1 - t0) / 1000000 ))" >> "$tmp/times"
                        if [ "$r" = 1 ] && [ "$which" = new ]; then
                                cp "$tmp/full-new.json" "$tmp/full-$gpus-$policy.json"
                        fi
                        if [ "$which" = base ] && ! cmp -s "$tmp/full-new.json" "$tmp/full-base.json"; then
                                echo "bench-policies: $gpus GPUs $policy: BASE_BIN's output differs" >&2
                        fi
                done
        done
done
/usr/bin/python3 - "$tmp" "$specs" "$bins" <<'PY'
import json, sys
tmp, specs, bins = sys.argv[1], sys.argv[2].split("|"), sys.argv[3].split()
times = {}
for line in open(tmp + "/times"):
    g, p, w, ms = line.split()
    times.setdefault((g, p, w), []).append(int(ms))
def med(v):
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
for spec in specs:
    g, p = spec.split()
    out = json.load(open("%s/full-%s-%s.json" % (tmp, g, p)))
    r = out["runs"][0]
    for w in bins:
        v = times[(g, p, w)]
        print("  %s GPUs, %-6s%s: median %6.0f ms [%d-%d]  (%d jobs, avg JCT %.1f h, utilisation %.1f%%, %d scheduler runs)" % (
            g, p, " (base)" if w == "base" else "", med(v), min(v), max(v), out["jobs"], r["jct_s"]["avg"] / 3600,
            100 * r["utilisation"], r["scheduler_runs"]))
    if "base" in bins:
        ratios = sorted(n / b for n, b in zip(times[(g, p, "new")], times[(g, p, "base")]))
        print("  %s GPUs, %-6s: new / base, round by round: median %.2f [%.2f-%.2f]" % (g, p, med(ratios), ratios[0], ratios[-1]))
PY
