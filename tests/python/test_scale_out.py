"""A controller and its shards (docs/scale-out.md), from the Python client:
the shard listing (empty for a standalone server), Puts going to the shard on
the writer's node (TDOCK_NODE) and batches read back from the shards that
hold their cells, the asyncio client too; what a controller refuses
(seal_when.carry); a shard gone away fails the read naming it (or, asked
for, the batch comes without its rows), and one killed for good is declared
lost and its rows dropped."""

import asyncio
import json
import os
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import tdock
import tdock.aio
from conftest import SHARDED, grpo_spec
from server_process import drain, start_server, start_sharded, stop_server

# It starts its own controllers and shards: once is enough.
pytestmark = pytest.mark.skipif(SHARDED, reason="runs its own sharded deployments")


@pytest.fixture
def sharded():
    procs, address = start_sharded(2)
    drain(procs[0])
    yield procs, address
    for proc in reversed(procs):
        if proc.poll() is None:
            stop_server(proc)


def _payload(proc, direction):
    """A server's tdock_payload_bytes_total{direction}."""
    text = urllib.request.urlopen(proc.metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f'tdock_payload_bytes_total{{direction="{direction}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no tdock_payload_bytes_total in {proc.metrics_url}")


def _rows(lengths, first=0):
    return [np.arange(first, first + n, dtype=np.int32) for n in lengths]


def test_the_listing_names_each_shard_and_a_standalone_server_has_none(sharded):
    _, address = sharded
    with tdock.Client(address) as client:
        shards = client.shards()
        assert [(s.id, s.node) for s in shards] == [(1, "node-1"), (2, "node-2")]
        assert all(s.address.startswith("127.0.0.1:") for s in shards)
        assert [s.state for s in shards] == ["live", "live"]
    # tdockctl lists them too.
    ctl = subprocess.run([os.environ.get("TDOCK_CTL_BIN", "build/client/tdockctl"),
                          "--server", address, "--json", "shards"],
                         capture_output=True, text=True, timeout=60)
    assert ctl.returncode == 0, ctl.stderr
    assert [(s["id"], s["node"], s["state"]) for s in json.loads(ctl.stdout)["shards"]] == [
        (1, "node-1", "live"), (2, "node-2", "live")]
    proc, standalone = start_server()
    drain(proc)
    try:
        with tdock.Client(standalone) as client:
            assert client.shards() == []
    finally:
        stop_server(proc)


def test_puts_go_to_the_writers_node_and_batches_come_back_whole(sharded, monkeypatch):
    procs, address = sharded
    monkeypatch.setenv("TDOCK_NODE", "node-2")
    with tdock.Client(address) as client:
        dock = client.create_dock(grpo_spec("scale", prompts=2, n=2))
        lengths = [3, 1, 4, 2]
        dock.put(0, range(4), {"prompt_ids": _rows([2, 2, 2, 2]),
                               "response_ids": _rows(lengths, 10)})
        # Every cell is on node-2's shard: shard 1 can go.
        stop_server(procs[1])
        got = [dock.get("reward", wait=5) for _ in range(2)]
        rows = [int(r) for b in got for r in b.rows]
        assert sorted(rows) == [0, 1, 2, 3]
        for b in got:
            for i, row in enumerate(b.rows):
                assert b.row("response_ids", i).tolist() == list(
                    range(10, 10 + lengths[int(row)]))
            assert list(b.token_counts) == [2 + lengths[int(r)] for r in b.rows]


ALL_ROWS = {"all": {"columns": ["prompt_ids", "response_ids"], "dispatch_size": 8}}


def _put_groups_on_both_nodes(put, monkeypatch):
    """Four groups of two rows, groups 0 and 2 from node-1, 1 and 3 from
    node-2: every batch of all rows has cells on both shards, interleaved."""
    for group in range(4):
        monkeypatch.setenv("TDOCK_NODE", f"node-{1 + group % 2}")
        rows = [2 * group, 2 * group + 1]
        yield put(0, rows, {"prompt_ids": _rows([1, 1], group),
                            "response_ids": _rows([group + 1, group + 2])})


def _expected_response(row):
    return list(range(row // 2 + 1 + row % 2))


def test_a_batch_with_cells_on_both_shards_comes_back_whole(sharded, monkeypatch):
    procs, address = sharded
    with tdock.Client(address) as client:
        dock = client.create_dock(grpo_spec("both", prompts=4, n=2, consumers=ALL_ROWS))
        for _ in _put_groups_on_both_nodes(dock.put, monkeypatch):
            pass
        # A listing's cells come from their shards.
        listed = {s.row: np.asarray(s.cells["response_ids"]).tolist()
                  for s in dock.list_rows(0, cells=["response_ids"])}
        assert listed == {row: _expected_response(row) for row in range(8)}
        b = dock.get("all", wait=5)
        assert sorted(int(r) for r in b.rows) == list(range(8))
        for i, row in enumerate(b.rows):
            assert b.row("response_ids", i).tolist() == _expected_response(int(row))
            assert b.row("prompt_ids", i).tolist() == [int(row) // 2]
        # Both shards sent cells out, the controller none.
        sent = [_payload(p, "out") for p in procs]
        assert sent[0] == 0 and sent[1] > 0 and sent[2] > 0


def test_the_asyncio_client_reads_cells_from_both_shards(sharded, monkeypatch):
    _, address = sharded

    async def run():
        async with tdock.aio.Client(address) as client:
            dock = await client.create_dock(grpo_spec("scale_aio", prompts=4, n=2,
                                                      consumers=ALL_ROWS))
            assert len(await client.shards()) == 2
            for put in _put_groups_on_both_nodes(dock.put, monkeypatch):
                await put
            b = await dock.get("all", wait=5)
            return {int(row): b.row("response_ids", i).tolist() for i, row in enumerate(b.rows)}

    assert asyncio.run(run()) == {row: _expected_response(row) for row in range(8)}


def test_a_controller_refuses_carry_and_a_gone_shard_is_named(sharded, monkeypatch):
    procs, address = sharded
    with tdock.Client(address) as client:
        spec = grpo_spec("carry", prompts=2, n=2, steps_in_flight=2,
                         seal_when={"consumer": "reward", "groups": 1, "carry": True})
        with pytest.raises(tdock.errors.InvalidArgument,
                           match="seal_when.carry needs the cells in the dock"):
            client.create_dock(spec)
        monkeypatch.setenv("TDOCK_NODE", "node-1")
        dock = client.create_dock(grpo_spec("gone", prompts=2, n=2))
        dock.put(0, range(4), {"prompt_ids": _rows([1, 1, 1, 1]),
                               "response_ids": _rows([1, 1, 1, 1])})
        stop_server(procs[1])
        # Handed out without a lease and unreadable: lost to the consumer,
        # which is told which rows and which shard.
        with pytest.raises(tdock.errors.DataLoss, match=r"rows \[0, 1\].*shard 1 at"):
            dock.get("reward", wait=5)


def test_a_partial_get_comes_without_the_rows_of_a_shard_gone(sharded, monkeypatch):
    """A shard that cannot be read: a Get fails naming the rows, unless it
    asked for a partial batch, which comes with the rows whose cells are on
    the shard that answered (their bytes as written) and names the others
    in missing_rows; from the asyncio client and tdockctl too. With every shard gone
    there is no batch to give: it fails."""
    procs, address = sharded
    leased = {"all": {**ALL_ROWS["all"], "lease_ms": 60_000}}
    with tdock.Client(address) as client:
        for name in ("partial", "partial_aio", "partial_ctl", "whole"):
            dock = client.create_dock(grpo_spec(name, prompts=4, n=2, consumers=leased))
            for _ in _put_groups_on_both_nodes(dock.put, monkeypatch):
                pass
    stop_server(procs[2])  # node-2's shard: rows 2, 3, 6, 7
    with tdock.Client(address) as client:
        with pytest.raises(tdock.errors.Unavailable, match=r"could not be read.*shard 2 at"):
            client.dock("whole").get("all", wait=5)
        b = client.dock("partial").get("all", wait=5, partial=True)
        assert sorted(b.rows.tolist()) == [0, 1, 4, 5]
        assert sorted(b.missing_rows.tolist()) == [2, 3, 6, 7]
        for i, row in enumerate(b.rows):
            assert b.row("response_ids", i).tolist() == _expected_response(int(row))
            assert b.row("prompt_ids", i).tolist() == [int(row) // 2]
        assert b.lease is not None
        assert client.dock("partial").ack(b) == 8  # the lease covers the rows left out too

    async def run():
        async with tdock.aio.Client(address) as client:
            b = await client.dock("partial_aio").get("all", wait=5, partial=True)
            return sorted(b.rows.tolist()), sorted(b.missing_rows.tolist())

    assert asyncio.run(run()) == ([0, 1, 4, 5], [2, 3, 6, 7])
    # tdockctl (the C++ client) too.
    ctl = subprocess.run([os.environ.get("TDOCK_CTL_BIN", "build/client/tdockctl"),
                          "--server", address, "--json", "get", "partial_ctl", "all",
                          "--wait_ms", "5000", "--partial"],
                         capture_output=True, text=True, timeout=60)
    assert ctl.returncode == 0, ctl.stderr
    got = json.loads(ctl.stdout)
    assert (sorted(got["rows"]), sorted(got["missing_rows"])) == ([0, 1, 4, 5], [2, 3, 6, 7])
    assert [len(cells) for cells in got["columns"]["response_ids"]] == [
        len(_expected_response(row)) for row in got["rows"]]
    stop_server(procs[1])
    with tdock.Client(address) as client:
        with pytest.raises(tdock.errors.Unavailable, match="could not be read"):
            client.dock("whole").get("all", wait=5, partial=True)


def test_a_partial_answer_renumbers_its_micro_batches_and_repeats():
    """Rows left out of a partial batch go from every per-row field; the
    micro-batches and repeats that named positions name the rows kept (a
    micro-batch may be left empty: every rank keeps the same count)."""
    from tdock import _shards
    from tdock.v1 import dock_pb2

    header = dock_pb2.GetResponse(step=3, rows=[10, 11, 12, 13, 14], token_counts=[1, 2, 3, 4, 5],
                                  keys=["a", "b", "c", "d", "e"], versions=[7, 7, 8, 8, 9],
                                  repeats=[1, 4], lease_id=5)
    header.micro_batches.add(begin=0, end=2, padded_len=2, tokens=3, padded_tokens=4)
    header.micro_batches.add(begin=2, end=3, padded_len=3, tokens=3, padded_tokens=3)
    header.micro_batches.add(begin=3, end=5, padded_len=5, tokens=9, padded_tokens=10)
    out, missing = _shards.narrowed(header, np.array([0, 1, 3]))
    assert missing == [12, 14]
    assert list(out.rows) == [10, 11, 13] and list(out.token_counts) == [1, 2, 4]
    assert list(out.keys) == ["a", "b", "d"] and list(out.versions) == [7, 7, 8]
    assert list(out.repeats) == [1]
    assert [(m.begin, m.end, m.tokens, m.padded_tokens) for m in out.micro_batches] == [
        (0, 2, 3, 4), (2, 2, 0, 0), (2, 3, 4, 5)]
    assert out.step == 3 and out.lease_id == 5


def test_a_put_of_bytes_to_the_controller_says_where_to_put(sharded):
    """A client that speaks to the controller directly, as if standalone (a
    Client made before the shards were listed cannot be: the listing comes
    with the first Put), gets a refusal that names the way."""
    _, address = sharded
    # The grpcio path, whose listing this fakes: the native path sends as the
    # C++ client's own listing says (tdock._native_path).
    with tdock.Client(address, data_path="python") as client:
        client.create_dock(grpo_spec("direct", prompts=2, n=2))
        client._shards = []  # as a client of a standalone server would send it
        with pytest.raises(tdock.errors.FailedPrecondition,
                           match="this server is a controller.*Put to a shard"):
            client.dock("direct").put(0, [0], {"prompt_ids": _rows([1])})


def _until_served(call, seconds=60):
    """`call()` once the restarted controller (and its shards, registering
    again) answer it: a synchronization point, not a timing assertion."""
    give_up = time.monotonic() + seconds
    while True:
        try:
            return call()
        except tdock.errors.Unavailable:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


def test_a_controller_killed_comes_back_from_its_journal_with_its_shards_cells(tmp_path):
    """kill -9 of a controller with a data dir, under a leased consumer: it
    comes back on its address with every acknowledged Put's locations and
    its lease in flight; the shards keep the cells and register again; the
    consumer gets the rows it had not taken, and acknowledges the lease it
    held across the crash."""
    data = tmp_path / "controller"
    controller, address = start_server("--role=controller", f"--data_dir={data}")
    drain(controller)
    shards = []
    try:
        for i in (1, 2):
            shard, _ = start_server("--role=shard", f"--controller={address}",
                                    f"--shard_id={i}", f"--node=node-{i}")
            drain(shard)
            shards.append(shard)
        with tdock.Client(address) as client:
            dock = client.create_dock(grpo_spec(
                "durable", prompts=2, n=2,
                consumers={"trainer": {"columns": ["prompt_ids", "response_ids"],
                                       "dispatch_size": 2, "lease_ms": 600000}}))
            lengths = [2, 3, 4, 5]
            for rows in ([0, 1], [2, 3]):  # by hash, possibly on both shards
                dock.put(0, rows, {"prompt_ids": _rows([1, 1], rows[0]),
                                   "response_ids": [np.arange(lengths[r], dtype=np.int32)
                                                    for r in rows]})
            held = dock.get("trainer", wait=5)
            assert len(held.rows) == 2
            controller.kill()
            controller.wait()
            controller, _ = start_server("--role=controller", f"--data_dir={data}",
                                         f"--listen={address}")
            drain(controller)
            rest = _until_served(lambda: dock.get("trainer", wait=5))
            assert sorted(int(r) for r in rest.rows) == sorted(
                set(range(4)) - {int(r) for r in held.rows})
            for i, row in enumerate(rest.rows):
                assert rest.row("response_ids", i).tolist() == list(range(lengths[int(row)]))
            dock.ack(rest)
            assert dock.ack(held) == 2  # the lease held across the crash
    finally:
        for proc in [*shards, controller]:
            if proc.poll() is None:
                stop_server(proc)


def _balanced_leased_groups_on_both_nodes(client, name, monkeypatch):
    """A dock of four groups of two rows, groups 0 and 2 put through
    node-1's shard, 1 and 3 through node-2's, for a leased balanced consumer
    of whole groups over two ranks."""
    dock = client.create_dock(grpo_spec(
        name, prompts=4, n=2,
        consumers={"actor": {"columns": ["prompt_ids", "response_ids"],
                             "dp_size": 2, "dispatch_size": 2,
                             "policy": "balanced", "whole_groups": True,
                             "lease_ms": 600000}}))
    for _ in _put_groups_on_both_nodes(dock.put, monkeypatch):
        pass
    return dock


def test_a_shard_killed_is_declared_lost_and_a_balanced_leased_pipeline_goes_on(monkeypatch):
    """kill -9 of a shard under a leased, balanced consumer of whole groups:
    once the controller has not heard from it for --shard_away_after_ms it
    is listed away and its groups wait: both ranks get their shares of a
    round of the groups on the other shard, which they read; after --shard_lost_after_ms
    it is declared lost and its groups are dropped as lost, and once the
    leases are acknowledged the step ends and is released."""
    procs, address = start_sharded(2, "--shard_lost_after_ms=20000",
                                   "--shard_away_after_ms=2000")
    drain(procs[0])
    try:
        with tdock.Client(address) as client:
            dock = _balanced_leased_groups_on_both_nodes(client, "lost", monkeypatch)
            procs[2].kill()
            procs[2].wait()
            # The controller lists it away after 2 s without a word: a
            # synchronization point, not a timing assertion.
            give_up = time.monotonic() + 120
            while [s.state for s in client.shards(refresh=True)] != ["live", "away"]:
                assert time.monotonic() < give_up, "shard 2 was never listed away"
                time.sleep(0.1)
            # Its groups wait: a round of two groups is formed of the groups on
            # shard 1, before shard 2 is declared lost.
            shares = [dock.get("actor", rank=rank, wait=30) for rank in (0, 1)]
            assert sorted(r for b in shares for r in b.rows.tolist()) == [0, 1, 4, 5]
            assert all(b.round == shares[0].round for b in shares)
            assert dock.status().steps[0].dropped.get("lost", 0) == 0
            # Declared lost after 20 s.
            while dock.status().steps[0].dropped.get("lost", 0) < 4:
                assert time.monotonic() < give_up, "shard 2 was never declared lost"
                time.sleep(0.1)
            assert dock.status().steps[0].dropped == {"lost": 4}
            assert [s.id for s in client.shards(refresh=True)] == [1]
            for b in shares:
                for i, row in enumerate(b.rows.tolist()):
                    group = row // 2
                    np.testing.assert_array_equal(
                        b.row("response_ids", i),
                        np.arange(group + 1 + row % 2, dtype=np.int32))
            dock.ack(shares)
            while any(s.step == 0 for s in dock.status().steps):
                assert time.monotonic() < give_up, "step 0 was never released"
                time.sleep(0.05)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                stop_server(proc)


def test_a_shard_with_a_data_dir_killed_and_restarted_loses_nothing(tmp_path, monkeypatch):
    """kill -9 of a shard with --data_dir under a leased, balanced consumer
    of whole groups, started again with its data dir (on another port, as a
    new pod would be): it registers as the same incarnation at its new
    address, nothing is dropped as lost, and the ranks get every group with
    the bytes written, read from both shards."""
    controller, address = start_server("--role=controller", "--shard_away_after_ms=2000")
    drain(controller)
    procs = [controller]

    def shard(i, *extra):
        proc, proc.address = start_server("--role=shard", f"--controller={address}",
                                          f"--shard_id={i}", f"--node=node-{i}", *extra)
        drain(proc)
        return proc

    try:
        procs += [shard(1), shard(2, f"--data_dir={tmp_path / 'shard-2'}")]
        with tdock.Client(address) as client:
            dock = _balanced_leased_groups_on_both_nodes(client, "durable", monkeypatch)
            before = {s.id: s for s in client.shards(refresh=True)}[2]
            procs[2].kill()
            procs[2].wait()
            procs[2] = shard(2, f"--data_dir={tmp_path / 'shard-2'}")
            assert procs[2].address != before.address
            give_up = time.monotonic() + 120
            with tdock.Client(address) as watcher:  # `client` keeps its listing
                while True:  # a synchronization point, not a timing assertion
                    after = {s.id: s for s in watcher.shards(refresh=True)}.get(2)
                    if after is not None and after.address == procs[2].address:
                        break
                    assert time.monotonic() < give_up, "shard 2 never registered again"
                    time.sleep(0.1)
            assert after.incarnation == before.incarnation
            # The client's listing still names the old address: its first read
            # of shard 2's cells fails (the lease goes back), and it lists the
            # shards again for the next.
            shares, failed = [], 0
            while sum(len(b) for b in shares) < 8:
                for rank in (0, 1):
                    try:
                        shares.append(dock.get("actor", rank=rank, wait=30))
                    except tdock.errors.Unavailable:
                        failed += 1
                assert time.monotonic() < give_up, "the step's groups never all came"
            assert failed == 1
            assert sorted(r for b in shares for r in b.rows.tolist()) == list(range(8))
            for b in shares:
                for i, row in enumerate(b.rows.tolist()):
                    assert b.row("response_ids", i).tolist() == _expected_response(row)
            assert dock.status().steps[0].dropped == {}
            dock.ack(shares)
            while any(s.step == 0 for s in dock.status().steps):
                assert time.monotonic() < give_up, "step 0 was never released"
                time.sleep(0.05)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                stop_server(proc)
