"""Data moved through a controller and its shards against one standalone server, in one run.

    PYTHONPATH=build/python .venv-test/bin/python bench/scale_out.py \
        --server build/server/tdock-server [--shards 1,2] [--mib 128] [--rounds 2] \
        [--durable] [--shape_mbit R] [--pin [--pin_shard_cores K] [--pin_share]]

For each topology (a standalone server; a controller with N shards for each N
of --shards), started fresh on loopback: one producer process per shard (per
server for standalone), each naming its shard's node (TDOCK_NODE), so that
its Puts stay on it, Puts --mib MiB (each) of rows of --row_kib KiB,
--rows_per_put rows a call, into its own rows of each step; as many consumer
processes Get them back as they come (one FIFO consumer; a producer's rows
are every N-th of the step, so that each batch has rows of every shard). It
reports:

  GB/s          payload bytes put (and got) over the time from the first Put
                to the last Get;
  ctl payload   the controller's tdock_payload_bytes_total (must be 0);
  ctl meta/B    the controller's message bytes (received and sent) per
                payload byte;
  CPU s/GB      CPU seconds per GB of payload, of the controller and of all
                shards (of the server, standalone), from /proc.

With --durable, each shard count runs again with a data dir per shard (in a
temporary directory, sync durability: every Put's cells on disk before the
controller hears of them), for the cost of recording them.

Topologies take turns, --rounds times, the order reversed each round, so
that each sees the same machine. On one host all processes share its cores:
the numbers say what each part costs, not how far N shards on N nodes go.

With --shape_mbit R (root, iproute2's tc, the kernel's sch_htb, iperf3), each
shard's port (the standalone server's) is shaped on loopback to R Mbit/s each
way, as a node's link would be: Puts into it and reads out of it each at most
R, the controller's port not at all. R as measured is what one iperf3 stream
gets through a port shaped the same way, in the same run; N shards should
then move about N x R while the cores are not what limits them (keep N x R
well under what the machine moves unshaped). It reports `x R`: GB/s over R.

With --pin (iperf3), each topology's processes run on cores of their own, as
on separate nodes: the controller on one, each shard (the standalone server)
on --pin_shard_cores, each producer and each consumer on one, taken in that
order (a shard's next to its clients') from the cores this process may use;
N shards need 1 + N x (K + 2). Too few is an error, unless --pin_share, which
wraps the layout around the cores there are (processes then share them: a
check of the layout on a small machine, not a measurement). Each round also
measures the loopback ceiling as laid out: one iperf3 stream per shard, all at
once, each from its producer's core to its shard's, summed; it reports GB/s
over one stream (`x 1 strm`) and over as many streams as shards (`x N strm`).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
import urllib.request

import numpy as np

import tdock
import tdock.server
from loopback import Cores, Shaper, core_layout, iperf3_gbps, measured_rate, pin

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


def produce(address, dock, node, producer, producers, steps, rows_per_put, row_bytes, ready,
            go, cpus=None):
    """Puts rows producer, producer + producers, ... of each step (rows of
    every node interleaved, so that a consumer's batch spans every shard)."""
    if cpus:
        pin(os.getpid(), cpus)
    os.environ["TDOCK_NODE"] = node
    with tdock.Client(address, timeout=120) as client:
        d = client.dock(dock)
        d.status()  # connected, and the spec known, before the clock starts
        row = np.frombuffer(os.urandom(row_bytes), dtype=np.uint8)
        values = [row] * rows_per_put
        rows = range(producer, producers * rows_per_put, producers)
        ready.put(1)
        go.wait()
        for step in range(steps):
            d.put(step, rows, {"x": values}, wait=120)


def consume(address, dock, remaining, out, ready, go, cpus=None):
    """Gets rows until `remaining` (rows, shared by the consumers) is 0."""
    if cpus:
        pin(os.getpid(), cpus)
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
    def __init__(self, binary: str, shards: int, durable: bool = False,
                 cores: Cores | None = None):
        self.binary, self.shards, self.durable, self.cores = binary, shards, durable, cores
        self.name = ("standalone" if shards == 0 else f"controller + {shards} shard(s)"
                     + (" + data dir" if durable else ""))

    def start(self):
        self._start()
        if self.cores:
            for server, cpus in zip(self.servers, self.cores.servers):
                pin(server.process.pid, cpus)

    def _start(self):
        if self.shards == 0:
            self.servers = [tdock.server.LocalServer(binary=self.binary).start()]
            self.address = self.servers[0].address
            self.nodes = ["standalone"]
            return
        self.servers, self.dirs = [], []
        controller = tdock.server.LocalServer(binary=self.binary,
                                              args=["--role=controller"]).start()
        self.servers.append(controller)
        self.address = controller.address
        self.nodes = []
        for i in range(1, self.shards + 1):
            extra = []
            if self.durable:  # each shard records its cells (sync durability)
                self.dirs.append(tempfile.mkdtemp(prefix=f"tdock-bench-shard-{i}-"))
                extra = [f"--data_dir={self.dirs[-1]}"]
            self.servers.append(tdock.server.LocalServer(binary=self.binary, args=[
                "--role=shard", f"--controller={controller.address}", f"--shard_id={i}",
                f"--node=node-{i}", *extra]).start())
            self.nodes.append(f"node-{i}")

    def stop(self):
        for server in reversed(getattr(self, "servers", [])):
            server.stop()
        for d in getattr(self, "dirs", []):
            shutil.rmtree(d, ignore_errors=True)


def run_once(topology: Topology, args) -> dict:
    try:
        topology.start()
    except BaseException:
        topology.stop()  # what did start, and the data dirs
        raise
    shaping = Shaper(args.shape_mbit) if args.shape_mbit else contextlib.nullcontext()
    try:
        with shaping:
            if args.shape_mbit:
                for server in topology.servers[1:] or topology.servers:
                    shaping.shape(int(server.address.rsplit(":", 1)[1]))
            return measure(topology, args)
    finally:
        topology.stop()


def measure(topology: Topology, args) -> dict:
    producers = len(topology.nodes)
    row_bytes = args.row_kib << 10
    rows_per_step = producers * args.rows_per_put
    steps = max(1, (args.mib << 20) // (args.rows_per_put * row_bytes))
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
    cores = topology.cores or Cores([], [None] * producers, [None] * producers)
    workers = [ctx.Process(target=consume, args=(topology.address, "bench", remaining, out,
                                                 ready, go, cores.consumers[c]))
               for c in range(producers)]
    workers += [ctx.Process(target=produce, args=(
        topology.address, "bench", node, p, producers, steps, args.rows_per_put, row_bytes,
        ready, go, cores.producers[p]))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default=None, help="tdock-server binary")
    parser.add_argument("--shards", default="1,2", help="shard counts, comma-separated")
    parser.add_argument("--mib", type=int, default=128,
                        help="MiB of payload each producer puts")
    parser.add_argument("--row_kib", type=int, default=256)
    parser.add_argument("--rows_per_put", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--durable", action="store_true",
                        help="also each shard count with a data dir per shard")
    parser.add_argument("--shape_mbit", type=int, default=0,
                        help="shape each shard's port to this many Mbit/s each way (root)")
    parser.add_argument("--pin", action="store_true",
                        help="each process on cores of its own, and the loopback ceiling "
                             "measured as laid out (iperf3)")
    parser.add_argument("--pin_shard_cores", type=int, default=1,
                        help="with --pin, cores per shard (per standalone server)")
    parser.add_argument("--pin_share", action="store_true",
                        help="with --pin, wrap the layout around too few cores")
    args = parser.parse_args()
    counts = [int(n) for n in args.shards.split(",")]
    layouts: dict[int, Cores] = {}
    if args.pin:
        if shutil.which("iperf3") is None:
            raise SystemExit("--pin measures the loopback ceiling with iperf3, which is not "
                             "on PATH (Debian: apt-get install iperf3)")
        cores = sorted(os.sched_getaffinity(0))
        for n in sorted({0, *counts}, reverse=True):  # an error names the most cores needed
            layouts[n] = core_layout(n, cores, args.pin_shard_cores, args.pin_share)
    rate = measured_rate(args.shape_mbit) if args.shape_mbit else None
    if rate is not None:
        print(f"R: {args.shape_mbit} Mbit/s shaped; one iperf3 stream through it: "
              f"{rate:.4f} GB/s")
    binary = tdock.server.find_binary(args.server)
    topologies = [Topology(binary, n, cores=layouts.get(n)) for n in [0, *counts]]
    if args.durable:
        topologies += [Topology(binary, n, durable=True, cores=layouts.get(n)) for n in counts]
    # The ceiling of s streams, laid out as a topology of s shards (1: standalone).
    streams = {max(n, 1): layout for n, layout in sorted(layouts.items(), reverse=True)}
    ceilings: dict[int, list] = {s: [] for s in streams}
    results = {t.name: [] for t in topologies}
    for r in range(args.rounds):
        for s, layout in streams.items():
            ceilings[s].append(iperf3_gbps(pairs=list(zip(layout.servers[-s:],
                                                          layout.producers))))
        order = topologies if r % 2 == 0 else list(reversed(topologies))
        for topology in order:
            results[topology.name].append(run_once(topology, args))
    if args.pin:
        print_layout(topologies, ceilings)
    base = statistics.median(x["gbps"] for x in results[topologies[0].name])
    ceiling = {s: statistics.median(runs) for s, runs in ceilings.items()}
    pinned = f" {'x 1 strm':>8} {'x N strm':>8}" if args.pin else ""
    print(f"{'topology':<36} {'GB/s (runs)':<20} {'x standalone':>12} {'x R':>6}{pinned} "
          f"{'ctl payload':>12} {'ctl meta/B':>11} {'ctl CPU s/GB':>13} {'shard CPU s/GB':>15}")
    for t in topologies:
        runs = results[t.name]
        med = statistics.median(x["gbps"] for x in runs)
        cells = " ".join(f"{x['gbps']:.2f}" for x in runs)

        def col(key, fmt):
            vals = [x[key] for x in runs if key in x]
            return format(statistics.median(vals), fmt) if vals else "-"
        over_r = f"{med / rate:.2f}" if rate else "-"
        over_ceiling = (f" {med / ceiling[1]:>8.2f} {med / ceiling[max(t.shards, 1)]:>8.2f}"
                        if args.pin else "")
        print(f"{t.name:<36} {cells:<20} {med / base:>12.2f} {over_r:>6}{over_ceiling} "
              f"{col('ctl_payload', '.0f'):>12} "
              f"{col('ctl_meta_per_byte', '.5f'):>11} {col('ctl_cpu_per_gb', '.2f'):>13} "
              f"{col('shard_cpu_per_gb', '.2f'):>15}")


def print_layout(topologies: list, ceilings: dict) -> None:
    """The cores each topology's processes ran on, and the loopback ceilings."""
    def cpus(sets):
        return " | ".join(",".join(map(str, sorted(c))) for c in sets)
    for t in topologies:
        if not t.durable:
            print(f"cores, {t.name}: servers {cpus(t.cores.servers)}; producers "
                  f"{cpus(t.cores.producers)}; consumers {cpus(t.cores.consumers)}")
    print("loopback ceiling (iperf3; stream i from producer i's cores to shard i's), GB/s: "
          + "; ".join(f"{s} stream(s) " + ", ".join(f"{g:.2f}" for g in runs)
                      for s, runs in sorted(ceilings.items())))


if __name__ == "__main__":
    main()
