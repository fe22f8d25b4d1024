"""Options that several BN exporters declare, declared once so the flags read the same everywhere.

A private helper module (the leading underscore keeps the exporter registry from importing it as
an exporter). ``ONNX_LOWERING`` is the same ``--lowering`` flag with the ONNX-only choices added
(``gather-grouped``): the CLI merges the choices of every exporter, and an exporter that does not
offer a lowering refuses it by name (``formats.bnc.check_lowering`` against its own list).
``RAW_INPUTS_NEED_DISCRETIZER`` is the refusal every exporter declaring ``RAW_INPUTS`` declares too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.base import Option, Refusal
from bnc_deploy.formats.bnc import AUTO_LOWERING, LOWERINGS, ONNX_LOWERINGS

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact
    from bnc_deploy.quantizers import FixedPointLogQuantizer

LOWERING = Option(
    "lowering",
    "str",
    "gather",
    LOWERINGS,
    "table lookup as an integer gather (default, exact) or one-hot times table (FC layer)",
)
ONNX_LOWERING = Option(
    "lowering",
    "str",
    "gather",
    ONNX_LOWERINGS + (AUTO_LOWERING,),
    "table lookup as an integer gather (default, exact; fastest per row), one-hot times "
    "table (FC layer), gather-grouped (ONNX only, exact: merged feature groups, fewer "
    "lookups, fastest on large batches, more table memory at load time), or auto (ONNX/ORT: "
    "time each of them in onnxruntime at --lowering-batch rows and keep the fastest; the "
    "timings go into the metadata)",
)
LOWERING_BATCH = Option(
    "lowering_batch", "int", None, help="--lowering auto: rows per call the candidates are timed at (default 1)"
)
LOWERING_TIMINGS = Option(
    "lowering_timings",
    "str",
    None,
    internal=True,
    help="--lowering auto's measurements (JSON), written by the verifier into the metadata",
)
PACK_WORDS = Option(
    "pack_words",
    "bool",
    False,
    help="--lowering gather or gather-grouped, quantized models: look each table row up as float64 "
    "words holding the C codes as bit fields (GatherElements, one element per word), sum the words "
    "and unpack them exactly; fastest at large batches (--lowering auto tries it)",
)
RAW_INPUTS = Option(
    "raw_inputs", "bool", False, help="embed the model's discretizer: the file takes raw float32 feature values"
)


def stores_no_discretizer(artifact: object) -> bool:
    """A model trained on discrete codes: it has no cut points to embed."""
    return getattr(artifact, "discretizer", None) is None


#: ``formats.bnc.raw_cut_points`` raises it for every exporter that declares ``RAW_INPUTS``.
RAW_INPUTS_NEED_DISCRETIZER = Refusal(
    "--raw-inputs embeds the model's discretizer (its cut points) in the file; a model trained on "
    "discrete codes stores none, so there is nothing to bin raw values with",
    r"--raw-inputs needs a model trained on raw values",
    options={"raw_inputs": True},
    models=stores_no_discretizer,
)


class QuantizedCodes(NamedTuple):
    """The integer side of a quantized BN model (:func:`codes_of`)."""

    quantizer: FixedPointLogQuantizer
    #: uint8 [C]: the class prior's codes.
    prior: np.ndarray
    #: uint8 [n_rows, C]: the stacked tables' codes.
    table: np.ndarray


def codes_of(artifact: BNCArtifact) -> QuantizedCodes:
    """The quantizer and codes of a quantized model. The exporters refuse float models before they
    read codes; a float model reaching this raises ExportError."""
    q, prior, table = artifact.quantizer, artifact.class_codes, artifact.table_codes
    if q is None or prior is None or table is None:
        raise ExportError("this export reads the integer codes of a quantized model; the model has float tables")
    return QuantizedCodes(q, prior, table)
