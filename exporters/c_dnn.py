"""C99 exporter for DNNs (fully connected and CNN): one header file, integers only.

``bnc-export MODEL.bnc --format c -o model.h [--name PREFIX]`` on a DNN model writes a header-only
C99 library in the style of the BN header (:mod:`bnc_deploy.exporters.c_bnc`): ``static const``
tables, ``static inline`` functions, an ``#ifndef`` guard, the export metadata embedded in one
comment (:mod:`bnc_deploy.formats.c`), ``<stdint.h>`` only, no malloc, no static state, no float.
Sign networks are the reference's integer machine (exact: ``lowering = "integer-sign"``); ReLU
networks are their full-integer TFLite file as LiteRT computes it (``lowering = "int8-ptq"``,
:mod:`bnc_deploy.exporters._c_dnn_relu`).

API
---
``int PREFIX_predict(const uint8_t *x)``
    ``x[i]``: the code of feature ``i``. Returns the class of the largest logit (the first on
    ties, as every other format), or -1 when some ``x[i] >= PREFIX_CARD_i``; every code is checked
    before anything else is read.
``int PREFIX_logits(const uint8_t *x, int32_t *logits)``
    ``logits[c]``: the reference's float32 logit of class ``c`` (:mod:`bnc_deploy.reference.dnn`:
    ``float32(acc) * float32(s_w * s_in) + bias``, one rounding per operation) as an integer: its
    IEEE-754 binary32 bit pattern in sign-magnitude form (``v >= 0``: the bits are ``v``; ``v <
    0``: ``0x80000000 | -v``). Integer order is the order of the logits, so the first largest
    integer is the label, and a host turns them back into the float32 logits bit for bit (the
    ``native`` runtime does). Returns 0, or -1 for an invalid ``x`` (``logits`` untouched).

Arithmetic (exact by construction; the verifier checks it before publishing)
--------------------------------------------------------------------------
The encoding is the artifact's integer encoding (:meth:`DNNArtifact.encode_integer`): the
standardized codes (int8 table) or one-hot 0/1, CNN pixels through the pixel map. Every hidden
layer is a sign layer: its integer accumulator (int32 sums of code times input; the bound
:func:`~bnc_deploy.artifacts.dnn.accumulator_bound` is checked at export) compared with the
shared integer threshold of :func:`~bnc_deploy.artifacts.dnn.sign_thresholds`, the unit's
direction folded into its stored codes (``codes * direction``: still odd and in range), so the
batch norm and the sign are one integer comparison. CNN layers fuse the 2x2 max-pool: a pooled
value is +1 when any of its four outputs fires (the max of +-1 values). The output layer's
accumulator is turned into the float32 logit by integer code that rounds exactly as binary32 does
(round to nearest, ties to even, after the product with the output scale and after the bias),
so no float is computed anywhere: the result does not depend on an FPU, FMA contraction or the
compiler's float flags.

ReLU networks (``exact = false``: their reference is float arithmetic): the header computes the
int8 TFLite file of :mod:`bnc_deploy.exporters.tflite_dnn` (lowering ``int8-ptq``, int8 output
layer, the same calibration rows: option ``representative``, the training rows with ``--data``)
with LiteRT's integer kernels: per-channel int8 weights, int32 biases, TFLite's requantization
(``QuantizeMultiplier``; CONV_2D double rounding, FULLY_CONNECTED single rounding, as the LiteRT the
tests pin it against computes them), zero points, fused ReLU clamps, max-pool, and the int8 logits'
DEQUANTIZE rounded to binary32 on integers. Its logits and labels equal that file's under LiteRT's
reference kernels (``tests/test_c_dnn_relu.py``); the verifier reports their label agreement with
the float reference. Building it needs TensorFlow (the ``convert`` extra), as the tflite export.

Refused: cardinalities above 256 (uint8_t codes); sign networks whose output accumulator can reach
``2**24`` (the reference's ``float32(acc)`` would round) or whose output scale or biases lie outside
float32's normal range.

Refused with ``pack_bits``: ReLU networks (their weights are the int8 TFLite file's, not B-bit codes;
a declared refusal), and dense layers whose packed sum ``2 * sum(u * in)`` could pass int32.

Storage: weights as ``int8_t`` (sign networks: ``int16_t`` for B = 8) per layer, ``[out][in]`` or
``[out][in][3][3]`` (metadata ``weight_storage`` ``"int8"``/``"int16"``); thresholds ``int32_t``; the
output scale and biases as exact (significand, exponent) pairs. Activations: two ``int8_t`` stack
buffers of the largest encoded or hidden layer (``PREFIX_MAX_ACTIVATIONS``).

With ``pack_bits`` (``--pack-bits``, sign networks; ``weight_storage = "packed{B}"``) each layer's weights
are a ``uint8_t`` bit stream of the codes ``u = (w + 2**B - 1) / 2`` of its stored weights ``w`` (odd,
``|w| <= 2**B - 1``), ``B`` bits each, LSB first in the same order as the bytes (the BN header's
``--pack-bits`` stream, :func:`~bnc_deploy.exporters._c_bnc_layout.pack_codes`), then
:data:`~bnc_deploy.exporters._c_bnc_layout.PACKED_GUARD_BYTES` zero bytes so that every 32-bit window
read stays inside the array. The sums read one window per group of ``min(16, 25 // B)`` codes (its bits
lie in the window whatever the first code's bit in its byte), the codes at compile-time offsets inside
it, and compute ``sum w * in = 2 * sum u * in - (2**B - 1) * sum in`` with the last sum shared by every
unit of the layer (exact: the export checks both terms fit int32); a conv layer decodes each output
channel's kernel onto the stack (``PREFIX_MAX_KERNEL`` values) and convolves it as the byte path does.
``PREFIX_WEIGHT_BYTES`` and metadata ``weight_bytes``: the bytes of the weight arrays as declared.

Registered as the ``("dnn", "c")`` exporter (extension ``.h``, runtime ``native``: the runtime
compiles the header with the host's compiler and runs it, :mod:`bnc_deploy.runtimes.native_dnn`).
The C is ``exporters/c_dnn.h`` (package data, sections filled in with data).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from bnc_deploy.artifacts.dnn import accumulator_bound, sign_thresholds, weight_code_dtype
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._c_bnc_layout import PACKED_GUARD_BYTES, pack_codes
from bnc_deploy.exporters._c_dnn_common import array, encoded_size, forward_body, input_arrays, logit_arrays
from bnc_deploy.exporters._c_dnn_common import (  # re-exported: the logits' integer contract, for readers
    logit_key as logit_key,
)
from bnc_deploy.exporters._c_dnn_common import logits_from_keys as logits_from_keys
from bnc_deploy.exporters.base import Option, Refusal, register_exporter
from bnc_deploy.exporters.c_bnc import DEFAULT_NAME, NAME, PACK_BITS
from bnc_deploy.formats.c import check_c_name, comment_text, metadata_comment
from bnc_deploy.formats.c_template import template_sections
from bnc_deploy.formats.dnn import dnn_export_metadata
from bnc_deploy.version import __version__

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact

#: The C of the header (package data, beside this module).
TEMPLATE = "c_dnn.h"
LOWERING = "integer-sign"
#: Largest cardinality a uint8_t code can address.
MAX_CARDINALITY = 256
#: ``float32(acc)`` is exact below this (the reference converts the output accumulator).
OUTPUT_ACC_LIMIT = 2**24
HIDDEN_ACC_LIMIT = 2**31 - 2
#: Codes read from one 32-bit window by the packed sums (the template unrolls up to 16).
MAX_GROUP = 16
PACK_RELU_MESSAGE = (
    "--pack-bits packs the B-bit weight codes of sign networks; a ReLU network's C header computes its "
    "int8 TFLite file, whose weights are int8 values, not B-bit codes (export it without --pack-bits)"
)
#: Output scales and biases must be 0 or within this binary exponent range, so every logit is a
#: normal binary32 number (the integer rounding has no subnormal or overflow case).
MIN_EXPONENT, MAX_EXPONENT = -100, 100


def _output_scale(artifact: DNNArtifact) -> float:
    s_in = artifact.layer_input_scales()[-1]
    assert s_in is not None  # a sign network's layer inputs are integers with a known scale
    return float(np.float32(artifact.weight_scale * s_in))


def check_exportable(artifact: DNNArtifact, name: str) -> None:
    """ExportError saying why ``artifact`` has no exact integer C form (see the module docstring)."""
    check_c_name(name)
    if getattr(artifact, "kind", None) != "dnn":
        raise ExportError(f"the DNN C exporter exports DNN artifacts, got {type(artifact).__name__}")
    big = [i for i, c in enumerate(artifact.cardinalities) if int(c) > MAX_CARDINALITY]
    if big:
        raise ExportError(f"feature {big[0]} has {int(artifact.cardinalities[big[0]])} values; C takes uint8_t codes")
    if artifact.activation != "sign":
        return  # the int8 file's accumulators are TFLite's own (int32); _c_dnn_relu checks the file
    last = len(artifact.layers) - 1
    for k in range(len(artifact.layers)):
        bound = int(accumulator_bound(artifact, k).max(initial=0))
        limit = OUTPUT_ACC_LIMIT if k == last else HIDDEN_ACC_LIMIT
        if bound >= limit:
            raise ExportError(f"layer {k}: the accumulator can reach {bound}, at or beyond {limit} (not exact)")
    out = artifact.layers[last]
    values = [_output_scale(artifact)] + [float(b) for b in out.bias]
    scale_bound = int(accumulator_bound(artifact, last).max(initial=0)) * values[0]
    for v in values + [scale_bound]:
        if v != 0.0 and not (MIN_EXPONENT <= math.frexp(v)[1] <= MAX_EXPONENT and math.isfinite(v)):
            raise ExportError(f"output scale or bias {v!r} is outside 2^{MIN_EXPONENT}..2^{MAX_EXPONENT}")


def check_packable(artifact: DNNArtifact) -> None:
    """ExportError saying why ``artifact``'s weights have no ``--pack-bits`` C form: ReLU networks (their
    weights are their int8 TFLite file's, not B-bit codes), or a packed sum that could overflow int32."""
    if artifact.activation != "sign":
        raise ExportError(PACK_RELU_MESSAGE)
    if artifact.n_parameters * artifact.weight_bits >= 2**32:
        raise ExportError(f"{artifact.n_parameters} weights of {artifact.weight_bits} bits: the bit stream passes 2^32")
    offset = 2**artifact.weight_bits - 1
    for k, layer in enumerate(artifact.layers):
        if layer.type != "dense":
            continue  # conv kernels are decoded to their values before the sums
        table = artifact.input_codes if k == 0 else None  # None: one-hot or +-1 inputs
        max_in = 1 if table is None else int(np.abs(table.astype(np.int64)).max(initial=1))
        if 2 * offset * layer.n_in * max_in > HIDDEN_ACC_LIMIT:
            raise ExportError(f"layer {k}: the packed sum 2 * sum(u * in) can pass int32 (not exact packed)")


def _hidden_weights(artifact: DNNArtifact, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Layer ``k``'s stored codes (times each unit's direction) and integer thresholds."""
    layer = artifact.layers[k]
    direction, threshold = sign_thresholds(artifact, k)
    shape = (-1,) + (1,) * (layer.codes.ndim - 1)
    return layer.codes.astype(np.int64) * direction.reshape(shape), threshold


def packed_weights(values: np.ndarray, bits: int) -> np.ndarray:
    """Stored weights (odd, ``|w| <= 2**B - 1``) as the ``--pack-bits`` array: the codes ``(w + 2**B - 1) / 2``
    packed LSB first (:func:`~bnc_deploy.exporters._c_bnc_layout.pack_codes`), then the zero guard bytes."""
    offset = 2**bits - 1
    codes = (np.asarray(values, dtype=np.int64).reshape(-1) + offset) // 2
    assert codes.min(initial=0) >= 0 and codes.max(initial=0) <= offset  # the artifact's codes are odd and in range
    return np.concatenate([pack_codes(codes, bits), np.zeros(PACKED_GUARD_BYTES, dtype=np.uint8)])


def _sign_arrays(artifact: DNNArtifact, name: str, wtype: str, pack_bits: bool) -> tuple[list[str], int]:
    """Every layer's weights and thresholds (sign networks), the output scale and biases; the weight bytes."""
    lines: list[str] = []
    last, n_bytes = len(artifact.layers) - 1, 0
    for k, layer in enumerate(artifact.layers):
        shape = "[out][in]" if layer.type == "dense" else "[out][in][3][3]"
        what = f"Layer {k} ({layer.type}) codes times direction" if k < last else f"Output layer {k} codes"
        codes, threshold = _hidden_weights(artifact, k) if k < last else (layer.codes, None)
        if pack_bits:
            stream = packed_weights(codes, artifact.weight_bits)
            lines += array("uint8_t", f"{name}_w{k}", stream, f"{what}, {shape}, packed (see below).")
            n_bytes += stream.size
        else:
            lines += array(wtype, f"{name}_w{k}", codes, f"{what}, {shape}.")
            n_bytes += codes.size * (1 if wtype == "int8_t" else 2)
        if threshold is not None:
            lines += array("int32_t", f"{name}_thr{k}", threshold, f"Layer {k}: +1 where the sum >= threshold.")
    scale, biases = _output_scale(artifact), artifact.layers[last].bias
    return lines + logit_arrays(name, scale, biases, "float32(s_w * s_in)"), n_bytes


def _sign_call(artifact: DNNArtifact, name: str) -> Callable[[int, str, str], str]:
    shapes = artifact.spatial_shapes()

    def call(k: int, src: str, dst: str) -> str:
        layer = artifact.layers[k]
        if layer.type == "dense":
            return f"    {name}_dense_sign({name}_w{k}, {name}_thr{k}, {layer.n_in}, {layer.n_out}, {src}, {dst});"
        (h, w), pool = shapes[k], int(layer.pool)
        args = f"{layer.n_in}, {layer.n_out}, {h}, {w}, {pool}"
        return f"    {name}_conv_sign({name}_w{k}, {name}_thr{k}, {args}, {src}, {dst});"

    return call


def _describe(artifact: DNNArtifact) -> str:
    parts = []
    for layer in artifact.layers[:-1]:
        parts.append(f"{layer.type} {layer.n_out}" + (" + 2x2 max-pool" if layer.pool else ""))
    return ", ".join(parts + [f"dense {artifact.n_classes} (output)"]) + f" (hidden layers {artifact.activation})"


def _sign_sections(artifact: DNNArtifact, pack_bits: bool) -> list[str]:
    """The template sections of a sign network's layers (module docstring: "Storage")."""
    kinds = {layer.type for layer in artifact.layers[:-1]}
    packed = "_packed" if pack_bits else ""
    sections = ["packed"] if pack_bits else []
    sections += [f"dense_sign{packed}"] if "dense" in kinds else []
    sections += ["conv_sign", f"conv_sign{packed or '_bytes'}"] if "conv2d" in kinds else []
    return sections + [f"output{packed}"]


def _packed_values(artifact: DNNArtifact, name: str, wtype: str) -> dict[str, object]:
    """The ``--pack-bits`` sections' placeholders (bits per code, codes per 32-bit window, the conv kernel)."""
    bits = artifact.weight_bits
    kernels = [layer.n_in * 9 for layer in artifact.layers[:-1] if layer.type == "conv2d"]
    stack = f", and one {wtype} conv kernel of {name.upper()}_MAX_KERNEL values" if kernels else ""
    return {
        "code_mask": 2**bits - 1,
        "code_offset": 2**bits - 1,
        "last_code_bit": bits - 1,
        "group": min(MAX_GROUP, (32 - 7) // bits),
        "max_kernel": max(kernels, default=0),
        "stack_text": stack,
        "weight_text": f"{bits}-bit codes packed LSB first",
    }


def _sign_parts(
    artifact: DNNArtifact, name: str, wtype: str, pack_bits: bool
) -> tuple[dict[str, object], list[str], dict[str, Any]]:
    """Sign networks: the placeholders, the layer sections and the metadata's extra facts."""
    body, max_act = forward_body(artifact, name, _sign_call(artifact, name))
    weights, n_bytes = _sign_arrays(artifact, name, wtype, pack_bits)
    values: dict[str, object] = {"arrays": "\n".join(input_arrays(artifact, name) + weights)}
    values.update(stack_text="", weight_text=wtype)
    if pack_bits:
        values.update(_packed_values(artifact, name, wtype))
    values.update(layer_calls="\n".join(body), max_activations=max_act)
    values["description"] = f"{artifact.architecture.upper()} sign network, integer sums and thresholds"
    values["activations_text"] = "activations +-1 as int8_t"
    values["logit_text"] = (
        "The reference's logit: acc[c] * float32(s_w * s_in) + bias[c] (acc: the output layer's integer\n"
        " *     sum), one rounding after the product and one after the sum."
    )
    storage = f"packed{artifact.weight_bits}" if pack_bits else wtype.removesuffix("_t")
    extra = {"lowering": LOWERING, "exact": True, "weight_storage": storage, "weight_bytes": n_bytes}
    return values, _sign_sections(artifact, pack_bits), extra


def build_c_dnn_source(
    artifact: DNNArtifact, *, name: str = DEFAULT_NAME, representative: Any = None, pack_bits: bool = False
) -> str:
    """The text of the header (see the module docstring). ``representative``: the calibration rows of a
    ReLU network's int8 file (as the tflite exporter's option; default the check set). ``pack_bits``:
    sign networks' weights as B-bit codes packed LSB first."""
    check_exportable(artifact, name)
    wtype = "int8_t" if weight_code_dtype(artifact.weight_bits) == np.int8 else "int16_t"
    if pack_bits:
        check_packable(artifact)
    if artifact.activation == "sign":
        values, layer_sections, extra = _sign_parts(artifact, name, wtype, pack_bits)
    else:
        from bnc_deploy.exporters._c_dnn_relu import relu_parts

        values, layer_sections, extra = relu_parts(artifact, name, representative)
        wtype = "int8_t"
        values.update(stack_text="", weight_text=wtype)
    lowering, exact = extra.pop("lowering"), extra.pop("exact")
    meta = dnn_export_metadata(
        artifact,
        format="c",
        exact=exact,
        input_dtype="uint8",
        lowering=lowering,
        extra={
            "c_name": name,
            "c_standard": "c99",
            "logits_encoding": "binary32-sign-magnitude-int32",
            "max_activations": values["max_activations"],
            **extra,
        },
    )
    values.update(_common_values(artifact, name, meta))
    values.update(wtype=wtype, weight_bytes=extra["weight_bytes"])
    encode = f"encode_{artifact.architecture}_{artifact.input_encoding}"
    sections = ["head", "macros", "arrays", "guard", encode, *layer_sections, "logit", "forward", "api", "end"]
    template = template_sections(__package__, TEMPLATE)
    return "".join(template[section].substitute(values) for section in sections)


def _common_values(artifact: DNNArtifact, name: str, meta: dict[str, Any]) -> dict[str, object]:
    """The placeholders every header fills in: names, model facts, the metadata comment."""
    last = len(artifact.layers) - 1
    return {
        "prefix": name,
        "PREFIX": name.upper(),
        "file_name": comment_text(name),
        "version": comment_text(__version__),
        "n_features": artifact.n_features,
        "n_classes": artifact.n_classes,
        "layers_text": _describe(artifact),
        "bits": artifact.weight_bits,
        "n_layers": len(artifact.layers),
        "n_parameters": artifact.n_parameters,
        "size_bits": artifact.size_bits,
        "n_ops": artifact.n_ops,
        "artifact_sha256": meta["artifact_sha256"],
        "class_list": "\n".join(f" *   {k}: {comment_text(c)}" for k, c in enumerate(artifact.class_names)),
        "feature_list": "\n".join(
            f" *   {i}: {comment_text(f)}, {int(artifact.cardinalities[i])}"
            for i, f in enumerate(artifact.feature_names)
        ),
        "metadata": metadata_comment(meta).rstrip("\n"),
        "card_macros": "\n".join(
            f"#define {name.upper()}_CARD_{i} {int(c)}" for i, c in enumerate(artifact.cardinalities)
        ),
        "input_stride": artifact.max_cardinality,
        "n_inputs": encoded_size(artifact),
        "n_pixels": artifact.n_features,
        "last": last,
        "last_in": artifact.layers[last].n_in,
    }


def build_c_dnn_bytes(
    artifact: DNNArtifact, *, name: str = DEFAULT_NAME, representative: Any = None, pack_bits: bool = False
) -> bytes:
    """The header file's bytes (ASCII) for the verifier (:mod:`bnc_deploy.verify`)."""
    source = build_c_dnn_source(artifact, name=name, representative=representative, pack_bits=pack_bits)
    return source.encode("ascii")


def _relu_model(artifact: Any) -> bool:
    """``models=`` of the ReLU refusal of ``pack_bits``."""
    return getattr(artifact, "activation", None) == "relu"


register_exporter(
    "dnn",
    "c",
    build_c_dnn_bytes,
    extension=".h",
    runtime="native",
    description="header-only C99 library, integers only: sign FC/CNN exact; ReLU FC/CNN as LiteRT's int8 kernels",
    options=[
        NAME,
        Option(
            "representative", "rows", None, help="calibration rows (codes) of a ReLU network (default: the check set)"
        ),
        PACK_BITS,
    ],
    refusals=[
        Refusal(
            "a ReLU network's C header computes its int8 TFLite file: its weights are int8 values, not B-bit codes",
            r"--pack-bits packs the B-bit weight codes of sign networks",
            options={"pack_bits": True},
            models=_relu_model,
        )
    ],
)
