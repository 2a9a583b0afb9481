#!/bin/sh
# bench-predict.sh - issue 26's table: average and p99 JCT of the full public
# traces under fifo (nothing known of run times), las (no estimates), spf with
# demotion (--spf-preempt on) and run times learned as the replay goes (--estimates learned: a job's
# estimate is what the jobs of its tenant and size that ended before it
# taught), and sef told the exact run times (an oracle no cluster has);
# then the wall time of the learned spf replay of the full Philly trace.
#
#   bench/bench-predict.sh [ROUNDS]      build build/gpupool if needed, run
#   GPUPOOL_BIN=/path/gpupool ...        use that binary
#   GPUPOOL_TRACES=DIR                   traces (default ../shared/traces)
#
# The replays are deterministic: the table is one run of each.  "vs fifo"
# is against fifo with backfill on and no estimates, on the same trace and
# cluster.  Timings: ROUNDS rounds (default 3), median [min-max] wall time.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
traces=${GPUPOOL_TRACES:-$here/../shared/traces}
rounds=${1:-3}
case $rounds in ''|*[!0-9]*|0) echo "bench-predict: ROUNDS must be a positive number" >&2; exit 2 ;; esac
if [ -z "${GPUPOOL_BIN:-}" ]; then
        make -C "$here" -s build/gpupool >&2
        GPUPOOL_BIN=$here/build/gpupool
fi
for f in philly_pollux.csv itp_elasticflow.csv; do
        [ -r "$traces/$f" ] || { echo "bench-predict: $traces/$f not found (set GPUPOOL_TRACES)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/gpupool-predict.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
i=0
for spec in "philly_pollux.csv 512" "itp_elasticflow.csv 1024"; do
        set -- $spec
        i=$((i + 1))
        common="--trace $traces/$1 --gpus $2 --backfill on --oversize skip --json"
        # shellcheck disable=SC2086
        "$GPUPOOL_BIN" simulate $common --policy fifo,las --estimates none > "$tmp/$i-none.json"
        # shellcheck disable=SC2086
        "$GPUPOOL_BIN" simulate $common --policy spf --estimates learned --spf-preempt on > "$tmp/$i-learned.json"
        # shellcheck disable=SC2086
        "$GPUPOOL_BIN" simulate $common --policy sef --estimates exact > "$tmp/$i-exact.json"
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
print("| trace, GPUs | policy | estimates | avg JCT s | vs fifo | p99 JCT s | p99 vs fifo's | preemptions | estimate error (median) | within 2x |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
for i in (1, 2):
    base = None
    for kind in ("none", "learned", "exact"):
        out = json.load(open(os.path.join(tmp, "%d-%s.json" % (i, kind))))
        name = "%s, %d" % (os.path.basename(out["trace"]), out["cluster"]["gpus"])
        for r in out["runs"]:
            if base is None:
                base = r  # fifo, no estimates
            e = r.get("estimates")
            print("| %s | %s | %s | %.0f | %.3f | %.0f | %.2f | %d | %s | %s |" % (
                name, r["policy"], kind, r["jct_s"]["avg"], r["jct_s"]["avg"] / base["jct_s"]["avg"],
                r["jct_s"]["p99"], r["jct_s"]["p99"] / base["jct_s"]["p99"], r["preemptions"],
                "x%.2f" % e["median_error_factor"] if e else "-", "%.1f%%" % (100 * e["within_2x"]) if e else "-"))
PY
echo
echo "Full Philly trace, spf with learned estimates on 512 GPUs: wall time of the whole command, $rounds rounds:"
: > "$tmp/times"
for r in $(seq "$rounds"); do
        s=$(date +%s%N)
        "$GPUPOOL_BIN" simulate --trace "$traces/philly_pollux.csv" --gpus 512 --policy spf --estimates learned \
                --spf-preempt on --oversize skip > /dev/null
        e=$(date +%s%N)
        echo $(((e - s) / 1000000)) >> "$tmp/times"
done
/usr/bin/python3 - "$tmp/times" <<'PY'
import statistics, sys
v = sorted(int(x) for x in open(sys.argv[1]))
print("%.2f s [%.2f-%.2f]" % (statistics.median(v) / 1000, v[0] / 1000, v[-1] / 1000))
PY
