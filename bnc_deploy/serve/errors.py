"""Errors of the server, each with the HTTP status and gRPC status code both front ends answer.

:func:`status_of` maps any exception to ``(http_status, grpc_code, message)``: the server's own
errors carry theirs; the package's input errors (:class:`bnc_deploy.errors.InputError`, whose
messages name the feature, value and row) are 400 / ``INVALID_ARGUMENT``; anything else is a bug,
answered 500 / ``INTERNAL`` with a generic message (the traceback goes to the log, not the client).
Every message is capped at :data:`MAX_ERROR_CHARS` characters (:func:`cap_message`): an error
about a huge request (200,000 input names, say) stays a short answer.
"""

from __future__ import annotations

from bnc_deploy.errors import BncDeployError, InputError

#: The longest error message a client is sent; longer ones are cut with a note of what was left out.
MAX_ERROR_CHARS = 4096


def cap_message(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text``, cut to at most ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    note = f" ... ({len(text) - limit} more characters)"
    return text[: max(0, limit - len(note))] + note


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


class RequestTimeout(ServeError):
    """The request's body did not arrive within ``--body-timeout``."""

    status, grpc_code = 408, "DEADLINE_EXCEEDED"


class Unavailable(ServeError):
    """The server is shutting down."""

    status, grpc_code = 503, "UNAVAILABLE"


def status_of(exc: BaseException) -> tuple[int, str, str]:
    """``(http_status, grpc_code, message)`` of ``exc`` (see the module docstring)."""
    if isinstance(exc, ServeError):
        return exc.status, exc.grpc_code, cap_message(str(exc))
    if isinstance(exc, (InputError, BncDeployError)):  # BncDeployError: e.g. a MetadataError of a failed load
        return 400, "INVALID_ARGUMENT", cap_message(str(exc))
    return 500, "INTERNAL", f"internal error ({type(exc).__name__}); see the server log"


__all__ = [
    "BadRequest",
    "ModelNotFound",
    "ModelNotReady",
    "MAX_ERROR_CHARS",
    "PayloadTooLarge",
    "RequestTimeout",
    "ServeError",
    "Unauthenticated",
    "Unavailable",
    "cap_message",
    "status_of",
]
