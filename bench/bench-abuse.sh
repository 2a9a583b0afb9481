#!/bin/sh
# bench-abuse.sh - a well-behaved client's latency while others abuse the
# connections (the connection guard: src/gateway/conns.c).
#
# Starts the daemon (sim GPUs, no keys, server.max_connections 8192, the
# other server keys at their defaults: header_timeout_s 10,
# min_body_rate_bytes_s 1024, max_connections_per_ip 256) with a gateway
# model on build/tests/fake-openai, then, round by round in one run:
#   quiet   a well-behaved client alone
#   abused  the same client while bench/abuse.py holds IDLE connections that
#           send nothing and SLOW ones that send a request head one header
#           line a second (half for /healthz, half for /v1/models), opened
#           again as soon as the server closes one
# The client (bench/abuse.py measure) sends one request after the other,
# each on a new connection, SECONDS per kind: GET /healthz and POST
# /api/v1/tasks (a lease) on the REST path, GET /v1/models and POST
# /v1/chat/completions (to fake-openai) on the /v1 path.  A request with no
# 2xx answer within 5 s is a failure and counts as 5000 ms.
# The abusers come from loopback addresses 127.0.1.x, 200 connections each,
# so that max_connections_per_ip does not simply refuse them: this measures
# what admitted abusers cost.  Traffic stays on 127.0.0.0/8.
# Prints per kind the median (min-max) over the rounds of the p99, quiet and
# abused, their ratio (goal: within 2x) and the failures.
#
# Usage: bench/bench-abuse.sh [SECONDS [ROUNDS [IDLE SLOW]]]
#        (default 5 s per kind, 3 rounds, 2000 idle, 300 slow)
# Env: BUILD (default build); GPUPOOL (a gpupool binary to measure instead
# of $BUILD/gpupool, e.g. an older build for comparison); MAX_CONNECTIONS
# (server.max_connections, default 8192: room for all; with 1024, the
# default, the abusers overflow it and idle ones are closed to make room).
set -eu
cd "$(dirname "$0")/.."
secs=${1:-5}
rounds=${2:-3}
idle=${3:-2000}
slow=${4:-300}
build=${BUILD:-build}
maxconn=${MAX_CONNECTIONS:-8192}
ulimit -n 8192 # the daemon and the abusers hold thousands of sockets
make -s BUILD="$build" "$build/gpupool" "$build/tests/fake-openai" >/dev/null
case $build in /*) abs=$build ;; *) abs=$PWD/$build ;; esac
gpupool=${GPUPOOL:-$abs/gpupool}
fake=$abs/tests/fake-openai
tool="/usr/bin/python3 $PWD/bench/abuse.py"
tmp=$(mktemp -d /tmp/gp-bench-abuse-XXXXXX)
pids=""
abuser=""
cleanup() {
        [ -n "$abuser" ] && kill "$abuser" 2>/dev/null
        for p in $pids; do kill "$p" 2>/dev/null || true; done
        wait 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. bench/lib.sh

"$fake" --listen 127.0.0.1:0 --model bench-model --name bench --die-with-parent >"$tmp/fake.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 50); do grep -q '^ready' "$tmp/fake.out" 2>/dev/null && break; sleep 0.1; done
up_port=$(awk '/^ready/ {print $2}' "$tmp/fake.out")
[ -n "$up_port" ] || { echo "bench-abuse: fake-openai did not start:" >&2; cat "$tmp/fake.out" >&2; exit 1; }

gp_port=$(free_port)
cat > "$tmp/gpupool.yaml" <<EOF
gpus: {backend: sim}
server: {max_connections: $maxconn}
scheduler: {max_queue_depth: 1000000}
gateway:
  limits: {max_concurrent: 0, max_rps: 0, max_tokens_per_sec: 0}
  models:
    - {name: bench-model, context: 4096, upstreams: ["http://127.0.0.1:$up_port"]}
EOF
"$gpupool" server --config "$tmp/gpupool.yaml" --listen "127.0.0.1:$gp_port" --data-dir "$tmp/data" \
        >"$tmp/gpupool.log" 2>&1 &
pids="$pids $!"
wait_up "bench-abuse: the server" "http://127.0.0.1:$gp_port/readyz" "$tmp/gpupool.log"

kinds="healthz submit models chat"
# measure PHASE: one line per kind appended to $tmp/KIND.PHASE ("p99 fail n")
measure() {
        for k in $kinds; do
                $tool measure "$gp_port" "$k" "$secs" > "$tmp/m.out"
                awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                       print v["p99_ms"], v["fail"], v["n"] }' "$tmp/m.out" >> "$tmp/$k.$1"
        done
}

echo "bench-abuse: $rounds rounds, ${secs}s per kind, a new connection per request;" \
        "abuse: $idle idle + $slow slow-header connections; max_connections $maxconn;" \
        "$(nproc) cores shared by client, abusers and daemon"
$tool measure "$gp_port" healthz 1 >/dev/null # warm-up
for r in $(seq "$rounds"); do
        measure quiet
        $tool hold "$gp_port" "$idle" "$slow" > "$tmp/abuse.out" 2>&1 &
        abuser=$!
        for _ in $(seq 300); do grep -q '^ready' "$tmp/abuse.out" 2>/dev/null && break; sleep 0.1; done
        grep -q '^ready' "$tmp/abuse.out" || { echo "bench-abuse: abusers did not start:" >&2; cat "$tmp/abuse.out" >&2; exit 1; }
        sleep 3 # the slow heads are under way
        measure abused
        cut=$(awk '/^open/ {c = $4} END {print c + 0}' "$tmp/abuse.out")
        kill "$abuser"; wait "$abuser" 2>/dev/null || true; abuser=""
        echo "  round $r/$rounds done (abusive connections the server closed: $cut)" >&2
        sleep 2 # their sockets are gone
done

# stats FILE: "median min max" of column 1
stats() { sort -g "$1" | awk '{a[NR] = $1} END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
                                                   printf "%.3f %.3f %.3f", m, a[1], a[NR] }'; }
printf '%-8s %-26s %-26s %7s %s\n' kind "quiet p99 ms med (min-max)" "abused p99 ms med (min-max)" ratio "failures quiet/abused (of requests)"
worst=0
for k in $kinds; do
        set -- $(stats "$tmp/$k.quiet"); qm=$1 qlo=$2 qhi=$3
        set -- $(stats "$tmp/$k.abused"); am=$1 alo=$2 ahi=$3
        qf=$(awk '{f += $2; n += $3} END {print f "/" n}' "$tmp/$k.quiet")
        af=$(awk '{f += $2; n += $3} END {print f "/" n}' "$tmp/$k.abused")
        ratio=$(awk -v a="$am" -v q="$qm" 'BEGIN {printf "%.2f", (q > 0) ? a / q : 0}')
        printf '%-8s %-26s %-26s %6sx %s\n' "$k" "$qm ($qlo-$qhi)" "$am ($alo-$ahi)" "$ratio" "$qf / $af"
        worst=$(awk -v w="$worst" -v r="$ratio" 'BEGIN {print (r > w) ? r : w}')
done
awk -v w="$worst" 'BEGIN { printf "worst p99 ratio abused/quiet: %.2fx; goal (within 2x): %s\n", w, (w <= 2) ? "MET" : "MISSED" }'
