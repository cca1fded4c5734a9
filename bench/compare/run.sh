#!/usr/bin/env bash
# The comparison benchmark: tdock against Redis, a plain gRPC unary service
# and iperf3, on loopback, with the C++ and the Python clients. One command:
#
#   bash bench/compare/run.sh
#
# Installs what is missing (Debian packages), builds tdock-server,
# tdock_compare and the Python client in Release, starts tdock-server,
# redis-server (no persistence), the plain gRPC server and iperf3 -s on free
# loopback ports, runs per shape: iperf3 (the ceiling), tdock_compare (tdock,
# Redis, plain gRPC; C++), compare.py (tdock, Redis; Python), and writes
# $OUT_DIR/compare.json and compare.md (the markdown is printed at the end).
# Every server it started is stopped on any exit.
#
# Environment (all optional):
#   BUILD_DIR      build directory                     (default: <repo>/build-bench)
#   OUT_DIR        where the reports go                (default: $BUILD_DIR/bench-results)
#   JOBS           ninja -j                            (default: 2)
#   SHAPES         shapes, in order                    (default: small,medium)
#   PASSES         timed passes per shape, C++         (default: 7)
#   PY_PASSES      timed passes per shape, Python      (default: 5)
#   CHUNK_ROWS     rows per call, all columns          (default: 64: at most
#                  19 MB per call, under glibc's largest mmap threshold of 32 MiB;
#                  larger calls make every library that allocates a buffer per
#                  call pay for fresh pages)
#   IPERF_SECONDS  length of each iperf3 run           (default: 5)
#   REDIS_IO       wire (MSET with writev) or hiredis (redisCommandArgv) (default: wire)
#   SKIP_PYTHON    1: no Python client runs            (default: 0)
#   SKIP_INSTALL   1: do not install packages          (default: 0)
#   MALLOC_TUNING  1: every process keeps freed heap memory for reuse (glibc
#                  tunables), so no contender pays page faults for the large
#                  buffers its library allocates per call (default: 1)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$repo/build-bench}
out=${OUT_DIR:-$build/bench-results}
jobs=${JOBS:-2}
shapes=${SHAPES:-small,medium}
passes=${PASSES:-7}
py_passes=${PY_PASSES:-5}
chunk_rows=${CHUNK_ROWS:-64}
iperf_seconds=${IPERF_SECONDS:-5}
redis_io=${REDIS_IO:-wire}
python=/usr/bin/python3

log() { echo "compare: $*" >&2; }

install_packages() {
  local packages=(build-essential cmake ninja-build pkg-config redis-server
    libhiredis-dev iperf3 python3 python3-redis python3-hiredis python3-numpy
    python3-grpcio python3-protobuf python3-yaml)
  local missing=() pkg status
  for pkg in "${packages[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || {
      log "not root and no sudo; as root run: apt-get install ${missing[*]}"
      exit 1
    }
    sudo=(sudo -n)
  fi
  log "installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
}

[[ "${SKIP_INSTALL:-0}" == 1 ]] || install_packages

if [[ "${MALLOC_TUNING:-1}" == 1 ]]; then
  # Freed memory stays in the heap (no trimming) and allocations up to 32 MiB
  # come from it, for every process started below; Redis uses jemalloc.
  export GLIBC_TUNABLES=glibc.malloc.trim_threshold=68719476736:glibc.malloc.mmap_threshold=33554432
fi

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
targets=(tdock-server tdock_compare)
[[ "${SKIP_PYTHON:-0}" == 1 ]] || targets+=(tdock_python)
ninja -C "$build" -j"$jobs" "${targets[@]}" >&2
compare_bin="$build/bench/compare/tdock_compare"
[[ -x "$compare_bin" ]] || { log "tdock_compare was not built (is libhiredis-dev installed?)"; exit 1; }

mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/tdock-compare.XXXXXX")"
pids=()
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until `file` has a line matching `pattern` and prints its last word.
wait_for() {
  local file="$1" pattern="$2" pid="$3" what="$4" line
  for _ in $(seq 1 300); do  # up to 30 s
    line="$(grep -m1 -o "$pattern [^ ]*" "$file" || true)"
    if [[ -n "$line" ]]; then
      echo "${line##* }"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { log "$what exited"; cat "$file" >&2; exit 1; }
    sleep 0.1
  done
  log "$what did not start within 30 s"; cat "$file" >&2; exit 1
}

"$build/server/tdock-server" --listen 127.0.0.1:0 --metrics_listen "" \
  >"$work/tdock.log" 2>&1 &
pids+=($!)
tdock_addr=$(wait_for "$work/tdock.log" "tdock-server listening on" $! tdock-server)

redis_port=$(free_port)
redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
  --maxmemory 8gb --maxmemory-policy noeviction --protected-mode yes \
  >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for "$work/redis.log" "Ready to accept" $! redis-server >/dev/null

"$compare_bin" --serve_baseline --shapes="$shapes" --chunk_rows="$chunk_rows" \
  >"$work/baseline.log" 2>&1 &
pids+=($!)
grpc_addr=$(wait_for "$work/baseline.log" "baseline-server listening on" $! baseline-server)

iperf_port=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$iperf_port" --forceflush >"$work/iperf-server.log" 2>&1 &
pids+=($!)
wait_for "$work/iperf-server.log" "Server listening on" $! "iperf3 -s" >/dev/null

log "tdock-server $tdock_addr, redis-server 127.0.0.1:$redis_port," \
  "plain gRPC $grpc_addr, iperf3 127.0.0.1:$iperf_port"

run_python=1
if [[ "${SKIP_PYTHON:-0}" == 1 ]]; then
  run_python=0
elif ! PYTHONPATH="$build/python" "$python" -c 'import tdock, redis, numpy' 2>"$work/py.err"; then
  log "Python client not importable, skipping the Python runs: $(tail -1 "$work/py.err")"
  run_python=0
fi

samples="$work/samples.jsonl"
: >"$samples"
iperf_files=()
IFS=',' read -r -a shape_list <<<"$shapes"
for shape in "${shape_list[@]}"; do
  log "== $shape: iperf3 (${iperf_seconds} s, one stream)"
  iperf3 -c 127.0.0.1 -p "$iperf_port" -t "$iperf_seconds" -J >"$work/iperf-$shape.json" ||
    { log "iperf3 failed"; cat "$work/iperf-$shape.json" >&2; exit 1; }
  iperf_files+=("$work/iperf-$shape.json")
  log "== $shape: C++ client (tdock, Redis, plain gRPC), $passes passes"
  "$compare_bin" --tdock="$tdock_addr" --redis="127.0.0.1:$redis_port" \
    --redis_io="$redis_io" --grpc="$grpc_addr" --shapes="$shape" \
    --chunk_rows="$chunk_rows" --passes="$passes" --out="$samples"
  if [[ $run_python == 1 ]]; then
    log "== $shape: Python client (tdock, Redis), $py_passes passes"
    PYTHONPATH="$build/python" "$python" "$repo/bench/compare/compare.py" \
      --tdock "$tdock_addr" --redis "127.0.0.1:$redis_port" --shapes "$shape" \
      --chunk-rows "$chunk_rows" --passes "$py_passes" --out "$samples"
  fi
done

cp "$samples" "$out/compare-samples.jsonl"
redis_version=$(redis-server --version | grep -o 'v=[^ ]*' | cut -d= -f2)
"$python" "$repo/bench/compare/report.py" "$samples" "$out/compare" \
  --iperf "${iperf_files[@]}" \
  --meta "cores=$(nproc)" "load_average=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/')" \
  "redis=$redis_version" "redis_mset=$redis_io" \
  "malloc_tuning=${MALLOC_TUNING:-1}" "cpp_passes=$passes" "python_passes=$py_passes"
log "reports: $out/compare.md $out/compare.json (samples: $out/compare-samples.jsonl)"
