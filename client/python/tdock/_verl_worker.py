"""tdock.verl.worker_method: a verl worker method that takes its rank's batch
from a dock and writes its outputs back, as verl's tqbridge does for
TransferQueue.

    class ActorWorker(Worker):                      # self.rank: its DP rank
        @tv.worker_method("actor", outputs=["old_log_probs"])
        def update_actor(self, data: TensorDict) -> TensorDict: ...

    written = ray.get([w.update_actor.remote(tv.BatchRef(dock, step))
                       for w in workers])

A call with a BatchRef among its arguments Gets the rank's share from the
BatchRef's dock (the round it names, or the next) and passes it in the
BatchRef's place as verl's engines take it: a TensorDict (layout="tensordict")
or a DataProto (layout="data_proto") in tdock.verl's layout, filled so that
verl's engines cut tdock's micro-batch plan (tdock._verl_plan). The keys of
`outputs` in what the method returns are written back to the batch's rows
("responses" and "prompts" to the columns they were made from; replica 0 alone
writes, as verl collects from one model-parallel rank; a lease is acknowledged
with the write, or by replica 0 when the method returns if it has nothing to
write, so that its rows are not handed out again). When the call fails after
its Get (the method, the batch's conversion or the write of its outputs
raises), replica 0 nacks the lease before the exception, as raised, reaches the
caller: the rows are handed out again at once, not when lease_ms ends (a
balanced consumer's share to the same rank, under the same round, for every
replica that took it; the rank's next Get, or one naming that round, takes it).
If that nack fails (the lease had ended), the exception carries a note saying
so (a warning before Python 3.11). The call returns the method's output without
the keys written (they are in the dock; only the rest travels back), its
"metrics" (meta_info's for a DataProto, the TensorDict's non-tensor entry)
joined by tdock.verl.balance_metrics', and "tdock": the step, round and rows of
the batch and the columns written. A call without a BatchRef runs the method as
it is.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch

from tdock import dtypes, errors
from tdock import verl as tv

_LAYOUTS = {"tensordict": tv.to_tensordict, "data_proto": tv.to_data_proto}


@dataclasses.dataclass(frozen=True)
class BatchRef:
    """Which batch a worker_method call takes: from `dock` (a tdock Dock; it
    pickles as its address and name), the rank's next share of `step` (any
    step when None), or round `round` again; waiting up to `wait` seconds
    for it."""
    dock: Any
    step: int | None = None
    round: int | None = None
    wait: float = 120.0


# One Dock (one channel) per server address and dock name in this process:
# every BatchRef unpickles a new, not yet connected Dock.
_docks: dict = {}


def _dock(ref: BatchRef) -> Any:
    if not hasattr(ref.dock, "get") or not hasattr(ref.dock, "client"):
        raise errors.InvalidArgument(
            f"tdock.verl.BatchRef: dock must be a tdock Dock, got {type(ref.dock).__name__}")
    key = (type(ref.dock), ref.dock.client.address, ref.dock.name)
    return _docks.setdefault(key, ref.dock)


def _rank(worker: Any, how: str | Callable, dock: Any, consumer: str) -> int:
    """The worker's rank; 0 for a worker without one when the consumer has
    a single rank."""
    if callable(how) or hasattr(worker, how):
        return _attribute(worker, how, "rank")
    ranks = [c.dp_size for c in dock.spec.consumers if c.name == consumer]
    if ranks and ranks[0] <= 1:
        return 0
    return _attribute(worker, how, "rank")  # names what is missing


def _attribute(worker: Any, how: str | Callable | None, what: str) -> Any:
    if how is None:
        return None
    if callable(how):
        return how(worker)
    if not hasattr(worker, how):
        raise errors.InvalidArgument(
            f"tdock.verl.worker_method: the worker ({type(worker).__name__}) has no "
            f"attribute '{how}' for the {what}; set it or name another")
    return getattr(worker, how)


def _find_ref(args: tuple, kwargs: dict) -> BatchRef | None:
    refs = [a for a in (*args, *kwargs.values()) if isinstance(a, BatchRef)]
    if len(refs) > 1:
        raise errors.InvalidArgument(
            f"tdock.verl.worker_method: {len(refs)} BatchRefs in one call; pass one")
    return refs[0] if refs else None


def _returned(out: Any, written: Mapping[str, str], batch: Any, columns: list) -> Any:
    """The method's output less the keys written, with "metrics" and
    "tdock" (see the module comment)."""
    if out is None:
        return None
    info = {"step": batch.step, "round": batch.round, "rows": batch.rows.tolist(),
            "columns": columns}
    if hasattr(out, "meta_info"):  # a DataProto
        tensors = [k for k in written if out.batch is not None and k in out.batch.keys()]
        out.pop(batch_keys=tensors,
                non_tensor_batch_keys=[k for k in written if k in out.non_tensor_batch])
        out.meta_info["metrics"] = {**out.meta_info.get("metrics", {}),
                                    **tv.balance_metrics(batch)}
        out.meta_info["tdock"] = info
        return out
    from tensordict import NonTensorData
    metrics = out.get("metrics", None) if "metrics" in out.keys() else {}
    metrics = dict(getattr(metrics, "data", metrics) or {})  # NonTensorData's
    out = out.exclude(*[k for k in written if k in out.keys()])
    out["metrics"] = NonTensorData({**metrics, **tv.balance_metrics(batch)})
    out["tdock"] = NonTensorData(info)
    return out


def _narrowed(tokens: Any, column: Any) -> Any:
    """Token ids back in their column's integer dtype, when they fit it."""
    want = dtypes.numpy_of(column.dtype)
    if tokens.is_floating_point() or not np.issubdtype(want, np.integer) \
            or tokens.numel() == 0:
        return tokens
    bounds = np.iinfo(want)
    low, high = int(tokens.min()), int(tokens.max())
    if low < bounds.min or high > bounds.max:
        raise errors.InvalidArgument(
            f"tdock.verl.worker_method: token ids {low}..{high} do not fit column "
            f"'{column.name}' ({np.dtype(want).name}); nothing was written")
    return torch.from_numpy(tokens.detach().cpu().numpy().astype(want))


def _write(dock: Any, batch: Any, data: Any, out: Any, outputs: Mapping[str, str],
           response_key: str) -> list[str]:
    """Writes `outputs` of `out` back to the batch's rows (acknowledging its
    lease); the response lengths come from `data` when `out` lacks them."""
    tensors, non_tensors = tv._parts(out)
    given, _ = tv._parts(data)
    rows = len(given["input_ids"])
    for key, value in tensors.items():
        if value.shape[0] != rows:
            raise errors.InvalidArgument(
                f"tdock.verl.worker_method: output '{key}' has {value.shape[0]} rows, the "
                f"batch the method was given {rows}; nothing was written")
    for key in ("attention_mask", response_key, tv._verl_plan.PAD_KEY):
        if key in given and key not in tensors:
            tensors[key] = given[key]
    specs = {c.name: c for c in dock.spec.columns}
    for key in ("prompts", "responses"):  # the layout widened them to int64
        if key in tensors and outputs.get(key) in specs:
            tensors[key] = _narrowed(tensors[key], specs[outputs[key]])
    columns = tv._columns(tensors, non_tensors, outputs, response_key)
    # A share's repeats (pad: repeat) are written by the shares they are from.
    rows = batch.rows if batch.repeats is None else batch.rows[~batch.repeat_mask]
    if not len(rows):
        return []
    dock.put(batch.step, rows, columns, ack=batch if batch.lease else None)
    return list(columns)


def _hand_back(dock: Any, batch: Any, error: BaseException) -> None:
    """Nacks the batch's lease after `error` ended its call, so that its rows
    are handed out again now rather than when the lease expires. A failed
    nack leaves `error` as it was, noted on it (Python 3.11+) or warned."""
    if batch.lease is None:
        return
    try:
        dock.nack(batch)
    except Exception as failed:  # the lease may have ended (the write acknowledged it)
        note = (f"tdock.verl.worker_method: could not hand back lease {batch.lease} "
                f"(consumer '{batch.consumer}' rank {batch.rank}, step {batch.step}): "
                f"{type(failed).__name__}: {failed}; a lease still in flight hands its rows "
                f"back when it expires")
        if hasattr(error, "add_note"):
            error.add_note(note)
        else:
            warnings.warn(note, stacklevel=3)


def worker_method(consumer: str, *, outputs: Iterable[str] | Mapping[str, str] = (),
                  layout: str = "tensordict", rank: str | Callable = "rank",
                  replica: str | Callable | None = None,
                  prompt: str | None = tv.PROMPT, response: str | None = tv.RESPONSE,
                  pad_token_id: int = 0, columns: Iterable[str] | None = None) -> Callable:
    """Decorates a worker method (see the module comment). `consumer`: the
    dock's consumer it reads as; `outputs`: the keys of its output to
    write (a mapping renames key -> column); `rank`, `replica`: the
    worker's attributes (or functions of the worker) that hold its
    data-parallel rank (a worker without one is rank 0 of a consumer with
    one rank) and its model-parallel replica (None: the consumer has no
    replicas); the rest as tdock.verl.to_tensordict."""
    if layout not in _LAYOUTS:
        raise errors.InvalidArgument(
            f"tdock.verl.worker_method: unknown layout '{layout}' (one of "
            f"{', '.join(_LAYOUTS)})")
    names = dict(outputs) if isinstance(outputs, Mapping) else {k: k for k in outputs}
    for key, column in {"prompts": prompt, "responses": response}.items():
        if names.get(key) == key and column is not None:
            names[key] = str(column)
    to_layout = _LAYOUTS[layout]

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def call(self, *args: Any, **kwargs: Any) -> Any:
            ref = _find_ref(args, kwargs)
            if ref is None:
                return method(self, *args, **kwargs)
            dock = _dock(ref)
            peer = _attribute(self, replica, "replica")
            batch = dock.get(consumer, rank=_rank(self, rank, dock, consumer),
                             replica=peer or 0, step=ref.step, round=ref.round,
                             wait=ref.wait)
            if batch.timed_out:
                raise errors.WaitTimeout(
                    f"tdock.verl.worker_method: no batch for consumer '{consumer}' "
                    f"(step {ref.step}) within {ref.wait} s")
            try:
                data = to_layout(batch, prompt=prompt, response=response,
                                 pad_token_id=pad_token_id, columns=columns,
                                 engine_plan=True)
                args = tuple(data if a is ref else a for a in args)
                kwargs = {k: data if v is ref else v for k, v in kwargs.items()}
                out = method(self, *args, **kwargs)
                written = []
                if names and not peer:
                    written = _write(dock, batch, data, out, names, "responses")
                elif batch.lease is not None and not peer:
                    dock.ack(batch)  # nothing to write: done with the batch
            except BaseException as error:
                if not peer:
                    _hand_back(dock, batch, error)
                raise
            return _returned(out, names, batch, written)
        return call
    return decorate
