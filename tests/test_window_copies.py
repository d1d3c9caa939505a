"""The compiled patch copy of channels-last 2-D convolutions (lowering/kernels/window_copies.py) equals NumPy's copy
of the window view, and convolutions that take it are still XLA's bits."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lowering
from interop import import_jax
from lowering.kernels.window_copies import padded_patches

F32 = np.float32


def _view_patches(xp, window, out_size, strides, dilations):
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = window, out_size, strides, dilations
    rows = [xp[:, i * sh + di * dh, j * sw + dj * dw, :]
            for i in range(oh) for j in range(ow) for di in range(kh) for dj in range(kw)]
    n, c = xp.shape[0], xp.shape[3]
    return np.stack(rows, 1).reshape(n, oh, ow, kh * kw * c).reshape(n * oh * ow, kh * kw * c)


@pytest.mark.parametrize("padding, strides, dilation", [("SAME", (1, 1), (1, 1)), ("VALID", (2, 1), (1, 2)),
                                                        (((2, 0), (1, 3)), (1, 2), (2, 1))])
def test_channels_last_convolutions_match_jax(padding, strides, dilation):
    # (3 input features: a convolution XLA computes itself with Eigen, whose order the kernel replays)
    rng = np.random.default_rng(1)
    x, k = rng.standard_normal((4, 13, 12, 3)).astype(F32), rng.standard_normal((3, 3, 3, 8)).astype(F32)

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, strides, padding, rhs_dilation=dilation,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    (got,) = lowering.compile(import_jax(conv, x, k))(x, k)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(jax.jit(conv)(x, k)).view(np.uint32))


@pytest.mark.parametrize("shape, window, strides, dilations, padding, features", [
    ((2, 9, 11, 8), (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), (0, 8)),
    ((1, 10, 8, 16), (2, 3), (2, 1), (1, 1), ((0, 1), (2, 0)), (4, 12)),
    ((3, 12, 12, 6), (3, 2), (1, 2), (2, 3), ((3, 2), (1, 4)), (0, 6)),
    ((2, 7, 7, 4), (3, 3), (1, 1), (1, 1), ((-1, 0), (1, -1)), (1, 3)),
    ((2, 9, 11, 3), (3, 3), (1, 1), (1, 1), ((0, 0), (0, 0)), (0, 3)),  # (whole kernel rows: one run each)
    ((2, 9, 11, 3), (3, 3), (2, 1), (1, 1), ((1, 1), (1, 1)), (0, 3)),
    ((1, 5, 6, 1), (5, 6), (1, 1), (1, 1), ((0, 0), (0, 0)), (0, 1)),
    ((2, 7, 7, 16), (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0)), (0, 16)),
])
def test_padded_patches_are_the_padded_window_views_copy(shape, window, strides, dilations, padding, features):
    x = np.random.default_rng(2).standard_normal(shape).astype(F32)
    padded = np.pad(x, ((0, 0), *((max(lo, 0), max(hi, 0)) for lo, hi in padding), (0, 0)))
    padded = padded[:, max(-padding[0][0], 0):padded.shape[1] - max(-padding[0][1], 0),
                    max(-padding[1][0], 0):padded.shape[2] - max(-padding[1][1], 0)]
    out_size = tuple((padded.shape[1 + a] - ((window[a] - 1) * dilations[a] + 1)) // strides[a] + 1 for a in (0, 1))
    f0, f1 = features
    want = _view_patches(np.ascontiguousarray(padded[..., f0:f1]), window, out_size, strides, dilations)
    got = padded_patches(x, window, out_size, strides, dilations, tuple(lo for lo, _ in padding), features)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("features", [32, 35, 64])
def test_channels_last_ynnpack_convolutions_match_jax(features):
    # (more than 16 input and output features: XLA gives the convolution to YNNPACK, whose order is replayed; 35
    # features leave a remainder to the padded view)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 10, 9, features)).astype(F32)
    k = (rng.standard_normal((3, 3, features, 24)) * 0.1).astype(F32)

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    (got,) = lowering.compile(import_jax(conv, x, k))(x, k)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(jax.jit(conv)(x, k)).view(np.uint32))
