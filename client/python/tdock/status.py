"""What a tdock client's status calls return (tdock.Dock.status and
tdock.Client.list_docks, and their tdock.aio twins)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from tdock.v1 import dock_pb2

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
    sealed: bool = False
    # rows dropped, per reason ("filtered", "failed", ...; those with any)
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LeaseStatus:
    """A consumer's leases: in flight now, and since the dock was created."""
    in_flight: int
    rows_in_flight: int
    expiries: int
    nacks: int
    rows_returned: int  # rows handed back by expiries and nacks


@dataclass(frozen=True)
class Reservation:
    """Rows granted before generating (Dock.reserve): write them with
    `dock.put(r.step, r.rows, columns, reservation=r)` (or by row) before
    `deadline`; rows without a cell then are dropped ("expired")."""
    id: int
    step: int
    rows: list[int]
    version: int      # the policy version the rows are generated with
    deadline: float   # seconds since the epoch
    timed_out: bool = False  # not admitted within the wait: nothing reserved


@dataclass(frozen=True)
class StalenessStatus:
    """How stale the rows handed to a consumer were, since the dock was created."""
    versioned_rows: int  # rows handed out that had a version
    staleness_sum: int   # their staleness (dock version - row version, when claimed), summed
    # max staleness -> rows in that bucket (above the previous bound); -1: above every bound
    buckets: dict[int, int]
    stale_rows: int      # rows its max_staleness passed over or dropped

    @property
    def mean(self) -> float:
        return self.staleness_sum / self.versioned_rows if self.versioned_rows else 0.0


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
    # rows dropped since the dock was created, per reason (those with any)
    dropped: dict[str, int] = field(default_factory=dict)
    version: int = 0  # the dock's current policy version (Dock.set_version)
    staleness: dict[str, StalenessStatus] = field(default_factory=dict)  # per consumer
    reservations_live: int = 0    # granted, not past their deadline
    reservations_parked: int = 0  # waiting for admission
    admission_waits: int = 0      # since creation: granted after waiting ...
    admission_wait_seconds: float = 0.0  # ... and how long in all


@dataclass(frozen=True)
class Lease:
    """A lease in flight (Dock.leases): what a worker holds and has not
    acknowledged."""
    lease_id: int
    step: int
    rank: int
    round: int | None     # BALANCED: the round of the rank's share
    rows: int
    expires_in: float | None  # seconds until it expires (0: due now; None: its
                              # hand-out is being recorded, not running yet)


@dataclass(frozen=True)
class NackAll:
    """What Dock.nack_all handed back."""
    leases: int
    rows: int


@dataclass(frozen=True)
class RowState:
    """One row of a live step (Dock.list_rows), without payload."""
    row: int
    key: str | None        # None: the row has no key
    group: int
    written: list[str]     # columns with a cell
    taken: list[str]       # consumers that have taken it
    dropped: str | None    # the drop reason ("failed", ...), None if not dropped
    version: int | None = None  # the policy version it was generated with; None: none
    # The row's written cells of the columns list_rows named (cells=...),
    # decoded as Batch.cell decodes them: per-row tags, scores, uids.
    cells: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PutAck:
    rows: int
    bytes: int
    assigned: list[int] = field(default_factory=list)  # rows the server assigned
    # The answer of an earlier Put with the same put_id: nothing was written.
    replayed: bool = False


def drop_counts(counts: Iterable[dock_pb2.DropCount]) -> dict[str, int]:
    """{reason: rows} of the wire's DropCounts ("filtered", "failed", ...)."""
    return {dock_pb2.DropReason.Name(c.reason).lower(): c.rows for c in counts}
