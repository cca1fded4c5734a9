#!/usr/bin/env python3
"""verl's GRPO step on tdock and Ray, from verl's own config and algorithms:
verl's generated Megatron trainer config (DP 2 x TP 2) gives the dock spec
(tdock.verl.dock_spec); tdock-server runs as a Ray actor (tdock.ray); a
rollout actor generates responses and scores; the actor's four workers (two
data-parallel ranks, two tensor-parallel peers each) are Ray actors whose
update method is a tdock.verl.worker_method: it takes its rank's
token-balanced share as the TensorDict verl's engines take, computes verl's
GRPO advantages, cuts the micro-batches as verl's engines do (which gives
tdock's plan: no module patched), runs verl's PPO policy loss on each and
writes log-probs and advantages back. The driver computes verl's data
metrics on what the dock holds and checks every row.

    .venv/bin/python examples/verl_ray.py --server_bin build/server/tdock-server

With --sharded, tdock runs as a controller and a shard on every Ray node
(tdock.ray.start_cluster; docs/scale-out.md) instead of one server.

Every line that exists only because tdock is used ends in "# tdock" (10;
tests/python/test_verl_engine.py counts them). Needs ray, torch and verl
(scripts/python-env.sh installs them). The model is a stand-in: responses
and log-probs are deterministic functions of the prompt.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np
import ray
import torch
import verl
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.metric_utils import compute_data_metrics
from verl.utils import tensordict_utils as tu
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import list_of_dict_to_dict_of_list
from verl.workers.config import McoreActorConfig

from tdock import ray as tdock_ray, verl as tv  # tdock

DP, TP, N = 2, 2, 4  # data-parallel ranks, tensor-parallel peers, samples per prompt
COLUMNS = ["score", "old_log_probs", "advantages"]  # tdock: the columns the job writes


def verl_config(prompts: int):
    """verl's own trainer config for this job."""
    path = pathlib.Path(verl.__file__).parent / "trainer/config"
    defaults = OmegaConf.load(path / "_generated_ppo_megatron_trainer.yaml")
    return OmegaConf.merge(defaults, OmegaConf.from_dotlist([
        f"data.train_batch_size={prompts}", f"actor_rollout_ref.rollout.n={N}",
        "trainer.nnodes=1", f"trainer.n_gpus_per_node={DP * TP}",
        f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={TP}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024"]))


def prompt_of(step: int, group: int) -> np.ndarray:
    return np.arange(3 + group % 5, dtype=np.int32) + 1000 * step + group


def response_of(prompt: np.ndarray, sample: int) -> np.ndarray:
    rng = np.random.default_rng((int(prompt[0]), sample))
    return rng.integers(1, 32000, int(rng.integers(8, 400)), dtype=np.int32)


def log_probs_of(responses: torch.Tensor) -> torch.Tensor:
    return -(responses.float() % 97) / 97.0


def outcome_rewards(score: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """verl's token-level rewards of an outcome score: on the last response token."""
    rewards = torch.zeros(response_mask.shape)
    rewards[torch.arange(len(score)), (response_mask.sum(-1) - 1).clamp(min=0)] = score
    return rewards


@ray.remote(num_cpus=0)
class Rollout:
    @tv.worker_method("rollout", outputs=["responses", "uid", "score"], layout="data_proto")  # tdock
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Each sample's response (the batch holds each prompt's N samples in
        turn), its uid (the prompt's) and score."""
        mask = prompts.batch["attention_mask"].bool()
        given = [p[m].numpy().astype(np.int32) for p, m in zip(prompts.batch["prompts"], mask)]
        responses = [torch.from_numpy(response_of(p, i % N)) for i, p in enumerate(given)]
        padded = torch.nn.utils.rnn.pad_sequence(responses, batch_first=True)
        response_mask = torch.nn.utils.rnn.pad_sequence(
            [torch.ones(len(r), dtype=torch.int64) for r in responses], batch_first=True)
        return DataProto.from_dict(
            tensors={"responses": padded,
                     "attention_mask": torch.cat([mask.long(), response_mask], 1),
                     "score": torch.tensor([len(r) % 7 / 7 for r in responses])},
            non_tensors={"uid": np.array([f"p{p[0]}" for p in given], dtype=object)})


@ray.remote(num_cpus=0)
class ActorWorker:
    def __init__(self, config, rank: int, tp_rank: int):
        self.rank, self.tp_rank = rank, tp_rank  # what verl's worker group gives each worker
        self.scale = torch.nn.Parameter(torch.ones(()))  # the stand-in model's one weight
        actor = config.actor_rollout_ref.actor
        self.loss_config = McoreActorConfig(strategy="megatron", rollout_n=N,
                                            ppo_mini_batch_size=actor.ppo_mini_batch_size,
                                            use_dynamic_bsz=actor.use_dynamic_bsz)

    @tv.worker_method("actor", outputs=COLUMNS[1:], replica="tp_rank")  # tdock
    def update_actor(self, data: TensorDict) -> TensorDict:
        mask = data["response_mask"]
        uids = np.array(list(data["uid"]), dtype=object)
        data["advantages"], _ = core_algos.compute_grpo_outcome_advantage(
            outcome_rewards(data["score"], mask), mask, uids)
        # How verl's engines cut a batch that says use_dynamic_bsz=False
        # (verl.workers.engine.utils.prepare_micro_batches).
        if tu.get_non_tensor_data(data, "use_dynamic_bsz", True):
            raise RuntimeError("the batch does not carry a micro-batch plan")
        size = tu.get_non_tensor_data(data, "micro_batch_size_per_gpu", None)
        log_probs, losses = [], []
        for mb in tu.chunk_tensordict(data, len(data) // size):
            log_prob = log_probs_of(mb["responses"]) * self.scale  # the "forward"
            loss, _ = core_algos.compute_policy_loss_vanilla(
                log_prob.detach(), log_prob, mb["advantages"], mb["response_mask"],
                config=self.loss_config)
            loss.backward()  # gradients accumulate over the micro-batches
            log_probs.append(log_prob.detach() * mb["response_mask"])
            losses.append(loss.item())
        out = TensorDict({"old_log_probs": torch.cat(log_probs), "advantages": data["advantages"]},
                         batch_size=[len(data)])
        tu.assign_non_tensor(out, metrics={"actor/pg_loss": float(np.mean(losses)),
                                           "actor/micro_batches": len(losses)})
        return out


def check(step: int, batch: DataProto, rows: int) -> None:
    """Every row is there once, with the log-probs of its response and the
    GRPO advantage of its group over the whole step."""
    t = batch.batch
    assert len(batch) == rows, f"step {step}: {len(batch)} rows"
    assert torch.allclose(t["old_log_probs"], log_probs_of(t["responses"]) * t["response_mask"])
    whole, _ = core_algos.compute_grpo_outcome_advantage(
        t["token_level_rewards"], t["response_mask"], batch.non_tensor_batch["uid"])
    assert torch.allclose(t["advantages"], whole, atol=1e-5), f"step {step}: advantages"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server_bin", default=os.environ.get("TDOCK_SERVER_BIN"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--sharded", action="store_true")
    args = ap.parse_args(argv)
    config, rows = verl_config(args.prompts), args.prompts * N
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 << 20)
    try:
        start = tdock_ray.start_cluster if args.sharded else tdock_ray.start_server  # tdock
        server = start("tdock-verl", binary=args.server_bin, num_cpus=0)  # tdock
        dock = server.client().create_dock(tv.dock_spec(config, columns=COLUMNS, trainer=True))  # tdock
        rollout = Rollout.remote()
        workers = [ActorWorker.remote(config, r, q) for r in range(DP) for q in range(TP)]
        for step in range(args.steps):
            prompts = [prompt_of(step, r // N) for r in range(rows)]  # verl's dataloader
            dock.put(step, range(rows), {"prompt_ids": prompts})  # tdock
            ref = tv.BatchRef(dock, step)  # tdock: what the workers' methods take
            ray.get(rollout.generate_sequences.remote(ref))
            results = ray.get([w.update_actor.remote(ref) for w in workers])
            batch = tv.to_data_proto(dock.get("trainer", step=step))  # tdock
            t = batch.batch
            rewards = outcome_rewards(t["score"], t["response_mask"])
            t["token_level_scores"], t["token_level_rewards"] = rewards, rewards.clone()
            t["returns"] = t["advantages"]  # GRPO's returns are its advantages
            check(step, batch, rows)
            actor_metrics = list_of_dict_to_dict_of_list([r["metrics"] for r in results])
            metrics = {**compute_data_metrics(batch, use_critic=False),
                       **reduce_metrics(actor_metrics)}
            print(f"step {step}: {rows} rows on {DP} ranks x {TP} peers, "
                  f"micro-batches per rank {metrics['actor/micro_batches']:.1f}, "
                  f"global_seqlen/balanced_min {metrics['global_seqlen/balanced_min']:.0f} "
                  f"balanced_max {metrics['global_seqlen/balanced_max']:.0f}, "
                  f"response_length/mean {metrics['response_length/mean']:.1f}, "
                  f"actor/pg_loss {metrics['actor/pg_loss']:.4f}")
        print(f"OK: {args.steps} steps; every row generated once, its log-probs and its "
              "group's GRPO advantages (computed on the rank that held the whole group) "
              "written back and read as computed")
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
