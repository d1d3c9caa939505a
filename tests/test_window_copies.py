"""The compiled patch copy of channels-last 2-D convolutions (lowering/kernels/window_copies.py) equals NumPy's copy
of the window view, and convolutions that take it are still XLA's bits."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lowering
from interop import import_jax
from lowering.kernels.window_copies import nhwc_patches

F32 = np.float32


def _view_patches(xp, window, out_size, strides, dilations):
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = window, out_size, strides, dilations
    rows = [xp[:, i * sh + di * dh, j * sw + dj * dw, :]
            for i in range(oh) for j in range(ow) for di in range(kh) for dj in range(kw)]
    n, c = xp.shape[0], xp.shape[3]
    return np.stack(rows, 1).reshape(n, oh, ow, kh * kw * c).reshape(n * oh * ow, kh * kw * c)


@pytest.mark.parametrize("shape, window, strides, dilations", [
    ((2, 9, 11, 3), (3, 3), (1, 1), (1, 1)),
    ((1, 10, 8, 5), (2, 3), (2, 1), (1, 1)),
    ((3, 12, 12, 2), (3, 2), (1, 2), (2, 3)),
    ((2, 7, 7, 16), (1, 1), (1, 1), (1, 1)),
    ((1, 5, 6, 1), (5, 6), (1, 1), (1, 1)),
])
def test_patches_are_the_window_views_copy(shape, window, strides, dilations):
    xp = np.random.default_rng(0).standard_normal(shape).astype(F32)
    out_size = tuple((shape[1 + a] - ((window[a] - 1) * dilations[a] + 1)) // strides[a] + 1 for a in (0, 1))
    got = nhwc_patches(xp, window, out_size, strides, dilations)
    np.testing.assert_array_equal(got, _view_patches(xp, window, out_size, strides, dilations))


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
