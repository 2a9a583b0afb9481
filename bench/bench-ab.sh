#!/bin/sh
# bench-ab.sh - the same benchmarks on two commits, side by side in one run:
# for changes that must not change performance (a reshaping).
#
#   bench/bench-ab.sh BASE_REV [ROUNDS [SECONDS]]     (default 3 rounds, 5 s)
#   BENCH_CORE_ARGS="--tasks 1000000 --nodes 12500" bench/bench-ab.sh BASE_REV 5 0
#
# BENCH_CORE_ARGS goes to every bench-core run (the pool and queue size);
# SECONDS 0 leaves the http leg out (and wrk is not needed).
#
# Builds BASE_REV in a temporary worktree and the working tree as it is,
# then ROUNDS times, alternating base and new inside each round:
#   core   build/bench/bench-core --rounds 1 (100,000 tasks onto 10,000 GPUs):
#          first-run decisions/s and steady-state us/run of every scenario
#   http   bench-http's durable leg: POST /api/v1/tasks with store.sync full,
#          wrk -t2 -c64 for SECONDS on a fresh daemon (sim GPUs, SQLite)
# Prints per figure the median [min-max] over the rounds for base and new and
# new/base of the medians (for us/run, lower is better; for the rest higher).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BASE_REV [ROUNDS [SECONDS]]" >&2; exit 2; }
rev=$1 rounds=${2:-3} secs=${3:-5}
cd "$(dirname "$0")/.."
core_args=${BENCH_CORE_ARGS:-}
case "$secs" in *[!0-9]*|"") echo "bench-ab: SECONDS must be a whole number" >&2; exit 2;; esac
[ "$secs" = 0 ] || command -v wrk >/dev/null || { echo "bench-ab: needs wrk (apt-get install wrk)" >&2; exit 1; }
base_sha=$(git rev-parse --short "$rev^{commit}") || { echo "bench-ab: $rev is not a commit" >&2; exit 2; }
tmp=$(mktemp -d /tmp/gp-ab-XXXXXX)
pid=""
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
        wait 2>/dev/null
        git worktree remove --force "$tmp/base" 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
git worktree add -q --detach "$tmp/base" "$base_sha"
[ -e "$tmp/shared" ] || ln -s "$PWD/../shared" "$tmp/shared"
echo "bench-ab: building $base_sha (base) and the working tree (new)" >&2
make -s -C "$tmp/base" -j2 all build/bench/bench-core >/dev/null
make -s -j2 all build/bench/bench-core >/dev/null

. bench/lib.sh

# http WHO BIN: one durable leg; prints "http WHO req/s"
http() {
        rm -rf "$tmp/data"
        printf 'scheduler: {max_queue_depth: 1000000}\nstore: {sync: full}\ngpus: {backend: sim}\n' > "$tmp/cfg.yaml"
        p=$(free_port)
        "$2" server --config "$tmp/cfg.yaml" --listen "127.0.0.1:$p" --data-dir "$tmp/data" 2>"$tmp/server.log" &
        pid=$!
        wait_up "bench-ab: server $1" "http://127.0.0.1:$p/readyz" "$tmp/server.log"
        wrk -t2 -c64 -d"${secs}s" -s bench/submit.lua "http://127.0.0.1:$p" > "$tmp/wrk.out" 2>&1
        kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
        echo "http $1 $(awk '/^Requests\/sec/ {print $2}' "$tmp/wrk.out")"
}

# core WHO BIN: one bench-core round; prints "core WHO SCENARIO decisions/s us/run" per scenario
core() {
        # shellcheck disable=SC2086 # the arguments are words
        "$2" --rounds 1 $core_args | /usr/bin/python3 -c '
import sys
who = sys.argv[1]
rows = False
for line in sys.stdin:
    if line.startswith("scenario"):
        rows = True
        continue
    if line.startswith("vs plain") or line.startswith("pool of"):
        break
    if rows and line.strip():
        name = line[:26].strip().replace(" ", "_")
        t = line[26:].split()
        d = t[3]
        d = float(d[:-1]) * 1e6 if d.endswith("M") else float(d[:-1]) * 1e3 if d.endswith("k") else float(d)
        print("core", who, name, d, t[6])
' "$1"
}

: > "$tmp/rows"
echo "bench-ab: $rounds rounds, base and new alternating; $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg)${core_args:+; bench-core $core_args}"
for r in $(seq "$rounds"); do
        for who in base new; do
                if [ $who = base ]; then dir=$tmp/base/build; else dir=$PWD/build; fi
                core $who "$dir/bench/bench-core" >> "$tmp/rows"
                [ "$secs" = 0 ] || http $who "$dir/gpupool" >> "$tmp/rows"
        done
        echo "  round $r/$rounds done" >&2
done
/usr/bin/python3 - "$tmp/rows" "$base_sha" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
def med(v):
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
def fmt(v, f):
    return ("%s [%s-%s]" % (f, f, f)) % (med(v), min(v), max(v))
print("median [min-max] over the rounds; base = %s, new = working tree" % sys.argv[2])
print("%-52s %26s %26s %9s" % ("figure", "base", "new", "new/base"))
keys = []
for r in rows:
    k = tuple(r[:1] + r[2:3]) if r[0] == "core" else ("http",)
    if k not in keys:
        keys.append(k)
for k in keys:
    if k[0] == "http":
        b = [float(r[2]) for r in rows if r[0] == "http" and r[1] == "base"]
        n = [float(r[2]) for r in rows if r[0] == "http" and r[1] == "new"]
        print("%-52s %26s %26s %9.2f" % ("http durable submits/s", fmt(b, "%.0f"), fmt(n, "%.0f"), med(n) / med(b)))
        continue
    sel = lambda who, i: [float(r[i]) for r in rows if r[0] == "core" and r[2] == k[1] and r[1] == who]
    name = k[1].replace("_", " ")
    b, n = sel("base", 3), sel("new", 3)
    print("%-52s %26s %26s %9.2f" % (name + ": first run decisions/s", fmt([x / 1e6 for x in b], "%.2fM"),
                                     fmt([x / 1e6 for x in n], "%.2fM"), med(n) / med(b)))
    b, n = sel("base", 4), sel("new", 4)
    print("%-52s %26s %26s %9.2f" % (name + ": steady us/run", fmt(b, "%.0f"), fmt(n, "%.0f"),
                                     med(n) / med(b) if med(b) else 1.0))
PY
