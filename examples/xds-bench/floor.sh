#!/usr/bin/env bash
# The project against the floor: xds-bench-server (the library) and xds-floor-server (the same
# resources pre-encoded, served with the least work) each serve ROUNDS runs of xds-load per mode,
# interleaved (project first in odd rounds, floor first in even ones, so that a drift in the
# machine's load does not favour either), every run against a fresh server. Prints each run's
# figures, then the medians and the ratio project / floor of: storm server CPU, server CPU per
# update, update p99, server RSS per client, xds-load's own CPU in the storm and the updates, and
# the server's user CPU alone in the storm and per update (its own work: the kernel's share, the
# same bytes written by both, varies far more from run to run).
#
# Env (defaults): ROUNDS (3) CLIENTS (1000) CLUSTERS (10000) UPDATES (20) MODES ("delta sotw")
# BIN (target/release: build first with `cargo build --release -p xds-bench`; the binaries are
# copied out so that a concurrent build cannot swap them mid-run) GRPC_PORT / HTTP_PORT
# (18700 / 18701) WARM=1 to have one client fetch everything and leave before each measured run
# (the idle figures, RSS above all, then count what each client costs, not also what the first
# request builds once: the project encodes a whole set when it is first asked for, the floor
# frames its responses at its first storm; a kept report's summary does not say whether it was
# warmed), KEEP=1 to keep the reports, REPORTS=<kept dir> to summarize them again without
# running anything. Extra arguments go to every xds-load run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-1000}"
CLUSTERS="${CLUSTERS:-10000}"
UPDATES="${UPDATES:-20}"
MODES="${MODES:-delta sotw}"
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/release}"
GRPC="127.0.0.1:${GRPC_PORT:-18700}"
HTTP="127.0.0.1:${HTTP_PORT:-18701}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/xds-floor.XXXXXX")"
SERVER_PID=""
EXTRA=("$@")

cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "reports kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

if [ -z "${REPORTS:-}" ]; then
  for bin in xds-load xds-bench-server xds-floor-server; do
    cp "$BIN/$bin" "$WORK/"
  done
fi

# One run: starts server $1 (project | floor) fresh, runs xds-load in mode $2, writes the report
# to $3.
run() {
  local server="$1" mode="$2" report="$3" log="$3.server"
  local exe="$WORK/xds-bench-server"
  [ "$server" = floor ] && exe="$WORK/xds-floor-server"
  : >"$log"
  "$exe" --clusters "$CLUSTERS" --grpc-addr "$GRPC" --http-addr "$HTTP" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    grep -q ' pid ' "$log" && break
    sleep 0.2
  done
  grep -q ' pid ' "$log" || { echo "$server did not start:" >&2; cat "$log" >&2; exit 1; }
  sleep 1
  if [ "${WARM:-0}" = 1 ]; then
    "$WORK/xds-load" --server "http://$GRPC" --clients 1 --mode "$mode" --updates 0 --brief \
      "${EXTRA[@]}" >"$report.warm" 2>&1 || {
      echo "$server: the warm-up run failed:" >&2
      cat "$report.warm" >&2
      exit 1
    }
    sleep 1
  fi
  "$WORK/xds-load" --server "http://$GRPC" --trigger "http://$HTTP/bench/update?i={k}" \
    --stats "http://$HTTP/bench/stats" --server-pid "$SERVER_PID" --clients "$CLIENTS" \
    --mode "$mode" --updates "$UPDATES" --brief "${EXTRA[@]}" >"$report" 2>&1 || true
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# The figures of a report, tab-separated: storm CPU (s), CPU per update (ms), update p99 (ms),
# RSS per client (KiB), xds-load CPU storm (s), xds-load CPU updates (s), CPU per update response
# (µs: both servers send a stream's changes together while its last response awaits its ACK, so
# the responses sent per update differ between runs), storm user CPU (s), user CPU per update
# (ms), storm received (MiB), anonymous memory per client (KiB: the RSS less the binary's pages
# read from disk, whose count moves between builds), verdict.
figures() {
  awk '
    /^server CPU: storm/ { storm = $4; updates_cpu = $7; per_update = $9; gsub(/[(]/, "", per_update) }
    /^server CPU user\/system:/ { storm_user = $5; user_per_update = $14; gsub(/[(]/, "", user_per_update) }
    /^update traffic:/ { responses = $3 }
    /^all updates/ { for (i = 1; i <= NF; i++) if ($i == "p99") { p99 = $(i + 1); sub(/ms$/, "", p99) } }
    /KiB per client/ { for (i = 1; i <= NF; i++) if ($i == "KiB" && $(i + 1) == "per") { rss = $(i - 1); gsub(/[(]/, "", rss) } }
    /KiB anonymous per client/ { for (i = 1; i <= NF; i++) if ($i == "KiB" && $(i + 1) == "anonymous") { anon = $(i - 1); gsub(/[(]/, "", anon) } }
    /^xds-load itself/ { load_storm = $5; load_updates = $8 }
    /^storm: .* received$/ { received = $(NF - 2) }
    / passed, / { verdict = $0 }
    END {
      per_response = responses > 0 ? sprintf("%.1f", updates_cpu * 1e6 / responses) : ""
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", storm, per_update, p99, rss, load_storm, load_updates, per_response, storm_user, user_per_update, received, anon, verdict
    }
  ' "$1"
}

summary() {
echo
warmed=""
[ "${WARM:-0}" = 1 ] && warmed=", each server warmed by one client first"
echo "medians over $ROUNDS rounds ($CLIENTS clients x $CLUSTERS clusters, $UPDATES updates$warmed), project / floor:"
awk -F'\t' '
  function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  NR > 1 {
    modes[$3] = 1
    for (c = 4; c <= 14; c++) v[$3, $2, c] = v[$3, $2, c] " " $c
    if ($15 !~ / 0 failed$/) bad[$3, $2]++
  }
  END {
    split("storm server CPU (s)|server CPU per update (ms)|update p99 (ms)|server RSS per client (KiB)|xds-load CPU, storm (s)|xds-load CPU, updates (s)|server CPU per response (us)|storm server user CPU (s)|user CPU per update (ms)|storm received (MiB)|anonymous per client (KiB)", name, "|")
    for (m in modes) {
      printf "%s%s\n", m, (bad[m, "project"] || bad[m, "floor"]) ? "  (some runs FAILED: see the runs above)" : ""
      for (c = 4; c <= 14; c++) {
        if (c == 13) continue
        p = median(v[m, "project", c]); f = median(v[m, "floor", c])
        printf "  %-28s project %9.2f [%s ]  floor %9.2f [%s ]  ratio %s\n", name[c - 3], p, v[m, "project", c], f, v[m, "floor", c], (f > 0 ? sprintf("%.2f", p / f) : "-")
      }
    }
  }
' "$WORK/runs.tsv"
}

header() {
  printf 'run\tserver\tmode\tstorm_cpu_s\tcpu_per_update_ms\tupdate_p99_ms\trss_per_client_kib\tload_cpu_storm_s\tload_cpu_updates_s\tcpu_per_response_us\tstorm_user_cpu_s\tuser_cpu_per_update_ms\tstorm_received_mib\tanon_per_client_kib\tverdict\n'
}

if [ -n "${REPORTS:-}" ]; then
  # Only the summary, of the reports a kept run left in $REPORTS ({mode}-{server}-{round}.txt).
  header >"$WORK/runs.tsv"
  ROUNDS=0
  for report in "$REPORTS"/*-*-*.txt; do
    name="$(basename "$report" .txt)"
    IFS=- read -r mode server round <<<"$name"
    [ "$round" -gt "$ROUNDS" ] && ROUNDS="$round"
    printf '%s\t%s\t%s\t%s\n' "$round" "$server" "$mode" "$(figures "$report")" >>"$WORK/runs.tsv"
  done
  cat "$WORK/runs.tsv"
  summary
  exit 0
fi

header >"$WORK/runs.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for mode in $MODES; do
    order="project floor"
    [ $((round % 2)) = 0 ] && order="floor project"
    for server in $order; do
      report="$WORK/$mode-$server-$round.txt"
      run "$server" "$mode" "$report"
      line="$(printf '%s\t%s\t%s\t%s' "$round" "$server" "$mode" "$(figures "$report")")"
      echo "$line" >>"$WORK/runs.tsv"
      echo "$line"
    done
  done
done
summary
