"""Export to StableHLO: jaxlib parses it, XLA runs it (run_xla), and import(export(m)) == m."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import jax
import jax.numpy as jnp
from jax import lax

import lowering
from helpers import assert_close
from interop import export_stablehlo, import_jax, import_stablehlo, run_xla
from interop.stablehlo import parse_stablehlo
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import ExecutionError, XlaError

RNG = np.random.default_rng(1)


def round_trip(module):
    """Export, check jaxlib parses it, re-import; assert structural equality."""
    text = export_stablehlo(module)
    parse_stablehlo(text)  # jaxlib's MLIR verifier accepts it
    again = import_stablehlo(text, verify=True)
    assert again.is_structurally_equivalent(module), f"{module}\n!=\n{again}\n\nexported:\n{text}"
    return text


def three_way(module, *args, max_ulp=0, atol=0.0):
    """The NumPy executor and XLA agree on ``module``."""
    mine = lowering.compile(module)(*args)
    ref = run_xla(module, *args)
    assert len(mine) == len(ref)
    for i, (a, b) in enumerate(zip(mine, ref)):
        assert_close(a, b, max_ulp=max_ulp, atol=atol, err_msg=f"output #{i}")


# ----------------------------------------------------------------------------
# Builder programs
# ----------------------------------------------------------------------------


def _axpy():
    b = XlaBuilder("axpy")
    alpha = b.parameter(0, "f32[]", "alpha")
    x = b.parameter(1, "f32[10]", "x")
    y = b.parameter(2, "f32[10]", "y")
    b.add(b.mul(b.broadcast_in_dim(alpha, [10], []), x), y)
    return b.build()


def test_axpy_round_trip_and_xla():
    module = _axpy()
    round_trip(module)
    args = (np.float32(2.5), RNG.standard_normal(10).astype(np.float32), RNG.standard_normal(10).astype(np.float32))
    # XLA's CPU code contracts the multiply and add into an FMA (one rounding): 1 ULP apart.
    three_way(module, *args, max_ulp=1)


def test_layouts_survive_the_round_trip():
    b = XlaBuilder("layouts")
    x = b.parameter(0, "f32[4,3]{0,1}", "x")
    y = b.parameter(1, "bf16[2,3,5]{0,2,1:T(2,2)}", "y")
    module = b.build([b.add(x, x), b.neg(y)])
    text = round_trip(module)
    assert 'mhlo.layout_mode = "{0,1}"' in text
    # Without layouts XLA gets a plain program.
    assert "layout" not in export_stablehlo(module, layouts=False)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "bfloat16", "float32", "float64",
                                   "float8_e4m3fn", "float8_e5m2", "int4", "uint4", "complex64", "complex128"])
def test_constants_round_trip_bit_exact(dtype):
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    if dt.kind == "b":
        values = RNG.random((3, 4)) > 0.5
    elif dt.kind == "c":
        values = (RNG.standard_normal((3, 4)) + 1j * RNG.standard_normal((3, 4))).astype(dt)
        values[0, 0] = complex(np.nan, -0.0)
    elif dt in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        values = RNG.integers(0 if dt == np.dtype(ml_dtypes.uint4) else -8, 8, (3, 4)).astype(dt)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        values = RNG.integers(info.min, info.max, (3, 4), endpoint=True, dtype=np.int64 if dt.kind == "i" else np.uint64).astype(dt)
    else:
        values = RNG.standard_normal((3, 4)).astype(dt)
        values[0, :3] = np.array([np.nan, -0.0, np.inf]).astype(dt)
    b = XlaBuilder("c")
    splat, empty = np.full((2, 2), values.flat[1], dt), values[:0]
    module = b.build([b.constant(values), b.constant(splat), b.constant(empty)])
    round_trip(module)
    for r, v in zip(run_xla(module), (values, splat, empty)):
        assert r.dtype == v.dtype and r.tobytes() == v.tobytes()


def test_conditional_with_branch_operands():
    b = XlaBuilder("cond")
    p = b.parameter(0, "pred[]", "p")
    x = b.parameter(1, "f32[3]", "x")
    y = b.parameter(2, "s32[]", "y")
    r = b.conditional(p, x, lambda v: v * v, y, lambda v: v.builder.convert(v.builder.broadcast(v, [3]), "f32"))
    module = b.build(r)
    text = round_trip(module)
    assert "stablehlo.if" in text
    for pv in (True, False):
        three_way(module, np.bool_(pv), np.float32([1, 2, 3]), np.int32(7))


def test_switch_with_index():
    b = XlaBuilder("switch")
    i = b.parameter(0, "s32[]", "i")
    x = b.parameter(1, "f32[2]", "x")
    branches = [lambda v: v + v, lambda v: -v, lambda v: v * v]
    module = b.build(b.conditional(i, branches, [x, x, x]))
    assert "stablehlo.case" in round_trip(module)
    for iv in (-1, 0, 1, 2, 5):
        three_way(module, np.int32(iv), np.float32([1.5, -2]))


def test_while_with_tuple_state_round_trips_and_runs_on_xla():
    # XLA builder style: one (nested) tuple carries the loop state.
    b = XlaBuilder("loop")
    x = b.parameter(0, "f32[2,3]", "x")

    def cond(v):
        bb = v.builder
        return bb.lt(bb.get_tuple_element(bb.get_tuple_element(v, 1), 0), bb.constant(np.int32(4)))

    def body(v):
        bb = v.builder
        acc, inner = bb.get_tuple_element(v, 0), bb.get_tuple_element(v, 1)
        i, y = bb.get_tuple_element(inner, 0), bb.get_tuple_element(inner, 1)
        return bb.tuple([bb.add(bb.mul(acc, bb.constant(np.float32(1.5)), []), y),
                         bb.tuple([bb.add(i, bb.constant(np.int32(1))), y])])

    w = b.while_(cond, body, b.tuple([x, b.tuple([b.constant(np.int32(0)), x])]))
    module = b.build([b.get_tuple_element(w, 0), b.get_tuple_element(b.get_tuple_element(w, 1), 0)])
    text = round_trip(module)  # the flattened StableHLO loop comes back as the tuple-state hlo.while
    assert "hlo.tuple_state" in text
    three_way(module, RNG.standard_normal((2, 3)).astype(np.float32), max_ulp=1)  # XLA fuses into FMA


def test_implicit_broadcasting_is_made_explicit():
    b = XlaBuilder("bcast")
    x = b.parameter(0, "f32[2,3]", "x")
    v = b.parameter(1, "f32[3]", "v")
    s = b.parameter(2, "f32[]", "s")
    d = b.parameter(3, "f32[1,3]", "d")
    module = b.build([b.add(x, v, broadcast_dimensions=[1]), b.mul(x, s), b.sub(x, d),
                      b.gt(x, v, broadcast_dimensions=[1])])
    text = round_trip(module)  # the importer folds the marked broadcasts back
    assert "stablehlo.broadcast_in_dim" in text
    args = [RNG.standard_normal(sh).astype(np.float32) for sh in ((2, 3), (3,), (), (1, 3))]
    three_way(module, *args)


def test_reduce_sort_dot_run_on_xla():
    b = XlaBuilder("mix")
    x = b.parameter(0, "f32[4,5]", "x")
    y = b.parameter(1, "f32[5,2]", "y")
    total = b.reduce(x, b.constant(np.float32(0)), lambda a, c: a + c, [1])
    dot = b.dot_general(x, y, (([1], [0]), ([], [])))
    srt = b.sort([x], lambda a, c: a.builder.lt(a, c), dimension=1)
    module = b.build([total, dot, srt])
    round_trip(module)
    three_way(module, RNG.standard_normal((4, 5)).astype(np.float32), RNG.standard_normal((5, 2)).astype(np.float32),
              max_ulp=4, atol=1e-6)


def test_calls_round_trip():
    sub = XlaBuilder("square")
    p = sub.parameter(0, "f32[3]", "p")
    sub.mul(p, p)
    square = sub.build()
    b = XlaBuilder("main")
    x = b.parameter(0, "f32[3]", "x")
    module = b.build(b.add(b.call(square, [x]), b.call(square, [x])))
    text = round_trip(module)
    assert "func.call" in text
    three_way(module, np.float32([1, 2, 3]))


# ----------------------------------------------------------------------------
# JAX programs: import -> export -> import, and XLA agrees
# ----------------------------------------------------------------------------

JAX_PROGRAMS = {
    "elementwise": (lambda x, y: (jnp.sin(x) * y + 1, jnp.where(x > y, x, y)), ((3, 4), (3, 4))),
    "dot_reduce": (lambda x, y: (x @ y.T, jnp.sum(x, 0), jnp.max(y, 1)), ((3, 4), (5, 4))),
    "loops": (lambda x, y: lax.fori_loop(0, 3, lambda i, v: v * 2 + y, x), ((2, 2), (2, 2))),
    "cond": (lambda x, y: lax.cond(x[0, 0] > 0, lambda a: a + y, lambda a: a - y, x), ((2, 2), (2, 2))),
    "switch": (lambda x, y: lax.switch(jnp.int32(x[0, 0] > 0) + 1, [jnp.sin, jnp.cos, jnp.tanh], x + y),
               ((2, 2), (2, 2))),
    "sort": (lambda x, y: (jnp.sort(x, 1), jnp.argsort(y, 0)), ((3, 5), (4, 2))),
    # LAPACK typed-FFI custom calls (dictionary mhlo.backend_config, layouts, output_operand_aliases)
    "linalg": (lambda x, y: (jnp.linalg.solve(x @ x.T + 4 * jnp.eye(4), y[:, 0]), jnp.linalg.eigh(x @ x.T)[0],
                             jnp.linalg.cholesky(x @ x.T + 4 * jnp.eye(4))), ((4, 4), (4, 2))),
    "fft_conv": (lambda x, y: (jnp.fft.rfft(x).imag, lax.conv(x[None, None], y[None, None], (1, 1), "SAME")),
                 ((4, 6), (3, 3))),
    "gather_scatter": (lambda x, y: (x[jnp.array([2, 0])], x.at[jnp.array([1, 1])].add(y[0, :3])),
                       ((3, 3), (2, 4))),
    "windows": (lambda x, y: (lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 2), "SAME"), jnp.cumsum(y, 1)),
                ((4, 6), (3, 5))),
    "rng": (lambda x, y: x + jax.random.uniform(jax.random.key(1), x.shape), ((2, 3), (1, 1))),
}


@pytest.mark.parametrize("name", list(JAX_PROGRAMS))
def test_jax_programs_round_trip(name):
    fn, shapes = JAX_PROGRAMS[name]
    args = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    module = import_jax(fn, *args)
    round_trip(module)
    want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(fn)(*args))]
    for g, w in zip(run_xla(module, *args), want):  # the same compiler as jax.jit
        assert_close(g, w, max_ulp=2)
    for g, w in zip(lowering.compile(module)(*args), want):
        # Accumulation order (dot, conv, fft, LAPACK) differs from XLA's: relative error.
        scale = float(np.max(np.abs(w))) if w.size and w.dtype.kind == "f" else 1.0
        assert_close(g, w, max_ulp=4, atol=1e-5 * max(scale, 1.0))


def test_round_trip_keeps_locations():
    module = import_jax(lambda x: jnp.exp(x) + 1, np.float32([1, 2]))
    text = round_trip(module)
    assert 'loc("' in text and "test_export.py" in text


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def test_run_xla_argument_errors():
    module = _axpy()
    with pytest.raises(ExecutionError, match="takes 3 arguments"):
        run_xla(module, np.float32(1))
    with pytest.raises(ExecutionError, match=r"argument #1: expected f32\[10\]"):
        run_xla(module, np.float32(1), np.zeros(3, np.float32), np.zeros(10, np.float32))
    with pytest.raises(XlaError):
        run_xla("not a module")


def test_export_rejects_non_modules():
    with pytest.raises(XlaError):
        export_stablehlo(parse_module)  # not a ModuleOp


def test_ops_without_stablehlo_counterpart():
    b = XlaBuilder("extra")
    x = b.parameter(0, "f32[2,3]", "x")
    module = b.build([b.copy(x), b.erf(x)])
    text = round_trip(module)
    assert "chlo.erf" in text and "hlo.original_op" in text
    three_way(module, RNG.standard_normal((2, 3)).astype(np.float32), max_ulp=2)


def test_conditional_with_tuple_operands_and_results():
    b = XlaBuilder("cond_tuple")
    p = b.parameter(0, "pred[]", "p")
    x = b.parameter(1, "f32[3]", "x")
    t = b.tuple([x, b.constant(np.int32(2))])

    def negate(v):
        bb = v.builder
        return bb.tuple([bb.neg(bb.get_tuple_element(v, 0)), bb.get_tuple_element(v, 1)])

    def double(v):
        bb = v.builder
        return bb.tuple([bb.add(bb.get_tuple_element(v, 0), bb.get_tuple_element(v, 0)), bb.constant(np.int32(5))])

    r = b.conditional(p, t, negate, t, double)
    module = b.build([b.get_tuple_element(r, 0), b.get_tuple_element(r, 1)])
    round_trip(module)
    for pv in (True, False):
        three_way(module, np.bool_(pv), np.float32([1, 2, 3]))


def test_collectives_round_trip_on_one_device():
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    body = jax.shard_map(
        lambda a: (lax.psum(a, "x"), lax.all_gather(a, "x"), lax.ppermute(a, "x", [(0, 0)])),
        mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x"), P("x")))
    a = np.arange(4, dtype=np.float32)
    module = import_jax(jax.jit(body), a)
    text = round_trip(module)
    assert "replica_groups = dense<0> : tensor<1x1xi64>" in text and "channel_handle" in text
    for g, w in zip(run_xla(module, a), jax.jit(body)(a)):
        assert_close(g, np.asarray(w))


def test_run_xla_takes_64_bit_arguments_without_x64_mode():
    # jax.device_put narrows int64/f64 when jax_enable_x64 is off; run_xla must not depend on it.
    import subprocess
    import sys

    code = """
import numpy as np, jax
assert not jax.config.jax_enable_x64
from xla_dialect import XlaBuilder
from interop import run_xla
b = XlaBuilder("x")
p = b.parameter(0, "s64[2]")
q = b.parameter(1, "f64[2]")
b.add(p, b.convert(q, "s64"))
(out,) = run_xla(b.build(), np.array([2**40, 3], np.int64), np.array([1e10, 2.0]))
assert out.dtype == np.int64 and out.tolist() == [2**40 + 10**10, 5], out
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


def test_convolution_without_spatial_dimensions_round_trips_through_xla():
    # Legal in XLA (jax.lax accepts it); the exported padding must be the empty literal MLIR accepts.
    import jax
    from jax import lax

    x, w = np.ones((2, 3), np.float32), np.arange(12, dtype=np.float32).reshape(4, 3)

    def fn(x, w):
        return lax.conv_general_dilated(x, w, (), [], dimension_numbers=("NC", "OI", "NC"))

    module = import_jax(fn, x, w)
    (ours,) = lowering.compile(module)(x, w)
    (xla,) = run_xla(module, x, w)
    np.testing.assert_array_equal(ours, np.asarray(jax.jit(fn)(x, w)))
    np.testing.assert_array_equal(xla, ours)
    assert "dense<> : tensor<0x2xi64>" in export_stablehlo(module)
