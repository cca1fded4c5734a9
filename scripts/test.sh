#!/usr/bin/env bash
# Installs the dependencies, builds everything (RelWithDebInfo, gcc, -Werror)
# into build/, builds the core and persistence tests with clang and
# ThreadSanitizer into build-tsan/ (-Wthread-safety -Werror: a lock
# annotation the code breaks fails the build) and runs them, builds the libFuzzer target with clang (ASan, UBSan) into
# build-fuzz/ and runs it for FUZZ_SECONDS over tests/fuzz/corpus, then runs
# every test of build/ with ctest. Exits non-zero if any build or test fails
# (or the fuzzer finds a crash, leak or sanitizer report); the last lines are
# ctest's summary of build/.
#
#   bash scripts/test.sh
#
# Environment: BUILD_DIR (default build), PYTHON_VENV (default .venv-test:
# the Python tests' environment, scripts/python-env.sh), TSAN_BUILD_DIR (default build-tsan),
# FUZZ_BUILD_DIR (default build-fuzz), FUZZ_SECONDS (default 60), JOBS
# (default 2), TDOCK_SKIP_TSAN=1 / TDOCK_SKIP_FUZZ=1 to skip those parts.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build}"
TSAN_BUILD_DIR="${TSAN_BUILD_DIR:-build-tsan}"
FUZZ_BUILD_DIR="${FUZZ_BUILD_DIR:-build-fuzz}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
JOBS="${JOBS:-2}"

# prometheus (with promtool) and docker-compose: the deploy tests run
# Prometheus end to end and validate the compose file (no Docker engine
# needed). clang and its runtimes: the fuzz target (libFuzzer, ASan, UBSan);
# openssl: the TLS tests' certificates.
bash scripts/install-deps.sh prometheus docker-compose clang libclang-rt-14-dev openssl

# The Python tests run in a virtual environment with pinned packages from
# PyPI (torch, tensordict, grpcio, protobuf, numpy, pytest): PYTHON_VENV
# (default .venv-test; never the .venv of the quick start's step 3, which it
# would turn into this one).
python="$(bash scripts/python-env.sh "${PYTHON_VENV:-.venv-test}")"

echo "test: building everything (RelWithDebInfo) in $BUILD_DIR/"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTDOCK_PYTHON="$python" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

if [[ "${TDOCK_SKIP_TSAN:-0}" != 1 ]]; then
  echo "test: building the core and persistence tests with clang (-Wthread-safety -Werror) and ThreadSanitizer in $TSAN_BUILD_DIR/"
  CC=clang CXX=clang++ cmake -S . -B "$TSAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTDOCK_CORE_ONLY=OFF -DTDOCK_TSAN=ON -DTDOCK_WERROR=ON >/dev/null
  cmake --build "$TSAN_BUILD_DIR" -j "$JOBS" --target tdock_core_tests tdock_persistence_tests
  echo "test: core and persistence tests under ThreadSanitizer"
  # scripts/tsan.supp: false positives from Debian's uninstrumented Abseil.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp ${TSAN_OPTIONS:-}" \
    ctest --test-dir "$TSAN_BUILD_DIR" --output-on-failure -j "$JOBS" \
      -L '^(tdock_core_tests|tdock_persistence_tests)$'
fi

if [[ "${TDOCK_SKIP_FUZZ:-0}" != 1 ]]; then
  echo "test: building the fuzz target (clang, ASan, UBSan) in $FUZZ_BUILD_DIR/"
  CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDOCK_FUZZ=ON >/dev/null
  cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS" --target tdock_dock_fuzzer
  echo "test: fuzzing request decoding and validation for ${FUZZ_SECONDS} s"
  fuzz_corpus="$(mktemp -d)"  # new inputs go here, the seeds stay as they are
  fuzz_log="$FUZZ_BUILD_DIR/fuzz.log"
  if ! "$FUZZ_BUILD_DIR/tests/tdock_dock_fuzzer" -max_total_time="$FUZZ_SECONDS" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$FUZZ_BUILD_DIR/" "$fuzz_corpus" tests/fuzz/corpus \
      >"$fuzz_log" 2>&1; then
    tail -n 60 "$fuzz_log"
    echo "test: the fuzzer failed; the input is in $FUZZ_BUILD_DIR/ (crash-*, leak-*, ...)"
    rm -rf "$fuzz_corpus"
    exit 1
  fi
  grep -E '^(Done|stat::(number_of_executed_units|new_units_added|peak_rss_mb))' "$fuzz_log"
  rm -rf "$fuzz_corpus"
fi

echo "test: all tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
