#!/usr/bin/env python3
"""A verl-style GRPO step loop on tdock and Ray: tdock-server runs as a Ray
actor (tdock.ray), a rollout actor writes responses and uids, and the two
data-parallel ranks of the actor update, each a Ray actor, take their
token-balanced shares as verl DataProtos (tdock.verl), compute GRPO
advantages per uid, train over the server's micro-batch plan and write their
log-probs back; the driver logs verl's balance metrics.

    .venv/bin/python examples/verl_ray.py --server_bin build/server/tdock-server

Needs ray, torch and verl (scripts/python-env.sh installs them). The model is
a stand-in: responses and log-probs are deterministic functions of the
prompt, so the driver checks every row that was trained on.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import ray
import torch

import tdock
import tdock.ray
from tdock import verl as tv

DP, N = 2, 4  # actor ranks; samples per prompt


def spec(prompts: int) -> dict:
    return {
        "name": "verl", "num_prompts": prompts, "n_samples_per_prompt": N,
        "steps_in_flight": 2, "length_columns": ["prompt_ids", "response_ids"],
        "columns": {"prompt_ids": {"dtype": "int32"},
                    "response_ids": {"dtype": "int32", "max_len": 512},
                    "uid": {"dtype": "string"},
                    "score": {"dtype": "float32", "max_len": 1},
                    "old_log_probs": {"dtype": "float32", "max_len": 512}},
        "consumers": {
            "rollout": {"columns": ["prompt_ids"], "whole_groups": True,
                        "dispatch_size": N, "lease_ms": 60_000},
            "actor": {"columns": ["prompt_ids", "response_ids", "uid", "score"],
                      "whole_groups": True, "dp_size": DP, "policy": "BALANCED",
                      "dispatch_size": prompts * N // DP,
                      "micro_batch": {"max_tokens": 1024}},
            "metrics": {"columns": ["old_log_probs"]}}}


def response_of(prompt: np.ndarray, sample: int) -> np.ndarray:
    rng = np.random.default_rng((int(prompt[0]), sample))
    return rng.integers(1, 32000, int(rng.integers(8, 400)), dtype=np.int32)


def log_probs_of(response: torch.Tensor) -> torch.Tensor:
    return -(response.float() % 97) / 97.0


@ray.remote(num_cpus=0)
class Rollout:
    def run(self, server: tdock.ray.ServerHandle, steps: int) -> int:
        dock, rows = server.dock("verl"), 0
        for step in range(steps):
            for b in dock.iter("rollout", step=step):
                responses = [response_of(b.row("prompt_ids", i), r % N)
                             for i, r in enumerate(b.rows.tolist())]
                dock.put(b.step, b.rows, {
                    "response_ids": responses,
                    "uid": [f"s{b.step}-g{r // N}" for r in b.rows.tolist()],
                    "score": np.array([len(x) % 7 / 7 for x in responses], np.float32)},
                    ack=b)
                rows += len(b)
        return rows


@ray.remote(num_cpus=0)
class ActorRank:
    def __init__(self, server: tdock.ray.ServerHandle, rank: int):
        self.dock, self.rank = server.dock("verl"), rank

    def train_step(self, step: int) -> dict:
        batch = self.dock.get("actor", rank=self.rank, step=step, wait=120)
        data = tv.to_data_proto(batch)  # verl's layout, uid in non_tensor_batch
        scores = data.batch["score"]
        uids = data.non_tensor_batch["uid"]
        advantages = torch.zeros_like(scores)
        for uid in set(uids.tolist()):  # GRPO: within each uid's group
            idx = torch.tensor(np.flatnonzero(uids == uid))
            group = scores[idx]
            advantages[idx] = (group - group.mean()) / (group.std() + 1e-6)
        data.batch["advantages"] = advantages
        micro, plan = tv.micro_batches(data, batch)
        log_probs = torch.zeros(data.batch["responses"].shape)
        for mb, rows in zip(micro, plan):  # the "update", micro-batch by micro-batch
            log_probs[rows] = log_probs_of(mb.batch["responses"]) * mb.batch["response_mask"]
        data.batch["old_log_probs"] = log_probs
        self.dock.put(step, batch.rows, tv.put_columns(data, ["old_log_probs"]))
        return {"rows": batch.rows.tolist(), "micro_batches": len(micro),
                **tv.balance_metrics(batch, prefix="global_seqlen")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server_bin", default=os.environ.get("TDOCK_SERVER_BIN"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    args = ap.parse_args(argv)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 << 20)
    try:
        server = tdock.ray.start_server("tdock-verl", binary=args.server_bin, num_cpus=0)
        dock = server.client().create_dock(spec(args.prompts))
        rows = args.prompts * N
        rollout = Rollout.remote().run.remote(server, args.steps)
        ranks = [ActorRank.remote(server, r) for r in range(DP)]
        for step in range(args.steps):
            dock.put(step, range(rows), {"prompt_ids": [
                np.arange(3 + r // N % 5, dtype=np.int32) + 1000 * step + r // N
                for r in range(rows)]}, wait=120)
            results = ray.get([r.train_step.remote(step) for r in ranks])
            trained = sorted(r for res in results for r in res["rows"])
            assert trained == list(range(rows)), f"step {step}: trained rows {trained}"
            check = dock.read(step, range(rows), ["response_ids", "old_log_probs"])
            for i in range(rows):
                want = log_probs_of(torch.from_numpy(check.row("response_ids", i).copy()))
                assert np.allclose(check.row("old_log_probs", i), want.numpy()), (step, i)
            dock.get("metrics", step=step, count=rows)  # the last consumer: step released
            m = results[0]
            print(f"step {step}: {rows} rows on {DP} ranks, micro-batches "
                  f"{[r['micro_batches'] for r in results]}, global_seqlen/balanced_min "
                  f"{m['global_seqlen/balanced_min']:.0f} balanced_max "
                  f"{m['global_seqlen/balanced_max']:.0f} mean {m['global_seqlen/mean']:.0f}")
        assert ray.get(rollout) == args.steps * rows
        print(f"OK: {args.steps} steps; every row generated once, trained on once by one "
              "rank, its log-probs written back and read as written")
        server.stop()
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
