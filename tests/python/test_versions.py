"""Row versions through the Python clients: a Put carries the policy version
its rows were generated with (one for all rows, or one per row); a row keeps
the oldest it was given; batches, reads and the row listing return it."""

import asyncio
import time

import numpy as np
import pytest

import tdock
from conftest import grpo_spec


def cells(rows, length=3):
    return [np.arange(length, dtype=np.int32) + 10 * r for r in rows]


def test_versions_on_rows(client, dock_name):
    consumers = {"reward": {"columns": ["prompt_ids", "response_ids"], "whole_groups": True,
                            "dispatch_size": 2},
                 "actor": {"columns": ["prompt_ids", "response_ids"], "dispatch_size": 4,
                           "micro_batch": {"max_tokens": 10}}}
    dock = client.create_dock(grpo_spec(dock_name, consumers=consumers))
    assert dock.set_version(4) == 4 and dock.status().version == 4
    dock.put(0, range(8), {"prompt_ids": cells(range(8))}, versions=3)
    dock.put(0, range(8), {"response_ids": cells(range(8), 2)},
             versions=[3, 2, 4, 3, 3, 3, 3, 3])
    assert dock.read(0, [0, 1, 2], ["prompt_ids"]).versions.tolist() == [3, 2, 3]
    assert [r.version for r in dock.list_rows(0)[:3]] == [3, 2, 3]
    batch = dock.get("reward")
    assert batch.versions.tolist() == [3, 2]
    # Micro-batches (5 tokens a row, 10 a micro-batch) carry their rows' versions.
    actor = dock.get("actor")
    of_row = dict(zip(range(8), [3, 2, 3, 3, 3, 3, 3, 3]))
    assert len(actor.micro_batches) == 2
    for mb in actor.micro_batches:
        assert mb.versions.tolist() == [of_row[r] for r in mb.rows.tolist()]
    with pytest.raises(tdock.errors.FailedPrecondition,
                       match="version 5 is newer than the dock's version 4"):
        dock.put(1, [0], {"prompt_ids": cells([0])}, versions=5)
    with pytest.raises(tdock.errors.FailedPrecondition, match="a version only advances"):
        dock.set_version(3)
    with pytest.raises(tdock.errors.InvalidArgument, match="version -1 is negative"):
        dock.put(1, [0], {"prompt_ids": cells([0])}, versions=-1)
    with pytest.raises(tdock.errors.InvalidArgument, match="2 versions for 1 rows"):
        dock.put(1, [0], {"prompt_ids": cells([0])}, versions=[1, 2])


def test_rows_without_versions(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, [0, 1], {"prompt_ids": cells([0, 1])})
    assert dock.read(0, [0], ["prompt_ids"]).versions is None
    assert dock.list_rows(0)[0].version is None


def test_asyncio_versions(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as aclient:
            dock = await aclient.create_dock(grpo_spec(dock_name))
            assert await dock.set_version(6) == 6
            await dock.put(0, range(2), {"prompt_ids": cells(range(2))}, versions=[5, 6])
            batch = await dock.read(0, [0, 1], ["prompt_ids"])
            assert batch.versions.tolist() == [5, 6]
    asyncio.run(main())


def test_staleness_bound(client, dock_name):
    """A consumer with max_staleness takes no row older than the dock's
    version minus the bound, the oldest first; with stale: drop the rows past
    it are dropped for every consumer; status shows what was handed out."""
    consumers = {"actor": {"columns": ["prompt_ids"], "dispatch_size": 2, "max_staleness": 1,
                           "stale": "drop"},
                 "ref": {"columns": ["prompt_ids"], "dispatch_size": 8}}
    dock = client.create_dock(grpo_spec(dock_name, consumers=consumers))
    assert dock.spec.consumers[0].max_staleness == 1
    dock.set_version(3)
    dock.put(0, range(8), {"prompt_ids": cells(range(8))}, versions=[3, 1, 2, 0, 3, 2, 3, 3])
    first = dock.get("actor", step=0)
    assert first.rows.tolist() == [2, 5] and first.versions.tolist() == [2, 2]
    rest = dock.get("actor", step=0, count=8)
    assert rest.rows.tolist() == [0, 4, 6, 7] and rest.end_of_step
    for _ in range(200):  # with --data_dir the drop is stored after the Get answered
        if dock.status().dropped:
            break
        time.sleep(0.01)
    ref = dock.get("ref", step=0)
    assert ref.rows.tolist() == [0, 2, 4, 5, 6, 7]  # rows 1 and 3 were dropped as stale
    status = dock.status()
    assert status.dropped == {"stale": 2}
    actor = status.staleness["actor"]
    assert (actor.versioned_rows, actor.staleness_sum, actor.stale_rows) == (6, 2, 2)
    assert actor.buckets[0] == 4 and actor.buckets[1] == 2 and actor.mean == pytest.approx(1 / 3)
    assert status.staleness["ref"].stale_rows == 0


def test_bad_staleness_bounds(client, dock_name):
    bad = {"actor": {"columns": ["prompt_ids"], "max_staleness": -1}}
    with pytest.raises(tdock.errors.InvalidArgument,
                       match="consumer 'actor' max_staleness -1 is negative"):
        client.create_dock(grpo_spec(dock_name, consumers=bad))
    with pytest.raises(tdock.errors.InvalidArgument, match="unknown stale policy 'discard'"):
        client.create_dock(grpo_spec(dock_name, consumers={
            "actor": {"columns": ["prompt_ids"], "max_staleness": 1, "stale": "discard"}}))
    with pytest.raises(tdock.errors.InvalidArgument, match="stale: drop needs max_staleness"):
        client.create_dock(grpo_spec(dock_name, consumers={
            "actor": {"columns": ["prompt_ids"], "stale": "drop"}}))
    assert dock_name not in [d.name for d in client.list_docks()]


def test_token_versions_of_a_partial_rollout(client, dock_name):
    """A sample resumed after a weight update: its segments column is
    rewritten with one segment more, the row keeps its oldest version, and
    the trainer masks the tokens past its bound."""
    from tdock.versions import segments, staleness_mask, token_versions
    columns = {"prompt_ids": {"dtype": "int32"},
               "response_ids": {"dtype": "int32", "rewritable": True},
               "token_versions": {"dtype": "int64", "inner_shape": [2], "rewritable": True}}
    consumers = {"actor": {"columns": ["response_ids", "token_versions"], "dispatch_size": 2}}
    dock = client.create_dock(grpo_spec(dock_name, columns=columns, consumers=consumers))
    dock.set_version(4)
    dock.put(0, [0, 1], {"response_ids": cells([0, 1], 5),
                         "token_versions": [segments([(3, 0)]), segments([(4, 0)])]},
             versions=[3, 4])
    # Row 0 resumes under version 4 after 5 tokens: 3 more, one more segment.
    dock.put(0, [0], {"response_ids": cells([0], 8),
                      "token_versions": [segments([(3, 0), (4, 5)])]}, versions=4)
    assert dock.list_rows(0)[0].version == 3  # the oldest segment's
    dock.set_version(5)
    batch = dock.get("actor", step=0)
    mask, cu = staleness_mask(batch, version=5, max_staleness=1)
    assert cu.tolist() == [0, 8, 13]
    assert mask.tolist() == [False] * 5 + [True] * 3 + [True] * 5
    assert token_versions(batch.row("token_versions", 0), 8).tolist() == [3] * 5 + [4] * 3
    with pytest.raises(tdock.errors.InvalidArgument, match="do not ascend"):
        segments([(3, 0), (4, 0)])
    with pytest.raises(tdock.errors.InvalidArgument, match="starts at token 2, not 0"):
        segments([(3, 2)])
