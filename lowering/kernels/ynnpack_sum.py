"""Float sums as XLA CPU runs them in YNNPACK (jax 0.10.2): one definition, for reduces and vector dots.

XLA CPU hands a reduce whose body is ``add(p0, p1)`` to YNNPACK (a ``__ynn_fusion``) when its operand or result
has at least :data:`MIN_ELEMENTS` elements (XLA's ``IsInstructionPreferredByYnn``) and its types are f32 -> f32,
f64 -> f64 or bf16 -> f32 (XLA's ``IsReduceLikeOpSupportedByYnn``): ``jnp.sum``/``jnp.mean`` of 4,096 elements or
more, row and column sums of large arrays, softmax's and layer norm's sums, and ``reduce(multiply(a, b))``, which
is what XLA makes of a vector dot (:mod:`lowering.kernels.small_dot`). f16 sums are f32 sums there (jax converts
first); a bf16 operand's convert is fused into the reduce (YNNPACK's bf16 kernel, below). YNNPACK computes it
with ``ynnpack/kernels/reduce/sum.h`` (the version with a degree-16 tree of three levels):

* **rows** (the reduced dimensions are the innermost ones, ``sum_float_k1``): per output, 64-byte vectors of
  accumulators (16 f32 / 8 f64 lanes); each block of 4 vectors is summed lane-wise from zero and added to level 0
  of a tree of accumulators (:func:`k1_sum`); a clock advancing by the lanes per block (4 blocks at a time
  while 16 are left) moves level 0 into level 1 at each multiple of 16, and level 1 into level 2 by Kahan
  summation at each multiple of 256 (a non-finite error dropped); a last partial block is padded with zeros; at
  the end the levels are flushed the same way, and the lanes are added by halves (f32 down to 4 lanes, then
  ``(l0 + l2) + (l1 + l3)``; f64 ``l0 + l1``) and added to the output's initial value. bf16 operands (YNNPACK's
  ``sum_k1_bf16_fp32`` kernel, two bf16 per f32 lane) put the pair ``2l, 2l + 1`` of each 32 elements in lane
  ``l``, the odd one added first.
* **columns** (the reduced dimensions followed by kept ones, ``sum_float_kn``): per output element, rows taken 4
  at a time, each 4 summed from zero in order and added to level 0; the clock advances by 4 per 4 rows (the same
  tree, Kahan at its top); at most 4 rows are summed straight into the output.
* **tiles**: YNNPACK's scheduler (slinky) splits the operand in tiles of 128 KiB of accumulators (32,768 f32,
  16,384 f64: ``make_split_factors``, innermost dimension first, floor divisions); when that splits a reduced
  dimension, each tile's sum (from zero) is a partial result, and the partials (in row-major order) are summed
  again the same way into the output (:func:`sum_plan` names the tiles). Where the tiles cut a reduced dimension
  below other reduced ones (a bias gradient's ``sum(x, axis=(0, 1))`` of (2, 128, 1024): tiles of 32 rows of the
  second), and those outer indices with the kept dimensions' tiles give fewer tasks than XLA's threads want, each
  outer index's tiles are partials too, all in row-major order; with more tasks XLA groups the sums otherwise (not
  identified: None).
* **two runs of reduced dimensions** (``sum(x, axis=(0, 2))``, kept dimensions between them): the inner run is
  summed by the rows or columns kernel above, from zero, once for each index of the outer run (row-major), and
  each of those sums is added in turn to the output, which starts at the initial value
  (``((init + s_0) + s_1) + ...``: YNNPACK's kernels add into their output). Where the tiles cut the outer run
  (its first dimension, as :func:`_tiles` finds), each tile's sums are added in turn from zero, and the tiles'
  partial sums are summed by the columns kernel, added to the initial value. Elsewhere (a tile cutting the inner
  run or below the outer run's first dimension), and for three runs or more, :func:`sum_plan` gives None and the
  reduction kernel keeps its earlier order.

Measured against jax.jit on a 2-core AMD EPYC with AVX-512 (every element of every sample equal, values of mixed
magnitudes): full sums of 4,096 to 1,000,000 f32/f64 elements (tiles from 32,769 f32, 16,385 f64), bf16 (into
f32 and bf16) and f16, row sums ((64, 64), (3, 5000)), column sums ((64, 64), (5000, 3), (1000, 8), (600, 64),
(2048, 16), (3000, 100); row tiles of ``32768 // n`` rows), ``sum(x * x)``, two runs (``axis=(0, 2)`` of
(4, 8, 256), (16, 4, 100), (3, 64, 64), (64, 2, 64), (8, 16, 40), (4, 8, 64, 16), (2, 5, 600, 4), with and without
an initial value; cut in tiles: (64, 64, 64), (100, 4, 2000), (100, 3, 2000), (100, 2, 2000), (16, 3, 100, 8)); ``tests/test_reduction.py``, ``tests/test_reduction_ynnpack.py``. These
orders hold where XLA chooses YNNPACK's AVX-512 kernels: on hosts with the flags of
:func:`lowering.kernels.host.measured_host` (elsewhere the reduction kernel keeps its earlier order). XLA's
thread count matters for where long sums are split (:func:`_tiles`): measured with 2 CPUs.
"""

from __future__ import annotations

import os

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

MIN_ELEMENTS = 4096
"""XLA CPU hands reduces with an operand (or result) of at least this many elements to YNNPACK."""

TILE_BYTES = 128 * 1024
"""YNNPACK's tile area (``make_split_factors``: 32,768 elements of 4 bytes): tiles of this many bytes of
accumulators."""

ROWS, COLUMNS = 1, 2
"""The two kernels of a :func:`sum_plan`: ``sum_float_k1`` (rows) and ``sum_float_kn`` (columns)."""

LOOPED_ROWS, LOOPED_COLUMNS = 3, 4
"""The plans of sums over two runs of reduced dimensions (module docstring): the rows or columns kernel once per
index of the outer run, each sum added to the output in turn (per tile of the outer run, when tiles cut it)."""


def _task_target() -> int:
    """YNNPACK's ``target_task_count``: twice the threads of XLA CPU's pool (one per CPU this process may run
    on), or 1 with one thread."""
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 * threads if threads > 1 else 1


def _tiles(shape: list[int], axes: list[int], itemsize: int,
           rows_in_turn: bool = True) -> tuple[int, int, int, int] | None:
    """How YNNPACK's tiles cut the reduced dimensions ``axes`` (consecutive) of ``shape``: ``(outer, extent,
    inner, size)``: the reduced elements of one output, as ``(outer, extent, inner)``, are summed in tiles of
    ``size`` indices of the middle dimension (``size >= extent``: one tile), each tile ``size * inner`` consecutive
    elements (``size`` negative: tiles of ``-size``, but each ``outer`` index's whole extent summed into its first
    tile's partial, the others zero: see the end); None when the tiles are not of that form (not identified). A
    reduction is split only when its tiles
    cut a reduced dimension and the kept dimensions give its threads fewer tasks than :func:`_task_target`
    (measured: rows of 33,768 f32 are split in 1-3 rows, not in 4 or more, on 2 CPUs)."""
    tile, so_far = TILE_BYTES // itemsize, 1
    splits = [0] * len(shape)
    for d in reversed(range(len(shape))):
        s = max(1, min(tile // so_far, shape[d]))
        splits[d] = 0 if s >= shape[d] else s
        so_far *= s if splits[d] else shape[d]
    tasks = int(np.prod([-(-shape[d] // splits[d]) for d in range(len(shape)) if d not in axes and splits[d]],
                        dtype=np.int64))
    split = [d for d in axes if splits[d]]
    total = int(np.prod([shape[d] for d in axes], dtype=np.int64))
    if rows_in_turn and len(axes) == 1 and any(splits[e] for e in range(axes[0] + 1, len(shape))):
        # One reduced dimension with the kept ones after it wider than a tile: YNNPACK's final reduce keeps its loop
        # over the partials (serial, around the parallel loop over the kept tiles: slinky cannot drop it), so the
        # rows are added to the output one at a time, from the initial value (``size`` 0 here; measured bitwise:
        # (7, 100000), (16, 70000), (64, 50257) f32, (6, 20000) f64 over axis 0)
        return 1, total, 1, 0
    if not split or tasks >= _task_target():
        return 1, total, 1, total
    d = split[-1]  # (the innermost split one: the reduced dimensions inside it are whole, those outside it split by 1)
    inner = int(np.prod([shape[e] for e in axes if e > d], dtype=np.int64))
    if d == axes[0]:
        return 1, shape[d], inner, splits[d]
    outer = int(np.prod([shape[e] for e in axes if e < d], dtype=np.int64))
    if axes[-1] == len(shape) - 1 or axes != list(range(axes[0], axes[-1] + 1)):
        return None  # (rows, or two runs: not identified)
    # Columns (kept dimensions after one run of reduced ones) whose tiles cut a reduced dimension ``d`` below
    # others: YNNPACK reduces in two steps (``ynn_define_reduce``): a partial reduce into ``ceil(extent / size)``
    # slots per outer index (set to zero), then the slots' sum, row-major, zeros included, added to the initial
    # value. Its scheduler makes ``d``'s loop parallel while the loops outside it give fewer tasks than the target
    # (``make_schedule``): then each tile is a call into its own slot. Otherwise the loop is serial, and slinky
    # drops a serial loop whose body is one call: each outer index's whole extent is one call into its first
    # slot, the others left zero (``-size`` here). Read from YNNPACK's and slinky's source of jax 0.10.2's build
    # (``subgraph/reduce.cc``, ``subgraph/runtime.cc``, ``builder/simplify.cc``); measured bitwise: a bias
    # gradient's sum over (0, 1) of (2 | 3, 16 .. 300, 100 .. 2048) -- (2, 128, 1024) in GPT-2 -- and of
    # (4 .. 33, 16 .. 300, 100 .. 4096), f32 and f64, and 4-d sums over leading axes.
    parallel = outer * tasks < _task_target()
    if not parallel and int(np.prod([shape[e] for e in axes if e < d][:-1], dtype=np.int64)) * tasks >= _task_target():
        return None  # (an outer reduced dimension's loop serial too: merged with d's, one call over both; not here)
    return outer, shape[d], inner, splits[d] if parallel else -splits[d]


def sum_plan(in_shape, axes, dtype, rows_in_turn: bool = True) -> tuple | None:
    """How XLA CPU's YNNPACK sums the ``axes`` of an operand of ``in_shape`` (accumulated in ``dtype``, f32 or
    f64): ``(ROWS, rows, k, 1, tiles)`` -- the operand is ``rows`` rows of ``k`` -- or ``(COLUMNS, outer, k, n,
    tiles)`` -- ``outer`` blocks of ``k`` rows of ``n`` kept elements, each block's rows summed -- with ``tiles``
    as :func:`_tiles` gives them (in elements for rows, in rows for columns; ``size`` 0: the rows added to the
    output one at a time, unless ``rows_in_turn`` is False -- the max/min kernels' tiles); None where XLA does not use
    YNNPACK or its order was not identified (module docstring). Dimensions of one element are dropped first, as
    YNNPACK does."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or not axes:
        return None
    size = int(np.prod(in_shape, dtype=np.int64))
    if size < MIN_ELEMENTS:
        return None
    kept_dims = [d for d in range(len(in_shape)) if in_shape[d] != 1]
    shape = [in_shape[d] for d in kept_dims]
    reduced = [i for i, d in enumerate(kept_dims) if d in axes]
    if not reduced:
        return None  # (a sum over dimensions of one element: a copy)
    if reduced != list(range(reduced[0], reduced[-1] + 1)):
        return _looped_plan(shape, reduced, dtype)
    tiles = _tiles(shape, reduced, dtype.itemsize, rows_in_turn)
    if tiles is None:
        return None
    first, last = reduced[0], reduced[-1]
    outer = int(np.prod(shape[:first], dtype=np.int64))
    k = int(np.prod(shape[first:last + 1], dtype=np.int64))
    n = int(np.prod(shape[last + 1:], dtype=np.int64))
    if n == 1:
        return ROWS, outer, k, 1, tiles
    return COLUMNS, outer, k, n, tiles


def _looped_plan(shape: list[int], reduced: list[int], dtype: np.dtype) -> tuple | None:
    """``(LOOPED_ROWS | LOOPED_COLUMNS, (p, l, m, tile), k, n, tiles)`` for the ``reduced`` dimensions of ``shape``
    (no dimension of one element) when they are two runs: the operand is ``(p, l, m, k, n)`` -- kept, outer run,
    kept, inner run, kept -- its outputs ``(p, m, n)``, the outer run summed in tiles of ``tile`` indices, each from
    zero, the tiles' sums then added to the initial value (``0``: the outer run and all inside it are one YNNPACK
    tile, and the sums are added to the initial value in turn; measured: with more, the initial value comes last
    even where the outer run is not cut); None for three runs or more, or where :func:`_tiles` does not identify
    the tiles (not identified)."""
    runs = [[reduced[0]]]
    for d in reduced[1:]:
        if d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    if len(runs) != 2:
        return None
    first, last, inner = runs[0][0], runs[0][-1], runs[1]
    cut = _tiles(shape, reduced, dtype.itemsize)
    if cut is None:
        return None

    def size(dims) -> int:
        return int(np.prod([shape[d] for d in dims], dtype=np.int64))

    p, l, m = size(range(first)), size(runs[0]), size(range(last + 1, inner[0]))
    k, n = size(inner), size(range(inner[-1] + 1, len(shape)))
    if size(range(first, len(shape))) <= TILE_BYTES // dtype.itemsize:
        tile = 0  # (one YNNPACK tile: the sums added to the initial value in turn)
    else:  # (_tiles cuts the outer run's first dimension, or not at all: one tile, from zero)
        tile = l if cut[3] >= cut[1] else cut[3] * size(runs[0][1:])
    return (LOOPED_ROWS if n == 1 else LOOPED_COLUMNS), (p, l, m, tile), k, n, (1, k, 1, k)


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def _advance(clock, levels, error):
    """YNNPACK's tree of accumulators (degree 16, ``lanes`` of ``levels (3, lanes)``): at a multiple of 16 of
    ``clock`` level 0 goes into level 1, at a multiple of 256 level 1 into level 2 by Kahan summation (a
    non-finite error dropped). ``clock`` 0 flushes both."""
    zero = levels.dtype.type(0)
    if clock & 15 == 0:
        for lane in range(levels.shape[1]):
            levels[1, lane] = levels[1, lane] + levels[0, lane]
            levels[0, lane] = zero
        if clock & 255 == 0:
            for lane in range(levels.shape[1]):
                y = levels[1, lane] - error[lane]
                total = levels[2, lane] + y
                e = (total - levels[2, lane]) - y
                error[lane] = e if np.isfinite(e) else zero
                levels[2, lane] = total
                levels[1, lane] = zero


def _row_vector(a) -> bool:
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype in (types.float32,
                                                                                        types.float64)


@intrinsic
def k1_sum(typingctx, x, start, k, pairs):
    """``sum_float_k1`` of ``x[start:start + k]`` (module docstring): the sum of its lanes, before it is added to
    the output, with YNNPACK's tree of accumulators kept in vector registers. Written as vector IR: in arrays,
    with loops over lanes, a row of 256 took ~130 ns whatever its length (a softmax's row sums cost as much as
    its exp), where the vector form is a few dozen instructions per row.

    Each step, as YNNPACK's kernel takes it: a block of 4 vectors of ``lanes`` elements (``pairs``: 8 vectors,
    each pair ``2l, 2l + 1`` of 32 elements in lane ``l``, the odd one first) summed lane-wise from zero and
    added to level 0 (4 blocks at a time while 16 are left); the clock advances by the lanes per block and at
    each multiple of 16 moves level 0 into level 1, at each multiple of 256 level 1 into level 2 by Kahan
    summation (a non-finite error dropped); a last partial block is read padded with zeros (added too: a -0
    that flushing a tiny sum to zero made becomes +0); then both levels are flushed the same way, and the lanes
    of ``0 + level 2`` are added by halves (f32 down to 4 lanes, then ``(l0 + l2) + (l1 + l3)``; f64
    ``l0 + l1``)."""
    if not (_row_vector(x) and start == k == types.int64 and pairs == types.boolean):
        return None
    lanes = 64 // (x.dtype.bitwidth // 8)
    real = ir.FloatType() if x.dtype == types.float32 else ir.DoubleType()
    vector = ir.VectorType(real, lanes)
    i32, i64 = ir.IntType(32), ir.IntType(64)
    align = x.dtype.bitwidth // 8

    def codegen(context, builder, signature, args):
        array, first, count, by_pairs = args
        data = context.make_array(signature.args[0])(context, builder, array).data
        # (a function of its own, called with the row's pointer: inlined into a fused loop, its vector code kept
        # LLVM from vectorizing the loop's element-wise ops -- a softmax's exp ran 8 times slower)
        name = f"xla_dialect_ynnpack_k1_sum_{'f32' if lanes == 16 else 'f64'}"
        try:
            function = builder.module.get_global(name)
        except KeyError:
            function = ir.Function(builder.module, ir.FunctionType(real, [real.as_pointer(), i64, i64, ir.IntType(1)]),
                                   name)
            function.linkage = "linkonce_odr"
            function.attributes.add("noinline")
            body(ir.IRBuilder(function.append_basic_block("entry")), *function.args)
        return builder.call(function, [data, first, count, by_pairs])

    def body(builder, data, first, count, by_pairs):
        """The function's code: returns the sum."""
        zero = ir.Constant(vector, [ir.Constant(real, 0.0)] * lanes)
        odd = ir.Constant(ir.VectorType(i32, lanes), [2 * j + 1 for j in range(lanes)])
        even = ir.Constant(ir.VectorType(i32, lanes), [2 * j for j in range(lanes)])

        def constant(value):
            return ir.Constant(i64, value)

        def load(index):
            value = builder.load(builder.bitcast(builder.gep(data, [index]), vector.as_pointer()))
            value.align = align
            return value

        def padded(at, offset, stride, end):
            """The vector of ``x[at + offset + stride * l]`` for the lanes ``l`` whose offset is below ``end``,
            zeros for the others (no read past them)."""
            value = zero
            for lane in range(lanes):
                position = constant(offset + stride * lane)
                inside = builder.icmp_signed("<", position, end)
                index = builder.select(inside, builder.add(at, position), at)
                element = builder.load(builder.gep(data, [index]))
                value = builder.insert_element(value, builder.select(inside, element, ir.Constant(real, 0.0)),
                                               ir.Constant(i32, lane))
            return value

        def block_sum(paired, at, end=None):
            """The lane-wise sum from zero of the block at ``at`` (its first ``end`` elements, zeros after)."""
            value = zero
            for q in range(4):
                if paired and end is None:
                    low = load(builder.add(at, constant(2 * q * lanes)))
                    high = load(builder.add(at, constant((2 * q + 1) * lanes)))
                    value = builder.fadd(value, builder.shuffle_vector(low, high, odd))
                    value = builder.fadd(value, builder.shuffle_vector(low, high, even))
                elif paired:
                    value = builder.fadd(value, padded(at, 2 * q * lanes + 1, 2, end))
                    value = builder.fadd(value, padded(at, 2 * q * lanes, 2, end))
                elif end is None:
                    value = builder.fadd(value, load(builder.add(at, constant(q * lanes))))
                else:
                    value = builder.fadd(value, padded(at, q * lanes, 1, end))
            return value

        state = {name: cgutils.alloca_once(builder, vector) for name in ("level0", "level1", "level2", "error")}
        clock, at, left = (cgutils.alloca_once(builder, i64) for _ in range(3))

        def advance(now):
            """YNNPACK's tree at clock ``now`` (0: flush both levels)."""
            level0, level1, level2, error = (builder.load(state[n]) for n in ("level0", "level1", "level2", "error"))
            into1 = builder.icmp_signed("==", builder.and_(now, constant(15)), constant(0))
            into2 = builder.and_(into1, builder.icmp_signed("==", builder.and_(now, constant(255)), constant(0)))
            level1 = builder.select(into1, builder.fadd(level1, level0), level1)
            level0 = builder.select(into1, zero, level0)
            y = builder.fsub(level1, error)
            total = builder.fadd(level2, y)
            e = builder.fsub(builder.fsub(total, level2), y)
            fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]),
                                                  f"llvm.fabs.v{lanes}{'f32' if lanes == 16 else 'f64'}")
            finite = builder.fcmp_ordered("!=", builder.call(fabs, [e]), ir.Constant(vector, [float("inf")] * lanes))
            e = builder.select(finite, e, zero)
            builder.store(level0, state["level0"])
            builder.store(builder.select(into2, zero, level1), state["level1"])
            builder.store(builder.select(into2, total, level2), state["level2"])
            builder.store(builder.select(into2, e, error), state["error"])

        def total(paired):
            """The code of the whole sum, with or without pairs (two paths: a pairs block reads twice as far)."""
            for name in state:
                builder.store(zero, state[name])
            builder.store(constant(0), clock)
            builder.store(first, at)
            builder.store(count, left)
            block = constant((8 if paired else 4) * lanes)
            for blocks in (4, 1):  # (4 blocks at a time while 16 are left, then one at a time)
                head, body, after = (builder.append_basic_block(f"k1.{part}{blocks}")
                                     for part in ("head", "body", "after"))
                span = builder.mul(block, constant(blocks))
                builder.branch(head)
                builder.position_at_end(head)
                builder.cbranch(builder.icmp_signed(">=", builder.load(left), span), body, after)
                builder.position_at_end(body)
                position = builder.load(at)
                level0 = builder.load(state["level0"])
                for b in range(blocks):
                    offset = builder.add(position, builder.mul(block, constant(b)))
                    level0 = builder.fadd(level0, block_sum(paired, offset))
                builder.store(level0, state["level0"])
                builder.store(builder.add(position, span), at)
                builder.store(builder.sub(builder.load(left), span), left)
                now = builder.add(builder.load(clock), constant(blocks * lanes))
                builder.store(now, clock)
                advance(now)
                builder.branch(head)
                builder.position_at_end(after)
            remaining = builder.load(left)
            with builder.if_then(builder.icmp_signed(">", remaining, constant(0))):
                partial = block_sum(paired, builder.load(at), remaining)
                builder.store(builder.fadd(builder.load(state["level0"]), partial), state["level0"])
            advance(constant(0))
            local = builder.fadd(zero, builder.load(state["level2"]))
            width = lanes
            while width > (4 if lanes == 16 else 2):
                width //= 2
                halves = [builder.shuffle_vector(local, local, ir.Constant(ir.VectorType(i32, width),
                                                                           list(range(h * width, (h + 1) * width))))
                          for h in range(2)]
                local = builder.fadd(halves[0], halves[1])

            def lane(j):
                return builder.extract_element(local, ir.Constant(i32, j))

            if lanes == 16:
                return builder.fadd(builder.fadd(lane(0), lane(2)), builder.fadd(lane(1), lane(3)))
            return builder.fadd(lane(0), lane(1))

        with builder.if_else(by_pairs) as (with_pairs, without):
            with with_pairs:
                paired_total, paired_block = total(True), builder.block
            with without:
                plain_total, plain_block = total(False), builder.block
        result = builder.phi(real)
        result.add_incoming(paired_total, paired_block)
        result.add_incoming(plain_total, plain_block)
        builder.ret(result)

    return types.float32(x, start, k, pairs) if x.dtype == types.float32 else types.float64(x, start, k, pairs), codegen


@numba.njit(cache=True, error_model="numpy", nogil=True, forceinline=True)
def row_sum(x, start, tiles, pairs, partials):
    """The sum from zero of the row ``x[start:start + outer * extent * inner]`` (``tiles = (outer, extent, inner,
    size)``, :func:`sum_plan`) as YNNPACK computes it: :func:`k1_sum` of the row, or of each tile (``size``
    indices of the middle dimension) from zero into ``partials``, then of the partials. Add the output's initial
    value to it."""
    outer, extent, inner, size = tiles
    if size >= extent:
        return k1_sum(x, start, outer * extent * inner, pairs)
    return _tiled_row_sum(x, start, tiles, pairs, partials)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _tiled_row_sum(x, start, tiles, pairs, partials):
    """:func:`row_sum` of a row cut in tiles (a function of its own: inlined with the whole row's sum, the short
    rows' loop of :func:`sum_rows` ran 5 times slower when ``pairs`` was not a constant)."""
    outer, extent, inner, size = tiles
    zero = partials.dtype.type(0)
    count = 0
    for o in range(outer):
        for c in range(0, extent, size):
            first = start + (o * extent + c) * inner
            partials[count] = zero + k1_sum(x, first, min(size, extent - c) * inner, pairs)
            count += 1
    return k1_sum(partials, 0, count, False)


def _lanes(dtype) -> int:
    return 64 // np.dtype(dtype).itemsize


@numba.njit(cache=True, error_model="numpy", nogil=True)
def sum_rows(x, out, init, tiles, pairs):
    """``out[r] = init + row_sum(row r)`` for the rows of the C-ordered 2-d ``x`` (f32 or f64; ``pairs``: bf16
    values read two per lane, see the module docstring)."""
    rows, k = x.shape
    outer, extent, inner, size = tiles
    partials = np.empty(max(1, outer * ((extent + size - 1) // size)), x.dtype)
    flat = x.ravel()
    if size >= extent:  # (each row whole: the row's sum alone in the loop, no array references to count)
        for r in range(rows):
            out[r] = init + k1_sum(flat, r * k, k, pairs)
        return
    for r in range(rows):
        out[r] = init + row_sum(flat, r * k, tiles, pairs, partials)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _kn_sum(x, first, k, out, levels, error, four):
    """``out += sum_float_kn`` of the rows ``x[first:first + k]`` of the 2-d ``x`` (module docstring), every
    column at once: ``levels (3, n)``, ``error (n)`` and ``four (n)`` are work space."""
    n = x.shape[1]
    zero = x.dtype.type(0)
    if k <= 4:
        four[:] = zero
        for q in range(4):  # (the zero rows after them added too: see k1_sum)
            for j in range(n):
                four[j] = four[j] + (x[first + q, j] if q < k else zero)
        for j in range(n):
            out[j] = out[j] + four[j]
        return
    levels[:] = zero
    error[:] = zero
    clock, row = 0, first
    while first + k - row >= 4:
        four[:] = zero
        for q in range(4):
            for j in range(n):
                four[j] = four[j] + x[row + q, j]
        for j in range(n):
            levels[0, j] = levels[0, j] + four[j]
        row += 4
        clock += 4
        _advance(clock, levels, error)
    if row < first + k:
        four[:] = zero
        for q in range(row, row + 4):
            for j in range(n):
                four[j] = four[j] + (x[q, j] if q < first + k else zero)
        for j in range(n):
            levels[0, j] = levels[0, j] + four[j]
    _advance(0, levels, error)
    for j in range(n):
        out[j] = out[j] + levels[2, j]


@numba.njit(cache=True, error_model="numpy", nogil=True)
def sum_columns(x, out, init, tiles):
    """``out[b, j] = init + sum over r of x[b, r, j]`` for the C-ordered 3-d ``x`` (f32 or f64) as YNNPACK sums
    columns (module docstring): each block's rows in tiles (``tiles = (outer, extent, inner, size)`` in rows,
    :func:`sum_plan`), each tile's sums from zero a row of partials, the partials summed again."""
    blocks, k, n = x.shape
    levels = np.zeros((3, n), x.dtype)
    error = np.zeros(n, x.dtype)
    four = np.zeros(n, x.dtype)
    outer, extent, inner, size = tiles
    if size == 0:  # (the rows added to the output one at a time: _tiles)
        for b in range(blocks):
            out[b, :] = init
            for q in range(k):
                _kn_sum(x[b], q, 1, out[b], levels, error, four)
        return
    whole = size < 0  # (each outer index's extent one call into its first slot: _tiles)
    size = -size if whole else size
    split = size < extent
    slots = (extent + size - 1) // size
    partials = np.empty((max(1, outer * slots) if split else 1, n), x.dtype)
    zero = x.dtype.type(0)
    for b in range(blocks):
        if not split and k <= 4:  # (_kn_sum's first case written out: see sum_columns_looped)
            for column in range(n):
                block = zero
                for q in range(4):
                    block = block + (x[b, q, column] if q < k else zero)
                out[b, column] = init + block
            continue
        rows = x[b]
        out[b, :] = init
        if not split:
            _kn_sum(rows, 0, k, out[b], levels, error, four)
            continue
        count = 0
        for o in range(outer):
            if whole:
                partials[count:count + slots, :] = 0
                _kn_sum(rows, o * extent * inner, extent * inner, partials[count], levels, error, four)
                count += slots
                continue
            for c in range(0, extent, size):
                partials[count, :] = 0
                _kn_sum(rows, (o * extent + c) * inner, min(size, extent - c) * inner, partials[count], levels,
                        error, four)
                count += 1
        _kn_sum(partials, 0, count, out[b], levels, error, four)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def sum_rows_looped(x, out, init, pairs, tile):
    """``out[i, j] = ((init + s_0) + s_1) + ...`` for the C-ordered 4-d ``x (p, l, m, k)`` and ``out (p, m)``:
    ``s_t`` the sum from zero of the row ``x[i, t, j]`` (:func:`row_sum`, one tile), added in the order of ``t``
    (:data:`LOOPED_ROWS`); with ``tile > 0``, the sums of each ``tile`` rows added from zero, and these partial
    sums summed by the columns kernel and added to ``init``."""
    p, l, m, k = x.shape
    flat = x.ravel()
    size = tile if tile > 0 else l
    count = (l + size - 1) // size
    partials = np.zeros((count, p * m), x.dtype)
    start = init if tile == 0 else x.dtype.type(0)
    for i in range(p):
        for j in range(m):
            for c in range(count):
                total = start
                for t in range(c * size, min(l, (c + 1) * size)):
                    total = total + k1_sum(flat, ((i * l + t) * m + j) * k, k, pairs)
                partials[c, i * m + j] = total
    if tile == 0:
        out.ravel()[:] = partials[0]
    else:
        _combine_tiles(partials, out.ravel(), init)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def _combine_tiles(partials, out, init):
    """``out = init +`` the columns kernel's sums of the tiles' partial sums ``partials (tiles, outputs)``."""
    n = partials.shape[1]
    out[:] = init
    _kn_sum(partials, 0, partials.shape[0], out, np.zeros((3, n), partials.dtype), np.zeros(n, partials.dtype),
            np.zeros(n, partials.dtype))


@numba.njit(cache=True, error_model="numpy", nogil=True)
def sum_columns_looped(x, out, init, tile):
    """``out[i, j, :] = init``, then ``+=`` the column sums (:func:`_kn_sum`, one tile) of the rows ``x[i, t, j]``
    for each ``t`` in order, for the C-ordered 5-d ``x (p, l, m, k, n)`` and ``out (p, m, n)``
    (:data:`LOOPED_COLUMNS`); with ``tile > 0`` each ``tile`` of ``t`` from zero, the partial sums then summed by
    the columns kernel and added to ``init`` (as :func:`sum_rows_looped`)."""
    p, l, m, k, n = x.shape
    levels = np.zeros((3, n), x.dtype)
    error = np.zeros(n, x.dtype)
    four = np.zeros(n, x.dtype)
    size = tile if tile > 0 else l
    count = (l + size - 1) // size
    partials = np.zeros((count, p * m * n), x.dtype)
    start = init if tile == 0 else x.dtype.type(0)
    zero = x.dtype.type(0)
    for i in range(p):
        for j in range(m):
            for c in range(count):
                base = (i * m + j) * n
                for column in range(n):
                    partials[c, base + column] = start
                for t in range(c * size, min(l, (c + 1) * size)):
                    if k > 4:
                        _kn_sum(x[i, t, j], 0, k, partials[c, base:base + n], levels, error, four)
                        continue
                    # (at most 4 rows: _kn_sum's first case written out here -- its call per window, with the
                    # views and their atomic reference counts, took ~100 ns: a 2 x 2 average pool of 100K
                    # elements cost 0.3 ms)
                    for column in range(n):
                        block = zero
                        for q in range(4):
                            block = block + (x[i, t, j, q, column] if q < k else zero)
                        partials[c, base + column] = partials[c, base + column] + block
    if tile == 0:
        out.ravel()[:] = partials[0]
    else:
        _combine_tiles(partials, out.ravel(), init)


def ynnpack_sum(x: np.ndarray, plan: tuple, init, pairs: bool = False) -> np.ndarray:
    """``init +`` the sum :func:`sum_plan` describes of ``x`` (f32 or f64, any layout; ``pairs``: the values are
    bf16 converted to f32), shaped as the plan's outputs (``(rows,)``, ``(outer, n)``, ``(p, m)`` or
    ``(p, m, n)``): the interpreter's kernel (:mod:`lowering.kernels.reduction`)."""
    kind, outer, k, n, tiles = plan
    init = x.dtype.type(init)
    if kind in (LOOPED_ROWS, LOOPED_COLUMNS):
        p, l, m, tile = outer
        if kind == LOOPED_ROWS:
            out = np.empty((p, m), x.dtype)
            sum_rows_looped(np.ascontiguousarray(x).reshape(p, l, m, k), out, init, pairs, tile)
            return out
        out = np.empty((p, m, n), x.dtype)
        sum_columns_looped(np.ascontiguousarray(x).reshape(p, l, m, k, n), out, init, tile)
        return out
    if kind == ROWS:
        rows = np.ascontiguousarray(x).reshape(outer, k)
        out = np.empty(outer, x.dtype)
        sum_rows(rows, out, init, tiles, pairs)
        return out
    blocks = np.ascontiguousarray(x).reshape(outer, k, n)
    out = np.empty((outer, n), x.dtype)
    sum_columns(blocks, out, init, tiles)
    return out
