"""Which path moves a tdock.Client's Put bytes: the C++ client's, or grpcio's.

tdock._native (client/python/native/native.cc, built with the package) is
the C++ client's Put as an extension module: it takes the Put the Python
client built (its header, and each column's buffers through the buffer
protocol, never copied in Python) and sends it with the GIL released, to a
standalone server or to the shard the Python client chose, over gRPC or
through the shard's shared memory. Everything else (the request's checks,
leases, keys, the shard listing, Gets and control calls) stays in Python.

The path is chosen per Client, explicitly: its `data_path` option, else
TDOCK_DATA_PATH, else "auto":

- "native": the C++ path; a Client is not made when the module cannot load
  (errors.FailedPrecondition naming why);
- "python": grpcio's path;
- "auto": the C++ path when the module loads, else grpcio's.

`Client.data_path` says which ("native" or "python"), and the Client logs it
(with why, on "python") when it is made; it never changes after that.
tdock.aio's clients move their bytes through grpcio.aio (data_path
"python").
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import numpy as np

from tdock import errors
from tdock.v1 import dock_pb2
from tdock.wire import PutMessage

PATHS = ("auto", "native", "python")
_log = logging.getLogger("tdock")

try:
    from tdock import _native
    _UNLOADED = None
except ImportError as e:  # no module for this platform or Python
    _native = None
    _UNLOADED = f"tdock._native does not load ({e})"


def chosen(value: str | None) -> str:
    """The path asked for: `value`, else TDOCK_DATA_PATH, else auto."""
    asked = value if value is not None else os.environ.get("TDOCK_DATA_PATH", "auto")
    if asked not in PATHS:
        source = "data_path" if value is not None else "TDOCK_DATA_PATH"
        raise errors.InvalidArgument(f"{source} is '{asked}'; it is one of {', '.join(PATHS)}")
    if asked == "native" and _native is None:
        raise errors.FailedPrecondition(f"data_path 'native': {_UNLOADED}")
    return "native" if asked != "python" and _native is not None else "python"


def announce(address: str, path: str, asked: str | None) -> None:
    """The log line of a Client's path."""
    if path == "native":
        _log.info("tdock: client of %s puts through the C++ client (tdock._native)", address)
    elif _UNLOADED is not None:
        _log.info("tdock: client of %s puts through grpcio: %s", address, _UNLOADED)
    else:
        _log.info("tdock: client of %s puts through grpcio (data_path '%s')", address,
                  asked if asked is not None else os.environ.get("TDOCK_DATA_PATH"))


def connect(address: str, options: dict, transport: str) -> Any:
    """The C++ client of `address` with a tdock.Client's options (the
    transport as the Client resolved it)."""
    tls = options.get("tls")
    tls_fields = {"ca": None, "cert": None, "key": None, "server_name": None}
    if tls is not None and tls is not False and tls is not True:
        tls_fields = {k: None if getattr(tls, k) is None else os.fspath(getattr(tls, k))
                      for k in tls_fields}
    try:
        return _native.Client({
            "address": address, "token": options.get("token"),
            "tls": bool(tls), **tls_fields,
            "timeout": float(options["timeout"]),
            "max_message_bytes": int(options["max_message_bytes"]),
            "connect_timeout": float(options["connect_timeout"]),
            "max_reconnect_backoff": float(options["max_reconnect_backoff"]),
            "transport": transport})
    except _native.Error as e:
        raise errors.from_status(*e.args) from None


def put(native: Any, message: PutMessage, shard: Any) -> dock_pb2.PutResponse:
    """`message` sent by the C++ client, to `shard` (a ShardInfo of the
    Client's listing; None: a standalone server)."""
    columns = [(c.name, c.dtype, np.ascontiguousarray(c.offsets, dtype=np.int64),
                _pieces(c.pieces)) for c in message.columns]
    try:
        rows, nbytes, assigned, replayed = native.put(
            message.header.SerializeToString(), columns,
            shard.address if shard is not None else "",
            shard.shm_prefix if shard is not None else "")
    except _native.Error as e:
        raise errors.from_status(*e.args) from None
    return dock_pb2.PutResponse(rows=rows, bytes=nbytes, assigned=assigned, replayed=replayed)


def _pieces(pieces: Sequence) -> list:
    return pieces if isinstance(pieces, list) else list(pieces)
