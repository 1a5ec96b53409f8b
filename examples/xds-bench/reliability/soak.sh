#!/usr/bin/env bash
# Soak: CLIENTS clients, one update every INTERVAL_MS for DURATION_S, the server's RSS, CPU,
# tasks and streams logged every SAMPLE_S to RSS_LOG (CSV: elapsed_s,rss_bytes,cpu_s,tasks,streams);
# fails unless every update reached every client and every client ends at the final version.
#
# Env (defaults): CLIENTS (1000) CLUSTERS (1000) MODE (delta) DURATION_S (1800) INTERVAL_MS (100)
# SAMPLE_S (10) RSS_LOG (target/reliability/soak-rss-<date>.csv), and those of lib.sh.
# Quick: CLIENTS=20 CLUSTERS=200 DURATION_S=20 SAMPLE_S=1 bash examples/xds-bench/reliability/soak.sh
source "$(dirname "$0")/lib.sh"
build
log="${RSS_LOG:-target/reliability/soak-rss-$(date +%Y%m%d-%H%M%S).csv}"
mkdir -p "$(dirname "$log")"
updates=$((${DURATION_S:-1800} * 1000 / ${INTERVAL_MS:-100}))
start_server --clusters "${CLUSTERS:-1000}"
status=0
load --clients "${CLIENTS:-1000}" --mode "${MODE:-delta}" --updates "$updates" \
  --interval-ms "${INTERVAL_MS:-100}" --rss-log "$log" --sample-s "${SAMPLE_S:-10}" --brief \
  --server-pid "$SERVER_PID" || status=$?
echo "== RSS curve (MiB; about 10 points of $log):"
awk -F, 'BEGIN { n = 0 } NR > 1 && $2 != "" { t[n] = $1; r[n] = $2; n++ }
  END { step = n > 10 ? int(n / 10) : 1
        for (i = 0; i < n; i += step) printf "  %8.1f s %8.1f\n", t[i], r[i] / 1048576
        if (n > 0 && (n - 1) % step) printf "  %8.1f s %8.1f\n", t[n - 1], r[n - 1] / 1048576 }' "$log"
exit "$status"
