"""Turning a Put's column values into packed wire columns.

A column's value for n rows may be:
- a list of n arrays (numpy arrays, torch tensors, Python lists, or bytes for
  a bytes column), each holding one row's items;
- a padded array of shape (n, width, *inner_shape), every row full width, or
  a ``Padded(array, lengths)`` / ``(array, lengths)`` pair giving each row's
  length (``Padded(array, lengths, side="left")`` for rows padded on the left;
  ``Padded.from_mask(array, attention_mask)`` takes the lengths and the side
  from a mask);
- ``Packed(values, offsets)``: all rows' items back to back and the rows'
  item offsets (rows + 1), which is what ``Batch.packed`` returns;
- a torch nested tensor with the jagged layout (``Batch.to_tensordict`` makes
  them): its values and offsets, as Packed;
- an array of shape (n, *inner_shape): one item per row (scores, rewards);
- for a string column, a list of n str; for a json column, a list of n values
  json.dumps takes (dicts, lists, strings, numbers, None): each is encoded
  to UTF-8 bytes here, and Batch.cell / Batch.cells decode them.
Row arrays are not concatenated here: the encoder joins them straight into the
message. Values must have the column's dtype or one numpy casts to it safely
(int32 into int64, not int64 into int32); Python lists are converted to the
column's dtype.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from tdock import _tq_cells, dtypes, errors
from tdock.v1 import dock_pb2
from tdock.wire import PutColumn


def padding_mask(lengths: np.ndarray, width: int, side: str) -> np.ndarray:
    """(rows x width) bool, true on each row's `lengths[i]` real items, at the
    start of the row (side "right": padding after them) or at its end
    ("left")."""
    positions = np.arange(width)[None, :]
    if side == "right":
        return positions < lengths[:, None]
    if side == "left":
        return positions >= width - lengths[:, None]
    raise errors.InvalidArgument(f"side must be 'right' or 'left', got {side!r}")


class Padded(NamedTuple):
    """Padded rows: row i is array[i, :lengths[i]] (side "right") or
    array[i, width - lengths[i]:] (side "left")."""
    array: Any
    lengths: Any
    side: str = "right"

    @classmethod
    def from_mask(cls, array: Any, attention_mask: Any) -> "Padded":
        """Rows padded on either side, their lengths and side read from an
        attention mask (rows x width, true on real items; every row's real
        items contiguous). A mask with real items at the start of every row
        and padding after them reads as right padding, the opposite as left."""
        mask = np.asarray(_numpy(attention_mask)).astype(bool)
        if mask.ndim != 2:
            raise errors.InvalidArgument(
                f"attention_mask: expected rows x width, got shape {mask.shape}")
        lengths = mask.sum(axis=1).astype(np.int64)
        for side in ("right", "left"):
            if (mask == padding_mask(lengths, mask.shape[1], side)).all():
                return cls(array, lengths, side)
        raise errors.InvalidArgument(
            "attention_mask: each row's real items must be contiguous at its start "
            "(right padding) or at its end (left padding), the same side for every row")


class Packed(NamedTuple):
    """All rows' items back to back (items, *inner_shape) and the rows' item
    offsets (rows + 1, from 0): Batch.packed's (values, cu_seqlens)."""
    values: Any
    offsets: Any


def _numpy(value: Any) -> np.ndarray:
    """A numpy array over a torch tensor's memory (CPU copy for devices)."""
    module = type(value).__module__
    if module.startswith("torch"):
        import torch
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view("<u2")
        return t.contiguous().numpy()
    return value


def _cast(array: np.ndarray, dtype_enum: int, where: str) -> np.ndarray:
    want = dtypes.numpy_of(dtype_enum)
    if array.dtype == want:
        return array
    if dtype_enum == dock_pb2.BFLOAT16 and array.dtype in (np.int16, np.uint16):
        return array.view("<u2")
    if dtype_enum == dock_pb2.BFLOAT16 and array.dtype in (np.float32, np.float64):
        return dtypes.float32_to_bfloat16_bits(array.astype("<f4"))
    if not np.can_cast(array.dtype, want, casting="safe"):
        raise errors.InvalidArgument(
            f"{where}: values of dtype {array.dtype} do not fit the column's "
            f"dtype {dtypes.name_of(dtype_enum)} (convert them with .astype)")
    return array.astype(want)


def _from_python(value: Any, dtype_enum: int, where: str) -> np.ndarray:
    """A Python list of numbers as the column's dtype, refusing values that
    would change (out of range, or fractions into an integer column)."""
    want = dtypes.numpy_of(dtype_enum)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise errors.InvalidArgument(f"{where}: {e}")
    if array.size == 0:
        return np.zeros(array.shape, dtype=want)
    if array.dtype.kind not in "biuf":
        raise errors.InvalidArgument(
            f"{where}: expected numbers, got values of type {array.dtype}")
    if want.kind in "iu" and dtype_enum != dock_pb2.BFLOAT16:
        if array.dtype.kind == "f":
            raise errors.InvalidArgument(
                f"{where}: fractional values for the integer column")
        info = np.iinfo(want)
        if array.min() < info.min or array.max() > info.max:
            raise errors.InvalidArgument(
                f"{where}: values outside [{info.min}, {info.max}] "
                f"of {dtypes.name_of(dtype_enum)}")
    if dtype_enum == dock_pb2.BFLOAT16:
        return dtypes.float32_to_bfloat16_bits(array.astype("<f4"))
    return array.astype(want)


def _as_array(value: Any, dtype_enum: int, where: str) -> np.ndarray:
    if isinstance(value, (bytes, bytearray, memoryview)) and \
            dtype_enum in (dock_pb2.BYTES, dock_pb2.UINT8, dock_pb2.INT8):
        return np.frombuffer(value, dtype=dtypes.numpy_of(dtype_enum))
    if isinstance(value, (list, tuple, int, float)):
        return _from_python(value, dtype_enum, where)
    value = _numpy(value)
    if not isinstance(value, np.ndarray):
        raise errors.InvalidArgument(
            f"{where}: expected an array, a tensor or a list, got "
            f"{type(value).__name__}")
    return np.ascontiguousarray(_cast(value, dtype_enum, where))


def _item_count(array: np.ndarray, inner: tuple, where: str) -> int:
    """Items in one row's array (its leading dimension after inner_shape)."""
    if inner:
        if array.ndim != 1 + len(inner) or tuple(array.shape[1:]) != inner:
            raise errors.InvalidArgument(
                f"{where}: shape {tuple(array.shape)} is not (items, "
                f"{', '.join(map(str, inner))})")
        return array.shape[0]
    if array.ndim != 1:
        raise errors.InvalidArgument(
            f"{where}: expected a 1-D array, got shape {tuple(array.shape)}")
    return array.shape[0]


def _from_rows(name: str, spec, rows: Sequence, inner: tuple) -> PutColumn:
    pieces, counts = [], []
    for i, row in enumerate(rows):
        array = _as_array(row, spec.dtype, f"column '{name}' row {i}")
        counts.append(_item_count(array, inner, f"column '{name}' row {i}"))
        pieces.append(memoryview(array).cast("B") if array.size else b"")
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    nbytes = sum(len(p) for p in pieces)
    return PutColumn(name, spec.dtype, offsets, pieces, nbytes)


def _from_packed(name: str, spec, packed: Packed, n: int, inner: tuple) -> PutColumn:
    where = f"column '{name}'"
    offsets = np.asarray(_numpy(packed.offsets)).reshape(-1)
    if offsets.dtype.kind not in "iu":
        raise errors.InvalidArgument(f"{where}: Packed offsets must be integers")
    offsets = offsets.astype(np.int64)
    if len(offsets) != n + 1:
        raise errors.InvalidArgument(
            f"{where}: {len(offsets)} Packed offsets for {n} rows (need {n + 1})")
    values = _as_array(packed.values, spec.dtype, where)
    if values.ndim != 1 + len(inner) or tuple(values.shape[1:]) != inner:
        raise errors.InvalidArgument(
            f"{where}: Packed values of shape {tuple(values.shape)} are not (items"
            f"{''.join(', ' + str(d) for d in inner)})")
    if offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != values.shape[0]:
        raise errors.InvalidArgument(
            f"{where}: Packed offsets must rise from 0 to the {values.shape[0]} items")
    return PutColumn(name, spec.dtype, offsets, [memoryview(values).cast("B")]
                     if values.size else [], values.nbytes)


def _nested(value: Any) -> Packed | None:
    """A torch nested tensor (jagged layout) as Packed; None for anything else."""
    if not type(value).__module__.startswith("torch") or not getattr(value, "is_nested", False):
        return None
    import torch
    if value.layout != torch.jagged:  # strided nested: one tensor per row
        rows = value.unbind()
        lengths = torch.tensor([r.shape[0] for r in rows], dtype=torch.int64)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        return Packed(torch.cat(rows) if rows else value.values(), offsets)
    offsets = value.offsets()
    first, last = int(offsets[0]), int(offsets[-1])  # a slice starts past 0
    return Packed(value.values()[first:last], offsets - first)


def from_mapping(columns: Any) -> Mapping[str, Any]:
    """A Put's columns: a mapping of name to value, or a TensorDict, whose
    non-tensor entries (tensordict's NonTensorStack: strings, JSON values)
    become lists."""
    if type(columns).__module__.startswith("tensordict"):
        out = {}
        for key in columns.keys():
            value = columns.get(key)
            if type(value).__module__.startswith("tensordict"):
                value = value.tolist()  # NonTensorStack / NonTensorData
            out[key] = value
        return out
    if not isinstance(columns, Mapping):
        raise errors.InvalidArgument(
            f"put: columns must be a mapping of column name to values or a "
            f"TensorDict, got {type(columns).__name__}")
    return columns


def _from_padded(name: str, spec, array: np.ndarray, lengths, n: int,
                 inner: tuple, side: str = "right") -> PutColumn:
    where = f"column '{name}'"
    if array.ndim != 2 + len(inner) or tuple(array.shape[2:]) != inner:
        raise errors.InvalidArgument(
            f"{where}: padded shape {tuple(array.shape)} is not (rows, width"
            f"{''.join(', ' + str(d) for d in inner)})")
    if side not in ("right", "left"):
        raise errors.InvalidArgument(f"{where}: Padded side must be 'right' or 'left', "
                                     f"got {side!r}")
    width = array.shape[1]
    if lengths is None:
        # Every row full width: the array is the rows back to back already,
        # their offsets steps of the width.
        return PutColumn(name, spec.dtype, np.arange(n + 1, dtype=np.int64) * width,
                         [memoryview(array).cast("B")] if array.size else [], array.nbytes)
    lengths = np.asarray(_numpy(lengths), dtype=np.int64).reshape(-1)
    if len(lengths) != n:
        raise errors.InvalidArgument(
            f"{where}: {len(lengths)} lengths for {n} rows")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > width):
        raise errors.InvalidArgument(
            f"{where}: lengths must be in [0, {width}] (the padded width)")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if n and (lengths == width).all():
        pieces = [memoryview(array).cast("B")]  # already packed
    elif side == "right":
        pieces = [memoryview(array[i, :lengths[i]]).cast("B")
                  for i in range(n) if lengths[i]]
    else:
        pieces = [memoryview(array[i, width - lengths[i]:]).cast("B")
                  for i in range(n) if lengths[i]]
    return PutColumn(name, spec.dtype, offsets, pieces,
                     int(offsets[-1]) * array.itemsize * int(np.prod(inner, dtype=np.int64)))


def _encoded(name: str, value: Any, spec: dock_pb2.ColumnSpec, n: int) -> PutColumn:
    """A string or json column's n values as UTF-8 cells; a tensors
    column's in the typed encoding (_tq_cells)."""
    kind = {dock_pb2.UTF8: "string", dock_pb2.JSON: "json"}.get(spec.encoding, "tensors")
    if not isinstance(value, (list, tuple)):
        raise errors.InvalidArgument(
            f"column '{name}' ({kind}): expected a list of {n} values, got "
            f"{type(value).__name__}")
    if len(value) != n:
        raise errors.InvalidArgument(
            f"column '{name}' ({kind}): {len(value)} values for {n} rows")
    cells = []
    for i, v in enumerate(value):
        where = f"column '{name}' ({kind}) row {i}"
        if spec.encoding == dock_pb2.TENSORS:
            cells.append(_tq_cells.encode_value(v, where))
            continue
        if spec.encoding == dock_pb2.UTF8:
            if not isinstance(v, str):
                raise errors.InvalidArgument(
                    f"{where}: expected a str, got {type(v).__name__}")
            text = v
        else:
            try:
                text = json.dumps(v, ensure_ascii=False, separators=(",", ":"),
                                  allow_nan=False)
            except (TypeError, ValueError) as e:
                raise errors.InvalidArgument(f"{where}: not JSON: {e}") from None
        try:
            cells.append(text.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise errors.InvalidArgument(f"{where}: not UTF-8: {e}") from None
    return _from_rows(name, spec, cells, ())


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "dtype")


def _numeric_column(name: str, values: Any, skip: int, where: str) -> dock_pb2.ColumnSpec:
    """A numeric column for `values` (an array or a tensor, read where it
    is): their dtype, the axes past `skip` the items' shape."""
    shape = list(values.shape[skip:])
    if _is_tensor(values):
        if str(values.dtype) == "torch.bfloat16":
            return dock_pb2.ColumnSpec(name=name, dtype=dock_pb2.BFLOAT16, inner_shape=shape)
        try:
            dtype = np.dtype(str(values.dtype).removeprefix("torch."))
        except TypeError:
            dtype = None
    else:
        dtype = np.asarray(values).dtype
    enum = dtypes.enum_of_numpy(dtype) if dtype is not None and dtype.kind in "biuf" else None
    if enum is None:
        raise errors.InvalidArgument(
            f"{where}: values of dtype {values.dtype} fit no column dtype (one of "
            f"{', '.join(n for n in dtypes.NAMES if n != 'bytes')}); convert them, or "
            "add the column first")
    return dock_pb2.ColumnSpec(name=name, dtype=enum, inner_shape=shape)


def _row_arrays(rows: list) -> list:
    """The rows as arrays of numbers when each is an array, a tensor or a
    list of numbers with at least one axis, of one item shape, and of one
    dtype (lists of numbers take the dtype that holds them all; empty rows
    count only when every row is empty); else []."""
    arrays, from_lists = [], []
    for v in rows:
        listed = isinstance(v, (list, tuple))
        if listed:
            try:
                v = np.asarray(v)
            except (ValueError, TypeError):
                return []
            if v.dtype.kind not in "biuf":
                return []
        elif not (isinstance(v, np.ndarray) or _is_tensor(v)):
            return []
        if len(v.shape) < 1:
            return []
        arrays.append(v)
        from_lists.append(listed)
    counted = [i for i, a in enumerate(arrays) if a.shape[0] > 0] or range(len(arrays))
    if len({tuple(arrays[i].shape[1:]) for i in counted}) != 1:
        return []
    if all(from_lists[i] for i in counted):
        dtype = np.result_type(*(arrays[i].dtype for i in counted))
        return [arrays[i].astype(dtype) for i in counted][:1]
    if len({str(arrays[i].dtype) for i in counted}) != 1 or any(from_lists[i] for i in counted):
        return []
    return [arrays[counted[0]]]


def _scalars(rows: list) -> Any:
    """The rows as one array (numpy) or tensor (torch) of shape (n,) when
    each is a number or a 0-d array or tensor; else None."""
    numbers = (bool, int, float, np.bool_, np.integer, np.floating)
    if not rows or not all(isinstance(v, numbers) or
                           ((isinstance(v, np.ndarray) or _is_tensor(v)) and len(v.shape) == 0)
                           for v in rows):
        return None
    if any(_is_tensor(v) for v in rows):
        import torch
        return torch.stack([torch.as_tensor(v) for v in rows])
    return np.asarray([np.asarray(v) for v in rows])


def infer_column(name: str, value: Any, n: int) -> tuple[dock_pb2.ColumnSpec, Any]:
    """The column a dock with add_columns_on_write adds for a Put of n rows
    of `value` in a column it lacks, and the value to write into it.

    Numbers keep their dtype, the first axis being rows and the second a
    row's items: an array or tensor of shape (n,) is one item per row, (n,
    L, *inner) L items of shape inner per row; Packed values and nested
    tensors are (items, *inner); a list of per-row arrays is (items,
    *inner) each (lists of numbers included, in the dtype that holds them
    all); a list of numbers, or of 0-d arrays or tensors, is one item per
    row. A list of str is a string column. Any other list of n values
    (dicts, lists, tensors of mixed shapes, None, bytes) is a tensors
    column: one typed value per cell."""
    where = f"column '{name}'"
    if isinstance(value, tuple) and len(value) == 2 and not isinstance(value, Padded) and \
            (isinstance(value[0], np.ndarray) or _is_tensor(value[0])) and len(value[0].shape) >= 2:
        value = Padded(*value)  # (array, lengths), as put_column reads it
    packed = value if isinstance(value, Packed) else _nested(value)
    if packed is not None:
        return _numeric_column(name, packed.values, 1, where), value
    if isinstance(value, Padded):
        return _numeric_column(name, value.array, 2, where), value
    if isinstance(value, (list, tuple)):
        rows = list(value)
        if len(rows) != n:
            raise errors.InvalidArgument(f"{where}: {len(rows)} rows of values for {n} rows")
        if rows and all(isinstance(v, str) for v in rows):
            return dock_pb2.ColumnSpec(name=name, dtype=dock_pb2.BYTES,
                                       encoding=dock_pb2.UTF8), rows
        scalars = _scalars(rows)
        if scalars is not None:
            return _numeric_column(name, scalars, 1, where), scalars
        arrays = _row_arrays(rows)
        if arrays:
            return _numeric_column(name, arrays[0], 1, where), rows
        return dock_pb2.ColumnSpec(name=name, dtype=dock_pb2.BYTES,
                                   encoding=dock_pb2.TENSORS), rows
    if isinstance(value, np.ndarray) or _is_tensor(value):
        return _numeric_column(name, value, min(len(value.shape), 2), where), value
    raise errors.InvalidArgument(
        f"{where}: a column is added from an array, a tensor, Packed, Padded or a list of "
        f"{n} values, not {type(value).__name__}")


def put_column(name: str, value: Any, spec: dock_pb2.ColumnSpec, n: int
               ) -> PutColumn:
    """The wire column for n rows of `value` (see the module comment)."""
    if spec.encoding != dock_pb2.ENCODING_RAW:
        return _encoded(name, value, spec, n)
    inner = tuple(spec.inner_shape)
    where = f"column '{name}'"
    lengths, side = None, "right"
    packed = value if isinstance(value, Packed) else _nested(value)
    if packed is not None:
        return _from_packed(name, spec, packed, n, inner)
    if isinstance(value, tuple) and len(value) == 2 and not isinstance(value, Padded):
        value = Padded(*value)
    if isinstance(value, Padded):
        value, lengths, side = value.array, value.lengths, value.side
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise errors.InvalidArgument(f"{where}: {len(value)} rows of values for {n} rows")
        return _from_rows(name, spec, value, inner)
    array = _as_array(value, spec.dtype, where)
    if lengths is None and array.ndim == 1 + len(inner):
        # One item per row.
        if array.shape[0] != n:
            raise errors.InvalidArgument(f"{where}: {array.shape[0]} values for {n} rows")
        offsets = np.arange(n + 1, dtype=np.int64)
        return PutColumn(name, spec.dtype, offsets,
                         [memoryview(array).cast("B")], array.nbytes)
    if array.shape[0] != n:
        raise errors.InvalidArgument(f"{where}: {array.shape[0]} padded rows for {n} rows")
    return _from_padded(name, spec, array, lengths, n, inner, side)
