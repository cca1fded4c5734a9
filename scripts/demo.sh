#!/usr/bin/env bash
# The quick start: installs the dependencies, builds tdock-server and the
# Python client (Release) into build/, and runs the GRPO pipeline example
# (examples/grpo_pipeline.py): it starts the server on a free loopback port,
# runs a simulated GRPO loop with one process per worker against it, prints a
# table per step and role, and stops the server. Exits with the example's
# status. Arguments go to the example (e.g. --steps 4 --prompts 16).
#
#   bash scripts/demo.sh [EXAMPLE FLAGS ...]
#
# Environment: BUILD_DIR (default build), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-2}"

bash scripts/install-deps.sh

echo "demo: building tdock-server and the Python client (Release) in $BUILD_DIR/"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target tdock-server tdock_python

# The example's workers use torch and TensorDict: the pinned environment of
# scripts/python-env.sh (PYTHON_VENV, default .venv; made once).
python="$(bash scripts/python-env.sh "${PYTHON_VENV:-.venv}")"

build_abs="$(cd "$BUILD_DIR" && pwd)"
PYTHONPATH="$build_abs/python${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$python" examples/grpo_pipeline.py \
  --server_bin "$build_abs/server/tdock-server" "$@"
