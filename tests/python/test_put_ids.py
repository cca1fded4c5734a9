"""Put ids: a Put sent again with the put_id of one the dock stored (its
answer lost, say) writes nothing and returns the stored Put's PutAck with
replayed set, for appends too (the rows the server assigned are the same);
blocking and asyncio alike; a bad put_id is refused before anything is
sent."""

import asyncio
import secrets

import numpy as np
import pytest

import tdock
from conftest import grpo_spec


def cells(rows, length=3):
    return [np.arange(length, dtype=np.int32) + 10 * r for r in range(rows)]


def ready_rows(status, step=0):
    for s in status.steps:
        if s.step == step:
            return max(s.ready.values())
    return 0


def test_an_append_sent_again_with_its_id_is_replayed(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
    put_id = secrets.randbits(64) or 1
    columns = {"prompt_ids": cells(2), "response_ids": cells(2, 5)}
    first = dock.put(0, None, columns, new_rows=2, put_id=put_id)
    assert not first.replayed and first.assigned == [0, 1]
    again = dock.put(0, None, columns, new_rows=2, put_id=put_id)
    assert again.replayed
    assert (again.rows, again.bytes, again.assigned) == (first.rows, first.bytes, [0, 1])
    assert ready_rows(dock.status()) == 2, "the Put sent again wrote rows"
    # Another id is another Put.
    other = put_id % (2**64 - 1) + 1
    assert dock.put(0, None, columns, new_rows=2, put_id=other).assigned == [2, 3]


def test_the_asyncio_client_replays_alike(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as client:
            dock = await client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
            columns = {"prompt_ids": cells(2), "response_ids": cells(2, 5)}
            first = await dock.put(0, [0, 1], columns, put_id=7)
            again = await dock.put(0, [0, 1], columns, put_id=7)
            assert not first.replayed and again.replayed
            assert (again.rows, again.bytes) == (first.rows, first.bytes)
    asyncio.run(main())


@pytest.mark.parametrize("bad", [0, -1, 2**64, 1.5, "7", True])
def test_a_bad_put_id_is_refused_before_sending(client, dock_name, bad):
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
    with pytest.raises(tdock.errors.InvalidArgument, match="put_id must be an int"):
        dock.put(0, [0], {"prompt_ids": cells(1)}, put_id=bad)
    assert ready_rows(dock.status()) == 0
