"""``xla-ynnpack-fusion`` and YNNPACK's element-wise definitions, against jax.jit.

XLA CPU computes the element-wise ops it fuses around a reduce of 4,096 elements or more inside YNNPACK
(``passes/ynnpack_fusion.py``), with YNNPACK's exp, log and tanh (``lowering/kernels/ynnpack_math.py``). Checked
here: the ops the pass marks are the ops of the ``__ynn_fusion`` computations in jax.jit's compiled HLO, and the
executor's results are jax.jit's bit for bit, special values included, in every configuration.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from interop import import_jax
from lowering.kernels.ynnpack_math import YNNPACK
from passes.pipelines import prepare_for_execution
from passes.ynnpack_fusion import ynnpack_fusion_numerics
from xla_dialect.ops import conversion as cv
from xla_dialect.ops import elementwise as ew

PROGRAMS = {
    "softmax": jax.nn.softmax,
    "log_softmax": jax.nn.log_softmax,
    "logsumexp": lambda v: jax.nn.logsumexp(v, -1),
    "sum of exp": lambda v: jnp.sum(jnp.exp(v)),
    "row sums of exp": lambda v: jnp.sum(jnp.exp(v), -1),
    "column sums of tanh": lambda v: jnp.sum(jnp.tanh(v), 0),
    "sum of log": lambda v: jnp.sum(jnp.log(jnp.abs(v)), -1),
    "sum of sigmoid": lambda v: jnp.sum(jax.nn.sigmoid(v), -1),
    "tanh after max": lambda v: jnp.tanh(v - v.max(-1, keepdims=True)),
    "cross-entropy": lambda v: -jnp.sum(jax.nn.log_softmax(v) * (v > 0), -1),
    "gelu sum": lambda v: jnp.sum(jax.nn.gelu(v, approximate=True), -1),
    "silu mean": lambda v: jnp.mean(jax.nn.silu(v)),
    "sum of squares plus one": lambda v: jnp.sum(v * v + 1, -1),
    # Not fused around a large reduce: XLA's own definitions.
    "exp alone": jnp.exp,
    "exp read twice": lambda v: jnp.sum(jnp.exp(v), -1)[:, None] + jnp.exp(v),
    "select between": lambda v: jnp.sum(jnp.where(v > 0, jnp.exp(v), v), -1),
    "exp of a small sum": lambda v: jnp.exp(jnp.sum(v, -1)),
    "fewer than 4096": lambda v: jnp.sum(jnp.exp(v[:32]), -1),
}

_XLA_OPCODES = {
    ew.ExpOp: {"exponential"}, ew.LogOp: {"log"}, ew.TanhOp: {"tanh"}, ew.AddOp: {"add"}, ew.SubOp: {"subtract"},
    ew.MulOp: {"multiply"}, ew.DivOp: {"divide"}, ew.NegOp: {"negate"}, ew.AbsOp: {"abs"}, ew.MaxOp: {"maximum"},
    ew.MinOp: {"minimum"}, cv.ConvertOp: {"convert"}, ew.SqrtOp: {"sqrt"}, ew.RsqrtOp: {"rsqrt"},
    ew.ErfOp: {"erf"}, ew.PowOp: {"power"}, ew.SignOp: {"sign"}, ew.FloorOp: {"floor"}, ew.CeilOp: {"ceil"},
    ew.LogisticOp: {"negate", "exponential", "add", "divide"},  # (XLA expands logistic before fusing)
}
_STRUCTURE = {"parameter", "constant", "reduce", "broadcast", "reshape", "bitcast", "transpose"}


def _xla_fused_opcodes(fn, x) -> set[str]:
    """The element-wise opcodes of the ``__ynn_fusion`` computations jax.jit compiles ``fn`` into."""
    text = jax.jit(fn).lower(x).compile().as_text()
    called = set(re.findall(r"calls=(%[\w.]+), [^\n]*__ynn_fusion", text))
    found = set()
    for computation in re.split(r"\n(?=%|ENTRY)", text):
        if computation.split(" ", 1)[0] in called:
            found |= set(re.findall(r" (\w+)\(", computation))
    return found - _STRUCTURE


def _marked_opcodes(fn, x) -> set[str]:
    module = prepare_for_execution(import_jax(fn, x), fma_contraction=False)
    return {name for op in module.walk() if YNNPACK in op.attributes for name in _XLA_OPCODES[type(op)]}


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def _assert_bitwise(got, expected, nan_payloads: bool = True):
    got, expected = np.asarray(got), np.asarray(expected)
    same = _bits(got) == _bits(expected)
    if not nan_payloads:
        same |= np.isnan(got) & np.isnan(expected)
    differ = np.flatnonzero(~same.ravel())
    assert differ.size == 0, (f"{differ.size} of {same.size} differ, e.g. at {differ[:4].tolist()}: "
                              f"{got.ravel()[differ[:4]]} vs jax.jit {expected.ravel()[differ[:4]]}")


def _inputs(dtype):
    return (np.random.default_rng(7).standard_normal((64, 96)) * 3).astype(dtype)


@pytest.mark.parametrize("name", PROGRAMS)
def test_marked_ops_are_the_ops_xla_fuses_into_ynnpack(name):
    x = _inputs(np.float32)
    assert _marked_opcodes(PROGRAMS[name], x) == _xla_fused_opcodes(PROGRAMS[name], x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_bitwise_with_jax_interpreted(name, dtype):
    x = _inputs(dtype)
    expected = jax.jit(PROGRAMS[name])(x)
    (got,) = lowering.compile(import_jax(PROGRAMS[name], x), fusion="never", loop_compilation="never")(x)
    _assert_bitwise(got, expected)


@pytest.mark.parametrize("name", ["softmax", "gelu sum", "column sums of tanh", "sum of log", "exp read twice"])
def test_bitwise_with_jax_fused_and_compiled(name):
    x = _inputs(np.float32)
    expected = jax.jit(PROGRAMS[name])(x)
    (got,) = lowering.compile(import_jax(PROGRAMS[name], x), fusion="always", loop_compilation="always")(x)
    _assert_bitwise(got, expected)


@pytest.mark.parametrize("shape", [(4096, 5), (3, 4100)], ids=str)
def test_a_dead_user_does_not_stop_the_fusion_growing(shape):
    # jax.nn.logsumexp computes sign(sum) and drops it: XLA's DCE removes it before fusing, so the sum's YNNPACK
    # fusion grows over abs, log and the add of the maximum (YNNPACK's log); the dead sign had kept ours from it
    # (91 of 4,096 results 1 ULP off at (4096, 5)).
    def logsumexp(v):
        return jax.nn.logsumexp(v, -1)

    x = (np.random.default_rng(3).standard_normal(shape) * 3).astype(np.float32)
    marked = _marked_opcodes(logsumexp, x)
    assert marked == _xla_fused_opcodes(logsumexp, x)
    assert {"log", "abs"} <= marked or shape[0] < 4096  # (3 sums: XLA fuses only the exp side)
    for options in (dict(fusion="never", loop_compilation="never"), {}):
        (got,) = lowering.compile(import_jax(logsumexp, x), **options)(x)
        _assert_bitwise(got, jax.jit(logsumexp)(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_softmax_in_loops_bitwise(dtype):
    x = _inputs(dtype)
    programs = [lambda v: lax.fori_loop(0, 3, lambda i, c: jax.nn.softmax(c * 1.5, -1), v),
                lambda v: lax.scan(lambda c, _: (jax.nn.softmax(c + 1.0, -1), c.sum()), v, None, length=3)[0]]
    for fn in programs:
        module = import_jax(fn, x)
        for options in ({"loop_compilation": "never"}, {"loop_compilation": "always", "fusion": "always"}):
            (got,) = lowering.compile(module, **options)(x)
            _assert_bitwise(got, jax.jit(fn)(x))


_SPECIALS = [0.0, -0.0, -1e-30, -1e-40, -5e-324, -1.0, -9.01, -20.0, -40.0, -87.3, -88.0, -88.1, -103.0, -104.0,
             -708.0, -745.0, -1e30, -np.inf]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("function", ["exp", "tanh", "sigmoid", "log"])
def test_definitions_on_special_values(function, dtype):
    """YNNPACK's definitions at the clamps, overflow and underflow, zeros of both signs, denormals (flushed,
    as XLA's are) and infinities: ``f(x - max(x))`` (``log(max(x) - x)``) with rows whose maximum is 0."""
    x = (np.random.default_rng(3).standard_normal((64, 64)) * 8).astype(dtype)
    x = np.minimum(x, 0)
    x[:, -1] = 0
    specials = np.array(_SPECIALS, dtype)
    x[0, :specials.size] = specials
    x[1, :specials.size] = specials * dtype(0.5)
    fn = {"exp": lambda v: jnp.exp(v - v.max(-1, keepdims=True)),
          "tanh": lambda v: jnp.tanh(v - v.max(-1, keepdims=True)),
          "sigmoid": lambda v: jax.nn.sigmoid(v - v.max(-1, keepdims=True)),
          "log": lambda v: jnp.log(v.max(-1, keepdims=True) - v)}[function]
    module = import_jax(fn, x)
    assert any(YNNPACK in op.attributes for op in prepare_for_execution(module).walk())
    expected = jax.jit(fn)(x)
    for options in ({"fusion": "never", "loop_compilation": "never"}, {"fusion": "always"}):
        (got,) = lowering.compile(module, **options)(x)
        _assert_bitwise(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_nan_propagates_through_the_definitions(dtype):
    x = _inputs(dtype)
    x[5, 7] = np.nan
    for fn in (lambda v: jnp.sum(jnp.exp(v), -1), lambda v: jnp.sum(jnp.tanh(v), -1),
               lambda v: jnp.sum(jnp.log(jnp.abs(v)), -1), lambda v: jnp.sum(jax.nn.sigmoid(v), -1)):
        (got,) = lowering.compile(import_jax(fn, x))(x)
        _assert_bitwise(got, jax.jit(fn)(x), nan_payloads=False)


def test_the_pass_marks_only_fused_ops_and_keeps_the_callers_module():
    x = _inputs(np.float32)
    module = import_jax(PROGRAMS["softmax"], x)
    prepared = prepare_for_execution(module, fma_contraction=False)
    marked = [op for op in prepared.walk() if YNNPACK in op.attributes]
    assert sorted(type(op).__name__ for op in marked) == ["ExpOp", "SubOp"]  # (the max's fusion: x - max, exp)
    assert not any(YNNPACK in op.attributes for op in module.walk())
    again = ynnpack_fusion_numerics(prepared, clone=True)
    assert again is prepared  # (nothing left to mark: the same module)


def test_the_pass_is_registered_and_in_the_executor_pipeline():
    import passes
    from passes.pipelines import EXECUTOR_PIPELINE

    assert "xla-ynnpack-fusion" in passes.available_passes()
    assert "xla-ynnpack-fusion" in EXECUTOR_PIPELINE
    x = _inputs(np.float32)
    module = import_jax(PROGRAMS["sum of exp"], x)
    out = passes.run(module, "canonicalize-broadcasts,xla-ynnpack-fusion").module
    assert any(isinstance(op, ew.ExpOp) and YNNPACK in op.attributes for op in out.walk())


def test_no_contraction_inside_a_ynnpack_fusion():
    """YNNPACK computes each op of its fusion on its own: ``x + c * x**3`` inside a large sum is not one FMA."""
    from xla_dialect.internal import FusedMultiplyAddOp

    x = _inputs(np.float64)
    prepared = prepare_for_execution(import_jax(PROGRAMS["gelu sum"], x))
    assert not any(isinstance(op, FusedMultiplyAddOp) for op in prepared.walk())
    prepared = prepare_for_execution(import_jax(lambda v: jax.nn.gelu(v, approximate=True), x))
    assert any(isinstance(op, FusedMultiplyAddOp) for op in prepared.walk())  # (XLA's own loop contracts)
