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
"""

from __future__ import annotations

import grpc


class TdockError(Exception):
    """A tdock call failed; ``code`` is its gRPC status code."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

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


_BY_CODE = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded,
                NotFound, AlreadyExists, PermissionDenied, ResourceExhausted,
                FailedPrecondition, Aborted, OutOfRange, Unimplemented,
                Internal, Unavailable, DataLoss, Unauthenticated)
}


def from_rpc_error(error: grpc.RpcError) -> TdockError:
    """The tdock exception for a failed gRPC call, keeping its message."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else None
    cls = _BY_CODE.get(code, Unknown)
    return cls(details or str(error), code)
