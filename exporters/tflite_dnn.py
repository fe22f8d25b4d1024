"""TFLite exporter for DNN artifacts (fully connected and CNN, sign or ReLU): int8 weights.

The computation is the contract of :mod:`bnc_deploy.artifacts.dnn`; the I/O contract is the one of
:mod:`bnc_deploy.formats.dnn`. TFLite builtin operators only (no Flex/select-TF, no
custom ops), converted with ``TFLITE_BUILTINS`` and ``optimizations = [DEFAULT]``. Every int8
quantization parameter is set by the exporter through fake-quant ranges in the traced graph (no
converter calibration); :func:`check_dnn_contract` re-reads the flatbuffer and asserts them, and
:mod:`bnc_deploy.verify` runs the file in LiteRT against :class:`~bnc_deploy.reference.dnn.DNNReferencePredictor`
before publishing it (registered as the ``("dnn", "tflite")`` exporter at the bottom).

I/O contract
------------
Input ``x``
    int32 [N, D] feature codes; the batch dimension is dynamic (shape signature [-1, D]).
Outputs
    ``logits`` float32 [N, C] and ``label`` int64 [N] (first maximum), in this order, also named in
    the ``serving_default`` signature. Metadata (:func:`~bnc_deploy.formats.dnn.dnn_export_metadata`)
    in the flatbuffer metadata buffer ``"bnc_deploy"``, as for BN exports.
Guard
    ``clipped = max(min(x, |X_j| - 1), 0)`` (int32 MINIMUM/MAXIMUM) feeds every lookup, so an
    invalid code never leaves its table; ``invalid = REDUCE_ANY(NOT_EQUAL(x, clipped))``; the
    logits are multiplied by a float32 row mask ``SELECT_V2(invalid, NaN, 1.0)`` (``x * 1.0`` is
    exact, so valid rows are untouched) and ``label = SELECT_V2(invalid, -1, ARG_MAX(...))``. A
    multiply, not a SELECT on the logits: a SELECT sitting on int8 logits gets quantized, NaN
    included (seen with the calibrating converter), while the mask MUL stays float32.

Encoding (both lowerings; exact)
    Standardized: GATHER from the int8 table of input codes (flat index ``j * K + x_j``; CNN
    pixels in image order, ``pixel_order`` resolved by a constant GATHER of the columns). One-hot:
    GATHER of rows of an int8 identity ``[K, K]`` (FC: then a constant GATHER on axis 1 drops the
    padding slots past each feature's cardinality; CNN: zero channels past the cardinality come
    out of the identity rows). Images are NHWC; the flatten before the first dense layer is
    folded into a permutation of that layer's weight columns, so the (C, H, W) order of the
    artifact is kept without a TRANSPOSE.

``int8-sign`` lowering (sign networks; ``exact = true`` for every B in 1..8)
----------------------------------------------------------------------------
Per hidden layer one int8 FULLY_CONNECTED / CONV_2D (3x3, SAME, stride 1) with fused
``RELU_N1_TO_1``, then MAX_POOL_2D (2x2, VALID) on int8 where the artifact pools. With
``(direction, threshold) = sign_thresholds(artifact, k)``:

* the layer *input* is stored doubled: +-1 activations as int8 +-2 (scale 0.5, zero point 0),
  standardized codes ``q`` as ``2q`` (scale ``input_scale / 2``; ``|q| <= 63`` so ``|2q| <= 126``),
  one-hot as {0, 2} (scale 0.5). The int32 accumulator is therefore ``2 * acc``;
* weights: the artifact's codes times ``direction`` per output unit (still odd, in range), int8
  per-tensor with scale ``s_w = 1 / s_in`` (a power of two) and zero point 0;
* bias: int32 ``1 - 2 * threshold`` with scale ``s_in * s_w = 1``, so the int32 value is
  ``v = 2 * (direction * acc - threshold) + 1``: odd, never 0, and ``v > 0`` exactly when the unit
  fires;
* output: int8 scale 0.5, zero point 0, so the requantization multiplier is
  ``M = s_in * s_w / 0.5 = 2``: ``|round(M * v)| >= 2`` whatever the rounding rule (reference
  kernels, XNNPACK), and the fused RELU_N1_TO_1 clamps to int8 [-2, 2]: exactly +-2, i.e. the
  unit's +-1 for the next layer. Units that never change (threshold outside the reachable range,
  e.g. zero batch-norm scale) come out constant the same way.

Max-pool of int8 values is exact. B = 8 (codes up to 255 do not fit int8 weights, which are
symmetric -127..127): the layer input is CONCATENATED ``copies = ceil(max|code| / 127)`` times
(2 or 3) along its last axis and the codes split into ``copies`` int8 parts that sum to the code
(each ``|part| <= 127``), so the int32 accumulator is unchanged and the layer stays exact, at
``copies`` times the MACs of that layer (``tflite_layers[k]["input_copies"]`` in the metadata).

Output layer (float32, exact): DEQUANTIZE of the +-1 activations, FULLY_CONNECTED float32 with
the integer codes as float32 weights and no bias (sums of integers below 2**24 are exact in any
order), MUL by the guard mask, MUL by ``float32(s_w * s_in)``, ADD of the float32 bias: one
rounding per operation, bit for bit the reference's ``float32(acc) * float32(s_w * s_in) + bias``
(int8 logits would merge near-ties). The guard MUL between the FC and the scale also keeps the
converter from folding the scale into the weights and the bias into the FC (which it does
otherwise, even with ``_experimental_disable_fuse_mul_and_fc``).
A sign network without hidden layers runs its output layer on the float32 integer encoding.

Stored in int8: the input-code table (or identity), every hidden weight tensor (the codes,
sign-flipped per unit), all hidden activations. int32: the codes, guard and biases (thresholds).
float32: the output layer's weights (integer codes), its scale and bias, the logits.

``int8-ptq`` lowering (ReLU networks; ``exact = false``)
-------------------------------------------------------
Full-integer post-training quantization with the exporter as the calibrator: the float graph
(weights ``codes * s_w``, batch norm ``z * scale + shift``, ReLU, max-pool, output dense + bias)
gets fake-quant ranges on every activation, taken from the NumPy reference on the
representative rows (the artifact's check set by default, or the caller's rows): ``[0, max]`` of
each hidden layer's ReLU output, ``[min, max]`` of the logits; the TFLite calibrator's
statistic, min/max, computed exactly. Not the converter's ``representative_dataset``: its
calibration quantizes every op it can, the guard's NaN select included (the NaN became an int8
constant). The encoding is exact (int8 ``q`` at scale ``input_scale``, one-hot 1 at scale 1).
The converter folds batch norm into each hidden FULLY_CONNECTED / CONV_2D (int32 bias from the
shift, weights ``codes * s_w * scale`` quantized int8 per output channel, symmetric: the stored
values are ``round(code * 127 / max|code of the channel|)``, the codes themselves only when that
ratio is an integer) with fused RELU, then MAX_POOL_2D on int8. Output layer
(``output_layer=``):

* ``"int8"`` (default, full-integer): an int8 FULLY_CONNECTED with the artifact's codes as int8
  weights (per-tensor scale ``s_w``; B = 8: scale ``s_w * max|code| / 127``, rounded), int32
  bias and int8 logits, then DEQUANTIZE, the guard MUL and ARG_MAX in float32.
* ``"float32"``: as for sign networks, DEQUANTIZE of the last hidden activations, float32
  FULLY_CONNECTED on the integer codes (no bias), guard MUL, MUL ``s_w``, ADD bias. int8 logits
  (255 steps over the calibrated logit range) merge near-ties, which the float32 output layer
  keeps apart: its label agreement with the reference is higher (the verifier reports it).

Label agreement with the reference (and accuracy when labels are given) is measured and
reported, not promised. Stored in int8: the encoding, every hidden weight tensor and activation,
and (``"int8"``) the output weights and logits. int32: codes, guard, biases. float32: the
logits after DEQUANTIZE (``"float32"``: the output layer, its integer-code weights included).

LiteRT note: no comparison on int8 operands (ai-edge-litert 2.3 aborts the process on an int8
GREATER); :func:`check_dnn_contract` refuses such a file before it is ever run.

TFLite Micro profile (``profile="micro"``)
------------------------------------------
As for BN exports (:mod:`bnc_deploy.exporters.tflite_bnc`, "TFLite Micro profile"): input static
``[1, D]``; the guard flag by ``REDUCE_MAX(CAST(x != clipped, float32)) > 0.5`` (no REDUCE_ANY),
the same float32 NaN mask MUL on the logits, and ``label = (ARG_MAX + 1) * valid - 1`` in int32
(TFLM's ARG_MAX writes int32, its SELECT_V2 takes no int32). A CNN whose pixel order differs from
the feature order gathers the looked-up values (int8/float32, axis 1) into pixel order instead of
the int32 codes (TFLM's GATHER takes no int32 params). Everything else - the int8 layers, the
float32 output layer, exactness of sign networks, calibration of ReLU networks - is the default
profile's. Metadata: ``profile``, ``batch = "static 1"``, ``label_dtype = "int32"`` and
``tflm`` (operators, guard, measured ``arena_bytes``).

Web profile (``profile="web"``)
-------------------------------
As for BN exports (:mod:`bnc_deploy.exporters.tflite_bnc`, "Web profile"): the default graph with
an int32 ``label`` (ARG_MAX int32, SELECT_V2 with -1) and no int64 tensor, input static
``[web_batch, D]`` (default 1). Everything else, exactness included, is the default profile's.
Metadata: ``profile = "web"``, ``batch = "static N"``, ``label_dtype = "int32"``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._tflite import (
    INT8_WEIGHT_MAX,
    METADATA_HELP,
    MICRO_BATCH,
    PROFILE_HELP,
    PROFILES,
    TF,
    WEB_BATCH,
    WEB_BATCH_HELP,
    Tensor,
    check_profile,
    fake_quant,
    finish_export,
    int8_weights,
    micro_invalid,
    micro_label,
    tensorflow,
)
from bnc_deploy.exporters._tflite_dnn_contract import (
    LOWERING_PTQ as LOWERING_PTQ,  # re-exported: the lowerings are named from this module
)
from bnc_deploy.exporters._tflite_dnn_contract import (
    LOWERING_SIGN,
    SIGN_ACTIVATION_SCALE,
    DNNTFLitePlan,
    check_dnn_contract,
)
from bnc_deploy.exporters._tflite_dnn_plan import OUTPUT_LAYERS, plan_tflite_dnn, tflite_codes
from bnc_deploy.exporters._tflite_dnn_plan import (
    split_codes as split_codes,  # re-exported: part of this exporter's tested surface
)
from bnc_deploy.exporters.base import Option, Refusal, register_exporter
from bnc_deploy.formats.dnn import DNN_OUTPUTS, dnn_export_metadata
from bnc_deploy.formats.metadata import INPUT_NAME, INVALID_LABEL
from bnc_deploy.formats.tflite import inspect_tflite

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact


# ================================================================================================
# Public API
# ================================================================================================
def build_tflite_dnn(
    artifact: DNNArtifact,
    *,
    representative: ArrayLike | None = None,
    output_layer: str = "int8",
    profile: str = "default",
    web_batch: int = WEB_BATCH,
    metadata: bool = False,
) -> bytes:
    """The TFLite flatbuffer of a DNN artifact (metadata embedded, contract checked,
    not run). ``profile="micro"``: the TFLite Micro variant; ``profile="web"``: int32 label, no
    int64 tensors, static batch ``web_batch`` (module docstring). ``metadata``: also the standard
    TFLITE_METADATA and ``labels.txt`` (``exporters._tflite``)."""
    check_profile(profile, web_batch)
    if output_layer != "int8" and getattr(artifact, "activation", None) == "sign":
        raise ExportError(
            f"--output-layer {output_layer} applies to ReLU DNN models only (sign networks always "
            "compute their output layer exactly in float32)"
        )
    plan = plan_tflite_dnn(artifact, representative=representative, output_layer=output_layer)
    plan.profile = profile
    plan.web_batch = int(web_batch)
    plan.standard_metadata = bool(metadata)
    return _build(artifact, plan)


# ================================================================================================
# TensorFlow graph and conversion
# ================================================================================================
def _build(artifact: DNNArtifact, plan: DNNTFLitePlan) -> bytes:
    converted = _convert(artifact, plan)
    summary = inspect_tflite(converted)
    extra = {
        "batch": "dynamic",
        "n_ops_tflite": len(summary.ops),
        "tflite_layers": plan.describe(artifact),
        "output_layer": plan.output_dtype,
        "int8": _int8_summary(plan),
    }
    if plan.calibration is not None:
        extra["calibration"] = plan.calibration
    return finish_export(
        converted,
        extra,
        lambda entries: dnn_export_metadata(
            artifact, format="tflite", exact=plan.exact, input_dtype="int32", lowering=plan.lowering, extra=entries
        ),
        lambda model: check_dnn_contract(model, artifact, plan),
        profile=plan.profile,
        web_batch=plan.web_batch,
        standard=plan.standard_metadata,
        n_features=artifact.n_features,
        output_names=DNN_OUTPUTS,
    )


def _int8_summary(plan: DNNTFLitePlan) -> dict[str, str]:
    if plan.lowering == LOWERING_SIGN:
        return {
            "int8": "input-code table / one-hot identity, hidden weights (codes x direction), "
            "hidden activations (+-1 as +-2)",
            "int32": "codes, guard, hidden biases (1 - 2 * threshold), accumulators",
            "float32": "output layer (integer-code weights, scale, bias), logits",
        }
    if plan.output_dtype == "int8":
        return {
            "int8": "encoding, all weights, all activations including the logits",
            "int32": "codes, guard, biases",
            "float32": "dequantized logits",
        }
    return {
        "int8": "encoding, hidden weights, hidden activations",
        "int32": "codes, guard, hidden biases",
        "float32": "output layer (integer-code weights, scale, bias), logits",
    }


def _convert(artifact: DNNArtifact, plan: DNNTFLitePlan) -> bytes:
    """Trace the graph as a tf.function and convert it (builtins, fake-quant ranges, no calibration)."""
    tf = tensorflow()
    micro = plan.profile == "micro"
    batch = MICRO_BATCH if micro else (plan.web_batch if plan.profile == "web" else None)
    spec = tf.TensorSpec([batch, artifact.n_features], tf.int32, name=INPUT_NAME)
    # The web profile's label is int32 (LiteRT.js takes no int64 tensor); the default keeps int64.
    label_dtype = tf.int32 if plan.profile == "web" else tf.int64

    def graph(x: Tensor) -> tuple[Tensor, Tensor]:
        clipped, invalid = _guard(tf, artifact, x)
        mask = tf.expand_dims(tf.where(invalid, tf.constant(np.nan, tf.float32), tf.constant(1.0, tf.float32)), 1)
        a = _encode(tf, artifact, clipped, plan.encoding_scale)
        if plan.lowering == LOWERING_SIGN:
            logits = _sign_network(tf, artifact, plan, a, mask)
        else:
            logits = _relu_network(tf, artifact, plan, a, mask)
        label = tf.argmax(logits, axis=1, output_type=label_dtype)
        label = tf.where(invalid, tf.constant(INVALID_LABEL, label_dtype), label)
        return logits, label

    def micro_graph(x: Tensor) -> tuple[Tensor, Tensor]:
        # TFLite Micro: static [1, D], REDUCE_MAX guard, int32 label, TFLM operand types only.
        clipped, invalid = _guard(tf, artifact, x, micro=True)
        mask = tf.reshape(
            tf.where(invalid, tf.constant(np.nan, tf.float32), tf.constant(1.0, tf.float32)), [MICRO_BATCH, 1]
        )
        a = _encode(tf, artifact, clipped, plan.encoding_scale, micro=True)
        if plan.lowering == LOWERING_SIGN:
            logits = _sign_network(tf, artifact, plan, a, mask)
        else:
            logits = _relu_network(tf, artifact, plan, a, mask)
        return logits, micro_label(tf, logits, invalid)

    function = tf.function(micro_graph if micro else graph, input_signature=[spec], autograph=False)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function.get_concrete_function()], function)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # turns the fake-quant ranges into int8 tensors
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            converted: bytes = converter.convert()
        except Exception as exc:  # the converter raises its own ConverterError types
            raise ExportError(f"TFLite conversion failed ({plan.lowering}): {str(exc).splitlines()[0]}") from None
        return converted


def _int8_scale(tf: TF, value: Tensor, scale: float) -> Tensor:
    """An int8 tensor with zero point 0 and the given scale (range [-128, 127] * scale)."""
    return fake_quant(tf, value, -128.0 * scale, 127.0 * scale)


def _guard(tf: TF, artifact: DNNArtifact, x: Tensor, micro: bool = False) -> tuple[Tensor, Tensor]:
    """``(clipped int32 [N, D], invalid bool [N])``: codes clipped into each feature's range.

    ``micro``: the row flag by REDUCE_MAX over a float32 CAST (REDUCE_ANY is not in TFLM)."""
    max_code = (artifact.cardinalities - 1).astype(np.int32)
    clipped = tf.maximum(tf.minimum(x, tf.constant(max_code)), 0)
    if micro:
        return clipped, micro_invalid(tf, tf.not_equal(x, clipped))
    return clipped, tf.reduce_any(tf.not_equal(x, clipped), axis=1)


def _encode(tf: TF, artifact: DNNArtifact, clipped: Tensor, scale: float | None, micro: bool = False) -> Tensor:
    """Encoded input: FC [N, width], CNN NHWC [N, H, W, E]; int8 with ``scale`` (real values
    ``q * input_scale`` or one-hot 1), or float32 integers (``q`` or one-hot 1) when ``scale`` is None.

    ``micro``: a pixel order other than the features' is applied to the looked-up values (a GATHER
    on axis 1 of float32/int8), not to the int32 codes: TFLM's GATHER takes no int32 params."""
    d, k = artifact.n_features, artifact.max_cardinality
    order = artifact.pixel_index().reshape(-1) if artifact.architecture == "cnn" else np.arange(d)
    identity = np.array_equal(order, np.arange(d))
    if micro and not identity:
        lookup_order, reorder = np.arange(d), tf.constant(order.astype(np.int32))
    else:
        lookup_order, reorder = order, None
    if identity or reorder is not None:
        ordered = clipped
    else:
        ordered = tf.gather(clipped, tf.constant(order.astype(np.int32)), axis=1)
    if artifact.input_encoding == "standardized":
        step = artifact.input_scale if scale is not None else 1.0
        assert artifact.input_codes is not None  # standardized encoding
        table = (artifact.input_codes.astype(np.float64) * step).astype(np.float32).reshape(-1)
        a = tf.gather(tf.constant(table), ordered + tf.constant((lookup_order * k).astype(np.int32)))  # [N, P]
        channels = 1
    else:
        a = tf.gather(tf.constant(np.eye(k, dtype=np.float32)), ordered)  # [N, P, K]
        channels = k
    if reorder is not None:
        a = tf.gather(a, reorder, axis=1)  # pixel order
    if scale is not None:
        a = _int8_scale(tf, a, scale)
    if artifact.architecture == "cnn":
        assert artifact.image_shape is not None  # a CNN's
        h, w = artifact.image_shape
        return tf.reshape(a, [-1, h, w, channels])
    if artifact.input_encoding == "onehot":
        a = tf.reshape(a, [-1, d * k])
        if np.any(artifact.cardinalities != k):
            slots = np.concatenate([j * k + np.arange(c) for j, c in enumerate(artifact.cardinalities)])
            a = tf.gather(a, tf.constant(slots.astype(np.int32)), axis=1)
    return a


def _flatten(tf: TF, a: Tensor) -> Tensor:
    if len(a.shape) == 4:
        return tf.reshape(a, [-1, int(a.shape[1]) * int(a.shape[2]) * int(a.shape[3])])
    return a


def _tf_weights(layer_type: str, values: np.ndarray) -> np.ndarray:
    """TFLite-layout weights (dense [out, in], conv OHWI) -> TensorFlow layout ([in, out], HWIO)."""
    return values.T if layer_type == "dense" else np.transpose(values, (1, 2, 3, 0))


def _apply(tf: TF, layer_type: str, a: Tensor, w: Tensor) -> Tensor:
    return tf.matmul(a, w) if layer_type == "dense" else tf.nn.conv2d(a, w, strides=1, padding="SAME")


def _sign_network(tf: TF, artifact: DNNArtifact, plan: DNNTFLitePlan, a: Tensor, mask: Tensor) -> Tensor:
    """Hidden layers in int8 (see the module docstring), output layer in float32: logits [N, C]."""
    for layer in plan.hidden:
        if layer.type == "dense":
            a = _flatten(tf, a)
        if layer.copies > 1:
            a = tf.concat([a] * layer.copies, axis=-1)
        w = int8_weights(tf, _tf_weights(layer.type, layer.weights), layer.weight_scale)
        z = _apply(tf, layer.type, a, w) + tf.constant(layer.bias.astype(np.float32))  # real value = int32 v
        a = fake_quant(tf, tf.clip_by_value(z, -1.0, 1.0), -128 * SIGN_ACTIVATION_SCALE, 127 * SIGN_ACTIVATION_SCALE)
        if layer.pool:
            a = tf.nn.max_pool2d(a, ksize=2, strides=2, padding="VALID")
    return _float_output(tf, artifact, plan, a, mask)


def _float_output(tf: TF, artifact: DNNArtifact, plan: DNNTFLitePlan, a: Tensor, mask: Tensor) -> Tensor:
    """Output layer in float32: FC on the integer codes (no bias), guard MUL, MUL unit, ADD bias."""
    a = _flatten(tf, a)
    assert plan.output_codes is not None  # every plan sets them
    acc = tf.matmul(a, tf.constant(plan.output_codes.T.astype(np.float32)))  # exact integer sums (sign)
    bias = artifact.layers[-1].bias
    # The guard MUL sits between the FC and the scale: nothing can be folded into the FC.
    return (acc * mask) * tf.constant(np.float32(plan.output_unit)) + tf.constant(bias)


def _relu_network(tf: TF, artifact: DNNArtifact, plan: DNNTFLitePlan, a: Tensor, mask: Tensor) -> Tensor:
    """Float graph with fake-quant ranges on every activation: int8 after conversion."""
    s_w = np.float32(artifact.weight_scale)
    for k, layer in enumerate(artifact.layers[:-1]):
        if layer.type == "dense":
            a = _flatten(tf, a)
        codes = tflite_codes(layer, plan.permutations.get(k))
        z = _apply(tf, layer.type, a, tf.constant(_tf_weights(layer.type, codes).astype(np.float32) * s_w))
        if layer.scale is not None:
            z = z * tf.constant(layer.scale) + tf.constant(layer.shift)
        low, high = plan.relu_ranges[k]
        a = fake_quant(tf, tf.nn.relu(z), low, high)
        if layer.pool:
            a = tf.nn.max_pool2d(a, ksize=2, strides=2, padding="VALID")
    if plan.output_dtype == "float32":
        return _float_output(tf, artifact, plan, a, mask)
    a = _flatten(tf, a)
    s = plan.output_weight_scale
    assert plan.output_codes is not None and plan.logit_range is not None  # an int8 output layer's plan
    units = np.clip(np.round(plan.output_codes * (artifact.weight_scale / s)), -INT8_WEIGHT_MAX, INT8_WEIGHT_MAX)
    logits = tf.matmul(a, int8_weights(tf, units.T, s)) + tf.constant(artifact.layers[-1].bias)
    logits = fake_quant(tf, logits, *plan.logit_range)
    return logits * mask  # float32 (DEQUANTIZE first)


register_exporter(
    "dnn",
    "tflite",
    build_tflite_dnn,
    extension=".tflite",
    runtime="litert",
    description="builtin-ops int8 TFLite: sign networks exact, ReLU networks full-integer",
    options=[
        Option(
            "output_layer",
            "str",
            "int8",
            OUTPUT_LAYERS,
            "ReLU DNNs: the output layer in int8 (default, full-integer) or float32 (int8 logits can merge "
            "near-ties; float32 keeps them apart)",
        ),
        Option(
            "representative", "rows", None, help="calibration rows (codes) of a ReLU network (default: the check set)"
        ),
        Option("profile", "str", "default", PROFILES, PROFILE_HELP),
        Option("web_batch", "int", WEB_BATCH, help=WEB_BATCH_HELP),
        Option("metadata", "bool", False, help=METADATA_HELP),
    ],
    refusals=[
        Refusal(
            "a sign network's output layer is always computed exactly in float32 (integer sums of +-1 "
            "activations); --output-layer chooses the output layer of ReLU networks only",
            r"--output-layer float32 applies to ReLU DNN models only",
            options={"output_layer": "float32"},
            models=lambda artifact: getattr(artifact, "activation", None) == "sign",
        )
    ],
)
