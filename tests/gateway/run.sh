#!/bin/sh
# run.sh - the gateway's npm tests (gateway.test.mjs), as CI runs them.
# Builds nothing: takes the binaries from the environment.
#   GPUPOOL_BIN      the gpupool daemon      (default: build/gpupool)
#   FAKE_OPENAI_BIN  the test upstream       (default: build/tests/fake-openai)
# Installs the locked npm packages (npm ci: package-lock.json) and runs the
# tests one at a time (each starts its own daemon and upstreams).
# Extra arguments go to node --test (e.g. --test-name-pattern=streaming).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
GPUPOOL_BIN=${GPUPOOL_BIN:-$repo/build/gpupool}
FAKE_OPENAI_BIN=${FAKE_OPENAI_BIN:-$repo/build/tests/fake-openai}
for b in "$GPUPOOL_BIN" "$FAKE_OPENAI_BIN"; do
        [ -x "$b" ] || { echo "tests/gateway/run.sh: $b is not built (make all $repo/build/tests/fake-openai)" >&2; exit 1; }
done
export GPUPOOL_BIN FAKE_OPENAI_BIN
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
exec node --test --test-concurrency=1 "$@" gateway.test.mjs
