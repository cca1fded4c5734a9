"""The typed encoding of Python values in bytes cells, never a pickle: a
`tensors` column's cells (tdock.Dock) and tdock.transferqueue's Python-value
fields (a cell per key).

A cell holds one Python value: None, bool, int, float, str, bytes, lists,
tuples and dicts with str keys of these, torch tensors and numpy arrays (at
any depth, e.g. verl's `multi_modal_inputs`, a dict of tensors). Anything
else (sets, functions, class instances) is refused with
errors.InvalidArgument naming the field, the key and the type. Decoding
reads JSON and raw bytes only, so a writer cannot run code in a reader; a
cell not in this layout (a pickle, truncated bytes) raises errors.DataLoss.

Layout (all integers little-endian):

    magic       4 bytes  b"TQC1"
    header_len  uint32
    header      header_len bytes: the value as UTF-8 JSON, each array
                replaced by {"__tdock_array__": descriptor}
    data        the arrays' raw bytes, C order, at the descriptors' offsets
                (relative to the start of data)

A descriptor is {"kind", "dtype", "shape", "offset", "nbytes"}:
  kind "torch":  dtype a torch dtype's name ("bfloat16", "int64", ...);
  kind "numpy":  dtype numpy's dtype.str ("<f4", "|b1", "<U5", "<M8[ns]");
                 dtype "object" (an object array) has "items", the flat
                 list of its elements encoded as above, instead of bytes;
  kind "bytes":  a Python bytes value; dtype "uint8", shape [len].
Tuples come back as lists, subclasses of dict/list/str/int/float as the
base type, numpy scalars as Python numbers, tensors on the CPU and detached.
"""

from __future__ import annotations

import functools
import json
import math
import struct
import sys
from typing import Any

import numpy as np

from tdock import errors

MAGIC = b"TQC1"
ARRAY = "__tdock_array__"
_HEAD = struct.Struct("<4sI")
_TORCH_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32",
                 "uint64", "float16", "bfloat16", "float32", "float64", "complex64",
                 "complex128", "float8_e4m3fn", "float8_e5m2")


@functools.lru_cache(maxsize=2)
def _torch_dtypes(torch) -> dict:
    """torch's dtypes a cell holds, by name (those this torch has)."""
    return {name: getattr(torch, name) for name in _TORCH_DTYPES
            if isinstance(getattr(torch, name, None), torch.dtype)}
_NUMPY_KINDS = "biufcSUmM"  # fixed-size numbers, strings, dates: no objects, no records
_ALLOWED = ("None, bool, int, float, str, bytes, lists, tuples and dicts with str keys of "
            "these, torch tensors and numpy arrays")


class _Refused(Exception):
    """A value encode() cannot store: `path` is where in the cell."""

    def __init__(self, path: str, what: str):
        super().__init__(what)
        self.path, self.what = path, what


def encode(value: Any, field: str, key: str) -> bytes:
    """The cell of one key's value; errors.InvalidArgument names the field,
    the key and the first part of the value that is not storable."""
    return encode_value(value, f"transferqueue: field '{field}' key '{key}'")


def encode_value(value: Any, where: str) -> bytes:
    """The cell of `value`; errors.InvalidArgument names `where` (what the
    value is, e.g. "field 'x' key 'k'") and the part that is not storable."""
    data: list[bytes] = []
    try:
        header = json.dumps(_tree(value, data, [0], ""), ensure_ascii=False,
                            separators=(",", ":")).encode("utf-8")
    except _Refused as e:
        at = f" at {e.path}" if e.path else ""
        raise errors.InvalidArgument(
            f"{where}{at}: {e.what}; a stored Python value may hold {_ALLOWED}") from None
    except RecursionError:
        raise errors.InvalidArgument(
            f"{where}: the value is nested too deeply or contains itself") from None
    return b"".join([_HEAD.pack(MAGIC, len(header)), header, *data])


def _tree(v: Any, data: list[bytes], end: list[int], path: str) -> Any:
    """The JSON-able form of v; arrays' bytes are appended to data (end[0]
    is their total length)."""
    if v is None or type(v) in (bool, int, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, bytes):
        return _blob("bytes", "uint8", [len(v)], bytes(v), data, end)
    if isinstance(v, (list, tuple)):
        return [_tree(x, data, end, f"{path}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if type(k) is not str and not isinstance(k, np.str_):
                raise _Refused(path, f"a dict key {k!r} of type {type(k).__name__} (keys "
                                     f"must be str)")
            if k == ARRAY:
                raise _Refused(path, f"the dict key '{ARRAY}' is reserved")
            out[str(k)] = _tree(x, data, end, f"{path}[{k!r}]")
        return out
    # A value holds a tensor only where torch is imported already.
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor) and not v.is_nested \
            and v.layout == torch.strided and not v.is_quantized:
        names = {dtype: name for name, dtype in _torch_dtypes(torch).items()}
        if v.dtype not in names:
            raise _Refused(path, f"a tensor of dtype {v.dtype}")
        t = v.detach().cpu().resolve_conj().resolve_neg().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return _blob("torch", names[v.dtype], list(t.shape), raw, data, end)
    if torch is not None and isinstance(v, torch.Tensor):
        raise _Refused(path, f"a {'nested' if v.is_nested else str(v.layout)} tensor "
                             f"(a cell holds strided tensors)")
    if type(v) is np.ndarray:
        if v.dtype == object:
            return {ARRAY: {"kind": "numpy", "dtype": "object", "shape": list(v.shape),
                            "items": [_tree(x, data, end, f"{path}[{i}]")
                                      for i, x in enumerate(v.reshape(-1))]}}
        if v.dtype.kind not in _NUMPY_KINDS or v.dtype.fields is not None:
            raise _Refused(path, f"a numpy array of dtype {v.dtype}")
        return _blob("numpy", v.dtype.str, list(v.shape), v.tobytes(order="C"), data, end)
    t = type(v)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    raise _Refused(path, f"a value of type {name} is not storable")


def _blob(kind: str, dtype: str, shape: list, raw: bytes, data: list, end: list) -> dict:
    data.append(raw)
    end[0] += len(raw)
    return {ARRAY: {"kind": kind, "dtype": dtype, "shape": shape,
                    "offset": end[0] - len(raw), "nbytes": len(raw)}}


def decode(cell: bytes, field: str, key: str) -> Any:
    """The value of a cell encode() wrote. Reads JSON and raw bytes only;
    errors.DataLoss names the field and key of a cell in another layout."""
    try:
        return parse(cell)
    except Malformed as e:
        raise errors.DataLoss(f"transferqueue: field '{field}' key '{key}': the stored cell "
                              f"is not a tdock typed value: {e}") from None


class Malformed(ValueError):
    """parse()'s error: what in the bytes is not in this layout."""


def parse(cell: bytes | memoryview) -> Any:
    """The value of a cell encode_value() wrote. Reads JSON and raw bytes
    only; raises Malformed (never anything else) for bytes in another layout."""
    try:
        if len(cell) < _HEAD.size or bytes(cell[:4]) != MAGIC:
            raise ValueError(f"it does not start with {MAGIC!r} (it starts with "
                             f"{bytes(cell[:8])!r}; a value pickled by an older client is "
                             f"never unpickled)")
        _, n = _HEAD.unpack_from(cell)
        if _HEAD.size + n > len(cell):
            raise ValueError(f"its header of {n} bytes runs past its {len(cell)} bytes")
        header = json.loads(bytes(cell[_HEAD.size:_HEAD.size + n]).decode("utf-8"))
        return _value(header, memoryview(cell)[_HEAD.size + n:])
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        raise Malformed(str(e)) from None


def _torch_to_read(kind: Any, dtype: Any):
    """torch, to read an array of `kind` "torch" (None for other kinds)."""
    if kind != "torch":
        return None
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise errors.FailedPrecondition(
            f"a cell holds a torch tensor (dtype {dtype}): install torch to read it") from None
    return torch


def _value(h: Any, data: memoryview) -> Any:
    if isinstance(h, list):
        return [_value(x, data) for x in h]
    if not isinstance(h, dict):
        return h
    if ARRAY not in h:
        return {k: _value(x, data) for k, x in h.items()}
    if len(h) != 1 or not isinstance(h[ARRAY], dict):
        raise ValueError(f"a malformed '{ARRAY}' entry")
    d = h[ARRAY]
    kind, dtype, shape = d["kind"], d["dtype"], d["shape"]
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise ValueError(f"an array shape {shape!r}")
    if kind == "numpy" and dtype == "object":
        items = d["items"]
        if not isinstance(items, list) or len(items) != math.prod(shape):
            raise ValueError(f"an object array of shape {shape} without its items")
        out = np.empty(len(items), dtype=object)
        for i, x in enumerate(items):  # item by item: numpy would broadcast nested lists
            out[i] = _value(x, data)
        return out.reshape(shape)
    torch = _torch_to_read(kind, dtype)
    if kind == "torch" and isinstance(dtype, str) and dtype in _torch_dtypes(torch):
        dt = _torch_dtypes(torch)[dtype]
        itemsize = dt.itemsize
    elif kind == "numpy" and isinstance(dtype, str):
        dt = np.dtype(dtype)
        if dt.kind not in _NUMPY_KINDS or dt.fields is not None or dt.str != dtype:
            raise ValueError(f"a numpy dtype {dtype!r}")
        itemsize = dt.itemsize
    elif kind == "bytes" and dtype == "uint8" and len(shape) == 1:
        itemsize = 1
    else:
        raise ValueError(f"an array of kind {kind!r} and dtype {dtype!r}")
    offset, nbytes = d["offset"], d["nbytes"]
    if type(offset) is not int or type(nbytes) is not int or offset < 0 \
            or nbytes != math.prod(shape) * itemsize or offset + nbytes > len(data):
        raise ValueError(f"an array of shape {shape} and dtype {dtype} with {nbytes} bytes "
                         f"at {offset} (the cell has {len(data)})")
    raw = data[offset:offset + nbytes]
    if kind == "bytes":
        return bytes(raw)
    if kind == "numpy":
        return np.frombuffer(raw, dtype=dt).reshape(shape).copy() if nbytes \
            else np.zeros(shape, dtype=dt)
    if not nbytes:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape)
