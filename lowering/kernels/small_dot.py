"""Small f32/f64 matrix products, summed in the order XLA CPU sums them: one definition.

XLA CPU (jax 0.10.2) computes a small product with one of several emitters, each summing every output element in
its own fixed order. Measured against jax.jit on a 2-core AMD EPYC VM with AVX-512, on operands of mixed
magnitudes, every element of every sample equal (``tests/test_linalg.py``):

* **products with ``M, N >= 2``** (canonical operands, or ``x @ w.T``) where ``max(M, K, N) >= 8`` are YNNPACK's:
  XLA hands them to YNNPACK, which picks one of its generated kernels by a cost model
  (:mod:`lowering.kernels.ynnpack_dots` replays the choice). Its kernel sums each element as **one chain** from zero
  (``acc = fma(a[i, p], b[p, j], acc)``, or ``acc + a * b`` with the product rounded for its AVX/SSE2 kernels:
  :data:`ROUNDED`), in **four lanes** or **two lanes** (term ``p < K - K mod L`` in lane ``p mod L``, each lane a
  chain from zero, added as ``(l0 + l1) + (l2 + l3)`` or ``l0 + l1``; the last ``K mod L`` terms are a second
  call on zero-padded operands, ``(t0 + t1) + (t2 + t3)`` of rounded products, added to the rest), with ``K`` in
  chunks when a block of it exceeds YNNPACK's L2 budget (each chunk's sum added to the sum so far). Measured:
  every shape with ``M`` in 2..16, ``N`` 2..16, ``K`` 2..19 (f32 and f64), 300 random f32 and 200 f64 shapes up
  to ``(80, 256, 300)``, wide (``M`` 2..8, ``N`` to 1,400) and tall (``M`` to 3,000) ones, batches, ``x @ w.T``.
* **f32 products below that** (``max(M, K, N) < 8``) are XLA's own loops: one chain of fused multiply-adds
  (measured: every shape in 2..7 cubed). f32 ``x.T @ g`` (the lhs transposed: not YNNPACK's) is Eigen's tensor
  contraction over oneDNN's sgemm (:mod:`lowering.kernels.eigen_dots`, order :data:`EIGEN_CONTRACTION`: chains of
  fused multiply-adds in pieces of ``K``, each added to the sum before it, and oneDNN's matrix-vector kernels for
  edge blocks one wide), except where XLA runs it otherwise (its naive loop: one chain).
* **f64 products below 8 x 8 x 8** (also ``x @ w.T``), and f64 ``x.T @ g`` (the lhs transposed: not YNNPACK's),
  are XLA's naive loop (one chain) when ``(M <= 3 or K <= 3) and (K <= 3 or N <= 3)``, else Eigen's, built for AVX
  without FMA (:data:`EIGEN_COLUMN`, :func:`_eigen_columns`): chains of rounded products, except in the rows of
  whole 4-row panels the columns after the last whole 8-column block (even and odd terms of the first ``K - K mod
  8`` in two accumulators) and the last column of an odd ``N`` (``K`` in four lanes). Measured: every shape in
  2..7 cubed, each layout; 172 random ``x.T @ g`` with ``K`` to 256 and ``M, N`` to 100.

bf16 x bf16 -> f32 products are YNNPACK's bf16 kernels: one chain over the pairs of ``K`` (:data:`PAIRS`), and on
CPUs with AMX-BF16 blocks of 32 terms of ``K`` in even and odd chains for the output tiles YNNPACK gives its AMX
kernels (:data:`AMX_TILES`, with denormals flushed as that unit does).

These orders hold where XLA chooses the same kernels: on CPUs with AVX-512 (F, BW, DQ, VL), FMA3 and AVX2
(:func:`lowering.kernels.host.measured_host`). Elsewhere, and for products whose operands are otherwise laid out (other transposes,
mixed types), the earlier rules stay (not bitwise with XLA there): one chain, and four lanes
for f32 ``M >= 2``, ``2 <= N <= 8``, ``K >= 8`` and ``9 <= N <= 16``, ``K >= 4`` except ``K = 5, 6, 9, 10, 13,
17``. NaN payloads (which NaN a sum of several returns) are not claimed.

Vector-matrix products (``M = 1``) are computed in groups of 32 bytes of columns (8 f32, 4 f64), whose chains
start from zero as above; the last ``r = N mod 8`` (f32; ``N mod 4`` f64) columns are computed apart: each is a
chain that starts from its first product (``a[0] * b[0, j]``), except a lone last column after whole groups
(``r = 1``) and column 0 of a two-column product with ``K >= 3``, which add the rounded products of their first 8
terms in order (no FMA) and go on with fused multiply-adds (measured for r = 1 .. 7 after 1, 2, 4, 7 and 12 groups).
Where a chain starts shows in the sign of a zero result: ``[-1, -1] @ zeros((2, 2))`` is ``[-0, -0]``. A
contraction of length 1 is a plain product (XLA rewrites it into a multiply).

A vector dot (``M = N = 1``, any batch) with ``K > 32`` is no dot in XLA: its simplifier makes it
``reduce(multiply(a, b))`` (products rounded, not fused), and its CPU tree-reduction rewriter sums a reduced
dimension longer than 32 as a ``reduce_window`` of windows of 32 (stride 32, padding split evenly, the smaller
half before), each window a sum from zero in order, then reduces the window sums again the same way until at
most 32 are left, added in order from zero (**tree**; measured bitwise for f32, f64 and f16 (computed in f32),
batch 1 and 3, every ``K`` in 33..79 and 100 to 3,000 in steps). With 4,096 products or more over all batches
(any ``K``) XLA runs that reduce in YNNPACK (**YNNPACK sum**, :func:`_ynnpack_sums`, the definition of
:mod:`lowering.kernels.ynnpack_sum` that XLA's large reduces use too: 64-byte vectors of rounded products, a
degree-16 tree of accumulators with Kahan summation at its top, lanes added by halves; products past one of
YNNPACK's tiles (32,768 f32, 16,384 f64, with fewer than 2 x CPUs batches) summed per tile, then the tiles'
sums; measured bitwise for f32 and f64, 50 random batch x ``K`` each with ``K`` 2..16,384, infinities included,
and ``K`` = 40,000). Up to 32 the multiply is fused into the reduce and contracted: the one
chain. So +inf and -inf partial products give NaN above 32 (rounded products; +-inf in one window, or windows
of opposite infinities) and the first overflowing product's sign up to 32.

Inside the while loops XLA CPU compiles whole (``xla_cpu_small_call``, see ``passes/small_loops.py``) its
emitters use 64-byte vectors: the groups of columns of a vector-matrix product are 16 f32 / 8 f64 wide, a
matrix-vector product has 16 / 8 lanes, added by folding halves (:data:`WIDE_VECTORS`; measured for f32 and f64
with ``K`` up to 64, ``N`` up to 33, ``M`` up to 12, zero signs included). Products with ``M, N >= 2`` there are
XLA's own loops, neither YNNPACK's nor Eigen's: one chain of fused multiply-adds (measured: f32 and f64, ``M, N``
in 2, 3, 5, 7 and ``K`` in 2, 4, 5, 7, each loop XLA compiled whole; f64 ``(4, 4, 3)`` is Eigen's outside loops).

A matrix-vector product (``M >= 2``, ``N = 1``, ``K >= 2``; any batch) is XLA's row-major GEMV emitter
(**row tiles**, ``RowMajorMatrixVectorProductEmitter`` with 32-byte vectors): rows in tiles of 8; each row
accumulates its first ``K - K mod w`` terms in ``w`` lanes (8 f32, 4 f64; term ``p`` in lane ``p mod w``, fused
multiply-adds from zero) and the last ``K mod w`` terms in a scalar chain from zero; the lanes are added as
XLA's vector support library adds them -- AVX-style pairwise ``((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`` when the
tile has as many rows as lanes (f32 whole tiles; f64 a last tile of 4 rows), else halves folded
``((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))`` (f64 ``(l0+l2)+(l1+l3)``) -- and the scalar chain is added last.
Measured bitwise for f32 and f64, ``M`` in 2..20, 100, 1000 and ``K`` in 2..256 (mixed magnitudes), batches 2-4.

The result is one definition, the same in every path (the interpreter's dot kernel and compiled loops call the
kernel of the order :func:`small_dot_order` gives, :func:`order_kernel`), where BLAS's order would change with the
CPU's OpenBLAS kernel. YNNPACK's products of any size whose kernel sums each element in one, two or four fused
chains over ``K`` (every kernel chosen on the measured AVX-512 host) are computed in register tiles
(:mod:`lowering.kernels.chain_tiles`: the same order, at or above one OpenBLAS thread's speed on this CPU: (2048,
784, 512) f32 7.6 vs 13.0 ms, (256, 1024, 1024) 2.8 vs 4.2 ms), large ones in pieces on the CPUs
(:func:`small_matmul`); measured bitwise against jax.jit on the MLP's (2048, 784, 512), (2048, 512, 512), (2048,
512, 10) and their ``x @ w.T``, batched products, and random f32/f64 shapes to (1500, 2100, 1100)
(``tests/test_chain_tiles.py``); f32 ``x.T @ g`` of any size is computed in the same tiles in Eigen's pieces of
``K``. Other large products (f64 ``x.T @ g`` outside the small sizes, YNNPACK's rounded-product kernels, other CPUs)
stay with BLAS: not XLA's order.
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from xla_dialect.ops.conversion import ConvertOp
from xla_dialect.ops.data_movement import TransposeOp

from ..runtime.loop_runtime import call_compiled, denormal_as_zero, fused_multiply_add, mxcsr, native_address, set_mxcsr
from ..runtime.workers import PIECE_ROWS, PIECES_MNK, numba_threads_available, row_piece_bounds, run_pieces, usable_cpus
from . import host
from .chain_tiles import chain_product, lane_product
from .gemv_lanes import gemv_rows
from .eigen_dots import EIGEN_CONTRACTION, contraction_order, eigen_matmul, is_eigen_product, measured_eigen_host
from .tree_sum import TREE_WINDOW, window_sum
from .vectorized_loops import is_elemental_dot, is_replayed, loop_dot_row
from .ynnpack_dots import bf16_amx_tiles, is_ynnpack_dot, ynnpack_order
from .ynnpack_sum import row_sum, sum_plan

SMALL_CALL = "xla_cpu_small_call"
"""The attribute (unit) the ``xla-small-loops`` pass puts on a dot, max or min inside a while loop XLA CPU compiles
whole (passes/small_loops.py); the kernels read it (defined here, below the passes that write it)."""

SMALL_DOT_MAX_MNK = 1 << 18
"""Products with at most this many multiply-adds (over all batches) are summed in XLA's order
(:func:`order_kernel`)."""

SMALL_DOT_MAX_K = 256
"""... and a contraction of at most this length, except YNNPACK's products (M, N >= 2, canonical operands or
``x @ w.T`` on AVX-512 hosts), whose replayed order holds for any ``K`` measured (to 5,000 within the size limit)."""

ONE_CHAIN, TREE, ROW_TILES, FOUR_LANES, TWO_LANES, EIGEN_COLUMN, YNNPACK_SUM = 1, 2, 3, 4, 5, 6, 7
BASE_ORDER = 7
"""The bits of an order that name it (the others are the flags below and a chunk length)."""

WIDE_VECTORS = 8
"""A flag or-ed into an order: XLA's emitters with 64-byte vectors (inside the while loops XLA CPU compiles whole,
see the module docstring) instead of 32-byte ones."""

ROUNDED = 16
"""A flag or-ed into ``ONE_CHAIN`` or ``TWO_LANES`` (``M >= 2``): each product rounded, then added (YNNPACK's AVX,
AVX2 and SSE2 kernels), instead of fused multiply-adds."""

CHUNK_SHIFT, LAST_CHUNK_SHIFT, COLUMNS_SHIFT = 8, 24, 40
"""Where an order keeps (16 bits each) the length of the chunks ``K`` is summed in (0: one chunk) in its first
``columns`` columns, and in the other columns (YNNPACK's ``K`` blocks depend on the width of XLA's thread tiles)."""

RHS_TRANSPOSED, LHS_TRANSPOSED, OTHER_OPERANDS, BF16_PRODUCT, RESULT_TRANSPOSED = 1, 2, 4, 8, 16
"""Bits :func:`dot_vector_bytes` or-s into the vector size: the rhs is ``(n, k)`` (``x @ w.T``), the lhs is
``(k, m)`` (``x.T @ r``), the operands are bf16 (canonical) and the result f32 (:data:`PAIRS`), or the operands
are laid out otherwise or are not all f32 or all f64 (no order was measured for them); ``LHS_TRANSPOSED |
RHS_TRANSPOSED`` is ``x.T @ g.T``. The operands are read where XLA's dot reads them (:func:`_read_positions`: its
``DotDecomposer``'s canonical copies, the transposes its ``TransposeFolding`` folds); the transpose that is a 2-D
result's only user swaps the operands (``RESULT_TRANSPOSED``; used for ``x.T @ g``,
:mod:`lowering.kernels.eigen_dots`)."""

PAIRS = 32
"""A flag or-ed into ``ONE_CHAIN``: bf16 products into f32 (YNNPACK's bf16 kernels, the AVX-512 BF16 dot
instruction): each element one chain over the pairs of ``K``, the odd term of each pair added first
(``acc = (acc + a[2p+1] b[2p+1]) + a[2p] b[2p]``, products exact in f32), an odd last term added at the end.
Measured bitwise on canonical bf16 x bf16 -> f32 products with ``M, N >= 2`` (``K`` to 1,200); ``M = 1`` or
``N = 1`` products, ``x @ w.T`` and bf16 results are not identified (the one chain, as before). On CPUs with
AMX-BF16 most tiles are AMX ones instead (:data:`AMX_TILES`); there every product is exact (a fused multiply-add:
vdpbf16ps and YNNPACK's FMA kernels add the exact product) and XLA keeps a product bf16 only for ``K >= 4`` and
``M >= 4`` or ``N >= 4`` (:func:`_bf16_kept`; else an f32 product of the converted operands)."""

AMX_TILES = 128
"""A flag or-ed into ``ONE_CHAIN | PAIRS`` on CPUs with AMX-BF16, where YNNPACK computes some output tiles of a
bf16 product with its AMX kernels (``tdpbf16ps``: tiles of 16 rows x 32 bf16 of ``K``). Such an element is summed
per block of 32 terms of ``K``: the even terms in one chain and the odd ones in another, each from zero with every
product exact and every sum rounded once (``e = fma(a[2q], b[2q], e)``, ``o = fma(a[2q+1], b[2q+1], o)``), the
block's ``e + o`` added to the sum of the blocks before it; an odd last term is a block of its own (``(a b + 0) +
0`` added last). Inputs below f32's smallest normal are read as zeros and every rounded sum that lands there is
flushed to a zero of its sign (the unit's DAZ and FTZ; measured). Which tiles: :func:`ynnpack_dots.bf16_amx_tiles`,
kept in the order as the row and column where XLA's thread tiles end (:data:`AMX_ROWS_SHIFT`,
:data:`AMX_COLUMNS_SHIFT`) and one bit per kind of tile (:data:`AMX_KINDS_SHIFT`); the other tiles are
:data:`PAIRS`. Measured bitwise on this 2-core Xeon (Emerald Rapids) against jax.jit: crafted inputs (each pair of
terms set to +-2^40 and +-2^25 among ones: the summation tree of every element of ``K`` 16 and 64), 210 random
shapes (``M, N`` 2..200, ``K`` 4..1,200, 2 of them with tiles of both kinds) and operands with denormal
products."""

ELEMENTAL_DOT = 1 << 56
"""An order of its own (with the product's row count in the chunk bits, :data:`CHUNK_SHIFT`): a transposed matrix
times a vector as XLA CPU's elemental dot in a loop fusion, whose loop LLVM unrolls or vectorizes
(:mod:`lowering.kernels.vectorized_loops`)."""

B_TRANSPOSED = 1 << 60
"""A flag the interpreter's matmul (:func:`small_matmul`) or-s into a :data:`ONE_CHAIN` order it runs on
:func:`one_chain_kernel` when ``b`` is a transposed view (``k`` of ``x @ k.T``, an einsum's ``bhqd,bhkd``): the
array passed as ``b (batch, K, N)`` then holds each batch's ``B`` transposed, ``(N, K)`` row-major, read as it is
instead of copied. The sums are the same (each element one chain over ``K``); only where ``B``'s elements are
read changes."""

AMX_ROWS_SHIFT, AMX_COLUMNS_SHIFT, AMX_KINDS_SHIFT = 8, 28, 48
"""Where an :data:`AMX_TILES` order keeps (20 bits each) the first row and column of the last, shorter thread tile
(rows and columns before them lie in whole tiles) and (4 bits) which tiles are AMX ones: bit ``2 * r + c`` for the
tiles after the row split (``r``) and column split (``c``)."""

_FIELD = (1 << 20) - 1

PAIRS_MAX_K = 1200
"""bf16 products into f32 (:data:`PAIRS`) up to this contraction length (measured to it) ..."""

PAIRS_MAX_MNK = 1 << 22
"""... and this many multiply-adds (measured bitwise to 18M; at this size about 1-2 ms, a few times BLAS's)."""

TREE_MAX_K = 3000
"""Vector dots (tree order) up to this length are summed in XLA's order (measured up to 3,000)."""

TREE_MAX_PRODUCTS = 4095
"""... and up to this many products over all batches: XLA CPU reduces 4,096 elements or more with YNNPACK
(:data:`YNNPACK_SUM`; measured: batch 124 x K 33 and 2 x 2047 are the tree, 128 x 33, 2 x 2048, 1 x 4095 are not)."""



def dot_vector_bytes(op) -> int:
    """The vector size XLA CPU computes the dot ``op`` with: 64 bytes inside the while loops it compiles whole
    (marked by the ``xla-small-loops`` pass; :func:`small_dot_order` keeps 32-byte vectors there where LLVM prefers
    them, :func:`lowering.kernels.host.prefers_wide_vectors`), else 32; or-ed with how its operands are laid out
    (:data:`RHS_TRANSPOSED`, :data:`LHS_TRANSPOSED`, :data:`OTHER_OPERANDS`), which decides which emitter XLA
    uses. The interpreter's dot kernel and compiled loops pass this to :func:`small_dot_order`."""
    return (64 if SMALL_CALL in op.attributes else 32) | _operand_layout(op) | _result_layout(op)


def _result_layout(op) -> int:
    """:data:`RESULT_TRANSPOSED` when ``op``'s 2-D result has one user, a transpose of its two dimensions."""
    uses = list(op.results[0].uses)
    if len(uses) != 1 or len(op.results[0].type.get_shape()) != 2 or not isinstance(uses[0].operation, TransposeOp):
        return 0
    return RESULT_TRANSPOSED if [int(p) for p in uses[0].operation.properties["permutation"].get_values()] == [1, 0] else 0


def _transpose_of(value) -> list[int] | None:
    """The permutation of the transposes producing ``value``, merged into one as XLA's simplifier merges
    ``transpose(transpose(x))`` (looking through converts to the same type, no-ops XLA removes), or None."""
    perm = None
    while True:
        owner = value.owner
        while isinstance(owner, ConvertOp) and owner.operand.type == value.type:  # (a no-op convert: XLA drops it)
            value = owner.operand
            owner = value.owner
        if not isinstance(owner, TransposeOp):
            return perm
        inner = [int(p) for p in owner.properties["permutation"].get_values()]
        perm = inner if perm is None else [inner[p] for p in perm]
        value = owner.operand


def _is_canonical(rank: int, batch: list[int], contracting: list[int]) -> bool:
    """Whether XLA's ``DotDecomposer`` leaves a dot operand of ``rank`` as it is (its ``IsCanonical``): one
    contracting dimension, at most one free one, and the batch dimensions leading, in order."""
    return (len(contracting) == 1 and len(batch) + 2 >= rank and batch == list(range(len(batch))))


def _folds_into_dot(perm: list[int], batch: list[int], contracting: list[int]) -> bool:
    """Whether XLA CPU's ``TransposeFolding`` folds a transpose of ``perm`` that is a dot operand into the dot (its
    ``IsRowColumnTransposeDotOperand``): the operand has two dimensions besides its batch dimensions, one contracting
    dimension, and the transpose leaves every batch dimension in place. Attention's ``q @ k.T`` over heads split
    out of the features (``[b, s, h, d] -> [b, h, s, d]``) moves a batch dimension, so XLA copies it out first and
    its dot reads row-major operands."""
    return len(batch) == len(perm) - 2 and len(contracting) == 1 and all(perm[d] == d for d in batch)


def _read_positions(value, batch: list[int], contracting: list[int], free: list[int], canonical: bool,
                    lhs: bool) -> tuple[list[int], list[int], list[int]]:
    """Where the batch, contracting and free dimensions of the dot operand ``value`` lie in the array XLA CPU's dot
    reads (storage positions, major first), after XLA's ``DotDecomposer``, ``TransposeFolding`` and layout
    assignment (dot operands row-major):

    * a dot whose operands are both canonical (:func:`_is_canonical`) keeps them; an operand that is a transpose XLA
      folds into the dot (:func:`_folds_into_dot`) is read where the transpose's operand lies, any other value
      row-major as it is (a transpose XLA does not fold is copied out);
    * otherwise ``DotDecomposer`` rewrites both operands as ``transpose`` to ``[batch, free, contracting]`` (lhs) or
      ``[batch, contracting, free]`` (rhs), then a reshape merging the free and the contracting dimensions; the
      transpose, merged with one producing ``value``, folds into the dot when the reshape is a no-op and the merged
      permutation keeps the batch dimensions, else the dot reads the canonical operand row-major (einsum's
      ``bshd,bthd->bhst``: both copied out to ``[b, h, s, d]`` and ``[b, h, d, t]``).

    The result's dimensions are those of the canonical operand when it was rewritten."""
    perm = _transpose_of(value)
    if canonical:
        if perm is not None and _folds_into_dot(perm, batch, contracting):
            return [perm[d] for d in batch], [perm[d] for d in contracting], [perm[d] for d in free]
        return batch, contracting, free
    nb, merged_free = len(batch), min(len(free), 1)  # (the reshape merges the free dimensions into one, or none)
    rows = (list(range(nb)), [nb + merged_free] if lhs else [nb], ([nb] if lhs else [nb + 1]) * merged_free)
    if len(contracting) != 1 or len(free) != 1:
        return rows  # (a reshape between the transpose and the dot: the dot reads a row-major copy)
    order = batch + free + contracting if lhs else batch + contracting + free
    merged = [perm[d] for d in order] if perm is not None else order
    if merged != list(range(len(merged))) and _folds_into_dot(merged, list(range(nb)), rows[1]):
        return [merged[d] for d in rows[0]], [merged[d] for d in rows[1]], [merged[d] for d in rows[2]]
    return rows


SWAPPED_AFTER_DECOMPOSITION = "xla.swapped_after_decomposition"
"""The attribute ``xla-float-rewrites``' ``TransposeOfDot`` puts on the ``dot_general(B, A)`` it writes for
``transpose(dot_general(A, B))`` when ``dot_general(A, B)`` is not canonical (:func:`dot_is_canonical`): XLA's
``DotDecomposer`` canonicalized ``A`` and ``B`` (row-major copies) before its simplifier swapped them, so the dot
reads ``B`` as ``[batch, K, N]`` and ``A`` as ``[batch, M, K]``: both transposed for the swapped product (jax's
gradient of a dense layer over batch and sequence, ``x.T @ g.T`` to Eigen)."""


def dot_is_canonical(op) -> bool:
    """Whether XLA's ``DotDecomposer`` leaves the ``dot_general`` ``op`` as it is (:func:`_is_canonical` of both
    operands, and a batch or contracting dimension)."""
    dn = op.dimension_numbers()
    lbatch, lcontract = list(dn.lhs_batch_dimensions), list(dn.lhs_contracting_dimensions)
    rbatch, rcontract = list(dn.rhs_batch_dimensions), list(dn.rhs_contracting_dimensions)
    return (_is_canonical(len(op.lhs.type.get_shape()), lbatch, lcontract)
            and _is_canonical(len(op.rhs.type.get_shape()), rbatch, rcontract) and bool(lbatch or lcontract))


def _operand_layout(op) -> int:
    lshape, rshape = op.lhs.type.get_shape(), op.rhs.type.get_shape()
    dn = op.dimension_numbers()
    lfree, rfree = dn.free_dimensions(len(lshape), len(rshape))
    lbatch, lcontract = list(dn.lhs_batch_dimensions), list(dn.lhs_contracting_dimensions)
    rbatch, rcontract = list(dn.rhs_batch_dimensions), list(dn.rhs_contracting_dimensions)
    canonical = dot_is_canonical(op)
    swapped = SWAPPED_AFTER_DECOMPOSITION in op.attributes and not canonical
    # (swapped: each operand canonicalized in the role it had before the swap -- the lhs as XLA's rhs, [batch,
    # contracting, free], and the rhs as its lhs, [batch, free, contracting])
    lb, lc, lfree = _read_positions(op.lhs, lbatch, lcontract, lfree, canonical, lhs=not swapped)
    rb, rc, rfree = _read_positions(op.rhs, rbatch, rcontract, rfree, canonical, lhs=swapped)
    lrank, rrank = len(lb + lc + lfree), len(rb + rc + rfree)
    types = {op.lhs.type.element_type, op.rhs.type.element_type, op.result.type.element_type}
    lhs_rows, rhs_rows = lb + lfree + lc == list(range(lrank)), rb + rc + rfree == list(range(rrank))
    if ((str(op.lhs.type.element_type), str(op.rhs.type.element_type), str(op.result.type.element_type))
            == ("bf16", "bf16", "f32") and lhs_rows and rhs_rows):
        return BF16_PRODUCT
    if len(types) != 1 or str(types.pop()) not in ("f32", "f64"):
        return OTHER_OPERANDS  # (f16 and bf16 products run in f32 here, but not with XLA's f32 kernels)
    if lhs_rows and rhs_rows:
        return 0
    if lhs_rows and rb + rfree + rc == list(range(rrank)):
        return RHS_TRANSPOSED
    if rhs_rows and lb + lc + lfree == list(range(lrank)):
        return LHS_TRANSPOSED
    if lb + lc + lfree == list(range(lrank)) and rb + rfree + rc == list(range(rrank)):
        return LHS_TRANSPOSED | RHS_TRANSPOSED  # (x.T @ g.T: as jax.grad computes some weight gradients)
    return OTHER_OPERANDS


def small_dot_order(batch: int, m: int, k: int, n: int, dtype: np.dtype, vector_bytes: int = 32) -> int | None:
    """How XLA CPU sums (:func:`order_kernel`) a ``(batch, m, k) x (batch, k, n)`` product of ``dtype``:
    ``ONE_CHAIN``, ``TREE``, ``ROW_TILES``, ``FOUR_LANES``, ``TWO_LANES`` or ``EIGEN_COLUMN`` (see the module
    docstring; with :data:`WIDE_VECTORS` or-ed in for ``vector_bytes`` 64, :data:`ROUNDED` and ``K`` chunks for
    YNNPACK's kernels), or None when the product is not a small f32/f64 one (BLAS). ``vector_bytes`` is
    :func:`dot_vector_bytes`'s value: the vector size and the operands' layout bits."""
    layout = vector_bytes & (RHS_TRANSPOSED | LHS_TRANSPOSED | OTHER_OPERANDS | BF16_PRODUCT | RESULT_TRANSPOSED)
    vector_bytes -= layout
    swapped = layout & RESULT_TRANSPOSED != 0
    layout &= ~RESULT_TRANSPOSED
    if layout == BF16_PRODUCT:
        amx = host.host_properties()["amx_bf16"]
        if amx and vector_bytes == 32 and np.dtype(dtype) == np.dtype(np.float32) and not _bf16_kept(m, k, n):
            layout = 0  # (XLA converts the operands and computes an f32 product: measured on the AMX host)
        elif (m >= 2 and n >= 2 and batch * m * k * n <= PAIRS_MAX_MNK and k <= PAIRS_MAX_K and vector_bytes == 32
                and np.dtype(dtype) == np.dtype(np.float32) and host.measured_host()):
            if not amx:
                return ONE_CHAIN | PAIRS
            tiles = bf16_amx_tiles(m, k, n)
            if tiles is not None:
                rows, columns, kinds = tiles
                return (ONE_CHAIN | PAIRS | AMX_TILES | rows << AMX_ROWS_SHIFT
                        | columns << AMX_COLUMNS_SHIFT | kinds << AMX_KINDS_SHIFT)
            layout = OTHER_OPERANDS
        else:
            layout = OTHER_OPERANDS  # (not identified: the earlier order)
    if (layout == LHS_TRANSPOSED and batch == 1 and n == 1 and m >= 2 and vector_bytes == 32
            and _is_f32_or_f64(dtype) and host.measured_host()):
        # g.T @ x: XLA's elemental dot in a loop fusion (K < 4096), else the copied transpose's GEMV
        if not is_elemental_dot(k, np.dtype(dtype).itemsize):
            return ROW_TILES
        if is_replayed(m, k, np.dtype(dtype).itemsize):
            return ELEMENTAL_DOT | min(m, _FIELD) << CHUNK_SHIFT
    if (layout in (LHS_TRANSPOSED, LHS_TRANSPOSED | RHS_TRANSPOSED) and vector_bytes == 32
            and np.dtype(dtype) == np.dtype(np.float32)
            and is_eigen_product(k, m, n) and measured_eigen_host()):
        # x.T @ g: Eigen's contraction over oneDNN's sgemm, planned for this process's CPUs (eigen_dots)
        order = contraction_order(k, m, n, usable_cpus(), swapped)
        if order is not None:
            return order
    if (m == n == 1 and TREE_MAX_PRODUCTS < batch * k <= SMALL_DOT_MAX_MNK and vector_bytes == 32
            and not layout & OTHER_OPERANDS and _is_f32_or_f64(dtype) and host.measured_host()):
        # XLA's reduce of the (batch, k) products: YNNPACK's sum, in its tiles (the tile length in the chunk bits)
        _, _, _, _, (_, extent, _, size) = sum_plan((batch, k), (1,), dtype)
        return YNNPACK_SUM | (size << CHUNK_SHIFT if size < extent else 0)
    if (k > SMALL_DOT_MAX_K and batch * m * k * n <= SMALL_DOT_MAX_MNK and vector_bytes == 32
            and layout in (0, RHS_TRANSPOSED) and is_ynnpack_dot(m, k, n) and _is_f32_or_f64(dtype)
            and host.measured_host()):
        # A long contraction of a small YNNPACK product: its replayed order (measured bitwise to K = 5,000 here
        # and on products to (2048, 2100, 1100)); at most 2^18 multiply-adds.
        return _xla_order(m, k, n, np.dtype(dtype), layout)
    if (vector_bytes == 32 and layout in (0, RHS_TRANSPOSED) and is_ynnpack_dot(m, k, n) and _is_f32_or_f64(dtype)
            and (k > SMALL_DOT_MAX_K or batch * m * k * n > SMALL_DOT_MAX_MNK) and host.measured_host()):
        # A large YNNPACK product whose kernel sums each element in one, two or four fused chains over K: its
        # order, computed in register tiles (chain_tiles) at about one BLAS thread's speed. YNNPACK's kernels
        # with rounded products (not chosen on AVX-512 hosts) stay with BLAS, not bitwise.
        found = _xla_order(m, k, n, np.dtype(dtype), layout)
        if found is not None and found & BASE_ORDER in (ONE_CHAIN, TWO_LANES, FOUR_LANES) and not found & ROUNDED:
            return found
    order = _order(batch, m, k, n, dtype)
    if vector_bytes == 64 and order in (ONE_CHAIN, ROW_TILES):  # (a small call's dot: its emitter's vectors)
        return order | WIDE_VECTORS if host.prefers_wide_vectors() else order
    if order in (ONE_CHAIN, FOUR_LANES) and vector_bytes == 32 and m >= 2 and n >= 2 and k >= 2 and host.measured_host():
        return _xla_order(m, k, n, np.dtype(dtype), layout) or order
    return order


def _bf16_kept(m: int, k: int, n: int) -> bool:
    """Whether XLA CPU keeps a row-major bf16 x bf16 -> f32 product of ``(m, k) x (k, n)`` a bf16 product (for
    YNNPACK): both free dimensions at least 2, ``max(m, k, n) >= 8``, ``K >= 4`` and ``M >= 4`` or ``N >= 4``.
    Otherwise its optimized HLO converts both operands to f32 and the dot is an f32 one (read from XLA's optimized
    HLO on the AMX host for ``M, N`` 2..9 and 16, 32, ``K`` 2..9, 16 .. 300)."""
    return m >= 2 and n >= 2 and max(m, k, n) >= 8 and k >= 4 and (m >= 4 or n >= 4)


def _is_f32_or_f64(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64))


@functools.cache
def _xla_order(m: int, k: int, n: int, dtype: np.dtype, layout: int) -> int | None:
    """XLA CPU's order for an ``(m, k) x (k, n)`` product, ``m, k, n >= 2``, on an AVX-512 host (module docstring),
    or None where it was not identified."""
    f32 = dtype == np.dtype(np.float32)
    if layout in (0, RHS_TRANSPOSED) and is_ynnpack_dot(m, k, n):
        found = ynnpack_order(m, k, n, dtype, layout == RHS_TRANSPOSED)
        if found is None:
            return None
        tile_k, fused, columns, chunk, last_chunk = found
        return ynnpack_kernel_order(tile_k, fused, chunk, last_chunk, columns)
    if f32 and layout in (0, RHS_TRANSPOSED, LHS_TRANSPOSED):
        return ONE_CHAIN  # XLA's own emitters (max(m, k, n) < 8, or the lhs transposed)
    if not f32 and layout in (0, RHS_TRANSPOSED, LHS_TRANSPOSED):
        # XLA's naive loop for products of at most 3 x 3 (either operand), else Eigen's (AVX, no FMA)
        return ONE_CHAIN if (m <= 3 or k <= 3) and (k <= 3 or n <= 3) else EIGEN_COLUMN | ROUNDED
    return None


def ynnpack_kernel_order(tile_k: int, fused: bool, chunk: int = 0, last_chunk: int = 0, columns: int = 0) -> int:
    """The order (:func:`order_kernel`) of a YNNPACK kernel that sums ``K`` in ``tile_k`` lanes (1, 2 or 4) with
    fused multiply-adds or rounded products, in chunks of ``chunk`` terms in the first ``columns`` columns and of
    ``last_chunk`` terms in the others (0: one chunk): :func:`lowering.kernels.ynnpack_dots.ynnpack_order`'s
    answer as an order."""
    order = {1: ONE_CHAIN, 2: TWO_LANES, 4: FOUR_LANES}[tile_k] | (0 if fused else ROUNDED)
    if chunk or last_chunk:
        order |= chunk << CHUNK_SHIFT | last_chunk << LAST_CHUNK_SHIFT | columns << COLUMNS_SHIFT
    return order


def _order(batch: int, m: int, k: int, n: int, dtype: np.dtype) -> int | None:
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    if m == 1 and n == 1 and TREE_WINDOW < k <= TREE_MAX_K and batch * k <= TREE_MAX_PRODUCTS:
        return TREE
    if k > SMALL_DOT_MAX_K or batch * m * k * n > SMALL_DOT_MAX_MNK:
        return None
    if m >= 2 and n == 1 and k >= 2:
        return ROW_TILES
    if dtype == np.dtype(np.float32) and m >= 2 and 2 <= n <= 16 and _four_lanes(k, n):
        return FOUR_LANES
    return ONE_CHAIN


def _four_lanes(k: int, n: int) -> bool:
    """Whether XLA CPU sums an f32 ``(M >= 2, k) x (k, n)`` product with ``2 <= n <= 16`` in four lanes (measured
    table, module docstring): ``n <= 8`` from ``k = 8`` on; ``n >= 9`` except ``k <= 3``, ``k = 5, 9, 13, 17`` and
    ``k = 6, 10`` (one chain there)."""
    if n <= 8:
        return k >= 8
    return not (k <= 3 or (k % 4 == 1 and k <= 17) or (k % 4 == 2 and k <= 10))


TILED_MNK = 1 << 16
"""Products (``batch * m * k * n``) from this size up use the register tiles (:mod:`lowering.kernels.chain_tiles`);
smaller ones the element loops below, the same order without the tiles' packed panel and set-up (the small products
of bench_real_programs' LSTM scan in a compiled loop: 1.1-1.2x jax.jit with the loops, 1.9x with the tiles, two
runs each of ``--only LSTM``)."""

ROUNDED_TERMS = 8
"""The column-by-column part of a vector-matrix product adds the rounded products of this many first terms."""


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _single_column(a, b, out, t, i, j, rounded_terms):
    """Column ``j`` of row ``i`` computed on its own: a chain starting from the first product, whose first
    ``rounded_terms`` terms are rounded products added in order, the rest fused multiply-adds."""
    k = a.shape[2]
    s = a[t, i, 0] * b[t, 0, j]
    for p in range(1, k):
        if p < rounded_terms:
            s = s + a[t, i, p] * b[t, p, j]
        else:
            s = fused_multiply_add(a[t, i, p], b[t, p, j], s)
    out[t, i, j] = s


def order_kernel(order: int):
    """The numba kernel ``kernel(a, b, out, order)`` that computes ``out[t] = a[t] @ b[t]`` for C-contiguous
    ``a (batch, M, K)``, ``b (batch, K, N)``, ``out (batch, M, N)`` of one float type, summed in ``order``
    (:data:`ONE_CHAIN`, :data:`TREE`, :data:`ROW_TILES`, :data:`FOUR_LANES`, :data:`TWO_LANES`,
    :data:`EIGEN_COLUMN` or :data:`YNNPACK_SUM`, with the flags and chunks of :func:`small_dot_order`) as the
    module docstring describes. The loop over ``N`` is innermost so that it vectorizes; each element's own order is
    XLA's. One kernel per order, chosen when the caller is built: a process compiles the kernels of the orders it
    meets (0.6-5.9 s each on a cold cache), not every order's (one function dispatching at run time took 35-43 s
    per element type)."""
    if order & ELEMENTAL_DOT:
        return elemental_dot_kernel
    if order & PAIRS:
        return tile_chains_kernel if order & AMX_TILES else pair_chains_kernel
    base = order & BASE_ORDER
    if base == ONE_CHAIN and (order & ROUNDED or order >> CHUNK_SHIFT):
        return chunked_chains_kernel
    return {EIGEN_COLUMN: eigen_columns_kernel, YNNPACK_SUM: ynnpack_sums_kernel, ONE_CHAIN: one_chain_kernel,
            ROW_TILES: row_tiles_kernel, TREE: tree_kernel}.get(base, lanes_kernel)


def order_kernels() -> tuple:
    """Every kernel :func:`order_kernel` returns (compiled loops import them by name)."""
    return (tile_chains_kernel, pair_chains_kernel, chunked_chains_kernel, eigen_columns_kernel, ynnpack_sums_kernel,
            one_chain_kernel, row_tiles_kernel, tree_kernel, lanes_kernel, elemental_dot_kernel)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def one_chain_kernel(a, b, out, order):
    """:data:`ONE_CHAIN` without chunks or rounded products: columns ``[0, whole)`` are chains from zero (register
    tiles from :data:`TILED_MNK` multiply-adds), the others are computed one by one (:func:`_single_column`)."""
    batch, m, k = a.shape
    n = b.shape[2]
    zero = a.dtype.type(0)
    if order & B_TRANSPOSED:  # (M, K >= 2: every column a chain, as below; B read from its transpose)
        for t in range(batch):
            bt = b[t].ravel().reshape(n, k)
            if batch * m * k * n >= TILED_MNK:
                chain_product(a[t], bt.T, out[t], 0, m, 0, n, 0)
                continue
            for i in range(m):
                for j in range(n):
                    acc = zero
                    for p in range(k):
                        acc = fused_multiply_add(a[t, i, p], bt[j, p], acc)
                    out[t, i, j] = acc
        return
    vector_bytes = 64 if order & WIDE_VECTORS else 32
    whole = n
    if k == 1:
        whole = 0
    elif m == 1 and n >= 2:
        whole = n - n % (vector_bytes // a.itemsize)
    if whole == n and m >= 2 and batch * m * k * n >= TILED_MNK:  # (one chain each: register tiles)
        for t in range(batch):
            chain_product(a[t], b[t], out[t], 0, m, 0, n, 0)
        return
    for t in range(batch):
        for i in range(m):
            for j in range(whole):
                out[t, i, j] = zero
            for p in range(k):
                x = a[t, i, p]
                for j in range(whole):
                    out[t, i, j] = fused_multiply_add(x, b[t, p, j], out[t, i, j])
            for j in range(whole, n):
                lone = n - whole == 1 and whole > 0
                rounded = ROUNDED_TERMS if lone or (n == 2 and j == 0 and k >= 3) else 0
                _single_column(a, b, out, t, i, j, rounded)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def row_tiles_kernel(a, b, out, order):
    """:data:`ROW_TILES`: a matrix-vector product as XLA's row-major GEMV emitter sums it
    (:func:`lowering.kernels.gemv_lanes.gemv_rows`, the lanes in a vector register)."""
    gemv_rows(a, b, out, (order & WIDE_VECTORS) != 0)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def elemental_dot_kernel(a, b, out, order):
    """:data:`ELEMENTAL_DOT`: each row of ``a`` times the one column of ``b`` as XLA CPU's elemental dot sums it
    (:func:`lowering.kernels.vectorized_loops.loop_dot_row`, for the product's row count kept in the order: a piece
    of rows is summed as the whole product's rows are)."""
    batch, m, k = a.shape
    rows = (order >> CHUNK_SHIFT) & _FIELD
    lanes = np.empty(8, a.dtype)
    column = np.empty(k, a.dtype)
    for t in range(batch):
        for p in range(k):
            column[p] = b[t, p, 0]
        for i in range(m):
            out[t, i, 0] = loop_dot_row(a[t, i], column, rows, lanes)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def tree_kernel(a, b, out, order):
    """:data:`TREE`: a vector dot as rounded products (XLA's multiply), then XLA's windows
    (:mod:`lowering.kernels.tree_sum`)."""
    batch, m, k = a.shape
    n = b.shape[2]
    zero = a.dtype.type(0)
    terms = np.empty(k, a.dtype)
    for t in range(batch):
        for i in range(m):
            for j in range(n):
                for p in range(k):
                    terms[p] = a[t, i, p] * b[t, p, j]
                out[t, i, j] = window_sum(terms, 0, k, zero, terms)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def lanes_kernel(a, b, out, order):
    """:data:`FOUR_LANES` / :data:`TWO_LANES` (:func:`_lanes`)."""
    _lanes(a, b, out, 4 if (order & BASE_ORDER) == FOUR_LANES else 2, (order & ROUNDED) != 0, order >> CHUNK_SHIFT)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def chunked_chains_kernel(a, b, out, order):
    """:data:`ONE_CHAIN` with rounded products or ``K`` in chunks (:func:`_chains`)."""
    _chains(a, b, out, (order & ROUNDED) != 0, order >> CHUNK_SHIFT)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def pair_chains_kernel(a, b, out, order):
    """:data:`PAIRS` without AMX tiles (:func:`_pair_chains`)."""
    _pair_chains(a, b, out)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def eigen_columns_kernel(a, b, out, order):
    """:data:`EIGEN_COLUMN` (:func:`_eigen_columns`)."""
    _eigen_columns(a, b, out)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def ynnpack_sums_kernel(a, b, out, order):
    """:data:`YNNPACK_SUM` (:func:`_ynnpack_sums`, tiles of the order's chunk length)."""
    _ynnpack_sums(a, b, out, order >> CHUNK_SHIFT)


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _multiply_add(x, y, acc, rounded):
    """``acc + x * y``: one fused multiply-add, or (``rounded``) the product rounded first."""
    if rounded:
        return acc + x * y
    return fused_multiply_add(x, y, acc)


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _column_ranges(chunks, n, k):
    """The two column ranges of an order's chunks (:data:`CHUNK_SHIFT`) and each one's chunk length (``k`` for one
    chunk): ``(0, columns, chunk, columns, n, last_chunk)``."""
    chunk = chunks & 0xFFFF
    last_chunk = (chunks >> (LAST_CHUNK_SHIFT - CHUNK_SHIFT)) & 0xFFFF
    columns = chunks >> (COLUMNS_SHIFT - CHUNK_SHIFT)
    if chunks == 0:
        columns = n
    return 0, columns, chunk if chunk > 0 else max(k, 1), columns, n, last_chunk if last_chunk > 0 else max(k, 1)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _chains(a, b, out, rounded, chunks):
    """One chain from zero per element (fused or ``rounded`` products); ``K`` in chunks (``chunks``, see
    :data:`CHUNK_SHIFT`), each chunk's chain from zero added to the sum of the chunks before it (YNNPACK's ``K``
    blocks)."""
    batch, m, k = a.shape
    n = b.shape[2]
    ranges = _column_ranges(chunks, n, k)
    if not rounded and batch * m * k * n >= TILED_MNK:  # (fused chains: register tiles, the same order)
        for t in range(batch):
            for r in range(2):
                if ranges[3 * r] < ranges[3 * r + 1]:
                    chain_product(a[t], b[t], out[t], 0, m, ranges[3 * r], ranges[3 * r + 1],
                                  ranges[3 * r + 2] if ranges[3 * r + 2] < k else 0)
        return
    acc = np.empty(n, a.dtype)
    for t in range(batch):
        for i in range(m):
            for r in range(2):
                j0, j1, step = ranges[3 * r], ranges[3 * r + 1], ranges[3 * r + 2]
                for s in range(0, k, step):
                    acc[j0:j1] = 0
                    for p in range(s, min(k, s + step)):
                        x = a[t, i, p]
                        for j in range(j0, j1):
                            acc[j] = _multiply_add(x, b[t, p, j], acc[j], rounded)
                    for j in range(j0, j1):
                        out[t, i, j] = acc[j] if s == 0 else acc[j] + out[t, i, j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _pair_chains(a, b, out):
    """bf16 products into f32 (:data:`PAIRS`; ``a``, ``b`` hold bf16 values as f32): per element one chain from
    zero over the pairs of ``K``, the odd term first, then a last odd term."""
    batch, m, k = a.shape
    n = b.shape[2]
    acc = np.empty(n, a.dtype)
    whole = k - k % 2
    for t in range(batch):
        for i in range(m):
            acc[:] = 0
            for p in range(0, whole, 2):
                x1, x0, row1, row0 = a[t, i, p + 1], a[t, i, p], b[t, p + 1], b[t, p]
                for j in range(n):
                    acc[j] = (acc[j] + x1 * row1[j]) + x0 * row0[j]
            if whole < k:
                x, row = a[t, i, k - 1], b[t, k - 1]
                for j in range(n):
                    acc[j] = acc[j] + x * row[j]
            for j in range(n):
                out[t, i, j] = acc[j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def tile_chains_kernel(a, b, out, order):
    """bf16 products into f32 on a CPU with AMX-BF16 (:data:`AMX_TILES`; ``a``, ``b`` hold bf16 values as f32):
    the elements of AMX tiles per block of 32 terms of ``K`` (even and odd terms in two chains, flushed), the
    others as :func:`_pair_chains` does."""
    batch, m, k = a.shape
    n = b.shape[2]
    rows, columns = (order >> AMX_ROWS_SHIFT) & _FIELD, (order >> AMX_COLUMNS_SHIFT) & _FIELD
    kinds = (order >> AMX_KINDS_SHIFT) & 15
    zero = a.dtype.type(0)
    whole = k - k % 2
    bz = np.empty((k, n), a.dtype)
    even, odd, acc = np.empty(n, a.dtype), np.empty(n, a.dtype), np.empty(n, a.dtype)
    for t in range(batch):
        for p in range(k):
            for j in range(n):
                y = b[t, p, j]
                bz[p, j] = denormal_as_zero(y)
        for i in range(m):
            last = 2 if i >= rows else 0
            for start, stop, amx in ((0, min(columns, n), (kinds >> last) & 1),
                                     (min(columns, n), n, (kinds >> (last + 1)) & 1)):
                if start == stop:
                    continue
                acc[start:stop] = zero
                if not amx:  # (_pair_chains's order, each product exact: vdpbf16ps's and FMA's)
                    for p in range(0, whole, 2):
                        x1, x0 = a[t, i, p + 1], a[t, i, p]
                        for j in range(start, stop):
                            acc[j] = fused_multiply_add(x0, b[t, p, j], fused_multiply_add(x1, b[t, p + 1, j], acc[j]))
                    if whole < k:
                        x = a[t, i, k - 1]
                        for j in range(start, stop):
                            acc[j] = acc[j] + x * b[t, k - 1, j]
                else:
                    for block in range(0, whole, 32):
                        even[start:stop] = zero
                        odd[start:stop] = zero
                        for p in range(block, min(block + 32, whole), 2):
                            x0, x1 = a[t, i, p], a[t, i, p + 1]
                            x0 = denormal_as_zero(x0)
                            x1 = denormal_as_zero(x1)
                            for j in range(start, stop):
                                e = fused_multiply_add(x0, bz[p, j], even[j])
                                even[j] = denormal_as_zero(e)
                                o = fused_multiply_add(x1, bz[p + 1, j], odd[j])
                                odd[j] = denormal_as_zero(o)
                        for j in range(start, stop):
                            s = even[j] + odd[j]
                            s = denormal_as_zero(s)
                            s = acc[j] + s
                            acc[j] = denormal_as_zero(s)
                    if whole < k:  # (an odd last term: a block of its own, its odd term 0 x 0)
                        x = a[t, i, k - 1]
                        x = denormal_as_zero(x)
                        for j in range(start, stop):
                            e = fused_multiply_add(x, bz[k - 1, j], zero)
                            e = denormal_as_zero(e)
                            s = acc[j] + (e + zero)
                            acc[j] = denormal_as_zero(s)
                for j in range(start, stop):
                    out[t, i, j] = acc[j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def piece_order(order, start, stop):
    """``order`` for the rows ``start`` to ``stop`` of a product computed in row pieces: an :data:`AMX_TILES`
    order's row split moved into the piece (the other orders are the same for every row)."""
    if not order & AMX_TILES:
        return order
    rows = (order >> AMX_ROWS_SHIFT) & _FIELD
    local = min(max(rows - start, 0), stop - start)
    return (order & ~(_FIELD << AMX_ROWS_SHIFT)) | (local << AMX_ROWS_SHIFT)


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _add_lanes(lanes, width, j):
    if width == 4:
        return (lanes[0, j] + lanes[1, j]) + (lanes[2, j] + lanes[3, j])
    return lanes[0, j] + lanes[1, j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _lanes(a, b, out, width, rounded, chunks):
    """YNNPACK's ``tile_k`` = ``width`` kernels: term ``p`` of the first ``K - K mod width`` in lane ``p mod width``
    (chains from zero, fused or ``rounded`` products), lanes added as ``l0 + l1`` or ``(l0 + l1) + (l2 + l3)``
    (per chunk of terms, see :data:`CHUNK_SHIFT`, each chunk's sum added to the sum before it); the last ``K mod
    width`` terms as one more call on operands padded with zeros (each lane ``0 + x * y``, added the same way),
    that sum added to the rest."""
    batch, m, k = a.shape
    n = b.shape[2]
    zero = a.dtype.type(0)
    lanes = np.empty((width, n), a.dtype)
    whole = k - k % width
    ranges = _column_ranges(chunks, n, whole)
    if not rounded and ranges[2] % width == 0 and ranges[5] % width == 0 and batch * m * k * n >= TILED_MNK:
        # (fused lanes: register tiles, chain_tiles.lane_product -- the same order, at GEMM speed)
        for t in range(batch):
            for r in range(2):
                if ranges[3 * r] < ranges[3 * r + 1]:
                    lane_product(a[t], b[t], out[t], 0, m, ranges[3 * r], ranges[3 * r + 1],
                                 ranges[3 * r + 2] if ranges[3 * r + 2] < whole else 0, width)
        return
    for t in range(batch):
        for i in range(m):
            for r in range(2):
                j0, j1, step = ranges[3 * r], ranges[3 * r + 1], ranges[3 * r + 2]
                for s in range(0, whole, step):
                    lanes[:, j0:j1] = zero
                    for p in range(s, min(whole, s + step)):
                        x = a[t, i, p]
                        lane, row = lanes[p % width], b[t, p]
                        if rounded:
                            for j in range(j0, j1):
                                lane[j] = lane[j] + x * row[j]
                        else:
                            for j in range(j0, j1):
                                lane[j] = fused_multiply_add(x, row[j], lane[j])
                    for j in range(j0, j1):
                        total = _add_lanes(lanes, width, j)
                        out[t, i, j] = total if s == 0 else total + out[t, i, j]
            if whole < k:
                lanes[:] = zero
                for p in range(whole, k):
                    x = a[t, i, p]
                    for j in range(n):
                        lanes[p - whole, j] = _multiply_add(x, b[t, p, j], zero, rounded)
                for j in range(n):
                    tail = _add_lanes(lanes, width, j)
                    out[t, i, j] = tail if whole == 0 else tail + out[t, i, j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _eigen_columns(a, b, out):
    """Eigen's f64 product in XLA CPU (its general block-panel kernel, AVX packets of 4 doubles, no FMA): the output
    columns are Eigen's lhs rows, taken 8 at a time (two packets), then 4 and 2 (one packet: even and odd terms of
    the first ``K - K mod 8`` in two accumulators, added, then the others in order), then a last odd one (``K`` in
    four lanes ``(l0 + l1) + (l2 + l3)`` over the first ``K - K mod 4`` terms, then the others in order); the
    output rows in panels of 4, the rows after the last whole panel and the 8-column blocks as one chain. Every
    product rounded, every sum from zero."""
    batch, m, k = a.shape
    n = b.shape[2]
    panel_rows = m - m % 4
    first_paired, paired, peeled, whole = 8 * (n // 8), n - n % 2, k - k % 8, k - k % 4
    _chains(a, b, out, True, 0)
    lanes = np.empty(4, a.dtype)
    for t in range(batch):
        for i in range(panel_rows):
            for j in range(first_paired, paired):
                even, odd = a.dtype.type(0), a.dtype.type(0)
                for p in range(0, peeled, 2):
                    even = even + a[t, i, p] * b[t, p, j]
                    odd = odd + a[t, i, p + 1] * b[t, p + 1, j]
                s = even + odd
                for p in range(peeled, k):
                    s = s + a[t, i, p] * b[t, p, j]
                out[t, i, j] = s
            if n % 2 == 1:
                lanes[:] = 0
                for p in range(whole):
                    lanes[p % 4] = lanes[p % 4] + a[t, i, p] * b[t, p, n - 1]
                s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
                for p in range(whole, k):
                    s = s + a[t, i, p] * b[t, p, n - 1]
                out[t, i, n - 1] = s


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _ynnpack_sums(a, b, out, tile):
    """Vector dots (``M = N = 1``) as XLA CPU's YNNPACK reduce computes ``reduce(multiply(a, b))``: the rounded
    products of each batch summed by :func:`lowering.kernels.ynnpack_sum.row_sum` (the one definition of
    YNNPACK's sum, which XLA's large reduces use too), in tiles of ``tile`` products (0: one tile), added to the
    output's zero."""
    batch, m, k = a.shape
    size = tile if tile > 0 else max(k, 1)
    partials = np.empty((k + size - 1) // size + 1, a.dtype)
    terms = np.empty(k, a.dtype)
    for t in range(batch):
        for p in range(k):
            terms[p] = a[t, 0, p] * b[t, p, 0]
        out[t, 0, 0] = a.dtype.type(0) + row_sum(terms, 0, (1, k, 1, size), False, partials)


@numba.njit(parallel=True, nogil=True, cache=True)
def small_dot_pieces(a, b, out, order, by_batch, bounds, kernel):
    """The product of C-contiguous ``a (batch, M, K)``, ``b``, ``out`` in ``order`` in pieces on numba's threads:
    batches (``by_batch``) or rows (a batch of one) ``bounds[p]`` to ``bounds[p + 1]``, each piece inside the
    caller's MXCSR (its denormal mode). Each element's order is the whole product's. ``kernel``: the address of the
    order's kernel (:func:`order_kernel`) for these operands
    (:func:`~lowering.runtime.loop_runtime.native_address`), called there rather than linked in
    (:func:`~lowering.runtime.loop_runtime.call_compiled`: this function then compiles in about a second instead of
    36)."""
    csr = mxcsr()  # (outside the parallel loop: read on the calling thread)
    batch, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    for piece in numba.prange(bounds.size - 1):
        saved = mxcsr()
        set_mxcsr(csr)
        start, stop = bounds[piece], bounds[piece + 1]
        if by_batch:  # (C-contiguous views: the signature the kernel was compiled for)
            count = stop - start
            call_compiled(kernel, a.reshape(batch * m, k)[start * m:stop * m].reshape(count, m, k),
                          b.reshape(batch * k, n)[start * k:stop * k].reshape(count, k, n),
                          out.reshape(batch * m, n)[start * m:stop * m].reshape(count, m, n), order)
        else:
            rows = stop - start
            call_compiled(kernel, a.reshape(m, k)[start:stop].reshape(1, rows, k), b,
                          out.reshape(m, n)[start:stop].reshape(1, rows, n), piece_order(order, start, stop))
        set_mxcsr(saved)


@numba.njit(parallel=True, nogil=True, cache=True)
def small_dot_pair(a0, b0, c0, order0, kernel0, a1, b1, c1, order1, kernel1, csr):
    """The products ``a0 @ b0 -> c0`` in ``order0`` and ``a1 @ b1 -> c1`` in ``order1`` at once on two of numba's
    threads, each inside the caller's MXCSR ``csr`` (its denormal mode): two independent products of a compiled
    loop's body (an RNN step's ``x @ wx`` and ``h @ wh``), each with its own order's bits. ``kernel0``,
    ``kernel1``: the addresses of the orders' kernels (:func:`kernel_address`), called there rather than linked in
    (:func:`~lowering.runtime.loop_runtime.call_compiled`)."""
    for task in numba.prange(2):
        saved = mxcsr()
        set_mxcsr(csr)
        if task == 0:
            call_compiled(kernel0, a0, b0, c0, order0)
        else:
            call_compiled(kernel1, a1, b1, c1, order1)
        set_mxcsr(saved)


def kernel_address(order: int, dtype) -> int:
    """The address of :func:`order_kernel` ``(order)`` compiled for C-contiguous 3-D arrays of ``dtype`` (compiled
    first, or loaded from numba's cache): what :func:`small_dot_pair` calls. An argument of the code that calls it,
    never part of it (cached machine code must not hold an address of another process)."""
    sample = np.empty((1, 1, 1), dtype)
    return native_address(order_kernel(order), sample, sample, sample, order)


PAIRED_MNK = 1 << 18
"""Products of a compiled loop's body from this many multiply-adds up are paired on two CPUs (:func:`small_dot_pair`)."""


def small_matmul(order: int, workers: int = 1, mode=None):
    """The interpreter's ``(batch, m, k) x (batch, k, n)`` matmul by :func:`order_kernel` in ``order``; a product of
    :data:`~lowering.runtime.workers.PIECES_MNK` multiply-adds or more is cut into ``workers`` pieces (batches,
    else rows) computed at once on worker threads in the context manager ``mode`` (the caller's denormal mode): each
    element's order is the same."""

    if order & EIGEN_CONTRACTION:  # (x.T @ g: lowering.kernels.eigen_dots, a function of its own)
        return eigen_matmul(order, workers, mode)

    kernel = order_kernel(order)

    def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        batch, m, k = a.shape
        n = b.shape[2]
        out = np.empty((batch, m, n), a.dtype)  # (first: the block the last call's result freed)
        a = np.ascontiguousarray(a)
        order_here = order
        if (kernel is one_chain_kernel and m >= 2 and k >= 2 and not b.flags.c_contiguous
                and b.transpose(0, 2, 1).flags.c_contiguous):
            # (B transposed in memory: read as it is, B_TRANSPOSED; a copy took 0.5 ms of attention's 5)
            b, order_here = b.transpose(0, 2, 1).reshape(batch, k, n), order | B_TRANSPOSED
        else:
            b = np.ascontiguousarray(b)
        by_batch = batch >= 2
        parts = min(workers, batch if by_batch else m // PIECE_ROWS)
        if parts >= 2 and batch * m * k * b.shape[2] >= PIECES_MNK:
            if by_batch:
                bounds = np.linspace(0, batch, parts + 1).astype(np.int64)
            else:
                bounds = np.array(row_piece_bounds(m, parts), np.int64)
            if numba_threads_available():
                address = native_address(kernel, a, b, out, order_here)
                small_dot_pieces(a, b, out, order_here, by_batch, bounds, address)
            elif by_batch:
                run_pieces(kernel, [(a[s:e], b[s:e], out[s:e], order_here)
                                             for s, e in zip(bounds[:-1], bounds[1:])], mode)
            else:  # (row pieces of the one batch, C-contiguous views: the signature the kernel is compiled for)
                run_pieces(kernel, [(a[0, s:e][None], b, out[0, s:e][None], piece_order(order_here, s, e))
                                             for s, e in zip(bounds[:-1], bounds[1:])], mode)
            return out
        kernel(a, b, out, order_here)
        return out

    matmul.__doc__ = f"{kernel.__name__} in order {order}: XLA CPU's summation order for small products."
    return matmul
