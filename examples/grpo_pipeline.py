#!/usr/bin/python3
"""A simulated GRPO training loop on tdock, one process per worker.

    PYTHONPATH=build/python /usr/bin/python3 examples/grpo_pipeline.py
    ... --steps 2 --prompts 8 --n 4 --dp 2 --time_scale 0    # a few seconds
    ... --server HOST:PORT                                    # a running server

It starts tdock-server on a free loopback port (unless --server is given),
creates the dock of examples/grpo.yaml (sizes patched from the flags) and
starts the roles as separate processes, each with its own tdock.Client:

  driver         puts each step's prompts: --prompts groups of --n identical
                 rows (prompt_ids). Two steps are in flight: the Put of step
                 s+2 waits until step s is released.
  rollout (x2)   takes a few prompt groups at a time, "generates" long-tail
                 responses (response_ids), sleeping for the longest one.
  reward         scores whole groups (rewards).
  ref_logprob,   data-parallel ranks of a `balanced` consumer: each round is
  actor_logprob  split over the ranks by tokens and cut into micro-batches
                 under a token budget; per-token log-probs (ref_log_prob,
                 old_log_prob).
  advantage      GRPO advantages per whole group: (reward - mean) / (std + eps).
  actor_update   balanced ranks again; checks every cell it gets.

Every value is a deterministic function of (--seed, step, row), so the update
checks prompts, responses, rewards, both log-probs (per token) and advantages
against values it recomputes. Workers send a record per batch to this process
through a queue; it prints progress, then a table per step and role: rows,
bytes read and written, time spent waiting in Get (the driver: in Put, for a
free partition), rank imbalance (heaviest rank's tokens over the mean, summed
over rounds) of tdock's split against cutting the round's rows by row index
into equal pieces, and padded tokens of tdock's micro-batches against padding
every row of the batch to its longest. Exit status 0 means every row reached
every role exactly once with the bytes written and every worker exited 0.
"""

from __future__ import annotations

import argparse
import collections
import functools
import math
import multiprocessing as mp
import os
import queue as queue_mod
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
try:
    import tdock
except ImportError:  # not installed: the build tree's copy, if there is one
    sys.path.insert(0, str(REPO / "build" / "python"))
    try:
        import tdock
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
STALL_S = 120.0     # no record for this long: the run has hung


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

    def client(self, timeout: float) -> "tdock.Client":
        return tdock.Client(self.address, timeout=timeout, tls=self.tls,
                            token=self.token)


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


def do_rollout(dock, cfg: Config, b: tdock.Batch) -> int:
    check_inputs(cfg, b, responses=False)
    out = [response_tokens(cfg.seed, b.step, r, cfg.max_response)
           for r in b.rows.tolist()]
    simulate(cfg, DECODE_S * max(len(r) for r in out))  # the longest sets the pace
    # The write acknowledges the batch's lease: if this worker died before
    # it, the prompts would go to another rollout worker after lease_ms.
    return dock.put(b.step, b.rows, {"response_ids": out}, ack=b).bytes


def do_reward(dock, cfg: Config, b: tdock.Batch) -> int:
    check_inputs(cfg, b)
    simulate(cfg, REWARD_S * len(b))
    scores = [reward_of(b.row("response_ids", i)) for i in range(len(b))]
    return dock.put(b.step, b.rows, {"rewards": np.array(scores, np.float32)}).bytes


def do_logprob(dock, cfg: Config, b: tdock.Batch, column: str, salt: int) -> int:
    check_inputs(cfg, b)
    simulate_micro_batches(cfg, b, FORWARD_S)
    out = [log_probs(b.row("response_ids", i), salt) for i in range(len(b))]
    return dock.put(b.step, b.rows, {column: out}).bytes


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
    simulate_micro_batches(cfg, b, UPDATE_S)
    check_inputs(cfg, b)
    for i, row in enumerate(b.rows.tolist()):
        response = b.row("response_ids", i)
        expect(b, i, "rewards", np.array([reward_of(response)], np.float32))
        expect(b, i, "ref_log_prob", log_probs(response, REF_SALT))
        expect(b, i, "old_log_prob", log_probs(response, ACTOR_SALT))
        want = expected_advantages(cfg.seed, b.step, row // cfg.n, cfg.n,
                                   cfg.max_response)[row % cfg.n]
        got = b.row("advantages", i)
        if len(got) != 1 or not np.isclose(got[0], want, rtol=1e-5, atol=1e-5):
            raise CheckFailed(f"step {b.step} row {row}: advantage {got}, "
                              f"expected {want} from the group's rewards")
    return 0


HANDLERS = {
    "rollout": do_rollout,
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
            if len(b):
                out = HANDLERS[role](dock, cfg, b)
                q.put(batch_record(cfg, role, rank, b, waited, out))
                waited = 0.0
            if b.end_of_step:
                break
        q.put(record(cfg, "step_done", role, rank, step, wait=waited))


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
    try:
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


# The main process ----------------------------------------------------------

class PipelineError(Exception):
    """The run failed; the message says how."""


class Server:
    """tdock-server on a free loopback port, its output kept for errors."""

    def __init__(self, binary: str, metrics_listen: str):
        if not os.access(binary, os.X_OK):
            raise PipelineError(f"no tdock-server at {binary} (build it, or pass "
                                "--server_bin, $TDOCK_SERVER_BIN or --server)")
        self.proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0",
                                      f"--metrics_listen={metrics_listen}"],
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)  # stopped by us
        self.log: collections.deque = collections.deque(maxlen=40)
        self.address = ""
        self.metrics = ""  # http://HOST:PORT/metrics when it serves them
        self._listening = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + 30
        while not self._listening.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise PipelineError("tdock-server did not start listening:\n"
                                    + "".join(self.log))

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.log.append(line)
            m = re.search(r"tdock-server metrics on (\S+)", line)
            if m:
                self.metrics = m.group(1)
            m = re.search(r"tdock-server listening on (\S+)", line)
            if m and not self.address:
                self.address = m.group(1)
                self._listening.set()

    def stop(self) -> int:
        """SIGTERM, then its exit status (killed after 30 s: -9)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def load_spec(args) -> dict:
    """examples/grpo.yaml with sizes and dispatch sizes from the flags."""
    with open(REPO / "examples" / "grpo.yaml", encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    p, n, dp = args.prompts, args.n, args.dp
    rows = p * n
    spec.update(num_prompts=p, n_samples_per_prompt=n)
    if args.dock:
        spec["name"] = args.dock
    c = spec["consumers"]
    c["rollout"]["dispatch_size"] = n * max(1, p // 16)   # 2 groups by default
    c["reward"]["dispatch_size"] = n * max(1, p // 4)
    c["advantage"]["dispatch_size"] = n * max(1, p // 4)
    for role, rounds in (("ref_logprob", 4), ("actor_logprob", 4),
                         ("actor_update", 2)):
        c[role]["dp_size"] = dp
        c[role]["dispatch_size"] = max(1, rows // (dp * rounds))
    return spec


class Tally:
    """What the workers reported, by (role, step)."""

    def __init__(self, spec: dict):
        consumers = spec["consumers"]
        self.ranks = {r: consumers.get(r, {}).get("dp_size", 1) for r in ROLES}
        self.round_to = {r: consumers.get(r, {}).get("micro_batch", {})
                         .get("round_to", 1) for r in ROLES}
        self.cells: dict = collections.defaultdict(lambda: {
            "rows": [], "bytes_in": 0, "bytes_out": 0, "wait": 0.0,
            "first": math.inf, "done": 0.0, "mb": 0, "flat": 0,
            "rounds": collections.defaultdict(dict), "server": {}})
        self.finished = collections.defaultdict(set)  # (role, step) -> ranks

    def add(self, rec: dict) -> None:
        cell = self.cells[(rec["role"], rec["step"])]
        cell["wait"] += rec["wait"]
        if rec["kind"] == "step_done":
            self.finished[(rec["role"], rec["step"])].add(rec["rank"])
            cell["done"] = max(cell["done"], rec["t"])
            return
        cell["rows"] += rec["rows"]
        cell["bytes_in"] += rec["bytes_in"]
        cell["bytes_out"] += rec["bytes_out"]
        cell["first"] = min(cell["first"], rec["t"])
        if rec["mb_padded"] is not None:
            to = self.round_to[rec["role"]]
            cell["mb"] += rec["mb_padded"]
            cell["flat"] += len(rec["rows"]) * -(-max(rec["tokens"]) // to) * to
        if rec["round"] >= 0:
            cell["rounds"][rec["round"]][rec["rank"]] = (rec["rows"], rec["tokens"])
            if rec["server_tokens"]:
                cell["server"][rec["round"]] = rec["server_tokens"]

    def step_finished(self, role: str, step: int) -> bool:
        return len(self.finished[(role, step)]) == self.ranks[role]

    def round_tokens(self, role: str, shares: dict) -> tuple[list, list]:
        """Tokens per rank of one round: tdock's split, and the round's rows
        sorted by row index cut into equal contiguous pieces."""
        dp = self.ranks[role]
        per_rank = [sum(shares[k][1]) if k in shares else 0 for k in range(dp)]
        by_row = sorted(x for rows, tokens in shares.values()
                        for x in zip(rows, tokens))
        pieces = np.array_split(np.array([t for _, t in by_row]), dp)
        return per_rank, [int(p.sum()) for p in pieces]

    def imbalance(self, role: str, cells: list[dict]) -> tuple | None:
        """Σ over rounds of the heaviest rank's tokens / Σ of the mean
        (tdock's split, contiguous split)."""
        tdock_max = contiguous_max = mean = 0.0
        for cell in cells:
            for shares in cell["rounds"].values():
                per_rank, contiguous = self.round_tokens(role, shares)
                tdock_max += max(per_rank)
                contiguous_max += max(contiguous)
                mean += sum(per_rank) / len(per_rank)
        return (tdock_max / mean, contiguous_max / mean) if mean else None

    def check(self, steps: int, rows: int) -> list[str]:
        """Problems: rows lost or duplicated, balance stats that differ."""
        problems = []
        for (role, step), cell in sorted(self.cells.items()):
            got = collections.Counter(cell["rows"])
            lost = sorted(set(range(rows)) - set(got))
            dup = sorted(r for r, k in got.items() if k > 1)
            if lost or dup:
                problems.append(f"{role} step {step}: rows lost {lost[:8]}, "
                                f"duplicated {dup[:8]}")
            for rnd, server in cell["server"].items():
                per_rank, _ = self.round_tokens(role, cell["rounds"][rnd])
                if (max(per_rank), sum(per_rank) / len(per_rank)) != server:
                    problems.append(f"{role} step {step} round {rnd}: ranks got "
                                    f"{per_rank} tokens; server stats (max, "
                                    f"mean) {server}")
        missing = steps * len(ROLES) - len(self.cells)
        if missing:
            problems.append(f"{missing} (role, step) pairs reported no rows")
        return problems


def status_line(dock, elapsed: float) -> str:
    """Rows each role has taken per live step, from the dock's status."""
    st = dock.status()
    steps = [f"step {s.step}: " + (" ".join(
        f"{short} {s.consumed[role]}" for role, short in SHORT.items()
        if s.consumed.get(role)) or "prompts written") for s in st.steps]
    return (f"[{elapsed:6.1f}s] " + (" | ".join(steps) or "no live step")
            + f" | {sum(st.waiters.values())} Gets parked, "
            f"{st.arena_bytes_used / 2**20:.1f} MiB in use")


def collect(procs: dict, q, tally: Tally, dock, cfg: Config, quiet: bool) -> None:
    """Takes records until every worker has exited; raises on a crash or hang."""
    exited: set = set()
    last_record = last_status = time.monotonic()
    while len(exited) < len(procs):
        try:
            rec = q.get(timeout=0.25)
        except queue_mod.Empty:
            rec = None
        now = time.monotonic()
        if rec is None:
            dead = [f"{r}/{k} (exit code {p.exitcode})"
                    for (r, k), p in procs.items() if p.exitcode not in (None, 0)]
            if dead and q.empty():
                raise PipelineError(f"worker {', '.join(dead)} died")
            if now - last_record > STALL_S:
                raise PipelineError(f"no progress for {STALL_S:.0f} s")
        elif rec["kind"] == "error":
            raise PipelineError(f"{rec['role']} rank {rec['rank']}: {rec['message']}")
        elif rec["kind"] == "exit":
            exited.add((rec["role"], rec["rank"]))
        else:
            last_record = now
            tally.add(rec)
            if (rec["kind"] == "step_done" and rec["role"] == "actor_update"
                    and tally.step_finished("actor_update", rec["step"])
                    and not quiet):
                print(f"[{rec['t']:6.1f}s] step {rec['step']} trained: every "
                      "cell checked by actor_update", flush=True)
        if not quiet and now - last_status >= 2.0:
            print(status_line(dock, time.time() - cfg.t0), flush=True)
            last_status = now


def run(args, address: str, spec: dict) -> tuple[Tally, Config, int, list[str]]:
    """Creates the dock, runs the workers, checks and deletes the dock."""
    cfg = Config(address, spec["name"], args.steps, args.n, args.prompts * args.n,
                 spec["columns"]["response_ids"]["max_len"], args.seed,
                 args.time_scale, time.time(), *connection(args))
    client = cfg.client(timeout=30.0)
    name = spec["name"]
    if any(d.name == name for d in client.list_docks()):
        raise PipelineError(f"{address} already has a dock '{name}' (delete it "
                            f"with `tdockctl --server {address} delete {name}`)")
    dock = client.create_dock(spec)
    tally = Tally(spec)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = {(role, rank): ctx.Process(target=worker, args=(role, rank, cfg, q),
                                       name=f"{role}/{rank}", daemon=True)
             for role in ROLES for rank in range(tally.ranks[role])}
    try:
        if not args.quiet:
            print(f"tdock at {address}, dock '{name}': {args.steps} steps x "
                  f"{args.prompts} prompts x {args.n} samples, {len(procs)} "
                  "worker processes", flush=True)
        for p in procs.values():
            p.start()
        collect(procs, q, tally, dock, cfg, args.quiet)
        for (role, rank), p in procs.items():
            p.join(30)
            if p.exitcode != 0:
                raise PipelineError(f"worker {role}/{rank} exited with {p.exitcode}")
        problems = tally.check(args.steps, cfg.rows)
        live = [s.step for s in dock.status().steps]
        if live:
            problems.append(f"dock '{name}' still holds steps {live}")
        return tally, cfg, len(procs), problems
    finally:
        for p in procs.values():
            if p.is_alive():
                p.terminate()
                p.join(5)
        try:
            if not args.keep_dock:
                client.delete_dock(name)
        except tdock.errors.TdockError as e:
            print(f"warning: could not delete dock '{name}': {e}", file=sys.stderr)
        client.close()


def ratio(a: float, b: float) -> str:
    return f"{a:,.0f} / {b:,.0f} ({a / b:.2f}x)" if b else "-"


def print_table(tally: Tally, steps: int) -> None:
    head = (f"{'step':>4} {'role':<13} {'ranks':>5} {'rows':>6} {'kB in':>8} "
            f"{'kB out':>8} {'wait s':>7} {'done s':>7}  {'imbalance tdock/contig':<23}"
            f"padded tokens tdock / batch max")
    print(head)
    print("-" * len(head))
    for step in list(range(steps)) + ["all"]:
        for role in ROLES:
            cells = [tally.cells[(role, s)] for s in
                     (range(steps) if step == "all" else [step])]
            imb = tally.imbalance(role, cells)
            mb, flat = sum(c["mb"] for c in cells), sum(c["flat"] for c in cells)
            print(f"{step:>4} {role:<13} {tally.ranks[role]:>5} "
                  f"{sum(len(c['rows']) for c in cells):>6} "
                  f"{sum(c['bytes_in'] for c in cells) / 1e3:>8.1f} "
                  f"{sum(c['bytes_out'] for c in cells) / 1e3:>8.1f} "
                  f"{sum(c['wait'] for c in cells):>7.2f} "
                  f"{max(c['done'] for c in cells):>7.1f}  "
                  f"{f'{imb[0]:.3f} / {imb[1]:.3f}' if imb else '-':<23}"
                  f"{ratio(mb, flat)}")
    print("wait s: time in Get calls waiting for rows, summed over ranks "
          "(driver: in Put, waiting for a free partition);\ndone s: when the "
          "role finished the step, since the start;\n"
          "imbalance: Σ over rounds of the heaviest rank's tokens / Σ of the "
          "mean, tdock's split vs. the round's rows cut by row index;\n"
          "padded tokens: Σ micro-batch rows x padded length vs. every row "
          "padded to the batch's longest (both rounded up to round_to).")


def summary(tally: Tally, steps: int) -> str:
    overlapped = sum(1 for s in range(steps - 1)
                     if tally.cells[("rollout", s + 1)]["first"]
                     < tally.cells[("actor_update", s)]["done"])
    return (f"rollout of step s+1 ran while step s trained in {overlapped} of "
            f"{steps - 1} steps")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default, what in (
            ("steps", 8, "training steps"), ("prompts", 32, "prompts per step"),
            ("n", 8, "samples per prompt (group size)"),
            ("dp", 2, "data-parallel ranks of the log-prob and update roles")):
        ap.add_argument(f"--{flag}", type=int, default=default, help=what)
    ap.add_argument("--server", help="HOST:PORT of a running tdock-server "
                    "(default: start one on loopback)")
    ap.add_argument("--server_bin", default=os.environ.get(
        "TDOCK_SERVER_BIN", str(REPO / "build" / "server" / "tdock-server")),
                    help="tdock-server to start (default: $TDOCK_SERVER_BIN, "
                    "else build/server/tdock-server)")
    ap.add_argument("--dock", help="name of the dock it creates (default: "
                    "the name in examples/grpo.yaml, grpo)")
    ap.add_argument("--seed", type=int, default=1, help="seed of all the data")
    ap.add_argument("--time_scale", type=float, default=1.0,
                    help="scale of the simulated compute times (0: no sleeping)")
    ap.add_argument("--tls_ca", help="with --server: PEM of the CA that signed "
                    "the server's certificate (turns TLS on)")
    ap.add_argument("--tls_cert", help="with --server: client certificate PEM "
                    "(mutual TLS; with --tls_key)")
    ap.add_argument("--tls_key", help="with --server: client key PEM")
    ap.add_argument("--token_file", help="with --server: file holding the "
                    "server's bearer token (default: $TDOCK_TOKEN)")
    ap.add_argument("--metrics_listen", default="127.0.0.1:0",
                    help="--metrics_listen of the server it starts (default: a "
                    "free loopback port, printed; empty: none)")
    ap.add_argument("--keep_dock", action="store_true",
                    help="leave the dock on the server at the end (to look at "
                    "its status and metrics)")
    ap.add_argument("--quiet", action="store_true",
                    help="print only the table and the result")
    args = ap.parse_args(argv)
    for flag in ("steps", "prompts", "n", "dp"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be >= 1")
    if args.time_scale < 0:
        ap.error("--time_scale must be >= 0")
    secured = [f for f in ("tls_ca", "tls_cert", "tls_key", "token_file")
               if getattr(args, f)]
    if secured and not args.server:
        ap.error(f"--{secured[0]} applies to a running server: give --server too")
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls_cert and --tls_key go together")
    return args


def connection(args) -> tuple:
    """(tls, token) for tdock.Client from the TLS and token flags."""
    tls = (tdock.Tls(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)
           if args.tls_ca or args.tls_cert else None)
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise PipelineError(f"--token_file {args.token_file} holds no token")
    return tls, token


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    server = None
    try:
        spec = load_spec(args)
        if not args.server:
            server = Server(args.server_bin, args.metrics_listen)
            if server.metrics and not args.quiet:
                print(f"tdock-server metrics at {server.metrics}")
        tally, cfg, workers, problems = run(
            args, server.address if server else args.server, spec)
        if server is not None:
            status, server = server.stop(), None
            if status != 0:
                problems.append(f"tdock-server exited with {status} after SIGTERM")
    except (PipelineError, tdock.errors.TdockError) as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if server is not None:
            server.stop()
    print_table(tally, args.steps)
    print(summary(tally, args.steps) + f"; wall time {time.monotonic() - started:.1f} s")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"OK: {args.steps} steps x {cfg.rows} rows: every row reached "
          f"{', '.join(ROLES[1:])} exactly once; actor_update checked the "
          "prompts, responses, rewards, per-token ref/old log-probs and GRPO "
          f"advantages of all {args.steps * cfg.rows} rows; balance stats match "
          f"the rows handed out; {workers} worker processes exited 0; every "
          "step was released" + ("" if args.server else
                                 "; tdock-server exited 0 on SIGTERM"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
