"""A controller's shards, as the clients see them (docs/scale-out.md).

A Client connected to a controller (tdock-server --role=controller) learns
its shards with ListShards when it first moves data; a standalone server
answers UNIMPLEMENTED and the Client talks to it alone. Puts go to the shard
on this node (TDOCK_NODE, else the host name), else to the shard a hash of
(dock, step, group) picks. A Get's answer from a controller carries, per
column, one cell location a row (shard, extent, offset, bytes: four
little-endian uint64); the Client asks each shard for its rows' cells
(Shard.ReadCells, all columns in one call) and puts the batch together as a
standalone server would have sent it.
"""

from __future__ import annotations

import os
import socket
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from tdock import errors
from tdock.v1 import dock_pb2
from tdock.wire import WireColumn

SHARD_SERVICE = "/tdock.v1.Shard/"
_LOCATION = np.dtype([("shard", "<u8"), ("extent", "<u8"), ("offset", "<u8"),
                      ("bytes", "<u8")])


@dataclass(frozen=True)
class ShardInfo:
    """A shard as the controller lists it: `state` "live", or "away" when the
    controller has not heard from it lately (its rows are not handed out);
    `memory_bytes` its cells take and its limit (0: none), as it last said;
    `incarnation`, which changes when it restarts without its cells (a data
    dir keeps it); `shm_prefix`, where its shared memory is (empty: none;
    see tdock._shm)."""
    id: int
    address: str
    node: str
    state: str = "live"
    memory_bytes: int = 0
    memory_limit_bytes: int = 0
    incarnation: int = 0
    shm_prefix: str = ""


def from_listing(resp: dock_pb2.ListShardsResponse) -> list[ShardInfo]:
    return [ShardInfo(s.id, s.address, s.node,
                      "away" if s.state == dock_pb2.SHARD_AWAY else "live",
                      s.memory_bytes, s.memory_limit_bytes, s.incarnation, s.shm_prefix)
            for s in resp.shards]


def local_node() -> str:
    """The node this process runs on, as shards name theirs."""
    return os.environ.get("TDOCK_NODE") or socket.gethostname()


def for_put(shards: Sequence[ShardInfo], dock: str, step: int, rows: Any,
            keys: Sequence[str], group_size: int) -> ShardInfo:
    """The shard a Put goes to: this node's unless it is listed away, else
    one picked by a hash of (dock, step, the first row's group or the first
    key) among those not away (among all when every one is)."""
    node = local_node()
    for shard in shards:
        if shard.node == node and shard.state != "away":
            return shard
    if rows is not None and len(rows):
        what = str(int(rows[0]) // max(1, group_size))
    elif keys:
        what = keys[0]
    else:
        what = ""
    live = [shard for shard in shards if shard.state != "away"] or list(shards)
    return live[zlib.crc32(f"{dock}\0{step}\0{what}".encode()) % len(live)]


def locations(column: WireColumn) -> np.ndarray:
    """A location column's records, one a row."""
    rows = len(column.offsets) - 1 if len(column.offsets) else 0
    if len(column.data) != rows * _LOCATION.itemsize:
        raise errors.Internal(
            f"column '{column.name}': {rows} rows but {len(column.data)} bytes of cell "
            f"locations ({_LOCATION.itemsize} a row)")
    return np.frombuffer(column.data, dtype=_LOCATION, count=rows)


@dataclass
class ReadPlan:
    """Which shard holds which rows of which column."""
    where: list  # per column: its location records
    by_shard: dict  # shard id -> per column, the row positions it holds


def plan(columns: Sequence[WireColumn]) -> ReadPlan:
    where = [locations(c) for c in columns]
    by_shard: dict[int, list[np.ndarray]] = {}
    for shard in sorted({int(s) for w in where for s in np.unique(w["shard"])}):
        by_shard[shard] = [np.flatnonzero(w["shard"] == shard) for w in where]
    return ReadPlan(where, by_shard)


def read_request(dock: str, columns: Sequence[WireColumn], read: ReadPlan,
                 shard: int, session: int = 0, unpin: Sequence[int] = ()) -> bytes:
    """The ReadCellsRequest for `shard`: every column, narrowed to its rows
    (over shared memory: in `session`, giving back the pins `unpin`)."""
    request = dock_pb2.ReadCellsRequest(dock=dock, shm_session=session, unpin=unpin)
    for column, where, positions in zip(columns, read.where, read.by_shard[shard]):
        lengths = np.diff(column.offsets)[positions]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        request.columns.add(name=column.name, dtype=column.dtype, offsets=offsets.tolist(),
                            data=where[positions].tobytes())
    return request.SerializeToString()


def sizes(read: ReadPlan, shard: int) -> list[np.ndarray]:
    """Per column, the byte lengths of the cells `shard` is asked for."""
    return [where["bytes"][positions].astype(np.int64)
            for where, positions in zip(read.where, read.by_shard[shard])]


def assemble(columns: Sequence[WireColumn], read: ReadPlan, answers: dict,
             kept: np.ndarray | None = None) -> list[WireColumn]:
    """The batch's columns with their cells, from each shard's answer
    (shard id -> its columns, in the order asked); with `kept`, only the
    rows at those positions (the others' shards may be missing from
    `answers`)."""
    out = []
    for i, column in enumerate(columns):
        nbytes = read.where[i]["bytes"].astype(np.int64)
        holders = [s for s in read.by_shard if len(read.by_shard[s][i])]
        offsets = column.offsets
        if len(holders) == 1 and kept is None:
            # One shard holds every row, in the batch's order: its data as is.
            data = answers[holders[0]][i].data
        else:
            starts = np.concatenate([[0], np.cumsum(nbytes)])
            buffer = bytearray(int(starts[-1]))
            view = memoryview(buffer)
            for shard in holders:
                if shard not in answers:
                    continue  # its rows are not kept
                got = answers[shard][i].data
                pos = 0
                for row in read.by_shard[shard][i]:
                    size = int(nbytes[row])
                    view[int(starts[row]):int(starts[row]) + size] = got[pos:pos + size]
                    pos += size
            if kept is not None:
                view = memoryview(b"".join(view[int(starts[r]):int(starts[r + 1])]
                                           for r in kept))
                lengths = np.diff(np.asarray(column.offsets, dtype=np.int64))[kept]
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            data = view.toreadonly()
        out.append(WireColumn(column.name, column.dtype, offsets, data))
    return out


def gather(columns: Sequence[WireColumn], read: ReadPlan, results: dict,
           partial: bool) -> tuple[list[WireColumn], np.ndarray | None]:
    """The columns with their cells from the shards' `results` (shard id ->
    its answer, or the error of its call). A shard failed: the error, unless
    `partial` and another shard answered; then the rows with every cell on
    the shards that answered, and their positions (else None)."""
    failed = [e for e in results.values() if isinstance(e, Exception)]
    if failed and (not partial or len(failed) == len(results)):
        raise failed[0]
    answers = {s: a for s, a in results.items() if not isinstance(a, Exception)}
    for shard, answer in answers.items():
        check_answer(shard, columns, read, answer)
    if not failed:
        return assemble(columns, read, answers), None
    rows = len(read.where[0]) if read.where else 0
    readable = np.ones(rows, dtype=bool)
    for where in read.where:
        readable &= np.isin(where["shard"], list(answers))
    kept = np.flatnonzero(readable)
    return assemble(columns, read, answers, kept), kept


def narrowed(header: Any, kept: np.ndarray) -> tuple[Any, list[int]]:
    """A Get's answer without the rows not at positions `kept`: its per-row
    fields narrowed, its repeats and micro-batches renumbered (a micro-batch
    may be left empty: every rank keeps the same count); and the rows left
    out."""
    out = type(header)()
    out.CopyFrom(header)
    positions = np.asarray(kept, dtype=np.int64)
    rows = np.asarray(header.rows, dtype=np.int64)
    tokens = np.asarray(header.token_counts, dtype=np.int64)
    missing = np.setdiff1d(np.arange(len(rows)), positions)
    out.rows[:] = rows[positions].tolist()
    out.token_counts[:] = tokens[positions].tolist() if len(tokens) else []
    if len(header.keys):
        out.keys[:] = [header.keys[int(p)] for p in positions]
    if len(header.versions):
        out.versions[:] = np.asarray(header.versions)[positions].tolist()
    def before(p: int) -> int:  # the new position of old position p (or of the next kept)
        return int(np.searchsorted(positions, p))

    kept_set = set(positions.tolist())
    out.repeats[:] = [before(p) for p in header.repeats if p in kept_set]
    for mb in out.micro_batches:
        begin, end = before(mb.begin), before(mb.end)
        mb.begin, mb.end = begin, end
        mb.tokens = int(tokens[positions[begin:end]].sum()) if len(tokens) else 0
        mb.padded_tokens = mb.padded_len * (end - begin)
    return out, rows[missing].tolist()


def listing_columns(resp: dock_pb2.ListRowsResponse) -> tuple[list, list]:
    """A controller's ListRows answer's cells (one location each) as columns
    of locations, one per column named, and the RowCells of each in order."""
    by_column: dict[str, list] = {}
    for row in resp.rows:
        for cell in row.cells:
            by_column.setdefault(cell.column, []).append(cell)
    columns, held = [], []
    for name, cells in by_column.items():
        where = np.frombuffer(b"".join(c.data for c in cells), dtype=_LOCATION)
        offsets = np.concatenate([[0], np.cumsum(where["bytes"].astype(np.int64))])
        columns.append(WireColumn(name, 0, offsets, memoryview(where.tobytes())))
        held.append(cells)
    return columns, held


def fill_listing(held: list, columns: Sequence[WireColumn]) -> None:
    """Puts each cell's bytes (from the columns read) in its RowCell."""
    for cells, column in zip(held, columns):
        data = bytes(column.data)
        for i, cell in enumerate(cells):
            cell.data = data[int(column.offsets[i]):int(column.offsets[i + 1])]


def check_answer(shard: int, columns: Sequence[WireColumn], read: ReadPlan,
                 answer: Sequence[WireColumn]) -> None:
    """A shard's answer holds every column asked, each of the bytes asked."""
    if len(answer) != len(columns):
        raise errors.Internal(f"shard {shard} answered {len(answer)} columns, "
                              f"{len(columns)} were asked")
    for i, got in enumerate(answer):
        want = int(read.where[i]["bytes"][read.by_shard[shard][i]].sum())
        if len(got.data) != want:
            raise errors.Internal(f"shard {shard} sent {len(got.data)} bytes of column "
                                  f"'{got.name}', {want} were asked")


def unreadable(dock: str, consumer: str, header: Any, error: Exception) -> Exception:
    """The error of a Get whose rows the controller handed out but whose
    cells could not be read: with a lease (given back), Unavailable, so the
    caller may ask again; without one the rows are gone for this consumer,
    DataLoss naming them."""
    rows = list(header.rows)
    if header.lease_id:
        return errors.Unavailable(
            f"dock '{dock}': the cells of step {header.step} rows {rows} for consumer "
            f"'{consumer}' could not be read ({error}); their lease was handed back")
    return errors.DataLoss(
        f"dock '{dock}': step {header.step} rows {rows} were handed to consumer "
        f"'{consumer}' but their cells could not be read ({error})")


def at_shard(shard: ShardInfo, error: Exception) -> Exception:
    """`error` of a call to `shard`, its message naming the shard."""
    if isinstance(error, errors.TdockError):
        return type(error)(f"shard {shard.id} at {shard.address}: {error.message}",
                           error.code, reason=error.reason)
    return error


def no_shards(address: str) -> Exception:
    return errors.Unavailable(
        f"the controller at {address} lists no shards yet: start them "
        f"(tdock-server --role=shard --controller={address})")


def listed(dock: str, shards: Sequence[ShardInfo], read: ReadPlan) -> dict:
    """The listed shards by id; errors.Unavailable if a shard holding cells
    of the batch is not among them."""
    missing = unknown(shards, read.by_shard)
    if missing:
        raise errors.Unavailable(
            f"dock '{dock}': shards {missing} hold cells of this batch but the controller "
            f"does not list them")
    return {s.id: s for s in shards}


def unknown(shards: Iterable[ShardInfo], wanted: Iterable[int]) -> list[int]:
    """The shard ids in `wanted` the listing lacks."""
    known = {s.id for s in shards}
    return sorted(int(s) for s in wanted if int(s) not in known)
