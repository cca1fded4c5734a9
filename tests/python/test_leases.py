"""Leases through the Python client: a worker process that takes rows and is
killed loses nothing (the rows reach another worker after the lease), every
row is acknowledged exactly once, and late or repeated acknowledgements are
refused with the lease named; a resumed job lists and hands back the leases
its workers held, also from a checkpoint's copy."""

import asyncio
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tdock
from conftest import grpo_spec
from server_process import drain, start_server, stop_server


def leased_spec(name, lease_ms, rows=8, dispatch=4):
    return grpo_spec(
        name, prompts=rows, n=1,
        columns={"prompt_ids": {"dtype": "int32"},
                 "response_ids": {"dtype": "int32"}},
        consumers={
            "rollout": {"columns": ["prompt_ids"], "dispatch_size": dispatch,
                        "lease_ms": lease_ms},
            "trainer": {"columns": ["prompt_ids", "response_ids"]},
        })


def put_prompts(dock, rows):
    dock.put(0, range(rows), {"prompt_ids": [np.array([r, r], np.int32)
                                             for r in range(rows)]})


def respond(dock, batch):
    """A rollout worker's write, acknowledging the batch's lease."""
    dock.put(batch.step, batch.rows,
             {"response_ids": [np.array([r * 10], np.int32) for r in batch.rows]},
             ack=batch)


def test_killed_worker_rows_reach_another_worker(server, client, dock_name):
    """A worker process takes 4 rows under a 1.5 s lease and is killed with
    SIGKILL before writing; a second worker gets its own 4 rows, then the dead
    worker's 4 once the lease expires; every row gets exactly one response and
    the trainer reads all 8; the dock counts one expiry of 4 rows."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=1500))
    put_prompts(dock, 8)
    code = textwrap.dedent(f"""
        import sys, time, tdock
        with tdock.Client({server!r}) as c:
            b = c.dock({dock_name!r}).get("rollout", wait=10)
            print(b.lease, *b.rows.tolist(), flush=True)
            time.sleep(600)  # "generating" until killed
    """)
    dying = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             text=True, env=dict(os.environ))
    try:
        lease, *taken = map(int, dying.stdout.readline().split())
    finally:
        dying.kill()
        dying.wait()
    assert len(taken) == 4 and lease > 0

    responded = []
    mine = dock.get("rollout", wait=10)
    assert sorted(mine.rows.tolist()) == sorted(set(range(8)) - set(taken))
    respond(dock, mine)
    responded += mine.rows.tolist()
    back = dock.get("rollout", wait=30)  # parks until the dead lease expires
    assert sorted(back.rows.tolist()) == sorted(taken)
    assert back.lease != lease
    respond(dock, back)
    responded += back.rows.tolist()
    assert sorted(responded) == list(range(8))

    status = dock.status()
    assert status.leases["rollout"] == tdock.client.LeaseStatus(
        in_flight=0, rows_in_flight=0, expiries=1, nacks=0, rows_returned=4)
    trained = dock.get("trainer", wait=10)
    assert sorted(trained.rows.tolist()) == list(range(8))
    for i, row in enumerate(trained.rows.tolist()):
        assert trained.row("response_ids", i).tolist() == [row * 10]


def test_late_ack_on_expired_lease_is_refused(client, dock_name):
    """A batch whose lease expired (its rows went to another Get) cannot be
    acknowledged: FailedPrecondition naming the lease; the rows' new lease
    is unaffected."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=200, dispatch=8))
    put_prompts(dock, 8)
    old = dock.get("rollout")
    new = dock.get("rollout", wait=10)
    assert sorted(new.rows.tolist()) == sorted(old.rows.tolist())
    with pytest.raises(tdock.errors.FailedPrecondition,
                       match=f"lease {old.lease} is not in flight: it expired"):
        dock.ack(old)
    with pytest.raises(tdock.errors.FailedPrecondition,
                       match=f"lease {old.lease}"):
        respond(dock, old)
    assert dock.status().steps[0].ready["response_ids"] == 0  # nothing written


def test_ack_nack_and_repeated_ack(client, dock_name):
    """nack hands rows back at once; ack returns the rows acknowledged; an
    acknowledged lease cannot be acknowledged again; batches without a lease
    need no acknowledgement."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=60_000))
    put_prompts(dock, 8)
    first = dock.get("rollout")
    assert first.lease is not None and first.lease_seconds == 60.0
    assert dock.nack(first) == 4
    again = dock.get("rollout")
    assert again.rows.tolist() == first.rows.tolist()
    other = dock.get("rollout")
    assert dock.ack([again, other]) == 8
    with pytest.raises(tdock.errors.FailedPrecondition, match="already acknowledged"):
        dock.ack(again)
    plain = dock.get("trainer", wait=0)  # no responses yet: nothing, no lease
    assert plain.lease is None and dock.ack(plain) == 0
    status = dock.status().leases["rollout"]
    assert (status.nacks, status.rows_returned, status.in_flight) == (1, 4, 0)


def test_a_resumed_job_lists_and_hands_back_its_dead_workers_leases(server, client,
                                                                   dock_name):
    """A job restarting its workers lists the consumer's leases in flight
    (step, rank, rows, time left) and hands them all back at once: the rows
    go out again now, not after lease_ms; with nothing in flight nothing is
    handed back; a bad rank is refused by name; the asyncio client does the
    same."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=60_000))
    put_prompts(dock, 8)
    assert dock.leases("rollout") == []
    first, second = dock.get("rollout"), dock.get("rollout")
    leases = dock.leases("rollout")
    assert [x.lease_id for x in leases] == [first.lease, second.lease]
    assert (leases[0].step, leases[0].rank, leases[0].round, leases[0].rows) == (0, 0, None, 4)
    assert 0 < leases[0].expires_in <= 60.0
    with pytest.raises(tdock.errors.InvalidArgument, match="rank 1 is out of range"):
        dock.nack_all("rollout", rank=1)
    with pytest.raises(tdock.errors.InvalidArgument, match="rank must be an int"):
        dock.nack_all("rollout", rank="0")
    with pytest.raises(tdock.errors.FailedPrecondition, match="'trainer' has no leases"):
        dock.leases("trainer")
    assert dock.nack_all("rollout") == tdock.NackAll(leases=2, rows=8)
    assert dock.leases("rollout") == []
    again = dock.get("rollout", count=8)
    assert sorted(again.rows.tolist()) == list(range(8))
    assert dock.ack(again) == 8
    assert dock.nack_all("rollout", rank=0) == tdock.NackAll(leases=0, rows=0)

    async def resume():
        async with tdock.aio.Client(server) as c:
            adock = c.dock(dock_name)
            assert await adock.leases("rollout") == []
            return await adock.nack_all("rollout")
    assert asyncio.run(resume()) == tdock.NackAll(leases=0, rows=0)


def test_checkpoint_then_resume_from_the_copy(tmp_path):
    """Client.checkpoint copies the server's store into a directory; a server
    started on that copy has the dock, its rows and the leases in flight at
    the checkpoint, which the resumed job hands back at once; the asyncio
    client checkpoints too. An empty dir is refused by name."""
    proc, address = start_server(f"--data_dir={tmp_path / 'data'}", "--durability=sync")
    drain(proc)
    try:
        with tdock.Client(address, timeout=30.0) as c:
            dock = c.create_dock(leased_spec("ckpt", lease_ms=600_000))
            put_prompts(dock, 8)
            held = dock.get("rollout")
            with pytest.raises(tdock.errors.InvalidArgument, match="dir must be a non-empty"):
                c.checkpoint("")
            c.checkpoint(str(tmp_path / "copy"))
    finally:
        stop_server(proc)
    proc, address = start_server(f"--data_dir={tmp_path / 'copy'}")
    drain(proc)
    try:
        with tdock.Client(address, timeout=30.0) as c:
            dock = c.dock("ckpt")
            assert [x.lease_id for x in dock.leases("rollout")] == [held.lease]
            assert dock.nack_all("rollout") == tdock.NackAll(leases=1, rows=4)
            again = dock.get("rollout", count=8)
            assert sorted(again.rows.tolist()) == list(range(8))

            async def second_copy():
                async with tdock.aio.Client(address) as ac:
                    await ac.checkpoint(str(tmp_path / "second"))
            asyncio.run(second_copy())
            assert (tmp_path / "second").is_dir()
    finally:
        stop_server(proc)


def test_checkpoint_needs_a_data_dir(client):
    """A server without --data_dir refuses a checkpoint, saying why."""
    with pytest.raises(tdock.errors.FailedPrecondition, match="without --data_dir"):
        client.checkpoint("/tmp/nowhere")


def test_iter_with_leases_acknowledged_by_put(client, dock_name):
    """A worker loop over iter() that writes with ack=batch leaves nothing in
    flight, and the step is released once the trainer has read it."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=60_000))
    put_prompts(dock, 8)
    for batch in dock.iter("rollout", step=0):
        respond(dock, batch)
    assert dock.status().leases["rollout"].in_flight == 0
    assert len(dock.get("trainer", wait=10)) == 8
    assert dock.status().steps == []


def responses(rows):
    return {"response_ids": [np.array([r], np.int32) for r in rows]}


def test_put_without_ack_of_a_leased_batch_is_refused_at_once(server, client, dock_name):
    """The Put that forgets ack= fails itself, not one lease later: a Put
    without ack= of every row of a lease this Dock handed out and has not
    seen end (by index in any order, or by the rows' keys) raises
    FailedPrecondition naming the lease, its consumer and rows, ack=batch and
    ack=False, and writes nothing; the lease stays in flight. A Put of some
    of the rows, one with ack=batch, and one with ack=False (the caller acks
    itself) go through; the asyncio client refuses alike; ack=True is a
    specific error."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=600_000))
    dock.put(0, range(8), {"prompt_ids": [np.array([r], np.int32) for r in range(8)]},
             keys=[f"u{r}" for r in range(8)])
    first = dock.get("rollout")
    listed = ", ".join(map(str, first.rows.tolist()))
    forgot = (f"step 0: this Put writes every row of lease {first.lease} of consumer "
              f"'rollout' \\(rows {listed}\\).*Pass ack=batch.*or ack=False.*nothing "
              "was written")
    for rows, keys in ((first.rows, None), (first.rows[::-1], None), (None, first.keys)):
        with pytest.raises(tdock.errors.FailedPrecondition, match=forgot):
            dock.put(first.step, rows, responses(first.rows), keys=keys)
    with pytest.raises(tdock.errors.InvalidArgument,
                       match="ack takes a Batch, a list of them or False, got bool"):
        dock.put(first.step, first.rows, responses(first.rows), ack=True)

    async def refused_by_asyncio():
        async with tdock.aio.Client(server) as aclient:
            adock = aclient.dock(dock_name)
            held = await adock.get("rollout")
            with pytest.raises(tdock.errors.FailedPrecondition,
                               match=f"lease {held.lease} of consumer 'rollout'"):
                await adock.put(held.step, held.rows, responses(held.rows))
            await adock.put(held.step, held.rows, responses(held.rows), ack=held)
    asyncio.run(refused_by_asyncio())
    status = dock.status()
    assert status.steps[0].ready["response_ids"] == 4  # only the asyncio Put with ack=
    assert status.leases["rollout"].in_flight == 1
    dock.put(first.step, first.rows[:2], responses(first.rows[:2]))  # some rows: no refusal
    dock.put(first.step, first.rows[2:], responses(first.rows[2:]), ack=first)
    assert dock.status().leases["rollout"].in_flight == 0


def test_put_with_ack_false_leaves_acknowledging_to_the_caller(client, dock_name):
    """ack=False writes every row of a leased batch without acknowledging:
    the lease stays in flight until the caller's dock.ack, after which
    nothing is in flight and the trainer takes the rows."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=600_000, rows=4))
    put_prompts(dock, 4)
    batch = dock.get("rollout")
    assert dock.put(batch.step, batch.rows, responses(batch.rows), ack=False).rows == 4
    assert dock.status().leases["rollout"].in_flight == 1
    assert dock.ack(batch) == 4
    assert dock.status().leases["rollout"].in_flight == 0
    assert sorted(dock.get("trainer", wait=10).rows.tolist()) == [0, 1, 2, 3]


def test_results_put_in_parts_without_ack_are_refused_at_the_last_part(server, client,
                                                                       dock_name):
    """A leased batch's results written in several Puts, none with ack=, is
    the same forgotten acknowledgement as one Put of them: the Put that
    would leave every row of the lease written is refused with
    FailedPrecondition naming the lease, its rows, the rows earlier Puts
    wrote, ack=batch and ack=False, and writes nothing, while the earlier
    parts went in. Parts by index and by key count together, as do parts
    written with ack=False, and a Put that failed counts for nothing. The
    last part with ack=batch completes the lease, and parts all written
    with ack=False and then dock.ack leave nothing in flight. The asyncio
    client refuses alike."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=600_000))
    dock.put(0, range(8), {"prompt_ids": [np.array([r], np.int32) for r in range(8)]},
             keys=[f"u{r}" for r in range(8)])
    first = dock.get("rollout")
    rows, keys = first.rows.tolist(), first.keys
    last_part = (f"step 0: this Put writes the last unwritten rows of lease {first.lease} "
                 f"of consumer 'rollout' \\(rows {', '.join(map(str, rows))}; earlier Puts "
                 f"without its ack= wrote rows {rows[0]}, {rows[1]}, {rows[2]}\\).*"
                 "Pass ack=batch.*or ack=False.*nothing was written")
    with pytest.raises(tdock.errors.InvalidArgument, match="row 99"):  # this part fails
        dock.put(0, [rows[2], 99], responses([0, 0]))
    dock.put(0, rows[:1], responses(rows[:1]))
    dock.put(0, None, responses([1]), keys=[keys[1]])  # by key
    dock.put(0, rows[2:3], responses(rows[2:3]), ack=False)
    for part, by_key in ((rows[3:], None), (None, keys[3:])):
        with pytest.raises(tdock.errors.FailedPrecondition, match=last_part):
            dock.put(0, part, responses([0]), keys=by_key)
    assert dock.status().steps[0].ready["response_ids"] == 3  # the parts before the last
    dock.put(0, rows[3:], responses(rows[3:]), ack=first)
    assert dock.status().leases["rollout"].in_flight == 0

    second = dock.get("rollout")
    for r in second.rows.tolist():
        dock.put(0, [r], responses([r]), ack=False)
    assert dock.ack(second) == 4
    assert dock.status().leases["rollout"].in_flight == 0

    async def refused_by_asyncio():
        async with tdock.aio.Client(server) as aclient:
            adock = aclient.dock(dock_name)
            await adock.put(1, range(4), {"prompt_ids": [np.array([r], np.int32)
                                                         for r in range(4)]})
            held = await adock.get("rollout", step=1)
            await adock.put(1, held.rows[:2], responses(held.rows[:2]))
            with pytest.raises(tdock.errors.FailedPrecondition,
                               match=f"last unwritten rows of lease {held.lease} "):
                await adock.put(1, held.rows[2:], responses(held.rows[2:]))
            await adock.put(1, held.rows[2:], responses(held.rows[2:]), ack=held)
    asyncio.run(refused_by_asyncio())
    assert dock.status().leases["rollout"].in_flight == 0


def test_forgotten_ack_is_named_when_its_rows_come_back(server, client, dock_name):
    """A worker writes a leased batch's results with ack=False and never
    acknowledges: the lease stays in flight, expires, and its rows come back
    under a new lease whose cells are written already. The Put of the new
    batch (with ack= or without) fails with AlreadyExists naming the
    forgotten lease, the consumer, the step and the ack= argument, and writes
    nothing; from another Client, which never saw the first lease, the
    message still says that an earlier Put without ack= is the likely cause
    and how to avoid it. The asyncio client says the same. A Put that passes
    ack= and a separate dock.ack leave nothing to name."""
    dock = client.create_dock(leased_spec(dock_name, lease_ms=2000))
    put_prompts(dock, 8)
    first = dock.get("rollout")
    dock.put(first.step, first.rows, responses(first.rows), ack=False)  # never acknowledged
    other = dock.get("rollout")
    dock.put(other.step, other.rows[:2], {"response_ids": [np.array([7], np.int32)] * 2})
    dock.ack(other)  # written in two Puts, then acknowledged: nothing forgotten
    back = dock.get("rollout", wait=10)  # the first lease expired
    assert back.rows.tolist() == first.rows.tolist() and back.lease != first.lease
    forgotten = (f"lease {first.lease} of consumer 'rollout' \\(step 0\\).*never "
                 f"acknowledged.*pass ack=batch")
    with pytest.raises(tdock.errors.FailedPrecondition,  # the expired first lease not named
                       match=f"every row of lease {back.lease} of consumer 'rollout' "
                             "\\(rows [0-9, ]*\\), handed out by this Dock"):
        dock.put(back.step, back.rows, {"response_ids": [np.array([1], np.int32)] * 4})
    for ack in (back, False):
        with pytest.raises(tdock.errors.AlreadyExists, match=forgotten) as e:
            respond(dock, back) if ack else dock.put(
                back.step, back.rows, {"response_ids": [np.array([1], np.int32)] * 4},
                ack=False)
        assert "already written" in str(e.value)  # the server's message stays
    with tdock.Client(server) as elsewhere:
        with pytest.raises(tdock.errors.AlreadyExists,
                           match=f"lease {back.lease}.*written without ack=.*pass ack=batch"):
            respond(elsewhere.dock(dock_name), back)

    async def main():
        async with tdock.aio.Client(server) as aclient:
            adock = aclient.dock(dock_name)
            await adock.nack(back)
            again = await adock.get("rollout", wait=10)
            with pytest.raises(tdock.errors.AlreadyExists,
                               match=f"lease {again.lease}.*written without ack="):
                await adock.put(again.step, again.rows, {
                    "response_ids": [np.array([1], np.int32)] * 4}, ack=again)
            await adock.ack(again)
    asyncio.run(main())
    assert dock.status().steps[0].ready["response_ids"] == 6  # the failed Puts wrote nothing
