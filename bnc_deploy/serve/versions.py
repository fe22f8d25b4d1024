"""Model versions: Triton's repository layout, its version policy, and the version of a load/unload request.

Layout of a repository ``DIR`` (:func:`scan`)::

    DIR/<name>.onnx|.ort|.tflite|.h|.bnc      flat: version 1 of model <name> (the file stem)
    DIR/<name>/<version>/model.<ext>          Triton's: <version> a positive integer (no leading 0)

Both may be used side by side, also for one name (a flat file is that name's version 1; a flat
file and ``<name>/1/`` together are ambiguous, as two flat files with one stem are). Names
starting with ``.`` or containing ``.tmp`` are ignored (files still being written), as are
directories that are not versions and version directories without a ``model.<ext>`` file (a
version is published by renaming its file into place).

:class:`VersionPolicy` is Triton's ``version_policy``, written ``latest:N`` (the N highest
versions; the default ``latest:1``), ``all`` or ``specific:V,...``; :meth:`VersionPolicy.from_config`
reads it from a Triton model configuration (``{"version_policy": {"latest": {"num_versions": 2}}}``,
``{"all": {}}``, ``{"specific": {"versions": [1, 3]}}``), as a load request's ``config`` parameter
carries it.

Repository requests (load, unload) take their parameters as Triton's do: REST ``{"parameters":
{...}}`` (:func:`rest_parameters`), gRPC ``map<string, ModelRepositoryParameter>``
(:func:`grpc_parameters`). :func:`load_options` / :func:`unload_options` turn them into keyword
arguments of :meth:`ModelRepository.load` / ``unload``: ``version`` (this server's extension: one
version, a number or a flat file's content digest) and, for a load, ``config`` (Triton's: a JSON
model configuration of which only ``version_policy`` is read; it then holds for that model until
another load sets one). Malformed parameters raise :class:`~bnc_deploy.serve.errors.BadRequest`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnc_deploy.errors import ConfigError
from bnc_deploy.runtimes.base import model_suffixes
from bnc_deploy.serve.errors import BadRequest

log = logging.getLogger("bnc_deploy.serve")

#: The version a flat file ``DIR/<name>.<ext>`` is of its model.
FLAT_VERSION = 1
#: The file name (stem) of a model file inside a version directory (Triton's default_model_filename).
MODEL_STEM = "model"
#: A version directory's name; at most 18 digits, so that every version is an int64 (gRPC, Triton).
_VERSION = re.compile(r"[1-9][0-9]{0,17}")
POLICY_KINDS = ("latest", "all", "specific")


def is_candidate(path: Path) -> bool:
    """Whether ``path`` is named as a published model file (not hidden, not a temporary name, known suffix)."""
    name = path.name
    # The files some runtime reads by default (runtimes.base: .onnx/.ort onnxruntime, .tflite litert,
    # .h native (compiled on load), .bnc numpy).
    return not _hidden(name) and path.suffix.lower() in model_suffixes()


def _hidden(name: str) -> bool:
    return name.startswith(".") or ".tmp" in name


def is_version(text: str) -> bool:
    """Whether ``text`` names a version number (a positive integer, no sign, no leading zero)."""
    return bool(_VERSION.fullmatch(text))


def scan(root: Path) -> dict[str, dict[int, list[Path]]]:
    """``{model name: {version: [its published files]}}`` of ``root`` (normally one file each)."""
    found: dict[str, dict[int, list[Path]]] = {}
    try:
        paths = sorted(root.iterdir())
    except OSError as exc:
        log.error("cannot list %s: %s", root, exc)
        return found
    for p in paths:
        if _hidden(p.name):
            continue
        if p.is_file():
            if is_candidate(p):
                found.setdefault(p.stem, {}).setdefault(FLAT_VERSION, []).append(p)
        elif p.is_dir():
            for number, files in _versions_in(p).items():
                found.setdefault(p.name, {}).setdefault(number, []).extend(files)
    return found


def _versions_in(folder: Path) -> dict[int, list[Path]]:
    out: dict[int, list[Path]] = {}
    try:
        children = sorted(folder.iterdir())
    except OSError:
        return out
    for child in children:
        if not is_version(child.name):
            continue
        try:
            files = [f for f in sorted(child.iterdir()) if f.stem == MODEL_STEM and is_candidate(f) and f.is_file()]
        except OSError:
            continue
        if files:
            out[int(child.name)] = files
    return out


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions of a model are served (Triton's ``version_policy``; module docstring)."""

    kind: str = "latest"
    count: int = 1
    versions: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> VersionPolicy:
        """``latest:N``, ``all`` or ``specific:V,...``; ConfigError naming the mistake."""
        kind, _, arg = str(text).strip().partition(":")
        kind = kind.lower()
        if kind == "all" and not arg:
            return cls("all")
        if kind == "latest" and not arg:
            return cls("latest", 1)
        if kind == "latest" and arg.isascii() and arg.isdigit() and int(arg) > 0:
            return cls("latest", int(arg))
        if kind == "specific" and arg:
            parts = [p.strip() for p in arg.split(",")]
            if all(is_version(p) for p in parts):
                return cls("specific", versions=tuple(sorted({int(p) for p in parts})))
        raise ConfigError(
            f"bad version policy {text!r}: expected latest:N (N >= 1), all, or specific:V[,V...] "
            "(versions are positive integers)"
        )

    @classmethod
    def from_config(cls, value: Any) -> VersionPolicy:
        """The policy of a Triton model configuration's ``version_policy`` value; BadRequest if malformed."""
        if isinstance(value, Mapping) and len(value) == 1:
            kind, body = next(iter(value.items()))
            body = body if isinstance(body, Mapping) else {}
            try:
                if kind == "all":
                    return cls("all")
                if kind == "latest":
                    return cls.parse(f"latest:{body.get('num_versions', 1)}")
                if kind == "specific" and isinstance(body.get("versions"), list):
                    return cls.parse("specific:" + ",".join(str(v) for v in body["versions"]))
            except ConfigError as exc:
                raise BadRequest(f"config version_policy: {exc}") from None
        raise BadRequest(
            'config version_policy must be {"latest": {"num_versions": N}}, {"all": {}} or '
            f'{{"specific": {{"versions": [V, ...]}}}}, got {json.dumps(value, default=str)[:200]}'
        )

    def select(self, available: Iterable[int]) -> frozenset[int]:
        """The versions of ``available`` this policy serves."""
        numbers = sorted(set(available))
        if self.kind == "all":
            return frozenset(numbers)
        if self.kind == "latest":
            return frozenset(numbers[-self.count :])
        return frozenset(numbers).intersection(self.versions)

    def __str__(self) -> str:
        if self.kind == "latest":
            return f"latest:{self.count}"
        if self.kind == "specific":
            return "specific:" + ",".join(map(str, self.versions))
        return "all"


# -- repository requests --------------------------------------------------------------------------
def rest_parameters(body: bytes) -> dict[str, Any]:
    """The ``parameters`` of a REST load/unload body (``{}`` for an empty body); BadRequest if malformed."""
    if not body.strip():
        return {}
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON request: {exc}") from None
    if not isinstance(request, dict):
        raise BadRequest("the request must be a JSON object")
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise BadRequest('"parameters" must be a JSON object')
    return parameters


def grpc_parameters(parameters: Any) -> dict[str, Any]:
    """``{name: value}`` of a gRPC ``map<string, ModelRepositoryParameter>`` (duck-typed: no grpc import)."""
    out = {}
    for name, param in parameters.items():
        kind = param.WhichOneof("parameter_choice")
        out[name] = None if kind is None else getattr(param, kind)
    return out


def _version_of(parameters: Mapping[str, Any]) -> str | None:
    value = parameters.get("version")
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or len(str(value)) > 64:
        raise BadRequest(f'parameter "version" must be a version number or name, got {str(value)[:64]!r}')
    return str(value)


def load_options(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``ModelRepository.load`` from a load request's parameters."""
    config = parameters.get("config")
    policy = None
    if config is not None:
        if isinstance(config, (bytes, str)):
            try:
                config = json.loads(config)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise BadRequest(f'parameter "config" is not JSON: {exc}') from None
        if not isinstance(config, dict):
            raise BadRequest('parameter "config" must be a JSON object (a model configuration)')
        if "version_policy" in config:
            policy = VersionPolicy.from_config(config["version_policy"])
    return {"version": _version_of(parameters), "policy": policy}


def unload_options(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``ModelRepository.unload`` from an unload request's parameters."""
    return {"version": _version_of(parameters)}


__all__ = [
    "FLAT_VERSION",
    "MODEL_STEM",
    "VersionPolicy",
    "grpc_parameters",
    "is_candidate",
    "is_version",
    "load_options",
    "rest_parameters",
    "scan",
    "unload_options",
]
