#!/bin/sh
# bench-tls.sh - requests per second in plaintext and over TLS, on the same
# server in the same run.
#
# Starts the real daemon (sim GPUs, its generated certificate) and drives
# its one port with wrk (16 connections, 2 threads) on loopback, where both
# are served:
#   healthz        GET /healthz (libmicrohttpd's path), keep-alive
#   v1-models      GET /v1/models (the gateway front's own path), keep-alive
#   v1-new-conn    GET /v1/models with Connection: close: a new connection,
#                  and over TLS a full handshake, for every request
# each leg in plaintext (http://) and over TLS (https://), one after the
# other within a round, ROUNDS rounds (default 3).  Prints per leg the
# median [min-max] over the rounds of req/s, and of the TLS/plaintext ratio
# of the same round.  A leg with an answer other than 200 fails the script.
# Usage: bench/bench-tls.sh [SECONDS [ROUNDS]]   (default 5 3)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-5}
rounds=${2:-3}
command -v wrk >/dev/null || { echo "bench-tls: needs wrk (apt-get install wrk)" >&2; exit 1; }
build=${BUILD:-build}
make -s BUILD="$build" "$build/gpupool" "$build/gpupool-server" >/dev/null
case "$build" in /*) bin=$build/gpupool ;; *) bin=$PWD/$build/gpupool ;; esac
tmp=$(mktemp -d /tmp/gp-bench-tls-XXXXXX)
pid=""
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

. bench/lib.sh

printf 'gpus: {backend: sim}\nserver: {max_connections_per_ip: 4096}\n' > "$tmp/cfg.yaml"
p=$(free_port)
"$bin" server --config "$tmp/cfg.yaml" --listen "127.0.0.1:$p" --data-dir "$tmp/data" 2>"$tmp/server.log" &
pid=$!
wait_up "bench-tls: the server" "http://127.0.0.1:$p/readyz" "$tmp/server.log"
curl -fsS --cacert "$tmp/data/tls/ca.crt" "https://localhost:$p/readyz" >/dev/null ||
        { echo "bench-tls: TLS does not verify with the generated CA" >&2; exit 1; }

# run LEG SCHEME PATH [HEADER]: wrk's req/s, appended to $tmp/LEG-SCHEME
run() {
        if [ -n "${4:-}" ]; then
                wrk -t2 -c16 -d"${secs}s" -H "$4" "$2://localhost:$p$3" > "$tmp/wrk.out" 2>&1
        else
                wrk -t2 -c16 -d"${secs}s" "$2://localhost:$p$3" > "$tmp/wrk.out" 2>&1
        fi
        if grep -q -e 'Non-2xx' -e 'Socket errors' "$tmp/wrk.out"; then
                echo "bench-tls: $1 over $2: errors:" >&2
                cat "$tmp/wrk.out" >&2
                exit 1
        fi
        awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out" >> "$tmp/$1-$2"
}

for r in $(seq "$rounds"); do
        for scheme in http https; do
                run healthz "$scheme" /healthz
                run v1-models "$scheme" /v1/models
                run v1-new-conn "$scheme" /v1/models "Connection: close"
        done
done

# summary FILE: median [min-max] of its lines
summary() { sort -g "$1" | awk '{v[NR] = $1} END {printf "%.0f [%.0f-%.0f]", v[int((NR + 1) / 2)], v[1], v[NR]}'; }
ratio() { sort -g "$1" | awk '{v[NR] = $1} END {printf "%.2f [%.2f-%.2f]", v[int((NR + 1) / 2)], v[1], v[NR]}'; }

printf 'bench-tls: %s s x %s rounds, wrk -t2 -c16, loopback, one server (req/s: median [min-max])\n' "$secs" "$rounds"
printf '%-12s %-22s %-22s %s\n' leg plaintext tls tls/plaintext
for leg in healthz v1-models v1-new-conn; do
        paste "$tmp/$leg-https" "$tmp/$leg-http" | awk '{printf "%.4f\n", $1 / $2}' > "$tmp/$leg-ratio"
        printf '%-12s %-22s %-22s %s\n' "$leg" "$(summary "$tmp/$leg-http")" "$(summary "$tmp/$leg-https")" \
                "$(ratio "$tmp/$leg-ratio")"
done
