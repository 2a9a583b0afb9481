#!/bin/sh
# bench-pg.sh - durable task submissions per second on PostgreSQL against
# SQLite (issue 16, "Throughput on PostgreSQL").
#
# Drives the real daemon (sim GPUs) with wrk (64 connections, 2 threads,
# keep-alive; bench/submit.lua: POST /api/v1/tasks) on loopback, as
# bench-http.sh's durable leg does, side by side in one run:
#   sqlite           store on SQLite, store.sync full (the default): each
#                    submission is fsynced before its 201
#   postgres         store.url postgres://... on a fresh database: a single
#                    server (no cluster section)
#   postgres-leader  the same with cluster {server_id: s1, lease_s: 6}: the
#                    fenced leader path (every commit checks the lease epoch
#                    in the same transaction)
#   postgres-follower the leader above and a follower (server_id s2) on the
#                    same database; wrk submits to the follower, which
#                    forwards each request to the leader (one connection to
#                    it per request) and relays its 201
# The PostgreSQL is the bench's own (tests/pg/start-pg.sh turns fsync off for
# test speed): initdb in the temp dir, a unix socket there only (no TCP
# port), durable settings (fsync, synchronous_commit, full_page_writes on),
# stopped at the end; the settings it ran with are printed.  Both stores'
# files are under the same temp dir (the same file system).
# Each round runs every leg once, each with a fresh server and a fresh
# database (a fresh data dir for SQLite); the order of the legs rotates from
# round to round.  After each leg it checks that the store holds at least as
# many tasks as wrk received 201 answers (sqlite3 / psql), so no figure
# counts an unstored task.  Prints per leg the median [min-max] over the
# rounds of req/s, p50 and p99 (ms), and of req/s over the sqlite leg's of
# the same round (the issue's goal: postgres at least 0.5).
# A leg is a function leg_NAME ROUND (NAME with '-' as '_') listed in $legs:
# it makes its database (pg_newdb), starts its server(s) with server_start
# (several may run at once: a follower leg starts the leader, then a server
# that forwards to it, and measures through the latter), measures with
# measure, stops them with servers_stop, and appends its row with the count
# of stored tasks.
# Usage: bench/bench-pg.sh [SECONDS [ROUNDS]]   (default 10 3)
# Env: PGBIN (default: newest /usr/lib/postgresql/*/bin)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
legs="sqlite postgres postgres-leader postgres-follower"
command -v wrk >/dev/null || { echo "bench-pg: needs wrk (apt-get install wrk)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "bench-pg: needs sqlite3 (apt-get install sqlite3)" >&2; exit 1; }
command -v psql >/dev/null || { echo "bench-pg: needs psql (apt-get install postgresql)" >&2; exit 1; }
if [ -z "${PGBIN:-}" ]; then
        PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
        echo "bench-pg: no PostgreSQL server found (apt-get install postgresql, or set PGBIN)" >&2
        exit 1
fi
make -s build/gpupool build/gpupool-server >/dev/null
bin=$PWD/build/gpupool
tmp=$(mktemp -d /tmp/gp-pgbench-XXXXXX)
chmod 711 "$tmp" # the cluster user reaches its dir below
pg="$tmp/pg"
pids=""
pgrun=""
pg_up=""
cleanup() {
        servers_stop
        if [ -n "$pg_up" ]; then
                $pgrun "$PGBIN/pg_ctl" -D "$pg/data" stop -m fast -w >/dev/null 2>&1 ||
                        $pgrun "$PGBIN/pg_ctl" -D "$pg/data" stop -m immediate -w >/dev/null 2>&1 || true
        fi
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

. bench/lib.sh

# ---- the bench's own PostgreSQL: durable, on a unix socket in $pg ----

pg_start() {
        mkdir -p "$pg"
        if [ "$(id -u)" -eq 0 ]; then # PostgreSQL refuses to run as root
                u=postgres
                id "$u" >/dev/null 2>&1 || u=nobody
                chown "$u" "$pg"
                pgrun="runuser -u $u --"
        fi
        chmod 700 "$pg"
        $pgrun "$PGBIN/initdb" -D "$pg/data" -U postgres -A trust -E UTF8 --locale=C >"$tmp/initdb.log" 2>&1 || {
                echo "bench-pg: initdb failed:" >&2
                cat "$tmp/initdb.log" >&2
                exit 1
        }
        pg_up=1
        # durable on purpose: the figures must not come from skipped fsyncs
        $pgrun "$PGBIN/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w -t 60 \
                -o "-c listen_addresses='' -k $pg -p 5432 -c max_connections=50 -c fsync=on \
-c synchronous_commit=on -c full_page_writes=on" start >/dev/null 2>&1 || {
                echo "bench-pg: pg_ctl start failed:" >&2
                cat "$pg/server.log" >&2 2>/dev/null
                exit 1
        }
        chmod 711 "$pg" # root reaches the socket in a dir owned by the cluster user
        pgurl="postgresql:///postgres?host=$pg&port=5432&user=postgres"
        settings=$(psql "$pgurl" -Atc "SELECT string_agg(name || '=' || current_setting(name), ' ' ORDER BY name)
                FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method',
                'wal_level', 'commit_delay', 'shared_buffers', 'max_wal_size')")
        for want in fsync=on synchronous_commit=on full_page_writes=on; do
                case " $settings " in
                *" $want "*) ;;
                *) echo "bench-pg: PostgreSQL is not durable ($settings)" >&2; exit 1 ;;
                esac
        done
        echo "bench-pg: the bench's own PostgreSQL $(psql "$pgurl" -Atc 'SHOW server_version' | cut -d' ' -f1)," \
                "unix socket in its temp dir: $settings"
}

# A fresh database $1; sets dburl.
pg_newdb() {
        psql "$pgurl" -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $1" >/dev/null
        dburl="postgresql:///$1?host=$pg&port=5432&user=postgres"
}

pg_dropdb() { psql "$pgurl" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1 || true; }

# ---- gpupool servers ----

# server_start NAME STORE_YAML [CLUSTER_YAML [READY_PATH]]: a fresh data dir
# $tmp/NAME; waits until READY_PATH (default /readyz: for a cluster member,
# until it leads; /healthz for one that stands by) answers 200; sets url,
# appends to pids.
server_start() {
        d="$tmp/$1"
        rm -rf "$d"
        mkdir -p "$d"
        {
                printf 'scheduler: {max_queue_depth: 1000000}\nstore: %s\ngpus: {backend: sim}\n' "$2"
                [ -z "${3:-}" ] || printf 'cluster: %s\n' "$3"
        } > "$d/cfg.yaml"
        p=$(free_port)
        "$bin" server --config "$d/cfg.yaml" --listen "127.0.0.1:$p" --data-dir "$d/data" 2>"$d/server.log" &
        pids="$pids $!"
        wait_up "bench-pg: server $1" "http://127.0.0.1:$p${4:-/readyz}" "$d/server.log" 300
        url="http://127.0.0.1:$p"
}

# Stop every server (SIGTERM: what was answered is stored before it exits).
servers_stop() {
        for p in $pids; do
                kill "$p" 2>/dev/null || true
        done
        for p in $pids; do
                wait "$p" 2>/dev/null || true
        done
        pids=""
}

# wrk latency "950.00us" / "1.20ms" / "2.00s" -> ms
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /[0-9]s$/ && v !~ /ms$/) n *= 1000; printf "%.3f", n }'; }

# measure LEG URL: wrk's submits against URL; sets row
# ("LEG req/s p50_ms p99_ms requests non2xx"), completed by the leg with
# the stored count.
measure() {
        wrk -t2 -c64 -d"${secs}s" --latency -s bench/submit.lua "$2" > "$tmp/wrk.out" 2>&1
        rps=$(awk '/^Requests\/sec/ {print $2}' "$tmp/wrk.out")
        p50=$(to_ms "$(awk '$1=="50%" {print $2}' "$tmp/wrk.out")")
        p99=$(to_ms "$(awk '$1=="99%" {print $2}' "$tmp/wrk.out")")
        n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
        bad=$(awk '/Non-2xx/ {print $NF}' "$tmp/wrk.out")
        row="$1 $rps $p50 $p99 $n ${bad:-0}"
}

# ---- the legs: each leg_NAME ROUND appends "NAME req/s p50 p99 requests non2xx stored" to $tmp/rows ----

leg_sqlite() {
        server_start sqlite '{sync: full}'
        measure sqlite "$url"
        servers_stop
        stored=$(sqlite3 "$tmp/sqlite/data/gpupool.db" 'select count(*) from tasks')
        echo "$row $stored" >> "$tmp/rows"
}

leg_postgres() {
        pg_newdb "gp_bench_single_$1"
        server_start postgres "{url: \"$dburl\"}"
        measure postgres "$url"
        servers_stop
        stored=$(psql "$dburl" -Atc 'select count(*) from tasks')
        echo "$row $stored" >> "$tmp/rows"
        pg_dropdb "gp_bench_single_$1"
}

leg_postgres_leader() {
        pg_newdb "gp_bench_leader_$1"
        server_start s1 "{url: \"$dburl\"}" '{server_id: s1, lease_s: 6}'
        measure postgres-leader "$url"
        servers_stop
        stored=$(psql "$dburl" -Atc 'select count(*) from tasks')
        echo "$row $stored" >> "$tmp/rows"
        pg_dropdb "gp_bench_leader_$1"
}

leg_postgres_follower() {
        pg_newdb "gp_bench_follower_$1"
        server_start s1 "{url: \"$dburl\"}" '{server_id: s1, lease_s: 6}'
        # ready once a request through it reaches the leader (it found its URL)
        server_start s2 "{url: \"$dburl\"}" '{server_id: s2, lease_s: 6}' '/api/v1/tasks'
        measure postgres-follower "$url"
        servers_stop
        stored=$(psql "$dburl" -Atc 'select count(*) from tasks')
        echo "$row $stored" >> "$tmp/rows"
        pg_dropdb "gp_bench_follower_$1"
}

pg_start
echo "bench-pg: wrk -t2 -c64 -d${secs}s on 127.0.0.1 (bench/submit.lua), $rounds rounds, legs in a rotating order," \
        "$(nproc) cores shared by wrk, the daemon and PostgreSQL; files on $(df -PT "$tmp" | awk 'NR==2 {print $2}')," \
        "load average $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$tmp/rows"
: > "$tmp/rounds"
fail=0
nlegs=$(echo $legs | wc -w)
for r in $(seq "$rounds"); do
        # rotate: round 1 runs the legs as listed, round 2 from the second, ...
        shift_by=$(((r - 1) % nlegs))
        set -- $legs
        i=0
        while [ "$i" -lt "$shift_by" ]; do
                first=$1
                shift
                set -- "$@" "$first"
                i=$((i + 1))
        done
        order="$*"
        for leg in $order; do
                "leg_$(echo "$leg" | tr - _)" "$r"
                last=$(tail -n 1 "$tmp/rows")
                echo "$r $last" >> "$tmp/rounds"
                set -- $last
                # wrk may cut connections at the end with answers in flight: stored >= answered
                if [ "$7" -lt $(($5 - $6)) ]; then
                        echo "bench-pg: round $r $1: $7 stored < $(($5 - $6)) answered: durability broken" >&2
                        fail=1
                fi
        done
        line=""
        sq=$(awk -v r="$r" '$1 == r && $2 == "sqlite" {print $3}' "$tmp/rounds")
        for leg in $legs; do
                v=$(awk -v r="$r" -v l="$leg" '$1 == r && $2 == l {print $3}' "$tmp/rounds")
                line="$line${line:+, }$leg $v"
        done
        echo "  round $r/$rounds ($order): $line req/s;$(for leg in $legs; do
                [ "$leg" = sqlite ] && continue
                v=$(awk -v r="$r" -v l="$leg" '$1 == r && $2 == l {print $3}' "$tmp/rounds")
                printf ' %s/sqlite %s' "$leg" "$(awk -v a="$v" -v b="$sq" 'BEGIN { printf "%.2f", a / b }')"
        done)" >&2
done
/usr/bin/python3 - "$tmp/rounds" "$legs" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
legs = sys.argv[2].split()
def stat(v, f):
    v = sorted(v); n = len(v)
    m = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return ("%s [%s-%s]" % (f, f, f)) % (m, v[0], v[-1])
sqlite = {r[0]: float(r[2]) for r in rows if r[1] == "sqlite"}
print("median [min-max] over %d rounds" % len(sqlite))
print("%-16s %22s %20s %22s %18s  %s" % ("leg", "req/s", "p50 ms", "p99 ms", "x sqlite", "stored >= answered (all rounds)"))
for leg in legs:
    rs = [r for r in rows if r[1] == leg]
    rps = [float(r[2]) for r in rs]
    ratio = [float(r[2]) / sqlite[r[0]] for r in rs]
    check = "%d stored / %d answered, %d non-2xx" % (sum(int(r[7]) for r in rs), sum(int(r[5]) for r in rs),
                                                      sum(int(r[6]) for r in rs))
    print("%-16s %22s %20s %22s %18s  %s" % (leg, stat(rps, "%.0f"), stat([float(r[3]) for r in rs], "%.2f"),
                                            stat([float(r[4]) for r in rs], "%.2f"), stat(ratio, "%.2f"), check))
PY
if [ "$fail" = 1 ]; then
        echo "bench-pg: FEWER tasks stored than answered: durability broken" >&2
        exit 1
fi
