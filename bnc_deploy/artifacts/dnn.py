"""The quantized DNN artifact: what a trained FC or CNN classifier *is*, without torch.

Same file family as BN artifacts (``kind = "dnn"`` in the versioned container). A DNN artifact
holds integer weight codes and scales, batch norm folded to a per-unit scale and shift, the
output bias, the layer graph, and the input encoding, so that exporters and the NumPy reference
can compute exactly what the trained network computes.

Computation (the contract every exporter reproduces)
----------------------------------------------------
Inputs are discrete feature codes ``x`` [N, D] (feature ``j`` in ``0 .. cardinalities[j] - 1``).

1. **Encoding.** ``"standardized"``: ``a0[n, j] = input_codes[j, x[n, j]] * input_scale`` where
   ``input_codes`` (int8, |q| <= :data:`INPUT_CODE_MAX`) is the feature standardized with the
   training mean/std and rounded to the fixed-point grid ``input_scale = 2**-e`` (a power of two
   chosen so the training range fits). The network therefore sees exactly representable
   inputs, and every first-layer accumulation is an integer times ``input_scale``.
   ``"onehot"``: ``a0`` is the one-hot encoding of every feature (FC: the concatenation, length
   ``sum(cardinalities)``; CNN: ``max(cardinalities)`` channels per pixel, zero past a feature's
   cardinality), ``input_scale = 1``.
   CNNs reshape the per-pixel values to images ``[N, E, H, W]``: feature ``j`` is pixel
   ``(j // W, j % W)`` for ``pixel_order = "row-major"`` and ``(j % H, j // H)`` for
   ``"column-major"`` (usps is stored column-major).
2. **Hidden layers** ``k``: ``z = s_w * (codes @ a)`` (dense, ``codes`` [out, in]) or the 3x3
   'same' zero-padded convolution with ``codes`` [out, in, 3, 3]; ``s_w = 1 / (2**B - 1)`` and
   ``codes`` are odd integers in ``-(2**B - 1) .. 2**B - 1`` (B = 1: +-1, scale 1). Then
   ``y = scale * z + shift`` per unit/channel when batch norm was used (folded:
   ``scale = gamma / sqrt(var + eps)``, ``shift = beta - mean * scale``), else ``y = z``. Then
   the activation: ``relu`` or ``sign`` (``+1 if y >= 0 else -1``; not ONNX ``Sign``, which maps
   0 to 0). CNN layers then max-pool 2x2 (stride 2, floor). Before the first dense layer after a
   convolution the activations are flattened in (channel, row, column) order.
3. **Output layer**: ``logits = s_w * (codes @ a) + bias``; ``label = argmax`` (first maximum).

Sign networks are integer machines: each layer's input is an integer times a known scale
(``input_scale`` for the first layer, 1 after a sign), so its accumulator ``acc = codes @ a_int``
is an exact integer and ``y >= 0`` is the same as comparing ``acc`` with an integer threshold.
:func:`sign_thresholds` derives those thresholds once (in float64, from the stored scale and
shift); the reference predictor and every exporter use them, so hidden activations agree bit for
bit wherever the exporter's arithmetic on integers is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bnc_deploy.artifacts.common import FeatureSpaceMixin
from bnc_deploy.artifacts.container import ArtifactError
from bnc_deploy.artifacts.dnn_validation import PIXEL_ORDERS, validate_header, validate_layer
from bnc_deploy.artifacts.encoding import INPUT_CODE_MAX, encode_integer, pixel_index
from bnc_deploy.costs import Conv2D, Dense, Free, dnn_costs

KIND = "dnn"


def weight_scale(bits: int) -> float:
    """``1 / (2**B - 1)``: the real value of weight code 1 (B = 1: 1)."""
    return 1.0 / float(2 ** int(bits) - 1)


def weight_code_dtype(bits: int):
    """int8 holds odd codes up to 127 (B <= 7); B = 8 needs int16 (codes up to 255)."""
    return np.int8 if int(bits) <= 7 else np.int16


@dataclass
class DNNLayer:
    """One weight layer of a DNN artifact.

    Attributes
    ----------
    type : {"dense", "conv2d"}
    codes : ndarray, int8/int16
        dense: [out, in]; conv2d: [out, in, 3, 3] (3x3, 'same' zero padding, stride 1).
    scale, shift : ndarray (out,), float32, or None
        Batch norm folded to ``y = scale * z + shift`` (hidden layers with batch norm only).
    bias : ndarray (out,), float32, or None
        Output layer only.
    activation : {"relu", "sign"} or None
        None for the output layer.
    pool : bool
        2x2 max-pool (stride 2, floor) after the activation (CNN hidden layers).
    """

    type: str
    codes: np.ndarray
    scale: np.ndarray | None = None
    shift: np.ndarray | None = None
    bias: np.ndarray | None = None
    activation: str | None = None
    pool: bool = False

    @property
    def n_out(self) -> int:
        return int(self.codes.shape[0])

    @property
    def n_in(self) -> int:
        return int(self.codes.shape[1])

    @property
    def batch_norm(self) -> bool:
        return self.scale is not None

    def describe(self) -> dict:
        return {
            "type": self.type,
            "in": self.n_in,
            "out": self.n_out,
            "batch_norm": self.batch_norm,
            "bias": self.bias is not None,
            "activation": self.activation,
            "pool": bool(self.pool),
        }


@dataclass
class DNNArtifact(FeatureSpaceMixin):
    """A trained quantized DNN (fully connected or CNN) over discrete features.

    Attributes
    ----------
    architecture : {"fc", "cnn"}
    cardinalities : ndarray (n_features,), int64
    class_names, feature_names : list of str
    weight_bits : int
        ``B`` in 1..8 (every layer).
    activation : {"relu", "sign"}
    input_encoding : {"standardized", "onehot"}
    input_codes : ndarray (n_features, max_cardinality), int8, or None
        Standardized encoding table (``"standardized"`` only); entries past a feature's
        cardinality are 0.
    input_scale : float
        Power of two (1.0 for one-hot).
    layers : list of DNNLayer
        Hidden layers, then the output layer (last, with bias).
    image_shape : (H, W) or None
        CNN input image; ``H * W == n_features``.
    pixel_order : {"row-major", "column-major"}
    input_mean, input_std : ndarray (n_features,), float32, or None
        The training statistics behind ``input_codes`` (kept for provenance).
    discretizer, metadata, check_x, check_y
        As for BN artifacts.
    """

    architecture: str
    cardinalities: np.ndarray
    class_names: list
    feature_names: list
    weight_bits: int
    activation: str
    input_encoding: str
    layers: list
    input_codes: np.ndarray | None = None
    input_scale: float = 1.0
    image_shape: tuple | None = None
    pixel_order: str = "row-major"
    input_mean: np.ndarray | None = None
    input_std: np.ndarray | None = None
    discretizer: dict | None = None
    metadata: dict = field(default_factory=dict)
    check_x: np.ndarray | None = None
    check_y: np.ndarray | None = None

    kind = KIND
    #: How messages name models of this kind (plural).
    kind_description = "DNN models"

    def __post_init__(self) -> None:
        self._normalize_feature_space()
        if self.image_shape is not None:
            self.image_shape = tuple(int(v) for v in self.image_shape)
        self.validate()

    # -- facts ----------------------------------------------------------------------------------
    @property
    def structure(self) -> str:
        """``"fc"`` or ``"cnn"`` (the BN artifact's ``structure`` is ``"nb"``/``"tan"``)."""
        return self.architecture

    @property
    def is_quantized(self) -> bool:
        return True

    @property
    def weight_scale(self) -> float:
        return weight_scale(self.weight_bits)

    @property
    def max_code(self) -> int:
        return 2**self.weight_bits - 1

    @property
    def max_cardinality(self) -> int:
        return int(self.cardinalities.max()) if self.n_features else 0

    @property
    def input_channels(self) -> int:
        """Values per pixel (CNN) or per feature: 1 standardized, max cardinality one-hot."""
        return 1 if self.input_encoding == "standardized" else self.max_cardinality

    @property
    def n_inputs(self) -> int:
        """Width of the encoded input vector of an FC network."""
        return self.n_features if self.input_encoding == "standardized" else int(self.cardinalities.sum())

    @property
    def hidden_widths(self) -> list[int]:
        return [layer.n_out for layer in self.layers[:-1]]

    @property
    def batch_norm(self) -> bool:
        return any(layer.batch_norm for layer in self.layers[:-1])

    def layer_input_scales(self) -> list[float | None]:
        """Real value of one unit of each layer's integer input, or None where inputs are real
        (after ReLU). Sign networks: ``input_scale`` for the first layer, then 1."""
        scales: list[float | None] = [float(self.input_scale)]
        for layer in self.layers[:-1]:
            scales.append(1.0 if layer.activation == "sign" else None)
        return scales

    def spatial_shapes(self) -> list[tuple[int, int]]:
        """(H, W) at the input of each conv layer and after the last one's pooling (CNN)."""
        if self.image_shape is None:
            return []
        h, w = self.image_shape
        shapes = [(h, w)]
        for layer in self.layers:
            if layer.type != "conv2d":
                break
            if layer.pool:
                h, w = h // 2, w // 2
            shapes.append((h, w))
        return shapes

    # -- costs (the paper's conventions, bnc_deploy.costs) -----------------------------
    def cost_layers(self) -> list:

        out, shapes = [], self.spatial_shapes()
        for k, layer in enumerate(self.layers):
            if layer.type == "conv2d":
                out.append(
                    Conv2D(
                        layer.n_in,
                        layer.n_out,
                        (3, 3),
                        shapes[k],
                        batch_norm=layer.batch_norm,
                        bias=layer.bias is not None,
                    )
                )
                out.append(Free(f"{layer.activation} + 2x2 max-pool" if layer.pool else str(layer.activation)))
            else:
                out.append(Dense(layer.n_in, layer.n_out, batch_norm=layer.batch_norm, bias=layer.bias is not None))
                if layer.activation:
                    out.append(Free(layer.activation))
        return out

    def costs(self):
        return dnn_costs(self.cost_layers(), self.weight_bits)

    @property
    def n_parameters(self) -> int:
        """Weights (the paper's parameter count for DNNs; BN units and biases are in size_bits)."""
        return int(sum(layer.codes.size for layer in self.layers))

    @property
    def size_bits(self) -> int:
        return int(self.costs().size_bits)

    @property
    def n_ops(self) -> int:
        return int(self.costs().n_ops)

    @property
    def bits_per_parameter(self) -> int:
        return int(self.weight_bits)

    def report_facts(self) -> dict:
        """What a report (bnc-export, bnc-profile) says about the model beyond its costs."""
        return {
            "model_kind": self.kind,
            "architecture": self.architecture,
            "activation": self.activation,
            "hidden_widths": self.hidden_widths,
            "weight_bits": self.weight_bits,
        }

    # -- validation (the header and layer checks are bnc_deploy.artifacts.dnn_validation) ----
    def validate(self) -> None:
        """Check internal consistency; raise ArtifactError naming the problem."""
        validate_header(self)
        self._validate_input()
        if not self.layers:
            raise ArtifactError("a DNN needs at least one (output) layer")
        expected_dtype = weight_code_dtype(self.weight_bits)
        width, spatial = self._first_layer_input()
        for k, layer in enumerate(self.layers):
            width, spatial = validate_layer(self, k, layer, width, spatial, expected_dtype)
        self._validate_check_set()

    def _validate_input(self) -> None:
        d = self.n_features
        scale = float(self.input_scale)
        if not (scale > 0 and math.isfinite(scale) and math.frexp(scale)[0] == 0.5):
            raise ArtifactError(f"input_scale {self.input_scale!r} must be a positive power of two")
        self.input_scale = scale
        if self.input_encoding == "standardized":
            table = self.input_codes
            shape = (d, self.max_cardinality)
            if not isinstance(table, np.ndarray) or table.dtype != np.int8 or table.shape != shape:
                raise ArtifactError(
                    f"input_codes must be int8 of shape {shape}, got "
                    f"{getattr(table, 'dtype', type(table))} {getattr(table, 'shape', '')}"
                )
            if np.abs(table.astype(np.int64)).max(initial=0) > INPUT_CODE_MAX:
                raise ArtifactError(f"input codes must lie in -{INPUT_CODE_MAX}..{INPUT_CODE_MAX}")
        else:
            if self.input_codes is not None:
                raise ArtifactError("one-hot inputs take no input_codes table")
            if scale != 1.0:
                raise ArtifactError("one-hot inputs have input_scale 1")
        if self.architecture == "cnn":
            if (
                self.image_shape is None
                or len(self.image_shape) != 2
                or min(self.image_shape) < 1
                or self.image_shape[0] * self.image_shape[1] != d
            ):
                raise ArtifactError(f"cnn image_shape {self.image_shape} does not hold {d} features")
            if self.pixel_order not in PIXEL_ORDERS:
                raise ArtifactError(f"unknown pixel order {self.pixel_order!r} (known: {', '.join(PIXEL_ORDERS)})")
        elif self.image_shape is not None:
            raise ArtifactError("fc networks take no image_shape")

    def _first_layer_input(self) -> tuple[int, tuple | None]:
        if self.architecture == "cnn":
            return self.input_channels, tuple(self.image_shape)
        return self.n_inputs, None

    # -- encoding (numpy; shared by the reference predictor and the exporters) -------------------
    def pixel_index(self) -> np.ndarray:
        """``index[r, c]`` = feature at image pixel (r, c), shape (H, W) (CNN only)."""

        return pixel_index(self.image_shape, self.pixel_order)

    def onehot_offsets(self) -> np.ndarray:
        """First one-hot slot of every feature (FC one-hot), shape (D,)."""
        return np.concatenate([[0], np.cumsum(self.cardinalities)[:-1]]).astype(np.int64)

    def encode_integer(self, x: np.ndarray) -> np.ndarray:
        """Encoded inputs as integers (real value = integer * input_scale), int64.

        ``x`` : validated codes (n, D). Returns FC: (n, n_inputs); CNN: (n, E, H, W).
        """

        return encode_integer(
            x,
            architecture=self.architecture,
            encoding=self.input_encoding,
            cardinalities=self.cardinalities,
            input_codes=self.input_codes,
            image_shape=self.image_shape,
            pixel_order=self.pixel_order,
        )

    # -- (de)serialisation --------------------------------------------------------------------
    def to_header_and_arrays(self) -> tuple[dict, dict]:
        header = {
            "kind": KIND,
            "architecture": self.architecture,
            "structure": self.architecture,
            "n_features": self.n_features,
            "n_classes": self.n_classes,
            "class_names": self.class_names,
            "feature_names": self.feature_names,
            "weight_bits": self.weight_bits,
            "activation": self.activation,
            "input": {
                "encoding": self.input_encoding,
                "scale": self.input_scale,
                "image_shape": list(self.image_shape) if self.image_shape else None,
                "pixel_order": self.pixel_order,
            },
            "layers": [layer.describe() for layer in self.layers],
            "discretizer": self.discretizer,
            "metadata": self.metadata,
            "summary": {
                "n_parameters": self.n_parameters,
                "size_bits": self.size_bits,
                "n_ops": self.n_ops,
                "hidden_widths": self.hidden_widths,
            },
        }
        arrays = {"cardinalities": self.cardinalities}
        for name in ("input_codes", "input_mean", "input_std"):
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        for k, layer in enumerate(self.layers):
            arrays[f"layer{k}_codes"] = layer.codes
            for name in ("scale", "shift", "bias"):
                if getattr(layer, name) is not None:
                    arrays[f"layer{k}_{name}"] = getattr(layer, name)
        if self.check_x is not None:
            arrays.update(check_x=self.check_x, check_y=self.check_y)
        return header, arrays

    @classmethod
    def from_header_and_arrays(cls, header: dict, arrays: dict, where: str = "model") -> DNNArtifact:
        try:
            layers = []
            for k, spec in enumerate(header["layers"]):
                if f"layer{k}_codes" not in arrays:
                    raise ArtifactError(f"missing array layer{k}_codes")
                flags = {"scale": spec["batch_norm"], "shift": spec["batch_norm"], "bias": spec["bias"]}
                for name, wanted in flags.items():
                    if wanted != (f"layer{k}_{name}" in arrays):
                        raise ArtifactError(f"layer {k}: header and arrays disagree about {name}")
                layers.append(
                    DNNLayer(
                        type=spec["type"],
                        codes=arrays[f"layer{k}_codes"],
                        scale=arrays.get(f"layer{k}_scale"),
                        shift=arrays.get(f"layer{k}_shift"),
                        bias=arrays.get(f"layer{k}_bias"),
                        activation=spec["activation"],
                        pool=bool(spec["pool"]),
                    )
                )
            if "cardinalities" not in arrays:
                raise ArtifactError("missing array cardinalities")
            inp = header["input"]
            artifact = cls(
                architecture=header["architecture"],
                cardinalities=arrays["cardinalities"],
                class_names=header["class_names"],
                feature_names=header["feature_names"],
                weight_bits=header["weight_bits"],
                activation=header["activation"],
                input_encoding=inp["encoding"],
                layers=layers,
                input_codes=arrays.get("input_codes"),
                input_scale=inp["scale"],
                image_shape=inp.get("image_shape"),
                pixel_order=inp.get("pixel_order", "row-major"),
                input_mean=arrays.get("input_mean"),
                input_std=arrays.get("input_std"),
                discretizer=header.get("discretizer"),
                metadata=header.get("metadata", {}),
                check_x=arrays.get("check_x"),
                check_y=arrays.get("check_y"),
            )
            for k, spec in enumerate(header["layers"]):
                if spec != layers[k].describe():
                    raise ArtifactError(f"layer {k}: header {spec} does not match the arrays {layers[k].describe()}")
            return artifact
        except ArtifactError as exc:
            raise ArtifactError(f"{where}: {exc}") from None
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ArtifactError(f"{where}: malformed DNN header ({exc!r})") from None


# -- sign networks: integer thresholds ------------------------------------------------------------
def accumulator_bound(artifact: DNNArtifact, k: int) -> np.ndarray:
    """Largest ``|acc|`` unit ``u`` of layer ``k`` can reach, shape (out,), int64 (sign networks).

    ``sum |codes| * max |integer input|`` (per output unit/channel; convolutions sum the 3x3 window).
    """
    layer = artifact.layers[k]
    if k == 0:
        if artifact.input_encoding == "standardized":
            max_in = int(np.abs(artifact.input_codes.astype(np.int64)).max(initial=0))
        else:
            max_in = 1
    else:
        max_in = 1
    flat = np.abs(layer.codes.astype(np.int64)).reshape(layer.n_out, -1)
    return flat.sum(axis=1) * max_in


def sign_thresholds(artifact: DNNArtifact, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer form of a sign layer: unit ``u`` outputs +1 iff ``direction[u] * acc >= threshold[u]``.

    ``acc`` is the layer's integer accumulator (codes times integer inputs). Derived in float64
    from ``y = scale * (s_w * s_in * acc) + shift >= 0``, then checked at the boundary with the
    same expression, so the result is *the* definition the reference and the exporters share.

    Returns ``(direction int64 (out,) in {+1, -1}, threshold int64 (out,))``. Units whose output
    never changes get direction +1 and a threshold beyond the reachable range (always
    ``-bound - 1``: fires; ``bound + 1``: never).
    """
    layer = artifact.layers[k]
    if layer.activation != "sign":
        raise ValueError(f"layer {k} has activation {layer.activation!r}, not sign")
    s_in = artifact.layer_input_scales()[k]
    unit = artifact.weight_scale * float(s_in)
    n = layer.n_out
    scale = np.ones(n) if layer.scale is None else layer.scale.astype(np.float64)
    shift = np.zeros(n) if layer.shift is None else layer.shift.astype(np.float64)
    bound = accumulator_bound(artifact, k)
    direction = np.ones(n, dtype=np.int64)
    threshold = np.zeros(n, dtype=np.int64)

    def fires(u: int, acc: int) -> bool:
        return scale[u] * (unit * float(acc)) + shift[u] >= 0.0

    for u in range(n):
        lo, hi = -int(bound[u]), int(bound[u])
        if scale[u] == 0.0:
            threshold[u] = lo - 1 if shift[u] >= 0.0 else hi + 1
            continue
        d = 1 if scale[u] > 0 else -1
        # d * acc >= t  <=>  y >= 0; start from the real root and fix up at the boundary.
        root = -shift[u] / (scale[u] * unit)
        t = math.ceil(d * root) if math.isfinite(root) else (lo - 1 if fires(u, 0) else hi + 1)
        t = int(min(max(t, lo - 1), hi + 1))
        while t > lo - 1 and fires(u, d * (t - 1)):
            t -= 1
        while t <= hi and not fires(u, d * t):
            t += 1
        direction[u], threshold[u] = d, t
    return direction, threshold
