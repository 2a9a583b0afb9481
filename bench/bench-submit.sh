#!/bin/sh
# bench-submit.sh - batch submits/s against lease submits/s, and batch tasks
# started per second, for one or more builds side by side in one run.
#
# Each run gets a fresh server of its build (sim backend: 64 GPUs of 24 GiB, tasks of 16 MiB, so
# hundreds of `true` tasks run at once) is driven by the same wrk client
# (8 connections, 1 thread, keep-alive), rounds interleaved:
#   lease  POST /api/v1/tasks without a command (bench/lease.lua)
#   batch  POST /api/v1/tasks running `true`     (bench/batch.lua)
# and then N batch tasks `true` are submitted (8 connections) and the
# script polls until all have ended: "started/s" = N / (time of the last
# task's started_at - time of the first task's submitted_at), "ended/s" the
# same to the last finished_at (each task's supervisor ran and reported).
# Usage: bench/bench-submit.sh [SECONDS] [ROUNDS] [N] [BUILD_DIR...]
#        (default 5 s, 3 rounds, N=2000, build/)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; ntasks=${3:-2000}
if [ $# -ge 3 ]; then shift 3; else shift $#; fi  # (a short shift ends dash)
[ $# -gt 0 ] || set -- build
command -v wrk >/dev/null || { echo "bench-submit: needs wrk" >&2; exit 1; }
tmp=$(mktemp -d /tmp/gp-bsub-XXXXXX)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
. bench/lib.sh

start() { # $1 = build dir, $2 = tag; sets url
        rm -rf "$tmp/$2"; mkdir -p "$tmp/$2"
        printf 'scheduler: {max_queue_depth: 1000000}\ngpus: {backend: sim, sim: [{name: x, memory_mb: 24564, count: 64}]}\n' > "$tmp/$2/cfg.yaml"
        p=$(free_port)
        "$1/gpupool-server" server --config "$tmp/$2/cfg.yaml" --listen "127.0.0.1:$p" --data-dir "$tmp/$2/data" >/dev/null 2>"$tmp/$2/server.log" &
        pids="$pids $!"; echo $! > "$tmp/$2/pid"
        wait_up "bench-submit: server $1" "http://127.0.0.1:$p/readyz" "$tmp/$2/server.log"
        url="http://127.0.0.1:$p"
}
stop() { p=$(cat "$tmp/$1/pid"); kill "$p"; wait "$p" 2>/dev/null || true; }
rate() { wrk -t1 -c8 -d"${secs}s" -s "$1" "$2" 2>&1 | awk '/^Requests\/sec/ {print $2}'; }
stats() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {printf "%.0f (%.0f-%.0f)", v[int((NR+1)/2)], v[1], v[NR]}'; }

echo "bench-submit: wrk -t1 -c8 -d${secs}s, $rounds rounds interleaved, $(nproc) cores shared by wrk and the servers"
printf '%-28s %-22s %-22s %-7s %10s %10s\n' build "lease submits/s" "batch submits/s" "ratio" "started/s" "ended/s"
for b in "$@"; do
        tag=$(echo "$b" | tr '/' '_')
        L=""; B=""
        for _ in $(seq "$rounds"); do # a fresh server for each run: nothing queues behind old work
                start "$b" "$tag"; L="$L $(rate bench/lease.lua "$url")"; stop "$tag"
                start "$b" "$tag"; B="$B $(rate bench/batch.lua "$url")"; stop "$tag"
        done
        # tasks started per second: a fresh server, N tasks `true`
        start "$b" "$tag"
        started=$(/usr/bin/python3 - "$url" "$ntasks" <<'PY'
import json, sys, threading, time, urllib.request, http.client
url, n = sys.argv[1], int(sys.argv[2])
host, port = url[7:].split(":")
body = json.dumps({"tenant_id": "bench", "name": "s", "gpu_request": 1, "memory_mb": 16, "command": ["true"]})
ids = []
def worker(k):
    c = http.client.HTTPConnection(host, int(port))
    for _ in range(k):
        c.request("POST", "/api/v1/tasks", body, {"Content-Type": "application/json"})
        r = c.getresponse(); d = r.read()
        if r.status == 201:
            ids.append(json.loads(d)["id"])
ts = [threading.Thread(target=worker, args=(n // 8,)) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
def get(i):
    return json.loads(urllib.request.urlopen("%s/api/v1/tasks/%d" % (url, i)).read())
deadline = time.time() + 600
while time.time() < deadline:
    ts_ = [get(i) for i in ids]
    if all(t["finished_at"] for t in ts_):
        break
    time.sleep(0.5)
from datetime import datetime
def ms(s): return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
t0 = min(ms(t["submitted_at"]) for t in ts_)
st = max(ms(t["started_at"]) for t in ts_ if t["started_at"])
en = max(ms(t["finished_at"]) for t in ts_ if t["finished_at"])
ok = sum(t["state"] == "succeeded" for t in ts_)
print("%.0f %.0f %d" % (len(ids) / max(st - t0, 1e-3), len(ids) / max(en - t0, 1e-3), ok))
PY
)
        stop "$tag"
        set -- $started
        lm=$(echo "$L" | stats); bm=$(echo "$B" | stats)
        ratio=$(awk -v a="$(echo "$B" | tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')" \
                    -v b="$(echo "$L" | tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')" \
                    'BEGIN {printf "%.2f", a / b}')
        printf '%-28s %-22s %-22s %-7s %10s %10s  (%s of %s succeeded)\n' "$b" "$lm" "$bm" "$ratio" "$1" "$2" "$3" "$ntasks"
done
