"""Errors: server failures arrive as tdock.errors.* with the server's message;
bad arguments are refused before anything is sent, naming what was wrong, and
change nothing."""

import numpy as np
import pytest

import tdock
from conftest import REPO, grpo_spec


def test_server_errors_keep_code_and_message(client, dock_name):
    with pytest.raises(tdock.errors.NotFound, match=f"dock 'no_such_{dock_name}'"):
        client.dock(f"no_such_{dock_name}").status()
    dock = client.create_dock(grpo_spec(dock_name))
    # The same spec again is accepted (workers may all create the dock)...
    assert client.create_dock(grpo_spec(dock_name)).name == dock_name
    # ... a different one under the same name is not.
    with pytest.raises(tdock.errors.AlreadyExists) as e:
        client.create_dock(grpo_spec(dock_name, prompts=8))
    assert dock_name in e.value.message and e.value.code.name == "ALREADY_EXISTS"
    with pytest.raises(tdock.errors.NotFound, match="consumer 'critic'"):
        dock.get("critic", wait=0)
    with pytest.raises(tdock.errors.FailedPrecondition, match="step 3"):
        dock.release(3)
    # A whole-group consumer whose dispatch size splits groups: the server's
    # validation names it.
    bad = grpo_spec(f"{dock_name}_bad", consumers={
        "reward": {"columns": ["response_ids"], "whole_groups": True,
                   "dispatch_size": 3}})
    with pytest.raises(tdock.errors.InvalidArgument, match="reward"):
        client.create_dock(bad)


def test_put_arguments_are_checked_before_sending(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2))
    cases = [
        ({"nope": [[1], [2]]}, "no column 'nope'"),
        ({"prompt_ids": [np.array([1], np.int64)] * 2}, "int64 do not fit"),
        ({"prompt_ids": [[1]]}, "1 rows of values for 2 rows"),
        ({"prompt_ids": [np.zeros((2, 2), np.int32)] * 2}, "expected a 1-D array"),
        ({"prompt_ids": tdock.Padded(np.zeros((2, 3), np.int32), [1, 4])},
         r"lengths must be in \[0, 3\]"),
        ({"prompt_ids": [[2**40], [1]]}, "row 0: values outside"),
        ({"prompt_ids": [[1.5], [1]]}, "row 0: fractional values"),
        ({"prompt_ids": ["x", "y"]}, "row 0: expected an array, a tensor or a list, got str"),
        ({"prompt_ids": [["x"], ["y"]]}, "row 0: expected numbers"),
        ({}, "no columns"),
    ]
    for columns, message in cases:
        with pytest.raises(tdock.errors.InvalidArgument, match=message):
            dock.put(0, [0, 1], columns)
    assert dock.status().steps == []  # nothing was written


def test_a_step_that_is_not_an_integer_is_refused_by_every_call(client, dock_name):
    """put, get, read and release refuse a step that is not an integer
    (1.5, "0", True; a negative one too) before sending, naming the call and
    the step with its type, where protobuf raised a bare TypeError (or, for
    True, took step 1); an integer of numpy's is a step. Nothing changes."""
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2))
    for step in (1.5, "0", True):
        shown = f"{step!r} \\({type(step).__name__}\\)"
        calls = {
            "put": lambda: dock.put(step, [0, 1], {"prompt_ids": [[1], [2]]}),
            "get": lambda: dock.get("reward", step=step, wait=0),
            "read": lambda: dock.read(step, [0]),
            "release": lambda: dock.release(step),
        }
        for name, call in calls.items():
            with pytest.raises(tdock.errors.InvalidArgument,
                               match=f"{name}: step must be an integer, got {shown}"):
                call()
    with pytest.raises(tdock.errors.InvalidArgument, match="put: step -1 is negative"):
        dock.put(-1, [0, 1], {"prompt_ids": [[1], [2]]})
    assert dock.status().steps == []  # nothing was written
    assert dock.put(np.int64(0), [0, 1], {"prompt_ids": [[1], [2]]}).rows == 2


def test_server_rejects_a_bad_put_and_keeps_state(client, dock_name):
    dock = client.create_dock(grpo_spec(dock_name, prompts=1, n=2))
    with pytest.raises(tdock.errors.InvalidArgument, match="row 5"):
        dock.put(0, [0, 5], {"prompt_ids": [[1], [2]]})
    with pytest.raises(tdock.errors.InvalidArgument, match="rewards"):
        dock.put(0, [0, 1], {"rewards": [[1.0, 2.0], [3.0]]})  # max_len 1
    assert dock.status().steps == []


def test_spec_errors_name_the_key_path(client, tmp_path):
    cases = [
        ({"name": "x", "colums": {}}, "colums: unknown key 'colums'"),
        ({"name": "x", "columns": {"a": {"dtype": "int33"}}},
         "columns.a.dtype: unknown dtype 'int33'"),
        ({"name": "x", "columns": {"a": {}}}, "columns.a: missing key 'dtype'"),
        ({"name": "x", "consumers": {"c": {"policy": "lifo"}}},
         "consumers.c.policy: unknown policy 'lifo'"),
        ({"name": "x", "num_prompts": "many"}, "num_prompts: expected an integer"),
        ({"name": "x", "consumers": {"c": {"micro_batch": {"padded": True}}}},
         "consumers.c.micro_batch: missing key 'max_tokens'"),
        ([1, 2], "expected a dock spec map"),
    ]
    for spec, message in cases:
        with pytest.raises(tdock.errors.InvalidArgument, match=message):
            client.create_dock(spec)
    two = tmp_path / "two.yaml"
    two.write_text("docks:\n  - {name: a}\n  - {name: b}\n")
    with pytest.raises(tdock.errors.InvalidArgument, match="holds 2 docks"):
        client.create_dock(str(two))
    with pytest.raises(tdock.errors.InvalidArgument, match="cannot read"):
        client.create_dock(str(tmp_path / "missing.yaml"))


def test_yaml_file_matches_the_server_format(client):
    dock = client.create_dock(str(REPO / "examples" / "quickstart.yaml"))
    try:
        spec = dock.spec
        assert spec.num_prompts == 8 and spec.n_samples_per_prompt == 4
        by_name = {c.name: c for c in spec.consumers}
        assert by_name["actor_logprob"].micro_batch.max_tokens == 2048
        assert by_name["actor_logprob"].dp_size == 2
        assert [c.name for c in spec.columns][:2] == ["prompt_ids", "response_ids"]
    finally:
        client.delete_dock(dock.name)


def test_client_arguments(server):
    with pytest.raises(tdock.errors.InvalidArgument, match="timeout"):
        tdock.Client(server, timeout=0)
    with pytest.raises(tdock.errors.InvalidArgument, match="tls"):
        tdock.Client(server, tls="yes")
    with pytest.raises(tdock.errors.InvalidArgument, match="cert and key"):
        tdock.Client(server, tls=tdock.Tls(cert="c.pem"))
    with tdock.Client(server) as c, pytest.raises(tdock.errors.InvalidArgument,
                                                  match="wait must be"):
        c.dock("x").get("c", wait=-1)


def test_unreachable_server_is_unavailable():
    with tdock.Client("127.0.0.1:1", timeout=2) as c:
        with pytest.raises(tdock.errors.Unavailable):
            c.list_docks()
