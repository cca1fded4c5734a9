"""Python Put and Get through a shard's shared memory against loopback gRPC, in one run.

    PYTHONPATH=build/python .venv-test/bin/python bench/shm.py \
        --server build/server/tdock-server [--mib 256] [--row_kib 256] \
        [--rows_per_call 16] [--rounds 3] [--shard_mib 256] \
        [--compare_bin build-bench/bench/compare/tdock_compare]

One controller and one shard (--shm_dir=/dev/shm, --shard_memory_limit_mb
--shard_mib) on loopback; one Python
process (tdock.Client) Puts --mib MiB, --rows_per_call rows of --row_kib KiB
a call, step after step, and Gets each step's rows back in calls of as many
rows, with transport "shm" and "grpc" taking turns (--rounds times each, the
order reversed each round). It reports per transport, medians over rounds:

  Put GB/s       payload over the time spent in put();
  Get GB/s       payload over the time spent in get() (through shared memory
                 its columns are views of the shard's chunks: nothing copied);
  Get+copy GB/s  the same, plus copying each column into a warm buffer of
                 the caller's (as handing it to a tensor of one's own would);

and one iperf3 stream on loopback, measured in the same run, for scale
(docs/scale-out.md, "Same-host shared memory").

With --compare_bin (bench/compare's tdock_compare), the C++ client and the
Python clients (bench/compare/compare.py: blocking and asyncio) then run
bench/compare's workload ("small": 1,024 rows x 9 columns x 8,192 float32,
64-row calls) through the same controller and shard, with TDOCK_TRANSPORT
shm and grpc, and it reports each one's median GB/s: the Python clients
against the C++ one on each path.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tdock
import tdock.server
from loopback import iperf3_gbps


def one_pass(address: str, transport: str, dock_name: str, args) -> dict:
    """Put then Get --mib MiB through `transport`; seconds in each."""
    row_floats = args.row_kib * 256
    rows_per_step = args.rows_per_call * 4
    steps = max(1, args.mib * 1024 // (args.row_kib * rows_per_step))
    data = np.random.default_rng(0).random((args.rows_per_call, row_floats), dtype=np.float32)
    sink = np.empty_like(data)
    put_s = get_s = copy_s = 0.0
    with tdock.Client(address, transport=transport) as client:
        dock = client.dock(dock_name)
        for step in range(steps):
            for first in range(0, rows_per_step, args.rows_per_call):
                t = time.perf_counter()
                dock.put(step, range(first, first + args.rows_per_call), {"x": data})
                put_s += time.perf_counter() - t
            for _ in range(rows_per_step // args.rows_per_call):
                t = time.perf_counter()
                batch = dock.get("c", step=step, wait=30)
                got = time.perf_counter()
                np.copyto(sink, batch.column("x").values.reshape(sink.shape))
                copy_s += time.perf_counter() - got
                get_s += got - t
                del batch
    payload = steps * rows_per_step * row_floats * 4
    return {"put": payload / put_s / 1e9, "get": payload / get_s / 1e9,
            "get_copy": payload / (get_s + copy_s) / 1e9}


def compare_clients(address: str, binary: str, passes: int) -> None:
    """bench/compare's C++ and Python clients through `address`, over each
    transport: median GB/s of each."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare", "compare.py")
    with tempfile.TemporaryDirectory() as tmp:
        for transport in ("shm", "grpc"):
            out = os.path.join(tmp, f"{transport}.jsonl")
            env = dict(os.environ, TDOCK_TRANSPORT=transport)
            for command in ([binary, f"--tdock={address}", "--shapes=small",
                             f"--passes={passes}", f"--out={out}"],
                            [sys.executable, script, f"--tdock={address}", "--shapes=small",
                             f"--passes={passes}", f"--out={out}"]):
                subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs = collections.defaultdict(list)
            with open(out) as f:
                for line in f:
                    r = json.loads(line)
                    runs[(r["client"], r["contender"], r["direction"])].append(
                        r["bytes"] / r["seconds"] / 1e9)
            cpp = {d: statistics.median(runs[("cpp", "tdock", d)]) for d in ("put", "get")}
            for (client, contender, direction), gbps in sorted(runs.items()):
                med = statistics.median(gbps)
                print(f"{transport:<5} {client:<7} {contender:<10} {direction:<4} {med:6.2f} GB/s"
                      f"   x C++ {med / cpp[direction]:.2f}")


def dock_spec(name: str, args) -> dict:
    return {"name": name, "num_prompts": args.rows_per_call * 4, "n_samples_per_prompt": 1,
            "steps_in_flight": 2,
            "columns": {"x": {"dtype": "float32", "inner_shape": [args.row_kib * 256]}},
            "consumers": {"c": {"columns": ["x"], "dispatch_size": args.rows_per_call}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default=None, help="tdock-server binary")
    parser.add_argument("--mib", type=int, default=256, help="MiB each pass moves")
    parser.add_argument("--row_kib", type=int, default=256)
    parser.add_argument("--rows_per_call", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shard_mib", type=int, default=256,
                        help="the shard's memory limit: released cells give way to Puts "
                             "past it, so its chunks are reused (warm)")
    parser.add_argument("--compare_bin", default=None,
                        help="bench/compare's tdock_compare: C++ and Python clients on "
                             "bench/compare's workload, each transport")
    parser.add_argument("--compare_passes", type=int, default=5)
    args = parser.parse_args()

    controller = tdock.server.LocalServer(binary=args.server, args=["--role=controller"]).start()
    shard = tdock.server.LocalServer(binary=args.server, args=[
        "--role=shard", f"--controller={controller.address}", "--shard_id=1",
        "--shm_dir=/dev/shm", f"--shard_memory_limit_mb={args.shard_mib}"]).start()
    results: dict[str, list[dict]] = {"shm": [], "grpc": []}
    try:
        with tdock.Client(controller.address) as client:
            n = 0
            for r in range(args.rounds):
                order = ["shm", "grpc"] if r % 2 == 0 else ["grpc", "shm"]
                for transport in order:
                    n += 1
                    # A warm-up pass (the shard's chunks, the client's
                    # mappings and channels), then the measured one.
                    for name in (f"warm{n}", f"bench{n}"):
                        client.create_dock(dock_spec(name, args))
                        run = one_pass(controller.address, transport, name, args)
                        client.delete_dock(name)
                    results[transport].append(run)
        if args.compare_bin:
            print("bench/compare's workload (small), median GB/s:")
            compare_clients(controller.address, args.compare_bin, args.compare_passes)
    finally:
        shard.stop()
        controller.stop()
    iperf = iperf3_gbps()
    print(f"one iperf3 stream on loopback: {iperf:.2f} GB/s")
    print(f"{'transport':<10} {'Put GB/s':>10} {'Get GB/s':>10} {'Get+copy GB/s':>14}"
          f"   (x iperf3: Put, Get, Get+copy)")
    for transport, runs in results.items():
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        rounds = ", ".join(f"{run['put']:.2f}/{run['get']:.2f}" for run in runs)
        print(f"{transport:<10} {med['put']:>10.2f} {med['get']:>10.2f} {med['get_copy']:>14.2f}"
              f"   ({med['put'] / iperf:.2f}, {med['get'] / iperf:.2f}, "
              f"{med['get_copy'] / iperf:.2f})   rounds put/get: {rounds}")


if __name__ == "__main__":
    main()
