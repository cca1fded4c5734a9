"""tdock.verl against verl's own code (verl 0.9.1 from PyPI, installed
without its GPU dependencies): a balanced, micro-batched batch becomes a
verl.DataProto in verl's layout (checked against verl's position ids), verl's
own operations and its newer workers' unpadding take it, per-token results
go back into Puts exactly, the balance metrics equal verl's
log_seqlen_unbalance over the same partition, and the micro-batch plan
drives verl's restore_dynamic_batch."""

import re

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")

from verl import DataProto  # noqa: E402
from verl.utils.model import compute_position_id_with_mask  # noqa: E402
from verl.utils.seqlen_balancing import log_seqlen_unbalance, restore_dynamic_batch  # noqa: E402
from verl.workers.utils.padding import left_right_2_no_padding  # noqa: E402

import tdock  # noqa: E402
from tdock import verl as tv  # noqa: E402
from conftest import REPO, grpo_spec  # noqa: E402

ROWS, N = 8, 2


def make_dock(client, name):
    return client.create_dock(grpo_spec(
        name, prompts=ROWS // N, n=N,
        columns={"prompt_ids": {"dtype": "int32"},
                 "response_ids": {"dtype": "int32"},
                 "uid": {"dtype": "string"},
                 "extra_info": {"dtype": "json"},
                 "score": {"dtype": "float32", "max_len": 1},
                 "old_log_probs": {"dtype": "float32"}},
        consumers={
            "actor": {"columns": ["prompt_ids", "response_ids", "uid", "extra_info", "score"],
                      "dp_size": 2, "dispatch_size": ROWS // 2, "policy": "BALANCED",
                      "micro_batch": {"max_tokens": 24}},
            "update": {"columns": ["response_ids", "old_log_probs"]}}))


def rollout(dock):
    rng = np.random.default_rng(7)
    prompts = [np.arange(1, 2 + r % 3, dtype=np.int32) + 100 * r for r in range(ROWS)]
    responses = [rng.integers(1, 50, size=2 + (r * 5) % 7, dtype=np.int32)
                 for r in range(ROWS)]
    dock.put(0, range(ROWS), {
        "prompt_ids": prompts, "response_ids": responses,
        "uid": [f"prompt-{r // N}" for r in range(ROWS)],
        "extra_info": [{"index": r, "turns": [{"role": "user"}]} for r in range(ROWS)],
        "score": np.arange(ROWS, dtype=np.float32)})
    return prompts, responses


def test_data_proto_layout_and_round_trip(client, dock_name):
    dock = make_dock(client, dock_name)
    prompts, responses = rollout(dock)
    batches = [dock.get("actor", rank=r, step=0, wait=10) for r in (0, 1)]
    for b in batches:
        data = tv.to_data_proto(b)
        assert isinstance(data, DataProto) and len(data) == len(b)
        t = data.batch
        for i, row in enumerate(b.rows):
            p, r = prompts[row], responses[row]
            P, R = t["prompts"].shape[1], t["responses"].shape[1]
            # prompts left-padded, responses right-padded, side by side
            assert t["prompts"][i, P - len(p):].tolist() == p.tolist()
            assert t["responses"][i, :len(r)].tolist() == r.tolist()
            assert t["attention_mask"][i].tolist() == (
                [0] * (P - len(p)) + [1] * (len(p) + len(r)) + [0] * (R - len(r)))
            assert t["response_mask"][i].tolist() == [1] * len(r) + [0] * (R - len(r))
            assert t["score"][i].item() == float(row)
        assert torch.equal(t["input_ids"], torch.cat([t["prompts"], t["responses"]], 1))
        assert torch.equal(t["position_ids"], compute_position_id_with_mask(t["attention_mask"]))
        assert t["input_ids"].dtype == torch.int64
        assert data.non_tensor_batch["uid"].dtype == object
        assert data.non_tensor_batch["uid"].tolist() == [f"prompt-{r // N}" for r in b.rows]
        assert data.non_tensor_batch["extra_info"][0]["turns"] == [{"role": "user"}]
        assert data.meta_info["global_token_num"] == b.token_counts.tolist()
        assert data.meta_info["tdock"]["rows"] == b.rows.tolist()
        assert "tdock_key" not in data.non_tensor_batch  # no row has a key
        assert "tdock_version" not in data.non_tensor_batch  # nor a version
        # verl's own operations take it
        halves = data.chunk(2)
        assert len(DataProto.concat(halves)) == len(b)

        # per-token results, right-padded with garbage past each response,
        # go back cut to each row's response length
        R = t["responses"].shape[1]
        log_probs = torch.full((len(b), R), -99.0)
        for i, row in enumerate(b.rows):
            log_probs[i, :len(responses[row])] = -torch.arange(len(responses[row])) / 8
        data.batch["old_log_probs"] = log_probs
        dock.put(0, b.rows, tv.put_columns(data, ["old_log_probs"]))
    read = dock.read(0, range(ROWS), ["old_log_probs"])
    for i in range(ROWS):
        expect = (-np.arange(len(responses[i])) / 8).astype(np.float32)
        assert np.array_equal(read.row("old_log_probs", i), expect)


def test_newer_workers_layout_unpads_in_verl(client, dock_name):
    """to_tensordict's layout through verl's left_right_2_no_padding: each
    row of the jagged input_ids is the row's prompt then response tokens,
    and uid stays per-row non-tensor data."""
    dock = make_dock(client, dock_name)
    prompts, responses = rollout(dock)
    b = dock.get("actor", rank=0, step=0, wait=10)
    td = left_right_2_no_padding(tv.to_tensordict(b))
    ids = td["input_ids"]
    assert ids.is_nested
    for i, row in enumerate(b.rows):
        assert ids[i].tolist() == prompts[row].tolist() + responses[row].tolist()
    assert list(td["uid"]) == [f"prompt-{r // N}" for r in b.rows]


def test_balance_metrics_equal_verls(client, dock_name):
    """The two ranks' shares of the round, taken as verl's partition of the
    round's rows: verl's log_seqlen_unbalance gives the same balanced_min,
    balanced_max and mean as tdock's statistics under those names; both
    ranks carry the same statistics."""
    dock = make_dock(client, dock_name)
    rollout(dock)
    batches = [dock.get("actor", rank=r, step=0, wait=10) for r in (0, 1)]
    seqlens = [t for b in batches for t in b.token_counts.tolist()]
    partitions = [list(range(len(batches[0]))),
                  list(range(len(batches[0]), len(seqlens)))]
    theirs = log_seqlen_unbalance(seqlens, partitions, "global_seqlen")
    ours = tv.balance_metrics(batches[0])
    assert ours == tv.balance_metrics(batches[1])
    for key in ("global_seqlen/balanced_min", "global_seqlen/balanced_max",
                "global_seqlen/mean"):
        assert ours[key] == pytest.approx(theirs[key]), key
    # tdock's own count the round's micro-batches, over both ranks
    assert ours["tdock/micro_batches"] == sum(len(b.micro_batches) for b in batches)


def test_micro_batch_plan_drives_verls_restore(client, dock_name):
    """micro_batches gives DataProtos of the server's plan (each within the
    token budget) and verl's index lists; verl's restore_dynamic_batch puts
    their concatenation back in the batch's order."""
    dock = make_dock(client, dock_name)
    rollout(dock)
    b = dock.get("actor", rank=0, step=0, wait=10)
    data = tv.to_data_proto(b)
    micro, plan = tv.micro_batches(data, b)
    assert len(micro) == len(b.micro_batch_info) > 1
    assert sorted(i for p in plan for i in p) == list(range(len(b)))
    for mb, info in zip(micro, b.micro_batch_info):
        assert int(mb.batch["attention_mask"].sum()) == info.tokens
    joined = torch.cat([mb.batch["input_ids"] for mb in micro])
    assert torch.equal(restore_dynamic_batch(joined, plan), data.batch["input_ids"])


def test_repeats_are_masked_and_not_written_back(client, dock_name):
    """pad: repeat: 7 rows over 2 ranks in one round give shares of 4 rows,
    one of them a repeat. In verl's layout the repeat is marked in
    "is_padding" and its response_mask is 0 (no loss counts it, as verl's
    own upsampled no-op rows); put_columns leaves it out, so outputs are
    written once per row, by the share it belongs to."""
    dock = client.create_dock(grpo_spec(
        dock_name, prompts=7, n=1,
        columns={"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
                 "old_log_probs": {"dtype": "float32"}},
        consumers={"actor": {"columns": ["prompt_ids", "response_ids"], "dp_size": 2,
                             "dispatch_size": 4, "policy": "balanced", "pad": "repeat",
                             "micro_batch": {"max_tokens": 64}},
                   "update": {"columns": ["old_log_probs"]}}))
    dock.put(0, range(7), {"prompt_ids": [np.array([1, 2], np.int32)] * 7,
                           "response_ids": [np.arange(1, 2 + r, dtype=np.int32)
                                            for r in range(7)]})
    shares = [dock.get("actor", rank=r, step=0, wait=10) for r in (0, 1)]
    assert [len(b) for b in shares] == [4, 4]
    repeated = [b for b in shares if b.repeats is not None]
    assert len(repeated) == 1 and len(repeated[0].repeats) == 1
    b = repeated[0]
    i = int(b.repeats[0])
    data = tv.to_data_proto(b, engine_plan=True)
    pad = data.batch["is_padding"]
    real = int((~pad).sum())
    assert real == 3, "the three rows of this share, the repeat and fillers marked"
    slot = [k for k in range(len(pad)) if pad[k] and data.batch["response_mask"][k].sum() == 0
            and data.batch["attention_mask"][k].sum() > 1]
    assert len(slot) == 1, "the repeat keeps its tokens for the forward pass, masked for the loss"
    data.batch["old_log_probs"] = data.batch["response_mask"].float() + 0.5
    columns = tv.put_columns(data, ["old_log_probs"])
    assert len(columns["old_log_probs"]) == 3
    rows = b.rows[~b.repeat_mask]
    dock.put(0, rows, columns)  # a repeated row would be refused as written twice
    written = dock.read(0, rows.tolist(), ["old_log_probs"])
    for k, row in enumerate(rows.tolist()):
        assert len(written.row("old_log_probs", k)) == row + 1  # its response's length
    assert b.rows[i] in shares[0].rows.tolist() + shares[1].rows.tolist()


def test_bad_input_is_named(client, dock_name):
    dock = make_dock(client, dock_name)
    rollout(dock)
    b = dock.get("actor", rank=0, step=0, wait=10)
    with pytest.raises(tdock.errors.InvalidArgument, match="no column 'prompt'"):
        tv.to_data_proto(b, prompt="prompt")
    with pytest.raises(tdock.errors.InvalidArgument, match="no key 'values'"):
        tv.put_columns(tv.to_data_proto(b), ["values"])
    with pytest.raises(tdock.errors.InvalidArgument, match="DataProto or a TensorDict"):
        tv.put_columns({"a": 1}, ["a"])


def test_data_proto_without_prompts_carries_keys_and_versions(client, dock_name):
    """A consumer that reads no prompt column (an update reading responses and
    log-probs) gets verl's layout with prompt=None: "prompts" of width 0,
    "input_ids" the right-padded responses, attention and response masks
    equal, verl's position ids. The rows' keys and policy versions travel in
    non_tensor_batch as "tdock_key" and "tdock_version" (-1: no version), so
    verl's chunk keeps them with their rows; to_tensordict carries them
    too (a batch without either has neither: the first test). A batch
    lacking the default prompt column is laid out so without being told;
    a prompt column named explicitly must exist. A batch with prompts only
    (a rollout's input) has "responses" of width 0."""
    dock = client.create_dock(grpo_spec(
        dock_name, prompts=2, n=2,
        columns={"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"}},
        consumers={"update": {"columns": ["response_ids"]}}))
    responses = [np.arange(1, 2 + r, dtype=np.int32) for r in range(4)]
    dock.set_version(5)
    dock.put(0, None, {"response_ids": responses[:3]}, keys=["a", "b", "c"],
             versions=[3, 4, 5])
    dock.put(0, [3], {"response_ids": responses[3:]})  # no key, no version
    b = dock.get("update", step=0, wait=10)
    assert b.rows.tolist() == [0, 1, 2, 3]
    with pytest.raises(tdock.errors.InvalidArgument, match="no column 'prompt_ids'"):
        tv.to_data_proto(b, prompt="prompt_ids")
    data = tv.to_data_proto(b)
    explicit = tv.to_data_proto(b, prompt=None)
    assert all(torch.equal(data.batch[k], explicit.batch[k]) for k in explicit.batch.keys())
    t = data.batch
    assert t["prompts"].shape == (4, 0)
    assert torch.equal(t["input_ids"], t["responses"])
    assert torch.equal(t["attention_mask"], t["response_mask"])
    assert torch.equal(t["position_ids"], compute_position_id_with_mask(t["attention_mask"]))
    for i, r in enumerate(responses):
        assert t["responses"][i, :len(r)].tolist() == r.tolist()
    assert data.meta_info["global_token_num"] == [1, 2, 3, 4]
    assert data.non_tensor_batch["tdock_key"].tolist() == ["a", "b", "c", ""]
    assert data.non_tensor_batch["tdock_version"].tolist() == [3, 4, 5, -1]
    second = data.chunk(2)[1]
    assert second.non_tensor_batch["tdock_key"].tolist() == ["c", ""]
    assert second.non_tensor_batch["tdock_version"].tolist() == [5, -1]
    td = tv.to_tensordict(b, prompt=None)
    assert list(td["tdock_key"]) == ["a", "b", "c", ""]
    assert list(td["tdock_version"]) == [3, 4, 5, -1]
    dock.put(1, range(4), {"prompt_ids": responses})
    prompts_only = tv.to_data_proto(client.dock(dock_name).read(1, range(4), ["prompt_ids"]))
    assert prompts_only.batch["responses"].shape == (4, 0)
    assert torch.equal(prompts_only.batch["input_ids"], prompts_only.batch["prompts"])
    assert prompts_only.batch["attention_mask"].sum(1).tolist() == [1, 2, 3, 4]


def test_readme_points_to_what_exists_for_verl():
    """The README has a verl section; every function it names is one
    tdock.verl exports, and every file and heading it links to exists (the
    example, the docs section)."""
    readme = (REPO / "README.md").read_text()
    found = re.search(r"^## verl\b.*?(?=^## )", readme, re.S | re.M)
    assert found, "README.md has no '## verl' section"
    section = found.group(0)
    named = set(re.findall(r"`(?:tv\.|tdock\.verl\.)?(\w+)\(", section))
    assert named and named <= set(tv.__all__), named - set(tv.__all__)
    links = re.findall(r"\]\(([^)]+)\)", section)
    assert any(link.startswith("examples/verl_ray.py") for link in links), links
    for link in links:
        path, _, anchor = link.partition("#")
        assert (REPO / path).exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.*)$", (REPO / path).read_text(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, link
