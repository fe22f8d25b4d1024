"""Shared pieces of the DNN C export (``exporters/c_dnn.py``, ``exporters/_c_dnn_relu.py``): constant
arrays, the encoding's tables, the logits' binary32 (significand, exponent) pairs and sign-magnitude
integers, and the body of ``PREFIX_forward``. NumPy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact

#: Values per line in the generated arrays.
PER_LINE = 16


def array(ctype: str, name: str, values: Any, comment: str) -> list[str]:
    flat = [int(v) for v in np.asarray(values).reshape(-1)] or [0]  # C99: no zero-length arrays
    lines = [f"/* {comment} */", f"static const {ctype} {name}[{len(flat)}] = {{"]
    for k in range(0, len(flat), PER_LINE):
        lines.append("    " + ", ".join(str(v) for v in flat[k : k + PER_LINE]) + ",")
    return lines + ["};"]


def int_type(values: Any) -> str:
    v = np.asarray(values, dtype=np.int64)
    low, high = int(v.min(initial=0)), int(v.max(initial=0))
    for bits in (8, 16, 32):
        if low >= 0 and high < 2**bits:
            return f"uint{bits}_t"
    return "int32_t"


def binary32_parts(value: float) -> tuple[int, int]:
    """``(m, e)`` with ``value == m * 2**e`` and ``2**23 <= |m| < 2**24`` (``(0, 0)`` for 0) for a float32 value."""
    v = float(np.float32(value))
    if v == 0.0:
        return 0, 0
    fraction, exponent = math.frexp(v)  # v = fraction * 2**exponent, 0.5 <= |fraction| < 1
    m = int(fraction * 2**24)
    assert m * 2.0 ** (exponent - 24) == v
    return m, exponent - 24


def logit_key(value: float) -> int:
    """The sign-magnitude binary32 integer ``PREFIX_logits`` writes for a float32 logit."""
    bits = int(np.float32(value).view(np.uint32))
    magnitude = bits & 0x7FFFFFFF
    return -magnitude if bits >> 31 else magnitude


def logits_from_keys(keys: np.ndarray) -> np.ndarray:
    """Inverse of :func:`logit_key` (NumPy, any shape): the float32 logits of ``PREFIX_logits``' integers."""
    k = np.asarray(keys, dtype=np.int64)
    bits = np.where(k < 0, 0x80000000 | -k, k).astype(np.uint32)
    return bits.view(np.float32)


def input_arrays(artifact: DNNArtifact, name: str) -> list[str]:
    """The guard's and the encoding's constant arrays."""
    lines = array("uint8_t", f"{name}_max_code", artifact.cardinalities - 1, "Largest valid code of each feature.")
    if artifact.input_encoding == "standardized":
        lines += array(
            "int8_t",
            f"{name}_input",
            artifact.input_codes,
            f"Standardized input codes, feature j's value v at j * {artifact.max_cardinality} + v.",
        )
    elif artifact.architecture == "fc":
        offsets = artifact.onehot_offsets()
        lines += array(int_type(offsets), f"{name}_onehot_offset", offsets, "First one-hot slot of each feature.")
    if artifact.architecture == "cnn":
        pixels = artifact.pixel_index().reshape(-1)
        lines += array(int_type(pixels), f"{name}_pixel", pixels, "Feature of each pixel, row-major pixels.")
    return lines


def logit_arrays(name: str, scale: float, biases: Any, what: str) -> list[str]:
    """The output scale (macros) and biases as exact (significand, exponent) pairs, for ``PREFIX_logit``."""
    m, e = binary32_parts(scale)
    parts = [binary32_parts(float(b)) for b in biases]
    lines = [
        f"/* Output scale {what} = {m} * 2^{e}. */",
        f"#define {name.upper()}_OUT_SCALE_SIGNIFICAND {m}",
        f"#define {name.upper()}_OUT_SCALE_EXP ({e})",
    ]
    lines += array("int32_t", f"{name}_bias_significand", [p[0] for p in parts], "Output biases: significand...")
    return lines + array("int16_t", f"{name}_bias_exp", [p[1] for p in parts], "... times 2^exponent (exact).")


def encoded_size(artifact: DNNArtifact) -> int:
    """Values of the encoded input: FC ``n_inputs``, CNN ``channels * H * W``."""
    return artifact.n_inputs if artifact.architecture == "fc" else artifact.input_channels * artifact.n_features


def forward_body(artifact: DNNArtifact, name: str, call: Callable[[int, str, str], str]) -> tuple[list[str], int]:
    """The body of ``PREFIX_forward`` (buffers, the encoding, ``call(k, src, dst)`` per hidden layer, the
    output layer) and the buffer size: the largest encoded input or hidden output."""
    sizes = [encoded_size(artifact)]
    shapes = artifact.spatial_shapes()
    buffers = ("a", "b")
    calls = []
    for k, layer in enumerate(artifact.layers[:-1]):
        calls.append(call(k, buffers[k % 2], buffers[(k + 1) % 2]))
        sizes.append(layer.n_out * (shapes[k + 1][0] * shapes[k + 1][1] if layer.type == "conv2d" else 1))
    n_hidden = len(artifact.layers) - 1
    declared = ", ".join(f"{b}[{name.upper()}_MAX_ACTIVATIONS]" for b in buffers[: 1 + min(n_hidden, 1)])
    body = [f"    int8_t {declared};", f"    {name}_encode(x, a);"] + calls
    body.append(f"    {name}_output({buffers[n_hidden % 2]}, acc);")
    return body, max(sizes)
