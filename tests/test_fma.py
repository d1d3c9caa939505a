"""XLA CPU's multiply-add contraction (passes.fma_contraction): the executor's results equal jax.jit's bit for bit.

Every program is imported from jax, run by the executor and compared with
jax.jit; the patterns XLA does not contract (a multiply with several uses,
a broadcast or convert in between, bf16, and f16 on hosts without AVX512-FP16)
must stay twice rounded.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import lowering
from helpers import sweep
from interop import import_jax
from passes.fma_contraction import FusedMultiplyAddOp, contract_fma
from xla_dialect.errors import ExecutionError

F32, F64 = np.float32, np.float64


def _data(dtype, shape=(4096,), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _bits_equal(actual, expected) -> np.ndarray:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    u = f"u{actual.dtype.itemsize}"
    both_nan = np.isnan(actual) & np.isnan(expected)
    return (actual.view(u) == expected.view(u)) | both_nan


def _run(fn, *args, **options):
    return lowering.compile(import_jax(fn, *args), **options)(*[np.asarray(a) for a in args])


def assert_matches_jax(fn, *args):
    """Every element of every result equals jax.jit's bit for bit."""
    expected = jax.jit(fn)(*args)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    for a, e in zip(_run(fn, *args), expected):
        same = _bits_equal(a, np.asarray(e))
        assert same.all(), f"{np.mean(~same):.3f} of elements differ"


def _m(x):
    """A [32, 24] matrix of ``x``'s first elements (below YNNPACK's 4,096: XLA's own fused loops)."""
    return x[:768].reshape(32, 24)


def _horner(x):
    p = jnp.asarray(0.3, x.dtype)
    for c in (1.5, -2.25, 0.75, 3.0, -1.1):
        p = p * x + c
    return p


def _loop(x, y):
    return jax.lax.fori_loop(0, 5, lambda i, c: c * y + x * 0.5, x)


CONTRACTED = {
    "a*b+c": lambda a, b, c: a * b + c,
    "c+a*b": lambda a, b, c: c + a * b,
    "a*b-c": lambda a, b, c: a * b - c,
    "c-a*b": lambda a, b, c: c - a * b,
    "a*a+b*b": lambda a, b, c: a * a + b * b,  # the first operand's multiply is fused
    "a*a-b*b": lambda a, b, c: a * a - b * b,
    "b*b-a*a": lambda a, b, c: b * b - a * a,
    # a first product that is a negation to LLVM (negative constant, negate, or a product of one): the add
    # becomes a subtraction of it and the second product is fused (jax's odeint interpolation polynomial)
    "(-2k)*a+(2k)*b": lambda a, b, c: (-2. * c[0]) * a + (2. * c[0]) * b,
    "-3.3*a+1.7*b": lambda a, b, c: -3.3 * a + 1.7 * b,
    "(-k)*a+b*c": lambda a, b, c: (-c[0]) * a + b * c,
    "1.7*a-3.3*b": lambda a, b, c: 1.7 * a + -3.3 * b,  # (a negated second product: the first is fused)
    # Reassociate's ranks order an add's operands: the deeper product second (Rosenbrock's terms)
    "rosenbrock terms": lambda a, b, c: 100.0 * (a - b ** 2) ** 2 + (1 - b) ** 2,
    "deeper first written": lambda a, b, c: 100. * ((a - b) * (a - b)) + (1 - b) * (1 - b),
    # a product whose duplicated user XLA's CSE merges has one use: (a - b*b) written twice contracts
    "duplicated users": lambda a, b, c: (a - b * b) * (a - b * b) + c,
    "chain": lambda a, b, c: (a * b + c) * c - a,
    "horner": lambda a, b, c: _horner(a),
    "while": lambda a, b, c: _loop(a, b * 0.5),
    "x*k+c": lambda a, b, c: a * 1.7 + c,
    "bcast addend": lambda a, b, c: a.reshape(64, 64) * b.reshape(64, 64) + c[:64][None, :],
    "shared multiply, separate outputs": lambda a, b, c: (a * b + c, a * b),
    "shared multiply, one fusion": lambda a, b, c: (a * b + c) * (a * b - c),
    "product added to itself": lambda a, b, c: a * b + a * b,
    "bcast product": lambda a, b, c: (a[:64] * b[:64])[None, :] + c.reshape(64, 64),
    # a product XLA copies into each fusion that reads it (x * scalar, x * row, x * x): each copy of one use
    # contracts (fuzz seed 34: x / max(x) + min(x / max(x)); the scaled softmax's z - max(z)). Below 4,096
    # elements: XLA's YNNPACK fusions of larger reductions are measured alike (the 64 x 64 cases).
    "copied product, max": lambda a, b, c: (lambda z: z - jnp.max(z, -1, keepdims=True))(_m(a) * 0.37),
    "copied product, row": lambda a, b, c: (lambda z: z + jnp.min(z, -1, keepdims=True))(
        _m(a) / jnp.max(_m(a), -1, keepdims=True)),
    "copied square, max": lambda a, b, c: (lambda z: z - jnp.max(z, 0))(_m(a) * _m(a)),
    "copied product, also returned": lambda a, b, c: (lambda z: (z - jnp.max(z, -1, keepdims=True), z))(
        _m(a) * c[:24]),
    "copied product, softmax": lambda a, b, c: jax.nn.softmax(_m(a) * 0.125, axis=-1),
    "copied product, 64 x 64 max": lambda a, b, c: (lambda z: z - jnp.max(z, -1, keepdims=True))(
        a.reshape(64, 64) * 0.37),
    "copied product, separate outputs": lambda a, b, c: (a * 1.5 + c, a * 1.5 - b),
    "copied product, sum": lambda a, b, c: (lambda z: z + jnp.sum(z, -1, keepdims=True))(_m(a) * 0.37),
    "copied product, returned and summed": lambda a, b, c: (jnp.sum(_m(a) * 0.37, -1), _m(a) * 0.37),
    "copied product, one fusion": lambda a, b, c: (a * 1.5 + c) * (a * 1.5 - b),
    "reshaped product, max": lambda a, b, c: (lambda z: z - jnp.max(z, -1, keepdims=True))(
        _m(a) * _m(b)),  # (XLA reshapes the product: copied)
    "two-argument product, max": lambda a, b, c: (lambda z: z - jnp.max(z))(a[:768] * b[:768]),  # (computed once)
    "two-argument product written twice, max": lambda a, b, c: a[:768] * b[:768] - jnp.max(a[:768] * b[:768]),
    # layer norm after its reductions (XLA sums in another order than the executor: not compared here)
    "layer norm tail": lambda a, b, c: (a - b[0]) * jax.lax.rsqrt(c[1] ** 2 + 1e-5) * b + c,
}


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", list(CONTRACTED))
def test_matches_jax(name, dtype):
    a, b, c = (_data(dtype, seed=s) for s in range(3))
    assert_matches_jax(CONTRACTED[name], a, b, c)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_contraction_changes_results(dtype):
    # The contraction is real: about a quarter of the elements differ from the twice-rounded a*b+c.
    a, b, c = (_data(dtype, seed=s) for s in range(3))
    fused = _run(lambda x, y, z: x * y + z, a, b, c)[0]
    literal = _run(lambda x, y, z: x * y + z, a, b, c, fma_contraction=False)[0]
    assert _bits_equal(literal, a * b + c).all()
    assert 0.1 < np.mean(~_bits_equal(fused, literal)) < 0.5


@pytest.mark.parametrize("dtype", [F32, F64])
def test_special_values(dtype):
    big = np.finfo(dtype).max
    tiny = np.finfo(dtype).tiny
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, big, -big, tiny, 3 * tiny,
                     tiny / 4, -tiny / 4, 1.5, 1 + np.finfo(dtype).eps, 2.0 ** -20], dtype)
    a, b, c = (x.ravel() for x in np.meshgrid(vals, vals, vals, indexing="ij"))
    for fn in (CONTRACTED["a*b+c"], CONTRACTED["a*b-c"], CONTRACTED["c-a*b"]):
        assert_matches_jax(fn, a, b, c)


def test_cancellation_and_exact_midpoints():
    # c == -a*b rounded: the FMA returns the rounding error of the product; short operands hit the
    # f32 midpoint correction of fma32.
    a = _data(F32, seed=4)
    b = _data(F32, seed=5)
    assert_matches_jax(lambda x, y: x * y - x * y, a, b)
    assert_matches_jax(lambda x, y, z: x * y + z, a, b, -(a * b))
    s = np.round(_data(F32, seed=6) * 64) / 64 + F32(2.0 ** 12)
    assert_matches_jax(lambda x, y, z: x * y + z, s, s[::-1].copy(), F32(2.0 ** -13) * s)


def _contracted(module) -> bool:
    return any(isinstance(op, FusedMultiplyAddOp) for op in module.walk())


def test_bf16_is_not_contracted():
    a, b, c = (_data(F32, seed=s).astype(ml_dtypes.bfloat16) for s in range(3))
    assert not _contracted(contract_fma(import_jax(lambda x, y, z: x * y + z, a, b, c)))
    assert_matches_jax(lambda x, y, z: x * y + z, a, b, c)


F16_FORMS = {
    "a*b+c": lambda x, y, z: x * y + z,
    "a*b-c": lambda x, y, z: x * y - z,
    "c-a*b": lambda x, y, z: z - x * y,
    "a*a+b*b": lambda x, y, z: x * x + y * y,
    "multi-use": lambda x, y, z: (x * y + z) * (x * y - z),
    "horner": lambda x, y, z: _horner(x) + z,
}


@pytest.mark.parametrize("form", F16_FORMS)
def test_f16_contracts_where_the_host_computes_f16_natively(form):
    # LLVM computes f16 natively on AVX512-FP16 hosts and then contracts f16 multiply-adds as it does
    # f32 ones (measured on an Intel CPU with avx512fp16: all 100,000 a*b+c equal the single rounding);
    # elsewhere f16 is computed in f32 and rounded after each op. Either way the executor equals jax.jit.
    from lowering.kernels.host import describe_host, host_properties

    a, b, c = (_data(F32, seed=s).astype(np.float16) for s in range(3))
    c[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 6e-8, 65504, -65504]
    a[8:12] = [np.nan, 1e-7, 300, -300]
    fn = F16_FORMS[form]
    expected = host_properties()["avx512fp16"] and form != "multi-use"  # a twice-used product never contracts
    assert _contracted(contract_fma(import_jax(fn, a, b, c))) == expected, describe_host()
    assert_matches_jax(fn, a, b, c)


def test_f16_fma_kernel_rounds_once():
    # Forced on any host: the f16 FMA is the exactly rounded a*b + c (the product is exact in f64, the
    # sum exact wherever its rounding could matter), including denormal results (never flushed in f16).
    a, b, c = (_data(F32, seed=s).astype(np.float16) for s in range(3))
    a[:4], b[:4], c[:4] = [2.0 ** -12, 3.0, 2.0 ** -14, 1.0 + 2.0 ** -10], [2.0 ** -12, 5.0, -1.0, 1.0 - 2.0 ** -10], \
        [0.0, 2.0 ** -24, 2.0 ** -14 + 2.0 ** -24, -1.0]
    module = contract_fma(import_jax(lambda x, y, z: x * y + z, a, b, c), types={"f16"})
    assert _contracted(module)
    (got,) = lowering.compile(module, fma_contraction=False)(a, b, c)
    exact = (a.astype(F64) * b.astype(F64) + c.astype(F64)).astype(np.float16)
    assert _bits_equal(got, exact).all()
    assert not _bits_equal(got, a * b + c).all()  # the forms differ somewhere: the test can fail


def test_contract_fma_pass_option():
    from passes import run
    from xla_dialect.errors import PassError

    a = _data(np.float16, (8,))
    for types, expected in (("f16", True), ("f32,f64", False)):
        module = import_jax(lambda x: x * x + x, a)
        run(module, f"contract-fma{{types=\"{types}\"}}", verify=False)
        assert _contracted(module) == expected, types
    with pytest.raises(PassError, match="bf16 cannot be contracted"):
        run(import_jax(lambda x: x * x + x, a), 'contract-fma{types="bf16"}')


def test_complex_is_not_contracted():
    a, b = (_data(F32, seed=s) + 1j * _data(F32, seed=s + 7) for s in range(2))
    a, b = a.astype(np.complex64), b.astype(np.complex64)
    assert_matches_jax(lambda x, y: x * y + x, a, b)


def test_callers_module_is_left_alone_and_bad_option():
    a = _data(F32, (8,))
    module = import_jax(lambda x: x * x + x, a)
    before = str(module)
    lowering.compile(module)(a)
    assert str(module) == before
    with pytest.raises(ExecutionError, match="fma_contraction"):
        lowering.compile(module, fma_contraction="yes")


def test_quantized_ops_are_not_contracted():
    from xla_dialect import XlaBuilder
    from xla_dialect.quant import uniform_quantized

    q = uniform_quantized("s8", "f32", 0.1, 0)
    b = XlaBuilder("qfma")
    x = b.uniform_quantize(b.parameter(0, "f32[8]"), q)
    module = b.build(b.add(b.mul(x, x, result_type=q), x, result_type=q))
    assert contract_fma(module, clone=True) is module


@pytest.mark.parametrize("dtype, lo, hi", [(F64, -1080, 1024), (F32, -155, 128)])
def test_whole_exponent_range(dtype, lo, hi):
    # Factors and sums from denormal to near overflow, a third of them cancelling: the f64
    # emulation scales operands fma64 cannot multiply exactly; denormal results flush as in XLA.
    rng = np.random.default_rng(3)
    n = 30000

    def values():
        return (rng.choice([-1, 1], n) * rng.uniform(1, 2, n) * 2.0 ** rng.integers(lo, hi, n)).astype(dtype)

    a, b, c = values(), values(), values()
    with np.errstate(over="ignore", under="ignore"):
        c[::3] = (-(a[::3].astype(F64) * b[::3]) * rng.uniform(0.999, 1.001, c[::3].size)).astype(dtype)
    assert_matches_jax(CONTRACTED["a*b+c"], a, b, c)
    assert_matches_jax(CONTRACTED["c-a*b"], a, b, c)


def test_contraction_across_a_call_boundary():
    # XLA inlines calls before fusing: a multiply in a jitted helper contracts into the caller's add
    # (without inlining, 2,366 of 10,000 elements differed from jax.jit here).
    @jax.jit
    def product(x, y):
        return x * y

    a, b, c = (_data(F32, (10000,), seed=s) for s in range(3))
    assert_matches_jax(lambda x, y, z: product(x, y) + z, a, b, c)
    assert_matches_jax(lambda x, y, z: z - product(x, y), a, b, c)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("fusion", ["never", "always"])
def test_contracted_nan_operands_give_the_instructions_nan(dtype, fusion):
    """A NaN operand of a contracted multiply-add is returned as the FMA instruction returns it: the first NaN
    of a, b, c, with its own sign (a folded negation does not apply), also for inf * 0 + NaN; fused and
    unfused alike, bit for bit with jax.jit."""
    unsigned = np.uint32 if dtype == np.float32 else np.uint64
    quiet = int(np.array(np.nan, dtype).view(unsigned))
    sign = 1 << (8 * np.dtype(dtype).itemsize - 1)
    nan_a, nan_b, nan_c = (np.array(quiet | p | s, unsigned).view(dtype) for p, s in ((1, 0), (2, sign), (3, 0)))
    cases = [(nan_a, 2.0, 3.0), (2.0, nan_b, 3.0), (2.0, 3.0, nan_c), (nan_a, nan_b, 3.0), (nan_a, 2.0, nan_c),
             (2.0, nan_b, nan_c), (nan_a, nan_b, nan_c), (np.inf, 0.0, nan_c), (np.inf, 0.0, 3.0)]
    a, b, c = (np.repeat(np.array([case[k] for case in cases], dtype), 64) for k in range(3))
    for fn in (lambda a, b, c: a * b + c, lambda a, b, c: c + a * b, lambda a, b, c: a * b - c,
               lambda a, b, c: c - a * b):
        expected = np.asarray(jax.jit(fn)(a, b, c)).view(unsigned)
        got = lowering.compile(import_jax(fn, a, b, c), fusion=fusion)(a, b, c)[0].view(unsigned)
        assert [hex(v) for v in got[::64]] == [hex(v) for v in expected[::64]]


def test_a_dead_user_does_not_keep_a_multiply_from_contracting():
    """XLA removes dead code before it fuses: ``v0 * c`` unused leaves ``v0`` one use, and ``v0 + x`` is an FMA
    (found by the differential fuzzer inside a fori_loop body; 9 ULP off after 4 trips before)."""
    x = np.random.default_rng(3).standard_normal((5, 6)).astype(np.float32) * 1e3

    def fn(x0):
        def body(i, x0):
            v0 = x0 * x0[..., :1]
            unused = v0 * x0[..., :1]  # noqa: F841
            return v0 + x0

        return jax.lax.fori_loop(0, 4, body, x0)

    expected = np.asarray(jax.jit(fn)(x))
    module = import_jax(fn, x)
    for options in ({"fusion": "never", "loop_compilation": "never"}, {}):
        got = np.asarray(lowering.compile(module, **options)(x)[0])
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    from passes.pipelines import prepare_for_execution

    prepared = prepare_for_execution(module)
    assert any(isinstance(op, FusedMultiplyAddOp) for op in prepared.walk())
    assert not any(isinstance(op, FusedMultiplyAddOp) for op in module.walk())  # (the caller's module is kept)


MOVED = {
    "c-(a*b).T": lambda a, b, c: c - (a * b).T,
    "(a*b).T+c": lambda a, b, c: (a * b).T + c,
    "c-reshape(a*b)": lambda a, b, c: c - (a * b).reshape(c.shape[::-1]).T,
    "c-reverse(a*b)": lambda a, b, c: c - (a * b)[::-1].T,
    "c-slice(a*b)": lambda a, b, c: c[:, :3] - (a * b).T[:, :3],
    "sgd update p-(0.1*g).T": lambda a, b, c: c - (np.float32(0.1) * a).T,
    "a*a+(b*b).T": lambda a, b, c: a * a + (b * b).T,
    "(b*b).T+a*a": lambda a, b, c: (b * b).T + a * a,
    # a moved product read twice in one fusion rounds twice
    "(c-(a*b).T)*(c+(a*b).T)": lambda a, b, c: (c - (a * b).T) * (c + (a * b).T),
}


@pytest.mark.parametrize("shape", [(16, 16), (16, 4), (64, 128)], ids=str)
@pytest.mark.parametrize("name", list(MOVED))
def test_contraction_through_element_moves(name, shape):
    """A transpose, reshape, reverse or slice between the multiply and the add is index arithmetic in XLA's fused
    loop: LLVM still contracts ``c - (a*b).T`` (about a quarter of the elements differed before)."""
    a, b = _data(F32, shape, seed=1), _data(F32, shape, seed=2)
    c = _data(F32, shape[::-1], seed=3)
    if name.startswith("a*a") or name.startswith("(b*b)"):
        a = a.T.copy()
    assert_matches_jax(MOVED[name], a, b, c)


_PARTITIONED_UPDATE = """HloModule update

fused {
  p0 = f32[16,4]{1,0} parameter(0)
  p1 = f32[4,16]{1,0} parameter(1)
  k = f32[] constant(0.1)
  kb = f32[4,16]{1,0} broadcast(k), dimensions={}
  m = f32[4,16]{1,0} multiply(p1, kb)
  t = f32[16,4]{0,1} transpose(m), dimensions={1,0}
  c = f32[16,4]{1,0} copy(t)
  ROOT s = f32[16,4]{1,0} subtract(p0, c)
}

ENTRY main {
  w = f32[16,4]{1,0} parameter(0)
  g = f32[4,16]{1,0} parameter(1)
  ROOT u = f32[16,4]{1,0} fusion(w, g), kind=kLoop, calls=fused
}
"""


def test_partitioned_sgd_update_contracts_through_transpose_and_copy():
    """XLA's partitioned training step (examples/sharded_training.py) updates a weight from its transposed
    all-reduced gradient in one fusion, ``multiply -> transpose -> copy -> subtract``: one FMA, as XLA CPU
    computes it (7 of 64 elements of w2's update and 6-12 of w1's 256 differed from jax.jit before)."""
    from interop.hlo import import_hlo, run_hlo_on_xla

    w, g = _data(F32, (16, 4), seed=7) * F32(0.3), _data(F32, (4, 16), seed=8)
    module = import_hlo(_PARTITIONED_UPDATE)
    expected = run_hlo_on_xla(module, w, g)[0]
    got = np.asarray(lowering.compile(module)(w, g)[0])
    assert _bits_equal(got, expected).all()
    assert not _bits_equal(got, w - (g * F32(0.1)).T).all()  # (the contraction shows in these draws)


BITCAST_MOVED = {
    # XLA fuses the product it reads directly, not the one behind a bitcast (a reshape, a transpose of size-1
    # dimensions, or one its ReshapeMover sinks below a multiply by a constant)
    "reshape(g*0.1)+mu*0.9": lambda g, mu: (g * np.float32(0.1)).reshape(mu.shape) + mu * np.float32(0.9),
    "mu*0.9+reshape(g*0.1)": lambda g, mu: mu * np.float32(0.9) + (g * np.float32(0.1)).reshape(mu.shape),
    "0.1*g.T+0.9*mu": lambda g, mu: np.float32(0.1) * g.T + np.float32(0.9) * mu,
    "0.001*(g.T*g.T)+0.999*mu": lambda g, mu: np.float32(0.001) * (g.T * g.T) + np.float32(0.999) * mu,
}


@pytest.mark.parametrize("name", list(BITCAST_MOVED))
def test_the_product_read_directly_is_fused_over_one_behind_a_bitcast(name):
    """adam's moments of a gradient computed as ``(r.T @ x).T``: 1,215 of 4,096 elements differed before."""
    g, mu = _data(F32, (1, 4096), seed=1), _data(F32, (4096, 1), seed=2)
    assert_matches_jax(BITCAST_MOVED[name], g, mu)


def test_a_scalar_expression_ranks_below_the_loops_loads():
    """``0.1 * (g * (c + 1)) + 0.9 * mu`` with a scalar ``c`` fuses its first product: the scalar is computed
    before XLA's loop (1,386 of 4,096 elements differed when it was ranked as a load)."""
    g, mu = _data(F32, seed=1), _data(F32, seed=2)
    assert_matches_jax(lambda g, mu, c: 0.1 * (g * (c.astype(jnp.float32) + 1)) + 0.9 * mu, g, mu, np.int32(2))


SMALL_LOOP_BODIES = {
    "v*w + v*0.5": lambda v, w, u: v * w + v * 0.5,
    "v*(w+1) + v*0.5": lambda v, w, u: v * (w + 1) + v * 0.5,
    "v*v*w + v*u": lambda v, w, u: v * v * w + v * u,
    "v*0.5 + v*w": lambda v, w, u: v * 0.5 + v * w,
}


@pytest.mark.parametrize("shape", [(6,), (5, 7)], ids=str)
@pytest.mark.parametrize("name", list(SMALL_LOOP_BODIES))
def test_a_scalar_in_a_loop_xla_compiles_whole_ranks_as_a_load(name, shape):
    """In a while loop XLA compiles whole, its IR emitter loads a scalar loop value inside the element loop after
    the array read before it: ``v * w + v * 0.5`` fuses ``v * 0.5`` (27 of 30 draws differed in every element, and
    20 and 28 of 30 for the next two bodies, when the scalar ranked below the loads as in straight-line fusions)."""
    body = SMALL_LOOP_BODIES[name]
    rng = np.random.default_rng(len(name))

    def loop(x, w, u):
        return jax.lax.fori_loop(0, 4, lambda i, v: jnp.tanh(body(v, w, u)), x)

    for _ in range(6):
        x, (w, u) = rng.standard_normal(shape).astype(F32), rng.standard_normal(2).astype(F32)
        expected = jax.jit(loop)(x, w, u)
        module = import_jax(loop, x, w, u)
        for loops in ("never", "always"):
            (got,) = lowering.compile(module, loop_compilation=loops)(x, w, u)
            assert _bits_equal(got, expected).all(), loops


LOOP_INVARIANT_BODIES = {
    "x2*c + v*0.5": lambda v, x2, s: x2 * np.float32(3.3) + v * np.float32(0.5),
    "x2*c - v*-3": lambda v, x2, s: x2 * np.float32(3.3) - v * np.float32(-3.0),
    "x2*s + v": lambda v, x2, s: x2 * s + v,
    "x2*x2 + v*v": lambda v, x2, s: x2 * x2 + v * v,
    "exp(x2) + v*s": lambda v, x2, s: jnp.exp(x2) + v * s,  # (the exp no multiply to fuse first; f32[6]: expf)
    "sum(x2)*v + v": lambda v, x2, s: jnp.sum(x2) * v + v,  # (the sum before the loop, not its YNNPACK fusion)
}


@pytest.mark.parametrize("shape", [(6,), (5, 7), (64, 64)], ids=str)
@pytest.mark.parametrize("name", list(LOOP_INVARIANT_BODIES))
@pytest.mark.sample(6)
def test_a_product_xla_moves_out_of_the_loop_is_rounded(name, shape):
    """A product of values the loop carries unchanged (and constants) is computed before the loop by XLA's
    ``WhileLoopInvariantCodeMotion`` and stored: the add in the loop reads it rounded and fuses the other product
    (every draw of three-trip loops differed before, small and large shapes). A loop of one trip is removed first,
    and there the product fuses as in straight-line code."""
    body = LOOP_INVARIANT_BODIES[name]
    rng = np.random.default_rng(len(name) + len(shape))
    # (one trip of the exp body is straight-line sin(exp(x2) + v*s), whose fused exp XLA computes partly with glibc's
    # expf on small shapes: docs/operations.md, not reproduced)
    for trips in (3,) if "exp" in name else (1, 3):
        def loop(x0, x2, s):
            return jax.lax.fori_loop(0, trips, lambda i, v: jnp.sin(body(v, x2, s)), x0)

        for _ in range(3):
            x0, x2 = (rng.standard_normal(shape).astype(F32) for _ in range(2))
            s = F32(rng.standard_normal())
            expected = jax.jit(loop)(x0, x2, s)
            module = import_jax(loop, x0, x2, s)
            for mode in ("never", "always"):
                (got,) = lowering.compile(module, loop_compilation=mode, fusion=mode)(x0, x2, s)
                assert _bits_equal(got, expected).all(), (trips, mode)


def _rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.mark.parametrize("n", [2, 5, 17, 28, 40])
def test_a_sum_of_a_contracted_two_product_term(n):
    """``sum(a*b + c*d)`` in one loop: LLVM pushes the running sum into the term's FMAs, ``fma(a, b, fma(c, d,
    acc))`` (the Rosenbrock sum of ``n - 1`` terms: about half of the draws differed for 2 to 32 terms; 39 terms:
    windows of 32). 28 to 32 terms LLVM vectorizes instead of unrolling: not identified."""
    rng = np.random.default_rng(n)
    for _ in range(20):
        assert_matches_jax(_rosenbrock, rng.standard_normal(n).astype(F32))


def test_a_sum_of_a_contracted_term_in_a_loop():
    x = _data(F32, (5,), seed=4)

    def loop(x):
        return jax.lax.fori_loop(0, 4, lambda i, c: c + _rosenbrock(x * (1 + i.astype(jnp.float32))), jnp.float32(0))

    for loops in ("never", "always"):
        expected = jax.jit(loop)(x)
        (got,) = _run(loop, x, loop_compilation=loops)
        assert _bits_equal(got, expected).all(), loops


@pytest.mark.parametrize("n", sweep([2, 3, 5, 8, 16, 23], keep=3))
def test_a_product_two_slices_share_in_an_unrolled_sum_is_fused_only_where_one_reads_it(n):
    """The Rosenbrock sum of ``y = x * s``: LLVM unrolls the sum's loop and merges ``y[i + 1]`` of term ``i``
    (``y[1:]``) with term ``i + 1``'s ``y[:-1]``, so term ``i``'s subtraction fuses the square, except the last
    term's, whose ``s * x[-1]`` has one use and is fused instead (XLA's object code; before: 5-61 of 200 draws
    differed for 2 to 23 elements)."""
    rng = np.random.default_rng(n)
    for _ in range(60):
        assert_matches_jax(lambda x, s: _rosenbrock(x * s), rng.standard_normal(n).astype(F32),
                           np.float32(rng.uniform(0.5, 1.5)))


@pytest.mark.parametrize("n", [2, 5, 33])
@pytest.mark.sample(2)
def test_a_sliced_product_in_an_element_wise_loop_is_fused_at_every_element(n):
    """``y[1:] - y[:-1] ** 2`` with ``y = x * s`` returned as an array: XLA's loop computes ``y`` per element each
    slice reads, two one-use products, and LLVM fuses the subtraction's first, ``s * x[i + 1]`` (before: about a
    third of the elements of 200 draws differed)."""
    rng = np.random.default_rng(n)
    for _ in range(40):
        x, s = rng.standard_normal(n).astype(F32), np.float32(rng.uniform(0.5, 1.5))
        assert_matches_jax(lambda x, s: (x * s)[1:] - (x * s)[:-1] ** 2, x, s)
        assert_matches_jax(lambda x, s: ((x * s)[1:] - (x * s)[:-1] ** 2) * (1 - (x * s)[:-1]), x, s)


def test_contraction_through_zero_pads_and_a_negated_constant_product():
    """jax.grad of the Rosenbrock sum: ``pad(-(2 * s)) + pad(-(200 d) * 2x) + pad(200 d, shifted)``. XLA reads a
    zero pad as index arithmetic (``c + 0.0`` outside), LLVM folds ``-(2 * s)`` into ``s * -2`` and fuses that
    first product, and contracts the shifted pad's duplicated ``200 d`` (read from XLA's optimized LLVM IR; 18 of 41
    draws differed)."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        assert_matches_jax(jax.grad(_rosenbrock), rng.standard_normal(5).astype(F32))


@pytest.mark.parametrize("fn", [lambda x, t: jnp.sum((x * t)[1:]),
                                lambda x, t: jnp.sum((x * np.float32(3.3))[1:4]),
                                lambda x, t: jnp.sum((x.reshape(3, 4) * t)[:, 1:], axis=1)],
                         ids=["tail", "constant-window", "rows"])
def test_a_sum_of_a_sliced_product_contracts_each_step(fn):
    """XLA fuses the slice into the sum's loop as index arithmetic: the loop multiplies the sliced elements and
    contracts every step (before: 49-167 of 200 draws differed)."""
    import jax

    import lowering
    from interop import import_jax

    rng = np.random.default_rng(3)
    for _ in range(40):
        x = (rng.standard_normal(12) * np.exp(rng.uniform(-3, 3, 12))).astype(np.float32)
        t = np.float32(rng.standard_normal())
        for loop_compilation in ("auto", "never"):
            (ours,) = lowering.compile(import_jax(fn, x, t), loop_compilation=loop_compilation)(x, t)
            ref = np.asarray(jax.jit(fn)(x, t))
            np.testing.assert_array_equal(np.asarray(ours).view(np.uint32), ref.view(np.uint32))


def _line_step(x, p, a, g, d):
    """The Rosenbrock value and gradient at ``x + a*p``, the gradient read twice: ``g + grad`` and
    ``d + grad[0] * p[0]`` (as BFGS's line search reads it: the new gradient and its slope)."""
    v, grad = jax.value_and_grad(_rosenbrock)(x + a * p)
    return v, g + grad, d + grad[0] * p[0]


def _line_steps(x, p, a, n):
    """:func:`_line_step` in a while loop of ``n`` trips, small enough for XLA to compile whole."""
    def body(i, c):
        v, g, d, t = c
        v2, g2, d2 = _line_step(x, p, t, g, d)
        return v + v2, g2, d2, t * 0.75
    return jax.lax.fori_loop(0, n, body, (jnp.float32(0), jnp.zeros_like(x), jnp.float32(0), a))[:3]


@pytest.mark.parametrize("loop", [False, True], ids=["straight-line", "small-call-loop"])
def test_a_padded_product_read_by_copies_of_its_add_is_not_contracted(loop):
    """A gradient sum read by two fusions (``g + grad`` and ``grad[0] * p[0]``) is copied into both; its zero pads
    then have two users and XLA makes each pad a fusion of its own (a pad invalidates the emitter's cache), so
    ``pad(-(200 d) * 2y) + ...`` adds a stored, rounded product (read from XLA's optimized HLO and LLVM IR, also in
    the loop it compiles whole: 98-108 of 200 draws differed with the pad contracted)."""
    rng = np.random.default_rng(7)
    n = np.int32(1)
    if loop:
        text = jax.jit(_line_steps).lower(*(np.zeros(5, F32),) * 2, F32(0.5), n).compile().as_text()
        assert "xla_cpu_small_call" in text
    fn = _line_steps if loop else _line_step
    for _ in range(60):
        x, p = rng.standard_normal((2, 5)).astype(F32)
        a = F32(rng.uniform(0, 1))
        args = (x, p, a, n) if loop else (x, p, a, rng.standard_normal(5).astype(F32), F32(0.5))
        assert_matches_jax(fn, *args)


def _value_and_gradient_steps(x, p, n):
    """The Rosenbrock value and gradient at ``x + a*p`` for ``a`` = 1, 1/2, ... summed in a while loop of ``n``
    trips, small enough for XLA to compile whole (as BFGS's zoom loops evaluate them)."""
    def body(c):
        i, a, v, g = c
        v2, g2 = jax.value_and_grad(_rosenbrock)(x + a * p)
        return i + 1, a * 0.5, v + v2, g + g2
    init = (0, jnp.float32(1.0), jnp.float32(0.0), jnp.zeros_like(x))
    return jax.lax.while_loop(lambda c: c[0] < n, body, init)[2:]


def test_a_product_two_elements_share_in_a_loop_compiled_whole_is_rounded():
    """Inside a loop XLA compiles whole, each element of the Rosenbrock gradient computes ``u = x[1:] - x[:-1]**2``
    at itself and at the element before, and LLVM shares the square between the two (xla-small-loops'
    ``SHARED_PRODUCT``): ``u`` is not contracted (read from XLA's object code; 138 of 200 draws differed with it
    contracted, and BFGS's line search from its fourth iterate)."""
    rng = np.random.default_rng(11)
    n = np.int32(2)
    text = jax.jit(_value_and_gradient_steps).lower(np.zeros(5, F32), np.zeros(5, F32), n).compile().as_text()
    assert "xla_cpu_small_call" in text
    for _ in range(100):
        x, p = rng.standard_normal((2, 5)).astype(F32)
        assert_matches_jax(_value_and_gradient_steps, x, p, n)


EXP_AND_PRODUCT = {
    # XLA's f32 exp ends with a multiply by 2**k that LLVM contracts into the add first: the product is rounded
    "exp(x)+x*s": lambda x, s: jnp.exp(x) + x * s,
    "x*s+exp(x)": lambda x, s: x * s + jnp.exp(x),
    "exp(x)-x*s": lambda x, s: jnp.exp(x) - x * s,
    "x*s-exp(x)": lambda x, s: x * s - jnp.exp(x),  # (the subtraction's operand 0, the product, is fused)
    "f64": lambda x, s: jnp.exp(x.astype(jnp.float64)) + x.astype(jnp.float64) * s,  # (f64's exp: product fused)
}


@pytest.mark.parametrize("shape", [(), (1,), (3,), (32, 64)])
@pytest.mark.parametrize("name", list(EXP_AND_PRODUCT))
def test_an_f32_exp_added_to_a_product_contracts_its_own_scaling(name, shape):
    """f32[64, 512]: 5,500 of 32,768 elements of ``exp(x) + x*s`` differed when the product was fused; a single
    element's exp fuses the product (45-58 of 300 draws differed the other way)."""
    for seed in range(1 if shape and shape != (1,) else 40):
        x, s = _data(F32, shape, seed=seed), _data(F32, shape, seed=seed + 100)
        assert_matches_jax(EXP_AND_PRODUCT[name], x, s)


@pytest.mark.parametrize("shape", [(16,), (5, 7), (256,)])
def test_an_exp_added_to_a_product_in_a_loop(shape):
    """In a loop XLA compiles whole (f32[16], [5, 7]) the product is fused; in one of separate fusions ([256]) it
    is rounded (7, 10 and 51 elements differed with the other rule)."""
    def fn(x, s):
        return jax.lax.fori_loop(0, 30, lambda i, v: jnp.exp(v * F32(-0.1)) + v * s - F32(0.5) * v, x)

    x, s = _data(F32, shape, seed=4) * F32(0.3), _data(F32, shape, seed=5) * F32(0.3)
    for mode in ("never", "always"):
        expected = np.asarray(jax.jit(fn)(x, s))
        got = lowering.compile(import_jax(fn, x, s), loop_compilation=mode)(x, s)[0]
        assert _bits_equal(got, expected).all(), mode


EXP_BESIDE_A_PRODUCT = {
    # (LLVM's Reassociate orders the add's operands by rank, the DAG combiner contracts operand 0's multiply)
    "v*s+exp(x)": lambda v, y, x, s: v * s + jnp.exp(x),  # the product ranks first: fused
    "v*y+exp(x)": lambda v, y, x, s: v * y + jnp.exp(x),
    "y*x+exp(x)": lambda v, y, x, s: y * x + jnp.exp(x),
    "x*s+exp(x)": lambda v, y, x, s: x * s + jnp.exp(x),
    "x*y+exp(x)": lambda v, y, x, s: x * y + jnp.exp(x),  # the exp ranks first (x loaded first): rounded
    "exp(x)+v*s": lambda v, y, x, s: jnp.exp(x) + v * s,  # rounded where the loop is vectorized
}


@pytest.mark.parametrize("shape", [(64, 64), (8, 384), (20,), (48,), (100,)])
@pytest.mark.parametrize("name", list(EXP_BESIDE_A_PRODUCT))
@pytest.mark.sample(12)
def test_an_exp_beside_a_product_is_ordered_by_rank(name, shape):
    """``v*s + exp(x)`` fuses the product (697 of 4,096 elements differed with it rounded, every draw of f32[64,
    64] and [8, 384]); ``x*y + exp(x)`` rounds it; ``exp(x) + v*s`` over 48 elements rounds it (the loop
    vectorized: every element fused differed in some draw). (100 elements: the vectorized loop has no scalar
    remainder, whose elements fuse -- not modelled.)"""
    v, y, x = (_data(F32, shape, seed=seed) for seed in (1, 2, 3))
    s = _data(F32, (), seed=4)
    assert_matches_jax(EXP_BESIDE_A_PRODUCT[name], v, y, x, s)


HOISTED_PRODUCTS = [
    # (x shape, m shape, body): x*s - 0.5 + m*3 (or the body's value + m*3), m spread over x's shape
    ((4, 6, 5, 16), (1, 6, 1, 1), None),  # not varying along the innermost dimension: a splat, rounded
    ((4, 6, 5, 16), (1, 1, 1, 16), None),  # along it alone, unrolled whole: hoisted, rounded
    ((4, 6, 16), (4, 1, 16), None),
    ((8, 128), (1, 128), None),
    ((4, 6, 5, 16), (1, 6, 5, 16), None),  # along the next outer dimension too: fused
    ((8, 256), (1, 256), None),  # the innermost loop stays a loop: fused
    ((64, 512), (1, 512), None),
    ((8, 240), (1, 240), "sqrt"),  # sqrt(|x|): unrolled at 15 trips
    ((8, 256), (1, 256), "sqrt"),  # not at 16
    ((8, 128), (1, 128), "logistic"),
    ((8, 192), (1, 192), "logistic"),
    ((8, 16), (1, 16), "tanh"),  # (a costly body over two loops: rounded)
    ((4, 6, 16), (4, 1, 16), "tanh"),  # (over three loops: fused)
    ((4, 6, 5, 16), (1, 1, 1, 16), "tanh"),
]


@pytest.mark.parametrize("spread_first", [False, True])
@pytest.mark.parametrize("x_shape, m_shape, body", HOISTED_PRODUCTS)
def test_a_product_of_broadcasts_is_fused_where_llvm_computes_it_in_the_adds_loop(x_shape, m_shape, body,
                                                                                   spread_first):
    """Before: ``broadcast(m * 3) + c`` was always rounded and ``broadcast(m) * 3 + c`` always fused; 100 to 8,470
    elements differed in each case but one of each form."""
    first = {None: lambda x, s: x * s - F32(0.5), "sqrt": lambda x, s: jnp.sqrt(jnp.abs(x)),
             "logistic": lambda x, s: jax.nn.sigmoid(x), "tanh": lambda x, s: jnp.tanh(x)}[body]
    dims = tuple(range(len(x_shape)))

    def fn(x, s, m):
        spread = jax.lax.broadcast_in_dim(m, x.shape, dims) * F32(3) if spread_first else m * F32(3)
        return first(x, s) + spread

    x, s, m = _data(F32, x_shape, seed=1), _data(F32, x_shape, seed=2), _data(F32, m_shape, seed=3)
    assert_matches_jax(fn, x, s, m)


EXP_ADDS = {
    "exp(x)-x": lambda x, y: jnp.exp(x) - x, "x-exp(x)": lambda x, y: x - jnp.exp(x),
    "exp(x)+y": lambda x, y: jnp.exp(x) + y, "y+exp(x)": lambda x, y: y + jnp.exp(x),
    "exp(x)-y": lambda x, y: jnp.exp(x) - y, "y-exp(x)": lambda x, y: y - jnp.exp(x),
    "exp(x)+exp(y)": lambda x, y: jnp.exp(x) + jnp.exp(y), "exp(x)-1": lambda x, y: jnp.exp(x) - F32(1),
}
_EXP_EDGES_X = [np.inf, 88.75, 88.5, 1.0, -1.0, np.nan, -np.inf, -87.5, -88.0, 10.0, 0.5, 2.0]
_EXP_EDGES_Y = [np.inf, -3e38, -3e38, 2.0, 1e-40, 1.0, np.nan, 1e-38, -1e-38, 3.0, -np.inf, np.nan]


@pytest.mark.parametrize("n", [6, 72])
@pytest.mark.parametrize("name", list(EXP_ADDS))
def test_an_exp_contracted_into_its_add_is_one_rounding(name, n):
    """LLVM contracts XLA's f32 exp's final ``p * 2**n`` into the add reading it (``hlo_internal.exp_add``):
    ``exp(x) - x`` at +inf is -inf (NaN rounded), ``exp(88.75) - 3e38`` finite (+inf rounded), ``y - exp(x)`` a
    signed zero where the rounded difference was +0 -- 6 of 72 elements differed in each form before; over 6
    elements the exp is glibc's ``expf`` per element, no multiply (NaN at +inf, as XLA). NaN payloads included, in
    every configuration."""
    x = np.resize(np.array(_EXP_EDGES_X, F32), n)
    y = np.resize(np.array(_EXP_EDGES_Y, F32), n)
    fn = EXP_ADDS[name]
    expected = np.asarray(jax.jit(fn)(x, y))
    module = import_jax(fn, x, y)
    for options in ({"fusion": "never", "loop_compilation": "never"}, {"fusion": "always", "loop_compilation": "always"}):
        got = lowering.compile(module, **options)(x, y)[0]
        if name == "exp(x)+exp(y)" or n == 72:
            assert got.tobytes() == expected.tobytes(), options
        else:  # (over 6 elements glibc's expf values, not reproduced: the infinities and NaNs are)
            assert _bits_equal(got[~np.isfinite(expected)], expected[~np.isfinite(expected)]).all(), options


EXP_MINUS = {
    # (x at +inf: -inf where the exp's own multiply is contracted, NaN where it is rounded or the product fused;
    # exp(88.75) - 3e38 finite where contracted, +inf rounded)
    "exp(x)-x": lambda x: jnp.exp(x) - x, "x-exp(x)": lambda x: x - jnp.exp(x),
    "exp(x)-3e38": lambda x: jnp.exp(x) - F32(3e38), "3e38-exp(x)": lambda x: F32(3e38) - jnp.exp(x),
    "exp(x)-2x": lambda x: jnp.exp(x) - 2 * x, "exp(x)-x*x": lambda x: jnp.exp(x) - x * x,
}
_EXP_MINUS_EDGES = [np.inf, -np.inf, 88.75, 88.72, -104.0, 0.0, 1.0, -1.0, 3e38, 88.5, 13.3, -13.3, np.nan]


_EXP_MINUS_SHAPES = ["()", "(1,)", "(9,)", "(2, 9)", "(3, 1)", "(16,)", "(40,)", "(44,)", "(64,)", "(4, 3)", "(8, 8)", "(5, 16)",
                     "(3, 40)", "(8, 64)"]
_EXP_MINUS_NOT_MODELLED = {
    # (a loop vectorized across 4 rows of 3 fuses the product x*x, not 2*x: not modelled)
    ("exp(x)-x*x", "(4, 3)", True),
}


@pytest.mark.parametrize("name, shape, loop", [
    p for p in sweep(list(EXP_MINUS), _EXP_MINUS_SHAPES, [False, True], keep=13)
    if tuple(p.values) not in _EXP_MINUS_NOT_MODELLED])
def test_which_multiply_llvm_contracts_beside_an_exp_as_xla(name, shape, loop):
    """Long fuzz campaign (session 19): ``fori_loop(0, 3, lambda i, x: jnp.exp(x) - x)`` on f32[2, 9] was NaN where
    XLA gives -inf. Without a product beside it, the exp's final multiply by ``2**k`` is contracted into the add on
    every shape, straight-line and in loops XLA compiles whole (``exp(x) - 3e38`` on f32[9] and ``exp(x) - x`` on
    f32[1] were rounded here; in a ``fori_loop`` every shape was) -- but where LLVM vectorizes across the rows of
    [4|8|16, 2|4|8] and moves the adds of one constant past the interleaving store. With a product beside it, the
    product is contracted in scalar code and the exp's multiply in vector code (``_vectorized_loop``: [4, 3] and
    [8, 8] rows vectorized, were rounded here; 40 elements unrolled, 44 vectorized on hosts tuned for 64-byte
    vectors). Compared with jax.jit in every configuration, on any host (the default run a diagonal of the
    combinations, ``-m slow`` the rest)."""
    shape = eval(shape)  # noqa: S307 - (a shape literal of _EXP_MINUS_SHAPES)
    fn = EXP_MINUS[name]
    if loop:
        fn = lambda x, body=fn: jax.lax.fori_loop(0, 2, lambda i, v: body(v), x)  # noqa: E731
    x = np.resize(np.array(_EXP_MINUS_EDGES, F32), shape).astype(F32)
    expected = np.asarray(jax.jit(fn)(x))
    module = import_jax(fn, x)
    for options in ({"fusion": "never", "loop_compilation": "never"}, {"fusion": "always", "loop_compilation": "always"}):
        got = lowering.compile(module, **options)(x)[0]
        assert _bits_equal(got, expected).all(), (options, np.flatnonzero(~_bits_equal(got, expected)))


EXP_BESIDE_PRODUCTS = {
    "exp(x)+x*y": lambda x, y: jnp.exp(x) + x * y, "exp(x)-x*y": lambda x, y: jnp.exp(x) - x * y,
    "x*y+exp(x)": lambda x, y: x * y + jnp.exp(x), "exp(x)+2y": lambda x, y: jnp.exp(x) + F32(2) * y,
    "loop": lambda x, y: jax.lax.fori_loop(0, 2, lambda i, v: jnp.exp(v * F32(0.1)) + v * y, x),
}


@pytest.mark.parametrize("name, shape", sweep(list(EXP_BESIDE_PRODUCTS), ["(9,)", "(10,)", "(43,)", "(45,)",
                                                                         "(3, 41)", "(5, 63)", "(8, 8)"]))
def test_an_exp_beside_a_product_in_vector_code_and_its_scalar_remainder(name, shape):
    """Where a fusion is partly vector code, the exp's multiply is contracted in the vector part and the product in
    the scalar part (``_exp_multiply_seen``'s per-element form): XLA's fusion emitter computes f32[9]'s ninth
    element in scalar code, LLVM's vectorized loops (loop-emitter fusions, loops XLA compiles whole) the last ``c %
    4`` elements of each row. Before, 4 of 180 elements of ``exp(x) + x*y`` on f32[9] differed from jax.jit, and
    7 to 93 of the loop's over 20 draws."""
    shape = eval(shape)  # noqa: S307 - (a shape literal of the parametrization)
    fn = EXP_BESIDE_PRODUCTS[name]
    x, y = _data(F32, shape, seed=1), _data(F32, shape, seed=2)
    module = import_jax(fn, x, y)
    executables = [lowering.compile(module, **options) for options in (
        {"fusion": "never", "loop_compilation": "never"}, {"fusion": "always", "loop_compilation": "always"})]
    for seed in range(8):
        x, y = _data(F32, shape, seed=3 * seed), _data(F32, shape, seed=3 * seed + 1)
        expected = np.asarray(jax.jit(fn)(x, y))
        for exe in executables:
            assert _bits_equal(exe(x, y)[0], expected).all(), seed


@pytest.mark.parametrize("extremum", ["minimum", "maximum"])
@pytest.mark.parametrize("loop", [False, True], ids=["straight", "loop"])
def test_a_max_or_min_ranks_as_one_instruction(extremum, loop):
    """Long fuzz campaign (session 20): ``v * (v * v) + v * 2`` with ``v = jnp.minimum(x0, x1)`` in a ``lax.scan``
    fused ``v * (v * v)``; XLA fuses ``v * 2``: LLVM's ``Reassociate`` ranks a float max/min one above its operands
    (like an ``llvm.exp`` call), so the lower-ranked ``v * 2`` goes first. 20 and 30 of 210 elements differed
    (min, max) before, straight-line and in a loop."""
    op = getattr(jnp, extremum)

    def body(a, b):
        v = op(a, b)
        return v * (v * v) + v * F32(2.0)

    fn = (lambda a, b: jax.lax.fori_loop(0, 2, lambda i, x: body(x, b) * F32(0.1), a)) if loop else body
    for seed in range(6):
        a, b = _data(F32, (21,), seed=2 * seed), _data(F32, (21,), seed=2 * seed + 1)
        assert_matches_jax(fn, a, b)


CONVERTED_PRODUCTS = {
    "f16 round trip": lambda x, s: (lambda v: v * x + v * s)(x.astype(jnp.float16).astype(jnp.float32)),
    "from int32": lambda x, s: (lambda v: v * x + x * s)((x * F32(10)).astype(jnp.int32).astype(jnp.float32)),
}


@pytest.mark.parametrize("name", list(CONVERTED_PRODUCTS))
@pytest.mark.parametrize("shape", [(20,), (4, 16)], ids=str)
def test_a_conversion_ranks_as_one_instruction(name, shape):
    """Long fuzz campaign (session 20): ``v * x + v * s`` with ``v = f32(f16(x))`` and a scalar ``s`` fused the
    second product, XLA the first: a conversion is one instruction to LLVM's ``Reassociate`` (one rank above its
    operand), so the two products tie and keep their order; ranked as a value the loop loads, the conversion put
    ``v * s`` first. Before: 60-158 of 6 draws' elements differed (and 32-132 for ``v * x + x * s`` with ``v``
    converted from int32, straight-line and in loops)."""
    fn = CONVERTED_PRODUCTS[name]
    for seed in range(4):
        x, s = _data(F32, shape, seed=seed), _data(F32, (), seed=seed + 50)
        assert_matches_jax(fn, x, s)
        assert_matches_jax(lambda a, b: jax.lax.fori_loop(0, 2, lambda i, v: fn(v, b) * F32(0.1), a), x, s)


def _rolled(x, y, z):
    v = jnp.roll(x, 1)
    return v * (v - 1) + x * F32(2.0)


def _conditional(x, y, z):
    return x * jax.lax.cond(jnp.sum(x) > 0, lambda a: a * 2, lambda a: a - 1, y) + x * F32(2.0)


LOAD_ORDERS = {
    "x*y + x*3": lambda x, y, z: x * y + x * F32(3.0),
    "x*(y+1) + x*3": lambda x, y, z: x * (y + 1) + x * F32(3.0),
    "z*(x*y) + x*3": lambda x, y, z: z * (x * y) + x * F32(3.0),
    "(x*y)*3 + x*z": lambda x, y, z: (x * y) * F32(3.0) + x * z,
    "(x+z)*y + x*3": lambda x, y, z: (x + z) * y + x * F32(3.0),
    "x*y + x*x": lambda x, y, z: x * y + x * x,
    "roll": _rolled,
    "cond": _conditional,
    "roll*y + x*2": lambda x, y, z: jnp.roll(x, 3) * y + x * F32(2.0),
    "roll(x*y)*z + x*3": lambda x, y, z: jnp.roll(x * y, 1) * z + x * F32(3.0),
    "concat*x + x*3": lambda x, y, z: jnp.concatenate([x[50:], y[:50]]) * x + x * F32(3.0),
}


@pytest.mark.parametrize("shape", [(100,), (4096,)], ids=["100", "4096"])
@pytest.mark.parametrize("name", list(LOAD_ORDERS))
def test_the_product_fused_follows_the_order_xlas_emitter_loads(name, shape):
    """Long fuzz campaign (session 21): ``x * y + x * 3`` fused ``x * 3``, XLA ``x * y`` (about a quarter of the
    elements differed, every shape but one element). XLA's loop emitter visits a fusion breadth-first from its root and
    emits in reverse, so it loads ``y`` before ``x`` (``x`` is reached first from ``x * 3``; read from its MLIR dump):
    the products tie in LLVM's ranks and keep their order. Its other emitters (no constant or broadcast in the
    fusion: ``x * y + x * x``) read operand 0's expression first. A roll two ops read (``v * (v - 1)``) is computed
    once, not fused, and loaded like an argument; a conditional's result is a loaded value. A concatenate one op
    reads is the hero of its fusion, whose value the ops after it get as an argument, ranked below their loads."""
    fn = LOAD_ORDERS[name]
    for seed in range(3):
        x, y, z = (_data(F32, shape, seed=seed + 10 * k) * F32(1000.0) for k in range(3))
        assert_matches_jax(fn, x, y, z)
