"""Compiled copies of convolution windows: the image patches of a channels-last 2-D convolution, as one loop.

The convolution kernel (:mod:`lowering.kernels.windowed`) multiplies a ``(M, K)`` matrix of image patches -- one row
per output pixel, ``K`` the window's values in ``(kernel row, kernel column, channel)`` order -- by the kernel. NumPy
builds that matrix by copying a 6-d strided view of the padded input, which moves a few channels at a time: for
flax's first convolution of a CNN (8 x 32 x 32 x 3 images, a 3 x 3 window) 140 us for 885 KB on one CPU, where a
plain copy of as many bytes takes 21 us. Here each output pixel's row is written from ``kh`` runs of ``kw * C``
contiguous input values (with unit window dilation: a kernel row of the padded image is contiguous over its columns
and channels): 72 us there, the padding included. Pure data movement: the same matrix as the view's copy, bit for
bit (``tests/test_window_copies.py``).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _patches(xp, out, kh, kw, oh, ow, sh, sw, dh, dw):
    n, hp, wp, c = xp.shape
    src = xp.ravel()
    dst = out.ravel()
    run = kw * c if dw == 1 else c  # (contiguous values per copy)
    runs = 1 if dw == 1 else kw
    k = kh * kw * c
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                o = ((b * oh + i) * ow + j) * k
                for di in range(kh):
                    row = (b * hp + i * sh + di * dh) * wp
                    for dj in range(runs):
                        s = (row + j * sw + dj * dw) * c
                        # (unsigned indices: every index is non-negative, and numba then skips its wraparound test)
                        for t in range(run):
                            dst[np.uint64(o + t)] = src[np.uint64(s + t)]
                        o += run
    return out


def nhwc_patches(xp: np.ndarray, window: tuple[int, int], out_size: tuple[int, int], strides: tuple[int, int],
                 dilations: tuple[int, int]) -> np.ndarray:
    """The ``(N * OH * OW, KH * KW * C)`` patch matrix of the padded channels-last image ``xp`` (``(N, H, W, C)``,
    padding and base dilation already applied): row ``(b, i, j)``, column ``(di, dj, c)`` holds
    ``xp[b, i * sh + di * dh, j * sw + dj * dw, c]``."""
    xp = np.ascontiguousarray(xp)
    (kh, kw), (oh, ow) = window, out_size
    out = np.empty((xp.shape[0] * oh * ow, kh * kw * xp.shape[3]), xp.dtype)
    if out.size:
        _patches(xp, out, kh, kw, oh, ow, strides[0], strides[1], dilations[0], dilations[1])
    return out
