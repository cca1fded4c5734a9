"""Roles at run time through the clients: an optional consumer (a role a run
may leave out) holds no step until its first Get; a removed consumer holds
none and its calls fail naming the removal, from Python (blocking and
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
