"""tdock.aio: the asyncio client, on grpc.aio.

    async with tdock.aio.Client("127.0.0.1:50051") as client:
        dock = await client.create_dock("examples/grpo.yaml")
        await dock.put(0, range(4), {"prompt_ids": [np.arange(5, dtype=np.int32)] * 4})
        async for batch in dock.iter("reward", rank=0):
            values, cu_seqlens = batch.packed("prompt_ids")

The same surface as tdock.Client and tdock.Dock, with every call a coroutine
and iter an async generator. A Get parked on the server holds no thread here
either: one event loop holds as many parked Gets as the server admits
(--max_parked_gets_per_consumer). Make the Client inside the event loop that
uses it (grpc.aio channels belong to one loop). Failures raise tdock.errors.*.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Iterable, Mapping

import grpc
import grpc.aio
import numpy as np

from tdock import batch as batch_mod
from tdock import _shards, _shm, errors, wire
from tdock._calls import (DockStatus, DockSummary, Lease, NackAll, PutAck, RowState, Tls,
                          _Connection,
                          _create_dock_request, _DockCalls, _Drain, _joined, _leased,
                          _put_id, _raw, _stub, _summaries, _UnknownColumn)
from tdock.v1 import dock_pb2

__all__ = ["Client", "Dock", "Tls"]


class Client(_Connection):
    """A connection to one tdock server, for asyncio (see the module comment);
    it takes the options of tdock.Client (token, tls, timeout,
    max_message_bytes)."""

    _grpc = grpc.aio
    # What sends a Put's bytes (tdock._native_path): grpc.aio, always.
    data_path = "python"

    async def close(self) -> None:
        if self._giving_back is not None:
            self._giving_back.cancel()
            self._giving_back = None
        for address in list(self._sessions):
            self._end_session(address)
        if self._channel is not None:
            await self._channel.close()
        for channel in self._shard_channels.values():
            await channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def call(self, method: str, request: Any, response_type: Any = None, *,
                   extra_timeout: float = 0.0, serialize=None, deserialize=None):
        """One unary call; gRPC errors become tdock.errors."""
        fn = _stub(self._open(), self._calls, method, response_type, serialize,
                   deserialize)
        try:
            return await fn(request, timeout=self.timeout + extra_timeout,
                            metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def stream_call(self, method: str, request: Any, *, extra_timeout: float = 0.0,
                          deserialize=None) -> list:
        """One unary-stream call's messages, all of them; gRPC errors become
        tdock.errors."""
        fn = _stub(self._open(), self._calls, method, None, None, deserialize,
                   "unary_stream")
        try:
            return [m async for m in fn(request, timeout=self.timeout + extra_timeout,
                                        metadata=self._metadata)]
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def shards(self, refresh: bool = False) -> list[_shards.ShardInfo]:
        """As tdock.Client.shards."""
        if self._shards is None or refresh:
            try:
                listed = _shards.from_listing(await self.call(
                    "ListShards", dock_pb2.ListShardsRequest(), dock_pb2.ListShardsResponse))
            except errors.Unimplemented:
                listed = []  # a standalone server
            else:
                if not listed:
                    raise _shards.no_shards(self.address)
            self._shards = listed
        return self._shards

    async def shard_call(self, shard: _shards.ShardInfo, method: str, request: Any,
                         response_type: Any = None, *, extra_timeout: float = 0.0,
                         serialize=None, deserialize=None):
        """As tdock.Client.shard_call."""
        channel = self._shard_channel(shard)
        fn = _stub(channel, self._shard_calls.setdefault(shard.address, {}), method,
                   response_type, serialize, deserialize, service=_shards.SHARD_SERVICE)
        try:
            return await fn(request, timeout=self.timeout + extra_timeout,
                            metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def cells_of(self, dock: str, answer: tuple, partial: bool = False) -> tuple:
        """As tdock.Client.cells_of: the shards are read concurrently."""
        header, columns = answer
        if not header.cell_locations:
            return answer, []
        cells, kept = await self.read_located(dock, columns, partial)
        if kept is None:
            return (header, cells), []
        header, missing = _shards.narrowed(header, kept)
        return (header, cells), missing

    async def read_located(self, dock: str, columns: list,
                           partial: bool = False) -> tuple[list, Any]:
        """As tdock.Client.read_located: the shards are read concurrently."""
        read = _shards.plan(columns)
        shards = await self.shards()
        if _shards.unknown(shards, read.by_shard):
            shards = await self.shards(refresh=True)
        by_id = _shards.listed(dock, shards, read)
        results = {}

        async def read_one(shard):
            # Its answer goes into `results`, not into its task's result: the
            # event loop's handle that resumes the awaiting coroutine holds
            # the gathered future, and so the finished tasks, until that
            # coroutine next waits; views of shared memory held there would
            # keep their pin past the caller's last use of them.
            info = by_id[shard]
            try:
                session = await self.session(info) if self._shm.uses(info) else 0
                unpin = self._shm.to_unpin(info.address, session) if session else ()
                header, cells = await self.shard_call(
                    info, "ReadCells",
                    _shards.read_request(dock, columns, read, shard, session, unpin),
                    serialize=_raw, deserialize=wire.decode_get)
                if session:
                    cells = self._shm.cells(info, cells, _shards.sizes(read, shard),
                                            session, header.shm_pin)
                results[shard] = cells
            except errors.TdockError as e:
                self._shards = None  # it may be back at another address: listed again
                if _shm.session_lost(e):
                    self._end_session(info.address)
                results[shard] = _shards.at_shard(info, e)

        await asyncio.gather(*(read_one(shard) for shard in read.by_shard))
        return _shards.gather(columns, read, {s: results[s] for s in read.by_shard}, partial)

    async def session(self, shard: _shards.ShardInfo) -> int:
        """As tdock.Client.session."""
        held = self._sessions.get(shard.address)
        if held is not None:
            return held[0]
        call = self._attach_call(shard)
        try:
            event = await call.read()
        except grpc.RpcError as e:
            raise _shards.at_shard(shard, errors.from_rpc_error(e)) from None
        if event is grpc.aio.EOF:
            raise _shards.at_shard(shard, errors.Unavailable("its session ended at once"))
        if shard.address in self._sessions:  # another task's came first
            call.cancel()
            return self._sessions[shard.address][0]
        self._sessions[shard.address] = (event.session, call, shard)
        if self._giving_back is None or self._giving_back.done():
            self._giving_back = asyncio.get_running_loop().create_task(self._give_back_pins())
        return event.session

    async def give_back_pins(self) -> None:
        """As tdock.Client.give_back_pins. This client gives them back every
        GIVE_BACK_EVERY seconds only while its event loop runs: a loop that
        stops between calls (loop.run_until_complete) keeps the shard's
        memory of reads whose views went in the meantime until it runs
        again, unless this is awaited before it stops."""
        for shard, session, pins in self._pins_to_give_back():
            try:
                await self.shard_call(shard, "Unpin",
                                      dock_pb2.UnpinRequest(session=session, pins=pins),
                                      dock_pb2.UnpinResponse)
            except Exception:  # noqa: BLE001 - the session ends, and its pins with it
                pass

    async def _give_back_pins(self) -> None:
        """As tdock.Client's: the pins of reads whose views are gone go back
        every GIVE_BACK_EVERY seconds."""
        while True:
            await asyncio.sleep(_shm.GIVE_BACK_EVERY)
            await self.give_back_pins()

    async def shm_put(self, shard: _shards.ShardInfo, message: wire.PutMessage,
                      wait: float) -> dock_pb2.PutResponse:
        """As tdock.Client.shm_put."""
        held = self._sessions.get(shard.address)
        pins = self._shm.to_unpin(shard.address, held[0]) if held is not None else []
        if pins:
            await self.shard_call(shard, "Unpin", dock_pb2.UnpinRequest(session=held[0], pins=pins),
                                  dock_pb2.UnpinResponse)
        prepared = await self.shard_call(shard, "Prepare", message.without_data(),
                                         dock_pb2.PrepareResponse, extra_timeout=wait,
                                         serialize=_raw)
        self._shm.write(shard, prepared, message.columns)
        return await self.shard_call(shard, "Put", message.without_data(prepared.extent),
                                     dock_pb2.PutResponse, extra_timeout=wait, serialize=_raw)

    async def create_dock(self, spec: Any) -> "Dock":
        """Creates a dock from a dict, a DockSpec or a YAML file path (one
        dock) and returns it, its spec with the server's defaults."""
        resp = await self.call("CreateDock", _create_dock_request(spec),
                               dock_pb2.CreateDockResponse)
        dock = Dock(self, resp.spec.name, resp.spec)
        self._docks[dock.name] = dock
        return dock

    def dock(self, name: str) -> "Dock":
        """The dock of that name (its spec is fetched when first needed)."""
        if name not in self._docks:
            self._docks[name] = Dock(self, name)
        return self._docks[name]

    async def delete_dock(self, name: str) -> None:
        await self.call("DeleteDock", dock_pb2.DeleteDockRequest(dock=name),
                        dock_pb2.DeleteDockResponse)
        self._docks.pop(name, None)

    async def list_docks(self) -> list[DockSummary]:
        return _summaries(await self.call("ListDocks", dock_pb2.ListDocksRequest(),
                                          dock_pb2.ListDocksResponse))

    async def checkpoint(self, dir: str) -> None:
        """As tdock.Client.checkpoint."""
        if not isinstance(dir, str) or not dir:
            raise errors.InvalidArgument(f"checkpoint: dir must be a non-empty path, got {dir!r}")
        await self.call("Checkpoint", dock_pb2.CheckpointRequest(dir=dir),
                        dock_pb2.CheckpointResponse)


class Dock(_DockCalls):
    """One dock of a server, for asyncio: the calls of tdock.Dock as
    coroutines."""

    async def fetch_spec(self) -> dock_pb2.DockSpec:
        """The dock's spec with defaults filled in (fetched once)."""
        if self._spec is None:
            self._spec = (await self.status()).spec
        return self._spec

    async def put(self, step: int, rows: Iterable[int] | None, columns: Mapping[str, Any],
                  *, ack: Any = None, wait: float = 30.0,
                  keys: Iterable[str] | None = None, new_rows: int = 0,
                  group_sizes: Iterable[int] | None = None,
                  versions: int | Iterable[int] | None = None,
                  reservation: Any = None, put_id: int | None = None) -> PutAck:
        """As tdock.Dock.put."""
        rows, keys, group_sizes, versions, reserved = self._put_arguments(
            step, rows, keys, group_sizes, versions, reservation)
        wire_id = _put_id(put_id)
        # Before the Put may add columns (and drop the spec).
        group_size = (await self.fetch_spec()).n_samples_per_prompt
        try:
            message, leased = self._put_request(await self.fetch_spec(), step, rows,
                                                columns, ack, wait, keys, new_rows,
                                                group_sizes, versions, reserved,
                                                put_id=wire_id)
        except _UnknownColumn:
            self._spec = None  # a column added since the spec was fetched?
            message, leased = self._put_request(await self.fetch_spec(), step, rows,
                                                columns, ack, wait, keys, new_rows,
                                                group_sizes, versions, reserved,
                                                add_columns=True, put_id=wire_id)
            self._spec = None  # and those the Put adds
        try:
            shards = await self.client.shards()
            self.client._shm.check(self.client.address, shards)
            if shards:
                target = _shards.for_put(shards, self.name, step, rows, keys or [],
                                         group_size)
                try:
                    if self.client._shm.uses(target):
                        resp = await self.client.shm_put(target, message, wait)
                    else:
                        resp = await self.client.shard_call(target, "Put", message.encode(),
                                                            dock_pb2.PutResponse,
                                                            extra_timeout=wait, serialize=_raw)
                except errors.Unavailable as e:
                    self.client._shards = None  # listed again by the next call
                    raise _shards.at_shard(target, e) from None
            else:
                resp = await self.client.call("Put", message.encode(), dock_pb2.PutResponse,
                                              extra_timeout=wait, serialize=_raw)
        except errors.AlreadyExists as e:
            raise self._written_before(e, step, rows, leased) from None
        self._put_went_in(step, rows, keys, leased)
        await self.ack(leased[1:])
        return PutAck(resp.rows, resp.bytes, list(resp.assigned), resp.replayed)

    async def get(self, consumer: str, *, rank: int = 0, step: int | None = None,
                  count: int | None = None, wait: float = 30.0,
                  round: int | None = None, replica: int = 0,
                  partial: bool = False) -> batch_mod.Batch:
        """As tdock.Dock.get; while it waits, the event loop runs on."""
        req = self._get_request(consumer, rank, step, count, wait, round, replica)
        if self.client.transport == "shm":  # before any row is handed out
            self.client._shm.check(self.client.address, await self.client.shards())
        parts = await self.client.stream_call("GetStream", req, extra_timeout=wait,
                                              deserialize=wire.decode_get)
        header, columns = _joined(parts)
        try:
            answer, missing = await self.client.cells_of(self.name, (header, columns), partial)
        except errors.TdockError as e:
            if header.lease_id:  # as tdock.Dock.get
                await self.client.call("Nack", dock_pb2.AckRequest(
                    dock=self.name, consumer=consumer, lease_id=header.lease_id),
                    dock_pb2.AckResponse)
            raise _shards.unreadable(self.name, consumer, header, e) from None
        answer = self._forget_stale_spec(answer)
        b = self._batch(await self.fetch_spec(), answer, consumer, rank)
        b.missing_rows = np.asarray(missing, dtype=np.int64)
        self._leases.handed_out(b)
        return b

    async def sample(self, consumer: str, *, rank: int = 0, step: int | None = None,
                     count: int | None = None, wait: float = 30.0,
                     round: int | None = None, replica: int = 0) -> batch_mod.Batch:
        """As tdock.Dock.sample."""
        req = self._get_request(consumer, rank, step, count, wait, round, replica)
        resp = await self.client.call("Sample", req, dock_pb2.SampleResponse,
                                      extra_timeout=wait)
        return batch_mod.from_response(resp, [], {}, consumer, rank)

    async def read(self, step: int | None = None, rows: Iterable[int] | None = None,
                   columns: Iterable[str] | None = None, *,
                   keys: Iterable[str] | None = None) -> batch_mod.Batch:
        """As tdock.Dock.read."""
        answer = await self.client.call("Read", self._read_request(step, rows, columns, keys),
                                        deserialize=wire.decode_get)
        answer = self._forget_stale_spec((await self.client.cells_of(self.name, answer))[0])
        return self._batch(await self.fetch_spec(), answer)

    async def iter(self, consumer: str, *, rank: int = 0, step: int | None = None,
                   count: int | None = None, wait: float | None = None, replica: int = 0
                   ) -> AsyncIterator[batch_mod.Batch]:
        """As tdock.Dock.iter, for `async for`."""
        drain = _Drain(self.name, consumer, rank, step, wait,
                       self.client.reconnect_timeout)
        while not drain.done:
            try:
                b = await self.get(consumer, rank=rank, count=count, replica=replica,
                                   **drain.get_args())
            except errors.Unavailable as e:
                await asyncio.sleep(drain.retry_after(e))
                continue
            if drain.take(b):
                yield b

    async def _end_leases(self, method: str, batches: Any) -> int:
        leased = _leased(batches)
        self._leases.ended(leased)
        rows = 0
        for b in leased:
            rows += (await self.client.call(method, self._lease_request(b),
                                            dock_pb2.AckResponse)).rows
        return rows

    async def ack(self, batches: Any) -> int:
        """As tdock.Dock.ack."""
        return await self._end_leases("Ack", batches)

    async def nack(self, batches: Any) -> int:
        """As tdock.Dock.nack."""
        return await self._end_leases("Nack", batches)

    async def leases(self, consumer: str) -> list[Lease]:
        """As tdock.Dock.leases."""
        return self._lease_infos(await self.client.call(
            "ListLeases", self._leases_request(consumer), dock_pb2.ListLeasesResponse))

    async def nack_all(self, consumer: str, rank: int | None = None) -> NackAll:
        """As tdock.Dock.nack_all."""
        r = await self.client.call("NackAll", self._nack_all_request(consumer, rank),
                                   dock_pb2.NackAllResponse)
        return NackAll(r.leases, r.rows)

    async def status(self) -> DockStatus:
        return self._status(await self.client.call(
            "GetDockStatus", self._status_request(), dock_pb2.GetDockStatusResponse))

    async def set_version(self, version: int) -> int:
        """As tdock.Dock.set_version."""
        return (await self.client.call(
            "SetVersion", dock_pb2.SetVersionRequest(dock=self.name, version=version),
            dock_pb2.SetVersionResponse)).version

    async def reserve(self, rows: int | None = None, *, version: int | None = None,
                      group_sizes: Iterable[int] | None = None, deadline: float = 600.0,
                      wait: float = 30.0):
        """As tdock.Dock.reserve; while it waits for admission, the event
        loop runs on."""
        req = self._reserve_request(version, rows, group_sizes, deadline, wait)
        return self._reservation(await self.client.call(
            "Reserve", req, dock_pb2.ReserveResponse, extra_timeout=wait))

    async def release(self, step: int) -> None:
        """As tdock.Dock.release."""
        await self.client.call("ReleaseStep", self._release_request(step),
                               dock_pb2.ReleaseStepResponse)

    async def drop(self, step: int, rows: Iterable[int] | None = None,
                   groups: Iterable[int] | None = None, reason: str = "failed") -> int:
        """As tdock.Dock.drop."""
        req = self._drop_request(step, rows, groups, reason)
        if req is None:
            return 0
        return (await self.client.call("Drop", req, dock_pb2.DropResponse)).dropped

    async def seal(self, step: int, required_columns: Iterable[str] = ()) -> int:
        """As tdock.Dock.seal."""
        return (await self.client.call("Seal", self._seal_request(step, required_columns),
                                       dock_pb2.SealResponse)).dropped

    async def add_consumer(self, name: str, settings: Mapping[str, Any]
                           ) -> dock_pb2.ConsumerSpec:
        """As tdock.Dock.add_consumer."""
        return (await self.client.call("AddConsumer",
                                       self._add_consumer_request(name, settings),
                                       dock_pb2.AddConsumerResponse)).consumer

    async def list_rows(self, step: int, cells: Iterable[str] | None = None
                        ) -> list[RowState]:
        """As tdock.Dock.list_rows."""
        request = self._list_rows_request(step, cells)
        if not self._spec_knows(await self.fetch_spec(), cells):
            self._spec = None  # a column added since the spec was fetched?
        answer = await self.client.call("ListRows", request, dock_pb2.ListRowsResponse)
        if answer.cell_locations:
            located, held = _shards.listing_columns(answer)
            _shards.fill_listing(held, (await self.client.read_located(self.name, located))[0])
        return self._list_rows(answer, await self.fetch_spec() if cells else None)

    async def add_column(self, name: str, settings: Mapping[str, Any]) -> dock_pb2.ColumnSpec:
        """As tdock.Dock.add_column."""
        return (await self.client.call("AddColumn", self._add_column_request(name, settings),
                                       dock_pb2.AddColumnResponse)).column

    async def remove_consumer(self, name: str) -> dock_pb2.ConsumerSpec:
        """As tdock.Dock.remove_consumer."""
        self._spec = None
        return (await self.client.call(
            "RemoveConsumer", dock_pb2.RemoveConsumerRequest(dock=self.name, consumer=name),
            dock_pb2.RemoveConsumerResponse)).consumer
