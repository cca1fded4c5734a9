"""The data plane's wire format, encoded and decoded around the payload.

PutRequest, GetResponse and their PackedColumns are protobuf messages whose
bulk ``data`` fields (field 15) come last. A Put is built as one ``bytes``:
the small header is serialized by protobuf, then each column's header and its
row arrays are joined in place (``bytes.join`` reads the caller's arrays
through the buffer protocol: one copy, no intermediate concatenation). A Get's
response arrives as one ``bytes`` object; only its headers are parsed by
protobuf, and each column's data becomes a numpy view into that object, so
the payload is never copied again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from tdock import errors
from tdock.v1 import dock_pb2

_DATA_FIELD = 15
_LEN = 2  # wire type of length-delimited fields
_DATA_TAG = bytes([(_DATA_FIELD << 3) | _LEN])


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            break
    raise errors.Internal("malformed response: bad varint")


def _skip(buf: memoryview, pos: int, end: int, wire_type: int) -> int:
    """The position after a field's value of `wire_type` starting at pos."""
    if wire_type == 0:
        return _read_varint(buf, pos, end)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        length, pos = _read_varint(buf, pos, end)
        return pos + length
    if wire_type == 5:
        return pos + 4
    raise errors.Internal(f"malformed response: wire type {wire_type}")


@dataclass
class PutColumn:
    """One column of a Put: its header fields and the row pieces to join."""
    name: str
    dtype: int
    offsets: np.ndarray  # rows + 1 item offsets
    pieces: Sequence  # buffers holding the rows' items back to back
    nbytes: int


def encode_put(header: dock_pb2.PutRequest, columns: Sequence[PutColumn],
               data: bool = True) -> bytes:
    """A PutRequest: header fields, then each column with its data last
    (without `data`: the columns' offsets alone, for a Put whose bytes go
    through a shard's shared memory)."""
    return b"".join([header.SerializeToString()] + _column_parts(columns, data))


def _column_parts(columns: Sequence[PutColumn], data: bool) -> list:
    """Each column as a PackedColumn field of a PutRequest: its header, then
    its data's tag and length, then (with `data`) its row pieces."""
    parts = []
    for col in columns:
        head = dock_pb2.PackedColumn(name=col.name, dtype=col.dtype,
                                     offsets=col.offsets.tolist())
        head_bytes = head.SerializeToString()
        nbytes = col.nbytes if data else 0
        data_len = _varint(nbytes)
        body_len = len(head_bytes) + 1 + len(data_len) + nbytes
        parts += [_DATA_TAG, _varint(body_len), head_bytes, _DATA_TAG, data_len]
        if data:
            parts += col.pieces
    return parts


# PutRequest.prepared_extent (field 19, a varint): its tag.
_EXTENT_TAG = _varint(19 << 3)


@dataclass
class PutMessage:
    """A Put before it is encoded: its header and its columns. Neither
    changes once it is encoded (without_data keeps its encoding)."""
    header: dock_pb2.PutRequest
    columns: Sequence[PutColumn]
    # Its encoding without the columns' bytes, made by the first
    # without_data: the header's fields, and the columns' fields.
    _bare: tuple[bytes, bytes] | None = field(default=None, init=False, repr=False,
                                              compare=False)

    def encode(self) -> bytes:
        return encode_put(self.header, self.columns)

    def without_data(self, prepared_extent: int = 0) -> bytes:
        """The Put without its columns' bytes: to prepare it at a shard, or
        (with the extent the shard prepared) to send once they are written.
        Both are one encoding, made once: the extent is a field of its own
        between the header's fields and the columns' (protobuf takes fields
        in any order)."""
        if self._bare is None:
            self._bare = (self.header.SerializeToString(),
                          b"".join(_column_parts(self.columns, data=False)))
        head, columns = self._bare
        if not prepared_extent:
            return head + columns
        return b"".join((head, _EXTENT_TAG, _varint(prepared_extent), columns))


@dataclass
class WireColumn:
    """A received column: header and a read-only view of its data."""
    name: str
    dtype: int
    offsets: np.ndarray  # int64, rows + 1
    data: memoryview


def _decode_column(buf: memoryview, start: int, end: int) -> WireColumn:
    pos = start
    data = buf[end:end]
    head_end = end
    while pos < end:
        tag, value_pos = _read_varint(buf, pos, end)
        if tag >> 3 == _DATA_FIELD and tag & 7 == _LEN:
            length, data_pos = _read_varint(buf, value_pos, end)
            data = buf[data_pos:data_pos + length]
            head_end = min(head_end, pos)
            pos = data_pos + length
        else:
            if head_end < end:  # the server writes data last
                raise errors.Internal(
                    f"malformed response: column field {tag >> 3} after data")
            pos = _skip(buf, value_pos, end, tag & 7)
    head = dock_pb2.PackedColumn.FromString(bytes(buf[start:head_end]))
    offsets = np.asarray(head.offsets, dtype=np.int64)
    return WireColumn(head.name, head.dtype, offsets, data)


def decode_get(payload: bytes) -> tuple[dock_pb2.GetResponse, list[WireColumn]]:
    """A GetResponse's header fields and its columns as views of payload."""
    buf = memoryview(payload)
    end = len(buf)
    pos = 0
    header_end = end
    columns = []
    after = []  # header fields past the columns (numbered above them)
    while pos < end:
        tag, value_pos = _read_varint(buf, pos, end)
        if tag >> 3 == _DATA_FIELD and tag & 7 == _LEN:
            length, col_pos = _read_varint(buf, value_pos, end)
            if col_pos + length > end:
                raise errors.Internal("malformed response: column overruns it")
            columns.append(_decode_column(buf, col_pos, col_pos + length))
            header_end = min(header_end, pos)
            pos = col_pos + length
        else:
            field_end = _skip(buf, value_pos, end, tag & 7)
            if columns:
                after.append(bytes(buf[pos:field_end]))
            pos = field_end
    header = dock_pb2.GetResponse.FromString(bytes(buf[:header_end]) + b"".join(after))
    return header, columns
