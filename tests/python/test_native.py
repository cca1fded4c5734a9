"""The native data path (tdock._native, tdock._native_path): chosen
explicitly, its Puts read back as grpcio's do, and bad input refused with a
specific error before anything is sent. The whole suite runs with it forced
on (TDOCK_DATA_PATH=native) and forced off (python) as well."""

import dataclasses
import logging

import numpy as np
import pytest

import tdock
from tdock import _native_path
from tdock.v1 import dock_pb2
from tdock.wire import PutColumn, PutMessage
from conftest import SHARDED
from server_process import drain, start_sharded, stop_server

pytestmark = pytest.mark.skipif(_native_path._native is None,
                                reason="tdock._native is not built here")


def _spec(name):
    return {"name": name, "num_prompts": 4, "n_samples_per_prompt": 2, "steps_in_flight": 2,
            "columns": {"ragged": {"dtype": "int32"},
                        "fixed": {"dtype": "float32", "inner_shape": [3]},
                        "text": {"dtype": "bytes"}},
            "consumers": {"r": {"columns": ["ragged", "fixed", "text"], "dispatch_size": 8}}}


def _rows(rng):
    return {"ragged": [rng.integers(0, 1000, rng.integers(1, 50)).astype(np.int32)
                       for _ in range(8)],
            "fixed": rng.random((8, 3), dtype=np.float32),
            "text": [f"row {i}".encode() * i for i in range(8)]}


def _read(dock, step):
    batch = dock.get("r", step=step, count=8, wait=10)
    order = np.argsort(batch.rows)
    values, offsets = batch.packed("ragged")
    ragged = [values[offsets[i]:offsets[i + 1]].tolist() for i in order]
    fixed = batch.column("fixed").values.reshape(8, 3)[order]
    chars, ends = batch.packed("text")
    text = [bytes(chars[ends[i]:ends[i + 1]]) for i in order]
    return ragged, fixed, text


def test_the_path_is_the_one_asked_for_and_logged(server, caplog, monkeypatch):
    """data_path picks the path, TDOCK_DATA_PATH when it is not given; the
    Client says which in `data_path` and in a log line; a bad value names
    where it came from; "native" without the module fails, naming why."""
    with caplog.at_level(logging.INFO, logger="tdock"):
        with tdock.Client(server, data_path="native") as native:
            assert native.data_path == "native"
    assert "puts through the C++ client (tdock._native)" in caplog.text
    with tdock.Client(server, data_path="python") as python:
        assert python.data_path == "python"
    monkeypatch.setenv("TDOCK_DATA_PATH", "python")
    with tdock.Client(server) as from_env:
        assert from_env.data_path == "python"
    with pytest.raises(tdock.errors.InvalidArgument, match="data_path is 'fast'"):
        tdock.Client(server, data_path="fast")
    monkeypatch.setenv("TDOCK_DATA_PATH", "fast")
    with pytest.raises(tdock.errors.InvalidArgument, match="TDOCK_DATA_PATH is 'fast'"):
        tdock.Client(server)
    monkeypatch.setattr(_native_path, "_native", None)
    monkeypatch.setattr(_native_path, "_UNLOADED", "tdock._native does not load (gone)")
    with pytest.raises(tdock.errors.FailedPrecondition, match="does not load"):
        tdock.Client(server, data_path="native")
    monkeypatch.setenv("TDOCK_DATA_PATH", "auto")
    with tdock.Client(server) as auto:
        assert auto.data_path == "python"


def test_a_native_put_reads_back_as_a_grpcio_put(server, dock_name):
    """The same rows Put through each path (ragged, fixed-shape and bytes
    columns) come back equal, with the same PutAck."""
    rng = np.random.default_rng(7)
    rows = _rows(rng)
    with tdock.Client(server, data_path="native") as native, \
            tdock.Client(server, data_path="python") as python:
        native.create_dock(_spec(dock_name))
        acks = [client.dock(dock_name).put(step, range(8), rows)
                for step, client in enumerate((native, python))]
        assert acks[0] == acks[1]
        assert acks[0].rows == 8
        got = [_read(python.dock(dock_name), step) for step in (0, 1)]
    assert got[0][0] == got[1][0] == [r.tolist() for r in rows["ragged"]]
    np.testing.assert_array_equal(got[0][1], rows["fixed"])
    np.testing.assert_array_equal(got[1][1], rows["fixed"])
    assert got[0][2] == got[1][2] == rows["text"]


def test_a_refusal_raises_the_class_grpcio_raises(server, dock_name):
    """A Put the dock refuses raises the same tdock.errors class, reason and
    message through either path (here: a step released)."""
    raised = []
    with tdock.Client(server, data_path="native") as native, \
            tdock.Client(server, data_path="python") as python:
        dock = native.create_dock(_spec(dock_name))
        dock.put(0, range(8), _rows(np.random.default_rng(1)))
        assert len(dock.get("r", step=0, count=8, wait=10)) == 8  # the step ends, released
        for client in (native, python):
            with pytest.raises(tdock.errors.StepReleased) as e:
                client.dock(dock_name).put(0, range(8), _rows(np.random.default_rng(1)))
            raised.append(e.value)
    assert [(e.code, e.reason, e.message) for e in raised[:1]] == \
        [(e.code, e.reason, e.message) for e in raised[1:]]


def _message(dock, columns, **header):
    return PutMessage(dock_pb2.PutRequest(dock=dock, step=0, rows=list(range(2)), wait_ms=1000,
                                          **header), columns)


def _column(pieces, dtype=dock_pb2.INT32, name="ragged"):
    """Two rows of int32 over `pieces` (16 bytes, as they would hold)."""
    return PutColumn(name, dtype, np.array([0, 1, 4], dtype=np.int64), pieces, 16)


@pytest.mark.parametrize("bad, match", [
    ([np.arange(8, dtype=np.int32)[::2]], "column 'ragged': a numpy.ndarray that gives no "
                                          "C-contiguous buffer"),
    (["not a buffer"], "column 'ragged': a str that gives no C-contiguous buffer"),
    ("released", "column 'ragged': a memoryview that gives no C-contiguous buffer"),
])
def test_a_bad_buffer_is_refused_and_nothing_is_sent(server, dock_name, bad, match):
    """A piece that is not C-contiguous, not a buffer, or a view already
    released: INVALID_ARGUMENT naming the column, and no row written."""
    if bad == "released":
        view = memoryview(np.arange(4, dtype=np.int32))
        view.release()
        bad = [view]
    with tdock.Client(server, data_path="native") as client:
        dock = client.create_dock(_spec(dock_name))
        native = _native_path.connect(client.address, client._options, client.transport)
        with pytest.raises(tdock.errors.InvalidArgument, match=match):
            _native_path.put(native, _message(dock_name, [_column(bad)]), None)
        # Nothing was written: the same cells take a Put.
        ack = dock.put(0, range(2), {"ragged": [np.arange(1, dtype=np.int32)] * 2})
        assert ack.rows == 2


@pytest.mark.parametrize("header, match", [
    ({"cell_locations": True}, "the header sets cell_locations"),
    ({"prepared_extent": 5}, "the header sets prepared_extent"),
])
def test_a_header_with_what_the_library_sets_is_refused(server, dock_name, header, match):
    """Fields of a PutRequest that only the library sets are refused by
    name, before anything is sent."""
    with tdock.Client(server, data_path="native") as client:
        client.create_dock(_spec(dock_name))
        native = _native_path.connect(client.address, client._options, client.transport)
        piece = np.arange(4, dtype=np.int32)
        with pytest.raises(tdock.errors.InvalidArgument, match=match):
            _native_path.put(native, _message(dock_name, [_column([piece])], **header), None)


def test_a_column_of_an_unknown_dtype_is_refused(server, dock_name):
    """A dtype value no DType has: INVALID_ARGUMENT naming the column."""
    with tdock.Client(server, data_path="native") as client:
        client.create_dock(_spec(dock_name))
        native = _native_path.connect(client.address, client._options, client.transport)
        column = _column([np.arange(4, dtype=np.int32)], dtype=99)
        with pytest.raises(tdock.errors.InvalidArgument,
                           match="column 'ragged': no dtype has the value 99"):
            _native_path.put(native, _message(dock_name, [column]), None)


@pytest.mark.skipif(SHARDED, reason="runs its own sharded deployment")
def test_a_put_named_by_a_stale_listing_is_unavailable_and_the_next_one_goes_in(dock_name):
    """The Client places a Put by its own listing: when the controller lists
    no shard at the address (and with the shared memory) it names, the Put
    is Unavailable naming the shard, nothing is written, and the Client
    lists the shards again, so the next Put goes in."""
    procs, address = start_sharded(2)
    drain(procs[0])
    try:
        with tdock.Client(address, data_path="native") as client:
            dock = client.create_dock(_spec(dock_name))
            rows = _rows(np.random.default_rng(3))
            listed = client.shards()
            client._shards = [dataclasses.replace(s, shm_prefix=s.shm_prefix + ".gone")
                              for s in listed]
            with pytest.raises(tdock.errors.Unavailable,
                               match="lists no shard at .* with shared memory '.*\\.gone'"):
                dock.put(0, range(8), rows)
            assert client._shards is None  # listed again by the next call
            assert dock.put(0, range(8), rows).rows == 8
            assert _read(dock, 0)[0] == [r.tolist() for r in rows["ragged"]]
    finally:
        for proc in reversed(procs):
            stop_server(proc)
