"""Column dtypes: names, wire enum values and their numpy representation.

bfloat16 has no numpy dtype: its cells travel and arrive as ``np.uint16`` bit
patterns (``Batch.to_torch`` views them as ``torch.bfloat16``); a Put accepts
uint16/int16 bit patterns, float32 arrays (rounded to nearest even) and
``torch.bfloat16`` tensors.
"""

from __future__ import annotations

import numpy as np

from tdock import errors
from tdock.v1 import dock_pb2

# name -> (wire enum value, numpy dtype of a cell's elements)
_DTYPES = {
    "int8": (dock_pb2.INT8, np.dtype(np.int8)),
    "uint8": (dock_pb2.UINT8, np.dtype(np.uint8)),
    "int16": (dock_pb2.INT16, np.dtype("<i2")),
    "int32": (dock_pb2.INT32, np.dtype("<i4")),
    "int64": (dock_pb2.INT64, np.dtype("<i8")),
    "float16": (dock_pb2.FLOAT16, np.dtype("<f2")),
    "bfloat16": (dock_pb2.BFLOAT16, np.dtype("<u2")),
    "float32": (dock_pb2.FLOAT32, np.dtype("<f4")),
    "float64": (dock_pb2.FLOAT64, np.dtype("<f8")),
    "bool": (dock_pb2.BOOL, np.dtype(np.bool_)),
    "bytes": (dock_pb2.BYTES, np.dtype(np.uint8)),
}
_BY_ENUM = {enum: (name, dt) for name, (enum, dt) in _DTYPES.items()}

# Column types that are bytes on the server, encoded and decoded by clients:
# name -> wire ColumnEncoding.
ENCODINGS = {"string": dock_pb2.UTF8, "json": dock_pb2.JSON, "tensors": dock_pb2.TENSORS}

NAMES = tuple(_DTYPES) + tuple(ENCODINGS)


def parse(name: str, where: str) -> tuple[int, int]:
    """The wire dtype and ColumnEncoding of a column type name (a dtype,
    "string", "json" or "tensors"; case-insensitive)."""
    lower = str(name).lower()
    if lower in ENCODINGS:
        return dock_pb2.BYTES, ENCODINGS[lower]
    entry = _DTYPES.get(lower)
    if entry is None:
        raise errors.InvalidArgument(
            f"{where}: unknown dtype '{name}' (one of {', '.join(NAMES)})")
    return entry[0], dock_pb2.ENCODING_RAW


def name_of(enum: int) -> str:
    return _BY_ENUM[enum][0] if enum in _BY_ENUM else "unspecified"


def enum_of_numpy(dtype: np.dtype) -> int | None:
    """The wire dtype whose cells are held in numpy's `dtype` (bfloat16 and
    bytes are never inferred); None when no column dtype is."""
    for name, (enum, held) in _DTYPES.items():
        if name not in ("bfloat16", "bytes") and held == dtype:
            return enum
    return None


def numpy_of(enum: int) -> np.dtype:
    """The numpy dtype cells of this wire dtype are held in."""
    if enum not in _BY_ENUM:
        raise errors.InvalidArgument(f"unknown wire dtype {enum}")
    return _BY_ENUM[enum][1]


def float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (NaN kept)."""
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4")
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype("<u2")
    nan = np.isnan(values)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded
