#!/usr/bin/python3
"""Asynchronous RL on tdock: rollout runs ahead of training under admission
control and a staleness bound, beside the synchronous pipeline on the same
simulated workload.

    PYTHONPATH=build/python .venv/bin/python examples/async_pipeline.py
    ... --steps 6 --time_scale 0.3 --quiet      # a few seconds
    ... --server HOST:PORT                       # a running server

It starts tdock-server on a free loopback port (unless --server is given)
and runs one asyncio process twice on the same workload (every generation
and training time is a function of --seed and the sample alone):

  async   a dock whose trainer ("actor") has max_staleness --max_staleness.
          K rollout workers (--rollout_workers) loop: reserve one group of n
          rows (Dock.reserve without a version: the server grants rows once
          a step can train them within the bound, and names the weights
          version to generate with), generate, write the group naming the
          reservation. The trainer takes each step whole under a lease,
          trains, sets the next version and acknowledges (which releases the
          step); rollout meanwhile runs up to the bound ahead.
  sync    the same with max_staleness 0: a step's rollout is admitted only
          once the previous step is trained, so generation and training
          alternate (the on-policy pipeline).

A rollout worker sometimes dies mid-generation (--p_die): its reservation is
never written and expires after --deadline seconds, so its rows do not hold
the step; the trainer trains on the rest.

Printed: the wall time of --steps steps in each mode, the staleness the
trainer actually trained on (its version minus each row's), and the time
rollout workers spent waiting for admission and the trainer spent waiting
for data. Checked (exit status 1 otherwise): no row trained on is older than
the bound; no row was dropped as stale (stale: drop is off, and admission
keeps rollout within the bound); every row written was trained on exactly
once; every group not written expired; every step was released.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections import Counter

import numpy as np

import tdock
import tdock.aio
from tdock.server import LocalServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Workload:
    """Simulated times and contents, from the seed alone: the group that
    lands in a given (step, group) slot takes the same time, and dies or
    not, in both modes."""

    def __init__(self, args):
        self.args = args

    def rng(self, *key) -> random.Random:
        return random.Random("/".join(map(str, (self.args.seed,) + key)))

    def generation_seconds(self, step: int, g: int) -> float:
        # Long-tailed, as LLM rollouts are: most short, a few long.
        return self.args.gen_time * (0.5 + self.rng("gen", step, g).expovariate(2.0))

    def dies(self, step: int, g: int) -> bool:
        return self.rng("die", step, g).random() < self.args.p_die

    def prompt(self, k: int) -> np.ndarray:
        return np.arange(8 + k % 16, dtype=np.int32)

    def response(self, k: int, i: int) -> np.ndarray:
        return np.full(16 + self.rng("len", k, i).randrange(64), i, np.int32)


def dock_spec(args, name: str, bound: int) -> dict:
    return {
        "name": name, "num_prompts": args.groups, "n_samples_per_prompt": args.n,
        "steps_in_flight": args.max_staleness + 2, "length_columns": ["prompt_ids", "response_ids"],
        "columns": {"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"}},
        "consumers": {"actor": {"columns": ["prompt_ids", "response_ids"], "whole_groups": True,
                                "dispatch_size": args.groups * args.n,
                                "max_staleness": bound, "lease_ms": 600000}},
    }


class Mode:
    """One run: rollout workers and a trainer on one dock."""

    def __init__(self, args, dock, bound: int):
        self.args, self.dock, self.bound = args, dock, bound
        self.work = Workload(args)
        self.next_group = 0         # k of the next group generated
        self.written: set[tuple[int, int]] = set()   # (step, row)
        self.abandoned: list[tuple[int, list[int]]] = []  # (step, rows) never written
        self.trained: Counter = Counter()            # (step, row) -> times
        self.staleness: Counter = Counter()          # trained rows by staleness
        self.producer_wait = 0.0
        self.trainer_wait = 0.0
        self.training = True
        self.failures: list[str] = []

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds * self.args.time_scale)

    async def rollout(self) -> None:
        n = self.args.n
        while self.training:
            start = time.monotonic()
            r = await self.dock.reserve(group_sizes=[n], wait=1.0,
                                        deadline=self.args.deadline * max(self.args.time_scale, 0.05))
            self.producer_wait += time.monotonic() - start
            if r.timed_out:
                continue
            k = self.next_group
            self.next_group += 1
            g = r.rows[0] // n
            # Generate with the weights of r.version (the dock's when granted).
            await self.sleep(self.work.generation_seconds(r.step, g))
            if self.work.dies(r.step, g):
                self.abandoned.append((r.step, r.rows))  # the reservation expires
                continue
            try:
                await self.dock.put(r.step, None, {
                    "prompt_ids": [self.work.prompt(k)] * n,
                    "response_ids": [self.work.response(k, i) for i in range(n)]},
                    reservation=r)
            except tdock.errors.Expired:  # slower than the deadline: dropped
                self.abandoned.append((r.step, r.rows))  # expired, as a death's
                continue
            except tdock.errors.FailedPrecondition as e:
                self.failures.append(f"rollout: {e}")
                continue
            self.written.update((r.step, row) for row in r.rows)

    async def train(self) -> None:
        for step in range(self.args.steps):
            version = step  # the trainer's weights: one update per step
            start = time.monotonic()
            batch = await self.dock.get("actor", step=step, wait=self.args.wait)
            self.trainer_wait += time.monotonic() - start
            if not batch.end_of_step:
                self.failures.append(f"step {step}: not whole within {self.args.wait} s")
                break
            for row, v in zip(batch.rows.tolist(), batch.versions.tolist()
                              if batch.versions is not None else [-1] * len(batch.rows)):
                self.trained[(step, row)] += 1
                self.staleness[version - v] += 1
            await self.sleep(self.args.train_time)
            # The update publishes the next version; then the lease is
            # acknowledged, which releases the step (admission counts on it).
            await self.dock.set_version(version + 1)
            await self.dock.ack(batch)
        self.training = False

    async def run(self) -> float:
        start = time.monotonic()
        workers = [asyncio.create_task(self.rollout()) for _ in range(self.args.rollout_workers)]
        await self.train()
        await asyncio.gather(*workers)
        return time.monotonic() - start

    def check(self, status) -> None:
        over = {s: c for s, c in self.staleness.items() if s > self.bound or s < 0}
        if over:
            self.failures.append(f"rows trained past the bound {self.bound}: {dict(over)}")
        # Admission kept rollout within the bound: no row was passed over.
        stale = status.staleness["actor"].stale_rows
        if stale:
            self.failures.append(f"{stale} rows past the bound were generated (passed over)")
        if status.dropped.get("stale", 0):
            self.failures.append(f"{status.dropped['stale']} rows dropped as stale")
        if any(times > 1 for times in self.trained.values()):
            self.failures.append("a row was trained on twice")
        trained_steps = {step for step, _ in self.trained}
        untrained = {(s, r) for s, r in self.written if s in trained_steps} - set(self.trained)
        if untrained:
            self.failures.append(f"{len(untrained)} rows written and never trained on")
        # Every group abandoned in a trained step expired (else its step
        # would have held the trainer); none other did.
        must = sum(len(rows) for step, rows in self.abandoned if step in trained_steps)
        may = sum(len(rows) for _, rows in self.abandoned)
        expired = status.dropped.get("expired", 0)
        if not must <= expired <= may:
            self.failures.append(f"{expired} rows expired; {must} to {may} expected")
        if any(s.step < self.args.steps for s in status.steps):
            self.failures.append(f"steps left live: {[s.step for s in status.steps]}")


async def run_mode(client, args, label: str, bound: int):
    name = f"{args.dock}-{label}"
    dock = await client.create_dock(dock_spec(args, name, bound))
    mode = Mode(args, dock, bound)
    seconds = await mode.run()
    status = await dock.status()
    mode.check(status)
    if not args.keep_dock:
        await client.delete_dock(name)
    return mode, seconds, status


def report(label: str, mode: Mode, seconds: float, status) -> None:
    rows = sum(mode.staleness.values())
    dist = ", ".join(f"{s}: {c} ({100 * c / rows:.0f}%)" for s, c in sorted(mode.staleness.items()))
    print(f"{label:>5}: {seconds:6.2f} s for {mode.args.steps} steps; staleness trained on "
          f"{{{dist}}}; rollout waited {mode.producer_wait:.2f} s for admission "
          f"(over {mode.args.rollout_workers} workers), trainer waited {mode.trainer_wait:.2f} s "
          f"for data; admission waits {status.admission_waits}; dropped {status.dropped}")


async def amain(args, address: str) -> int:
    async with tdock.aio.Client(address, timeout=60) as client:
        results = {}
        for label, bound in (("async", args.max_staleness), ("sync", 0)):
            results[label] = await run_mode(client, args, label, bound)
    failures = [f"{label}: {f}" for label, (mode, _, _) in results.items() for f in mode.failures]
    if not args.quiet:
        for label, (mode, seconds, status) in results.items():
            report(label, mode, seconds, status)
    (_, t_async, _), (_, t_sync, _) = results["async"], results["sync"]
    for f in failures[:20]:
        print("FAIL:", f, file=sys.stderr)
    print("async pipeline:", "FAILED" if failures else "OK",
          f"({args.steps} steps of {args.groups} groups x {args.n}, max_staleness "
          f"{args.max_staleness}: {t_async:.2f} s async vs {t_sync:.2f} s sync, "
          f"{t_sync / t_async:.2f}x)")
    return 1 if failures else 0


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default, what in [
            ("steps", 8, "training steps"), ("groups", 8, "groups trained on per step"),
            ("n", 4, "samples per prompt"), ("rollout_workers", 4, "rollout workers"),
            ("max_staleness", 1, "the trainer's bound, in versions (async mode)"),
            ("seed", 1, "seed")]:
        ap.add_argument(f"--{flag}", type=int, default=default, help=what)
    ap.add_argument("--gen_time", type=float, default=0.1, help="mean seconds per group")
    ap.add_argument("--train_time", type=float, default=0.2, help="seconds per step")
    ap.add_argument("--p_die", type=float, default=0.02,
                    help="chance a rollout worker dies mid-generation")
    ap.add_argument("--deadline", type=float, default=0.5,
                    help="seconds a reservation lasts (scaled by --time_scale)")
    ap.add_argument("--time_scale", type=float, default=1.0,
                    help="multiplies the simulated work")
    ap.add_argument("--wait", type=float, default=60.0, help="bound on the trainer's wait")
    ap.add_argument("--server", help="HOST:PORT of a running tdock-server (default: start one)")
    ap.add_argument("--server_bin", default=os.environ.get(
        "TDOCK_SERVER_BIN", os.path.join(REPO, "build", "server", "tdock-server")))
    ap.add_argument("--dock", default=f"async-{os.getpid()}")
    ap.add_argument("--keep_dock", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="the verdict and the comparison only")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.server:
        return asyncio.run(amain(args, args.server))
    with LocalServer(binary=args.server_bin, metrics_listen="") as server:
        return asyncio.run(amain(args, server.address))


if __name__ == "__main__":
    sys.exit(main())
