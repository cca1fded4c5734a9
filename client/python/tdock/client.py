"""tdock.Client and tdock.Dock: the Python client of a tdock server.

    client = tdock.Client("127.0.0.1:50051")
    dock = client.create_dock("examples/grpo.yaml")
    dock.put(0, range(4), {"prompt_ids": [np.arange(5, dtype=np.int32)] * 4})
    for batch in dock.iter("reward", rank=0):
        values, cu_seqlens = batch.packed("prompt_ids")

One gRPC channel per Client; a Client and its Docks may be shared by threads
(not across fork: make the Client in the worker process). Each call has a
deadline of `timeout` seconds, plus its wait bound for Put and Get. Failures
raise tdock.errors.* with the server's message.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

import grpc
import numpy as np

from tdock import batch as batch_mod
from tdock import columns as columns_mod
from tdock import errors, spec as spec_mod, wire
from tdock.v1 import dock_pb2

_SERVICE = "/tdock.v1.Dock/"
# Dock.iter(wait=None) long-polls in Gets of this many seconds.
_POLL_SLICE = 30.0


@dataclass(frozen=True)
class Tls:
    """TLS settings: PEM file paths. `ca` verifies the server (system roots
    when None); `cert` and `key` identify the client for mutual TLS."""
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None  # override the name checked in the cert


@dataclass(frozen=True)
class DockSummary:
    name: str
    rows_per_step: int
    steps_in_flight: int
    live_steps: list[int]


@dataclass(frozen=True)
class StepStatus:
    step: int
    partition: int
    ready: dict[str, int]     # column -> rows written
    consumed: dict[str, int]  # consumer -> rows handed out


@dataclass(frozen=True)
class LeaseStatus:
    """A consumer's leases: in flight now, and since the dock was created."""
    in_flight: int
    rows_in_flight: int
    expiries: int
    nacks: int
    rows_returned: int  # rows handed back by expiries and nacks


@dataclass(frozen=True)
class DockStatus:
    spec: dock_pb2.DockSpec
    steps: list[StepStatus]
    waiters: dict[str, int]  # consumer -> parked Gets
    arena_bytes_used: int
    arena_bytes_reserved: int
    memory_limit_bytes: int
    parked_puts: int
    leases: dict[str, LeaseStatus]  # consumers with lease_ms > 0


@dataclass(frozen=True)
class PutAck:
    rows: int
    bytes: int


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

    def open(self, address: str, grpc_module: Any) -> Any:
        """A channel to `address` from `grpc_module` (grpc or grpc.aio)."""
        if self.credentials is not None:
            return grpc_module.secure_channel(address, self.credentials, self.options)
        return grpc_module.insecure_channel(address, self.options)


def _stub(channel: Any, stubs: dict, method: str, response_type: Any,
          serialize: Any, deserialize: Any) -> Any:
    """The channel's unary callable for `method`, made once."""
    fn = stubs.get(method)
    if fn is None:
        fn = channel.unary_unary(
            _SERVICE + method,
            request_serializer=serialize or (lambda m: m.SerializeToString()),
            response_deserializer=deserialize or response_type.FromString)
        stubs[method] = fn
    return fn


def _channel_settings(token: str | None, tls: Any, timeout: float,
                      max_message_bytes: int) -> _ChannelSettings:
    if timeout <= 0:
        raise errors.InvalidArgument(f"timeout must be > 0, got {timeout}")
    token = token if token is not None else os.environ.get("TDOCK_TOKEN")
    options = [("grpc.max_send_message_length", max_message_bytes),
               ("grpc.max_receive_message_length", max_message_bytes)]
    credentials = None
    if tls:
        if isinstance(tls, Tls) and tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        credentials = _credentials(tls)
    return _ChannelSettings(
        options, credentials,
        (("authorization", f"Bearer {token}"),) if token else (), float(timeout))


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
    `_grpc`: grpc or grpc.aio), its call settings and the docks handed out."""

    _grpc: Any = grpc

    def __init__(self, address: str, *, token: str | None = None,
                 tls: Any = None, timeout: float = 30.0,
                 max_message_bytes: int = 1 << 30):
        settings = _channel_settings(token, tls, timeout, max_message_bytes)
        self.address = address
        self.timeout = settings.timeout
        self._metadata = settings.metadata
        self._channel = settings.open(address, self._grpc)
        self._calls = {}
        self._docks = {}


class Client(_Connection):
    """A connection to one tdock server (see the module comment)."""

    def __init__(self, address: str, **options: Any):
        super().__init__(address, **options)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method: str, request: Any, response_type: Any = None, *,
             extra_timeout: float = 0.0, serialize=None, deserialize=None):
        """One unary call; gRPC errors become tdock.errors."""
        fn = _stub(self._channel, self._calls, method, response_type, serialize,
                   deserialize)
        try:
            return fn(request, timeout=self.timeout + extra_timeout,
                      metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def create_dock(self, spec: Any) -> "Dock":
        """Creates a dock from a dict, a DockSpec or a YAML file path (one
        dock) and returns it, its spec with the server's defaults."""
        resp = self.call("CreateDock", _create_dock_request(spec),
                         dock_pb2.CreateDockResponse)
        dock = Dock(self, resp.spec.name, resp.spec)
        with self._lock:
            self._docks[dock.name] = dock
        return dock

    def dock(self, name: str) -> "Dock":
        """The dock of that name (its spec is fetched when first needed)."""
        with self._lock:
            if name not in self._docks:
                self._docks[name] = Dock(self, name)
            return self._docks[name]

    def delete_dock(self, name: str) -> None:
        self.call("DeleteDock", dock_pb2.DeleteDockRequest(dock=name),
                  dock_pb2.DeleteDockResponse)
        with self._lock:
            self._docks.pop(name, None)

    def list_docks(self) -> list[DockSummary]:
        return _summaries(self.call("ListDocks", dock_pb2.ListDocksRequest(),
                                    dock_pb2.ListDocksResponse))


class _DockCalls:
    """What tdock.Dock and tdock.aio.Dock share: the requests they send and
    how the answers are read. Subclasses run the calls."""

    def __init__(self, client: Any, name: str,
                 spec: dock_pb2.DockSpec | None = None):
        self.client = client
        self.name = name
        self._spec = spec

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r} at {self.client.address})"

    def _put_request(self, spec: dock_pb2.DockSpec, step: int, rows: Iterable[int],
                     columns: Mapping[str, Any], ack: Any, wait: float
                     ) -> tuple[bytes, list[batch_mod.Batch]]:
        """The encoded PutRequest and the leased batches it acknowledges (the
        first with the write, the rest after it)."""
        rows = np.asarray(list(rows) if isinstance(rows, range) else rows,
                          dtype=np.int64).reshape(-1)
        columns = columns_mod.from_mapping(columns)
        if not columns:
            raise errors.InvalidArgument("put: no columns given")
        wire_columns = [
            columns_mod.put_column(name, value, self._column_spec(spec, name), len(rows))
            for name, value in columns.items()]
        leased = _leased(ack)
        header = dock_pb2.PutRequest(dock=self.name, step=step, rows=rows.tolist(),
                                     wait_ms=_millis(wait, "wait"),
                                     ack_lease=leased[0].lease if leased else 0)
        return wire.encode_put(header, wire_columns), leased

    def _column_spec(self, spec: dock_pb2.DockSpec, name: str) -> dock_pb2.ColumnSpec:
        for col in spec.columns:
            if col.name == name:
                return col
        raise errors.InvalidArgument(
            f"dock '{self.name}' has no column '{name}' (columns: "
            f"{', '.join(c.name for c in spec.columns)})")

    def _get_request(self, consumer: str, rank: int, step: int | None,
                     count: int | None, wait: float, round: int | None):
        req = dock_pb2.GetRequest(dock=self.name, consumer=consumer, rank=rank,
                                  count=count or 0, wait_ms=_millis(wait, "wait"))
        if step is not None:
            req.has_step, req.step = True, step
        if round is not None:
            req.round = round
        return req

    def _read_request(self, step: int, rows: Iterable[int],
                      columns: Iterable[str] | None) -> dock_pb2.ReadRequest:
        return dock_pb2.ReadRequest(dock=self.name, step=step, rows=list(rows),
                                    columns=list(columns or []))

    @staticmethod
    def _batch(spec: dock_pb2.DockSpec, answer: Any, consumer: str | None = None,
               rank: int = 0) -> batch_mod.Batch:
        """A Batch from a decoded Get or Read answer (header, columns)."""
        header, cols = answer
        return batch_mod.from_response(header, cols, {c.name: c for c in spec.columns},
                                       consumer, rank)

    def _lease_request(self, b: batch_mod.Batch) -> dock_pb2.AckRequest:
        return dock_pb2.AckRequest(dock=self.name, consumer=b.consumer, lease_id=b.lease)

    def _status_request(self) -> dock_pb2.GetDockStatusRequest:
        return dock_pb2.GetDockStatusRequest(dock=self.name)

    def _status(self, r: dock_pb2.GetDockStatusResponse) -> DockStatus:
        self._spec = r.spec
        steps = [StepStatus(s.step, s.partition,
                            {c.name: c.rows for c in s.ready},
                            {c.name: c.rows for c in s.consumed}) for s in r.steps]
        leased = {c.name for c in r.spec.consumers if c.lease_ms > 0}
        leases = {c.name: LeaseStatus(c.leases_in_flight, c.rows_in_flight,
                                      c.lease_expiries, c.lease_nacks,
                                      c.rows_returned)
                  for c in r.consumers if c.name in leased}
        return DockStatus(r.spec, steps, {c.name: c.waiters for c in r.consumers},
                          r.arena_bytes_used, r.arena_bytes_reserved,
                          r.memory_limit_bytes, r.parked_puts, leases)

    def _release_request(self, step: int) -> dock_pb2.ReleaseStepRequest:
        return dock_pb2.ReleaseStepRequest(dock=self.name, step=step)

    def _add_consumer_request(self, name: str, settings: Mapping[str, Any]
                              ) -> dock_pb2.AddConsumerRequest:
        consumer = spec_mod.consumer_spec(name, settings, f"consumers.{name}")
        self._spec = None  # refetched with the new consumer
        return dock_pb2.AddConsumerRequest(dock=self.name, consumer=consumer)


class _Drain:
    """Dock.iter's loop, shared with tdock.aio: Gets of one step until this
    rank has drained it."""

    def __init__(self, dock: str, consumer: str, rank: int, step: int | None,
                 wait: float | None):
        self.dock, self.consumer, self.rank = dock, consumer, rank
        self.step, self.wait = step, wait
        self.done = False

    def get_args(self) -> dict:
        """The step and wait of the next Get."""
        return {"step": self.step,
                "wait": _POLL_SLICE if self.wait is None else self.wait}

    def take(self, b: batch_mod.Batch) -> bool:
        """Whether to yield `b`; sets done at the step's end, raises
        errors.WaitTimeout when a bounded wait ran out."""
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
        return len(b) > 0


def _raw(payload: bytes) -> bytes:
    return payload


class Dock(_DockCalls):
    """One dock of a server: Put, Get, Read and its control calls."""

    @property
    def spec(self) -> dock_pb2.DockSpec:
        """The dock's spec with defaults filled in (fetched once)."""
        if self._spec is None:
            self._spec = self.status().spec
        return self._spec

    def put(self, step: int, rows: Iterable[int], columns: Mapping[str, Any],
            *, ack: Any = None, wait: float = 30.0) -> PutAck:
        """Writes cells (rows x columns) of a step. Each column's value holds
        one entry per row (see tdock.columns). `ack`: a Batch (or list of
        them) whose lease this write completes: the first lease is checked
        before anything is written and completed with the write (errors.
        FailedPrecondition if it is no longer in flight, nothing written);
        further ones are acknowledged after it. Batches without a lease
        (consumers without lease_ms) need none."""
        payload, leased = self._put_request(self.spec, step, rows, columns, ack, wait)
        resp = self.client.call("Put", payload, dock_pb2.PutResponse,
                                extra_timeout=wait, serialize=_raw)
        self.ack(leased[1:])
        return PutAck(resp.rows, resp.bytes)

    def get(self, consumer: str, *, rank: int = 0, step: int | None = None,
            count: int | None = None, wait: float = 30.0,
            round: int | None = None) -> batch_mod.Batch:
        """Claims rows for `consumer` (rank `rank`): up to `count` (default
        its dispatch_size) of `step` (default the oldest step with rows for
        it), waiting up to `wait` seconds. An empty batch with timed_out set
        when nothing came in time. BALANCED consumers: `round` serves an
        earlier round again."""
        req = self._get_request(consumer, rank, step, count, wait, round)
        answer = self.client.call("Get", req, extra_timeout=wait,
                                  deserialize=wire.decode_get)
        return self._batch(self.spec, answer, consumer, rank)

    def sample(self, consumer: str, *, rank: int = 0, step: int | None = None,
               count: int | None = None, wait: float = 30.0,
               round: int | None = None) -> batch_mod.Batch:
        """Like get, without column data: rows and token counts only."""
        req = self._get_request(consumer, rank, step, count, wait, round)
        resp = self.client.call("Sample", req, dock_pb2.SampleResponse,
                                extra_timeout=wait)
        return batch_mod.from_response(resp, [], {}, consumer, rank)

    def read(self, step: int, rows: Iterable[int],
             columns: Iterable[str] | None = None) -> batch_mod.Batch:
        """Written cells by row, without claiming them."""
        answer = self.client.call("Read", self._read_request(step, rows, columns),
                                  deserialize=wire.decode_get)
        return self._batch(self.spec, answer)

    def iter(self, consumer: str, *, rank: int = 0, step: int | None = None,
             count: int | None = None, wait: float | None = None
             ) -> Iterator[batch_mod.Batch]:
        """Batches of one step for `consumer` (rank `rank`) until this rank has
        drained it (the oldest step with rows for it when step is None). By
        default it waits as long as it takes; with `wait` (seconds), a Get
        that finds nothing in that time raises errors.WaitTimeout."""
        drain = _Drain(self.name, consumer, rank, step, wait)
        while not drain.done:
            b = self.get(consumer, rank=rank, count=count, **drain.get_args())
            if drain.take(b):
                yield b

    def ack(self, batches: Any) -> int:
        """Acknowledges batches handed out under a lease: their rows are done
        for the consumer. Returns the rows acknowledged. Batches without a
        lease (consumers without lease_ms) are complete already and skipped.
        errors.FailedPrecondition names a lease that is no longer in flight
        (it expired and its rows were handed out again, or was acknowledged)."""
        return self._end_leases("Ack", batches)

    def nack(self, batches: Any) -> int:
        """Hands leased batches back at once, to be handed out again (to the
        same rank for a BALANCED consumer). Returns the rows handed back."""
        return self._end_leases("Nack", batches)

    def _end_leases(self, method: str, batches: Any) -> int:
        return sum(self.client.call(method, self._lease_request(b), dock_pb2.AckResponse).rows
                   for b in _leased(batches))

    def status(self) -> DockStatus:
        return self._status(self.client.call("GetDockStatus", self._status_request(),
                                             dock_pb2.GetDockStatusResponse))

    def release(self, step: int) -> None:
        """Frees a step's partition now (consumers not done lose its rows)."""
        self.client.call("ReleaseStep", self._release_request(step),
                         dock_pb2.ReleaseStepResponse)

    def add_consumer(self, name: str, settings: Mapping[str, Any]
                     ) -> dock_pb2.ConsumerSpec:
        """Adds a consumer at run time (settings as under `consumers:`)."""
        return self.client.call("AddConsumer", self._add_consumer_request(name, settings),
                                dock_pb2.AddConsumerResponse).consumer


def _leased(batches: Any) -> list[batch_mod.Batch]:
    """The batches (one, a list or None) that hold a lease."""
    if batches is None:
        return []
    out = []
    for b in batches if isinstance(batches, (list, tuple)) else [batches]:
        if not isinstance(b, batch_mod.Batch):
            raise errors.InvalidArgument(
                f"ack takes Batches, got {type(b).__name__}")
        if b.lease is not None:
            out.append(b)
    return out


def _millis(seconds: float, what: str) -> int:
    if seconds is None or seconds < 0:
        raise errors.InvalidArgument(f"{what} must be >= 0 seconds, got {seconds}")
    return int(round(seconds * 1000))
