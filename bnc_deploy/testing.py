"""Small random DNN artifacts for tests, exporter parity checks and docs (no torch needed).

``random_dnn_artifact`` draws odd weight codes, batch-norm scales of both signs (and some zeros,
which make constant sign units), shifts and biases, so exporters meet every case the trainer can
produce, and some it rarely does.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.artifacts.dnn import INPUT_CODE_MAX, DNNArtifact, DNNLayer, weight_code_dtype


def random_codes(rng: np.random.Generator, shape, bits: int) -> np.ndarray:
    """Odd integer codes in ``-(2**B - 1) .. 2**B - 1``."""
    levels = 2 ** bits
    k = rng.integers(0, levels, size=shape)
    return (2 * k - (levels - 1)).astype(weight_code_dtype(bits))


def random_dnn_artifact(seed: int = 0, *, architecture: str = "fc", activation: str = "sign", bits: int = 2,
                        encoding: str = "standardized", batch_norm: bool = True, hidden=(8, 6),
                        n_features: int | None = None, image_shape=(5, 4), n_classes: int = 3,
                        max_cardinality: int = 5, pixel_order: str = "row-major", n_check: int = 64,
                        degenerate_units: bool = True) -> DNNArtifact:
    """A random, valid DNN artifact.

    ``hidden`` are FC hidden widths or CNN channels (one or two conv layers, each pooled).
    ``degenerate_units`` puts a zero and a negative batch-norm scale in the first hidden layer.
    """
    rng = np.random.default_rng(seed)
    if architecture == "cnn":
        n_features = int(image_shape[0] * image_shape[1])
    elif n_features is None:
        n_features = 7
    cards = rng.integers(1, max_cardinality + 1, size=n_features)
    cards[0] = max_cardinality
    input_codes, input_scale = None, 1.0
    if encoding == "standardized":
        kmax = int(cards.max())
        input_codes = np.zeros((n_features, kmax), dtype=np.int8)
        for j, k in enumerate(cards):
            input_codes[j, :k] = rng.integers(-INPUT_CODE_MAX, INPUT_CODE_MAX + 1, size=k)
        input_scale = 2.0 ** -int(rng.integers(2, 6))
    e = 1 if encoding == "standardized" else int(cards.max())
    layers = []
    if architecture == "fc":
        width = n_features if encoding == "standardized" else int(cards.sum())
        for h in hidden:
            layers.append(_hidden(rng, "dense", (h, width), bits, activation, batch_norm, False))
            width = h
    else:
        width, hw = e, tuple(image_shape)
        for ch in hidden:
            layers.append(_hidden(rng, "conv2d", (ch, width, 3, 3), bits, activation, batch_norm, True))
            width, hw = ch, (hw[0] // 2, hw[1] // 2)
        width = width * hw[0] * hw[1]
    layers.append(DNNLayer("dense", random_codes(rng, (n_classes, width), bits),
                           bias=rng.normal(0, 0.5, n_classes).astype(np.float32)))
    if degenerate_units and batch_norm and layers[0].scale is not None and layers[0].n_out >= 2:
        layers[0].scale[0] = 0.0
        layers[0].scale[1] = -abs(layers[0].scale[1])
    check_x = np.stack([rng.integers(0, k, size=n_check) for k in cards], axis=1).astype(np.int64)
    art = DNNArtifact(
        architecture=architecture, cardinalities=cards, class_names=[f"c{i}" for i in range(n_classes)],
        feature_names=[f"f{j}" for j in range(n_features)], weight_bits=bits, activation=activation,
        input_encoding=encoding, layers=layers, input_codes=input_codes, input_scale=input_scale,
        image_shape=tuple(image_shape) if architecture == "cnn" else None, pixel_order=pixel_order,
        metadata={"origin": f"random_dnn_artifact(seed={seed})"},
        check_x=check_x, check_y=rng.integers(0, n_classes, size=n_check))
    _calibrate(art, rng)
    return art


def _calibrate(art: DNNArtifact, rng: np.random.Generator) -> None:
    """Place shifts and biases inside the data's range, layer by layer, so that units fire on some
    rows and not on others and every class gets predicted (a random net is otherwise degenerate)."""
    from bnc_deploy.reference.dnn import DNNReferencePredictor

    x = art.check_x
    for k, layer in enumerate(art.layers):
        z = DNNReferencePredictor(art).pre_activations(x)[k]
        axes = (0,) + tuple(range(2, z.ndim))
        if layer.activation is None:
            layer.bias[:] = (-z.mean(axis=axes) + rng.normal(0, 0.05, layer.n_out) * (z.std() + 1e-3)).astype(np.float32)
        elif layer.scale is not None:
            # A 2x2 max of signs is +1 unless all four are -1: aim for P(-1) ~ 0.84 before pooling.
            low, high = (0.75, 0.92) if (layer.pool and layer.activation == "sign") else (0.3, 0.7)
            q = np.array([np.quantile(np.moveaxis(z, 1, 0)[u], rng.uniform(low, high)) for u in range(layer.n_out)])
            layer.shift[:] = (-layer.scale.astype(np.float64) * q).astype(np.float32)


def _hidden(rng, kind, shape, bits, activation, batch_norm, pool) -> DNNLayer:
    n = shape[0]
    scale = shift = None
    if batch_norm:
        scale = (rng.uniform(0.2, 2.0, n) * rng.choice([1.0, 1.0, -1.0], n)).astype(np.float32)
        # Shifts on the accumulator's scale, so units fire on some rows and not on others.
        shift = rng.normal(0, 1.0, n).astype(np.float32)
    return DNNLayer(kind, random_codes(rng, shape, bits), scale=scale, shift=shift, activation=activation, pool=pool)
