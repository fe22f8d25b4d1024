"""What one client may cost the server: sizes, rows, times and connections, with safe defaults.

:class:`ServeLimits` is the one place these numbers live. ``bnc-serve`` sets them from its flags,
:func:`bnc_deploy.serve.app.app_from_env` from ``BNC_SERVE_*`` variables (:meth:`ServeLimits.from_env`),
and both front ends read them:

* REST (uvicorn, :mod:`bnc_deploy.serve.connections`): a new connection must deliver a request's
  headers within ``header_timeout`` (also counted from the end of the previous response on a
  kept-alive connection: a header sent a byte at a time is cut off); a request's body must arrive
  within ``body_timeout`` of its headers (408 otherwise); an idle kept-alive connection is closed
  after ``keep_alive_timeout``; at most ``max_connections`` are open: one more closes the
  connection that has waited longest without a request in progress, or is answered 503 when every
  connection has one.
* gRPC (:func:`bnc_deploy.serve.grpc_server.grpc_options`): at most ``max_connections``
  connections (refused before the handshake), the HTTP/2 handshake within ``header_timeout``,
  connections idle for ``grpc_max_connection_idle`` or older than ``grpc_max_connection_age`` are
  closed with GOAWAY (clients reconnect), keepalive pings every ``grpc_keepalive_time`` detect
  dead peers.
* Both: a request body or message over ``max_request_bytes`` is refused (413 /
  RESOURCE_EXHAUSTED); a request of more than ``max_rows`` rows is refused (413 /
  RESOURCE_EXHAUSTED) before its rows are decoded; at most :data:`MAX_TENSORS` inputs or
  requested outputs (every model takes one input and has two outputs), checked before any
  tensor is decoded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sized
from dataclasses import dataclass, fields
from typing import Any

from bnc_deploy.errors import ConfigError
from bnc_deploy.serve.errors import PayloadTooLarge

#: Inputs, or requested outputs, one request may name (a model has one input and two outputs).
MAX_TENSORS = 16


@dataclass(frozen=True)
class ServeLimits:
    """The server's limits (see the module docstring); seconds for times, 0 nowhere means "off"."""

    #: Largest request body (REST) or message (gRPC), bytes: about 500k rows of 16 int64 features.
    max_request_bytes: int = 64 * 2**20
    #: Rows in one request (the input's first dimension).
    max_rows: int = 2**20
    #: Open connections per front end (and process).
    max_connections: int = 2048
    #: From a connection's start (or its previous response) to a request's complete headers.
    header_timeout: float = 10.0
    #: From a request's headers to the end of its body.
    body_timeout: float = 60.0
    #: An idle kept-alive HTTP connection is closed after this.
    keep_alive_timeout: float = 5.0
    #: gRPC: server keepalive ping interval on idle connections, and how long to wait for its answer.
    grpc_keepalive_time: float = 60.0
    grpc_keepalive_timeout: float = 20.0
    #: gRPC: close connections without calls for this long, and connections older than this.
    grpc_max_connection_idle: float = 300.0
    grpc_max_connection_age: float = 3600.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"--{f.name.replace('_', '-')} must be a number > 0, got {value!r}")
            if f.type == "int" and int(value) != value:
                raise ConfigError(f"--{f.name.replace('_', '-')} must be a whole number, got {value!r}")

    def to_env(self) -> dict[str, str]:
        """``BNC_SERVE_<FIELD>`` variables that :meth:`from_env` reads back (``--workers``)."""
        return {f"BNC_SERVE_{f.name.upper()}": str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServeLimits:
        """The limits named by ``BNC_SERVE_<FIELD>`` variables; the defaults for the others."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = f"BNC_SERVE_{f.name.upper()}"
            if env.get(key):
                try:
                    values[f.name] = (int if f.type == "int" else float)(env[key])
                except ValueError:
                    raise ConfigError(f"{key}={env[key]!r} is not a number") from None
        return cls(**values)


def check_rows(shape: object, max_rows: int, where: str) -> None:
    """PayloadTooLarge when a declared ``shape``'s first dimension exceeds ``max_rows``."""
    if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], int) and shape[0] > max_rows:
        raise PayloadTooLarge(
            f"{where}: {shape[0]} rows; a request may have at most {max_rows} (--max-rows): send fewer rows per request"
        )


def check_count(items: Sized, what: str) -> None:
    """PayloadTooLarge for a request naming more than :data:`MAX_TENSORS` inputs or outputs."""
    if len(items) > MAX_TENSORS:
        raise PayloadTooLarge(f"the request names {len(items)} {what}; at most {MAX_TENSORS} are accepted")


__all__ = ["MAX_TENSORS", "ServeLimits", "check_count", "check_rows"]
