#!/usr/bin/env bash
# The server's heap while clients are connected (valgrind --tool=massif), site by site: where a
# connected client's memory goes, to compare with the floor's or another build's (see
# docs/benchmarks.md, "Then: a client's memory, site by site").
#
# usage: massif.sh <server binary> <label> delta|sotw [clients]
#   PORT (default 18800: gRPC; PORT+1: HTTP), LOAD (default target/release/xds-load),
#   OUT_DIR (default target/massif). Build the servers with line tables for readable sites:
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release -p xds-bench
# Two detailed snapshots: idle (before any client) and with every client holding everything
# (5 s after the first update's trigger, which comes a few seconds after the storm). Prints the heap and the allocator's
# overhead of each, and the growth per client; `ms_print <file>` shows the allocation tree.
# The growth includes what the first request builds once (a whole set encoded for every client
# it goes to): compare two client counts, or subtract those sites, for the cost of one client.
set -eu -o pipefail
server=$1 label=$2 mode=$3 clients=${4:-400}
port=${PORT:-18800}; http=$((port + 1))
load=${LOAD:-target/release/xds-load}
out_dir=${OUT_DIR:-target/massif}; mkdir -p "$out_dir"
out=$out_dir/$label-$mode
rm -f "$out.ms" "$out.idle" "$out.clients" "$out.on" "$out.load.txt" "$out.server.log"
valgrind --tool=massif --threshold=0.01 --depth=40 --max-snapshots=20 --detailed-freq=1000000 \
  --massif-out-file="$out.ms" "$server" --clusters 10000 --grpc-addr "127.0.0.1:$port" \
  --http-addr "127.0.0.1:$http" > "$out.server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$http/healthz" > /dev/null && break; sleep 1; done
sleep 2
vgdb --pid=$pid detailed_snapshot "$out.idle" > /dev/null 2>&1
on=$out.on
"$load" --server "http://127.0.0.1:$port" --trigger "http://127.0.0.1:$http/bench/update?i={k}" \
  --clients "$clients" --mode "$mode" --storm-timeout-s 1200 --timeout-s 600 --brief --updates 2 \
  --interval-ms 3000 --settle-ms 3000 --trigger-cmd \
  "[ -e $on ] || { sleep 5; vgdb --pid=$pid detailed_snapshot $out.clients >/dev/null 2>&1; touch $on; }; curl -sf 'http://127.0.0.1:$http/bench/update?i={k}'" \
  > "$out.load.txt" 2>&1 || echo "xds-load failed: see $out.load.txt" >&2
kill $pid; wait $pid 2> /dev/null || true
heap() { grep -m1 "^mem_heap_B=" "$1" | cut -d= -f2; }
extra() { grep -m1 "^mem_heap_extra_B=" "$1" | cut -d= -f2; }
[ -e "$out.idle" ] && [ -e "$out.clients" ] || { echo "a snapshot is missing" >&2; exit 1; }
h0=$(heap "$out.idle") h1=$(heap "$out.clients") e0=$(extra "$out.idle") e1=$(extra "$out.clients")
echo "$label $mode clients=$clients heap_idle=$h0 heap_clients=$h1 overhead_idle=$e0" \
  "overhead_clients=$e1 heap_per_client=$(( (h1 - h0) / clients ))" \
  "overhead_per_client=$(( (e1 - e0) / clients )) ($(tail -1 "$out.load.txt"))"
