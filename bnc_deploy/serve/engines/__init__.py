"""Exported models on existing serving engines: KServe, MLServer and Ray Serve, one small module each.

* :mod:`~bnc_deploy.serve.engines.kserve` - a KServe custom predictor (``kserve.Model``), started by
  ``kserve.ModelServer`` (``python -m bnc_deploy.serve.engines.kserve --model_dir models/``);
* :mod:`~bnc_deploy.serve.engines.mlserver` - an MLServer runtime (``mlserver.MLModel``), named by a
  ``model-settings.json`` (``"implementation": "bnc_deploy.serve.engines.mlserver.BncModel"``);
* :mod:`~bnc_deploy.serve.engines.rayserve` - a Ray Serve deployment speaking V2 over HTTP and gRPC,
  with ``@serve.batch`` (``python -m bnc_deploy.serve.engines.rayserve --repository models/``).

Contract, the same for the three:

* **The engine is imported lazily**: inside functions, or on first access of the class an engine
  names (a module ``__getattr__``). Importing a module here never needs its engine, and the
  project's environment needs none of them (KServe and MLServer pin protobuf < 7 and others that
  it does not allow: they run in venvs of their own, see docs/guide/engines.md).
* **The core is bnc-serve's**: each model file is one :class:`~bnc_deploy.serve.model.ServedModel`
  (loaded from the bytes read once, integrity seal and check set reproduced before the engine
  is told it is ready); inference is :meth:`ServedModel.infer_async`, so every engine computes
  exactly what ``load_runtime(file).run(x)`` does.
* **Tensors as bnc-serve names them**: input ``x`` ``[-1, D]``; outputs ``log_joint`` (DNN
  ``logits``) ``[-1, C]`` FP32 (FP64 for ``.bnc``) and ``label`` ``[-1]`` INT64; a subset when the
  request names outputs; an output parameter ``classification=k`` asks for Triton's
  classification extension (``BYTES`` ``"score:index:class name"``). Output datatypes come from
  :func:`bnc_deploy.serve.protocol.datatype_of`. Tensors that an engine hands over as JSON-like
  lists are decoded by :func:`bnc_deploy.serve.protocol.tensor_from_json` (a ``1.5`` for INT64 or an
  out-of-range value is refused, never truncated); no module here has a codec of its own.
* **Errors as the engine expects them**: a bad request (shape, datatype, out-of-range code naming
  feature, value and row: :func:`bnc_deploy.serve.errors.status_of` gives 400) becomes the
  engine's own client error, HTTP 400 / gRPC ``INVALID_ARGUMENT``; an unknown model is the
  engine's 404 / ``NOT_FOUND``; anything else stays a server error.

Tested (tests/serve/test_engines.py): each engine started locally from its venv on loopback
ports, with a BN and a DNN export, driven by the official tritonclient over REST and gRPC
where the engine offers them; outputs bit-identical to ``load_runtime(file).run(x)``.

Stage "serve": imports only ``serve`` and ``runtimes`` modules of the package (and its engine).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from bnc_deploy.errors import ConfigError
from bnc_deploy.serve.errors import BadRequest
from bnc_deploy.serve.repository import is_candidate


def model_files(folder) -> dict[str, Path]:
    """``{name: path}`` of the published model files of ``folder`` (as bnc-serve's repository: the
    name is the file stem; hidden and ``.tmp`` files are left out). ConfigError when it holds
    none, or two files with one stem."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory of model files")
    out: dict[str, Path] = {}
    for path in sorted(root.iterdir()):
        if not (path.is_file() and is_candidate(path)):
            continue
        if path.stem in out:
            raise ConfigError(f"{root}: two model files named {path.stem!r} ({out[path.stem].name}, {path.name})")
        out[path.stem] = path
    if not out:
        raise ConfigError(f"{root}: no model files (.onnx, .ort, .tflite, .h, .bnc)")
    return out


def requested_outputs(outputs: Iterable[tuple[str, Mapping | None]]) -> tuple[list[str] | None, dict]:
    """``(names or None for all, {name: k})`` of the outputs a request names, each with its
    parameters (None or a mapping; ``classification`` is read), as :meth:`ServedModel.infer` takes
    them. The engines hand their requested-output objects over as ``(name, parameters)``."""
    names: list[str] = []
    classification: dict = {}
    for name, params in outputs:
        if name in names:
            raise BadRequest(f"output {name!r} is requested twice")
        names.append(name)
        if params and "classification" in params:
            classification[name] = params["classification"]  # checked by ServedModel (an int >= 0)
    return names or None, classification


def single_inputs(names: Iterable[str]) -> None:
    """BadRequest when a request names an input twice (an engine's list would silently keep one)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise BadRequest(f"input {name!r} appears twice")
        seen.add(name)


__all__ = ["model_files", "requested_outputs", "single_inputs"]
