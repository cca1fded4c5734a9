"""tdock.transferqueue: TransferQueue's API over a real tdock server, and
verl 0.9.1's own TransferQueue code (the worker bridge, the v1 replay
buffer, the agent loop's puts) running unmodified over install(), with
simulated model outputs."""

import asyncio
import importlib.util
import itertools
import os

import numpy as np
import pytest

import tdock
from conftest import REPO

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
from tensordict import NonTensorStack, TensorDict  # noqa: E402

from tdock import transferqueue as tqm  # noqa: E402

_prefixes = itertools.count()


@pytest.fixture
def tq(server):
    """transfer_queue (installed) on the test server, with small steps (8
    rows) so that keys spread over several; its docks are deleted after."""
    tqm.install()
    import transfer_queue
    tqm.close()
    prefix = f"tq{next(_prefixes)}x{os.getpid()}-"
    transfer_queue.init({"tdock": {"address": server, "prefix": prefix, "rows_per_step": 8}})
    yield transfer_queue
    tqm.close()
    with tdock.Client(server, timeout=30.0) as c:
        for d in c.list_docks():
            if d.name.startswith(prefix):
                c.delete_dock(d.name)


def jagged(rows):
    return torch.nested.as_nested_tensor([torch.tensor(r) for r in rows], layout=torch.jagged)


def sample_fields(n, base=0):
    return TensorDict({
        "responses": jagged([list(range(base + i, base + 2 * i + 2)) for i in range(n)]),
        "score": torch.arange(n, dtype=torch.float32) + base,
        "hidden": torch.ones(n, 2, 3, dtype=torch.bfloat16) * (base + 1),
        "extra": NonTensorStack(*[{"i": base + i, "tool": ["a"] * i} for i in range(n)]),
    }, batch_size=[n])


def test_install_makes_transfer_queue_this_module(tq):
    """`import transfer_queue` is tdock.transferqueue after install(), with
    every name verl imports."""
    import transfer_queue
    assert transfer_queue is tqm
    for name in ["init", "kv_batch_put", "kv_batch_get", "kv_list", "kv_clear", "async_kv_put",
                 "async_kv_batch_put", "get_client", "save_checkpoint", "load_checkpoint",
                 "get_metrics_endpoint", "close", "BatchMeta", "KVBatchMeta"]:
        assert hasattr(transfer_queue, name), name


def test_put_get_roundtrip_every_field_kind(tq):
    """Schema-free puts: jagged, dense (bfloat16, 2-D items), scalar and
    Python-object fields come back as they went in, in the order asked,
    across steps (12 keys over steps of 8 rows)."""
    keys = [f"k{i}" for i in range(12)]
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=sample_fields(12))
    assert sorted(meta.fields) == ["extra", "hidden", "responses", "score"]
    order = keys[::-1]
    got = tq.kv_batch_get(keys=order, partition_id="train")
    want = sample_fields(12)
    for pos, key in enumerate(order):
        i = int(key[1:])
        assert got["responses"][pos].tolist() == want["responses"][i].tolist()
        assert got["extra"][pos] == want["extra"][i]
    assert got["score"].tolist() == [float(int(k[1:])) for k in order]
    assert got["hidden"].dtype == torch.bfloat16 and got["hidden"].shape == (12, 2, 3)
    one = tq.kv_batch_get(keys="k3", partition_id="train", select_fields="score")
    assert list(one.keys()) == ["score"] and one["score"].tolist() == [3.0]
    assert got["responses"].offsets().diff().tolist() == [len(want["responses"][int(k[1:])])
                                                          for k in order]


def test_tags_merge_and_list_and_clear(tq):
    """A tag-only put merges into the stored tag (verl's status updates keep
    is_prompt/global_steps); kv_list gives {partition: {key: tag}}; kv_clear
    removes keys, skips absent ones, and frees them for new puts."""
    tq.kv_batch_put(keys=["u1", "u2"], partition_id="train",
                    tags=[{"is_prompt": True, "status": "pending", "global_steps": 3}] * 2)
    tq.kv_put(key="u1", partition_id="train", tag={"status": "running"})
    tq.kv_batch_put(keys=["v"], partition_id="val", tags=[{"x": 1}])
    listed = tq.kv_list()
    assert listed["train"] == {"u1": {"is_prompt": True, "status": "running", "global_steps": 3},
                               "u2": {"is_prompt": True, "status": "pending", "global_steps": 3}}
    assert tq.kv_list("val") == {"val": {"v": {"x": 1}}}
    assert tq.kv_list("nothing") == {}
    tq.kv_clear(keys=["u1", "gone"], partition_id="train")
    assert list(tq.kv_list("train")["train"]) == ["u2"]
    tq.kv_put(key="u1", partition_id="train", fields={"score": torch.tensor(7.0)}, tag={"n": 1})
    assert tq.kv_list("train")["train"]["u1"] == {"n": 1}
    assert tq.kv_batch_get(keys=["u1"], partition_id="train")["score"].tolist() == [7.0]


def test_steps_roll_over_and_cleared_steps_are_released(tq, server):
    """New keys fill the open step (8 rows) then the next; a step below the
    open one whose keys are all cleared is released, so a long run does not
    hold every step it ever wrote."""
    for b in range(3):
        keys = [f"b{b}_{i}" for i in range(8)]
        tq.kv_batch_put(keys=keys, partition_id="train", fields=sample_fields(8, b))
    dock = tqm._s().dock("train", create=False)
    assert [s.step for s in dock.status().steps] == [0, 1, 2]
    tq.kv_clear(keys=[f"b0_{i}" for i in range(8)], partition_id="train")
    assert [s.step for s in dock.status().steps] == [1, 2]
    assert len(tq.kv_list("train")["train"]) == 16
    got = tq.kv_batch_get(keys=["b2_7", "b1_0"], partition_id="train", select_fields=["score"])
    assert got["score"].tolist() == [9.0, 1.0]


def test_bad_inputs_name_what_was_wrong(tq):
    """Each bad input is refused with an error naming it."""
    tq.kv_batch_put(keys=["a"], partition_id="train", fields=sample_fields(1))
    E = tdock.errors
    with pytest.raises(E.InvalidArgument, match="give fields, tags or both"):
        tq.kv_batch_put(keys=["a"], partition_id="train")
    with pytest.raises(E.InvalidArgument, match="2 keys but fields of batch size"):
        tq.kv_batch_put(keys=["a", "b"], partition_id="train", fields=sample_fields(1))
    with pytest.raises(E.InvalidArgument, match="one dict per key"):
        tq.kv_batch_put(keys=["a", "b"], partition_id="train", tags=[{}])
    with pytest.raises(E.InvalidArgument, match="keys repeat"):
        tq.kv_batch_put(keys=["a", "a"], partition_id="train", tags=[{}, {}])
    with pytest.raises(E.InvalidArgument, match="partition_id must be a non-empty string"):
        tq.kv_batch_put(keys=["a"], partition_id="", tags=[{}])
    with pytest.raises(E.NotFound, match=r"has no keys \['zz'\]"):
        tq.kv_batch_get(keys=["a", "zz"], partition_id="train")
    with pytest.raises(E.NotFound, match="no partition 'nope'"):
        tq.kv_batch_get(keys=["a"], partition_id="nope")
    with pytest.raises(E.InvalidArgument, match=r"no fields \['missing'\]"):
        tq.kv_batch_get(keys=["a"], partition_id="train", select_fields=["missing"])
    with pytest.raises(E.InvalidArgument, match="dtype torch.complex64"):
        tq.kv_batch_put(keys=["a"], partition_id="train",
                        fields=TensorDict({"c": torch.zeros(1, dtype=torch.complex64)}, [1]))
    with pytest.raises(E.InvalidArgument, match="field 'score' was stored as tensors"):
        tq.kv_batch_put(keys=["a"], partition_id="train",
                        fields=TensorDict({"score": NonTensorStack("x")}, [1]))
    with pytest.raises(E.InvalidArgument, match="reserved"):
        tq.kv_batch_put(keys=["a"], partition_id="train",
                        fields=TensorDict({"__tq_tag__": torch.zeros(1)}, [1]))
    tq.kv_batch_put(keys=["b"], partition_id="train", tags=[{}])
    with pytest.raises(E.FailedPrecondition, match="not written for every key"):
        tq.kv_batch_get(keys=["a", "b"], partition_id="train", select_fields=["score"])


def test_async_twins_and_client(tq):
    """async_kv_put / async_kv_batch_put and the client's async calls do
    what their blocking twins do."""
    async def main():
        await tq.async_kv_batch_put(keys=["p", "q"], partition_id="train",
                                    fields=sample_fields(2), tags=[{"s": 1}, {"s": 2}])
        await tq.async_kv_put(key="p", partition_id="train", tag={"t": 0})
        client = tq.get_client()
        meta = await client.async_kv_retrieve_meta(keys=["q", "p"], partition_id="train")
        assert meta.custom_meta == [{"s": 2}, {"s": 1, "t": 0}]
        assert await client.async_kv_retrieve_keys(meta.global_indexes, "train") == ["q", "p"]
        data = await client.async_get_data(meta.select_fields(["score"]))
        assert data["score"].tolist() == [1.0, 0.0]
        meta = await client.async_put(TensorDict({"adv": torch.tensor([5.0, 6.0])}, [2]), meta)
        assert "adv" in meta.field_names
        assert (await tq.async_kv_list("train"))["train"]["p"] == {"s": 1, "t": 0}
        assert (await tq.async_kv_batch_get(["p"], "train", "adv"))["adv"].tolist() == [6.0]
        await tq.async_kv_clear(["p"], "train")
    asyncio.run(main())
    assert list(tq.kv_list("train")["train"]) == ["q"]


def test_checkpoint_save_and_load(tq, tmp_path):
    """save_checkpoint writes keys, tags and fields; after clearing,
    load_checkpoint puts them back and returns the metadata."""
    tq.kv_batch_put(keys=["a", "b"], partition_id="train", fields=sample_fields(2),
                    tags=[{"status": "finished"}, {"status": "running"}])
    tq.kv_batch_put(keys=["p"], partition_id="train", tags=[{"is_prompt": True}])
    tq.save_checkpoint(str(tmp_path / "tq"), metadata={"global_steps": 4})
    tq.kv_clear(keys=["a", "b", "p"], partition_id="train")
    assert tq.kv_list("train") == {"train": {}}
    assert tq.load_checkpoint(str(tmp_path / "tq")) == {"global_steps": 4}
    assert tq.kv_list("train")["train"] == {"a": {"status": "finished"},
                                            "b": {"status": "running"}, "p": {"is_prompt": True}}
    got = tq.kv_batch_get(keys=["b"], partition_id="train")
    assert got["extra"][0] == {"i": 1, "tool": ["a"]} and got["score"].tolist() == [1.0]
    with pytest.raises(tdock.errors.NotFound, match="no .*tdock_tq.pt"):
        tq.load_checkpoint(str(tmp_path / "none"))



def _plain(v):
    """A value as plain Python, dtypes and shapes kept, for exact comparison."""
    if isinstance(v, torch.Tensor) and v.is_nested:
        return ("nested", [_plain(r) for r in v.unbind()])
    if isinstance(v, torch.Tensor):
        return ("tensor", str(v.dtype), list(v.shape), v.float().tolist())
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, list(v.shape),
                [_plain(x) for x in v.reshape(-1)] if v.dtype == object else v.tolist())
    if isinstance(v, NonTensorStack):
        return ("objects", [_plain(x) for x in v.tolist()])
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return (type(v).__name__, v)


def _snapshot(tq):
    """{partition: {key: (tag, {field: value})}} of everything stored."""
    out = {}
    for pid, tags in tq.kv_list().items():
        out[pid] = {}
        for key, tag in tags.items():
            meta = tq.get_client().kv_retrieve_meta([key], pid)
            got = tq.kv_batch_get(keys=[key], partition_id=pid, select_fields=meta.field_names) \
                if meta.field_names else {}
            out[pid][key] = (tag, {f: _plain(got[f]) for f in meta.field_names})
    return out


def _fill_for_checkpoint(tq):
    """Two partitions: 12 keys over two steps with every field kind (a
    jagged row of length 0, bfloat16, typed cells holding tensors, numpy
    arrays, bytes and None), keys with a field fewer, and tag-only keys."""
    fields = sample_fields(12)
    fields["responses"] = torch.nested.as_nested_tensor(
        [torch.arange(i % 3, dtype=torch.int64) for i in range(12)], layout=torch.jagged)
    fields["extra"] = NonTensorStack(*[
        {"i": i, "mm": {"x": torch.full((2,), i, dtype=torch.bfloat16)},
         "arr": np.arange(i, dtype=np.int16), "blob": bytes([i]), "none": None,
         "words": np.array(["a", "bc"])} for i in range(12)])
    tq.kv_batch_put(keys=[f"k{i}" for i in range(12)], partition_id="train", fields=fields,
                    tags=[{"status": "finished", "n": i, "f": 0.5} for i in range(12)])
    tq.kv_batch_put(keys=["short0", "short1"], partition_id="train",
                    fields=TensorDict({"score": torch.tensor([7.0, 8.0])}, [2]),
                    tags=[{"status": "running"}, {}])
    tq.kv_batch_put(keys=["p"], partition_id="train", tags=[{"is_prompt": True}])
    tq.kv_batch_put(keys=["v0", "v1"], partition_id="val",
                    fields=TensorDict({"ids": torch.tensor([[1, 2], [3, 4]]),
                                       "text": NonTensorStack("x", "y")}, [2]),
                    tags=[{"s": [1, 2]}, {"s": {"a": None}}])


def test_checkpoint_round_trips_every_partition_key_field_and_tag(tq, tmp_path):
    """A checkpoint restores every partition, key, tag and field (dense,
    jagged, typed Python values) exactly, with dtypes and shapes, after all
    keys are cleared; the metadata (nested values, a tensor) comes back too.
    The file is the tdock layout (magic and version), not a pickle."""
    _fill_for_checkpoint(tq)
    before = _snapshot(tq)
    assert sorted(before) == ["train", "val"] and len(before["train"]) == 15
    metadata = {"global_steps": 4, "nested": {"l": [1, "a", None]}, "t": torch.arange(3)}
    tq.save_checkpoint(str(tmp_path / "tq"), metadata=metadata)
    raw = (tmp_path / "tq" / "tdock_tq.pt").read_bytes()
    assert raw[:8] == b"TDOCKTQC" and int.from_bytes(raw[8:12], "little") == 1
    for pid, keys in before.items():
        tq.kv_clear(keys=list(keys), partition_id=pid)
    assert tq.kv_list() == {"train": {}, "val": {}}
    got = tq.load_checkpoint(str(tmp_path / "tq"))
    assert _plain(got) == _plain(metadata)
    assert _snapshot(tq) == before


def test_checkpoint_metadata_must_be_storable(tq, tmp_path):
    """Metadata the typed encoding does not hold (a set) is refused naming
    where it is, and no file is written."""
    tq.kv_batch_put(keys=["a"], partition_id="train", tags=[{}])
    with pytest.raises(tdock.errors.InvalidArgument, match=r"\['metadata'\]\['ids'\].*set"):
        tq.save_checkpoint(str(tmp_path / "tq"), metadata={"ids": {1, 2}})
    assert not (tmp_path / "tq" / "tdock_tq.pt").exists()


def test_a_pickle_checkpoint_is_never_unpickled(tq, tmp_path):
    """load_checkpoint of a tdock_tq.pt that is a pickle whose __reduce__
    creates a file, a torch.save file of the same payload (what older
    clients wrote), or the tdock header followed by that pickle raises
    DataLoss naming the file, creates no file and changes no partition;
    pickle.loads of the same bytes does create it (the payload is live)."""
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    tq.kv_batch_put(keys=["a"], partition_id="train", tags=[{"s": 1}])
    crafted = pickle.dumps({"metadata": Payload(), "partitions": {}})
    ckpt = tmp_path / "tq"
    ckpt.mkdir()
    file = ckpt / "tdock_tq.pt"
    header = b"TDOCKTQC" + (1).to_bytes(4, "little")
    for payload, why in [(crafted, "looks like a pickle"), (None, "torch.save"),
                         (header + crafted, "does not start with b'TQC1'")]:
        if payload is None:
            torch.save({"metadata": Payload(), "partitions": {}}, str(file))
        else:
            file.write_bytes(payload)
        with pytest.raises(tdock.errors.DataLoss, match=f"{file}.*{why}.*"):
            tq.load_checkpoint(str(ckpt))
        assert not marker.exists()
        assert tq.kv_list() == {"train": {"a": {"s": 1}}}

    pickle.loads(crafted)["metadata"].close()
    assert marker.exists()


def test_a_checkpoint_of_another_version_or_layout_is_refused(tq, tmp_path):
    """A checkpoint whose format version is not 1 raises InvalidArgument
    naming the file and the version; one cut short, or whose body is typed
    data but not a checkpoint, raises DataLoss; none changes any partition."""
    tq.kv_batch_put(keys=["a", "b"], partition_id="train", fields=sample_fields(2),
                    tags=[{"s": 1}, {"s": 2}])
    ckpt = tmp_path / "tq"
    tq.save_checkpoint(str(ckpt))
    file = ckpt / "tdock_tq.pt"
    good = file.read_bytes()
    tq.kv_clear(keys=["b"], partition_id="train")
    tq.kv_batch_put(keys=["a"], partition_id="train", tags=[{"s": 9}])
    after = _snapshot(tq)

    file.write_bytes(good[:8] + (2).to_bytes(4, "little") + good[12:])
    with pytest.raises(tdock.errors.InvalidArgument,
                       match=f"{file} has checkpoint format version 2; this client reads "
                             f"version 1"):
        tq.load_checkpoint(str(ckpt))
    assert _snapshot(tq) == after

    from tdock import _tq_cells
    for body, why in [(good[:-5], "the cell has"),
                      (good[:12] + _tq_cells.encode_value({"metadata": {}}, "x"),
                       "not {'metadata', 'partitions'}")]:
        file.write_bytes(body)
        with pytest.raises(tdock.errors.DataLoss, match=f"{file} is not a readable.*{why}"):
            tq.load_checkpoint(str(ckpt))
        assert _snapshot(tq) == after

    file.write_bytes(good)
    assert tq.load_checkpoint(str(ckpt)) == {}
    assert tq.kv_list("train")["train"] == {"a": {"s": 1}, "b": {"s": 2}}


def test_metrics_endpoint_and_init_errors(tq, monkeypatch):
    """get_metrics_endpoint comes from the config or the environment; init
    names unknown settings."""
    monkeypatch.setenv("TDOCK_METRICS_ENDPOINT", "127.0.0.1:9400")
    assert tq.get_metrics_endpoint() == "127.0.0.1:9400"
    with pytest.raises(tdock.errors.InvalidArgument, match=r"unknown tdock settings \['adress'\]"):
        tq.init({"tdock": {"adress": "x"}})


# ---- Python-value fields: the typed encoding, never pickle ---------------------------


def _cells(n):
    """One Python value per key of every kind a cell holds: dicts of tensors
    (bfloat16, int64, float32, bool, uint8; 0-d and empty ones), numpy
    arrays (numbers, strings, objects), strings, None, nested lists, bytes."""
    return [{
        "multi_modal_inputs": {
            "pixel_values": torch.arange(6.0).reshape(2, 3).to(torch.bfloat16) + i,
            "image_grid_thw": torch.tensor([[1, 2 + i, 2]], dtype=torch.int64),
            "mask": torch.tensor([True, False, i % 2 == 0]),
            "raw": torch.arange(i + 1, dtype=torch.uint8),
            "scale": torch.tensor(0.5 * i),
            "none_yet": torch.empty(0, 4, dtype=torch.float16)},
        "array": np.arange(4 * i, 4 * i + 6, dtype=np.float32).reshape(2, 3).T,
        "ids": np.array([i, -i], dtype=np.int16),
        "names": np.array(["ab", "c" * i]),
        "rows": np.array([{"turn": i}, [1, "x"]], dtype=object),
        "text": f"sample {i} é",
        "nothing": None,
        "nested": [[1, [2.5, None]], {"ok": True, "tools": ["a"] * i}, []],
        "blob": bytes([i, 0, 255]),
    } if i % 3 else f"only a string {i}" if i % 2 else None for i in range(n)]


def _same(a, b):
    """a == b, with tensors and arrays compared by type, dtype, shape and values."""
    if isinstance(a, torch.Tensor):
        return type(b) is torch.Tensor and a.dtype == b.dtype and a.shape == b.shape \
            and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and \
            all(_same(x, y) for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return type(b) is list and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_python_values_round_trip_typed(tq):
    """Python-value fields come back as they went in, each kind with its type:
    tensors as torch tensors of the same dtype (bfloat16 included) and shape,
    numpy arrays as numpy arrays (number, string and object dtypes), strings,
    None, bytes and nested lists and dicts; in the order asked, over two steps
    (10 keys, steps of 8), and through kv_put's one-sample dict too. numpy
    scalars come back as Python numbers, tuples as lists."""
    keys = [f"k{i}" for i in range(10)]
    values = _cells(10)
    tq.kv_batch_put(keys=keys, partition_id="train",
                    fields=TensorDict({"extra": NonTensorStack(*values)}, [10]))
    order = keys[::-1]
    got = tq.kv_batch_get(keys=order, partition_id="train", select_fields="extra")
    for pos, key in enumerate(order):
        assert _same(values[int(key[1:])], got["extra"][pos]), key

    tq.kv_put(key="one", partition_id="train",
              fields={"extra": {"t": (np.float32(1.5), np.int64(7), np.bool_(True), "s")}})
    one = tq.kv_batch_get(keys="one", partition_id="train")["extra"][0]
    assert _same(one, {"t": [1.5, 7, True, "s"]})


def test_verl_agent_loop_fields_round_trip(tq):
    """A batch built as verl's agent loop builds it (list_of_dict_to_tensordict
    of per-sample dicts: multi_modal_inputs a dict of tensors, uid a string,
    extra_fields and raw_prompt dicts and lists) reads back with each
    sample's values, tensors with their dtype and shape."""
    tu = pytest.importorskip("verl.utils.tensordict_utils")
    samples = [{
        "prompts": torch.tensor([1, 2, 3 + i]), "responses": torch.tensor([4] * (i + 1)),
        "multi_modal_inputs": {"pixel_values": torch.full((i + 1, 4), 0.25, dtype=torch.bfloat16),
                               "image_grid_thw": torch.tensor([[1, i + 1, 1]])},
        "uid": f"u{i}", "extra_fields": {"turns": i, "reward_extra_info": {"acc": 1.0 * i}},
        "raw_prompt": [{"role": "user", "content": [{"type": "text", "text": f"q{i}"}]}],
    } for i in range(3)]
    tq.kv_batch_put(keys=["a", "b", "c"], partition_id="train",
                    fields=tu.list_of_dict_to_tensordict(samples))
    got = tq.kv_batch_get(keys=["c", "a"], partition_id="train")
    assert list(got["uid"]) == ["u2", "u0"]
    for pos, i in enumerate([2, 0]):
        for name in ["multi_modal_inputs", "extra_fields", "raw_prompt"]:
            assert _same(samples[i][name], got[name][pos]), name
    assert got["responses"].offsets().diff().tolist() == [3, 1]


class _Unstorable:
    """A class instance: not a value a cell holds."""


def test_unstorable_values_are_refused_and_nothing_is_written(tq):
    """A value a cell cannot hold (a class instance, a set, a function, an
    int dict key) is refused with InvalidArgument (a ValueError) naming the
    field, the key and the type; the put writes nothing: a new partition is
    not made, and on existing keys no field, column or tag changes, even
    when the refused field comes after good ones and new tags."""
    bad_values = [(_Unstorable(), "_Unstorable"),
                  ({"a": [1, {2}]}, r"\['a'\]\[1\]: a value of type set"),
                  (len, "builtin_function_or_method"), ({1: "x"}, "dict key 1 of type int")]
    for value, what in bad_values:
        fields = TensorDict({"score": torch.tensor([1.0, 2.0, 3.0]),
                             "extra": NonTensorStack("fine", value, "fine")}, [3])
        with pytest.raises(ValueError, match=f"field 'extra' key 'n1'.*{what}") as e:
            tq.kv_batch_put(keys=["n0", "n1", "n2"], partition_id="fresh", fields=fields,
                            tags=[{"t": 1}] * 3)
        assert isinstance(e.value, tdock.errors.InvalidArgument)
    assert "fresh" not in tq.kv_list() and tq.kv_list("fresh") == {}
    with pytest.raises(tdock.errors.NotFound, match="no partition 'fresh'"):
        tq.kv_batch_get(keys=["n0"], partition_id="fresh")

    tq.kv_batch_put(keys=["a", "b"], partition_id="train", tags=[{"s": 0}, {"s": 0}],
                    fields=TensorDict({"score": torch.tensor([1.0, 2.0]),
                                       "extra": NonTensorStack("x", "y")}, [2]))
    with pytest.raises(tdock.errors.InvalidArgument, match="field 'extra' key 'b'.*_Unstorable"):
        tq.kv_batch_put(keys=["a", "b", "new"], partition_id="train", tags=[{"s": 9}] * 3,
                        fields=TensorDict({"added": torch.zeros(3), "score": torch.zeros(3),
                                           "extra": NonTensorStack("z", _Unstorable(), "z")}, [3]))
    assert tq.kv_list("train") == {"train": {"a": {"s": 0}, "b": {"s": 0}}}
    got = tq.kv_batch_get(keys=["a", "b"], partition_id="train")
    assert sorted(got.keys()) == ["extra", "score"]
    assert got["score"].tolist() == [1.0, 2.0] and list(got["extra"]) == ["x", "y"]
    columns = [c.name for c in tqm._s().dock("train", create=False).spec.columns]
    assert "added" not in columns


def test_a_crafted_pickle_cell_is_never_unpickled(tq, tmp_path):
    """A cell written behind tdock.transferqueue's back (the plain client)
    holding a pickle whose __reduce__ creates a file is not unpickled on
    read: kv_batch_get raises DataLoss naming the field and the key, and the
    file is not there; pickle.loads of the same bytes does create it (the
    payload is live). A cell in the typed layout whose array runs past its
    bytes is refused the same way."""
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    crafted = pickle.dumps(Payload())
    tq.kv_batch_put(keys=["a", "b"], partition_id="train",
                    fields=TensorDict({"extra": NonTensorStack("x", "y")}, [2]))
    store = tqm._s()
    dock = store.dock("train", create=False)
    step, row, _ = store.lookup(dock, ["b"])["b"]
    dock.put(step, [row], {"extra": [np.frombuffer(crafted, np.uint8)]})
    with pytest.raises(tdock.errors.DataLoss, match="field 'extra' key 'b'.*never unpickled"):
        tq.kv_batch_get(keys=["a", "b"], partition_id="train")
    assert not marker.exists()
    assert list(tq.kv_batch_get(keys=["a"], partition_id="train")["extra"]) == ["x"]

    header = b'{"__tdock_array__":{"kind":"torch","dtype":"float32","shape":[4],' \
             b'"offset":0,"nbytes":16}}'
    short = b"TQC1" + len(header).to_bytes(4, "little") + header + bytes(8)
    dock.put(step, [row], {"extra": [np.frombuffer(short, np.uint8)]})
    with pytest.raises(tdock.errors.DataLoss, match="field 'extra' key 'b'.*16 bytes at 0"):
        tq.kv_batch_get(keys=["b"], partition_id="train")

    pickle.loads(crafted).close()
    assert marker.exists()


# ---- verl 0.9.1's own code, unmodified -------------------------------------------


def _verl_module(relative, name):
    """A verl module loaded from its file (verl.trainer.ppo.v1's package
    __init__ imports the agent loop, which needs hydra and PIL)."""
    verl = pytest.importorskip("verl")
    path = os.path.join(os.path.dirname(verl.__file__), relative)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verl_tqbridge_runs_a_worker_method_over_tdock(tq):
    """verl.utils.transferqueue_utils.tqbridge (the worker-method bridge)
    turns a KVBatchMeta into the TensorDict a worker computes on, writes the
    worker's output back and returns the KVBatchMeta with its tags; verl's
    BatchData splits and joins metas as the dispatcher does."""
    pytest.importorskip("verl")
    from verl.protocol import BatchData
    from verl.utils import transferqueue_utils as tu
    assert tu.tq is tq and tu.KVBatchMeta is tq.KVBatchMeta

    keys = [f"s{i}" for i in range(6)]
    tq.kv_batch_put(keys=keys, partition_id="train", fields=sample_fields(6),
                    tags=[{"seq_len": i} for i in range(6)])

    @tu.tqbridge()
    def compute_log_prob(data):  # a simulated model: one log-prob per response token
        assert isinstance(data, TensorDict) and data["temperature"] == 0.5
        lengths = data["responses"].offsets().diff()
        return TensorDict({"log_probs": jagged([[-0.5] * int(n) for n in lengths]),
                           "entropy": data["score"] * 2}, batch_size=[len(lengths)])

    meta = tq.KVBatchMeta(keys=keys, tags=[{"seq_len": i} for i in range(6)],
                          partition_id="train", fields=["responses", "score"],
                          extra_info={"temperature": 0.5})
    out = compute_log_prob(meta)
    assert isinstance(out, tq.KVBatchMeta) and out.keys == keys
    assert out.tags == meta.tags and out.partition_id == "train"
    got = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["log_probs", "entropy"])
    assert got["entropy"].tolist() == [2.0 * i for i in range(6)]
    assert got["log_probs"].offsets().diff().tolist() == \
        sample_fields(6)["responses"].offsets().diff().tolist()

    # The dispatcher's path: chunk per rank, run, concat back to a KVBatchMeta.
    chunks = BatchData(meta).chunk(2)
    assert [c.size for c in chunks] == [3, 3]
    outputs = [compute_log_prob(c) for c in chunks]
    joined = BatchData(outputs).concat()
    assert isinstance(joined, tq.KVBatchMeta) and joined.keys == keys


def _agent_loop_puts(tq, uid, n, partition_id, global_steps):
    """What AgentLoopWorkerTQ._run_prompt / _agent_loop_postprocess put,
    call for call: status running, n sessions' trajectories (fields from a
    simulated rollout, tags), status finished."""
    async def run():
        await tq.async_kv_put(key=uid, partition_id=partition_id, tag={"status": "running"})
        for s in range(n):
            prompt, response = [1, 2, 3], [4 + s] * (s + 1)
            fields = TensorDict({
                "prompts": jagged([prompt]), "responses": jagged([response]),
                "response_mask": jagged([[1] * len(response)]),
                "rm_scores": jagged([[0.0] * len(response)]),
                "uid": NonTensorStack(uid), "extra_fields": NonTensorStack({"turns": 1}),
            }, batch_size=[1])
            await tq.async_kv_batch_put(
                keys=[f"{uid}_{s}_0"], fields=fields, partition_id=partition_id,
                tags=[{"status": "success", "global_steps": global_steps,
                       "seq_len": len(prompt) + len(response),
                       "min_global_steps": global_steps, "max_global_steps": global_steps}])
        await tq.async_kv_put(key=uid, partition_id=partition_id, tag={"status": "finished"})
    asyncio.run(run())


def test_verl_replay_buffer_samples_over_tdock(tq):
    """verl's v1 ReplayBuffer (trainer/ppo/v1/replay_buffer.py) runs
    unmodified: prompts registered as the trainer does, trajectories put as
    the TQ agent loop does; sample() returns the finished groups'
    trajectories as a KVBatchMeta and clears their prompt keys; the
    trainer's reads of the sampled batch get the rollout's fields."""
    rb = _verl_module("trainer/ppo/v1/replay_buffer.py", "verl_v1_replay_buffer_under_test")
    from omegaconf import OmegaConf
    assert rb.tq is tq
    uids = ["p0", "p1", "p2"]
    tq.kv_batch_put(keys=uids, partition_id="train",
                    tags=[{"is_prompt": True, "status": "pending", "global_steps": 1}] * 3)
    for uid in uids[:2]:
        _agent_loop_puts(tq, uid, n=2, partition_id="train", global_steps=1)
    buffer = rb.ReplayBuffer("sync", OmegaConf.create({}), max_off_policy_threshold=None,
                             max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}),
                             poll_interval=0.01)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert isinstance(batch, tq.KVBatchMeta) and batch.partition_id == "train"
    assert sorted(batch.keys) == ["p0_0_0", "p0_1_0", "p1_0_0", "p1_1_0"]
    assert all(t["status"] == "success" and t["global_steps"] == 1 for t in batch.tags)
    listed = tq.kv_list("train")["train"]
    assert "p0" not in listed and "p1" not in listed and listed["p2"]["status"] == "pending"
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["prompts", "responses", "uid"])
    assert data["prompts"].to_padded_tensor(padding=0).shape[0] == 4
    assert list(data["uid"]) == [k.split("_")[0] for k in batch.keys]
    assert metrics == {}
    tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)  # as the trainer does after
    assert set(tq.kv_list("train")["train"]) == {"p2"}


def test_readme_shows_verls_transferqueue_path_as_it_is(server, monkeypatch):
    """The README's verl section tells a verl user how verl's own
    TransferQueue path runs on tdock, and what it names exists: the
    functions of tdock.transferqueue it calls (install()), the link to
    docs/transferqueue.md, the server flag it names (--data_dir, in
    docs/server.md), the settings of transfer_queue.tdock it names (init
    accepts them), and TDOCK_ADDRESS, which init with no address reads:
    transfer_queue then works on that server."""
    import re
    readme = (REPO / "README.md").read_text()
    found = re.search(r"^## verl\b.*?(?=^## )", readme, re.S | re.M)
    assert found, "README.md has no '## verl' section"
    section = found.group(0)
    called = set(re.findall(r"`tdock\.transferqueue\.(\w+)\(", section))
    assert "install" in called and all(callable(getattr(tqm, f, None)) for f in called)
    assert "](docs/transferqueue.md)" in section and (REPO / "docs/transferqueue.md").exists()
    for flag in re.findall(r"`(--\w+)`", section):
        assert f"`{flag}`" in (REPO / "docs/server.md").read_text(), flag
    settings = re.findall(r"`transfer_queue\.tdock\.(\w+)`", section)
    assert settings
    tqm.close()
    tqm.init({"tdock": {s: server for s in settings}})  # an unknown one is refused
    tqm.close()
    assert "`TDOCK_ADDRESS`" in section
    monkeypatch.setenv("TDOCK_ADDRESS", server)
    tqm.install()
    import transfer_queue
    transfer_queue.init()
    try:
        assert isinstance(transfer_queue.kv_list(), dict)
    finally:
        tqm.close()
