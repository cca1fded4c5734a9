# Progress for long, otherwise silent set-up steps; sourced by demo.sh and
# python-env.sh.
#
#   source scripts/progress.sh
#   with_progress "installing torch" pip install ...
#
# with_progress WHAT CMD...: runs CMD (its exit status is with_progress's);
# while it runs, prints "  ... still WHAT (N s)" to stderr every
# progress_every seconds, so minutes of pip or CMake are never silent.

# Seconds between progress lines: TDOCK_PROGRESS_EVERY if set; 60 under
# CI=true (a CI log stays short: one line a minute); 15 otherwise.
progress_every() {
  if [[ -n "${TDOCK_PROGRESS_EVERY:-}" ]]; then
    echo "$TDOCK_PROGRESS_EVERY"
  elif [[ "${CI:-}" == "true" ]]; then
    echo 60
  else
    echo 15
  fi
}

with_progress() {
  local what="$1" every started=$SECONDS rc=0
  shift
  every="$(progress_every)"
  # The ticker's sleep holds none of our output: a caller reading it to the
  # end is not kept waiting for a sleep left over once the ticker is gone.
  (
    while sleep "$every" </dev/null >/dev/null 2>&1; do
      echo "  ... still $what ($((SECONDS - started)) s)" >&2
    done
  ) &
  local ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$rc"
}
