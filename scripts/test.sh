#!/usr/bin/env bash
# Installs the dependencies, builds everything (RelWithDebInfo) into build/,
# builds the transport-free core with ThreadSanitizer into build-tsan/ and runs
# its tests, then runs every test of build/ with ctest. Exits non-zero if any
# build or test fails; the last lines are ctest's summary of build/.
#
#   bash scripts/test.sh
#
# Environment: BUILD_DIR (default build), TSAN_BUILD_DIR (default build-tsan),
# JOBS (default 2), TDOCK_SKIP_TSAN=1 to skip the ThreadSanitizer part.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build}"
TSAN_BUILD_DIR="${TSAN_BUILD_DIR:-build-tsan}"
JOBS="${JOBS:-2}"

# python3-torch: the Python client's to_torch and torch inputs are tested
# when torch is there (it is optional for users). prometheus (with promtool)
# and docker-compose: the deploy tests run Prometheus end to end and validate
# the compose file (no Docker engine needed).
bash scripts/install-deps.sh python3-torch prometheus docker-compose

echo "test: building everything (RelWithDebInfo) in $BUILD_DIR/"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

if [[ "${TDOCK_SKIP_TSAN:-0}" != 1 ]]; then
  echo "test: building the core with ThreadSanitizer in $TSAN_BUILD_DIR/"
  cmake -S . -B "$TSAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTDOCK_CORE_ONLY=ON -DTDOCK_TSAN=ON >/dev/null
  cmake --build "$TSAN_BUILD_DIR" -j "$JOBS" --target tdock_core_tests
  echo "test: core tests under ThreadSanitizer"
  # scripts/tsan.supp: false positives from Debian's uninstrumented Abseil.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp ${TSAN_OPTIONS:-}" \
    ctest --test-dir "$TSAN_BUILD_DIR" --output-on-failure -j "$JOBS"
fi

echo "test: all tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
