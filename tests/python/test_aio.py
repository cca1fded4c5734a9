"""tdock.aio against a real server: the blocking client's surface as
coroutines (create, list, status, put, get, sample, read, iter as `async
for`, ack, nack, release, add_consumer, delete), errors as tdock.errors, and
hundreds of Gets parked at once in one event loop, on no thread of their
own, every one served once rows arrive."""

import asyncio
import threading

import numpy as np
import pytest

import tdock
from conftest import grpo_spec


def run(coro):
    return asyncio.run(coro)


def cells(rows, length=3):
    return [np.arange(length, dtype=np.int32) + 10 * r for r in rows]


def test_the_blocking_surface_as_coroutines(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as client:
            # "audit" never reads here: the step stays live until released.
            dock = await client.create_dock(grpo_spec(dock_name, prompts=2, n=2, consumers={
                "reward": {"columns": ["prompt_ids", "response_ids"], "dispatch_size": 2},
                "audit": {"columns": ["prompt_ids"]}}))
            assert dock_name in [d.name for d in await client.list_docks()]
            ack = await dock.put(0, range(4), {"prompt_ids": cells(range(4)),
                                               "response_ids": cells(range(4), 5)})
            assert (ack.rows, ack.bytes) == (4, 4 * 3 * 4 + 4 * 5 * 4)

            sampled = await dock.sample("reward", step=0, count=2)
            assert len(sampled) == 2 and sampled.step == 0
            got = await dock.get("reward", step=0, count=2)
            assert sorted(got.rows.tolist()) == [2, 3]  # sample took 0 and 1
            for i, row in enumerate(got.rows.tolist()):
                assert got.row("prompt_ids", i).tolist() == cells([row])[0].tolist()
            assert got.end_of_step

            read = await dock.read(0, [1], ["response_ids"])
            assert read.row("response_ids", 0).tolist() == cells([1], 5)[0].tolist()

            status = await dock.status()
            assert [s.step for s in status.steps] == [0]
            assert status.steps[0].consumed["reward"] == 4

            added = await dock.add_consumer("critic", {"columns": ["prompt_ids"],
                                                       "dispatch_size": 2})
            assert added.name == "critic"
            batches = [b async for b in dock.iter("critic", step=0)]
            assert sorted(r for b in batches for r in b.rows.tolist()) == [0, 1, 2, 3]

            await dock.release(0)
            await client.delete_dock(dock_name)
            assert dock_name not in [d.name for d in await client.list_docks()]
    run(main())


def test_leases_ack_and_nack(server, dock_name):
    async def main():
        async with tdock.aio.Client(server) as client:
            spec = grpo_spec(dock_name, prompts=2, n=2, consumers={
                "actor": {"columns": ["prompt_ids"], "dispatch_size": 2,
                          "lease_ms": 60000}})
            dock = await client.create_dock(spec)
            await dock.put(0, range(4), {"prompt_ids": cells(range(4))})
            first = await dock.get("actor", step=0)
            assert first.lease is not None
            assert await dock.nack(first) == 2  # handed back at once
            again = await dock.get("actor", step=0)
            rest = await dock.get("actor", step=0)
            assert sorted(again.rows.tolist() + rest.rows.tolist()) == [0, 1, 2, 3]
            assert await dock.ack([again, rest]) == 4
            with pytest.raises(tdock.errors.FailedPrecondition):
                await dock.ack(again)  # acknowledged already
    run(main())


def test_errors_and_bounded_iteration(server, dock_name):
    async def main():
        async with tdock.aio.Client(server) as client:
            with pytest.raises(tdock.errors.NotFound, match="no-such-dock"):
                await client.dock("no-such-dock").status()
            dock = await client.create_dock(grpo_spec(dock_name))
            with pytest.raises(tdock.errors.InvalidArgument, match="no column 'nope'"):
                await dock.put(0, [0], {"nope": cells([0])})
            with pytest.raises(tdock.errors.WaitTimeout, match="consumer 'reward'"):
                async for _ in dock.iter("reward", step=0, wait=0.2):
                    pass
    run(main())


# Invariant: 300 Gets parked at once in one event loop add no thread to the
# process, and once the rows are written every one of them is served, each
# with its own row.
def test_hundreds_of_parked_gets_hold_no_threads(server, dock_name):
    parked = 300

    async def main():
        async with tdock.aio.Client(server, timeout=60) as client:
            spec = grpo_spec(dock_name, prompts=parked, n=1, consumers={
                "reward": {"columns": ["prompt_ids"], "dispatch_size": 1}})
            dock = await client.create_dock(spec)
            await dock.status()  # the channel and its threads are up
            threads_before = threading.active_count()
            gets = [asyncio.ensure_future(dock.get("reward", step=0, wait=60))
                    for _ in range(parked)]
            for _ in range(600):  # a synchronization point, not a timing check
                if (await dock.status()).waiters.get("reward") == parked:
                    break
                await asyncio.sleep(0.05)
            assert (await dock.status()).waiters["reward"] == parked
            assert threading.active_count() == threads_before
            await dock.put(0, range(parked), {"prompt_ids": cells(range(parked))})
            batches = await asyncio.gather(*gets)
            rows = sorted(r for b in batches for r in b.rows.tolist())
            assert rows == list(range(parked))
            assert all(len(b) == 1 for b in batches)
    run(main())
