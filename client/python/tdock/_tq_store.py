"""Partitions of keyed samples over tdock docks: the storage behind
tdock.transferqueue.

One dock per partition, named ``<prefix><partition_id>``, made on the first
write with no consumers (nothing is handed out: samples are read by key),
groups of one row, ``steps_in_flight`` steps of ``rows_per_step`` rows.
A key is a row key; new keys take rows of the open step (the newest), and
when it is full of rows the next step opens. Clearing keys drops their rows
(reason "filtered"); a step below the open one whose rows are all dropped is
released. Each field is a column, added the first time a put carries it:
  - a dense tensor [n, *s]: a column of one item of shape s per row (max_len 1);
  - a jagged nested tensor: a ragged column (rows of any length, items of
    the shape after the ragged dimension), read back as a jagged tensor;
  - anything else (NonTensorStack, lists, strings, dicts): a bytes column
    holding each row's value in tdock._tq_cells' typed encoding (JSON, and
    dtype + shape + raw bytes for tensors and arrays; never a pickle), read
    back as a NonTensorStack.
A put encodes and checks every field of every key before it writes
anything, so a refused value leaves the partition as it was.
Tags are the json column ``__tq_tag__``: every row has one, and a put's tag
is merged into the stored one (read, update, write).

Thread safety: a Store may be used by several threads at once (its Client
may); the tag merge of two concurrent puts of the same key is last-writer-
wins per put. Not fork-safe (gRPC): a forked process calls init() again.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from tdock import _tq_cells, errors
from tdock.client import Client
from tdock.v1 import dock_pb2

TAG = "__tq_tag__"
_MISSING = re.compile(r"no live row has key '(.*)'")
_TORCH_DTYPES = {torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16",
                 torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
                 torch.bfloat16: "bfloat16", torch.float32: "float32",
                 torch.float64: "float64", torch.bool: "bool"}


class Store:
    """The partitions of one tdock server (see the module comment)."""

    def __init__(self, address: str, *, prefix: str = "tq-", rows_per_step: int = 1 << 16,
                 steps_in_flight: int = 16, timeout: float = 60.0):
        self.client = Client(address, timeout=timeout)
        self.prefix = prefix
        self.rows_per_step = rows_per_step
        self.steps_in_flight = steps_in_flight
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}  # partition -> step new keys go to

    def close(self) -> None:
        self.client.close()

    # ---- docks ---------------------------------------------------------------

    def dock(self, partition_id: str, *, create: bool):
        """The partition's dock; None when it does not exist and not create."""
        if not isinstance(partition_id, str) or not partition_id:
            raise errors.InvalidArgument(
                f"transferqueue: partition_id must be a non-empty string, got {partition_id!r}")
        name = self.prefix + partition_id
        dock = self.client.dock(name)
        try:
            dock.spec  # noqa: B018 (fetches it: does the dock exist?)
            return dock
        except errors.NotFound:
            if not create:
                return None
        try:
            return self.client.create_dock({
                "name": name, "num_prompts": 1, "n_samples_per_prompt": 1,
                "steps_in_flight": self.steps_in_flight,
                "max_rows_per_step": self.rows_per_step,
                "columns": {TAG: {"dtype": "json", "rewritable": True}}, "consumers": {}})
        except errors.AlreadyExists:  # another process made it first
            return self.client.dock(name)

    def partitions(self) -> list[str]:
        return [d.name[len(self.prefix):] for d in self.client.list_docks()
                if d.name.startswith(self.prefix)]

    def global_index(self, dock, step: int, row: int) -> int:
        return step * dock.spec.max_rows_per_step + row

    def step_row(self, dock, index: int) -> tuple[int, int]:
        return divmod(int(index), dock.spec.max_rows_per_step)

    # ---- locating keys -------------------------------------------------------

    def lookup(self, dock, keys: Sequence[str]) -> dict[str, tuple[int, int, dict]]:
        """key -> (step, row, tag) for the keys that live rows have."""
        try:
            return _located(dock.read(keys=list(keys), columns=[TAG]))
        except (errors.NotFound, errors.InvalidArgument, errors.FailedPrecondition) as e:
            if len(keys) <= 1 and isinstance(e, errors.NotFound) and _MISSING.search(str(e)):
                return {}
            if len(keys) <= 1:
                raise
        found: dict[str, tuple[int, int, dict]] = {}
        for key in keys:  # keys of several steps, or some new: one at a time
            found.update(self.lookup(dock, [key]))
        return found

    # ---- writes --------------------------------------------------------------

    def put(self, partition_id: str, keys: Sequence[str], fields: Any,
            tags: Sequence[dict] | None) -> tuple[dict, list[str]]:
        """Writes fields and merges tags; returns ({key: (step, row, tag)},
        the dock's field names)."""
        encoded = _encode_fields(fields, keys)  # refuses a bad value before any write
        dock = self.dock(partition_id, create=False)
        if dock is not None:
            _check_kinds(dock, encoded)
        else:
            dock = self.dock(partition_id, create=True)
        columns = self._columns(dock, encoded)
        where = self.lookup(dock, keys)
        merged = {}
        for i, key in enumerate(keys):
            tag = dict(where[key][2]) if key in where else {}
            tag.update(tags[i] if tags is not None else {})
            merged[key] = tag
        by_step: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            if key in where:
                by_step.setdefault(where[key][0], []).append(i)
        for step, idx in by_step.items():
            dock.put(step, [where[keys[i]][1] for i in idx],
                     _take(columns, idx, [merged[keys[i]] for i in idx]))
        new = [i for i, key in enumerate(keys) if key not in where]
        if new:
            where.update(self._append(dock, partition_id, [keys[i] for i in new],
                                      _take(columns, new, [merged[keys[i]] for i in new])))
        return ({k: (where[k][0], where[k][1], merged[k]) for k in keys},
                [c.name for c in dock.spec.columns if c.name != TAG])

    def _append(self, dock, partition_id: str, keys: list[str], columns: dict) -> dict:
        """New rows for `keys` in the open step (the next when it is full)."""
        with self._lock:
            step = self._open.get(partition_id)
        if step is None:
            live = [s.step for s in dock.status().steps]
            step = max(live) if live else 0
        found: dict[str, tuple[int, int, None]] = {}
        done, cap = 0, dock.spec.max_rows_per_step
        while done < len(keys):
            take = list(range(done, min(done + cap, len(keys))))
            try:
                ack = dock.put(step, None, _take(columns, take, [columns[TAG][i] for i in take]),
                               keys=[keys[i] for i in take])
            except errors.CapacityExceeded as e:
                if e.free_groups is None:
                    raise
                # Whole groups of one row each: as many rows as groups left.
                cap = e.free_groups or dock.spec.max_rows_per_step
                step += 0 if e.free_groups else 1
                continue
            found.update({keys[i]: (step, r, None) for i, r in zip(take, ack.assigned)})
            done += len(take)
            cap = dock.spec.max_rows_per_step
        with self._lock:
            self._open[partition_id] = max(step, self._open.get(partition_id, 0))
        return found

    def _columns(self, dock, encoded: dict[str, tuple[dict, Any]]) -> dict:
        """Put values of the encoded fields, adding the columns missing."""
        have = {c.name: c for c in dock.spec.columns}
        for name, (settings, _) in encoded.items():
            if name not in have:
                try:
                    dock.add_column(name, settings)
                except errors.AlreadyExists:  # another process added it: is it of our kind?
                    dock._spec = None
                    _check_kinds(dock, {name: encoded[name]})
        return {name: cell_values for name, (_, cell_values) in encoded.items()}

    def clear(self, partition_id: str, keys: Sequence[str]) -> None:
        dock = self.dock(partition_id, create=False)
        if dock is None:
            return
        by_step: dict[int, list[int]] = {}
        for step, row, _ in self.lookup(dock, keys).values():
            by_step.setdefault(step, []).append(row)
        for step, rows in by_step.items():
            dock.drop(step, rows, reason="filtered")
        self._release_empty(dock, partition_id)

    def _release_empty(self, dock, partition_id: str) -> None:
        steps = dock.status().steps
        if not steps:
            return
        newest = max(s.step for s in steps)
        for s in steps:
            if s.step < newest and sum(s.dropped.values()) >= dock.spec.max_rows_per_step:
                dock.release(s.step)

    # ---- reads ---------------------------------------------------------------

    def listing(self, dock, cells: Sequence[str] = ()) -> list[tuple[int, Any]]:
        """(step, live RowState) of the dock's keyed rows, carrying their
        cells of `cells`."""
        out = []
        for s in dock.status().steps:
            out += [(s.step, r) for r in dock.list_rows(s.step, cells=cells)
                    if r.key is not None and r.dropped is None]
        return out

    def tags(self, dock) -> dict[str, dict]:
        """key -> tag of the dock's keyed rows, listed with them."""
        return {r.key: r.cells.get(TAG, {}) for _, r in self.listing(dock, [TAG])}

    def get(self, dock, step_rows: Sequence[tuple[int, int]], fields: Sequence[str] | None,
            names: Sequence[str]) -> Any:
        """A TensorDict of `fields` (None: those every row has) of the rows,
        in order; `names` name the rows in errors."""
        from tensordict import TensorDict
        listing = None
        if fields is None:
            listing = {(s, r.row): r for s, r in self.listing(dock)}
            sets = [set(listing[sr].written) for sr in step_rows if sr in listing]
            fields = sorted(set.intersection(*sets) - {TAG}) if sets else []
        specs = {c.name: c for c in dock.spec.columns}
        unknown = [f for f in fields if f not in specs or f == TAG]
        if unknown:
            raise errors.InvalidArgument(
                f"transferqueue: partition '{dock.name[len(self.prefix):]}' has no fields "
                f"{unknown} (fields: {sorted(set(specs) - {TAG})})")
        parts: dict[int, list[int]] = {}
        for i, (step, _) in enumerate(step_rows):
            parts.setdefault(step, []).append(i)
        tds = {}
        for step, idx in parts.items():
            try:
                batch = dock.read(step, [step_rows[i][1] for i in idx], list(fields))
            except errors.FailedPrecondition as e:
                raise type(e)(
                    f"transferqueue: {e.message} (keys {[names[i] for i in idx][:8]}): "
                    "a field not written for every key", e.code, reason=e.reason,
                    drop_reason=e.drop_reason) from None
            tds[step] = _decode(batch, fields, specs)
        if len(tds) == 1:
            return next(iter(tds.values()))
        return _merge(tds, parts, len(step_rows), fields, specs, TensorDict)


def _located(batch) -> dict[str, tuple[int, int, dict]]:
    tags = batch.cells(TAG)
    return {k: (batch.step, int(r), tags[i]) for i, (k, r) in
            enumerate(zip(batch.keys, batch.rows.tolist()))}


def _take(columns: dict, idx: list[int], tags: list[dict]) -> dict:
    out = {TAG: tags}
    for name, value in columns.items():
        if isinstance(value, list):
            out[name] = [value[i] for i in idx]
        elif getattr(value, "is_nested", False):
            out[name] = torch.nested.as_nested_tensor([value[i] for i in idx],
                                                      layout=torch.jagged)
        else:
            out[name] = value[torch.as_tensor(idx, dtype=torch.long)]
    return out


def _encode_fields(fields: Any, keys: Sequence[str]) -> dict[str, tuple[dict, Any]]:
    """{name: (column settings, put value)} of every field; talks to no server."""
    if fields is None:
        return {}
    out = {}
    for name in list(fields.keys()):
        if name == TAG:
            raise errors.InvalidArgument(f"transferqueue: field name '{TAG}' is reserved")
        value = fields.get(name) if hasattr(fields, "get") else fields[name]
        out[name] = _encode(name, value, keys)
    return out


def _check_kinds(dock, encoded: dict[str, tuple[dict, Any]]) -> None:
    """Refuses a field whose column holds the other kind (tensors, Python values)."""
    have = {c.name: c for c in dock.spec.columns}
    for name, (settings, _) in encoded.items():
        col = have.get(name)
        if col is not None and (col.dtype == dock_pb2.BYTES) != (settings["dtype"] == "bytes"):
            kinds = {True: "Python objects", False: "tensors"}
            raise errors.InvalidArgument(
                f"transferqueue: field '{name}' was stored as "
                f"{kinds[col.dtype == dock_pb2.BYTES]}, this put gives "
                f"{kinds[settings['dtype'] == 'bytes']}")


def _encode(name: str, value: Any, keys: Sequence[str]) -> tuple[dict, Any]:
    """(column settings, put value) of one field of the keys' samples."""
    n = len(keys)
    if isinstance(value, torch.Tensor) and not type(value).__module__.startswith("tensordict"):
        if value.dtype not in _TORCH_DTYPES:
            raise errors.InvalidArgument(
                f"transferqueue: field '{name}' has dtype {value.dtype}, which tdock does not "
                f"store (one of {', '.join(_TORCH_DTYPES.values())})")
        if value.is_nested and value.layout != torch.jagged:
            value = torch.nested.as_nested_tensor(list(value.unbind()), layout=torch.jagged)
        if value.dim() == 0 or value.size(0) != n:
            raise errors.InvalidArgument(
                f"transferqueue: field '{name}' has {value.size(0) if value.dim() else 0} "
                f"rows, the keys are {n}")
        dtype = _TORCH_DTYPES[value.dtype]
        if value.is_nested:
            return {"dtype": dtype, "inner_shape": list(value.values().shape[1:]),
                    "rewritable": True}, value
        return {"dtype": dtype, "inner_shape": list(value.shape[1:]), "max_len": 1,
                "rewritable": True}, value.detach().cpu().contiguous()
    values = _objects(name, value, n)
    return {"dtype": "bytes", "rewritable": True}, [
        np.frombuffer(_tq_cells.encode(v, name, key), np.uint8) for v, key in zip(values, keys)]


def _objects(name: str, value: Any, n: int) -> list:
    from tensordict import NonTensorData, NonTensorStack
    if isinstance(value, NonTensorData):
        return [value.data] * n
    if isinstance(value, NonTensorStack):
        values = value.tolist()
    elif isinstance(value, (list, tuple, np.ndarray)):
        values = list(value)
    else:
        raise errors.InvalidArgument(
            f"transferqueue: field '{name}' is a {type(value).__name__}; a field is a tensor, "
            f"a jagged nested tensor, or one Python value per key")
    if len(values) != n:
        raise errors.InvalidArgument(
            f"transferqueue: field '{name}' has {len(values)} values, the keys are {n}")
    return values


def _decode(batch, fields: Sequence[str], specs: dict) -> Any:
    from tensordict import NonTensorStack
    numeric = [f for f in fields if specs[f].dtype != dock_pb2.BYTES]
    td = batch.to_tensordict(numeric)
    for f in fields:
        if specs[f].dtype == dock_pb2.BYTES:
            col, keys = batch.column(f), batch.keys
            td[f] = NonTensorStack(*[_tq_cells.decode(
                col.values[col.offsets[i]:col.offsets[i + 1]].tobytes(), f,
                keys[i] if keys else f"step {batch.step} row {int(batch.rows[i])}")
                for i in range(len(batch))], batch_size=[len(batch)])
    return td


def _merge(tds: dict, parts: dict, n: int, fields: Iterable[str], specs: dict, TensorDict):
    """One TensorDict in the callers' order from per-step ones."""
    from tensordict import NonTensorStack
    out = TensorDict({}, batch_size=[n])
    for f in fields:
        cells: list = [None] * n
        for step, idx in parts.items():
            # get(): the NonTensorStack itself; td[f] is a list that has no
            # tolist() in tensordict 0.10 (verl's pin).
            value = tds[step][f] if specs[f].dtype != dock_pb2.BYTES else tds[step].get(f).tolist()
            rows = value.unbind() if isinstance(value, torch.Tensor) else value
            for i, cell in zip(idx, rows):
                cells[i] = cell
        if specs[f].dtype == dock_pb2.BYTES:
            out[f] = NonTensorStack(*cells, batch_size=[n])
        elif specs[f].max_len == 1:
            out[f] = torch.stack(cells)
        else:
            out[f] = torch.nested.as_nested_tensor(cells, layout=torch.jagged)
    return out
