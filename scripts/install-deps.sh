#!/bin/sh
# Installs the Debian 12 packages gpupool builds and tests with, if missing.
# Usage: scripts/install-deps.sh [build|test|bench|all]   (default: build)
set -eu
what=${1:-build}
build="tzdata make gcc pkg-config libgnutls28-dev libmicrohttpd-dev libjansson-dev libsqlite3-dev libyaml-dev libcurl4-openssl-dev libpq-dev python3"
# prometheus: promtool checks /metrics; chromium (+ a CJK font for the Chinese page) runs the dashboard tests
# cppcheck: `make lint` (test-all.sh's first stage); clang-format: `git clang-format` on changed lines (HACKING.md)
# python3-torch: torchrun's elastic rendezvous over gloo on CPU (test_elastic_agents.py)
test="tzdata libcmocka-dev openssl iproute2 python3-pytest python3-pytest-xdist python3-requests clang libclang-rt-14-dev postgresql sqlite3 procps curl wrk prometheus chromium fonts-wqy-microhei cppcheck clang-format python3-torch"
case "$what" in
  build) pkgs=$build ;;
  test) pkgs="$build $test" ;;
  bench) pkgs="$build procps curl wrk nginx slurm-client sqlite3 postgresql" ;;   # bench/*.sh; nginx is bench-gateway's baseline, sbatch bench-cli's; sqlite3 and postgresql (initdb, psql) bench-http's and bench-pg's
  all) pkgs="$build $test nginx" ;;
  *) echo "usage: $0 [build|test|bench|all]" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# node and npm for the browser tests (tests/web), unless some node is there already
case "$what" in test|all) command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm" ;; esac
[ -z "$missing" ] && exit 0
echo "installing:$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
