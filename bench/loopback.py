"""Loopback as a network for the benchmarks: ports shaped to a link's rate
(tc, sch_htb), iperf3 streams as the ceiling, and processes laid out on
cores of their own (bench/scale_out.py --pin; bench/shm.py's iperf3 stream).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import subprocess
import time
import typing

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


def iperf3_gbps(shape=None, pairs=((None, None),)) -> float:
    """GB/s of iperf3 on loopback: one stream per (server cores, client
    cores) of `pairs` (None: wherever the kernel runs it), all at once,
    summed; each server's port given to `shape` first, when given. A pair of
    processes per stream, not `-P`: iperf3 before 3.16 runs its streams on one
    thread."""
    servers, clients, ports = [], [], []
    try:
        for server_cpus, _ in pairs:
            ports.append(free_port())
            servers.append(subprocess.Popen(
                ["iperf3", "-s", "-p", str(ports[-1])], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, preexec_fn=_on_cpus(server_cpus)))
            if shape is not None:
                shape(ports[-1])
        for port in ports:
            for _ in range(100):  # until it listens
                if listening(port):
                    break
                time.sleep(0.05)
        for port, (_, client_cpus) in zip(ports, pairs):
            clients.append(subprocess.Popen(
                ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3", "-J"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                preexec_fn=_on_cpus(client_cpus)))
        total = 0.0
        for client in clients:
            out, err = client.communicate(timeout=60)
            if client.returncode != 0:
                raise SystemExit(f"iperf3 failed: {err.strip() or out[-500:]}")
            report = json.loads(out)
            if "error" in report:  # iperf3 3.12 exits 0 after some errors
                raise SystemExit(f"iperf3 failed: {report['error']}")
            total += report["end"]["sum_received"]["bits_per_second"] / 8e9
        return total
    finally:
        for process in clients + servers:
            process.kill()
            process.wait()


def listening(port: int) -> bool:
    """Whether a TCP socket listens on `port`, read from /proc: a connection to
    find out would be an iperf3 server's test, and it may reset the next."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and local.endswith(f":{port:04X}"):  # 0A: LISTEN
                    return True
    return False


class Cores(typing.NamedTuple):
    """A topology's core sets (--pin): servers[0] the controller's (the
    standalone server's), then each shard's; producers[i] and consumers[i]
    those of shard i's clients."""
    servers: list
    producers: list
    consumers: list


def core_layout(shards: int, cores: list, shard_cores: int, share: bool) -> Cores:
    """Disjoint core sets, in order: the controller's (none standalone), then
    per shard its own, its producer's and its consumer's; wrapped around
    `cores` when `share`, else an error if they are too few."""
    need = (1 if shards else 0) + max(shards, 1) * (shard_cores + 2)
    if need > len(cores) and not share:
        label = f"{shards} shard(s)" if shards else "a standalone server"
        raise SystemExit(
            f"--pin: the layout of {label} takes {need} cores (the controller 1, each shard "
            f"{shard_cores}, each producer and each consumer 1); this process may use "
            f"{len(cores)} ({','.join(map(str, cores))}). Ask for fewer shards, or "
            "--pin_share to let processes share cores")
    it = itertools.cycle(cores)

    def take(n: int) -> set:
        return {next(it) for _ in range(n)}
    layout = Cores([take(1)] if shards else [], [], [])
    for _ in range(max(shards, 1)):
        layout.servers.append(take(shard_cores))
        layout.producers.append(take(1))
        layout.consumers.append(take(1))
    return layout


def pin(pid: int, cpus) -> None:
    """Puts every thread of process `pid` on `cpus`. Affinity belongs to a
    thread and a new thread takes its creator's, so it pins until no thread
    is left unpinned: one started meanwhile is pinned in the next pass."""
    done: set = set()
    while tids := {int(t) for t in os.listdir(f"/proc/{pid}/task")} - done:
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.sched_setaffinity(tid, cpus)
        done |= tids


def _on_cpus(cpus):
    """A preexec_fn that puts a child on `cpus` before it runs (None: none)."""
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)
