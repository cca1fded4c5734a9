"""The Put encoding, without a server: a Put prepared at a shard and sent
with its extent parses as the Put's header with prepared_extent set; a dense
padded array packs as the same column as its rows listed; a range of rows is
the rows it holds."""

import numpy as np
import pytest

import tdock
from tdock import _calls, columns, errors, wire
from tdock.v1 import dock_pb2


def _column(name, dtype, value, n, inner=()):
    spec = dock_pb2.ColumnSpec(name=name, dtype=dtype, inner_shape=list(inner))
    return columns.put_column(name, value, spec, n)


def _message():
    header = dock_pb2.PutRequest(
        dock="d", step=3, rows=[0, 1, 2], wait_ms=30000, ack_lease=7, new_rows=0,
        group_sizes=[2, 1], versions=[4], reservation=9, put_id=(1 << 64) - 1,
        new_columns=[dock_pb2.ColumnSpec(name="y", dtype=dock_pb2.INT32)])
    rows = [np.arange(k, dtype=np.int32) for k in (3, 0, 5)]
    return wire.PutMessage(header, [
        _column("x", dock_pb2.FLOAT32, np.ones((3, 4), np.float32), 3),
        _column("y", dock_pb2.INT32, rows, 3)])


@pytest.mark.parametrize("extent", [0, 1, 127, 128, 1 << 40, (1 << 64) - 1])
def test_a_put_without_data_parses_as_its_header_with_the_extent(extent):
    message = _message()
    header = dock_pb2.PutRequest()
    header.CopyFrom(message.header)
    header.prepared_extent = extent
    want = dock_pb2.PutRequest.FromString(
        wire.encode_put(header, message.columns, data=False))
    for _ in range(2):  # encoded once, the same each time
        got = dock_pb2.PutRequest.FromString(message.without_data(extent))
        assert got == want
    assert got.prepared_extent == extent
    assert [c.offsets for c in got.columns] == [[0, 4, 8, 12], [0, 3, 3, 8]]
    assert all(c.data == b"" for c in got.columns)
    assert message.header.prepared_extent == 0  # the message itself is unchanged


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_dense_padded_array_packs_as_its_rows_listed(side):
    array = np.arange(4 * 6 * 2, dtype=np.float32).reshape(4, 6, 2)
    dense = _column("x", dock_pb2.FLOAT32, tdock.Padded(array, None, side), 4, (2,))
    listed = _column("x", dock_pb2.FLOAT32, list(array), 4, (2,))
    assert dense.offsets.dtype == np.int64
    assert dense.offsets.tolist() == listed.offsets.tolist() == [0, 6, 12, 18, 24]
    assert dense.nbytes == listed.nbytes == array.nbytes
    assert b"".join(dense.pieces) == b"".join(listed.pieces) == array.tobytes()
    assert _column("x", dock_pb2.FLOAT32, array, 4, (2,)).offsets.tolist() == [0, 6, 12, 18, 24]
    for empty in (np.zeros((0, 6, 2), np.float32), np.zeros((4, 0, 2), np.float32)):
        column = _column("x", dock_pb2.FLOAT32, empty, len(empty), (2,))
        assert column.offsets.tolist() == [0] * (len(empty) + 1)
        assert column.nbytes == 0 and column.pieces == []
    with pytest.raises(errors.InvalidArgument, match="side must be 'right' or 'left'"):
        _column("x", dock_pb2.FLOAT32, tdock.Padded(array, None, "up"), 4, (2,))


def test_a_range_of_rows_is_the_rows_it_holds():
    for rows in (range(5), range(2, 11, 3), range(9, 0, -4), range(0)):
        got = _calls._row_array(rows)
        assert got.dtype == np.int64 and got.tolist() == list(rows)
    assert _calls._row_array([[1, 2]]).tolist() == [1, 2]
