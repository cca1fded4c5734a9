#!/usr/bin/env bash
# Runs the quickstart example against a fresh tdock-server:
#   run-quickstart.sh SERVER_BIN QUICKSTART_BIN CONFIG [RUNS]
# Starts SERVER_BIN on a free loopback port with --config CONFIG, waits until
# it listens, runs QUICKSTART_BIN RUNS times (default 1) against it, stops the
# server with SIGTERM and checks that it exited 0. Exits with the first failing
# run's status, or 1 if the server misbehaved. The server is stopped on any
# exit. Used by scripts/demo.sh and by the quickstart_e2e test.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 SERVER_BIN QUICKSTART_BIN CONFIG [RUNS]" >&2
  exit 2
fi
server_bin="$1" quickstart_bin="$2" config="$3" runs="${4:-1}"

log="$(mktemp "${TMPDIR:-/tmp}/tdock-server.XXXXXX.log")"
server_pid=""
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "run-quickstart: $*" >&2
  echo "---- tdock-server log ----" >&2
  cat "$log" >&2 || true
  exit 1
}

# Port 0: the server picks a free port and logs the one it bound.
"$server_bin" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 --config "$config" \
  >"$log" 2>&1 &
server_pid=$!

address=""
for _ in $(seq 1 300); do  # up to 30 s
  line="$(grep -m1 -o 'tdock-server listening on [^ ]*' "$log" || true)"
  if [[ -n "$line" ]]; then
    address="${line##* }"
    break
  fi
  kill -0 "$server_pid" 2>/dev/null || fail "tdock-server exited before listening"
  sleep 0.1
done
[[ -n "$address" ]] || fail "tdock-server did not listen within 30 s"
[[ "$address" != *:0 ]] || fail "tdock-server logged port 0 instead of its bound port"
echo "run-quickstart: tdock-server (pid $server_pid) listening on $address"

status=0
for run in $(seq 1 "$runs"); do
  echo "run-quickstart: run $run of $runs: $quickstart_bin --server $address"
  "$quickstart_bin" --server "$address" || status=$?
  [[ $status -eq 0 ]] || break
done

kill -TERM "$server_pid"
for _ in $(seq 1 300); do  # up to 30 s
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$server_pid" 2>/dev/null && fail "tdock-server still running 30 s after SIGTERM"
server_status=0
wait "$server_pid" || server_status=$?
server_pid=""
if [[ $server_status -ne 0 ]]; then
  fail "tdock-server exited with status $server_status after SIGTERM"
fi
echo "run-quickstart: tdock-server stopped cleanly (exit 0)"
exit "$status"
