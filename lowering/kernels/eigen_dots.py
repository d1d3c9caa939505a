"""XLA CPU's f32 products whose lhs is contracted over its first dimension (``x.T @ g``, every dense layer's weight
gradient): Eigen's tensor contraction, each of its blocks one call of oneDNN's sgemm.

XLA CPU (jax 0.10.2) does not hand these products to YNNPACK: its ``DotThunk`` runs Eigen's ``TensorContraction``
on XLA's intra-op thread pool (one thread per CPU), and jaxlib is built with TensorFlow's custom contraction
kernel, so each block Eigen cuts is computed by oneDNN's ``dnnl_sgemm`` (v3.7.3), not by Eigen's own gebp kernel.
For ``out (I, O) = x.T @ g`` with ``x (B, I)`` and ``g (B, O)`` Eigen sees ``m = O``, ``n = I`` and ``k = B``;
measured on a 2-core AMD EPYC VM with AVX-512 (``ONEDNN_VERBOSE=2`` prints every sgemm call: the block sizes
below predicted all 48 calibration shapes), and bitwise against jax.jit on 113 shapes (the MLP's weight gradients
(2048, 784, 512), (2048, 512, 512), (2048, 512, 10), wide and narrow ones, every path below; f32 ``jax.grad`` and
``jax.vjp`` of dense layers); and on a 2-core Intel Xeon VM with AVX-512 (a 2 MiB L2), bitwise on 23 shapes with the
cache sizes it reads there:

* **Eigen's plan** (its cost model with a fixed overhead of 100,000 and its block heuristics, with the cache sizes
  it reads (:func:`eigen_cache_sizes`; on the AMD host 48 KiB L1, 1 MiB L2 and a 384 MiB L3), and its AVX build's
  16 x 4 register blocks):
  one thread (**seq**, ``K`` blocks from the one-thread heuristic, at most 608), several (**par**, ``K`` blocks
  capped at 320), or **sharded by the inner dimension** (``K`` cut in two slices of ``max(96, roundup8(ceil(K /
  2)))``, each computed as **par** with its own blocks, the two partial products added at the end). TensorFlow's
  kernel evens the ``K`` blocks out: ``ceil(K / kc)`` blocks of ``roundup8(K // blocks)`` (the last one shorter).
* **oneDNN's sgemm** computes each block, itself cut into pieces of at most 384 (384 while 768 or more remain,
  else halves, the larger first): every piece's terms are one chain of fused multiply-adds from zero,
  ``acc = fma(x[p, i], g[p, o], acc)`` for ``p`` in order, added to the element's sum so far with one rounded add
  (the first piece's chain is the sum).
* **Edge blocks one wide** go to oneDNN's matrix-vector kernels: when ``O mod bm == 1`` (Eigen's block of ``m``)
  the last column is summed per ``K`` block, in 512-long parts: 16 terms a step in 8 lanes of fused multiply-adds
  (term ``p`` in lane ``p mod 8``), the lanes added as ``((l0 + l1) + (l4 + l5)) + ((l2 + l3) + (l6 + l7))`` and
  added to the element, then the part's last 8, 4, 2 and 1 terms as rounded products, added the same way; when
  ``I mod bn == 1`` the last row is one chain of fused multiply-adds over the slice (which wins where both hold).

Shapes that are not this product in XLA (``B = 1``: a multiply; ``(B <= 3 or I <= 3) and (B <= 3 or O <= 3)``:
XLA's naive loop; ``I = 1`` or ``O = 1``: its matrix-vector emitters) keep :mod:`lowering.kernels.small_dot`'s
other orders. The plan depends on the CPU count (measured with 1 and 2 CPUs: a process limited to one CPU takes
the one-thread plan; with more, XLA's thread count changes the blocks and this module is not used) and on the
cache sizes Eigen reads, so it is used on hosts whose sizes are known (:func:`measured_eigen_host`); elsewhere
these products keep the earlier rules, not bitwise with XLA. XLA folds a transpose that is the dot's only user
into the dot by swapping its operands, and Eigen then sees the swapped product (:data:`EIGEN_SWAPPED`): jax's
gradient of ``x @ w`` is ``transpose(dot_general(g, x))``.
:func:`eigen_dot` computes the plan (order :data:`EIGEN_CONTRACTION`, which
:func:`lowering.kernels.small_dot.small_dot_order` gives these products) in register tiles
(:func:`lowering.kernels.chain_tiles.chunked_chain_product`), the one definition the interpreter
(:func:`eigen_matmul`) and compiled loops call. It is a function of its own, not a branch of ``small_dot``: linked
into ``small_dot`` it doubled the cold compile time of every signature of it (20.8 -> 42 s for f32).
"""

from __future__ import annotations

import functools
import os

import numba
import numpy as np

from ..runtime.loop_runtime import fused_multiply_add
from ..runtime.workers import PIECE_ROWS, PIECES_MNK, row_piece_bounds, run_pieces, usable_cpus
from . import host
from .chain_tiles import chunked_chain_product

EIGEN_CONTRACTION = 64
"""The order flag of :func:`lowering.kernels.small_dot.order_kernel` for this module's products; the plan is in the bits
from 8 up (:func:`contraction_order`)."""

EIGEN_SWAPPED = 128
"""A flag or-ed into :data:`EIGEN_CONTRACTION`: the product is the transpose of the one XLA computes. XLA folds a
transpose that is a dot's only user into the dot by swapping its operands (jax's gradient of ``x @ w`` is
``transpose(dot_general(g, x))``), so Eigen sees the swapped product, whose edge blocks are the other ones."""

MEASURED_AMD_CACHES = (48 * 1024, 1024 * 1024, 384 * 1024 * 1024)
"""The L1, L2 and L3 sizes Eigen reads on the measured AMD host (48 KiB, 1 MiB; its AMD query misreads the L3)."""

MR, NR, PACKET = 16, 4, 8
"""Eigen's register block (rows, columns) and packet size for f32 in jaxlib's AVX build without FMA."""

SGEMM_K_BLOCK = 384
"""oneDNN's ``K`` blocking inside one sgemm call (AVX-512 kernels)."""

GEMV_PART = 512
"""The ``K`` part oneDNN's transposed matrix-vector kernel sums before adding it to the element."""

FIXED_OVERHEAD = 100_000
"""Eigen's cost of starting a parallel evaluation, in its cost model's units."""

IMAGE_PATCH_COMPUTE = (3 * 24 + 14 * 1) / PACKET
"""The compute cost Eigen's cost model gives one coefficient of ``extract_image_patches`` (3 divisions of 64-bit
indices at 24 -- Eigen's ``scalar_div_cost<long>`` -- and 14 multiplications at 1, over a packet): a convolution's
patches, the right operand of its contraction. With it the plan predicts whether XLA's Eigen shards a convolution's
contraction by ``K`` on all 466 random convolutions measured (``K`` 40-320; without it, 29 of 208 wrong)."""

_BK_SHIFT0, _BK_SHIFT1, _EDGE_SHIFT, _SLICE_SHIFT = 8, 18, 28, 32
LAST_COLUMN, LAST_ROW = 1, 2
"""Edge flags of one slice: its last column by the transposed matrix-vector kernel, its last row by the other."""

_LAST_ROW_BITS = (LAST_ROW << _EDGE_SHIFT) | (LAST_ROW << (_EDGE_SHIFT + 2))
_LAST_COLUMN_BITS = (LAST_COLUMN << _EDGE_SHIFT) | (LAST_COLUMN << (_EDGE_SHIFT + 2))


def measured_eigen_host() -> bool:
    """Whether this host chooses the measured kernels (:func:`lowering.kernels.host.measured_host`: oneDNN's AVX-512
    sgemm) and the cache sizes Eigen reads here are known (:func:`eigen_cache_sizes`)."""
    return host.measured_host() and eigen_cache_sizes() is not None


@functools.cache
def eigen_cache_sizes() -> tuple[int, int, int] | None:
    """The L1 data, L2 and L3 sizes in bytes Eigen's blocking reads on this host, or None where they are not known.

    * Intel: Eigen reads CPUID leaf 4, as Linux does for ``/sys/devices/system/cpu/cpu0/cache``: those sizes
      (measured on a 2-core Xeon with a 48 KiB L1, a 2 MiB L2 and a 300 MiB L3: a one-CPU product of shape
      (256, 1024, 49) is bitwise only with its own L2).
    * AMD: Eigen's AMD query is measured on one kind of host only (a 48 KiB L1 and a 1 MiB L2, where it reads a 384
      MiB L3): :data:`MEASURED_AMD_CACHES` there, else None."""
    sizes = _sys_cache_sizes()
    vendor = host.host_properties()["vendor"]
    if vendor == "GenuineIntel" and all(level in sizes for level in (1, 2, 3)):
        return sizes[1], sizes[2], sizes[3]
    if vendor == "AuthenticAMD" and sizes.get(1) == MEASURED_AMD_CACHES[0] and sizes.get(2) == MEASURED_AMD_CACHES[1]:
        return MEASURED_AMD_CACHES
    return None


def _sys_cache_sizes() -> dict[int, int]:
    """CPU 0's data and unified cache sizes in bytes by level, as Linux reports them (empty where it does not)."""
    sizes = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(root):
            if not entry.startswith("index"):
                continue
            with open(os.path.join(root, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size")) as f:
                size = f.read().strip()
            if kind != "Instruction" and size.endswith("K"):
                sizes[level] = int(size[:-1]) * 1024
    except (OSError, ValueError):
        return {}
    return sizes


def is_eigen_product(k: int, m: int, n: int) -> bool:
    """Whether XLA runs an f32 ``x.T @ g`` with ``out (m, n)`` and contraction ``k`` as Eigen's contraction (not its
    naive loop, a matrix-vector emitter or a multiply)."""
    return k >= 2 and m >= 2 and n >= 2 and not ((k <= 3 or m <= 3) and (k <= 3 or n <= 3))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _heuristic(k: int, m: int, n: int, threads: int, caches: tuple[int, int, int]) -> tuple[int, int, int]:
    """Eigen's ``evaluateProductBlockingSizesHeuristic`` for f32 with the cache sizes ``caches``: ``(kc, mc, nc)``."""
    L1_BYTES, L2_BYTES, L3_BYTES = caches  # noqa: N806 (Eigen's names)
    if threads > 1:
        k_cache = max(8, min((L1_BYTES - MR * NR * 4) // (MR * 4 + NR * 4), 320))
        if k_cache < k:
            k = k_cache - k_cache % 8
        n_cache = (L2_BYTES - L1_BYTES) // (NR * 4 * k)
        n_per_thread = _ceil_div(n, threads)
        if n_cache <= n_per_thread:
            n = min(n, n_cache - n_cache % NR if n_cache >= NR else NR)
        else:
            n = min(n, n_per_thread + NR - 1 - (n_per_thread + NR - 1) % NR)
        m_cache = (L3_BYTES - L2_BYTES) // (4 * k * threads)
        m_per_thread = _ceil_div(m, threads)
        if MR <= m_cache < m_per_thread:
            m = m_cache - m_cache % MR
        else:
            m = min(m, m_per_thread + MR - 1 - (m_per_thread + MR - 1) % MR)
        return k, m, n
    if max(k, m, n) < 48:
        return k, m, n
    max_kc = max(((L1_BYTES - MR * NR * 4) // (MR * 4 + NR * 4)) & ~7, 1)
    old_k = k
    if k > max_kc:
        k = max_kc if k % max_kc == 0 else max_kc - 8 * ((max_kc - 1 - k % max_kc) // (8 * (k // max_kc + 1)))
    actual_l2 = L2_BYTES * 3 // 2
    remaining_l1 = L1_BYTES - MR * NR * 4 - m * k * 4
    max_nc = remaining_l1 // (k * 4) if remaining_l1 >= NR * 4 * k else (3 * actual_l2) // (2 * 2 * k * 4)
    nc = min(actual_l2 // (2 * k * 4), max_nc) & ~(NR - 1)
    if n > nc:
        n = nc if n % nc == 0 else nc - NR * ((nc - n % nc) // (NR * (n // nc + 1)))
    elif old_k == k:
        problem = k * n * 4
        budget, max_mc = actual_l2, m
        if problem <= 1024:
            budget = L1_BYTES
        elif problem <= L1_BYTES:
            budget, max_mc = L2_BYTES, min(576, max_mc)
        mc = min(budget // (3 * k * 4), max_mc)
        if mc > MR:
            mc -= mc % MR
        elif mc == 0:
            return k, m, n
        m = mc if m % mc == 0 else mc - MR * ((mc - m % mc) // (MR * (m // mc + 1)))
    return k, m, n


def _blocking(k: int, m: int, n: int, threads: int, caches: tuple[int, int, int],
              by_column: bool = True) -> tuple[int, int, int]:
    """TensorFlow's ``TensorContractionBlocking`` for its custom kernel: Eigen's sizes, ``mc`` and ``nc`` rounded up to
    48 and 24, and ``K`` cut into even blocks (multiples of 8)."""
    if by_column:
        kc, mc, nc = _heuristic(k, m, n, threads, caches)
    else:
        kc, nc, mc = _heuristic(k, n, m, threads, caches)
    if kc <= 0 or mc <= 0 or nc <= 0:
        return kc, mc, nc
    mc = min(m, _ceil_div(int(mc * 1.5), 48) * 48)
    nc = min(n, _ceil_div(nc, 24) * 24)
    blocks = max(1, _ceil_div(k, kc))
    return min(k, _ceil_div(k // blocks, 8) * 8), mc, nc


def _shard_by_column(m: int, n: int, threads: int) -> bool:
    if m // threads >= NR and (n // threads < NR or (n // threads < 4 * NR and n % (threads * NR) != 0
                                                    and (m % (threads * NR) == 0 or m // n >= 6))):
        return False
    return not (n // threads < 16 * NR and m > n * 32)


def _cost(size: float, loads: float, stores: float, compute: float) -> float:
    return size * (loads * 11 / 64 + stores * 11 / 64 + compute)


def _compute_bandwidth(rows: int, columns: int, bk: int) -> float:
    """Eigen's compute bandwidth of a block (``rows`` against its ``MR``, ``columns`` against ``NR``)."""
    return 4.0 if bk == 1 else (2.0 if columns < NR or rows < MR else 1.0)  # (1.0, not 0.5: built without FMA)


def _threads(m: int, n: int, bm: int, bn: int, bk: int, by_column: bool, cpus: int, rhs_compute: float = 0.0) -> int:
    """The threads Eigen's cost model gives a contraction sharded over its output (``rhs_compute``: the compute cost
    of one coefficient of the right operand's evaluator, which Eigen charges ``bk / m`` times)."""
    compute = bk * _compute_bandwidth(bn, bm, bk) / PACKET + rhs_compute * bk / m
    loads = (4.0 * bk / m) if by_column else (4.0 * bk / n)
    threads = (_cost(n * m, loads, 4.0, compute) - FIXED_OVERHEAD) / FIXED_OVERHEAD + 0.9
    return min(cpus, max(1, int(threads)))


def _inner_threads(m: int, n: int, k: int, cpus: int, rhs_compute: float = 0.0) -> int:
    """The threads (an even count, or 1) Eigen's cost model gives a contraction sharded by its inner dimension
    (``rhs_compute`` as for :func:`_threads`, charged ``n`` times per term)."""
    per_k = _cost(k, 4.0 * n, 4.0, _compute_bandwidth(m, n, k) * m * n / PACKET + rhs_compute * n)
    reduction = _cost(m * n, 2.0, 1.0, 1.0 / PACKET)
    best, lowest = 1, per_k
    for threads in range(2, cpus + 1, 2):
        cost = per_k / threads + FIXED_OVERHEAD + threads * (reduction + 3000)
        if cost < lowest:
            best, lowest = threads, cost
    return best


def _sharded_by_inner(m: int, n: int, k: int, threads: int, inner: int, l3_bytes: int) -> bool:
    if n == 1 or inner < 2 or inner < threads or m * n * 4 > l3_bytes // inner or k // inner < 2 * NR:
        return False
    return max(m, n) // threads < NR or (k // inner > 8 * NR and (min(m, n) < 2 * NR or inner > threads))


@functools.cache
def contraction_plan(k: int, m: int, n: int, cpus: int, caches: tuple[int, int, int] | None = None,
                     rhs_compute: float = 0.0) -> tuple[tuple[int, int, int], ...]:
    """Eigen's plan for ``out (m, n) = x.T @ g`` with contraction ``k`` (the product's own ``m`` and ``n``: Eigen's
    ``n`` and ``m``) on ``cpus`` CPUs with the cache sizes ``caches`` (by default this host's,
    :func:`eigen_cache_sizes`, else the measured AMD host's): one or two slices of ``K``, each ``(length, K block,
    edge flags)``. ``rhs_compute``: the compute cost per coefficient of Eigen's right operand (the product's ``m``
    side; 0 for a tensor in memory, :data:`IMAGE_PATCH_COMPUTE` for a convolution's patches)."""
    caches = caches or eigen_cache_sizes() or MEASURED_AMD_CACHES
    em, en = n, m  # (Eigen's view: m = O, n = I)
    by_column = _shard_by_column(em, en, 2)
    kc, mc, nc = _blocking(k, em, en, 2, caches, by_column)
    threads = _threads(em, en, mc, nc, kc, by_column, cpus, rhs_compute)
    inner = _inner_threads(em, en, k, cpus, rhs_compute)

    def edges(bm: int, bn: int) -> int:
        return (LAST_COLUMN if em % min(em, bm) == 1 else 0) | (LAST_ROW if en % min(en, bn) == 1 else 0)

    if _sharded_by_inner(em, en, k, threads, inner, caches[2]):
        size = min(k, max(12 * PACKET, _ceil_div(_ceil_div(k, inner), 8) * 8))
        count = _ceil_div(k, size)
        slices = []
        for s in range(count):
            length = size if s + 1 < count else k - size * (count - 1)
            bk, bm, bn = _blocking(length, em, en, count, caches)
            slices.append((length, bk, edges(bm, bn)))
        return tuple(slices)
    if threads == 1:
        bk, bm, bn = _blocking(k, em, en, 1, caches)
    else:
        bk, bm, bn = _blocking(k, em, en, threads, caches, _shard_by_column(em, en, threads))
    return ((k, bk, edges(bm, bn)),)


def convolution_order(k: int, m: int, n: int) -> int | None:
    """The order of an f32 convolution XLA CPU computes itself (its ``ConvolutionThunk``: Eigen's spatial
    convolution, a contraction of the image patches ``(m, k)``, ``K`` in ``(kh, kw, ci)`` order, with the kernel
    ``(k, n)``) -- the same contraction, blocks and oneDNN pieces as ``x.T @ g`` with ``out (m, n)`` -- or None
    where it is not measured (other hosts, more CPUs, a dimension below 2). The patches are the contraction's right
    operand in Eigen's cost model, which charges their index arithmetic (:data:`IMAGE_PATCH_COMPUTE`): that decides
    whether Eigen shards the contraction by ``K`` (two slices added). Measured bitwise on 150 of 150 random 2-D
    convolutions of at most 16 features (the others are YNNPACK's), ``K`` 1 to 1,296, and the kernel gradient of
    flax's CNN example (``K = 6,272``); 1-D convolutions (which Eigen runs as 2-D ones) 79 of 80; 3-D ones 76 of 80
    (Eigen's volume patches have a charge of their own, not modelled). ``n = 1`` (one output feature): the
    last-column rule in every slice, for the last column of a two-column product (:func:`one_column_matmul`); 99 of
    100 random ones bitwise (the other has ``K = 2``)."""
    if min(k, m, n) < 1 or min(k, m) < 2 or not measured_eigen_host():
        return None
    order = contraction_order(k, m, n, usable_cpus(), rhs_compute=IMAGE_PATCH_COMPUTE)
    if order is not None and n == 1:
        # One output feature: the whole product is one column wide, summed by oneDNN's matrix-vector kernel in
        # every slice (the last-column rule); the caller computes it as the last column of a two-column product.
        order |= _LAST_COLUMN_BITS
    return order


def one_column_matmul(matmul):
    """``matmul`` (a ``(batch, m, k) x (batch, k, n)`` product in an order with the last-column rule) for ``n = 1``:
    the last column of the product with the column duplicated (the order's kernels take ``N >= 2``)."""

    def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return matmul(a, np.concatenate([b, b], axis=2))[:, :, 1:]

    return product


MEASURED_CPUS = 2
"""The most CPUs the plans were measured with (1 and 2): with more, these products keep the earlier rules."""


def transposed_convolution_order(k: int, m: int, n: int) -> tuple[bool, int | None]:
    """Whether the product ``x @ w`` of XLA's transposed convolution (``m`` input pixels, ``k`` input features,
    ``n`` window positions times output features; :func:`lowering.kernels.windowed._transposed_convolution`) is
    replayed on this host, and its order (None: one input feature whose products need no sum, or no plan): on the
    hosts and CPU counts Eigen's plan was measured on."""
    if not measured_eigen_host() or usable_cpus() > MEASURED_CPUS:
        return False, None
    order = contraction_order(k, m, n, usable_cpus())
    return order is not None or k == 1, order


def contraction_order(k: int, m: int, n: int, cpus: int, swapped: bool = False, rhs_compute: float = 0.0) -> int | None:
    """:data:`EIGEN_CONTRACTION` with :func:`contraction_plan` in its bits (``swapped``: the plan of the ``(n, m)``
    product XLA computes, and :data:`EIGEN_SWAPPED`), or None on more than :data:`MEASURED_CPUS` CPUs (not
    measured) or where the plan does not fit the bits."""
    if cpus > MEASURED_CPUS:
        return None
    if swapped:
        order = contraction_order(k, n, m, cpus, rhs_compute=rhs_compute)
        return None if order is None else order | EIGEN_SWAPPED
    slices = contraction_plan(k, m, n, cpus, rhs_compute=rhs_compute)
    if len(slices) > 2 or any(bk >= 1 << 10 for _, bk, _ in slices) or k >= 1 << 31:
        return None
    order = EIGEN_CONTRACTION | slices[0][1] << _BK_SHIFT0 | slices[0][2] << _EDGE_SHIFT
    if len(slices) == 2:
        order |= slices[1][1] << _BK_SHIFT1 | slices[1][2] << (_EDGE_SHIFT + 2) | slices[0][0] << _SLICE_SHIFT
    return order


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _chunk_bounds(start, stop, block):
    """The pieces oneDNN sums as chains in the ``K`` blocks of ``block`` terms Eigen cuts ``[start, stop)`` into:
    their bounds."""
    bounds = [start]
    p = start
    while p < stop:
        end = min(stop, p + block)
        while p < end:
            left = end - p
            size = SGEMM_K_BLOCK if left >= 2 * SGEMM_K_BLOCK else (left + 1) // 2 if left > SGEMM_K_BLOCK else left
            p += size
            bounds.append(p)
    return np.array(bounds, np.int64)


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _eight_lanes(l0, l1, l2, l3, l4, l5, l6, l7):
    """oneDNN's transposed matrix-vector kernel's horizontal add of 8 lanes."""
    return ((l0 + l1) + (l4 + l5)) + ((l2 + l3) + (l6 + l7))


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _lanes_row(a, b, out, start, stop, block):
    """The last row of ``out`` summed as oneDNN's transposed matrix-vector kernel sums the last column of the
    product XLA computes (this one swapped; module docstring): every column at once."""
    i = out.shape[0] - 1
    n = out.shape[1]
    zero = a.dtype.type(0)
    lanes = np.empty((8, n), a.dtype)
    total = np.zeros(n, a.dtype)
    p = start
    while p < stop:
        end = min(stop, p + block)
        while p < end:
            part = min(GEMV_PART, end - p)
            whole = part - part % 16
            if whole > 0:
                lanes[:, :] = zero
                for t in range(p, p + whole, 8):
                    for lane in range(8):
                        x = a[i, t + lane]
                        for j in range(n):
                            lanes[lane, j] = fused_multiply_add(x, b[t + lane, j], lanes[lane, j])
                for j in range(n):
                    total[j] = total[j] + _eight_lanes(lanes[0, j], lanes[1, j], lanes[2, j], lanes[3, j],
                                                       lanes[4, j], lanes[5, j], lanes[6, j], lanes[7, j])
            q = p + whole
            for width in (8, 4, 2, 1):
                if part & width:
                    lanes[:, :] = zero
                    for lane in range(width):
                        x = a[i, q + lane]
                        for j in range(n):
                            lanes[lane, j] = x * b[q + lane, j]
                    for j in range(n):
                        total[j] = total[j] + _eight_lanes(lanes[0, j], lanes[1, j], lanes[2, j], lanes[3, j],
                                                           lanes[4, j], lanes[5, j], lanes[6, j], lanes[7, j])
                    q += width
            p += part
    for j in range(n):
        out[i, j] = total[j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _chain_row(a, b, out, start, stop):
    """The last row of ``out``: each element one chain over ``[start, stop)`` (oneDNN's other matrix-vector kernel),
    every column at once."""
    i = out.shape[0] - 1
    n = out.shape[1]
    sums = np.zeros(n, a.dtype)
    for p in range(start, stop):
        x = a[i, p]
        for j in range(n):
            sums[j] = fused_multiply_add(x, b[p, j], sums[j])
    for j in range(n):
        out[i, j] = sums[j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _column_as_row(a, b, out, start, stop, block, lanes):
    """The last column of ``out`` as :func:`_lanes_row` (``lanes``) or :func:`_chain_row` sums a last row: the row of
    the transposed product ``b[:, -1].T @ a.T`` (each product is exact, so its operands' order does not matter)."""
    column = np.ascontiguousarray(b[:, b.shape[1] - 1]).reshape(1, b.shape[0])
    line = np.empty((1, out.shape[0]), out.dtype)
    if lanes:
        _lanes_row(column, np.ascontiguousarray(a.T), line, start, stop, block)
    else:
        _chain_row(column, np.ascontiguousarray(a.T), line, start, stop)
    out[:, out.shape[1] - 1] = line[0]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _slice(a, b, out, start, stop, block, edges, swapped):
    """``out`` from the terms ``[start, stop)``: the chains of oneDNN's pieces, then the product's edge blocks of one
    (the last column of the product XLA computes, then its last row, which wins where both hold)."""
    chunked_chain_product(a, b, out, _chunk_bounds(start, stop, block))
    if edges & LAST_COLUMN:
        if swapped:
            _lanes_row(a, b, out, start, stop, block)
        else:
            _column_as_row(a, b, out, start, stop, block, True)
    if edges & LAST_ROW:
        if swapped:
            _column_as_row(a, b, out, start, stop, block, False)
        else:
            _chain_row(a, b, out, start, stop)


@numba.njit(cache=True, nogil=True)
def piece_order(order, last):
    """``order`` for a piece of a product's rows: its last-row rule holds only in the piece that ends the product
    (the rule of the last column of the product XLA computes, where it is swapped)."""
    if not last:
        return order & ~(_LAST_COLUMN_BITS if order & EIGEN_SWAPPED else _LAST_ROW_BITS)
    return order


@numba.njit(cache=True, error_model="numpy", nogil=True)
def eigen_product(a, b, out, order):
    """``out = a @ b`` for C-contiguous 2-D f32 ``a (M, K)`` (the transposed lhs ``x.T``), ``b (K, N)``, ``out (M,
    N)``, in the order of the plan in ``order`` (:func:`contraction_order`; ``M, N, K >= 2``)."""
    k = a.shape[1]
    split = order >> _SLICE_SHIFT
    first = split if split > 0 else k
    swapped = order & EIGEN_SWAPPED != 0
    _slice(a, b, out, 0, first, (order >> _BK_SHIFT0) & 1023, (order >> _EDGE_SHIFT) & 3, swapped)
    if split > 0:
        rest = np.empty_like(out)
        _slice(a, b, rest, first, k, (order >> _BK_SHIFT1) & 1023, (order >> (_EDGE_SHIFT + 2)) & 3, swapped)
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = out[i, j] + rest[i, j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def eigen_dot(a, b, out, order):
    """:func:`eigen_product` of each batch of C-contiguous f32 ``a (batch, M, K)``, ``b (batch, K, N)``, ``out (batch,
    M, N)``: the call the interpreter and compiled loops make."""
    for t in range(a.shape[0]):
        eigen_product(a[t], b[t], out[t], order)



def eigen_matmul(order: int, workers: int = 1, mode=None):
    """The interpreter's ``(batch, m, k) x (batch, k, n)`` matmul in ``order`` (:func:`contraction_order`): a product of
    :data:`~lowering.runtime.workers.PIECES_MNK` multiply-adds or more with one batch is cut in ``workers`` row
    pieces computed at once on worker threads in the context manager ``mode`` (the caller's denormal mode); each
    element's order is the same, the rule of the product's last row in the last piece only (:func:`piece_order`)."""

    def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        batch, m, k = a.shape
        out = np.empty((batch, m, b.shape[2]), a.dtype)
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        parts = min(workers, m // PIECE_ROWS)
        if batch == 1 and parts >= 2 and m * k * b.shape[2] >= PIECES_MNK:
            bounds = row_piece_bounds(m, parts)
            run_pieces(eigen_dot, [(a[:, s:e], b, out[:, s:e], piece_order(order, e == m))
                                   for s, e in zip(bounds[:-1], bounds[1:])], mode)
            return out
        eigen_dot(a, b, out, order)
        return out

    matmul.__doc__ = f"eigen_dot in order {order}: XLA CPU's order for f32 x.T @ g."
    return matmul
