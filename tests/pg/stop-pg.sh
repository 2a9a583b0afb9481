#!/bin/sh
# stop-pg.sh - stop a cluster made by start-pg.sh and remove its dir.
# Usage: tests/pg/stop-pg.sh [URL]   (default: $GPUPOOL_TEST_PG_URL)
set -eu
url=${1:-${GPUPOOL_TEST_PG_URL:-}}
if [ -z "$url" ]; then
        echo "usage: $0 URL (or set GPUPOOL_TEST_PG_URL)" >&2
        exit 2
fi
base=$(printf '%s\n' "$url" | sed -n 's/.*[?&]host=\([^&]*\).*/\1/p')
# remove only what start-pg.sh made
case "$(basename "${base:-x}")" in
gp-pg-*) ;;
*) echo "stop-pg.sh: $url was not made by start-pg.sh" >&2; exit 2 ;;
esac
if [ ! -f "$base/data/PG_VERSION" ]; then
        echo "stop-pg.sh: no cluster in $base" >&2
        exit 1
fi
if [ -z "${PGBIN:-}" ]; then
        PGBIN=/usr/lib/postgresql/$(cat "$base/data/PG_VERSION")/bin
fi
run=""
owner=$(stat -c %U "$base/data")
if [ "$(id -u)" -eq 0 ] && [ "$owner" != root ]; then
        run="runuser -u $owner --"
fi
$run "$PGBIN/pg_ctl" -D "$base/data" stop -m fast -w >/dev/null 2>&1 || \
        $run "$PGBIN/pg_ctl" -D "$base/data" stop -m immediate -w >/dev/null 2>&1 || true
rm -rf "$base"
