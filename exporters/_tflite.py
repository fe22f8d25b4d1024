"""What both TFLite exporters share: importing TensorFlow quietly, the int8 fake-quant idioms that
pin a tensor's quantization, the operator rules every TFLite export obeys, and the TFLite Micro
profile's pieces (TFLM's operators, the REDUCE_MAX guard, the int32 label, the arena measurement
with the ``tflite-micro`` interpreter when it is installed) and the web profile's (int32 label, no
int64 tensors, a static batch).

A private helper module (the leading underscore keeps the exporter registry from treating it as
an exporter); it builds nothing on its own.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from numpy.typing import DTypeLike

from bnc_deploy.errors import ExportError, MissingExtraError
from bnc_deploy.formats.tflite import TFLiteSummary, captured_native_stderr, inspect_tflite

#: The TensorFlow module (:func:`tensorflow`) and its dtypes, and the tensors of a traced graph:
#: TensorFlow ships no type information, so both are ``Any`` to mypy.
TF: TypeAlias = Any
Tensor: TypeAlias = Any

if TYPE_CHECKING:
    from bnc_deploy.formats.tflite_metadata import ModelMetadata

#: Largest int8 weight (TFLite int8 weights are symmetric: -127..127, zero point 0).
INT8_WEIGHT_MAX = 127
#: Comparison operators LiteRT must only see on non-int8 operands (an int8 GREATER aborts the process).
COMPARISON_OPS = ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL")
#: Operators that must never appear in an exported file (no Flex/custom ops, no delegates; ONE_HOT
#: is mis-quantized by the converter, see exporters.tflite_bnc).
FORBIDDEN_OPS = ("ONE_HOT", "CUSTOM", "DELEGATE")


def tensorflow() -> TF:
    """Import TensorFlow lazily (an export-time dependency only), with its C++ logging quiet."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("TFLite export", "convert", exc) from None
    return tf


def check_builtin_ops(summary: TFLiteSummary, int8_refused: Collection[str] = COMPARISON_OPS) -> None:
    """ExportError unless every operator of a converted file (``formats.tflite.inspect_tflite``) is
    a builtin that is not forbidden (no Flex/custom ops, no ONE_HOT) and none of ``int8_refused``
    has an int8 operand (LiteRT aborts the process on an int8 comparison)."""
    bad = [n for n in summary.op_names if n.startswith("CUSTOM") or n in FORBIDDEN_OPS or "FLEX" in n.upper()]
    if bad:
        raise ExportError(f"converted model uses non-builtin or forbidden operators {sorted(set(bad))}")
    for op in summary.ops:
        if op.name in int8_refused and any(i >= 0 and summary.tensors[i].dtype == "INT8" for i in op.inputs):
            raise ExportError(
                f"the converter left {op.name} (op #{op.index}) on int8 operands, which LiteRT "
                "cannot run; please report this with your TensorFlow version"
            )


def fake_quant(tf: TF, value: Tensor, low: float, high: float, narrow: bool = False) -> Tensor:
    """Fix a tensor's int8 quantization through its range (8 bits: scale = (high - low) / levels)."""
    return tf.quantization.fake_quant_with_min_max_args(
        value, min=float(low), max=float(high), num_bits=8, narrow_range=narrow
    )


def int8_weights(tf: TF, units: np.ndarray, scale: float) -> Tensor:
    """Constant int8 weights ``units`` (integers in -127..127) with per-tensor scale ``scale``, zero point 0."""
    w = tf.constant(np.asarray(units, dtype=np.float64).astype(np.float32) * np.float32(scale))
    return fake_quant(tf, w, -INT8_WEIGHT_MAX * scale, INT8_WEIGHT_MAX * scale, narrow=True)


# ================================================================================================
# The TFLite Micro profile (``profile="micro"``), shared by both TFLite exporters
# ================================================================================================
#: Export profiles: ``default`` (LiteRT: dynamic batch where the lowering allows it, int64 label,
#: REDUCE_ANY guard), ``micro`` (TFLite Micro: static batch 1, int32 label, a guard without
#: REDUCE_ANY, only operators and operand types the TFLM reference kernels take) and ``web``
#: (LiteRT.js in a browser, LiteRT on Android/iOS: the default graph with an int32 label, no int64
#: tensor anywhere, and a static batch of ``web_batch`` rows).
PROFILES = ("default", "micro", "web")
PROFILE_HELP = (
    "default (LiteRT), micro (a file the TFLite Micro interpreter runs - static batch 1, int32 "
    "label, only TFLM builtin ops; its metadata records the tensor arena bytes measured with "
    "tflite-micro when that is installed) or web (LiteRT.js / mobile: int32 label, no int64 "
    "tensors, static batch --web-batch)"
)
#: Builtin operators TFLM's op resolver can register (``MicroMutableOpResolver::Add*`` of
#: tflite-micro, 2026; ``CUSTOM`` left out). A micro-profile file uses only these; the kernels'
#: operand types are narrower than LiteRT's (no uint8/int64 operands, GATHER params int8/float32,
#: SUM/REDUCE_MAX float32/int8, ARG_MAX float32/int8 -> int32, SELECT_V2 float32/int8/int16), which
#: the micro lowerings respect and :func:`check_micro_contract` checks where it can.
TFLM_BUILTIN_OPS = frozenset(
    (
        "ABS",
        "ADD",
        "ADD_N",
        "ARG_MAX",
        "ARG_MIN",
        "ASSIGN_VARIABLE",
        "AVERAGE_POOL_2D",
        "BATCH_MATMUL",
        "BATCH_TO_SPACE_ND",
        "BROADCAST_ARGS",
        "BROADCAST_TO",
        "CALL_ONCE",
        "CAST",
        "CEIL",
        "CONCATENATION",
        "CONV_2D",
        "COS",
        "CUMSUM",
        "DEPTHWISE_CONV_2D",
        "DEPTH_TO_SPACE",
        "DEQUANTIZE",
        "DIV",
        "DYNAMIC_UPDATE_SLICE",
        "ELU",
        "EMBEDDING_LOOKUP",
        "EQUAL",
        "EXP",
        "EXPAND_DIMS",
        "FILL",
        "FLOOR",
        "FLOOR_DIV",
        "FLOOR_MOD",
        "FULLY_CONNECTED",
        "GATHER",
        "GATHER_ND",
        "GREATER",
        "GREATER_EQUAL",
        "HARD_SWISH",
        "IF",
        "L2_NORMALIZATION",
        "L2_POOL_2D",
        "LEAKY_RELU",
        "LESS",
        "LESS_EQUAL",
        "LOG",
        "LOGICAL_AND",
        "LOGICAL_NOT",
        "LOGICAL_OR",
        "LOGISTIC",
        "LOG_SOFTMAX",
        "MAXIMUM",
        "MAX_POOL_2D",
        "MEAN",
        "MINIMUM",
        "MIRROR_PAD",
        "MUL",
        "NEG",
        "NOT_EQUAL",
        "PACK",
        "PAD",
        "PADV2",
        "PRELU",
        "QUANTIZE",
        "READ_VARIABLE",
        "REDUCE_ALL",
        "REDUCE_MAX",
        "REDUCE_MIN",
        "RELU",
        "RELU6",
        "RESHAPE",
        "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR",
        "REVERSE_V2",
        "ROUND",
        "RSQRT",
        "SELECT_V2",
        "SHAPE",
        "SIN",
        "SLICE",
        "SOFTMAX",
        "SPACE_TO_BATCH_ND",
        "SPACE_TO_DEPTH",
        "SPLIT",
        "SPLIT_V",
        "SQRT",
        "SQUARE",
        "SQUARED_DIFFERENCE",
        "SQUEEZE",
        "STRIDED_SLICE",
        "SUB",
        "SUM",
        "SVDF",
        "TANH",
        "TRANSPOSE",
        "TRANSPOSE_CONV",
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        "UNPACK",
        "VAR_HANDLE",
        "WHILE",
        "ZEROS_LIKE",
    )
)
#: Operators a micro file never uses although TFLM has them: REDUCE_ALL reached TFLM only in
#: January 2026, so a device build from an older TFLM would not have it (the guard uses REDUCE_MAX).
MICRO_AVOIDED_OPS = ("REDUCE_ALL",)
#: Tensor types TFLM kernels do not take as operands of the ops a micro file uses.
MICRO_FORBIDDEN_DTYPES = ("INT64", "UINT8")
#: Static batch of a micro file.
MICRO_BATCH = 1
#: Label dtype of a micro file (TFLM's ARG_MAX/ARG_MIN write int32 only).
MICRO_LABEL_DTYPE = "int32"
#: Extra bytes the ``tflm`` runtime adds to the recorded arena (alignment of another allocation).
ARENA_SLACK = 256
#: The guard of a micro file, as stored in its metadata (``tflm.guard``).
MICRO_GUARD_NOTE = (
    "REDUCE_MAX(CAST(x != clip(x))) > 0.5; label (ARG_MAX + 1) * valid - 1: -1 in int32 on any build; "
    "NaN scores need IEEE floats (not -ffast-math)"
)


def check_profile(profile: str, web_batch: int = 1) -> str:
    """``profile`` if known and ``web_batch`` fits it (ExportError saying why otherwise)."""
    if profile not in PROFILES:
        raise ExportError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if (
        isinstance(web_batch, bool)
        or not isinstance(web_batch, (int, np.integer))
        or not 1 <= int(web_batch) <= WEB_MAX_BATCH
    ):
        raise ExportError(f"--web-batch must be an integer in 1..{WEB_MAX_BATCH}, got {web_batch!r}")
    if int(web_batch) != WEB_BATCH and profile != "web":
        raise ExportError(f"--web-batch applies to --profile web only (this export's profile is {profile})")
    return profile


# ================================================================================================
# The web profile (``profile="web"``), shared by both TFLite exporters
# ================================================================================================
#: Default static batch of a web file (``--web-batch``). LiteRT.js (``@litertjs/core``) refuses a
#: dynamic batch dimension, so a web file fixes it; a runtime runs any number of rows in chunks of
#: it (``runtimes.litert_adapter`` pads the last chunk).
WEB_BATCH = 1
#: Largest ``--web-batch`` accepted (a static input of this many rows is allocated up front).
WEB_MAX_BATCH = 4096
#: Label dtype of a web file: LiteRT.js refuses int64 tensors ("Element type INT64 is not supported").
WEB_LABEL_DTYPE = "int32"
#: Tensor types a web file never holds (JavaScript typed arrays have no int64 LiteRT.js maps).
WEB_FORBIDDEN_DTYPES = ("INT64",)
WEB_BATCH_HELP = (
    f"--profile web: the static batch size of the file (default {WEB_BATCH}); a runtime runs any "
    "number of rows in chunks of it"
)


def check_web_contract(summary: TFLiteSummary, batch_shape: Sequence[int]) -> None:
    """ExportError unless no tensor is int64 and the input has the static shape ``batch_shape``."""
    bad = sorted({t.dtype for t in summary.tensors if t.dtype in WEB_FORBIDDEN_DTYPES})
    if bad:
        names = sorted({t.name for t in summary.tensors if t.dtype in WEB_FORBIDDEN_DTYPES})[:5]
        raise ExportError(
            f"the web profile produced {', '.join(bad)} tensors ({', '.join(names)}), which LiteRT.js does not take"
        )
    x = summary.tensors[summary.inputs[0]]
    if list(x.shape_signature) != list(batch_shape) or list(x.shape) != list(batch_shape):
        raise ExportError(f"web input shape {x.shape_signature}, expected the static {batch_shape}")


def web_metadata(batch: int) -> dict[str, Any]:
    """The web facts a file's metadata records."""
    return {"profile": "web", "batch": f"static {int(batch)}", "label_dtype": WEB_LABEL_DTYPE}


def micro_invalid(tf: TF, bad: Tensor) -> Tensor:
    """Row flag of a micro file: ``bad`` bool [1, D] -> invalid bool [1] (REDUCE_MAX of a float
    CAST; TFLM's SUM/REDUCE_MAX take float32/int8 only, and REDUCE_ANY is not in TFLM)."""
    return tf.greater(tf.reduce_max(tf.cast(bad, tf.float32), axis=1), tf.constant(0.5, tf.float32))


def micro_label(tf: TF, scores: Tensor, invalid: Tensor) -> Tensor:
    """``label int32 [1] = (ARG_MAX(scores) + 1) * valid - 1``: first maximum, -1 on invalid rows.

    Integer arithmetic, not SELECT: TFLM's SELECT_V2 takes float32/int8/int16 only, and ARG_MAX
    writes int32 only."""
    best = tf.argmax(scores, axis=1, output_type=tf.int32)
    valid = tf.cast(tf.logical_not(invalid), tf.int32)
    return (best + tf.constant(1, tf.int32)) * valid - tf.constant(1, tf.int32)


def check_micro_contract(summary: TFLiteSummary, batch_shape: Sequence[int]) -> None:
    """ExportError unless every op is a TFLM builtin (and not one avoided), no tensor is int64 or
    uint8, and the input has the static shape ``batch_shape``."""
    ops = sorted(set(summary.op_names))
    outside = [n for n in ops if n not in TFLM_BUILTIN_OPS or n in MICRO_AVOIDED_OPS]
    if outside:
        raise ExportError(f"the micro profile produced operators TFLite Micro does not provide: {outside}")
    bad = sorted({t.dtype for t in summary.tensors if t.dtype in MICRO_FORBIDDEN_DTYPES})
    if bad:
        raise ExportError(
            f"the micro profile produced {', '.join(bad)} tensors, which TFLite Micro kernels do not take"
        )
    x = summary.tensors[summary.inputs[0]]
    if list(x.shape_signature) != list(batch_shape):
        raise ExportError(f"micro input shape {x.shape_signature}, expected the static {batch_shape}")


def check_profile_contract(summary: TFLiteSummary, profile: str, n_features: int, web_batch: int = WEB_BATCH) -> None:
    """The profile's own checks of a converted file: micro (TFLM operators and types, static
    ``[1, D]``) or web (no int64 tensor, static ``[web_batch, D]``); nothing for the default."""
    if profile == "micro":
        check_micro_contract(summary, [MICRO_BATCH, n_features])
    if profile == "web":
        check_web_contract(summary, [web_batch, n_features])


def micro_metadata(summary: TFLiteSummary) -> dict[str, Any]:
    """The micro facts a file's metadata records before the arena is measured."""
    return {
        "profile": "micro",
        "batch": "static 1",
        "label_dtype": MICRO_LABEL_DTYPE,
        "tflm": {
            "ops": sorted(set(summary.op_names)),
            "guard": MICRO_GUARD_NOTE,
            "arena_bytes": None,
            "arena_reported_bytes": None,
            "arena_measured_with": None,
        },
    }


def tflm_module() -> Any:
    """``tflite_micro.python.tflite_micro.runtime`` (None when tflite-micro is not installed; it ships
    no type information)."""
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        return None
    return runtime


def tflm_version() -> str:
    try:
        import tflite_micro

        return str(getattr(tflite_micro, "__version__", "unknown"))
    except ImportError:  # pragma: no cover - callers check tflm_module() first
        return "not installed"


def tflm_interpreter(model: bytes, arena_size: int) -> Any:
    """A TFLM interpreter for ``model`` with an arena of ``arena_size`` bytes (tensors allocated).

    Never call it with an arena of a few hundred bytes: TFLM then fails to place its own allocator
    in the arena and the process crashes (tflite-micro 2026); :func:`measure_tflm_arena` starts
    from a generous size and only goes down to what TFLM reported using."""
    runtime = tflm_module()
    return runtime.Interpreter.from_bytes(bytes(model), arena_size=int(arena_size))


#: ``[RecordingMicroAllocator] Arena allocation total N bytes`` in TFLM's allocation report.
_ARENA_TOTAL = re.compile(r"Arena allocation total (\d+) bytes")
#: Arena TFLM is first given when measuring (then doubled while it runs out, up to the limit).
GENEROUS_ARENA = 2**20


def measure_tflm_arena(
    model: bytes, n_features: int, input_dtype: DTypeLike, *, limit: int = 256 * 2**20
) -> dict[str, Any]:
    """The smallest tensor arena (16-byte steps) in which TFLM allocates ``model``, checked by one invoke.

    A binary search between the arena total TFLM's RecordingMicroAllocator reports (a lower bound:
    it leaves out temporary allocations made while the kernels prepare, which can need more) and a
    generous size that works. Returns ``{"arena_bytes", "arena_reported_bytes",
    "arena_measured_with"}``; the numbers are None when tflite-micro is not installed. Raises
    ExportError with TFLM's own message when it cannot allocate or run the file at all (an
    operator or an operand type it lacks). The size is this host's (x86-64: the interpreter's
    structs hold 64-bit pointers, which a 32-bit MCU stores in less; the tensor buffers, planned by
    the same greedy planner, are the same).
    """
    if tflm_module() is None:
        return {
            "arena_bytes": None,
            "arena_reported_bytes": None,
            "arena_measured_with": "not measured: tflite-micro is not installed (pip install 'bnc-deploy[micro]')",
        }

    def attempt(size: int, report: bool = False) -> tuple[Any, str]:
        """``(interpreter or None, TFLM's log)`` for an arena of ``size`` bytes."""
        with captured_native_stderr() as log:
            try:
                interpreter = tflm_interpreter(model, size)
                if report:
                    interpreter.print_allocations()
            except RuntimeError:
                interpreter = None
        return interpreter, log.text

    high = max(GENEROUS_ARENA, 10 * len(model))
    while True:
        interpreter, text = attempt(high, report=True)
        if interpreter is not None:
            break
        if "missing:" not in text or high >= limit:  # not "Failed to allocate ... missing: N": no arena helps
            raise ExportError(f"TFLite Micro cannot load the micro-profile file: {_one_line(text)[:400]}")
        high *= 2
    found = _ARENA_TOTAL.search(text)
    if found is None:
        raise ExportError(f"no arena total in TFLite Micro's allocation report: {_one_line(text)[:200]}")
    reported = int(found.group(1))
    # Never below the reported total (TFLM crashes when its allocator itself does not fit).
    low = max(16, reported // 16 * 16 - 16)
    while high - low > 16:  # invariant: an arena of `high` bytes works, `low` is below the need
        mid = (low + high) // 32 * 16
        if attempt(mid)[0] is not None:
            high = mid
        else:
            low = mid
    interpreter, _ = attempt(high)
    with captured_native_stderr() as log:
        try:
            interpreter.set_input(np.zeros((MICRO_BATCH, n_features), dtype=input_dtype), 0)
            interpreter.invoke()
            interpreter.get_output(0), interpreter.get_output(1)
            failure = None
        except (RuntimeError, ValueError) as exc:
            failure = exc
    if failure is not None:
        raise ExportError(
            f"TFLite Micro cannot run the micro-profile file: {_one_line(failure)}: {_one_line(log.text)[:400]}"
        )
    return {
        "arena_bytes": int(high),
        "arena_reported_bytes": reported,
        "arena_measured_with": f"tflite-micro {tflm_version()} Python interpreter on "
        f"{platform.machine() or 'unknown'} (RecordingMicroAllocator; smallest "
        "arena that allocates and runs, 16-byte steps)",
    }


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ================================================================================================
# Standard TFLite model metadata (``metadata=True``, ``bnc-export --metadata``), both exporters
# ================================================================================================
#: The associated file holding the class names (one per line, in score order).
LABELS_FILE = "labels.txt"
METADATA_HELP = (
    "also write the standard TFLITE_METADATA (tflite-support schema: model and tensor "
    f"descriptions, the class names as {LABELS_FILE} on the score axis) for Android tooling"
)
#: Feature names listed in the input tensor's description (the rest are counted).
DESCRIBED_FEATURES = 32
_STRUCTURES = {
    "nb": "naive Bayes",
    "tan": "tree-augmented naive Bayes (TAN)",
    "fc": "fully connected network",
    "cnn": "convolutional network",
}


def standard_metadata(meta: Mapping[str, Any]) -> tuple[bytes, dict[str, bytes]]:
    """``(TFLITE_METADATA buffer, {"labels.txt": bytes})`` describing an export with metadata ``meta``.

    Tensors in the subgraph's order: input ``x``; outputs scores (``log_joint``/``logits``) with the
    labels file as TENSOR_AXIS_LABELS, then ``label``. ExportError when a class name cannot be a
    line of the labels file."""
    from bnc_deploy.formats.metadata import INPUT_RAW, contract_outputs
    from bnc_deploy.formats.tflite_metadata import build_model_metadata

    classes = [str(c) for c in meta["class_names"]]
    bad = [c for c in classes if "\n" in c or "\r" in c or not c.strip()]
    if bad:
        raise ExportError(f"class name {bad[0]!r} cannot be a line of {LABELS_FILE} (empty or has a line break)")
    scores, label = contract_outputs(meta)
    features = [str(f) for f in meta["feature_names"]]
    cards = [int(c) for c in meta["cardinalities"]]
    d, c = len(features), len(classes)
    structure = _STRUCTURES.get(str(meta.get("structure")), str(meta.get("structure")))
    bits = f"{meta['bits']}-bit" if meta.get("quantized") else "float"
    listed = ", ".join(f"{n} (0..{k - 1})" for n, k in zip(features[:DESCRIBED_FEATURES], cards))
    if d > DESCRIBED_FEATURES:
        listed += f", ... ({d - DESCRIBED_FEATURES} more)"
    batch = str(meta.get("batch", "dynamic"))
    rows = "N rows (resize the input)" if batch == "dynamic" else f"{batch.split()[-1]} rows (a static batch)"
    if meta.get("input") == INPUT_RAW:
        x_text = (
            f"float32 [{rows}, {d}]: raw feature values, discretized inside the model; non-finite values "
            f"make the row invalid. Features: {', '.join(features[:DESCRIBED_FEATURES])}"
        )
    else:
        x_text = (
            f"{meta.get('input_dtype', 'int32')} [{rows}, {d}]: one discrete code per feature, "
            f"0..cardinality-1; an out-of-range code makes the row invalid. Features: {listed}"
        )
    score_text = (
        "float32 [N, C]: log p(class, x), the class scores"
        if scores == "log_joint"
        else "float32 [N, C]: the class logits"
    )
    label_dtype = meta.get("label_dtype", "int64")
    model: ModelMetadata = {
        "name": f"bnc-deploy {structure}",
        "description": (
            f"{structure} classifier ({bits} parameters) over {d} discrete features and {c} classes, "
            f"exported by bnc-deploy {meta.get('toolkit_version')}. Outputs: {scores} (scores, class "
            f"names in {LABELS_FILE}) and {label} (the predicted class index, -1 for an invalid row). "
            f"Exact: {bool(meta.get('exact'))}. The full contract is the 'bnc_deploy' metadata "
            "buffer (JSON)."
        ),
        "version": f"model sha256 {str(meta.get('artifact_sha256', ''))[:16]}",
        "author": "bnc-deploy",
        "inputs": [{"name": "x", "description": x_text}],
        "outputs": [
            {
                "name": scores,
                "description": score_text + f" in the order of {LABELS_FILE}; all NaN for an invalid row",
                "associated_files": [
                    {
                        "name": LABELS_FILE,
                        "description": "class names, one per line, in score order",
                        "type": "TENSOR_AXIS_LABELS",
                    }
                ],
            },
            {
                "name": label,
                "description": f"{label_dtype} [N]: index of the first highest score (the predicted "
                f"class, line index + 1 of {LABELS_FILE}); -1 for an invalid row",
            },
        ],
    }
    return build_model_metadata(model), {LABELS_FILE: ("\n".join(classes) + "\n").encode("utf-8")}


def standard_metadata_note() -> dict[str, Any]:
    """What our own metadata says about the standard metadata a file carries."""
    from bnc_deploy.formats.tflite_metadata import MIN_PARSER_VERSION, TFLITE_METADATA

    return {
        "buffer": TFLITE_METADATA,
        "schema": "tflite-support metadata_schema.fbs",
        "min_parser_version": MIN_PARSER_VERSION,
        "associated_files": [LABELS_FILE],
    }


def finish_with_metadata(converted: bytes, meta: dict[str, Any], standard: bool, **kwargs: Any) -> bytes:
    """:func:`~bnc_deploy.formats.tflite.finish_flatbuffer`, plus (``standard``) the TFLITE_METADATA
    buffer and the labels file zipped onto the end, as tflite-support's MetadataPopulator does.
    ``meta`` must already carry ``tflite_metadata`` (:func:`standard_metadata_note`) when ``standard``."""
    from bnc_deploy.formats.tflite import finish_flatbuffer
    from bnc_deploy.formats.tflite_metadata import TFLITE_METADATA, append_associated_files

    if not standard:
        return finish_flatbuffer(converted, meta, **kwargs)
    buffer, files = standard_metadata(meta)
    model = finish_flatbuffer(converted, meta, extra_metadata={TFLITE_METADATA: buffer}, **kwargs)
    return append_associated_files(model, files)


def finish_export(
    converted: bytes,
    extra: dict[str, Any],
    make_meta: Callable[[dict[str, Any]], dict[str, Any]],
    check: Callable[[bytes], Any],
    *,
    profile: str,
    web_batch: int | None,
    standard: bool,
    n_features: int,
    **kwargs: Any,
) -> bytes:
    """The finished file of either TFLite exporter, from the converter's flatbuffer.

    ``extra`` (the exporter's own metadata entries) gets the profile's (micro: TFLM's operators
    and guard; web: the static batch ``web_batch``) and, with ``standard``, the note on the
    standard metadata; ``make_meta(extra)`` makes the export metadata, which is embedded
    (:func:`finish_with_metadata` with ``kwargs``), and ``check(model)`` checks the file against
    the exporter's contract. A micro file's tensor arena is then measured on that file (it holds
    tensors and the interpreter's structs, not the metadata buffer) and recorded in the same
    file's metadata."""
    if profile == "micro":
        extra.update(micro_metadata(inspect_tflite(converted)))
    if profile == "web":
        assert web_batch is not None  # check_profile: a web file has a static batch
        extra.update(web_metadata(web_batch))
    if standard:
        extra["tflite_metadata"] = standard_metadata_note()
    meta = make_meta(extra)
    model = finish_with_metadata(converted, meta, standard, **kwargs)
    check(model)
    if profile == "micro":
        meta["tflm"].update(measure_tflm_arena(model, n_features, np.dtype(meta["input_dtype"])))
        model = finish_with_metadata(converted, meta, standard, **kwargs)
    return model
