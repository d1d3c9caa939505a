"""A reduce of a reduce: XLA's algebraic simplifier merges them into one reduce (``MergeReduces`` in
passes/xla_numerics.py), so ``jnp.sum(jnp.sum(x, axis=1))`` is XLA CPU's sum of ``x`` over both dimensions
(YNNPACK's order for 4,096 elements or more), not a sum of row sums (issue 30).

The conditions were read off jax 0.10.2's compiled HLO (``jax.jit(f).lower(x).compile().as_text()``): merged for
the same body (one add/multiply/and/or in either operand order, or the same ops) and the same init value (the same
constant bit for bit, or the same value); kept apart otherwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from helpers import sweep
import lowering
from interop import import_jax
from passes.pipelines import prepare_for_execution
from xla_dialect.ops.reduction import ReduceOp

F32, F64 = np.float32, np.float64


def _reduces(fn, *args) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(operand shape, dimensions) of each reduce the executor runs for ``fn``."""
    from xla_dialect.ops.base import ints

    module = prepare_for_execution(import_jax(fn, *args))
    return [(tuple(op.operands[0].type.get_shape()), tuple(sorted(ints(op.dimensions))))
            for op in module.walk() if isinstance(op, ReduceOp)]


def _mixed(rng, shape, dtype):
    return (rng.standard_normal(shape) * np.exp(rng.uniform(-2, 2, shape))).astype(dtype)


def _bits(values):
    return [np.asarray(v).view(f"u{np.asarray(v).itemsize}").tolist() for v in values]


def _run(fn, x, **options):
    executable = lowering.compile(import_jax(fn, x), **options)
    for _ in range(2):  # (the second call: fused groups and compiled loops built by then with "always")
        got = executable(x)
    return _bits(got)


_ADD = lambda a, b: a + b  # noqa: E731 - generic bodies (jax turns lax.add with a zero init into reduce_sum)


@pytest.mark.parametrize("name, fn, shape, expected", [
    ("sum of row sums", lambda x: jnp.sum(jnp.sum(x, axis=1)), (8, 6), [((8, 6), (0, 1))]),
    ("column sums summed", lambda x: x.sum(axis=0).sum(axis=0), (8, 6), [((8, 6), (0, 1))]),
    ("kept dimension between", lambda x: x.sum(axis=0).sum(axis=1), (2, 3, 4), [((2, 3, 4), (0, 2))]),
    ("three reduces", lambda x: x.sum(axis=2).sum(axis=1).sum(axis=0), (2, 3, 4), [((2, 3, 4), (0, 1, 2))]),
    ("keepdims", lambda x: jnp.sum(jnp.sum(x, axis=1, keepdims=True)), (8, 6), [((8, 6), (0, 1))]),
    ("max of max", lambda x: jnp.max(jnp.max(x, axis=1)), (8, 6), [((8, 6), (0, 1))]),
    ("add with its operands swapped", lambda x: lax.reduce(lax.reduce(x, F32(1), lambda a, b: b + a, (1,)),
                                                           F32(1), _ADD, (0,)), (8, 6), [((8, 6), (0, 1))]),
    ("the same NaN", lambda x: lax.reduce(lax.reduce(x, F32(np.nan), _ADD, (1,)), F32(np.nan), _ADD, (0,)),
     (8, 6), [((8, 6), (0, 1))]),
    ("inner reduce read by another op: kept", lambda x: (jnp.sum(jnp.sum(x, axis=1)), jnp.sum(x, axis=1) * 2),
     (8, 6), [((8, 6), (1,)), ((8, 6), (0, 1))]),
    ("sum of maxima: not merged", lambda x: jnp.sum(jnp.max(x, axis=1)), (8, 6), [((8, 6), (1,)), ((8,), (0,))]),
    ("different inits: not merged", lambda x: lax.reduce(lax.reduce(x, F32(1), _ADD, (1,)), F32(0), _ADD, (0,)),
     (8, 6), [((8, 6), (1,)), ((8,), (0,))]),
    ("-0 and +0: not merged", lambda x: lax.reduce(lax.reduce(x, F32(-0.0), _ADD, (1,)), F32(0), _ADD, (0,)),
     (8, 6), [((8, 6), (1,)), ((8,), (0,))]),
    ("max with its operands swapped: not merged",
     lambda x: lax.reduce(lax.reduce(x, F32(1), jnp.maximum, (1,)), F32(1), lambda a, b: jnp.maximum(b, a), (0,)),
     (8, 6), [((8, 6), (1,)), ((8,), (0,))]),
])
def test_which_reduces_merge(name, fn, shape, expected):
    assert sorted(_reduces(fn, np.ones(shape, F32))) == sorted(expected)


def test_nan_payloads_must_match():
    nan1, nan2 = (np.array(bits, np.uint32).view(F32)[()] for bits in (0x7FC00001, 0x7FC00002))
    fn = lambda x: lax.reduce(lax.reduce(x, nan1, _ADD, (1,)), nan2, _ADD, (0,))  # noqa: E731
    assert len(_reduces(fn, np.ones((8, 6), F32))) == 2


def test_bf16_sums_and_reduces_across_a_loop_are_not_merged():
    x = np.ones((8, 6), ml_dtypes.bfloat16)
    assert len(_reduces(lambda v: jnp.sum(jnp.sum(v, axis=1)), x)) == 2  # (converts between them, as in XLA)
    bf = lambda v: lax.reduce(lax.reduce(v, v.dtype.type(0), _ADD, (1,)), v.dtype.type(0), _ADD, (0,))  # noqa: E731
    assert len(_reduces(bf, x)) == 2

    def captured(v):  # the row sums outside the loop, their sum inside: XLA sees a loop parameter
        rows = jnp.sum(v, axis=1)
        return lax.fori_loop(0, 3, lambda i, c: c + jnp.sum(rows) * 1.5, F32(0))

    assert ((8, 6), (0, 1)) not in _reduces(captured, np.ones((8, 6), F32))


@pytest.mark.parametrize("shape", [(5, 7), (9, 9), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_small_sum_of_sums_is_the_executors_sum(shape, dtype):
    # The merged program is the one of jnp.sum(x) (as in XLA, whose compiled HLO is the same for both).
    x = _mixed(np.random.default_rng(sum(shape)), shape, dtype)
    for options in (dict(fusion="never", loop_compilation="never"), dict(fusion="always", loop_compilation="always")):
        want = _run(lambda v: jnp.sum(v), x, **options)
        assert _run(lambda v: jnp.sum(jnp.sum(v, axis=1)), x, **options) == want
        assert _run(lambda v: v.sum(axis=0).sum(axis=0).sum(axis=0) if v.ndim == 3 else v.sum(axis=0).sum(axis=0),
                    x, **options) == want


def _avx512_host() -> bool:
    from lowering.kernels.host import measured_host

    return measured_host()


_LARGE = [
    ("sum of row sums", lambda x: jnp.sum(jnp.sum(x, axis=1)), [(64, 64), (100, 300), (3, 2000)]),
    ("column sums summed", lambda x: x.sum(axis=0).sum(axis=0), [(64, 64), (300, 40), (8, 16, 32), (16, 64, 8)]),
    ("kept dimension between", lambda x: x.sum(axis=0).sum(axis=1), [(8, 16, 32), (4, 8, 256)]),
    ("three reduces", lambda x: x.sum(axis=2).sum(axis=1).sum(axis=0), [(8, 16, 32), (16, 16, 64)]),
    ("keepdims", lambda x: jnp.sum(jnp.sum(x, axis=1, keepdims=True)), [(64, 64), (200, 50)]),
    ("inner reduce read too", lambda x: (jnp.sum(jnp.sum(x, axis=1)), jnp.sum(x, axis=1) * 2), [(64, 64)]),
    ("mean", lambda x: jnp.sum(jnp.sum(x, axis=1)) / x.size, [(64, 64)]),
    ("sum of squares", lambda x: jnp.sum(jnp.sum(x * x, axis=0)), [(128, 64)]),
    ("fori_loop", lambda x: lax.fori_loop(0, 5, lambda i, c: c * 0.5 + jnp.sum(jnp.sum(x + c, axis=1)),
                                          x.dtype.type(0)), [(64, 64)]),
    ("fori_loop past the compile threshold",
     lambda x: lax.fori_loop(0, 30, lambda i, c: (c[0] * 0.999, c[1] + jnp.sum(jnp.sum(c[0], axis=0))),
                             (x, x.dtype.type(0)))[1], [(64, 64)]),
    ("scan", lambda x: lax.scan(lambda c, r: (c + jnp.sum(jnp.sum(r, axis=1)), c), x.dtype.type(0), x)[0],
     [(4, 64, 64)]),
]
_LARGE_CASES = [(name, fn, shape) for name, fn, shapes in _LARGE for shape in shapes]
_OPTIONS = [dict(fusion="never", loop_compilation="never"), dict(fusion="always", loop_compilation="always"),
            dict(fusion="never", loop_compilation="always"), dict(fusion="always", loop_compilation="never")]


@pytest.mark.skipif(not _avx512_host(), reason="YNNPACK's sum order was measured on AVX-512 hosts only")
@pytest.mark.parametrize("name, fn, shape, dtype", sweep(
    _LARGE_CASES, [F32, F64], ids=[lambda c: f"{c[0]} {c[2]}", lambda t: np.dtype(t).name]))
def test_large_sum_of_sums_is_xlas(name, fn, shape, dtype):
    x = _mixed(np.random.default_rng(sum(shape)), shape, dtype)
    want = _bits(jax.tree_util.tree_leaves(jax.jit(fn)(x)))
    for options in _OPTIONS:
        assert _run(fn, x, **options) == want, options
