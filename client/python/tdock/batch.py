"""Batch: the rows one Get handed out, with their columns as numpy views.

Columns are packed: per column all rows' items back to back plus offsets
(``cu_seqlens``, rows + 1 entries). ``packed`` returns views into the received
message, no copy; ``padded`` builds a padded array and an attention mask;
``micro_batches`` are Batches over contiguous runs of rows sharing the same
memory; ``to_torch`` makes torch tensors. Arrays from ``packed`` are read-only
(they view the message); copy them to write.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, fields
from typing import Iterable

import numpy as np

from tdock import _tq_cells, dtypes, errors
from tdock.columns import padding_mask
from tdock.v1 import dock_pb2


@dataclass(frozen=True)
class MicroBatchInfo:
    """Rows [begin, end) of the batch; tokens as the budget counted them."""
    begin: int
    end: int
    padded_len: int
    tokens: int
    padded_tokens: int


@dataclass(frozen=True)
class BalanceStats:
    """Balance of the round (over ranks) and of the batch's micro-batches."""
    rank_cost_min: float
    rank_cost_max: float
    rank_cost_mean: float
    rank_tokens_min: float
    rank_tokens_max: float
    rank_tokens_mean: float
    micro_batch_tokens_min: float
    micro_batch_tokens_max: float
    micro_batch_tokens_mean: float
    micro_batches: int
    tokens: int
    padded_tokens: int
    padding_ratio: float
    micro_batch_cost_min: float
    micro_batch_cost_max: float
    micro_batch_cost_mean: float

    @property
    def rank_imbalance(self) -> float:
        """Heaviest rank's tokens over the mean (1.0 is perfect)."""
        mean = self.rank_tokens_mean
        return self.rank_tokens_max / mean if mean else 1.0

    @classmethod
    def from_proto(cls, msg: dock_pb2.BalanceStats) -> "BalanceStats":
        return cls(**{f.name: getattr(msg, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Column:
    """One column of a batch: item values and the rows' item offsets."""
    name: str
    dtype: int          # wire enum (tdock.v1.dock_pb2.DType)
    values: np.ndarray  # (items, *inner_shape)
    offsets: np.ndarray  # int64, rows + 1, offsets[0] == 0
    # dock_pb2.UTF8, JSON or TENSORS: a bytes column whose cells are strings,
    # JSON or typed values (numbers, lists, dicts, arrays, tensors).
    encoding: int = dock_pb2.ENCODING_RAW
    # One item per row by its spec (max_len 1): a dense column.
    fixed: bool = False

    def rows(self, begin: int, end: int) -> "Column":
        lo, hi = int(self.offsets[begin]), int(self.offsets[end])
        return Column(self.name, self.dtype, self.values[lo:hi],
                      self.offsets[begin:end + 1] - lo, self.encoding, self.fixed)

    def cell(self, i: int):
        """Row i's cell: a str (string column), the decoded value (json or
        tensors column), or a view of its items."""
        items = self.values[self.offsets[i]:self.offsets[i + 1]]
        if self.encoding == dock_pb2.ENCODING_RAW:
            return items
        if self.encoding == dock_pb2.TENSORS:
            try:
                return _tq_cells.parse(items.tobytes())
            except _tq_cells.Malformed as e:
                raise errors.DataLoss(f"column '{self.name}' batch row {i}: the cell is not a "
                                      f"tdock typed value: {e}") from None
        text = items.tobytes().decode("utf-8")
        return text if self.encoding == dock_pb2.UTF8 else json.loads(text)


class Batch:
    """The rows of one Get (or Read, or Sample without columns)."""

    def __init__(self, *, step: int, rows: np.ndarray, token_counts: np.ndarray,
                 end_of_step: bool = False, timed_out: bool = False,
                 round: int = -1, columns: dict[str, Column] | None = None,
                 micro_batch_info: list[MicroBatchInfo] | None = None,
                 stats: BalanceStats | None = None, consumer: str = "",
                 rank: int = 0, lease: int | None = None,
                 lease_seconds: float = 0.0, keys: list[str] | None = None,
                 versions: np.ndarray | None = None, repeats: np.ndarray | None = None):
        self.step = step
        self.rows = rows
        self.token_counts = token_counts
        self.end_of_step = end_of_step
        self.timed_out = timed_out
        self.round = round
        self.micro_batch_info = micro_batch_info or []
        self.stats = stats
        self.consumer = consumer
        self.rank = rank
        # The lease id the rows are held under until acknowledged (Dock.ack,
        # or put(..., ack=batch)) and its length; None when the consumer has
        # no leases (rows are complete on hand-out).
        self.lease = lease
        self.lease_seconds = lease_seconds
        # The rows' keys ("" for a row without one); None when no row has one.
        self.keys = keys
        # The rows' policy versions (int64, -1 for a row without one); None
        # when no row has one.
        self.versions = versions
        # BALANCED consumers with `pad: repeat`: the positions (int64,
        # ascending) of rows that repeat a row of the round to fill this
        # rank's share; None when there are none. See repeat_mask.
        self.repeats = repeats
        # Get(partial=True) through a controller: the rows handed out whose
        # cells could not be read (their shard away or gone), left out of
        # this batch; empty when none.
        self.missing_rows = np.zeros(0, dtype=np.int64)
        self._columns = columns or {}

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def repeat_mask(self) -> np.ndarray:
        """Per row, True where it repeats a row of the round (`pad: repeat`
        fills a short share with such repeats): mask these rows out of the
        loss. All False when the batch has none."""
        mask = np.zeros(len(self), dtype=bool)
        if self.repeats is not None:
            mask[self.repeats] = True
        return mask

    def __repr__(self) -> str:
        return (f"Batch(step={self.step}, rows={len(self)}, "
                f"columns={list(self._columns)}, end_of_step={self.end_of_step}"
                f"{', timed_out=True' if self.timed_out else ''})")

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    def column(self, name: str) -> Column:
        col = self._columns.get(name)
        if col is None:
            raise errors.NotFound(
                f"column '{name}' is not in this batch "
                f"(it has: {', '.join(self._columns) or 'no columns'})")
        return col

    def packed(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, cu_seqlens): all rows' items back to back, and the rows'
        item offsets (int64, rows + 1). Views of the received message."""
        col = self.column(name)
        return col.values, col.offsets

    def lengths(self, name: str) -> np.ndarray:
        """Items per row of a column (int64)."""
        return np.diff(self.column(name).offsets)

    def row(self, name: str, i: int) -> np.ndarray:
        """The items of the batch's i-th row (a view; the UTF-8 bytes of a
        string or json column: see cell)."""
        col = self.column(name)
        return col.values[col.offsets[i]:col.offsets[i + 1]]

    def cell(self, name: str, i: int):
        """The i-th row's cell of a column: a str for a string column, the
        decoded value for a json column, the items (a view) otherwise."""
        return self.column(name).cell(i)

    def cells(self, name: str) -> list:
        """Every row's cell of a column, as cell gives them (uids, chat
        messages, extra_info dicts: what verl keeps in non_tensor_batch)."""
        col = self.column(name)
        return [col.cell(i) for i in range(len(col.offsets) - 1)]

    def padded(self, name: str, pad_value=0, multiple_of: int = 1,
               side: str = "right") -> tuple[np.ndarray, np.ndarray]:
        """(array, attention_mask): rows padded to the longest row rounded up
        to `multiple_of`, on the right (side="right": responses) or on the
        left (side="left": prompts before generation); the mask (bool, rows x
        length) is True on real items."""
        if multiple_of < 1:
            raise errors.InvalidArgument(f"multiple_of must be >= 1, got {multiple_of}")
        col = self.column(name)
        lengths = np.diff(col.offsets)
        longest = int(lengths.max()) if len(lengths) else 0
        width = -(-longest // multiple_of) * multiple_of
        mask = padding_mask(lengths, width, side)
        out = np.full((len(lengths), width) + col.values.shape[1:], pad_value,
                      dtype=col.values.dtype)
        out[mask] = col.values
        return out, mask

    def prompt_response(self, prompt: str | None = "prompt_ids",
                        response: str | None = "response_ids", *, pad_value=0,
                        multiple_of: int = 1) -> dict[str, np.ndarray]:
        """The layout RL trainers (verl's among them) feed the model: prompts
        padded on the left and responses on the right, side by side.
        Returns numpy arrays: "prompts" (rows x P), "responses" (rows x R),
        "input_ids" (rows x (P + R)), "attention_mask" (true on real tokens),
        "position_ids" (each row counting its real tokens from 0; 0 on left
        padding, continuing through right padding) and "response_mask"
        (rows x R, true on real response tokens). `prompt` None: no prompt
        column, P is 0; `response` None: no response column (a batch before
        generation), R is 0."""
        if prompt is None and response is None:
            raise errors.InvalidArgument("prompt_response: name a prompt or a response "
                                         "column (both are None)")
        if prompt is not None:
            prompts, prompt_mask = self.padded(prompt, pad_value, multiple_of, side="left")
        if response is not None:
            responses, response_mask = self.padded(response, pad_value, multiple_of)
        if prompt is None:
            prompts = np.zeros((len(self), 0), dtype=responses.dtype)
            prompt_mask = np.zeros((len(self), 0), dtype=response_mask.dtype)
        if response is None:
            responses = np.zeros((len(self), 0), dtype=prompts.dtype)
            response_mask = np.zeros((len(self), 0), dtype=prompt_mask.dtype)
        if prompts.ndim != 2 or responses.ndim != 2:
            raise errors.InvalidArgument(
                f"prompt_response: '{prompt}' and '{response}' must have one "
                "element per item (no inner_shape)")
        input_ids = np.concatenate([prompts, responses.astype(prompts.dtype)], axis=1)
        attention_mask = np.concatenate([prompt_mask, response_mask], axis=1)
        position_ids = np.clip(np.cumsum(attention_mask, axis=1) - 1, 0, None)
        return {"prompts": prompts, "responses": responses, "input_ids": input_ids,
                "attention_mask": attention_mask, "position_ids": position_ids,
                "response_mask": response_mask}

    @property
    def micro_batches(self) -> list["Batch"]:
        """The batch cut into its micro-batches (views, no copy): the server's
        plan, or the whole batch as one when the consumer has no plan (empty
        only for an empty batch)."""
        if not self.micro_batch_info:
            return [self] if len(self) else []
        return [self._slice(mb.begin, mb.end) for mb in self.micro_batch_info]

    def _slice(self, begin: int, end: int) -> "Batch":
        return Batch(step=self.step, rows=self.rows[begin:end],
                     token_counts=self.token_counts[begin:end],
                     end_of_step=self.end_of_step, timed_out=self.timed_out, round=self.round,
                     columns={n: c.rows(begin, end) for n, c in self._columns.items()},
                     stats=self.stats, consumer=self.consumer, rank=self.rank,
                     lease=self.lease, lease_seconds=self.lease_seconds,
                     keys=self.keys[begin:end] if self.keys is not None else None,
                     versions=self.versions[begin:end] if self.versions is not None else None,
                     repeats=_positions_in(self.repeats, begin, end))

    def to_tensordict(self, columns: Iterable[str] | None = None, *, device=None):
        """A tensordict.TensorDict of batch size [rows]: a jagged nested
        tensor per ragged column (values and offsets as received), a dense
        tensor (rows, *inner_shape) per column of one item per row (max_len
        1, every row written with its item), and the decoded cells of string
        and json columns as non-tensor data. bfloat16 columns become
        torch.bfloat16. With a device, tensors
        go there; otherwise they are CPU copies the caller owns. Put takes the
        TensorDict back (Dock.put(step, rows, td))."""
        import torch
        from tensordict import NonTensorStack, TensorDict
        td = TensorDict({}, batch_size=[len(self)], device=device)
        for name in (self.columns if columns is None else columns):
            col = self.column(name)
            if col.encoding != dock_pb2.ENCODING_RAW:
                td[name] = NonTensorStack(*self.cells(name), batch_size=[len(self)])
                continue
            values = _tensor(torch, col.values, col.dtype, device)
            if col.fixed and (np.diff(col.offsets) == 1).all():  # no row left empty
                td[name] = values
            else:
                offsets = _tensor(torch, col.offsets, None, device)
                td[name] = torch.nested.nested_tensor_from_jagged(values, offsets)
        return td

    def to_torch(self, columns: Iterable[str] | None = None, *,
                 padded: bool = False, pad_value=0, multiple_of: int = 1,
                 device=None) -> dict:
        """Torch tensors per column: (values, cu_seqlens) packed, or
        (array, attention_mask) with padded=True. CPU tensors are copies the
        caller owns; with a device, the data goes there straight from the
        message (one host-to-device copy). bfloat16 columns become
        torch.bfloat16."""
        import torch
        out = {}
        for name in (self.columns if columns is None else columns):
            col = self.column(name)
            if padded:
                first, second = self.padded(name, pad_value, multiple_of)
            else:
                first, second = col.values, col.offsets
            out[name] = (_tensor(torch, first, col.dtype, device),
                         _tensor(torch, second, None, device))
        return out


def _tensor(torch, array: np.ndarray, dtype: int | None, device):
    on_cpu = device is None or torch.device(device).type == "cpu"
    if on_cpu or not array.flags.aligned:
        array = np.array(array, copy=True)  # writable, aligned, owned
    if dtype == dock_pb2.BFLOAT16:  # uint16 bit patterns
        array = array.view(np.int16)
    with warnings.catch_warnings():
        # A read-only view of the message, only read by the copy to `device`.
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(array)
    if dtype == dock_pb2.BFLOAT16:
        t = t.view(torch.bfloat16)
    return t if on_cpu else t.to(device)


def from_response(header, wire_columns, column_specs: dict,
                  consumer: str = "", rank: int = 0) -> Batch:
    """A Batch from a decoded GetResponse / SampleResponse; `column_specs`
    (name -> dock_pb2.ColumnSpec) gives the columns' inner shapes and
    encodings."""
    columns = {}
    for wc in wire_columns:
        np_dtype = dtypes.numpy_of(wc.dtype)
        spec = column_specs.get(wc.name)
        inner = tuple(spec.inner_shape) if spec is not None else ()
        values = np.frombuffer(wc.data, dtype=np_dtype)
        if inner:
            values = values.reshape((-1,) + inner)
        columns[wc.name] = Column(wc.name, wc.dtype, values, wc.offsets,
                                  spec.encoding if spec is not None else 0,
                                  spec is not None and spec.max_len == 1)
    stats = (BalanceStats.from_proto(header.balance)
             if header.HasField("balance") else None)
    return Batch(
        step=header.step,
        rows=np.asarray(header.rows, dtype=np.int64),
        token_counts=np.asarray(header.token_counts, dtype=np.int64),
        end_of_step=header.end_of_step, timed_out=header.timed_out,
        round=header.round, columns=columns,
        micro_batch_info=[MicroBatchInfo(m.begin, m.end, m.padded_len, m.tokens,
                                         m.padded_tokens)
                          for m in header.micro_batches],
        stats=stats, consumer=consumer, rank=rank,
        lease=getattr(header, "lease_id", 0) or None,
        lease_seconds=getattr(header, "lease_ms", 0) / 1000.0,
        keys=list(header.keys) or None,
        versions=np.asarray(header.versions, dtype=np.int64) if len(header.versions) else None,
        repeats=(np.asarray(header.repeats, dtype=np.int64)
                 if len(getattr(header, "repeats", ())) else None))


def _positions_in(positions: np.ndarray | None, begin: int, end: int) -> np.ndarray | None:
    """The positions in [begin, end), relative to begin; None when none."""
    if positions is None:
        return None
    inside = positions[(positions >= begin) & (positions < end)] - begin
    return inside if len(inside) else None
