#!/usr/bin/env bash
# The server's instructions (valgrind --tool=callgrind) for a storm and for updates: a count
# that is the same for the same work whatever else the machine runs, to compare two builds
# where wall-clock runs are too noisy (docs/benchmarks.md, "counted in instructions").
#
# usage: callgrind.sh <xds-bench-server binary> <label> delta|sotw [clients] [updates]
#   PORT (default 18600: gRPC; PORT+1: HTTP), LOAD (default target/release/xds-load),
#   OUT_DIR (default target/callgrind), CLUSTERS (default 10000), INTERVAL_MS (default 400:
#   between updates with UPDATES_ONLY=1; under callgrind 1,000 clients take more than that to
#   be sent one update, and a change that comes before the clients moved to the last set finds
#   it held by none, so the table makes no next set: 2500 keeps them up to date).
# The server runs under callgrind with instrumentation off until it is up; then three xds-load
# runs, each followed by a dump: a cold storm, a warm storm, and a warm storm with the updates.
# Prints the cold and warm storms' instructions and (third − second) / updates.
#
# UPDATES_ONLY=1 counts the updates alone, with no storm to subtract (a storm's instructions vary
# by more than a few updates cost): after a warm-up storm, one xds-load run whose first trigger
# switches the instrumentation on (`--trigger-cmd`) and whose last trigger dumps the profile
# before it fires: the count is of the updates before the last (`updates` - 1 of them), with
# every client still connected; the last update and the clients' leaving are dumped on their own
# when the run ends. Prints the instructions per update and per client and update (each update
# is one changed resource sent to every client), and keeps the profiles
# ($OUT_DIR/<label>-<mode>.<pid>.1 for the updates, .2 for the rest) for `callgrind_annotate`.
#
# CACHE_SIM=1 (with UPDATES_ONLY=1) also simulates the caches (`--cache-sim=yes`, the sizes of
# this machine's) and prints per client and update the instruction-cache misses (I1), the data
# misses (D1 reads and writes), the last-level ones (LL), and callgrind's cycle estimate
# Ir + 10 * (I1 + D1 misses) + 100 * LL misses: unlike instructions alone, it counts what the
# code's size and the data it touches cost each client (docs/benchmarks.md).
set -euf -o pipefail
server=$1 label=$2 mode=$3 clients=${4:-50} updates=${5:-10}
if [ "${UPDATES_ONLY:-0}" = 1 ] && [ "$updates" -lt 2 ]; then
  echo "UPDATES_ONLY=1 counts the updates before the last: give at least 2" >&2
  exit 2
fi
port=${PORT:-18600}; http=$((port + 1))
load=${LOAD:-target/release/xds-load}
out_dir=${OUT_DIR:-target/callgrind}; mkdir -p "$out_dir"
out=$out_dir/$label-$mode
rm -f "$out".*
# The instructions of dump $1 of the server.
ir() { grep -h "^totals:\|^summary:" "$out.$pid.$1" | head -1 | awk '{print $2}'; }
cache=()
[ "${CACHE_SIM:-0}" = 1 ] && cache=(--cache-sim=yes)
valgrind --tool=callgrind "${cache[@]}" --instr-atstart=no --dump-instr=no --callgrind-out-file="$out.%p" \
  "$server" --clusters "${CLUSTERS:-10000}" --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$http" \
  > "$out.server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$http/healthz" > /dev/null && break; sleep 1; done
callgrind_control -i on $pid > /dev/null 2>&1
run() {
  "$load" --server "http://127.0.0.1:$port" --trigger "http://127.0.0.1:$http/bench/update?i={k}" \
    --clients "$clients" --mode "$mode" --storm-timeout-s 1200 --timeout-s 600 --brief "$@"
}
if [ "${UPDATES_ONLY:-0}" = 1 ]; then
  run --updates 0 > "$out.warm.txt" 2>&1
  callgrind_control -i off $pid > /dev/null 2>&1
  # The warm-up's streams end before the count starts.
  ended=0
  for _ in $(seq 1 120); do
    curl -sf -m 5 "http://127.0.0.1:$http/bench/stats" | grep -q '"streams":0' && { ended=1; break; }
    sleep 1
  done
  [ $ended = 1 ] || echo "warning: the warm-up's streams did not end in 120 s" >&2
  callgrind_control -z $pid > /dev/null 2>&1
  sleep 3
  on=$out.on; count=$out.count; rm -f "$on" "$count"
  interval=${INTERVAL_MS:-400}
  # The last trigger dumps the profile before it fires: the count is the updates before it,
  # while every client is still connected (xds-load leaves once its clients hold the last
  # update, and the streams' teardown, dumped on its own, would be counted with the updates).
  # It waits 3 s first, for the update before it to reach every client (xds-load fires
  # triggers an interval apart, whether or not the last update has arrived everywhere).
  run --updates "$updates" --interval-ms "$interval" --settle-ms 3000 --trigger-cmd \
    "[ -e '$on' ] || { callgrind_control -i on $pid >/dev/null 2>&1; touch '$on'; }; echo >> '$count'; [ \$(wc -l < '$count') -lt $updates ] || { sleep 3; callgrind_control -d updates $pid >/dev/null 2>&1; }; curl -sf 'http://127.0.0.1:$http/bench/update?i={k}'" \
    > "$out.updates.txt" 2>&1
  sleep 3; callgrind_control -d teardown $pid > /dev/null 2>&1
  kill $pid; wait $pid 2> /dev/null || true
  all=$(ir 1) rest=$(ir 2) counted=$((updates - 1))
  echo "$label $mode clients=$clients updates=$counted per_update_Ir=$(( all / counted ))" \
    "per_client_update_Ir=$(( all / counted / clients ))" \
    "last_update_and_teardown_per_client_Ir=$(( rest / clients ))" \
    "($(tail -1 "$out.updates.txt"))"
  if [ "${CACHE_SIM:-0}" = 1 ]; then
    # totals: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
    grep -h "^totals:\|^summary:" "$out.$pid.1" | head -1 | awk -v n=$((counted * clients)) -v l="$label" '{
      printf "%s per client and update: Ir %.0f I1_misses %.0f D1_read_misses %.0f D1_write_misses %.0f LL_misses %.1f cycle_estimate %.0f\n",
        l, $2 / n, $5 / n, $6 / n, $7 / n, ($8 + $9 + $10) / n,
        ($2 + 10 * ($5 + $6 + $7) + 100 * ($8 + $9 + $10)) / n }'
  fi
  exit 0
fi
run --updates 0 > "$out.cold.txt" 2>&1; sleep 5; callgrind_control -d cold $pid > /dev/null 2>&1
run --updates 0 > "$out.warm.txt" 2>&1; sleep 5; callgrind_control -d warm $pid > /dev/null 2>&1
run --updates "$updates" --interval-ms 500 --settle-ms 3000 > "$out.updates.txt" 2>&1
sleep 5; callgrind_control -d updates $pid > /dev/null 2>&1
kill $pid; wait $pid 2> /dev/null || true
cold=$(ir 1) warm=$(ir 2) all=$(ir 3)
echo "$label $mode clients=$clients updates=$updates cold_storm_Ir=$cold warm_storm_Ir=$warm" \
  "per_update_Ir=$(( (all - warm) / updates )) ($(tail -1 "$out.updates.txt"))"
