#!/bin/sh
# bench-http.sh - durable task submissions per second over HTTP keep-alive.
#
# Starts the real daemon (sim GPUs, SQLite in a temp dir) and drives it with
# wrk (64 connections, 2 threads, keep-alive) on loopback, side by side in
# one run:
#   baseline   GET /healthz on the same server: no store, no scheduler
#   durable    POST /api/v1/tasks, store.sync full: every submission is in
#              the WAL and fsynced before its 201 is sent (the default)
#   os-durable POST /api/v1/tasks, store.sync normal: written to the OS
#              before the answer (survives a daemon crash, not power loss)
# After each submit run it checks that the database holds at least as many
# tasks as wrk received 201 answers, so no figure counts an unstored task.
# ROUNDS rounds (default 3) of the three modes in turn (fresh daemons each
# round); prints per mode the median [min-max] over the rounds of req/s,
# p50 and p99 (ms), and of req/s over the baseline of the same round.
# Usage: bench/bench-http.sh [SECONDS [ROUNDS]]   (default 10 3)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
command -v wrk >/dev/null || { echo "bench-http: needs wrk (apt-get install wrk)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "bench-http: needs sqlite3 (apt-get install sqlite3)" >&2; exit 1; }
make -s build/gpupool build/gpupool-server >/dev/null
bin=$PWD/build/gpupool
tmp=$(mktemp -d /tmp/gp-bench-XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # $1 = sync mode
        rm -rf "$tmp/data"
        printf 'scheduler: {max_queue_depth: 1000000}\nstore: {sync: %s}\ngpus: {backend: sim}\n' "$1" > "$tmp/cfg.yaml"
        p=$(port)
        "$bin" server --config "$tmp/cfg.yaml" --listen "127.0.0.1:$p" --data-dir "$tmp/data" 2>"$tmp/server.log" &
        pid=$!
        ok=""
        for _ in $(seq 100); do
                curl -fs "http://127.0.0.1:$p/readyz" >/dev/null 2>&1 && { ok=1; break; }
                sleep 0.1
        done
        if [ -z "$ok" ]; then
                echo "bench-http: the server did not come up:" >&2
                cat "$tmp/server.log" >&2
                exit 1
        fi
        url="http://127.0.0.1:$p"
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

# wrk latency "950.00us" / "1.20ms" / "2.00s" -> ms
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /[0-9]s$/ && v !~ /ms$/) n *= 1000; printf "%.3f", n }'; }

# run NAME [wrk args...]: prints "NAME req/s p50_ms p99_ms requests non2xx"
run() {
        name=$1; shift
        wrk -t2 -c64 -d"${secs}s" --latency "$@" > "$tmp/wrk.out" 2>&1
        rps=$(awk '/^Requests\/sec/ {print $2}' "$tmp/wrk.out")
        p50=$(to_ms "$(awk '$1=="50%" {print $2}' "$tmp/wrk.out")")
        p99=$(to_ms "$(awk '$1=="99%" {print $2}' "$tmp/wrk.out")")
        n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
        bad=$(awk '/Non-2xx/ {print $NF}' "$tmp/wrk.out")
        echo "$name $rps $p50 $p99 $n ${bad:-0}"
}

echo "bench-http: wrk -t2 -c64 -d${secs}s on 127.0.0.1, $rounds rounds of the modes in turn," \
        "$(nproc) cores shared by wrk and the daemon"
: > "$tmp/rows"
fail=0
for r in $(seq "$rounds"); do
        start full
        base=$(run baseline "$url/healthz")
        full=$(run durable -s bench/submit.lua "$url")
        stop
        stored_full=$(sqlite3 "$tmp/data/gpupool.db" 'select count(*) from tasks')
        start normal
        norm=$(run os-durable -s bench/submit.lua "$url")
        stop
        stored_norm=$(sqlite3 "$tmp/data/gpupool.db" 'select count(*) from tasks')
        b=$(echo "$base" | cut -d' ' -f2)
        echo "$base - 0" >> "$tmp/rows"
        echo "$full $stored_full" >> "$tmp/rows"
        echo "$norm $stored_norm" >> "$tmp/rows"
        for row in "$full $stored_full" "$norm $stored_norm"; do
                set -- $row
                # wrk may cut connections at the end with answers in flight: stored >= answered
                if [ "$7" -lt $(($5 - $6)) ]; then
                        echo "bench-http: round $r $1: $7 stored < $(($5 - $6)) answered: durability broken" >&2
                        fail=1
                fi
        done
        echo "  round $r/$rounds: baseline $b req/s, durable $(echo "$full" | cut -d' ' -f2), os-durable $(echo "$norm" | cut -d' ' -f2)" >&2
done
/usr/bin/python3 - "$tmp/rows" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
def stat(v, f):
    v = sorted(v); n = len(v)
    m = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return ("%s [%s-%s]" % (f, f, f)) % (m, v[0], v[-1])
base = [float(r[1]) for r in rows if r[0] == "baseline"]
print("median [min-max] over %d rounds" % len(base))
print("%-11s %26s %24s %24s %18s  %s" % ("mode", "req/s", "p50 ms", "p99 ms", "x baseline", "stored >= answered (all rounds)"))
for mode in ("baseline", "durable", "os-durable"):
    rs = [r for r in rows if r[0] == mode]
    rps = [float(r[1]) for r in rs]
    ratio = [x / b for x, b in zip(rps, base)]
    if mode == "baseline":
        check = "-"
    else:
        check = "%d stored / %d answered, %d non-2xx" % (sum(int(r[6]) for r in rs), sum(int(r[4]) for r in rs),
                                                          sum(int(r[5]) for r in rs))
    print("%-11s %26s %24s %24s %18s  %s" % (mode, stat(rps, "%.0f"), stat([float(r[2]) for r in rs], "%.2f"),
                                            stat([float(r[3]) for r in rs], "%.2f"), stat(ratio, "%.2f"), check))
PY
if [ "$fail" = 1 ]; then
        echo "bench-http: FEWER tasks stored than answered: durability broken" >&2
        exit 1
fi
