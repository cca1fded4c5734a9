"""Exceptions of the tdock client.

Every failed call raises a subclass of :class:`TdockError` named after its gRPC
status code (``tdock.errors.NotFound`` for NOT_FOUND, ...). The exception keeps
the server's message unchanged (``str(e)`` and ``e.message``; a Put refused with
ALREADY_EXISTS may add what acknowledgement was forgotten after it) and the code
(``e.code``, a ``grpc.StatusCode``). Bad arguments caught before a call is sent
raise :class:`InvalidArgument` the same way, with a message naming what was
wrong.

    try:
        dock.get("actor", step=7)
    except tdock.errors.NotFound as e:
        print(e.code, e.message)

A call the dock refused for a reason a caller acts on raises a subclass of its
code's class named after the reason, read from the gRPC status details (never
from the message): :class:`RowDropped`, :class:`StepSealed`, :class:`Expired`,
:class:`Stale`, :class:`StepReleased`, :class:`LeaseEnded` (all
FAILED_PRECONDITION) and :class:`CapacityExceeded` (RESOURCE_EXHAUSTED).
``e.reason`` is the reason's name (``None`` when the dock gave none) and
``e.drop_reason`` the drop reason of a row refused because it was dropped
(``"sealed"``, ``"filtered"``, ...), and ``e.free_groups``, for new rows a step
has no room for (:class:`CapacityExceeded`), the groups still free in it.

    try:
        dock.put(step, rows, columns)
    except (tdock.errors.StepSealed, tdock.errors.RowDropped):
        pass  # the row is gone; its result is not needed
"""

from __future__ import annotations

import grpc


class TdockError(Exception):
    """A tdock call failed; ``code`` is its gRPC status code."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    #: Why the dock refused the call ("sealed", ...), or None.
    reason: str | None = None

    def __init__(self, message: str, code: grpc.StatusCode | None = None,
                 reason: str | None = None, drop_reason: str | None = None,
                 free_groups: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if reason is not None:
            self.reason = reason
        #: For a row refused because it was dropped: why it was dropped.
        self.drop_reason = drop_reason
        #: For new rows a step has no room for: the groups still free in it.
        self.free_groups = free_groups

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class Cancelled(TdockError):
    code = grpc.StatusCode.CANCELLED


class Unknown(TdockError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(TdockError, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(TdockError, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class WaitTimeout(DeadlineExceeded):
    """A Get found nothing to hand out within its wait bound (``Dock.iter``)."""


class NotFound(TdockError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(TdockError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(TdockError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(TdockError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(TdockError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(TdockError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(TdockError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(TdockError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(TdockError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(TdockError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(TdockError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(TdockError):
    code = grpc.StatusCode.UNAUTHENTICATED


class RowDropped(FailedPrecondition):
    """The row was dropped (``drop_reason`` says why); nothing was written."""
    reason = "dropped"


class StepSealed(FailedPrecondition):
    """The step is sealed or being sealed: no new row joins it, and a row
    not written when the seal was decided takes no write."""
    reason = "sealed"


class Expired(FailedPrecondition):
    """A reservation (its rows are dropped as expired) or the lease ran past
    its deadline."""
    reason = "expired"


class Stale(FailedPrecondition):
    """Its policy version is too old for a consumer's ``max_staleness`` (or
    the row was dropped as stale)."""
    reason = "stale"


class StepReleased(FailedPrecondition):
    """The step was released."""
    reason = "released"


class LeaseEnded(FailedPrecondition):
    """The lease is no longer in flight (acknowledged, returned or
    superseded)."""
    reason = "lease_ended"


class CapacityExceeded(ResourceExhausted):
    """A limit was reached: memory, rows of a step, parked calls, docks,
    columns, what one response carries."""
    reason = "capacity"


_BY_CODE = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded,
                NotFound, AlreadyExists, PermissionDenied, ResourceExhausted,
                FailedPrecondition, Aborted, OutOfRange, Unimplemented,
                Internal, Unavailable, DataLoss, Unauthenticated)
}


# RefusalReason's values (dock.proto) by name; the index is the value.
_REFUSALS = (None, RowDropped, StepSealed, Expired, Stale, StepReleased,
             CapacityExceeded, LeaseEnded)
# DropReason's names (dock.proto), the index being the value.
_DROP_REASONS = (None, "filtered", "failed", "stale", "sealed", "expired",
                 "surplus", "other", "unused",
                 "carried", "lost")
_DETAILS_KEY = "grpc-status-details-bin"
_REFUSAL_TYPE = "type.googleapis.com/tdock.v1.Refusal"


def _refusal(error) -> tuple[type | None, str | None, int | None]:
    """The refusal the status details of a failed call carry, if any:
    (its class, the drop reason's name, the free groups)."""
    from tdock.v1 import dock_pb2  # pylint: disable=import-outside-toplevel
    try:
        # An error that never reached the server has no trailers.
        trailers = error.trailing_metadata() or ()
        raw = next((value for key, value in trailers if key == _DETAILS_KEY), None)
        if not isinstance(raw, bytes):
            return None, None, None
        status = dock_pb2.RpcStatus.FromString(raw)
        for detail in status.details:
            if detail.type_url != _REFUSAL_TYPE:
                continue
            refusal = dock_pb2.Refusal.FromString(detail.value)
            if 0 < refusal.reason < len(_REFUSALS):
                drop = (_DROP_REASONS[refusal.drop_reason]
                        if 0 < refusal.drop_reason < len(_DROP_REASONS) else None)
                free = refusal.free_groups if refusal.HasField("free_groups") else None
                return _REFUSALS[refusal.reason], drop, free
    except Exception:  # pylint: disable=broad-except
        pass  # details that do not read as a refusal leave the error as it is
    return None, None, None


def from_rpc_error(error: grpc.RpcError) -> TdockError:
    """The tdock exception for a failed gRPC call, keeping its message: the
    class of the dock's refusal when the status details carry one."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else None
    message = details or str(error)
    return _with_refusal(code, message, *_refusal(error))


def from_status(code: int, message: str, refusal: int = 0, drop: int = 0,
                free_groups: int = -1) -> TdockError:
    """The tdock exception for a status of the C++ client (tdock._native):
    its code's value, its message, and the refusal it carries (RefusalReason
    and DropReason values, 0 when none; free_groups -1 when it has none), as
    from_rpc_error makes it for the same status from grpcio."""
    status_code = next((c for c in grpc.StatusCode if c.value[0] == code),
                       grpc.StatusCode.UNKNOWN)
    refused = _REFUSALS[refusal] if 0 < refusal < len(_REFUSALS) else None
    drop_name = _DROP_REASONS[drop] if 0 < drop < len(_DROP_REASONS) else None
    return _with_refusal(status_code, message, refused, drop_name,
                         free_groups if refused is not None and free_groups >= 0 else None)


def _with_refusal(code: grpc.StatusCode, message: str, refused: type | None,
                  drop: str | None, free: int | None) -> TdockError:
    cls = _BY_CODE.get(code, Unknown)
    if refused is None:
        return cls(message, code)
    if issubclass(refused, cls):
        return refused(message, code, drop_reason=drop, free_groups=free)
    # A reason with another code than its class's: the code's class says so.
    return cls(message, code, reason=refused.reason, drop_reason=drop, free_groups=free)
