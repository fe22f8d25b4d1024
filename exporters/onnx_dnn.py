"""ONNX exporter for quantized DNN artifacts (fully connected and CNN classifiers).

The graph computes exactly what :mod:`bnc_deploy.artifacts.dnn` specifies, with the weights
stored as the artifact's integer codes (int8 initializers; int16 for B = 8) behind
``DequantizeLinear``. Only standard ``ai.onnx`` operators are used, so the file runs in any
onnxruntime (and other ONNX runtimes) without contrib ops.

Contract of the exported graph (the common DNN contract of :mod:`bnc_deploy.formats.dnn`)
---------------------------------------------------------------------------------------------------
Input
    ``x``: int64 [N, D] feature codes (dynamic N).
Outputs
    ``logits``: float32 [N, C]; ``label``: int64 [N], the first maximum (``ArgMax``,
    ``select_last_index=0``).
Guard
    A row with any code outside ``0 .. |X_j| - 1`` gets ``label = -1`` and all-NaN logits. The
    codes are clamped into range (``Max(Min(x, |X_j| - 1), 0)``) *before* any lookup, so an
    invalid code never reads another feature's table entries and no Gather leaves its table; a
    per-row penalty (``ReduceSum`` of ``Where(valid, 0, NaN)``, [N, 1]) is added to the logits,
    and ``label = Where(IsNaN(logits[:, 0]), -1, ArgMax(logits))``. Valid rows are untouched
    (``v + 0.0 == v``).

Graph, in order (node names = output tensor names; ``k`` is the artifact's layer index)
----------------------------------------------------------------------------------------
``guard/*``
    ``GreaterOrEqual``, ``Less``, ``And`` (validity mask), ``Min``, ``Max`` (clamped codes),
    ``Where``, ``ReduceSum`` (NaN penalty).
``input/*`` (the encoding)
    *standardized*: ``DequantizeLinear`` of the int8 ``input.codes`` table [D, K] (load-time),
    ``Reshape`` to a flat table, ``Add`` of per-feature offsets ``j * K`` to the codes,
    ``Gather`` -> [N, D]. *one-hot FC*: ``Unsqueeze`` the codes to [N, D, 1], ``Equal`` with the
    pattern [D, K] (``k``, or -1 past the feature's cardinality), ``Reshape`` to [N, D * K],
    ``Gather`` (axis 1) of the ``sum |X_j|`` real slots (skipped when all cardinalities are
    equal), ``Cast`` to float32 -> [N, sum |X_j|]. *CNN*: first ``Gather`` (axis 1) of the codes
    by the pixel permutation (``input/pixels``; skipped for row-major order), then the
    standardized lookup (offsets permuted alike) and ``Reshape`` to [N, 1, H, W]
    (``input/image``), or for one-hot ``Reshape`` to [N, 1, H, W] and ``Equal`` with the channel
    pattern [1, E, 1, 1] then ``Cast`` -> [N, E, H, W].
``layer{k}/*`` (every weight layer)
    ``layer{k}/flatten`` (``Flatten`` axis 1 = (C, H, W) order; first dense layer after a conv),
    ``layer{k}/weights`` (``DequantizeLinear`` of the initializer ``layer{k}.codes``, which holds
    the artifact's codes unchanged, [out, in] or [out, in, 3, 3]; load-time),
    ``layer{k}/gemm`` (``Gemm``, ``transB=1``, no C: the dense MACs) or ``layer{k}/conv``
    (``Conv`` 3x3, pads 1, no bias: the conv MACs). Then:

    * ReLU hidden layer: ``layer{k}/bn_scale`` (``Mul``) and ``layer{k}/bn_shift`` (``Add``)
      when the layer has batch norm (constants ``layer{k}.bn_scale``/``.bn_shift`` shaped [out]
      or [out, 1, 1]), ``layer{k}/relu`` (``Relu``);
    * sign hidden layer: ``layer{k}/direction`` (``Mul`` by the +-1 directions; omitted when all
      are +1), ``layer{k}/threshold`` (``GreaterOrEqual`` with the integer thresholds) and
      ``layer{k}/sign`` (``Where(fires, +1, -1)``). These three nodes *are* the folded batch norm
      plus the sign (``sign_thresholds``); without batch norm the thresholds are those of
      ``y = z``. ONNX ``Sign`` is never used (it maps 0 to 0; the contract says +1);
    * ``layer{k}/pool`` (``MaxPool`` 2x2, stride 2, floor) for pooled conv layers;
    * output layer: sign nets ``layer{k}/output_scale`` (``Mul`` by ``float32(s_w * s_in)``,
      stored as a [C] vector) then, for every net, ``layer{k}/bias`` (``Add`` of
      ``layer{k}.bias``).

    :func:`hidden_output_names` gives the tensor holding each hidden layer's output (after
    activation and pooling): add them as graph outputs to inspect hidden activations.
``logits`` (``Add`` of the guard penalty), ``label/argmax`` (``ArgMax``), ``label/first_logit``
    (``Gather``), ``label/invalid`` (``IsNaN``), ``label`` (``Where``).

Lowerings and exactness
-----------------------
``lowering = "integer-sign"`` (sign networks; ``exact = True`` for every B, see B = 8 below)
    ``DequantizeLinear`` uses scale **1.0** here, so the float32 weights are the integer codes
    themselves, and the layer inputs are integers too: standardized input codes (``input_scale``
    is *not* applied), one-hot 0/1, or +-1 after a sign. Every product and every partial sum of a
    ``Gemm``/``Conv`` accumulator is then an integer of magnitude at most
    :func:`~bnc_deploy.artifacts.dnn.accumulator_bound`, checked at export to be ``< 2**24``
    (else ExportError naming the layer): float32 holds all such integers, so the accumulator is
    exact in any summation order, blocking or vectorisation (FMA included), and the integer
    comparison with the shared thresholds of :func:`~bnc_deploy.artifacts.dnn.sign_thresholds`
    (``|t| <= bound + 1 <= 2**24``, exact in float32) reproduces the reference's hidden
    activations bit for bit. Max-pooling +-1 values and zero padding are exact. The output layer
    computes ``float32(acc) * float32(s_w * s_in) + bias`` as one ``Mul`` then one ``Add``, one
    float32 rounding each, which is how the reference defines sign-network logits: logits are
    bit-identical and labels identical.
    Why scale 1 and not ``1/(2**B - 1)``: with the real weights ``code / (2**B - 1)`` in float32
    every weight is already rounded and every partial sum rounds again, in an order that
    depends on the runtime, so the accumulator is no longer an exact multiple of the weight
    scale and a unit exactly at its threshold could flip. The stored codes are the artifact's
    unchanged and the metadata still records ``weight_bits`` (so the real weight scale
    ``1/(2**B - 1)``); the exporter has folded that scale (and ``input_scale``) into the integer
    thresholds and the output scale, as the contract allows. The output scale is a [C] vector
    (all entries equal) rather than a scalar so that no graph optimizer folds it into the
    product's alpha (onnxruntime's MatMul scale fusion only takes scalars); the result would be
    the same (``acc`` is exact), but the graph is what it says.
``lowering = "float"`` (ReLU networks; ``exact = False``)
    ``DequantizeLinear`` with scale ``float32(1/(2**B - 1))`` (B = 1: 1), standardized inputs
    dequantized with ``input_scale`` (exact: a power of two times an int8), float32
    ``Gemm``/``Conv``, batch norm as ``Mul`` + ``Add``, ``Relu``, ``MaxPool``, output ``Add``
    of the bias. The reference computes in float64, so logits differ by float32 rounding and
    labels can differ only where two logits are within that rounding; the verification reports
    the agreement.

B = 8
-----
Odd codes up to +-255 do not fit int8. They are stored as **int16** initializers (exactly the
artifact's int16 codes) and dequantized by ``DequantizeLinear``, which accepts int16 from ONNX
opset 21. The exporter raises the opset to ``max(opset, 21)`` automatically for B = 8 and
records the opset actually used in the file and its metadata (``opset``, with the caller's
``requested_opset``); onnxruntime has supported opset 21 since 1.18. Everything else is as for
B <= 7, so B = 8 sign networks are exact too (codes up to 255 only make the accumulator bound
larger; it is checked all the same) and B = 8 ReLU networks are float like the others.

``pack_bits=True`` (``bnc-export --pack-bits``)
-----------------------------------------------
Each layer's weights are stored as ``B`` bit-planes of ``level = (code + 2**B - 1) / 2`` (uint8
``layer{k}.bitplanes``, ``B`` bits per weight instead of 8 or 16) and rebuilt from constants only
(BitShift, Mod, Cast, Slice, MatMul with ``2 * 2**b``, Add ``-(2**B - 1)``, Reshape, Mul by the
dequantize scale), which runtimes fold once at session creation: the weights are bit for bit
those of ``DequantizeLinear``, so sign networks stay exact. Per-feature int64 index constants
(guard bounds, table offsets, pixel order, one-hot pattern) are stored in the smallest integer
type and widened by a load-time ``Cast``. The usps budget FC net (25,870 bits) shrinks from
27,383 to 17,735 bytes; ``weight_storage`` in the metadata says ``bitplanesB``.

The model's ``metadata_props`` carry the export metadata as JSON under ``"bnc_deploy"``
(:func:`bnc_deploy.formats.dnn.dnn_export_metadata`) plus the flat keys of
:func:`bnc_deploy.formats.metadata.flat_metadata`. Registered as the ``("dnn", "onnx")`` exporter
(bottom of this module); :mod:`bnc_deploy.verify` runs the file in onnxruntime on the check set
plus random codes and publishes it only if a sign network comes out identical.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from numpy.typing import ArrayLike, DTypeLike
from onnx import TensorProto, helper, numpy_helper

from bnc_deploy.artifacts.dnn import accumulator_bound, sign_thresholds, weight_code_dtype
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._onnx_graph import DEFAULT_OPSET, MIN_OPSET, pack_bitplanes, set_export_metadata
from bnc_deploy.exporters.base import Option, register_exporter
from bnc_deploy.formats.dnn import INT8_EXACT_MAX_BITS, OUTPUT_LOGITS, dnn_export_metadata
from bnc_deploy.formats.metadata import INPUT_NAME, INVALID_LABEL, OUTPUT_LABEL
from bnc_deploy.limits import FLOAT32_EXACT_LIMIT
from bnc_deploy.version import __version__

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact

# DEFAULT_OPSET (17, raised to INT16_MIN_OPSET for B = 8) and MIN_OPSET (13): ``_onnx_graph``'s.
#: Newest opset verified with onnxruntime (tests run 13, 17, 21 and this one).
MAX_OPSET = 25
#: First opset whose DequantizeLinear accepts int16 (B = 8 codes).
INT16_MIN_OPSET = 21
LOWERING_SIGN = "integer-sign"
LOWERING_FLOAT = "float"


# ================================================================================================
# Public API
# ================================================================================================
def build_onnx_dnn(artifact: DNNArtifact, *, opset: int = DEFAULT_OPSET, pack_bits: bool = False) -> onnx.ModelProto:
    """The ONNX ModelProto of a DNN artifact, checked with ``onnx.checker`` (full_check).

    ``pack_bits``: store each layer's weights as ``B`` bit-planes of ``(code + 2**B - 1) / 2``
    (``B`` bits per weight instead of 8 or 16) and rebuild the codes in the graph from constants
    only, so runtimes do it once at session creation (see :func:`_unpacked_weights`).
    """
    if getattr(artifact, "kind", None) != "dnn":
        raise ExportError(f"build_onnx_dnn exports DNN artifacts, got {type(artifact).__name__}")
    used_opset = effective_opset(artifact, opset)
    sign = artifact.activation == "sign"
    max_acc = check_accumulators(artifact) if sign else None

    g = _Graph()
    g.compact = pack_bits
    codes, penalty = _guard(g, artifact)
    a = _encode(g, artifact, codes, sign)
    raw = _layers(g, artifact, a, sign, pack_bits)
    logits = g.op("Add", [raw, penalty], OUTPUT_LOGITS)
    _label(g, logits)

    graph = helper.make_graph(
        g.nodes,
        f"bnc_dnn_{artifact.architecture}_{artifact.activation}",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.INT64, ["N", artifact.n_features])],
        outputs=[
            helper.make_tensor_value_info(OUTPUT_LOGITS, TensorProto.FLOAT, ["N", artifact.n_classes]),
            helper.make_tensor_value_info(OUTPUT_LABEL, TensorProto.INT64, ["N"]),
        ],
        initializer=g.initializers,
    )
    opsets = [helper.make_opsetid("", used_opset)]
    model = helper.make_model(
        graph,
        opset_imports=opsets,
        producer_name="bnc-deploy",
        producer_version=__version__,
        ir_version=helper.find_min_ir_version_for(opsets),
    )
    storage = np.dtype(weight_code_dtype(artifact.weight_bits)).name
    extra = {
        "n_nodes": len(g.nodes),
        "requested_opset": int(opset),
        "weight_storage": f"bitplanes{artifact.weight_bits}" if pack_bits else storage,
        # what the file's DequantizeLinear multiplies the codes by (the real scale is 1/(2**B - 1))
        "dequantize_scale": 1.0 if sign else float(np.float32(artifact.weight_scale)),
        "weight_scale": artifact.weight_scale,
        "max_accumulator": max_acc,
    }
    meta = dnn_export_metadata(
        artifact,
        format="onnx",
        exact=exact_export(artifact),
        input_dtype="int64",
        lowering=LOWERING_SIGN if sign else LOWERING_FLOAT,
        opset=used_opset,
        extra=extra,
    )
    set_export_metadata(model, meta)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as exc:  # a bug here, not bad input: say so
        raise ExportError(f"internal error: the exported DNN graph fails the ONNX checker: {exc}") from None
    return model


def exact_export(artifact: DNNArtifact) -> bool:
    """Whether this exporter promises identical labels and logits: sign networks (every B)."""
    return artifact.activation == "sign"


def effective_opset(artifact: DNNArtifact, opset: int) -> int:
    """The opset the file will use: ``opset``, raised to 21 for B = 8 (int16 DequantizeLinear)."""
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ExportError(f"opset must be an integer in {MIN_OPSET}..{MAX_OPSET}, got {opset!r}")
    if artifact.weight_bits > INT8_EXACT_MAX_BITS:
        return max(int(opset), INT16_MIN_OPSET)
    return int(opset)


def check_accumulators(artifact: DNNArtifact) -> int:
    """Largest integer accumulator of a sign network over all layers; ExportError if ``>= 2**24``."""
    worst = 0
    for k, layer in enumerate(artifact.layers):
        bound = int(accumulator_bound(artifact, k).max(initial=0))
        if bound >= FLOAT32_EXACT_LIMIT:
            raise ExportError(
                f"layer {k} ({layer.type}, {layer.n_in} inputs -> {layer.n_out}): the integer accumulator can "
                f"reach {bound:,} >= 2**24 = {FLOAT32_EXACT_LIMIT:,}, beyond exact float32 arithmetic; the sign "
                f"network cannot be exported exactly (fewer inputs per unit or fewer weight bits)"
            )
        worst = max(worst, bound)
    return worst


def hidden_output_names(artifact: DNNArtifact) -> list[str]:
    """Tensor name of each hidden layer's output (after activation and pooling) in the graph."""
    names = []
    for k, layer in enumerate(artifact.layers[:-1]):
        names.append(f"layer{k}/pool" if layer.pool else f"layer{k}/{layer.activation}")
    return names


# ================================================================================================
# Graph pieces
# ================================================================================================
class _Graph:
    """Tiny builder: named nodes (node name = its single output) and initializers."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._consts: set[str] = set()
        self.compact = False  # index_const: smallest integer storage (the pack_bits file)

    def const(self, name: str, value: ArrayLike, dtype: DTypeLike | None = None) -> str:
        if name not in self._consts:
            self._consts.add(name)
            self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name=name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def index_const(self, name: str, values: ArrayLike) -> str:
        """An int64 index constant; with ``compact`` stored in the smallest integer type that
        holds it and widened by a load-time Cast (per-feature constants are D x 8 bytes)."""
        values = np.asarray(values, dtype=np.int64)
        if not self.compact or name in self._consts:
            return self.const(name, values)
        for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32):
            info = np.iinfo(dtype)
            if values.size == 0 or (values.min() >= info.min and values.max() <= info.max):
                break
        self._consts.add(name)
        stored = self.const(name + ".stored", values.astype(dtype))
        self.nodes.append(helper.make_node("Cast", [stored], [name], name=name, to=TensorProto.INT64))
        return name


def _guard(g: _Graph, art: DNNArtifact) -> tuple[str, str]:
    """(clamped codes int64 [N, D], penalty float32 [N, 1]: 0 for valid rows, NaN otherwise)."""
    cards = art.cardinalities.astype(np.int64)
    zero = g.const("guard.zero", 0, np.int64)
    g.index_const("guard.cardinalities", cards)
    g.index_const("guard.max_code", cards - 1)
    g.const("axis1", [1], np.int64)
    valid = g.op(
        "And",
        [
            g.op("GreaterOrEqual", [INPUT_NAME, zero], "guard/nonnegative"),
            g.op("Less", [INPUT_NAME, "guard.cardinalities"], "guard/below_cardinality"),
        ],
        "guard/valid",
    )
    codes = g.op("Max", [g.op("Min", [INPUT_NAME, "guard.max_code"], "guard/clip_high"), zero], "guard/codes")
    g.const("guard.zero_f", 0.0, np.float32)
    g.const("guard.nan_f", np.nan, np.float32)
    nan_if_invalid = g.op("Where", [valid, "guard.zero_f", "guard.nan_f"], "guard/nan_if_invalid")
    penalty = g.op("ReduceSum", [nan_if_invalid, "axis1"], "guard/penalty", keepdims=1)
    return codes, penalty


def _encode(g: _Graph, art: DNNArtifact, codes: str, sign: bool) -> str:
    """The encoded network input: FC [N, n_inputs] float32, CNN [N, E, H, W] float32.

    Sign networks keep integer values (standardized codes without ``input_scale``).
    """
    d = art.n_features
    cnn = art.architecture == "cnn"
    perm = None
    if cnn:
        assert art.image_shape is not None  # a CNN's
        h, w = art.image_shape
        perm = art.pixel_index().reshape(-1).astype(np.int64)  # image.flat[p] = feature perm[p]
        if np.array_equal(perm, np.arange(d)):
            perm = None
        else:
            codes = g.op("Gather", [codes, g.index_const("input.pixel_feature", perm)], "input/pixels", axis=1)
        g.const("input.image_shape", [0, 1, h, w], np.int64)
    feature = perm if perm is not None else np.arange(d, dtype=np.int64)  # feature at each position

    if art.input_encoding == "standardized":
        assert art.input_codes is not None  # standardized encoding
        k = art.input_codes.shape[1]
        g.const("input.codes", art.input_codes)  # int8 [D, K], as stored
        g.const("input.scale", 1.0 if sign else art.input_scale, np.float32)  # power of two: exact
        g.const("input.zero_point", 0, np.int8)
        g.const("input.flat_shape", [-1], np.int64)
        table = g.op("DequantizeLinear", ["input.codes", "input.scale", "input.zero_point"], "input/table")
        flat = g.op("Reshape", [table, "input.flat_shape"], "input/table_flat")
        index = g.op("Add", [codes, g.index_const("input.offsets", feature * k)], "input/index")
        values = g.op("Gather", [flat, index], "input/values" if cnn else "input/encoded", axis=0)
        if cnn:
            return g.op("Reshape", [values, "input.image_shape"], "input/image")
        return values

    kmax = art.max_cardinality
    if cnn:  # one-hot channels
        image = g.op("Reshape", [codes, "input.image_shape"], "input/code_image")  # [N, 1, H, W]
        g.const("input.channel_pattern", np.arange(kmax, dtype=np.int64).reshape(1, kmax, 1, 1))
        hot = g.op("Equal", [image, "input.channel_pattern"], "input/onehot")
        return g.op("Cast", [hot], "input/image", to=TensorProto.FLOAT)
    pattern = np.where(np.arange(kmax)[None, :] < art.cardinalities[:, None], np.arange(kmax)[None, :], -1)
    g.index_const("input.onehot_pattern", pattern)  # [D, K]; -1: no slot
    g.const("axis2", [2], np.int64)
    g.const("input.grid_shape", [0, d * kmax], np.int64)
    column = g.op("Unsqueeze", [codes, "axis2"], "input/code_column")  # [N, D, 1]
    grid = g.op("Equal", [column, "input.onehot_pattern"], "input/onehot_grid")  # [N, D, K]
    hot = g.op("Reshape", [grid, "input.grid_shape"], "input/onehot_padded")  # [N, D * K]
    slots = np.flatnonzero(pattern.reshape(-1) >= 0).astype(np.int64)  # the sum |X_j| real slots
    if slots.size != d * kmax:
        hot = g.op("Gather", [hot, g.const("input.onehot_slots", slots)], "input/onehot", axis=1)
    return g.op("Cast", [hot], "input/encoded", to=TensorProto.FLOAT)


def _unpacked_weights(g: _Graph, p: str, codes: np.ndarray, bits: int) -> str:
    """Layer weights from bit-planes, float32, equal to ``DequantizeLinear(codes, weight.scale)``.

    Stored: ``level = (code + M) / 2`` in ``0 .. 2**B - 1`` (``M = 2**B - 1``; codes are odd),
    as ``B`` bit-planes (:func:`bnc_deploy.exporters._onnx_graph.pack_bitplanes`). In the graph,
    from constants only (load-time): bits by BitShift + Mod, ``2 * level`` by a MatMul with the
    weights ``2 * 2**b`` (sums of powers of two: exact), ``code = 2 * level - M`` (exact), then
    one Mul by ``weight.scale``: the single rounding DequantizeLinear makes.
    """
    m = 2**bits - 1
    levels = ((codes.astype(np.int64) + m) // 2).astype(np.uint8)
    n = int(codes.size)
    g.const(f"{p}.bitplanes", pack_bitplanes(levels, bits))  # uint8 [B, ceil(n / 8)]
    g.const("unpack.bit_shifts", np.arange(7, -1, -1, dtype=np.uint8))  # MSB first, as packbits
    g.const("unpack.two", 2, np.uint8)
    g.const("unpack.axis2", [2], np.int64)
    g.const("unpack.axis1", [1], np.int64)
    g.const("unpack.begin", [0], np.int64)
    g.const(f"{p}.plane_shape", [bits, -1], np.int64)
    g.const(f"{p}.end", [n], np.int64)
    g.const(f"{p}.plane_weights", (2.0 * 2.0 ** np.arange(bits)).astype(np.float32)[None, :])  # [1, B]
    g.const(f"{p}.minus_m", -float(m), np.float32)
    g.const(f"{p}.shape", list(codes.shape), np.int64)
    shifted = g.op(
        "BitShift",
        [g.op("Unsqueeze", [f"{p}.bitplanes", "unpack.axis2"], f"{p}/unpack/planes"), "unpack.bit_shifts"],
        f"{p}/unpack/shift",
        direction="RIGHT",
    )  # [B, M8, 8]
    bit = g.op(
        "Cast", [g.op("Mod", [shifted, "unpack.two"], f"{p}/unpack/bit")], f"{p}/unpack/bitf", to=TensorProto.FLOAT
    )
    planes = g.op(
        "Slice",
        [g.op("Reshape", [bit, f"{p}.plane_shape"], f"{p}/unpack/flat"), "unpack.begin", f"{p}.end", "unpack.axis1"],
        f"{p}/unpack/slice",
    )  # [B, n]
    twice = g.op("MatMul", [f"{p}.plane_weights", planes], f"{p}/unpack/levels")  # [1, n]
    code = g.op("Add", [twice, f"{p}.minus_m"], f"{p}/unpack/codes")
    shaped = g.op("Reshape", [code, f"{p}.shape"], f"{p}/unpack/reshape")
    return g.op("Mul", [shaped, "weight.scale"], f"{p}/weights")


def _layers(g: _Graph, art: DNNArtifact, a: str, sign: bool, pack_bits: bool = False) -> str:
    """Every weight layer; returns the output layer's logits before the guard penalty."""
    dtype = weight_code_dtype(art.weight_bits)
    g.const("weight.scale", 1.0 if sign else art.weight_scale, np.float32)
    spatial = art.architecture == "cnn"
    last = len(art.layers) - 1
    for k, layer in enumerate(art.layers):
        p = f"layer{k}"
        if layer.type == "dense" and spatial:
            a = g.op("Flatten", [a], f"{p}/flatten", axis=1)  # (C, H, W) order
            spatial = False
        if pack_bits:
            weights = _unpacked_weights(g, p, layer.codes, art.weight_bits)
        else:
            g.const("weight.zero_point", 0, dtype)
            g.const(f"{p}.codes", layer.codes)  # the artifact's codes
            weights = g.op("DequantizeLinear", [f"{p}.codes", "weight.scale", "weight.zero_point"], f"{p}/weights")
        unit_shape: tuple[int, ...]
        if layer.type == "dense":
            acc = g.op("Gemm", [a, weights], f"{p}/gemm", transB=1)
            unit_shape = (layer.n_out,)
        else:
            acc = g.op("Conv", [a, weights], f"{p}/conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
            unit_shape = (layer.n_out, 1, 1)
        if k == last:
            z = acc
            if sign:
                s_in = art.layer_input_scales()[k]
                assert s_in is not None  # a sign network's layers take integer inputs
                unit = np.float32(art.weight_scale * s_in)
                g.const(f"{p}.output_scale", np.full(layer.n_out, unit, dtype=np.float32))
                z = g.op("Mul", [acc, f"{p}.output_scale"], f"{p}/output_scale")
            g.const(f"{p}.bias", layer.bias)
            return g.op("Add", [z, f"{p}.bias"], f"{p}/bias")
        if sign:
            direction, threshold = sign_thresholds(art, k)
            t = acc
            if np.any(direction < 0):
                g.const(f"{p}.direction", direction.astype(np.float32).reshape(unit_shape))
                t = g.op("Mul", [acc, f"{p}.direction"], f"{p}/direction")
            g.const(f"{p}.threshold", threshold.astype(np.float32).reshape(unit_shape))  # |t| <= 2**24: exact
            fires = g.op("GreaterOrEqual", [t, f"{p}.threshold"], f"{p}/threshold")
            plus, minus = g.const("sign.plus_one", 1.0, np.float32), g.const("sign.minus_one", -1.0, np.float32)
            a = g.op("Where", [fires, plus, minus], f"{p}/sign")
        else:
            z = acc
            if layer.scale is not None:
                g.const(f"{p}.bn_scale", layer.scale.reshape(unit_shape))
                g.const(f"{p}.bn_shift", layer.shift.reshape(unit_shape))
                z = g.op("Mul", [z, f"{p}.bn_scale"], f"{p}/bn_scale")
                z = g.op("Add", [z, f"{p}.bn_shift"], f"{p}/bn_shift")
            a = g.op("Relu", [z], f"{p}/relu")
        if layer.pool:
            a = g.op("MaxPool", [a], f"{p}/pool", kernel_shape=[2, 2], strides=[2, 2])  # floor (ceil_mode 0)
    raise ExportError("the artifact has no output layer")  # unreachable for a validated artifact


def _label(g: _Graph, logits: str) -> None:
    """label [N] = first ArgMax of the logits, or -1 where the row is NaN (invalid)."""
    g.const("label.class0", 0, np.int64)
    g.const("label.invalid", INVALID_LABEL, np.int64)
    best = g.op("ArgMax", [logits], "label/argmax", axis=1, keepdims=0, select_last_index=0)
    invalid = g.op("IsNaN", [g.op("Gather", [logits, "label.class0"], "label/first_logit", axis=1)], "label/invalid")
    g.op("Where", [invalid, "label.invalid", best], OUTPUT_LABEL)


def build_onnx_dnn_bytes(artifact: DNNArtifact, *, opset: int = DEFAULT_OPSET, pack_bits: bool = False) -> bytes:
    """The serialized file of :func:`build_onnx_dnn` (what ``onnx.save_model`` writes)."""
    data: bytes = build_onnx_dnn(artifact, opset=opset, pack_bits=pack_bits).SerializeToString()
    return data


register_exporter(
    "dnn",
    "onnx",
    build_onnx_dnn_bytes,
    extension=".onnx",
    runtime="onnxruntime",
    description="int8 initializers + DequantizeLinear; sign networks exact (integer sums, thresholds)",
    options=[
        Option(
            "opset",
            "int",
            DEFAULT_OPSET,
            help=f"ONNX opset (default: {DEFAULT_OPSET}; raised to {INT16_MIN_OPSET} for 8-bit weights)",
        ),
        Option("pack_bits", "bool", False, help="store the B-bit weight codes as bit-planes instead of one byte each"),
    ],
)
