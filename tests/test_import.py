"""Importing JAX programs and StableHLO: every input kind, op families vs jax.jit, constants, errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import jax
import jax.numpy as jnp
from jax import lax
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType

import lowering
from interop import import_jax, import_stablehlo
from lowering.kernels.registry import KERNELS
from xla_dialect.errors import MlirParseError, UnsupportedError, XlaError
from xla_dialect.layout import layout_of
from xla_dialect.ops import OPS_BY_NAME

from helpers import assert_close


def needs(*names):
    """Skip unless every hlo op in ``names`` exists and has a kernel (op families land separately)."""
    import lowering.kernels  # noqa: F401

    missing = [n for n in names if n not in OPS_BY_NAME or OPS_BY_NAME[n] not in KERNELS]
    if missing:
        pytest.skip(f"hlo ops not available yet: {', '.join(missing)}")


def check_against_jax(fn, *args, max_ulp=0, atol=0.0, **kwargs):
    """Import ``fn``, run it on the NumPy executor, compare every output with jax.jit."""
    module = import_jax(fn, *args, **kwargs)
    module.verify()
    got = lowering.compile(module)(*jax.tree.leaves((args, kwargs)))
    want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(fn)(*args, **kwargs))]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, max_ulp=max_ulp, atol=atol, err_msg=f"output #{i}")
    return module


def main_of(module):
    return next(op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main")


RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype(np.float32)
Y = RNG.standard_normal((4, 2)).astype(np.float32)


def _f(x, y):
    return {"b": jnp.sin(x) @ y, "a": jnp.sum(x, axis=0), "c": (jnp.where(x > 0, x, -x), x * 2.0)}


# ----------------------------------------------------------------------------
# Input kinds
# ----------------------------------------------------------------------------


def _kinds():
    low = jax.jit(_f).lower(X, Y)
    exp = jax.export.export(jax.jit(_f))(X, Y)
    return {
        "function": lambda: import_jax(_f, X, Y),
        "jitted": lambda: import_jax(jax.jit(_f), X, Y),
        "shape_dtype_struct": lambda: import_jax(_f, jax.ShapeDtypeStruct(X.shape, X.dtype),
                                                 jax.ShapeDtypeStruct(Y.shape, Y.dtype)),
        "lowered": lambda: import_jax(low),
        "traced": lambda: import_jax(jax.jit(_f).trace(X, Y)),
        "exported": lambda: import_jax(exp),
        "artifact": lambda: import_jax(exp.mlir_module_serialized),
        "artifact_stablehlo": lambda: import_stablehlo(exp.mlir_module_serialized),
        "text_pretty": lambda: import_jax(low.as_text()),
        "text_debug": lambda: import_stablehlo(low.as_text(debug_info=True)),
        "text_generic": lambda: import_stablehlo(
            low.compiler_ir("stablehlo").operation.get_asm(print_generic_op_form=True)),
        "text_bytes": lambda: import_stablehlo(low.as_text().encode()),
        "ir_module": lambda: import_jax(low.compiler_ir("stablehlo")),
    }


@pytest.mark.parametrize("kind", list(_kinds()))
def test_every_input_kind(kind):
    module = _kinds()[kind]()
    module.verify()
    got = lowering.compile(module)(X, Y)
    want = jax.tree.leaves(jax.jit(_f)(X, Y))  # pytree outputs flattened in jax.tree order
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert_close(g, np.asarray(w), max_ulp=2, atol=1e-5)


def test_serialized_export_bytes():
    pytest.importorskip("flatbuffers")
    data = jax.export.export(jax.jit(_f))(X, Y).serialize()
    module = import_jax(data)
    got = lowering.compile(module)(X, Y)
    for g, w in zip(got, jax.tree.leaves(jax.jit(_f)(X, Y))):
        assert_close(g, np.asarray(w), max_ulp=2, atol=1e-5)


def test_kwargs_and_unused_arguments_are_kept():
    def f(a, unused, *, scale):
        return a * scale

    a = np.arange(3, dtype=np.float32)
    module = import_jax(f, a, np.zeros(5, np.int32), scale=np.float32(2))
    assert [t.get_shape() for t in main_of(module).function_type.inputs] == [(3,), (5,), ()]
    (out,) = lowering.compile(module)(a, np.zeros(5, np.int32), np.float32(2))
    np.testing.assert_array_equal(out, a * 2)
    # jax.jit and jax.export drop unused arguments; the import puts them back.
    exp = jax.export.export(jax.jit(lambda a, unused: a + 1))(a, np.zeros(5, np.int32))
    assert len(main_of(import_jax(exp)).function_type.inputs) == 2
    jitted = import_jax(jax.jit(lambda unused, a: a + 1), np.zeros(5, np.int32), a)
    assert [t.get_shape() for t in main_of(jitted).function_type.inputs] == [(5,), (3,)]
    (out,) = lowering.compile(jitted)(np.zeros(5, np.int32), a)
    np.testing.assert_array_equal(out, a + 1)


def test_example_arguments_only_where_they_mean_something():
    with pytest.raises(XlaError, match="static shapes already"):
        import_jax(jax.jit(_f).lower(X, Y), X, Y)
    with pytest.raises(XlaError, match="2 arguments; 1 example"):
        import_jax(jax.jit(_f).lower(X, Y).as_text(), X)
    with pytest.raises(XlaError, match="cannot import"):
        import_jax(42)


# ----------------------------------------------------------------------------
# Shape-polymorphic programs
# ----------------------------------------------------------------------------


def _poly(x):
    return jnp.sin(x) * x.shape[0] + jnp.sum(x, axis=0), jnp.concatenate([x, x])


def _poly_export():
    a, = jax.export.symbolic_shape("a")
    return jax.export.export(jax.jit(_poly))(jax.ShapeDtypeStruct((a, 4), jnp.float32))


@pytest.mark.parametrize("rows", [1, 3, 7])
def test_shape_polymorphic_export_is_refined(rows):
    exported = _poly_export()
    x = RNG.standard_normal((rows, 4)).astype(np.float32)
    for module in (import_jax(exported, x),
                   import_jax(exported, jax.ShapeDtypeStruct(x.shape, x.dtype)),
                   import_stablehlo(exported.mlir_module(), x),
                   import_jax(exported.mlir_module_serialized, x)):
        module.verify()
        assert main_of(module).function_type.inputs.data[0].get_shape() == (rows, 4)
        got = lowering.compile(module)(x)
        for g, w in zip(got, jax.jit(_poly)(x)):
            assert_close(g, np.asarray(w), max_ulp=2)


def test_shape_polymorphic_errors():
    exported = _poly_export()
    with pytest.raises(UnsupportedError, match="dynamic shape.*example arguments"):
        import_jax(exported)
    with pytest.raises(UnsupportedError, match="@main expects tensor<\\?x4xf32>"):
        import_jax(exported, np.zeros((3, 5), np.float32))
    with pytest.raises(UnsupportedError, match="refine"):
        import_jax(exported, np.zeros((0, 4), np.float32))  # violates JAX's a >= 1 assertion


# ----------------------------------------------------------------------------
# Op families vs jax.jit
# ----------------------------------------------------------------------------

ELEMENTWISE = [
    ("float32", lambda x, y: (jnp.sin(x) + jnp.exp(y) * x - y / (jnp.abs(x) + 1), jnp.maximum(x, y), x < y), 4),
    ("float64", lambda x, y: (jnp.tanh(x) * jnp.sqrt(jnp.abs(y)), jnp.minimum(x, y), x >= y, -x), 4),
    ("int32", lambda x, y: (x + y, x * y, x // jnp.where(y == 0, 1, y), x ^ y, x > y, jnp.clip(x, -3, 3)), 0),
    ("uint8", lambda x, y: (x + y, x & y, x >> 2, x != y), 0),
    ("bool", lambda x, y: (x & y, x | ~y, x ^ y), 0),
]


@pytest.mark.parametrize("dtype,fn,ulp", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
def test_elementwise(dtype, fn, ulp):
    shape = (2, 5)
    if dtype == "bool":
        x, y = RNG.random(shape) > 0.5, RNG.random(shape) > 0.5
    elif dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        x = RNG.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
        y = RNG.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    else:
        x = RNG.standard_normal(shape).astype(dtype)
        y = RNG.standard_normal(shape).astype(dtype)
        x[0, 0], y[0, 1], x[1, 2] = np.nan, np.inf, -0.0
    check_against_jax(fn, x, y, max_ulp=ulp)


def test_scalars_and_empty_arrays():
    check_against_jax(lambda x, y: (x * y + 1, jnp.sum(y)), np.float32(3), np.zeros((0, 4), np.float32))


def test_dot_general():
    needs("hlo.dot_general")
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    # Summation order differs from XLA's: a few ULPs, or an absolute error under cancellation.
    check_against_jax(lambda a, b: (jnp.einsum("bij,bjk->bik", a, b), a.reshape(6, 4) @ b[0]), a, b,
                      max_ulp=4, atol=1e-5)
    i = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    check_against_jax(lambda a: a @ a.T, i)


def test_reduce():
    needs("hlo.reduce")
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    check_against_jax(lambda x: (jnp.sum(x, axis=1), jnp.max(x, axis=(0, 2)), jnp.argmax(x, axis=2)), x,
                      max_ulp=4)


def test_while_and_fori_loop():
    needs("hlo.while")

    def f(x, n):
        def body(i, carry):
            return carry * 1.5 + i

        return lax.fori_loop(0, n, body, x), lax.while_loop(lambda v: v[0] < 10, lambda v: (v[0] + 1, v[1] * 2),
                                                            (n, x))

    check_against_jax(f, np.float32([1, 2, 3]), np.int32(4))


def test_cond_and_switch():
    needs("hlo.conditional")

    def f(p, i, x):
        a = lax.cond(p, lambda v: v + 1, lambda v: v * 3, x)
        b = lax.switch(i, [lambda v: v - 1, lambda v: v * v, lambda v: -v], x)
        return a, b

    x = np.float32([1, -2, 3])
    for p, i in [(True, 0), (False, 1), (True, 2), (False, 7), (True, -3)]:
        check_against_jax(f, np.bool_(p), np.int32(i), x)


def test_sort():
    needs("hlo.sort")
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    x[0, 1] = np.nan
    check_against_jax(lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=0)), x)


def test_data_movement_and_convert():
    needs("hlo.transpose", "hlo.slice", "hlo.concatenate", "hlo.pad", "hlo.convert")
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    check_against_jax(lambda x: (x.T, x[1:, ::2], jnp.concatenate([x, x], 0), jnp.pad(x, 1),
                                 x.astype(jnp.int32), x.astype(jnp.bfloat16), x.reshape(2, 6)), x)


def test_private_functions_become_calls():
    module = check_against_jax(lambda x: jnp.where(x > 0, x, 0.0) + jax.jit(jnp.sin)(x), X, max_ulp=2)
    names = {op.sym_name.data for op in module.ops}
    assert "main" in names and len(names) > 1
    assert any(op.name == "hlo.call" for op in module.walk())


# ----------------------------------------------------------------------------
# Constants of every element type
# ----------------------------------------------------------------------------

CONSTANT_VALUES = {
    "bool": np.array([True, False, True, True]),
    "int8": np.array([-128, 0, 5, 127], np.int8),
    "uint32": np.array([0, 1, 2**31, 2**32 - 1], np.uint32),
    "int64": np.array([-(2**63), 0, 7, 2**63 - 1], np.int64),
    "float16": np.array([0.5, -0.0, np.inf, np.nan], np.float16),
    "float32": np.array([1.5, -0.0, -np.inf, np.nan], np.float32),
    "float64": np.array([1e-300, -0.0, np.inf, 0.1], np.float64),
    "bfloat16": np.array([1.5, -0.0, np.inf, 3e38], ml_dtypes.bfloat16),
    "float8_e4m3fn": np.array([1.5, -0.0, 448, np.nan], ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.array([1.5, -0.0, np.inf, 57344], ml_dtypes.float8_e5m2),
    "int4": np.array([-8, -1, 0, 7], ml_dtypes.int4),
    "uint4": np.array([0, 1, 9, 15], ml_dtypes.uint4),
    "int2": np.array([-2, -1, 0, 1], ml_dtypes.int2),
    "uint2": np.array([0, 1, 2, 3], ml_dtypes.uint2),
    "float8_e4m3": np.array([1.5, -0.0, np.inf, -240], ml_dtypes.float8_e4m3),
    "float8_e3m4": np.array([1.5, -0.0, np.inf, 15.5], ml_dtypes.float8_e3m4),
    "float8_e4m3fnuz": np.array([1.5, 0.0, np.nan, -240], ml_dtypes.float8_e4m3fnuz),
    "float8_e5m2fnuz": np.array([1.5, 0.0, np.nan, -57344], ml_dtypes.float8_e5m2fnuz),
    "float8_e4m3b11fnuz": np.array([1.5, 0.0, np.nan, -30], ml_dtypes.float8_e4m3b11fnuz),
    "float8_e8m0fnu": np.array([1.0, 2.0**-127, np.nan, 2.0**127], ml_dtypes.float8_e8m0fnu),
    "float4_e2m1fn": np.array([1.5, -0.0, 6.0, -0.5], ml_dtypes.float4_e2m1fn),
    "complex64": np.array([1 + 2j, -0.0 - 1j, complex(np.inf, 1), complex(np.nan, 0)], np.complex64),
    "complex128": np.array([1 + 2j, 0.1 - 3j, 5, -1j], np.complex128),
}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", list(CONSTANT_VALUES))
@pytest.mark.parametrize("form", ["small", "large", "splat"])
def test_dense_constants_of_every_type(name, form):
    value = CONSTANT_VALUES[name]
    if form == "large":  # printed as a hex blob by MLIR
        value = np.resize(value, (40, 5))
    elif form == "splat":
        value = np.full((3, 2), value[2], value.dtype)
    module = import_jax(lambda: jnp.asarray(value))
    (got,) = lowering.compile(module)()
    want = np.asarray(jax.jit(lambda: jnp.asarray(value))())
    assert _same_bits(got, want), (got, want)


@pytest.mark.parametrize("text,want", [
    ('dense<[0x7FC00000, -0.0, 1.0]> : tensor<3xf32>', np.array([np.nan, -0.0, 1.0], np.float32)),
    ('dense<[(1.0, 2.0), (0x7F800000, -0.0)]> : tensor<2xcomplex<f32>>',
     np.array([1 + 2j, complex(np.inf, -0.0)], np.complex64)),
    ('dense<(1.5, -2.0)> : tensor<2x2xcomplex<f64>>', np.full((2, 2), 1.5 - 2j, np.complex128)),
    ('dense<"0x0100000002000000"> : tensor<2xi32>', np.array([1, 2], np.int32)),
    ('dense<"0x01FF07"> : tensor<3xi4>', np.array([1, -1, 7], ml_dtypes.int4)),
    ('dense<"0x803F"> : tensor<2xbf16>', np.full(2, 1.0, ml_dtypes.bfloat16)),
    ('dense<[true, false]> : tensor<2xi1>', np.array([True, False])),
    ('dense<> : tensor<0x3xf32>', np.zeros((0, 3), np.float32)),
])
def test_dense_text_forms(text, want):
    type_text = text.rsplit(" : ", 1)[1]
    module = import_stablehlo(f"""
      func.func @main() -> {type_text} {{
        %0 = stablehlo.constant {text}
        return %0 : {type_text}
      }}""")
    (got,) = lowering.compile(module)()
    assert _same_bits(got, want), (got, want)


# ----------------------------------------------------------------------------
# Types, layouts, locations
# ----------------------------------------------------------------------------


def test_layout_mode_becomes_argument_layout():
    module = import_stablehlo("""
      func.func public @main(%arg0: tensor<4x3xf32> {mhlo.layout_mode = "{0,1}"},
                             %arg1: tensor<2xf32> {mhlo.layout_mode = "default"}) -> tensor<4x3xf32> {
        %0 = stablehlo.add %arg0, %arg0 : tensor<4x3xf32>
        return %0 : tensor<4x3xf32>
      }""")
    main = main_of(module)
    assert str(layout_of(main.function_type.inputs.data[0])) == "{0,1}"
    assert layout_of(main.function_type.inputs.data[1]) is None
    module.verify()


def test_tuples_and_tokens():
    module = import_stablehlo("""
      func.func @main(%arg0: tensor<2xf32>, %arg1: !stablehlo.token) -> (tensor<2xf32>, !stablehlo.token) {
        %0 = stablehlo.tuple %arg0, %arg0 : tuple<tensor<2xf32>, tensor<2xf32>>
        %1 = stablehlo.get_tuple_element %0[1] : (tuple<tensor<2xf32>, tensor<2xf32>>) -> tensor<2xf32>
        return %1, %arg1 : tensor<2xf32>, !stablehlo.token
      }""", verify=True)
    assert "!hlo.token" in str(module)


def test_locations_are_attached():
    module = import_jax(lambda x: jnp.cos(x) * 2, X)
    cos = next(op for op in module.walk() if op.name == "hlo.cosine")
    assert cos.attributes["loc"].data.endswith(f"test_import.py:{_line_of('jnp.cos(x) * 2')}")


def _line_of(snippet: str) -> int:
    import inspect

    lines = inspect.getsource(test_locations_are_attached).splitlines()
    start = inspect.getsourcelines(test_locations_are_attached)[1]
    return start + next(i for i, line in enumerate(lines) if snippet in line)


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def test_unsupported_op_names_op_and_location(monkeypatch):
    import interop.stablehlo.importer as si

    text = """
      func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
        %0 = stablehlo.cosine %arg0 : tensor<2xf32> loc("model.py":12:3)
        return %0 : tensor<2xf32>
      }"""
    monkeypatch.setattr(si, "OPS_BY_NAME", {k: v for k, v in OPS_BY_NAME.items() if k != "hlo.cosine"})
    with pytest.raises(UnsupportedError, match=r"stablehlo\.cosine at model\.py:12: .*no hlo counterpart"):
        import_stablehlo(text)


def test_unknown_dialect_op_is_reported():
    text = """
      func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
        %0 = "mydialect.frobnicate"(%arg0) : (tensor<2xf32>) -> tensor<2xf32> loc(callsite("f"("a.py":3:1) at "b.py":9:2))
        return %0 : tensor<2xf32>
      }"""
    with pytest.raises(UnsupportedError, match=r"mydialect\.frobnicate at a\.py:3: .*not supported"):
        import_stablehlo(text)


def test_chlo_ops_are_expanded():
    # Lowered.as_text() keeps chlo ops; they are expanded with XLA's decompositions.
    def f(x):
        return lax.erf_inv(x), lax.lgamma(x + 2), jnp.arctanh(x)

    x = np.array([0.1, -0.5, 0.7], np.float32)
    text = jax.jit(f).lower(x).as_text(debug_info=True)
    assert "chlo." in text
    module = import_stablehlo(text)
    got = lowering.compile(module)(x)
    for g, w in zip(got, jax.jit(f)(x)):
        # lgamma's decomposition cancels terms near 1: absolute error of a few f32 ULPs of 1.0.
        assert_close(g, np.asarray(w), max_ulp=2, atol=1e-6)
    assert any(op.attributes.get("loc") is not None and "test_import.py" in op.attributes["loc"].data
               for op in module.walk())


def test_dynamic_shapes_are_reported():
    text = """
      func.func @main(%arg0: tensor<?x4xf32>) -> tensor<?x4xf32> {
        return %arg0 : tensor<?x4xf32>
      }"""
    with pytest.raises(UnsupportedError, match="dynamic shape"):
        import_stablehlo(text)


def test_unsupported_attribute_is_reported():
    text = """
      func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
        %0 = stablehlo.add %arg0, %arg0 {weird_flag = 3 : i64} : tensor<2xf32> loc("m.py":3:0)
        return %0 : tensor<2xf32>
      }"""
    with pytest.raises(UnsupportedError, match=r"stablehlo\.add at m\.py:3: attribute weird_flag"):
        import_stablehlo(text)


def test_parse_errors():
    with pytest.raises(MlirParseError, match="cannot parse"):
        import_stablehlo("func.func @main( {")
    with pytest.raises(MlirParseError):
        import_stablehlo(b"ML\xefR garbage")
    with pytest.raises(MlirParseError):
        import_stablehlo(12)


def test_verifier_errors_name_the_location():
    # Declared result type contradicts hlo shape inference: the hlo verifier reports it.
    text = """
      func.func @main(%arg0: tensor<2x3xf32>) -> tensor<3x2xf32> {
        %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32> loc("t.py":5:0)
        return %0 : tensor<3x2xf32>
      }"""
    module = import_stablehlo(text, verify=True)
    assert isinstance(main_of(module).function_type.outputs.data[0], TensorType)


def test_chlo_composites_from_jax_export_run_their_decomposition():
    needs("hlo.sort", "hlo.slice")

    def f(x):
        return lax.erf_inv(x), jnp.arctanh(x), lax.top_k(x, 2)[0]

    x = np.array([0.1, -0.5, 0.7], np.float32)
    exported = jax.export.export(jax.jit(f))(x)
    assert "stablehlo.composite" in exported.mlir_module()
    module = import_jax(exported)
    got = lowering.compile(module)(x)
    for g, w in zip(got, jax.jit(f)(x)):
        assert_close(g, np.asarray(w), max_ulp=2)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16"])
def test_top_k_from_lowered_text(dtype):
    needs("hlo.sort", "hlo.slice", "hlo.iota")
    x = RNG.integers(-3, 3, (4, 7)).astype(dtype)  # many ties: stable order matters
    if dtype != "int32":
        x[0, :4] = np.array([np.nan, np.inf, -0.0, 0.0]).astype(dtype)
    text = jax.jit(lambda v: lax.top_k(v, 3)).lower(x).as_text()
    assert "chlo.top_k" in text
    module = import_stablehlo(text)
    got = lowering.compile(module)(x)
    for g, w in zip(got, jax.jit(lambda v: lax.top_k(v, 3))(x)):
        assert_close(g, np.asarray(w))


def test_chlo_erf_maps_to_hlo_erf():
    x = np.linspace(-3, 3, 11).astype(np.float32)
    text = jax.jit(lax.erf).lower(x).as_text()
    module = import_stablehlo(text)
    assert any(op.name == "hlo.erf" for op in module.walk())
    (got,) = lowering.compile(module)(x)
    assert_close(got, np.asarray(jax.jit(lax.erf)(x)), max_ulp=2)


DYNAMIC_PROGRAM = """
  func.func public @main(%arg0: tensor<i64>, %arg1: tensor<?x4xf32>) -> tensor<2x?x4xf32> {
    %0 = stablehlo.constant dense<2> : tensor<1xi32>
    %1 = stablehlo.convert %arg0 : (tensor<i64>) -> tensor<i32>
    %2 = stablehlo.reshape %1 : (tensor<i32>) -> tensor<1xi32>
    %3 = stablehlo.constant dense<4> : tensor<1xi32>
    %4 = stablehlo.concatenate %0, %2, %3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %5 = stablehlo.dynamic_broadcast_in_dim %arg1, %4, dims = [1, 2] : (tensor<?x4xf32>, tensor<3xi32>) -> tensor<2x?x4xf32> loc("dyn.py":5:0)
    %6 = stablehlo.add %5, %5 : tensor<2x?x4xf32>
    return %6 : tensor<2x?x4xf32>
  }"""


def test_allow_unknown_keeps_dynamic_programs_for_a_round_trip():
    from interop import export_stablehlo

    with pytest.raises(UnsupportedError, match="dynamic"):
        import_stablehlo(DYNAMIC_PROGRAM)
    module = import_stablehlo(DYNAMIC_PROGRAM, allow_unknown=True)
    opaque = [op for op in module.walk() if op.name == "stablehlo.dynamic_broadcast_in_dim"]
    assert len(opaque) == 1 and any(op.name == "hlo.add" for op in module.walk())
    again = import_stablehlo(export_stablehlo(module), allow_unknown=True)
    assert again.is_structurally_equivalent(module)
    with pytest.raises(UnsupportedError, match=r"stablehlo\.dynamic_broadcast_in_dim at dyn\.py:5"):
        lowering.compile(module)


# ----------------------------------------------------------------------------
# Quantized types
# ----------------------------------------------------------------------------

QUANTIZED_PROGRAM = """
  func.func @main(%arg0: tensor<5xf32>, %arg1: tensor<2x3xf32>) -> (tensor<5xf32>, tensor<5xf32>, tensor<2x3xf32>, tensor<3x2xf32>) {
    %0 = stablehlo.uniform_quantize %arg0 : (tensor<5xf32>) -> tensor<5x!quant.uniform<i8:f32, 0.5:-3>>
    %1 = stablehlo.add %0, %0 : (tensor<5x!quant.uniform<i8:f32, 0.5:-3>>, tensor<5x!quant.uniform<i8:f32, 0.5:-3>>) -> tensor<5x!quant.uniform<i8:f32, 0.25:1>>
    %2 = stablehlo.uniform_dequantize %1 : (tensor<5x!quant.uniform<i8:f32, 0.25:1>>) -> tensor<5xf32>
    %3 = stablehlo.uniform_quantize %arg0 : (tensor<5xf32>) -> tensor<5x!quant.uniform<i8<-127:127>:f32, 2.0>>
    %4 = stablehlo.uniform_dequantize %3 : (tensor<5x!quant.uniform<i8<-127:127>:f32, 2.0>>) -> tensor<5xf32>
    %5 = stablehlo.uniform_quantize %arg1 : (tensor<2x3xf32>) -> tensor<2x3x!quant.uniform<i8:f32:1, {0.1:0, 0.2:1, 0.5:-1}>>
    %6 = stablehlo.uniform_dequantize %5 : (tensor<2x3x!quant.uniform<i8:f32:1, {0.1:0, 0.2:1, 0.5:-1}>>) -> tensor<2x3xf32>
    %7 = stablehlo.transpose %5, dims = [1, 0] : (tensor<2x3x!quant.uniform<i8:f32:1, {0.1:0, 0.2:1, 0.5:-1}>>) -> tensor<3x2x!quant.uniform<i8:f32:0, {0.1:0, 0.2:1, 0.5:-1}>>
    %8 = stablehlo.uniform_dequantize %7 : (tensor<3x2x!quant.uniform<i8:f32:0, {0.1:0, 0.2:1, 0.5:-1}>>) -> tensor<3x2xf32>
    return %2, %4, %6, %8 : tensor<5xf32>, tensor<5xf32>, tensor<2x3xf32>, tensor<3x2xf32>
  }"""


def _fake_quant(x, scale, zero_point, low=-128, high=127):
    """The StableHLO spec's quantize then dequantize, in f32."""
    scale, zero_point = np.float32(scale), np.float32(zero_point)
    q = np.round(np.clip(x / scale + zero_point, np.float32(low), np.float32(high)))  # NumPy rounds half to even
    return ((q.astype(np.int64) - zero_point.astype(np.int64)).astype(np.float32) * scale).astype(np.float32)


def test_quantized_program_follows_the_spec():
    x = np.array([-100.0, -1.3, 0.0, 0.75, 70.0], np.float32)
    y = np.array([[0.14, -3.0, 1.26], [12.9, 0.3, -0.75]], np.float32)
    module = import_stablehlo(QUANTIZED_PROGRAM)
    module.verify()
    got = lowering.compile(module)(x, y)
    v0 = _fake_quant(x, 0.5, -3)
    scales, zps = np.array([0.1, 0.2, 0.5], np.float32), np.array([0, 1, -1], np.float32)
    want = [_fake_quant(v0 + v0, 0.25, 1), _fake_quant(x, 2.0, 0, -127, 127), _fake_quant(y, scales, zps),
            _fake_quant(y, scales, zps).T]
    for g, w in zip(got, want):
        assert_close(g, w)


def test_quantized_errors_name_the_line():
    with pytest.raises(UnsupportedError, match=r"line 3 of the quantized program: quantized element type"):
        import_stablehlo(QUANTIZED_PROGRAM.replace("!quant.uniform<i8:f32, 0.5:-3>", "!quant.calibrated<f32<-1:1>>"))


def test_quantized_text_parses_to_a_module_that_can_be_edited_then_imported():
    # parse_stablehlo rewrites the quantized types and records each op's quantization on the op,
    # so the module can be changed (here: its entry renamed, printed and parsed again) and imported.
    from jaxlib.mlir import ir

    from interop.schema import QUANTIZATION
    from interop.stablehlo import parse_stablehlo

    x = np.array([-100.0, -1.3, 0.0, 0.75, 70.0], np.float32)
    y = np.array([[0.14, -3.0, 1.26], [12.9, 0.3, -0.75]], np.float32)
    want = lowering.compile(import_stablehlo(QUANTIZED_PROGRAM))(x, y)
    parsed = parse_stablehlo(QUANTIZED_PROGRAM.encode())
    with parsed.context:
        main = next(iter(parsed.body.operations))
        marked = [op for op in main.regions[0].blocks[0].operations if QUANTIZATION in op.attributes]
        assert len(marked) == 9  # every op with a quantized operand or result
        main.attributes["sym_name"] = ir.StringAttr.get("quantized")
    text = parsed.operation.get_asm()
    assert "!quant." not in text
    for source in (parsed, text):
        got = lowering.compile(import_stablehlo(source), entry="quantized")(x, y)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_interop_exports_difftest():
    import interop

    assert {"DiffReport", "difftest"} <= set(interop.__all__)
    report = interop.difftest(lambda v: jnp.tanh(v) * 2, X)
    assert isinstance(report, interop.DiffReport)
    report.raise_if_mismatch()


def test_dynamic_ops_with_static_results():
    module = import_stablehlo("""
      func.func @main(%arg0: tensor<1x6xi64>) -> (tensor<6xi64>, tensor<2x6xi64>, tensor<3xi32>) {
        %shape = stablehlo.constant dense<6> : tensor<1xi64>
        %0 = stablehlo.dynamic_reshape %arg0, %shape : (tensor<1x6xi64>, tensor<1xi64>) -> tensor<6xi64>
        %s2 = stablehlo.constant dense<[2, 6]> : tensor<2xi64>
        %1 = stablehlo.dynamic_broadcast_in_dim %0, %s2, dims = [1] : (tensor<6xi64>, tensor<2xi64>) -> tensor<2x6xi64>
        %s3 = stablehlo.constant dense<3> : tensor<1xi64>
        %2 = stablehlo.dynamic_iota %s3, dim = 0 : (tensor<1xi64>) -> tensor<3xi32>
        return %0, %1, %2 : tensor<6xi64>, tensor<2x6xi64>, tensor<3xi32>
      }""", verify=True)
    x = np.arange(6, dtype=np.int64).reshape(1, 6)
    a, b, c = lowering.compile(module)(x)
    np.testing.assert_array_equal(a, x.reshape(6))
    np.testing.assert_array_equal(b, np.broadcast_to(x.reshape(6), (2, 6)))
    np.testing.assert_array_equal(c, np.arange(3, dtype=np.int32))


def test_multi_platform_export_runs_the_cpu_branch():
    def f(x):
        return lax.platform_dependent(x, cpu=lambda v: v + 1, default=lambda v: v - 1)

    x = np.float32([1, 2, 3])
    exported = jax.export.export(jax.jit(f), platforms=("cuda", "cpu"))(x)
    module = import_jax(exported)
    assert [t.get_shape() for t in main_of(module).function_type.inputs] == [(3,)]
    (got,) = lowering.compile(module)(x)
    np.testing.assert_array_equal(got, x + 1)


def test_importing_interop_leaves_jax_platforms_alone():
    """Importing the library has no side effect on the environment (only the commands pick the CPU)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    code = "import os, interop, lowering, passes; print(os.environ.get('JAX_PLATFORMS'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
