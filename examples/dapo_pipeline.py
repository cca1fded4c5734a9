#!/usr/bin/python3
"""DAPO dynamic sampling on tdock: over-generate groups, drop the failed and
the filtered ones, seal each step at B valid groups, train on exactly those.

    PYTHONPATH=build/python .venv/bin/python examples/dapo_pipeline.py
    ... --steps 3 --groups 8 --n 4 --time_scale 0 --quiet    # a second or two
    ... --server HOST:PORT                                    # a running server

It starts tdock-server on a free loopback port (unless --server is given) and
creates a dock whose steps hold up to --overgen x --groups groups of --n
rows, with `seal_when: {consumer: actor_update, groups: --groups}`. One
asyncio process runs every role on tdock.aio:

  rollout (xK)   generates groups of a step as long as it is not sealed; a
                 rollout that fails (--p_fail: an engine error, a tool
                 timeout) drops its group as `failed` before writing it.
  reward         scores whole groups; a group whose rewards do not vary
                 (--p_flat) carries no learning signal and is dropped as
                 `filtered`; the others get their GRPO advantages.
  actor_update   --dp balanced ranks taking whole groups of prompt,
                 response and advantages. Advantages are written only for
                 groups that passed the filter, so the dock seals the step
                 at the B-th such group and drops every other group as
                 `surplus`: rollouts still running find their Put refused
                 and move to the next step.

Every value is a deterministic function of (--seed, step, group, sample).
Checked at the end (exit status 1 otherwise): every row trained on belongs to
a group that did not fail and whose rewards vary, with the advantages
recomputed here; each step trained on exactly B whole groups; no failed
group reached the reward role; no Get waited past --wait seconds (a step
never waits for a dropped or never-written row); every step was released.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import sys
import time
from collections import defaultdict

import numpy as np

import tdock
import tdock.aio
from tdock.server import LocalServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Plan:
    """What each (step, group) turns out to be, from the seed alone."""

    def __init__(self, args):
        self.args = args

    def rng(self, *key) -> random.Random:
        return random.Random("/".join(map(str, (self.args.seed,) + key)))  # stable

    def valid(self, step: int, g: int) -> bool:
        return not self.failed(step, g) and self.rewards(step, g).std() > 0

    def failed(self, step: int, g: int) -> bool:
        return self.rng("fail", step, g).random() < self.args.p_fail

    def rewards(self, step: int, g: int) -> np.ndarray:
        r = self.rng("reward", step, g)
        if r.random() < self.args.p_flat:  # every sample right, or every one wrong
            return np.full(self.args.n, float(r.random() < 0.5), np.float32)
        rewards = np.array([float(r.random() < 0.5) for _ in range(self.args.n)], np.float32)
        rewards[0], rewards[1] = 1.0, 0.0  # they vary
        return rewards

    def prompt(self, step: int, g: int) -> np.ndarray:
        return np.arange(8 + (g * 7) % 24, dtype=np.int32) + 1000 * g

    def response(self, step: int, g: int, i: int) -> np.ndarray:
        length = 16 + self.rng("len", step, g, i).randrange(200)
        return np.full(length, step * 100 + i, np.int32)


def advantages(rewards: np.ndarray) -> np.ndarray:
    return ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).astype(np.float32)


def dock_spec(args) -> dict:
    capacity = math.ceil(args.groups * args.overgen)
    return {
        "name": args.dock, "num_prompts": capacity, "n_samples_per_prompt": args.n,
        "steps_in_flight": 2, "length_columns": ["prompt_ids", "response_ids"],
        "columns": {"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
                    "uid": {"dtype": "string"},
                    "rewards": {"dtype": "float32", "max_len": 1},
                    "advantages": {"dtype": "float32", "max_len": 1}},
        "consumers": {
            "reward": {"columns": ["prompt_ids", "response_ids", "uid"], "whole_groups": True,
                       "dispatch_size": args.n},
            "actor_update": {"columns": ["prompt_ids", "response_ids", "uid", "advantages"],
                             "whole_groups": True, "policy": "balanced", "dp_size": args.dp,
                             "dispatch_size": args.groups * args.n // args.dp,
                             "micro_batch": {"max_tokens": 4096}}},
        "seal_when": {"consumer": "actor_update", "groups": args.groups},
    }


class Run:
    def __init__(self, args, dock):
        self.args, self.dock, self.plan = args, dock, Plan(args)
        self.capacity = math.ceil(args.groups * args.overgen)
        self.sealed = defaultdict(asyncio.Event)   # step -> the rollouts learned it
        self.log = defaultdict(lambda: defaultdict(int))  # step -> what happened
        self.reward_saw = set()                    # (step, group)
        self.trained = defaultdict(list)           # step -> [(row, uid, advantage)]
        self.failures: list[str] = []

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds * self.args.time_scale)

    def fail(self, what: str) -> None:
        self.failures.append(what)

    # ---- rollout
    async def rollout(self, worker: int, queue: asyncio.Queue) -> None:
        while True:
            step, g = await queue.get()
            try:
                await self.generate(worker, step, g)
            finally:
                queue.task_done()

    async def generate(self, worker: int, step: int, g: int) -> None:
        """One group: its prompt goes in first (the step starts, waiting for
        its partition if need be), then the responses, or a drop."""
        if self.sealed[step].is_set():
            return  # the step is full: the seal dropped this group already
        rows = list(range(g * self.args.n, (g + 1) * self.args.n))
        try:
            await self.dock.put(step, rows, {"prompt_ids": [self.plan.prompt(step, g)] * self.args.n,
                                             "uid": [f"s{step}g{g}"] * self.args.n}, wait=60)
            await self.sleep(0.02 + 0.05 * self.plan.rng("gen", step, g).random())
            if self.plan.failed(step, g):
                dropped = await self.dock.drop(step, groups=[g], reason="failed")
                self.log[step]["failed"] += dropped > 0  # 0: dropped as surplus already
                return
            await self.dock.put(step, rows, {"response_ids": [self.plan.response(step, g, i)
                                                              for i in range(self.args.n)]})
            self.log[step]["generated"] += 1
        except tdock.errors.FailedPrecondition as e:
            # Dropped as surplus (the step sealed while this group was
            # generated) or the step already released: it is full.
            if "surplus" not in str(e) and "released" not in str(e):
                self.fail(f"rollout {worker}: {e}")
            self.sealed[step].set()

    async def produce(self) -> None:
        queue: asyncio.Queue = asyncio.Queue(maxsize=self.args.rollout_workers)
        workers = [asyncio.create_task(self.rollout(w, queue))
                   for w in range(self.args.rollout_workers)]
        for step in range(self.args.steps):
            for g in range(self.capacity):
                if self.sealed[step].is_set():
                    break
                await queue.put((step, g))
        await queue.join()
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    # ---- reward
    async def reward(self) -> None:
        for step in range(self.args.steps):
            async for batch in self.dock.iter("reward", step=step, wait=self.args.wait):
                g = int(batch.rows[0]) // self.args.n
                self.reward_saw.add((step, g))
                rewards = self.plan.rewards(step, g)
                await self.sleep(0.01)
                try:
                    await self.dock.put(step, batch.rows, {"rewards": [[r] for r in rewards]})
                    if rewards.std() == 0:
                        await self.dock.drop(step, groups=[g], reason="filtered")
                        self.log[step]["filtered"] += 1
                        continue
                    await self.dock.put(step, batch.rows,
                                        {"advantages": [[a] for a in advantages(rewards)]})
                    self.log[step]["valid"] += 1
                except tdock.errors.FailedPrecondition as e:
                    if "surplus" not in str(e):  # sealed meanwhile: not needed
                        self.fail(f"reward step {step} group {g}: {e}")

    # ---- actor update
    async def train(self, rank: int) -> None:
        for step in range(self.args.steps):
            async for batch in self.dock.iter("actor_update", rank=rank, step=step,
                                              wait=self.args.wait):
                uids, adv = batch.cells("uid"), batch.cells("advantages")
                self.trained[step] += [(int(r), u, float(a[0]))
                                       for r, u, a in zip(batch.rows, uids, adv)]
                await self.sleep(0.05)

    def check(self, status) -> None:
        n = self.args.n
        for step in range(self.args.steps):
            groups = defaultdict(list)
            for row, uid, adv in self.trained[step]:
                g = row // n
                groups[g].append((row, adv))
                if uid != f"s{step}g{g}":
                    self.fail(f"step {step} row {row}: uid {uid!r}")
            # B groups, or every valid one when fewer passed: the step then
            # ends once every group is written or dropped.
            want = min(self.args.groups,
                       sum(self.plan.valid(step, g) for g in range(self.capacity)))
            if len(groups) != want:
                self.fail(f"step {step}: trained on {len(groups)} groups, not {want}")
            for g, rows in groups.items():
                rewards = self.plan.rewards(step, g)
                if not self.plan.valid(step, g):
                    self.fail(f"step {step}: trained on group {g}, which "
                              f"{'failed' if self.plan.failed(step, g) else 'was filtered'}")
                    continue
                if sorted(r for r, _ in rows) != list(range(g * n, (g + 1) * n)):
                    self.fail(f"step {step} group {g}: rows {sorted(r for r, _ in rows)}")
                want = advantages(rewards)
                for row, adv in rows:
                    if abs(adv - want[row - g * n]) > 1e-5:
                        self.fail(f"step {step} row {row}: advantage {adv}")
            for g in range(self.capacity):
                if self.plan.failed(step, g) and (step, g) in self.reward_saw:
                    self.fail(f"step {step}: failed group {g} reached the reward role")
        if status.steps:
            self.fail(f"steps left live: {[s.step for s in status.steps]}")

    async def main(self) -> float:
        start = time.monotonic()
        tasks = [self.produce(), self.reward()] + [self.train(r) for r in range(self.args.dp)]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                self.fail(f"{type(r).__name__}: {r}")
        return time.monotonic() - start


def report(run: Run, status, seconds: float) -> None:
    print(f"{'step':>4} {'generated':>9} {'failed':>6} {'filtered':>8} {'valid':>5} "
          f"{'trained':>7}")
    for step in range(run.args.steps):
        log = run.log[step]
        trained = len({row // run.args.n for row, _, _ in run.trained[step]})
        print(f"{step:>4} {log['generated']:>9} {log['failed']:>6} {log['filtered']:>8} "
              f"{log['valid']:>5} {trained:>7}")
    print(f"rows dropped by reason: {status.dropped}; {seconds:.2f} s")


async def amain(args, address: str) -> int:
    async with tdock.aio.Client(address, timeout=60) as client:
        dock = await client.create_dock(dock_spec(args))
        run = Run(args, dock)
        seconds = await run.main()
        status = await dock.status()
        run.check(status)
        if not args.quiet:
            report(run, status, seconds)
        if not args.keep_dock:
            await client.delete_dock(args.dock)
    for f in run.failures[:20]:
        print("FAIL:", f, file=sys.stderr)
    print("dapo pipeline:", "FAILED" if run.failures else "OK", f"({args.steps} steps of "
          f"{args.groups} groups x {args.n}, dropped {status.dropped})")
    return 1 if run.failures else 0


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default, what in [
            ("steps", 3, "training steps"), ("groups", 8, "B: groups trained on per step"),
            ("n", 4, "samples per prompt"), ("dp", 2, "actor_update ranks"),
            ("rollout_workers", 4, "rollout tasks generating at once"), ("seed", 1, "seed")]:
        ap.add_argument(f"--{flag}", type=int, default=default, help=what)
    ap.add_argument("--overgen", type=float, default=3.0,
                    help="groups a step may hold, as a multiple of --groups")
    ap.add_argument("--p_fail", type=float, default=0.15, help="chance a rollout fails")
    ap.add_argument("--p_flat", type=float, default=0.3,
                    help="chance a group's rewards do not vary (filtered out)")
    ap.add_argument("--time_scale", type=float, default=1.0,
                    help="multiplies the simulated work (0: none)")
    ap.add_argument("--wait", type=float, default=60.0,
                    help="bound on any Get's wait, seconds (a step that waits longer fails)")
    ap.add_argument("--server", help="HOST:PORT of a running tdock-server (default: start one)")
    ap.add_argument("--server_bin", default=os.environ.get(
        "TDOCK_SERVER_BIN", os.path.join(REPO, "build", "server", "tdock-server")))
    ap.add_argument("--dock", default=f"dapo-{os.getpid()}")
    ap.add_argument("--keep_dock", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no table, just the verdict")
    args = ap.parse_args(argv)
    if args.groups * args.n % args.dp:
        ap.error("--groups x --n must divide by --dp")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.server:
        return asyncio.run(amain(args, args.server))
    with LocalServer(binary=args.server_bin, metrics_listen="") as server:
        return asyncio.run(amain(args, server.address))


if __name__ == "__main__":
    sys.exit(main())
