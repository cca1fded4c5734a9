#!/usr/bin/env bash
# Installs the Debian 12 packages that tdock's build and tests need, plus
# any named as arguments:  bash scripts/install-deps.sh [PACKAGE ...]
#
# Idempotent: when every package is already installed it does nothing (no
# apt-get update), so repeated runs take well under a second. Runs as root, or
# through sudo when it is available. Needs no terminal.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # gRPC and Protobuf (the wire), Abseil, YAML specs
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # JSON output, persistence (RocksDB; ISA-L for CRC-32C), metrics
  nlohmann-json3-dev librocksdb-dev libisal-dev prometheus-cpp-dev
  # the Python client, its tests and the example pipeline (Debian's Python)
  python3 python3-grpcio python3-protobuf python3-numpy python3-yaml
  python3-pytest python3-venv python3-setuptools python3-pip
  # tdock._native, the Python client's C++ data path (pybind11)
  python3-dev pybind11-dev
)
# Extra packages from the command line (scripts/test.sh adds python3-torch,
# which the Python client uses when it is there, and what the deploy tests run).
PACKAGES+=("$@")

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo -n)
else
  echo "install-deps: not root and sudo is not available; as root, run:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
