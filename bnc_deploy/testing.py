"""Test support (sklearn's ``utils.estimator_checks`` in spirit): random artifacts and ``check_export``.

* :func:`random_bnc_artifact` / :func:`random_dnn_artifact`: small random, valid model files of
  every shape the trainers can produce, and some they rarely do (cardinality-1 features, odd
  image sizes, zero and negative batch-norm scales, constant sign units). No torch needed.
* :func:`example_artifacts`: one small artifact per case worth covering for a model kind.
* :func:`check_export`: export through the one verifier (:mod:`bnc_deploy.verify`), then open
  the file in **every** registered runtime that reads its extension and check it against the
  reference predictor: identical scores and labels where the file promises exactness, label
  agreement otherwise, metadata that matches the artifact, invalid input refused with
  InputError. The conformance matrix (``tests/test_conformance.py``) runs it for every
  registered (kind, format) x runtime, so a newly registered exporter is covered with no new
  test code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bnc_deploy.artifacts.bnc import BNCArtifact
from bnc_deploy.artifacts.dnn import INPUT_CODE_MAX, DNNArtifact, DNNLayer, weight_code_dtype
from bnc_deploy.quantizers import FixedPointLogQuantizer


# ================================================================================================
# Bayesian network classifiers
# ================================================================================================
def random_parents(rng: np.random.Generator, d: int, tan: bool) -> np.ndarray:
    """A random forest over ``d`` features (each parent earlier in a random order), or all -1."""
    parents = np.full(d, -1, dtype=np.int64)
    if tan:
        order = rng.permutation(d)
        for k in range(1, d):
            if rng.random() < 0.8:
                parents[order[k]] = order[rng.integers(0, k)]
    return parents


def random_bnc_artifact(
    rng: np.random.Generator,
    *,
    d: int | None = None,
    n_classes: int | None = None,
    tan: bool | None = None,
    bits: int | None = None,
    int_bits: int | None = None,
    max_card: int = 6,
    n_check: int = 20,
    discretizer: dict | None = None,
    cardinalities=None,
) -> BNCArtifact:
    """A valid NB/TAN artifact with random tables (float when ``bits`` is None).

    Cardinalities are drawn from 1..max_card (1 included on purpose) unless given.
    """
    d = (int(rng.integers(1, 7)) if cardinalities is None else len(cardinalities)) if d is None else d
    c = int(rng.integers(2, 6)) if n_classes is None else n_classes
    tan = bool(rng.integers(0, 2)) if tan is None else tan
    card = rng.integers(1, max_card + 1, size=d) if cardinalities is None else np.asarray(cardinalities)
    parents = random_parents(rng, d, tan)
    safe = np.where(parents >= 0, parents, 0)
    n_rows = int((card * np.where(parents >= 0, card[safe], 1)).sum())
    tables = {}
    if bits is None:
        tables["class_logp"] = np.log(rng.dirichlet(np.ones(c))).astype(np.float32)
        tables["table_logp"] = -rng.exponential(2.0, size=(n_rows, c)).astype(np.float32)
    else:
        q = FixedPointLogQuantizer(bits, int_bits if int_bits is not None else min(bits, 2))
        tables["quantizer"] = q
        tables["class_codes"] = rng.integers(0, q.max_code + 1, size=c).astype(np.uint8)
        tables["table_codes"] = rng.integers(0, q.max_code + 1, size=(n_rows, c)).astype(np.uint8)
    return BNCArtifact(
        parents=parents,
        cardinalities=card,
        class_names=[f"class{k}" for k in range(c)],
        feature_names=[f"feat{i}" for i in range(d)],
        discretizer=discretizer,
        check_x=rng.integers(0, card, size=(n_check, d)).astype(np.uint8),
        check_y=rng.integers(0, c, size=n_check),
        **tables,
    )


def discretizer_dict(cuts: list[list[float]]) -> dict:
    """A ``FayyadIraniDiscretizer.to_dict()`` for given cut points (built with the real class)."""
    from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer

    model = FayyadIraniDiscretizer.from_dict(
        {"method": "fayyad-irani-mdl", "n_features_in": len(cuts), "cut_points": cuts}
    )
    return model.to_dict()


# ================================================================================================
# DNNs
# ================================================================================================


def random_codes(rng: np.random.Generator, shape, bits: int) -> np.ndarray:
    """Odd integer codes in ``-(2**B - 1) .. 2**B - 1``."""
    levels = 2**bits
    k = rng.integers(0, levels, size=shape)
    return (2 * k - (levels - 1)).astype(weight_code_dtype(bits))


def random_dnn_artifact(
    seed: int = 0,
    *,
    architecture: str = "fc",
    activation: str = "sign",
    bits: int = 2,
    encoding: str = "standardized",
    batch_norm: bool = True,
    hidden=(8, 6),
    n_features: int | None = None,
    image_shape=(5, 4),
    n_classes: int = 3,
    max_cardinality: int = 5,
    pixel_order: str = "row-major",
    n_check: int = 64,
    degenerate_units: bool = True,
) -> DNNArtifact:
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
    layers.append(
        DNNLayer(
            "dense", random_codes(rng, (n_classes, width), bits), bias=rng.normal(0, 0.5, n_classes).astype(np.float32)
        )
    )
    if degenerate_units and batch_norm and layers[0].scale is not None and layers[0].n_out >= 2:
        layers[0].scale[0] = 0.0
        layers[0].scale[1] = -abs(layers[0].scale[1])
    check_x = np.stack([rng.integers(0, k, size=n_check) for k in cards], axis=1).astype(np.int64)
    art = DNNArtifact(
        architecture=architecture,
        cardinalities=cards,
        class_names=[f"c{i}" for i in range(n_classes)],
        feature_names=[f"f{j}" for j in range(n_features)],
        weight_bits=bits,
        activation=activation,
        input_encoding=encoding,
        layers=layers,
        input_codes=input_codes,
        input_scale=input_scale,
        image_shape=tuple(image_shape) if architecture == "cnn" else None,
        pixel_order=pixel_order,
        metadata={"origin": f"random_dnn_artifact(seed={seed})"},
        check_x=check_x,
        check_y=rng.integers(0, n_classes, size=n_check),
    )
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
            layer.bias[:] = (-z.mean(axis=axes) + rng.normal(0, 0.05, layer.n_out) * (z.std() + 1e-3)).astype(
                np.float32
            )
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


# ================================================================================================
# Examples per kind, and the export check
# ================================================================================================
def _bnc_examples() -> dict[str, object]:
    rng = np.random.default_rng(2024)
    return {
        "nb-3bit": random_bnc_artifact(rng, d=5, n_classes=3, tan=False, bits=3, int_bits=2, n_check=40),
        "tan-7bit": random_bnc_artifact(rng, d=6, n_classes=4, tan=True, bits=7, int_bits=3, n_check=40),
        "tan-float": random_bnc_artifact(rng, d=4, n_classes=3, tan=True, bits=None, n_check=40),
        "nb-1bit-card1": random_bnc_artifact(
            rng, n_classes=2, tan=False, bits=1, int_bits=1, n_check=40, cardinalities=[1, 3, 2]
        ),
    }


def _dnn_examples() -> dict[str, object]:
    return {
        "fc-sign-2bit": random_dnn_artifact(5, architecture="fc", activation="sign", bits=2),
        "cnn-sign-onehot": random_dnn_artifact(
            6, architecture="cnn", activation="sign", bits=3, encoding="onehot", max_cardinality=3
        ),
        "fc-relu-4bit": random_dnn_artifact(7, architecture="fc", activation="relu", bits=4),
    }


#: Model kind -> function returning ``{name: artifact}`` examples (a new family registers its own).
EXAMPLES = {"bnc": _bnc_examples, "dnn": _dnn_examples}


def example_artifacts(kind: str) -> dict[str, object]:
    """Small artifacts of ``kind`` covering the cases an exporter must handle (none for an unknown kind)."""
    factory = EXAMPLES.get(kind)
    return factory() if factory else {}


#: Lowest label agreement accepted from a file that is not exact by design (float/int8 rounding
#: may flip near-ties; random artifacts have many).
MIN_INEXACT_AGREEMENT = 0.9


def runtimes_for(extension: str, metadata: dict | None = None) -> list[str]:
    """Every registered runtime whose adapter reads files with ``extension`` (importable here) and
    accepts a file with ``metadata`` (``RuntimeAdapter.accepts``; None: any file of that extension,
    so runtimes for a subset of a format's files, such as ``tflm``, are left out)."""
    from bnc_deploy.runtimes.base import RUNTIMES, runtime_class

    names = []
    for name in sorted(RUNTIMES):
        try:
            cls = runtime_class(name)
        except ImportError:
            continue
        if extension.lower() in getattr(cls, "extensions", ()) and cls.accepts(metadata):
            names.append(name)
    return names


def check_export(artifact, format: str, folder, *, runtimes=None, **options) -> dict:
    """Export ``artifact`` as ``format`` into ``folder`` and check the file in every runtime.

    Returns ``{"report": <the verifier's ExportResult>, "runtimes": {name: {"exact", "agreement"}}}``; raises
    AssertionError naming the runtime and the property that failed.
    """
    from bnc_deploy.errors import InputError, RuntimeLoadError
    from bnc_deploy.exporters.base import exporter_for
    from bnc_deploy.formats.metadata import parse_metadata
    from bnc_deploy.reference import reference_predictor
    from bnc_deploy.runtimes.base import load_runtime, runtime_class
    from bnc_deploy.verify import export_file, verification_rows

    spec = exporter_for(artifact.kind, format)
    path = Path(folder) / f"model{spec.extension}"
    report = export_file(artifact, path, format, **options)
    assert report.path == path and path.is_file(), "the verifier did not publish the file"
    meta = report.metadata
    parse_metadata(meta, where=str(path))
    assert meta.get("model_kind", "bnc") == artifact.kind
    assert list(meta["class_names"]) == list(artifact.class_names)
    assert [int(c) for c in meta["cardinalities"]] == [int(c) for c in artifact.cardinalities]
    assert (meta["size_bits"], meta["n_ops"]) == (artifact.size_bits, artifact.n_ops), "costs differ from the model's"
    if meta["exact"]:
        assert report.exact, f"{format} export promises exactness but is not exact: {report}"

    x, _ = verification_rows(artifact)
    reference = reference_predictor(artifact)
    raw = meta.get("input") == "raw"
    if raw:
        from bnc_deploy.formats.bnc import raw_representatives

        fed = raw_representatives(artifact, x)
        x = reference.discretize(fed.astype(np.float64))
    else:
        fed = x
    ref_scores = reference.log_joint(x)
    ref_label = np.argmax(ref_scores, axis=1)
    results = {}
    for name in runtimes or runtimes_for(spec.extension, meta):
        if not runtime_class(name).accepts(meta):
            # A runtime for other files of this format (tflm: micro-profile files only) is not run on
            # this one: it must refuse it on load, saying why.
            try:
                load_runtime(path, name, threads=1)
            except RuntimeLoadError as exc:
                assert str(path) in str(exc), f"{name}: the refusal does not name the file: {exc}"
                results[name] = {"refused": str(exc), "exact": None, "agreement": None}
                continue
            raise AssertionError(f"{name}: loaded a file its accepts() refuses")
        rt = load_runtime(path, name, threads=1)
        assert rt.n_features == artifact.n_features and rt.n_classes == artifact.n_classes, name
        scores, label = rt.run(fed)
        agreement = float(np.mean(label == ref_label))
        exact = bool(np.array_equal(scores, ref_scores) and agreement == 1.0)
        if meta["exact"]:
            assert exact, (
                f"{name}: {format} file promises exactness; labels agree on {agreement:.2%}, "
                f"max |score diff| {np.max(np.abs(scores - ref_scores)):.3g}"
            )
        else:
            assert agreement >= MIN_INEXACT_AGREEMENT, f"{name}: label agreement {agreement:.2%}"
        if not raw:
            bad = np.asarray(fed[:1]).copy()
            bad[0, 0] = int(artifact.cardinalities[0])  # one past the last code
            try:
                rt.run(bad)
            except InputError as exc:
                assert "feature 0" in str(exc), f"{name}: the input error does not name the feature: {exc}"
            else:
                raise AssertionError(f"{name}: an out-of-range code was not refused")
        results[name] = {"exact": exact, "agreement": agreement}
    return {"report": report, "runtimes": results}
