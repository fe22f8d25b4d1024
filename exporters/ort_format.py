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
  disabled (the default case): the ORT lookup graph** (``onnx_bnc.build_ort_lookup_model``, built
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
fixed and per-node records on a small file).
Batch-1 latency (1 thread): about 19 us against 40 us for the ONNX graph's ORT file (the README
has the table). onnxruntime's ORT format cannot store 4-bit tensors (UINT4 initializers are refused
on load), hence the packed uint8 data of GatherBlockQuantized.

``lowering="gather-grouped"`` (ONNX's lowering whose grouped tables are summed at load time) is
refused unless ``ort_optimization="basic"``: unfolded, every call rebuilt them (letter NB 3-bit:
688 us per row against 26 us for the ``.onnx``); folded, the file holds them as float32 (2.1 MB).

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
from pathlib import Path

import onnx
import onnxruntime as ort

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters import onnx_bnc, onnx_dnn  # noqa: F401  (registered before their options are read)
from bnc_deploy.exporters.base import Option, exporter_for, register_exporter
from bnc_deploy.formats.metadata import METADATA_KEY, dump_metadata
from bnc_deploy.formats.ort import is_ort

#: ``ort_optimization`` choices -> onnxruntime's level (see the module docstring).
OPTIMIZATIONS = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                 "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC}
#: Lowerings whose point is a table built at load time (refused with ``ort_optimization="disabled"``).
LOAD_TIME_LOWERINGS = ("gather-grouped",)
OPTIMIZATION = Option("ort_optimization", "str", "disabled", tuple(OPTIMIZATIONS),
                      "graph optimization before the ORT save: disabled (default: uint8 tables and int8 weights "
                      "stored as in the ONNX file, smallest) or basic (constant folding: float tables, larger, "
                      "no per-call table build)")


def build_ort_bytes(artifact, *, ort_optimization: str = "disabled", **options) -> bytes:
    """The ``.ort`` file of ``artifact``: its ONNX export (``options`` are the ONNX exporter's),
    metadata marked ``format = "ort"``, converted by onnxruntime (module docstring)."""
    if ort_optimization not in OPTIMIZATIONS:
        raise ExportError(f"unknown ORT optimization {ort_optimization!r}; choose one of {', '.join(OPTIMIZATIONS)}")
    if options.get("lowering") in LOAD_TIME_LOWERINGS and ort_optimization == "disabled":
        raise ExportError(f"--lowering {options['lowering']} builds its tables when a session loads the file, and "
                          "ORT format sessions do not fold constants at load: every call would rebuild them "
                          "(letter NB 3-bit: 688 us instead of 26 us per row). Use --lowering gather, "
                          "--ort-optimization basic (tables stored as float32: large), or --format onnx")
    spec = exporter_for(artifact.kind, "onnx")
    resolved = spec.resolve_options(options)
    extra = onnx_bnc.lowering_auto_metadata(resolved.get("lowering_timings"))
    if artifact.kind == "bnc" and ort_optimization == "disabled" and onnx_bnc.ort_lookup_applies(artifact, **resolved):
        model = onnx_bnc.build_ort_lookup_model(artifact)                       # the ORT lookup graph
    else:
        model = onnx.load_from_string(spec.build(artifact, **resolved))
    return convert_to_ort(_with_ort_metadata(model, ort_optimization, extra), ort_optimization)


def _with_ort_metadata(model, optimization: str, extra: dict | None = None) -> bytes:
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
    return copy.SerializeToString()


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
            raise ExportError(f"onnxruntime could not convert the ONNX export to ORT format "
                              f"({text[0] if text else type(exc).__name__})") from None
        if not target.is_file():
            raise ExportError("onnxruntime did not write the ORT format file")
        data = target.read_bytes()
    if not is_ort(data):
        raise ExportError("onnxruntime wrote a file without the ORT format identifier")
    return data


def _builder(kind: str):
    """``build(artifact, **options)`` for ``kind`` whose signature is the ONNX exporter's plus
    ``ort_optimization`` (the registry checks declared options against the build's keywords)."""
    onnx_build = exporter_for(kind, "onnx").build

    def build(artifact, **options) -> bytes:
        return build_ort_bytes(artifact, **options)

    parameters = list(inspect.signature(onnx_build).parameters.values())
    parameters.append(inspect.Parameter("ort_optimization", inspect.Parameter.KEYWORD_ONLY,
                                        default=OPTIMIZATION.default, annotation=str))
    build.__signature__ = inspect.Signature(parameters, return_annotation=bytes)
    build.__name__ = build.__qualname__ = f"build_ort_{kind}"
    build.__doc__ = (f"The ``.ort`` file of a {kind} artifact: its ONNX export with the ONNX exporter's options, "
                     "converted (module docstring).")
    return build


build_ort_bnc = _builder("bnc")
build_ort_dnn = _builder("dnn")

register_exporter(
    "bnc", "ort", build_ort_bnc, extension=".ort", runtime="onnxruntime",
    description="ONNX Runtime's ORT format (ORT Mobile): quantized NB/TAN as a lookup graph with the codes "
                "stored small (4 bits where they fit), else the ONNX export unoptimized",
    options=[*exporter_for("bnc", "onnx").options, OPTIMIZATION])
register_exporter(
    "dnn", "ort", build_ort_dnn, extension=".ort", runtime="onnxruntime",
    description="ONNX Runtime's ORT format (ORT Mobile): the ONNX export, unoptimized, int8 weights kept",
    options=[*exporter_for("dnn", "onnx").options, OPTIMIZATION])
