"""A dock whose spec sets add_columns_on_write takes Puts of columns it
lacks: each is added first (recorded like AddColumn), its dtype and inner
shape from the values the client writes; consumers added later read it. A
dock without it, or a value no column can hold, is refused naming what was
wrong, nothing added or written."""

import numpy as np
import pytest

import tdock
from tdock.v1 import dock_pb2


def spec(name, on_write=True):
    return {"name": name, "num_prompts": 2, "n_samples_per_prompt": 2,
            "add_columns_on_write": on_write,
            "columns": {"prompt": {"dtype": "int32"}},
            "consumers": {"actor": {"columns": ["prompt"]}}}


def test_put_adds_columns_from_their_values(client, dock_name):
    torch = pytest.importorskip("torch")
    dock = client.create_dock(spec(dock_name))
    assert dock.spec.add_columns_on_write
    rows = list(range(4))
    dock.put(0, rows, {
        "prompt": [[1, 2], [3], [4], [5]],
        "reward": np.array([0.5, 1.0, 0.0, 0.25], np.float32),       # one item per row
        "logp": torch.arange(8, dtype=torch.bfloat16).reshape(4, 2),  # 2 items per row
        "topk": [np.full((k + 1, 3), k, np.int64) for k in rows],     # (items, 3) per row
        "uid": ["a", "b", "c", "d"],
        "mm": [{"thw": torch.tensor([1, 2, 2])}, None, [1, "x"], {"n": 3}],
        "done": [True, False, True, True],
        "ids": [[1, 2], [3], [], [4, 5, 6]],                           # ragged
    })
    columns = {c.name: c for c in dock.spec.columns}
    assert [c.name for c in dock.spec.columns] == [
        "prompt", "reward", "logp", "topk", "uid", "mm", "done", "ids"]
    shapes = {name: (c.dtype, list(c.inner_shape), c.encoding, c.added)
              for name, c in columns.items() if name != "prompt"}
    assert shapes == {
        "reward": (dock_pb2.FLOAT32, [], dock_pb2.ENCODING_RAW, True),
        "logp": (dock_pb2.BFLOAT16, [], dock_pb2.ENCODING_RAW, True),
        "topk": (dock_pb2.INT64, [3], dock_pb2.ENCODING_RAW, True),
        "uid": (dock_pb2.BYTES, [], dock_pb2.UTF8, True),
        "mm": (dock_pb2.BYTES, [], dock_pb2.TENSORS, True),
        "done": (dock_pb2.BOOL, [], dock_pb2.ENCODING_RAW, True),
        "ids": (dock_pb2.INT64, [], dock_pb2.ENCODING_RAW, True),
    }
    # Read back as written, and by a consumer added after.
    dock.add_consumer("trainer", {"columns": ["prompt", "reward", "topk", "uid", "mm"],
                                  "dispatch_size": 4})
    batch = dock.get("trainer", step=0)
    at = {int(r): i for i, r in enumerate(batch.rows)}
    assert batch.row("reward", at[1]).tolist() == [1.0]
    assert batch.row("topk", at[2]).shape == (3, 3)
    assert batch.cells("uid")[at[3]] == "d"
    assert batch.cells("mm")[at[0]]["thw"].tolist() == [1, 2, 2]
    assert batch.cells("mm")[at[2]] == [1, "x"]
    read = dock.read(0, [1], ["logp", "done"])
    assert read.to_torch(["logp"])["logp"][0].tolist() == [2.0, 3.0]
    assert read.row("done", 0).tolist() == [False]
    assert dock.read(0, [3, 2], ["ids"]).lengths("ids").tolist() == [3, 0]


def test_columns_inferred_from_rows_of_scalars_lists_and_tuples(client, dock_name):
    """Per-row 0-d tensors are one item per row; lists of ints and floats
    take float64; rows all empty keep their arrays' dtype; a 2-tuple of
    values (n = 2) is two rows, not (array, lengths)."""
    torch = pytest.importorskip("torch")
    dock = client.create_dock(spec(dock_name))
    dock.put(0, [0, 1], {
        "score": [torch.tensor(0.5), torch.tensor(1.5)],
        "mixed": [[1, 2], [0.5]],
        "none": [np.zeros(0, np.float32), np.zeros(0, np.float32)],
        "uid": ("a", "b"),
    })
    kinds = {c.name: (c.dtype, list(c.inner_shape), c.encoding) for c in dock.spec.columns}
    assert kinds["score"] == (dock_pb2.FLOAT32, [], dock_pb2.ENCODING_RAW)
    assert kinds["mixed"] == (dock_pb2.FLOAT64, [], dock_pb2.ENCODING_RAW)
    assert kinds["none"] == (dock_pb2.FLOAT32, [], dock_pb2.ENCODING_RAW)
    assert kinds["uid"] == (dock_pb2.BYTES, [], dock_pb2.UTF8)
    read = dock.read(0, [0, 1], ["score", "mixed", "uid"])
    assert read.row("score", 1).tolist() == [1.5]
    assert read.row("mixed", 0).tolist() == [1.0, 2.0]
    assert read.cells("uid") == ["a", "b"]


def test_another_client_writes_a_column_added_since(client, server, dock_name):
    """A Dock whose spec was fetched before another process added a column
    on write writes it as it was added."""
    dock = client.create_dock(spec(dock_name))
    assert [c.name for c in dock.spec.columns] == ["prompt"]  # fetched now
    with tdock.Client(server) as other:
        other.dock(dock_name).put(0, [0], {"score": np.array([[1.5, 2.5]], np.float32)})
    dock.put(0, [1], {"score": np.array([[0.5]], np.float32)})
    assert dock.read(0, [0, 1], ["score"]).row("score", 1).tolist() == [0.5]
    assert [c.name for c in dock.spec.columns] == ["prompt", "score"]


def test_bad_columns_on_write_change_nothing(client, dock_name):
    fixed = client.create_dock(spec(dock_name, on_write=False))
    with pytest.raises(tdock.errors.InvalidArgument,
                       match="has no column 'score'.*does not set add_columns_on_write"):
        fixed.put(0, [0], {"score": np.zeros(1, np.float32)})
    assert [c.name for c in fixed.spec.columns] == ["prompt"]
    client.delete_dock(dock_name)

    dock = client.create_dock(spec(dock_name))
    for value, message in [
            (np.zeros(1, np.uint32), "column 'score': values of dtype uint32 fit no column dtype"),
            ({"a": 1}, "column 'score': a column is added from an array, a tensor, Packed, "
                       "Padded or a list of 1 values, not dict"),
            ([1.0, 2.0], "column 'score': 2 rows of values for 1 rows")]:
        with pytest.raises(tdock.errors.InvalidArgument, match=message):
            dock.put(0, [0], {"prompt": [[1]], "score": value})
    # Checked by the server with the Put before the column is added.
    with pytest.raises(tdock.errors.InvalidArgument, match="row 9 is out of range"):
        dock.put(0, [9], {"prompt": [[1]], "score": np.zeros(1, np.float32)})
    with pytest.raises(tdock.errors.InvalidArgument, match="column name"):
        dock.put(0, [0], {"prompt": [[1]], "bad name": np.zeros(1, np.float32)})
    assert [c.name for c in dock.spec.columns] == ["prompt"]
    assert dock.status().steps == []
