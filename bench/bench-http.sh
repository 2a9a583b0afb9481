#!/bin/sh
# bench-http.sh - durable task submissions per second over HTTP keep-alive.
#
# Starts the real daemon (sim GPUs, SQLite in a temp dir) and drives it with
# wrk (64 connections, 2 threads, keep-alive) on loopback, side by side in
# one run:
#   nginx      GET of a small static file (/usr/sbin/nginx, or $NGINX; its
#              own temp prefix and config on a loopback port, `daemon off`,
#              worker_processes auto, access log off): the yardstick
#   baseline   GET /healthz on the same server: no store, no scheduler
#   durable    POST /api/v1/tasks, store.sync full: every submission is in
#              the WAL and fsynced before its 201 is sent (the default)
#   os-durable POST /api/v1/tasks, store.sync normal: written to the OS
#              before the answer (survives a daemon crash, not power loss)
# After each submit run it checks that the database holds at least as many
# tasks as wrk received 201 answers, so no figure counts an unstored task.
# ROUNDS rounds (default 3) of the four legs in turn (fresh daemons and a
# fresh nginx each round); prints per leg the median [min-max] over the
# rounds of req/s, p50 and p99 (ms), and of req/s over the baseline and over
# nginx of the same round (durable / nginx is the figure of issue 13).
# Usage: bench/bench-http.sh [SECONDS [ROUNDS]]   (default 10 3)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
command -v wrk >/dev/null || { echo "bench-http: needs wrk (apt-get install wrk)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "bench-http: needs sqlite3 (apt-get install sqlite3)" >&2; exit 1; }
nginx=${NGINX:-/usr/sbin/nginx}
[ -x "$nginx" ] || { echo "bench-http: needs nginx at $nginx (apt-get install nginx-light, or NGINX=PATH)" >&2; exit 1; }
make -s build/gpupool build/gpupool-server >/dev/null
bin=$PWD/build/gpupool
tmp=$(mktemp -d /tmp/gp-bench-XXXXXX)
pid=""
npid=""
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
        [ -n "$npid" ] && kill "$npid" 2>/dev/null
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

. bench/lib.sh

start() { # $1 = sync mode
        rm -rf "$tmp/data"
        printf 'scheduler: {max_queue_depth: 1000000}\nstore: {sync: %s}\ngpus: {backend: sim}\n' "$1" > "$tmp/cfg.yaml"
        p=$(free_port)
        "$bin" server --config "$tmp/cfg.yaml" --listen "127.0.0.1:$p" --data-dir "$tmp/data" 2>"$tmp/server.log" &
        pid=$!
        wait_up "bench-http: the server" "http://127.0.0.1:$p/readyz" "$tmp/server.log"
        url="http://127.0.0.1:$p"
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

# nginx serving one small static file, as whoever runs this (workers read
# the file as nobody when that is root: the tree is world-readable)
nginx_start() {
        n="$tmp/nginx"
        rm -rf "$n"
        mkdir -p "$n/html" "$n/tmp"
        chmod 755 "$tmp" "$n" "$n/html"
        printf '{"status":"ok","note":"a small static file served by nginx for bench-http"}\n' > "$n/html/small.json"
        chmod 644 "$n/html/small.json"
        np=$(free_port)
        cat > "$n/nginx.conf" <<EOF
daemon off;
worker_processes auto;
pid $n/nginx.pid;
error_log $n/error.log;
events { worker_connections 1024; }
http {
        access_log off;
        client_body_temp_path $n/tmp/body;
        proxy_temp_path $n/tmp/proxy;
        fastcgi_temp_path $n/tmp/fastcgi;
        uwsgi_temp_path $n/tmp/uwsgi;
        scgi_temp_path $n/tmp/scgi;
        default_type application/json;
        server { listen 127.0.0.1:$np; root $n/html; }
}
EOF
        "$nginx" -p "$n" -c "$n/nginx.conf" -e "$n/error.log" 2>"$n/start.log" &
        npid=$!
        ok=""
        for _ in $(seq 100); do
                curl -fs "http://127.0.0.1:$np/small.json" >/dev/null 2>&1 && { ok=1; break; }
                sleep 0.1
        done
        if [ -z "$ok" ]; then
                echo "bench-http: nginx did not come up:" >&2
                cat "$n/start.log" "$n/error.log" >&2 2>/dev/null
                exit 1
        fi
        nurl="http://127.0.0.1:$np/small.json"
}

nginx_stop() { kill "$npid"; wait "$npid" 2>/dev/null || true; npid=""; }

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
        nginx_start
        ngx=$(run nginx "$nurl")
        nginx_stop
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
        ng=$(echo "$ngx" | cut -d' ' -f2)
        echo "$ngx - 0" >> "$tmp/rows"
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
        f=$(echo "$full" | cut -d' ' -f2)
        echo "  round $r/$rounds: nginx $ng req/s, baseline $b, durable $f, os-durable $(echo "$norm" | cut -d' ' -f2);" \
                "durable/nginx $(awk -v a="$f" -v b="$ng" 'BEGIN { printf "%.3f", a / b }')" >&2
done
/usr/bin/python3 - "$tmp/rows" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
def stat(v, f):
    v = sorted(v); n = len(v)
    m = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return ("%s [%s-%s]" % (f, f, f)) % (m, v[0], v[-1])
base = [float(r[1]) for r in rows if r[0] == "baseline"]
ngx = [float(r[1]) for r in rows if r[0] == "nginx"]
print("median [min-max] over %d rounds" % len(base))
print("%-11s %22s %20s %20s %18s %20s  %s" % ("mode", "req/s", "p50 ms", "p99 ms", "x baseline", "x nginx",
                                             "stored >= answered (all rounds)"))
for mode in ("nginx", "baseline", "durable", "os-durable"):
    rs = [r for r in rows if r[0] == mode]
    rps = [float(r[1]) for r in rs]
    ratio = [x / b for x, b in zip(rps, base)]
    rngx = [x / b for x, b in zip(rps, ngx)]
    if mode in ("nginx", "baseline"):
        check = "-"
    else:
        check = "%d stored / %d answered, %d non-2xx" % (sum(int(r[6]) for r in rs), sum(int(r[4]) for r in rs),
                                                          sum(int(r[5]) for r in rs))
    print("%-11s %22s %20s %20s %18s %20s  %s" % (mode, stat(rps, "%.0f"), stat([float(r[2]) for r in rs], "%.2f"),
                                                 stat([float(r[3]) for r in rs], "%.2f"), stat(ratio, "%.2f"),
                                                 stat(rngx, "%.3f"), check))
PY
if [ "$fail" = 1 ]; then
        echo "bench-http: FEWER tasks stored than answered: durability broken" >&2
        exit 1
fi
