"""Same-host shared memory with a shard (docs/scale-out.md): a Put is written
into the shard's chunks and a Get's columns are read-only views of them,
with no payload byte over a socket (the shard's metrics say so); a view a
reader holds keeps its cells while the shard reuses its memory, and is given
back once dropped (the shard's tdock_shm_pins says so), though the reader
reads nothing more; the transport asked for is kept to (shm fails where the
memory is not shared, before any row is claimed; grpc never maps); the
asyncio client does the same, and gives its pins back at once when asked
(an event loop that stops between calls runs no give-back meanwhile); bad
prepared Puts are refused."""

import asyncio
import gc
import logging
import mmap
import time
import urllib.request

import numpy as np
import pytest

import tdock
import tdock.aio
from conftest import SHARDED
from server_process import drain, start_server, start_sharded, stop_server
from tdock import wire
from tdock.v1 import dock_pb2

pytestmark = pytest.mark.skipif(SHARDED, reason="runs its own sharded deployments")

SHM = "--shm_dir=/dev/shm"


def _spec(name, *, rows=8, steps_in_flight=2, **consumer):
    return {"name": name, "num_prompts": rows, "n_samples_per_prompt": 1,
            "steps_in_flight": steps_in_flight,
            "columns": {"x": {"dtype": "float32", "inner_shape": [1024]}},
            "consumers": {"c": {"columns": ["x"], "dispatch_size": rows, **consumer}}}


def _rows(step, rows=8):
    return np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024) + 1e6 * step


def _metric(proc, name, direction):
    text = urllib.request.urlopen(proc.metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{direction="{direction}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in {proc.metrics_url}")


def _gauge(proc, name):
    text = urllib.request.urlopen(proc.metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in {proc.metrics_url}")


def _mapped(array):
    """Whether `array`'s memory is a mapped file (a shard's chunk)."""
    obj = array
    while obj is not None:
        if isinstance(obj, mmap.mmap):
            return True
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
    return False


@pytest.fixture
def deployment(request):
    shard_args = getattr(request, "param", (SHM,))
    procs, address = start_sharded(1, shard_args=shard_args)
    drain(procs[0])
    yield procs, address
    for proc in reversed(procs):
        if proc.poll() is None:
            stop_server(proc)


def test_a_put_and_a_get_through_shared_memory_cross_no_socket(deployment, caplog):
    procs, address = deployment
    shard = procs[1]
    caplog.set_level(logging.INFO, logger="tdock")
    with tdock.Client(address, transport="shm") as client:
        assert client.transport == "shm"
        [info] = client.shards()
        assert info.shm_prefix.startswith("/dev/shm/tdock-shard1-")
        dock = client.create_dock(_spec("shm"))
        dock.put(0, range(8), {"x": _rows(0)})
        batch = dock.get("c", step=0, wait=10)
        values = batch.column("x").values
        np.testing.assert_array_equal(values.reshape(8, 1024), _rows(0))
        assert _mapped(values) and not values.flags.writeable
    assert f"shard 1 at {info.address}: transport shm (asked: shm)" in caplog.text
    payload = 8 * 1024 * 4
    for direction in ("in", "out"):
        assert _metric(shard, "tdock_shm_payload_bytes_total", direction) == payload
        assert _metric(shard, "tdock_payload_bytes_total", direction) == payload
    # gRPC asked for: the same shard, nothing through its memory.
    with tdock.Client(address, transport="grpc") as client:
        dock = client.dock("shm")
        dock.put(1, range(8), {"x": _rows(1)})
        batch = dock.get("c", step=1, wait=10)
        assert not _mapped(batch.column("x").values)
        np.testing.assert_array_equal(batch.column("x").values.reshape(8, 1024), _rows(1))
    assert _metric(shard, "tdock_shm_payload_bytes_total", "in") == payload
    assert _metric(shard, "tdock_payload_bytes_total", "in") == 2 * payload


@pytest.mark.parametrize("deployment", [(SHM, "--shard_read_grace_ms=0")], indirect=True)
def test_a_view_held_keeps_its_cells_while_the_shard_reuses_their_memory(deployment):
    procs, address = deployment
    shard_proc = procs[1]
    with tdock.Client(address, transport="shm") as client:
        # Under a lease: the step is released once its batch is
        # acknowledged, and its cells freed then (no read grace).
        dock = client.create_dock(_spec("pinned", steps_in_flight=1, lease_ms=60000))
        dock.put(0, range(8), {"x": _rows(0)})
        batch = dock.get("c", step=0, wait=10)
        held = batch.column("x").values
        assert _mapped(held)
        dock.ack(batch)
        del batch
        # Step 0's memory would go to the next steps' Puts, but for the view.
        for step in range(1, 6):
            dock.put(step, range(8), {"x": _rows(step)})
            got = dock.get("c", step=step, wait=10)
            np.testing.assert_array_equal(got.column("x").values.reshape(8, 1024),
                                          _rows(step))
            dock.ack(got)
            del got
            gc.collect()
        np.testing.assert_array_equal(held.reshape(8, 1024), _rows(0))
        assert _gauge(shard_proc, "tdock_shm_pins") >= 1
        del held
        gc.collect()
        # Its pin goes back, though the client reads nothing more.
        deadline = time.monotonic() + 60
        while _gauge(shard_proc, "tdock_shm_pins") > 0:
            assert time.monotonic() < deadline, "the pin was not given back"
            time.sleep(0.05)


def test_the_asyncio_client_puts_and_gets_through_shared_memory(deployment):
    _, address = deployment

    async def run():
        async with tdock.aio.Client(address, transport="shm") as client:
            dock = await client.create_dock(_spec("shm_aio"))
            await dock.put(0, range(8), {"x": _rows(0)})
            batch = await dock.get("c", step=0, wait=10)
            return batch.column("x").values

    values = asyncio.run(run())
    assert _mapped(values)
    np.testing.assert_array_equal(values.reshape(8, 1024), _rows(0))


def test_the_asyncio_client_gives_a_pin_back_once_its_views_are_gone(deployment):
    procs, address = deployment
    shard_proc = procs[1]

    async def run():
        async with tdock.aio.Client(address, transport="shm") as client:
            dock = await client.create_dock(_spec("pins_aio"))
            await dock.put(0, range(8), {"x": _rows(0)})
            batch = await dock.get("c", step=0, wait=10)
            assert _mapped(batch.column("x").values)
            assert _gauge(shard_proc, "tdock_shm_pins") == 1
            del batch
            gc.collect()
            # Its pin goes back while the loop runs, though the client calls
            # nothing more.
            deadline = time.monotonic() + 60
            while _gauge(shard_proc, "tdock_shm_pins") > 0:
                assert time.monotonic() < deadline, "the pin was not given back"
                await asyncio.sleep(0.05)

    asyncio.run(run())


def test_an_event_loop_that_stops_between_calls_gives_pins_back_before_it_stops(deployment):
    procs, address = deployment
    shard_proc = procs[1]
    loop = asyncio.new_event_loop()

    async def connect():
        return tdock.aio.Client(address, transport="shm")

    async def read(dock, step):
        await dock.put(step, range(8), {"x": _rows(step)})
        return await dock.get("c", step=step, wait=10)

    async def read_and_give_back(dock, step):
        batch = await read(dock, step)
        np.testing.assert_array_equal(batch.column("x").values.reshape(8, 1024), _rows(step))
        del batch
        await client.give_back_pins()

    client = loop.run_until_complete(connect())
    try:
        dock = loop.run_until_complete(client.create_dock(_spec("pins_stopped")))
        batch = loop.run_until_complete(read(dock, 0))
        np.testing.assert_array_equal(batch.column("x").values.reshape(8, 1024), _rows(0))
        del batch
        # The views are gone, but nothing gives their pin back while the
        # loop is stopped: give_back_pins does, at once.
        time.sleep(0.2)
        assert _gauge(shard_proc, "tdock_shm_pins") == 1
        loop.run_until_complete(client.give_back_pins())
        assert _gauge(shard_proc, "tdock_shm_pins") == 0
        # Views dropped in the call sequence itself go back with it (nothing
        # the event loop keeps of the read holds them past it).
        loop.run_until_complete(read_and_give_back(dock, 1))
        assert _gauge(shard_proc, "tdock_shm_pins") == 0
    finally:
        loop.run_until_complete(client.close())
        loop.close()


@pytest.mark.parametrize("deployment", [()], indirect=True)
def test_transport_shm_fails_where_the_memory_is_not_shared(deployment, monkeypatch):
    _, address = deployment
    with tdock.Client(address, transport="shm") as client:
        dock = client.create_dock(_spec("no_shm"))
        with pytest.raises(tdock.errors.FailedPrecondition,
                           match="shard 1 at .* offers no shared memory"):
            dock.put(0, range(8), {"x": _rows(0)})
    with tdock.Client(address) as client:  # auto: gRPC with this shard
        client.dock("no_shm").put(0, range(8), {"x": _rows(0)})
    with tdock.Client(address, transport="shm") as client:
        with pytest.raises(tdock.errors.FailedPrecondition, match="offers no shared memory"):
            client.dock("no_shm").get("c", step=0, wait=1)
    # The rows were not claimed by the refused Get.
    with tdock.Client(address, transport="grpc") as client:
        assert client.dock("no_shm").get("c", step=0, wait=10).rows.tolist() == list(range(8))

    proc, standalone = start_server()
    drain(proc)
    try:
        with tdock.Client(standalone, transport="shm") as client:
            dock = client.create_dock(_spec("standalone"))
            with pytest.raises(tdock.errors.FailedPrecondition, match="standalone server"):
                dock.put(0, range(8), {"x": _rows(0)})
    finally:
        stop_server(proc)
    with pytest.raises(tdock.errors.InvalidArgument, match="transport is 'tcp'"):
        tdock.Client(address, transport="tcp")
    monkeypatch.setenv("TDOCK_TRANSPORT", "rdma")
    with pytest.raises(tdock.errors.InvalidArgument, match="TDOCK_TRANSPORT is 'rdma'"):
        tdock.Client(address)


def test_a_shard_refuses_prepared_puts_that_carry_bytes_or_were_never_prepared(deployment):
    _, address = deployment
    with tdock.Client(address, transport="shm") as client:
        client.create_dock(_spec("bad"))
        [shard] = client.shards()
        column = wire.PutColumn("x", dock_pb2.FLOAT32, np.arange(9, dtype=np.int64),
                                [_rows(0).tobytes()], 8 * 1024 * 4)
        message = wire.PutMessage(dock_pb2.PutRequest(dock="bad", step=0, rows=range(8)),
                                  [column])
        with pytest.raises(tdock.errors.InvalidArgument,
                           match="column 'x' carries 32768 bytes; a prepared Put's are in "
                                 "shared memory"):
            client.shard_call(shard, "Prepare", message.encode(), dock_pb2.PrepareResponse,
                              serialize=lambda b: b)
        with pytest.raises(tdock.errors.NotFound, match="holds no Put prepared as 12345"):
            client.shard_call(shard, "Put", message.without_data(12345),
                              dock_pb2.PutResponse, serialize=lambda b: b)
        # Nothing was stored: the rows are still to be written, once.
        dock = client.dock("bad")
        dock.put(0, range(8), {"x": _rows(0)})
        np.testing.assert_array_equal(
            dock.get("c", step=0, wait=10).column("x").values.reshape(8, 1024), _rows(0))
