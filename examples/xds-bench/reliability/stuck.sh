#!/usr/bin/env bash
# Stuck clients: CLIENTS clients and UPDATES updates, once with no stuck client and once with the
# last STUCK clients no longer reading their stream once they hold the initial config (a fresh
# server each time); prints both p99 convergence times (of the clients that read) and their
# ratio, and the server's maximum RSS with the stuck clients.
#
# Env (defaults): CLIENTS (1000) STUCK (50) CLUSTERS (1000) UPDATES (100) MODE (delta), and those
# of lib.sh. Quick: CLIENTS=20 STUCK=3 CLUSTERS=200 UPDATES=20 bash examples/xds-bench/reliability/stuck.sh
source "$(dirname "$0")/lib.sh"
build
status=0
for stuck in 0 "${STUCK:-50}"; do
  echo "== ${CLIENTS:-1000} clients, $stuck stuck"
  start_server --clusters "${CLUSTERS:-1000}"
  load --clients "${CLIENTS:-1000}" --stuck "$stuck" --updates "${UPDATES:-100}" \
    --mode "${MODE:-delta}" --server-pid "$SERVER_PID" --sample-s 0.5 --brief 2>&1 |
    tee "$WORK/stuck-$stuck.out" || status=1
  stop_server
done
p99() { sed -n 's/^all updates .* p99 \([0-9.]*\)ms .*/\1/p' "$WORK/stuck-$1.out"; }
base="$(p99 0)"
with="$(p99 "${STUCK:-50}")"
echo "== p99 convergence: no stuck client ${base:-?} ms, ${STUCK:-50} stuck ${with:-?} ms" \
  "(ratio $(awk -v a="${base:-0}" -v b="${with:-0}" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "?" }'))"
grep -h '^server RSS' "$WORK/stuck-${STUCK:-50}.out" | sed 's/^/== with stuck clients: /' || true
exit "$status"
