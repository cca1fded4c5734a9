"""tdock.verl: batches in the layouts verl's algorithms take, and back.

    from tdock import verl as tv
    batch = dock.get("actor_update", rank=dp_rank)
    data = tv.to_data_proto(batch)             # verl.DataProto
    ... verl's compute_advantage / update_policy on `data` ...
    dock.put(batch.step, batch.rows, tv.put_columns(data, ["old_log_probs"]),
             ack=batch)
    metrics.update(tv.balance_metrics(batch))  # global_seqlen/balanced_max, ...
    micro, plan = tv.micro_batches(data, batch) # as verl's prepare_dynamic_batch

The layout (verl's after rollout): "prompts" left-padded, "responses"
right-padded, "input_ids" both side by side, "attention_mask",
"position_ids" (verl's: each row counting its real tokens from 0) and
"response_mask" (int64, 1 on real response tokens). Numeric columns of one
item per row become tensors of shape [rows]; other numeric columns are
right-padded to the responses' width (per-token values: log-probs,
advantages) or, when a row is longer, to their own longest row. String and
JSON columns (uid, data_source, extra_info) go to non_tensor_batch as object
arrays; the rows' keys and policy versions go there too, when the batch has
them: "tdock_key" (objects, "" for a row without one) and "tdock_version"
(int64, -1 for none). With prompt=None (a consumer that reads no prompt
column) "prompts" has width 0 and "input_ids" is the responses. meta_info
holds "global_token_num" (real tokens per row, as verl counts them) and
"tdock" (the batch's step, rows, round and lease).
to_tensordict gives the same keys as a TensorDict, the input of verl's newer
workers (verl.workers.utils.padding.left_right_2_no_padding makes it
unpadded). Needs torch; to_data_proto needs verl.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import torch

from tdock import _verl_plan, errors
from tdock.batch import Batch, _tensor
from tdock.columns import Padded, _numpy
from tdock.v1 import dock_pb2

__all__ = ["BatchRef", "balance_metrics", "dock_spec", "micro_batch_indices",
           "micro_batches", "put_columns", "to_data_proto", "to_tensordict", "worker_method"]

_LAYOUT = ("prompts", "responses", "input_ids", "attention_mask", "position_ids",
           "response_mask")


class _DefaultColumn(str):
    """A default column name: a batch without that column is laid out
    without it (a name given explicitly must exist)."""


PROMPT, RESPONSE = _DefaultColumn("prompt_ids"), _DefaultColumn("response_ids")


def _layout(batch: Batch, prompt: str | None, response: str | None, pad_token_id: int,
            columns: Iterable[str] | None, engine_plan: bool = False
            ) -> tuple[dict, dict, dict]:
    """(tensors, non_tensors, meta_info) of verl's layout for `batch`."""
    prompt, response = (None if isinstance(c, _DefaultColumn) and c not in batch.columns
                        else c for c in (prompt, response))
    if prompt is None and response is None:
        raise errors.InvalidArgument(
            f"tdock.verl: the batch has neither a prompt nor a response column (columns: "
            f"{', '.join(batch.columns)}); name them")
    for name in (prompt, response):
        if name is not None and name not in batch.columns:
            raise errors.InvalidArgument(
                f"tdock.verl: the batch has no column '{name}' (columns: "
                f"{', '.join(batch.columns)}); name the prompt and response columns "
                "(a batch without the default 'prompt_ids' or 'response_ids' is laid out "
                "without it)")
    arrays = batch.prompt_response(prompt, response, pad_value=pad_token_id)
    tensors = {k: torch.from_numpy(np.ascontiguousarray(arrays[k]).astype(np.int64))
               for k in _LAYOUT}
    width = tensors["responses"].shape[1]
    non_tensors = _row_names(batch)
    names = [c for c in batch.columns if c not in (prompt, response)] \
        if columns is None else list(columns)
    for name in names:
        col = batch.column(name)
        if col.encoding != dock_pb2.ENCODING_RAW:
            cells = batch.cells(name)
            non_tensors[name] = np.empty(len(cells), dtype=object)
            for i, cell in enumerate(cells):  # lists and dicts stay one cell each
                non_tensors[name][i] = cell
            continue
        lengths = batch.lengths(name)
        if col.fixed and (lengths == 1).all():
            tensors[name] = batch.to_torch([name])[name][0]
            continue
        # Per-token values line up with the responses: pad to their width.
        longest = int(lengths.max()) if len(lengths) else 0
        padded, _ = batch.padded(name, 0, multiple_of=max(width, longest, 1))
        tensors[name] = _tensor(torch, padded, col.dtype, None)  # an owned copy
    if batch.repeats is not None:
        # pad: repeat: a row repeated to fill this rank's share runs through
        # the model like any row, adds nothing to a loss (response_mask 0,
        # as verl's upsample_batch_to_divisible_size zeroes its no-op rows)
        # and is not written back (put_columns leaves "is_padding" rows out).
        repeat = torch.from_numpy(batch.repeat_mask)
        tensors["response_mask"][repeat] = 0
        tensors[_verl_plan.PAD_KEY] = repeat
    meta = {"global_token_num": arrays["attention_mask"].sum(axis=1).tolist(),
            "tdock": {"step": batch.step, "rows": batch.rows.tolist(),
                      "round": batch.round, "lease": batch.lease}}
    if engine_plan and batch.micro_batch_info:
        _verl_plan.fill(tensors, non_tensors, meta, batch,
                        arrays["prompts"].shape[1], pad_token_id)
    return tensors, non_tensors, meta


def _row_names(batch: Batch) -> dict:
    """The rows' keys and versions as non-tensor data ("tdock_key",
    "tdock_version"), each when the batch carries them."""
    out = {}
    if batch.keys is not None:
        out["tdock_key"] = np.array(batch.keys, dtype=object)
    if batch.versions is not None:
        out["tdock_version"] = np.array(batch.versions, dtype=np.int64)
    return out


def to_data_proto(batch: Batch, *, prompt: str | None = PROMPT,
                  response: str | None = RESPONSE, pad_token_id: int = 0,
                  columns: Iterable[str] | None = None, engine_plan: bool = False) -> Any:
    """A verl.DataProto of the batch in verl's layout (see the module
    comment); `columns`: the other columns to carry (default all);
    `prompt` None (or the default, absent from the batch) for a batch
    without prompts. `engine_plan`: filled and marked so that verl's
    engines cut the server's micro-batch plan (tdock._verl_plan; the keys
    go to meta_info)."""
    from verl import DataProto
    tensors, non_tensors, meta = _layout(batch, prompt, response, pad_token_id, columns,
                                         engine_plan)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)


def to_tensordict(batch: Batch, *, prompt: str | None = PROMPT,
                  response: str | None = RESPONSE, pad_token_id: int = 0,
                  columns: Iterable[str] | None = None, engine_plan: bool = False) -> Any:
    """The same layout as a TensorDict (non-tensor columns as
    NonTensorStack, meta_info's entries as NonTensorData): what verl's
    newer workers take."""
    from tensordict import NonTensorData, NonTensorStack, TensorDict
    tensors, non_tensors, meta = _layout(batch, prompt, response, pad_token_id, columns,
                                         engine_plan)
    rows = len(tensors["input_ids"])
    td = TensorDict(tensors, batch_size=[rows])
    for name, values in non_tensors.items():
        td[name] = NonTensorStack(*values.tolist(), batch_size=[rows])
    for name, value in meta.items():
        td[name] = NonTensorData(value)
    return td


def put_columns(data: Any, keys: Iterable[str] | Mapping[str, str], *,
                response_key: str = "responses") -> dict:
    """Columns for Dock.put from a DataProto or a TensorDict in verl's
    layout. `keys`: the keys to write (a mapping renames key -> column).
    A tensor of shape [rows, R] where R is the responses' width is cut to
    each row's response length (its real tokens in the response part of
    attention_mask); other 2-D tensors are written whole per row; 1-D
    tensors one item per row; nested (jagged) tensors row by row;
    non-tensor values (strings, dicts) as they are (string / JSON
    columns). Rows marked in "is_padding" (engine_plan's fillers) are left
    out."""
    return _columns(*_parts(data), keys, response_key)


def _columns(tensors: dict, non_tensors: dict, keys: Iterable[str] | Mapping[str, str],
             response_key: str) -> dict:
    names = dict(keys) if isinstance(keys, Mapping) else {k: k for k in keys}
    for key in names:
        if key not in tensors and key not in non_tensors:
            raise errors.InvalidArgument(
                f"tdock.verl.put_columns: no key '{key}' (tensors: "
                f"{', '.join(tensors)}; non-tensors: {', '.join(non_tensors)})")
    keep = None
    if _verl_plan.PAD_KEY in tensors:
        keep = np.flatnonzero(~_numpy(tensors[_verl_plan.PAD_KEY]).astype(bool))
    lengths = None
    if response_key in tensors and "attention_mask" in tensors:
        width = tensors[response_key].shape[1]
        lengths = _numpy(tensors["attention_mask"][:, -width:]).sum(axis=1)
        lengths = lengths if keep is None else lengths[keep]
    out = {}
    for key, column in names.items():
        if key in non_tensors:
            values = list(non_tensors[key])
            out[column] = values if keep is None else [values[i] for i in keep]
            continue
        value = tensors[key]
        if value.is_nested:
            rows = value.unbind()
            out[column] = [rows[i] for i in (range(len(rows)) if keep is None else keep)]
            continue
        value = value if keep is None else value[torch.from_numpy(keep)]
        if (value.dim() == 2 and lengths is not None
                and value.shape[1] == tensors[response_key].shape[1]):
            out[column] = Padded(value, lengths)
        else:
            out[column] = value
    return out


def _parts(data: Any) -> tuple[dict, dict]:
    """(tensors, non_tensors) of a DataProto or a TensorDict."""
    if hasattr(data, "non_tensor_batch") and hasattr(data, "batch"):
        batch = data.batch
        tensors = {k: batch[k] for k in batch.keys()} if batch is not None else {}
        return tensors, {k: v.tolist() for k, v in data.non_tensor_batch.items()}
    if type(data).__module__.startswith("tensordict"):
        tensors, non_tensors = {}, {}
        for key in data.keys():
            value = data.get(key)
            if isinstance(value, torch.Tensor) and not type(value).__module__.startswith(
                    "tensordict"):
                tensors[key] = value
            else:
                non_tensors[key] = value.tolist()
        return tensors, non_tensors
    raise errors.InvalidArgument(
        f"tdock.verl.put_columns takes a verl DataProto or a TensorDict, "
        f"got {type(data).__name__}")


def balance_metrics(batch: Batch, prefix: str = "global_seqlen") -> dict:
    """The round's balance under verl's metric names (its _balance_batch
    logs them from log_seqlen_unbalance): `{prefix}/balanced_min`,
    `/balanced_max` (the lightest and heaviest rank's tokens) and `/mean`,
    plus tdock's own under `tdock/`: rank imbalance (heaviest over mean),
    the round's micro-batch count and token spread, padding ratio; every
    rank of the round carries the same. verl's `/min`, `/max`
    and `/minmax_diff` describe the split before balancing, which tdock never
    makes; they are not reported. Empty for a batch without statistics."""
    s = batch.stats
    if s is None:
        return {}
    return {
        f"{prefix}/balanced_min": s.rank_tokens_min,
        f"{prefix}/balanced_max": s.rank_tokens_max,
        f"{prefix}/mean": s.rank_tokens_mean,
        "tdock/rank_imbalance": s.rank_imbalance,
        "tdock/micro_batches": s.micro_batches,
        "tdock/micro_batch_tokens_min": s.micro_batch_tokens_min,
        "tdock/micro_batch_tokens_max": s.micro_batch_tokens_max,
        "tdock/padding_ratio": s.padding_ratio,
    }


def micro_batch_indices(batch: Batch) -> list[list[int]]:
    """The server's micro-batch plan as verl's index lists: for each
    micro-batch, the positions of its rows in the batch (the whole batch as
    one when the consumer has no plan)."""
    if not batch.micro_batch_info:
        return [list(range(len(batch)))] if len(batch) else []
    return [list(range(mb.begin, mb.end)) for mb in batch.micro_batch_info]


def micro_batches(data: Any, batch: Batch) -> tuple[list, list[list[int]]]:
    """(micro-batch DataProtos, index lists): what verl's
    prepare_dynamic_batch returns, from the server's plan instead of
    planning again; verl's restore_dynamic_batch takes the index lists to
    put outputs back in the batch's order."""
    plan = micro_batch_indices(batch)
    if len(data) != len(batch):
        raise errors.InvalidArgument(
            f"tdock.verl.micro_batches: the DataProto has {len(data)} rows, the batch "
            f"{len(batch)}")
    return [data.select_idxs(np.asarray(p, dtype=np.int64)) for p in plan], plan


# The spec from verl's config and the worker-method decorator build on the
# functions above.
from tdock._verl_config import dock_spec  # noqa: E402
from tdock._verl_worker import BatchRef, worker_method  # noqa: E402
