"""tdock.Client and tdock.Dock: the Python client of a tdock server.

    client = tdock.Client("127.0.0.1:50051")
    dock = client.create_dock("examples/grpo.yaml")
    dock.put(0, range(4), {"prompt_ids": [np.arange(5, dtype=np.int32)] * 4})
    for batch in dock.iter("reward", rank=0):
        values, cu_seqlens = batch.packed("prompt_ids")

One gRPC channel per Client; a Client and its Docks may be shared by threads.
Across processes, pickle them (a Ray actor's argument, a DataLoader worker
started by spawn): the copy opens its own channel. gRPC does not survive
fork: a forked process makes its own Client. Each call has a deadline of
`timeout` seconds, plus its wait bound for Put and Get. Failures raise
tdock.errors.* with the server's message. The channel tries to reconnect to
a server that went away at least every `max_reconnect_backoff` seconds (0.5
by default, well within a lease); one connection attempt may take up to
`connect_timeout` seconds (20: a busy host may not run the server or the
client for seconds); Dock.iter waits up to `reconnect_timeout` seconds (300)
for the server to come back.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Iterable, Iterator, Mapping

import grpc
import numpy as np

from tdock import batch as batch_mod
from tdock import _native_path, _shards, _shm, errors, wire
from tdock._calls import (DockStatus, DockSummary, Lease, LeaseStatus, NackAll, PutAck,
                          Reservation,
                          RowState, StalenessStatus, StepStatus,
                          Tls, _Connection, _create_dock_request, _DockCalls, _Drain,
                          _joined, _leased, _put_id, _raw, _stub, _summaries,
                          _UnknownColumn)
from tdock.v1 import dock_pb2

__all__ = ["Client", "Dock", "DockStatus", "DockSummary", "Lease", "LeaseStatus", "NackAll",
           "PutAck", "Reservation", "StalenessStatus", "StepStatus", "Tls"]


def _give_back_pins(client_ref: Any, closing: threading.Event) -> None:
    """Gives back, every GIVE_BACK_EVERY seconds, the pins of a Client's
    reads whose views are gone: a shard it reads no more gets its memory back
    all the same. Ends with the client (closed, or collected)."""
    while not closing.wait(_shm.GIVE_BACK_EVERY):
        client = client_ref()
        if client is None:
            return
        client.give_back_pins()
        del client


class Client(_Connection):
    """A connection to one tdock server (see the module comment)."""

    def __init__(self, address: str, *, data_path: str | None = None, **options: Any):
        super().__init__(address, **options)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._open()  # gRPC connects when the first call needs it
        # What moves Put bytes (tdock._native_path): "native" or "python".
        self.data_path = _native_path.chosen(data_path)
        self._options["data_path"] = data_path
        self._native = None  # the C++ client, made by the first Put
        _native_path.announce(address, self.data_path, data_path)

    def close(self) -> None:
        with self._lock:
            self._closing.set()
            self._native = None
        for address in list(self._sessions):
            self._end_session(address)
        self._channel.close()
        for channel in self._shard_channels.values():
            channel.close()

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

    def stream_call(self, method: str, request: Any, *, extra_timeout: float = 0.0,
                    deserialize=None) -> list:
        """One unary-stream call's messages, all of them; gRPC errors become
        tdock.errors."""
        fn = _stub(self._channel, self._calls, method, None, None, deserialize,
                   "unary_stream")
        try:
            return list(fn(request, timeout=self.timeout + extra_timeout,
                           metadata=self._metadata))
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def shards(self, refresh: bool = False) -> list[_shards.ShardInfo]:
        """The controller's shards (docs/scale-out.md); [] for a standalone
        server. Listed once, again with `refresh`; errors.Unavailable (and
        asked again next time) while a controller lists none."""
        with self._lock:
            listed = self._shards
        if listed is None or refresh:
            try:
                listed = _shards.from_listing(self.call(
                    "ListShards", dock_pb2.ListShardsRequest(), dock_pb2.ListShardsResponse))
            except errors.Unimplemented:
                listed = []  # a standalone server
            else:
                if not listed:
                    raise _shards.no_shards(self.address)
            with self._lock:
                self._shards = listed
        return listed

    def shard_call(self, shard: _shards.ShardInfo, method: str, request: Any,
                   response_type: Any = None, *, extra_timeout: float = 0.0,
                   serialize=None, deserialize=None, future: bool = False):
        """One unary call of the Shard service at `shard`; with `future`, its
        grpc future (the caller turns its errors into tdock.errors)."""
        with self._lock:
            channel = self._shard_channel(shard)
            calls = self._shard_calls.setdefault(shard.address, {})
        fn = _stub(channel, calls, method, response_type, serialize, deserialize,
                   service=_shards.SHARD_SERVICE)
        timeout = self.timeout + extra_timeout
        if future:
            return fn.future(request, timeout=timeout, metadata=self._metadata)
        try:
            return fn(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def cells_of(self, dock: str, answer: tuple, partial: bool = False) -> tuple:
        """A decoded Get or Read answer with its cells, and the rows left out:
        as it came from a standalone server; from a controller, read from the
        shards holding them (one call each, in parallel). A shard that cannot
        be read fails it, unless `partial` and another shard answered: then
        the answer is narrowed to the rows it could read, and the others are
        the rows left out."""
        header, columns = answer
        if not header.cell_locations:
            return answer, []
        cells, kept = self.read_located(dock, columns, partial)
        if kept is None:
            return (header, cells), []
        header, missing = _shards.narrowed(header, kept)
        return (header, cells), missing

    def read_located(self, dock: str, columns: list,
                     partial: bool = False) -> tuple[list, Any]:
        """Columns of cell locations as columns of their cells, read from the
        shards holding them (one call each, in parallel); and, when `partial`
        left rows out, the positions of the rows kept (_shards.gather)."""
        read = _shards.plan(columns)
        shards = self.shards()
        if _shards.unknown(shards, read.by_shard):
            shards = self.shards(refresh=True)
        by_id = _shards.listed(dock, shards, read)
        calls, sessions = {}, {}
        for shard in read.by_shard:
            try:
                if self._shm.uses(by_id[shard]):
                    sessions[shard] = self.session(by_id[shard])
                request = _shards.read_request(
                    dock, columns, read, shard, sessions.get(shard, 0),
                    self._shm.to_unpin(by_id[shard].address, sessions[shard])
                    if shard in sessions else ())
                calls[shard] = self.shard_call(by_id[shard], "ReadCells", request,
                                               serialize=_raw, deserialize=wire.decode_get,
                                               future=True)
            except errors.TdockError as e:
                calls[shard] = e
        results = {}
        for shard, call in calls.items():
            try:
                if isinstance(call, errors.TdockError):
                    raise call
                try:
                    header, cells = call.result()
                except grpc.RpcError as e:
                    raise errors.from_rpc_error(e) from None
                if shard in sessions:
                    cells = self._shm.cells(by_id[shard], cells, _shards.sizes(read, shard),
                                            sessions[shard], header.shm_pin)
                results[shard] = cells
            except errors.TdockError as e:
                results[shard] = _shards.at_shard(by_id[shard], e)
                # It may be back at another address: listed again next time.
                with self._lock:
                    self._shards = None
                    if _shm.session_lost(e):
                        self._end_session(by_id[shard].address)
        return _shards.gather(columns, read, results, partial)

    def session(self, shard: _shards.ShardInfo) -> int:
        """The id of this client's session with `shard` (Shard.Attach), made
        when first needed: it holds the pins of reads over shared memory."""
        with self._lock:
            held = self._sessions.get(shard.address)
        if held is not None:
            return held[0]
        with self._lock:
            call = self._attach_call(shard)
        try:
            event = next(call)
        except grpc.RpcError as e:
            raise _shards.at_shard(shard, errors.from_rpc_error(e)) from None
        with self._lock:
            if shard.address in self._sessions:  # another thread's came first
                call.cancel()
                return self._sessions[shard.address][0]
            self._sessions[shard.address] = (event.session, call, shard)
            if self._giving_back is None:
                # It holds the client weakly: a client dropped unclosed goes.
                self._giving_back = threading.Thread(
                    target=_give_back_pins, args=(weakref.ref(self), self._closing),
                    daemon=True, name="tdock-shm-pins")
                self._giving_back.start()
        return event.session

    def give_back_pins(self) -> None:
        """Gives back now the pins of this client's reads through shared
        memory whose views are all gone (docs/scale-out.md): the shards may
        reuse the memory they held. A thread does so every GIVE_BACK_EVERY
        seconds (0.05), and a read or Put of a shard gives back that shard's
        first: call this to have it done at once."""
        with self._lock:
            due = self._pins_to_give_back()
        for shard, session, pins in due:
            if self._closing.is_set():
                return  # the sessions ended, and their pins with them
            try:
                self.shard_call(shard, "Unpin",
                                dock_pb2.UnpinRequest(session=session, pins=pins),
                                dock_pb2.UnpinResponse)
            except Exception:  # noqa: BLE001 - the session ends, and its pins with it
                pass

    def native_put(self, message: wire.PutMessage,
                   shard: _shards.ShardInfo | None) -> dock_pb2.PutResponse:
        """A Put sent by the C++ client (tdock._native_path), to `shard`
        (None: a standalone server). Pins of reads waiting to go back go
        first: the memory they hold may be what the Put needs."""
        with self._lock:
            if self._closing.is_set():
                raise ValueError("put on a closed tdock.Client")
            if self._native is None:
                self._native = _native_path.connect(self.address, self._options,
                                                    self.transport)
            native = self._native
        if shard is not None:
            self._give_back_before_put(shard)
        return _native_path.put(native, message, shard)

    def _give_back_before_put(self, shard: _shards.ShardInfo) -> None:
        """Gives back the pins of reads of `shard` waiting to go back."""
        with self._lock:
            held = self._sessions.get(shard.address)
        pins = self._shm.to_unpin(shard.address, held[0]) if held is not None else []
        if pins:
            self.shard_call(shard, "Unpin", dock_pb2.UnpinRequest(session=held[0], pins=pins),
                            dock_pb2.UnpinResponse)

    def shm_put(self, shard: _shards.ShardInfo, message: wire.PutMessage,
                wait: float) -> dock_pb2.PutResponse:
        """A Put through `shard`'s shared memory: prepared (the shard takes
        the cells' memory, waiting as a Put would), its bytes copied there,
        then sent without them. Pins of reads of the shard waiting to go
        back go first: the memory they hold may be what the Put needs."""
        self._give_back_before_put(shard)
        prepared = self.shard_call(shard, "Prepare", message.without_data(),
                                   dock_pb2.PrepareResponse, extra_timeout=wait,
                                   serialize=_raw)
        self._shm.write(shard, prepared, message.columns)
        return self.shard_call(shard, "Put", message.without_data(prepared.extent),
                               dock_pb2.PutResponse, extra_timeout=wait, serialize=_raw)

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

    def checkpoint(self, dir: str) -> None:
        """Copies the server's store (--data_dir) into `dir` on the server's
        machine, atomically and after everything acknowledged so far; a
        server started with --data_dir=dir serves the copy (docs/persistence.md).
        errors.FailedPrecondition on a server without --data_dir."""
        if not isinstance(dir, str) or not dir:
            raise errors.InvalidArgument(f"checkpoint: dir must be a non-empty path, got {dir!r}")
        self.call("Checkpoint", dock_pb2.CheckpointRequest(dir=dir), dock_pb2.CheckpointResponse)


class Dock(_DockCalls):
    """One dock of a server: Put, Get, Read and its control calls."""

    @property
    def spec(self) -> dock_pb2.DockSpec:
        """The dock's spec with defaults filled in (fetched once)."""
        if self._spec is None:
            self._spec = self.status().spec
        return self._spec

    def put(self, step: int, rows: Iterable[int] | None, columns: Mapping[str, Any],
            *, ack: Any = None, wait: float = 30.0,
            keys: Iterable[str] | None = None, new_rows: int = 0,
            group_sizes: Iterable[int] | None = None,
            versions: int | Iterable[int] | None = None,
            reservation: Any = None, put_id: int | None = None) -> PutAck:
        """Writes cells (rows x columns) of a step. Each column's value holds
        one entry per row (see tdock.columns). `ack`: a Batch (or list of
        them) whose lease this write completes: the first lease is checked
        before anything is written and completed with the write (errors.
        FailedPrecondition if it is no longer in flight, nothing written);
        further ones are acknowledged after it. Batches without a lease
        (consumers without lease_ms) need none. A Put without ack= that
        writes every row of a lease this Dock handed out and has not seen
        end, or the last of its rows that this Dock's earlier Puts left
        unwritten (its results, the ack forgotten), is refused (errors.
        FailedPrecondition naming the lease, nothing written); `ack=False`
        writes them without acknowledging, for a caller that calls
        dock.ack(batch) itself.
        `keys`: one per row, the rows' keys (a uid; a row's key comes with its
        first write and is unique among the dock's live rows); with `rows`
        None, the rows are those that have these keys — or, for keys no live
        row has, new rows the server assigns, as it does for `new_rows=N`
        (whole groups from the step's first free one, up to its
        max_rows_per_step); the PutAck's `assigned` lists them. `group_sizes`:
        with rows the server assigns, the sizes of the groups they open (each
        at most the dock's n; by itself it asks for sum(group_sizes) new
        rows): each takes one of the step's groups and its rows past the size
        are closed (dropped as "unused"), so whole-group consumers take it
        complete at that size; a later write past it fails
        (errors.FailedPrecondition). `versions`: the policy (weights) version
        the rows were generated with, one int for all rows or one per row
        (>= 0); a row keeps the oldest it was given, and batches
        (`batch.versions`) and list_rows carry it.
        `reservation`: a Reservation (Dock.reserve) or its id whose rows this
        writes, at its step (with `rows` None, all of them).
        `put_id`: an id for this Put chosen by the writer, in [1, 2**64)
        (e.g. secrets.randbits(64) or 1): a Put sent again with the id of one
        the dock stored, its step still live, writes nothing and returns that
        Put's PutAck with `replayed` True. Send a Put again with the same
        put_id when its answer was lost (errors.Unavailable,
        errors.DeadlineExceeded); errors.Aborted means the first is still
        being stored: ask again."""
        rows, keys, group_sizes, versions, reserved = self._put_arguments(
            step, rows, keys, group_sizes, versions, reservation)
        wire_id = _put_id(put_id)
        group_size = self.spec.n_samples_per_prompt  # before the Put may add columns
        try:
            message, leased = self._put_request(self.spec, step, rows, columns, ack, wait,
                                                keys, new_rows, group_sizes, versions, reserved,
                                                put_id=wire_id)
        except _UnknownColumn:
            self._spec = None  # a column added since the spec was fetched?
            message, leased = self._put_request(self.spec, step, rows, columns, ack, wait,
                                                keys, new_rows, group_sizes, versions, reserved,
                                                add_columns=True, put_id=wire_id)
            self._spec = None  # and those the Put adds
        try:
            shards = self.client.shards()
            self.client._shm.check(self.client.address, shards)
            if shards:
                target = _shards.for_put(shards, self.name, step, rows, keys or [],
                                         group_size)
                try:
                    if self.client.data_path == "native":
                        resp = self.client.native_put(message, target)
                    elif self.client._shm.uses(target):
                        resp = self.client.shm_put(target, message, wait)
                    else:
                        resp = self.client.shard_call(target, "Put", message.encode(),
                                                      dock_pb2.PutResponse, extra_timeout=wait,
                                                      serialize=_raw)
                except errors.Unavailable as e:
                    self.client._shards = None  # listed again by the next call
                    raise _shards.at_shard(target, e) from None
            elif self.client.data_path == "native":
                resp = self.client.native_put(message, None)
            else:
                resp = self.client.call("Put", message.encode(), dock_pb2.PutResponse,
                                        extra_timeout=wait, serialize=_raw)
        except errors.AlreadyExists as e:
            raise self._written_before(e, step, rows, leased) from None
        self._put_went_in(step, rows, keys, leased)
        self.ack(leased[1:])
        return PutAck(resp.rows, resp.bytes, list(resp.assigned), resp.replayed)

    def get(self, consumer: str, *, rank: int = 0, step: int | None = None,
            count: int | None = None, wait: float = 30.0,
            round: int | None = None, replica: int = 0,
            partial: bool = False) -> batch_mod.Batch:
        """Claims rows for `consumer` (rank `rank`): up to `count` (default
        its dispatch_size) of `step` (default the oldest step with rows for
        it), waiting up to `wait` seconds. An empty batch with timed_out set
        when nothing came in time. BALANCED consumers: `round` serves an
        earlier round again; with `replicas` in the spec, `replica` names
        which of the rank's replicas (TP / PP / CP peers) asks — each gets
        the rank's share of every round once.

        Through a controller, rows handed out whose cells cannot be read (a
        shard away or gone) fail the Get (DataLoss naming them; with a lease,
        the lease is handed back and it is Unavailable). With `partial`, the
        batch comes without them when any row could be read; they are in its
        `missing_rows` (and under its lease, if any: acknowledging it
        completes them too)."""
        req = self._get_request(consumer, rank, step, count, wait, round, replica)
        if self.client.transport == "shm":  # before any row is handed out
            self.client._shm.check(self.client.address, self.client.shards())
        # GetStream: the answer in parts of about 1 MiB, which grpcio takes in
        # faster than one large message (docs/benchmarks.md).
        parts = self.client.stream_call("GetStream", req, extra_timeout=wait,
                                        deserialize=wire.decode_get)
        header, columns = _joined(parts)
        try:
            answer, missing = self.client.cells_of(self.name, (header, columns), partial)
        except errors.TdockError as e:
            # The rows are handed out but their cells cannot be read: a lease
            # goes back at once; without one they are lost to this consumer.
            if header.lease_id:
                self.client.call("Nack", dock_pb2.AckRequest(
                    dock=self.name, consumer=consumer, lease_id=header.lease_id),
                    dock_pb2.AckResponse)
            raise _shards.unreadable(self.name, consumer, header, e) from None
        answer = self._forget_stale_spec(answer)
        b = self._batch(self.spec, answer, consumer, rank)
        b.missing_rows = np.asarray(missing, dtype=np.int64)
        self._leases.handed_out(b)
        return b

    def sample(self, consumer: str, *, rank: int = 0, step: int | None = None,
               count: int | None = None, wait: float = 30.0,
               round: int | None = None, replica: int = 0) -> batch_mod.Batch:
        """Like get, without column data: rows and token counts only."""
        req = self._get_request(consumer, rank, step, count, wait, round, replica)
        resp = self.client.call("Sample", req, dock_pb2.SampleResponse,
                                extra_timeout=wait)
        return batch_mod.from_response(resp, [], {}, consumer, rank)

    def read(self, step: int | None = None, rows: Iterable[int] | None = None,
             columns: Iterable[str] | None = None, *,
             keys: Iterable[str] | None = None) -> batch_mod.Batch:
        """Written cells by row, without claiming them: the `rows` of `step`,
        or the rows that have `keys` (all in one step), in that order."""
        answer = self.client.call("Read", self._read_request(step, rows, columns, keys),
                                  deserialize=wire.decode_get)
        answer = self._forget_stale_spec(self.client.cells_of(self.name, answer)[0])
        return self._batch(self.spec, answer)

    def iter(self, consumer: str, *, rank: int = 0, step: int | None = None,
             count: int | None = None, wait: float | None = None, replica: int = 0
             ) -> Iterator[batch_mod.Batch]:
        """Batches of one step for `consumer` (rank `rank`) until this rank has
        drained it (the oldest step with rows for it when step is None). A
        BALANCED rank gets every round of the step, its empty share of a
        short round as an empty batch: every rank takes as many. By
        default it waits as long as it takes; with `wait` (seconds), a Get
        that finds nothing in that time raises errors.WaitTimeout. A server
        that goes away (a restart) is waited for, up to the Client's
        reconnect_timeout; a BALANCED rank then asks again for the round it
        was waiting for, and a leased consumer's rows come back by expiry
        (see _calls._Drain)."""
        drain = _Drain(self.name, consumer, rank, step, wait,
                       self.client.reconnect_timeout)
        while not drain.done:
            try:
                b = self.get(consumer, rank=rank, count=count, replica=replica,
                                   **drain.get_args())
            except errors.Unavailable as e:
                time.sleep(drain.retry_after(e))
                continue
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

    def leases(self, consumer: str) -> list[Lease]:
        """The consumer's leases in flight, oldest first: what its workers
        hold and have not acknowledged (a job resuming after its workers
        died sees what they held)."""
        return self._lease_infos(self.client.call("ListLeases", self._leases_request(consumer),
                                             dock_pb2.ListLeasesResponse))

    def nack_all(self, consumer: str, rank: int | None = None) -> NackAll:
        """Hands back every lease of the consumer in flight (of one rank if
        `rank` is given) at once, each as nack does (recorded first), so the
        rows go out again now instead of after lease_ms. A lease that ends
        otherwise meanwhile is left out."""
        r = self.client.call("NackAll", self._nack_all_request(consumer, rank),
                             dock_pb2.NackAllResponse)
        return NackAll(r.leases, r.rows)

    def _end_leases(self, method: str, batches: Any) -> int:
        leased = _leased(batches)
        self._leases.ended(leased)
        return sum(self.client.call(method, self._lease_request(b), dock_pb2.AckResponse).rows
                   for b in leased)

    def status(self) -> DockStatus:
        return self._status(self.client.call("GetDockStatus", self._status_request(),
                                             dock_pb2.GetDockStatusResponse))

    def release(self, step: int) -> None:
        """Frees a step's partition now (consumers not done lose its rows)."""
        self.client.call("ReleaseStep", self._release_request(step),
                         dock_pb2.ReleaseStepResponse)

    def set_version(self, version: int) -> int:
        """Sets the dock's current policy (weights) version, after a weight
        update: no row may be put with a newer one, and it only advances
        (errors.FailedPrecondition for an older one; the same one changes
        nothing). Returns the dock's version."""
        return self.client.call("SetVersion",
                                dock_pb2.SetVersionRequest(dock=self.name, version=version),
                                dock_pb2.SetVersionResponse).version

    def reserve(self, rows: int | None = None, *, version: int | None = None,
                group_sizes: Iterable[int] | None = None, deadline: float = 600.0,
                wait: float = 30.0) -> Reservation:
        """Admission before generation: asks for `rows` new rows (whole groups
        of n, the last maybe partly) or groups of `group_sizes` for data
        about to be generated with policy `version` (None: the dock's version
        when granted, `Reservation.version` — generate with those weights).
        The server grants rows of
        the oldest step with room once rows of that version landing there can
        be trained on within the consumers' max_staleness, waiting up to
        `wait` seconds for that (then `timed_out`, nothing reserved): rollout
        is paced instead of generating samples that would be thrown away.
        The rows carry the version; rows without a cell after `deadline`
        seconds are dropped ("expired"), so a dead producer holds no step."""
        req = self._reserve_request(version, rows, group_sizes, deadline, wait)
        return self._reservation(self.client.call("Reserve", req, dock_pb2.ReserveResponse,
                                                  extra_timeout=wait))

    def drop(self, step: int, rows: Iterable[int] | None = None,
             groups: Iterable[int] | None = None, reason: str = "failed") -> int:
        """Takes rows (and every row of `groups`) out of a live step: they are
        never handed out again and count as done for every consumer, so the
        step and their groups do not wait for them; a Put or Read of one
        fails naming the drop. `reason` is one of tdock.DROP_REASONS
        ("filtered", "failed", ...); status() counts drops by reason.
        Returns the rows this call dropped (a row dropped before is not
        counted again). `rows` and `groups`: any iterables of integers (a
        list, an array, a set, a generator); empty ones drop nothing and
        return 0 without asking the server."""
        req = self._drop_request(step, rows, groups, reason)
        if req is None:
            return 0
        return self.client.call("Drop", req, dock_pb2.DropResponse).dropped

    def seal(self, step: int, required_columns: Iterable[str] = ()) -> int:
        """Closes a live step to new rows: its rows that lack a cell of any of
        `required_columns` (none named: that have no cell at all) are dropped
        as "sealed", so each consumer's end of step comes once every row left
        is handed to it. Returns the rows it dropped."""
        return self.client.call("Seal", self._seal_request(step, required_columns),
                                dock_pb2.SealResponse).dropped

    def add_consumer(self, name: str, settings: Mapping[str, Any]
                     ) -> dock_pb2.ConsumerSpec:
        """Adds a consumer at run time (settings as under `consumers:`)."""
        return self.client.call("AddConsumer", self._add_consumer_request(name, settings),
                                dock_pb2.AddConsumerResponse).consumer

    def list_rows(self, step: int, cells: Iterable[str] | None = None) -> list[RowState]:
        """A live step's rows without payload: key, group, columns written,
        consumers that have taken each, and the drop reason of dropped ones.
        `cells`: columns whose written cells each RowState carries in `cells`
        ({column: value}, decoded as Batch.cell decodes them), for small
        cells such as per-row tags (a json column)."""
        request = self._list_rows_request(step, cells)
        if not self._spec_knows(self.spec, cells):
            self._spec = None  # a column added since the spec was fetched?
        resp = self.client.call("ListRows", request, dock_pb2.ListRowsResponse)
        if resp.cell_locations:
            located, held = _shards.listing_columns(resp)
            _shards.fill_listing(held, self.client.read_located(self.name, located)[0])
        return self._list_rows(resp, self.spec if cells else None)

    def add_column(self, name: str, settings: Mapping[str, Any]) -> dock_pb2.ColumnSpec:
        """Adds a column at run time (settings as under `columns:`, e.g.
        {"dtype": "float32"}): no cell of it is written yet; Puts may write it
        in live steps too, and consumers added later may need it."""
        return self.client.call("AddColumn", self._add_column_request(name, settings),
                                dock_pb2.AddColumnResponse).column

    def remove_consumer(self, name: str) -> dock_pb2.ConsumerSpec:
        """Removes a consumer at run time: its Gets and Acks fail from then on
        (NotFound, "was removed") and it no longer holds any step, so steps
        the other consumers are done with are released. Returns its spec,
        marked removed; the name is free for a new consumer."""
        self._spec = None
        return self.client.call("RemoveConsumer",
                                dock_pb2.RemoveConsumerRequest(dock=self.name, consumer=name),
                                dock_pb2.RemoveConsumerResponse).consumer
