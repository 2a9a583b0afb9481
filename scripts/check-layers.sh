#!/bin/sh
# check-layers.sh - fail if a module includes a header of a layer above it,
# if the server's cluster code includes the daemon's internals, or if a
# file of src/ grows past 2,000 lines.
# The rules (docs/internals/README.md): each directory of src/ may include
# only the directories listed for it here; nodes*, coord, follower* and
# forward of src/server/ see the daemon only through cluster-host.h and
# hreq.h (docs/internals/cluster.md "Rooms"), never server-int.h or
# daemon-int.h.
set -eu
cd "$(dirname "$0")/.."
allowed() {
        case $1 in
        base) echo "base" ;;
        core) echo "base core" ;;
        config) echo "base core config" ;;
        gpu) echo "base core config gpu" ;;
        store) echo "base core store" ;;
        exec) echo "base exec" ;;
        sim) echo "base core config sim" ;;
        gateway) echo "base core config gateway" ;;
        server) echo "base core config gpu store exec gateway cluster server" ;;
        cluster) echo "base core exec cluster" ;;
        agent) echo "base core config gpu exec cluster agent" ;;
        cli) echo "base core cli" ;;
        *) echo "" ;;
        esac
}
bad=0
for dir in src/*/; do
        mod=$(basename "$dir")
        ok=$(allowed "$mod")
        if [ -z "$ok" ]; then
                echo "check-layers: src/$mod is not in the layer rule (scripts/check-layers.sh)" >&2
                bad=1
                continue
        fi
        for f in "$dir"*.c "$dir"*.h; do
                [ -e "$f" ] || continue
                for inc in $(sed -n 's/^#include "\([a-z_]*\)\/.*/\1/p' "$f" | sort -u); do
                        case " $ok " in
                        *" $inc "*) ;;
                        *) echo "check-layers: $f includes $inc/, which src/$mod may not use" >&2; bad=1 ;;
                        esac
                done
        done
done
# the cluster code's room: the daemon's layout stays out of it
for f in src/server/nodes*.[ch] src/server/coord.[ch] src/server/follower*.[ch] src/server/forward.[ch]; do
        [ -e "$f" ] || continue
        for inc in $(sed -n 's/^#include "server\/\(server-int\|daemon-int\)\.h".*/\1/p' "$f"); do
                echo "check-layers: $f includes server/$inc.h; the cluster code uses server/cluster-host.h and server/hreq.h" >&2
                bad=1
        done
done
# no file of src/ over 2,000 lines: a module that grows splits into files with narrow headers
for f in $(find src -name '*.[ch]' | sort); do
        n=$(wc -l <"$f")
        if [ "$n" -gt 2000 ]; then
                echo "check-layers: $f has $n lines, more than 2,000; move a part into a file of its own" >&2
                bad=1
        fi
done
[ $bad -eq 0 ] && echo "check-layers: every include follows the layer rule, no file is over 2,000 lines"
exit $bad
