"""Put throughput of the C++ client and the Python clients, passes taking turns.

    PYTHONPATH=build-bench/python python3 bench/compare/alternate.py \
        --server build-bench/server/tdock-server \
        --compare_bin build-bench/bench/compare/tdock_compare \
        [--shape small] [--rounds 4] [--passes 3] [--shm]

One tdock-server (with --shm: a controller and one shard with its cells in
/dev/shm, its memory limit --shard_mib, and TDOCK_TRANSPORT=shm for every
client), then --rounds rounds of: --passes Put passes of the C++ client
(tdock_compare), then --passes of each Python contender of compare.py (the
native data path when tdock._native loads, grpcio's, asyncio's), each Put
pass followed by a Get pass that releases the step. The machine's speed
drifts within a run by more than what sets these clients apart, so passes
alternate and the ratios are of medians over the same rounds. Prints each
contender's median GB/s, its passes, and its median over the C++ client's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import compare
import tdock.server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="tdock-server binary")
    parser.add_argument("--compare_bin", required=True, help="bench/compare's tdock_compare")
    parser.add_argument("--shape", default="small", choices=sorted(compare.SHAPES))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--shm", action="store_true",
                        help="a controller and a shard with shared memory")
    parser.add_argument("--shard_mib", type=int, default=512)
    args = parser.parse_args()

    servers = []
    if args.shm:
        os.environ["TDOCK_TRANSPORT"] = "shm"
        controller = tdock.server.LocalServer(binary=args.server,
                                              args=["--role=controller"]).start()
        servers = [controller, tdock.server.LocalServer(binary=args.server, args=[
            "--role=shard", f"--controller={controller.address}", "--shard_id=1",
            "--shm_dir=/dev/shm", f"--shard_memory_limit_mb={args.shard_mib}"]).start()]
    else:
        servers = [tdock.server.LocalServer(binary=args.server).start()]
    address = servers[0].address
    try:
        workload = compare.Workload(args.shape, 64)
        contenders = [compare.TdockContender(address), compare.AioTdockContender(address)]
        from tdock import _native_path
        if _native_path._native is not None:
            contenders.insert(0, compare.NativeTdockContender(address))
        for contender in contenders:
            contender.prepare(workload)
        rates = {"cpp": []} | {c.name: [] for c in contenders}
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "cpp.jsonl")
            for _ in range(args.rounds):
                if os.path.exists(out):
                    os.remove(out)
                subprocess.run([args.compare_bin, f"--tdock={address}",
                                f"--shapes={args.shape}", f"--passes={args.passes}",
                                f"--out={out}"], check=True, capture_output=True)
                with open(out) as f:
                    for line in f:
                        sample = json.loads(line)
                        if sample["contender"] == "tdock" and sample["direction"] == "put":
                            rates["cpp"].append(sample["bytes"] / sample["seconds"] / 1e9)
                for contender in contenders:
                    for _ in range(args.passes):
                        seconds = compare.timed(contender.put_pass)
                        rates[contender.name].append(workload.pass_bytes / seconds / 1e9)
                        contender.get_pass()
        for contender in contenders:
            contender.finish()
    finally:
        for server in reversed(servers):
            server.stop()
    cpp = statistics.median(rates["cpp"])
    where = "through a shard's shared memory" if args.shm else "to one server over gRPC"
    print(f"Put, shape {args.shape}, {where}, {args.rounds} rounds of {args.passes} passes:")
    for name, runs in rates.items():
        med = statistics.median(runs)
        print(f"  {name:<13} {med:5.2f} GB/s  x C++ {med / cpp:4.2f}   "
              f"passes: {', '.join(f'{r:.2f}' for r in runs)}")


if __name__ == "__main__":
    sys.exit(main())
