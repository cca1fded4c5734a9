"""Row keys through the clients: producers name rows by uid (a row's key
comes with its first write), trainers read them back by uid, every batch
carries its rows' keys, and a step's listing shows each row's key, group,
columns written, consumers that took it and drop reason — from Python
(blocking and asyncio) and tdockctl alike."""

import asyncio
import json

import numpy as np
import pytest

import tdock
from conftest import grpo_spec
from test_cross_client import tdockctl


def cells(rows, length=3):
    return [np.arange(length, dtype=np.int32) + 10 * r for r in rows]


def uids(rows):
    return [f"uid-{r}" for r in rows]


def test_rows_named_by_key(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, range(8), {"prompt_ids": cells(range(8))}, keys=uids(range(8)))
    # Responses come back by uid, in the order they finished.
    dock.put(0, None, {"response_ids": cells([6, 1], 2)}, keys=["uid-6", "uid-1"])
    read = dock.read(keys=["uid-1", "uid-6"], columns=["response_ids"])
    assert read.rows.tolist() == [1, 6] and read.keys == ["uid-1", "uid-6"]
    np.testing.assert_array_equal(read.row("response_ids", 1), cells([6], 2)[0])
    dock.put(0, [0, 2, 3, 4, 5, 7], {"response_ids": cells([0, 2, 3, 4, 5, 7], 2)},
             keys=uids([0, 2, 3, 4, 5, 7]))
    batch = dock.get("reward")
    assert batch.keys == uids(batch.rows.tolist())
    rows = dock.list_rows(0)
    assert rows[0] == tdock.RowState(0, "uid-0", 0, ["prompt_ids", "response_ids"],
                                     ["reward"], None)
    assert [r.key for r in rows] == uids(range(8))


def test_bad_keys_are_refused(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, [0], {"prompt_ids": cells([0])}, keys=["a"])
    with pytest.raises(tdock.errors.AlreadyExists, match="key 'a' is row 0 of step 0"):
        dock.put(0, [1], {"prompt_ids": cells([1])}, keys=["a"])
    with pytest.raises(tdock.errors.NotFound, match="no live row has key 'b'"):
        dock.read(keys=["b"])
    with pytest.raises(tdock.errors.InvalidArgument, match="keys must be a list of strings"):
        dock.put(0, [1], {"prompt_ids": cells([1])}, keys="b")
    with pytest.raises(tdock.errors.InvalidArgument, match="name rows or keys, not both"):
        dock.read(0, [0], keys=["a"])
    assert dock.list_rows(0)[1].key is None


def test_asyncio_keys(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as client:
            dock = await client.create_dock(grpo_spec(dock_name))
            await dock.put(0, range(2), {"prompt_ids": cells(range(2))}, keys=uids(range(2)))
            batch = await dock.read(keys=["uid-1"], columns=["prompt_ids"])
            assert batch.rows.tolist() == [1] and batch.keys == ["uid-1"]
            rows = await dock.list_rows(0)
            assert [r.key for r in rows[:3]] == ["uid-0", "uid-1", None]
    asyncio.run(main())


def test_tdockctl_keys(client, dock_name, server, tmp_path):
    client.create_dock(grpo_spec(dock_name))
    values = tmp_path / "prompt.json"
    values.write_text(json.dumps([[1, 2], [3]]))
    tdockctl(server, "put", dock_name, "--step", "0", "--rows", "4,5",
             "--column", f"prompt_ids={values}", "--keys", "u4,u5")
    read = tdockctl(server, "read", dock_name, "--keys", "u5", "--columns", "prompt_ids")
    assert read["rows"] == [5] and read["keys"] == ["u5"]
    assert read["columns"]["prompt_ids"] == [[3]]
    rows = tdockctl(server, "rows", dock_name, "0")
    assert rows["rows"][4] == {"row": 4, "key": "u4", "group": 2, "version": None,
                               "written": ["prompt_ids"], "taken": [], "dropped": None}


def test_append_rows(client, dock_name, server):
    """Rollouts append rows: the server assigns whole groups from the step's
    first free one, up to max_rows_per_step, and says which."""
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, max_rows_per_step=8))
    assert dock.spec.max_rows_per_step == 8
    assert dock.put(0, None, {"prompt_ids": cells(range(2))}, new_rows=2).assigned == [0, 1]
    ack = dock.put(0, None, {"prompt_ids": cells(range(3))}, keys=["x", "y", "z"])
    assert ack.assigned == [2, 3, 4]
    with pytest.raises(tdock.errors.ResourceExhausted, match="no room for 4 new rows"):
        dock.put(0, None, {"prompt_ids": cells(range(4))}, new_rows=4)
    with pytest.raises(tdock.errors.InvalidArgument, match="new_rows asks for rows"):
        dock.put(0, [6], {"prompt_ids": cells([6])}, new_rows=1)
    assert dock.seal(0) == 3  # rows 5 to 7 were never written
    assert dock.read(keys=["z"], columns=["prompt_ids"]).rows.tolist() == [4]


def test_groups_of_declared_sizes(client, dock_name):
    """An agent loop's prompts yield different numbers of samples: each
    append declares its groups' sizes (at most n); the rows past a size are
    closed ("unused"), whole-group consumers take each group complete at its
    size, and a write past it fails naming it."""
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, n=4, max_rows_per_step=16))
    ack = dock.put(0, None, {"prompt_ids": cells(range(4)), "response_ids": cells(range(4), 2)},
                   keys=uids(range(4)), group_sizes=[3, 1])
    assert ack.assigned == [0, 1, 2, 4]
    assert [g.rows.tolist() for g in (dock.get("reward"), dock.get("reward"))] == [[0, 1, 2], [4]]
    states = dock.list_rows(0)
    assert [r.row for r in states if r.dropped == "unused"] == [3, 5, 6, 7]
    assert dock.status().steps[0].dropped == {"unused": 4}
    with pytest.raises(tdock.errors.FailedPrecondition, match="a group larger than declared"):
        dock.put(0, [3], {"response_ids": cells([3], 2)})
    with pytest.raises(tdock.errors.InvalidArgument, match="a group has 1 to 4"):
        dock.put(0, None, {"prompt_ids": cells(range(5))}, group_sizes=[5])
    with pytest.raises(tdock.errors.InvalidArgument, match="do not name rows too"):
        dock.put(0, [8], {"prompt_ids": cells([8])}, group_sizes=[1])
    with pytest.raises(tdock.errors.InvalidArgument, match="'unused' is not one of"):
        dock.drop(0, rows=[8], reason="unused")


def test_asyncio_groups_of_declared_sizes(server, dock_name):
    async def run():
        async with tdock.aio.Client(server, timeout=30) as aclient:
            dock = await aclient.create_dock(grpo_spec(dock_name, prompts=2, n=4,
                                                       max_rows_per_step=16))
            ack = await dock.put(0, None, {"prompt_ids": cells(range(2))}, group_sizes=[2])
            assert ack.assigned == [0, 1]
            assert [r.dropped for r in await dock.list_rows(0)][2:4] == ["unused", "unused"]
    asyncio.run(run())
