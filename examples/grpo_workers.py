"""The worker processes of examples/grpo_pipeline.py: one per role and
rank, each with its own client. Rollout workers are asyncio programs on
tdock.aio, generating several batches at once as an inference engine serves
concurrent requests; the training roles take TensorDicts (jagged nested
tensors) and write their results back as TensorDicts. Every value is a
deterministic function of (seed, step, row), so later roles check what
earlier ones wrote; each batch becomes a record sent to the main process
through a queue.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

REPO = Path(__file__).resolve().parent.parent
try:
    import tdock
    import tdock.aio
except ImportError:  # not installed: the build tree's copy, if there is one
    sys.path.insert(0, str(REPO / "build" / "python"))
    try:
        import tdock
        import tdock.aio
    except ImportError:
        sys.exit("grpo_pipeline: no tdock package; build the target tdock_python "
                 "and run with PYTHONPATH=<build>/python")

ROLES = ["driver", "rollout", "reward", "ref_logprob", "actor_logprob",
         "advantage", "actor_update"]
SHORT = {"rollout": "roll", "reward": "rew", "ref_logprob": "ref",
         "actor_logprob": "lp", "advantage": "adv", "actor_update": "upd"}
VOCAB = 32000
# Simulated compute at --time_scale 1, in seconds: batched decoding per token
# of a batch's longest response, scoring per row, forward and update passes
# per padded token of a micro-batch.
DECODE_S, REWARD_S, FORWARD_S, UPDATE_S = 1e-3, 2e-3, 1.5e-5, 5e-5
REF_SALT, ACTOR_SALT = 11, 29
POLL_S = 5.0        # long-poll bound of one Get; workers ask again after it
ROLLOUT_CONCURRENCY = 4  # batches one rollout worker generates at once


@dataclass(frozen=True)
class Config:
    """What every worker needs; picklable for 'spawn'."""
    address: str
    dock: str
    steps: int
    n: int
    rows: int
    max_response: int
    seed: int
    time_scale: float
    t0: float
    tls: "tdock.Tls | None" = None  # to reach a --server with TLS
    token: "str | None" = None      # its bearer token (else TDOCK_TOKEN)

    def client(self, timeout: float, aio: bool = False):
        """A tdock.Client, or with aio a tdock.aio.Client (inside its loop)."""
        kind = tdock.aio.Client if aio else tdock.Client
        return kind(self.address, timeout=timeout, tls=self.tls, token=self.token)


# Deterministic data -------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def prompt_tokens(seed: int, step: int, group: int) -> np.ndarray:
    """The prompt of a group: 16 to 256 tokens."""
    rng = np.random.default_rng((seed, step, group, 0))
    return rng.integers(0, VOCAB, int(rng.integers(16, 257)), dtype=np.int32)


def response_tokens(seed: int, step: int, row: int, max_len: int) -> np.ndarray:
    """A row's response: log-normal length (median 148, long tail), capped."""
    rng = np.random.default_rng((seed, step, row, 1))
    length = int(min(max_len, max(1.0, rng.lognormal(5.0, 0.9))))
    return rng.integers(0, VOCAB, length, dtype=np.int32)


def reward_of(response: np.ndarray) -> np.float32:
    """A stand-in score in [0, 1]."""
    return np.float32((int(response.sum()) + 7 * len(response)) % 101 / 100.0)


def log_probs(response: np.ndarray, salt: int) -> np.ndarray:
    """Stand-in per-token log-probs of a response (one model per salt)."""
    pos = np.arange(len(response), dtype=np.int64)
    h = (response.astype(np.int64) * 2654435761 + pos * 40503 + salt) % 65536
    return (-h / 8192.0).astype(np.float32)


def group_advantages(rewards: np.ndarray) -> np.ndarray:
    """GRPO: each reward against its group's mean, over the group's std."""
    r = rewards.astype(np.float64)
    return ((r - r.mean()) / (r.std() + 1e-6)).astype(np.float32)


@functools.lru_cache(maxsize=4096)
def expected_advantages(seed: int, step: int, group: int, n: int,
                        max_len: int) -> np.ndarray:
    """The advantages of a group's rows, recomputed from the seed."""
    return group_advantages(np.array(
        [reward_of(response_tokens(seed, step, r, max_len))
         for r in range(group * n, (group + 1) * n)], np.float32))


# Workers ------------------------------------------------------------------

class CheckFailed(Exception):
    """A cell did not hold what its writer wrote."""


def simulate(cfg: Config, seconds: float) -> None:
    if cfg.time_scale > 0 and seconds > 0:
        time.sleep(seconds * cfg.time_scale)


def expect(b: tdock.Batch, i: int, column: str, want: np.ndarray) -> None:
    got = b.row(column, i)
    where = f"step {b.step} row {b.rows[i]}: {column}"
    if got.shape != want.shape:
        raise CheckFailed(f"{where} holds {len(got)} items, expected {len(want)}")
    if not np.array_equal(got, want):
        k = int(np.flatnonzero(got != want)[0])
        raise CheckFailed(f"{where} item {k} is {got[k]}, expected {want[k]}")


def check_inputs(cfg: Config, b: tdock.Batch, responses: bool = True) -> None:
    for i, row in enumerate(b.rows.tolist()):
        expect(b, i, "prompt_ids", prompt_tokens(cfg.seed, b.step, row // cfg.n))
        if responses:
            expect(b, i, "response_ids",
                   response_tokens(cfg.seed, b.step, row, cfg.max_response))


def simulate_micro_batches(cfg: Config, b: tdock.Batch, per_token: float) -> None:
    for m in b.micro_batch_info:
        simulate(cfg, per_token * (m.end - m.begin) * m.padded_len)


async def do_rollout(dock, cfg: Config, b: tdock.Batch) -> int:
    check_inputs(cfg, b, responses=False)
    out = [response_tokens(cfg.seed, b.step, r, cfg.max_response)
           for r in b.rows.tolist()]
    if cfg.time_scale > 0:  # the longest sets the pace
        await asyncio.sleep(DECODE_S * max(len(r) for r in out) * cfg.time_scale)
    # The write acknowledges the batch's lease: if this worker died before
    # it, the prompts would go to another rollout worker after lease_ms.
    return (await dock.put(b.step, b.rows, {"response_ids": out}, ack=b)).bytes


def do_reward(dock, cfg: Config, b: tdock.Batch) -> int:
    check_inputs(cfg, b)
    simulate(cfg, REWARD_S * len(b))
    scores = [reward_of(b.row("response_ids", i)) for i in range(len(b))]
    return dock.put(b.step, b.rows, {"rewards": np.array(scores, np.float32)}).bytes


def jagged(rows: list) -> torch.Tensor:
    """A jagged nested tensor of 1-D tensors (a column of a TensorDict)."""
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def do_logprob(dock, cfg: Config, b: tdock.Batch, column: str, salt: int) -> int:
    check_inputs(cfg, b)
    simulate_micro_batches(cfg, b, FORWARD_S)
    td = b.to_tensordict(["response_ids"])  # response_ids: jagged nested
    # A row that repeats a row of the round (pad: repeat) fills this rank's
    # share like any row, but its output is written by the share it is from.
    keep = np.flatnonzero(~b.repeat_mask)
    if not len(keep):
        return 0
    responses = td["response_ids"].unbind()
    out = jagged([torch.from_numpy(log_probs(responses[i].numpy(), salt)) for i in keep])
    return dock.put(b.step, b.rows[keep], TensorDict({column: out}, batch_size=[len(keep)])).bytes


def do_advantage(dock, cfg: Config, b: tdock.Batch) -> int:
    rewards, rows, n = b.packed("rewards")[0], b.rows.tolist(), cfg.n
    out = np.zeros(len(rows), np.float32)
    for start in range(0, len(rows), n):
        group = rows[start:start + n]
        if group != list(range(group[0], group[0] + n)) or group[0] % n:
            raise CheckFailed(f"step {b.step}: rows {group} are not one whole group")
        out[start:start + n] = group_advantages(rewards[start:start + n])
    return dock.put(b.step, b.rows, {"advantages": out}).bytes


def do_update(dock, cfg: Config, b: tdock.Batch) -> int:
    for mb in b.micro_batches:  # the server's plan (or the whole batch)
        td = mb.to_tensordict()
        simulate(cfg, UPDATE_S * len(mb) * max(mb.lengths("response_ids"), default=0))
        check_update(cfg, mb, td)
    return 0


def check_update(cfg: Config, b: tdock.Batch, td: TensorDict) -> None:
    """Every cell the update reads, from its TensorDict."""
    check_inputs(cfg, b)
    responses = td["response_ids"].unbind()
    ref, old = td["ref_log_prob"].unbind(), td["old_log_prob"].unbind()
    for i, row in enumerate(b.rows.tolist()):
        response = responses[i].numpy()
        where = f"step {b.step} row {row}"
        if td["rewards"][i].item() != reward_of(response):
            raise CheckFailed(f"{where}: reward {td['rewards'][i].item()}, expected "
                              f"{reward_of(response)}")
        for name, got, salt in (("ref_log_prob", ref[i], REF_SALT),
                                ("old_log_prob", old[i], ACTOR_SALT)):
            if not np.array_equal(got.numpy(), log_probs(response, salt)):
                raise CheckFailed(f"{where}: {name} differs from what was written")
        want = expected_advantages(cfg.seed, b.step, row // cfg.n, cfg.n,
                                   cfg.max_response)[row % cfg.n]
        got = td["advantages"][i].item()
        if not np.isclose(got, want, rtol=1e-5, atol=1e-5):
            raise CheckFailed(f"{where}: advantage {got}, expected {want} from the "
                              "group's rewards")


HANDLERS = {
    "reward": do_reward,
    "ref_logprob": functools.partial(do_logprob, column="ref_log_prob",
                                     salt=REF_SALT),
    "actor_logprob": functools.partial(do_logprob, column="old_log_prob",
                                       salt=ACTOR_SALT),
    "advantage": do_advantage,
    "actor_update": do_update,
}


def record(cfg: Config, kind: str, role: str, rank: int, step: int,
           **fields) -> dict:
    """A record for the main process (see Tally.add)."""
    return {"kind": kind, "role": role, "rank": rank, "step": step,
            "t": time.time() - cfg.t0, "wait": 0.0, **fields}


def batch_record(cfg: Config, role: str, rank: int, b: tdock.Batch, wait: float,
                 bytes_out: int) -> dict:
    stats = b.stats if b.round >= 0 else None
    return record(
        cfg, "batch", role, rank, b.step, round=b.round, rows=b.rows.tolist(),
        repeats=[] if b.repeats is None else b.repeats.tolist(),
        tokens=b.token_counts.tolist(), wait=wait, bytes_out=bytes_out,
        bytes_in=sum(b.column(c).values.nbytes for c in b.columns),
        mb_padded=sum((m.end - m.begin) * m.padded_len for m in b.micro_batch_info)
        if b.micro_batch_info else None,
        server_tokens=(stats.rank_tokens_max, stats.rank_tokens_mean)
        if stats else None)


def run_consumer(dock, role: str, rank: int, cfg: Config, q) -> None:
    """Each step in turn: Gets until this rank has drained it."""
    for step in range(cfg.steps):
        waited = 0.0
        while True:
            start = time.monotonic()
            b = dock.get(role, rank=rank, step=step, wait=POLL_S)
            waited += time.monotonic() - start
            if b.timed_out:
                continue
            # A balanced rank's empty share is a round too: reported, so the
            # ranks' rounds can be counted.
            if len(b) or b.round >= 0:
                out = HANDLERS[role](dock, cfg, b) if len(b) else 0
                q.put(batch_record(cfg, role, rank, b, waited, out))
                waited = 0.0
            if b.end_of_step:
                break
        q.put(record(cfg, "step_done", role, rank, step, wait=waited))


async def run_rollout(rank: int, cfg: Config, q) -> None:
    """Each step in turn: takes the step's prompt batches as they come and
    generates up to ROLLOUT_CONCURRENCY of them at once, in one event loop."""
    async with cfg.client(timeout=60.0, aio=True) as client:
        dock = client.dock(cfg.dock)
        running = asyncio.Semaphore(ROLLOUT_CONCURRENCY)

        async def generate(b: tdock.Batch, waited: float) -> None:
            try:
                out = await do_rollout(dock, cfg, b)
                q.put(batch_record(cfg, "rollout", rank, b, waited, out))
            finally:
                running.release()

        for step in range(cfg.steps):
            tasks, start = [], time.monotonic()
            await running.acquire()
            async for b in dock.iter("rollout", rank=rank, step=step):
                tasks.append(asyncio.create_task(generate(b, time.monotonic() - start)))
                await running.acquire()
                start = time.monotonic()
            running.release()
            await asyncio.gather(*tasks)
            q.put(record(cfg, "step_done", "rollout", rank, step))


def run_driver(dock, cfg: Config, q) -> None:
    """Puts each step's prompts; two steps in flight make Puts wait."""
    for step in range(cfg.steps):
        prompts = [prompt_tokens(cfg.seed, step, r // cfg.n) for r in range(cfg.rows)]
        start = time.monotonic()
        ack = dock.put(step, range(cfg.rows), {"prompt_ids": prompts}, wait=600.0)
        q.put(record(cfg, "batch", "driver", 0, step, round=-1,
                     rows=list(range(cfg.rows)), tokens=[len(p) for p in prompts],
                     wait=time.monotonic() - start, bytes_in=0,
                     bytes_out=ack.bytes, mb_padded=None, server_tokens=None))
        q.put(record(cfg, "step_done", "driver", 0, step))


def worker(role: str, rank: int, cfg: Config, q) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process stops us
    q.put({"kind": "up", "role": role, "rank": rank})  # imports done: start-up progress
    try:
        if role == "rollout":
            asyncio.run(run_rollout(rank, cfg, q))
        else:
            with cfg.client(timeout=60.0) as client:
                dock = client.dock(cfg.dock)
                if role == "driver":
                    run_driver(dock, cfg, q)
                else:
                    run_consumer(dock, role, rank, cfg, q)
    except Exception as e:  # reported to the main process, which fails the run
        what = str(e) if isinstance(e, CheckFailed) else traceback.format_exc()
        q.put({"kind": "error", "role": role, "rank": rank, "message": what})
        q.close()
        q.join_thread()
        sys.exit(1)
    q.put({"kind": "exit", "role": role, "rank": rank})
