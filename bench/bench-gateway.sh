#!/bin/sh
# bench-gateway.sh - what the inference gateway costs over a plain reverse proxy.
#
# In one go, on this machine, the same load against the same upstream three
# ways, interleaved round by round so drift in the machine hits all three:
#   direct   wrk -> fake-openai (tests/upstream/fake-openai.c)
#   nginx    wrk -> nginx (plain reverse proxy, upstream keepalive 64,
#            proxy_buffering off, 2 workers) -> fake-openai
#   gpupool  wrk -> gpupool (gateway model "bench-model", no keys, every
#            gateway limit 0 = unlimited) -> fake-openai
# Load: wrk -t2 -c64 -dSECS, keep-alive, each request a short chat completion
# (one user message, max_tokens 8, not streamed).  Prints the median over the
# rounds of req/s, p50 and p99 per leg (with the min-max over the rounds),
# then gpupool/nginx throughput and the latency gpupool and nginx add over
# direct, against the targets of issue 5 (throughput >= 0.9 x nginx, added
# p50 < 0.3 ms).  At 64 connections every
# leg is saturated, so its p50 is mostly queueing (about 64 / throughput):
# the throughput target is judged there.  The latency a hop adds to one
# request is measured with one connection (wrk -t1 -c1, SECS/2, same
# rounds), and the latency target is judged there; both are printed.
# Streaming: the same request with "stream": true (about 10 server-sent
# events) at one connection, same rounds; the latency a hop adds to the
# whole stream is compared with what nginx adds (goal: gpupool <= 1.1 x
# nginx).  Every figure is a median [min-max] over the rounds, and each
# "adds" is also taken round by round (same round, same machine load).
# All legs and wrk share this machine's cores, so the figures are relative,
# not absolute.
# A leg that answers anything but 200 is reported and left out of ratios.
#
# Usage: bench/bench-gateway.sh [SECONDS [ROUNDS]]   (default 10 s, 3 rounds)
# Env: BUILD (default build) - the make build dir to use and build into.
#      BASE_BIN - a gpupool binary of another commit: a fourth leg "base",
#      the same gateway config on its own port, interleaved with the others
#      (compare a change with its parent in the same run).
#      STREAM_ONLY=1 - only the streamed runs at one connection (SECS/2
#      each), so that more rounds fit in the same time: the streaming
#      ratio is the noisiest figure here.
# Needs: wrk, nginx, curl (scripts/install-deps.sh bench).
set -eu
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
build=${BUILD:-build}
for t in wrk nginx curl; do
        command -v $t >/dev/null 2>&1 || [ -x /usr/sbin/$t ] ||
                { echo "bench-gateway: needs $t (scripts/install-deps.sh bench)" >&2; exit 1; }
done
nginx_bin=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
make -s BUILD="$build" "$build/gpupool" "$build/tests/fake-openai" >/dev/null
case $build in /*) abs=$build ;; *) abs=$PWD/$build ;; esac
gpupool=$abs/gpupool
fake=$abs/tests/fake-openai
tmp=$(mktemp -d /tmp/gp-bench-gw-XXXXXX)
pids=""
watchdog=""
cleanup() {
        [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
        for p in $pids; do kill "$p" 2>/dev/null || true; done
        wait 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. bench/lib.sh

# --- the upstream
"$fake" --listen 127.0.0.1:0 --model bench-model --name bench --die-with-parent >"$tmp/fake.out" 2>&1 &
pids="$pids $!"
for _ in $(seq 50); do grep -q '^ready' "$tmp/fake.out" 2>/dev/null && break; sleep 0.1; done
up_port=$(awk '/^ready/ {print $2}' "$tmp/fake.out")
[ -n "$up_port" ] || { echo "bench-gateway: fake-openai did not start:" >&2; cat "$tmp/fake.out" >&2; exit 1; }
direct="http://127.0.0.1:$up_port"

# --- nginx, a plain reverse proxy
ng_port=$(free_port)
mkdir -p "$tmp/nginx/logs"
cat > "$tmp/nginx/nginx.conf" <<EOF
worker_processes 2;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    upstream fake { server 127.0.0.1:$up_port; keepalive 64; }
    server {
        listen 127.0.0.1:$ng_port;
        location / {
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
"$nginx_bin" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/error.log" 2>"$tmp/nginx/start.log" &
pids="$pids $!"
nginx="http://127.0.0.1:$ng_port"

# --- gpupool with a gateway model on the same upstream
gp_port=$(free_port)
cat > "$tmp/gpupool.yaml" <<EOF
gpus: {backend: sim}
gateway:
  queue_timeout_sec: 30
  max_queue: 10000
  limits: {max_concurrent: 0, max_rps: 0, max_tokens_per_sec: 0}
  models:
    - {name: bench-model, context: 4096, upstreams: ["$direct"]}
EOF
"$gpupool" server --config "$tmp/gpupool.yaml" --listen "127.0.0.1:$gp_port" --data-dir "$tmp/data" \
        >"$tmp/gpupool.log" 2>&1 &
pids="$pids $!"
gp="http://127.0.0.1:$gp_port"
base=""
if [ -n "${BASE_BIN:-}" ]; then
        base_port=$(free_port)
        "$BASE_BIN" server --config "$tmp/gpupool.yaml" --listen "127.0.0.1:$base_port" --data-dir "$tmp/data-base" \
                >"$tmp/base.log" 2>&1 &
        pids="$pids $!"
        base="http://127.0.0.1:$base_port"
fi
# if this script is killed without running its EXIT trap (SIGKILL), end the
# three servers anyway: a watcher that outlives it by at most a second
( while kill -0 $$ 2>/dev/null; do sleep 1; done; for p in $pids; do kill "$p" 2>/dev/null; done
  sleep 1; rm -rf "$tmp" ) &
watchdog=$!

body='{"model":"bench-model","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":8}'
# probe URL: prints the HTTP status of one chat completion (000: no answer)
probe() {
        curl -s -o "$tmp/probe.out" -w '%{http_code}' -m 5 -H 'Content-Type: application/json' \
                -d "$body" "$1/v1/chat/completions" 2>/dev/null || true
}
wait_ok() { # URL -> 0 when a chat completion answers 200 within 10 s
        for _ in $(seq 100); do [ "$(probe "$1")" = 200 ] && return 0; sleep 0.1; done
        return 1
}
legs=""
wait_ok "$direct" && legs="direct" || { echo "bench-gateway: fake-openai does not answer" >&2; exit 1; }
if wait_ok "$nginx"; then legs="$legs nginx"; else
        echo "bench-gateway: nginx leg SKIPPED: no 200 through nginx" >&2
        cat "$tmp/nginx/start.log" "$tmp/nginx/error.log" >&2 2>/dev/null || true
fi
if wait_ok "$gp"; then legs="$legs gpupool"; else
        code=$(probe "$gp")
        echo "bench-gateway: gpupool leg SKIPPED: POST $gp/v1/chat/completions answered HTTP $code," \
                "not 200 (is the gateway built in and configured?):" >&2
        head -c 400 "$tmp/probe.out" >&2 2>/dev/null || true
        echo >&2
        tail -5 "$tmp/gpupool.log" >&2 || true
fi
if [ -n "$base" ]; then
        if wait_ok "$base"; then legs="$legs base"; else
                echo "bench-gateway: base leg SKIPPED: no 200 from BASE_BIN=$BASE_BIN" >&2
                tail -5 "$tmp/base.log" >&2 || true
        fi
fi

cat > "$tmp/chat.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$body'
EOF
body_stream='{"model":"bench-model","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":8,"stream":true}'
cat > "$tmp/stream.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$body_stream'
EOF

# wrk latency "950.00us" / "1.20ms" / "2.00s" -> ms
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /[0-9]s$/ && v !~ /ms$/) n *= 1000; printf "%.3f", n }'; }

# run LEG URL SECONDS [SUFFIX THREADS CONNS SCRIPT]: appends "req/s p50_ms
# p99_ms non2xx errors" to $tmp/LEG.rows (or LEG.SUFFIX)
run() {
        wrk -t"${5:-2}" -c"${6:-64}" -d"$3s" --latency -s "$tmp/${7:-chat}.lua" "$2/v1/chat/completions" \
                >"$tmp/wrk.out" 2>&1 || true
        rps=$(awk '/^Requests\/sec/ {print $2}' "$tmp/wrk.out")
        p50=$(to_ms "$(awk '$1=="50%" {print $2}' "$tmp/wrk.out")")
        p99=$(to_ms "$(awk '$1=="99%" {print $2}' "$tmp/wrk.out")")
        bad=$(awk '/Non-2xx/ {print $NF}' "$tmp/wrk.out")
        err=$(awk '/Socket errors/ {s = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) s += $i; print s}' "$tmp/wrk.out")
        echo "${rps:-0} $p50 $p99 ${bad:-0} ${err:-0}" >> "$tmp/$1.${4:-rows}"
}

url_of() { case $1 in direct) echo "$direct" ;; nginx) echo "$nginx" ;; gpupool) echo "$gp" ;; base) echo "$base" ;; esac; }

echo "bench-gateway: wrk -t2 -c64 -d${secs}s, short chat completions (max_tokens 8), $rounds rounds" \
        "interleaved, $(nproc) cores shared by wrk, fake-openai, nginx and gpupool"
for leg in $legs; do run "$leg" "$(url_of "$leg")" 1; rm -f "$tmp/$leg.rows"; done   # warm-up
lsecs=$(( secs / 2 > 2 ? secs / 2 : 2 ))
only=${STREAM_ONLY:-0}
status=0
for r in $(seq "$rounds"); do
        if [ "$only" != 1 ]; then
                for leg in $legs; do run "$leg" "$(url_of "$leg")" "$secs"; done
                for leg in $legs; do run "$leg" "$(url_of "$leg")" "$lsecs" light 1 1; done
        fi
        for leg in $legs; do run "$leg" "$(url_of "$leg")" "$lsecs" stream 1 1 stream; done
        echo "  round $r/$rounds done" >&2
done

# median of column C of FILE
median() { awk -v c="$2" '{print $c}' "$1" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# "median [min-max]" of column C of FILE with printf format F
mmm() { awk -v c="$2" '{print $c}' "$1" | sort -g | awk -v f="$3" '{a[NR] = $1} END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf f " [" f " - " f "]", m, a[1], a[NR] }'; }

# table SUFFIX PREFIX: one line per leg; sets PREFIX<leg>_rps/_p50/_p99/_bad
table() {
        printf '%-8s %26s %24s %24s %8s %7s\n' leg "req/s" "p50 ms" "p99 ms" non-2xx errors
        for leg in direct nginx gpupool $( [ -n "$base" ] && echo base); do
                f="$tmp/$leg.$1"
                if [ ! -f "$f" ]; then printf '%-8s %10s\n' "$leg" "skipped"; continue; fi
                bad=$(awk '{s += $4} END {print s}' "$f"); err=$(awk '{s += $5} END {print s}' "$f")
                printf '%-8s %26s %24s %24s %8s %7s\n' "$leg" "$(mmm "$f" 1 %.0f)" "$(mmm "$f" 2 %.3f)" \
                        "$(mmm "$f" 3 %.3f)" "$bad" "$err"
                eval "$2${leg}_rps=$(median "$f" 1) $2${leg}_p50=$(median "$f" 2) $2${leg}_p99=$(median "$f" 3) $2${leg}_bad=$bad"
        done
}
# adds LEG SUFFIX: "median [min-max]" of LEG's p50 minus direct's, round by round
adds() { paste -d' ' "$tmp/$1.$2" "$tmp/direct.$2" | awk '{print $2 - $7}' > "$tmp/adds1"; mmm "$tmp/adds1" 1 %+.3f; }
if [ "$only" = 1 ]; then
        echo "-- (STREAM_ONLY=1: the 64-connection and unstreamed runs skipped)"
else
echo "-- 64 connections (saturated)"
table rows ""

if [ -f "$tmp/nginx.rows" ]; then
        awk -v n="$nginx_rps" -v d="$direct_rps" -v n50="$nginx_p50" -v d50="$direct_p50" -v n99="$nginx_p99" \
                -v d99="$direct_p99" 'BEGIN { printf "nginx:   %.2f x direct throughput, adds p50 %+.3f ms, p99 %+.3f ms\n", n / d, n50 - d50, n99 - d99 }'
fi
if [ -f "$tmp/gpupool.rows" ] && [ -f "$tmp/nginx.rows" ]; then
        awk -v g="$gpupool_rps" -v n="$nginx_rps" -v d="$direct_rps" -v g50="$gpupool_p50" -v d50="$direct_p50" \
                -v g99="$gpupool_p99" -v d99="$direct_p99" -v bad="$gpupool_bad" 'BEGIN {
                r = g / n; a50 = g50 - d50
                printf "gpupool: %.2f x nginx throughput (%.2f x direct), adds p50 %+.3f ms, p99 %+.3f ms\n", r, g / d, a50, g99 - d99
                ok = (r >= 0.9 && bad == 0)
                printf "throughput target (>= 0.90 x nginx, all 200): %s\n", ok ? "MET" : "MISSED"
                exit ok ? 0 : 3 }' && thr_ok=1 || thr_ok=0
else
        echo "gpupool: no figures (the gpupool leg was skipped; see above)"
        status=2
fi
echo "-- 1 connection (latency one request pays, no queueing)"
table light l_
if [ -f "$tmp/nginx.light" ]; then
        awk -v n50="$l_nginx_p50" -v d50="$l_direct_p50" -v n99="$l_nginx_p99" -v d99="$l_direct_p99" \
                'BEGIN { printf "nginx:   adds p50 %+.3f ms, p99 %+.3f ms\n", n50 - d50, n99 - d99 }'
fi
if [ -f "$tmp/gpupool.light" ]; then
        awk -v g50="$l_gpupool_p50" -v d50="$l_direct_p50" -v g99="$l_gpupool_p99" -v d99="$l_direct_p99" 'BEGIN {
                printf "gpupool: adds p50 %+.3f ms, p99 %+.3f ms; latency target (added p50 < 0.3 ms): %s\n", g50 - d50,
                        g99 - d99, (g50 - d50 < 0.3) ? "MET" : "MISSED"
                exit (g50 - d50 < 0.3) ? 0 : 3 }' && lat_ok=1 || lat_ok=0
        # a missed target is a result, not a failure of the script
        [ "${thr_ok:-0}" = 1 ] && [ "$lat_ok" = 1 ] && echo "issue 5 targets: MET" || echo "issue 5 targets: MISSED"
fi
echo "added p50 over direct at 1 connection, round by round, median [min - max] ms:"
for leg in nginx gpupool base; do
        [ -f "$tmp/$leg.light" ] && echo "  $leg: $(adds "$leg" light)"
done
fi
echo "-- 1 connection, streamed (stream: true, max_tokens 8: the whole event stream)"
table stream s_
echo "added p50 over direct, streamed, round by round, median [min - max] ms:"
for leg in nginx gpupool base; do
        [ -f "$tmp/$leg.stream" ] && echo "  $leg: $(adds "$leg" stream)"
done
for leg in gpupool base; do
        [ -f "$tmp/$leg.stream" ] && [ -f "$tmp/nginx.stream" ] || continue
        paste -d' ' "$tmp/$leg.stream" "$tmp/nginx.stream" "$tmp/direct.stream" |
                awk '{ n = $7 - $12; g = $2 - $12; print (n > 0 ? g / n : 999) }' > "$tmp/sratio"
        eval "g50=\$s_${leg}_p50"
        # judged round by round (the legs of one round share the machine's
        # load; medians of different rounds need not)
        awk -v who="$leg" -v g50="$g50" -v n50="$s_nginx_p50" -v d50="$s_direct_p50" -v rr="$(mmm "$tmp/sratio" 1 %.2f)" 'BEGIN {
                n = n50 - d50; g = g50 - d50; split(rr, a, " "); r = a[1] + 0
                printf "streaming: %s adds %.2f x what nginx adds, round by round: %s (medians of the legs: %+.3f vs %+.3f ms); goal <= 1.10 x: %s\n",
                        who, r, rr, g, n, (r <= 1.1 ? "MET" : "MISSED") }'
done
exit $status
