"""Latency of a call against the idle time before it, through the Python client.

    PYTHONPATH=build/python:client/python .venv/bin/python bench/idle_put.py \
        --server build/server/tdock-server [--server before=/tmp/old-tdock-server] \
        [--data_dir] [--gaps 0.01,1.0] [--repeats 20] [--calls put,status]

A producer that writes a row after generating it calls Put once every so often
and waits for nothing else in between. This starts each given tdock-server (a
fresh child process on a free loopback port; with --data_dir each gets its own
temporary journal), creates a one-column dock on it and, per call kind and
idle gap, makes one untimed call, sleeps the gap, and times the next call:

  put     Dock.put of one row (one int32 cell of 3 tokens, a new row each time)
  status  Dock.status (GetDockStatus)

Servers take turns in blocks of --block measurements (the order alternates
each round), so a before/after pair sees the same machine load. Prints, per
server, call and gap, the median, p90 and largest latency in milliseconds and
how many calls took over 20 ms; --json writes the samples too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import numpy as np

import tdock
import tdock.server

ROWS_PER_STEP = 256


class Target:
    """One server under test, its client and the dock the calls go to."""

    def __init__(self, label: str, binary: str, data_dir: str | None, args: list[str]):
        self.label = label
        self.server = tdock.server.LocalServer(binary=binary, data_dir=data_dir,
                                               metrics_listen="", args=args)
        self.server.start()
        self.client = tdock.Client(self.server.address, timeout=30.0)
        self.dock = self.client.create_dock({
            "name": "idle", "num_prompts": ROWS_PER_STEP, "n_samples_per_prompt": 1,
            "steps_in_flight": 2, "length_columns": ["prompt_ids"],
            "columns": {"prompt_ids": {"dtype": "int32", "max_len": 16}},
            "consumers": {"c": {"columns": ["prompt_ids"], "dispatch_size": 1}},
        })
        self.row = 0

    def put(self) -> None:
        step, row = divmod(self.row, ROWS_PER_STEP)
        self.dock.put(step, [row], {"prompt_ids": [np.arange(3, dtype=np.int32)]})
        self.row += 1

    def prepare(self) -> None:
        """Frees the step before the next one would have to wait for it
        (untimed)."""
        step, row = divmod(self.row, ROWS_PER_STEP)
        if row + 2 * 64 >= ROWS_PER_STEP:  # the block may not cross a step
            self.dock.release(step)
            self.row = (step + 1) * ROWS_PER_STEP

    def status(self) -> None:
        self.dock.status()

    def close(self) -> None:
        self.client.close()
        self.server.stop()


def measure(target: Target, call: str, gap: float, count: int) -> list[float]:
    """`count` latencies (seconds) of `call`, each after `gap` seconds idle."""
    target.prepare()
    fn = getattr(target, call)
    fn()  # untimed: the idle time before the first timed call is `gap`, too
    out = []
    for _ in range(count):
        time.sleep(gap)
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def summary(samples: list[float]) -> dict:
    ms = sorted(s * 1e3 for s in samples)
    return {"n": len(ms), "median_ms": statistics.median(ms),
            "p90_ms": ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))],
            "max_ms": ms[-1], "over_20ms": sum(m > 20 for m in ms)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="append", required=True,
                        help="[label=]path of a tdock-server; repeat to compare")
    parser.add_argument("--data_dir", action="store_true",
                        help="run each server with a temporary --data_dir (journal)")
    parser.add_argument("--server_arg", action="append", default=[],
                        help="a further tdock-server flag, e.g. --durability=async")
    parser.add_argument("--gaps", default="0.01,1.0", help="idle seconds before a call")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per case")
    parser.add_argument("--block", type=int, default=5, help="calls per turn of a server")
    parser.add_argument("--calls", default="put,status")
    parser.add_argument("--json", help="write summaries and samples here")
    args = parser.parse_args()
    if not 1 <= args.block <= 100:
        parser.error("--block must be in 1..100")
    gaps = [float(g) for g in args.gaps.split(",")]
    calls = args.calls.split(",")
    for call in calls:
        if call not in ("put", "status"):
            parser.error(f"unknown call {call!r} (put, status)")

    temp = tempfile.TemporaryDirectory(prefix="tdock_idle_put_")
    targets = []
    for i, spec in enumerate(args.server):
        label, _, path = spec.rpartition("=")
        data_dir = f"{temp.name}/{i}" if args.data_dir else None
        targets.append(Target(label or path, path, data_dir, args.server_arg))
    samples = {(t.label, c, g): [] for t in targets for c in calls for g in gaps}
    try:
        rounds = -(-args.repeats // args.block)
        for r in range(rounds):
            order = targets if r % 2 == 0 else targets[::-1]
            count = min(args.block, args.repeats - r * args.block)
            for gap in gaps:
                for call in calls:
                    for target in order:
                        samples[(target.label, call, gap)] += measure(target, call, gap, count)
    finally:
        for target in targets:
            target.close()
        temp.cleanup()

    print(f"{'server':<24} {'call':<7} {'gap_s':>6} {'n':>3} {'median_ms':>10} "
          f"{'p90_ms':>8} {'max_ms':>8} {'>20ms':>6}")
    results = []
    for (label, call, gap), values in samples.items():
        s = summary(values)
        results.append({"server": label, "call": call, "gap_s": gap, **s,
                        "samples_ms": [v * 1e3 for v in values]})
        print(f"{label:<24} {call:<7} {gap:>6g} {s['n']:>3} {s['median_ms']:>10.2f} "
              f"{s['p90_ms']:>8.2f} {s['max_ms']:>8.2f} {s['over_20ms']:>6}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"data_dir": args.data_dir, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
