"""Dock specs whose values come from numpy or OmegaConf (a verl config's
nodes) read as the same spec as plain Python values, on every spec path
(tdock.spec.dock_spec, load, consumer_spec, column_spec, and through the
server: create_dock, add_consumer, add_column); wrong values are named
with their type, so the string '2' no longer reads like the number 2."""

import numpy as np
import pytest

import tdock
from tdock import spec
from conftest import grpo_spec

omegaconf = pytest.importorskip("omegaconf")
OmegaConf = omegaconf.OmegaConf


def plain(name="d"):
    return grpo_spec(name, prompts=4, n=2, consumers={
        "actor": {"columns": ["prompt_ids", "response_ids"], "dp_size": 2,
                  "dispatch_size": 4, "policy": "balanced", "whole_groups": True,
                  "cost": {"a": 1.5, "b": 0.25},
                  "micro_batch": {"max_tokens": 64, "padded": True, "round_to": 8}}})


def numpy_values(name="d"):
    """plain()'s spec with every number, flag and list as numpy's."""
    s = plain(name)
    s["num_prompts"], s["n_samples_per_prompt"] = np.int64(4), np.int32(2)
    s["length_columns"] = np.array(["prompt_ids", "response_ids"])
    s["columns"]["response_ids"]["max_len"] = np.uint16(4096)
    actor = s["consumers"]["actor"]
    actor["dp_size"], actor["dispatch_size"] = np.int64(2), np.int8(4)
    actor["whole_groups"] = np.bool_(True)
    actor["cost"] = {"a": np.float32(1.5), "b": np.float64(0.25)}
    actor["micro_batch"] = {"max_tokens": np.int64(64), "padded": np.bool_(True),
                            "round_to": np.int16(8)}
    return s


def test_numpy_and_omegaconf_values_make_the_same_spec():
    """numpy scalars and arrays, and an OmegaConf DictConfig (ListConfig
    lists, an interpolation resolved) give the DockSpec plain values give."""
    want = spec.dock_spec(plain())
    assert spec.dock_spec(numpy_values()) == want
    conf = OmegaConf.create(plain())
    assert spec.dock_spec(conf) == want
    assert spec.load(conf) == [want]
    interpolated = OmegaConf.create({**plain(), "num_prompts": "${consumers.actor.dp_size}"})
    expected = spec.dock_spec(plain())
    expected.num_prompts = 2
    assert spec.dock_spec(interpolated) == expected
    assert spec.consumer_spec("actor", numpy_values()["consumers"]["actor"]) \
        == want.consumers[0]
    assert spec.column_spec("r", {"dtype": np.str_("float32"), "max_len": np.int64(1)}) \
        == spec.column_spec("r", {"dtype": "float32", "max_len": 1})


@pytest.mark.parametrize("value,message", [
    ("2", "num_prompts: expected an integer, got '2' (str)"),
    (np.float64(2.0), "num_prompts: expected an integer, got '2.0' (numpy.float64)"),
    (np.bool_(True), "num_prompts: expected an integer, got 'True' (numpy.bool"),
    (True, "num_prompts: expected an integer, got 'True' (bool)"),
])
def test_wrong_values_are_named_with_their_type(value, message):
    """A value of the wrong kind is named with its type; numpy's bool is
    no integer, as Python's is not."""
    with pytest.raises(tdock.errors.InvalidArgument, match=message.replace("(", r"\(")
                       .replace(")", r"\)").replace(".", r"\.")):
        spec.dock_spec({**plain(), "num_prompts": value})
    with pytest.raises(tdock.errors.InvalidArgument, match="expected true or false, got "
                       r"'1' \(numpy.int64\)"):
        spec.dock_spec({**plain(), "retain_steps": np.int64(1)})
    with pytest.raises(tdock.errors.InvalidArgument, match="expected a finite number, got "
                       r"'nan' \(numpy.float32\)"):
        spec.consumer_spec("c", {"cost": {"a": np.float32("nan")}}, "consumers.c")


def test_server_paths_take_omegaconf_and_numpy(client, dock_name):
    """create_dock takes a DictConfig, add_consumer and add_column numpy's
    values; what the server holds equals the plain spec's; a wrong value is
    refused before anything is sent, and the dock is unchanged."""
    dock = client.create_dock(OmegaConf.create(plain(dock_name)))
    reference = client.create_dock(plain(dock_name + "_plain"))
    try:
        theirs = reference.spec
        theirs.name = dock_name
        assert dock.spec == theirs
    finally:
        client.delete_dock(dock_name + "_plain")
    dock.add_column("score", {"dtype": np.str_("float32"), "max_len": np.int64(1)})
    dock.add_consumer("metrics", OmegaConf.create(
        {"columns": ["score"], "dispatch_size": 8}))
    dock.add_consumer("update", {"columns": np.array(["score"]),
                                 "dispatch_size": np.int32(8), "optional": np.bool_(True)})
    before = client.dock(dock_name).spec  # fetched anew
    names = [c.name for c in before.consumers]
    assert names == ["actor", "metrics", "update"]
    assert before.consumers[2].dispatch_size == 8 and before.consumers[2].optional
    with pytest.raises(tdock.errors.InvalidArgument,
                       match=r"dispatch_size: expected an integer, got '8' \(str\)"):
        dock.add_consumer("bad", {"columns": ["score"], "dispatch_size": "8"})
    assert client.dock(dock_name).spec == before
