"""Indexing ops: gather, scatter (variadic, any update computation), dynamic_slice, dynamic_update_slice.

Results are compared with ``jax.jit`` of the ``jax.lax`` call. jax wraps the
raw ops in clamping/masking code for some modes, so the comparisons use the
modes that lower to the bare XLA op: ``PROMISE_IN_BOUNDS`` for gather (XLA
clamps start indices; ``CLIP`` must agree since it clamps the same way) and
``FILL_OR_DROP`` for scatter (XLA skips windows not entirely in bounds).
Programs jax cannot express (variadic scatter, non-commutative update
computations, slice size 0 in a collapsed dimension) are compared with XLA's
CPU backend running the same module (``interop.run_xla``).
"""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import xla_dialect
from interop.stablehlo import run_xla
from xla_dialect import XlaBuilder
from xla_dialect.errors import BuilderError, HloVerifyError
from xla_dialect.ops.indexing import GatherDimensionNumbers, ScatterDimensionNumbers

from helpers import assert_close, execute, random_array, run_builder

M = lax.GatherScatterMode
GDN = lax.GatherDimensionNumbers
SDN = lax.ScatterDimensionNumbers


def assert_same(actual, expected):
    """Same shape, dtype and bytes (gather and replace never change a value)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes(), (
        f"values differ:\n{actual}\n!=\n{expected}")


def indices_in(rng, shape, low, high, dtype=np.int32):
    """Random indices in [low, high] (out-of-range ones included when the range is wider than the dims)."""
    return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)


# ----------------------------------------------------------------------------
# gather
# ----------------------------------------------------------------------------

# (operand shape, indices shape, jax dimension numbers, slice sizes); index_vector_dim is the last.
GATHER_CASES = {
    "rows": ((5, 4), (3, 1), GDN((1,), (0,), (0,)), (1, 4)),
    "gather_nd": ((4, 5, 6), (2, 3, 2), GDN((2,), (0, 1), (0, 1)), (1, 1, 6)),
    "windows": ((16, 11), (5, 2), GDN((1, 2), (), (0, 1)), (8, 6)),
    "offset_first": ((6, 7), (4, 1), GDN((0,), (1,), (1,)), (3, 1)),
    "permuted_map": ((6, 7, 3), (2, 2, 2), GDN((2, 3), (0,), (2, 0)), (1, 4, 2)),
    "partial_map": ((5, 6), (3, 1), GDN((1, 2), (), (1,)), (5, 2)),
    "batching": ((3, 5, 4), (3, 2, 1), GDN((2,), (1,), (1,), (0,), (0,)), (1, 1, 4)),
    "batching_mid": ((2, 3, 4, 2), (2, 2, 3, 2), GDN((3, 4), (1,), (2, 1), (0,), (1,)), (1, 1, 2, 2)),
    "batching_only": ((3, 4), (3, 0), GDN((1,), (), (), (0,), (0,)), (1, 4)),
    "empty_indices": ((5, 4), (0, 1), GDN((1,), (0,), (0,)), (1, 4)),
    "empty_slice": ((5, 4), (3, 1), GDN((1,), (0,), (0,)), (1, 0)),
    "scalar_operand": ((), (3, 0), GDN((), (), ()), ()),
    "whole": ((3, 4), (2, 0), GDN((1, 2), (), ()), (3, 4)),
}


@pytest.mark.parametrize("case", list(GATHER_CASES))
def test_gather_matches_jax(rng, case):
    shape, idx_shape, dn, sizes = GATHER_CASES[case]
    x = random_array(rng, shape, np.float32, special=True)
    high = max(shape) + 3 if shape else 0
    idx = indices_in(rng, idx_shape, -3, high)
    out = run_builder(lambda b, p, i: b.gather(p, i, dn, sizes), x, idx)
    for mode in (M.PROMISE_IN_BOUNDS, M.CLIP):
        want = jax.jit(lambda a, i: lax.gather(a, i, dn, sizes, mode=mode))(x, idx)
        assert_same(out, want)


GATHER_DTYPES = [np.float64, ml_dtypes.bfloat16, np.int8, np.uint32, np.bool_, np.complex64, ml_dtypes.int4]


@pytest.mark.parametrize("dtype", GATHER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("index_dtype", [np.int64, np.uint8, np.int16, np.uint64])
def test_gather_dtypes_and_index_types(rng, dtype, index_dtype):
    shape, idx_shape, dn, sizes = GATHER_CASES["windows"]
    x = random_array(rng, shape, dtype, special=True)
    low = 0 if np.dtype(index_dtype).kind == "u" else -5
    idx = indices_in(rng, idx_shape, low, 20, index_dtype)
    if index_dtype == np.uint64:
        idx[0, 0] = np.iinfo(np.uint64).max  # clamps to the last valid start, not to 0
    out = run_builder(lambda b, p, i: b.gather(p, i, dn, sizes), x, idx)
    assert_same(out, jax.jit(lambda a, i: lax.gather(a, i, dn, sizes, mode=M.PROMISE_IN_BOUNDS))(x, idx))


@pytest.mark.parametrize("ivd", [0, 1])
def test_gather_index_vector_dim_not_last(rng, ivd):
    # indices [5, 2, 3] with the vectors of 2 along dimension `ivd`; jax needs them last.
    x = random_array(rng, (7, 8, 3), np.float32)
    idx = indices_in(rng, (5, 3, 2), -2, 9)
    dn = GDN((2, 3), (0,), (0, 1))
    ours = np.moveaxis(idx, -1, ivd)
    out = run_builder(lambda b, p, i: b.gather(p, i, GatherDimensionNumbers(
        offset_dims=(2, 3), collapsed_slice_dims=(0,), start_index_map=(0, 1), index_vector_dim=ivd),
        slice_sizes=(1, 4, 3)), x, ours)
    assert_same(out, jax.jit(lambda a, i: lax.gather(a, i, dn, (1, 4, 3), mode=M.PROMISE_IN_BOUNDS))(x, idx))


def test_gather_implicit_trailing_index_dimension(rng):
    # index_vector_dim == rank(start_indices): every index is a vector of one component.
    x = random_array(rng, (6, 4), np.int32)
    idx = indices_in(rng, (2, 5), -2, 8)
    out = run_builder(lambda b, p, i: b.gather(p, i, offset_dims=[2], collapsed_slice_dims=[0], start_index_map=[0],
                                               index_vector_dim=2, slice_sizes=[1, 4]), x, idx)
    want = jax.jit(lambda a, i: lax.gather(a, i, GDN((2,), (0,), (0,)), (1, 4), mode=M.PROMISE_IN_BOUNDS))(
        x, idx[..., None])
    assert_same(out, want)


def test_gather_batching_dim_with_index_vector_dim_first(rng):
    # start_indices_batching_dims after index_vector_dim shift down by one in the batch positions.
    x = random_array(rng, (4, 6, 3), np.float32)
    idx = indices_in(rng, (1, 4, 2), -1, 7)  # vectors along dim 0, batching along dim 1
    out = run_builder(lambda b, p, i: b.gather(
        p, i, offset_dims=[2], collapsed_slice_dims=[1], start_index_map=[1], operand_batching_dims=[0],
        start_indices_batching_dims=[1], index_vector_dim=0, slice_sizes=[1, 1, 3]), x, idx)
    dn = GDN((2,), (1,), (1,), (0,), (0,))
    want = jax.jit(lambda a, i: lax.gather(a, i, dn, (1, 1, 3), mode=M.PROMISE_IN_BOUNDS))(x, np.moveaxis(idx, 0, -1))
    assert_same(out, want)


def test_gather_stablehlo_spec_example():
    operand = np.arange(1, 49, dtype=np.int32).reshape(2, 3, 4, 2)
    idx = np.array([[[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
                    [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]]], np.int64)
    out = run_builder(lambda b, p, i: b.gather(
        p, i, offset_dims=[3, 4], collapsed_slice_dims=[1], operand_batching_dims=[0],
        start_indices_batching_dims=[1], start_index_map=[2, 1], index_vector_dim=3, slice_sizes=[1, 1, 2, 2]),
        operand, idx)
    want = [[[[[1, 2], [3, 4]], [[3, 4], [5, 6]], [[13, 14], [15, 16]]],
             [[[33, 34], [35, 36]], [[35, 36], [37, 38]], [[41, 42], [43, 44]]]],
            [[[[1, 2], [3, 4]], [[13, 14], [15, 16]], [[21, 22], [23, 24]]],
             [[[43, 44], [45, 46]], [[33, 34], [35, 36]], [[27, 28], [29, 30]]]]]
    assert_same(out, np.array(want, np.int32))


def test_seed_gather_batch_dynamic_slice(rng):
    # Seed: 5 slices of [8,6] from [16,11]: out[G,O0,O1] = in[X+O0, Y+O1] (starts clamped to fit).
    x = np.arange(16 * 11, dtype=np.float32).reshape(16, 11)
    idx = np.array([[0, 0], [3, 5], [8, 5], [15, 10], [-4, 2]], np.int32)
    out = run_builder(lambda b, p, i: b.gather(p, i, offset_dims=[1, 2], collapsed_slice_dims=[],
                                               start_index_map=[0, 1], index_vector_dim=1, slice_sizes=[8, 6]),
                      x, idx)
    want = np.stack([x[min(max(a, 0), 8):][:8, min(max(c, 0), 5):][:, :6] for a, c in idx])
    assert_same(out, want)
    # The same with a [4,5,2] index array: G0 and G1 are both batch dimensions.
    idx2 = indices_in(rng, (4, 5, 2), 0, 10)
    out2 = run_builder(lambda b, p, i: b.gather(p, i, offset_dims=[2, 3], start_index_map=[0, 1],
                                                index_vector_dim=2, slice_sizes=[8, 6]), x, idx2)
    want2 = np.stack([np.stack([x[a:a + 8, c:c + 6] for a, c in row]) for row in np.minimum(idx2, [8, 5])])
    assert_same(out2, want2)


def test_seed_gather_nd(rng):
    # Seed's tf.gather_nd: slice_sizes [1,11]; out[G0,G1,O0] = in[idx[G0,G1,0], O0].
    x = random_array(rng, (16, 11), np.float32)
    idx = indices_in(rng, (4, 5, 1), 0, 15)
    out = run_builder(lambda b, p, i: b.gather(p, i, offset_dims=[2], collapsed_slice_dims=[0], start_index_map=[0],
                                               index_vector_dim=2, slice_sizes=[1, 11]), x, idx)
    assert_same(out, x[idx[..., 0]])


def test_gather_zero_slice_in_collapsed_dimension_matches_xla():
    # XLA accepts slice size 0 in a collapsed dimension (jax does not): the output has elements, reads none.
    b = XlaBuilder("g")
    x = b.parameter(0, "f32[3,4]")
    i = b.parameter(1, "s32[2,1]")
    b.gather(x, i, offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0], slice_sizes=[0, 4])
    module = b.build()
    args = (np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[1], [5]], np.int32))
    assert_same(execute(module, *args)[0], run_xla(module, *args)[0])


def test_gather_accepts_jax_dimension_numbers_and_mappings(rng):
    x = random_array(rng, (5, 4), np.float32)
    idx = indices_in(rng, (3, 1), 0, 4)
    a = run_builder(lambda b, p, i: b.gather(p, i, GDN((1,), (0,), (0,)), (1, 4)), x, idx)
    c = run_builder(lambda b, p, i: b.gather(p, i, {"offset_dims": [1], "collapsed_slice_dims": [0],
                                                    "start_index_map": [0]}, slice_sizes=[1, 4]), x, idx)
    d = run_builder(lambda b, p, i: b.gather(p, i, GatherDimensionNumbers((1,), (0,), (0,)), [1, 4],
                                             indices_are_sorted=True), x, idx)
    for r in (c, d):
        assert_same(r, a)


# ----------------------------------------------------------------------------
# scatter
# ----------------------------------------------------------------------------

# (operand shape, indices shape, updates shape, jax dimension numbers); index_vector_dim last.
SCATTER_CASES = {
    "rows": ((6, 4), (5, 1), (5, 4), SDN((1,), (0,), (0,))),
    "elements": ((5, 6), (7, 2), (7,), SDN((), (0, 1), (0, 1))),
    "windows": ((9, 8), (4, 2), (4, 3, 2), SDN((1, 2), (), (0, 1))),
    "window_first": ((8, 5), (3, 1), (2, 3), SDN((0,), (1,), (1,))),
    "permuted": ((6, 7, 3), (2, 3, 2), (2, 3, 2, 3), SDN((2, 3), (0,), (2, 0))),
    "batching": ((3, 5, 4), (3, 2, 1), (3, 2, 4), SDN((2,), (1,), (1,), (0,), (0,))),
    "batching_mid": ((2, 3, 4, 2), (2, 2, 3, 2), (2, 2, 3, 2, 2), SDN((3, 4), (1,), (2, 1), (0,), (1,))),
    "empty_indices": ((6, 4), (0, 1), (0, 4), SDN((1,), (0,), (0,))),
    "empty_window": ((6, 4), (3, 1), (3, 0), SDN((1,), (0,), (0,))),
    "scalar_index": ((6,), (4, 1), (4,), SDN((), (0,), (0,))),
    "no_index_vector": ((4, 3), (5, 0), (5, 4, 3), SDN((1, 2), (), ())),
    "batching_only": ((3, 4), (3, 0), (3, 4), SDN((1,), (), (), (0,), (0,))),
}

SCATTER_OPS = {
    "add": (lax.scatter_add, lambda a, u: a + u),
    "mul": (lax.scatter_mul, lambda a, u: a * u),
    "min": (lax.scatter_min, lambda a, u: a.builder.min(a, u)),
    "max": (lax.scatter_max, lambda a, u: a.builder.max(a, u)),
    "replace": (lax.scatter, lambda a, u: u),
    "sub": (lax.scatter_sub, lambda a, u: a - u),
}


def check_scatter(rng, case, op, dtype, special=False, unique=False):
    """Scatter ``op`` on SCATTER_CASES[case] with random data and indices vs jax (FILL_OR_DROP: the raw op)."""
    shape, idx_shape, upd_shape, dn = SCATTER_CASES[case]
    x = random_array(rng, shape, dtype, special=special)
    u = random_array(rng, upd_shape, dtype, special=special)
    # Indices from -2 to past the end: duplicates and out-of-bounds windows (skipped whole).
    idx = indices_in(rng, idx_shape, -2, max(shape, default=0) + 1)
    jax_fn, comp = SCATTER_OPS[op]
    out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn, unique_indices=unique), x, idx, u)
    want = np.asarray(jax.jit(lambda a, i, v: jax_fn(a, i, v, dn, mode=M.FILL_OR_DROP))(x, idx, u))
    if np.dtype(dtype).kind == "c" and op == "mul":
        # XLA's complex multiply uses fused multiply-adds (see test_elementwise): last bits differ.
        np.testing.assert_allclose(out, want, rtol=1e-5)
        return
    assert_close(out, want, err_msg=f"{case} {op} {np.dtype(dtype).name}")


@pytest.mark.parametrize("case", list(SCATTER_CASES))
@pytest.mark.parametrize("op", ["add", "replace", "max"])
def test_scatter_dimension_numbers_match_jax(rng, case, op):
    check_scatter(rng, case, op, np.float32, special=True)


SCATTER_DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.int8, np.uint8,
                  np.complex64]


@pytest.mark.parametrize("dtype", SCATTER_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", list(SCATTER_OPS))
def test_scatter_ops_and_dtypes_match_jax(rng, op, dtype):
    if np.dtype(dtype).kind == "c" and op in ("min", "max"):
        pytest.skip("jax rejects scatter_min/max on complex")
    special = not (np.dtype(dtype).kind == "c" and op == "mul")
    check_scatter(rng, "rows", op, dtype, special=special)
    if dtype in (np.float32, ml_dtypes.bfloat16, np.int8):  # one per kernel path, to keep the file fast
        check_scatter(rng, "elements", op, dtype, special=special)


def test_scatter_into_scalar_operand():
    # Every update combines into the one element, in order. (XLA CPU in jaxlib 0.10 fails to compile
    # this program -- its scatter simplifier breaks the shapes -- so the expectation is hand-checked.)
    x = np.float32(1.5)
    u = np.array([2.0, -4.0, 0.5], np.float32)
    idx = np.zeros((3, 0), np.int32)
    dn = SDN((), (), ())
    for comp, want in ((lambda a, w: a + w, 0.0), (lambda a, w: w, 0.5), (lambda a, w: a * a.builder.constant(
            np.float32(2)) - w, ((1.5 * 2 - 2) * 2 + 4) * 2 - 0.5)):
        out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn), x, idx, u)
        assert_same(out, np.float32(want))


@pytest.mark.parametrize("index_dtype", [np.uint8, np.int64, np.uint64, np.int8])
def test_scatter_index_types(rng, index_dtype):
    x = random_array(rng, (6, 4), np.float32)
    idx = indices_in(rng, (5, 1), 0 if np.dtype(index_dtype).kind == "u" else -3, 8, index_dtype)
    if index_dtype == np.uint64:
        idx[0, 0] = np.iinfo(np.uint64).max  # out of bounds (not a wrapped-around negative)
    u = random_array(rng, (5, 4), np.float32)
    dn = SDN((1,), (0,), (0,))
    out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, lambda a, w: a + w, dn), x, idx, u)
    assert_same(out, jax.jit(lambda a, i, v: lax.scatter_add(a, i, v, dn, mode=M.FILL_OR_DROP))(x, idx, u))


def test_scatter_pred_and_int_extremes(rng):
    # Integer wrap-around and pred (add = or, mul = and) through the ufunc fast path.
    x = np.array([127, -128, 0, 5], np.int8)
    u = np.array([1, -1, 127, 127, -128], np.int8)
    idx = np.array([[0], [1], [2], [2], [3]], np.int32)
    dn = SDN((), (0,), (0,))
    for op in ("add", "mul", "max", "min"):
        jax_fn, comp = SCATTER_OPS[op]
        out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn), x, idx, u)
        assert_same(out, jax.jit(lambda a, i, v: jax_fn(a, i, v, dn, mode=M.FILL_OR_DROP))(x, idx, u))
    bx = rng.random(6) < 0.5
    bu = rng.random(4) < 0.5
    bidx = np.array([[0], [0], [3], [5]], np.int32)
    for op in ("max", "min", "replace"):  # jax has no add/mul on bool
        jax_fn, comp = SCATTER_OPS[op]
        out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn), bx, bidx, bu)
        assert_same(out, jax.jit(lambda a, i, v: jax_fn(a, i, v, dn, mode=M.FILL_OR_DROP))(bx, bidx, bu))


def test_scatter_max_min_signed_zero_and_nan():
    # XLA orders -0 < +0 and propagates NaN; NumPy's maximum.at alone would not.
    x = np.array([-0.0, 0.0, -0.0, 0.0, 1.0, np.nan], np.float32)
    u = np.array([0.0, -0.0, -0.0, 0.0, np.nan, 2.0, -0.0, 0.0], np.float32)
    idx = np.array([[0], [1], [2], [3], [4], [5], [0], [2]], np.int32)
    dn = SDN((), (0,), (0,))
    for op in ("max", "min"):
        jax_fn, comp = SCATTER_OPS[op]
        out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn), x, idx, u)
        assert_same(out, jax.jit(lambda a, i, v: jax_fn(a, i, v, dn, mode=M.FILL_OR_DROP))(x, idx, u))


def test_scatter_skips_whole_out_of_bounds_windows():
    # Windows of 3 at starts -3, 0, 8, 9, 20 of a [10] array: only start 0 fits (XLA drops the others whole).
    x = np.arange(10, dtype=np.float32)
    idx = np.array([[-3], [0], [8], [9], [20]], np.int32)
    u = np.ones((5, 3), np.float32)
    out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, lambda a, w: a + w, update_window_dims=[1],
                                                   scatter_dims_to_operand_dims=[0], index_vector_dim=1), x, idx, u)
    assert_same(out, np.array([1, 2, 3, 3, 4, 5, 6, 7, 8, 9], np.float32))


@pytest.mark.parametrize("ivd", [0, 1])
def test_scatter_index_vector_dim_not_last(rng, ivd):
    x = random_array(rng, (7, 8, 3), np.float32)
    idx = indices_in(rng, (5, 3, 2), -1, 8)
    u = random_array(rng, (5, 3, 2, 3), np.float32)
    dn = SDN((2, 3), (0,), (0, 1))
    out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, lambda a, w: a + w, ScatterDimensionNumbers(
        update_window_dims=(2, 3), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0, 1),
        index_vector_dim=ivd)), x, np.moveaxis(idx, -1, ivd), u)
    assert_close(out, np.asarray(jax.jit(lambda a, i, v: lax.scatter_add(a, i, v, dn, mode=M.FILL_OR_DROP))(x, idx, u)))


def test_scatter_batching_dim_with_index_vector_dim_first(rng):
    x = random_array(rng, (4, 6, 3), np.float32)
    idx = indices_in(rng, (1, 4, 2), -1, 6)  # vectors along dim 0, batching along dim 1
    u = random_array(rng, (4, 2, 3), np.float32)
    out = run_builder(lambda b, p, i, v: b.scatter(
        p, i, v, lambda a, w: a + w, update_window_dims=[2], inserted_window_dims=[1],
        scatter_dims_to_operand_dims=[1], operand_batching_dims=[0], scatter_indices_batching_dims=[1],
        index_vector_dim=0), x, idx, u)
    dn = SDN((2,), (1,), (1,), (0,), (0,))
    want = jax.jit(lambda a, i, v: lax.scatter_add(a, i, v, dn, mode=M.FILL_OR_DROP))(x, np.moveaxis(idx, 0, -1), u)
    assert_close(out, np.asarray(want))


def test_scatter_apply_custom_computation(rng):
    # jax's scatter_apply: a computation ignoring the update, applied once per (duplicate) index.
    x = random_array(rng, (6, 3), np.float32)
    idx = np.array([[1], [1], [4], [-1], [1], [9]], np.int32)
    dn = SDN((1,), (0,), (0,))

    def comp(a, w):
        b = a.builder
        return b.add(b.mul(a, b.constant(np.float32(2))), b.constant(np.float32(1)))

    out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn), x, idx, np.zeros((6, 3), np.float32))
    want = jax.jit(lambda a, i: lax.scatter_apply(a, i, lambda t: t * 2 + 1, dn, update_shape=(6, 3),
                                                  mode=M.FILL_OR_DROP))(x, idx)
    assert_close(out, np.asarray(want))


def test_scatter_low_precision_add_rounds_per_update(rng):
    # bf16 with many duplicates: each update is added in f32 and rounded (the rounds path), as XLA CPU does.
    x = random_array(rng, (4,), ml_dtypes.bfloat16)
    u = random_array(rng, (300,), ml_dtypes.bfloat16)
    idx = indices_in(rng, (300, 1), 0, 3)
    dn = SDN((), (0,), (0,))
    out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, lambda a, w: a + w, dn), x, idx, u)
    assert_same(out, jax.jit(lambda a, i, v: lax.scatter_add(a, i, v, dn, mode=M.FILL_OR_DROP))(x, idx, u))


def build_scatter(shape, idx_shape, upd_shapes, dtypes, comp, **dn):
    """A module scattering N updates into N inputs (parameters: inputs, indices, updates)."""
    b = XlaBuilder("scatter")
    names = {np.dtype(np.float32): "f32", np.dtype(np.int32): "s32", np.dtype(np.float64): "f64"}
    dims = lambda s: ",".join(map(str, s))  # noqa: E731
    xs = [b.parameter(k, f"{names[np.dtype(t)]}[{dims(shape)}]") for k, t in enumerate(dtypes)]
    i = b.parameter(len(dtypes), f"s32[{dims(idx_shape)}]")
    us = [b.parameter(len(dtypes) + 1 + k, f"{names[np.dtype(t)]}[{dims(s)}]") for k, (t, s) in
          enumerate(zip(dtypes, upd_shapes))]
    out = b.scatter(xs if len(xs) > 1 else xs[0], i, us if len(us) > 1 else us[0], comp, **dn)
    return b.build(list(out) if isinstance(out, tuple) else out)


def test_scatter_non_commutative_order_matches_xla():
    # update = 3*current - update; overlapping windows with the window dimension first in the updates:
    # XLA applies scatter index by scatter index, which the result depends on.
    def comp(a, v):
        b = a.builder
        return b.sub(b.mul(a, b.constant(np.float32(3))), v)

    module = build_scatter((6,), (4, 1), [(3, 4)], [np.float32], comp, update_window_dims=[0],
                           scatter_dims_to_operand_dims=[0], index_vector_dim=1)
    args = (np.arange(6, dtype=np.float32), np.array([[0], [1], [2], [1]], np.int32),
            np.arange(12, dtype=np.float32).reshape(3, 4))
    assert_same(execute(module, *args)[0], run_xla(module, *args)[0])
    replace = build_scatter((6,), (4, 1), [(3, 4)], [np.float32], lambda a, v: v, update_window_dims=[0],
                            scatter_dims_to_operand_dims=[0], index_vector_dim=1)
    assert_same(execute(replace, *args)[0], run_xla(replace, *args)[0])


def test_variadic_scatter_matches_xla(rng):
    # (value, index) pairs keeping the larger value (ties: smaller index): a general two-output computation.
    def argmax(v0, i0, v1, i1):
        b = v0.builder
        take = b.or_(b.gt(v1, v0), b.and_(b.eq(v1, v0), b.lt(i1, i0)))
        return b.select(take, v1, v0), b.select(take, i1, i0)

    dn = dict(update_window_dims=[1], inserted_window_dims=[0], scatter_dims_to_operand_dims=[0], index_vector_dim=1)
    module = build_scatter((5, 3), (12, 1), [(12, 3), (12, 3)], [np.float32, np.int32], argmax, **dn)
    args = (random_array(rng, (5, 3), np.float32), np.arange(15, dtype=np.int32).reshape(5, 3),
            indices_in(rng, (12, 1), -1, 5), np.round(random_array(rng, (12, 3), np.float32)),
            rng.integers(0, 100, (12, 3)).astype(np.int32))
    for got, want in zip(execute(module, *args), run_xla(module, *args)):
        assert_same(got, want)
    # Variadic add/replace per component takes the vectorized path; same answer as XLA.
    module2 = build_scatter((5, 3), (12, 1), [(12, 3), (12, 3)], [np.float32, np.int32],
                            lambda a0, a1, u0, u1: (a0 + u0, u1), **dn)
    for got, want in zip(execute(module2, *args), run_xla(module2, *args)):
        assert_same(got, want)


def test_scatter_non_elementwise_region_slow_path(rng):
    # A region with a reshape is applied per element (documented slow path); still XLA's answer.
    def comp(a, v):
        b = a.builder
        return b.reshape(b.add(b.reshape(a, [1]), b.reshape(v, [1])), [])

    x = random_array(rng, (6, 2), np.float32)
    idx = indices_in(rng, (5, 1), -1, 6)
    u = random_array(rng, (5, 2), np.float32)
    dn = SDN((1,), (0,), (0,))
    out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn), x, idx, u)
    assert_close(out, np.asarray(jax.jit(lambda a, i, v: lax.scatter_add(a, i, v, dn, mode=M.FILL_OR_DROP))(x, idx, u)))


def test_scatter_stablehlo_spec_example():
    x = np.arange(1, 49, dtype=np.int64).reshape(2, 3, 4, 2)
    idx = np.array([[[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
                    [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]]], np.int64)
    u = np.ones((2, 2, 3, 2, 2), np.int64)
    out = run_builder(lambda b, p, i, v: b.scatter(
        p, i, v, lambda a, w: a + w, update_window_dims=[3, 4], inserted_window_dims=[1], input_batching_dims=[0],
        scatter_indices_batching_dims=[1], scatter_dims_to_operand_dims=[2, 1], index_vector_dim=3), x, idx, u)
    want = [[[[3, 4], [6, 7], [6, 7], [7, 8]], [[9, 10], [11, 12], [15, 16], [17, 18]],
             [[17, 18], [19, 20], [22, 23], [24, 25]]],
            [[[25, 26], [28, 29], [30, 31], [31, 32]], [[35, 36], [38, 39], [38, 39], [39, 40]],
             [[41, 42], [44, 45], [46, 47], [47, 48]]]]
    assert_same(out, np.array(want, np.int64))


def test_scatter_unique_indices_and_large_inputs(rng):
    x = random_array(rng, (1000, 8), np.float32)
    idx = rng.permutation(1000)[:600].astype(np.int32)[:, None]
    u = random_array(rng, (600, 8), np.float32)
    dn = SDN((1,), (0,), (0,))
    for op in ("replace", "add"):
        jax_fn, comp = SCATTER_OPS[op]
        out = run_builder(lambda b, p, i, v: b.scatter(p, i, v, comp, dn, indices_are_sorted=False,
                                                       unique_indices=True), x, idx, u)
        assert_same(out, jax.jit(lambda a, i, v: jax_fn(a, i, v, dn, unique_indices=True,
                                                        mode=M.FILL_OR_DROP))(x, idx, u))


def test_jax_programs_import_and_run(rng):
    # jax's own gather/scatter (default modes, with its clamping/masking ops) through the StableHLO importer.
    from interop import import_jax

    def f(x, i, u):
        return (x[i] * 2, x.at[i].get(mode="fill", fill_value=-1.0), x.at[i].add(u), x.at[i].set(u),
                x.at[i].max(u, mode="drop"), x.at[i].mul(u, mode="clip"), lax.dynamic_slice(x, (i[0], i[4]), (2, 2)),
                lax.dynamic_update_slice(x, u[:2], (i[3], i[2])))

    x = random_array(rng, (6, 3), np.float32)
    i = np.array([0, 5, -1, 7, 2], np.int32)
    u = random_array(rng, (5, 3), np.float32)
    module = import_jax(f, x, i, u)
    for got, want in zip(execute(module, x, i, u), jax.jit(f)(x, i, u)):
        assert_close(got, np.asarray(want))


# ----------------------------------------------------------------------------
# dynamic_slice / dynamic_update_slice
# ----------------------------------------------------------------------------


DS_DTYPES = [np.float32, ml_dtypes.bfloat16, np.int64, np.uint16, np.bool_, np.complex128]


@pytest.mark.parametrize("dtype", DS_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("starts,sizes", [((2, 1), (2, 2)), ((-3, 9), (3, 2)), ((4, 4), (0, 5)), ((1, 0), (5, 5)),
                                          ((100, -100), (1, 1))])
def test_dynamic_slice_matches_jax(rng, dtype, starts, sizes):
    x = random_array(rng, (5, 5), dtype, special=True)
    s = [np.int32(v) for v in starts]
    out = run_builder(lambda b, p, i, j: b.dynamic_slice(p, [i, j], sizes), x, *s)
    assert_same(out, jax.jit(lambda a, i, j: lax.dynamic_slice(a, (i, j), sizes, allow_negative_indices=False))(x, *s))


@pytest.mark.parametrize("dtype", DS_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("starts,upd", [((1, 1), (3, 2)), ((-3, 9), (2, 2)), ((4, 4), (0, 3)), ((0, 0), (5, 5)),
                                        ((3, -1), (3, 4))])
def test_dynamic_update_slice_matches_jax(rng, dtype, starts, upd):
    x = random_array(rng, (5, 5), dtype, special=True)
    u = random_array(rng, upd, dtype, special=True)
    s = [np.int32(v) for v in starts]
    out = run_builder(lambda b, p, v, i, j: b.dynamic_update_slice(p, v, [i, j]), x, u, *s)
    assert_same(out, jax.jit(lambda a, v, i, j: lax.dynamic_update_slice(a, v, (i, j), allow_negative_indices=False))(x, u, *s))


@pytest.mark.parametrize("index_dtype", [np.int8, np.uint8, np.int64, np.uint64])
def test_dynamic_slice_index_types(rng, index_dtype):
    x = random_array(rng, (6, 4, 3), np.float32)
    starts = [index_dtype(v) for v in (5, 1, 2)]
    if index_dtype == np.uint64:
        starts[0] = np.uint64(np.iinfo(np.uint64).max)
    out = run_builder(lambda b, p, i, j, k: b.dynamic_slice(p, [i, j, k], [2, 3, 2]), x, *starts)
    assert_same(out, jax.jit(lambda a, *s: lax.dynamic_slice(a, s, (2, 3, 2)))(x, *starts))
    u = random_array(rng, (3, 2, 3), np.float32)
    out = run_builder(lambda b, p, v, i, j, k: b.dynamic_update_slice(p, v, [i, j, k]), x, u, *starts)
    assert_same(out, jax.jit(lambda a, v, *s: lax.dynamic_update_slice(a, v, s))(x, u, *starts))


def test_dynamic_ops_on_scalars():
    x = np.float32(2.5)
    assert_same(run_builder(lambda b, p: b.dynamic_slice(p, [], []), x), x)
    assert_same(run_builder(lambda b, p, v: b.dynamic_update_slice(p, v, []), x, np.float32(-1)), np.float32(-1))


def test_seed_dynamic_slice_examples():
    a = np.array([0.0, 1.0, 2.0, 3.0, 4.0], np.float32)
    out = run_builder(lambda b, p, s: b.dynamic_slice(p, [s], [2]), a, np.int32(2))
    assert_same(out, np.array([2.0, 3.0], np.float32))
    bm = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = run_builder(lambda b, p, s, t: b.dynamic_slice(p, [s, t], [2, 2]), bm, np.int32(2), np.int32(1))
    assert_same(out, np.array([[7.0, 8.0], [10.0, 11.0]], np.float32))
    # StableHLO example: starts (-1, 3) of a 4x4 clamp to (0, 2).
    op = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]], np.int32)
    out = run_builder(lambda b, p, s, t: b.dynamic_slice(p, [s, t], [2, 2]), op, np.int64(-1), np.int64(3))
    assert_same(out, np.ones((2, 2), np.int32))


def test_seed_dynamic_update_slice_examples():
    a = np.array([0.0, 1.0, 2.0, 3.0, 4.0], np.float32)
    out = run_builder(lambda b, p, u, s: b.dynamic_update_slice(p, u, [s]), a, np.array([5.0, 6.0], np.float32),
                      np.int32(2))
    assert_same(out, np.array([0.0, 1.0, 5.0, 6.0, 4.0], np.float32))
    bm = np.arange(12, dtype=np.float32).reshape(4, 3)
    u = np.array([[12.0, 13.0], [14.0, 15.0], [16.0, 17.0]], np.float32)
    out = run_builder(lambda b, p, v, s, t: b.dynamic_update_slice(p, v, [s, t]), bm, u, np.int32(1), np.int32(1))
    assert_same(out, np.array([[0, 1, 2], [3, 12, 13], [6, 14, 15], [9, 16, 17]], np.float32))
    # StableHLO example: starts (-1, 3) clamp to (0, 2).
    op = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]], np.int32)
    out = run_builder(lambda b, p, v, s, t: b.dynamic_update_slice(p, v, [s, t]), op, np.ones((2, 2), np.int32),
                      np.int64(-1), np.int64(3))
    assert_same(out, np.ones((4, 4), np.int32))


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def _gather_error(shape, idx_shape, message, index_type="s32", **kw):
    b = XlaBuilder("bad")
    x = b.parameter(0, f"f32[{','.join(map(str, shape))}]")
    i = b.parameter(1, f"{index_type}[{','.join(map(str, idx_shape))}]")
    with pytest.raises(BuilderError, match=message):
        b.gather(x, i, **kw)


GOOD_G = dict(offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0], slice_sizes=[1, 4])
BATCHED_G = dict(collapsed_slice_dims=[], operand_batching_dims=[0], start_indices_batching_dims=[0],
                 start_index_map=[1])

GATHER_ERRORS = [
    ({}, "f32", "start_indices must have an integral element type"),
    ({"index_vector_dim": 3}, "s32", r"index_vector_dim 3 must be in \[0, 2\]"),
    ({"offset_dims": [2]}, "s32", r"offset_dims \[2\] has dimension 2 out of range \[0, 2\)"),
    ({"offset_dims": [1, 1], "collapsed_slice_dims": []}, "s32", "must not repeat"),
    ({"collapsed_slice_dims": [2]}, "s32", r"collapsed_slice_dims \[2\] has dimension 2 out of range"),
    ({"start_index_map": [0, 1]}, "s32", r"start_index_map \[0, 1\] has 2 entries but the index vectors .* have 1"),
    ({"start_index_map": [2]}, "s32", r"start_index_map \[2\] has dimension 2 out of range"),
    ({"slice_sizes": [1]}, "s32", r"slice_sizes \[1\] must have one entry per operand dimension"),
    ({"slice_sizes": [1, 5]}, "s32", r"slice size 5 for operand dimension 1 must be in \[0, 4\]"),
    ({"slice_sizes": [2, 4]}, "s32", "dimension 0 is in collapsed_slice_dims so its slice size must be at most 1"),
    ({"collapsed_slice_dims": []}, "s32", "has rank 2, but offset_dims"),
    ({"operand_batching_dims": [0], "start_indices_batching_dims": [0]}, "s32",
     r"collapsed_slice_dims \[0\] and operand_batching_dims \[0\] must be disjoint"),
    ({"collapsed_slice_dims": [], "operand_batching_dims": [0], "start_indices_batching_dims": [0]}, "s32",
     r"start_index_map \[0\] and operand_batching_dims \[0\] must be disjoint"),
    ({**BATCHED_G, "start_indices_batching_dims": [1]}, "s32", "must not contain index_vector_dim 1"),
    ({**BATCHED_G, "start_indices_batching_dims": [2]}, "s32",
     r"start_indices_batching_dims \[2\] has dimension 2 out of range \[0, 2\)"),
    ({**BATCHED_G, "start_indices_batching_dims": []}, "s32", "must have the same length"),
    (BATCHED_G, "s32", "operand batching dimension 0 has size 5 but the indices' batching dimension 0 has size 3"),
    ({**BATCHED_G, "operand_batching_dims": [1, 0], "start_indices_batching_dims": [0, 0], "offset_dims": []},
     "s32", r"operand_batching_dims \[1, 0\] must be sorted"),
]


@pytest.mark.parametrize("changes,index_type,message", GATHER_ERRORS)
def test_gather_errors(changes, index_type, message):
    _gather_error((5, 4), (3, 1), message, index_type, **{**GOOD_G, **changes})


def test_gather_builder_argument_errors():
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[5,4]")
    i = b.parameter(1, "s32[3,1]")
    with pytest.raises(BuilderError, match="unknown dimension number 'offset_dim'"):
        b.gather(x, i, offset_dim=[1], slice_sizes=[1, 4])
    with pytest.raises(BuilderError, match="slice_sizes must be given"):
        b.gather(x, i, offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0])
    with pytest.raises(BuilderError, match="XlaBuilder.gather: offset_dims must be a list of ints"):
        b.gather(x, i, offset_dims=["a"], slice_sizes=[1, 4])
    with pytest.raises(BuilderError, match="dimension_numbers must be a GatherDimensionNumbers"):
        b.gather(x, i, 42, [1, 4])


GOOD_S = dict(update_window_dims=[1], inserted_window_dims=[0], scatter_dims_to_operand_dims=[0])

SCATTER_ERRORS = [
    ({}, (3, 4), "f32", "s32", "scatter_indices must have an integral element type"),
    ({}, (3, 4), "s32", "f64", "update #0 f64.* must have input #0's element type f32"),
    ({}, (3, 4, 1), "s32", "f32", r"updates f32\[3,4,1\].* must have rank 2"),
    ({}, (3, 5), "s32", "f32", "update window dimension 1 has size 5, more than the size 4"),
    ({}, (2, 4), "s32", "f32", "update scatter dimension 0 has size 2 but the matching dimension"),
    ({"update_window_dims": [2]}, (3, 4), "s32", "f32", r"update_window_dims \[2\] has dimension 2 out of range"),
    ({"inserted_window_dims": [1, 0]}, (3, 4), "s32", "f32", "must be sorted in ascending order"),
    ({"inserted_window_dims": []}, (3, 4), "s32", "f32", "have rank 2, but update_window_dims"),
    ({"scatter_dims_to_operand_dims": [0, 1]}, (3, 4), "s32", "f32", "has 2 entries but the index vectors"),
    ({"index_vector_dim": 5}, (3, 4), "s32", "f32", r"index_vector_dim 5 must be in \[0, 2\]"),
    ({"inserted_window_dims": [], "input_batching_dims": [0], "scatter_indices_batching_dims": [0],
      "scatter_dims_to_operand_dims": [0]}, (3, 4), "s32", "f32",
     r"scatter_dims_to_operand_dims \[0\] and input_batching_dims \[0\] must be disjoint"),
]


@pytest.mark.parametrize("changes,upd_shape,index_type,upd_type,message", SCATTER_ERRORS)
def test_scatter_errors(changes, upd_shape, index_type, upd_type, message):
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[5,4]")
    i = b.parameter(1, f"{index_type}[3,1]")
    u = b.parameter(2, f"{upd_type}[{','.join(map(str, upd_shape))}]")
    with pytest.raises(BuilderError, match=message):
        b.scatter(x, i, u, lambda a, w: a + w, **{**GOOD_S, **changes})


def test_scatter_computation_and_operand_count_errors():
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[5,4]")
    y = b.parameter(1, "s32[5,4]")
    i = b.parameter(2, "s32[3,1]")
    u = b.parameter(3, "f32[3,4]")
    with pytest.raises(BuilderError, match="2 operands but 1 updates"):
        b.scatter([x, y], i, u, lambda a, c, v, w: (a, c), **GOOD_S)
    with pytest.raises(BuilderError, match="update_computation takes 1 parameters but must take 2"):
        b.scatter(x, i, u, lambda a: a, **GOOD_S)
    with pytest.raises(BuilderError, match=r"update computation returns \(s32\[\]\) but must return \(f32\[\]\)"):
        b.scatter(x, i, u, lambda a, w: a.builder.constant(np.int32(0)), **GOOD_S)
    with pytest.raises(BuilderError, match="all inputs must have the same dimensions"):
        z = b.parameter(4, "s32[5,3]")
        b.scatter([x, z], i, [u, u], lambda a, c, v, w: (a, c), **GOOD_S)


DS_ERRORS = [
    (lambda b, x, s, f: b.dynamic_slice(x, [s], [2, 2]), "needs 2 start indices"),
    (lambda b, x, s, f: b.dynamic_slice(x, [s, f], [2, 2]), "start index #1 must be an integer"),
    (lambda b, x, s, f: b.dynamic_slice(x, [s, b.constant(np.array(0, np.int64))], [2, 2]), "must all have the same type"),
    (lambda b, x, s, f: b.dynamic_slice(x, [s, b.constant(np.array([0], np.int32))], [2, 2]),
     "start index #1 must be a scalar"),
    (lambda b, x, s, f: b.dynamic_slice(x, [s, s], [2, 6]), r"slice size 6 for operand dimension 1 must be in \[0, 5\]"),
    (lambda b, x, s, f: b.dynamic_slice(x, [s, s], [2]), "slice_sizes .* must have one entry per operand dimension"),
    (lambda b, x, s, f: b.dynamic_update_slice(x, b.constant(np.zeros((2, 2), np.float64)), [s, s]),
     "must have the operand's element type f32"),
    (lambda b, x, s, f: b.dynamic_update_slice(x, b.constant(np.zeros((4, 6), np.float32)), [s, s]),
     "update dimension 1 has size 6, more than the operand's 5"),
    (lambda b, x, s, f: b.dynamic_update_slice(x, b.constant(np.zeros((2,), np.float32)), [s]),
     "must have the operand's rank 2"),
    (lambda b, x, s, f: b.dynamic_update_slice(x, x, [s]), "needs 2 start indices"),
]


@pytest.mark.parametrize("build,message", DS_ERRORS)
def test_dynamic_slice_errors(build, message):
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[4,5]")
    s = b.parameter(1, "s32[]")
    f = b.parameter(2, "f32[]")
    with pytest.raises(BuilderError, match=message):
        build(b, x, s, f)


BAD_IR = [
    ('hlo.gather %0, %1 {offset_dims = array<i64: 1>, collapsed_slice_dims = array<i64: 0>, '
     'start_index_map = array<i64: 0>, index_vector_dim = 1 : i64, slice_sizes = array<i64: 1, 4>} '
     ': (tensor<5x4xf32>, tensor<3x1xi32>) -> tensor<3x5xf32>', r"shape inference gives f32\[3,4\]"),
    ('hlo.gather %0, %1 {offset_dims = array<i64: 1>, collapsed_slice_dims = array<i64: 0>, '
     'start_index_map = array<i64: 0>, index_vector_dim = 1 : i64, slice_sizes = array<i64: 2, 4>} '
     ': (tensor<5x4xf32>, tensor<3x1xi32>) -> tensor<3x4xf32>', "slice size must be at most 1"),
    ('hlo.dynamic_slice %0, %2, %2 {slice_sizes = array<i64: 2, 2>} : '
     '(tensor<5x4xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>', r"shape inference gives f32\[2,2\]"),
    ('hlo.dynamic_update_slice %0, %0, %2 : (tensor<5x4xf32>, tensor<5x4xf32>, tensor<i32>) -> tensor<5x4xf32>',
     "needs 2 start indices"),
]


@pytest.mark.parametrize("op_text,message", BAD_IR)
def test_verifier_rejects_bad_ir(op_text, message):
    text = ("func.func @main(%0: tensor<5x4xf32>, %1: tensor<3x1xi32>, %2: tensor<i32>) -> () {\n"
            f"  %3 = {op_text}\n  func.return\n}}")
    with pytest.raises(HloVerifyError, match=message):
        xla_dialect.parse_module(text)


SCATTER_TEXT = """
builtin.module {
  func.func @main(%x: tensor<5x4xf32>, %i: tensor<3x1xi32>, %u: tensor<3x4xf32>) -> tensor<5x4xf32> {
    %r = hlo.scatter %x, %i, %u {update_window_dims = array<i64: 1>, inserted_window_dims = array<i64: 0>, scatter_dims_to_operand_dims = array<i64: 0>, index_vector_dim = 1 : i64} : (tensor<5x4xf32>, tensor<3x1xi32>, tensor<3x4xf32>) -> tensor<5x4xf32> {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = hlo.add %a, %b : (tensor<f32>, tensor<f32>) -> tensor<f32>
      hlo.return %c : tensor<f32>
    }
    func.return %r : tensor<5x4xf32>
  }
}
"""


def test_parsed_scatter_runs_and_verifier_checks_the_region():
    module = xla_dialect.parse_module(SCATTER_TEXT)
    x = np.zeros((5, 4), np.float32)
    (got,) = execute(module, x, np.array([[1], [1], [7]], np.int32), np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(got, np.array([[0] * 4, [2] * 4, [0] * 4, [0] * 4, [0] * 4], np.float32))
    with pytest.raises(HloVerifyError, match=r"update computation takes \(f64\[\], f64\[\]\) but must take "
                                             r"\(f32\[\], f32\[\]\)"):
        xla_dialect.parse_module(SCATTER_TEXT.replace("tensor<f32>", "tensor<f64>"))
    with pytest.raises(HloVerifyError, match="needs N >= 1 inputs"):
        xla_dialect.parse_module(SCATTER_TEXT.replace("%x, %i, %u {", "%x, %i {").replace(
            "(tensor<5x4xf32>, tensor<3x1xi32>, tensor<3x4xf32>) -> tensor<5x4xf32> {",
            "(tensor<5x4xf32>, tensor<3x1xi32>) -> tensor<5x4xf32> {"))


def test_print_parse_round_trip_of_every_indexing_op(rng):
    b = XlaBuilder("all")
    x = b.parameter(0, "f32[6,5]")
    i = b.parameter(1, "s32[3,2]")
    s = b.parameter(2, "s64[]")
    g = b.gather(x, i, offset_dims=[1], collapsed_slice_dims=[0], start_index_map=[0, 1], slice_sizes=[1, 3],
                 indices_are_sorted=True)
    # Distinct inputs: XLA CPU (jaxlib 0.10) computes a variadic scatter wrongly when one buffer is passed as
    # two inputs (the outputs share it); the executor gives the specified result either way.
    y = b.scatter([x, b.neg(x)], i, [g, g], lambda a, c, v, w: (a + v, w), update_window_dims=[1],
                  inserted_window_dims=[0], scatter_dims_to_operand_dims=[0, 1], unique_indices=True)
    d = b.dynamic_slice(y[0], [s, s], [2, 2])
    z = b.dynamic_update_slice(y[1], d, [s, s])
    module = b.build(z)
    text = str(module)
    for name in ("gather", "scatter", "dynamic_slice", "dynamic_update_slice"):
        assert f"hlo.{name} " in text
    parsed = xla_dialect.parse_module(text)
    assert parsed.is_structurally_equivalent(module)
    assert str(parsed) == text
    args = (random_array(rng, (6, 5), np.float32), np.array([[0, 0], [2, 1], [5, 2]], np.int32), np.int64(3))
    assert_same(execute(parsed, *args)[0], execute(module, *args)[0])
    assert_same(execute(module, *args)[0], run_xla(module, *args)[0])


def _bitwise_in_both_configurations(functions, x) -> None:
    """Each of ``functions`` of ``x`` gives jax.jit's bits interpreted and fused with its loops compiled."""
    import jax

    import lowering
    from interop import import_jax

    for fn in functions:
        expected = np.asarray(jax.jit(fn)(x))
        module = import_jax(fn, x)
        for options in ({"fusion": "never", "loop_compilation": "never"},
                        {"fusion": "always", "loop_compilation": "always"}):
            assert np.asarray(lowering.compile(module, **options)(x)[0]).tobytes() == expected.tobytes(), options


@pytest.mark.parametrize("combine, dtype", [("max", np.float32), ("min", np.float64)])
def test_a_scatter_max_min_of_nans_keeps_the_nan_xla_keeps(combine, dtype):
    """Long fuzz campaign (session 22): ``x.at[jnp.arange(24) % 2].max(x + 2)`` with NaNs of both signs among the
    updates kept the first NaN a target met (NumPy's ``maximum.at``) interpreted, and XLA's choice -- the update
    computation's max -- compiled and in jax.jit: another NaN's sign. With NaNs among the updates the interpreter
    applies them with the region's definition, as the compiled paths do. Straight-line and in a loop."""
    import jax
    import jax.numpy as jnp

    bits = np.array([0x3F000000, 0xBA545E21, 0xC2C80000, 0xFF800001, 0, 0x7F800001, 0x7FC00005, 0xFFC00003,
                     0x3A83126F, 0x7F800001, 0x42B20000, 0xFFC00001], np.uint32)
    x = bits.view(np.float32).astype(dtype)
    x = np.concatenate([x, x[::-1]])

    def straight(a):
        return getattr(a.at[jnp.arange(24) % 2], combine)(a + 2)

    def looped(a):
        return jax.lax.fori_loop(0, 2, lambda i, v: getattr(v.at[jnp.arange(24) % 3], combine)(v[::-1] + 2), a)

    _bitwise_in_both_configurations([straight, looped], x)


@pytest.mark.parametrize("combine", ["max", "min"])
def test_a_scatter_max_min_keeps_the_denormals_it_does_not_touch(combine):
    """Long fuzz campaign (session 20): ``x.at[..., jnp.arange(64) % 2].max(x)`` turned the f32 denormals of the
    columns it does not touch into +0 (its signed-zero fix-up read them as zeros under the flush mode); XLA leaves
    them. Straight-line and in a loop, every configuration."""
    import jax
    import jax.numpy as jnp

    x = np.array([[1.0, 2.0, 3.0, -4.0, 5.0, 3.9e-39, -2e-39, 0.5], [3e-39, -0.0, 0.0, -3e-39, 1, 2, 3, 4]],
                 np.float32)

    def straight(a):
        return getattr(a.at[..., jnp.arange(8) % 2], combine)(a)

    def looped(a):
        return jax.lax.fori_loop(0, 2, lambda i, v: getattr(v.at[..., jnp.arange(8) % 3], combine)(v[:, ::-1]), a)

    _bitwise_in_both_configurations([straight, looped], x)
