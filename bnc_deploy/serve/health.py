"""Health for probes and load balancers: readiness with a shutdown flip, and ``grpc.health.v1.Health``.

::

    health = ServingHealth(repository)     # shared by both front ends
    health.ready()                         # REST /v2/health/ready, gRPC ServerReady
    health.servicer()                      # grpc.health.v1.Health (the official HealthServicer)
    health.begin_shutdown()                # SIGTERM: not ready, NOT_SERVING; requests still served
    health.close()                         # before the gRPC server stops: Watch streams end

    shutdown = ShutdownSequence(health, delay=5.0)
    shutdown.on_drain(lambda: grpc_server.stop(30))    # what closes the ports and drains
    signal.signal(signal.SIGTERM, shutdown.signal)     # flip now, drain 5 s later (or at a 2nd signal)

Readiness is the repository's (every model that is not unloaded has a version serving) until
:meth:`ServingHealth.begin_shutdown`, and false from then on. That flip comes first in
``bnc-serve``'s shutdown: probes and load balancers see the server not ready while it still
answers requests (``--shutdown-delay``), and only then do the listeners close and the requests
in flight drain.

The gRPC health service is ``grpc_health.v1.health.HealthServicer`` of the official
``grpcio-health-checking`` package, kept in step with the repository. Service names:

* ``""`` (the whole server) and ``inference.GRPCInferenceService``: SERVING when :meth:`ready`;
* each model's name: SERVING while any of its versions serves (index state ``READY``),
  NOT_SERVING when it is known but none serves (failed, unloaded, file removed, not loaded yet);
* any other name: ``Check`` answers NOT_FOUND and ``Watch`` SERVICE_UNKNOWN (the protocol's rule).

Statuses are recomputed from the repository on every ``Check`` (so a probe right after a load,
unload or reload sees it) and every :data:`SYNC_SECONDS` in a background thread (so ``Watch``
streams hear of changes made by polling or the repository API). After ``begin_shutdown`` every
service is NOT_SERVING for good (the official ``enter_graceful_shutdown``); :meth:`close` ends the
open ``Watch`` streams, which would otherwise hold the gRPC server's graceful stop for its whole
grace period.

:class:`ShutdownSequence` orders a graceful stop: on the signal, readiness flips at once; after
``delay`` seconds (at once on a second signal) the Watch streams end and the drain callbacks run
(close the listeners, wait for requests in flight). The signal handler only starts a thread.

Nothing here imports grpc until :meth:`ServingHealth.servicer` is called: a REST-only server
needs only the readiness flag.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("bnc_deploy.serve")

#: The V2 gRPC service's full name, also a health service name.
INFERENCE_SERVICE = "inference.GRPCInferenceService"
#: How often the background thread brings ``Watch`` streams up to date (seconds).
SYNC_SECONDS = 1.0


class ServingHealth:
    """Readiness of one server (both front ends) over a model repository; see the module docstring."""

    def __init__(self, repository: Any, *, sync_seconds: float = SYNC_SECONDS) -> None:
        self.repository = repository
        self.sync_seconds = sync_seconds
        self._shutting_down = threading.Event()
        self._servicer: Any = None  # the HealthServicer subclass, made on first use (imports grpc)
        self._lock = threading.Lock()
        self._syncer: threading.Thread | None = None

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down.is_set()

    def ready(self) -> bool:
        """Server readiness: the repository's, false once shutdown began."""
        return not self._shutting_down.is_set() and bool(self.repository.ready())

    def statuses(self) -> dict[str, bool]:
        """``{health service name: serving}`` now: the server, the V2 service and every model."""
        serving: dict[str, bool] = {}
        for entry in self.repository.index():  # one row per version: a model serves while any version does
            serving[entry["name"]] = serving.get(entry["name"], False) or entry["state"] == "READY"
        ready = self.ready()
        serving.update({"": ready, INFERENCE_SERVICE: ready})  # the server's names win over a model's
        if self._shutting_down.is_set():
            serving = dict.fromkeys(serving, False)
        return serving

    def servicer(self) -> Any:
        """The ``grpc.health.v1.Health`` servicer (created, with its sync thread, on first call)."""
        with self._lock:
            if self._servicer is None:
                self._servicer = _health_servicer_class()(self)
                self._servicer.sync()
                self._syncer = threading.Thread(target=self._sync_loop, name="bnc-health-sync", daemon=True)
                self._syncer.start()
            return self._servicer

    def _sync_loop(self) -> None:
        while not self._shutting_down.wait(self.sync_seconds):
            try:
                self._servicer.sync()
            except Exception:  # noqa: BLE001 - a failed round must not end the updates
                log.exception("health status update failed")

    def begin_shutdown(self) -> None:
        """Not ready from now on: REST 503, ServerReady false, every health service NOT_SERVING."""
        self._shutting_down.set()
        if self._servicer is not None:
            self._servicer.enter_graceful_shutdown()

    def close(self) -> None:
        """Shut down (if not yet) and end the open ``Watch`` streams (their last message: NOT_SERVING)."""
        self.begin_shutdown()
        if self._servicer is not None:
            self._servicer.end_watches()


def _health_servicer_class() -> Any:
    """The official HealthServicer, extended to follow a :class:`ServingHealth` (imports grpc)."""
    from grpc_health.v1 import health, health_pb2

    serving_status = {True: health_pb2.HealthCheckResponse.SERVING, False: health_pb2.HealthCheckResponse.NOT_SERVING}

    class RepositoryHealthServicer(health.HealthServicer):
        """``HealthServicer`` whose statuses follow the repository (:meth:`sync`) and whose ``Watch``
        streams can be ended at shutdown (:meth:`end_watches`)."""

        def __init__(self, state: ServingHealth) -> None:
            super().__init__()
            self.state = state
            self._known: dict[str, bool] = {}
            self._sync_lock = threading.Lock()
            self._watches: set[_Once] = set()
            self._watches_lock = threading.Lock()

        def sync(self) -> None:
            """Set every service's status from the repository (a known name that is gone: NOT_SERVING)."""
            with self._sync_lock:
                now = self.state.statuses()
                for name in self._known.keys() - now.keys():
                    now[name] = False
                for name, serving in now.items():
                    if self._known.get(name) is not serving:
                        self.set(name, serving_status[serving])  # wakes that service's Watch streams
                self._known = now

        def Check(self, request: Any, context: Any) -> Any:
            self.sync()
            return super().Check(request, context)

        def Watch(self, request: Any, context: Any, send_response_callback: Any = None) -> Any:
            if send_response_callback is None:  # a blocking watch (older grpcio): ends when the client goes
                return super().Watch(request, context)
            once = _Once(send_response_callback)
            with self._watches_lock:
                self._watches.add(once)
            context.add_callback(lambda: self._forget(once))
            return super().Watch(request, context, once)

        def _forget(self, once: _Once) -> None:
            with self._watches_lock:
                self._watches.discard(once)

        def end_watches(self) -> None:
            with self._watches_lock:
                watches, self._watches = list(self._watches), set()
            for once in watches:
                once(None)  # None ends the stream with status OK

    return RepositoryHealthServicer


class _Once:
    """A Watch stream's send callback that ignores everything after the stream's end (``None``):
    both :meth:`end_watches` and the official servicer's close callback end a stream."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        # Reentrant: ending a stream may run its close callback, which ends it again, in this thread.
        self._send, self._ended, self._lock = send, False, threading.RLock()

    def __call__(self, response: Any) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = response is None
            self._send(response)


class ShutdownSequence:
    """Readiness off at the signal, the drain ``delay`` seconds later (module docstring).

    ``signal`` is a signal handler (``signal.signal(SIGTERM, seq.signal)``): the first call starts
    the sequence in a thread, a second one cuts the delay short. :meth:`drain` runs the sequence's
    end now (once: also for a server that stopped on its own); ``drained`` is set when every drain
    callback has returned."""

    def __init__(self, health: ServingHealth, delay: float = 0.0) -> None:
        self.health, self.delay = health, float(delay)
        self.drained = threading.Event()
        self._signalled = threading.Event()
        self._skip_delay = threading.Event()
        self._callbacks: list[Callable[[], object]] = []
        self._draining = False
        self._lock = threading.Lock()

    def on_drain(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` when the drain starts (now, if it has)."""
        with self._lock:
            if not self._draining:
                self._callbacks.append(callback)
                return
        callback()

    def signal(self, signum: int | None = None, frame: object = None) -> None:
        # Only Event calls and a thread start: a signal handler may interrupt any code of the main
        # thread, a print or a lock it holds included.
        if self._signalled.is_set():
            self._skip_delay.set()
            return
        self._signalled.set()
        threading.Thread(target=self._run, name="bnc-shutdown", daemon=True).start()

    def _run(self) -> None:
        self.health.begin_shutdown()
        log.info("shutting down: not ready; the ports close in %g s", self.delay)
        self._skip_delay.wait(self.delay)
        self.drain()

    def drain(self) -> None:
        """Not ready, Watch streams ended, then every drain callback; once (a second caller waits
        for the first)."""
        with self._lock:
            first, self._draining = not self._draining, True
            callbacks, self._callbacks = self._callbacks, []
        if not first:
            self.drained.wait()
            return
        try:
            self.health.close()
            for callback in callbacks:
                callback()
        finally:
            self.drained.set()


__all__ = ["INFERENCE_SERVICE", "SYNC_SECONDS", "ServingHealth", "ShutdownSequence"]
