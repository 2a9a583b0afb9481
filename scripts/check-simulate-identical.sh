#!/bin/sh
# check-simulate-identical.sh - run the same `gpupool simulate` commands with
# two builds and check that their output is byte-identical (tables, JSON,
# --tenants, the --jobs and --timeline CSVs).  For changes that must not
# change any replay result (a faster core or simulator).
#
#   scripts/check-simulate-identical.sh BASE_BIN NEW_BIN [quick|full]
#
# BASE_BIN and NEW_BIN are `gpupool` binaries (each finds its gpupool-server
# next to itself).  quick: the one-day slices only (seconds); full (default):
# also the whole Philly and ITP traces on contended clusters (a minute or
# two).  Traces: GPUPOOL_TRACES (default ../shared/traces).  Exits 0 when
# every case matches, 1 naming the cases that differ, 2 on usage errors.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BASE_BIN NEW_BIN [quick|full]" >&2; exit 2; }
base=$1 new=$2 mode=${3:-full}
case $mode in quick|full) ;; *) echo "$0: mode must be quick or full" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")/.." && pwd)
traces=${GPUPOOL_TRACES:-$here/../shared/traces}
for b in "$base" "$new"; do
        [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 2; }
done
for f in philly_pollux_2017-10-16.csv itp_elasticflow_day27.csv philly_pollux.csv itp_elasticflow.csv; do
        [ -r "$traces/$f" ] || { echo "$0: $traces/$f not found (set GPUPOOL_TRACES)" >&2; exit 2; }
done
tmp=$(mktemp -d /tmp/gpupool-simcheck.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
map=$here/bench/maps/philly-ecommerce.map

# one case a line: trace | options (the bench-policies scenarios, then other
# code paths: exact estimates, restart on preemption, LAS knobs, no tick,
# other node shapes, tenants and timeline output)
cases="philly_pollux_2017-10-16.csv|--gpus 32 --policy all --backfill both --restart-overhead 30 --json
philly_pollux_2017-10-16.csv|--gpus 64 --policy all --backfill both --restart-overhead 30 --json
philly_pollux_2017-10-16.csv|--gpus 32 --policy all --backfill both --restart-overhead 30 --json --map $map
itp_elasticflow_day27.csv|--gpus 128 --policy all --backfill both --restart-overhead 30 --json --oversize skip
philly_pollux_2017-10-16.csv|--gpus 32 --policy all --backfill both --estimates exact --tenants
philly_pollux_2017-10-16.csv|--gpus 48 --gpus-per-node 4 --oversize skip --policy all --on-preempt restart --tick 0
philly_pollux_2017-10-16.csv|--gpus 64 --policy las --las-thresholds 600,7200,72000 --las-min-run 30 --tenants
itp_elasticflow_day27.csv|--gpus 256 --policy hybrid,las --oversize skip --map $map --estimates exact"
if [ "$mode" = full ]; then
        cases="$cases
philly_pollux.csv|--gpus 256 --policy hybrid --oversize skip --restart-overhead 30 --json
philly_pollux.csv|--gpus 512 --policy hybrid,fifo,las --oversize skip --restart-overhead 30 --json
itp_elasticflow.csv|--gpus 512 --policy hybrid --oversize skip --restart-overhead 30 --json"
fi

fail=0 i=0
# shellcheck disable=SC2086
while IFS='|' read -r trace opts; do
        i=$((i + 1))
        for side in base new; do
                bin=$base
                [ $side = new ] && bin=$new
                d=$tmp/$side-$i
                mkdir -p "$d"
                rc=0
                "$bin" simulate --trace "$traces/$trace" $opts --jobs "$d/jobs.csv" --timeline "$d/timeline.csv" \
                        > "$d/out" 2> "$d/err" || rc=$?
                echo "$rc" > "$d/rc"
                # the output names the trace path; nothing else may differ
        done
        if diff -r "$tmp/base-$i" "$tmp/new-$i" > "$tmp/diff-$i" 2>&1; then
                echo "same     $trace $opts ($(wc -c < "$tmp/new-$i/out") + $(wc -c < "$tmp/new-$i/jobs.csv") bytes, rc $(cat "$tmp/new-$i/rc"))"
        else
                echo "DIFFERS  $trace $opts"
                head -20 "$tmp/diff-$i" | sed 's/^/    /'
                fail=1
        fi
done <<EOF
$cases
EOF
[ $fail = 0 ] && echo "check-simulate-identical: all $i cases byte-identical" || echo "check-simulate-identical: some cases differ"
exit $fail
