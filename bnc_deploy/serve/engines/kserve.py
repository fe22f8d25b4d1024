"""A KServe custom predictor: each exported file a ``kserve.Model``, served by ``kserve.ModelServer``.

::

    python -m bnc_deploy.serve.engines.kserve --model_dir models/ [--http_port 8080] [--grpc_port 8081]
        [--model_name NAME] [--runtime onnxruntime|litert|numpy|native] [--threads N]

serves every model file of ``--model_dir`` under its stem (as ``bnc-serve``); ``--model_name``
(what a KServe InferenceService passes: its own name) names the model when the folder holds
exactly one file. The other options are ``kserve.model_server.parser``'s (``--workers``,
``--enable_grpc``, ...). In Python: ``kserve.ModelServer().start([predictor("nb", "nb.onnx")])``.

KServe answers the V2 routes itself, REST (JSON and the binary tensor extension) and gRPC;
:class:`BncPredictor` supplies ``load`` (a :class:`~bnc_deploy.serve.model.ServedModel`: the
model is READY only after its check set was reproduced), the metadata's input/output tensors
and ``predict``: ``InferRequest`` -> :meth:`ServedModel.infer_async` -> ``InferResponse`` with
bnc-serve's output names, datatypes and ``model_version`` (the file's content hash), the
requested outputs only, and the classification extension from each requested output's
``classification`` parameter. Inputs sent as JSON or typed gRPC contents are decoded by
:func:`~bnc_deploy.serve.protocol.tensor_from_json`; binary ones by KServe's ``as_numpy``
(little-endian bytes, a size that does not fit the shape refused). Bad requests raise
``kserve.errors.InvalidInput``: 400 / ``INVALID_ARGUMENT``; unknown models are KServe's 404 /
``NOT_FOUND``.

What KServe does not do as bnc-serve does: model metadata lists no versions and an explicit
version in a request is not checked (KServe has no model versions); server metadata is KServe's.
Tested with kserve 0.21.0 (tests/serve/engines/kserve-requirements.txt).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from bnc_deploy.serve.engines import model_files, requested_outputs, single_inputs
from bnc_deploy.serve.errors import BadRequest, status_of
from bnc_deploy.serve.model import ServedModel
from bnc_deploy.serve.protocol import datatype_of, tensor_from_json


def _input_array(tensor: Any) -> np.ndarray:
    """The array of one ``kserve.InferInput``: JSON / typed-contents data through bnc-serve's strict
    decoder, binary data (REST binary extension, gRPC ``raw_input_contents``: KServe leaves ``data``
    None or empty and keeps the bytes to itself) through KServe's ``as_numpy`` (exact bytes)."""
    data = tensor.data
    if data is not None and not isinstance(data, np.ndarray) and len(data):
        return tensor_from_json(tensor.name, tensor.datatype, list(tensor.shape), list(data))
    try:
        return tensor.as_numpy()
    except ValueError as exc:  # a buffer that does not fit the shape, an unknown datatype
        raise BadRequest(f"input {tensor.name!r}: {exc}") from None


@functools.cache
def predictor_class() -> type:
    """The ``kserve.Model`` subclass (built on first use: kserve is imported only then)."""
    import kserve  # lazy: the optional engine
    from kserve.errors import InvalidInput
    from kserve.utils.utils import generate_uuid

    class BncPredictor(kserve.Model):
        """One exported file as a KServe model (see the module docstring)."""

        def __init__(self, name: str, path, *, runtime: str | None = None, threads: int | None = None) -> None:
            super().__init__(name)
            self.path, self.runtime, self.threads = Path(path), runtime, threads
            self.served: ServedModel | None = None

        def load(self) -> bool:
            # ModelLoadError propagates: KServe must not report a model that did not check as ready.
            self.served = ServedModel(self.name, self.path, runtime=self.runtime, threads=self.threads)
            self.ready = True
            return self.ready

        def get_input_types(self) -> list[dict]:
            return self.served.metadata()["inputs"] if self.served else []

        def get_output_types(self) -> list[dict]:
            return self.served.metadata()["outputs"] if self.served else []

        async def predict(self, payload, headers=None, response_headers=None):
            served = self.served
            try:
                single_inputs(t.name for t in payload.inputs)
                inputs = {t.name: _input_array(t) for t in payload.inputs}
                wanted = [(o.name, o.parameters) for o in payload.request_outputs or []]
                names, classification = requested_outputs(wanted)
                outputs = await served.infer_async(inputs, names, classification=classification)
            except Exception as exc:
                status, _, message = status_of(exc)
                if status == 400:
                    raise InvalidInput(message) from None
                raise
            tensors = [
                kserve.InferOutput(name=n, shape=list(a.shape), datatype=datatype_of(a.dtype), data=a)
                for n, a in outputs
            ]
            return kserve.InferResponse(
                response_id=payload.id or generate_uuid(),  # KServe's response needs an id
                model_name=self.name,
                model_version=served.version,
                infer_outputs=tensors,
                # REST: as the request asks. gRPC: False, yet NumPy data is always sent as
                # raw_output_contents (what tritonclient reads); True would make KServe 0.21's
                # to_grpc test an array's truth value and fail.
                use_binary_outputs=False if payload.from_grpc else payload.use_binary_outputs,
                requested_outputs=payload.request_outputs,
            )

    return BncPredictor


def predictor(name: str, path, *, runtime: str | None = None, threads: int | None = None):
    """A KServe model serving ``path`` as ``name`` (not loaded yet: ``ModelServer.start`` or ``load()``)."""
    return predictor_class()(name, path, runtime=runtime, threads=threads)


def main(argv: list[str] | None = None) -> None:
    """``python -m bnc_deploy.serve.engines.kserve``: load every model of ``--model_dir``, then
    ``kserve.ModelServer(...).start(models)`` (blocks until SIGTERM/SIGINT)."""
    import argparse

    import kserve  # lazy: the optional engine

    parser = argparse.ArgumentParser(
        prog="python -m bnc_deploy.serve.engines.kserve",
        parents=[kserve.model_server.parser],
        description="Serve exported bnc-deploy models with KServe's ModelServer (V2 REST and gRPC).",
    )
    parser.add_argument("--model_dir", required=True, help="folder of model files (KServe mounts /mnt/models)")
    parser.add_argument("--runtime", default=None, help="runtime of every file (default: by extension)")
    parser.add_argument("--threads", type=int, default=None, help="the runtimes' intra-op threads")
    args, _ = parser.parse_known_args(argv)
    files = model_files(args.model_dir)
    if len(files) == 1 and args.model_name != "model":  # "model": the parser's default, not a choice
        files = {args.model_name: next(iter(files.values()))}
    models = [predictor(name, path, runtime=args.runtime, threads=args.threads) for name, path in files.items()]
    for model in models:
        model.load()  # every file checked before the server answers
    kserve.ModelServer(
        http_port=args.http_port, grpc_port=args.grpc_port, workers=args.workers, enable_grpc=args.enable_grpc
    ).start(models)


if __name__ == "__main__":
    main()


__all__ = ["main", "predictor", "predictor_class"]
