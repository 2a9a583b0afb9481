#!/bin/sh
# start-pg.sh - start a throwaway PostgreSQL cluster for the store tests.
#
# Creates a cluster in a new temp dir (/tmp/gp-pg-XXXXXX, or under $TMPDIR),
# listening only on a unix socket in that dir, with trust auth, and prints
# its URL on stdout:
#   export GPUPOOL_TEST_PG_URL=$(tests/pg/start-pg.sh)
#   make unit           # test-store now also runs its PostgreSQL group
#   tests/pg/stop-pg.sh # stops it and removes the dir (reads the same env)
# PostgreSQL refuses to run as root: as root the cluster runs as the
# `postgres` system user (or `nobody` if there is none) via runuser.
# Env: PGBIN (default: newest /usr/lib/postgresql/*/bin), PGPORT (5432: only
# names the socket file, no TCP port is opened).
set -eu

if [ -z "${PGBIN:-}" ]; then
        PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
        echo "start-pg.sh: no PostgreSQL server found (install postgresql, or set PGBIN)" >&2
        exit 1
fi
port=${PGPORT:-5432}

base=$(mktemp -d "${TMPDIR:-/tmp}/gp-pg-XXXXXX")
run=""
if [ "$(id -u)" -eq 0 ]; then
        user=postgres
        id "$user" >/dev/null 2>&1 || user=nobody
        chown "$user" "$base"
        run="runuser -u $user --"
fi
chmod 700 "$base"

fail() {
        echo "start-pg.sh: $1" >&2
        [ -f "$base/server.log" ] && tail -n 20 "$base/server.log" >&2
        [ -f "$base/initdb.log" ] && tail -n 20 "$base/initdb.log" >&2
        $run "$PGBIN/pg_ctl" -D "$base/data" stop -m immediate >/dev/null 2>&1 || true
        rm -rf "$base"
        exit 1
}

# fsync off: a throwaway cluster for tests; nothing in it must survive a crash
$run "$PGBIN/initdb" -D "$base/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
        >"$base/initdb.log" 2>&1 || fail "initdb failed"
$run "$PGBIN/pg_ctl" -D "$base/data" -l "$base/server.log" -w -t 60 \
        -o "-c listen_addresses='' -k $base -p $port -c fsync=off -c max_connections=50" \
        start >/dev/null 2>&1 || fail "pg_ctl start failed"
# root must reach the socket in a dir owned by the cluster user
chmod 711 "$base"

echo "postgresql:///postgres?host=$base&port=$port&user=postgres"
