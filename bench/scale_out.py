"""Data moved through a controller and its shards against one standalone server, in one run.

    PYTHONPATH=build/python .venv-test/bin/python bench/scale_out.py \
        --server build/server/tdock-server [--shards 1,2] [--mib 128] [--rounds 2] \
        [--durable] [--shape_mbit R]

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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

import numpy as np

import tdock
import tdock.server

_TICKS = os.sysconf("SC_CLK_TCK")


class Shaper:
    """Loopback shaping by port: each port shaped gets two htb classes of
    `mbit` Mbit/s, one for what is sent to it (puts into a shard) and one
    for what it sends (reads out of it); everything else is unshaped."""

    def __init__(self, mbit: int):
        self.mbit, self.next_class = mbit, 10

    def __enter__(self):
        self._tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "99",
                 "r2q", "1000")
        self._tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:99", "htb",
                 "rate", "100gbit")
        return self

    def __exit__(self, *exc):
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=False,
                       capture_output=True)

    def shape(self, port: int) -> None:
        for direction in ("dport", "sport"):
            classid = f"1:{self.next_class}"
            self.next_class += 1
            self._tc("class", "add", "dev", "lo", "parent", "1:", "classid", classid, "htb",
                     "rate", f"{self.mbit}mbit", "ceil", f"{self.mbit}mbit", "burst", "256k",
                     "cburst", "256k")
            self._tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio",
                     "1", "u32", "match", "ip", direction, str(port), "0xffff",
                     "flowid", classid)

    @staticmethod
    def _tc(*args: str) -> None:
        done = subprocess.run(["tc", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"tc {' '.join(args)} failed ({done.returncode}): "
                             f"{done.stderr.strip()} (shaping needs root and sch_htb)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measured_rate(mbit: int) -> float:
    """GB/s of one iperf3 stream through a port shaped to `mbit`."""
    with Shaper(mbit) as shaper:
        return iperf3_gbps(shaper.shape)


def iperf3_gbps(shape=None) -> float:
    """GB/s of one iperf3 stream on loopback (its port given to `shape`
    first, when given)."""
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if shape is not None:
            shape(port)
        for _ in range(100):  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3",
                              "-J"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise SystemExit(f"iperf3 failed: {out.stderr.strip() or out.stdout[-500:]}")
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 8e9
    finally:
        server.kill()
        server.wait()


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
            go):
    """Puts rows producer, producer + producers, ... of each step (rows of
    every node interleaved, so that a consumer's batch spans every shard)."""
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
    def __init__(self, binary: str, shards: int, durable: bool = False):
        self.binary, self.shards, self.durable = binary, shards, durable
        self.name = ("standalone" if shards == 0 else f"controller + {shards} shard(s)"
                     + (" + data dir" if durable else ""))

    def start(self):
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
    workers = [ctx.Process(target=consume, args=(topology.address, "bench", remaining, out,
                                                 ready, go))
               for _ in range(producers)]
    workers += [ctx.Process(target=produce, args=(
        topology.address, "bench", node, p, producers, steps, args.rows_per_put, row_bytes,
        ready, go))
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
    args = parser.parse_args()
    rate = measured_rate(args.shape_mbit) if args.shape_mbit else None
    if rate is not None:
        print(f"R: {args.shape_mbit} Mbit/s shaped; one iperf3 stream through it: "
              f"{rate:.4f} GB/s")
    binary = tdock.server.find_binary(args.server)
    topologies = [Topology(binary, 0)] + [Topology(binary, int(n))
                                          for n in args.shards.split(",")]
    if args.durable:
        topologies += [Topology(binary, int(n), durable=True) for n in args.shards.split(",")]
    results = {t.name: [] for t in topologies}
    for r in range(args.rounds):
        order = topologies if r % 2 == 0 else list(reversed(topologies))
        for topology in order:
            results[topology.name].append(run_once(topology, args))
    base = statistics.median(x["gbps"] for x in results[topologies[0].name])
    print(f"{'topology':<36} {'GB/s (runs)':<20} {'x standalone':>12} {'x R':>6} "
          f"{'ctl payload':>12} {'ctl meta/B':>11} {'ctl CPU s/GB':>13} {'shard CPU s/GB':>15}")
    for t in topologies:
        runs = results[t.name]
        med = statistics.median(x["gbps"] for x in runs)
        cells = " ".join(f"{x['gbps']:.2f}" for x in runs)

        def col(key, fmt):
            vals = [x[key] for x in runs if key in x]
            return format(statistics.median(vals), fmt) if vals else "-"
        over_r = f"{med / rate:.2f}" if rate else "-"
        print(f"{t.name:<36} {cells:<20} {med / base:>12.2f} {over_r:>6} "
              f"{col('ctl_payload', '.0f'):>12} "
              f"{col('ctl_meta_per_byte', '.5f'):>11} {col('ctl_cpu_per_gb', '.2f'):>13} "
              f"{col('shard_cpu_per_gb', '.2f'):>15}")


if __name__ == "__main__":
    main()
