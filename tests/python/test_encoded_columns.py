"""String and JSON columns: bytes on the server, encoded by the Put and
decoded by Batch.cell / Batch.cells. Uids, chat messages and extra_info dicts
round-trip exactly (non-ASCII, empty strings, nested values, None); values
that are not strings or not JSON are refused naming the column and row, with
nothing written; the server refuses an encoding on a column that is not plain
bytes."""

import numpy as np
import pytest

import tdock
from tdock.v1 import dock_pb2

UIDS = ["a1b2", "", "δοκ-3 ✓", "x" * 300]
MESSAGES = [
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    [],
    {"tool": "search", "args": {"q": "日本語", "k": 3}, "ok": True, "score": -0.5},
    None,
]


def spec(name):
    return {"name": name, "num_prompts": 4, "steps_in_flight": 2,
            "columns": {"uid": {"dtype": "string"}, "messages": {"dtype": "json"},
                        "ids": {"dtype": "int32"}},
            "consumers": {"trainer": {"columns": ["uid", "messages", "ids"],
                                      "dispatch_size": 4},
                          "audit": {"columns": ["uid"]}}}


def test_strings_and_json_round_trip(client, dock_name):
    dock = client.create_dock(spec(dock_name))
    kinds = {c.name: (c.dtype, c.encoding) for c in dock.spec.columns}
    assert kinds["uid"] == (dock_pb2.BYTES, dock_pb2.UTF8)
    assert kinds["messages"] == (dock_pb2.BYTES, dock_pb2.JSON)
    dock.put(0, range(4), {"uid": UIDS, "messages": MESSAGES,
                           "ids": [np.arange(r + 1, dtype=np.int32) for r in range(4)]})
    batch = dock.get("trainer", step=0)
    order = batch.rows.tolist()
    assert batch.cells("uid") == [UIDS[r] for r in order]
    assert batch.cells("messages") == [MESSAGES[r] for r in order]
    assert batch.cell("uid", 0) == UIDS[order[0]]
    # The stored bytes are the UTF-8 text; the numeric column is unchanged.
    assert batch.row("uid", order.index(2)).tobytes() == UIDS[2].encode("utf-8")
    assert batch.cell("ids", order.index(3)).tolist() == [0, 1, 2, 3]
    # Micro-batch and Read slices keep the decoding.
    assert dock.read(0, [2, 3], ["messages"]).cells("messages") == MESSAGES[2:]


def test_values_that_do_not_fit_are_refused_and_nothing_is_written(client, dock_name):
    dock = client.create_dock(spec(dock_name))
    cases = [
        ({"uid": ["a", 1, "c", "d"]}, "column 'uid' (string) row 1: expected a str, got int"),
        ({"uid": "abcd"}, "column 'uid' (string): expected a list of 4 values, got str"),
        ({"uid": ["a", "b"]}, "column 'uid' (string): 2 values for 4 rows"),
        ({"uid": ["a", "b", "\ud800", "d"]}, "column 'uid' (string) row 2: not UTF-8"),
        ({"messages": [{}, {1, 2}, None, 0]}, "column 'messages' (json) row 1: not JSON"),
        ({"messages": [0, float("nan"), 0, 0]}, "column 'messages' (json) row 1: not JSON"),
    ]
    for columns, message in cases:
        with pytest.raises(tdock.errors.InvalidArgument, match=message.replace("(", r"\(")
                           .replace(")", r"\)")):
            dock.put(0, range(4), columns)
    assert dock.status().steps == []  # nothing written


def test_the_server_refuses_an_encoding_on_a_column_that_is_not_plain_bytes(client, dock_name):
    bad = dock_pb2.DockSpec(name=dock_name, num_prompts=2)
    bad.columns.add(name="uid", dtype=dock_pb2.INT32, encoding=dock_pb2.UTF8)
    bad.consumers.add(name="c", columns=["uid"])
    with pytest.raises(tdock.errors.InvalidArgument,
                       match="column 'uid' has the string encoding, which needs dtype bytes"):
        client.create_dock(bad)
    assert dock_name not in [d.name for d in client.list_docks()]


def test_tensors_columns_hold_typed_values(client, dock_name):
    """A `tensors` column's cell is one typed value: verl's multi_modal_inputs
    (a dict of tensors), numpy arrays, nested lists and dicts, numbers,
    strings, bytes and None round-trip with their dtypes and shapes, rows of
    different shapes alike; through Batch.cells, Read and to_tensordict
    (non-tensor data). A value the encoding does not hold (a set, an object)
    is refused naming the column and row, nothing written; the stored bytes
    are never a pickle."""
    torch = pytest.importorskip("torch")
    dock = client.create_dock({
        "name": dock_name, "num_prompts": 3, "steps_in_flight": 1,
        "columns": {"mm": {"dtype": "tensors"}, "ids": {"dtype": "int32"}},
        "consumers": {"trainer": {"columns": ["mm", "ids"], "dispatch_size": 3},
                      "audit": {"columns": ["ids"]}}})
    assert [(c.dtype, c.encoding) for c in dock.spec.columns if c.name == "mm"] == \
        [(dock_pb2.BYTES, dock_pb2.TENSORS)]
    values = [
        {"pixel_values": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4),
         "image_grid_thw": torch.tensor([[1, 2, 2]], dtype=torch.int64)},
        [np.eye(2, dtype=np.float32), {"n": 3, "tag": "δ", "raw": b"\x00\x01"}, None],
        {},
    ]
    for columns, message in [
            ({"mm": [{1, 2}, {}, {}]}, "column 'mm' (tensors) row 0: a value of type set"),
            ({"mm": [{}, {"x": object()}, {}]},
             "column 'mm' (tensors) row 1 at ['x']: a value of type object")]:
        with pytest.raises(tdock.errors.InvalidArgument, match=message.replace("(", r"\(")
                           .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
            dock.put(0, range(3), {**columns, "ids": [[1], [2], [3]]})
    assert dock.status().steps == []  # nothing written

    dock.put(0, range(3), {"mm": values, "ids": [[1], [2], [3]]})
    batch = dock.get("trainer", step=0)
    order = batch.rows.tolist()
    got = dict(zip(order, batch.cells("mm")))
    assert got[0].keys() == values[0].keys()
    for k in values[0]:
        assert got[0][k].dtype == values[0][k].dtype
        assert torch.equal(got[0][k], values[0][k])
    eye, meta, none = got[1]
    assert eye.dtype == np.float32 and (eye == np.eye(2)).all()
    assert meta == {"n": 3, "tag": "δ", "raw": b"\x00\x01"} and none is None
    assert got[2] == {}
    assert not batch.row("mm", order.index(0)).tobytes().startswith(b"\x80")  # no pickle
    assert torch.equal(dock.read(0, [0], ["mm"]).cells("mm")[0]["image_grid_thw"],
                       values[0]["image_grid_thw"])
    pytest.importorskip("tensordict")
    td = batch.to_tensordict(["mm"])
    assert td["mm"][order.index(2)] == {}
