"""Typed refusals: a call the dock refuses for a reason a caller acts on
raises the class of that reason (read from the gRPC status details, never
from the message), a subclass of its status code's class, with ``reason``
and, for a dropped row, ``drop_reason`` set; the blocking and asyncio clients
alike. A refusal changes nothing."""

import asyncio

import grpc
import pytest

import tdock
from conftest import grpo_spec


def _leasing_spec(name):
    return grpo_spec(name, prompts=2, n=2, consumers={
        "reward": {"columns": ["prompt_ids"], "dispatch_size": 2, "lease_ms": 60000},
    })


def test_each_refusal_raises_the_class_of_its_reason(client, dock_name):
    dock = client.create_dock(_leasing_spec(dock_name))
    prompt = {"prompt_ids": [[1], [2]]}
    dock.put(0, [0, 1], prompt)

    # A dropped row: RowDropped, with the drop's reason.
    dock.drop(0, [2], reason="filtered")
    with pytest.raises(tdock.errors.RowDropped) as dropped:
        dock.put(0, [2], {"prompt_ids": [[3]]})
    assert isinstance(dropped.value, tdock.errors.FailedPrecondition)
    assert dropped.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert dropped.value.reason == "dropped"
    assert dropped.value.drop_reason == "filtered"
    assert "row 2 was dropped (filtered)" in dropped.value.message

    # A sealed step: the row left out is refused as sealed; so is an append.
    dock.seal(0)
    with pytest.raises(tdock.errors.StepSealed) as sealed:
        dock.put(0, [3], {"prompt_ids": [[4]]})
    assert (sealed.value.reason, sealed.value.drop_reason) == ("sealed", "sealed")
    with pytest.raises(tdock.errors.StepSealed) as append:
        dock.put(0, None, {"prompt_ids": [[5]]}, new_rows=1)
    assert (append.value.reason, append.value.drop_reason) == ("sealed", None)

    # A lease acknowledged once: the second Ack finds it ended. (The step is
    # done then, and released.)
    batch = dock.get("reward", step=0, wait=5)
    assert dock.ack(batch) == 2
    with pytest.raises(tdock.errors.LeaseEnded) as ended:
        dock.ack(batch)
    assert ended.value.reason == "lease_ended"

    # A step released: a Put, Read, release, Drop or Seal of it is refused as
    # released.
    for call in (lambda: dock.put(0, [0], {"prompt_ids": [[1]]}),
                 lambda: dock.read(0, [0]), lambda: dock.release(0),
                 lambda: dock.drop(0, [0]), lambda: dock.seal(0)):
        with pytest.raises(tdock.errors.StepReleased) as released:
            call()
        assert released.value.reason == "released"

    # A full step: an append with no room left is refused as capacity.
    dock.put(1, None, {"prompt_ids": [[1]] * 4}, new_rows=4)
    with pytest.raises(tdock.errors.CapacityExceeded) as full:
        dock.put(1, None, {"prompt_ids": [[1]] * 2}, new_rows=2)
    assert isinstance(full.value, tdock.errors.ResourceExhausted)
    assert full.value.reason == "capacity"
    assert full.value.free_groups == 0  # the groups the step has left for new rows

    # None of the refusals wrote anything.
    steps = {s.step: s for s in dock.status().steps}
    assert list(steps) == [1] and steps[1].ready["prompt_ids"] == 4


def test_errors_without_a_refusal_carry_no_reason(client, dock_name):
    with pytest.raises(tdock.errors.NotFound) as missing:
        client.dock(f"no_such_{dock_name}").status()
    assert type(missing.value) is tdock.errors.NotFound
    assert missing.value.reason is None and missing.value.drop_reason is None


def test_the_asyncio_client_raises_the_same_classes(server, dock_name):
    async def main():
        async with tdock.aio.Client(server) as client:
            dock = await client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
            await dock.put(0, [0, 1], {"prompt_ids": [[1], [2]]})
            await dock.drop(0, [3], reason="failed")
            with pytest.raises(tdock.errors.RowDropped) as dropped:
                await dock.put(0, [3], {"prompt_ids": [[1]]})
            assert dropped.value.drop_reason == "failed"
            await dock.seal(0)
            with pytest.raises(tdock.errors.StepSealed):
                await dock.put(0, [2], {"prompt_ids": [[1]]})
    asyncio.run(main())
