#!/usr/bin/env bash
# The quick start: installs the dependencies, builds tdock-server and the
# quickstart example (Release) into build/, starts the server with
# examples/quickstart.yaml on a free loopback port, runs the example against
# it, and stops the server. Exits with the example's status.
#
#   bash scripts/demo.sh
#
# Environment: BUILD_DIR (default build), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-2}"

bash scripts/install-deps.sh

echo "demo: building tdock-server and tdock_quickstart (Release) in $BUILD_DIR/"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target tdock-server tdock_quickstart

exec bash scripts/run-quickstart.sh \
  "$BUILD_DIR/server/tdock-server" \
  "$BUILD_DIR/examples/tdock_quickstart" \
  examples/quickstart.yaml
