"""Which YNNPACK kernel XLA CPU (jax 0.10.2) runs a small f32/f64 matrix product with, and so in which order.

XLA CPU hands a dot to YNNPACK (a ``__ynn_fusion``) when both free dimensions are at least 2, the largest of
``M``, ``K``, ``N`` is at least 8 and the lhs is row-major with its contracting dimension last (XLA's
``IsDotSupportedByYnn``). YNNPACK then picks one of its generated dot kernels with a cost model, in two steps
(``ynnpack/subgraph/dot.cc``): when the graph is defined it knows ``N`` and ``K`` (``M`` is taken as 2,048) and
decides whether to pack ``B`` (and so the kernel's ``tile_k``); when it runs it picks the cheapest kernel compatible
with that packing for the real shape. The kernel fixes the summation order of every output element:

* ``tile_k`` 1 (``dot_fp32_MxNx1_1xTx1_*``): one chain from zero -- fused multiply-adds for the AVX-512 and FMA3
  kernels, rounded products added for the AVX and SSE2 ones (``c = c + a * b``);
* ``tile_k`` 2 or 4: term ``p`` accumulates in lane ``p mod tile_k`` (each lane a chain from zero), the lanes are
  added as ``l0 + l1`` or ``(l0 + l1) + (l2 + l3)``; the last ``K mod tile_k`` terms are a second call of the kernel
  on operands padded with zeros (each lane ``fma(a, b, +0)``, added the same way), added to the first result;
* ``K`` longer than a block of the L2 cache (128 KiB over ``block_n`` columns of ``B``) is summed in chunks, each
  chunk's lanes from zero, each chunk's sum added to the result so far.

This module replays that choice: the kernel table is the one compiled into jax 0.10.2's ``libjax_common.so`` (its
symbols ``ynn::dot_fp32_4x16x4_1x4x4_avx512`` etc., in YNNPACK's registration order), the cost model and the
packing rule are YNNPACK's. It assumes the kernels an AVX-512 host runs (``avx512f/bw/dq/vl``, FMA3, AVX2): the
orders were measured on such a host (``tests/test_linalg.py``). Output tiles XLA's thread split makes do not change
the kernel for the products :mod:`lowering.kernels.small_dot` takes (checked over every shape up to its size limit);
a product whose tiles would, gives None.
"""

from __future__ import annotations

import functools
import math

import numpy as np

UNALIGNED_B = 1
"""``dot_flag::unaligned_b``: the kernel reads ``B`` unpacked."""

FUSED_ARCHES = ("avx512", "fma3", "avx2_fma3")
"""Kernels whose products are fused multiply-adds (the others multiply, round, then add)."""

L2_BYTES = 128 * 1024
"""YNNPACK's ``cache_size_l2``: the ``K`` blocking of its dot loops."""


def _kernels(arch: str, blocks, tile: tuple[int, int, int], flags: int) -> list[tuple]:
    return [(arch, block, tile, flags) for block in blocks]


_F32_KERNELS = (
    _kernels("avx512", [(1, 64, 1), (2, 64, 1), (3, 64, 1), (4, 64, 1), (5, 64, 1), (1, 32, 1), (2, 32, 1),
                        (3, 32, 1), (4, 32, 1), (5, 32, 1), (5, 16, 1)], (1, 16, 1), UNALIGNED_B)
    + _kernels("avx512", [(1, 32, 2), (2, 32, 2), (3, 32, 2), (4, 32, 2), (5, 32, 2), (1, 16, 2), (4, 16, 2),
                          (4, 8, 2), (8, 8, 2)], (1, 8, 2), 0)
    + _kernels("avx512", [(1, 32, 4), (2, 32, 4), (1, 16, 4), (3, 16, 4), (4, 16, 4), (5, 16, 4), (2, 8, 4),
                          (4, 8, 4), (6, 8, 4), (4, 4, 4), (8, 4, 4)], (1, 4, 4), 0)
    + _kernels("fma3", [(1, 32, 1), (2, 32, 1), (1, 16, 1), (2, 16, 1), (3, 16, 1), (4, 16, 1), (5, 16, 1),
                        (6, 16, 1), (8, 8, 1)], (1, 8, 1), UNALIGNED_B)
    + _kernels("avx2_fma3", [(1, 16, 2), (2, 16, 2), (1, 8, 2), (3, 8, 2), (4, 8, 2), (5, 8, 2), (6, 8, 2),
                             (4, 4, 2), (5, 4, 2), (6, 4, 2), (8, 4, 2)], (1, 4, 2), 0)
    + _kernels("avx", [(1, 32, 1), (2, 32, 1), (1, 16, 1), (2, 16, 1), (3, 16, 1), (4, 16, 1), (4, 8, 1),
                       (6, 8, 1), (8, 8, 1)], (1, 8, 1), UNALIGNED_B)
    + _kernels("avx2", [(1, 16, 2), (2, 16, 2), (1, 8, 2), (3, 8, 2), (4, 8, 2), (5, 8, 2), (6, 8, 2), (4, 4, 2),
                        (5, 4, 2), (6, 4, 2), (8, 4, 2)], (1, 4, 2), 0)
    + _kernels("sse2", [(1, 16, 1), (2, 16, 1), (3, 16, 1), (1, 8, 1), (2, 8, 1), (3, 8, 1), (4, 8, 1), (4, 4, 1),
                        (6, 4, 1), (8, 4, 1)], (1, 4, 1), 0)
)
_F64_KERNELS = (
    _kernels("avx512", [(1, 32, 1), (2, 32, 1), (3, 32, 1), (4, 32, 1), (5, 32, 1), (1, 16, 1), (2, 16, 1),
                        (3, 16, 1), (4, 16, 1), (5, 16, 1), (5, 8, 1)], (1, 8, 1), UNALIGNED_B)
    + _kernels("fma3", [(1, 16, 1), (2, 16, 1), (1, 8, 1), (2, 8, 1), (3, 8, 1), (4, 8, 1), (5, 8, 1), (6, 8, 1),
                        (8, 4, 1)], (1, 4, 1), UNALIGNED_B)
    + _kernels("avx", [(1, 16, 1), (2, 16, 1), (1, 8, 1), (2, 8, 1), (3, 8, 1), (4, 8, 1), (4, 4, 1), (6, 4, 1),
                       (8, 4, 1)], (1, 4, 1), UNALIGNED_B)
)
"""``(arch, (block_m, block_n, block_k), (tile_m, tile_n, tile_k), flags)`` of every f32 / f64 kernel, in the order
YNNPACK's ``get_dot_kernel`` tries them (the first of equal costs wins)."""


def is_ynnpack_dot(m: int, k: int, n: int) -> bool:
    """Whether XLA CPU gives a row-major ``(m, k) x (k, n)`` f32/f64 product to YNNPACK (``IsDotSupportedByYnn``)."""
    return m >= 2 and n >= 2 and max(m, k, n) >= 8


def _cost(m: int, n: int, k: int, block, tile, k_outer: int = 1) -> np.float32:
    """YNNPACK's ``estimate_dot_cost`` (float arithmetic as in C++). ``k`` is the innermost contraction dimension,
    ``k_outer`` the product of the others (a convolution's window): each of those runs ``ceil(k / block_k)``
    blocks, so a kernel with a longer ``block_k`` pays for the padding of ``k`` once per window position (measured:
    a 3x3 convolution of 33 input features runs a ``tile_k`` 2 kernel where the flat ``K = 297`` would pick 4)."""
    f32 = np.float32
    (bm, bn, bk), (tm, tn, tk) = block, tile
    blocks = f32(math.ceil(m / bm)) * f32(math.ceil(n / bn)) * f32(math.ceil(k / bk) * k_outer)
    block_cost = f32(bm * bk // (tm * tk) * 5 + bn * bk // (tn * tk) * 11 + 9) + f32(tm * tn * tk) * f32(1e-4)
    return f32(blocks * block_cost)


def _select(kernels, m: int, n: int, k: int, tile_k: int = 0, block_n: int = 0, flags: int = 0, k_outer: int = 1):
    """YNNPACK's ``get_dot_kernel``: the cheapest kernel with ``flags``, ``tile_k`` (0: any) that can read ``B``
    packed in blocks of ``block_n`` columns; ``(kernel, cost)``. ``k_outer``: as for :func:`_cost`."""
    best, best_cost = None, np.float32(np.inf)
    for kernel in kernels:
        _, block, tile, kernel_flags = kernel
        if (flags & kernel_flags) != flags or (tile_k and tile[2] != tile_k):
            continue
        if not kernel_flags & UNALIGNED_B and block_n % tile[1]:
            continue
        cost = _cost(m, n, k, block, tile, k_outer)
        if cost < best_cost:
            best, best_cost = kernel, cost
    return best, best_cost


def _split_factors(m: int, n: int, k: int, block_n: int) -> tuple[int, int]:
    """YNNPACK's ``choose_split_factors``: the output tiles (rows, columns) its threads compute."""
    k = min(k, 1024)
    min_area = min(m, 64) * min(n, 64)
    split_n, split_m = min(n, block_n), min(m, 16)
    while True:
        if split_n * split_m >= min_area and ((split_m + split_n) * k >= 1024 * 64 or split_m * split_n >= 256 * 256):
            break
        if (4 * split_n <= split_m or split_m >= m) and split_n < n:
            split_n *= 2
        elif (split_m <= 4 * split_n or split_n >= n) and split_m < m:
            split_m *= 2
        else:
            break
    return min(split_m, 32768), min(split_n, 65536)


@functools.lru_cache(maxsize=4096)
def ynnpack_order(m: int, k: int, n: int, dtype: np.dtype, b_transposed: bool = False, k_outer: int = 1,
                  row_batches: int = 1, b_batches: int = 1) -> tuple | None:
    """``(tile_k, fused, columns, chunk, last_chunk)`` of the kernel YNNPACK runs a ``(m, k) x (k, n)`` product of
    ``dtype`` (f32 or f64) with: the first ``columns`` columns (XLA's whole thread tiles) sum ``K`` in chunks of
    ``chunk`` terms, the others (a last, narrower tile) of ``last_chunk`` (0: ``K`` in one go); None when the
    output tiles would use different kernels. ``b_transposed``: ``B`` is ``(n, k)`` (``x @ w.T``), which YNNPACK
    always packs.

    A convolution is such a product with more contraction dimensions (:mod:`lowering.kernels.ynnpack_convolution`):
    ``k`` is then the innermost one (the input features, YNNPACK's ``k1``), ``k_outer`` the product of the others
    (the window, ``k2 * k3``), and the chunks cut ``k1`` (each chunk spans every window position); ``m`` is the
    rows of one of ``row_batches`` independent products (a convolution's output width, its batch and output rows
    being YNNPACK's batch dimensions), which decides whether ``B`` is packed and how rows are tiled; ``b_batches``:
    how many different ``B`` the batch holds (a grouped convolution's groups). YNNPACK leaves ``B`` unpacked when
    ``A``'s row blocks over the batch are at most 10 per ``B``."""
    dtype = np.dtype(dtype)
    kernels = _F32_KERNELS if dtype == np.dtype(np.float32) else _F64_KERNELS
    total = k * k_outer
    defined, defined_cost = _select(kernels, 2048, n, k, k_outer=k_outer)
    unpacked, unpacked_cost = defined, defined_cost
    if defined[2][2] != 1:
        unpacked, unpacked_cost = _select(kernels, 2048, n, k, tile_k=1, flags=UNALIGNED_B, k_outer=k_outer)
    pack = (b_transposed or unpacked is None or not unpacked[3] & UNALIGNED_B
            or unpacked_cost > defined_cost * np.float32(2) or math.ceil(m / unpacked[1][0]) * row_batches > 10 * b_batches)
    if pack:
        tile_n, tile_k = defined[2][1], defined[2][2]
        cache_blocks = max(1, L2_BYTES // dtype.itemsize // (defined[1][1] * total))
        block_n = max(tile_n, min(-(-n // tile_n) * tile_n, defined[1][1] * cache_blocks))
        split_m, split_n = _split_factors(m, n, total, block_n)
    else:
        tile_k = 1
        split_m, split_n = _split_factors(m, n, total, max(64 // dtype.itemsize, unpacked[1][1]))
    aligned = k & ~(tile_k - 1)
    kinds, chunks = set(), {}
    for rows in {min(split_m, m - m0) for m0 in range(0, m, split_m)}:
        for columns in {min(split_n, n - n0) for n0 in range(0, n, split_n)}:
            if pack:
                kernel, _ = _select(kernels, rows, columns, aligned, tile_k=tile_k, block_n=block_n, k_outer=k_outer)
                read_n = block_n
            else:
                kernel, _ = _select(kernels, rows, columns, k, tile_k=1, block_n=columns, flags=UNALIGNED_B,
                                    k_outer=k_outer)
                read_n = columns
            block_k = kernel[1][2]
            blocks = L2_BYTES // (k_outer * read_n * dtype.itemsize * block_k)  # (schedule_dot's k loop)
            chunks.setdefault(columns, set()).add(block_k * blocks if blocks and aligned > block_k * blocks else 0)
            kinds.add(kernel[0] in FUSED_ARCHES)
    if len(kinds) != 1 or any(len(c) != 1 for c in chunks.values()):
        return None
    whole = n - n % split_n if n > split_n else n
    return (tile_k, kinds.pop(), whole, chunks[min(split_n, n)].pop(), chunks[n - whole].pop() if whole < n else 0)


_AVX512_BF16_BLOCKS = [(1, 64), (2, 64), (3, 64), (4, 64), (5, 64), (1, 32), (2, 32), (3, 32), (4, 32), (5, 32),
                       (6, 32), (8, 32), (10, 32), (12, 32), (16, 16)]
_BF16_KERNELS = (
    _kernels("amxbf16", [(16, 64, 32)], (1, 16, 2), 0) + _kernels("amxbf16", [(32, 32, 32)], (16, 16, 2), 0)
    + _kernels("avx512bf16", [(bm, bn, 2) for bm, bn in _AVX512_BF16_BLOCKS if (bm, bn) != (1, 32)], (1, 16, 2), 0)
    + _kernels("avx512", [(bm, bn, 2) for bm, bn in _AVX512_BF16_BLOCKS], (1, 16, 2), 0)
    + _kernels("avx512", [(bm, bn, 1) for bm, bn in _AVX512_BF16_BLOCKS], (1, 16, 1), 0)
    + _kernels("avx2_fma3", [(1, 32, 2), (2, 32, 2), (1, 16, 2), (2, 16, 2), (3, 16, 2), (4, 16, 2), (5, 16, 2),
                             (8, 8, 2), (10, 8, 2), (12, 8, 2)], (1, 8, 2), 0)
    + _kernels("avx2_fma3", [(1, 32, 1), (2, 32, 1), (1, 16, 1), (2, 16, 1), (3, 16, 1), (4, 16, 1), (5, 16, 1),
                             (8, 8, 1), (10, 8, 1)], (1, 8, 1), 0)
)
"""bf16 x bf16 -> f32 kernels in jax 0.10.2's ``libjax_common.so`` (its ``ynn::dot_bf16_bf16_fp32_*`` symbols), in
YNNPACK's registration order: the AMX ones first (``x86_amxbf16.cc``), then the generated AVX512-BF16, AVX-512
(``tile_k`` 2 and 1) and AVX2+FMA3 ones. None reads ``B`` unpacked, so YNNPACK always packs it."""


@functools.lru_cache(maxsize=4096)
def bf16_amx_tiles(m: int, k: int, n: int) -> tuple[int, int, int] | None:
    """Which output tiles of a row-major ``(m, k) x (k, n)`` bf16 product into f32 YNNPACK computes with an AMX
    kernel: ``(rows, columns, tiles)``, where XLA's thread tiles split the rows at ``rows`` (the rows before it lie
    in whole tiles, the others in the last, shorter one) and the columns at ``columns``, and bit ``2 * r + c`` of
    ``tiles`` is set when the tiles of the rows after the split (``r``) and columns after it (``c``) run an AMX
    kernel; the others run a ``tile_k`` 2 kernel (AVX512-BF16's ``vdpbf16ps`` or its equivalents). None when some
    tile would run a ``tile_k`` 1 kernel (not measured). For CPUs with AMX-BF16 (and AVX512-BF16)."""
    kernels = _BF16_KERNELS
    defined, _ = _select(kernels, 2048, n, k)
    tile_n, tile_k = defined[2][1], defined[2][2]
    cache_blocks = max(1, L2_BYTES // 2 // (defined[1][1] * k))
    block_n = max(tile_n, min(-(-n // tile_n) * tile_n, defined[1][1] * cache_blocks))
    split_m, split_n = _split_factors(m, n, k, block_n)
    rows, columns, tiles = m - m % split_m, n - n % split_n, 0
    for last_row in {m0 >= rows for m0 in range(0, m, split_m)}:
        for last_column in {n0 >= columns for n0 in range(0, n, split_n)}:
            kernel, _ = _select(kernels, m - rows if last_row else split_m, n - columns if last_column else split_n,
                                k & ~(tile_k - 1), tile_k=tile_k, block_n=block_n)
            if kernel is None or kernel[2][2] != 2:
                return None
            tiles |= (kernel[0] == "amxbf16") << (2 * last_row + last_column)
    return rows, columns, tiles
