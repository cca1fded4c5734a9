"""Roles and columns at run time through the clients: an optional consumer (a
role a run may leave out) holds no step until its first Get; a removed
consumer holds none and its calls fail naming the removal; a column added to
a live dock is written and read in live steps, from Python (blocking and
asyncio) and tdockctl alike."""

import asyncio

import numpy as np
import pytest

import tdock
from conftest import grpo_spec
from test_cross_client import tdockctl


def fill(dock, step):
    cells = [np.arange(3, dtype=np.int32) + r for r in range(8)]
    dock.put(step, range(8), {"prompt_ids": cells, "response_ids": cells})


def spec_with_ref(name, *, optional):
    return grpo_spec(name, consumers={
        "actor": {"columns": ["prompt_ids", "response_ids"], "dispatch_size": 8},
        "ref": {"columns": ["prompt_ids", "response_ids"], "dispatch_size": 8,
                "optional": optional},
    })


def live_steps(dock):
    return [s.step for s in dock.status().steps]


def consumer(dock, name):
    return next(c for c in dock.status().spec.consumers if c.name == name and not c.removed)


def test_optional_consumer_holds_steps_from_its_first_get(client, dock_name):
    """No reference model in this run: step 0 is released once the actor is
    done. When the reference role does come, it holds every later step."""
    dock = client.create_dock(spec_with_ref(dock_name, optional=True))
    fill(dock, 0)
    assert dock.get("actor").end_of_step
    assert live_steps(dock) == []
    assert not consumer(dock, "ref").joined
    assert dock.get("ref", wait=0).rows.size == 0
    assert consumer(dock, "ref").joined
    fill(dock, 1)
    dock.get("actor")
    assert live_steps(dock) == [1]
    assert dock.get("ref", step=1).rows.tolist() == list(range(8))
    assert live_steps(dock) == []


def test_remove_consumer_releases_what_it_held(client, dock_name, server):
    dock = client.create_dock(spec_with_ref(dock_name, optional=False))
    fill(dock, 0)
    dock.get("actor")
    assert live_steps(dock) == [0]
    removed = dock.remove_consumer("ref")
    assert removed.removed and removed.name == "ref"
    assert live_steps(dock) == []
    assert list(dock.status().waiters) == ["actor"]
    with pytest.raises(tdock.errors.NotFound, match="consumer 'ref' was removed"):
        dock.get("ref")
    with pytest.raises(tdock.errors.NotFound, match="consumer 'ref' was removed"):
        dock.remove_consumer("ref")
    # The name is free again; tdockctl removes the new one.
    dock.add_consumer("ref", {"columns": ["prompt_ids"], "dispatch_size": 8})
    out = tdockctl(server, "remove-consumer", dock_name, "ref")
    assert out == {"dock": dock_name, "consumer": "ref", "removed": True}
    spec = tdockctl(server, "status", dock_name)["spec"]
    assert list(spec["consumers"]) == ["actor"]


def test_bad_role_changes_are_refused(client, dock_name):
    spec = spec_with_ref(dock_name, optional=False)
    spec["consumers"]["ref"]["joined"] = True
    with pytest.raises(tdock.errors.InvalidArgument, match="unknown key 'joined'"):
        client.create_dock(spec)
    dock = client.create_dock(spec_with_ref(dock_name, optional=False))
    with pytest.raises(tdock.errors.NotFound, match="consumer 'critic' is unknown"):
        dock.remove_consumer("critic")


def test_asyncio_remove_consumer_ends_a_parked_get(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as client:
            dock = await client.create_dock(spec_with_ref(dock_name, optional=False))
            parked = asyncio.ensure_future(dock.get("ref", wait=30))
            await asyncio.sleep(0.2)
            assert not parked.done()
            assert (await dock.remove_consumer("ref")).removed
            with pytest.raises(tdock.errors.NotFound, match="was removed"):
                await parked
    asyncio.run(main())


def test_add_column_to_a_live_dock(client, dock_name, server):
    """Teacher log-probs arrive mid-run: the column is added, written into the
    live step, and a distillation consumer added afterwards reads it. Another
    client's cached spec learns the column on its first Put of it."""
    dock = client.create_dock(spec_with_ref(dock_name, optional=False))
    fill(dock, 0)
    with tdock.Client(server, timeout=30) as other_client:
        other = other_client.dock(dock_name)
        other.spec  # cached before the columns exist
        _add_and_use_columns(dock, other, dock_name, server)


def _add_and_use_columns(dock, other, dock_name, server):
    added = dock.add_column("teacher_logprobs", {"dtype": "float32"})
    assert added.name == "teacher_logprobs"
    logprobs = [np.full(3, -0.5 * r, dtype=np.float32) for r in range(8)]
    other.put(0, range(8), {"teacher_logprobs": logprobs})
    dock.add_consumer("distill", {"columns": ["response_ids", "teacher_logprobs"],
                                  "dispatch_size": 8})
    batch = dock.get("distill")
    assert batch.rows.tolist() == list(range(8))
    np.testing.assert_array_equal(batch.row("teacher_logprobs", 5), logprobs[5])
    with pytest.raises(tdock.errors.AlreadyExists, match="column 'teacher_logprobs' already"):
        dock.add_column("teacher_logprobs", {"dtype": "float32"})
    with pytest.raises(tdock.errors.InvalidArgument, match="missing key 'dtype'"):
        dock.add_column("extra", {})
    out = tdockctl(server, "add-column", dock_name, "tool_trace", "--dtype", "json")
    assert out == {"dock": dock_name, "column": "tool_trace", "added": True}
    dock.put(0, [0], {"tool_trace": [{"calls": 2}]})
    # `other` learns the json column from the answer that carries it.
    assert other.read(0, [0], columns=["tool_trace"]).cell("tool_trace", 0) == {"calls": 2}


def test_asyncio_add_column(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as client:
            dock = await client.create_dock(spec_with_ref(dock_name, optional=False))
            await dock.add_column("score", {"dtype": "float32", "max_len": 1})
            await dock.put(0, [3], {"score": [np.array([0.25], dtype=np.float32)]})
            batch = await dock.read(0, [3], columns=["score"])
            assert batch.row("score", 0).tolist() == [0.25]
    asyncio.run(main())
