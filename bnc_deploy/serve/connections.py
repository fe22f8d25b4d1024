"""Connection limits for the REST front end: header and body timeouts and a connection cap in uvicorn.

uvicorn closes a kept-alive connection that stays idle (``timeout_keep_alive``), but a new
connection that never sends a request, a request whose headers or body trickle in a byte at a
time, and a flood of sockets are held as long as the client likes. :class:`GuardedHttpToolsProtocol`
is uvicorn's httptools protocol with what a server facing a network needs
(:class:`~bnc_deploy.serve.limits.ServeLimits`):

* **header timeout**: from the connection's start, or the end of its previous response, a
  request's headers must be complete within ``header_timeout`` seconds; else the connection is
  closed (408 when part of a request had arrived).
* **body timeout**: from a request's headers to the end of its body, ``body_timeout`` seconds;
  else 408 and the connection is closed (the app sees a disconnect).
* **connection cap**: at most ``max_connections`` open connections. One more closes the
  connection that has waited longest *without a request in progress* (a fresh or kept-alive
  socket that has sent no complete headers), so idle or slow sockets cannot keep a working
  client out; when every connection has a request in progress, the new one is answered 503 and
  closed. The file descriptors of closed connections are released at once.

uvicorn's own ``limit_concurrency`` answers 503 only once a request has arrived, and keeps the
socket: it does not bound descriptors. Each closed connection is counted in
``bnc_serve_connections_closed_total{reason}`` (:mod:`bnc_deploy.serve.metrics`).

:func:`uvicorn_config` builds the ``uvicorn.Config`` for ``bnc-serve`` with this protocol (the
limits travel on the config, so ``--workers`` processes get them too).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from bnc_deploy.serve import metrics
from bnc_deploy.serve.limits import ServeLimits

log = logging.getLogger("bnc_deploy.serve")

_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
_BUSY_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)


#: The attribute of a ``uvicorn.Config`` that carries the :class:`ServeLimits`.
LIMITS_ATTRIBUTE = "bnc_limits"


def _response(template: bytes, message: str) -> bytes:
    body = b'{"error":"' + message.encode() + b'"}'
    return template % (len(body), body)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header/body timeouts and a connection cap (module docstring)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # Our state rides on uvicorn's objects (attributes of our own, hence getattr/setattr).
        limits = getattr(config, LIMITS_ATTRIBUTE, None)
        if limits is None:  # a config uvicorn built itself (--workers): the limits come in BNC_SERVE_* variables
            limits = ServeLimits.from_env()
            setattr(config, LIMITS_ATTRIBUTE, limits)
        self.limits: ServeLimits = limits
        # Connections with no request in progress, oldest first: the ones a new connection may evict.
        waiting = getattr(server_state, "bnc_waiting", None)
        if waiting is None:
            waiting = OrderedDict()
            setattr(server_state, "bnc_waiting", waiting)  # noqa: B010 - an attribute uvicorn does not declare
        self._waiting: OrderedDict[GuardedHttpToolsProtocol, None] = waiting
        self._deadline: asyncio.TimerHandle | None = None  # of the header or body timeout
        self._partial = False  # bytes of a request have arrived since the last response

    # -- state changes -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._evict_one():
            metrics.connection_closed("busy")
            transport.write(_response(_BUSY_503, "too many connections; try again"))
            self._close()
            return
        self._wait_for_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._waiting.pop(self, None)
        self._cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._partial = True
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._waiting.pop(self, None)  # a request in progress: not evictable
        self._cancel()
        self._deadline = self.loop.call_later(self.limits.body_timeout, self._timed_out, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._cancel()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms uvicorn's keep-alive timeout
        if not self.transport.is_closing() and not self.pipeline:
            self._partial = False
            self._wait_for_request()

    # -- helpers -----------------------------------------------------------------------------------
    def _wait_for_request(self) -> None:
        self._waiting[self] = None
        self._cancel()
        self._deadline = self.loop.call_later(self.limits.header_timeout, self._timed_out, "header")

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self, which: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        metrics.connection_closed(f"{which}_timeout")
        started = self.cycle is not None and self.cycle.response_started and not self.cycle.response_complete
        if (which == "body" or self._partial) and not started:
            limit = self.limits.body_timeout if which == "body" else self.limits.header_timeout
            self.transport.write(_response(_TIMEOUT_408, f"the request's {which} did not arrive within {limit:g} s"))
        self._close()

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest without a request in progress (not this one)."""
        for victim in self._waiting:
            if victim is not self:
                self._waiting.pop(victim)
                metrics.connection_closed("evicted")
                victim._close()
                return True
        return False

    def shutdown(self) -> None:
        """The server's graceful shutdown: an idle connection (no request in flight) is aborted.
        uvicorn closes it, and over TLS a close waits for the client's close_notify, which an idle
        keep-alive client never sends: the server would sit out its graceful timeout. Nothing is
        lost by aborting: no response is pending. A connection mid-request finishes it first."""
        if self.cycle is None or self.cycle.response_complete:
            self._close()
        else:
            super().shutdown()

    def _close(self) -> None:
        self._waiting.pop(self, None)
        self._cancel()
        # abort(): the descriptor is released now, not after a graceful close the client may stall.
        self.transport.abort()


def uvicorn_config(app: Any, host: str, port: int, limits: ServeLimits, **options: Any) -> Config:
    """``uvicorn.Config`` serving ``app`` with :class:`GuardedHttpToolsProtocol` and ``limits``
    (``options``: other ``uvicorn.Config`` arguments, e.g. ``workers``, ``factory``)."""
    # uvicorn annotates timeout_keep_alive as int but only passes it to loop.call_later: seconds as a float work.
    keep_alive: Any = limits.keep_alive_timeout
    config = Config(app, host=host, port=port, http=GuardedHttpToolsProtocol, timeout_keep_alive=keep_alive, **options)
    setattr(config, LIMITS_ATTRIBUTE, limits)  # read back by the protocol, pickled to --workers
    return config


__all__ = ["GuardedHttpToolsProtocol", "uvicorn_config"]
