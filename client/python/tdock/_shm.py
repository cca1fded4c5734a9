"""Same-host shared memory with a controller's shards (docs/scale-out.md).

A shard started with --shm_dir keeps its cells in chunk files there
(`<prefix>.<chunk>`, ShardInfo.shm_prefix) and holds `<prefix>.lock` while it
runs. A client that can open that lock file shares the shard's memory:

- a Put is prepared at the shard (Shard.Prepare: the Put without its bytes),
  which answers with the regions its columns' bytes go to; the client copies
  each column there (one memcpy from the caller's arrays) and sends the Put
  with `prepared_extent`: no payload byte crosses the socket;
- a read (Shard.ReadCells with the client's session, Shard.Attach) answers
  where each cell is; a column whose cells lie back to back in one chunk (the
  rows of one Put) becomes a read-only view of the mapped chunk, others are
  copied out. The shard keeps the cells' memory while a view is alive (the
  answer's pin); once the last is gone the pin goes back (Shard.Unpin)
  within GIVE_BACK_EVERY seconds, from a thread of tdock.Client or a task of
  tdock.aio.Client (which runs only while its event loop does), or sooner:
  with the client's next read or Put of that shard, or its give_back_pins().

Which transport a client uses is its `transport` option (else TDOCK_TRANSPORT,
else "auto"): "grpc" never maps anything; "shm" requires every shard to share
this host's memory and fails otherwise, before any row is claimed; "auto"
uses shared memory with each shard that offers it and shares this host's, and
gRPC with the others. Nothing changes transport in the middle of a job.
"""

from __future__ import annotations

import collections
import logging
import mmap
import os
import threading
import time
import weakref
from typing import Any, Sequence

import numpy as np

from tdock import errors
from tdock.wire import PutColumn, WireColumn

TRANSPORTS = ("auto", "grpc", "shm")
_CELL = np.dtype([("chunk", "<u8"), ("offset", "<u8")])
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_PURGE_EVERY = 1.0  # seconds between looks for chunk files the shard freed
# Seconds between a client's looks for pins to give back (those of views
# gone), so that a shard it reads no more gets its memory back.
GIVE_BACK_EVERY = 0.05
_log = logging.getLogger("tdock")


def transport_option(value: str | None) -> str:
    """The transport asked for: `value`, else TDOCK_TRANSPORT, else auto."""
    chosen = value if value is not None else os.environ.get("TDOCK_TRANSPORT", "auto")
    if chosen not in TRANSPORTS:
        source = "transport" if value is not None else "TDOCK_TRANSPORT"
        raise errors.InvalidArgument(
            f"{source} is '{chosen}'; it is one of {', '.join(TRANSPORTS)}")
    return chosen


def unusable(shard: Any) -> str | None:
    """Why this process cannot share `shard`'s memory (None: it can)."""
    if not shard.shm_prefix:
        return "offers no shared memory (start it with --shm_dir)"
    try:
        os.close(os.open(shard.shm_prefix + ".lock", os.O_RDONLY | os.O_CLOEXEC))
    except OSError as e:
        return (f"does not share this host's memory ({shard.shm_prefix}.lock: "
                f"{e.strerror})")
    return None


class _Chunks:
    """One shard's chunk files, mapped when first named."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._dir, name = os.path.split(prefix)
        self._name = name + "."  # a chunk file's name: this and its number
        self._maps: dict[int, memoryview] = {}
        self._lock = threading.Lock()
        self._purged = time.monotonic()

    def map(self, chunk: int) -> memoryview:
        with self._lock:
            view = self._maps.get(chunk)
        if view is not None:
            return view
        path = f"{self.prefix}.{chunk}"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise errors.Unavailable(
                f"shared memory {path} cannot be opened ({e.strerror}): the shard freed it "
                f"or restarted") from None
        try:
            # Its page table filled at once: writing and reading it then
            # takes no page fault a page.
            view = memoryview(mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | _POPULATE))
        finally:
            os.close(fd)
        with self._lock:
            self._maps[chunk] = view
        return view

    def purge(self) -> None:
        """Drops the mappings of chunks the shard has freed (their files are
        gone; a chunk's number is never given again), at most every second:
        their memory goes once no view holds it."""
        now = time.monotonic()
        if now - self._purged < _PURGE_EVERY:
            return
        self._purged = now
        with self._lock:
            chunks = list(self._maps)
        if not chunks:
            return
        # One listing of the directory, not a stat of every chunk mapped.
        try:
            names = os.listdir(self._dir or ".")
        except OSError:
            return  # looked at again in a second
        start = len(self._name)
        there = {n[start:] for n in names if n.startswith(self._name)}
        gone = [c for c in chunks if str(c) not in there]
        with self._lock:
            for chunk in gone:
                self._maps.pop(chunk, None)


class _Pin:
    """A ReadCells answer's pin: given back once no view of its cells is
    alive."""

    def __init__(self, queue: collections.deque, pin: int):
        self._queue = queue
        self._pin = pin
        self._held = 1  # until done()
        # Reentrant: a finalizer may run on this thread while it holds it.
        self._lock = threading.RLock()

    def hold(self, view: np.ndarray) -> None:
        with self._lock:
            self._held += 1
        weakref.finalize(view, self._drop)

    def _drop(self) -> None:
        # Also a finalizer: it may run on any thread; a deque's append needs
        # no lock.
        with self._lock:
            self._held -= 1
            last = self._held == 0
        if last:
            self._queue.append(self._pin)

    def done(self) -> None:
        """Every view is made: with none alive, the pin goes back now."""
        self._drop()


class Shm:
    """A Client's shared memory with its shards: the transport asked for,
    each shard's mapped chunks, and the pins to give back."""

    def __init__(self, transport: str | None):
        self.transport = transport_option(transport)
        self._chunks: dict[str, _Chunks] = {}
        self._unpin: dict[str, collections.deque] = {}
        # Per (shard id, shm prefix): why its memory is not shared with this
        # process (None: it is), looked at once (a restarted shard has
        # another prefix); and those whose transport was logged.
        self._seen: dict = {}
        self._said: set = set()
        self._lock = threading.Lock()

    def check(self, address: str, shards: Sequence[Any]) -> None:
        """errors.FailedPrecondition when the transport is shm and a shard
        (or a standalone server) does not share this host's memory."""
        if self.transport != "shm":
            return
        if not shards:
            raise errors.FailedPrecondition(
                f"transport 'shm': {address} is a standalone server; shared memory is a "
                f"shard's (tdock-server --role=shard --shm_dir=/dev/shm)")
        for shard in shards:
            why = self._unusable(shard)
            if why is not None:
                raise errors.FailedPrecondition(
                    f"transport 'shm': shard {shard.id} at {shard.address} (node "
                    f"{shard.node}) {why}; use transport 'auto' or 'grpc' for shards on "
                    f"other hosts")

    def uses(self, shard: Any) -> bool:
        """Whether data with `shard` goes through shared memory (said once a
        shard in the log)."""
        use = self.transport != "grpc" and self._unusable(shard) is None
        if self.transport == "shm" and not use:
            self.check("", [shard])  # raises, naming why
        key = (shard.id, shard.shm_prefix)
        if key not in self._said:
            self._said.add(key)
            _log.info("tdock: shard %d at %s: transport %s (asked: %s)", shard.id,
                      shard.address, "shm" if use else "grpc", self.transport)
        return use

    def _unusable(self, shard: Any) -> str | None:
        key = (shard.id, shard.shm_prefix)
        if key not in self._seen:
            self._seen[key] = unusable(shard)
        return self._seen[key]

    def chunks(self, shard: Any) -> _Chunks:
        with self._lock:
            chunks = self._chunks.get(shard.shm_prefix)
            if chunks is None:
                chunks = self._chunks[shard.shm_prefix] = _Chunks(shard.shm_prefix)
        chunks.purge()
        return chunks

    def unpin_queue(self, address: str, session: int) -> collections.deque:
        """The pins of `session` with the shard at `address` to give back."""
        with self._lock:
            return self._unpin.setdefault((address, session), collections.deque())

    def to_unpin(self, address: str, session: int) -> list[int]:
        """The pins of `session` with the shard at `address` to give back now
        (taken from its queue, which others may take from at once)."""
        queue = self.unpin_queue(address, session)
        out = []
        while True:
            try:
                out.append(queue.popleft())
            except IndexError:
                return out

    def forget(self, address: str, session: int) -> None:
        """`session` ended: its pins went with it."""
        with self._lock:
            self._unpin.pop((address, session), None)

    def write(self, shard: Any, prepared: Any, columns: Sequence[PutColumn]) -> None:
        """Copies each column's bytes into the regions the shard prepared
        (a PrepareResponse)."""
        if prepared.shm_prefix != shard.shm_prefix:
            raise errors.Unavailable(
                f"its shared memory is {prepared.shm_prefix}, not {shard.shm_prefix} as this "
                f"client listed it: it restarted (listed again by the next call)")
        chunks = self.chunks(shard)
        if len(prepared.columns) != len(columns):
            raise errors.Internal(f"shard {shard.id} prepared {len(prepared.columns)} "
                                  f"columns, the Put has {len(columns)}")
        for column, regions in zip(columns, prepared.columns):
            room = sum(r.bytes for r in regions.regions)
            if room != column.nbytes:
                raise errors.Internal(
                    f"shard {shard.id} prepared {room} bytes for column '{column.name}', "
                    f"it has {column.nbytes}")
            targets = iter(regions.regions)
            dest, left = None, 0
            for piece in column.pieces:
                src = memoryview(piece).cast("B")
                pos = 0
                while pos < len(src):
                    if left == 0:
                        region = next(targets)
                        mapped = chunks.map(region.chunk)
                        dest, left = mapped[region.offset:region.offset + region.bytes], \
                            region.bytes
                    n = min(left, len(src) - pos)
                    start = len(dest) - left
                    dest[start:start + n] = src[pos:pos + n]
                    pos += n
                    left -= n

    def cells(self, shard: Any, answer: Sequence[WireColumn], sizes: Sequence[np.ndarray],
              session: int, pin: int) -> list[WireColumn]:
        """A ReadCells answer over shared memory (in `session`, its pin
        `pin`) as columns holding their cells: `answer`'s columns carry
        (chunk, offset) a row, `sizes` the rows' lengths in bytes per
        column."""
        chunks = self.chunks(shard)
        held = _Pin(self.unpin_queue(shard.address, session), pin)
        out = []
        try:
            for column, nbytes in zip(answer, sizes):
                nbytes = np.asarray(nbytes, dtype=np.int64)
                where = np.frombuffer(column.data, dtype=_CELL, count=len(nbytes))
                out.append(WireColumn(column.name, column.dtype, column.offsets,
                                      _column_data(chunks, where, nbytes, held)))
        finally:
            held.done()
        return out


def session_lost(error: Exception) -> bool:
    """Whether a read's `error` means its session with the shard is gone
    (the shard unreachable or restarted, or it knows the session no more):
    any other error leaves the session, and the pins of the views alive, as
    they are."""
    return isinstance(error, errors.Unavailable) or (
        isinstance(error, errors.FailedPrecondition) and "has no session" in error.message)


def _column_data(chunks: _Chunks, where: np.ndarray, nbytes: np.ndarray,
                 pin: _Pin) -> memoryview:
    """A column's bytes: a view of the chunk when its cells lie back to back
    in one (held by `pin`), else a copy."""
    total = int(nbytes.sum())
    if total == 0:
        return memoryview(b"")
    full = nbytes > 0
    chunk, offset, size = where["chunk"][full], where["offset"][full], nbytes[full]
    if (chunk == chunk[0]).all() and (offset[1:] == offset[:-1] + size[:-1]).all():
        base = np.frombuffer(chunks.map(int(chunk[0])), dtype=np.uint8, count=total,
                             offset=int(offset[0]))
        base.flags.writeable = False
        pin.hold(base)
        return memoryview(base)
    copied = bytearray(total)
    pos = 0
    for c, o, n in zip(chunk.tolist(), offset.tolist(), size.tolist()):
        copied[pos:pos + n] = chunks.map(c)[o:o + n]
        pos += n
    return memoryview(copied).toreadonly()
