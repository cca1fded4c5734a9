#!/usr/bin/python3
"""A simulated GRPO training loop on tdock, one process per worker.

    PYTHONPATH=build/python .venv/bin/python examples/grpo_pipeline.py
    ... --steps 2 --prompts 8 --n 4 --dp 2 --time_scale 0    # a few seconds
    ... --server HOST:PORT                                    # a running server

It starts tdock-server on a free loopback port (unless --server is given),
creates the dock of examples/grpo.yaml (sizes patched from the flags) and
starts the roles as separate processes, each with its own client:

  driver         puts each step's prompts: --prompts groups of --n identical
                 rows (prompt_ids). Two steps are in flight: the Put of step
                 s+2 waits until step s is released.
  rollout (x2)   asyncio on tdock.aio: takes prompt groups as they come and
                 "generates" up to four batches at once, long-tail responses
                 (response_ids), each batch taking as long as its longest.
  reward         scores whole groups (rewards).
  ref_logprob,   data-parallel ranks of a `balanced` consumer: each round is
  actor_logprob  split over the ranks by tokens and cut into micro-batches
                 under a token budget; per-token log-probs (ref_log_prob,
                 old_log_prob).
  advantage      GRPO advantages per whole group: (reward - mean) / (std + eps).
  actor_update   balanced ranks again; checks every cell it gets, reading
                 each micro-batch as a TensorDict (jagged nested tensors).
The log-prob roles, too, read a TensorDict and write one back.

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

This file is the main process (the server, the dock, the workers' lives);
the workers are in grpo_workers.py, the tally and the table in
grpo_report.py.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import time

import yaml

from grpo_report import Tally, print_table, rounds_line, status_line, summary
from grpo_workers import REPO, ROLES, Config, tdock, worker
from tdock.server import LocalServer

STALL_S = 120.0     # no record for this long: the run has hung


class PipelineError(Exception):
    """The run failed; the message says how."""


def start_server(binary: str, metrics_listen: str) -> LocalServer:
    """tdock-server on a free loopback port (tdock.server.LocalServer)."""
    try:
        return LocalServer(binary=binary, metrics_listen=metrics_listen).start()
    except tdock.errors.TdockError as e:
        raise PipelineError(f"{e} (build it, or pass --server_bin, $TDOCK_SERVER_BIN "
                            "or --server)") from None


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
        c[role]["pad"] = args.pad
    return spec


def collect(procs: dict, q, tally: Tally, dock, cfg: Config, quiet: bool) -> None:
    """Takes records until every worker has exited; raises on a crash or hang."""
    exited: set = set()
    up: set = set()  # workers past their imports (torch takes seconds to load)
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
        elif rec["kind"] == "up":
            up.add((rec["role"], rec["rank"]))
        else:
            last_record = now
            tally.add(rec)
            if (rec["kind"] == "step_done" and rec["role"] == "actor_update"
                    and tally.step_finished("actor_update", rec["step"])
                    and not quiet):
                print(f"[{rec['t']:6.1f}s] step {rec['step']} trained: every "
                      "cell checked by actor_update", flush=True)
        if not quiet and now - last_status >= 2.0:
            starting = (f" | {len(up)} of {len(procs)} worker processes up (each "
                        "imports torch first)" if len(up) < len(procs) else "")
            print(status_line(dock, time.time() - cfg.t0) + starting, flush=True)
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
        if not args.quiet:  # exiting takes seconds too (each process unloads torch)
            print(f"[{time.time() - cfg.t0:6.1f}s] every worker is done; waiting for the "
                  f"{len(procs)} worker processes to exit", flush=True)
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
    ap.add_argument("--pad", choices=("none", "repeat"), default="none",
                    help="how the balanced roles fill a round's short shares: none "
                    "(an empty share is an empty batch) or repeat (repeats of the "
                    "round's rows, which the workers leave out of their writes)")
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
            server = start_server(args.server_bin, args.metrics_listen)
            if server.metrics_url and not args.quiet:
                print(f"tdock-server metrics at {server.metrics_url}")
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
          f"the rows handed out; {rounds_line(tally)}; {workers} worker processes "
          "exited 0; every "
          "step was released" + ("" if args.server else
                                 "; tdock-server exited 0 on SIGTERM"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
