"""tdock.verl without glue, against verl 0.9.1's own code: the dock spec
from verl's trainer config, the batch filled so that verl's engines cut
tdock's micro-batch plan (verl's prepare_micro_batches and train_mini_batch's
iterator, unmodified), and worker_method, which fetches a rank's batch, runs
the method and writes its outputs back."""

import importlib.util
import pathlib
import pickle
import sys
import types

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

import tdock  # noqa: E402
from tdock import verl as tv  # noqa: E402
from conftest import REPO, grpo_spec  # noqa: E402

VERL = pathlib.Path(verl.__file__).parent
LENGTHS = [30, 2, 3, 25, 4, 5, 20, 2]  # responses; rank 0's plan is 1 + 3 rows


def verl_engine_utils():
    """verl.workers.engine.utils, whose prepare_micro_batches every verl
    0.9.1 engine calls, run from its own file. The __init__ files of
    verl.workers.engine and verl.utils.dataset import the GPU stack (peft,
    datasets) this environment lacks, so those two packages are entered
    without them while it loads (and restored after); the module and all
    it imports are verl's, unmodified."""
    packages = ("verl.workers.engine", "verl.utils.dataset")
    saved = {name: sys.modules.get(name) for name in (*packages, "verl.workers.engine.utils")}
    try:
        for name in packages:
            bare = types.ModuleType(name)
            bare.__path__ = [str(VERL.joinpath(*name.split(".")[1:]))]
            sys.modules[name] = bare
        spec = importlib.util.spec_from_file_location(
            "verl.workers.engine.utils", VERL / "workers/engine/utils.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        for name, module_before in saved.items():
            if module_before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module_before


def make_dock(client, name, **actor):
    dock = client.create_dock(grpo_spec(
        name, prompts=4, n=2,
        columns={"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
                 "uid": {"dtype": "string"}, "score": {"dtype": "float32", "max_len": 1},
                 "old_log_probs": {"dtype": "float32"}},
        consumers={"actor": {"columns": ["prompt_ids", "response_ids", "uid", "score"],
                             "dp_size": 2, "dispatch_size": 4, "policy": "balanced",
                             "whole_groups": True,
                             "micro_batch": {"max_tokens": 40,
                                             "same_count_across_ranks": True},
                             **actor},
                   "check": {"columns": ["old_log_probs"]}}))
    dock.put(0, range(8), {
        "prompt_ids": [np.arange(1, 3, dtype=np.int32) + 10 * r for r in range(8)],
        "response_ids": [np.arange(1, 1 + n, dtype=np.int32) for n in LENGTHS],
        "uid": [f"g{r // 2}" for r in range(8)], "score": np.arange(8, dtype=np.float32)})
    return dock


def test_verls_engines_cut_tdocks_plan(client, dock_name):
    """to_tensordict(engine_plan=True): verl's own prepare_micro_batches
    cuts the batch into the server's micro-batches, in order, and keeps
    them whole through train_mini_batch's iterator; DataProto's
    to_tensordict carries the same settings from meta_info. Micro-batches
    shorter than the longest are filled with one-token rows that no loss
    counts (response_mask 0, marked is_padding, a uid each), and
    put_columns writes only the real rows."""
    engine = verl_engine_utils()
    dock = make_dock(client, dock_name)
    batches = [dock.get("actor", rank=r, step=0, wait=10) for r in (0, 1)]
    counts = [[mb.end - mb.begin for mb in b.micro_batch_info] for b in batches]
    assert len(set(counts[0])) > 1, counts  # the plan fills rank 0's micro-batches
    for b in batches:
        plain = tv.to_tensordict(b)
        filled = tv.to_tensordict(b, engine_plan=True)
        for data in (filled, tv.to_data_proto(b, engine_plan=True).to_tensordict()):
            [mini] = list(tu.make_iterator(
                data, mini_batch_size=len(data) // tu.get(data, "num_mini_batch"), epochs=1,
                seed=1, dataloader_kwargs={}))
            micro, indices = engine.prepare_micro_batches(mini)
            assert indices is None  # outputs come back in the batch's order
            assert len(micro) == len(b.micro_batch_info)
            for mb, info in zip(micro, b.micro_batch_info):
                real = ~mb["is_padding"]
                assert torch.equal(mb["input_ids"][real], plain["input_ids"][info.begin:info.end])
                assert int(mb["attention_mask"][real].sum()) == info.tokens
                pads = mb["is_padding"]
                assert (mb["response_mask"][pads].sum() == 0).item()
                assert mb["attention_mask"][pads].sum(-1).tolist() == [1] * int(pads.sum())
                uids = [u for u, p in zip(mb["uid"], pads.tolist()) if p]
                assert len(set(uids)) == len(uids) and all(u.startswith("tdock-pad-") for u in uids)
        proto = tv.to_data_proto(b, engine_plan=True)
        width = proto.batch["responses"].shape[1]
        proto.batch["old_log_probs"] = -proto.batch["responses"].float() / 8
        assert len(proto) == len(b.micro_batch_info) * max(
            mb.end - mb.begin for mb in b.micro_batch_info)
        dock.put(0, b.rows, tv.put_columns(proto, ["old_log_probs"]))
        assert width >= max(LENGTHS[r] for r in b.rows)
    read = dock.read(0, range(8), ["old_log_probs"])
    for r in range(8):
        assert np.array_equal(read.row("old_log_probs", r),
                              -np.arange(1, 1 + LENGTHS[r], dtype=np.float32) / 8)


class Worker:
    """A verl-style worker: its rank, its replica, a weight."""

    def __init__(self, rank, replica=0):
        self.rank, self.replica, self.calls = rank, replica, []

    @tv.worker_method("actor", outputs=["old_log_probs"], replica="replica")
    def update(self, data: TensorDict, scale: float = 1.0) -> TensorDict:
        self.calls.append(data)
        out = TensorDict({"old_log_probs": -data["responses"].float() * scale,
                          "entropy": torch.zeros(len(data))}, batch_size=[len(data)])
        tu.assign_non_tensor(out, metrics={"actor/rows": len(data)})
        return out


def test_worker_method_fetches_runs_and_writes_back(client, dock_name):
    """A call with a BatchRef (pickled, as Ray sends it) Gets the worker's
    rank's share and passes it as verl's engines take it; replica 0 writes
    the outputs to the rows (replica 1 of the same rank gets the same rows
    and writes nothing); the call returns the output less the written key,
    its metrics joined by tdock's balance metrics, and what was done. A
    call without a BatchRef is the method as it is."""
    dock = make_dock(client, dock_name, replicas=2)
    ref = pickle.loads(pickle.dumps(tv.BatchRef(dock, step=0)))
    peer = Worker(rank=0, replica=1)
    seen = peer.update(ref)
    assert seen["tdock"]["columns"] == []
    assert not any("old_log_probs" in row.written for row in dock.list_rows(0))
    results = [Worker(rank=r).update(ref, scale=2.0) for r in (0, 1)]
    assert results[0]["tdock"]["rows"] == seen["tdock"]["rows"]
    for out in results:
        assert "old_log_probs" not in out.keys() and "entropy" in out.keys()
        assert out["tdock"]["columns"] == ["old_log_probs"] and out["tdock"]["step"] == 0
        assert out["metrics"]["actor/rows"] == len(out)
        assert out["metrics"]["global_seqlen/balanced_max"] >= \
            out["metrics"]["global_seqlen/balanced_min"] > 0
    assert sorted(r for out in results for r in out["tdock"]["rows"]) == list(range(8))
    check = dock.get("check", step=0, count=8, wait=10)
    for i, r in enumerate(check.rows.tolist()):
        assert np.array_equal(check.row("old_log_probs", i),
                              -2.0 * np.arange(1, 1 + LENGTHS[r], dtype=np.float32))
    plain = Worker(rank=0).update(TensorDict({"responses": torch.ones(2, 3)}, batch_size=[2]))
    assert plain["old_log_probs"].shape == (2, 3)


class Trainer:
    """A verl-style worker whose method only trains: it writes nothing."""

    def __init__(self, rank, replica=0, fails=False):
        self.rank, self.replica, self.fails = rank, replica, fails

    @tv.worker_method("actor", replica="replica")
    def update(self, data: TensorDict) -> TensorDict:
        if self.fails:
            raise RuntimeError("the update failed")
        return TensorDict({}, batch_size=[len(data)])


def test_worker_method_acknowledges_a_lease_it_writes_nothing_for(client, dock_name):
    """A method of a leased consumer with no outputs to write (an update
    that only trains) acknowledges its batch's lease when it returns, as a
    method with outputs does with their write, so the lease does not expire
    and hand its rows out to be trained on again. Replica 1 of a share
    leaves that to replica 0 (they share the lease), when it returns and
    when it raises."""
    dock = make_dock(client, dock_name, replicas=2, lease_ms=600_000)
    ref = tv.BatchRef(dock, step=0)
    Trainer(rank=0, replica=1).update(ref)
    assert dock.status().leases["actor"].in_flight == 1
    Trainer(rank=0).update(ref)
    assert dock.status().leases["actor"].in_flight == 0
    with pytest.raises(RuntimeError, match="the update failed"):
        Trainer(rank=1, replica=1, fails=True).update(ref)
    (held,) = dock.leases("actor")
    assert held.rank == 1
    Trainer(rank=1).update(tv.BatchRef(dock, step=0, round=held.round))
    assert dock.status().leases["actor"].in_flight == 0


class Failing:
    """A verl-style worker whose method fails: it runs `first`, then raises
    `error`, or (with `error` None) returns an output with one row too
    many, which the write refuses. It keeps the batch it was given."""

    def __init__(self, rank, error, first=lambda: None):
        self.rank, self.error, self.first, self.given = rank, error, first, None

    @tv.worker_method("actor", outputs=["old_log_probs"])
    def update(self, data: TensorDict) -> TensorDict:
        self.given = data
        self.first()
        if self.error is not None:
            raise self.error
        return TensorDict({"old_log_probs": torch.zeros(len(data) + 1, 1)},
                          batch_size=[len(data) + 1])


def test_worker_method_hands_back_a_lease_when_the_method_raises(client, dock_name):
    """A call whose method raises, or whose output the write refuses, nacks
    its batch's lease before the exception reaches the caller (the very
    object raised, with nothing added): the rank's next Get, waiting far
    less than lease_ms, is handed the same share again (same round, same
    rows) under a new lease, and nothing was written to the rows."""
    dock = make_dock(client, dock_name, lease_ms=600_000)
    ref = tv.BatchRef(dock, step=0)
    error = RuntimeError("the update failed")
    for worker, raised in ((Failing(1, error), RuntimeError),
                           (Failing(1, None), tdock.errors.InvalidArgument)):
        with pytest.raises(raised) as caught:
            worker.update(ref)
        if worker.error is not None:
            assert caught.value is error and not getattr(error, "__notes__", None)
        assert dock.leases("actor") == []
        again = dock.get("actor", rank=1, step=0, wait=10)
        assert not again.timed_out and again.round == 0 and again.lease is not None
        assert torch.equal(tv.to_tensordict(again, engine_plan=True)["input_ids"],
                           worker.given["input_ids"])
        dock.nack(again)
    assert not any("old_log_probs" in row.written for row in dock.list_rows(0))


def test_worker_method_keeps_the_error_when_its_nack_fails(client, dock_name):
    """When the lease of a call whose method raises has already ended (here
    handed back by nack_all while the method ran), the nack fails; the
    method's exception still reaches the caller, the nack's failure noted
    on it (Python 3.11+) or warned."""
    dock = make_dock(client, dock_name, lease_ms=600_000)
    error = RuntimeError("the update failed")
    worker = Failing(1, error, first=lambda: dock.nack_all("actor"))
    if sys.version_info >= (3, 11):
        with pytest.raises(RuntimeError) as caught:
            worker.update(tv.BatchRef(dock, step=0))
        (note,) = caught.value.__notes__
    else:
        with pytest.raises(RuntimeError) as caught, pytest.warns(UserWarning) as warned:
            worker.update(tv.BatchRef(dock, step=0))
        (note,) = [str(w.message) for w in warned]
    assert caught.value is error
    assert "could not hand back lease" in note and "LeaseEnded: FAILED_PRECONDITION" in note, note


def test_worker_method_data_proto_rollout(client, dock_name):
    """layout="data_proto": a rollout method takes a batch of prompts only
    (responses of width 0) as a DataProto and returns verl's rollout output;
    "responses" goes back to the response column, cut to each row's length
    from the output's attention_mask, "uid" to the string column; the
    DataProto returned keeps what was not written, and meta_info carries
    the metrics and what was done. Token ids that do not fit the column
    (the layout widens them to int64) are refused, nothing written."""
    dock = client.create_dock(grpo_spec(
        dock_name, prompts=2, n=2,
        columns={"prompt_ids": {"dtype": "int32"}, "response_ids": {"dtype": "int32"},
                 "uid": {"dtype": "string"}},
        consumers={"rollout": {"columns": ["prompt_ids"], "dispatch_size": 4},
                   "check": {"columns": ["response_ids", "uid"], "dispatch_size": 4}}))
    dock.put(0, range(4), {"prompt_ids": [np.arange(1, 2 + r, dtype=np.int32) for r in range(4)]})

    class Rollout:
        @tv.worker_method("rollout", outputs=["responses", "uid"], layout="data_proto")
        def generate(self, prompts):
            assert prompts.batch["responses"].shape == (4, 0)
            lengths = torch.tensor([3, 1, 2, 4])
            mask = (torch.arange(4)[None, :] < lengths[:, None]).long()
            return DataProto.from_dict(
                tensors={"responses": (torch.arange(4)[None, :] + 10) * mask,
                         "attention_mask": torch.cat([prompts.batch["attention_mask"], mask], 1),
                         "rm_scores": lengths.float()},
                non_tensors={"uid": np.array(list("aabb"), dtype=object)},
                meta_info={"metrics": {"rollout/n": 4}})

    out = Rollout().generate(tv.BatchRef(dock, step=0))
    assert list(out.batch.keys()) == ["attention_mask", "rm_scores"]
    assert "uid" not in out.non_tensor_batch
    assert out.meta_info["metrics"] == {"rollout/n": 4}  # no balance statistics to add
    assert out.meta_info["tdock"]["columns"] == ["response_ids", "uid"]
    check = dock.get("check", step=0, wait=10)
    assert [check.row("response_ids", i).tolist() for i in range(4)] == \
        [[10, 11, 12], [10], [10, 11], [10, 11, 12, 13]]
    assert check.cells("uid") == list("aabb")

    class TooWide:
        @tv.worker_method("rollout", outputs=["responses"], layout="data_proto")
        def generate(self, prompts):
            return DataProto.from_dict(tensors={
                "responses": torch.full((4, 2), 2 ** 40),
                "attention_mask": torch.cat([prompts.batch["attention_mask"],
                                             torch.ones(4, 2, dtype=torch.int64)], 1)})
    dock.put(1, range(4), {"prompt_ids": [np.arange(1, 2, dtype=np.int32)] * 4})
    with pytest.raises(tdock.errors.InvalidArgument,
                       match=r"token ids 1099511627776\.\.1099511627776 do not fit column "
                             r"'response_ids' \(int32\)"):
        TooWide().generate(tv.BatchRef(dock, step=1))
    assert not any("response_ids" in row.written for row in dock.list_rows(1))


def test_worker_method_bad_input_is_named_and_writes_nothing(client, dock_name):
    """Each bad input is refused with what was wrong, and nothing is
    written: an unknown layout (at decoration), two BatchRefs, a BatchRef
    without a dock, a worker without the rank attribute of a consumer with
    two ranks (these before any Get), an output of the wrong row count or
    without the key to write."""
    with pytest.raises(tdock.errors.InvalidArgument, match="unknown layout 'proto'"):
        tv.worker_method("actor", layout="proto")
    dock = make_dock(client, dock_name)
    ref = tv.BatchRef(dock, step=0)
    with pytest.raises(tdock.errors.InvalidArgument, match="2 BatchRefs"):
        Worker(0).update(ref, scale=ref)
    with pytest.raises(tdock.errors.InvalidArgument, match="dock must be a tdock Dock, got str"):
        Worker(0).update(tv.BatchRef("verl", step=0))

    class NoRank:
        @tv.worker_method("actor")
        def update(self, data):
            return data
    with pytest.raises(tdock.errors.InvalidArgument, match="no attribute 'rank' for the rank"):
        NoRank().update(ref)
    assert not any(row.taken for row in dock.list_rows(0))  # no Get was made

    class Wrong:
        rank = 0

        @tv.worker_method("actor", outputs=["old_log_probs"])
        def short(self, data):
            return TensorDict({"old_log_probs": torch.zeros(1, 4)}, batch_size=[1])

        @tv.worker_method("actor", outputs=["old_log_probs"])
        def missing(self, data):
            return TensorDict({"values": torch.zeros(len(data), 4)}, batch_size=[len(data)])
    with pytest.raises(tdock.errors.InvalidArgument, match="output 'old_log_probs' has 1 rows"):
        Wrong().short(tv.BatchRef(dock, step=0))
    with pytest.raises(tdock.errors.InvalidArgument, match="no key 'old_log_probs'"):
        Wrong().missing(tv.BatchRef(dock, step=0, round=0))
    assert not any("old_log_probs" in row.written for row in dock.list_rows(0))


def generated(name):
    return OmegaConf.load(VERL / "trainer/config" / f"_generated_{name}.yaml")


def test_dock_spec_from_verls_config(client, dock_name):
    """verl's generated Megatron config (TP 2 on 8 GPUs, dynamic batch
    sizes) and FSDP config (Ulysses 2, fixed micro-batches) give the sizes
    verl would use; numpy values in a plain dict config read the same; the
    spec is accepted by the server."""
    mega = OmegaConf.merge(generated("ppo_megatron_trainer"), OmegaConf.from_dotlist([
        "data.train_batch_size=16", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"]))
    spec = tv.dock_spec(mega, name=dock_name, columns=["score", "old_log_probs"], trainer=True)
    assert (spec["num_prompts"], spec["n_samples_per_prompt"]) == (16, 4)
    actor = spec["consumers"]["actor"]
    assert (actor["dp_size"], actor["replicas"], actor["dispatch_size"]) == (4, 2, 8)
    assert actor["micro_batch"] == {"max_tokens": 4096, "same_count_across_ranks": True}
    assert actor["columns"] == ["prompt_ids", "response_ids", "uid", "score"]
    assert spec["columns"]["old_log_probs"] == {"dtype": "float32", "max_len": 512}
    assert spec["consumers"]["rollout"]["dispatch_size"] == 64  # the step, as verl generates
    assert spec["consumers"]["trainer"] == {
        "columns": ["prompt_ids", "response_ids", "uid", "score", "old_log_probs"],
        "dispatch_size": 64}
    assert client.create_dock(spec).spec.consumers[1].replicas == 2
    fsdp = OmegaConf.merge(generated("ppo_trainer"), OmegaConf.from_dotlist([
        "data.train_batch_size=8", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]))
    actor = tv.dock_spec(fsdp, consumers={"actor": {"policy": "fifo"}})["consumers"]["actor"]
    assert (actor["dp_size"], actor["replicas"], actor["dispatch_size"]) == (4, 2, 2)
    assert actor["policy"] == "fifo"
    assert actor["micro_batch"] == {"max_tokens": 2 * 1024, "max_rows": 2,
                                    "same_count_across_ranks": True}
    as_numpy = {"data": {"train_batch_size": np.int64(16), "max_prompt_length": np.int32(512),
                         "max_response_length": np.int64(512)},
                "actor_rollout_ref": {"rollout": {"n": np.int64(4)}, "actor": {
                    "megatron": {"tensor_model_parallel_size": np.int64(2)},
                    "ppo_mini_batch_size": np.int64(8), "use_dynamic_bsz": np.bool_(True),
                    "ppo_max_token_len_per_gpu": np.int64(4096)}},
                "trainer": {"n_gpus_per_node": np.int64(8), "nnodes": np.int64(1)}}
    assert tv.dock_spec(as_numpy, name=dock_name, columns=["score", "old_log_probs"],
                        trainer=True) == spec


@pytest.mark.parametrize("change,message", [
    ([], r"no value at actor_rollout_ref\.actor\.ppo_micro_batch_size_per_gpu"),
    (["trainer.n_gpus_per_node=6", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4"],
     "model-parallel size: 6 is not divisible by 4"),
    (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "data.train_batch_size='8'"],
     r"data\.train_batch_size: expected an integer, got '8' \(str\)"),
    (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=0"],
     r"rollout\.n: must be at least 1, got 0"),
    (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
      "actor_rollout_ref.actor.ppo_mini_batch_size=12"],
     r"ppo_mini_batch_size \(prompts\) over the data-parallel size: 12 is not divisible by 8"),
])
def test_dock_spec_names_what_is_wrong(change, message):
    """A config verl would not run with, or one tdock cannot shape, is
    refused naming the key."""
    config = OmegaConf.merge(generated("ppo_trainer"), OmegaConf.from_dotlist(change))
    with pytest.raises(tdock.errors.InvalidArgument, match=message):
        tv.dock_spec(config)


def test_dock_spec_columns_by_name_or_settings():
    """Columns are verl's key names or settings maps; a name tdock does not
    know is refused, naming it and the ones it knows."""
    config = OmegaConf.merge(generated("ppo_trainer"), OmegaConf.from_dotlist(
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]))
    spec = tv.dock_spec(config, columns={"reward_extra": {"dtype": "json"}})
    assert spec["columns"]["reward_extra"] == {"dtype": "json"}
    with pytest.raises(tdock.errors.InvalidArgument,
                       match=r"columns\[1\]: 'logits' is none of verl's keys.*old_log_probs"):
        tv.dock_spec(config, columns=["score", "logits"])
    with pytest.raises(tdock.errors.InvalidArgument, match="expected a map or a list"):
        tv.dock_spec(config, columns="score")


def test_example_glue_is_marked_and_at_most_ten_lines():
    """examples/verl_ray.py marks every line that exists only because tdock
    is used with "# tdock" (every line naming tdock, tv., tdock_ray or the
    dock is one), and there are at most ten."""
    lines = (REPO / "examples/verl_ray.py").read_text().splitlines()
    body = [line for line in lines[lines.index('"""', 1) + 1:]
            if line.strip() and not line.strip().startswith("#")]
    marked = [line for line in body if "# tdock" in line]
    for line in body:
        code = line.split("#")[0]
        if any(word in code for word in ("tdock", "tv.", "dock.", "dock =", "BatchRef")):
            assert line in marked, line
    assert 0 < len(marked) <= 10, marked
