"""Streaming through the Python client: tdock.torch.StreamingDataset under a
DataLoader (in this process and in worker processes), Clients and Docks that
pickle into other processes, micro-batches that always cover the batch, and
iteration that rides out a server killed and restarted on its data dir."""

import pickle
import socket
import threading
import time

import numpy as np
import pytest
import torch

import tdock
import tdock.torch
from conftest import grpo_spec
from server_process import drain, start_server, stop_server


def stream_spec(name, rows=8, dispatch=2, **consumer):
    return grpo_spec(
        name, prompts=rows, n=1, length_columns=["prompt_ids"],
        columns={"prompt_ids": {"dtype": "int32"}, "uid": {"dtype": "string"}},
        consumers={"trainer": {"columns": ["prompt_ids", "uid"],
                               "dispatch_size": dispatch, **consumer}})


def put_step(dock, step, rows=8):
    dock.put(step, range(rows), {
        "prompt_ids": [np.full(r % 3 + 1, step * 100 + r, np.int32) for r in range(rows)],
        "uid": [f"s{step}r{r}" for r in range(rows)]})


def uids(items):
    return sorted(u for td in items for u in td["uid"])


def expected_uids(steps, rows=8):
    return sorted(f"s{s}r{r}" for s in steps for r in range(rows))


def test_micro_batches_cover_the_batch_without_a_plan(client, dock_name):
    """A consumer with no micro-batch plan: micro_batches is the whole batch
    as one, so a loop over micro-batches trains on every row."""
    dock = client.create_dock(stream_spec(dock_name, dispatch=4))
    put_step(dock, 0)
    b = dock.get("trainer", wait=10)
    assert not b.micro_batch_info
    (mb,) = b.micro_batches
    assert mb is b and len(mb) == 4
    dock.get("trainer", wait=10)  # the step's other 4 rows
    empty = dock.get("trainer", step=0, wait=0)
    assert len(empty) == 0 and empty.micro_batches == []


def test_client_and_dock_pickle_to_a_working_copy(server, dock_name):
    """A pickled Client keeps its address and options (timeout, token,
    reconnect settings) and opens its own channel; a pickled Dock is the same
    dock through such a copy; both work."""
    with tdock.Client(server, timeout=7.0, reconnect_timeout=12.0) as c:
        dock = c.create_dock(stream_spec(dock_name))
        copy = pickle.loads(pickle.dumps(dock))
        assert copy.name == dock.name and copy.client is not c
        assert copy.client.timeout == 7.0 and copy.client.reconnect_timeout == 12.0
        put_step(copy, 0)
        assert len(dock.get("trainer", wait=10)) == 2
        copy.client.close()


def test_streaming_dataset_with_a_dataloader_acks_each_batch(client, dock_name):
    """StreamingDataset under its DataLoader (loader()): two steps of a
    leased consumer arrive as TensorDicts, every row once; each batch is
    acknowledged when the next is asked for, so none is in flight after the
    loop and no lease expired."""
    dock = client.create_dock(stream_spec(dock_name, lease_ms=30_000))
    for step in range(2):
        put_step(dock, step)
    dataset = tdock.torch.StreamingDataset(dock, "trainer", steps=2, wait=10)
    items = list(dataset.loader())
    assert len(items) == 8
    assert uids(items) == expected_uids(range(2))
    td = items[0]
    assert td.batch_size == torch.Size([2]) and td["prompt_ids"].is_nested
    status = dock.status()
    assert status.leases["trainer"].in_flight == 0
    assert status.leases["trainer"].expiries == 0


def test_streaming_dataset_in_worker_processes(client, dock_name):
    """Two DataLoader workers (loader(): started by spawn, each unpickles the
    Dock into its own client) drain the same consumer's rank between them:
    each of the two steps' rows reaches the loop exactly once."""
    dock = client.create_dock(stream_spec(dock_name))
    for step in range(2):
        put_step(dock, step)
    dataset = tdock.torch.StreamingDataset(dock, "trainer", steps=[0, 1], wait=10)
    assert uids(dataset.loader(num_workers=2)) == expected_uids(range(2))


def test_streaming_dataset_refuses_a_forked_worker(client, dock_name):
    """A DataLoader worker started by fork would use a gRPC channel that does
    not survive fork: the worker fails with an error that says what to do."""
    dock = client.create_dock(stream_spec(dock_name))
    dataset = tdock.torch.StreamingDataset(dock, "trainer", steps=1, wait=10)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1,
                                         multiprocessing_context="fork",
                                         collate_fn=tdock.torch.as_is)
    with pytest.raises(tdock.errors.FailedPrecondition, match="multiprocessing_context='spawn'"):
        list(loader)


def test_streaming_dataset_rejects_bad_arguments(client, dock_name):
    dock = client.dock(dock_name)
    with pytest.raises(tdock.errors.InvalidArgument, match="steps must be >= 0"):
        tdock.torch.StreamingDataset(dock, "trainer", steps=-1)
    with pytest.raises(tdock.errors.InvalidArgument, match="rank must be >= 0"):
        tdock.torch.StreamingDataset(dock, "trainer", rank=-2)
    with pytest.raises(tdock.errors.InvalidArgument, match="reconnect_timeout"):
        tdock.Client("127.0.0.1:1", reconnect_timeout=-1)
    with pytest.raises(tdock.errors.InvalidArgument, match="max_reconnect_backoff"):
        tdock.Client("127.0.0.1:1", max_reconnect_backoff=0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RestartingServer:
    """A tdock-server on a fixed port with a data dir, killed with SIGKILL
    and started again on both."""

    def __init__(self, data_dir):
        self.args = [f"--listen=127.0.0.1:{free_port()}", f"--data_dir={data_dir}",
                     "--durability=sync"]
        self.start()

    def start(self):
        self.proc, self.address = start_server(*self.args)
        drain(self.proc)
        self.started = time.monotonic()

    def kill(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def restarting(tmp_path):
    srv = RestartingServer(tmp_path / "data")
    yield srv
    stop_server(srv.proc)


def put_rows(dock, step, rows):
    dock.put(step, rows, {
        "prompt_ids": [np.full(r % 3 + 1, step * 100 + r, np.int32) for r in rows],
        "uid": [f"s{step}r{r}" for r in rows]})


def test_balanced_iteration_rides_out_a_server_restart(restarting, dock_name):
    """A BALANCED consumer's two ranks iterate step 0 (8 rows, rounds of 4).
    Round 0 is served; while both ranks' Gets for round 1 are parked, the
    server is killed with SIGKILL and started again on its data dir; then the
    other 4 rows are written. Both iterations go on without an error: each
    rank asks for round 1 by number and gets its share, and the shares of the
    two rounds hold every row exactly once. Prints how long after the
    restarted server listened both ranks were parked on it again (the
    channel retries at least every 0.5 s), and how long after the Put they
    had their shares."""
    client = tdock.Client(restarting.address, timeout=10.0)
    dock = client.create_dock(stream_spec(dock_name, dispatch=2, dp_size=2,
                                          policy="BALANCED"))
    put_rows(dock, 0, range(4))
    shares, failures = {0: [], 1: []}, []
    served = {r: threading.Event() for r in (0, 1)}

    def iterate(rank):
        try:
            for b in client.dock(dock_name).iter("trainer", rank=rank, step=0):
                shares[rank].append((b.round, b.cells("uid"), time.monotonic()))
                served[rank].set()
        except Exception as e:  # noqa: BLE001 — asserted below
            failures.append(e)

    threads = [threading.Thread(target=iterate, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for r in (0, 1):
        assert served[r].wait(30)
    time.sleep(0.5)  # both ranks park for round 1
    assert dock.status().waiters["trainer"] == 2
    restarting.kill()
    restarting.start()
    with tdock.Client(restarting.address) as producer:
        restored = producer.dock(dock_name)
        while restored.status().waiters["trainer"] < 2:  # the ranks are back
            assert time.monotonic() - restarting.started < 60
            time.sleep(0.01)
        back = time.monotonic() - restarting.started
        put_rows(restored, 0, range(4, 8))
    written = time.monotonic()
    for t in threads:
        t.join(60)
    assert not failures
    assert [[rnd for rnd, _, _ in shares[r]] for r in (0, 1)] == [[0, 1], [0, 1]]
    got = sorted(u for r in (0, 1) for _, cells, _ in shares[r] for u in cells)
    assert got == expected_uids([0])
    after = max(shares[r][-1][2] for r in (0, 1)) - written
    print(f"both ranks parked again {back:.2f} s after the server listened, "
          f"had their round-1 share {after:.2f} s after the Put")
    client.close()


def test_leased_stream_rides_out_a_server_restart(restarting, dock_name):
    """A StreamingDataset of a leased consumer (1.5 s leases, 2 rows a batch)
    over 4 rows: after the first batch the server is killed with SIGKILL,
    started again on its data dir, and the loop body outlasts the lease. The
    stream goes on: acknowledging the first batch fails (its lease expired:
    a warning says so), its rows come back, and in the end every row was
    delivered and acknowledged once, nothing in flight."""
    client = tdock.Client(restarting.address, timeout=10.0)
    dock = client.create_dock(stream_spec(dock_name, rows=4, dispatch=2,
                                          lease_ms=1500))
    put_rows(dock, 0, range(4))
    dataset = tdock.torch.StreamingDataset(dock, "trainer", steps=[0],
                                           item=lambda b: b)
    seen = []
    with pytest.warns(UserWarning, match="lease .* is not in flight"):
        for b in dataset:
            seen.append(sorted(b.rows.tolist()))
            if len(seen) == 1:
                restarting.kill()
                restarting.start()
                time.sleep(2.0)  # past the lease
    first = seen[0]
    assert sorted(r for rows in seen for r in rows) == sorted(list(range(4)) + first)
    status = dock.status()
    assert status.leases["trainer"].in_flight == 0
    assert status.leases["trainer"].expiries >= 1
    client.close()


def test_leased_stream_results_need_no_ack(client, dock_name):
    """A StreamingDataset of a leased consumer acknowledges each batch when
    the next is asked for, so the loop body's Put of a batch's results
    without ack= is not refused as a forgotten acknowledgement; when the
    loop ends every result is written and nothing is in flight."""
    spec = stream_spec(dock_name, rows=4, dispatch=2, lease_ms=600_000)
    spec["columns"]["score"] = {"dtype": "float32", "max_len": 1}
    dock = client.create_dock(spec)
    put_rows(dock, 0, range(4))
    dataset = tdock.torch.StreamingDataset(dock, "trainer", steps=[0], item=lambda b: b)
    written = [dock.put(b.step, b.rows, {"score": np.ones(len(b), np.float32)}).rows
               for b in dataset]
    assert written == [2, 2]
    status = dock.status()
    assert status.leases["trainer"].in_flight == 0
    assert status.steps == []  # every row acknowledged: the step is released


def test_a_lease_acknowledged_already_is_not_said_to_be_handed_out_again(client, dock_name):
    """The stream's acknowledgement of a batch whose lease ended warns with
    the server's reason; only an expired lease's warning says its rows are
    handed out again (an Ack retried after a restart finds its lease
    acknowledged already: nothing comes back)."""
    dock = client.create_dock(stream_spec(dock_name, rows=4, dispatch=2, lease_ms=60000))
    put_rows(dock, 0, range(4))
    batch = dock.get("trainer", step=0, wait=5)
    assert dock.ack(batch) == 2
    with pytest.warns(UserWarning) as warned:
        tdock.torch._ack(dock, batch)  # pylint: disable=protected-access
    (message,) = [str(w.message) for w in warned]
    assert "already acknowledged" in message
    assert "handed out again" not in message
