#!/usr/bin/python3
"""DAPO dynamic sampling on tdock: over-generate groups, drop the failed and
the filtered ones, seal each step at B valid groups, train on exactly those.

    PYTHONPATH=build/python .venv/bin/python examples/dapo_pipeline.py
    ... --steps 3 --groups 8 --n 4 --time_scale 0 --quiet    # a second or two
    ... --server HOST:PORT                                    # a running server
    ... --carry             # valid groups past a step's target go to the next step

It starts tdock-server on a free loopback port (unless --server is given) and
creates a dock of --groups prompts x --n samples per step with room for
--overgen times as many rows (`max_rows_per_step`), and `seal_when:
{consumer: actor_update, groups: --groups}`. One asyncio process runs every
role on tdock.aio:

  rollout (xK)   generates groups of a step as long as it is not sealed; it
                 names samples by uid: the prompt's Put gives new keys, so
                 the server assigns the group's rows, and the responses come
                 back by key. A rollout that fails (--p_fail: an engine
                 error, a tool timeout) drops its group as `failed`.
  reward         scores whole groups; a group whose rewards do not vary
                 (--p_flat) carries no learning signal and is dropped as
                 `filtered`; the others get their GRPO advantages.
  actor_update   --dp balanced ranks taking whole groups of prompt,
                 response and advantages. Advantages are written only for
                 groups that passed the filter, so the dock seals the step
                 at the B-th such group and drops every other group as
                 `surplus`: rollouts still running find their Put refused
                 and move to the next step. With --carry (`seal_when.carry`)
                 the valid groups past the target are carried into the next
                 step instead of thrown away, and count toward its target.

Every value is a deterministic function of (--seed, step, prompt, sample).
Checked at the end (exit status 1 otherwise): every row trained on belongs to
a group that did not fail and whose rewards vary, with the advantages
recomputed here; each step trained on exactly B whole groups (with --carry:
at least as many as its own valid groups, up to B, and no group twice); no
failed group reached the reward role; no Get waited past --wait seconds (a
step never waits for a dropped or never-written row); every step was
released (with --carry, but the one after the last, which holds what the
last carried).
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
        "name": args.dock, "num_prompts": args.groups, "n_samples_per_prompt": args.n,
        "max_rows_per_step": capacity * args.n, "steps_in_flight": 2, "length_columns": ["prompt_ids", "response_ids"],
        "columns": {"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
                    "uid": {"dtype": "string"},
                    "rewards": {"dtype": "float32", "max_len": 1},
                    "advantages": {"dtype": "float32", "max_len": 1}},
        "consumers": {
            # A lease: with --carry, a group the reward role is scoring stays
            # in its step (only groups nobody is working on are carried).
            "reward": {"columns": ["prompt_ids", "response_ids", "uid"], "whole_groups": True,
                       "dispatch_size": args.n, "lease_ms": 600_000},
            "actor_update": {"columns": ["prompt_ids", "response_ids", "uid", "advantages"],
                             "whole_groups": True, "policy": "balanced", "dp_size": args.dp,
                             "dispatch_size": args.groups * args.n // args.dp,
                             "micro_batch": {"max_tokens": 4096}}},
        # With --carry, finished rollouts past the target (scored or not) go
        # on to the next step.
        "seal_when": {"consumer": "actor_update", "groups": args.groups, "carry": args.carry,
                      "carry_columns": ["prompt_ids", "response_ids", "uid"] if args.carry
                      else []},
    }


class Run:
    def __init__(self, args, dock):
        self.args, self.dock, self.plan = args, dock, Plan(args)
        self.capacity = math.ceil(args.groups * args.overgen)
        self.sealed = defaultdict(asyncio.Event)   # step -> the rollouts learned it
        self.log = defaultdict(lambda: defaultdict(int))  # step -> what happened
        self.reward_saw = set()                    # (step, prompt)
        self.trained = defaultdict(list)           # step -> [(row, key, uid, advantage)]
        self.failures: list[str] = []

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds * self.args.time_scale)

    def fail(self, what: str) -> None:
        self.failures.append(what)

    # ---- rollout
    async def rollout(self, worker: int, queue: asyncio.Queue) -> None:
        while True:
            step, p = await queue.get()
            try:
                await self.generate(worker, step, p)
            finally:
                queue.task_done()

    async def generate(self, worker: int, step: int, p: int) -> None:
        """One prompt's group: its prompt goes in first under new keys (the
        server assigns a group of rows; the step starts, waiting for its
        partition if need be), then the responses by key, or a drop."""
        if self.sealed[step].is_set():
            return  # the step is full: the seal dropped this group already
        n = self.args.n
        keys = [f"s{step}p{p}i{i}" for i in range(n)]
        try:
            ack = await self.dock.put(step, None, {"prompt_ids": [self.plan.prompt(step, p)] * n,
                                                   "uid": [f"s{step}p{p}"] * n},
                                      keys=keys, wait=60)
            g = ack.assigned[0] // n
            await self.sleep(0.02 + 0.05 * self.plan.rng("gen", step, p).random())
            if self.plan.failed(step, p):
                dropped = await self.dock.drop(step, groups=[g], reason="failed")
                self.log[step]["failed"] += dropped > 0  # 0: dropped as surplus already
                return
            await self.dock.put(step, None, {"response_ids": [self.plan.response(step, p, i)
                                                              for i in range(n)]}, keys=keys)
            self.log[step]["generated"] += 1
        except (tdock.errors.StepSealed, tdock.errors.StepReleased, tdock.errors.RowDropped,
                tdock.errors.CapacityExceeded):
            # Sealed (no new rows join it), its rows dropped as surplus (or
            # carried) while generated, released, or (with --carry) its room
            # taken by groups carried into it: the step is full.
            self.sealed[step].set()
        except tdock.errors.NotFound as e:
            # Dropped as surplus before its responses came: its keys are free,
            # so they find no row.
            if "no live row" not in str(e):
                self.fail(f"rollout {worker}: {e}")
            self.sealed[step].set()
        except tdock.errors.FailedPrecondition as e:
            self.fail(f"rollout {worker}: {e}")

    async def produce(self) -> None:
        queue: asyncio.Queue = asyncio.Queue(maxsize=self.args.rollout_workers)
        workers = [asyncio.create_task(self.rollout(w, queue))
                   for w in range(self.args.rollout_workers)]
        for step in range(self.args.steps):
            for p in range(self.capacity):
                if self.sealed[step].is_set():
                    break
                await queue.put((step, p))
        await queue.join()
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    # ---- reward
    async def reward(self) -> None:
        for step in range(self.args.steps):
            async for batch in self.dock.iter("reward", step=step, wait=self.args.wait):
                g = int(batch.rows[0]) // self.args.n
                # The step the group was generated for (an earlier one if it
                # was carried), and its prompt.
                t, p = (int(x) for x in batch.cell("uid", 0)[1:].split("p"))
                self.reward_saw.add((t, p))
                rewards = self.plan.rewards(t, p)
                filtered = rewards.std() == 0
                await self.sleep(0.01)
                try:
                    await self.dock.put(step, batch.rows, {"rewards": [[r] for r in rewards]},
                                        ack=batch if filtered else False)
                    if filtered:
                        await self.dock.drop(step, groups=[g], reason="filtered")
                        self.log[step]["filtered"] += 1
                        continue
                    await self.dock.put(step, batch.rows,
                                        {"advantages": [[a] for a in advantages(rewards)]},
                                        ack=batch)
                    self.log[step]["valid"] += 1
                except tdock.errors.FailedPrecondition as e:
                    # Sealed meanwhile: not needed (its lease ended with it).
                    if e.drop_reason != "surplus" and not isinstance(e, tdock.errors.LeaseEnded):
                        self.fail(f"reward step {step} prompt {p}: {e}")

    # ---- actor update
    async def train(self, rank: int) -> None:
        for step in range(self.args.steps):
            async for batch in self.dock.iter("actor_update", rank=rank, step=step,
                                              wait=self.args.wait):
                uids, adv = batch.cells("uid"), batch.cells("advantages")
                self.trained[step] += [(int(r), k, u, float(a[0]))
                                       for r, k, u, a in zip(batch.rows, batch.keys, uids, adv)]
                await self.sleep(0.05)

    def check(self, status) -> None:
        n = self.args.n
        seen = set()  # (step generated for, prompt) trained on
        for step in range(self.args.steps):
            groups = defaultdict(list)  # (step generated for, prompt) -> [(row, sample, adv)]
            for row, key, uid, adv in self.trained[step]:
                origin, rest = key[1:].split("p")
                t = int(origin)
                p, i = (int(x) for x in rest.split("i"))
                groups[t, p].append((row, i, adv))
                if uid != f"s{t}p{p}" or t > step or (t != step and not self.args.carry):
                    self.fail(f"step {step} row {row}: uid {uid!r}, key {key!r}")
            # B groups, or every valid one when fewer passed: the step then
            # ends once every group is written or dropped. Carried groups
            # from the step before may add to its own.
            own = sum(self.plan.valid(step, p) for p in range(self.capacity))
            want = min(self.args.groups, own)
            if len(groups) != want and not (self.args.carry and
                                            want <= len(groups) <= self.args.groups):
                self.fail(f"step {step}: trained on {len(groups)} groups, not {want}")
            for (t, p), rows in groups.items():
                if (t, p) in seen:
                    self.fail(f"step {step}: prompt {p} of step {t} trained on twice")
                seen.add((t, p))
                rewards = self.plan.rewards(t, p)
                if not self.plan.valid(t, p):
                    self.fail(f"step {step}: trained on prompt {p} of step {t}, which "
                              f"{'failed' if self.plan.failed(t, p) else 'was filtered'}")
                    continue
                g = rows[0][0] // n
                if sorted((r, i) for r, i, _ in rows) != [(g * n + i, i) for i in range(n)]:
                    self.fail(f"step {step} prompt {p}: rows {sorted(r for r, _, _ in rows)}")
                want = advantages(rewards)
                for row, i, adv in rows:
                    if abs(adv - want[i]) > 1e-5:
                        self.fail(f"step {step} row {row}: advantage {adv}")
            self.log[step]["trained"] = len(groups)
            self.log[step]["carried in"] = sum(t != step for t, _ in groups)
            for p in range(self.capacity):
                if self.plan.failed(step, p) and (step, p) in self.reward_saw:
                    self.fail(f"step {step}: failed prompt {p} reached the reward role")
        # With --carry the step after the last holds what the last carried.
        left = [s.step for s in status.steps
                if not (self.args.carry and s.step == self.args.steps)]
        if left:
            self.fail(f"steps left live: {left}")

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
          f"{'trained':>7} {'carried in':>10}")
    for step in range(run.args.steps):
        log = run.log[step]
        print(f"{step:>4} {log['generated']:>9} {log['failed']:>6} {log['filtered']:>8} "
              f"{log['valid']:>5} {log['trained']:>7} {log['carried in']:>10}")
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
    ap.add_argument("--carry", action="store_true",
                    help="seal_when.carry: valid groups past a step's target go to the next step")
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
