"""Data moved through a controller and its shards against one standalone server, in one run.

    PYTHONPATH=build/python .venv-test/bin/python bench/scale_out.py \
        --server build/server/tdock-server [--shards 1,2] [--mib 256] [--rounds 2]

For each topology (a standalone server; a controller with N shards for each N
of --shards), started fresh on loopback: one producer process per shard (per
server for standalone), each naming its shard's node (TDOCK_NODE), so that
its Puts stay on it, Puts --mib MiB in all of rows of --row_kib KiB,
--rows_per_put rows a call, into disjoint rows of each step; as many consumer
processes Get them back as they come (one FIFO consumer). It reports:

  GB/s          payload bytes put (and got) over the time from the first Put
                to the last Get;
  ctl payload   the controller's tdock_payload_bytes_total (must be 0);
  ctl meta/B    the controller's message bytes (received and sent) per
                payload byte;
  CPU s/GB      CPU seconds per GB of payload, of the controller and of all
                shards (of the server, standalone), from /proc.

Topologies take turns, --rounds times, the order reversed each round, so
that each sees the same machine. On one host all processes share its cores:
the numbers say what each part costs, not how far N shards on N nodes go.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import time
import urllib.request

import numpy as np

import tdock
import tdock.server

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def metric(url: str, name: str, labels: str = "") -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def produce(address, dock, node, producer, steps, rows_per_put, row_bytes, ready, go):
    os.environ["TDOCK_NODE"] = node
    with tdock.Client(address, timeout=120) as client:
        d = client.dock(dock)
        d.status()  # connected, and the spec known, before the clock starts
        row = np.frombuffer(os.urandom(row_bytes), dtype=np.uint8)
        values = [row] * rows_per_put
        first = producer * rows_per_put
        ready.put(1)
        go.wait()
        for step in range(steps):
            d.put(step, range(first, first + rows_per_put), {"x": values}, wait=120)


def consume(address, dock, remaining, out, ready, go):
    """Gets rows until `remaining` (rows, shared by the consumers) is 0."""
    with tdock.Client(address, timeout=120) as client:
        d = client.dock(dock)
        d.status()
        client.shards()
        got = 0
        ready.put(1)
        go.wait()
        while remaining.value > 0:
            b = d.get("c", wait=0.2)
            if len(b.rows):
                got += int(b.packed("x")[0].nbytes)
                with remaining.get_lock():
                    remaining.value -= len(b.rows)
        out.put(got)


class Topology:
    def __init__(self, binary: str, shards: int):
        self.binary, self.shards = binary, shards
        self.name = "standalone" if shards == 0 else f"controller + {shards} shard(s)"

    def start(self):
        if self.shards == 0:
            self.servers = [tdock.server.LocalServer(binary=self.binary).start()]
            self.address = self.servers[0].address
            self.nodes = ["standalone"]
            return
        controller = tdock.server.LocalServer(binary=self.binary,
                                              args=["--role=controller"]).start()
        self.servers = [controller]
        self.address = controller.address
        self.nodes = []
        for i in range(1, self.shards + 1):
            self.servers.append(tdock.server.LocalServer(binary=self.binary, args=[
                "--role=shard", f"--controller={controller.address}", f"--shard_id={i}",
                f"--node=node-{i}"]).start())
            self.nodes.append(f"node-{i}")

    def stop(self):
        for server in reversed(self.servers):
            server.stop()


def run_once(topology: Topology, args) -> dict:
    topology.start()
    try:
        producers = len(topology.nodes)
        row_bytes = args.row_kib << 10
        rows_per_step = producers * args.rows_per_put
        steps = max(1, (args.mib << 20) // (rows_per_step * row_bytes))
        with tdock.Client(topology.address) as client:
            client.create_dock({
                "name": "bench", "num_prompts": rows_per_step, "n_samples_per_prompt": 1,
                "steps_in_flight": 4, "columns": {"x": {"dtype": "uint8"}},
                "consumers": {"c": {"columns": ["x"], "dispatch_size": args.rows_per_put}}})
        ctl = topology.servers[0]
        shards = topology.servers[1:] or topology.servers
        cpu_before = [cpu_seconds(s.process.pid) for s in topology.servers]
        meta_before = (metric(ctl.metrics_url, "tdock_received_bytes_total")
                       + metric(ctl.metrics_url, "tdock_sent_bytes_total"))
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        remaining = ctx.Value("q", steps * rows_per_step)
        ready, go = ctx.Queue(), ctx.Event()
        workers = [ctx.Process(target=consume, args=(topology.address, "bench", remaining, out,
                                                     ready, go))
                   for _ in range(producers)]
        workers += [ctx.Process(target=produce, args=(
            topology.address, "bench", node, p, steps, args.rows_per_put, row_bytes, ready, go))
            for p, node in enumerate(topology.nodes)]
        for w in workers:
            w.start()
        for _ in workers:  # every process started, imported and connected
            ready.get(timeout=120)
        start = time.perf_counter()
        go.set()
        got = sum(out.get(timeout=600) for _ in range(producers))
        elapsed = time.perf_counter() - start
        for w in workers:
            w.join(60)
        payload = steps * rows_per_step * row_bytes
        assert got == payload, f"got {got} bytes of {payload}"
        cpu = [cpu_seconds(s.process.pid) - b for s, b in zip(topology.servers, cpu_before)]
        meta = (metric(ctl.metrics_url, "tdock_received_bytes_total")
                + metric(ctl.metrics_url, "tdock_sent_bytes_total")) - meta_before
        result = {"gbps": payload / elapsed / 1e9, "payload": payload}
        if topology.shards:
            result["ctl_payload"] = metric(ctl.metrics_url, "tdock_payload_bytes_total")
            result["ctl_meta_per_byte"] = meta / payload
            result["ctl_cpu_per_gb"] = cpu[0] / (payload / 1e9)
            result["shard_cpu_per_gb"] = sum(cpu[1:]) / (payload / 1e9)
        else:
            result["shard_cpu_per_gb"] = cpu[0] / (payload / 1e9)
        return result
    finally:
        topology.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default=None, help="tdock-server binary")
    parser.add_argument("--shards", default="1,2", help="shard counts, comma-separated")
    parser.add_argument("--mib", type=int, default=256, help="MiB of payload per run")
    parser.add_argument("--row_kib", type=int, default=256)
    parser.add_argument("--rows_per_put", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    binary = tdock.server.find_binary(args.server)
    topologies = [Topology(binary, 0)] + [Topology(binary, int(n))
                                          for n in args.shards.split(",")]
    results = {t.name: [] for t in topologies}
    for r in range(args.rounds):
        order = topologies if r % 2 == 0 else list(reversed(topologies))
        for topology in order:
            results[topology.name].append(run_once(topology, args))
    base = statistics.median(x["gbps"] for x in results[topologies[0].name])
    print(f"{'topology':<24} {'GB/s (runs)':<20} {'x standalone':>12} {'ctl payload':>12} "
          f"{'ctl meta/B':>11} {'ctl CPU s/GB':>13} {'shard CPU s/GB':>15}")
    for t in topologies:
        runs = results[t.name]
        med = statistics.median(x["gbps"] for x in runs)
        cells = " ".join(f"{x['gbps']:.2f}" for x in runs)

        def col(key, fmt):
            vals = [x[key] for x in runs if key in x]
            return format(statistics.median(vals), fmt) if vals else "-"
        print(f"{t.name:<24} {cells:<20} {med / base:>12.2f} {col('ctl_payload', '.0f'):>12} "
              f"{col('ctl_meta_per_byte', '.5f'):>11} {col('ctl_cpu_per_gb', '.2f'):>13} "
              f"{col('shard_cpu_per_gb', '.2f'):>15}")


if __name__ == "__main__":
    main()
