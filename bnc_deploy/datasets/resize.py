"""Bicubic, antialiased image resize as MATLAB's ``imresize`` computes it (NumPy).

The paper's MNIST is 14x14 and its per-feature statistics are reproduced by MATLAB's
``imresize(I, 0.5)`` (default method ``'bicubic'``, ``'Antialiasing'`` true when shrinking).
This module follows MATLAB's ``imresize.m`` (functions ``contributions`` and ``cubic``) exactly:

* **Kernel**: Keys' cubic convolution with ``a = -0.5``::

      h(x) = 1.5|x|^3 - 2.5|x|^2 + 1             for |x| <= 1
             -0.5|x|^3 + 2.5|x|^2 - 4|x| + 2     for 1 < |x| <= 2
             0                                   otherwise

  with support width 4.
* **Antialiasing** (only when shrinking, ``scale < 1``): the kernel is stretched by ``1/scale``,
  ``h_s(x) = scale * h(scale * x)``, and its width becomes ``4 / scale`` (8 input taps for 0.5).
* **Coordinates** (1-based, as MATLAB): output pixel ``x = 1..out_len`` maps to input coordinate
  ``u = x / scale + 0.5 * (1 - 1 / scale)`` (pixel centres aligned); the taps are
  ``left + 0 .. left + P - 1`` with ``left = floor(u - width / 2)`` and ``P = ceil(width) + 2``;
  their weights ``h_s(u - index)`` are divided by their sum (each output pixel's weights sum to 1).
* **Borders**: tap indices outside ``1..in_len`` are mirrored with MATLAB's symmetric rule
  ``aux = [1:in_len, in_len:-1:1]; index = aux(mod(index - 1, 2 * in_len) + 1)`` (the edge pixel
  is repeated: index 0 -> 1, -1 -> 2, in_len + 1 -> in_len). Taps that land on the same input
  pixel add their weights, as MATLAB's ``resizeAlongDim`` sums ``weight * in(index)``.
* **Trimming**: tap columns whose weight is zero for every output pixel are dropped, as MATLAB
  does; this changes nothing in the dense matrix but is kept so ``contributions`` returns what
  MATLAB's does.
* **Separable**: the 2-D resize is the 1-D resize along rows then along columns, so an image
  stack ``X`` of shape (n, H, W) becomes ``W_rows @ X @ W_cols.T``.

Differences from MATLAB, on purpose: the output is float64 and is **not** rounded or clipped
(MATLAB returns the input's class, so ``imresize`` of a uint8 image rounds to uint8); and only
a scale factor is supported (MATLAB also accepts an output size, which changes ``scale`` to
``out_len / in_len`` per axis). The output length is ``ceil(in_len * scale)``, as in MATLAB.
"""

from __future__ import annotations

import math

import numpy as np

#: Support width of Keys' cubic kernel (before antialiasing widens it).
CUBIC_WIDTH = 4.0

#: Images resized per matrix product in ``imresize``: bounds the float64 temporaries
#: (10,000 x 28 x 28 x 8 bytes = 63 MB) whatever the stack's size.
_CHUNK = 10_000


def cubic(x: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel with ``a = -0.5`` (MATLAB's ``cubic``), elementwise."""
    ax = np.abs(np.asarray(x, dtype=np.float64))
    ax2, ax3 = ax**2, ax**3
    return (1.5 * ax3 - 2.5 * ax2 + 1.0) * (ax <= 1) + (-0.5 * ax3 + 2.5 * ax2 - 4.0 * ax + 2.0) * (
        (1 < ax) & (ax <= 2)
    )


def output_length(in_len: int, scale: float) -> int:
    """``ceil(in_len * scale)``: MATLAB's output size for a scale factor."""
    return math.ceil(in_len * scale)


def contributions(in_len: int, scale: float, antialiasing: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """MATLAB's ``contributions`` for the bicubic kernel: taps and weights of every output pixel.

    Returns
    -------
    weights : ndarray (out_len, n_taps), float64; each row sums to 1
    indices : ndarray (out_len, n_taps), int64, **0-based** input indices after mirroring
        (MATLAB's are 1-based; this is the only change).
    """
    if in_len < 1:
        raise ValueError(f"input length must be at least 1, got {in_len}")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale}")
    out_len = output_length(in_len, scale)
    width = CUBIC_WIDTH
    if scale < 1 and antialiasing:

        def kernel(t):
            return scale * cubic(scale * t)

        width = CUBIC_WIDTH / scale
    else:
        kernel = cubic
    x = np.arange(1, out_len + 1, dtype=np.float64)[:, None]  # 1-based output pixels
    u = x / scale + 0.5 * (1.0 - 1.0 / scale)  # their input coordinates
    left = np.floor(u - width / 2.0)
    n_taps = math.ceil(width) + 2
    indices = (left + np.arange(n_taps)[None, :]).astype(np.int64)  # 1-based, may fall outside
    weights = kernel(u - indices)
    weights = weights / weights.sum(axis=1, keepdims=True)
    aux = np.concatenate([np.arange(1, in_len + 1), np.arange(in_len, 0, -1)])  # symmetric padding
    indices = aux[np.mod(indices - 1, aux.size)]
    keep = np.any(weights != 0, axis=0)
    return weights[:, keep], indices[:, keep] - 1


def resize_matrix(in_len: int, scale: float, antialiasing: bool = True) -> np.ndarray:
    """Dense (out_len, in_len) float64 matrix ``M`` with ``resized = M @ signal`` along one axis.

    Mirrored taps that hit the same input pixel add up (MATLAB sums ``weight * in(index)``).
    """
    weights, indices = contributions(in_len, scale, antialiasing)
    matrix = np.zeros((weights.shape[0], in_len), dtype=np.float64)
    rows = np.broadcast_to(np.arange(weights.shape[0])[:, None], weights.shape)
    np.add.at(matrix, (rows, indices), weights)
    return matrix


def imresize(images: np.ndarray, scale: float, antialiasing: bool = True) -> np.ndarray:
    """Bicubic resize of a stack of images by ``scale``, as MATLAB's ``imresize(I, scale)`` (float).

    Parameters
    ----------
    images : ndarray (n, H, W) or (H, W), any real dtype
    scale : float
        The same factor on both axes (0.5 for MNIST's 28x28 -> 14x14).

    Returns
    -------
    ndarray (n, ceil(H * scale), ceil(W * scale)) (or 2-D for a 2-D input), float64, unrounded.
    """
    arr = np.asarray(images)
    if arr.ndim not in (2, 3):
        raise ValueError(f"images must have shape (n, H, W) or (H, W), got {arr.shape}")
    stack = arr[None] if arr.ndim == 2 else arr
    rows = resize_matrix(stack.shape[1], scale, antialiasing)
    cols_t = resize_matrix(stack.shape[2], scale, antialiasing).T
    out = np.empty((stack.shape[0], rows.shape[0], cols_t.shape[1]), dtype=np.float64)
    for start in range(0, stack.shape[0], _CHUNK):
        chunk = stack[start : start + _CHUNK].astype(np.float64)
        out[start : start + _CHUNK] = rows @ chunk @ cols_t
    return out[0] if arr.ndim == 2 else out
