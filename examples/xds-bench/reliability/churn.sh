#!/usr/bin/env bash
# Connection churn: CYCLES connect / subscribe (ADS, wildcard Cluster) / first response /
# disconnect cycles, CONCURRENCY at a time, after WARMUP cycles; fails unless the server's RSS grew
# at most MAX_RSS_GROWTH_PCT and its tasks and streams came back to the baseline.
#
# Env (defaults): CYCLES (10000) CONCURRENCY (10) WARMUP (1000) CLUSTERS (1000) MODE (delta)
# MAX_RSS_GROWTH_PCT (5), and those of lib.sh. Quick: CYCLES=200 bash examples/xds-bench/reliability/churn.sh
source "$(dirname "$0")/lib.sh"
build
start_server --clusters "${CLUSTERS:-1000}"
load --churn "${CYCLES:-10000}" --churn-concurrency "${CONCURRENCY:-10}" \
  --churn-warmup "${WARMUP:-1000}" --churn-max-rss-growth-pct "${MAX_RSS_GROWTH_PCT:-5}" \
  --mode "${MODE:-delta}" --server-pid "$SERVER_PID"
