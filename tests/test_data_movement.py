"""Data-movement ops: broadcast, broadcast_in_dim, reshape/collapse, transpose, slice, concatenate, pad, rev.

Every op is compared with ``jax.jit(jax.lax.<op>)`` bit for bit (data movement
never changes a value: -0.0, NaN and Inf must come through unchanged), and
every example of XLA's operation semantics' sections for these ops is checked literally.
"""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import xla_dialect
from xla_dialect import XlaBuilder
from xla_dialect.errors import BuilderError, HloVerifyError

from helpers import random_array, run_builder

DTYPES = [np.float32, np.float64, ml_dtypes.bfloat16, np.int32, np.uint8, np.bool_, np.complex64]
DTYPE_IDS = ["f32", "f64", "bf16", "s32", "u8", "pred", "c64"]


def assert_same(actual, expected):
    """Same shape, dtype and bytes (so -0.0 and NaN payloads count)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes(), (
        f"values differ:\n{actual}\n!=\n{expected}")


def check(build, jax_fn, *arrays):
    """Run ``build`` on the executor and ``jax_fn`` under jax.jit; compare bit for bit."""
    assert_same(run_builder(build, *arrays), jax.jit(jax_fn)(*arrays))


def with_dtypes(cases):
    """``dtype`` and each case's values, for every case with every dtype of DTYPES. The kernels of these ops
    move elements whatever their type (NumPy views, indexing, np.full), so the default run has the first case
    with every dtype and each other case (the kernels' branches: views, empty arrays, negative padding, ...)
    with one dtype, every dtype in turn; the other pairs are marked slow."""
    params = []
    for i, case in enumerate(cases):
        for j, (dtype, dtype_id) in enumerate(zip(DTYPES, DTYPE_IDS)):
            default = i == 0 or j == i % len(DTYPES)
            params.append(pytest.param(dtype, *case, id=f"{dtype_id}-case{i}",
                                       marks=() if default else pytest.mark.slow))
    return params


# ----------------------------------------------------------------------------
# broadcast / broadcast_in_dim
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,shape,sizes", with_dtypes([((), (2, 3)), ((3,), ()), ((2, 0), (4,)), ((2, 3), (0, 2)),
                                                          ((1, 2), (3,))]))
def test_broadcast_matches_jax(rng, dtype, shape, sizes):
    x = random_array(rng, shape, dtype, special=True)
    check(lambda b, p: b.broadcast(p, sizes), lambda a: lax.broadcast(a, sizes), x)


BROADCAST_IN_DIM_CASES = [
    ((), (2, 3), ()),
    ((3,), (2, 3), (1,)),
    ((3,), (3, 2), (0,)),
    ((1, 3), (4, 2, 3), (1, 2)),
    ((2, 1), (2, 5), (0, 1)),
    ((1, 1), (3, 4), (0, 1)),
    ((0,), (3, 0), (1,)),
    ((2, 3), (2, 3), (0, 1)),
]


@pytest.mark.parametrize("dtype,shape,out,bdims", with_dtypes(BROADCAST_IN_DIM_CASES))
def test_broadcast_in_dim_matches_jax(rng, dtype, shape, out, bdims):
    x = random_array(rng, shape, dtype, special=True)
    check(lambda b, p: b.broadcast_in_dim(p, out, bdims), lambda a: lax.broadcast_in_dim(a, out, bdims), x)


def test_seed_broadcast_example():
    # Seed: a scalar f32 2.0 broadcast with broadcast_sizes {2, 3} is f32[2,3] of 2.0.
    out = run_builder(lambda b, p: b.broadcast(p, [2, 3]), np.float32(2.0))
    assert_same(out, np.full((2, 3), 2.0, np.float32))


def test_results_are_writable_and_do_not_alias_the_arguments():
    # Kernels return views (read-only broadcasts, transposes/slices of the inputs); results handed out are not.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for build in (lambda b, p: b.broadcast_in_dim(b.slice(p, [0, 0], [1, 4], [1, 1]), [3, 4], [0, 1]),
                  lambda b, p: b.transpose(p, [1, 0]), lambda b, p: b.slice(p, [1, 0], [3, 4], [1, 2]),
                  lambda b, p: b.rev(p, [0]), lambda b, p: b.reshape(p, [12]),
                  lambda b, p: p):  # (the argument itself: an array that owns its memory)
        out = run_builder(build, x)
        assert out.flags.writeable
        assert not np.may_share_memory(out, x)
        out += 1
    np.testing.assert_array_equal(x, np.arange(12, dtype=np.float32).reshape(3, 4))


# ----------------------------------------------------------------------------
# reshape / collapse
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,shape,new", with_dtypes([((2, 3, 4), (24,)), ((2, 3, 4), (6, 4)), ((24,), (2, 3, 4)),
                                                        ((), (1, 1)), ((1, 1), ()), ((0, 3), (3, 0, 5)),
                                                        ((4, 1), (1, 4))]))
def test_reshape_matches_jax(rng, dtype, shape, new):
    x = random_array(rng, shape, dtype, special=True)
    check(lambda b, p: b.reshape(p, new), lambda a: lax.reshape(a, new), x)


@pytest.mark.parametrize("dims,new", [((1, 2, 0), (24,)), ((2, 0, 1), (4, 6)), ((0, 1, 2), (8, 3)), ((2, 1, 0), (2, 2, 6))])
def test_reshape_with_dimensions_matches_jax(rng, dims, new):
    x = random_array(rng, (4, 2, 3), np.float32, special=True)
    check(lambda b, p: b.reshape(p, dims, new), lambda a: lax.reshape(a, new, dims), x)


SEED_V = np.array([[[10, 11, 12], [15, 16, 17]],
                   [[20, 21, 22], [25, 26, 27]],
                   [[30, 31, 32], [35, 36, 37]],
                   [[40, 41, 42], [45, 46, 47]]], np.float32)


@pytest.mark.parametrize("dims,new,expected", [
    ((0, 1, 2), (24,), [10, 11, 12, 15, 16, 17, 20, 21, 22, 25, 26, 27, 30, 31, 32, 35, 36, 37, 40, 41, 42, 45, 46, 47]),
    ((0, 1, 2), (8, 3), [[10, 11, 12], [15, 16, 17], [20, 21, 22], [25, 26, 27],
                         [30, 31, 32], [35, 36, 37], [40, 41, 42], [45, 46, 47]]),
    ((1, 2, 0), (24,), [10, 20, 30, 40, 11, 21, 31, 41, 12, 22, 32, 42, 15, 25, 35, 45, 16, 26, 36, 46, 17, 27, 37, 47]),
    ((1, 2, 0), (8, 3), [[10, 20, 30], [40, 11, 21], [31, 41, 12], [22, 32, 42],
                         [15, 25, 35], [45, 16, 26], [36, 46, 17], [27, 37, 47]]),
    ((1, 2, 0), (2, 6, 2), [[[10, 20], [30, 40], [11, 21], [31, 41], [12, 22], [32, 42]],
                            [[15, 25], [35, 45], [16, 26], [36, 46], [17, 27], [37, 47]]]),
])
def test_seed_reshape_examples(dims, new, expected):
    out = run_builder(lambda b, p: b.reshape(p, dims, new), SEED_V)
    assert_same(out, np.array(expected, np.float32))


def test_seed_reshape_scalar_special_cases():
    # Reshape(f32[1x1] {{5}}, {0,1}, {}) == 5 and Reshape(5, {}, {1,1}) == f32[1x1] {{5}}.
    assert_same(run_builder(lambda b, p: b.reshape(p, [0, 1], []), np.array([[5]], np.float32)), np.float32(5))
    assert_same(run_builder(lambda b, p: b.reshape(p, [], [1, 1]), np.float32(5)), np.array([[5]], np.float32))


SEED_V12 = [[10, 11, 12], [15, 16, 17], [20, 21, 22], [25, 26, 27], [30, 31, 32], [35, 36, 37], [40, 41, 42], [45, 46, 47]]
SEED_V01 = [[10, 11, 12, 15, 16, 17], [20, 21, 22, 25, 26, 27], [30, 31, 32, 35, 36, 37], [40, 41, 42, 45, 46, 47]]


@pytest.mark.parametrize("dims,expected", [
    ((0, 1, 2), list(range(10, 50))),
    # XLA's operation semantics' text says the collapsed dimensions are replaced by one dimension *in their place*, and
    # XLA's XlaBuilder::Collapse does exactly that, so Collapse(v, {0,1}) is f32[8x3]. XLA's operation semantics'
    # examples print that value under "v12" and the f32[4x6] one under "v01": their labels are swapped.
    # We follow the definition (and XLA, and jax.lax.collapse, checked below).
    ((0, 1), SEED_V12),
    ((1, 2), SEED_V01),
])
def test_seed_collapse_examples(dims, expected):
    if len(expected) == 40:
        expected = [e for e in SEED_V.reshape(-1)]
    assert_same(run_builder(lambda b, p: b.collapse(p, dims), SEED_V), np.array(expected, np.float32))


@pytest.mark.parametrize("dims", [(0, 1), (1, 2), (0, 1, 2), (2, 3), (1, 2, 3)])
def test_collapse_matches_jax(rng, dims):
    x = random_array(rng, (2, 3, 0, 4) if 2 in dims and 3 in dims else (2, 3, 4, 5), np.int32)
    check(lambda b, p: b.collapse(p, dims), lambda a: lax.collapse(a, dims[0], dims[-1] + 1), x)


def test_collapse_of_one_dimension_is_the_operand():
    b = XlaBuilder("t")
    p = b.parameter(0, "f32[2,3]")
    assert b.collapse(p, [1]) is p
    assert b.collapse(p, []) is p


# ----------------------------------------------------------------------------
# transpose / rev
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,shape,perm", with_dtypes([((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)),
                                                         ((2, 0, 4), (1, 2, 0)), ((), ()), ((3,), (0,)),
                                                         ((2, 3, 4, 5), (3, 1, 0, 2))]))
def test_transpose_matches_jax(rng, dtype, shape, perm):
    x = random_array(rng, shape, dtype, special=True)
    check(lambda b, p: b.transpose(p, perm), lambda a: lax.transpose(a, perm), x)


def test_seed_transpose_is_a_reshape_with_dimensions(rng):
    # Seed: Transpose(operand, p) == Reshape(operand, p, Permute(p, operand.shape.dimensions)).
    x = random_array(rng, (2, 3, 4), np.float32)
    perm = (2, 0, 1)
    assert_same(run_builder(lambda b, p: b.transpose(p, perm), x),
                run_builder(lambda b, p: b.reshape(p, perm, [x.shape[d] for d in perm]), x))


@pytest.mark.parametrize("dtype,shape,dims", with_dtypes([((5,), (0,)), ((2, 3), (1,)), ((2, 3, 4), (0, 2)),
                                                         ((2, 3), ()), ((0, 3), (0, 1)), ((), ())]))
def test_rev_matches_jax(rng, dtype, shape, dims):
    x = random_array(rng, shape, dtype, special=True)
    check(lambda b, p: b.rev(p, dims), lambda a: lax.rev(a, dims), x)


def test_reverse_is_an_alias_of_rev():
    out = run_builder(lambda b, p: b.reverse(p, [0]), np.arange(4, dtype=np.int32))
    assert_same(out, np.array([3, 2, 1, 0], np.int32))


# ----------------------------------------------------------------------------
# slice / slice_in_dim
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,shape,start,limit,strides", with_dtypes([
    ((5,), (2,), (4,), None),
    ((4, 3), (2, 1), (4, 3), (1, 1)),
    ((7, 9), (1, 0), (7, 9), (2, 3)),
    ((7, 9), (3, 3), (3, 9), (1, 4)),
    ((6, 0), (0, 0), (6, 0), (5, 1)),
    ((), (), (), ()),
    ((2, 3, 4), (0, 1, 1), (2, 3, 4), (1, 1, 2)),
]))
def test_slice_matches_jax(rng, dtype, shape, start, limit, strides):
    x = random_array(rng, shape, dtype, special=True)
    check(lambda b, p: b.slice(p, start, limit, strides), lambda a: lax.slice(a, start, limit, strides), x)


@pytest.mark.parametrize("start,limit,stride,dim", [(1, 4, 1, 0), (0, 6, 2, 1), (2, 2, 1, 1), (0, 5, 3, 0)])
def test_slice_in_dim_matches_jax(rng, start, limit, stride, dim):
    x = random_array(rng, (5, 6), np.int32)
    check(lambda b, p: b.slice_in_dim(p, start, limit, stride, dim),
          lambda a: lax.slice_in_dim(a, start, limit, stride, dim), x)


def test_seed_slice_examples():
    a = np.array([0.0, 1.0, 2.0, 3.0, 4.0], np.float32)
    assert_same(run_builder(lambda b, p: b.slice(p, [2], [4], [1]), a), np.array([2.0, 3.0], np.float32))
    m = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert_same(run_builder(lambda b, p: b.slice(p, [2, 1], [4, 3], [1, 1]), m),
                np.array([[7.0, 8.0], [10.0, 11.0]], np.float32))


# ----------------------------------------------------------------------------
# concatenate
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,shapes,dim", with_dtypes([([(2,), (3,), (0,)], 0), ([(2, 3), (1, 3)], 0),
                                                         ([(2, 3), (2, 1), (2, 4)], 1), ([(2, 0, 3), (2, 2, 3)], 1),
                                                         ([(4,)], 0), ([(0, 2), (0, 2)], 0)]))
def test_concatenate_matches_jax(rng, dtype, shapes, dim):
    xs = [random_array(rng, s, dtype, special=True) for s in shapes]
    check(lambda b, *ps: b.concat_in_dim(ps, dim), lambda *a: lax.concatenate(a, dim), *xs)


def test_seed_concatenate_examples():
    parts = [np.array(v, np.int32) for v in ([2, 3], [4, 5], [6, 7])]
    assert_same(run_builder(lambda b, *ps: b.concat_in_dim(ps, 0), *parts), np.array([2, 3, 4, 5, 6, 7], np.int32))
    a = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
    c = np.array([[7, 8]], np.int32)
    assert_same(run_builder(lambda b, x, y: b.concat_in_dim([x, y], 0), a, c),
                np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.int32))


# ----------------------------------------------------------------------------
# pad
# ----------------------------------------------------------------------------

PAD_CASES = [
    ((3,), [(1, 2, 0)]),
    ((3,), [(0, 0, 2)]),
    ((3,), [(-1, 1, 1)]),
    ((4,), [(-2, -1, 0)]),
    ((4,), [(-4, 0, 0)]),
    ((3,), [(-5, 1, 1)]),          # all but one padding element removed
    ((2, 3), [(0, 2, 1), (1, 1, 2)]),
    ((2, 3), [(-1, 0, 3), (-2, -2, 1)]),
    ((3, 4), [(1, -3, 0), (-3, 2, 2)]),
    ((0, 2), [(1, 1, 3), (0, 0, 0)]),
    ((1,), [(0, 0, 5)]),
    ((), []),
    ((2, 3), [(0, 0, 0), (0, 0, 0)]),
    ((3,), [(-7, 3, 1)]),          # nothing of the operand survives
]


@pytest.mark.parametrize("dtype,shape,config", with_dtypes(PAD_CASES))
def test_pad_matches_jax(rng, dtype, shape, config):
    x = random_array(rng, shape, dtype, special=True)
    v = random_array(rng, (), dtype)
    check(lambda b, p, q: b.pad(p, q, config), lambda a, c: lax.pad(a, c, config), x, v)


def test_stablehlo_pad_example():
    # The StableHLO spec's pad example (XLA's operation semantics' figure shows the same kind of mixes).
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    out = run_builder(lambda b, p, q: b.pad(p, q, [(0, 2, 1), (1, 1, 2)]), x, np.int32(0))
    assert_same(out, np.array([[0, 1, 0, 0, 2, 0, 0, 3, 0],
                               [0, 0, 0, 0, 0, 0, 0, 0, 0],
                               [0, 4, 0, 0, 5, 0, 0, 6, 0],
                               [0, 0, 0, 0, 0, 0, 0, 0, 0],
                               [0, 0, 0, 0, 0, 0, 0, 0, 0]], np.int32))


@pytest.mark.parametrize("config,expected", [
    # No padding is a no-op (XLA's operation semantics).
    ([(0, 0, 0), (0, 0, 0)], [[1, 2, 3], [4, 5, 6]]),
    # Edge padding only.
    ([(1, 0, 0), (0, 2, 0)], [[9, 9, 9, 9, 9], [1, 2, 3, 9, 9], [4, 5, 6, 9, 9]]),
    # Interior padding only.
    ([(0, 0, 1), (0, 0, 1)], [[1, 9, 2, 9, 3], [9, 9, 9, 9, 9], [4, 9, 5, 9, 6]]),
    # Interior padding happens first, so negative edge padding removes interior-padded elements (XLA's operation semantics).
    ([(0, 0, 0), (-1, -1, 1)], [[9, 2, 9], [9, 5, 9]]),
    ([(-1, 1, 0), (-2, 0, 0)], [[6], [9]]),
])
def test_seed_pad_semantics(config, expected):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    out = run_builder(lambda b, p, q: b.pad(p, q, config), x, np.int32(9))
    assert_same(out, np.array(expected, np.int32))


def test_pad_accepts_xla_padding_config_objects():
    class Dim:
        def __init__(self, low, high, interior):
            self.edge_padding_low, self.edge_padding_high, self.interior_padding = low, high, interior

    out = run_builder(lambda b, p, q: b.pad(p, q, [Dim(1, 0, 1)]), np.array([1, 2], np.int32), np.int32(0))
    assert_same(out, np.array([0, 1, 0, 2], np.int32))


# ----------------------------------------------------------------------------
# Errors at the builder call
# ----------------------------------------------------------------------------


def _builder(*shapes):
    b = XlaBuilder("errors")
    return b, [b.parameter(i, s) for i, s in enumerate(shapes)]


ERROR_CASES = [
    ("broadcast", ["f32[2]"], lambda b, p: b.broadcast(p, [-1]), "negative size -1"),
    ("broadcast_in_dim rank", ["f32[2,3]"], lambda b, p: b.broadcast_in_dim(p, [2, 3], [0]),
     "one entry per operand dimension"),
    ("broadcast_in_dim range", ["f32[3]"], lambda b, p: b.broadcast_in_dim(p, [2, 3], [2]), "out of range"),
    ("broadcast_in_dim size", ["f32[3]"], lambda b, p: b.broadcast_in_dim(p, [2, 4], [1]),
     "operand dimension 0 has size 3, but must be 1 or equal result dimension 1 of size 4"),
    ("broadcast_in_dim order", ["f32[2,2]"], lambda b, p: b.broadcast_in_dim(p, [2, 2], [1, 0]), "strictly increasing"),
    ("broadcast_in_dim result rank", ["f32[2,2]"], lambda b, p: b.broadcast_in_dim(p, [2], [0, 0]),
     "one entry per operand dimension|smaller than the operand rank"),
    ("broadcast_in_dim negative", ["f32[]"], lambda b, p: b.broadcast_in_dim(p, [-2], []), "negative size"),
    ("reshape count", ["f32[2,3]"], lambda b, p: b.reshape(p, [5]), "operand f32\\[2,3\\]\\{1,0\\} has 6 elements"),
    ("reshape dims", ["f32[2,3]"], lambda b, p: b.reshape(p, [0, 0], [6]), "not a permutation"),
    ("reshape negative", ["f32[2,3]"], lambda b, p: b.reshape(p, [-6]), "negative size"),
    ("collapse order", ["f32[2,3,4]"], lambda b, p: b.collapse(p, [0, 2]), "in order and consecutive"),
    ("collapse reversed", ["f32[2,3,4]"], lambda b, p: b.collapse(p, [1, 0]), "in order and consecutive"),
    ("collapse range", ["f32[2,3]"], lambda b, p: b.collapse(p, [1, 2]), "out of range"),
    ("transpose dup", ["f32[2,3]"], lambda b, p: b.transpose(p, [0, 0]), "not a permutation"),
    ("transpose length", ["f32[2,3]"], lambda b, p: b.transpose(p, [0]), "not a permutation"),
    ("slice start", ["f32[4]"], lambda b, p: b.slice(p, [-1], [2], [1]), "negative start index -1"),
    ("slice limit", ["f32[4]"], lambda b, p: b.slice(p, [0], [5], [1]), "limit index 5 exceeds the size 4"),
    ("slice order", ["f32[4]"], lambda b, p: b.slice(p, [3], [2], [1]), "smaller than start index 3"),
    ("slice stride", ["f32[4]"], lambda b, p: b.slice(p, [0], [4], [0]), "stride 0 in dimension 0 must be positive"),
    ("slice rank", ["f32[4,4]"], lambda b, p: b.slice(p, [0], [4], [1]), "one entry per operand dimension"),
    ("slice_in_dim dimno", ["f32[4]"], lambda b, p: b.slice_in_dim(p, 0, 2, 1, 1), "dimno 1 is out of range"),
    ("concat scalar", ["f32[]", "f32[]"], lambda b, p, q: b.concat_in_dim([p, q], 0), "out of range"),
    ("concat rank", ["f32[2]", "f32[2,1]"], lambda b, p, q: b.concat_in_dim([p, q], 0), "same rank"),
    ("concat type", ["f32[2]", "s32[2]"], lambda b, p, q: b.concat_in_dim([p, q], 0), "same element type"),
    ("concat dims", ["f32[2,3]", "f32[2,4]"], lambda b, p, q: b.concat_in_dim([p, q], 0),
     "dimension 1 of operand #1 f32\\[2,4\\]\\{1,0\\} is 4"),
    ("concat empty", [], lambda b: b.concat_in_dim([], 0), "at least one operand"),
    ("pad value shape", ["f32[2]", "f32[1]"], lambda b, p, q: b.pad(p, q, [(0, 0, 0)]), "must be a scalar"),
    ("pad value type", ["f32[2]", "s32[]"], lambda b, p, q: b.pad(p, q, [(0, 0, 0)]), "element type"),
    ("pad interior", ["f32[2]", "f32[]"], lambda b, p, q: b.pad(p, q, [(0, 0, -1)]), "must not be negative"),
    ("pad negative", ["f32[2]", "f32[]"], lambda b, p, q: b.pad(p, q, [(-2, -1, 0)]), "negative \\(-1\\)"),
    ("pad rank", ["f32[2]", "f32[]"], lambda b, p, q: b.pad(p, q, [(0, 0, 0), (0, 0, 0)]),
     "one entry per operand dimension"),
    ("pad triple", ["f32[2]", "f32[]"], lambda b, p, q: b.pad(p, q, [(0, 0)]), "edge_low, edge_high, interior"),
    ("rev dup", ["f32[2,3]"], lambda b, p: b.rev(p, [1, 1]), "duplicates"),
    ("rev range", ["f32[2,3]"], lambda b, p: b.rev(p, [2]), "out of range"),
    ("not an op", ["f32[2]"], lambda b, p: b.transpose(np.zeros(2), [0]), "wrap it with builder.constant"),
    ("float sizes", ["f32[2]"], lambda b, p: b.broadcast(p, [2.5]), "sequence of ints"),
]


@pytest.mark.parametrize("shapes,build,message", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_builder_errors(shapes, build, message):
    b, params = _builder(*shapes)
    with pytest.raises(BuilderError, match=message) as info:
        build(b, *params)
    assert str(info.value).startswith("XlaBuilder.")


def test_builder_error_names_the_method():
    b, (p,) = _builder("f32[4]")
    with pytest.raises(BuilderError, match=r"^XlaBuilder\.slice_in_dim: hlo\.slice: limit index 9"):
        b.slice_in_dim(p, 0, 9, 1, 0)
    with pytest.raises(BuilderError, match=r"^XlaBuilder\.rev: hlo\.reverse: "):
        b.reverse(p, [3])


# ----------------------------------------------------------------------------
# Verifier errors on hand-written IR, and the print/parse round trip
# ----------------------------------------------------------------------------

BAD_IR = [
    ("hlo.transpose %0 {permutation = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>", "not a permutation"),
    ("hlo.transpose %0 {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>",
     "shape inference gives f32\\[3,2\\]"),
    ("hlo.slice %0 {start_indices = array<i64: 0, 0>, limit_indices = array<i64: 2, 4>, strides = array<i64: 1, 1>}"
     " : (tensor<2x3xf32>) -> tensor<2x4xf32>", "limit index 4 exceeds"),
    ("hlo.reshape %0 : (tensor<2x3xf32>) -> tensor<7xf32>", "mismatched element counts"),
    ("hlo.reshape %0 : (tensor<2x3xf32>) -> tensor<6xi32>", "result element type i32"),
    ("hlo.broadcast_in_dim %0 {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<3x3xf32>",
     "operand dimension 0 has size 2"),
    ("hlo.broadcast %0 {broadcast_sizes = array<i64: 4>} : (tensor<2x3xf32>) -> tensor<2x3x4xf32>",
     "shape inference gives f32\\[4,2,3\\]"),
    ("hlo.concatenate %0, %0 {dimension = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>",
     "dimension 2 is out of range"),
    ("hlo.reverse %0 {dimensions = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>", "duplicates"),
    ("hlo.pad %0, %1 {edge_padding_low = array<i64: 0, 0>, edge_padding_high = array<i64: 0, 0>, "
     "interior_padding = array<i64: 1, 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>",
     "shape inference gives f32\\[3,5\\]"),
]


@pytest.mark.parametrize("op_text,message", BAD_IR)
def test_verifier_rejects_bad_ir(op_text, message):
    text = ("func.func @main(%0: tensor<2x3xf32>, %1: tensor<f32>) -> () {\n"
            f"  %2 = {op_text}\n  func.return\n}}")
    with pytest.raises(HloVerifyError, match=message):
        xla_dialect.parse_module(text)


def test_print_parse_round_trip_of_every_data_movement_op():
    b = XlaBuilder("all")
    x = b.parameter(0, "f32[2,3]")
    v = b.parameter(1, "f32[]")
    y = b.broadcast(x, [2])
    y = b.broadcast_in_dim(b.reshape(y, [2, 2, 3]), [2, 2, 3, 4], [0, 1, 2])
    y = b.reshape(b.collapse(y, [0, 1]), [2, 1, 0], [3, 4, 4])
    y = b.transpose(y, [2, 0, 1])
    y = b.slice(y, [0, 1, 0], [4, 3, 4], [2, 1, 3])
    y = b.concat_in_dim([y, y], 1)
    y = b.pad(y, v, [(1, -1, 0), (0, 2, 1), (-1, 0, 2)])
    y = b.rev(y, [0, 2])
    module = b.build(y)
    text = str(module)
    for name in ("broadcast", "broadcast_in_dim", "reshape", "transpose", "slice", "concatenate", "pad", "reverse"):
        assert f"hlo.{name} " in text
    parsed = xla_dialect.parse_module(text)
    assert parsed.is_structurally_equivalent(module)
    assert str(parsed) == text
    rng = np.random.default_rng(1)
    args = (random_array(rng, (2, 3), np.float32), np.float32(-1))
    from helpers import execute

    assert_same(execute(parsed, *args)[0], execute(module, *args)[0])
