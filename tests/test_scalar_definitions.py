"""One definition per element-wise op (lowering/kernels/scalar.py): the compiled paths have no other, and
each definition computes what the interpreter's kernel computes, bit for bit, on special values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from interop import import_jax, import_stablehlo
from lowering.executor import compiled_loops
from lowering.kernels import scalar
from xla_dialect.ops import elementwise as ew

jax.config.update("jax_enable_x64", True)

# Ops whose writer method is glue, not numerics, with the reason.
GLUE_METHODS = {"op_select": "a scalar predicate choosing between whole arrays (element-wise selects use "
                             "the definition)"}


def test_every_op_the_compiled_paths_accept_has_exactly_one_definition():
    """The loop writer (and the fused-kernel writer, its subclass) has no method of its own for an op that has
    a scalar definition: the definition is the only place its numerics are written."""
    from lowering.executor.compiled_loops import ElementLoopWriter

    for cls in scalar.DEFINITIONS:
        for writer in (compiled_loops._LoopWriter, ElementLoopWriter):
            form = writer.COMPILED_FORMS.get(cls)
            if form is not None:
                assert form.__name__ in GLUE_METHODS, f"{writer.__name__}.{form.__name__} re-defines {cls.name}"
    for name in scalar.EXPORTS:
        assert callable(getattr(scalar, name)) or hasattr(getattr(scalar, name), "sig"), name


def test_a_second_registration_is_refused():
    with pytest.raises(ValueError, match="already has a scalar definition"):
        scalar.scalar_definition(ew.AddOp)(lambda *a: None)


def _specials(dtype: np.dtype, rng) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, 64).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        base = np.array([0, 1, 2, 7, info.max, info.min, info.max - 1, 3 if dtype.kind == "u" else -1], dtype)
        return np.concatenate([base, rng.integers(info.min, info.max, 56, dtype=dtype, endpoint=True)])
    finfo = np.finfo(dtype)
    bits = np.dtype(f"u{dtype.itemsize}")
    nan_payload = (np.array([np.nan], dtype).view(bits) | bits.type(5)).view(dtype)
    base = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, finfo.max, -finfo.max, finfo.tiny,
                     finfo.tiny / 4, -finfo.tiny / 8, 0.5, 2.5, -2.5, 3e9, -3e9, 1e20, 255.5], dtype)
    base = np.concatenate([base, nan_payload, -nan_payload])
    return np.concatenate([base, (rng.standard_normal(64 - base.size) * 100).astype(dtype)])


UNARY = {"negate": lax.neg, "abs": lax.abs, "not": lax.bitwise_not, "sine": lax.sin, "cosine": lax.cos,
         "tan": lax.tan, "exponential": lax.exp, "log": lax.log, "tanh": lax.tanh, "logistic": lax.logistic,
         "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "floor": lax.floor, "ceil": lax.ceil,
         "round_nearest_afz": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
         "round_nearest_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), "sign": lax.sign,
         "is_finite": lax.is_finite, "cbrt": lax.cbrt, "popcnt": lax.population_count,
         "count_leading_zeros": lax.clz, "exponential_minus_one": lax.expm1, "log_plus_one": lax.log1p,
         "erf": lax.erf}
BINARY = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div, "maximum": lax.max,
          "minimum": lax.min, "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
          "shift_left": lax.shift_left, "shift_right_logical": lax.shift_right_logical,
          "shift_right_arithmetic": lax.shift_right_arithmetic, "compare_lt": lax.lt, "compare_eq": lax.eq,
          "compare_ge": lax.ge, "remainder": lax.rem, "power": lax.pow, "atan2": lax.atan2}
TERNARY = {"clamp": lax.clamp}
WRITTEN_AS_TEXT = {"power", "logistic"}
"""Ops JAX does not write as themselves for some element types (integer power, logistic: JAX expands them),
written in StableHLO text for those."""
PRED_RESULTS = {"is_finite"}
FLOATS = [np.float32, np.float64]
INTEGERS = [np.int8, np.int32, np.uint16, np.uint64]
KINDS = {"float": FLOATS, "number": FLOATS + INTEGERS, "bits": INTEGERS + [np.bool_], "integer": INTEGERS,
         "any": FLOATS + INTEGERS + [np.bool_]}
OP_KINDS = {"negate": "number", "abs": "number", "not": "bits", "sine": "float", "cosine": "float", "tan": "float",
            "exponential": "float", "log": "float", "tanh": "float", "logistic": "float", "add": "number",
            "subtract": "number", "multiply": "number", "divide": "number", "maximum": "any", "minimum": "any",
            "and": "bits", "or": "bits", "xor": "bits", "shift_left": "integer", "shift_right_logical": "integer",
            "shift_right_arithmetic": "integer", "compare_lt": "any", "compare_eq": "any", "compare_ge": "any",
            "sqrt": "float", "rsqrt": "float", "floor": "float", "ceil": "float", "round_nearest_afz": "float",
            "round_nearest_even": "float", "sign": "number", "is_finite": "float", "cbrt": "float",
            "popcnt": "integer", "count_leading_zeros": "integer", "remainder": "number", "power": "number",
            "atan2": "float", "clamp": "any", "exponential_minus_one": "float", "log_plus_one": "float",
            "erf": "float"}


def _cases():
    for table, arity in ((UNARY, 1), (BINARY, 2), (TERNARY, 3)):
        for name, fn in table.items():
            for dtype in KINDS[OP_KINDS[name]]:
                yield pytest.param(name, fn, arity, dtype, None, id=f"{name}-{np.dtype(dtype).name}")
    for source in (np.float32, np.float64, np.int32, np.bool_):
        for target in (np.float32, np.float64, np.int8, np.uint32, np.int64, np.bool_):
            yield pytest.param("convert", lambda x, t=target: lax.convert_element_type(x, t), 1, source, target,
                               id=f"convert-{np.dtype(source).name}-{np.dtype(target).name}")


def _stablehlo_module(name, arity, dtype, size):
    kind = {"i": "i", "u": "ui", "f": "f"}[dtype.kind]
    t = f"tensor<{size}x{kind}{8 * dtype.itemsize}>"
    args = ", ".join(f"%a{k}: {t}" for k in range(arity))
    return import_stablehlo(f"""func.func @main({args}) -> {t} {{
  %0 = stablehlo.{name} {", ".join(f"%a{k}" for k in range(arity))} : {t}
  return %0 : {t}
}}""")


@pytest.mark.parametrize("name, fn, arity, dtype, target", list(_cases()))
@pytest.mark.parametrize("denormals", ["flush", "keep"])
def test_definition_equals_the_interpreters_kernel(name, fn, arity, dtype, target, denormals):
    rng = np.random.default_rng(0)
    inputs = [_specials(dtype, rng) for _ in range(arity)]
    for k in range(1, arity):
        inputs[k] = rng.permutation(inputs[k])
    if arity == 2:  # and every pair of the special values (INT_MIN / -1, x % 0, NaN ** 0, ...)
        base = inputs[0][:8 if np.dtype(dtype).kind in "iub" else 22]
        inputs = [np.concatenate([inputs[0], np.repeat(base, base.size)]),
                  np.concatenate([inputs[1], np.tile(base, base.size)])]
    op_name = "hlo.compare" if name.startswith("compare") else f"hlo.{name}"
    try:
        module = import_jax(fn, *inputs)
    except Exception:  # noqa: BLE001 - JAX rejects the op for this element type
        if name not in WRITTEN_AS_TEXT:
            pytest.skip(f"{name} does not take {np.dtype(dtype).name}")
        module = None
    if name in WRITTEN_AS_TEXT and (module is None or not any(o.name == op_name for o in module.walk())):
        module = _stablehlo_module(name, arity, inputs[0].dtype, inputs[0].size)
    op = next((o for o in module.walk() if o.name == op_name), None)
    if op is None:
        pytest.skip(f"JAX writes {name} on {np.dtype(dtype).name} with other ops")
    result_dtype = np.dtype(target or (np.bool_ if name.startswith("compare") or name in PRED_RESULTS else dtype))
    definition = scalar.scalar_of(op, [dtype] * arity, result_dtype, denormals == "flush")
    if definition is None:
        pytest.skip(f"no scalar definition of {op.name} for {np.dtype(dtype).name}")
    exe = lowering.compile(module, fusion="never", loop_compilation="never", denormals=denormals)
    (expected,) = exe(*inputs)
    ufunc = scalar.ufunc(definition, [dtype] * arity, result_dtype)
    from lowering.runtime.denormals import mode_switch

    with np.errstate(all="ignore"), mode_switch(denormals):
        got = ufunc(*inputs)
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype
    different = np.nonzero(got.view(f"u{got.itemsize}") != expected.view(f"u{expected.itemsize}"))[0]
    assert not different.size, (f"{op.name} on {np.dtype(dtype).name}: definition and kernel differ at inputs "
                                f"{[tuple(x[i] for x in inputs) for i in different[:4]]}: "
                                f"{got[different[:4]]} vs {expected[different[:4]]}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_total_order_comparisons_follow_xla(direction, dtype):
    # The TOTALORDER compare of jax's sort comparators: one definition (scalar.compare_total_order), the
    # interpreter's kernel is its ufunc; checked against XLA on every pair of special values (NaNs of both
    # signs and payloads, signed zeros, infinities, subnormals).
    rng = np.random.default_rng(1)
    base = _specials(dtype, rng)[:22]
    a, b = np.repeat(base, base.size), np.tile(base, base.size)
    kind = "f32" if np.dtype(dtype) == np.float32 else "f64"
    t = f"tensor<{a.size}x{kind}>"
    module = import_stablehlo(f"""func.func @main(%a: {t}, %b: {t}) -> tensor<{a.size}xi1> {{
  %0 = stablehlo.compare {direction}, %a, %b, TOTALORDER : ({t}, {t}) -> tensor<{a.size}xi1>
  return %0 : tensor<{a.size}xi1>
}}""")
    op = next(o for o in module.walk() if o.name == "hlo.compare")
    assert scalar.scalar_of(op, [dtype, dtype], np.bool_, True).name == "compare_total_order"
    (got,) = lowering.compile(module, fusion="never", loop_compilation="never")(a, b)
    from interop.hlo.xla import run_hlo_on_xla

    (expected,) = run_hlo_on_xla(module, a, b, trusted=True)
    different = np.nonzero(np.asarray(got) != np.asarray(expected))[0]
    assert not different.size, [(a[i], b[i]) for i in different[:4]]


def test_ufuncs_of_definitions_with_constants_are_module_files_numba_caches(tmp_path, monkeypatch):
    # A definition with constant arguments (a convert's bounds and target type) is bound by a generated wrapper;
    # written as a module file in the cache directory, numba caches its ufunc for later processes (compiled in
    # memory it cost ~0.3 s in every process). The constants are written by their bytes: the same results.
    from lowering.runtime import generated_modules

    monkeypatch.setattr(generated_modules, "library_module_directory", lambda name: str(tmp_path))
    definition = scalar.Scalar("float_to_int", (np.float32(2.1474836e9), np.float32(-2.1474836e9),
                                                np.int32(2147483647), np.int32(-2147483648), np.int32))
    fn = scalar._vectorize(definition, [np.float32], np.int32)
    (wrapper,) = tmp_path.glob("ufunc_*.py")
    assert "bytes.fromhex" in wrapper.read_text()
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1.5, -2.5, -0.0], np.float32)
    with np.errstate(invalid="ignore"):  # (LLVM vectorizes the conversion: NaN lanes set the invalid flag)
        np.testing.assert_array_equal(fn(x), np.array([0, 2147483647, -2147483648, 2147483647, -2147483648, 1, -2,
                                                       0]))


UFUNC_CASES = [
    (scalar.Scalar("add"), [np.float64, np.float64], np.float64),
    (scalar.Scalar("select_flush"), [np.bool_, np.float32, np.float32], np.float32),
    (scalar.Scalar("less"), [np.float32, np.float32], np.bool_),
    (scalar.Scalar("float_to_int", (np.float32(2.1474836e9), np.float32(-2.1474836e9), np.int32(2147483647),
                                    np.int32(-2147483648), np.int32)), [np.float32], np.int32),
    (scalar.Scalar("divide_int"), [np.int16, np.int16], np.int16),
]
# (the C library's functions, which Python cannot call through numba: tests/test_libm.py, against ctypes)


def _operand(dtype, rng, n):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(n) < 0.5
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        return np.concatenate([[0, -1, info.min, info.max], rng.integers(info.min, info.max, n - 4)]).astype(dtype)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, np.finfo(dtype).smallest_subnormal, 3e9], dtype)
    return np.concatenate([special, (rng.standard_normal(n - special.size) * 1e3).astype(dtype)])


@pytest.mark.parametrize("case", range(len(UFUNC_CASES)), ids=[c[0].name for c in UFUNC_CASES])
def test_ufunc_loops_give_the_definitions_bits_on_every_layout(case, tmp_path, monkeypatch):
    # The interpreter's ufuncs are numba cfuncs of their whole inner loop (lowering.kernels.ufunc_loops) with a
    # contiguous form (vectorized by LLVM) and a strided one (steps of any size, 0 for a broadcast operand). Each
    # form, cached module and in-memory loop alike, gives the bits of the definition called element by element.
    from lowering.runtime import generated_modules

    definition, operand_dtypes, result_dtype = UFUNC_CASES[case]
    monkeypatch.setattr(generated_modules, "library_module_directory", lambda name: str(tmp_path))
    cached = scalar._vectorize(definition, operand_dtypes, result_dtype)
    assert list(tmp_path.glob("ufunc_*.py"))
    monkeypatch.setattr(generated_modules, "library_module_directory", lambda name: None)  # (nowhere to write)
    in_memory = scalar._vectorize(definition, operand_dtypes, result_dtype)
    rng = np.random.default_rng(case)
    operands = [_operand(d, rng, 64) for d in operand_dtypes]

    def expected(*arrays):
        arrays = np.broadcast_arrays(*arrays)
        values = [definition.function(*(a[i] for a in arrays), *definition.arguments) for i in np.ndindex(arrays[0].shape)]
        return np.array(values).astype(result_dtype).reshape(arrays[0].shape)

    layouts = {"contiguous": operands, "strided": [a[::3] for a in operands],
               "broadcast": [operands[0][:1].reshape(()), *(a[:21] for a in operands[1:])],
               "reversed": [a[::-1] for a in operands]}
    for layout, arrays in layouts.items():
        with np.errstate(all="ignore"):
            want = expected(*arrays)
            for fn in (cached, in_memory):
                got = fn(*arrays)
                assert got.dtype == np.dtype(result_dtype)
                np.testing.assert_array_equal(got.view(f"u{got.itemsize}") if got.dtype != np.bool_ else got,
                                              want.view(f"u{want.itemsize}") if want.dtype != np.bool_ else want,
                                              err_msg=f"{definition.name}, {layout}")
