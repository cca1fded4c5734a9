"""Put and Get through the Python client against a real server: the bytes
written come back unchanged, in every input form a worker may hold."""

import threading
import time

import numpy as np
import pytest

import tdock
from conftest import grpo_spec


def _responses(rng, rows, longest=300):
    return [rng.integers(0, 50_000, rng.integers(1, longest)).astype(np.int32)
            for _ in range(rows)]


def test_variable_length_rows_round_trip(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=4, n=2))
    rng = np.random.default_rng(1)
    prompts = _responses(rng, 8, 40)
    responses = _responses(rng, 8)
    ack = dock.put(0, range(8), {"prompt_ids": prompts, "response_ids": responses})
    assert ack.rows == 8
    assert ack.bytes == sum(a.nbytes for a in prompts + responses)

    batch = dock.get("reward", step=0, count=8, wait=5)
    assert sorted(batch.rows.tolist()) == list(range(8))
    assert batch.end_of_step
    for i, row in enumerate(batch.rows):
        np.testing.assert_array_equal(batch.row("response_ids", i), responses[row])
        np.testing.assert_array_equal(batch.row("prompt_ids", i), prompts[row])
        assert batch.token_counts[i] == len(prompts[row]) + len(responses[row])


def test_packed_is_a_read_only_view_with_cu_seqlens(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
    rows = [np.arange(k, dtype=np.int32) for k in (3, 1, 4, 2)]
    dock.put(0, range(4), {"prompt_ids": rows, "response_ids": rows})
    batch = dock.get("reward", step=0, count=4, wait=5)
    values, cu = batch.packed("response_ids")
    assert cu.dtype == np.int64 and cu[0] == 0
    assert cu.tolist() == np.concatenate([[0], np.cumsum(
        [len(rows[r]) for r in batch.rows])]).tolist()
    np.testing.assert_array_equal(
        values, np.concatenate([rows[r] for r in batch.rows]))
    # A view of the received message, not a copy.
    assert not values.flags.owndata and not values.flags.writeable
    np.testing.assert_array_equal(batch.lengths("response_ids"), np.diff(cu))


def test_padded_input_with_lengths_and_full_width(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
    padded = np.arange(4 * 6, dtype=np.int32).reshape(4, 6)
    lengths = np.array([6, 0, 2, 5])
    full = np.ones((4, 3), dtype=np.int32)
    dock.put(0, [0, 1, 2, 3], {"response_ids": tdock.Padded(padded, lengths),
                               "prompt_ids": full})
    batch = dock.read(0, [3, 2, 1, 0], ["response_ids", "prompt_ids"])
    assert batch.rows.tolist() == [3, 2, 1, 0]
    for i, row in enumerate(batch.rows):
        np.testing.assert_array_equal(batch.row("response_ids", i),
                                      padded[row, :lengths[row]])
        np.testing.assert_array_equal(batch.row("prompt_ids", i), full[row])


def test_one_item_per_row_and_python_lists(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=2, n=2))
    dock.put(0, range(4), {"rewards": np.array([0.5, -1, 2, 0], np.float32),
                           "prompt_ids": [[1, 2], [3], [4, 5, 6], []]})
    batch = dock.read(0, range(4), ["rewards", "prompt_ids"])
    values, cu = batch.packed("rewards")
    assert values.tolist() == [0.5, -1, 2, 0] and cu.tolist() == [0, 1, 2, 3, 4]
    assert batch.row("prompt_ids", 2).tolist() == [4, 5, 6]
    assert batch.lengths("prompt_ids").tolist() == [2, 1, 3, 0]


def test_bfloat16_bool_and_inner_shape_columns(client, dock_name):
    columns = {"prompt_ids": {"dtype": "int32"},
               "response_ids": {"dtype": "int32"},
               "logits": {"dtype": "bfloat16"},
               "mask": {"dtype": "bool"},
               "xyz": {"dtype": "float64", "inner_shape": [3]}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2, columns=columns))
    halves = [np.array([1.0, -2.5, 3.140625], np.float32), np.array([0.0], np.float32)]
    points = [np.arange(6, dtype=np.float64).reshape(2, 3), np.zeros((0, 3))]
    dock.put(0, [0, 1], {"logits": halves, "mask": [[True, False], [True]],
                         "xyz": points})
    batch = dock.read(0, [0, 1], ["logits", "mask", "xyz"])
    bits = batch.row("logits", 0)
    assert bits.dtype == np.uint16  # bfloat16 bit patterns
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back, halves[0])  # exactly representable
    assert batch.row("mask", 0).tolist() == [True, False]
    assert batch.packed("xyz")[0].shape == (2, 3)
    np.testing.assert_array_equal(batch.row("xyz", 0), points[0])
    assert batch.row("xyz", 1).shape == (0, 3)


def test_threads_sharing_a_client_get_every_row_once(client, dock_name):
    """Four threads drain one step through one Client: every row exactly once."""
    consumers = {"reward": {"columns": ["response_ids"], "dispatch_size": 4}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=32, n=4,
                                        consumers=consumers))
    rng = np.random.default_rng(2)
    dock.put(0, range(128), {"response_ids": _responses(rng, 128, 50)})
    seen, lock = [], threading.Lock()

    def drain():
        while True:
            b = dock.get("reward", step=0, wait=0)
            with lock:
                seen.extend(b.rows.tolist())
            if b.end_of_step or (b.timed_out and not len(b)):
                return

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(128))


def test_iter_drains_one_step_in_whole_groups(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=5, n=2))
    rng = np.random.default_rng(3)
    dock.put(0, range(10), {"prompt_ids": _responses(rng, 10, 5),
                                "response_ids": _responses(rng, 10)})
    batches = list(dock.iter("reward", wait=5))
    rows = [r for b in batches for r in b.rows.tolist()]
    assert sorted(rows) == list(range(10))
    assert batches[-1].end_of_step and not any(b.end_of_step for b in batches[:-1])
    for b in batches:  # whole prompt groups: rows 2g and 2g+1 together
        assert sorted(b.rows.tolist()) == sorted({r - r % 2 for r in b.rows} |
                                                 {r - r % 2 + 1 for r in b.rows})


def test_get_times_out_empty_and_iter_raises(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name))
    batch = dock.get("reward", step=0, wait=0.2)
    assert batch.timed_out and len(batch) == 0
    with pytest.raises(tdock.errors.WaitTimeout, match="consumer 'reward'"):
        next(dock.iter("reward", step=0, wait=0.2))


def test_sample_returns_rows_without_columns(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2))
    dock.put(0, [0, 1], {"prompt_ids": [[1], [2, 3]], "response_ids": [[4], []]})
    batch = dock.sample("reward", step=0, wait=5)
    assert sorted(batch.rows.tolist()) == [0, 1] and batch.columns == []
    assert sorted(batch.token_counts.tolist()) == [2, 2]


def test_status_release_and_list(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2))
    dock.put(0, [0, 1], {"prompt_ids": [[1], [2]]})
    status = dock.status()
    assert [s.step for s in status.steps] == [0]
    assert status.steps[0].ready["prompt_ids"] == 2
    assert status.steps[0].ready["response_ids"] == 0
    assert status.steps[0].consumed == {"reward": 0}
    assert dock_name in [d.name for d in client.list_docks()]
    dock.release(0)
    assert dock.status().steps == []
    client.delete_dock(dock_name)
    assert dock_name not in [d.name for d in client.list_docks()]


def test_add_consumer_sees_live_rows(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2))
    dock.put(0, [0, 1], {"prompt_ids": [[1], [2]], "response_ids": [[3], [4]]})
    added = dock.add_consumer("critic", {"columns": ["response_ids"],
                                         "dispatch_size": 2})
    assert added.dispatch_size == 2
    batch = dock.get("critic", step=0, wait=5)
    assert sorted(batch.rows.tolist()) == [0, 1]
    assert "critic" in [c.name for c in dock.spec.consumers]


def test_iter_without_a_wait_bound_keeps_waiting(client, dock_name, monkeypatch):
    """wait=None: Gets that time out are retried until rows come."""
    monkeypatch.setattr("tdock._calls._POLL_SLICE", 0.1)
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2))

    def late_put():
        time.sleep(0.5)  # several poll slices
        dock.put(0, [0, 1], {"prompt_ids": [[1], [2]], "response_ids": [[3], [4]]})

    writer = threading.Thread(target=late_put)
    writer.start()
    rows = [r for b in dock.iter("reward", step=0, wait=None) for r in b.rows]
    writer.join()
    assert sorted(rows) == [0, 1]
