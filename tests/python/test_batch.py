"""Batch accessors over real Gets: padding and masks, micro-batch views
under the consumer's token budget, balanced ranks, torch tensors."""

import numpy as np
import pytest

import tdock

from conftest import grpo_spec

LENGTHS = [7, 6, 8, 5, 1, 3, 8, 6, 30, 2, 17, 4, 9, 11, 3, 12]


def _fill(dock, lengths, step=0):
    rows = [np.full(n, i, dtype=np.int32) for i, n in enumerate(lengths)]
    dock.put(step, range(len(lengths)), {"response_ids": rows,
                                         "prompt_ids": [[]] * len(lengths)})
    return rows


def test_padded_rounds_width_and_masks_real_items(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=8, n=2))
    rows = _fill(dock, LENGTHS)
    batch = dock.get("reward", step=0, count=16, wait=5)
    array, mask = batch.padded("response_ids", pad_value=-1, multiple_of=8)
    assert array.shape == (16, 32) and mask.shape == (16, 32)
    for i, row in enumerate(batch.rows):
        n = LENGTHS[row]
        np.testing.assert_array_equal(array[i, :n], rows[row])
        assert (array[i, n:] == -1).all()
        assert mask[i].sum() == n and mask[i, :n].all()


def test_micro_batches_are_views_within_the_token_budget(client, dock_name):
    consumers = {"actor": {"columns": ["response_ids"], "dispatch_size": 16,
                           "micro_batch": {"max_tokens": 40}}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=8, n=2,
                                        consumers=consumers,
                                        length_columns=["response_ids"]))
    rows = _fill(dock, LENGTHS)
    batch = dock.get("actor", step=0, wait=5)
    mbs = batch.micro_batches
    assert len(mbs) == len(batch.micro_batch_info) >= 4  # 136 tokens / 40
    assert sum(len(mb) for mb in mbs) == len(batch)
    assert np.concatenate([mb.rows for mb in mbs]).tolist() == batch.rows.tolist()
    for mb, info in zip(mbs, batch.micro_batch_info):
        values, cu = mb.packed("response_ids")
        assert cu[0] == 0 and cu[-1] == len(values) == info.tokens <= 40
        for i, row in enumerate(mb.rows):
            np.testing.assert_array_equal(mb.row("response_ids", i), rows[row])
        # The same memory as the whole batch's column.
        assert np.shares_memory(values, batch.packed("response_ids")[0])
    assert batch.stats.tokens == sum(LENGTHS)


def test_balanced_ranks_carry_equal_tokens(client, dock_name):
    consumers = {"actor": {"columns": ["response_ids"], "dp_size": 2,
                           "dispatch_size": 8, "policy": "balanced"}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=8, n=2,
                                        consumers=consumers,
                                        length_columns=["response_ids"]))
    _fill(dock, LENGTHS)
    shares = [dock.get("actor", rank=r, step=0, wait=5) for r in (0, 1)]
    tokens = [int(b.token_counts.sum()) for b in shares]
    assert sum(tokens) == sum(LENGTHS) and abs(tokens[0] - tokens[1]) <= 1
    assert shares[0].round == shares[1].round == 0
    assert shares[0].stats.rank_imbalance == pytest.approx(max(tokens) / (sum(LENGTHS) / 2))
    assert sorted(np.concatenate([b.rows for b in shares]).tolist()) == list(range(16))


def test_balanced_ranks_take_the_same_number_of_rounds(client, dock_name):
    """5 rows in rounds of dispatch_size 2 over 2 ranks: rounds of 4 rows and
    of 1. Each rank's iter yields both rounds, the rank whose share of the
    short round is empty an empty batch, so ranks that run a collective per
    round stay in step; the rounds carry every row once."""
    consumers = {"actor": {"columns": ["response_ids"], "dp_size": 2,
                           "dispatch_size": 2, "policy": "balanced"}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=5, n=1,
                                        consumers=consumers,
                                        length_columns=["response_ids"]))
    _fill(dock, LENGTHS[:5])
    taken = {r: list(dock.iter("actor", rank=r, step=0, wait=5)) for r in (1, 0)}
    for r in (0, 1):
        assert [b.round for b in taken[r]] == [0, 1], r
        assert [b.end_of_step for b in taken[r]] == [False, True], r
        assert len(taken[r][0]) == 2
    assert sorted(len(taken[r][1]) for r in (0, 1)) == [0, 1]
    rows = np.concatenate([b.rows for r in (0, 1) for b in taken[r]])
    assert sorted(rows.tolist()) == list(range(5))
    empty = next(b for r in (0, 1) for b in taken[r] if len(b) == 0)
    assert empty.to_tensordict(["response_ids"]).batch_size[0] == 0


def test_pad_repeat_fills_a_short_share_with_a_marked_repeat(client, dock_name):
    """With pad: repeat, the short round's empty share holds a repeat of the
    round's row instead: both ranks take 2 rows, then 1; repeat_mask marks
    the repeat (for the loss to mask) and micro-batch slices keep the mark."""
    consumers = {"actor": {"columns": ["response_ids"], "dp_size": 2, "dispatch_size": 2,
                           "policy": "balanced", "pad": "repeat",
                           "micro_batch": {"max_tokens": 64}}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=5, n=1,
                                        consumers=consumers,
                                        length_columns=["response_ids"]))
    rows = _fill(dock, LENGTHS[:5])
    taken = {r: list(dock.iter("actor", rank=r, step=0, wait=5)) for r in (0, 1)}
    for r in (0, 1):
        assert [len(b) for b in taken[r]] == [2, 1], r
    masks = [b.repeat_mask for r in (0, 1) for b in taken[r]]
    assert sum(int(m.sum()) for m in masks) == 1
    repeat = next(b for r in (0, 1) for b in taken[r] if b.repeats is not None)
    assert repeat.repeat_mask.tolist() == [True]
    assert repeat.micro_batches[0].repeat_mask.tolist() == [True]
    np.testing.assert_array_equal(repeat.row("response_ids", 0), rows[repeat.rows[0]])
    real = [int(row) for r in (0, 1) for b in taken[r] for row in b.rows[~b.repeat_mask]]
    assert sorted(real) == list(range(5))


def test_pad_is_checked(client, dock_name):
    """pad takes none or repeat, and repeat only on a balanced consumer; the
    error names what was wrong and no dock is made."""
    bad = {"actor": {"columns": ["response_ids"], "pad": "zeros", "policy": "balanced"}}
    with pytest.raises(tdock.errors.InvalidArgument, match="pad"):
        client.create_dock(grpo_spec(dock_name, consumers=bad))
    fifo = {"actor": {"columns": ["response_ids"], "pad": "repeat"}}
    with pytest.raises(tdock.errors.InvalidArgument, match="pad repeat needs policy balanced"):
        client.create_dock(grpo_spec(dock_name, consumers=fifo))
    assert dock_name not in [d.name for d in client.list_docks()]


def test_to_torch_packed_and_padded(client, dock_name):
    torch = pytest.importorskip("torch")
    columns = {"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
               "logp": {"dtype": "bfloat16"}}
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2, columns=columns))
    logp = [torch.tensor([0.5, -1.0], dtype=torch.bfloat16),
            torch.tensor([2.0], dtype=torch.bfloat16)]
    dock.put(0, [0, 1], {"response_ids": [torch.tensor([1, 2], dtype=torch.int32),
                                          torch.tensor([3], dtype=torch.int32)],
                         "logp": logp})
    batch = dock.read(0, [0, 1], ["response_ids", "logp"])
    t = batch.to_torch()
    values, cu = t["logp"]
    assert values.dtype == torch.bfloat16 and cu.tolist() == [0, 2, 3]
    assert torch.equal(values, torch.cat(logp))
    values[0] = 7  # a CPU tensor the caller owns
    # A device other than the CPU takes the data straight from the message.
    moved, _ = batch.to_torch(["logp"], device="meta")["logp"]
    assert moved.device.type == "meta" and moved.dtype == torch.bfloat16
    ids, mask = batch.to_torch(["response_ids"], padded=True)["response_ids"]
    assert ids.tolist() == [[1, 2], [3, 0]] and mask.tolist() == [[True, True],
                                                                 [True, False]]
