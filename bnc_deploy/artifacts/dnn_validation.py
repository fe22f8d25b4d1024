"""Consistency checks of a DNN artifact (:class:`~bnc_deploy.artifacts.dnn.DNNArtifact`, which runs
them in ``validate``): the vocabulary of its header (architectures, activations, encodings, pixel
orders, weight bits, layer types), the header itself, and every layer against its input (weight
codes, shapes, batch-norm and bias vectors, the layer's role as hidden or output layer).

Each check raises ArtifactError naming the problem (and the layer). The functions take the
artifact and its layers as they are (``artifact``: a DNNArtifact, ``layer``: a DNNLayer).
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.artifacts.container import ArtifactError

ARCHITECTURES = ("fc", "cnn")
ACTIVATIONS = ("relu", "sign")
ENCODINGS = ("standardized", "onehot")
PIXEL_ORDERS = ("row-major", "column-major")
MIN_WEIGHT_BITS, MAX_WEIGHT_BITS = 1, 8
LAYER_TYPES = ("dense", "conv2d")


def validate_header(artifact) -> None:
    """Architecture, activation, encoding, weight bits, classes, features and cardinalities."""
    d, c = artifact.n_features, artifact.n_classes
    if artifact.architecture not in ARCHITECTURES:
        raise ArtifactError(f"unknown architecture {artifact.architecture!r} (known: {', '.join(ARCHITECTURES)})")
    if artifact.activation not in ACTIVATIONS:
        raise ArtifactError(f"unknown activation {artifact.activation!r} (known: {', '.join(ACTIVATIONS)})")
    if artifact.input_encoding not in ENCODINGS:
        raise ArtifactError(f"unknown input encoding {artifact.input_encoding!r} (known: {', '.join(ENCODINGS)})")
    if (
        isinstance(artifact.weight_bits, bool)
        or not isinstance(artifact.weight_bits, (int, np.integer))
        or not MIN_WEIGHT_BITS <= artifact.weight_bits <= MAX_WEIGHT_BITS
    ):
        raise ArtifactError(
            f"unsupported weight bit width {artifact.weight_bits!r}: must be an integer in "
            f"{MIN_WEIGHT_BITS}..{MAX_WEIGHT_BITS}"
        )
    artifact.weight_bits = int(artifact.weight_bits)
    if c < 2:
        raise ArtifactError(f"a classifier needs at least 2 classes, got {c}")
    if d < 1 or len(artifact.feature_names) != d:
        raise ArtifactError(f"{len(artifact.feature_names)} feature names for {d} features")
    if artifact.cardinalities.min() < 1:
        j = int(np.argmin(artifact.cardinalities))
        raise ArtifactError(f"feature {j} has cardinality {int(artifact.cardinalities[j])} (must be >= 1)")


def validate_layer(artifact, k: int, layer, width: int, spatial, expected_dtype) -> tuple:
    """Layer ``k`` given its input (``width`` channels or features, ``spatial`` (H, W) or None);
    returns the next layer's input."""
    last = k == len(artifact.layers) - 1
    where = f"layer {k} ({layer.type})"
    if layer.type not in LAYER_TYPES:
        raise ArtifactError(f"layer {k}: unknown type {layer.type!r}")
    _validate_codes(artifact, layer.codes, where, expected_dtype)
    if layer.type == "conv2d":
        width, spatial = _validate_conv_shape(artifact, layer, where, width, spatial, last)
    else:
        width, spatial = _validate_dense_shape(layer, where, width, spatial)
    n_out = layer.codes.shape[0]
    _validate_vectors(layer, where, n_out)
    _validate_role(artifact, layer, where, n_out, last)
    return width, spatial


def _validate_codes(artifact, codes, where: str, expected_dtype) -> None:
    """The weight codes' dtype and values: odd integers within the bit width."""
    if not isinstance(codes, np.ndarray) or codes.dtype != expected_dtype:
        raise ArtifactError(
            f"{where}: weight codes must be {np.dtype(expected_dtype).name} for "
            f"B={artifact.weight_bits}, got {getattr(codes, 'dtype', type(codes))}"
        )
    wide = codes.astype(np.int64)
    if codes.size and (np.abs(wide).max() > artifact.max_code or np.any(wide % 2 == 0)):
        bad = wide[(np.abs(wide) > artifact.max_code) | (wide % 2 == 0)].ravel()[0]
        raise ArtifactError(
            f"{where}: weight code {int(bad)} is not an odd integer in "
            f"-{artifact.max_code}..{artifact.max_code} (B={artifact.weight_bits})"
        )


def _validate_conv_shape(artifact, layer, where: str, width: int, spatial, last: bool) -> tuple:
    codes = layer.codes
    if artifact.architecture != "cnn" or spatial is None:
        raise ArtifactError(f"{where}: convolutions must come first, in a cnn")
    if codes.ndim != 4 or codes.shape[2:] != (3, 3) or codes.shape[1] != width:
        raise ArtifactError(f"{where}: codes have shape {codes.shape}, expected ({codes.shape[0]}, {width}, 3, 3)")
    if last:
        raise ArtifactError(f"{where}: the output layer must be dense")
    width = codes.shape[0]
    if layer.pool:
        spatial = (spatial[0] // 2, spatial[1] // 2)
        if min(spatial) < 1:
            raise ArtifactError(f"{where}: pooling leaves an empty image")
    return width, spatial


def _validate_dense_shape(layer, where: str, width: int, spatial) -> tuple:
    """A dense layer's codes against its input (a convolution's (C, H, W) output is flattened)."""
    codes = layer.codes
    if spatial is not None:  # flatten (C, H, W)
        width, spatial = width * spatial[0] * spatial[1], None
    if codes.ndim != 2 or codes.shape[1] != width:
        raise ArtifactError(
            f"{where}: codes have shape {codes.shape}, expected ({codes.shape[0] if codes.ndim else '?'}, {width})"
        )
    if layer.pool:
        raise ArtifactError(f"{where}: dense layers do not pool")
    return codes.shape[0], spatial


def _validate_vectors(layer, where: str, n_out: int) -> None:
    """Batch-norm scale and shift (both or neither) and bias: finite float32 of shape (n_out,)."""
    for name in ("scale", "shift", "bias"):
        value = getattr(layer, name)
        if value is None:
            continue
        if not isinstance(value, np.ndarray) or value.dtype != np.float32 or value.shape != (n_out,):
            raise ArtifactError(
                f"{where}: {name} must be float32 of shape ({n_out},), got "
                f"{getattr(value, 'dtype', type(value))} {getattr(value, 'shape', '')}"
            )
        if not np.all(np.isfinite(value)):
            raise ArtifactError(f"{where}: {name} has non-finite values")
    if (layer.scale is None) != (layer.shift is None):
        raise ArtifactError(f"{where}: batch norm needs both scale and shift")


def _validate_role(artifact, layer, where: str, n_out: int, last: bool) -> None:
    """The output layer: a bias, no batch norm or activation, one output per class; hidden layers:
    the network's activation and no bias."""
    c = artifact.n_classes
    if last:
        if layer.activation is not None or layer.scale is not None or layer.bias is None:
            raise ArtifactError(f"{where}: the output layer has a bias and no batch norm or activation")
        if n_out != c:
            raise ArtifactError(f"{where}: {n_out} outputs for {c} classes")
    else:
        if layer.activation != artifact.activation:
            raise ArtifactError(f"{where}: activation {layer.activation!r}, the network uses {artifact.activation!r}")
        if layer.bias is not None:
            raise ArtifactError(f"{where}: hidden layers have no bias (fold it into the batch-norm shift)")
