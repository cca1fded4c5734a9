"""Resident memory of a process putting through the native data path.

    PYTHONPATH=build/python .venv-test/bin/python bench/native_rss.py \
        --server build/server/tdock-server [--puts 10000] [--rows 16] [--kib 64] \
        [--sharded] [--data_path native]

Starts a tdock-server (with --sharded: a controller and one shard with its
cells in shared memory under /dev/shm), then one tdock.Client Puts --puts
times --rows rows of --kib KiB each (a float32 column, and a ragged int32
column of one array per row, which the native module joins), Gets every
step back and drops the batch. It prints this process's resident memory
(VmRSS) every tenth of the run, and the growth from the first tenth to the
end: with every buffer and view released it stays flat (a few MiB of
allocator and gRPC noise), whatever --puts is.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tdock
import tdock.server


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default=None, help="tdock-server binary")
    parser.add_argument("--puts", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--kib", type=int, default=64)
    parser.add_argument("--sharded", action="store_true")
    parser.add_argument("--data_path", default="native", choices=("native", "python"))
    args = parser.parse_args()

    servers = []
    if args.sharded:
        controller = tdock.server.LocalServer(binary=args.server,
                                              args=["--role=controller"]).start()
        servers = [controller, tdock.server.LocalServer(binary=args.server, args=[
            "--role=shard", f"--controller={controller.address}", "--shard_id=1",
            "--shm_dir=/dev/shm", "--shard_memory_limit_mb=256"]).start()]
        address = controller.address
    else:
        servers = [tdock.server.LocalServer(binary=args.server).start()]
        address = servers[0].address
    floats = args.kib * 256
    rng = np.random.default_rng(0)
    values = rng.random((args.rows, floats), dtype=np.float32)
    ragged = [np.arange(i + 1, dtype=np.int32) for i in range(args.rows)]
    try:
        with tdock.Client(address, data_path=args.data_path) as client:
            dock = client.create_dock({
                "name": "rss", "num_prompts": args.rows, "n_samples_per_prompt": 1,
                "steps_in_flight": 2,
                "columns": {"x": {"dtype": "float32", "inner_shape": [floats]},
                            "ids": {"dtype": "int32"}},
                "consumers": {"c": {"columns": ["x", "ids"], "dispatch_size": args.rows}}})
            tenth = max(1, args.puts // 10)
            first = None
            start = time.perf_counter()
            for step in range(args.puts):
                dock.put(step, range(args.rows), {"x": values, "ids": ragged})
                batch = dock.get("c", step=step, wait=30)
                assert len(batch) == args.rows
                del batch
                if (step + 1) % tenth == 0:
                    client.give_back_pins()
                    now = rss_mib()
                    first = now if first is None else first
                    print(f"{step + 1:>7} puts  RSS {now:8.1f} MiB  "
                          f"({time.perf_counter() - start:6.1f} s)", flush=True)
            print(f"data_path {client.data_path}: RSS grew {rss_mib() - first:+.1f} MiB "
                  f"from the first tenth to the end of {args.puts} Puts and Gets")
    finally:
        for server in reversed(servers):
            server.stop()


if __name__ == "__main__":
    main()
