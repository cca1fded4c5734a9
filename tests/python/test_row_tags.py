"""Per-row tags: a json column (rewritable, so a tag can change) whose cells
list_rows returns row by row with cells=[...], decoded; other small cells
(scores, uids) alike, blocking and asyncio. A column unknown or named twice,
or cells not named as a list, are refused naming what was wrong."""

import asyncio

import numpy as np
import pytest

import tdock
import tdock.aio


def spec(name):
    return {"name": name, "num_prompts": 2, "n_samples_per_prompt": 2,
            "columns": {"prompt": {"dtype": "int32"},
                        "tag": {"dtype": "json", "rewritable": True},
                        "uid": {"dtype": "string"},
                        "score": {"dtype": "float32", "inner_shape": [2]}},
            "consumers": {"actor": {"columns": ["prompt"]}}}


def test_list_rows_returns_each_rows_tag(client, server, dock_name):
    dock = client.create_dock(spec(dock_name))
    dock.put(0, [0, 1, 3], {"prompt": [[1], [2], [3]],
                            "tag": [{"stage": "generated"}, {"stage": "generated"}, None],
                            "uid": ["u0", "u1", "u3"]})
    dock.put(0, [1], {"tag": [{"stage": "scored", "reward": 0.5}]})  # the tag changes
    dock.put(0, [0], {"score": np.array([[0.25, 0.75]], np.float32)})

    rows = dock.list_rows(0, cells=["tag", "uid", "score"])
    assert [r.cells.get("tag", "-") for r in rows] == [
        {"stage": "generated"}, {"stage": "scored", "reward": 0.5}, "-", None]
    assert [r.cells.get("uid") for r in rows] == ["u0", "u1", None, "u3"]
    assert rows[0].cells["score"].tolist() == [[0.25, 0.75]]
    assert all(r.cells == {} for r in dock.list_rows(0))  # none named, none carried

    async def listed():
        async with tdock.aio.Client(server) as aclient:
            return await aclient.dock(dock_name).list_rows(0, cells=["tag"])
    assert [r.cells for r in asyncio.run(listed())] == [
        {"tag": {"stage": "generated"}}, {"tag": {"stage": "scored", "reward": 0.5}}, {},
        {"tag": None}]


def test_bad_cell_listings_are_refused(client, dock_name):
    dock = client.create_dock(spec(dock_name))
    dock.put(0, [0], {"prompt": [[1]]})
    with pytest.raises(tdock.errors.InvalidArgument,
                       match="ListRows of column 'tags', which is unknown"):
        dock.list_rows(0, cells=["tags"])
    with pytest.raises(tdock.errors.InvalidArgument, match="names column 'tag' twice"):
        dock.list_rows(0, cells=["tag", "tag"])
    with pytest.raises(tdock.errors.InvalidArgument,
                       match="cells is a list of column names, got the str 'tag'"):
        dock.list_rows(0, cells="tag")
