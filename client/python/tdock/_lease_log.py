"""The leases a Dock handed out, kept to catch a forgotten acknowledgement
where it is made: the Put of a leased batch's results without ack=.

Such a Put leaves the lease in flight; it expires, its rows are handed out
again with their cells written, and the Put of them fails with AlreadyExists
one lease later, far from the mistake. A Dock (tdock.Dock and tdock.aio.Dock
alike) records each lease its Gets hand out in a _LeaseLog, and the rows its
Puts write of them, and refuses the Put without ack= that writes the last
unwritten rows of a lease it has not seen end.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from tdock import batch as batch_mod
from tdock import errors

# A Dock remembers this many leases it handed out and has not seen end.
_LEASE_LOG_SIZE = 1024


@dataclass(frozen=True)
class _Held:
    """What a lease a Dock handed out covers."""
    consumer: str
    step: int
    rows: np.ndarray
    keys: tuple | None  # the rows' keys, in the order of `rows`, when each has one
    # Its rows were handed out again to the same consumer: it expired or
    # was nacked (kept to name it when its results turn up written).
    ended: bool = False
    # Which of `rows` this Dock's Puts wrote while the lease was open.
    written: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    def named(self, rows: np.ndarray, keys: list[str]) -> np.ndarray:
        """Which of its rows a Put names: by index (`rows`), or, writing by
        key, by key (a mask over `self.rows`)."""
        if len(rows):
            return np.isin(self.rows, rows)
        if self.keys is None or not keys:
            return np.zeros(len(self.rows), dtype=bool)
        named = frozenset(keys)
        return np.array([k in named for k in self.keys], dtype=bool)


class _LeaseLog:
    """The leases a Dock's Gets handed out that it has not seen end (Ack,
    Nack, a Put's ack=), the latest _LEASE_LOG_SIZE of them, with the rows
    its Puts wrote of each: a Put without ack= that writes every row of one
    of them, or the last rows earlier Puts left unwritten, is refused (its
    results, the ack forgotten), and when a Put finds its cells written, the
    lease whose results were put without ack= can be named. Shared by the
    threads that share the Dock (a lock); two threads writing the parts of
    one lease at the same moment may both pass the check."""

    def __init__(self):
        self._lock = threading.Lock()
        self._open: dict[int, _Held] = {}  # by lease id, oldest first

    def handed_out(self, b: batch_mod.Batch) -> None:
        if b.lease is None:
            return
        keys = tuple(b.keys) if b.keys is not None and all(b.keys) else None
        rows = np.array(b.rows, dtype=np.int64)
        with self._lock:
            for lease, held in self._open.items():
                if (held.consumer, held.step) == (b.consumer, b.step) and np.isin(
                        rows, held.rows).any():
                    self._open[lease] = dataclasses.replace(held, ended=True)
            self._open[b.lease] = _Held(b.consumer, b.step, rows, keys)
            if len(self._open) > _LEASE_LOG_SIZE:
                del self._open[next(iter(self._open))]

    def ended(self, batches: list[batch_mod.Batch]) -> None:
        with self._lock:
            for b in batches:
                self._open.pop(b.lease, None)

    def wrote(self, step: int, rows: np.ndarray, keys: list[str]) -> None:
        """A Put of `step` that named `rows` (or `keys`) went in: the rows of
        open leases it wrote count as written."""
        if not self._open:
            return
        with self._lock:
            for lease, held in self._open.items():
                if held.step != step or held.ended:
                    continue
                named = held.named(rows, keys)
                if named.any():
                    self._open[lease] = dataclasses.replace(
                        held, written=np.union1d(held.written, held.rows[named]))

    def holder(self, step: int, rows: Any, other_than: int | None
               ) -> tuple[int, str] | None:
        """(lease, consumer) of the oldest open lease but `other_than` that
        handed out any of `rows` of `step`; None if there is none."""
        rows = np.asarray(rows, dtype=np.int64)
        with self._lock:
            for lease, held in self._open.items():
                if lease != other_than and held.step == step and np.isin(rows, held.rows).any():
                    return lease, held.consumer
        return None

    def completed(self, step: int, rows: np.ndarray, keys: list[str]
                  ) -> list[tuple[int, _Held]]:
        """The open leases of `step` whose rows a Put naming `rows` (or
        `keys`) would leave all written: it names some of them, and this
        Dock's earlier Puts wrote the rest (none, for a Put of every row)."""
        if not self._open:
            return []
        with self._lock:
            out = []
            for lease, held in self._open.items():
                if held.step != step or held.ended or not len(held.rows):
                    continue
                named = held.named(rows, keys)
                if named.any() and (named | np.isin(held.rows, held.written)).all():
                    out.append((lease, held))
            return out

    def refuse_forgotten_ack(self, step: int, rows: np.ndarray, keys: list[str]) -> None:
        """Raises FailedPrecondition for a Put without ack= that would leave
        every row of a lease this Dock handed out, and has not seen end,
        written: its results, the acknowledgement forgotten (the lease
        would expire and hand the rows out again with their cells written).
        Nothing is sent."""
        completed = self.completed(step, rows, keys)
        if not completed:
            return
        named, last = [], False
        for lease, held in completed:
            before = held.rows[np.isin(held.rows, held.written) & ~held.named(rows, keys)]
            earlier = (f"; earlier Puts without its ack= wrote rows {row_list(before)}"
                       if len(before) else "")
            last = last or bool(len(before))
            named.append(f"lease {lease} of consumer '{held.consumer}' "
                         f"(rows {row_list(held.rows)}{earlier})")
        what = "the last unwritten rows" if last else "every row"
        raise errors.FailedPrecondition(
            f"put: step {step}: this Put writes {what} of {'; '.join(named)}, handed out "
            "by this Dock and not acknowledged, and has no ack=: the lease would expire "
            "and its rows be handed out again with their cells written. Pass ack=batch to "
            "complete the lease with this write, or ack=False to write without "
            "acknowledging and call dock.ack(batch) (or dock.nack) yourself; nothing "
            "was written")


def row_list(rows: np.ndarray, shown: int = 8) -> str:
    """Row indices for a message: all of them, or the first `shown` and a count."""
    listed = ", ".join(str(r) for r in rows[:shown].tolist())
    return listed if len(rows) <= shown else f"{listed}, ... ({len(rows)} rows)"
