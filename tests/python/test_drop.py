"""Drops and seals through the Python clients: dropped rows never reach a
consumer and do not hold their group or step, a sealed step ends once its
rows left are handed out, status counts drops by reason, iteration ends at
the sealed step's end, and bad input is refused naming what is wrong."""

import asyncio

import numpy as np
import pytest

import tdock
from conftest import SHARDED, grpo_spec


def cells(rows, length=3):
    return [np.arange(length, dtype=np.int32) + 10 * r for r in rows]


def test_drop_and_seal_shape_what_consumers_get(client, dock_name):
    """4 prompts x 2: group 1 is filtered out, row 6's rollout failed and
    row 7 never got a response, so the seal drops it: group 3 is gone whole.
    The whole-group reward consumer iterates groups 0 and 2, then the step
    ends (and is released)."""
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, range(8), {"prompt_ids": cells(range(8))})
    dock.put(0, range(7), {"response_ids": cells(range(7), 4)})
    assert dock.drop(0, groups=[1], reason="filtered") == 2
    assert dock.drop(0, rows=[6], reason="failed") == 1
    assert dock.drop(0, rows=[6], reason="failed") == 0  # again: nothing more
    assert dock.seal(0, required_columns=["response_ids"]) == 1
    status = dock.status()
    assert status.steps[0].sealed
    assert status.steps[0].dropped == {"filtered": 2, "failed": 1, "sealed": 1}
    got = [b.rows.tolist() for b in dock.iter("reward", step=0)]
    assert got == [[0, 1], [4, 5]]
    status = dock.status()
    assert status.steps == []  # done and released
    assert status.dropped == {"filtered": 2, "failed": 1, "sealed": 1}


def test_put_and_read_of_a_dropped_row_name_the_drop(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, range(2), {"prompt_ids": cells(range(2))})
    dock.drop(0, rows=[1, 5], reason="stale")
    with pytest.raises(tdock.errors.FailedPrecondition, match=r"row 5 was dropped \(stale\)"):
        dock.put(0, [4, 5], {"prompt_ids": cells([4, 5])})
    with pytest.raises(tdock.errors.FailedPrecondition, match=r"row 1 was dropped \(stale\)"):
        dock.read(0, [1])
    assert dock.status().steps[0].ready["prompt_ids"] == 2  # row 4 was not written


def test_bad_drops_and_seals_change_nothing(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, range(2), {"prompt_ids": cells(range(2))})
    with pytest.raises(tdock.errors.InvalidArgument, match="drop reason 'oops' is not one of"):
        dock.drop(0, rows=[0], reason="oops")
    with pytest.raises(tdock.errors.InvalidArgument, match="rows must be a list of integers"):
        dock.drop(0, rows=[0.5], reason="failed")
    with pytest.raises(tdock.errors.InvalidArgument, match="names no rows or groups"):
        dock.drop(0, reason="failed")
    with pytest.raises(tdock.errors.InvalidArgument, match=r"row 8 is out of range \[0, 8\)"):
        dock.drop(0, rows=[8])
    with pytest.raises(tdock.errors.FailedPrecondition, match="step 1 has not started"):
        dock.drop(1, rows=[0])
    with pytest.raises(tdock.errors.InvalidArgument, match="required column 'reward' is unknown"):
        dock.seal(0, ["reward"])
    status = dock.status()
    assert status.dropped == {} and not status.steps[0].sealed
    dock.release(0)
    with pytest.raises(tdock.errors.FailedPrecondition, match="step 0 is released"):
        dock.seal(0)
    assert tdock.DROP_REASONS[:2] == ("filtered", "failed")


def test_drop_takes_any_iterable_and_only_an_integer_step(server, client, dock_name):
    """drop() takes its rows and groups as any iterable of integers: an
    empty set or generator (a filter that kept nothing) drops nothing and
    returns 0, and a set of rows drops them. A step that is not an integer
    (1.5, "0", None, True) is refused by drop() and seal() in both clients,
    naming the step and its type, where int() would have turned 1.5 into
    step 1 and dropped or sealed it; nothing changes."""
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, range(4), {"prompt_ids": cells(range(4))})
    dock.put(1, range(2), {"prompt_ids": cells(range(2))})
    failed = []
    assert dock.drop(0, rows=set()) == 0
    assert dock.drop(0, rows=(r for r in failed), groups=iter(failed)) == 0
    for step in (1.5, "1", None, True):
        shown = f"{step!r} \\({type(step).__name__}\\)"
        with pytest.raises(tdock.errors.InvalidArgument,
                           match=f"drop: step must be an integer, got {shown}"):
            dock.drop(step, rows=[0])
        with pytest.raises(tdock.errors.InvalidArgument,
                           match=f"seal: step must be an integer, got {shown}"):
            dock.seal(step)
    with pytest.raises(tdock.errors.InvalidArgument,
                       match=r"drop: rows must be a list of integers, got \[0, 'a'\]"):
        dock.drop(0, rows=(r for r in (0, "a")))
    status = dock.status()
    assert status.dropped == {} and not any(s.sealed for s in status.steps)
    assert dock.drop(np.int64(0), rows={2, 3}) == 2

    async def main():
        async with tdock.aio.Client(server, timeout=30) as aclient:
            adock = aclient.dock(dock_name)
            assert await adock.drop(1, rows=set(), groups=(g for g in failed)) == 0
            with pytest.raises(tdock.errors.InvalidArgument, match="drop: step must be"):
                await adock.drop(1.5, rows=[0])
            with pytest.raises(tdock.errors.InvalidArgument, match="seal: step must be"):
                await adock.seal(1.5)
    asyncio.run(main())
    status = dock.status()
    assert status.dropped == {"failed": 2} and not any(s.sealed for s in status.steps)


def test_dropping_no_rows_drops_nothing(server, client, dock_name):
    """drop() with rows=[] (or an empty array, or groups=[]) returns 0 and
    changes nothing, in both clients; what is known without the server is
    not asked of it, so a step that has not started is no error either. A
    bad reason, a negative step or bad rows are still refused, naming what
    is wrong, and naming neither rows nor groups is still the server's
    error."""
    dock = client.create_dock(grpo_spec(dock_name))
    dock.put(0, range(2), {"prompt_ids": cells(range(2))})
    assert dock.drop(0, rows=[]) == 0
    assert dock.drop(0, rows=np.zeros(0, np.int64), groups=[], reason="filtered") == 0
    assert dock.drop(0, groups=[]) == 0
    assert dock.drop(5, rows=[]) == 0  # step 5 has not started: nothing asked
    with pytest.raises(tdock.errors.InvalidArgument, match="drop reason 'oops' is not one of"):
        dock.drop(0, rows=[], reason="oops")
    with pytest.raises(tdock.errors.InvalidArgument, match="rows must be a list of integers"):
        dock.drop(0, rows=[[]])
    with pytest.raises(tdock.errors.InvalidArgument, match="names no rows or groups"):
        dock.drop(0)
    with pytest.raises(tdock.errors.InvalidArgument, match="drop: step -1 is negative"):
        dock.drop(-1, rows=[])
    status = dock.status()
    assert status.dropped == {} and status.steps[0].dropped == {}

    async def main():
        async with tdock.aio.Client(server, timeout=30) as aclient:
            adock = aclient.dock(dock_name)
            assert await adock.drop(0, rows=[]) == 0
            assert await adock.drop(0, groups=[], reason="stale") == 0
            with pytest.raises(tdock.errors.InvalidArgument, match="step -1 is negative"):
                await adock.drop(-1, groups=[])
    asyncio.run(main())
    assert dock.status().dropped == {}


def test_asyncio_drop_and_seal(server, dock_name):
    async def main():
        async with tdock.aio.Client(server, timeout=30) as client:
            dock = await client.create_dock(grpo_spec(dock_name))
            await dock.put(0, range(4), {"prompt_ids": cells(range(4)),
                                         "response_ids": cells(range(4))})
            # A Get parked for the step's remainder is served by the seal.
            parked = asyncio.ensure_future(dock.get("reward", step=0, count=8, wait=30))
            await asyncio.sleep(0.2)
            assert not parked.done()
            assert await dock.drop(0, groups=[0], reason="failed") == 2
            assert await dock.seal(0) == 4
            batch = await parked
            assert batch.rows.tolist() == [2, 3] and batch.end_of_step
            status = await dock.status()
            assert status.dropped == {"failed": 2, "sealed": 4}
    asyncio.run(main())


def test_seal_when_keeps_the_first_complete_groups(client, dock_name):
    """seal_when: the trainer needs advantages, written only for groups that
    passed the filter; the second such group seals the step and the other
    groups drop as surplus."""
    spec = grpo_spec(dock_name, prompts=4, columns={
        "prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
        "advantages": {"dtype": "float32"}}, consumers={
        "trainer": {"columns": ["response_ids", "advantages"], "whole_groups": True,
                    "dispatch_size": 4}})
    spec["seal_when"] = {"consumer": "trainer", "groups": 2}
    dock = client.create_dock(spec)
    assert dock.spec.seal_when.groups == 2
    dock.put(0, range(8), {"prompt_ids": cells(range(8)), "response_ids": cells(range(8))})
    adv = {"advantages": [np.ones(3, np.float32)] * 2}
    dock.put(0, [6, 7], adv)
    assert not dock.status().steps[0].sealed
    dock.put(0, [2, 3], adv)
    status = dock.status()
    assert status.steps[0].sealed and status.steps[0].dropped == {"surplus": 4}
    got = [b.rows.tolist() for b in dock.iter("trainer", step=0)]
    assert got == [[2, 3, 6, 7]]
    with pytest.raises(tdock.errors.InvalidArgument, match="seal_when.groups 9 must be in"):
        client.create_dock({**spec, "name": dock_name + "x",
                            "seal_when": {"consumer": "trainer", "groups": 9}})


@pytest.mark.skipif(SHARDED, reason="a controller's docks hold cell locations, and "
                    "seal_when.carry needs the cells (test_scale_out.py checks the refusal)")
def test_seal_when_carry_moves_complete_surplus_groups_on(client, dock_name):
    """seal_when with carry: three groups are complete at once for a target
    of two; the third is carried into step 1 (with its keys and versions)
    instead of dropped, and counts there; the reward consumer, which scored
    it in step 0, does not get it again."""
    spec = grpo_spec(dock_name, prompts=4, columns={
        "prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
        "advantages": {"dtype": "float32"}}, consumers={
        "reward": {"columns": ["prompt_ids", "response_ids"], "dispatch_size": 8},
        "trainer": {"columns": ["response_ids", "advantages"], "whole_groups": True,
                    "dispatch_size": 4}})
    spec["seal_when"] = {"consumer": "trainer", "groups": 2, "carry": True}
    dock = client.create_dock(spec)
    assert dock.spec.seal_when.carry
    dock.set_version(1)
    keys = [f"uid{r}" for r in range(8)]
    dock.put(0, None, {"prompt_ids": cells(range(8)), "response_ids": cells(range(8))},
             keys=keys, versions=1)
    assert dock.get("reward").rows.tolist() == list(range(8))
    dock.put(0, [0, 1, 2, 3, 4, 5], {"advantages": [np.ones(3, np.float32)] * 6})
    status = dock.status()
    assert status.steps[0].sealed
    assert status.steps[0].dropped == {"surplus": 2, "carried": 2}
    assert [s.step for s in status.steps] == [0, 1]
    carried = [r for r in dock.list_rows(1) if r.written]
    assert [(r.row, r.key) for r in carried] == [(0, "uid4"), (1, "uid5")]
    with pytest.raises(tdock.errors.RowDropped) as e:
        dock.read(0, [4], ["prompt_ids"])
    assert e.value.drop_reason == "carried"
    assert dock.get("reward", step=1, wait=0).rows.tolist() == []
    got = [b.rows.tolist() for b in dock.iter("trainer", step=0)]
    assert got == [[0, 1, 2, 3]]
    batch = dock.get("trainer", step=1, count=2)
    assert batch.rows.tolist() == [0, 1] and list(batch.keys) == ["uid4", "uid5"]
    assert batch.versions.tolist() == [1, 1]
    assert [s.step for s in dock.status().steps] == [1]  # step 0 went once its carry was in
    with pytest.raises(tdock.errors.InvalidArgument, match="carry needs steps_in_flight >= 2"):
        client.create_dock({**spec, "name": dock_name + "x", "steps_in_flight": 1})
