"""Compiled copies of convolution windows: the image patches of a channels-last 2-D convolution, as one loop.

The convolution kernel (:mod:`lowering.kernels.windowed`) multiplies a ``(M, K)`` matrix of image patches -- one row
per output pixel, ``K`` the window's values in ``(kernel row, kernel column, channel)`` order -- by the kernel. NumPy
builds that matrix by copying a 6-d strided view of the padded input, which moves a few channels at a time: for
flax's first convolution of a CNN (8 x 32 x 32 x 3 images, a 3 x 3 window) 140 us for 885 KB on one CPU, where a
plain copy of as many bytes takes 21 us. :func:`padded_patches` writes each output pixel's row from runs of
contiguous input values -- a whole kernel row of columns and channels where the window lies inside the image
(unit window dilation), else each position's channels, or zeros outside the image: 82 us there (the kernel alone,
one CPU). It reads the image unpadded and may copy a range of its channels: the YNNPACK convolutions
(:mod:`lowering.kernels.ynnpack_convolution`) take their patches in chunks of channels, and padding the whole image
first was a copy of its own (the ResNet block's 8 x 32 x 32 x 64 image: 0.3 ms of a 5 ms convolution). Pure data
movement: the same matrix as the padded view's copy, bit for bit (``tests/test_window_copies.py``).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _padded_patches(x, out, kh, kw, oh, ow, sh, sw, dh, dw, top, left, f0, f1):
    n, h, w, c = x.shape
    src = x.ravel()
    dst = out.ravel()
    run = f1 - f0
    k = kh * kw * run
    whole = dw == 1 and run == c
    span = kw * c
    # (unsigned indices below: every index is non-negative there, and numba then skips its wraparound test)
    for b in range(n):
        for i in range(oh):
            i0 = i * sh - top
            rows_inside = 0 <= i0 and i0 + (kh - 1) * dh < h
            for j in range(ow):
                o = ((b * oh + i) * ow + j) * k
                j0 = j * sw - left
                if whole and rows_inside and 0 <= j0 and j0 + kw <= w:
                    # (the window inside the image: each kernel row's columns and channels one contiguous run)
                    for di in range(kh):
                        s = ((b * h + i0 + di * dh) * w + j0) * c
                        for t in range(span):
                            dst[np.uint64(o + t)] = src[np.uint64(s + t)]
                        o += span
                    continue
                for di in range(kh):
                    ii = i0 + di * dh
                    for dj in range(kw):
                        jj = j0 + dj * dw
                        if 0 <= ii < h and 0 <= jj < w:
                            s = ((b * h + ii) * w + jj) * c + f0
                            for t in range(run):
                                dst[np.uint64(o + t)] = src[np.uint64(s + t)]
                        else:
                            for t in range(run):
                                dst[np.uint64(o + t)] = 0
                        o += run
    return out


def padded_patches(x: np.ndarray, window: tuple[int, int], out_size: tuple[int, int], strides: tuple[int, int],
                   dilations: tuple[int, int], padding_low: tuple[int, int], features: tuple[int, int]) -> np.ndarray:
    """The ``(N * OH * OW, KH * KW * F)`` patch matrix of channels ``features = (f0, f1)`` (``F = f1 - f0``) of the
    channels-last image ``x`` (``(N, H, W, C)``, not padded): row ``(b, i, j)``, column ``(di, dj, f)`` holds
    ``x[b, i * sh + di * dh - top, j * sw + dj * dw - left, f0 + f]``, or 0 outside the image."""
    x = np.ascontiguousarray(x)
    (kh, kw), (oh, ow), (f0, f1) = window, out_size, features
    out = np.empty((x.shape[0] * oh * ow, kh * kw * (f1 - f0)), x.dtype)
    if out.size:
        _padded_patches(x, out, kh, kw, oh, ow, strides[0], strides[1], dilations[0], dilations[1],
                        padding_low[0], padding_low[1], f0, f1)
    return out
