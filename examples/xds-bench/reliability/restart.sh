#!/usr/bin/env bash
# Server restart: CLIENTS clients reconnecting with --reconnect; after the storm xds-load prints
# READY FOR RESTART, the server is killed (-9) and, DOWN_S later, started again with the same
# arguments; every client must reconnect within RESTART_WAIT_S, no resource a client held may be
# sent again ("resent after reconnect: 0"), then UPDATES updates prove every client reconverged.
#
# Env (defaults): CLIENTS (1000) CLUSTERS (1000) MODE (delta) UPDATES (100) RESTART_WAIT_S (60)
# DOWN_S (1), and those of lib.sh. Quick: CLIENTS=20 CLUSTERS=200 UPDATES=10 bash examples/xds-bench/reliability/restart.sh
source "$(dirname "$0")/lib.sh"
build
server_args=(--clusters "${CLUSTERS:-1000}")
start_server "${server_args[@]}"
out="$WORK/load.out"
load --clients "${CLIENTS:-1000}" --mode "${MODE:-delta}" --updates "${UPDATES:-100}" \
  --restart-wait-s "${RESTART_WAIT_S:-60}" >"$out" 2>&1 &
LOAD_PID=$!
wait_for_marker "READY FOR RESTART" "$out" "$LOAD_PID" restart
echo "== READY FOR RESTART: kill -9 xds-bench-server (pid $SERVER_PID)"
stop_server KILL
sleep "${DOWN_S:-1}"
start_server "${server_args[@]}"
echo "== xds-bench-server restarted (pid $SERVER_PID)"
status=0
wait "$LOAD_PID" || status=$?
LOAD_PID=""
cat "$out"
exit "$status"
