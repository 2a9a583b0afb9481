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
# After each submit run it checks that the database holds exactly as many
# tasks as wrk received 201 answers, so no figure counts an unstored task.
# Usage: bench/bench-http.sh [SECONDS]   (default 10)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-10}
command -v wrk >/dev/null || { echo "bench-http: needs wrk (apt-get install wrk)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "bench-http: needs sqlite3 (apt-get install sqlite3)" >&2; exit 1; }
make -s build/gpupool >/dev/null
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

# run NAME [wrk args...]: prints "NAME req/s p50_ms p99_ms requests non2xx"
run() {
        name=$1; shift
        wrk -t2 -c64 -d"${secs}s" --latency "$@" > "$tmp/wrk.out" 2>&1
        rps=$(awk '/^Requests\/sec/ {print $2}' "$tmp/wrk.out")
        p50=$(awk '$1=="50%" {print $2}' "$tmp/wrk.out")
        p99=$(awk '$1=="99%" {print $2}' "$tmp/wrk.out")
        n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
        bad=$(awk '/Non-2xx/ {print $NF}' "$tmp/wrk.out")
        echo "$name $rps $p50 $p99 $n ${bad:-0}"
}

echo "bench-http: wrk -t2 -c64 -d${secs}s on 127.0.0.1, $(nproc) cores shared by wrk and the daemon"
start full
base=$(run baseline "$url/healthz")
full=$(run durable -s bench/submit.lua "$url")
stop
stored_full=$(sqlite3 "$tmp/data/gpupool.db" 'select count(*) from tasks')
start normal
norm=$(run os-durable -s bench/submit.lua "$url")
stop
stored_norm=$(sqlite3 "$tmp/data/gpupool.db" 'select count(*) from tasks')

printf '%-11s %10s %9s %9s %10s  %s\n' mode "req/s" p50 p99 "x baseline" "stored = answered?"
for row in "$base" "$full" "$norm"; do
        set -- $row
        ratio=$(awk -v a="$2" -v b="$(echo "$base" | cut -d' ' -f2)" 'BEGIN {printf "%.2f", a / b}')
        case $1 in
        durable) check="$stored_full stored / $5 answered, $6 non-2xx" ;;
        os-durable) check="$stored_norm stored / $5 answered, $6 non-2xx" ;;
        *) check="-" ;;
        esac
        printf '%-11s %10s %9s %9s %10s  %s\n' "$1" "$2" "$3" "$4" "$ratio" "$check"
done
full_n=$(echo "$full" | cut -d' ' -f5); full_bad=$(echo "$full" | cut -d' ' -f6)
norm_n=$(echo "$norm" | cut -d' ' -f5); norm_bad=$(echo "$norm" | cut -d' ' -f6)
# wrk may cut connections at the end with answers in flight: stored >= answered
if [ "$stored_full" -lt $((full_n - full_bad)) ] || [ "$stored_norm" -lt $((norm_n - norm_bad)) ]; then
        echo "bench-http: FEWER tasks stored than answered: durability broken" >&2
        exit 1
fi
