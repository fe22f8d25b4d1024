"""Errors of the server, each with the HTTP status and gRPC status code both front ends answer.

:func:`status_of` maps any exception to ``(http_status, grpc_code, message)``: the server's own
errors carry theirs; the package's input errors (:class:`bnc_deploy.errors.InputError`, whose
messages name the feature, value and row) are 400 / ``INVALID_ARGUMENT``; anything else is a bug,
answered 500 / ``INTERNAL`` with a generic message (the traceback goes to the log, not the client).
"""

from __future__ import annotations

from bnc_deploy.errors import BncDeployError, InputError


class ServeError(BncDeployError):
    """Base of the server's errors: ``status`` (HTTP) and ``grpc_code`` (a ``grpc.StatusCode`` name)."""

    status: int = 500
    grpc_code: str = "INTERNAL"


class BadRequest(ServeError):
    """Malformed request: JSON, binary header, tensor shape/datatype, unknown output/parameter."""

    status, grpc_code = 400, "INVALID_ARGUMENT"


class ModelNotFound(ServeError):
    """No such model (or version) in the repository."""

    status, grpc_code = 404, "NOT_FOUND"


class ModelNotReady(ServeError):
    """The model exists but has no checked version serving (loading, failed, or unloaded)."""

    status, grpc_code = 503, "UNAVAILABLE"


class Unauthenticated(ServeError):
    """Missing or wrong bearer token."""

    status, grpc_code = 401, "UNAUTHENTICATED"


class PayloadTooLarge(ServeError):
    """The request body exceeds ``--max-request-bytes``."""

    status, grpc_code = 413, "RESOURCE_EXHAUSTED"


class Unavailable(ServeError):
    """The server is shutting down."""

    status, grpc_code = 503, "UNAVAILABLE"


def status_of(exc: BaseException) -> tuple[int, str, str]:
    """``(http_status, grpc_code, message)`` of ``exc`` (see the module docstring)."""
    if isinstance(exc, ServeError):
        return exc.status, exc.grpc_code, str(exc)
    if isinstance(exc, InputError):
        return 400, "INVALID_ARGUMENT", str(exc)
    if isinstance(exc, BncDeployError):  # e.g. a MetadataError of a model that failed to load
        return 400, "INVALID_ARGUMENT", str(exc)
    return 500, "INTERNAL", f"internal error ({type(exc).__name__}); see the server log"


__all__ = [
    "BadRequest",
    "ModelNotFound",
    "ModelNotReady",
    "PayloadTooLarge",
    "ServeError",
    "Unauthenticated",
    "Unavailable",
    "status_of",
]
