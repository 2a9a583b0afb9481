#!/bin/sh
# The whole test suite, as the README names it and CI (.ci/run) runs it:
#   1. installs the Debian packages the tests need (if missing),
#   2. cppcheck over src/ (`make lint`, mk/lint.mk: about 30 s, no build),
#   3. gcc build with -Werror: unit tests, black-box tests against the real
#      daemon, replay of every fuzz corpus,
#   4. the unit and black-box tests again under ASan+UBSan,
#   5. the black-box tests of the threaded paths under ThreadSanitizer,
#   6. every fuzz target fuzzed for FUZZ_SECONDS (default 10) seconds,
#   7. the store tests (unit, tests/blackbox/test_one_server.py and test_ha.py, the
#      latter under ThreadSanitizer too) against a real PostgreSQL server started here,
#   8. the dashboard in headless Chromium and the gateway through the
#      official openai npm client (npm packages from package-lock.json).
# Exits non-zero on the first failure.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
jobs=$(nproc 2>/dev/null || echo 2)
# The black-box tests wait on processes and sockets more than they compute:
# pytest-xdist runs them on 2 x nproc workers, each test file on one worker
# (a file's tests share fixtures and assumptions); the `timing` tests, which
# compare real time with simulated time, run alone afterwards.
xdist="-n $((jobs * 2)) --dist loadfile"

echo "== 1/8 cppcheck over src/ (make lint)"
make lint LINT_JOBS="$jobs"

echo "== 2/8 gcc build, unit + black-box tests, fuzz corpus replay"
scripts/check-layers.sh
make -j"$jobs" all
# bench-core with the core's phase marks: built (and run small) so that
# the marks compiled out of every other build do not rot
make -j"$jobs" build/bench/bench-core-phases
build/bench/bench-core-phases --rounds 1 --tasks 4000 --nodes 50 --only preemption | grep -q "^    make_room "
PYTEST_ADDOPTS="$xdist -m 'not timing'" make -j"$jobs" check
PYTEST_ADDOPTS="-m timing" make blackbox

echo "== 3/8 ASan+UBSan: unit + black-box tests"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
PYTEST_ADDOPTS="$xdist -m 'not timing'" \
        make -j"$jobs" SAN=1 unit blackbox

# ThreadSanitizer cannot share a build with ASan: its own, in build-tsan/
# (mk/00-tsan.mk).  Every process writes its reports to $tsan_dir
# (TSAN_OPTIONS log_path); conftest.py fails the test during which one
# appeared, with the report, and anything left there afterwards fails here.
# All black-box files but test_simulate.py (the simulator is one thread,
# CPU-bound, and ~10x slower under TSan; ASan covers it) and, as under ASan,
# the `timing` tests.  A new test file is in by default.
echo "== 4/8 ThreadSanitizer: black-box tests"
tsan_dir=$(mktemp -d /tmp/gpupool-tsan.XXXXXX)
chmod 1777 "$tsan_dir"   # daemons that dropped root (server.user) write there too
TSAN_OPTIONS="log_path=$tsan_dir/tsan second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
GPUPOOL_SAN_LOG_DIR="$tsan_dir" \
PYTEST_ADDOPTS=${GPUPOOL_TSAN_PYTEST:-"$xdist -m 'not timing' --ignore=tests/blackbox/test_simulate.py"} \
        make -j"$jobs" TSAN=1 blackbox
if [ -n "$(ls -A "$tsan_dir")" ]; then
        cat "$tsan_dir"/*
        echo "ThreadSanitizer reports (above) outside any test"
        exit 1
fi
rm -rf "$tsan_dir"

echo "== 5/8 fuzz every target for ${FUZZ_SECONDS:-10} s (new crashes fail, with the input printed)"
make fuzz-run FUZZ_SECONDS="${FUZZ_SECONDS:-10}" FUZZ_KEEP_NEW=0

echo "== 6/8 store tests against PostgreSQL"
url=$(tests/pg/start-pg.sh)
trap 'tests/pg/stop-pg.sh "$url" >/dev/null 2>&1 || true' EXIT
GPUPOOL_TEST_PG_URL="$url" GPUPOOL_BUILD=build build/tests/test-store
# the black-box files whose PostgreSQL cases need the server (one live server per store;
# several servers: leader, standby, fenced failover; the store guard and Idempotency-Key
# across a failover; every run of a task kept)
GPUPOOL_TEST_PG_URL="$url" GPUPOOL_BIN="$PWD/build/gpupool" GPUPOOL_BUILD="$PWD/build" \
        /usr/bin/python3 -m pytest -q tests/blackbox/test_one_server.py tests/blackbox/test_ha.py \
        tests/blackbox/test_ha_attack.py tests/blackbox/test_tls.py tests/blackbox/test_users.py \
        tests/blackbox/test_store_guard.py tests/blackbox/test_history.py
# several servers again under ThreadSanitizer (stage 4's build): the follower's
# connection threads, the lease thread and a deposed leader's threads
tsan_dir=$(mktemp -d /tmp/gpupool-tsan.XXXXXX)
chmod 1777 "$tsan_dir"
TSAN_OPTIONS="log_path=$tsan_dir/tsan second_deadlock_stack=1 ${TSAN_OPTIONS:-}" GPUPOOL_SAN_LOG_DIR="$tsan_dir" \
GPUPOOL_TEST_PG_URL="$url" GPUPOOL_BIN="$PWD/build-tsan/gpupool" GPUPOOL_BUILD="$PWD/build-tsan" \
        /usr/bin/python3 -m pytest -q tests/blackbox/test_ha.py
if [ -n "$(ls -A "$tsan_dir")" ]; then
        cat "$tsan_dir"/*
        echo "ThreadSanitizer reports (above) outside any test"
        exit 1
fi
rm -rf "$tsan_dir"

# both npm stages start build/tests/fake-openai as the gateway's upstream
make -j"$jobs" build/tests/fake-openai

echo "== 7/8 web dashboard in headless chromium (Playwright), against a real daemon (and fake-openai for the gateway page)"
(cd tests/web && npm ci --no-audit --no-fund --loglevel=error &&
        GPUPOOL_BIN="$PWD/../../build/gpupool" FAKE_OPENAI_BIN="$PWD/../../build/tests/fake-openai" node --test dashboard.test.mjs)

echo "== 8/8 inference gateway driven by the official openai npm client, against a real daemon and fake-openai"
GPUPOOL_BIN="$PWD/build/gpupool" FAKE_OPENAI_BIN="$PWD/build/tests/fake-openai" tests/gateway/run.sh

echo "== all tests passed"
