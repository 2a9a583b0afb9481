#!/bin/sh
# check-layers.sh - fail if a module includes a header of a layer above it.
# The rule (docs/internals/README.md): each directory of src/ may include
# only the directories listed for it here.
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
[ $bad -eq 0 ] && echo "check-layers: every include follows the layer rule"
exit $bad
