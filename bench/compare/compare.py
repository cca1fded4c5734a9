#!/usr/bin/python3
"""Python side of the comparison benchmark: tdock's Python client against
Redis through redis-py, on the same shapes and chunks as tdock_compare.

Each column of a shape is one 2-D float32 numpy array (rows x elements),
prepared once. Per chunk of rows (all columns per call):

  tdock  Put: Dock.put(step, rows, {column: array[begin:end]}), its bytes
              sent by grpcio (data_path "python")
         Get: Dock.get(consumer, step=step, count=rows), then
              Batch.packed(column) for every column (numpy views).
  tdock-native  the same with data_path "native": each Put's bytes sent
         by the C++ client (tdock._native), Gets as tdock's; when the
         module is built.
  tdock-aio  the same through tdock.aio, awaited one call at a time.
         A pass of Gets of either ends with Client.give_back_pins(): through a
         shard's shared memory, the memory its views held is free before the
         next contender's Puts.
  redis  Put: one MSET of every (row, column) key of the chunk, values are
              the rows' buffers (memoryviews, no copy on our side).
         Get: one MGET of those keys, then np.frombuffer on every value.

Each contender first runs one pass whose bytes are compared with the arrays,
then `passes` timed passes taking turns. One JSON line per timed pass goes to
--out (same format as tdock_compare's, with "client": "python").

    compare.py --tdock HOST:PORT --redis HOST:PORT [--shapes small,medium]
               [--chunk-rows 64] [--passes 3] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable

import numpy as np

SHAPES = {  # name: (rows, columns, float32 per row)
    "small": (1024, 9, 8192),
    "medium": (4096, 15, 4096),
}


class Workload:
    """A shape's arrays and its chunks of rows."""

    def __init__(self, name: str, chunk_rows: int):
        self.name = name
        self.rows, self.ncols, self.elements = SHAPES[name]
        rng = np.random.default_rng(abs(hash(name)) % (1 << 32))
        self.columns = {f"c{c}": rng.random((self.rows, self.elements), dtype=np.float32)
                        for c in range(self.ncols)}
        self.chunks = [(b, min(self.rows, b + chunk_rows))
                       for b in range(0, self.rows, chunk_rows)]
        self.pass_bytes = self.rows * self.ncols * self.elements * 4


class TdockContender:
    name = "tdock"
    data_path = "python"

    def __init__(self, address: str):
        import tdock
        self.tdock = tdock
        self.client = tdock.Client(address, timeout=120.0, data_path=self.data_path)
        self.step = -1

    def prepare(self, w: Workload) -> None:
        self.w = w
        self.prepare_named(f"compare-py-{w.name}")

    def prepare_named(self, dock_name: str) -> None:
        """Creates the dock `dock_name` for the workload (deleting an old one)."""
        w = self.w
        self.dock_name = dock_name
        self.finish_quietly()
        cols = list(w.columns)
        self.dock = self.client.create_dock({
            "name": self.dock_name, "num_prompts": w.rows, "n_samples_per_prompt": 1,
            "steps_in_flight": 2, "memory_limit_bytes": 0,
            "preallocate_bytes": w.pass_bytes + (16 << 20),
            "columns": {c: {"dtype": "float32"} for c in cols},
            "consumers": {"reader": {"columns": cols,
                                     "dispatch_size": w.chunks[0][1]}}})
        self.puts = [(range(b, e), {c: a[b:e] for c, a in w.columns.items()})
                     for b, e in w.chunks]

    def finish_quietly(self) -> None:
        try:
            self.client.delete_dock(self.dock_name)
        except self.tdock.errors.NotFound:
            pass

    def put_pass(self) -> None:
        self.step += 1
        for rows, columns in self.puts:
            ack = self.dock.put(self.step, rows, columns)
            if ack.rows != len(rows):
                raise RuntimeError(f"tdock put wrote {ack.rows} of {len(rows)} rows")

    def get_pass(self, check: bool = False) -> None:
        ended = False
        for b, e in self.w.chunks:
            batch = self.dock.get("reader", step=self.step, count=e - b, wait=30.0)
            ended = self.take(batch, b, e, check)
        del batch
        if not ended:
            self.dock.release(self.step)
        # Through shared memory: the pins of the views just dropped go back
        # now, before another contender's pass, not within 50 ms.
        self.client.give_back_pins()

    def take(self, batch, b: int, e: int, check: bool) -> bool:
        """Views every column of a Get of rows [b, e) (compared with the
        arrays when `check`); whether it ended the step."""
        if len(batch) != e - b:
            raise RuntimeError(f"{self.name} get returned {len(batch)} rows, not {e - b}")
        for c, array in self.w.columns.items():
            values, _ = batch.packed(c)
            if check and not np.array_equal(values.reshape(e - b, -1), array[b:e]):
                raise RuntimeError(f"{self.name} get: column {c} rows {b}..{e} differ")
        return batch.end_of_step

    def finish(self) -> None:
        self.client.delete_dock(self.dock_name)


class NativeTdockContender(TdockContender):
    name = "tdock-native"
    data_path = "native"

    def prepare(self, w: Workload) -> None:
        self.w = w
        self.prepare_named(f"compare-native-{w.name}")


class AioTdockContender:
    """The same passes through tdock.aio, one call at a time in an event
    loop: what the asyncio client costs over the blocking one."""
    name = "tdock-aio"

    def __init__(self, address: str):
        import asyncio
        import tdock.aio
        self.tdock = tdock
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._connect(tdock.aio, address))
        self.blocking = TdockContender(address)  # creates and deletes its dock
        self.step = -1

    @staticmethod
    async def _connect(aio, address: str):
        return aio.Client(address, timeout=120.0)

    def prepare(self, w: Workload) -> None:
        self.w = self.blocking.w = w
        self.blocking.prepare_named(f"compare-py-aio-{w.name}")
        self.dock = self.client.dock(self.blocking.dock_name)
        self.puts = self.blocking.puts

    def put_pass(self) -> None:
        self.step += 1
        self.loop.run_until_complete(self._put_pass())

    async def _put_pass(self) -> None:
        for rows, columns in self.puts:
            ack = await self.dock.put(self.step, rows, columns)
            if ack.rows != len(rows):
                raise RuntimeError(f"tdock.aio put wrote {ack.rows} of {len(rows)} rows")

    def get_pass(self, check: bool = False) -> None:
        self.loop.run_until_complete(self._get_pass(check))

    async def _get_pass(self, check: bool) -> None:
        ended = False
        for b, e in self.w.chunks:
            batch = await self.dock.get("reader", step=self.step, count=e - b, wait=30.0)
            ended = self.blocking.take(batch, b, e, check)
        del batch
        if not ended:
            await self.dock.release(self.step)
        # The event loop stops until this contender's next pass: the pins of
        # the views just dropped go back now, not then (through shared
        # memory they would keep the step's memory from the other
        # contenders' Puts meanwhile).
        await self.client.give_back_pins()

    def finish(self) -> None:
        self.blocking.finish()
        self.loop.run_until_complete(self.client.close())


class RedisContender:
    name = "redis"

    def __init__(self, address: str):
        import redis
        host, port = address.rsplit(":", 1)
        self.redis = redis.Redis(host=host, port=int(port))
        self.redis.ping()

    def prepare(self, w: Workload) -> None:
        self.w = w
        self.msets, self.mgets = [], []
        for b, e in w.chunks:
            mapping = {}
            for r in range(b, e):
                for c, (name, array) in enumerate(w.columns.items()):
                    mapping[f"{w.name}:{r}:{c}"] = memoryview(array[r]).cast("B")
            self.msets.append(mapping)
            self.mgets.append(list(mapping))

    def put_pass(self) -> None:
        for mapping in self.msets:
            self.redis.mset(mapping)

    def get_pass(self, check: bool = False) -> None:
        for (b, e), keys in zip(self.w.chunks, self.mgets):
            values = self.redis.mget(keys)
            arrays = [np.frombuffer(v, np.float32) for v in values]
            if check:
                expected = [self.w.columns[f"c{c}"][r]
                            for r in range(b, e) for c in range(self.w.ncols)]
                if not all(np.array_equal(x, y) for x, y in zip(arrays, expected)):
                    raise RuntimeError(f"redis mget: rows {b}..{e} differ")

    def finish(self) -> None:
        pass


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_shape(w: Workload, contenders: list, passes: int, out) -> None:
    for c in contenders:
        c.prepare(w)
        c.put_pass()
        c.get_pass(check=True)
        print(f"  {w.name:<6} {c.name:<6} verified {w.pass_bytes} bytes each way "
              "(python)", file=sys.stderr)
    for p in range(1, passes + 1):
        for c in contenders:
            for direction, fn in (("put", c.put_pass), ("get", c.get_pass)):
                seconds = timed(fn)
                print(f"  {w.name:<6} {c.name:<6} {direction} pass {p}: {seconds:7.3f} s "
                      f"{w.pass_bytes / seconds / 1e9:6.2f} GB/s (python)", file=sys.stderr)
                if out:
                    out.write(json.dumps({
                        "client": "python", "contender": c.name, "shape": w.name,
                        "direction": direction, "pass": p, "bytes": w.pass_bytes,
                        "chunk_rows": w.chunks[0][1], "seconds": round(seconds, 6)}) + "\n")
                    out.flush()
    for c in contenders:
        c.finish()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tdock", default="", help="tdock-server address")
    parser.add_argument("--redis", default="", help="redis-server address")
    parser.add_argument("--shapes", default="small,medium")
    parser.add_argument("--chunk-rows", type=int, default=64)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    contenders = []
    if args.tdock:
        contenders.append(TdockContender(args.tdock))
        from tdock import _native_path
        if _native_path._native is not None:
            contenders.append(NativeTdockContender(args.tdock))
        contenders.append(AioTdockContender(args.tdock))
    if args.redis:
        contenders.append(RedisContender(args.redis))
    if not contenders:
        parser.error("no contender: give --tdock or --redis")
    out = open(args.out, "a") if args.out else None
    try:
        for name in filter(None, args.shapes.split(",")):
            if name not in SHAPES:
                parser.error(f"unknown shape {name!r} (known: {', '.join(SHAPES)})")
            run_shape(Workload(name, args.chunk_rows), contenders, args.passes, out)
    finally:
        if out:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
