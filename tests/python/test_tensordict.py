"""torch and TensorDict in and out, exact to the byte and the dtype:
Batch.to_tensordict (jagged nested tensors for ragged columns, dense tensors
for one-item-per-row columns, strings and JSON as non-tensor data, bfloat16
kept) and Dock.put taking that TensorDict back, torch nested tensors (jagged
and strided), tdock.Packed (what Batch.packed returns) and padded tensors
with an attention mask on either side; Batch.padded on either side and the
prompt (left-padded) + response (right-padded) layout with its attention mask
and position ids."""

import numpy as np
import pytest

import tdock

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

ROWS = 4


def spec(name):
    return {"name": name, "num_prompts": ROWS, "steps_in_flight": 2,
            "columns": {"prompt_ids": {"dtype": "int32"},
                        "response_ids": {"dtype": "int32"},
                        "hidden": {"dtype": "bfloat16", "inner_shape": [3]},
                        "reward": {"dtype": "float32", "max_len": 1},
                        "uid": {"dtype": "string"},
                        "info": {"dtype": "json"}},
            "consumers": {"train": {"columns": ["prompt_ids", "response_ids", "hidden",
                                                "reward", "uid", "info"],
                                    "dispatch_size": ROWS},
                          "again": {"columns": ["prompt_ids"]}}}


def source():
    """Rows of different lengths (one empty response), bf16 bit patterns
    that float32 could not carry exactly."""
    gen = torch.Generator().manual_seed(7)
    prompt_lengths, response_lengths = [3, 1, 5, 2], [4, 0, 2, 6]
    prompts = [torch.randint(0, 50000, (n,), generator=gen, dtype=torch.int32)
               for n in prompt_lengths]
    responses = [torch.randint(0, 50000, (n,), generator=gen, dtype=torch.int32)
                 for n in response_lengths]
    hidden = [torch.randn(n, 3, generator=gen).to(torch.bfloat16) for n in response_lengths]
    return {
        "prompt_ids": torch.nested.nested_tensor(prompts, layout=torch.jagged),
        "response_ids": torch.nested.nested_tensor(responses, layout=torch.jagged),
        "hidden": torch.nested.nested_tensor(hidden, layout=torch.jagged),
        "reward": torch.tensor([0.5, -1.0, 2.25, 0.0]),
        "uid": tensordict.NonTensorStack("u0", "u1", "ü2", "u3", batch_size=[ROWS]),
        "info": tensordict.NonTensorStack({"k": 1}, [1, 2], None, "x", batch_size=[ROWS]),
    }, prompts, responses, hidden


def assert_nested_equal(got, rows):
    assert got.is_nested and got.layout == torch.jagged
    assert got.values().dtype == rows[0].dtype
    for a, b in zip(got.unbind(), rows):
        assert a.dtype == b.dtype
        assert torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a,
                           b.view(torch.int16) if b.dtype == torch.bfloat16 else b)


def test_tensordict_round_trip_is_exact(client, dock_name):
    dock = client.create_dock(spec(dock_name))
    columns, prompts, responses, hidden = source()
    td = tensordict.TensorDict(columns, batch_size=[ROWS])
    dock.put(0, range(ROWS), td)
    batch = dock.get("train", step=0)
    assert batch.rows.tolist() == list(range(ROWS))
    out = batch.to_tensordict()
    assert out.batch_size == torch.Size([ROWS])
    assert_nested_equal(out["prompt_ids"], prompts)
    assert_nested_equal(out["response_ids"], responses)
    assert_nested_equal(out["hidden"], hidden)
    assert out["reward"].dtype == torch.float32 and out["reward"].shape == (ROWS,)
    assert torch.equal(out["reward"], columns["reward"])
    assert list(out["uid"]) == ["u0", "u1", "ü2", "u3"]
    assert list(out["info"]) == [{"k": 1}, [1, 2], None, "x"]

    # What came out goes back in, into the next step: the same bytes again.
    dock.put(1, range(ROWS), out)
    again = dock.get("train", step=1).to_tensordict()
    for name in ("prompt_ids", "response_ids", "hidden"):
        assert_nested_equal(again[name], list(out[name].unbind()))
    assert torch.equal(again["reward"], out["reward"])
    assert list(again["uid"]) == list(out["uid"])


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")  # strided input
def test_packed_strided_nested_and_masked_padded_inputs(client, dock_name):
    dock = client.create_dock(spec(dock_name))
    _, prompts, responses, _ = source()
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    left = torch.zeros(ROWS, width, dtype=torch.int32)
    left_mask = torch.zeros(ROWS, width, dtype=torch.bool)
    for i, p in enumerate(prompts):
        left[i, width - len(p):] = p
        left_mask[i, width - len(p):] = True
    dock.put(0, range(ROWS), {
        "prompt_ids": tdock.Padded.from_mask(left, left_mask),  # left padded
        "response_ids": torch.nested.nested_tensor(responses),  # strided layout
    })
    batch = dock.read(0, range(ROWS), ["prompt_ids", "response_ids"])
    for i in range(ROWS):
        assert batch.row("prompt_ids", i).tolist() == prompts[i].tolist()
        assert batch.row("response_ids", i).tolist() == responses[i].tolist()

    # Batch.padded on either side gives back the mask that went in.
    padded, mask = batch.padded("prompt_ids", side="left")
    assert np.array_equal(padded, left.numpy()) and np.array_equal(mask, left_mask.numpy())

    # Packed, as Batch.packed returns it, into another step.
    dock.put(1, range(ROWS), {"prompt_ids": tdock.Packed(*batch.packed("prompt_ids"))})
    assert dock.read(1, [2], ["prompt_ids"]).row("prompt_ids", 0).tolist() == \
        prompts[2].tolist()

    with pytest.raises(tdock.errors.InvalidArgument, match="Packed offsets must rise"):
        dock.put(1, range(ROWS), {"response_ids": tdock.Packed(np.zeros(3, np.int32),
                                                               [0, 2, 1, 3, 3])})
    with pytest.raises(tdock.errors.InvalidArgument, match="3 Packed offsets for 4 rows"):
        dock.put(1, range(ROWS), {"response_ids": tdock.Packed(np.zeros(3, np.int32),
                                                               [0, 1, 3])})
    holes = torch.tensor([[True, False, True]])
    with pytest.raises(tdock.errors.InvalidArgument, match="must be contiguous"):
        tdock.Padded.from_mask(torch.zeros(1, 3), holes)


def test_prompt_response_layout(client, dock_name):
    dock = client.create_dock(spec(dock_name))
    _, prompts, responses, _ = source()
    dock.put(0, range(ROWS), {"prompt_ids": [p.numpy() for p in prompts],
                              "response_ids": [r.numpy() for r in responses]})
    layout = dock.read(0, range(ROWS), ["prompt_ids", "response_ids"]).prompt_response()
    p_width, r_width = max(map(len, prompts)), max(map(len, responses))
    assert layout["input_ids"].shape == (ROWS, p_width + r_width)
    for i in range(ROWS):
        p, r = prompts[i].tolist(), responses[i].tolist()
        mask = layout["attention_mask"][i]
        assert layout["input_ids"][i][mask].tolist() == p + r
        assert layout["prompts"][i][p_width - len(p):].tolist() == p
        assert layout["responses"][i][:len(r)].tolist() == r
        assert layout["response_mask"][i].sum() == len(r)
        # Positions count real tokens from 0 at the first prompt token.
        positions = layout["position_ids"][i]
        assert positions[mask].tolist() == list(range(len(p) + len(r)))
        assert (positions[:p_width - len(p)] == 0).all()
