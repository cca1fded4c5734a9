#!/usr/bin/env bash
# Scale-out on a machine of 16 cores or more: a standalone server and a
# controller with 1, 2 and 4 shards, each process on cores of its own
# (bench/scale_out.py --pin), against the same machine's loopback ceiling
# (iperf3, laid out as the shards are). Writes $OUT/scale_out_16core.md and
# prints it; about 3-5 minutes once built.
#
#   bash bench/scale_out_16core.sh
#
# Environment (all optional):
#   BUILD_DIR  the CMake build with server/tdock-server and python/ (default:
#              <repo>/build; configured and built, Release, when either is missing)
#   OUT        where the report goes (default: /tmp)
#   MIB        MiB each producer puts per topology and round (default: 2048)
#   PYTHON     the Python to run it with (default: .venv-test's if it is there,
#              else python3 if it has grpc, numpy and protobuf, else the pinned
#              environment of scripts/python-env.sh)
#   WHEELS     for a machine without the build's libraries or a package source:
#              a folder holding the tdock wheel of scripts/build-wheel.sh (which
#              carries tdock-server and its libraries) and wheels of grpcio,
#              protobuf and numpy for that machine's Python; installed with pip
#              --no-index, and the wheel's tdock-server is run
#   DEBS       likewise, a folder of Debian packages (iperf3, libiperf0,
#              libsctp1) unpacked (dpkg -x) when iperf3 is not installed
# Exits 2 on a machine of fewer than 16 cores.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${BUILD_DIR:-$repo/build}
out=${OUT:-/tmp}
report=$out/scale_out_16core.md
cores=$(nproc)
if ((cores < 16)); then
  echo "scale_out_16core: needs 16 cores (4 shards pinned take 13); this machine has $cores" >&2
  exit 2
fi

if [[ -n ${DEBS:-} ]] && ! command -v iperf3 >/dev/null; then
  root=$(mktemp -d)
  for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$root"; done
  export PATH=$root/usr/bin:$PATH
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

has_modules() { "$1" -c 'import grpc, numpy, google.protobuf' 2>/dev/null; }
python=${PYTHON:-}
if [[ -n ${WHEELS:-} ]]; then
  python=${python:-python3}
  site=$(mktemp -d)
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl
  export PYTHONPATH=$site
  server=$("$python" -c 'import tdock.server; print(tdock.server.find_binary())')
else
  server=$build/server/tdock-server
  built() { [[ -x $server && -f $build/python/tdock/__init__.py ]]; }
  if ! built || ! command -v iperf3 >/dev/null; then
    bash scripts/install-deps.sh iperf3
  fi
  if ! built; then
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    cmake --build "$build" -j "$cores" --target tdock-server tdock_python
  fi
  export PYTHONPATH=$build/python
fi
if [[ -z $python ]]; then
  if [[ -x .venv-test/bin/python ]] && has_modules .venv-test/bin/python; then
    python=.venv-test/bin/python
  elif command -v python3 >/dev/null && has_modules python3; then
    python=python3
  else
    python=$(bash scripts/python-env.sh)
  fi
fi

mib=${MIB:-2048}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
grpc=$("$python" -c 'import grpc; print(grpc.__version__)')
mkdir -p "$out"
{
  echo "# Scale-out, pinned: $(date -u +%F) at $commit"
  echo
  echo "$cores cores ($cpu); $(iperf3 --version 2>&1 | sed 1q); $("$python" --version)," \
    "grpcio $grpc; --mib $mib a producer"
  echo
  echo '```'
} >"$report"
PYTHONUNBUFFERED=1 "$python" bench/scale_out.py \
  --server "$server" --pin --shards 1,2,4 --rounds 2 --mib "$mib" >>"$report"
echo '```' >>"$report"
cat "$report"
