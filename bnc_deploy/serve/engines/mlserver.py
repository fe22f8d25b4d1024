"""An MLServer runtime: each exported file an ``mlserver.MLModel``, named by a ``model-settings.json``.

::

    python -m bnc_deploy.serve.engines.mlserver models/ mlserver-models/   # one settings file per model
    mlserver start mlserver-models/

The first command writes ``mlserver-models/<name>/model-settings.json`` for every model file of
``models/`` (name: the file stem, as bnc-serve)::

    {"name": "nb", "implementation": "bnc_deploy.serve.engines.mlserver.BncModel",
     "parameters": {"uri": "/abs/path/models/nb.onnx"}}

``parameters.uri`` may also be a folder holding exactly one model file (KServe's ``/mnt/models``),
and ``parameters.extra`` may set ``runtime`` and ``threads`` (as ``bnc-serve --runtime/--threads``).
Ports and workers are MLServer's ``settings.json`` (or ``MLSERVER_*`` environment variables).

:class:`BncModel` (``mlserver.MLModel``) supplies ``load`` (a
:class:`~bnc_deploy.serve.model.ServedModel`: MLServer reports the model ready only after its
check set was reproduced; the metadata's input/output tensors are bnc-serve's) and ``predict``:
``InferenceRequest`` -> :meth:`ServedModel.infer_async` -> ``InferenceResponse``. MLServer hands
every input over as a list (REST JSON; gRPC typed contents, or ``raw_input_contents`` it unpacked):
decoded by :func:`~bnc_deploy.serve.protocol.tensor_from_json`; outputs go back as lists of
:func:`~bnc_deploy.serve.protocol.tensor_to_json_data` with bnc-serve's names and datatypes, the
requested outputs only, the classification extension from a requested output's
``classification`` parameter, ``model_version`` the settings' version or else the file's content
hash. Bad requests raise ``mlserver.errors.MLServerError`` with status 400 (gRPC
``INVALID_ARGUMENT``); unknown models are MLServer's 404 / ``NOT_FOUND``.

MLServer's REST front end has no binary tensor extension: REST clients send JSON
(tritonclient: ``binary_data=False``); gRPC takes raw or typed contents. Tested with mlserver
1.7.1 (tests/serve/engines/mlserver-requirements.txt), ``parallel_workers: 0``.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from bnc_deploy.serve.engines import model_files, requested_outputs, single_inputs
from bnc_deploy.serve.errors import status_of
from bnc_deploy.serve.model import ServedModel
from bnc_deploy.serve.protocol import datatype_of, tensor_from_json, tensor_to_json_data

#: The ``implementation`` a model-settings.json names (spelled out: under ``python -m`` this module is ``__main__``).
IMPLEMENTATION = "bnc_deploy.serve.engines.mlserver.BncModel"


def _model_path(uri: str) -> Path:
    """The model file of a settings' uri: the file, or the one model file of a folder."""
    path = Path(uri)
    if path.is_dir():
        files = model_files(path)
        if len(files) != 1:
            raise ValueError(f"{path}: holds {len(files)} model files ({', '.join(files)}); name one in 'uri'")
        return next(iter(files.values()))
    return path


@functools.cache
def model_class() -> type:
    """The ``mlserver.MLModel`` subclass (built on first use: mlserver is imported only then)."""
    from mlserver import MLModel  # lazy: the optional engine
    from mlserver.errors import MLServerError
    from mlserver.types import InferenceResponse, MetadataTensor, ResponseOutput
    from mlserver.utils import get_model_uri

    class BncModel(MLModel):
        """One exported file as an MLServer model (see the module docstring)."""

        async def load(self) -> bool:
            extra = (self.settings.parameters.extra if self.settings.parameters else None) or {}
            path = _model_path(await get_model_uri(self.settings))
            # ModelLoadError propagates: MLServer must not report a model that did not check as ready.
            self.served = ServedModel(self.name, path, runtime=extra.get("runtime"), threads=extra.get("threads"))
            meta = self.served.metadata()
            self.inputs = [MetadataTensor(**t) for t in meta["inputs"]]
            self.outputs = [MetadataTensor(**t) for t in meta["outputs"]]
            return True

        async def predict(self, payload):
            try:
                single_inputs(t.name for t in payload.inputs)
                inputs = {
                    t.name: tensor_from_json(t.name, t.datatype, list(t.shape), getattr(t.data, "root", t.data))
                    for t in payload.inputs
                }
                wanted = [(o.name, o.parameters.model_dump() if o.parameters else None) for o in payload.outputs or []]
                names, classification = requested_outputs(wanted)
                outputs = await self.served.infer_async(inputs, names, classification=classification)
            except Exception as exc:
                status, _, message = status_of(exc)
                if status == 400:
                    raise MLServerError(message, status_code=400) from None
                raise
            return InferenceResponse(
                id=payload.id,
                model_name=self.name,
                model_version=self.version or self.served.version,
                outputs=[
                    ResponseOutput(
                        name=n, shape=list(a.shape), datatype=datatype_of(a.dtype), data=tensor_to_json_data(a)
                    )
                    for n, a in outputs
                ],
            )

    BncModel.__qualname__ = "BncModel"  # found by pickle (parallel workers) as this module's attribute
    BncModel.__module__ = __name__
    return BncModel


def __getattr__(name: str):
    """``BncModel`` on first access (what a model-settings.json's ``implementation`` imports)."""
    if name == "BncModel":
        return model_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def model_settings(path, name: str | None = None) -> dict:
    """The model-settings.json content serving the model file ``path`` as ``name`` (default: its stem)."""
    path = Path(path).resolve()
    return {"name": name or path.stem, "implementation": IMPLEMENTATION, "parameters": {"uri": str(path)}}


def write_settings(model_dir, out_dir) -> list[Path]:
    """``out_dir/<name>/model-settings.json`` for every model file of ``model_dir``; the paths written."""
    written = []
    for name, path in model_files(model_dir).items():
        target = Path(out_dir) / name / "model-settings.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(model_settings(path, name), indent=2) + "\n")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m bnc_deploy.serve.engines.mlserver MODEL_DIR OUT_DIR``: :func:`write_settings`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m bnc_deploy.serve.engines.mlserver MODEL_DIR OUT_DIR", file=sys.stderr)
        return 2
    for path in write_settings(*args):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["IMPLEMENTATION", "main", "model_class", "model_settings", "write_settings"]
