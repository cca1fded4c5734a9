"""tdock's micro-batch plan in the form verl's engines already read.

verl 0.9.1's engines (FSDP, Megatron, VeOmni, TorchTitan, AutoModel) all cut
a batch with verl.workers.engine.utils.prepare_micro_batches, and that reads
its settings from the batch itself: with "use_dynamic_bsz" False it cuts the
batch in order into chunks of "micro_batch_size_per_gpu" rows
(tensordict_utils.chunk_tensordict) and gives the outputs back in the batch's
order (postprocess_batch_func restores only dynamic batches). verl's
TrainingWorker.train_batch / infer_batch inject the config's values only for
keys the batch does not carry, and DataProto.to_tensordict turns meta_info
into those keys. tdock's batches come ordered micro-batch after micro-batch,
so a batch whose micro-batches all hold m rows, carrying
use_dynamic_bsz=False and micro_batch_size_per_gpu=m, is cut by verl exactly
as tdock planned it. Micro-batches with fewer rows than the largest are
filled up with no-op rows in verl's own padding form (as its
upsample_batch_to_divisible_size makes them): one token, response_mask 0 so
no loss, KL or entropy term counts them, a uid of their own, marked True in
the "is_padding" tensor. put_columns leaves them out.
"""

from __future__ import annotations

import numpy as np
import torch

from tdock.batch import Batch

# The per-row bool tensor that marks fillers (verl's tag name for them).
PAD_KEY = "is_padding"


def slots(batch: Batch) -> tuple[np.ndarray, int]:
    """(for each row of the filled batch, the batch row it holds or -1 for
    a filler; rows per micro-batch). REQUIRES: the batch has a plan."""
    plan = batch.micro_batch_info
    width = max(mb.end - mb.begin for mb in plan)
    order = np.full(len(plan) * width, -1, dtype=np.int64)
    for i, mb in enumerate(plan):
        order[i * width:i * width + mb.end - mb.begin] = np.arange(mb.begin, mb.end)
    return order, width


def fill(tensors: dict, non_tensors: dict, meta: dict, batch: Batch,
         prompt_width: int, pad_token_id: int) -> None:
    """Fills every micro-batch of the layout up to the plan's largest row
    count (in place) and adds the keys that make verl cut it there."""
    order, width = slots(batch)
    real = np.flatnonzero(order >= 0)
    fillers = np.flatnonzero(order < 0)
    for name, value in tensors.items():
        grown = value.new_full((len(order),) + tuple(value.shape[1:]),
                               pad_token_id if name in _TOKENS else 0)
        grown[torch.from_numpy(real)] = value[torch.from_numpy(order[real])]
        tensors[name] = grown
    tokens = tensors["attention_mask"].shape[1]
    if len(fillers) and tokens:
        # One real token: the first response position (the last prompt
        # position when responses have no width).
        at = prompt_width if tokens > prompt_width else tokens - 1
        tensors["attention_mask"][torch.from_numpy(fillers), at] = 1
    fill_rows = torch.from_numpy(order < 0)
    # Rows marked already (pad: repeat's repeats, tdock.verl._layout) stay marked.
    tensors[PAD_KEY] = fill_rows | tensors[PAD_KEY].bool() if PAD_KEY in tensors else fill_rows
    for name, value in non_tensors.items():
        grown = np.empty(len(order), dtype=value.dtype)
        grown[real] = value[order[real]]
        grown[fillers] = _NONE.get(name, None if value.dtype == object else 0)
        if name == "uid":  # each filler its own group: no GRPO group changes
            grown[fillers] = [f"tdock-pad-{i}" for i in range(len(fillers))]
        non_tensors[name] = grown
    counts = np.asarray(meta["global_token_num"] + [0], dtype=np.int64)
    meta["global_token_num"] = np.where(order >= 0, counts[order],
                                        1 if tokens else 0).tolist()
    # What verl's engines read (meta_info; the TensorDict's non-tensor data).
    # num_mini_batch 1: a round is one optimizer step, which train_mini_batch
    # then keeps whole and in order.
    meta.update(use_dynamic_bsz=False, micro_batch_size_per_gpu=width, num_mini_batch=1)


_TOKENS = ("prompts", "responses", "input_ids")
# What a filler holds in the rows' own names: no key, no version.
_NONE = {"tdock_key": "", "tdock_version": -1}
