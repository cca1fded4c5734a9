"""What tdock.Client (client.py) and tdock.aio.Client (aio.py) share: the
types their calls return, the channel settings, the requests a Dock sends and
how the answers are read, and Dock.iter's loop. The two clients only run the
calls, blocking or as coroutines.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import grpc
import numpy as np

from tdock import _shards, _shm
from tdock import batch as batch_mod
from tdock import columns as columns_mod
from tdock import dtypes, errors, spec as spec_mod, wire
from tdock._lease_log import _LeaseLog
from tdock.status import (DockStatus, DockSummary, Lease, LeaseStatus, NackAll,  # noqa: F401
                          PutAck, Reservation, RowState, StalenessStatus, StepStatus,
                          drop_counts)
from tdock.v1 import dock_pb2

_SERVICE = "/tdock.v1.Dock/"
# Dock.iter(wait=None) long-polls in Gets of this many seconds.
_POLL_SLICE = 30.0
# Dock.iter asks again this often while the server is unreachable.
_RETRY_PAUSE = 0.1


@dataclass(frozen=True)
class Tls:
    """TLS settings: PEM file paths. `ca` verifies the server (system roots
    when None); `cert` and `key` identify the client for mutual TLS."""
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None  # override the name checked in the cert


DROP_REASONS = ("filtered", "failed", "stale", "sealed", "expired", "surplus", "other")


def _drop_reason(reason: str) -> int:
    if reason not in DROP_REASONS:
        raise errors.InvalidArgument(
            f"drop reason {reason!r} is not one of {', '.join(DROP_REASONS)}")
    return dock_pb2.DropReason.Value(reason.upper())


def _indexes(values: Iterable[int] | None, what: str) -> list[int]:
    """Row or group indices: a list, tuple, range, numpy array, set or any
    other iterable of integers (taken once)."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple, range, np.ndarray, str, bytes)) \
            and isinstance(values, Iterable):
        values = list(values)  # a set, a generator: np.asarray would make one object
    out = np.asarray(values)
    if out.ndim != 1 or (out.size and not np.issubdtype(out.dtype, np.integer)):
        raise errors.InvalidArgument(f"{what} must be a list of integers, got {values!r}")
    return out.astype(np.int64).tolist()


def _step_index(step: Any, what: str) -> int:
    """A step named by a call that sends it as it is (no int() that would
    turn 1.5 or "1" into a step)."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise errors.InvalidArgument(
            f"{what}: step must be an integer, got {step!r} ({type(step).__name__})")
    if step < 0:
        raise errors.InvalidArgument(f"{what}: step {step} is negative")
    return int(step)


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _credentials(tls: Any) -> grpc.ChannelCredentials:
    if tls is True:
        tls = Tls()
    if not isinstance(tls, Tls):
        raise errors.InvalidArgument(
            f"tls must be None, True or tdock.Tls(...), got {type(tls).__name__}")
    if (tls.cert is None) != (tls.key is None):
        raise errors.InvalidArgument("tls: cert and key must be given together")
    try:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(tls.ca), private_key=_read(tls.key),
            certificate_chain=_read(tls.cert))
    except OSError as e:
        raise errors.InvalidArgument(f"tls: {e}")


@dataclass(frozen=True)
class _ChannelSettings:
    """What a Client's channel is made with (shared with tdock.aio)."""
    options: list
    credentials: grpc.ChannelCredentials | None  # None: plaintext
    metadata: tuple
    timeout: float
    reconnect_timeout: float

    def open(self, address: str, grpc_module: Any) -> Any:
        """A channel to `address` from `grpc_module` (grpc or grpc.aio)."""
        if self.credentials is not None:
            return grpc_module.secure_channel(address, self.credentials, self.options)
        return grpc_module.insecure_channel(address, self.options)


def _stub(channel: Any, stubs: dict, method: str, response_type: Any,
          serialize: Any, deserialize: Any, arity: str = "unary_unary",
          service: str = _SERVICE) -> Any:
    """The channel's callable for `method` of `service` (`arity`: unary_unary
    or unary_stream), made once."""
    fn = stubs.get(method)
    if fn is None:
        fn = getattr(channel, arity)(
            service + method,
            request_serializer=serialize or (lambda m: m.SerializeToString()),
            response_deserializer=deserialize or response_type.FromString)
        stubs[method] = fn
    return fn


def _joined(parts: list) -> tuple:
    """A GetStream answer: the first part's header with every part's columns
    (each part decoded by wire.decode_get)."""
    if not parts:
        raise errors.Internal("GetStream: the server sent no message")
    return parts[0][0], [column for _, columns in parts for column in columns]


def _channel_settings(token: str | None, tls: Any, timeout: float,
                      max_message_bytes: int, reconnect_timeout: float,
                      max_reconnect_backoff: float,
                      connect_timeout: float) -> _ChannelSettings:
    if timeout <= 0:
        raise errors.InvalidArgument(f"timeout must be > 0, got {timeout}")
    if reconnect_timeout < 0:
        raise errors.InvalidArgument(
            f"reconnect_timeout must be >= 0 seconds, got {reconnect_timeout}")
    if max_reconnect_backoff <= 0:
        raise errors.InvalidArgument(
            f"max_reconnect_backoff must be > 0 seconds, got {max_reconnect_backoff}")
    if connect_timeout <= 0:
        raise errors.InvalidArgument(
            f"connect_timeout must be > 0 seconds, got {connect_timeout}")
    # gRPC's reconnect backoff grows to 120 s by default, far past a lease's
    # time: the channel tries again at least every max_reconnect_backoff.
    # A connection attempt may take max(the backoff, "min_reconnect_backoff")
    # -- gRPC's name for the minimum connect timeout -- so that stays long:
    # on a busy host the server (or this process) may not run for seconds.
    # A refused attempt (the server is away) still fails at once and is
    # tried again after the backoff. Each channel keeps its own connection
    # ("use_local_subchannel_pool"): a new Client never inherits another
    # Client's failed attempt and waits out its backoff.
    backoff_ms = max(1, int(max_reconnect_backoff * 1000))
    options = [("grpc.max_send_message_length", max_message_bytes),
               ("grpc.max_receive_message_length", max_message_bytes),
               ("grpc.initial_reconnect_backoff_ms", min(100, backoff_ms)),
               ("grpc.min_reconnect_backoff_ms", max(1, int(connect_timeout * 1000))),
               ("grpc.max_reconnect_backoff_ms", backoff_ms),
               ("grpc.use_local_subchannel_pool", 1)]
    credentials = None
    if tls:
        if isinstance(tls, Tls) and tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        credentials = _credentials(tls)
    return _ChannelSettings(
        options, credentials,
        (("authorization", f"Bearer {token}"),) if token else (), float(timeout),
        float(reconnect_timeout))


def _create_dock_request(spec: Any) -> dock_pb2.CreateDockRequest:
    specs = spec_mod.load(spec)
    if len(specs) != 1:
        raise errors.InvalidArgument(
            f"{spec} holds {len(specs)} docks; create_dock takes one")
    return dock_pb2.CreateDockRequest(spec=specs[0])


def _summaries(resp: dock_pb2.ListDocksResponse) -> list[DockSummary]:
    return [DockSummary(d.name, d.rows_per_step, d.steps_in_flight,
                        list(d.live_steps)) for d in resp.docks]


class _Connection:
    """What tdock.Client and tdock.aio.Client share: the channel (from
    `_grpc`: grpc or grpc.aio), its call settings and the docks handed out.

    A Client pickles as its address and options (the token included): the
    copy, in another process (a Ray actor, a DataLoader worker) or this one,
    opens its own channel when it makes its first call."""

    _grpc: Any = grpc

    def __init__(self, address: str, *, token: str | None = None,
                 tls: Any = None, timeout: float = 30.0,
                 max_message_bytes: int = 1 << 30,
                 reconnect_timeout: float = 300.0,
                 max_reconnect_backoff: float = 0.5,
                 connect_timeout: float = 20.0,
                 transport: str | None = None):
        token = token if token is not None else os.environ.get("TDOCK_TOKEN")
        # How data moves with a controller's shards (tdock._shm): "auto",
        # "grpc" or "shm".
        self._shm = _shm.Shm(transport)
        self.transport = self._shm.transport
        settings = _channel_settings(token, tls, timeout, max_message_bytes,
                                     reconnect_timeout, max_reconnect_backoff,
                                     connect_timeout)
        self.address = address
        self.timeout = settings.timeout
        self.reconnect_timeout = settings.reconnect_timeout
        self._options = {"token": token, "tls": tls, "timeout": timeout,
                         "max_message_bytes": max_message_bytes,
                         "reconnect_timeout": reconnect_timeout,
                         "max_reconnect_backoff": max_reconnect_backoff,
                         "connect_timeout": connect_timeout, "transport": transport}
        self._settings = settings
        self._channel = None  # opened by the first call (_open)
        self._metadata = settings.metadata
        self._calls = {}
        self._docks = {}
        # A controller's shards ([] on a standalone server), listed when data
        # first moves; a channel and the callables of each shard by address.
        self._shards = None
        self._shard_channels = {}
        self._shard_calls = {}
        # Per shard address, the session (its id, its Attach call and the
        # shard) that holds the pins of reads over shared memory, and what
        # gives their pins back (a thread, or a task of tdock.aio).
        self._sessions = {}
        self._giving_back = None

    def _shard_channel(self, shard: Any) -> Any:
        channel = self._shard_channels.get(shard.address)
        if channel is None:
            channel = self._settings.open(shard.address, self._grpc)
            self._shard_channels[shard.address] = channel
        return channel

    def _attach_call(self, shard: Any) -> Any:
        """The Attach call of a new session with `shard` (its first message
        names it)."""
        fn = self._shard_channel(shard).unary_stream(
            _shards.SHARD_SERVICE + "Attach",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=dock_pb2.AttachEvent.FromString)
        return fn(dock_pb2.AttachRequest(), metadata=self._metadata)

    def _pins_to_give_back(self) -> list:
        """(shard, session, pins) for each session with pins to give back."""
        out = []
        for session, _, shard in list(self._sessions.values()):
            pins = self._shm.to_unpin(shard.address, session)
            if pins:
                out.append((shard, session, pins))
        return out

    def _end_session(self, address: str) -> None:
        """Ends the session with the shard at `address`, if any (its pins go)."""
        held = self._sessions.pop(address, None)
        if held is not None:
            held[1].cancel()
            self._shm.forget(address, held[0])

    def _open(self) -> Any:
        if self._channel is None:
            self._channel = self._settings.open(self.address, self._grpc)
        return self._channel

    def __reduce__(self):
        return (_reopened, (type(self), self.address, self._options))


def _reopened(cls: type, address: str, options: dict) -> Any:
    return cls(address, **options)


def _dock_of(client: Any, name: str) -> Any:
    return client.dock(name)


class _DockCalls:
    """What tdock.Dock and tdock.aio.Dock share: the requests they send and
    how the answers are read. Subclasses run the calls."""

    def __init__(self, client: Any, name: str,
                 spec: dock_pb2.DockSpec | None = None):
        self.client = client
        self.name = name
        self._spec = spec
        self._leases = _LeaseLog()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r} at {self.client.address})"

    def __reduce__(self):
        # A Dock pickles as its Client (address and options) and name.
        return (_dock_of, (self.client, self.name))

    def _put_request(self, spec: dock_pb2.DockSpec, step: int, rows: Iterable[int] | None,
                     columns: Mapping[str, Any], ack: Any, wait: float,
                     keys: Iterable[str] | None = None, new_rows: int = 0,
                     group_sizes: Iterable[int] | None = None,
                     versions: int | Iterable[int] | None = None,
                     reservation: int = 0, add_columns: bool = False,
                     put_id: int = 0) -> tuple[wire.PutMessage, list[batch_mod.Batch]]:
        """The PutRequest (wire.PutMessage) and the leased batches it acknowledges (the
        first with the write, the rest after it). A column `spec` lacks raises
        _UnknownColumn, unless `add_columns` (with `spec` just fetched) and the
        dock adds columns on write: then the Put defines it from its values
        (columns.infer_column)."""
        keys = _keys(keys, "put")
        group_sizes = [int(k) for k in group_sizes] if group_sizes is not None else []
        if versions is None:
            versions = []
        elif isinstance(versions, (int, np.integer)):
            versions = [int(versions)]  # one for every row
        else:
            versions = [int(v) for v in versions]
        if rows is not None and len(rows) == 0:
            rows = None  # no rows named: keys or new_rows name them
        if group_sizes and rows is not None:
            raise errors.InvalidArgument(
                "put: group_sizes declares the groups of rows the server assigns; "
                "do not name rows too")
        if group_sizes and not keys and new_rows == 0:
            new_rows = sum(group_sizes)  # as many new rows as the groups declare
        if rows is None:
            if not keys and new_rows <= 0:
                raise errors.InvalidArgument(
                    "put: name the rows, their keys, or how many new rows (new_rows)")
            rows = np.zeros(0, dtype=np.int64)
        elif new_rows:
            raise errors.InvalidArgument("put: new_rows asks for rows; do not name rows too")
        rows = _row_array(rows)
        count = len(rows) if len(rows) else (new_rows or len(keys))
        columns = columns_mod.from_mapping(columns)
        if not columns:
            raise errors.InvalidArgument("put: no columns given")
        wire_columns, new_columns = [], []
        for name, value in columns.items():
            column = self._column_spec(spec, name, add_columns)
            if column is None:
                column, value = columns_mod.infer_column(name, value, count)
                new_columns.append(column)
            wire_columns.append(columns_mod.put_column(name, value, column, count))
        leased = _leased(ack)
        if ack is None:
            self._leases.refuse_forgotten_ack(step, rows, keys)
        header = dock_pb2.PutRequest(dock=self.name, step=step, rows=rows.tolist(),
                                     wait_ms=_millis(wait, "wait"),
                                     ack_lease=leased[0].lease if leased else 0, keys=keys,
                                     new_rows=new_rows, group_sizes=group_sizes,
                                     versions=versions, reservation=reservation,
                                     new_columns=new_columns, put_id=put_id)
        return wire.PutMessage(header, wire_columns), leased

    def _put_went_in(self, step: int, rows: Any, keys: Any,
                     leased: list[batch_mod.Batch]) -> None:
        """After a Put went in: the lease it acknowledged with the write has
        ended, and the rows it wrote of other open leases count as written
        (the parts of a batch's results written in several Puts)."""
        self._leases.ended(leased[:1])
        named = np.zeros(0, np.int64) if rows is None else _row_array(rows)
        self._leases.wrote(step, named, _keys(keys, "put"))

    def _written_before(self, e: errors.AlreadyExists, step: int, rows: Any,
                        leased: list[batch_mod.Batch]) -> errors.TdockError:
        """A Put's AlreadyExists, saying which acknowledgement was forgotten
        when the written cells are likely a leased batch's results put
        without ack= (its lease then expires and the rows come back)."""
        current = leased[0].lease if leased else None
        held = self._leases.holder(step, rows, current) if rows is not None else None
        fix = ("pass ack=batch to the Put of a leased batch's results (or call "
               "dock.ack(batch) after it)")
        if held is not None:
            hint = (f"these rows were handed out before as lease {held[0]} of consumer "
                    f"'{held[1]}' (step {step}), which this Dock never acknowledged: "
                    "a Put of its results without ack= leaves the lease in flight until "
                    "it expires, and its rows are handed out again with their cells "
                    f"written; {fix}")
        elif current is not None:
            hint = (f"if the rows of lease {current} were handed out before and their "
                    "results written without ack=, that lease expired and they were "
                    f"handed out again with their cells written; {fix}")
        else:
            return e
        return errors.AlreadyExists(f"{e.message}; {hint}")

    @classmethod
    def _put_arguments(cls, step: int, rows: Any, keys: Any, group_sizes: Any, versions: Any,
                       reservation: Any) -> tuple[Any, Any, Any, Any, int]:
        """A Put's rows, keys, group sizes and versions with its iterables
        taken once (the request may be built twice: a new column), and its
        reservation id."""
        rows, reserved = cls._reserved(step, rows, reservation)
        if rows is not None and not isinstance(rows, (range, list, tuple, np.ndarray)):
            rows = list(rows)
        keys = list(keys) if keys is not None and not isinstance(keys, str) else keys
        group_sizes = list(group_sizes) if group_sizes is not None else None
        if versions is not None and not isinstance(versions, (int, np.integer)):
            versions = list(versions)
        return rows, keys, group_sizes, versions, reserved

    @staticmethod
    def _reserved(step: int, rows: Any, reservation: Any) -> tuple[Any, int]:
        """A Put's rows and reservation id: a Reservation's rows by default."""
        step = _step_index(step, "put")
        if reservation is None:
            return rows, 0
        if isinstance(reservation, Reservation):
            if reservation.timed_out:
                raise errors.InvalidArgument("put: the reservation timed out; nothing was reserved")
            if step != reservation.step:
                raise errors.InvalidArgument(
                    f"put: reservation {reservation.id} is of step {reservation.step}, "
                    f"not {step}")
            return (reservation.rows if rows is None else rows), reservation.id
        return rows, int(reservation)

    def _reserve_request(self, version: int | None, rows: int | None,
                         group_sizes: Iterable[int] | None, deadline: float,
                         wait: float) -> dock_pb2.ReserveRequest:
        return dock_pb2.ReserveRequest(
            dock=self.name, version=version, rows=rows or 0,
            group_sizes=[int(k) for k in group_sizes] if group_sizes is not None else [],
            deadline_ms=_millis(deadline, "deadline"), wait_ms=_millis(wait, "wait"))

    @staticmethod
    def _reservation(r: dock_pb2.ReserveResponse) -> Reservation:
        return Reservation(r.reservation, r.step, list(r.rows), r.version,
                           r.deadline_unix_ms / 1000.0, r.timed_out)

    def _column_spec(self, spec: dock_pb2.DockSpec, name: str,
                     add_columns: bool = False) -> dock_pb2.ColumnSpec | None:
        """The column of that name; None when the Put is to add it."""
        for col in spec.columns:
            if col.name == name:
                return col
        if add_columns and spec.add_columns_on_write:
            return None
        raise _UnknownColumn(
            f"dock '{self.name}' has no column '{name}' (columns: "
            f"{', '.join(c.name for c in spec.columns)})"
            + ("" if spec.add_columns_on_write
               else "; its spec does not set add_columns_on_write"))

    def _get_request(self, consumer: str, rank: int, step: int | None,
                     count: int | None, wait: float, round: int | None, replica: int = 0):
        req = dock_pb2.GetRequest(dock=self.name, consumer=consumer, rank=rank,
                                  count=count or 0, wait_ms=_millis(wait, "wait"),
                                  replica=replica)
        if step is not None:
            req.has_step, req.step = True, _step_index(step, "get")
        if round is not None:
            req.round = round
        return req

    def _read_request(self, step: int | None, rows: Iterable[int] | None,
                      columns: Iterable[str] | None,
                      keys: Iterable[str] | None = None) -> dock_pb2.ReadRequest:
        keys = _keys(keys, "read")
        if keys:
            if rows is not None:
                raise errors.InvalidArgument("read: name rows or keys, not both")
            return dock_pb2.ReadRequest(dock=self.name, keys=keys, columns=list(columns or []))
        if step is None or rows is None:
            raise errors.InvalidArgument("read: name a step and its rows, or keys")
        return dock_pb2.ReadRequest(dock=self.name, step=_step_index(step, "read"), rows=list(rows),
                                    columns=list(columns or []))

    def _list_rows_request(self, step: int, cells: Iterable[str] | None
                           ) -> dock_pb2.ListRowsRequest:
        if isinstance(cells, str):
            raise errors.InvalidArgument(
                f"list_rows: cells is a list of column names, got the str {cells!r}")
        return dock_pb2.ListRowsRequest(dock=self.name, step=_step_index(step, "list_rows"),
                                        columns=list(cells or ()))

    def _list_rows(self, r: dock_pb2.ListRowsResponse,
                   spec: dock_pb2.DockSpec | None = None) -> list[RowState]:
        """The listing's rows; `spec`: the dock's, to decode the cells."""
        by_name = {c.name: c for c in spec.columns} if spec is not None else {}
        return [RowState(row.row, row.key or None, row.group, list(row.written),
                         list(row.taken),
                         dock_pb2.DropReason.Name(row.dropped).lower() if row.dropped else None,
                         row.version if row.version >= 0 else None,
                         {c.column: _cell_value(by_name[c.column], c.data, row.row)
                          for c in row.cells})
                for row in r.rows]

    def _spec_knows(self, spec: dock_pb2.DockSpec, names: Iterable[str] | None) -> bool:
        """Whether `spec` has every column named (else it is fetched again)."""
        known = {c.name for c in spec.columns}
        return all(n in known for n in (names or ()))

    def _forget_stale_spec(self, answer: Any) -> Any:
        """Drops the cached spec if the answer has a column it lacks (added
        since it was fetched), so that the column's encoding is known."""
        if self._spec is not None:
            known = {c.name for c in self._spec.columns}
            if any(wc.name not in known for wc in answer[1]):
                self._spec = None
        return answer

    @staticmethod
    def _batch(spec: dock_pb2.DockSpec, answer: Any, consumer: str | None = None,
               rank: int = 0) -> batch_mod.Batch:
        """A Batch from a decoded Get or Read answer (header, columns)."""
        header, cols = answer
        return batch_mod.from_response(header, cols, {c.name: c for c in spec.columns},
                                       consumer, rank)

    def _lease_request(self, b: batch_mod.Batch) -> dock_pb2.AckRequest:
        return dock_pb2.AckRequest(dock=self.name, consumer=b.consumer, lease_id=b.lease)

    def _leases_request(self, consumer: str) -> dock_pb2.ListLeasesRequest:
        return dock_pb2.ListLeasesRequest(dock=self.name, consumer=consumer)

    @staticmethod
    def _lease_infos(r: dock_pb2.ListLeasesResponse) -> list[Lease]:
        return [Lease(x.lease_id, x.step, x.rank, x.round if x.round >= 0 else None, x.rows,
                      x.expires_in_ms / 1000.0 if x.expires_in_ms >= 0 else None)
                for x in r.leases]

    def _nack_all_request(self, consumer: str, rank: int | None) -> dock_pb2.NackAllRequest:
        request = dock_pb2.NackAllRequest(dock=self.name, consumer=consumer)
        if rank is not None:
            if isinstance(rank, bool) or not isinstance(rank, int):
                raise errors.InvalidArgument(
                    f"nack_all: rank must be an int or None, got {rank!r}")
            request.rank = rank
        return request

    def _status_request(self) -> dock_pb2.GetDockStatusRequest:
        return dock_pb2.GetDockStatusRequest(dock=self.name)

    def _status(self, r: dock_pb2.GetDockStatusResponse) -> DockStatus:
        self._spec = r.spec
        steps = [StepStatus(s.step, s.partition,
                            {c.name: c.rows for c in s.ready},
                            {c.name: c.rows for c in s.consumed},
                            s.sealed, drop_counts(s.dropped)) for s in r.steps]
        leased = {c.name for c in r.spec.consumers if c.lease_ms > 0 and not c.removed}
        leases = {c.name: LeaseStatus(c.leases_in_flight, c.rows_in_flight,
                                      c.lease_expiries, c.lease_nacks,
                                      c.rows_returned)
                  for c in r.consumers if c.name in leased}
        staleness = {c.name: StalenessStatus(c.versioned_rows, c.staleness_sum,
                                             {b.max: b.rows for b in c.staleness},
                                             c.stale_rows)
                     for c in r.consumers}
        return DockStatus(r.spec, steps, {c.name: c.waiters for c in r.consumers},
                          r.arena_bytes_used, r.arena_bytes_reserved,
                          r.memory_limit_bytes, r.parked_puts, leases,
                          drop_counts(r.dropped_total), r.version, staleness,
                          r.reservations_live, r.reservations_parked, r.admission_waits,
                          r.admission_wait_seconds)

    def _release_request(self, step: int) -> dock_pb2.ReleaseStepRequest:
        return dock_pb2.ReleaseStepRequest(dock=self.name, step=_step_index(step, "release"))

    def _drop_request(self, step: int, rows: Iterable[int] | None,
                      groups: Iterable[int] | None,
                      reason: str) -> dock_pb2.DropRequest | None:
        """The DropRequest, or None when it names rows or groups and they are
        all empty: nothing to drop, 0 dropped, no need to ask the server."""
        req = dock_pb2.DropRequest(dock=self.name, step=_step_index(step, "drop"),
                                   rows=_indexes(rows, "drop: rows"),
                                   groups=_indexes(groups, "drop: groups"),
                                   reason=_drop_reason(reason))
        if (rows is not None or groups is not None) and not req.rows and not req.groups:
            return None
        return req

    def _seal_request(self, step: int, required: Iterable[str]) -> dock_pb2.SealRequest:
        if isinstance(required, str):
            required = [required]
        return dock_pb2.SealRequest(dock=self.name, step=_step_index(step, "seal"),
                                    required_columns=list(required))

    def _add_column_request(self, name: str, settings: Mapping[str, Any]
                            ) -> dock_pb2.AddColumnRequest:
        column = spec_mod.column_spec(name, settings, f"columns.{name}")
        self._spec = None  # refetched with the new column (its encoding)
        return dock_pb2.AddColumnRequest(dock=self.name, column=column)

    def _add_consumer_request(self, name: str, settings: Mapping[str, Any]
                              ) -> dock_pb2.AddConsumerRequest:
        consumer = spec_mod.consumer_spec(name, settings, f"consumers.{name}")
        self._spec = None  # refetched with the new consumer
        return dock_pb2.AddConsumerRequest(dock=self.name, consumer=consumer)


def _row_array(rows: Any) -> np.ndarray:
    """A Put's rows (a range, a list, an array) as int64, a range without
    listing it."""
    if isinstance(rows, range):
        return np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)
    return np.asarray(rows, dtype=np.int64).reshape(-1)


def _keys(keys: Iterable[str] | None, what: str) -> list[str]:
    if keys is None:
        return []
    if isinstance(keys, str):
        raise errors.InvalidArgument(f"{what}: keys must be a list of strings, got one string")
    out = list(keys)
    for key in out:
        if not isinstance(key, str):
            raise errors.InvalidArgument(
                f"{what}: keys must be strings, got {type(key).__name__}")
    return out


def _cell_value(column: dock_pb2.ColumnSpec, data: bytes, row: int) -> Any:
    """A listed cell's bytes decoded as Batch.cell decodes a batch's."""
    values = np.frombuffer(data, dtype=dtypes.numpy_of(column.dtype))
    if column.inner_shape:
        values = values.reshape(-1, *column.inner_shape)
    one = batch_mod.Column(column.name, column.dtype, values,
                           np.array([0, len(values)], np.int64), column.encoding)
    try:
        return one.cell(0)
    except errors.DataLoss as e:
        raise errors.DataLoss(f"{e.message} (listed row {row})") from None


class _UnknownColumn(errors.InvalidArgument):
    """A Put names a column the cached spec lacks: the spec is fetched again
    (another process may have added it) before the Put fails."""


class _Drain:
    """Dock.iter's loop, shared with tdock.aio: Gets of one step until this
    rank has drained it.

    A Get that fails with UNAVAILABLE (the server went away: restarted,
    killed, the network) is asked again every _RETRY_PAUSE until the server
    answers or `reconnect` seconds have passed. What the lost answer held is
    not lost where that can be helped: a BALANCED rank asks again for the
    round it was waiting for (rounds are kept, and served again alike), and
    a leased consumer's rows come back when the lease expires. Without
    leases, rows handed out in a lost answer stay handed out."""

    def __init__(self, dock: str, consumer: str, rank: int, step: int | None,
                 wait: float | None, reconnect: float):
        self.dock, self.consumer, self.rank = dock, consumer, rank
        self.step, self.wait, self.reconnect = step, wait, reconnect
        self.done = False
        self._next_round = None  # BALANCED: the round after the last one served
        self._unreachable_since = None

    def get_args(self) -> dict:
        """The step, wait and round of the next Get."""
        args = {"step": self.step,
                "wait": _POLL_SLICE if self.wait is None else self.wait}
        if self._unreachable_since is not None and self._next_round is not None:
            args["round"] = self._next_round
        return args

    def retry_after(self, error: errors.TdockError) -> float:
        """After a Get failed with `error`: the seconds to pause before asking
        again. Raises `error` when it is not the server being unreachable, or
        the server stayed unreachable past the bound."""
        if not isinstance(error, errors.Unavailable):
            raise error
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        elif now - self._unreachable_since > self.reconnect:
            raise error
        return _RETRY_PAUSE

    def take(self, b: batch_mod.Batch) -> bool:
        """Whether to yield `b` (rows, or a round's share); sets done at the
        step's end, raises errors.WaitTimeout when a bounded wait ran out."""
        self._unreachable_since = None
        if b.round >= 0:
            self._next_round = b.round + 1
        if b.timed_out:
            if self.wait is None:
                return False
            raise errors.WaitTimeout(
                f"dock '{self.dock}' consumer '{self.consumer}' rank {self.rank}: "
                f"no rows of {'any step' if self.step is None else f'step {self.step}'} "
                f"within {self.wait} s")
        if self.step is None:
            self.step = b.step
        self.done = b.end_of_step
        # A BALANCED rank's share of a round is yielded even when empty (a
        # short round, or its rows dropped): every rank takes the same rounds.
        return len(b) > 0 or b.round >= 0


def _raw(payload: bytes) -> bytes:
    return payload


def _leased(batches: Any) -> list[batch_mod.Batch]:
    """The batches (one, a list, or None or False: none) that hold a lease."""
    if batches is None or batches is False:
        return []
    out = []
    for b in batches if isinstance(batches, (list, tuple)) else [batches]:
        if not isinstance(b, batch_mod.Batch):
            raise errors.InvalidArgument(
                f"ack takes a Batch, a list of them or False, got {type(b).__name__}")
        if b.lease is not None:
            out.append(b)
    return out


def _put_id(put_id: Any) -> int:
    """A Put's put_id argument on the wire (0: none)."""
    if put_id is None:
        return 0
    if (isinstance(put_id, bool) or not isinstance(put_id, (int, np.integer))
            or not 0 < put_id < 1 << 64):
        raise errors.InvalidArgument(
            f"put: put_id must be an int in [1, 2**64), got {put_id!r}")
    return int(put_id)


def _millis(seconds: float, what: str) -> int:
    if seconds is None or seconds < 0:
        raise errors.InvalidArgument(f"{what} must be >= 0 seconds, got {seconds}")
    return int(round(seconds * 1000))
