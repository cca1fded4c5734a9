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
# Environment: BUILD_DIR (default build), JOBS (default 2), PYTHON_VENV (default
# .venv-demo: the demo's own environment, apart from a .venv of the user's).
#
# Each phase prints a line before it starts (with the seconds since the
# start), and a step that prints nothing itself (configuring, each pip
# install of a first Python environment) a line every 15 s while it runs
# (every 60 s under CI=true; TDOCK_PROGRESS_EVERY sets it, see
# scripts/progress.sh), so no part of the set-up is silent for long.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-2}"
venv="${PYTHON_VENV:-.venv-demo}"

phase() {
  echo "demo [${SECONDS}s] $*"
}
source scripts/progress.sh

phase "1/5 checking the Debian packages the build needs (scripts/install-deps.sh)"
bash scripts/install-deps.sh

phase "2/5 configuring the Release build in $BUILD_DIR/ (CMake)"
with_progress "configuring" cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
phase "3/5 building tdock-server and the Python client in $BUILD_DIR/" \
  "(several minutes on 2 cores the first time)"
cmake --build "$BUILD_DIR" -j "$JOBS" --target tdock-server tdock_python

# The example's workers use torch and TensorDict: the pinned environment of
# scripts/python-env.sh (PYTHON_VENV, default .venv-demo; made once), never
# the .venv of the quick start's step 3, which it would turn into this one.
phase "4/5 preparing the Python environment $venv/ (scripts/python-env.sh; the" \
  "first time it installs torch and the pinned packages from PyPI)"
python="$(bash scripts/python-env.sh "$venv")"

phase "5/5 running examples/grpo_pipeline.py: it imports torch, starts its own" \
  "tdock-server (unless --server), then its worker processes, and prints their progress"
build_abs="$(cd "$BUILD_DIR" && pwd)"
PYTHONPATH="$build_abs/python${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$python" examples/grpo_pipeline.py \
  --server_bin "$build_abs/server/tdock-server" "$@"
