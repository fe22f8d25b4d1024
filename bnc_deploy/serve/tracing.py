"""OpenTelemetry traces of inference requests, and Triton's trace setting extension.

With the ``otel`` extra (``pip install 'bnc-deploy[otel]'``) and a trace level other than
``OFF``, a traced request makes three spans::

    InferRequest   (kind SERVER) the request, from the model lookup to the answer
    |- queue       waiting for the dynamic batcher, or for the lock of a runtime that is not thread-safe
    |- compute     the runtime call (a batched request: its batch's call)

each with the attributes ``bnc.model_name``, ``bnc.model_version`` and ``bnc.protocol``
(``rest``/``grpc``); ``compute`` adds ``bnc.batch_rows``, and a failed request's span has status
ERROR with its code in ``bnc.status``. The parent of ``InferRequest`` is read from the REST
headers or gRPC metadata by OpenTelemetry's own propagators (``opentelemetry.propagate``: W3C
``traceparent``/``tracestate`` and baggage unless ``OTEL_PROPAGATORS`` says otherwise), so the
spans join the caller's trace; whether a traced request is recorded is the SDK sampler's
decision (``OTEL_TRACES_SAMPLER``; by default it follows the caller's sampled flag).

Settings (Triton's trace extension; ``GET``/``POST /v2/trace/setting`` and
``/v2/models/{m}/trace/setting``, or gRPC ``TraceSetting``: :mod:`~bnc_deploy.serve.grpc_extensions`;
values as Triton writes them, strings, ``trace_level`` a list)::

    trace_level  ["OFF"] | ["TIMESTAMPS"]   spans or none (TENSORS is refused: tensors are not recorded)
    trace_rate   "N"                        one request in N is traced (per model)
    trace_count  "N"                        traced requests left, counting down; "-1": no limit
    trace_mode   "opentelemetry"            read only

A model's setting overrides the global one key by key; ``null`` for a key clears the model's
override (globally: back to the default, ``OFF``, ``1``, ``-1``). ``trace_available`` (``"true"``/
``"false"``, read only) says whether spans can be made at all, and ``trace_unavailable_reason``
why not (the extra is not installed, or ``OTEL_SDK_DISABLED=true``); turning a level on there
is refused (400, the reason).

Where spans go: the first time a level turns on, the tracer provider already installed is used
(``opentelemetry-instrument bnc-serve ...``, or an application that embeds the server), else one
is built from the standard environment variables: ``OTEL_TRACES_EXPORTER`` (default ``otlp``;
``console``, ``none``, or any installed exporter's entry point; ``otlp`` picks gRPC or HTTP from
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``/``OTEL_EXPORTER_OTLP_PROTOCOL`` as the SDK does), the
exporter's own ``OTEL_EXPORTER_OTLP_ENDPOINT``/``..._HEADERS``/..., ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (``service.name`` defaults to ``bnc-serve``), ``OTEL_TRACES_SAMPLER``
and ``OTEL_BSP_*`` (spans leave in batches, off the request path).

Cost: while no level is on (always, without the extra) a request pays one attribute test
(:attr:`Tracing.active`); nothing of OpenTelemetry is imported until a level turns on. Settings
live in the process (:data:`STATE`), like the metrics: ``--workers N`` processes each keep their own.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import threading
import time
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from bnc_deploy.errors import BncDeployError, ConfigError, MissingExtraError
from bnc_deploy.serve.errors import BadRequest
from bnc_deploy.version import __version__

#: Trace levels served; Triton's ``TENSORS`` is refused (tensors are never copied into spans).
LEVELS = ("OFF", "TIMESTAMPS")
MODE = "opentelemetry"
DEFAULTS: dict[str, Any] = {"trace_level": "OFF", "trace_rate": 1, "trace_count": -1}
SETTABLE = tuple(DEFAULTS)
SERVICE_NAME = "bnc-serve"
#: Span times are ``perf_counter_ns()`` stamps (the statistics' clock) moved to the epoch by one
#: offset per process: a span's length is then exactly the stage time the statistics count.
EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()
_OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}


def _unavailable() -> BncDeployError | None:
    """The error that says why spans cannot be made in this process (None: they can)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ConfigError("tracing is off: OTEL_SDK_DISABLED=true")
    try:
        found = importlib.util.find_spec("opentelemetry.sdk.trace") is not None
    except ModuleNotFoundError:  # the namespace package 'opentelemetry' itself is absent
        found = False
    if not found:
        return MissingExtraError("tracing", "otel", ModuleNotFoundError("No module named 'opentelemetry.sdk'"))
    return None


def unavailable_reason() -> str | None:
    """Why spans cannot be made in this process (None: they can)."""
    error = _unavailable()
    return None if error is None else str(error)


def available() -> bool:
    return _unavailable() is None


def require() -> None:
    """MissingExtraError / ConfigError saying why spans cannot be made here (nothing when they can)."""
    error = _unavailable()
    if error is not None:
        raise error


def exporters_from_env(env: Mapping[str, str]) -> list[Any]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names (comma-separated; default ``otlp``), each
    built with no arguments so that it reads its own ``OTEL_EXPORTER_*`` variables."""
    out = []
    for name in (n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")):
        if not name or name.lower() == "none":
            continue
        if name == "otlp":
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
            if protocol.strip() not in _OTLP_BY_PROTOCOL:
                raise ConfigError(f"OTLP protocol {protocol!r}: expected one of {', '.join(_OTLP_BY_PROTOCOL)}")
            name = _OTLP_BY_PROTOCOL[protocol.strip()]
        found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
        if not found:
            raise ConfigError(f"OTEL_TRACES_EXPORTER: no span exporter {name!r} is installed")
        out.append(found[0].load()())
    return out


def provider_from_env() -> Any:
    """The tracer provider already installed, else one built from the OTEL_* environment and installed."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    resource = Resource.create()  # reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    for exporter in exporters_from_env(os.environ):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def _headers(carrier: Any) -> dict[str, str]:
    """REST headers (ASGI ``(bytes, bytes)`` pairs) or gRPC metadata (``(str, str|bytes)`` pairs,
    or the call that returns them) as the lower-case ``{name: value}`` the propagators read."""
    out = {}
    for key, value in (carrier() if callable(carrier) else carrier) or ():
        name = (key.decode("latin-1") if isinstance(key, bytes) else str(key)).lower()
        if isinstance(value, bytes):
            if name.endswith("-bin"):  # gRPC binary metadata: no text propagator reads it
                continue
            value = value.decode("latin-1")
        out[name] = value
    return out


def _setting(key: str, value: Any) -> Any:
    """A setting's value from a request (Triton writes numbers as strings); BadRequest when wrong."""
    if key == "trace_level":
        levels = [value] if isinstance(value, str) else value
        if not isinstance(levels, list) or not all(isinstance(v, str) for v in levels):
            raise BadRequest(f"trace_level must be a list of levels, got {value!r}")
        wrong = sorted({v.upper() for v in levels} - set(LEVELS))
        if wrong:
            raise BadRequest(f"trace_level {wrong[0]} is not served; levels are {', '.join(LEVELS)}")
        return "TIMESTAMPS" if any(v.upper() == "TIMESTAMPS" for v in levels) else "OFF"
    low = 1 if key == "trace_rate" else -1
    try:
        number = int(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < low:
        raise BadRequest(f"{key} must be an integer >= {low} (as a string, as Triton sends it), got {value!r}")
    return number


class Tracing:
    """The trace settings of one process and its tracer (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = False  # some level is on: the front ends' one test per request
        self.global_settings: dict[str, Any] = dict(DEFAULTS)
        self.model_settings: dict[str, dict[str, Any]] = {}
        self._counters: dict[str, itertools.count[int]] = {}
        self._provider: Any = None
        self._tracer: Any = None
        self._otel: dict[str, Any] = {}

    # -- settings ---------------------------------------------------------------------------------
    def settings(self, model: str | None = None) -> dict[str, Any]:
        """Triton's settings JSON: the global ones, or those in force for ``model``."""
        s = {**self.global_settings, **(self.model_settings.get(model, {}) if model else {})}
        reason = unavailable_reason()
        out = {
            "trace_level": [s["trace_level"]],
            "trace_rate": str(s["trace_rate"]),
            "trace_count": str(s["trace_count"]),
            "trace_mode": MODE,
            "trace_available": "false" if reason else "true",
        }
        if reason:
            out["trace_unavailable_reason"] = reason
        return out

    def update(self, model: str | None, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Apply Triton's settings update ``changes`` (all or none; see the module docstring) and
        return the settings in force. BadRequest for a bad key or value; MissingExtraError /
        ConfigError when a level turns on where spans cannot be made."""
        new = dict(self.model_settings.get(model, {})) if model else dict(self.global_settings)
        for key, value in changes.items():
            if key == "trace_mode" and value in (MODE, [MODE]):
                continue
            if key not in SETTABLE:
                raise BadRequest(f"trace setting {key!r} is not served; settable: {', '.join(SETTABLE)}")
            if value is not None:
                new[key] = _setting(key, value)
            elif model:
                new.pop(key, None)
            else:
                new[key] = DEFAULTS[key]
        if new.get("trace_level", "OFF") != "OFF":
            self._ensure_tracer()
        with self._lock:
            if model:
                self.model_settings[model] = new
            else:
                self.global_settings = new
            levels = [self.global_settings["trace_level"]] + [
                m.get("trace_level") for m in self.model_settings.values()
            ]
            self.active = self._tracer is not None and any(level not in (None, "OFF") for level in levels)
        return self.settings(model)

    def answer(self, model: str | None, body: bytes | None) -> dict[str, Any]:
        """The REST route: the settings (no body), or the update a JSON object body asks for."""
        if not body or not body.strip():
            return self.settings(model)
        try:
            changes = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise BadRequest(f"malformed JSON trace settings: {exc}") from None
        if not isinstance(changes, dict):
            raise BadRequest("trace settings must be a JSON object")
        return self.update(model, changes)

    def use_provider(self, provider: Any) -> None:
        """Make spans with ``provider`` (an application's or a test's) instead of the environment's."""
        with self._lock:
            self._provider, self._tracer = provider, None

    def reset(self) -> None:
        """Back to the defaults (OFF), forgetting the tracer and its provider."""
        with self._lock:
            self.global_settings, self.model_settings = dict(DEFAULTS), {}
            self._counters, self._provider, self._tracer, self.active = {}, None, None, False

    def _ensure_tracer(self) -> None:
        if self._tracer is not None:
            return
        require()
        from opentelemetry import propagate, trace

        provider = self._provider or provider_from_env()
        self._otel = {
            "extract": propagate.extract,
            "in_context": trace.set_span_in_context,
            "server": trace.SpanKind.SERVER,
            "error": trace.Status(trace.StatusCode.ERROR),
        }
        self._tracer = provider.get_tracer("bnc_deploy.serve", __version__)

    # -- spans ------------------------------------------------------------------------------------
    def _sampled(self, model: str) -> bool:
        """Whether this request of ``model`` is traced: level, one in ``trace_rate``, ``trace_count`` left."""
        own = self.model_settings.get(model, {})
        level = own.get("trace_level", self.global_settings["trace_level"])
        if level == "OFF" or self._tracer is None:
            return False
        rate = own.get("trace_rate", self.global_settings["trace_rate"])
        if rate > 1:
            counter = self._counters.get(model) or self._counters.setdefault(model, itertools.count())
            if next(counter) % rate:
                return False
        scope = own if "trace_count" in own else self.global_settings
        if scope["trace_count"] < 0:
            return True
        with self._lock:
            if scope["trace_count"] == 0:
                return False
            scope["trace_count"] -= 1
            return True

    def start_request(self, model: str, version: str, protocol: str, carrier: Any, start_ns: int) -> Any:
        """The request span of a sampled request (None otherwise, and when the SDK's sampler drops it,
        e.g. for a caller that did not sample it), child of the carrier's context."""
        if not self._sampled(model):
            return None
        span = self._tracer.start_span(
            "InferRequest",
            context=self._otel["extract"](_headers(carrier)),
            kind=self._otel["server"],
            start_time=start_ns + EPOCH_OFFSET_NS,
            attributes={"bnc.model_name": model, "bnc.model_version": version, "bnc.protocol": protocol},
        )
        return span if span.is_recording() else None

    def stage_spans(
        self, span: Any, model: str, version: str, queued_at: int, began: int, ended: int, batch_rows: int
    ) -> None:
        """The ``queue`` and ``compute`` children of ``span`` (perf_counter_ns stamps)."""
        attributes = {"bnc.model_name": model, "bnc.model_version": version}
        context = self._otel["in_context"](span)
        queue = self._tracer.start_span(
            "queue", context=context, start_time=queued_at + EPOCH_OFFSET_NS, attributes=attributes
        )
        queue.end(end_time=began + EPOCH_OFFSET_NS)
        compute = self._tracer.start_span(
            "compute",
            context=context,
            start_time=began + EPOCH_OFFSET_NS,
            attributes={**attributes, "bnc.batch_rows": batch_rows},
        )
        compute.end(end_time=ended + EPOCH_OFFSET_NS)

    def end_request(self, span: Any, error_code: str | None, end_ns: int) -> None:
        if error_code is not None:
            span.set_attribute("bnc.status", str(error_code))
            span.set_status(self._otel["error"])
        span.end(end_time=end_ns + EPOCH_OFFSET_NS)


#: The process's trace settings and tracer.
STATE = Tracing()


def configure(level: str = "OFF", rate: int | str = 1, count: int | str = -1) -> None:
    """Set the global settings at start-up (``bnc-serve --trace-level/--trace-rate/--trace-count``);
    ConfigError / MissingExtraError when a level is asked for where spans cannot be made."""
    try:
        STATE.update(None, {"trace_level": [level], "trace_rate": str(rate), "trace_count": str(count)})
    except BadRequest as exc:
        raise ConfigError(str(exc)) from None


def configure_from_env(env: Mapping[str, str], prefix: str = "BNC_SERVE_TRACE_") -> None:
    """:func:`configure` from ``BNC_SERVE_TRACE_LEVEL``, ``_RATE`` and ``_COUNT`` (the app factory's)."""
    configure(env.get(prefix + "LEVEL") or "OFF", env.get(prefix + "RATE") or "1", env.get(prefix + "COUNT") or "-1")


__all__ = [
    "DEFAULTS",
    "LEVELS",
    "STATE",
    "Tracing",
    "available",
    "configure",
    "configure_from_env",
    "exporters_from_env",
    "provider_from_env",
    "require",
    "unavailable_reason",
]
