#!/usr/bin/env bash
# Builds the benchmarks in Release, runs the claim and transport benchmarks,
# writes Google Benchmark JSON and prints a summary: per-Get claim latency, and
# GB/s of tdock Put/Get against the plain gRPC baseline with their ratios.
#
#   bash bench/run.sh
#
# Environment (all optional):
#   BUILD_DIR           build directory            (default: <repo>/build-bench)
#   OUT_DIR             where the JSON goes        (default: $BUILD_DIR/bench-results)
#   JOBS                ninja -j                   (default: 2)
#   CLAIM_MIN_TIME      seconds per claim case     (default: 0.1)
#   TRANSPORT_MIN_TIME  seconds per transport case (default: 0.3)
#   REPETITIONS         transport repetitions, median reported (default: 3)
#   CLAIM_FILTER, TRANSPORT_FILTER   --benchmark_filter regexes (default: all)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build-bench}
out=${OUT_DIR:-$build/bench-results}
jobs=${JOBS:-2}
mkdir -p "$out"

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" -j"$jobs" tdock_claim_bench tdock_transport_bench

echo "== claim benchmark (dock core, no transport)"
"$build/bench/tdock_claim_bench" \
  --benchmark_filter="${CLAIM_FILTER:-.}" \
  --benchmark_min_time="${CLAIM_MIN_TIME:-0.1}" \
  --benchmark_out="$out/claim.json" --benchmark_out_format=json

echo "== transport benchmark (loopback gRPC)"
"$build/bench/tdock_transport_bench" \
  --benchmark_filter="${TRANSPORT_FILTER:-.}" \
  --benchmark_min_time="${TRANSPORT_MIN_TIME:-0.3}" \
  --benchmark_repetitions="${REPETITIONS:-3}" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$out/transport.json" --benchmark_out_format=json

python3 - "$out/claim.json" "$out/transport.json" <<'PY'
import json
import statistics
import sys


def runs(path):
    with open(path) as f:
        doc = json.load(f)
    return doc["context"], doc["benchmarks"]


def claim_table(path):
    _, benchmarks = runs(path)
    cases = {}
    for b in benchmarks:
        parts = dict(p.split(":", 1) for p in b["name"].split("/") if ":" in p)
        key = (int(parts["rows"]), int(parts["claimers"]))
        cases.setdefault(key, {})[parts["metadata_only"]] = b
    print("\nClaim latency per Get (dock core; p50/p99 ns) and claims/s")
    print(f"{'rows':>7} {'claimers':>8} {'dispatch':>8} | "
          f"{'metadata p50/p99 ns':>20} {'Mclaims/s':>9} | "
          f"{'views p50/p99 ns':>20} {'Mclaims/s':>9}")

    def cell(b):
        if b is None:
            return f"{'-':>20} {'-':>9}"
        if b.get("error_occurred"):
            return f"{'error: ' + b.get('error_message', '')[:13]:>20} {'-':>9}"
        lat = f"{b['get_p50_ns']:.0f}/{b['get_p99_ns']:.0f}"
        return f"{lat:>20} {b['claims_per_s'] / 1e6:>9.2f}"

    for (rows, claimers), by_mode in sorted(cases.items()):
        any_run = by_mode.get("1") or by_mode.get("0")
        dispatch = int(any_run.get("dispatch", 0)) if any_run else 0
        print(f"{rows:>7} {claimers:>8} {dispatch:>8} | "
              f"{cell(by_mode.get('1'))} | {cell(by_mode.get('0'))}")


def transport_table(path):
    context, benchmarks = runs(path)
    samples, errors = {}, set()  # (direction, side, tokens) -> bytes/s per repetition
    for b in benchmarks:
        if b.get("run_type") == "aggregate":
            continue  # recomputed below from the repetitions
        direction, side, tokens = b.get("run_name", b["name"]).split("/")[:3]
        key = (direction, side, int(tokens.split(":")[1]))
        if b.get("error_occurred"):
            errors.add(key)
        else:
            samples.setdefault(key, []).append(b["bytes_per_second"])
    rate = {k: statistics.median(v) for k, v in samples.items()}
    rate.update({k: "error" for k in errors})
    print("\nTransport over loopback gRPC, GB/s (1e9 B/s; median of repetitions)")
    print(f"{'batch':>7} | {'tdock Put':>9} {'base Send':>9} {'ratio':>6} | "
          f"{'tdock Get':>9} {'base Fetch':>10} {'ratio':>6}")

    def gbs(v):  # None: not run (filtered out)
        return "-" if v is None else v if isinstance(v, str) else f"{v / 1e9:.2f}"

    def ratio(a, b):
        ok = all(isinstance(v, float) and v > 0 for v in (a, b))
        return f"{a / b:.2f}x" if ok else "-"

    for tokens in sorted({k[2] for k in rate}):
        mib = 256 * tokens * 4 / (1 << 20)
        tp, bp = rate.get(("put", "tdock", tokens)), rate.get(("put", "baseline", tokens))
        tg, bg = rate.get(("get", "tdock", tokens)), rate.get(("get", "baseline", tokens))
        print(f"{mib:>4.0f}MiB | {gbs(tp):>9} {gbs(bp):>9} {ratio(tp, bp):>6} | "
              f"{gbs(tg):>9} {gbs(bg):>10} {ratio(tg, bg):>6}")
    load = context.get("load_avg")
    if load:
        print(f"load average at start: {', '.join(f'{x:.2f}' for x in load)} "
              f"on {context.get('num_cpus')} CPUs")


claim_table(sys.argv[1])
transport_table(sys.argv[2])
PY
echo
echo "JSON: $out/claim.json $out/transport.json"
