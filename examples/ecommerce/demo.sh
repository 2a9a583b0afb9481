#!/bin/sh
# demo.sh - the e-commerce scenario end to end on simulated GPUs.
#
# Starts gpupool with examples/ecommerce/gpupool.yaml (plus a fresh admin
# key) in a temp dir, makes one API key per tenant, submits work as each
# tenant, and shows what the scheduler did and why: the queue with its
# reasons, per-tenant usage against quota, the time rule in force, and a
# refused request above a key's tier.  On exit (also on Ctrl-C or an
# error) it cancels every task it submitted, then stops the server: a
# server that stops leaves running tasks running, by design.
# Usage: examples/ecommerce/demo.sh [PORT]   (default 18480)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
port=${1:-18480}
bin=$top/build/gpupool
[ -x "$bin" ] || make -C "$top" -s build/gpupool
tmp=$(mktemp -d /tmp/gp-ecommerce-XXXXXX)
admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
{ cat "$here/gpupool.yaml"; printf '\nauth: {admin_keys: ["sha256:%s"]}\n' \
        "$(printf %s "$admin" | sha256sum | cut -d' ' -f1)"; } > "$tmp/gpupool.yaml"
export GPUPOOL_API="http://127.0.0.1:$port"
"$bin" server --config "$tmp/gpupool.yaml" --listen "127.0.0.1:$port" --data-dir "$tmp/data" \
        2>"$tmp/server.log" &
pid=$!
: >"$tmp/ids"
cleanup() {
        # cancel what we started (SIGTERM to each task), wait until none
        # runs, then stop the server and remove the temp dir
        while read -r id; do
                GPUPOOL_API_KEY=$admin "$bin" cancel "$id" >/dev/null 2>&1 || true
        done <"$tmp/ids"
        for _ in $(seq 50); do
                GPUPOOL_API_KEY=$admin "$bin" ps 2>/dev/null | grep -q ' running ' || break
                sleep 0.1
        done
        kill $pid 2>/dev/null
        wait $pid 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 50); do curl -fs "$GPUPOOL_API/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

gp() { "$bin" "$@"; }
as() { t=$1; shift; GPUPOOL_API_KEY=$(eval echo "\$key_$t") "$bin" "$@"; }
# submit as tenant $1, keeping the id for the cleanup
sub() { as "$@" >>"$tmp/ids"; }

echo "== keys: one per tenant, made by the admin (shown once, stored as hashes)"
for t in dept_a dept_b dept_c premium standard free; do
        k=$(GPUPOOL_API_KEY=$admin gp key create --tenant $t 2>/dev/null)
        eval "key_$t=$k"
        echo "   $t: ${k%????????????????????????????????}..."
done

echo "== work arrives: each tenant submits at its key's default tier"
for i in 1 2 3; do sub dept_a submit --name "train-a$i" --gpus 1 -- sleep 600; done
for i in 1 2; do sub dept_b submit --name "train-b$i" --gpus 1 -- sleep 600; done
sub dept_c submit --name "ctr-model" --gpus 2 -- sleep 600
for i in 1 2 3; do sub premium submit --name "inference-p$i" --mem 20000 --preemptible -- sleep 600; done
for i in 1 2; do sub standard submit --name "batch-s$i" --gpus 1 --preemptible -- sleep 600; done
for i in 1 2 3; do sub free submit --name "notebook-f$i" --mem 8000 --preemptible -- sleep 600; done

echo "== a Free-tier key asking for P0 is refused (its most urgent tier is P7)"
as free submit --priority critical -- true || true

echo "== the queue, in dispatch order, with the reason each task waits"
GPUPOOL_API_KEY=$admin gp queue
echo "== tenants: usage against quota (the time rule in force is in the server log)"
GPUPOOL_API_KEY=$admin gp tenants
grep "time rule" "$tmp/server.log" | sed 's/^/   /'
echo "== a tenant sees only its own tasks"
as premium ps
