"""TFLite exporter for Bayesian network classifier artifacts (naive Bayes and TAN).

Contract of the exported file (TFLite builtin operators only: no Flex/select-TF, no custom ops)
-------------------------------------------------------------------------------------------------
Input ``x`` (tensor name ``"x"``)
    * codes: int32 [N, D], feature ``i`` in ``0 .. |X_i| - 1`` (int8 [1, D], scale 1, zero point 0,
      for ``onehot-fc`` with the ``relu`` one-hot builder);
    * ``raw_inputs=True``: float32 [N, D] raw values, binned in the graph with the embedded
      discretizer's rule ``code_i = #(t_ik < x_i)`` against float32 thresholds that reproduce
      ``np.searchsorted(cuts, x, side="left")`` exactly for float32 inputs
      (``formats.bnc.float32_thresholds``).
Outputs
    ``log_joint`` float32 [N, C] (``log p(c, x)``) and ``label`` int64 [N] (first maximum), in
    this order, also named in the ``serving_default`` signature.
Batch
    ``gather``: dynamic (shape signature [-1, D]; resize the input to any N).
    ``onehot-fc``: static [1, D] - the Edge TPU compiler needs static shapes - so a runtime runs
    it one row at a time (``runtimes.litert_adapter`` does).
Guard (``formats.metadata.GUARD``)
    A row with any code outside its feature's range (or any non-finite raw value) gets
    ``log_joint`` all NaN and ``label = -1``. Codes are clipped into ``0 .. |X_i| - 1`` before
    they form an index, so an invalid value never reads another feature's rows and GATHER never
    leaves the table; the flag, not the clipped value, decides the row's outputs. Non-finite raw
    values are tested positively (``x != x or |x| > FLT_MAX``): the converter rewrites
    ``LOGICAL_NOT(|x| <= FLT_MAX)`` into ``GREATER(|x|, FLT_MAX)``, which lets NaN through.
Metadata
    The export metadata (``formats.bnc.export_metadata``) is stored as canonical JSON in
    the TFLite metadata buffer named ``"bnc_deploy"``; ``formats.tflite.read_tflite_metadata`` reads
    it back without TensorFlow (only the flatbuffer schema module).

Lowerings
---------
``gather`` (exact for every quantized artifact)
    ``row_i = offset_i + x_i * |X_pa(i)| + x_pa(i)`` in int32 (TAN parent values by GATHER on
    axis 1), GATHER of the stacked table rows ([N, D, C]), SUM over features, ADD the prior.
    Quantized: the table stays **uint8** in the file (GATHER takes uint8 params from op
    version 1), gathered codes are CAST to int32 and summed exactly, ``label = ARG_MIN(sum)``
    (lowest code sum = highest log-probability; the kernel keeps the first index on ties, as
    ``np.argmax`` does) and ``log_joint = float32(sum) * -2**-B_F``: the sum is an integer below
    2**24 and the step a power of two, so every value equals the artifact's bit for bit.
    Float artifacts: float32 table and prior, float32 SUM, ARG_MAX. float32 summation order
    differs from the float64 reference, so float exports agree on labels except on near-ties.
``onehot-fc`` (for accelerators without GATHER: Edge TPU, NNAPI, GPU delegates)
    A one-hot over the stacked-table rows is multiplied by the table in int8 FULLY_CONNECTED
    layers whose quantization parameters the exporter sets (fake-quant ranges, no calibration):
    one-hot int8 with scale 1, weights int8 symmetric with scale ``s``, outputs int8 with scale
    ``s`` and zero point -128, so the requantization multiplier is exactly 1 and each output holds
    an integer partial sum in ``0 .. 255``. Features are packed into consecutive groups whose
    largest possible partial sum is <= 255 (one FC per group); the int8 partial sums are
    DEQUANTIZEd and summed in float32 (integers below 2**24: exact), the prior is added in float32
    and the result scaled by the step. Two ways to build the one-hot (``onehot=``):

    * ``"equal-cast"`` (default): per feature, EQUAL of its local row ``k_i = x_i * |X_pa(i)| +
      x_pa(i)`` (TAN parent values by MUL with a 0/1 matrix and SUM - no GATHER) against a
      constant, then CAST and QUANTIZE. Not ONE_HOT: the converter decodes a quantized ONE_HOT's
      off value wrongly, and it even fuses ``CAST(EQUAL(x, iota))`` back into ONE_HOT (which then
      fails to quantize), so the comparison runs on ``k_i + 1`` against a padded constant that is
      not an iota. The front end is int32 (CPU on an Edge TPU; NNAPI has EQUAL/CAST).
    * ``"relu"``: int8 codes in, and the one-hot is built by int8 ops the Edge TPU documents:
      with ``t = x_i - v``, ``[t == 0] = min(relu(t + 1), relu(1 - t))`` (two FCs with +-1
      weights, int32 bias, fused ReLU, and a MINIMUM); TAN rows by a third FC,
      ``relu(onehot[i, a] + onehot[pa(i), b] - 1)``; the guard by SUB/MUL/FC. Everything up to
      a single DEQUANTIZE is 8-bit, so a static check maps the whole integer part (see
      ``bnc_deploy.targets.edgetpu``). Needs cardinalities <= 128 and codes input (no raw inputs).
    * ``"edgetpu"`` (``--onehot edgetpu``, for the Edge TPU): the ``relu`` graph, plus

      - the class prior as group 0's int32 FULLY_CONNECTED bias (exact weights only, B <= 7: the
        bias scale is ``s_in * s_w = 1``, so the bias holds the class codes), so the int8 part
        ends at the **class scores** themselves when one group holds every feature (letter NB
        B = 3: 16 * 7 + 7 < 255), else at per-group partial scores whose sum is the class score;
      - groups packed per class (a group's bound is the largest over classes of that class's own
        sum, the prior in group 0), never looser than the ``relu`` packing's bound.

      What the Edge TPU can map (static, compiler not run): every op from the int8 input to the
      int8 tensor ``[partial scores of G groups x C classes, guard count]`` is FULLY_CONNECTED,
      MINIMUM, RELU, SUB, MUL, CONCATENATION, STRIDED_SLICE or RESHAPE on int8 with static
      shapes; the CPU part starts at its DEQUANTIZE: the float32 sum of the G partial scores
      (G - 1 additions per class; none when G = 1), the step, ARG_MAX and the guard's SELECT_V2.
      The sum of D terms of B bits needs more than 8 bits once it can exceed 255 (letter TAN
      B = 7: 8 groups), so exactness in int8 holds only per group. ``python -m
      bnc_deploy.targets.edgetpu FILE --model MODEL.bnc`` runs the mapped prefix on the LiteRT
      CPU int8 kernels against the reference. Exact for B <= 7 (verified on export, as
      ``relu``); B = 8 and float tables as ``relu`` (not exact, prior added on the CPU).

    Bit widths:

    * B <= 7: codes 0..127 are the int8 weights (``s = 1``): exact, bit for bit.
    * B = 8: codes up to 255 do not fit int8 weights (TFLite int8 weights are symmetric,
      -127..127). The exporter rescales (``s = 2``, weight ``min(round_half_even(code / 2), 127)``),
      i.e. the table is run on a grid twice as coarse: each table term may be off by one code,
      ``|log_joint error| <= D * 2**-B_F``. Labels are reported, not promised (``exact = false``).
      Measured on letter (ML, B_I = 3): 98.98 % (NB) and 99.29 % (TAN) label agreement, against
      93.24 % and 97.57 % when clamping codes to 127 instead.
    * float artifacts: weights ``round(-log p / s)`` with ``s = max|log p| / 127`` (per tensor,
      the whole table range, no clamping); the prior stays float32. Approximate by design.

LiteRT note: a comparison whose operands the converter leaves in int8 (e.g. GREATER of an int8
tensor and a constant) aborts the process in ai-edge-litert 2.3; the exporter compares in float
and :func:`check_contract` (``exporters/_tflite_bnc_contract.py``) refuses any int8 comparison
before a file is run.

TFLite Micro profile (``profile="micro"``, ``bnc-export --profile micro``)
------------------------------------------------------------------------
The default files do not load in TFLite Micro (TFLM): REDUCE_ANY is not one of its operators,
its ARG_MIN/ARG_MAX write int32 only, and its kernels take fewer operand types than LiteRT's
(GATHER: int8/float32 params; SUM/REDUCE_MAX: float32/int8; SELECT_V2: float32/int8/int16; no
uint8 CAST/GATHER, no int64). A micro file computes the same outputs with what TFLM has
(``exporters._tflite.TFLM_BUILTIN_OPS``; the exporter refuses anything else):

* input static ``[1, D]`` for every lowering (a runtime runs one row at a time);
* guard: ``invalid = REDUCE_MAX(CAST(code != clip(code), float32), axis=1) > 0.5`` (REDUCE_ALL
  would do, but reached TFLM only in 2026); ``log_joint = SELECT_V2(invalid, NaN, log_joint)``
  (float32) and ``label = (ARG_MAX(log_joint) + 1) * valid - 1`` in int32, so an invalid row gets
  label -1 and NaN scores as in the default files. The label is the reliable flag: the NaN relies
  on IEEE float semantics, which a device build with ``-ffast-math`` need not keep
  (metadata ``tflm.guard``);
* ``label`` int32 ``[1]`` (ARG_MAX of the float32 ``log_joint``: first maximum; for quantized
  tables ``log_joint = -sum * 2**-B_F`` is exact, so its first maximum is the first minimum of the
  code sum);
* ``gather``: the quantized table is stored **int8** (B <= 7: the codes; B = 8: ``code - 128``,
  ``128 * D`` added back with the prior), gathered, CAST to float32 and SUMmed in float32
  (integers below 2**24: exact in any order) - still bit for bit the artifact's ``log_joint``;
* TAN parent values (both lowerings) by a float32 MUL with a 0/1 matrix and SUM, CAST to int32
  (TFLM's GATHER takes no int32 params, and the converter folds CAST -> float GATHER -> CAST back
  into one); ``onehot-fc`` RESHAPEs instead of EXPAND_DIMS (int32); raw inputs count thresholds
  with a float32 SUM. The int8 FULLY_CONNECTED part of ``onehot-fc`` is unchanged.

Exactness is that of the default profile (gather: every B; onehot-fc: B <= 7). The metadata adds
``"profile": "micro"``, ``"batch": "static 1"``, ``"label_dtype": "int32"`` and ``"tflm"``: the
operators, the guard, and ``arena_bytes`` - the smallest tensor arena (16-byte steps) in which the
``tflite-micro`` Python interpreter allocates and runs the file, measured at export time when
tflite-micro is installed (``exporters._tflite.measure_tflm_arena``; None otherwise), on the
exporting host (x86-64: TFLM's structs hold 64-bit pointers; a 32-bit MCU needs somewhat less).
The verifier runs micro files in LiteRT like any TFLite file; the ``tflm`` runtime
(``runtimes.tflm_adapter``) runs them in TFLM.

Web profile (``profile="web"``, ``bnc-export --profile web [--web-batch N]``)
-----------------------------------------------------------------------------
For LiteRT.js (``@litertjs/core``, WebAssembly/WebGPU in a browser) and LiteRT on phones, which
refused the default files: ``Element type INT64 is not supported`` for the int64 ``label``, then
the dynamic batch dimension. A web file is the default graph (same lowerings, same operators,
same exactness: only the label's integer type changes) with

* ``label`` int32 ``[N]`` (ARG_MIN/ARG_MAX with int32 output; -1 on invalid rows as before) and no
  int64 tensor anywhere (:func:`exporters._tflite.check_web_contract` refuses one);
* input static ``[N, D]`` with ``N = web_batch`` (default 1; ``onehot-fc`` is static ``[1, D]``
  already and takes only 1). A caller with fewer rows pads with valid rows (code 0) and drops
  their outputs, as ``runtimes.litert_adapter`` does.

Metadata: ``"profile": "web"``, ``"batch": "static N"``, ``"label_dtype": "int32"``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._bnc_options import LOWERING, RAW_INPUTS, RAW_INPUTS_NEED_DISCRETIZER, codes_of
from bnc_deploy.exporters._onehot_fc_plan import (  # noqa: F401  (constants stay importable from here)
    INT8_BUILDERS,
    INT8_OUTPUT_LEVELS,
    ONEHOT_BUILDERS,
    ONEHOT_FC_BATCH,
    RELU_MAX_CARDINALITY,
    OneHotFCPlan,
    _pack_groups,
    onehot_fc_plan,
)
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
from bnc_deploy.exporters._tflite_bnc_contract import check_contract
from bnc_deploy.exporters.base import Option, register_exporter
from bnc_deploy.formats.bnc import check_lowering, export_metadata, lookup_constants, padded_thresholds
from bnc_deploy.formats.metadata import INPUT_NAME, INVALID_LABEL
from bnc_deploy.formats.tflite import tflite_op_names

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: B = 8 micro gather: the int8 table stores ``code - 128`` (codes 0..255 do not fit int8).
MICRO_TABLE_SHIFT = 128


# ================================================================================================
# Public API
# ================================================================================================
def build_tflite_model(
    artifact: BNCArtifact,
    *,
    lowering: str = "gather",
    raw_inputs: bool = False,
    onehot: str = "equal-cast",
    profile: str = "default",
    web_batch: int = WEB_BATCH,
    metadata: bool = False,
) -> bytes:
    """The TFLite flatbuffer of a BN artifact (metadata embedded, contract checked, not run).

    ``profile="micro"``: the TFLite Micro variant (module docstring, "TFLite Micro profile"); its
    tensor arena is measured with tflite-micro when that is installed. ``profile="web"``: int32
    label, no int64 tensors, static batch ``web_batch`` (module docstring, "Web profile").
    ``metadata``: also the standard TFLITE_METADATA and ``labels.txt`` (``exporters._tflite``)."""
    check_lowering(lowering)
    micro = check_profile(profile, web_batch) == "micro"
    static_batch = int(web_batch) if profile == "web" else None
    if static_batch is not None and lowering == "onehot-fc" and static_batch != ONEHOT_FC_BATCH:
        raise ExportError(
            f"--web-batch {static_batch}: the onehot-fc lowering has a static batch of "
            f"{ONEHOT_FC_BATCH} (use --web-batch {ONEHOT_FC_BATCH}, or the gather lowering)"
        )
    if onehot not in ONEHOT_BUILDERS:
        raise ExportError(f"unknown one-hot builder {onehot!r}; choose one of {', '.join(ONEHOT_BUILDERS)}")
    if artifact.n_features == 0:
        raise ExportError("cannot export a model without features")
    if raw_inputs:
        padded_thresholds(artifact)  # raises ExportError early if the discretizer is missing/wrong
    plan = onehot_fc_plan(artifact, onehot, raw_inputs=raw_inputs) if lowering == "onehot-fc" else None
    converted = _convert(artifact, lowering, raw_inputs, plan, micro, static_batch)
    extra: dict[str, Any] = {
        "n_ops_tflite": len(tflite_op_names(converted)),
        "batch": "static 1" if plan or micro else "dynamic",
    }
    if plan is not None:
        extra["onehot_fc"] = plan.describe()
    input_dtype = "int8" if plan is not None and plan.builder in INT8_BUILDERS else "int32"

    def make_meta(entries: dict[str, Any]) -> dict[str, Any]:
        return export_metadata(
            artifact, format="tflite", lowering=lowering, raw_inputs=raw_inputs, input_dtype=input_dtype, extra=entries
        )

    def check(model: bytes) -> None:
        check_contract(model, artifact, plan, profile=profile, web_batch=static_batch or WEB_BATCH)

    return finish_export(
        converted,
        extra,
        make_meta,
        check,
        profile=profile,
        web_batch=static_batch,
        standard=metadata,
        n_features=artifact.n_features,
    )


# ================================================================================================
# TensorFlow graph and conversion (TensorFlow is imported here only)
# ================================================================================================
def _convert(
    artifact: BNCArtifact,
    lowering: str,
    raw_inputs: bool,
    plan: OneHotFCPlan | None,
    micro: bool = False,
    web_batch: int | None = None,
) -> bytes:
    """Trace the graph as a tf.function and convert it with TFLITE_BUILTINS only.

    ``web_batch``: the web profile (static batch of that many rows, int32 label); None otherwise."""
    tf = tensorflow()
    relu = plan is not None and plan.builder in INT8_BUILDERS
    batch = ONEHOT_FC_BATCH if plan is not None else (MICRO_BATCH if micro else web_batch)
    # The web profile's label is int32 (LiteRT.js takes no int64 tensor); the default keeps int64.
    label_dtype = tf.int32 if web_batch is not None else tf.int64
    # The relu builder traces float32 codes and lets the converter make the input int8 (scale 1).
    dtype = tf.float32 if raw_inputs or relu else tf.int32
    spec = tf.TensorSpec([batch, artifact.n_features], dtype, name=INPUT_NAME)

    def graph(x: Tensor) -> tuple[Tensor, Tensor]:
        if relu:
            assert plan is not None  # relu: an int8 one-hot builder's plan
            log_joint, invalid = _relu_onehot_lookup(tf, artifact, plan, x)
            label = tf.argmax(log_joint, axis=1, output_type=label_dtype)
        else:
            codes, non_finite = _raw_codes(tf, artifact, x) if raw_inputs else (x, None)
            clipped, invalid = _guard(tf, artifact, codes, non_finite)
            if plan is None:
                log_joint, label = _gather_lookup(tf, artifact, clipped, label_dtype)
            else:
                log_joint = _onehot_fc_lookup(tf, artifact, plan, clipped)
                label = tf.argmax(log_joint, axis=1, output_type=label_dtype)
        log_joint = tf.where(invalid[:, None], tf.constant(np.nan, tf.float32), log_joint)
        label = tf.where(invalid, tf.constant(INVALID_LABEL, label_dtype), label)
        return log_joint, label

    def micro_graph(x: Tensor) -> tuple[Tensor, Tensor]:
        # TFLite Micro: static [1, D], REDUCE_MAX guard, int32 label, TFLM operand types only.
        if relu:
            assert plan is not None  # relu: an int8 one-hot builder's plan
            log_joint, invalid = _relu_onehot_lookup(tf, artifact, plan, x)
        else:
            codes, non_finite = _raw_codes(tf, artifact, x, micro=True) if raw_inputs else (x, None)
            clipped, invalid = _guard(tf, artifact, codes, non_finite, micro=True)
            if plan is None:
                log_joint = _micro_gather_lookup(tf, artifact, clipped)
            else:
                log_joint = _onehot_fc_lookup(tf, artifact, plan, clipped, micro=True)
        label = micro_label(tf, log_joint, invalid)
        flag = tf.reshape(invalid, [MICRO_BATCH, 1])
        log_joint = tf.where(flag, tf.constant(np.nan, tf.float32), log_joint)  # float32 SELECT_V2
        return log_joint, label

    function = tf.function(micro_graph if micro else graph, input_signature=[spec], autograph=False)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function.get_concrete_function()], function)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if plan is not None:
        # Needed for the fake-quant ranges to become int8 tensors. Every float constant of an FC
        # is fake-quantized by us, so no weight is left to dynamic-range quantization.
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if relu:
        converter.inference_input_type = tf.int8
    with warnings.catch_warnings():
        # "Statistics for quantized inputs were expected": the input is int32/float32 on purpose.
        warnings.simplefilter("ignore", UserWarning)
        try:
            converted: bytes = converter.convert()
        except Exception as exc:  # the converter raises its own ConverterError types
            raise ExportError(f"TFLite conversion failed ({lowering}): {str(exc).splitlines()[0]}") from None
        return converted


def _raw_codes(tf: TF, artifact: BNCArtifact, x: Tensor, micro: bool = False) -> tuple[Tensor, Tensor]:
    """Raw float32 x [N, D] -> (codes int32 [N, D], non_finite bool [N, D]).

    ``micro``: the count is a float32 SUM (TFLM's SUM takes float32/int8), CAST to int32."""
    thresholds, _ = padded_thresholds(artifact)  # [D, K], padded with FLT_MAX
    above = tf.greater(tf.expand_dims(x, 2), tf.constant(thresholds)[None])  # [N, D, K]
    if micro:
        codes = tf.cast(tf.reduce_sum(tf.cast(above, tf.float32), axis=2), tf.int32)
    else:
        codes = tf.reduce_sum(tf.cast(above, tf.int32), axis=2)
    # NaN: x != x; +-inf: |x| > FLT_MAX. Written positively on purpose: the converter rewrites
    # LOGICAL_NOT(|x| <= FLT_MAX) into GREATER(|x|, FLT_MAX), which is False for NaN.
    non_finite = tf.logical_or(
        tf.not_equal(x, x), tf.greater(tf.abs(x), tf.constant(np.finfo(np.float32).max, tf.float32))
    )
    return codes, non_finite


def _guard(
    tf: TF, artifact: BNCArtifact, codes: Tensor, non_finite: Tensor, micro: bool = False
) -> tuple[Tensor, Tensor]:
    """Clip codes into each feature's range; flag rows with any clipped (or non-finite) value.

    Returns ``(clipped int32 [N, D], invalid bool [N])``. ``micro``: the row flag by REDUCE_MAX
    over a float32 CAST (TFLite Micro has no REDUCE_ANY).
    """
    max_code = lookup_constants(artifact)["max_code"].astype(np.int32)
    clipped = tf.maximum(tf.minimum(codes, tf.constant(max_code)), 0)
    bad = tf.not_equal(codes, clipped)  # True exactly where clipping acted
    if non_finite is not None:
        bad = tf.logical_or(bad, non_finite)
    return clipped, (micro_invalid(tf, bad) if micro else tf.reduce_any(bad, axis=1))


def _micro_local_rows(tf: TF, artifact: BNCArtifact, clipped: Tensor) -> Tensor:
    """:func:`_local_rows` in TFLM's operand types. TAN parent values by a float32 MUL with a 0/1
    matrix and a float32 SUM, CAST back to int32 (small integers: exact): TFLM's GATHER and SUM take
    no int32, and the converter folds CAST -> float GATHER -> CAST back into an int32 GATHER."""
    c = lookup_constants(artifact)
    if artifact.structure != "tan":
        return clipped
    d = artifact.n_features
    own = clipped * tf.constant(c["strides"].astype(np.int32))
    select = np.zeros((d, d), dtype=np.float32)  # [i, j]
    has = artifact.parents >= 0
    select[np.flatnonzero(has), artifact.parents[has]] = 1.0
    values = tf.reshape(tf.cast(clipped, tf.float32), [MICRO_BATCH, 1, d])
    return own + tf.cast(tf.reduce_sum(values * tf.constant(select)[None], axis=2), tf.int32)


def _micro_gather_lookup(tf: TF, artifact: BNCArtifact, clipped: Tensor) -> Tensor:
    """GATHER + SUM lowering for TFLite Micro: log_joint float32 [1, C] (the label comes after).

    Quantized: the table is stored **int8** (TFLM's GATHER takes int8/float32 params, not uint8):
    the codes themselves for B <= 7, ``code - 128`` for B = 8 (``128 * D`` is added back with the
    prior). The gathered int8 codes are CAST to float32 and SUMmed in float32 (TFLM's SUM takes no
    int32): integers below 2**24 in any order, so the sum, and ``sum * -2**-B_F``, are exact.
    """
    offsets = lookup_constants(artifact)["offsets"].astype(np.int32)
    rows = _micro_local_rows(tf, artifact, clipped) + tf.constant(offsets)
    if artifact.is_quantized:
        shift = MICRO_TABLE_SHIFT if codes_of(artifact).quantizer.max_code > INT8_WEIGHT_MAX else 0
        table = (codes_of(artifact).table.astype(np.int16) - shift).astype(np.int8)
        picked = tf.gather(tf.constant(table), rows)  # int8 [1, D, C]
        sums = tf.reduce_sum(tf.cast(picked, tf.float32), axis=1)
        prior = codes_of(artifact).prior.astype(np.float32) + np.float32(shift * artifact.n_features)
        return (sums + tf.constant(prior)) * tf.constant(np.float32(-codes_of(artifact).quantizer.step))
    picked = tf.gather(tf.constant(artifact.table_logp), rows)  # float32 [1, D, C]
    return tf.reduce_sum(picked, axis=1) + tf.constant(artifact.class_logp)


def _parent_term(tf: TF, artifact: BNCArtifact, clipped: Tensor, use_gather: bool) -> Tensor:
    """``has_parent[i] * x[:, pa(i)]`` int32 [N, D], or None for naive Bayes."""
    if artifact.structure == "nb":
        return None
    c = lookup_constants(artifact)
    if use_gather:
        picked = tf.gather(clipped, tf.constant(c["parent_index"].astype(np.int32)), axis=1)
        return picked * tf.constant(c["has_parent"].astype(np.int32))
    # No GATHER (onehot-fc): x @ S with S[j, i] = 1 iff j = pa(i), as MUL + SUM in int32 (exact).
    select = np.zeros((artifact.n_features, artifact.n_features), dtype=np.int32)  # [i, j]
    has = artifact.parents >= 0
    select[np.flatnonzero(has), artifact.parents[has]] = 1
    return tf.reduce_sum(tf.expand_dims(clipped, 1) * tf.constant(select)[None], axis=2)


def _local_rows(tf: TF, artifact: BNCArtifact, clipped: Tensor, use_gather: bool) -> Tensor:
    """``x_i * |X_pa(i)| + x_pa(i)`` int32 [N, D] (the row inside feature i's block)."""
    strides = lookup_constants(artifact)["strides"].astype(np.int32)
    own = clipped * tf.constant(strides) if artifact.structure == "tan" else clipped
    parent = _parent_term(tf, artifact, clipped, use_gather)
    return own if parent is None else own + parent


def _gather_lookup(tf: TF, artifact: BNCArtifact, clipped: Tensor, label_dtype: TF = None) -> tuple[Tensor, Tensor]:
    """GATHER + SUM lowering: ``(log_joint float32 [N, C], label [N])`` (int64, or ``label_dtype``)."""
    label_dtype = label_dtype or tf.int64
    offsets = lookup_constants(artifact)["offsets"].astype(np.int32)
    rows = _local_rows(tf, artifact, clipped, use_gather=True) + tf.constant(offsets)
    if artifact.is_quantized:
        picked = tf.gather(tf.constant(artifact.table_codes), rows)  # uint8 [N, D, C]
        sums = tf.reduce_sum(tf.cast(picked, tf.int32), axis=1) + tf.constant(codes_of(artifact).prior.astype(np.int32))
        label = tf.argmin(sums, axis=1, output_type=label_dtype)  # first minimum
        step = np.float32(-codes_of(artifact).quantizer.step)  # -2**-B_F, exact
        return tf.cast(sums, tf.float32) * tf.constant(step), label
    picked = tf.gather(tf.constant(artifact.table_logp), rows)  # float32 [N, D, C]
    log_joint = tf.reduce_sum(picked, axis=1) + tf.constant(artifact.class_logp)
    return log_joint, tf.argmax(log_joint, axis=1, output_type=label_dtype)


def _int8_counts(tf: TF, value: Tensor, scale: float = 1.0) -> Tensor:
    """An int8 activation holding integers 0..255 (times ``scale``): zero point -128."""
    return fake_quant(tf, value, 0.0, INT8_OUTPUT_LEVELS * scale)


def _group_partials(tf: TF, plan: OneHotFCPlan, onehot: Tensor) -> list[Tensor]:
    """One int8 FULLY_CONNECTED per feature group: partial code sums, each [1, C] int8 (scale s).

    ``plan.prior_units`` (``edgetpu``): group 0's FC also adds the prior as its int32 bias
    (``prior * s``: the bias scale is ``s_in * s_w = s``, so the bias holds the codes exactly)."""
    partial = []
    for k, (lo, hi) in enumerate(plan.slices):
        acc = tf.matmul(onehot[:, lo:hi], int8_weights(tf, plan.group_weights(k), plan.scale))
        if k == 0 and plan.prior_units is not None:
            acc = acc + tf.constant((plan.prior_units * plan.scale).astype(np.float32))
        partial.append(_int8_counts(tf, acc, plan.scale))
    return partial


def _finish_log_joint(tf: TF, artifact: BNCArtifact, plan: OneHotFCPlan, partial_sums: Tensor) -> Tensor:
    """Partial sums [1, G * C] (dequantized by the converter) -> log_joint float32 [1, C].

    The sum over groups is float32 of integers (times ``s``) below 2**24: exact.
    """
    c = artifact.n_classes
    if plan.builder == "edgetpu" and len(plan.groups) == 1:
        table_sum = partial_sums  # one group: the int8 part's output is the score sum itself
    else:
        stacked = tf.reshape(partial_sums, [ONEHOT_FC_BATCH, len(plan.groups), c])
        table_sum = tf.reduce_sum(stacked, axis=1)
    if artifact.is_quantized:
        # edgetpu (exact): group 0 already holds the prior (its FC bias).
        total = (
            table_sum
            if plan.prior_units is not None
            else table_sum + tf.constant(codes_of(artifact).prior.astype(np.float32))
        )
        return total * tf.constant(np.float32(-codes_of(artifact).quantizer.step))
    return tf.constant(artifact.class_logp) - table_sum


def _onehot_fc_lookup(
    tf: TF, artifact: BNCArtifact, plan: OneHotFCPlan, clipped: Tensor, micro: bool = False
) -> Tensor:
    """``equal-cast`` builder: one-hot by EQUAL + CAST, then int8 FCs per group: log_joint [1, C].

    ``micro``: TAN parent values in float32 and a RESHAPE instead of EXPAND_DIMS (TFLM's takes no int32)."""
    d, r = artifact.n_features, plan.r_max
    if micro:
        local = tf.reshape(_micro_local_rows(tf, artifact, clipped) + 1, [ONEHOT_FC_BATCH, d, 1])
    else:
        local = tf.expand_dims(_local_rows(tf, artifact, clipped, use_gather=False) + 1, 2)
    # Compare k + 1 with the shifted pattern (0 on padding): never an iota, so never fused into ONE_HOT.
    hot = tf.equal(local, tf.constant(plan.pattern)[None])  # bool [1, D, r]
    onehot = tf.reshape(tf.cast(hot, tf.float32), [ONEHOT_FC_BATCH, d * r])
    onehot = fake_quant(tf, onehot, -128.0, 127.0)  # QUANTIZE: int8, scale 1, zp 0
    partial = _group_partials(tf, plan, onehot)
    return _finish_log_joint(tf, artifact, plan, tf.concat(partial, axis=1) if len(partial) > 1 else partial[0])


def _relu_onehot_lookup(tf: TF, artifact: BNCArtifact, plan: OneHotFCPlan, x: Tensor) -> tuple[Tensor, Tensor]:
    """``relu`` builder: an all-int8 graph up to one DEQUANTIZE (what the Edge TPU can map).

    ``x`` is float32 [1, D] in the trace; the converter makes it the int8 input (scale 1, zp 0).
    With ``t = x_i - v`` (integers), ``[t == 0] = min(relu(t + 1), relu(1 - t))``: two int8 FCs
    (weights +-1, int32 bias, fused ReLU) and a MINIMUM give the (feature, value) one-hot; for TAN
    a third FC gives the joint one-hot ``relu(onehot[i, a] + onehot[pa(i), b] - 1)`` of each
    stacked row. The guard counts features changed by clipping (``(x - clip(x))**2`` saturating,
    summed by an FC) and rides in the same int8 tensor as the partial sums, so the integer part
    ends in a single DEQUANTIZE. Returns ``(log_joint [1, C], invalid bool [1])``.
    """
    c, s = artifact.n_classes, plan.scale
    max_code = (artifact.cardinalities - 1).astype(np.float32)
    xq = fake_quant(tf, x, -128.0, 127.0)
    clipped = fake_quant(tf, tf.minimum(tf.maximum(xq, 0.0), tf.constant(max_code)), -128.0, 127.0)
    moved = fake_quant(tf, xq - clipped, -128.0, 127.0)
    flag = tf.matmul(_int8_counts(tf, moved * moved), int8_weights(tf, np.ones((artifact.n_features, 1)), s))
    onehot = _relu_value_onehot(tf, artifact, clipped)
    if artifact.structure == "tan":
        onehot = _relu_joint_onehot(tf, artifact, onehot)
    partial = _group_partials(tf, plan, onehot)
    packed = tf.concat(partial + [_int8_counts(tf, flag, s)], axis=1)  # int8 [1, G*C + 1]
    width = len(plan.groups) * c
    log_joint = _finish_log_joint(tf, artifact, plan, packed[:, :width])
    # Compare in float: a quantized int8 GREATER aborts LiteRT, and "* 0.5" is not an identity the
    # converter could fold away (which would leave the comparison on int8).
    invalid = tf.greater(packed[:, width] * np.float32(0.5), np.float32(0.25 * s))
    return log_joint, invalid


def _relu_value_onehot(tf: TF, artifact: BNCArtifact, clipped: Tensor) -> Tensor:
    """int8 [1, K] one-hot over (feature i, value v) positions ``sum_{j<i} |X_j| + v``."""
    cards = artifact.cardinalities
    feature = np.repeat(np.arange(artifact.n_features), cards)
    value = np.concatenate([np.arange(k) for k in cards]).astype(np.float32)
    spread = np.zeros((artifact.n_features, feature.size), dtype=np.float32)
    spread[feature, np.arange(feature.size)] = 1.0
    up = tf.nn.relu(tf.matmul(clipped, int8_weights(tf, spread, 1.0)) + tf.constant(1.0 - value))
    down = tf.nn.relu(tf.matmul(clipped, int8_weights(tf, -spread, 1.0)) + tf.constant(1.0 + value))
    return _int8_counts(tf, tf.minimum(_int8_counts(tf, up), _int8_counts(tf, down)))


def _relu_joint_onehot(tf: TF, artifact: BNCArtifact, value_onehot: Tensor) -> Tensor:
    """int8 [1, n_rows] one-hot over stacked-table rows from the (feature, value) one-hot."""
    cards = artifact.cardinalities
    start = np.concatenate([[0], np.cumsum(cards)[:-1]])  # value-one-hot offsets
    join = np.zeros((int(cards.sum()), artifact.n_rows), dtype=np.float32)
    bias = np.zeros(artifact.n_rows, dtype=np.float32)
    for i, (offset, p_card) in enumerate(zip(artifact.row_offsets, artifact.parent_cardinalities)):
        parent = int(artifact.parents[i])
        for a in range(int(cards[i])):
            for b in range(int(p_card)):
                row = int(offset) + a * int(p_card) + b
                join[start[i] + a, row] = 1.0
                if parent >= 0:  # relu(own + parent - 1) = own AND parent
                    join[start[parent] + b, row] = 1.0
                    bias[row] = -1.0
    joint = tf.nn.relu(tf.matmul(value_onehot, int8_weights(tf, join, 1.0)) + tf.constant(bias))
    return _int8_counts(tf, joint)


register_exporter(
    "bnc",
    "tflite",
    build_tflite_model,
    extension=".tflite",
    runtime="litert",
    description="builtin-ops TFLite: uint8 gather (exact) or int8 one-hot x FULLY_CONNECTED for accelerators",
    options=[
        LOWERING,
        RAW_INPUTS,
        Option(
            "onehot",
            "str",
            "equal-cast",
            ONEHOT_BUILDERS,
            "onehot-fc lowering: build the one-hot with EQUAL+CAST (default) or from int8 ops the Edge TPU "
            "maps (FC+ReLU, MINIMUM, SUB, MUL; cardinalities <= 128, codes input): relu, or edgetpu (relu with "
            "the prior in the int8 part, which then ends at the class scores or per-group partial scores)",
            noun="one-hot builder",
        ),
        Option("profile", "str", "default", PROFILES, PROFILE_HELP),
        Option("web_batch", "int", WEB_BATCH, help=WEB_BATCH_HELP),
        Option("metadata", "bool", False, help=METADATA_HELP),
    ],
    refusals=[RAW_INPUTS_NEED_DISCRETIZER],
)
