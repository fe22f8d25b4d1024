"""What both TFLite exporters share: importing TensorFlow quietly, the int8 fake-quant idioms that
pin a tensor's quantization, and the operator rules every TFLite export obeys.

A private helper module (the leading underscore keeps the exporter registry from treating it as
an exporter); it builds nothing on its own.
"""

from __future__ import annotations

import os

import numpy as np

from bnc_deploy.errors import MissingExtraError

#: Largest int8 weight (TFLite int8 weights are symmetric: -127..127, zero point 0).
INT8_WEIGHT_MAX = 127
#: Comparison operators LiteRT must only see on non-int8 operands (an int8 GREATER aborts the process).
COMPARISON_OPS = ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL")
#: Operators that must never appear in an exported file (no Flex/custom ops, no delegates; ONE_HOT
#: is mis-quantized by the converter, see exporters.tflite_bnc).
FORBIDDEN_OPS = ("ONE_HOT", "CUSTOM", "DELEGATE")


def tensorflow():
    """Import TensorFlow lazily (an export-time dependency only), with its C++ logging quiet."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("TFLite export", "convert", exc) from None
    return tf


def fake_quant(tf, value, low: float, high: float, narrow: bool = False):
    """Fix a tensor's int8 quantization through its range (8 bits: scale = (high - low) / levels)."""
    return tf.quantization.fake_quant_with_min_max_args(value, min=float(low), max=float(high), num_bits=8,
                                                        narrow_range=narrow)


def int8_weights(tf, units: np.ndarray, scale: float):
    """Constant int8 weights ``units`` (integers in -127..127) with per-tensor scale ``scale``, zero point 0."""
    w = tf.constant(np.asarray(units, dtype=np.float64).astype(np.float32) * np.float32(scale))
    return fake_quant(tf, w, -INT8_WEIGHT_MAX * scale, INT8_WEIGHT_MAX * scale, narrow=True)
