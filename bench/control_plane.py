"""A control-plane simulation: a controller driven by --roles x --ranks long-polling ranks.

    PYTHONPATH=build/python .venv-test/bin/python bench/control_plane.py \
        --server build/server/tdock-server [--ranks 1000] [--roles 6] [--steps 4] \
        [--fanout_steps 2] [--rows_per_step 8000] [--group 8] [--channels 4]

The real controller (tdock-server --role=controller) with shards that keep no
bytes: no shard process runs. The bench registers a fake shard (RegisterShard,
id 1, again every second as a shard does, so that it is never declared lost)
and sends the controller the Puts a shard would send (cell_locations: each
column's data one 32-byte location a row, shard 1, an extent whose high 32
bits are the shard's incarnation, a length of the row's items times the item
size). Ranks take the locations their Gets return and never read a shard.

One dock, --rows_per_step rows a step (groups of --group, GRPO-like), two
steps in flight, and one BALANCED consumer per role with dp_size --ranks and
a dispatch size of rows_per_step / ranks, so that every role takes one round
a step, each rank one share of it. The roles, in order (--roles N takes the
first N; past 6, readers of the rollout columns):

  rollout-reward  prompt_ids, response_ids (whole groups)  writes rewards
  reference       prompt_ids, response_ids                 writes ref_log_prob
  old-logprob     prompt_ids, response_ids                 writes old_log_prob
  critic          prompt_ids, response_ids                 writes values
  advantage       rewards, values (whole groups)           writes advantages
  actor-update    prompt, response, ref, old, advantages   (micro-batches)

The bench plays the rollout: it Puts prompt_ids and response_ids (and any
column a role needs whose writer is left out); a role writes its column back
only when a role present reads it. All ranks are asyncio tasks in this one
process over grpc.aio, spread over --channels connections (the bench's own
calls use one more), each looping Get(consumer, rank, wait --wait_s).
It reports:

  RSS              the controller's VmRSS (/proc): idle (the dock holding the
                   first half of step 0's rollout locations, no Get parked),
                   with every rank's Get parked (roles x ranks calls, no round
                   formed yet), after the fan-out steps and after the
                   pipeline (every Get parked again each time); per parked
                   call: the difference over the calls.
  park             seconds from starting the rank tasks until the controller
                   counts every Get parked (GetDockStatus waiters), and this
                   process's CPU meanwhile.
  rollout Put      step 0's rollout rows but the last group, in Puts of
                   --rollout_put_rows rows sent one after the other: the first
                   half before any Get is parked, the second with all parked
                   (each Put wakes the parked Gets of every role that needs a
                   rollout column): the controller's CPU per Put and the round
                   trip.
  fan-out          --fanout_steps steps in which the ranks write nothing: the
                   bench writes each wave of columns (the rollout's; then the
                   columns the first roles write; then advantages) in one Put
                   of every row but the last group, waits until every rank of
                   every role is parked again, and then sends the Put of the
                   last group, which completes the round of each role whose
                   columns that wave completes (four roles at once in the
                   first wave). Milliseconds from sending that Put to each rank
                   holding its share: first (the first rank of the role: the
                   round's planning at dp --ranks, plus one Put and one Get
                   answer on loopback; an upper bound on the planning time),
                   p50, p99 and max (the last rank: all of them hold their
                   share); put RTT: that Put's own round trip; ctl CPU and cli
                   CPU: milliseconds of CPU the controller and this process
                   spent from sending it until the wave's last share arrived
                   (a wave's roles share one figure). Medians over the steps.
  pipeline         --steps steps in which ranks write their role's column back
                   (one Put per rank and step) as soon as they hold their
                   share, and the rollout Puts --rollout_put_rows rows a call,
                   --driver_inflight at once: s/step (median time between
                   steps whose last share was taken by every rank of every
                   role), metadata ops/s (Puts answered plus Gets answered, per
                   second, over the whole phase), rows/s (rows handed out to
                   ranks, all roles), CPU seconds per step of the controller
                   and of this client, and the cores each kept busy.
  needs            for a job of these roles and ranks at --step_times seconds
                   a step: the metadata ops a step needs (a Get per rank and
                   role, a Put per rank of each writing role, the rollout's
                   Puts) against the ops/s sustained (ops headroom: sustained
                   over needed; step headroom: the step over the pipeline's
                   s/step), the fan-out's worst max as a share of the step,
                   and the controller's CPU per step as a share of one core.

The controller and this driver share the machine: on a small one the driver
(one Python process, one event loop) may be the bottleneck, so the ops/s,
s/step and fan-out latencies are a lower bound on what the controller
sustains (compare the client's CPU with the controller's). The fan-out's
tail includes the time this process takes to take in roles x ranks answers
one after the other. No think time: a rank writes back and asks again at
once, so the pipeline runs as fast as the two sides allow.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request

import grpc
import numpy as np

import tdock.errors
import tdock.server
import tdock.spec
from tdock.v1 import dock_pb2, dock_pb2_grpc

DOCK = "control-plane"
SHARD_ID = 1
INCARNATION = 0x7D0C  # the fake shard's, fixed: it never restarts
ITEM_BYTES = 4        # every column is int32 or float32
_TICKS = os.sysconf("SC_CLK_TCK")
_MB = float(1 << 20)

# Column -> (dtype, what its cell's length follows: the prompt, the response, one item).
COLUMNS = {
    "prompt_ids": ("int32", "prompt"), "response_ids": ("int32", "response"),
    "rewards": ("float32", "one"), "ref_log_prob": ("float32", "response"),
    "old_log_prob": ("float32", "response"), "values": ("float32", "response"),
    "advantages": ("float32", "response"),
}
ROLLOUT = ["prompt_ids", "response_ids"]
_DTYPES = {"int32": dock_pb2.INT32, "float32": dock_pb2.FLOAT32}


@dataclasses.dataclass
class Role:
    name: str
    needs: list[str]
    writes: str | None = None
    whole_groups: bool = False
    micro_batch: bool = False
    wave: int = 0  # which of the bench's waves of Puts completes its round


ROLES = [
    Role("rollout-reward", ROLLOUT, "rewards", whole_groups=True),
    Role("reference", ROLLOUT, "ref_log_prob"),
    Role("old-logprob", ROLLOUT, "old_log_prob"),
    Role("critic", ROLLOUT, "values"),
    Role("advantage", ["rewards", "values"], "advantages", whole_groups=True),
    Role("actor-update", ROLLOUT + ["ref_log_prob", "old_log_prob", "advantages"],
         micro_batch=True),
]


class BenchError(Exception):
    """The bench cannot go on; the message says why."""


# ---- the controller process, read from /proc and /metrics -----------------

def rss_bytes(pid: int | str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    return 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def requests_by_method(url: str) -> dict[tuple[str, str], float]:
    """tdock_requests_total by (method, code)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    counts = {}
    for m in re.finditer(r'^tdock_requests_total\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        counts[(labels.get("method", "?"), labels.get("code", "?"))] = float(m.group(2))
    return counts


# ---- the dock and its rows --------------------------------------------------

def plan_roles(count: int) -> tuple[list[Role], list[str], dict[int, list[str]]]:
    """The roles, the columns the rollout writes, and the columns each wave
    of the fan-out phase writes."""
    roles = [dataclasses.replace(r) for r in ROLES[:count]]
    roles += [Role(f"reader-{i}", ROLLOUT) for i in range(len(roles), count)]
    needed = {c for r in roles for c in r.needs}
    for role in roles:  # a column no role reads would be written to a released step
        if role.writes not in needed:
            role.writes = None
    writer = {r.writes: r for r in roles if r.writes}
    wave_of = {}  # column -> the wave that writes it
    for role in roles:  # a role's columns are written by roles before it
        for col in role.needs:
            if col not in writer:
                wave_of[col] = 0
        role.wave = max(wave_of[c] for c in role.needs)
        if role.writes:
            wave_of[role.writes] = role.wave + 1
    rollout = [c for c, w in wave_of.items() if w == 0]
    waves = collections.defaultdict(list)
    for col, w in wave_of.items():
        waves[w].append(col)
    return roles, rollout, dict(sorted(waves.items()))


def dock_spec(args, roles: list[Role], columns: list[str]) -> dock_pb2.DockSpec:
    dispatch = args.rows_per_step // args.ranks
    consumers = {}
    for role in roles:
        c = {"columns": role.needs, "dp_size": args.ranks, "dispatch_size": dispatch,
             "policy": "balanced", "whole_groups": role.whole_groups}
        if role.micro_batch:
            c["micro_batch"] = {"max_tokens": 16384, "round_to": 8, "padded": True}
        consumers[role.name] = c
    return tdock.spec.dock_spec({
        "name": DOCK, "num_prompts": args.rows_per_step // args.group,
        "n_samples_per_prompt": args.group, "steps_in_flight": 2,
        "length_columns": ROLLOUT,
        "columns": {c: {"dtype": COLUMNS[c][0]} for c in columns},
        "consumers": consumers})


class Rows:
    """Each step's token counts (seeded) and the location Puts of its cells."""

    def __init__(self, rows_per_step: int, seed: int):
        self.rows_per_step, self.seed = rows_per_step, seed
        self.lengths: dict[int, dict[str, np.ndarray]] = {}
        self.extent = 0

    def items(self, step: int, column: str, rows: np.ndarray) -> np.ndarray:
        if step not in self.lengths:
            rng = np.random.default_rng(self.seed * 1_000_003 + step)
            n = self.rows_per_step
            self.lengths[step] = {"prompt": rng.integers(64, 1025, n),
                                  "response": rng.integers(16, 4097, n),
                                  "one": np.ones(n, dtype=np.int64)}
        return self.lengths[step][COLUMNS[column][1]][rows]

    def put(self, step: int, rows, columns: list[str], wait_ms: int) -> dock_pb2.PutRequest:
        """The Put a shard sends the controller for these cells: one extent
        for the Put, each cell a location in it."""
        rows = np.asarray(rows, dtype=np.int64)
        self.extent += 1
        extent = (INCARNATION << 32) | self.extent
        request = dock_pb2.PutRequest(dock=DOCK, step=step, rows=rows.tolist(),
                                      wait_ms=wait_ms, cell_locations=True)
        start = 0
        for col in columns:
            items = self.items(step, col, rows)
            nbytes = items * ITEM_BYTES
            where = np.empty((len(rows), 4), dtype="<u8")
            where[:, 0] = SHARD_ID
            where[:, 1] = extent
            where[:, 2] = start + np.cumsum(nbytes) - nbytes
            where[:, 3] = nbytes
            start += int(nbytes.sum())
            offsets = np.zeros(len(rows) + 1, dtype=np.int64)
            np.cumsum(items, out=offsets[1:])
            request.columns.add(name=col, dtype=_DTYPES[COLUMNS[col][0]],
                                offsets=offsets.tolist(), data=where.tobytes())
        return request


# ---- the ranks ---------------------------------------------------------------

class Bench:
    """The state the ranks and the driver share (one event loop)."""

    def __init__(self, args, roles: list[Role], pid: int):
        self.args, self.roles, self.pid = args, roles, pid  # pid: the controller's
        self.rows = Rows(args.rows_per_step, args.seed)
        self.wait_ms = int(args.wait_s * 1000)
        self.write_back = False  # the pipeline phase: ranks write their column
        self.gets = self.puts = self.handed_out = self.timeouts = 0
        self.puts_in_flight = 0
        self.taken = collections.Counter()  # (role, step) -> ranks holding their share
        self.times = collections.defaultdict(list)  # (role, step) -> perf_counter of each
        self.done: dict[tuple[str, int], asyncio.Event] = collections.defaultdict(asyncio.Event)
        self.done_at: dict[tuple[str, int], float] = {}
        self.failed = asyncio.Event()
        self.error = ""

    def fail(self, message: str) -> None:
        if not self.error:
            self.error = message
        self.failed.set()

    async def until(self, awaitables, timeout: float, what) -> None:
        """Waits for every awaitable, failing with `what()` after `timeout`
        seconds or at once when a rank or the shard failed."""
        tasks = [asyncio.ensure_future(a) for a in awaitables]
        failed = asyncio.ensure_future(self.failed.wait())
        try:
            pending = set(tasks)
            deadline = time.monotonic() + timeout
            while pending and not self.failed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"timed out after {timeout:.0f} s waiting for {what()}")
                _, pending = await asyncio.wait(pending | {failed}, timeout=left,
                                                return_when=asyncio.FIRST_COMPLETED)
                pending.discard(failed)
            if self.failed.is_set():
                raise BenchError(self.error)
            for t in tasks:
                t.result()
        finally:
            for t in tasks + [failed]:
                t.cancel()

    def took(self, role: Role, step: int, now: float, rows: int) -> None:
        key = (role.name, step)
        self.taken[key] += 1
        self.times[key].append(now)
        self.handed_out += rows
        if self.taken[key] == self.args.ranks:
            self.done_at[key] = now
            self.done[key].set()

    async def put(self, stub, request: dock_pb2.PutRequest, who: str) -> None:
        self.puts_in_flight += 1
        try:
            await stub.Put(request, timeout=self.wait_ms / 1000 + 60)
        except grpc.aio.AioRpcError as e:
            raise BenchError(f"Put by {who} (step {request.step}, {len(request.rows)} rows): "
                             f"{e.code().name}: {e.details()}") from None
        finally:
            self.puts_in_flight -= 1
        self.puts += 1

    async def rank(self, stub, role: Role, rank: int) -> None:
        request = dock_pb2.GetRequest(dock=DOCK, consumer=role.name, rank=rank,
                                      wait_ms=self.wait_ms)
        who = f"{role.name} rank {rank}"
        try:
            while True:
                try:
                    batch = await stub.Get(request, timeout=self.wait_ms / 1000 + 60)
                except grpc.aio.AioRpcError as e:
                    raise BenchError(f"Get of {who}: {e.code().name}: {e.details()}") from None
                now = time.perf_counter()
                self.gets += 1
                if batch.timed_out:
                    self.timeouts += 1
                    continue
                if not batch.cell_locations and len(batch.rows):
                    raise BenchError(f"Get of {who}: the controller sent cells, not locations")
                self.took(role, batch.step, now, len(batch.rows))
                if self.write_back and role.writes and len(batch.rows):
                    await self.put(stub, self.rows.put(batch.step, batch.rows, [role.writes],
                                                       self.wait_ms), who)
        except BenchError as e:
            self.fail(str(e))
        except Exception as e:  # a bug here must stop the bench, not one rank
            self.fail(f"{who}: {e!r}")


async def keep_shard(stub, bench: Bench) -> None:
    """Registers the fake shard every second, as a shard does."""
    request = dock_pb2.RegisterShardRequest(shard=dock_pb2.ShardInfo(
        id=SHARD_ID, address="127.0.0.1:1", node="bench-node", incarnation=INCARNATION))
    while True:
        try:
            await stub.RegisterShard(request, timeout=10)
        except grpc.aio.AioRpcError as e:
            bench.fail(f"RegisterShard: {e.code().name}: {e.details()}")
            return
        await asyncio.sleep(1.0)


async def parked(stub) -> dict[str, int]:
    status = await stub.GetDockStatus(dock_pb2.GetDockStatusRequest(dock=DOCK), timeout=10)
    return {c.name: c.waiters for c in status.consumers}


async def wait_parked(stub, bench: Bench, timeout: float) -> float:
    """Waits until every rank of every role has a Get parked; returns how long."""
    start, last = time.perf_counter(), {}
    want = bench.args.ranks
    while True:
        if bench.failed.is_set():
            raise BenchError(bench.error)
        last = await parked(stub)
        if all(last.get(r.name, 0) >= want for r in bench.roles):
            return time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            raise BenchError(
                f"only {sum(last.values())} of {want * len(bench.roles)} Gets parked after "
                f"{timeout:.0f} s ({', '.join(f'{k} {v}' for k, v in last.items())}): a limit "
                f"on concurrent streams or parked Gets (--max_parked_gets_per_consumer)?")
        await asyncio.sleep(0.05)


async def cancelled(stub, timeout: float = 15.0) -> None:
    """Waits until the controller has seen the ranks' cancelled Gets end.
    grpcio (1.66) closing a channel right after ~1,000 of its calls were
    cancelled leaves them open at the server and the process hanging at exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if sum((await parked(stub)).values()) == 0:
                return
        except grpc.aio.AioRpcError:
            return  # no dock (CreateDock failed): nothing parked
        await asyncio.sleep(0.1)


# ---- the phases --------------------------------------------------------------

def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values), q))


async def put_cost(bench: Bench, stub, columns: list[str], rows: np.ndarray, pid: int) -> dict:
    """Step 0's `rows` of `columns` in Puts of --rollout_put_rows rows, one
    after the other: the controller's CPU and the round trip per Put."""
    n = bench.args.rollout_put_rows
    requests = [bench.rows.put(0, rows[i:i + n], columns, 0) for i in range(0, len(rows), n)]
    if not requests:
        return {"puts": 0, "rtt": 0.0, "cpu": 0.0}
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for request in requests:
        await bench.put(stub, request, "bench")
    return {"puts": len(requests), "rtt": (time.perf_counter() - t0) / len(requests),
            "cpu": (cpu_seconds(pid) - cpu0) / len(requests)}


async def fan_out(bench: Bench, stub, waves: dict[int, list[str]], step: int) -> list[dict]:
    """One step written wave by wave, each wave's last group alone; the
    latency of each role whose round that Put completes. Step 0's first
    wave is written but for its last group already (put_cost)."""
    args, results = bench.args, []
    all_rows = np.arange(args.rows_per_step)
    for wave, columns in waves.items():
        roles = [r for r in bench.roles if r.wave == wave]
        if not roles:  # columns no role reads
            continue
        if (step or wave) and args.rows_per_step > args.group:
            await bench.put(stub, bench.rows.put(step, all_rows[:-args.group], columns, 0),
                            "bench")
        await wait_parked(stub, bench, args.timeout)
        request = bench.rows.put(step, all_rows[-args.group:], columns, 0)
        ctl_cpu0, cpu0 = cpu_seconds(bench.pid), time.process_time()
        t0 = time.perf_counter()
        await bench.put(stub, request, "bench")
        put_rtt = time.perf_counter() - t0
        keys = [(r.name, step) for r in roles]
        await bench.until([bench.done[k].wait() for k in keys], args.timeout,
                          lambda: f"shares of step {step}: "
                                  + ", ".join(f"{k[0]} {bench.taken[k]}" for k in keys))
        ctl_cpu, cpu = cpu_seconds(bench.pid) - ctl_cpu0, time.process_time() - cpu0
        for role in roles:
            lat = [t - t0 for t in bench.times[(role.name, step)]]
            results.append({"role": role.name, "wave": wave, "first": min(lat),
                            "p50": quantile(lat, 0.5), "p99": quantile(lat, 0.99),
                            "max": max(lat), "put": put_rtt, "ctl_cpu": ctl_cpu, "cpu": cpu})
    return results


async def pipeline(bench: Bench, stub, rollout: list[str], steps: range, pid: int) -> dict:
    """Steps flowing through every role, ranks writing back; the rollout's
    Puts `--rollout_put_rows` rows a call, --driver_inflight at once."""
    args = bench.args
    bench.write_back = True
    gets0, puts0, rows0 = bench.gets, bench.puts, bench.handed_out
    ctl_cpu0, cpu0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    slots = asyncio.Semaphore(args.driver_inflight)

    async def one(step, rows):
        try:
            await bench.put(stub, bench.rows.put(step, rows, rollout, bench.wait_ms), "rollout")
        except BenchError as e:
            bench.fail(str(e))
        finally:
            slots.release()

    async def drive():
        rows = np.arange(args.rows_per_step)
        for step in steps:
            for first in range(0, args.rows_per_step, args.rollout_put_rows):
                await slots.acquire()
                if bench.failed.is_set():
                    return
                asyncio.ensure_future(one(step, rows[first:first + args.rollout_put_rows]))

    driver = asyncio.ensure_future(drive())
    keys = [(r.name, s) for s in steps for r in bench.roles]
    try:
        await bench.until([bench.done[k].wait() for k in keys] + [driver],
                          args.timeout + 30 * len(steps),
                          lambda: "the pipeline: " + ", ".join(
                              f"{k[0]} step {k[1]} {bench.taken[k]}" for k in keys
                              if bench.taken[k] < args.ranks)[:600])
        while bench.puts_in_flight:  # the last step's write-backs
            await asyncio.sleep(0.005)
    finally:
        driver.cancel()
    elapsed = time.perf_counter() - t0
    ends = [max(bench.done_at[(r.name, s)] for r in bench.roles) for s in steps]
    gaps = np.diff([t0] + ends)
    return {"steps": len(steps), "elapsed": elapsed,
            "s_per_step": float(np.median(gaps[1:] if len(gaps) > 1 else gaps)),
            "gets": bench.gets - gets0, "puts": bench.puts - puts0,
            "rows": bench.handed_out - rows0,
            "ctl_cpu": cpu_seconds(pid) - ctl_cpu0, "cpu": time.process_time() - cpu0}


# ---- the run -------------------------------------------------------------------

def open_channels(address: str, n: int) -> list[grpc.aio.Channel]:
    # A local subchannel pool each: n connections, not one shared by all.
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1),
               ("grpc.max_send_message_length", -1)]
    return [grpc.aio.insecure_channel(address, options=options) for _ in range(n)]


async def run(args, server: tdock.server.LocalServer, out: dict) -> None:
    pid = server.process.pid
    roles, rollout, waves = plan_roles(args.roles)
    columns = list(dict.fromkeys(rollout + [c for cols in waves.values() for c in cols]))
    bench = Bench(args, roles, pid)
    control, *channels = open_channels(server.address, 1 + args.channels)
    stub = dock_pb2_grpc.DockStub(control)
    rank_stubs = [dock_pb2_grpc.DockStub(c) for c in channels]
    tasks = [asyncio.ensure_future(keep_shard(stub, bench))]
    try:
        try:
            await stub.CreateDock(dock_pb2.CreateDockRequest(
                spec=dock_spec(args, roles, columns)), timeout=30)
        except grpc.aio.AioRpcError as e:
            raise BenchError(f"CreateDock: {e.code().name}: {e.details()}") from None
        # Step 0's rollout rows but its last group: half before the ranks
        # park, half after, to see what parked Gets cost a Put.
        first = np.arange(args.rows_per_step - args.group)
        half = len(first) // 2 // args.rollout_put_rows * args.rollout_put_rows
        out["put_idle"] = await put_cost(bench, stub, waves[0], first[:half], pid)
        await asyncio.sleep(0.5)
        out["rss_idle"] = rss_bytes(pid)
        out["client_rss_idle"] = rss_bytes("self")
        cpu0 = time.process_time()
        i = 0
        for role in roles:
            for rank in range(args.ranks):
                tasks.append(asyncio.ensure_future(
                    bench.rank(rank_stubs[i % len(rank_stubs)], role, rank)))
                i += 1
        out["park_s"] = await wait_parked(stub, bench, args.timeout)
        out["park_cpu"] = time.process_time() - cpu0
        await asyncio.sleep(1.0)
        out["rss_parked"] = rss_bytes(pid)
        out["client_rss_parked"] = rss_bytes("self")
        out["put_parked"] = await put_cost(bench, stub, waves[0], first[half:], pid)
        out["fanout"] = []
        for step in range(args.fanout_steps):
            out["fanout"].extend(await fan_out(bench, stub, waves, step))
        out["rss_fanout"] = rss_bytes(pid)
        steps = range(args.fanout_steps, args.fanout_steps + args.steps)
        if args.steps:
            out["pipeline"] = await pipeline(bench, stub, rollout, steps, pid)
        await wait_parked(stub, bench, args.timeout)
        out["rss_end"] = rss_bytes(pid)
        out["timeouts"] = bench.timeouts
        out["roles"], out["waves"] = roles, waves
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await cancelled(stub)
        try:
            out["requests"] = requests_by_method(server.metrics_url)
        except OSError:
            pass  # the controller is gone: the error that ended the run says why
        for c in [control] + channels:
            await c.close()


# ---- the report ----------------------------------------------------------------

def report_memory(args, out: dict) -> None:
    roles, n = out["roles"], args.ranks
    calls = n * len(roles)
    print(f"controller: {len(roles)} roles x {n} ranks, {args.rows_per_step} rows/step "
          f"({args.rows_per_step // args.group} groups of {args.group}), "
          f"{args.rows_per_step // n} rows per share, {args.channels} channel(s) for the ranks")
    print(f"RSS idle {out['rss_idle'] / _MB:.1f} MiB; with {calls} parked Gets "
          f"{out['rss_parked'] / _MB:.1f} MiB "
          f"({(out['rss_parked'] - out['rss_idle']) / calls / 1024:.1f} KiB a call); "
          f"after the fan-out steps {out['rss_fanout'] / _MB:.1f} MiB, after the pipeline "
          f"{out['rss_end'] / _MB:.1f} MiB")
    print(f"park: {calls} Gets parked in {out['park_s']:.2f} s (client CPU "
          f"{out['park_cpu']:.2f} s); client RSS {out['client_rss_idle'] / _MB:.0f} -> "
          f"{out['client_rss_parked'] / _MB:.0f} MiB")
    woken = n * sum(1 for r in roles if set(r.needs) & set(out["waves"][0]))
    idle, busy = out["put_idle"], out["put_parked"]
    print(f"rollout Put of {args.rollout_put_rows} rows, one at a time: controller CPU "
          f"{idle['cpu'] * 1e6:.0f} us a Put with no Get parked, {busy['cpu'] * 1e6:.0f} us "
          f"with {calls} parked ({woken} of them woken by each); round trip "
          f"{idle['rtt'] * 1e6:.0f} -> {busy['rtt'] * 1e6:.0f} us "
          f"({idle['puts']} and {busy['puts']} Puts)")


def report_fan_out(args, out: dict) -> float:
    """Prints the fan-out table; returns the slowest share's latency."""
    print(f"fan-out, ms from sending the Put of a round's last group "
          f"(median over {args.fanout_steps} step(s)):")
    print(f"{'role':<16} {'wave':>4} {'first':>8} {'p50':>8} {'p99':>8} {'max':>8} "
          f"{'put RTT':>8} {'ctl CPU':>8} {'cli CPU':>8}")
    by_role = collections.defaultdict(list)
    for r in out["fanout"]:
        by_role[r["role"]].append(r)
    worst = 0.0
    for role in out["roles"]:
        rs = by_role[role.name]
        med = {k: statistics.median(r[k] for r in rs) * 1000 for k in
               ("first", "p50", "p99", "max", "put", "ctl_cpu", "cpu")}
        worst = max(worst, max(r["max"] for r in rs))
        print(f"{role.name:<16} {role.wave:>4} {med['first']:>8.1f} {med['p50']:>8.1f} "
              f"{med['p99']:>8.1f} {med['max']:>8.1f} {med['put']:>8.1f} "
              f"{med['ctl_cpu']:>8.0f} {med['cpu']:>8.0f}")
    return worst


def report_needs(args, out: dict, worst: float) -> None:
    roles, n, p = out["roles"], args.ranks, out.get("pipeline")
    writers = sum(1 for r in roles if r.writes)
    rollout_puts = -(-args.rows_per_step // args.rollout_put_rows)
    ops_per_step = n * len(roles) + n * writers + rollout_puts
    if p:
        ops = (p["gets"] + p["puts"]) / p["elapsed"]
        print(f"pipeline: {p['steps']} steps in {p['elapsed']:.1f} s, "
              f"{p['s_per_step']:.2f} s/step; {p['gets']} Gets + {p['puts']} Puts = "
              f"{ops:.0f} metadata ops/s, {p['rows'] / p['elapsed']:.0f} rows/s handed out; "
              f"CPU s/step: controller {p['ctl_cpu'] / p['steps']:.2f}, "
              f"client {p['cpu'] / p['steps']:.2f} (cores busy: controller "
              f"{p['ctl_cpu'] / p['elapsed']:.2f}, client {p['cpu'] / p['elapsed']:.2f})")
    print(f"a step needs {ops_per_step} metadata ops: {n * len(roles)} Gets, "
          f"{n * writers} write-back Puts, {rollout_puts} rollout Puts "
          f"({args.rollout_put_rows} rows each)")
    print()
    print(f"{'s/step':>6} {'ops/s needed':>13} {'ops/s sustained':>16} {'ops headroom':>13} "
          f"{'step headroom':>14} {'fan-out max':>12} {'ctl CPU':>8}")
    for t in args.step_times:
        need = ops_per_step / t
        if p:
            cells = (f"{ops:>16.0f} {ops / need:>12.1f}x {t / p['s_per_step']:>13.1f}x "
                     f"{worst / t * 100:>11.2f}% {p['ctl_cpu'] / p['steps'] / t * 100:>7.1f}%")
        else:
            cells = f"{'-':>16} {'-':>13} {'-':>14} {worst / t * 100:>11.2f}% {'-':>8}"
        print(f"{t:>6g} {need:>13.0f} {cells}")
    print("(ops headroom: sustained over needed; step headroom: the step over the pipeline's "
          "s/step; fan-out max: the slowest share's latency as a share of the step; ctl CPU: "
          "the controller's CPU per step as a share of one core)")


def report(args, out: dict) -> None:
    report_memory(args, out)
    print()
    worst = report_fan_out(args, out)
    print()
    report_needs(args, out, worst)
    print()
    calls = out.get("requests", {})
    oks = {k[0]: int(v) for k, v in calls.items() if k[1] == "OK"}
    errors = {k: v for k, v in calls.items() if k[1] != "OK"}
    print("controller calls OK: " + ", ".join(f"{m} {v}" for m, v in sorted(oks.items())))
    if errors:
        print("controller calls not OK: " + ", ".join(
            f"{m} {c} {int(v)}" for (m, c), v in sorted(errors.items())))
    if out["timeouts"]:
        print(f"Gets that timed out (wait {args.wait_s:g} s): {out['timeouts']}")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="build/server/tdock-server",
                        help="tdock-server binary")
    parser.add_argument("--ranks", type=int, default=1000, help="dp_size of every role")
    parser.add_argument("--roles", type=int, default=6)
    parser.add_argument("--steps", type=int, default=4, help="steps of the pipeline phase")
    parser.add_argument("--fanout_steps", type=int, default=2)
    parser.add_argument("--rows_per_step", type=int, default=0,
                        help="a multiple of ranks x group (default: ranks x group)")
    parser.add_argument("--group", type=int, default=8, help="rows per prompt group")
    parser.add_argument("--rollout_put_rows", type=int, default=8,
                        help="rows of one rollout Put (pipeline phase)")
    parser.add_argument("--driver_inflight", type=int, default=32,
                        help="rollout Puts in flight at once")
    parser.add_argument("--channels", type=int, default=4, help="connections for the ranks")
    parser.add_argument("--wait_s", type=float, default=600, help="a Get's long-poll wait")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds any phase may wait for the controller")
    parser.add_argument("--step_times", default="10,30,120",
                        help="seconds per step of the jobs to compare with")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--server_log", default="",
                        help="file for the controller's log (default: a temporary one)")
    args = parser.parse_args()
    args.step_times = [float(t) for t in args.step_times.split(",")]
    args.rows_per_step = args.rows_per_step or args.ranks * args.group
    if min(args.ranks, args.roles, args.channels, args.group, args.fanout_steps) < 1:
        parser.error("--ranks, --roles, --channels, --group and --fanout_steps must be at "
                     "least 1")
    if args.rows_per_step % (args.ranks * args.group):
        parser.error(f"--rows_per_step {args.rows_per_step} is not a multiple of ranks x "
                     f"group ({args.ranks * args.group}): every role takes one round a step, "
                     f"whole groups for the whole-group roles")
    return args


def main() -> int:
    args = parse_args()
    log = (open(args.server_log, "w+") if args.server_log
           else tempfile.NamedTemporaryFile("w+", prefix="control_plane_", suffix=".log"))
    try:
        server = tdock.server.LocalServer(binary=args.server, args=["--role=controller"],
                                          log=log).start()
    except tdock.errors.TdockError as e:
        print(f"control_plane: FAILED: cannot start the controller: {e}", file=sys.stderr)
        return 1
    out: dict = {}
    error = ""
    try:
        asyncio.run(run(args, server, out))
    except BenchError as e:
        error = str(e)
    except grpc.aio.AioRpcError as e:  # the bench's own calls (GetDockStatus)
        error = f"{e.code().name}: {e.details()}"
    finally:
        code = server.stop()
    log.seek(0)
    lines = log.read().splitlines()
    noted = [line for line in lines if line[:2] in ("W ", "E ", "F ")]
    if error:
        print(f"control_plane: FAILED: {error}", file=sys.stderr)
        print("the controller's log ends:\n  " + "\n  ".join(lines[-20:]), file=sys.stderr)
        return 1
    report(args, out)
    print(f"controller log: {len(noted)} warning or error line(s); exit code {code}")
    for line in noted[:5]:
        print("  " + line)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
