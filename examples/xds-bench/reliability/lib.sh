# Shared by the reliability scripts (source it): builds the release binaries and copies them out
# of the target dir (a concurrent build cannot swap them mid-run), starts and stops
# xds-bench-server on loopback, runs xds-load against it, cleans up on exit.
#
# Env: GRPC_PORT / HTTP_PORT (18200 / 18201), BUILD=0 to use target/release as it is, PROFILE=debug,
# KEEP=1 to keep the work dir (server logs, reports).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

GRPC="127.0.0.1:${GRPC_PORT:-18200}"
HTTP="127.0.0.1:${HTTP_PORT:-18201}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/xds-reliability.XXXXXX")"
SERVER_PID=""
SERVER_LOG=""
LOAD_PID=""
STARTS=0

cleanup() {
  [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true
  stop_server
  if [ "${KEEP:-0}" = 1 ]; then echo "work dir kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# Builds (unless BUILD=0) and copies xds-load and xds-bench-server into the work dir, with the
# binaries of the packages named as arguments (e.g. `build xds-file-server`; each package's binary
# has its name); PROFILE=debug takes the debug binaries instead (CI's smoke run, which shares the
# test build).
build() {
  local profile="${PROFILE:-release}"
  if [ "${BUILD:-1}" != 0 ]; then
    local packages=()
    for p in xds-bench "$@"; do packages+=(-p "$p"); done
    if [ "$profile" = release ]; then
      cargo build --release "${packages[@]}"
    else
      cargo build "${packages[@]}"
    fi
  fi
  local target="${CARGO_TARGET_DIR:-target}/$profile"
  for bin in xds-load xds-bench-server "$@"; do
    cp "$target/$bin" "$WORK/"
  done
}

# Starts xds-bench-server with these arguments (plus the ports) and waits for its ' pid ' line
# (at most 60 s); sets SERVER_PID and SERVER_LOG.
start_server() {
  STARTS=$((STARTS + 1))
  SERVER_LOG="$WORK/server-$STARTS.log"
  : >"$SERVER_LOG"
  "$WORK/xds-bench-server" --grpc-addr "$GRPC" --http-addr "$HTTP" "$@" >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    grep -q ' pid ' "$SERVER_LOG" && return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "xds-bench-server did not start:" >&2
      cat "$SERVER_LOG" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "xds-bench-server did not start within 60 s" >&2
  cat "$SERVER_LOG" >&2
  exit 1
}

# Stops the server (SIGTERM, or the signal given, e.g. KILL) and reaps it.
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill "-${1:-TERM}" "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# Runs xds-load against the server with these extra arguments.
load() {
  "$WORK/xds-load" --server "http://$GRPC" --trigger "http://$HTTP/bench/update?i={k}" \
    --stats "http://$HTTP/bench/stats" "$@"
}

# Waits until FILE has a line starting with MARKER (what xds-load prints when it is ready for the
# script's next step); if process PID (xds-load) ends first, prints FILE and fails as WHO.
wait_for_marker() {
  local marker="$1" file="$2" pid="$3" who="$4"
  until grep -q "^$marker" "$file"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$file"
      echo "$who: xds-load ended before $marker" >&2
      exit 1
    fi
    sleep 0.2
  done
}
