"""A dock spec from verl's trainer config (tdock.verl.dock_spec).

Reads the keys of verl's ppo_trainer / ppo_megatron_trainer config that
decide the data's shape, from an OmegaConf DictConfig or a plain dict:

| spec | from verl's config |
|---|---|
| num_prompts | data.train_batch_size |
| n_samples_per_prompt | actor_rollout_ref.rollout.n |
| prompt_ids / response_ids max_len | data.max_prompt_length / max_response_length |
| actor replicas (model-parallel peers) | actor.megatron's tensor × pipeline × context parallel sizes, else the actor's Ulysses size (actor.ulysses_sequence_parallel_size when above 1, else actor.fsdp_config's) |
| actor dp_size | trainer.n_gpus_per_node × trainer.nnodes / replicas |
| actor dispatch_size (a round = one mini-batch) | actor.ppo_mini_batch_size × n / dp_size |
| actor micro_batch | use_dynamic_bsz: max_tokens = ppo_max_token_len_per_gpu × ulysses size; else max_rows = ppo_micro_batch_size_per_gpu |
"""

from __future__ import annotations

from typing import Any, Mapping

from tdock import errors, spec as spec_mod

_REQUIRED = object()
_ACTOR = "actor_rollout_ref.actor."


def _at(config: Any, path: str, default: Any = _REQUIRED) -> Any:
    """config's value at the dotted `path`; `default` when a key on the way
    is absent or the value is null (verl's "unset")."""
    node = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node or node[part] is None:
            if default is _REQUIRED:
                raise errors.InvalidArgument(
                    f"tdock.verl.dock_spec: verl's config has no value at {path}")
            return default
        node = node[part]
    return node


def _count(config: Any, path: str, default: Any = _REQUIRED) -> int:
    """A positive integer of the config (numpy's and OmegaConf's pass)."""
    value = spec_mod._int(_at(config, path, default), f"verl config {path}")
    if value < 1:
        spec_mod._fail(f"verl config {path}", f"must be at least 1, got {value}")
    return value


def _divide(total: int, by: int, what: str) -> int:
    if total % by:
        raise errors.InvalidArgument(f"tdock.verl.dock_spec: {what}: {total} is not "
                                     f"divisible by {by}")
    return total // by


def _replicas(config: Any) -> int:
    """The model-parallel peers of one data-parallel rank of the actor."""
    if isinstance(_at(config, _ACTOR + "megatron", None), Mapping):
        return (_count(config, _ACTOR + "megatron.tensor_model_parallel_size", 1)
                * _count(config, _ACTOR + "megatron.pipeline_model_parallel_size", 1)
                * _count(config, _ACTOR + "megatron.context_parallel_size", 1))
    return _ulysses(config)


def _ulysses(config: Any) -> int:
    """The actor's Ulysses sequence-parallel size as verl's FSDPActorConfig
    settles it: the older actor-level key when above 1, else fsdp_config's."""
    legacy = _count(config, _ACTOR + "ulysses_sequence_parallel_size", 1)
    if legacy > 1:
        return legacy
    return _count(config, _ACTOR + "fsdp_config.ulysses_sequence_parallel_size", 1)


def _micro_batch(config: Any) -> dict:
    sp = _ulysses(config)
    if spec_mod._bool(_at(config, _ACTOR + "use_dynamic_bsz", False),
                      "verl config actor_rollout_ref.actor.use_dynamic_bsz"):
        return {"max_tokens": _count(config, _ACTOR + "ppo_max_token_len_per_gpu") * sp,
                "same_count_across_ranks": True}
    rows = _count(config, _ACTOR + "ppo_micro_batch_size_per_gpu")
    longest = (_count(config, "data.max_prompt_length")
               + _count(config, "data.max_response_length"))
    return {"max_tokens": rows * longest, "max_rows": rows, "same_count_across_ranks": True}


# The keys verl's trainer and workers write per row, by name: per-token
# float32 values (as long as a response at most) and one-value scores.
_PER_TOKEN = ("old_log_probs", "ref_log_prob", "rollout_log_probs", "advantages",
              "returns", "values", "token_level_scores", "token_level_rewards",
              "rm_scores", "entropys")
_PER_ROW = ("score", "acc")


def _known_columns(config: Any, names: Any) -> dict:
    """A columns map from a list of verl's key names (a map passes as is)."""
    if isinstance(names, Mapping):
        return dict(names)
    if not spec_mod._is_list(names):
        spec_mod._fail("tdock.verl.dock_spec columns",
                       f"expected a map or a list of verl's key names, got "
                       f"{spec_mod._type_name(names)}")
    out = {}
    for i, name in enumerate(names):
        name = spec_mod._str(name, f"tdock.verl.dock_spec columns[{i}]")
        if name in _PER_TOKEN:
            out[name] = {"dtype": "float32",
                         "max_len": _count(config, "data.max_response_length")}
        elif name in _PER_ROW:
            out[name] = {"dtype": "float32", "max_len": 1}
        else:
            spec_mod._fail(f"tdock.verl.dock_spec columns[{i}]",
                           f"'{name}' is none of verl's keys tdock knows "
                           f"({', '.join(_PER_TOKEN + _PER_ROW)}); give its settings in a "
                           "map instead")
    return out


def dock_spec(config: Any, *, name: str = "verl", columns: Any = None,
              consumers: Mapping | None = None, trainer: bool = False,
              **keys: Any) -> dict:
    """The dock spec (a dict) of a verl job: see the module comment. Columns
    prompt_ids, response_ids, uid, and `columns`' own (a map of column
    settings, or a list of verl's key names: per-token float32 values such
    as old_log_probs and advantages, one-value scores such as score);
    consumers "rollout"
    (prompt_ids, a whole step per Get, as verl's generate_sequences takes
    its batch) and "actor" (balanced whole groups, `pad: repeat` so that a
    round's shares have equal rows when it forms, groups dropped or uneven:
    verl's engines step every rank together, and an empty share gives a rank
    nothing to step with; the columns tdock makes plus "score" when
    `columns` has it), each
    updated key by key by `consumers`' entry of that name, and
    `consumers`' other entries; with `trainer`, a consumer "trainer" that
    reads every column, a whole step per Get (the driver's view for verl's
    metrics: a step is released only once it has read it); `keys`: other
    top-level spec keys
    (steps_in_flight, ...). Checked as the server checks a spec's values
    before it is returned."""
    prompts = _count(config, "data.train_batch_size")
    n = _count(config, "actor_rollout_ref.rollout.n")
    replicas = _replicas(config)
    world = _count(config, "trainer.n_gpus_per_node") * _count(config, "trainer.nnodes")
    dp = _divide(world, replicas, "trainer.n_gpus_per_node × nnodes over the actor's "
                                  "model-parallel size")
    per_rank = n * _divide(_count(config, _ACTOR + "ppo_mini_batch_size"), dp,
                           "actor.ppo_mini_batch_size (prompts) over the data-parallel size")
    out_columns = {
        "prompt_ids": {"dtype": "int32", "max_len": _count(config, "data.max_prompt_length")},
        "response_ids": {"dtype": "int32",
                         "max_len": _count(config, "data.max_response_length")},
        "uid": {"dtype": "string"},
        **_known_columns(config, columns or {})}
    reads = ["prompt_ids", "response_ids", "uid"] + (["score"] if "score" in out_columns
                                                     else [])
    out_consumers = {
        "rollout": {"columns": ["prompt_ids"], "whole_groups": True,
                    "dispatch_size": prompts * n},
        "actor": {"columns": reads, "whole_groups": True, "policy": "balanced",
                  "dp_size": dp, "dispatch_size": per_rank, "pad": "repeat",
                  "micro_batch": _micro_batch(config)}}
    if replicas > 1:
        out_consumers["actor"]["replicas"] = replicas
    if trainer:
        out_consumers["trainer"] = {"columns": list(out_columns),
                                    "dispatch_size": prompts * n}
    for consumer, settings in dict(consumers or {}).items():
        out_consumers[consumer] = {**out_consumers.get(consumer, {}), **dict(settings)}
    out = {"name": name, "num_prompts": prompts, "n_samples_per_prompt": n,
           "length_columns": ["prompt_ids", "response_ids"], "columns": out_columns,
           "consumers": out_consumers, **keys}
    spec_mod.dock_spec(out)
    return out
