"""Triton's statistics, model configuration and trace extensions over gRPC: the answers of the
``ModelStatistics``, ``ModelConfig`` and ``TraceSetting`` RPCs of ``inference.GRPCInferenceService``.

::

    response = model_statistics(repository, pb.ModelStatisticsRequest(name="m"))  # one model
    response = model_config(repository, pb.ModelConfigRequest(name="m", version="v"))
    response = trace_setting(repository, pb.TraceSettingRequest(settings=...))     # update, then read

Each is the REST answer (:mod:`~bnc_deploy.serve.statistics`, :mod:`~bnc_deploy.serve.tracing`)
as Triton's protobuf messages, so both front ends give the same numbers and settings:

* ``ModelStatistics``: ``name`` "" for every model, else that model (``version`` "": the version
  served); Triton's ``model_stats`` field for field (``batch_stats``, ``memory_usage`` and
  ``response_stats`` stay empty, as their REST keys are absent).
* ``ModelConfig``: the model config JSON in the subset of Triton's ``ModelConfig`` that
  ``proto/model_config.proto`` declares (field numbers of Triton's, so tritonclient parses it).
* ``TraceSetting``: ``model_name`` "" for the global settings; ``settings`` (each value a list of
  strings, as Triton's gRPC clients send them) is the update, an empty list clearing that key as
  REST's ``null`` does; no settings: a read. The answer is the settings in force, each value a
  list (``trace_level`` has one level; the others their one string).

Errors are those the front end maps to status codes (:func:`~bnc_deploy.serve.errors.status_of`):
an unknown model or version is ``ModelNotFound`` (NOT_FOUND, REST's 404), a bad setting
``BadRequest`` (INVALID_ARGUMENT, REST's 400), a level turned on where spans cannot be made
``MissingExtraError``/``ConfigError`` (INVALID_ARGUMENT too). The dict -> message conversion is
``json_format.ParseDict`` without ``ignore_unknown_fields``: a key the REST answer grows but the
.proto lacks fails loudly (INTERNAL, logged) instead of vanishing from the gRPC answer.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from bnc_deploy.serve import statistics, tracing
from bnc_deploy.serve.proto import grpc_service_pb2 as pb


def model_statistics(repository: Any, request: pb.ModelStatisticsRequest) -> pb.ModelStatisticsResponse:
    """The ``ModelStatistics`` answer over ``repository`` (a ModelRepository): every model's, or
    the requested model version's (as ``GET /v2/models[/{m}[/versions/{v}]]/stats``)."""
    models = [repository.get(request.name, request.version or None)] if request.name else repository.models()
    return json_format.ParseDict(statistics.stats_json(models), pb.ModelStatisticsResponse())


def model_config(repository: Any, request: pb.ModelConfigRequest) -> pb.ModelConfigResponse:
    """The ``ModelConfig`` answer: the requested model version's configuration."""
    config = statistics.model_config(repository.get(request.name, request.version or None))
    return json_format.ParseDict({"config": config}, pb.ModelConfigResponse())


def trace_changes(request: pb.TraceSettingRequest) -> dict[str, Any]:
    """The update ``request`` asks for, as :meth:`tracing.Tracing.update` takes REST's JSON:
    ``trace_level`` as its list, a key's one value as that string (several: the list, which
    ``update`` refuses for a number), an empty list as None (clear)."""
    changes: dict[str, Any] = {}
    for key, setting in request.settings.items():
        values = list(setting.value)
        if not values:
            changes[key] = None
        elif key == "trace_level" or len(values) > 1:
            changes[key] = values
        else:
            changes[key] = values[0]
    return changes


def trace_setting(repository: Any, request: pb.TraceSettingRequest) -> pb.TraceSettingResponse:
    """The ``TraceSetting`` answer: apply the request's update (if any) to :data:`tracing.STATE`,
    globally or for ``model_name`` (which must exist, as on REST), and return the settings in force."""
    model = request.model_name or None
    if model is not None:
        repository.get(model)  # an unknown model is NOT_FOUND, as REST's 404
    changes = trace_changes(request)
    settings = tracing.STATE.update(model, changes) if changes else tracing.STATE.settings(model)
    response = pb.TraceSettingResponse()
    for key, value in settings.items():
        response.settings[key].value.extend(value if isinstance(value, list) else [str(value)])
    return response


__all__ = ["model_config", "model_statistics", "trace_changes", "trace_setting"]
