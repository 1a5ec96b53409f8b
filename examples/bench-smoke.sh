#!/usr/bin/env bash
# Smoke test of the benchmark tools: xds-bench-server with 200 clusters, then xds-load with 5
# clients and 5 updates over delta ADS and over SotW ADS. Fails unless every client gets the
# initial config and every update ("5 passed, 0 failed").
#
# Builds the debug binaries (CI shares one target dir; no release build). After the build the
# whole script is bounded to well under 2 minutes. Ports: BENCH_GRPC_PORT / BENCH_HTTP_PORT
# (default 18100 / 18101, loopback only).
set -euo pipefail
cd "$(dirname "$0")/.."

# `cargo test --workspace` built both binaries (the examples package has integration tests).
[ -x "${CARGO_TARGET_DIR:-target}/debug/xds-load" ] && [ -x "${CARGO_TARGET_DIR:-target}/debug/xds-bench-server" ] ||
  cargo build -p examples --bin xds-bench-server --bin xds-load
bin="${CARGO_TARGET_DIR:-target}/debug"
grpc="127.0.0.1:${BENCH_GRPC_PORT:-18100}"
http="127.0.0.1:${BENCH_HTTP_PORT:-18101}"

log="$(mktemp)"
out="$(mktemp)"
timeout 100 "$bin/xds-bench-server" --clusters 200 --grpc-addr "$grpc" --http-addr "$http" \
  >"$log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -f "$log" "$out"
}
trap cleanup EXIT

# The server prints its pid once both ports listen (at most 20 s).
for _ in $(seq 1 100); do
  grep -q ' pid ' "$log" && break
  if ! kill -0 "$server" 2>/dev/null; then
    echo "bench-smoke: xds-bench-server did not start:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.2
done
if ! grep -q ' pid ' "$log"; then
  echo "bench-smoke: xds-bench-server did not start within 20 s" >&2
  cat "$log" >&2
  exit 1
fi
pid="$(sed -n 's/.* pid \([0-9]*\):.*/\1/p' "$log")"

for mode in delta sotw; do
  echo "== xds-load --mode $mode"
  status=0
  timeout 40 "$bin/xds-load" --server "http://$grpc" --trigger "http://$http/bench/update?i={k}" \
    --clients 5 --mode "$mode" --updates 5 --interval-ms 100 --timeout-s 10 \
    --storm-timeout-s 20 --settle-ms 200 --server-pid "$pid" >"$out" 2>&1 || status=$?
  cat "$out"
  if [ "$status" -ne 0 ] || ! tail -n 1 "$out" | grep -qx '5 passed, 0 failed'; then
    echo "bench-smoke: the $mode run failed (exit status $status)" >&2
    exit 1
  fi
done
echo "bench-smoke: ok"
