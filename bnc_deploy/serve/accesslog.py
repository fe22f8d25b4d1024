"""Structured access log: one JSON line per HTTP request, written to a text stream (stdout).

A pure ASGI middleware: ``{"ts", "method", "path", "status", "ms", "bytes_in", "bytes_out",
"client"}`` (``bytes_in`` from Content-Length; ``status`` 499 when the client went away before
its answer; ``ms`` from the request's arrival to its last
response byte handed to the server). ``bnc-serve`` writes it to stdout, as uvicorn does its own
access log (its messages and errors go to stderr); ``--no-access-log`` turns it off.

Why not the ``logging`` module or stderr: the line is written straight to the stream (one
``write`` + ``flush``), because building a LogRecord and going through handlers cost about 50 us
per request in a measurement, a quarter of the server's time for a letter-sized model; and
``bnc-serve`` pipes stderr through a filter thread (``cli.common.native_log_filter``), which cost
about 70 us more.
"""

from __future__ import annotations

import json
import sys
import threading
import time

#: The status logged for a request whose client went away before its answer (nginx's convention).
DISCONNECTED = 499


class AccessLogMiddleware:
    """Wrap an ASGI app; write one JSON line per HTTP request to ``stream`` after its response."""

    def __init__(self, app, stream=None) -> None:
        self.app = app
        self.stream = stream if stream is not None else sys.stdout
        self._lock = threading.Lock()  # whole lines, also with several event loops/threads

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        facts = [None, 0]  # status, bytes out

        async def counting_send(message):
            if message["type"] == "http.response.start":
                facts[0] = message["status"]
            else:
                facts[1] += len(message.get("body", b""))
            await send(message)

        failed = True
        try:
            await self.app(scope, receive, counting_send)
            failed = False
        finally:
            if facts[0] is None:
                # No response: the app failed (the server answers 500), or it returned because the
                # client went away first, which is nginx's 499 "client closed request", no error.
                facts[0] = 500 if failed else DISCONNECTED
            bytes_in = 0
            for k, v in scope["headers"]:
                if k == b"content-length":
                    bytes_in = int(v) if v.isdigit() else 0
                    break
            client = scope.get("client")
            line = (
                json.dumps(
                    {
                        "ts": round(time.time(), 6),
                        "method": scope.get("method"),
                        "path": scope.get("path"),
                        "status": facts[0],
                        "ms": round((time.perf_counter() - start) * 1000, 3),
                        "bytes_in": bytes_in,
                        "bytes_out": facts[1],
                        "client": f"{client[0]}:{client[1]}" if client else None,
                    }
                )
                + "\n"
            )
            with self._lock:
                try:
                    self.stream.write(line)
                    self.stream.flush()
                except (OSError, ValueError):  # a closed stdout must not fail the request
                    pass
