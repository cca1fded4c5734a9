"""The file tdock.transferqueue.save_checkpoint writes and load_checkpoint
reads: data only, never a pickle, so loading a checkpoint cannot run code.

Layout (integers little-endian):

    magic    8 bytes  b"TDOCKTQC"
    version  uint32   FORMAT_VERSION (1)
    body     one value in tdock._tq_cells' typed encoding (magic b"TQC1",
             a JSON header, the tensors' raw bytes):

    {"metadata": {...},                      # save_checkpoint's metadata
     "partitions": {partition_id: [group, ...]}}
    group = {"keys": [str, ...], "tags": [dict, ...],   # one per key
             "fields": {name: field}}                   # every key has each
    field = {"kind": "dense",   "tensor": Tensor [n, *s]}
          | {"kind": "jagged",  "values": Tensor [total, *s],
                                "offsets": int64 Tensor [n + 1]}
          | {"kind": "objects", "values": [value, ...]}  # one per key

read() checks the magic, the version and the whole body's shape (lengths,
dtypes, offsets) before it returns, so a refused file is refused before
anything is written: errors.DataLoss for a file that is not such a
checkpoint (a pickle, a torch.save file, truncated bytes), errors.
InvalidArgument for a version this client does not read; both name the file.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import torch

from tdock import _tq_cells, errors
from tdock._tq_store import _TORCH_DTYPES

MAGIC = b"TDOCKTQC"
FORMAT_VERSION = 1
FILE = "tdock_tq.pt"
_HEAD = struct.Struct("<8sI")


def write(path: str, state: dict) -> None:
    """Writes `state` (the layout above) to path/FILE, replacing it whole:
    a crash leaves the previous file or the new one. errors.InvalidArgument
    names a metadata value the typed encoding does not hold; nothing is
    written then."""
    file = os.path.join(path, FILE)
    body = _tq_cells.encode_value(state, f"transferqueue: save_checkpoint {file}")
    os.makedirs(path, exist_ok=True)
    tmp = f"{file}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(_HEAD.pack(MAGIC, FORMAT_VERSION))
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read(path: str) -> dict:
    """The state in path/FILE, checked as the module comment says."""
    file = os.path.join(path, FILE)
    if not os.path.exists(file):
        raise errors.NotFound(f"transferqueue.load_checkpoint: no {file}")
    with open(file, "rb") as f:
        raw = f.read()
    if len(raw) < _HEAD.size or raw[:len(MAGIC)] != MAGIC:
        raise errors.DataLoss(f"transferqueue.load_checkpoint: {file} is not a tdock "
                              f"TransferQueue checkpoint: {_what_it_is(raw)}")
    _, version = _HEAD.unpack_from(raw)
    if version != FORMAT_VERSION:
        raise errors.InvalidArgument(
            f"transferqueue.load_checkpoint: {file} has checkpoint format version {version}; "
            f"this client reads version {FORMAT_VERSION} (a newer tdock wrote it?)")
    try:
        state = _tq_cells.parse(memoryview(raw)[_HEAD.size:])
        _check_state(state)
    except (_tq_cells.Malformed, _Bad) as e:
        raise errors.DataLoss(f"transferqueue.load_checkpoint: {file} is not a readable tdock "
                              f"TransferQueue checkpoint (version {version}): {e}") from None
    return state


def stored_fields(td: Any) -> dict:
    """{name: field} (the layout above) of a TensorDict the Store's get
    returned: tensors, jagged nested tensors, NonTensorStacks."""
    if td is None:
        return {}
    out = {}
    for name in td.keys():
        value = td.get(name)
        if isinstance(value, torch.Tensor) and value.is_nested:
            rows = list(value.unbind())
            lengths = torch.tensor([0] + [r.size(0) for r in rows], dtype=torch.int64)
            out[name] = {"kind": "jagged", "values": torch.cat(rows),
                         "offsets": torch.cumsum(lengths, 0)}
        elif isinstance(value, torch.Tensor) and not type(value).__module__.startswith(
                "tensordict"):
            out[name] = {"kind": "dense", "tensor": value}
        else:
            out[name] = {"kind": "objects", "values": value.tolist()}
    return out


def fields_tensordict(fields: dict, n: int) -> Any:
    """The TensorDict (batch size n) to put back from a group's stored
    fields; None when the group has none (its keys hold only tags)."""
    if not fields:
        return None
    from tensordict import NonTensorStack, TensorDict
    out = TensorDict({}, batch_size=[n])
    for name, f in fields.items():
        if f["kind"] == "dense":
            out[name] = f["tensor"]
        elif f["kind"] == "jagged":
            out[name] = torch.nested.nested_tensor_from_jagged(f["values"], f["offsets"])
        else:
            out[name] = NonTensorStack(*f["values"], batch_size=[n])
    return out


def _what_it_is(raw: bytes) -> str:
    if raw[:4] == b"PK\x03\x04":
        return ("it is a zip file, as torch.save writes (older tdock clients wrote "
                "checkpoints with torch.save); it is never unpickled")
    if raw[:1] == b"\x80":
        return "it looks like a pickle; it is never unpickled"
    return f"it starts with {raw[:8]!r}, not {MAGIC!r}"


class _Bad(ValueError):
    """What in a parsed body is not the layout."""


def _check_state(state: Any) -> None:
    _expect(isinstance(state, dict) and set(state) == {"metadata", "partitions"},
            "the body is not {'metadata', 'partitions'}")
    _expect(isinstance(state["metadata"], dict), "metadata is not a dict")
    _expect(isinstance(state["partitions"], dict), "partitions is not a dict")
    for pid, groups in state["partitions"].items():
        _expect(bool(pid), "a partition id is empty")
        _expect(isinstance(groups, list), f"partition '{pid}' is not a list of groups")
        for i, g in enumerate(groups):
            _check_group(g, f"partition '{pid}' group {i}")


def _check_group(g: Any, where: str) -> None:
    _expect(isinstance(g, dict) and set(g) == {"keys", "tags", "fields"},
            f"{where} is not {{'keys', 'tags', 'fields'}}")
    keys, tags, fields = g["keys"], g["tags"], g["fields"]
    _expect(isinstance(keys, list) and all(isinstance(k, str) and k for k in keys)
            and len(set(keys)) == len(keys), f"{where}: keys are not distinct strings")
    _expect(isinstance(tags, list) and len(tags) == len(keys)
            and all(isinstance(t, dict) for t in tags), f"{where}: tags are not a dict per key")
    try:
        json.dumps(tags)
    except (TypeError, ValueError):
        _expect(False, f"{where}: tags are not JSON values")
    _expect(isinstance(fields, dict), f"{where}: fields is not a dict")
    for name, f in fields.items():
        _check_field(f, len(keys), f"{where} field '{name}'")


def _check_field(f: Any, n: int, where: str) -> None:
    kind = f.get("kind") if isinstance(f, dict) else None
    if kind == "dense":
        t = f.get("tensor")
        _expect(isinstance(t, torch.Tensor) and t.dim() >= 1 and t.size(0) == n
                and t.dtype in _TORCH_DTYPES, f"{where}: not a tensor of {n} rows of a "
                                              f"stored dtype")
    elif kind == "jagged":
        v, o = f.get("values"), f.get("offsets")
        _expect(isinstance(v, torch.Tensor) and v.dim() >= 1 and v.dtype in _TORCH_DTYPES,
                f"{where}: values are not a tensor of a stored dtype")
        _expect(isinstance(o, torch.Tensor) and o.dtype == torch.int64 and o.shape == (n + 1,)
                and int(o[0]) == 0 and int(o[-1]) == v.size(0)
                and bool((o[1:] >= o[:-1]).all()),
                f"{where}: offsets are not {n + 1} ascending int64 from 0 to {v.size(0)}")
    elif kind == "objects":
        _expect(isinstance(f.get("values"), list) and len(f["values"]) == n,
                f"{where}: not one value per key")
    else:
        _expect(False, f"{where}: unknown kind {kind!r}")
    _expect(len(f) == {"dense": 2, "jagged": 3, "objects": 2}[kind],
            f"{where}: unexpected entries {sorted(f)}")


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise _Bad(what)
