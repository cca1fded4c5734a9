#!/usr/bin/env bash
# Creates (or brings up to date) the virtual environment the Python tests and
# examples run in, and prints its python:
#
#   python=$(bash scripts/python-env.sh [VENV])  # default VENV: .venv-test
#
# torch==2.13.0 first (so nothing that depends on torch pulls a CUDA build),
# then scripts/python-requirements.txt, then without their dependencies
# scripts/python-requirements-nodeps.txt, all pinned, from PyPI. Idempotent: when
# the environment was made from the same pins it does nothing. While pip runs
# (quietly) it says it is still installing every 15 s (60 s under CI=true;
# scripts/progress.sh). Uses Debian's
# /usr/bin/python3 (python3-venv, from scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh

venv="${1:-.venv-test}"
torch_pin="torch==2.13.0"
requirements=scripts/python-requirements.txt
nodeps=scripts/python-requirements-nodeps.txt
stamp="$venv/.tdock-pins"
want="$(printf '%s\n' "$torch_pin" | cat - "$requirements" "$nodeps" | sha256sum | cut -d' ' -f1)"

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "python-env: installing $torch_pin and $requirements into $venv/" >&2
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "python-env: creating the virtual environment $venv/" >&2
    /usr/bin/python3 -m venv "$venv"
  fi
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
  echo "python-env: 1/3 installing $torch_pin" >&2
  with_progress "installing $torch_pin" "${pip[@]}" "$torch_pin" >&2
  echo "python-env: 2/3 installing $requirements (grpcio, numpy, tensordict, ray, ...)" >&2
  with_progress "installing $requirements" "${pip[@]}" -r "$requirements" >&2
  echo "python-env: 3/3 installing $nodeps without dependencies" >&2
  with_progress "installing $nodeps" "${pip[@]}" --no-deps -r "$nodeps" >&2
  echo "python-env: done" >&2
  echo "$want" >"$stamp"
fi
echo "$(cd "$venv" && pwd)/bin/python"
