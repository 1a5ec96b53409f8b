#!/usr/bin/env bash
# Runs every test of the project: the Rust workspace (unit, integration, property and doc tests,
# a smoke run of the benchmarks and of the benchmark tools), then the interop test with a real xDS client (Python grpcio),
# which this script installs into target/interop-venv itself.
set -euo pipefail
cd "$(dirname "$0")/.."

# The replica tests (examples/xds-file-server/tests/etcd.rs) start a real etcd; they skip only
# when it is absent, so install it here (Debian's etcd-server; this script may run as root).
if ! command -v etcd >/dev/null 2>&1; then
  echo "== installing etcd (Debian package etcd-server) for the replica tests"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get install -y etcd-server >/dev/null 2>&1 \
    || { $sudo_ apt-get update >/dev/null && $sudo_ apt-get install -y etcd-server >/dev/null; }
  # The package starts a system etcd on the default ports; the tests use their own.
  $sudo_ systemctl disable --now etcd >/dev/null 2>&1 || true
fi

# The console's browser test drives headless Chromium through chromedriver (Debian's chromium and
# chromium-driver: /usr/bin/chromium, /usr/bin/chromedriver).
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  echo "== installing chromium and chromium-driver (Debian packages) for the console's browser test"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get install -y chromium chromium-driver >/dev/null 2>&1 \
    || { $sudo_ apt-get update >/dev/null && $sudo_ apt-get install -y chromium chromium-driver >/dev/null; }
fi

echo "== cargo test (workspace, benches as smoke tests)"
cargo test --workspace
cargo test --workspace --benches

echo "== reliability scripts smoke run (debug binaries, a few clients; the full runs: docs/reliability.md)"
export PROFILE=debug BUILD=0 GRPC_PORT=18110 HTTP_PORT=18111
# Few cycles: the RSS bound is loose here (the allocator is still warming up); tasks and streams
# must still come back to the baseline.
CYCLES=200 WARMUP=100 MAX_RSS_GROWTH_PCT=50 timeout 120 bash examples/xds-bench/reliability/churn.sh
CLIENTS=10 CLUSTERS=100 UPDATES=5 RESTART_WAIT_S=30 timeout 120 bash examples/xds-bench/reliability/restart.sh
CLIENTS=10 STUCK=2 CLUSTERS=100 UPDATES=5 timeout 120 bash examples/xds-bench/reliability/stuck.sh
# 3 replicas over a real etcd, one killed: its clients move and are resent nothing (~8 s).
BASE_PORT=18120 ETCD_PORT=18150 CLIENTS=30 CLUSTERS=100 UPDATES=5 timeout 60 bash examples/xds-bench/reliability/replicas.sh
# The same with SotW clients: a moved client is resent what it names (EDS), and counted synced.
MODE=sotw BASE_PORT=18120 ETCD_PORT=18150 CLIENTS=30 CLUSTERS=100 UPDATES=5 timeout 60 bash examples/xds-bench/reliability/replicas.sh
unset PROFILE BUILD GRPC_PORT HTTP_PORT

echo "== interop: Python grpcio xDS client through xds-file-server"
# `cargo test --workspace` built the binary already (its package has integration tests); building
# it again with `-p xds-file-server` alone could resolve other features and rebuild dependencies.
[ -x target/debug/xds-file-server ] || cargo build -p xds-file-server
venv=target/interop-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r examples/interop/requirements.txt
"$venv/bin/python" examples/interop/grpc_xds_test.py target/debug/xds-file-server

echo "== console: headless Chromium drives /ui with a NACKing gRPC client (selenium)"
"$venv/bin/python" examples/interop/console_browser_test.py target/debug/xds-file-server
