"""How a DNN sees discrete features: standardized fixed-point values or one-hot vectors (NumPy).

``fit_standardized_table`` standardizes each feature's codes with the *training* mean and
standard deviation, then rounds to a power-of-two grid ``2**-e`` with integer codes in
``-63 .. 63`` (7 bits: the TFLite exporter doubles them into int8). ``e`` is the largest shift
that keeps 99.9 % of the training values unclipped, so the grid is as fine as the data allows
(usps: ``e = 4``, a step of 1/16 standard deviation). Because the inputs are then exact
fixed-point numbers, the first layer's accumulations are integers in every runtime.

``image_layout`` knows the image datasets: usps (16x16, stored column-major), mnist (14x14
bicubic, column-major, as the paper), mnist-mean2x2 (14x14 2x2 means, row-major) and the built-in digits (8x8), all
others must say their shape.
"""

from __future__ import annotations

import math

import numpy as np

from bnc_deploy.errors import ConfigError

#: Standardized inputs are int8 codes within +-63 (7 bits): the TFLite exporter doubles them.
INPUT_CODE_MAX = 63

#: Fraction of training values that must fit the grid unclipped.
COVERAGE = 0.999
#: Finest grid considered (2**-8 of a standard deviation).
MAX_SHIFT = 8

#: Dataset name -> (image shape (H, W), pixel order of the features).
IMAGE_LAYOUTS = {
    "usps": ((16, 16), "column-major"),
    "usps-raw": ((16, 16), "column-major"),
    "usps_all": ((16, 16), "column-major"),
    "mnist": ((14, 14), "column-major"),  # the paper's bicubic 14x14, flattened column-major
    "mnist-mean2x2": ((14, 14), "row-major"),
    "digits": ((8, 8), "row-major"),
}


def fit_standardized_table(x_train: np.ndarray, cardinalities: np.ndarray) -> dict:
    """Standardization table from training codes.

    Parameters
    ----------
    x_train : ndarray (n, D) int
    cardinalities : ndarray (D,)

    Returns
    -------
    dict with ``input_codes`` int8 (D, max_cardinality) (0 past a feature's cardinality),
    ``input_scale`` float (``2**-e``), ``mean`` and ``std`` float32 (D,). Constant features
    (std 0) map to 0.
    """
    x = np.asarray(x_train, dtype=np.float64)
    cards = np.asarray(cardinalities, dtype=np.int64)
    mean = x.mean(axis=0) if x.shape[0] else np.zeros(cards.shape[0])
    std = x.std(axis=0) if x.shape[0] else np.ones(cards.shape[0])
    safe = np.where(std > 0, std, 1.0)
    observed = np.abs((x - mean) / safe)[:, std > 0]
    spread = float(np.quantile(observed, COVERAGE)) if observed.size else 1.0
    shift = MAX_SHIFT if spread <= 0 else int(np.clip(math.floor(math.log2(INPUT_CODE_MAX / spread)), 0, MAX_SHIFT))
    kmax = int(cards.max())
    values = (np.arange(kmax)[None, :] - mean[:, None]) / safe[:, None]  # (D, K)
    values[std == 0] = 0.0
    codes = np.clip(np.round(values * 2.0**shift), -INPUT_CODE_MAX, INPUT_CODE_MAX)
    codes[np.arange(kmax)[None, :] >= cards[:, None]] = 0
    return {
        "input_codes": codes.astype(np.int8),
        "input_scale": 2.0**-shift,
        "mean": mean.astype(np.float32),
        "std": std.astype(np.float32),
    }


def image_layout(name: str, n_features: int, image_shape=None, pixel_order: str | None = None):
    """``((H, W), pixel_order)`` for a CNN on dataset ``name``; ConfigError if unknown or inconsistent."""
    known = IMAGE_LAYOUTS.get(name)
    if image_shape is None:
        if known is None:
            raise ConfigError(
                f"dataset {name!r} is not a known image dataset ({', '.join(sorted(IMAGE_LAYOUTS))}); "
                "pass --image-shape HxW (and --pixel-order) to train a CNN on it"
            )
        image_shape = known[0]
    shape = tuple(int(v) for v in image_shape)
    order = pixel_order or (known[1] if known else "row-major")
    if len(shape) != 2 or min(shape) < 1 or shape[0] * shape[1] != n_features:
        raise ConfigError(f"image shape {shape} does not hold the {n_features} features of {name!r}")
    if order not in ("row-major", "column-major"):
        raise ConfigError(f"unknown pixel order {order!r}: use row-major or column-major")
    return shape, order


def parse_image_shape(text: str) -> tuple[int, int]:
    """``"16x16"`` -> (16, 16); ConfigError naming the text otherwise."""
    parts = text.lower().replace(",", "x").split("x")
    try:
        h, w = (int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"image shape {text!r} must look like HxW, e.g. 16x16") from None
    if h < 1 or w < 1:
        raise ConfigError(f"image shape {text!r} must be positive")
    return h, w


def pixel_index(image_shape, pixel_order: str) -> np.ndarray:
    """``index[r, c]`` = the feature at image pixel (r, c), shape (H, W)."""
    h, w = (int(v) for v in image_shape)
    j = np.arange(h * w)
    return j.reshape(h, w) if pixel_order == "row-major" else j.reshape(w, h).T


def encode_integer(
    x: np.ndarray,
    *,
    architecture: str,
    encoding: str,
    cardinalities: np.ndarray,
    input_codes: np.ndarray | None = None,
    image_shape=None,
    pixel_order: str = "row-major",
) -> np.ndarray:
    """Encoded inputs as integers (real value = integer * input_scale), int64.

    ``x`` : validated codes (n, D). Returns FC: (n, n_inputs) with ``n_inputs = D``
    (standardized) or ``sum(cardinalities)`` (one-hot); CNN: (n, E, H, W) with ``E = 1``
    (standardized) or ``max(cardinalities)`` (one-hot channels).
    """
    x = np.asarray(x, dtype=np.int64)
    cards = np.asarray(cardinalities, dtype=np.int64)
    n, d = x.shape
    if encoding == "standardized":
        values = input_codes.astype(np.int64)[np.arange(d)[None, :], x]  # (n, D)
        if architecture == "fc":
            return values
        return values[:, pixel_index(image_shape, pixel_order)][:, None, :, :]
    if architecture == "fc":
        offsets = np.concatenate([[0], np.cumsum(cards)[:-1]]).astype(np.int64)
        out = np.zeros((n, int(cards.sum())), dtype=np.int64)
        out[np.arange(n)[:, None], offsets[None, :] + x] = 1
        return out
    pixels = x[:, pixel_index(image_shape, pixel_order)]  # (n, H, W)
    return (pixels[:, None, :, :] == np.arange(int(cards.max()))[None, :, None, None]).astype(np.int64)
