"""ORT format exporter (ONNX Runtime Mobile / React Native / minimal builds) for BN and DNN models.

What it builds
--------------
The ONNX exporter's file (``exporter_for(kind, "onnx").build``, with the ONNX exporter's own
options, declared here as it declares them), converted to ONNX Runtime's ORT flatbuffer format by
onnxruntime's own serializer: an ``InferenceSession`` is created on the ONNX bytes with
``graph_optimization_level = ORT_DISABLE_ALL`` (``ort_optimization="basic"``: ``ORT_ENABLE_BASIC``)
and ``session.save_model_format = ORT``, and the file it saves (``optimized_model_filepath``) is
the export. Creating that session is a build step
- the serializer lives in the session - not a run: no input is fed, nothing is decided from
outputs. The verifier then runs the ``.ort`` file in onnxruntime like any ONNX export
(``runtimes.onnxruntime_adapter`` reads ``.ort``), against the reference, before publishing it.

Why no graph optimization: the default conversion (``python -m onnxruntime.tools
.convert_onnx_models_to_ort``, or any optimization level) constant-folds the in-graph table
construction of the BN graph (uint8 codes -> ``-code * 2**-B_F``), storing the table as float32:
letter NB 3-bit grows from 16,120 to 24,896 bytes (ONNX: 6,360). Unoptimized, every initializer
is stored as the ONNX file has it (uint8 tables, int8 DNN weights, bit-planes with ``pack_bits``),
and the graph is node for node the ONNX graph, so the computation - and its exactness, recorded
as the ONNX file's ``exact`` - is the ONNX export's. The price: a session on an ``.ort`` file
does not fold constant subgraphs at load time (ORT format models get only their saved runtime
optimizations), so the BN graph rebuilds its float32 table from the uint8 codes on every call -
measured on letter NB 3-bit, batch-1 latency about 40 us against 19 us for the ``.onnx`` file
(onnxruntime 1.32, 1 thread, this 2-core host; the README has the table).

``lowering="gather-grouped"`` (ONNX's lowering whose grouped tables are summed at load time) is
refused unless ``ort_optimization="basic"``: unfolded, every call rebuilt them (letter NB 3-bit:
688 us per row against 26 us for the ``.onnx``); folded, the file holds them as float32 (2.1 MB).

``ort_optimization="basic"`` saves after onnxruntime's basic optimizations instead (constant
folding: the table stored as float32, the default conversion's choice): larger files (letter NB
3-bit 36,848 bytes), no per-call table build. Its exactness is checked by the verifier like any
export's.

Size: an ORT file carries per-tensor type and shape records, node edges and a kernel-type
resolver for minimal builds, a fixed overhead of roughly 0.5 KB per node: small models grow
(letter NB 3-bit, 20 nodes: 6,360 -> 16,120 bytes), large tables do not (see the README's "Mobile
and web" for measured sizes).

Metadata
--------
The ONNX file's ``metadata_props`` (the ``bnc_deploy`` JSON blob and the flat keys) are copied by
the serializer verbatim into the ORT model's ``metadata_props``, so the integrity placeholder is
in the bytes and the verifier seals the ``.ort`` file itself. Before the conversion the blob is
rewritten: ``"format": "ort"`` and ``"ort"``: ``{"onnxruntime": version that wrote the file,
"graph_optimization": "disabled" | "basic", "operators": {domain: {since_version: [op types]}}}`` -
the operators a minimal build must include, read from the converted graph (a first conversion;
the second, with the final metadata, gives the same graph), the same set ``bnc-ort-config``
(onnxruntime's own config writer) reads back from the file.

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
from bnc_deploy.formats.ort import is_ort, ort_operators

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
    model = onnx.load_from_string(spec.build(artifact, **spec.resolve_options(options)))
    # The operators come from the converted graph (optimization may remove some): convert once to
    # read them, then again with them in the metadata (the same graph: the metadata is not an input).
    first = convert_to_ort(_with_ort_metadata(model, ort_optimization, {}), ort_optimization)
    data = convert_to_ort(_with_ort_metadata(model, ort_optimization, ort_operators(first)), ort_optimization)
    if ort_operators(data) != ort_operators(first):
        raise ExportError("onnxruntime converted the same graph differently twice; please report this with "
                          f"onnxruntime {ort.__version__}")
    return data


def _with_ort_metadata(model, optimization: str, operators: dict) -> bytes:
    """``model``'s bytes with its ``bnc_deploy`` blob saying ``format`` ``ort`` and the ``ort`` facts."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    props = {p.key: p for p in copy.metadata_props}
    if METADATA_KEY not in props:
        raise ExportError("the ONNX exporter wrote no bnc_deploy metadata to convert")
    meta = json.loads(props[METADATA_KEY].value)
    meta["format"] = "ort"
    meta["ort"] = {"onnxruntime": ort.__version__, "graph_optimization": optimization, "operators": operators}
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
    description="ONNX Runtime's ORT format (ORT Mobile): the ONNX export, unoptimized, uint8 tables kept",
    options=[*exporter_for("bnc", "onnx").options, OPTIMIZATION])
register_exporter(
    "dnn", "ort", build_ort_dnn, extension=".ort", runtime="onnxruntime",
    description="ONNX Runtime's ORT format (ORT Mobile): the ONNX export, unoptimized, int8 weights kept",
    options=[*exporter_for("dnn", "onnx").options, OPTIMIZATION])
