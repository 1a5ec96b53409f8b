#!/usr/bin/env bash
# Replicas over etcd: a real etcd, a configuration of CLUSTERS EDS clusters (3 endpoints each)
# published into it with `xds-file-server publish`, REPLICAS `xds-file-server --etcd` replicas, and
# CLIENTS delta (MODE=sotw: SotW) clients spread over them round-robin (xds-load, --reconnect: a
# client whose stream breaks reconnects to the next replica presenting what it holds). After the storm xds-load prints
# READY FOR FAILOVER and replica 0 is killed (-9, not restarted). Its clients must each reconnect to
# another replica and get their first response there within FAILOVER_WAIT_S, and nothing a client
# held may be sent again ("resent after reconnect: 0"; MODE=sotw: no Cluster, while every name of a
# client's EDS subscription is resent, as a SotW per-type version cannot vouch for each name). Then UPDATES updates, each a rewritten
# endpoints file and an `xds-file-server publish` (one etcd transaction), must reach every client
# on every surviving replica: the report's "all updates" line is publish -> all clients.
#
# Env (defaults): MODE (delta, or sotw: the clients' protocol variant) CLIENTS (1000) CLUSTERS
# (1000) REPLICAS (3) UPDATES (20) INTERVAL_MS (200)
# FAILOVER_WAIT_S (60) BASE_PORT (18220: replica i listens on BASE_PORT+3i .. +3i+2) ETCD_PORT
# (18250, and +1 for its peer port), REPLICA_ARGS (more flags for every replica, e.g.
# `--join-permits 0`), and those of lib.sh. Needs the `etcd` binary (Debian:
# etcd-server). Quick: CLIENTS=30 CLUSTERS=100 UPDATES=5 bash examples/xds-bench/reliability/replicas.sh
source "$(dirname "$0")/lib.sh"
command -v etcd >/dev/null || { echo "replicas: no etcd binary (apt-get install -y etcd-server)" >&2; exit 1; }
build xds-file-server

CLIENTS="${CLIENTS:-1000}" CLUSTERS="${CLUSTERS:-1000}" REPLICAS="${REPLICAS:-3}"
BASE_PORT="${BASE_PORT:-18220}" ETCD_PORT="${ETCD_PORT:-18250}"
ETCD_URL="http://127.0.0.1:$ETCD_PORT"
PREFIX=/bench
CONFIG="$WORK/config"
ETCD_PID=""
REPLICA_PIDS=()

stop_all() {
  for pid in "${REPLICA_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "$ETCD_PID" ]; then
    kill "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
  fi
  cleanup
}
trap stop_all EXIT

# The HTTP status code of GET http://127.0.0.1:$1$2 (bash's /dev/tcp: no curl needed), or nothing.
http_code() {
  local line
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 0
  printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$2" >&3
  read -r -t 5 line <&3 || true
  exec 3<&- 3>&-
  echo "$line" | cut -d' ' -f2
}

# Waits (at most 60 s) until GET $1$2 answers 200; $3 is the process to watch, $4 its log.
wait_200() {
  for _ in $(seq 1 300); do
    [ "$(http_code "$1" "$2")" = 200 ] && return 0
    if ! kill -0 "$3" 2>/dev/null; then
      echo "replicas: the process logging to $4 exited:" >&2
      cat "$4" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "replicas: GET 127.0.0.1:$1$2 never answered 200" >&2
  cat "$4" >&2
  exit 1
}

# Cluster K's endpoints file: 3 endpoints on port $2 (written beside, then renamed over: the
# publisher never reads half a file).
write_cla() {
  local k=$1 port=$2 file="$CONFIG/cla-$1.yaml"
  local a=$(((k >> 8) & 255)) b=$((k & 255))
  printf '%s\n' 'resources:' \
    '  - "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment' \
    "    cluster_name: cluster-$k" \
    '    endpoints:' \
    '      - lb_endpoints:' \
    "          - endpoint: { address: { socket_address: { address: 10.$a.$b.1, port_value: $port } } }" \
    "          - endpoint: { address: { socket_address: { address: 10.$a.$b.2, port_value: $port } } }" \
    "          - endpoint: { address: { socket_address: { address: 10.$a.$b.3, port_value: $port } } }" \
    >"$CONFIG/.cla-$k.yaml"
  mv "$CONFIG/.cla-$k.yaml" "$file"
}

# etcd, on loopback with a scratch data dir; a transaction holds one operation per changed key, so
# the first publish (2 x CLUSTERS keys) needs --max-txn-ops above etcd's default of 128.
etcd_log="$WORK/etcd.log"
etcd --name replicas --data-dir "$WORK/etcd-data" \
  --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
  --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-cluster "replicas=http://127.0.0.1:$((ETCD_PORT + 1))" \
  --max-txn-ops 100000 --max-request-bytes 67108864 >"$etcd_log" 2>&1 &
ETCD_PID=$!
wait_200 "$ETCD_PORT" /health "$ETCD_PID" "$etcd_log"

# The configuration: CLUSTERS EDS clusters in one file, each cluster's endpoints in a file of its
# own (an update rewrites one file).
mkdir -p "$CONFIG"
{
  echo 'resources:'
  for ((k = 0; k < CLUSTERS; k++)); do
    printf '%s\n' '  - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster' \
      "    name: cluster-$k" '    type: EDS' '    connect_timeout: 1s' \
      '    eds_cluster_config: { eds_config: { ads: {}, resource_api_version: V3 } }'
  done
} >"$CONFIG/clusters.yaml"
for ((k = 0; k < CLUSTERS; k++)); do write_cla "$k" 8080; done
"$WORK/xds-file-server" publish --etcd "$ETCD_URL" --prefix "$PREFIX" --config "$CONFIG"

# The update trigger xds-load runs (`--trigger-cmd`, one at a time): cluster K's endpoints move to
# a new port, the directory is published, the port is printed.
echo 0 >"$WORK/updates"
cat >"$WORK/update.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
CONFIG="$CONFIG"
$(declare -f write_cla)
n=\$((\$(cat "$WORK/updates") + 1))
echo "\$n" >"$WORK/updates"
port=\$((20000 + n % 40000))
write_cla "\$1" "\$port"
t0=\$(date +%s%N)
"$WORK/xds-file-server" publish --etcd "$ETCD_URL" --prefix "$PREFIX" --config "$CONFIG" >>"$WORK/publish.log"
echo \$(((\$(date +%s%N) - t0) / 1000000)) >>"$WORK/publish-ms"
echo "\$port"
EOF

servers=()
for ((i = 0; i < REPLICAS; i++)); do
  g=$((BASE_PORT + 3 * i)) h=$((BASE_PORT + 3 * i + 1)) a=$((BASE_PORT + 3 * i + 2))
  log="$WORK/replica-$i.log"
  "$WORK/xds-file-server" --etcd "$ETCD_URL" --prefix "$PREFIX" --grpc-addr "127.0.0.1:$g" \
    --http-addr "127.0.0.1:$h" --admin-addr "127.0.0.1:$a" --log warn \
    --max-connections-per-peer "$CLIENTS" ${REPLICA_ARGS:-} >"$log" 2>&1 &
  REPLICA_PIDS+=($!)
  servers+=("http://127.0.0.1:$g")
done
for ((i = 0; i < REPLICAS; i++)); do
  wait_200 $((BASE_PORT + 3 * i + 2)) /ready "${REPLICA_PIDS[$i]}" "$WORK/replica-$i.log"
done
echo "== etcd (pid $ETCD_PID) and $REPLICAS replicas (pids ${REPLICA_PIDS[*]}) serve $CLUSTERS clusters"

out="$WORK/load.out"
servers_csv=$(IFS=,; echo "${servers[*]}")
"$WORK/xds-load" --server "$servers_csv" --trigger-cmd "bash $WORK/update.sh {k}" \
  --clients "$CLIENTS" --mode "${MODE:-delta}" --updates "${UPDATES:-20}" --interval-ms "${INTERVAL_MS:-200}" \
  --restart-wait-s "${FAILOVER_WAIT_S:-60}" --failover 0 --brief >"$out" 2>&1 &
LOAD_PID=$!
wait_for_marker "READY FOR FAILOVER" "$out" "$LOAD_PID" replicas
rss() { awk '/^VmRSS/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "?"; }
for ((i = 0; i < REPLICAS; i++)); do
  echo "== replica $i RSS after the storm: $(rss "${REPLICA_PIDS[$i]}")"
done
echo "== READY FOR FAILOVER: kill -9 replica 0 (pid ${REPLICA_PIDS[0]})"
kill -9 "${REPLICA_PIDS[0]}"
wait "${REPLICA_PIDS[0]}" 2>/dev/null || true
status=0
wait "$LOAD_PID" || status=$?
LOAD_PID=""
for ((i = 1; i < REPLICAS; i++)); do
  echo "== replica $i RSS at the end: $(rss "${REPLICA_PIDS[$i]}")"
done
echo "== publishes: $(grep -c '^published' "$WORK/publish.log" 2>/dev/null || echo 0), last: $(tail -1 "$WORK/publish.log" 2>/dev/null)"
if [ -s "$WORK/publish-ms" ]; then
  # How long the publish command itself took (load and validate the directory, read the prefix,
  # one transaction): part of each update's publish -> all clients time.
  sort -n "$WORK/publish-ms" | awk '{ v[NR] = $1 } END {
    printf "== the publish command itself: p50 %d ms, max %d ms (%d publishes)\n", v[int((NR + 1) / 2)], v[NR], NR }'
fi
cat "$out"
exit "$status"
