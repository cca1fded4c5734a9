"""Reservations through the Python clients: a producer reserves rows for the
version it generates with, long-polls while no step can train them within
the consumers' staleness bound, writes them by naming the reservation, and
loses the rows it did not write by the deadline."""

import asyncio
import time

import numpy as np
import pytest

import tdock
from conftest import grpo_spec


def cells(rows, length=3):
    return [np.arange(length, dtype=np.int32) + 10 * r for r in rows]


def bounded_spec(name, bound, steps=2, lease_ms=0):
    consumers = {"actor": {"columns": ["prompt_ids", "response_ids"], "dispatch_size": 8,
                           "max_staleness": bound, "lease_ms": lease_ms}}
    return grpo_spec(name, consumers=consumers, steps_in_flight=steps)


def write(dock, r):
    dock.put(r.step, None, {"prompt_ids": cells(r.rows), "response_ids": cells(r.rows, 2)},
             reservation=r)


def test_reserve_write_and_train(client, dock_name):
    dock = client.create_dock(bounded_spec(dock_name, 1))
    dock.set_version(2)
    r = dock.reserve(8, version=2)
    assert (r.step, r.rows, r.version, r.timed_out) == (0, list(range(8)), 2, False)
    assert r.deadline > time.time()
    write(dock, r)
    batch = dock.get("actor", step=0)
    assert batch.rows.tolist() == list(range(8)) and batch.versions.tolist() == [2] * 8
    groups = dock.reserve(version=2, group_sizes=[2, 1])
    assert groups.step == 1 and groups.rows == [0, 1, 2]
    assert dock.list_rows(1)[3].dropped == "unused"


def test_admission_waits_for_the_trainer(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as aclient:
            dock = await aclient.create_dock(bounded_spec(dock_name, 0, steps=3, lease_ms=60000))
            first = await dock.reserve(8, version=0)
            waiting = asyncio.ensure_future(dock.reserve(8, version=0, wait=20))
            await asyncio.sleep(0.2)
            assert not waiting.done(), "step 1 would train version 0 rows at version 1"
            await dock.put(first.step, None, {"prompt_ids": cells(first.rows),
                                              "response_ids": cells(first.rows, 2)},
                           reservation=first)
            # The trainer takes step 0 under a lease, updates, publishes
            # version 1, then acknowledges: step 0 is released.
            batch = await dock.get("actor", step=0)
            await dock.set_version(1)
            await dock.ack(batch)
            with pytest.raises(tdock.errors.FailedPrecondition, match="versions behind"):
                await dock.reserve(8, version=0, wait=0)
            fresh = await dock.reserve(8)  # the newest weights, version 1
            assert fresh.step == 1
            status = await dock.status()
            assert status.version == 1
            # Live: the fresh one; the first went with step 0's release.
            assert status.reservations_parked == 1 and status.reservations_live == 1
            waiting.cancel()
    asyncio.run(main())


def test_expired_reservation_is_dropped_and_named(client, dock_name):
    dock = client.create_dock(bounded_spec(dock_name, 4))
    r = dock.reserve(4, deadline=0.2)
    dock.put(r.step, r.rows[:2], {"prompt_ids": cells(r.rows[:2]),
                                  "response_ids": cells(r.rows[:2], 2)}, reservation=r)
    for _ in range(300):
        if dock.status().dropped.get("expired") == 2:
            break
        time.sleep(0.01)
    assert dock.status().dropped == {"expired": 2}
    with pytest.raises(tdock.errors.FailedPrecondition, match=f"reservation {r.id} expired at"):
        write(dock, r)


def test_bad_reservations(client, dock_name):
    dock = client.create_dock(bounded_spec(dock_name, 1))
    with pytest.raises(tdock.errors.InvalidArgument, match="version -1 is negative"):
        dock.reserve(2, version=-1)
    with pytest.raises(tdock.errors.FailedPrecondition, match="newer than the dock's version 0"):
        dock.reserve(2, version=1)
    with pytest.raises(tdock.errors.InvalidArgument,
                       match="reservation of 10 rows .* over a step's capacity of 8 rows"):
        dock.reserve(10)
    with pytest.raises(tdock.errors.NotFound, match="reservation 12345 is not known"):
        dock.put(0, [0], {"prompt_ids": cells([0])}, reservation=12345)
    assert dock.status().steps == []


def test_a_cancelled_reserve_leaves_nothing_waiting(server, dock_name):
    """A reservation waiting for admission ends with its call: cancelling the
    asyncio task cancels the RPC, and the server no longer holds it."""
    async def main():
        async with tdock.aio.Client(server, timeout=30) as aclient:
            dock = await aclient.create_dock(bounded_spec(dock_name, 0, steps=3))
            await dock.reserve(8)
            waiting = asyncio.ensure_future(dock.reserve(8, wait=20))
            for _ in range(100):
                if (await dock.status()).reservations_parked == 1:
                    break
                await asyncio.sleep(0.01)
            assert (await dock.status()).reservations_parked == 1
            waiting.cancel()
            for _ in range(200):
                if (await dock.status()).reservations_parked == 0:
                    break
                await asyncio.sleep(0.01)
            assert (await dock.status()).reservations_parked == 0
    asyncio.run(main())
