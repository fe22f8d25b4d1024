"""ORT format exporter (ONNX Runtime Mobile / React Native / minimal builds) for BN and DNN models.

What it builds
--------------
An ONNX graph converted to ONNX Runtime's ORT flatbuffer format by onnxruntime's own serializer:
an ``InferenceSession`` is created on the ONNX bytes with ``graph_optimization_level =
ORT_DISABLE_ALL`` (``ort_optimization="basic"``: ``ORT_ENABLE_BASIC``) and
``session.save_model_format = ORT``, and the file it saves (``optimized_model_filepath``) is the
export. Creating that session is a build step - the serializer lives in the session - not a run:
no input is fed, nothing is decided from outputs. The verifier then runs the ``.ort`` file in
onnxruntime like any ONNX export (``runtimes.onnxruntime_adapter`` reads ``.ort``), against the
reference, before publishing it.

Which ONNX graph:

* **Quantized NB and TAN, ``gather`` lowering, code inputs, no ``pack_bits``, ``ort_optimization``
  disabled (the default case): the ORT lookup graph** (:func:`build_ort_lookup_model` below, built
  only for this exporter): Clip, an index map (``GatherElements`` of a uint8 [K + 1, D] map +
  ``Cast``), ``com.microsoft.GatherBlockQuantized`` on the stored codes (4 bits, two a byte, where
  they fit; a NaN scale for the guard's invalid row), ``ReduceSum``, and the label. No load-time
  nodes (an ORT format session never folds constants, so the ONNX graph's in-graph table build -
  19 of its 28 nodes - ran on every call), the class prior folded into feature 0's rows at export
  (``prior_folded_into_feature``; the graph counter credits those ``C`` additions), opset 12 +
  com.microsoft 1 (needs onnxruntime >= 1.20 and, in a minimal build, the contrib ops).
  Bit-identical to the ``.onnx`` export, the same guard (invalid codes -> NaN scores, label -1).
* **Everything else** (float models, ``raw_inputs``, ``pack_bits``, ``onehot-fc``, DNN, or
  ``ort_optimization="basic"``): the ONNX exporter's file (``exporter_for(kind, "onnx").build``
  with the ONNX exporter's options, declared here as it declares them), node for node; every
  initializer as the ONNX file stores it (uint8 tables, int8 DNN weights, bit-planes), so the
  computation and its exactness are the ONNX export's. Its BN table is rebuilt from the codes on
  every call (ORT format sessions get no load-time folding).

Size (onnxruntime 1.32; bytes per section counted by parsing the flatbuffer with the classes of
``formats.ort``): an ORT file stores, besides the initializers and our metadata, a type/shape
record per tensor (~100 bytes), per node its table, edges and attributes (~200 bytes), a kernel
type record per operator type (~100 bytes, for minimal builds) and ~1 KB of fixed records (the
opset imports of every domain onnxruntime knows). Letter NB 3-bit: ``.onnx`` 7,266 bytes; the
ONNX graph as ORT 20,344 bytes (2.8x; 28 nodes, 49 tensors: 4.9 KB type records, 3.3 KB nodes,
1.8 KB kernel types, 1.5 KB edges, 4.3 KB initializers); the lookup graph 10,648 bytes (1.47x;
9 nodes, 2.9 KB initializers: 1.9 KB of 4-bit table, 0.6 KB row scales, 0.2 KB index map).
Letter TAN 3-bit: ``.onnx`` 43,994; ONNX graph as ORT 62,472 (1.42x); lookup graph 44,920 (1.02x).
A sign FC DNN (letter, 64 hidden, 3-bit weights) stays the ONNX graph: 8,313 -> 20,112 (2.4x: the
fixed and per-node records on a small file). docs/guide/mobile-web.md compares its batch-1
latency with the ONNX graph's ORT file. onnxruntime's ORT format cannot store 4-bit tensors (UINT4 initializers
are refused on load), hence the packed uint8 data of GatherBlockQuantized.

``lowering="gather-grouped"`` (ONNX's lowering whose grouped tables are summed at load time) is
refused unless ``ort_optimization="basic"``: unfolded, every call would rebuild them; folded,
the file holds them as float32 (letter NB 3-bit: 2.1 MB).

``ort_optimization="basic"`` saves the ONNX exporter's graph after onnxruntime's basic
optimizations instead (constant folding: the table stored as float32, the default conversion's
choice): larger files (letter NB 3-bit 36,848 bytes), no per-call table build. Its exactness is
checked by the verifier like any export's.

Metadata
--------
The ONNX graph's ``metadata_props`` (the ``bnc_deploy`` JSON blob and the flat keys) are copied by
the serializer verbatim into the ORT model's ``metadata_props``, so the integrity placeholder is
in the bytes and the verifier seals the ``.ort`` file itself. Before the conversion the blob is
rewritten: ``"format": "ort"`` and ``"ort"``: ``{"onnxruntime": version that wrote the file,
"graph_optimization": "disabled" | "basic"}``. The operators a minimal build must include are
read from the file's graph (``formats.ort.ort_operators``; ``bnc-ort-config``, onnxruntime's own
config writer), not repeated in the metadata (they cost 0.2 KB there).

A minimal ORT build runs the file with the operators of its ``required_operators.config``
(``bnc-ort-config FILE.ort -o required_operators.config``; ``--types`` for type reduction).
Registered as the ``("bnc", "ort")`` and ``("dnn", "ort")`` exporters at the bottom.
"""

from __future__ import annotations

import inspect
import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters import onnx_bnc, onnx_dnn  # noqa: F401  (registered before their options are read)
from bnc_deploy.exporters._bnc_options import codes_of
from bnc_deploy.exporters._onnx_graph import (
    IR_VERSION_FOR_OPSET,
    GraphBuilder,
    PaddedLayout,
    bnc_model,
    set_export_metadata,
)
from bnc_deploy.exporters.base import Option, Refusal, exporter_for, register_exporter
from bnc_deploy.formats.bnc import OUTPUT_LOG_JOINT, export_metadata, lookup_constants
from bnc_deploy.formats.metadata import INPUT_NAME, METADATA_KEY, OUTPUT_LABEL, dump_metadata
from bnc_deploy.formats.ort import is_ort

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact
    from bnc_deploy.artifacts.dnn import DNNArtifact

#: ``ort_optimization`` choices -> onnxruntime's level (see the module docstring).
OPTIMIZATIONS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
}
#: Lowerings whose point is a table built at load time (refused with ``ort_optimization="disabled"``).
LOAD_TIME_LOWERINGS = ("gather-grouped",)
OPTIMIZATION = Option(
    "ort_optimization",
    "str",
    "disabled",
    tuple(OPTIMIZATIONS),
    "graph optimization before the ORT save: disabled (default: uint8 tables and int8 weights "
    "stored as in the ONNX file, smallest) or basic (constant folding: float tables, larger, "
    "no per-call table build)",
    noun="ORT optimization",
)
#: ``build_ort_bytes`` refuses each of ``LOAD_TIME_LOWERINGS`` unoptimized (its first check).
LOAD_TIME_REFUSALS = [
    Refusal(
        f"--lowering {lowering} builds its tables when a session loads the file, and ORT format sessions do "
        "not fold constants at load: every call would rebuild them (use --ort-optimization basic)",
        rf"--lowering {lowering} builds its tables when a session loads the file",
        options={"lowering": lowering, "ort_optimization": "disabled"},
    )
    for lowering in LOAD_TIME_LOWERINGS
]


def build_ort_bytes(
    artifact: BNCArtifact | DNNArtifact, *, ort_optimization: str = "disabled", **options: Any
) -> bytes:
    """The ``.ort`` file of ``artifact``: its ONNX export (``options`` are the ONNX exporter's),
    metadata marked ``format = "ort"``, converted by onnxruntime (module docstring)."""
    if ort_optimization not in OPTIMIZATIONS:
        raise ExportError(f"unknown ORT optimization {ort_optimization!r}; choose one of {', '.join(OPTIMIZATIONS)}")
    if options.get("lowering") in LOAD_TIME_LOWERINGS and ort_optimization == "disabled":
        raise ExportError(
            f"--lowering {options['lowering']} builds its tables when a session loads the file, and "
            "ORT format sessions do not fold constants at load: every call would rebuild them "
            "(letter NB 3-bit: 688 us instead of 26 us per row). Use --lowering gather, "
            "--ort-optimization basic (tables stored as float32: large), or --format onnx"
        )
    spec = exporter_for(artifact.kind, "onnx")
    resolved = spec.resolve_options(options)
    extra = onnx_bnc.lowering_auto_metadata(resolved.get("lowering_timings"))
    # kind "bnc" is a BNCArtifact (mypy cannot narrow the union by the kind string)
    bnc = cast("BNCArtifact", artifact)
    if artifact.kind == "bnc" and ort_optimization == "disabled" and ort_lookup_applies(bnc, **resolved):
        model = build_ort_lookup_model(bnc)  # the ORT lookup graph
    else:
        model = onnx.load_from_string(spec.build(artifact, **resolved))
    return convert_to_ort(_with_ort_metadata(model, ort_optimization, extra), ort_optimization)


def _with_ort_metadata(model: onnx.ModelProto, optimization: str, extra: Mapping[str, Any] | None = None) -> bytes:
    """``model``'s bytes with its ``bnc_deploy`` blob saying ``format`` ``ort`` and the ``ort`` facts."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    props = {p.key: p for p in copy.metadata_props}
    if METADATA_KEY not in props:
        raise ExportError("the ONNX exporter wrote no bnc_deploy metadata to convert")
    meta = json.loads(props[METADATA_KEY].value)
    meta["format"] = "ort"
    meta["ort"] = {"onnxruntime": ort.__version__, "graph_optimization": optimization}
    meta.update(extra or {})
    props[METADATA_KEY].value = dump_metadata(meta)
    data: bytes = copy.SerializeToString()
    return data


def convert_to_ort(onnx_bytes: bytes, optimization: str = "disabled") -> bytes:
    """ONNX bytes -> ORT format bytes, written by onnxruntime's serializer at ``optimization``.

    The session is created only to serialize the graph (ORT format is written by the session that
    loaded the model); it is never run."""
    options = ort.SessionOptions()
    options.graph_optimization_level = OPTIMIZATIONS[optimization]
    options.add_session_config_entry("session.save_model_format", "ORT")
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="bnc-ort-") as folder:
        target = Path(folder) / "model.ort"
        options.optimized_model_filepath = str(target)
        try:
            ort.InferenceSession(onnx_bytes, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own (non-RuntimeError) types
            text = str(exc).strip().splitlines()
            raise ExportError(
                f"onnxruntime could not convert the ONNX export to ORT format "
                f"({text[0] if text else type(exc).__name__})"
            ) from None
        if not target.is_file():
            raise ExportError("onnxruntime did not write the ORT format file")
        data = target.read_bytes()
    if not is_ort(data):
        raise ExportError("onnxruntime wrote a file without the ORT format identifier")
    return data


# ================================================================================================
# The ORT lookup graph (quantized NB/TAN, ``gather``, codes input; module docstring)
# ================================================================================================
#: Opset of the ORT lookup graph's default domain: 12 is the last with ReduceSum's ``axes`` as an
#: attribute (an initializer less per reduction in the ORT file) and the first with an int64 Clip.
ORT_LOOKUP_OPSET = 12
#: The contrib domain of ``GatherBlockQuantized`` (onnxruntime >= 1.20; CPU, WebAssembly, mobile).
MS_DOMAIN = "com.microsoft"


def ort_lookup_applies(
    artifact: BNCArtifact,
    *,
    raw_inputs: bool = False,
    lowering: str = "gather",
    pack_bits: bool = False,
    pack_words: bool = False,
    **_: Any,
) -> bool:
    """Whether :func:`build_ort_lookup_model` covers this export: a quantized NB or TAN model,
    ``gather`` lowering, code inputs, no bit-planes or packed words (those take the ONNX graph that
    implements them), a padded layout, and fewer than 2**16 table rows."""
    return (
        artifact.is_quantized
        and lowering == "gather"
        and not raw_inputs
        and not pack_bits
        and not pack_words
        and artifact.n_features > 0
        and onnx_bnc.padded_layout(artifact) is not None
        and artifact.n_rows + 1 < 2**16
    )


def ort_lookup_storage(artifact: BNCArtifact) -> tuple[int, bool]:
    """``(bits, prior_folded)`` of the ORT lookup table: the prior is folded into feature 0's rows
    when the sums fit a byte (``B <= 7``); the stored values (codes, or code + prior codes for
    feature 0) take 4 bits, two a byte, when they are all below 16 and the class count is even
    (letter NB 3-bit), else one byte each."""
    max_code = int(codes_of(artifact).quantizer.max_code)
    folded = 2 * max_code <= 255
    largest = 2 * max_code if folded else max_code
    return (4 if largest < 16 and artifact.n_classes % 2 == 0 else 8), folded


def build_ort_lookup_model(artifact: BNCArtifact) -> onnx.ModelProto:
    """The graph this exporter converts for quantized NB and TAN models (``ort_lookup_applies``).

    An ORT format session never folds constants, so the ONNX graph's load-time table build (19 of
    its 28 nodes) would run on every call, and the ORT file stores a type/shape record per tensor
    and edges and kernel type records per node (about 400 bytes a node). This graph has no
    load-time nodes; the table is stored as the op reads it:

    * ``c = Clip(x, -1, K)``: the guard, as in the ``clip`` layout;
    * ``r = Cast(GatherElements(M, c), int32)``: ``M`` [K + 1, D] (uint8; uint16 from 256 table rows)
      maps clipped code ``j`` of feature ``i`` to its row ``offset_i + j`` of the stacked table, or
      to the NaN row ``R`` when ``j`` is invalid (:func:`_ort_row_map`; TAN: indexed by ``a * W + b``);
    * ``g = GatherBlockQuantized(T, r, S, Z)`` (com.microsoft, onnxruntime >= 1.20): the looked-up
      rows dequantized, ``(q - 0) * S[row]`` with ``S = -2**-B_F`` for the model's rows and NaN for
      row ``R`` (so one invalid code makes its row of ``log_joint`` NaN, as in the ONNX graph);
      exact (a small integer times a power of two);
    * ``log_joint = ReduceSum(g, axis 1)``; ``label = Where(IsNaN(ReduceSum(log_joint, axis 1)),
      -1, ArgMax(log_joint))`` (first maximum). Every partial sum is an integer multiple of the
      step below ``2**24``: bit-identical to the ONNX export.

    The table ``T`` (``ort_lookup_storage``, :func:`_ort_table`): the class prior is folded into
    feature 0's rows (all ``rows_per_feature[0]`` of them; every valid row reads exactly one; the
    ONNX graph does the same ``C`` additions once at load time, here they are done at export:
    ``prior_folded_into_feature = 0`` in the metadata, which the graph counter credits as folded
    additions), and the values are stored in 4 bits, two a byte, when they fit (letter NB 3-bit:
    codes + prior codes <= 14), else one a byte. 8-bit models (code + prior may exceed a byte) keep
    the prior apart and add it per call (``Add``).

    Per call 9 nodes for NB, 12 for TAN (the ONNX graph: 8 and 12 after its load-time folding; as
    ORT files they ran all 28 and 43). Letter NB 3-bit: 10,648 bytes (``.onnx`` 7,266); letter TAN
    3-bit: 44,920 (``.onnx`` 43,994; the ONNX graph as ORT: 62,472).
    Metadata: ``opset`` 12 (``ORT_LOOKUP_OPSET``, whatever ``--opset`` says), ``table_storage``
    ``uint4x2`` or ``uint8``, ``index_guard`` ``clip``.
    """
    if not ort_lookup_applies(artifact):
        raise ExportError(
            "the ORT lookup graph covers quantized NB/TAN models with the gather lowering and code inputs"
        )
    bits, folded = ort_lookup_storage(artifact)
    g = _ort_lookup_graph(artifact, bits, folded)
    model = bnc_model(
        g,
        artifact,
        TensorProto.INT64,
        [helper.make_opsetid("", ORT_LOOKUP_OPSET), helper.make_opsetid(MS_DOMAIN, 1)],
        IR_VERSION_FOR_OPSET[13],
    )  # IR 7: opsets 12 and 13
    meta = export_metadata(
        artifact,
        format="onnx",
        lowering="gather",
        input_dtype="int64",
        opset=ORT_LOOKUP_OPSET,
        extra={
            "n_nodes": len(g.nodes),
            "table_storage": "uint4x2" if bits == 4 else "uint8",
            "exact": True,
            "index_guard": "clip",
            "lookups_per_row": artifact.n_features,
            **({"prior_folded_into_feature": 0} if folded else {}),
        },
    )
    set_export_metadata(model, meta)
    onnx.checker.check_model(model)
    return model


def _ort_row_map(artifact: BNCArtifact, k: int) -> np.ndarray:
    """The index map ``M`` int64 from clipped codes to stacked-table rows (``n_rows``: the NaN row).

    NB: [K + 1, D], row ``j`` of feature ``i`` is ``offset_i + j`` (``-1`` indexes row ``K`` from
    the end, which is invalid for every feature). TAN: [(K + 2)**2, D] indexed by ``a * W + b``
    (``W = K + 2``; ``a`` the clipped code, ``b`` its parent's; a root's own code stands in for the
    parent's and the root's row ignores it); negative values index from the end, and the rows hold
    every pair once; a pair with an invalid code maps to the NaN row."""
    d, n_rows = artifact.n_features, artifact.n_rows
    constants = lookup_constants(artifact)
    offsets, strides = constants["offsets"], constants["strides"]
    parents = [int(p) for p in artifact.parents]
    if not any(p >= 0 for p in parents):
        row_map = np.full((k + 1, d), n_rows, dtype=np.int64)  # invalid -> the NaN row
        for i, card in enumerate(artifact.cardinalities):
            row_map[: int(card), i] = offsets[i] + np.arange(int(card))
        return row_map
    width = k + 2
    row_map = np.full((width * width, d), n_rows, dtype=np.int64)
    for i, card in enumerate(artifact.cardinalities):
        p = parents[i]
        b = np.arange(-1, k + 1) if p < 0 else np.arange(int(artifact.cardinalities[p]))
        for a in range(int(card)):  # a root reads its own code as "parent": any b
            rows = offsets[i] + a if p < 0 else offsets[i] + a * strides[i] + b
            row_map[(a * width + b) % (width * width), i] = rows
    return row_map


def _ort_table(artifact: BNCArtifact, bits: int, folded: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(T, S)``: the stored codes (with the NaN row ``n_rows`` of zeros; the prior added to
    feature 0's rows when ``folded``; two 4-bit values a byte, low nibble first, when ``bits`` is 4)
    and the per-row scales float32 [n_rows + 1, 1] (``-2**-B_F``; NaN for the NaN row)."""
    n_rows = artifact.n_rows
    values = np.vstack([codes_of(artifact).table, np.zeros((1, artifact.n_classes), dtype=np.uint8)]).astype(np.int64)
    if folded:
        values[: int(artifact.rows_per_feature[0])] += codes_of(artifact).prior  # feature 0: rows 0 ..
    if bits == 4:
        table = (values[:, 0::2] | (values[:, 1::2] << 4)).astype(np.uint8)  # low nibble first
    else:
        table = values.astype(np.uint8)
    scales = np.full((n_rows + 1, 1), -codes_of(artifact).quantizer.step, dtype=np.float32)
    scales[n_rows] = np.nan
    return table, scales


def _ort_lookup_graph(artifact: BNCArtifact, bits: int, folded: bool) -> GraphBuilder:
    """The nodes and initializers of :func:`build_ort_lookup_model` (one-letter initializer names:
    each is stored in the file)."""
    c, n_rows = artifact.n_classes, artifact.n_rows
    k = PaddedLayout(artifact).max_code
    parents = [int(p) for p in artifact.parents]
    row_map = _ort_row_map(artifact, k)
    table, scales = _ort_table(artifact, bits, folded)
    g = GraphBuilder()
    g.const("T", table)
    g.const("S", scales)
    g.const("Z", np.zeros((n_rows + 1, 1), dtype=np.uint8))  # zero points (packed: 0)
    g.const("m", np.array(-1, dtype=np.int64))
    g.const("K", np.array(k, dtype=np.int64))
    g.const("M", row_map.astype(np.uint8 if n_rows < 256 else np.uint16))  # n_rows: the NaN row
    clipped = g.op("Clip", [INPUT_NAME, "m", "K"])
    if any(p >= 0 for p in parents):
        g.const("p", np.array([p if p >= 0 else i for i, p in enumerate(parents)], dtype=np.int64))
        g.const("W", np.array(k + 2, dtype=np.int64))
        parent_codes = g.op("Gather", [clipped, "p"], axis=1)
        clipped = g.op("Add", [g.op("Mul", [clipped, "W"]), parent_codes])
    rows = g.op("Cast", [g.op("GatherElements", ["M", clipped], axis=0)], to=TensorProto.INT32)
    looked_up = g.op(
        "GatherBlockQuantized",
        ["T", rows, "S", "Z"],
        domain=MS_DOMAIN,
        bits=bits,
        gather_axis=0,
        quantize_axis=1,
        block_size=max(16, 1 << int(np.ceil(np.log2(max(c, 2))))),
    )
    if folded:
        log_joint = g.op("ReduceSum", [looked_up], OUTPUT_LOG_JOINT, axes=[1], keepdims=0)
    else:
        codes = codes_of(artifact)
        g.const("P", (-codes.prior.astype(np.float32) * np.float32(codes.quantizer.step)))
        log_joint = g.op("Add", [g.op("ReduceSum", [looked_up], axes=[1], keepdims=0), "P"], OUTPUT_LOG_JOINT)
    best = g.op("ArgMax", [log_joint], axis=1, keepdims=0)
    invalid = g.op("IsNaN", [g.op("ReduceSum", [log_joint], axes=[1], keepdims=0)])
    g.op("Where", [invalid, "m", best], OUTPUT_LABEL)
    return g


def _builder(kind: str) -> Callable[..., bytes]:
    """``build(artifact, **options)`` for ``kind`` whose signature is the ONNX exporter's plus
    ``ort_optimization`` (the registry checks declared options against the build's keywords)."""
    onnx_build = exporter_for(kind, "onnx").build

    def build(artifact: BNCArtifact | DNNArtifact, **options: Any) -> bytes:
        return build_ort_bytes(artifact, **options)

    parameters = list(inspect.signature(onnx_build).parameters.values())
    parameters.append(
        inspect.Parameter(
            "ort_optimization", inspect.Parameter.KEYWORD_ONLY, default=OPTIMIZATION.default, annotation=str
        )
    )
    build.__dict__["__signature__"] = inspect.Signature(parameters, return_annotation=bytes)  # what inspect reads
    build.__name__ = build.__qualname__ = f"build_ort_{kind}"
    build.__doc__ = (
        f"The ``.ort`` file of a {kind} artifact: its ONNX export with the ONNX exporter's options, "
        "converted (module docstring)."
    )
    return build


build_ort_bnc = _builder("bnc")
build_ort_dnn = _builder("dnn")

register_exporter(
    "bnc",
    "ort",
    build_ort_bnc,
    extension=".ort",
    runtime="onnxruntime",
    description="ONNX Runtime's ORT format (ORT Mobile): quantized NB/TAN as a lookup graph with the codes "
    "stored small (4 bits where they fit), else the ONNX export unoptimized",
    options=[*exporter_for("bnc", "onnx").options, OPTIMIZATION],
    refusals=[*exporter_for("bnc", "onnx").refusals, *LOAD_TIME_REFUSALS],
)  # the ONNX build's refusals, and its own
register_exporter(
    "dnn",
    "ort",
    build_ort_dnn,
    extension=".ort",
    runtime="onnxruntime",
    description="ONNX Runtime's ORT format (ORT Mobile): the ONNX export, unoptimized, int8 weights kept",
    options=[*exporter_for("dnn", "onnx").options, OPTIMIZATION],
    refusals=exporter_for("dnn", "onnx").refusals,
)
