"""Importing chlo ops: chlo.mulhi and chlo.scan (direct conversions), dynamic_gather, and the
expansion of other chlo ops through XLA one op at a time (any function name, any module)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import jax
from jax import lax

import lowering
from interop import import_stablehlo
from interop.stablehlo import dispatch, parse_stablehlo
from xla_dialect.errors import MlirParseError, UnsupportedError

RNG = np.random.default_rng(7)


def run(text, *args, entry="main", **kwargs):
    module = import_stablehlo(text, **kwargs)
    module.verify()
    return lowering.compile(module, entry=entry)(*args)


# ----------------------------------------------------------------------------
# chlo.mulhi
# ----------------------------------------------------------------------------

MULHI_TYPES = {  # MLIR element type -> dtype
    "i2": ml_dtypes.int2, "ui2": ml_dtypes.uint2, "i4": ml_dtypes.int4, "ui4": ml_dtypes.uint4,
    "i8": np.int8, "ui8": np.uint8, "i16": np.int16, "ui16": np.uint16,
    "i32": np.int32, "ui32": np.uint32, "i64": np.int64, "ui64": np.uint64,
}


def _mulhi_text(element: str, shape: list[int], name: str = "main") -> str:
    t = f"tensor<{'x'.join(map(str, shape)) + 'x' if shape else ''}{element}>"
    return f"""
      func.func @{name}(%a: {t}, %b: {t}) -> {t} {{
        %0 = "chlo.mulhi"(%a, %b) : ({t}, {t}) -> {t}
        return %0 : {t}
      }}"""


def _as_array(values, dtype, shape) -> np.ndarray:
    """Python integers (in range) as an array of ``dtype``."""
    wide = np.int64 if ml_dtypes.iinfo(dtype).min < 0 else np.uint64
    return np.array(values, dtype=object).astype(wide).astype(dtype).reshape(shape)


def _mulhi_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """High half of the exact product, with Python integers (``>>`` floors, as an arithmetic shift)."""
    bits = ml_dtypes.iinfo(a.dtype).bits
    flat = [(int(x) * int(y)) >> bits for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist())]
    return _as_array(flat, a.dtype, a.shape)


def _mulhi_operands(dtype, shape):
    """Random operands of ``shape`` drawn from the type's edge values and random values."""
    info = ml_dtypes.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    edges = [v for v in (lo, lo + 1, -1, 0, 1, hi - 1, hi) if lo <= v <= hi]
    count = int(np.prod(shape)) if shape else 1
    pool = edges + [lo + int(RNG.integers(0, 2**62)) * (hi - lo) // 2**62 for _ in range(count)]
    a = [pool[i] for i in RNG.integers(0, len(pool), count)]
    b = [pool[i] for i in RNG.integers(0, len(pool), count)]
    return _as_array(a, dtype, shape), _as_array(b, dtype, shape)


@pytest.mark.parametrize("element", list(MULHI_TYPES))
@pytest.mark.parametrize("shape", [[64], [], [0, 3], [4, 5]])
def test_mulhi_is_the_high_half_of_the_exact_product(element, shape):
    dtype = MULHI_TYPES[element]
    a, b = _mulhi_operands(dtype, shape)
    (got,) = run(_mulhi_text(element, shape), a, b)
    want = _mulhi_reference(a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("element,a,b,want", [
    # The corpus's hand-computed cases (interpret/chlo/mulhi.mlir) and 64-bit corners.
    ("i8", [64, -64, -64], [4, 4, -4], [1, -1, 1]),
    ("ui8", [240, 128], [16, 2], [15, 1]),
    ("i32", [268435456, -268435456], [16, 16], [1, -1]),
    ("i64", [-2**63, -2**63, 2**63 - 1, -1, 2**62], [-2**63, 2**63 - 1, 2**63 - 1, -1, 4], [2**62, -2**62, 2**62 - 1,
                                                                                            0, 1]),
    ("ui64", [2**64 - 1, 2**64 - 1, 2**32], [2**64 - 1, 2, 2**32], [2**64 - 2, 1, 1]),
])
def test_mulhi_hand_computed(element, a, b, want):
    dtype = MULHI_TYPES[element]
    (got,) = run(_mulhi_text(element, [len(a)]), np.array(a, dtype), np.array(b, dtype))
    np.testing.assert_array_equal(got, np.array(want, dtype))


@pytest.mark.parametrize("element", ["f32", "i1"])
def test_mulhi_of_other_types_is_rejected_when_parsed(element):
    with pytest.raises(MlirParseError, match=r"chlo\.mulhi' op operand #0 must be .*integer"):
        import_stablehlo(_mulhi_text(element, [2]))


# ----------------------------------------------------------------------------
# chlo.scan
# ----------------------------------------------------------------------------

def _scan_reference(body, inputs, inits, dim, reverse=False):
    """chlo.scan's definition, step by step: body(slices..., carries...) -> (outputs..., carries...)."""
    length = inputs[0].shape[dim]
    carries = list(inits)
    outputs = None
    order = range(length - 1, -1, -1) if reverse else range(length)
    for i in order:
        returned = body(*[np.take(x, i, axis=dim) for x in inputs], *carries)
        ys, carries = returned[:len(returned) - len(inits)], list(returned[len(returned) - len(inits):])
        if outputs is None:
            outputs = [np.zeros(y.shape[:dim] + (length,) + y.shape[dim:], y.dtype) for y in ys]
        for out, y in zip(outputs, ys):
            index = [slice(None)] * out.ndim
            index[dim] = i
            out[tuple(index)] = y
    return outputs, carries


CUMSUM = """
  func.func @main(%x: tensor<{shape}xf32>, %init: tensor<{rest}f32>) -> (tensor<{shape}xf32>, tensor<{rest}f32>) {{
    %0:2 = chlo.scan(%x) inits(%init) dimension={dim} {attrs}{{
    ^bb0(%e: tensor<{rest}f32>, %c: tensor<{rest}f32>):
      %1 = stablehlo.add %c, %e : tensor<{rest}f32>
      stablehlo.return %1, %1 : tensor<{rest}f32>, tensor<{rest}f32>
    }} : (tensor<{shape}xf32>, tensor<{rest}f32>) -> (tensor<{shape}xf32>, tensor<{rest}f32>)
    return %0#0, %0#1 : tensor<{shape}xf32>, tensor<{rest}f32>
  }}"""


@pytest.mark.parametrize("shape,dim", [([5], 0), ([2, 3], 1), ([3, 4, 2], 0), ([3, 4, 2], 2), ([0, 3], 0),
                                       ([3, 0], 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_cumulative_sum_matches_jax(shape, dim, reverse):
    rest_shape = shape[:dim] + shape[dim + 1:]
    rest = "".join(f"{d}x" for d in rest_shape)
    attrs = "attributes {is_reverse = true} " if reverse else ""
    text = CUMSUM.format(shape="x".join(map(str, shape)), rest=rest, dim=dim, attrs=attrs)
    x = RNG.standard_normal(shape).astype(np.float32)
    init = RNG.standard_normal(rest_shape).astype(np.float32)
    outputs, carry = run(text, x, init)
    # Sequential f32 additions in scan order, as jax.lax.scan does them.
    moved = np.moveaxis(x, dim, 0)
    final, ys = jax.jit(lambda c, xs: lax.scan(lambda c, e: (c + e, c + e), c, xs, reverse=reverse))(init, moved)
    np.testing.assert_array_equal(outputs, np.moveaxis(np.asarray(ys), 0, dim))
    np.testing.assert_array_equal(carry, np.asarray(final))


def test_scan_corpus_cases():
    text = """
      func.func @cumsum() -> (tensor<4xi32>, tensor<i32>, tensor<4xi32>, tensor<i32>) {
        %input = stablehlo.constant dense<[1, 2, 3, 4]> : tensor<4xi32>
        %init = stablehlo.constant dense<0> : tensor<i32>
        %0:2 = chlo.scan(%input) inits(%init) dimension=0 {
        ^bb0(%a: tensor<i32>, %b: tensor<i32>):
          %1 = stablehlo.add %a, %b : tensor<i32>
          stablehlo.return %1, %1 : tensor<i32>, tensor<i32>
        } : (tensor<4xi32>, tensor<i32>) -> (tensor<4xi32>, tensor<i32>)
        %2:2 = chlo.scan(%input) inits(%init) dimension=0 attributes {is_reverse = true, is_associative = true} {
        ^bb0(%a: tensor<i32>, %b: tensor<i32>):
          %1 = stablehlo.add %a, %b : tensor<i32>
          stablehlo.return %1, %1 : tensor<i32>, tensor<i32>
        } : (tensor<4xi32>, tensor<i32>) -> (tensor<4xi32>, tensor<i32>)
        return %0#0, %0#1, %2#0, %2#1 : tensor<4xi32>, tensor<i32>, tensor<4xi32>, tensor<i32>
      }"""
    got = run(text, entry="cumsum")
    for g, w in zip(got, [[1, 3, 6, 10], 10, [10, 9, 7, 4], 10]):
        np.testing.assert_array_equal(g, np.array(w, np.int32))


CUMMAX = """
  func.func @main(%x: tensor<7xf32>, %iota: tensor<7xi32>)
      -> (tensor<7xf32>, tensor<7xi32>, tensor<7x2xf32>, tensor<f32>, tensor<i32>) {
    %v0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %i0 = stablehlo.constant dense<0> : tensor<i32>
    %0:5 = chlo.scan(%x, %iota) inits(%v0, %i0) dimension=0 {
    ^bb0(%cur: tensor<f32>, %idx: tensor<i32>, %run: tensor<f32>, %ridx: tensor<i32>):
      %new = stablehlo.maximum %run, %cur : tensor<f32>
      %gt = stablehlo.compare GT, %run, %cur : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %nidx = stablehlo.select %gt, %ridx, %idx : tensor<i1>, tensor<i32>
      %scale = stablehlo.constant dense<0.5> : tensor<f32>
      %scaled = stablehlo.multiply %cur, %scale : tensor<f32>
      %pair = stablehlo.broadcast_in_dim %scaled, dims = [] : (tensor<f32>) -> tensor<2xf32>
      stablehlo.return %new, %nidx, %pair, %new, %nidx : tensor<f32>, tensor<i32>, tensor<2xf32>, tensor<f32>, tensor<i32>
    } : (tensor<7xf32>, tensor<7xi32>, tensor<f32>, tensor<i32>)
        -> (tensor<7xf32>, tensor<7xi32>, tensor<7x2xf32>, tensor<f32>, tensor<i32>)
    return %0#0, %0#1, %0#2, %0#3, %0#4 : tensor<7xf32>, tensor<7xi32>, tensor<7x2xf32>, tensor<f32>, tensor<i32>
  }"""


def test_scan_several_inputs_outputs_and_carries():
    # Two inputs, three outputs (one of another shape than the inputs), two carries.
    x = np.array([3, 1, 4, 1, 5, -np.inf, 2], np.float32)
    iota = np.arange(7, dtype=np.int32)
    scale = np.float32(0.5)
    got = run(CUMMAX, x, iota)

    def body(cur, idx, run_max, run_idx):
        new = np.maximum(run_max, cur)
        nidx = run_idx if run_max > cur else idx
        return new, np.int32(nidx), np.full(2, cur * scale, np.float32), new, np.int32(nidx)

    (ys, carries) = _scan_reference(body, [x, iota], [np.float32(-np.inf), np.int32(0)], 0)
    for g, w in zip(got, ys + carries):
        np.testing.assert_array_equal(g, np.asarray(w))
    np.testing.assert_array_equal(got[0], np.asarray(jax.jit(lambda v: lax.cummax(v))(x)))


def test_scan_round_trips_through_export():
    from interop import export_stablehlo

    module = import_stablehlo(CUMMAX)
    again = import_stablehlo(export_stablehlo(module))
    args = (np.array([3, 1, 4, 1, 5, 0, 2], np.float32), np.arange(7, dtype=np.int32))
    for g, w in zip(lowering.compile(again)(*args), lowering.compile(module)(*args)):
        np.testing.assert_array_equal(g, w)


# ----------------------------------------------------------------------------
# chlo ops expanded through XLA, one op at a time
# ----------------------------------------------------------------------------

LGAMMA = """
  func.func @{name}(%x: tensor<4xf32>) -> tensor<4xf32> {{
    %0 = chlo.lgamma %x : tensor<4xf32> -> tensor<4xf32> loc("model.py":7:1)
    %1 = chlo.erf_inv %0 : tensor<4xf32> -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }}"""


@pytest.mark.parametrize("names", [["main"], ["compute"], ["first", "second"]])
def test_chlo_expansion_works_in_functions_of_any_name(names):
    # XLA's conversion takes @main as the entry and drops what it does not call: the importer
    # expands each chlo op alone, so functions of any name (and uncalled ones) work.
    text = "\n".join(LGAMMA.format(name=n) for n in names)
    x = np.array([0.5, 1.5, 3.0, 0.25], np.float32)
    want = np.asarray(jax.jit(lambda v: lax.erf_inv(lax.lgamma(v)))(x))
    module = import_stablehlo(text)
    assert not [op.name for op in module.walk() if op.name.startswith("chlo.")]
    for name in names:
        (got,) = lowering.compile(module, entry=name)(x)
        np.testing.assert_allclose(got, want, rtol=2e-6)


def test_chlo_expansion_ops_carry_the_ops_location():
    module = import_stablehlo(LGAMMA.format(name="f"))
    locs = {op.attributes["loc"].data for op in module.walk() if "loc" in op.attributes}
    assert "model.py:7" in locs


HELPER_EXPANSION = """
  func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
    %0 = func.call @helper(%a) : (tensor<3xf32>) -> tensor<3xf32>
    %1 = stablehlo.negate %0 : tensor<3xf32>
    return %1 : tensor<3xf32>
  }
  func.func private @helper(%a: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.multiply %a, %a : tensor<3xf32>
    return %0 : tensor<3xf32>
  }"""

OUTER = """
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = chlo.sinh %x : tensor<3xf32> -> tensor<3xf32>
    %1 = func.call @helper(%0) : (tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
  func.func private @helper(%a: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.add %a, %a : tensor<3xf32>
    return %0 : tensor<3xf32>
  }"""


def test_expansion_functions_join_the_module_under_fresh_names(monkeypatch):
    monkeypatch.setattr(dispatch, "legalize_chlo_op", lambda op: parse_stablehlo(HELPER_EXPANSION))
    module = import_stablehlo(OUTER)
    module.verify()
    names = [op.sym_name.data for op in module.ops]
    assert names[:2] == ["main", "helper"] and len(names) == 3 and names[2].startswith("helper.")
    x = np.array([1, -2, 3], np.float32)
    (got,) = lowering.compile(module)(x)
    np.testing.assert_array_equal(got, 2 * -(x * x))  # the stand-in expansion: -(x*x), then the module's helper


PARTLY_UNSUPPORTED = """
  func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.negate %a : tensor<3xf32>
    %1 = "mydialect.frob"(%0) : (tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }"""


def test_failed_expansion_is_an_error_or_kept_opaque(monkeypatch):
    monkeypatch.setattr(dispatch, "legalize_chlo_op", lambda op: parse_stablehlo(PARTLY_UNSUPPORTED))
    with pytest.raises(UnsupportedError, match=r"chlo\.sinh .*expanded through XLA.*mydialect\.frob"):
        import_stablehlo(OUTER)
    module = import_stablehlo(OUTER, allow_unknown=True)
    main = next(iter(module.ops))
    # What the expansion emitted before failing is taken back: only the opaque op uses %x.
    assert [op.name for op in main.body.block.ops] == ["chlo.sinh", "hlo.call", "func.return"]
    assert [use.operation.name for use in main.body.block.args[0].uses] == ["chlo.sinh"]


def test_chlo_op_xla_cannot_expand_is_kept_with_allow_unknown():
    text = """
      func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
        %0 = chlo.lgamma %a : tensor<?xf32> -> tensor<?xf32>
        return %0 : tensor<?xf32>
      }"""
    module = import_stablehlo(text, allow_unknown=True)
    assert "chlo.lgamma" in [op.name for op in module.walk()]


# ----------------------------------------------------------------------------
# stablehlo.dynamic_gather
# ----------------------------------------------------------------------------

DYNAMIC_GATHER = """
  func.func @main(%operand: tensor<3x4x2xi64>, %indices: tensor<2x3x2xi64>{sizes_arg}) -> tensor<2x3x2x2xi64> {{
    {sizes_def}
    %result = "stablehlo.dynamic_gather"(%operand, %indices, %sizes) {{
      dimension_numbers = #stablehlo.gather<offset_dims = [2, 3], collapsed_slice_dims = [0],
                                             start_index_map = [1, 0], index_vector_dim = 2>,
      indices_are_sorted = false
    }} : (tensor<3x4x2xi64>, tensor<2x3x2xi64>, tensor<3xi64>) -> tensor<2x3x2x2xi64>
    return %result : tensor<2x3x2x2xi64>
  }}"""


def test_dynamic_gather_with_constant_slice_sizes_is_a_gather():
    text = DYNAMIC_GATHER.format(sizes_arg="",
                                 sizes_def="%sizes = stablehlo.constant dense<[1, 2, 2]> : tensor<3xi64>")
    operand = np.arange(1, 25, dtype=np.int64).reshape(3, 4, 2)
    indices = np.array([[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]], np.int64)
    module = import_stablehlo(text)
    assert "hlo.gather" in [op.name for op in module.walk()]
    (got,) = lowering.compile(module)(operand, indices)
    # The StableHLO interpreter test's expected values (out-of-range starts are clamped).
    want = np.array([[[[1, 2], [3, 4]], [[3, 4], [5, 6]], [[13, 14], [15, 16]]],
                     [[[9, 10], [11, 12]], [[11, 12], [13, 14]], [[17, 18], [19, 20]]]], np.int64)
    np.testing.assert_array_equal(got, want)
    dnums = lax.GatherDimensionNumbers(offset_dims=(2, 3), collapsed_slice_dims=(0,), start_index_map=(1, 0))
    jax_got = jax.jit(lambda o, i: lax.gather(o, i, dnums, (1, 2, 2), mode="clip"))(operand, indices)
    np.testing.assert_array_equal(got, np.asarray(jax_got))


def test_dynamic_gather_with_run_time_slice_sizes_is_configured_when_it_runs():
    text = DYNAMIC_GATHER.format(sizes_arg=", %sizes: tensor<3xi64>", sizes_def="")
    module = import_stablehlo(text)
    assert "hlo.dynamic_gather" in [op.name for op in module.walk()]
    operand = np.arange(1, 25, dtype=np.int64).reshape(3, 4, 2)
    indices = np.array([[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]], np.int64)
    (got,) = lowering.compile(module)(operand, indices, np.array([1, 2, 2]))
    dnums = lax.GatherDimensionNumbers(offset_dims=(2, 3), collapsed_slice_dims=(0,), start_index_map=(1, 0))
    np.testing.assert_array_equal(got, np.asarray(lax.gather(operand, indices, dnums, (1, 2, 2), mode="clip")))


RAGGED_DOT = '''func.func @main(%lhs: tensor<6x4xf32>, %rhs: tensor<3x4x5xf32>, %gs: tensor<3xi64>) -> tensor<6x5xf32> {
  %0 = "chlo.ragged_dot"(%lhs, %rhs, %gs) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>, precision_config = [#chlo<precision DEFAULT>, #chlo<precision DEFAULT>]} : (tensor<6x4xf32>, tensor<3x4x5xf32>, tensor<3xi64>) -> tensor<6x5xf32>
  return %0 : tensor<6x5xf32>
}'''

RAGGED_DOT_HLO = """HloModule ragged
ENTRY e {
  lhs = f32[6,4]{1,0} parameter(0)
  rhs = f32[3,4,5]{2,1,0} parameter(1)
  gs = s64[3]{0} parameter(2)
  ROOT r = f32[6,5]{1,0} ragged-dot(lhs, rhs, gs), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
}
"""


@pytest.mark.parametrize("sizes", [[2, 1, 3], [0, 4, 1], [6, 0, 0], [1, 1, 1]])
def test_ragged_dot_groups_rows(sizes):
    """chlo.ragged_dot (StableHLO) and ragged-dot (HLO text): group j of lhs's rows times rhs[j]; rows past
    the groups are 0 (checked against jax.lax.ragged_dot, which JAX expands on CPU)."""
    import interop

    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((6, 4)).astype(np.float32)
    rhs = rng.standard_normal((3, 4, 5)).astype(np.float32)
    gs = np.array(sizes, np.int64)
    expected = np.asarray(jax.lax.ragged_dot(lhs, rhs, gs))
    for module in (interop.import_stablehlo(RAGGED_DOT), interop.import_hlo(RAGGED_DOT_HLO)):
        (out,) = lowering.compile(module)(lhs, rhs, gs)
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


RAGGED_DOT_BATCHED = '''func.func @main(%lhs: tensor<4x2x6xf32>, %rhs: tensor<2x5x3x4xf32>, %gs: tensor<3xi32>) -> tensor<2x6x5xf32> {
  %0 = "chlo.ragged_dot"(%lhs, %rhs, %gs) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [1], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [3], lhs_ragged_dimensions = [2], rhs_group_dimensions = [2]>, precision_config = [#chlo<precision DEFAULT>, #chlo<precision DEFAULT>]} : (tensor<4x2x6xf32>, tensor<2x5x3x4xf32>, tensor<3xi32>) -> tensor<2x6x5xf32>
  return %0 : tensor<2x6x5xf32>
}'''


@pytest.mark.parametrize("sizes", [[2, 1, 3], [0, 4, 1], [1, 1, 1]])
def test_ragged_dot_with_batch_dimensions(sizes):
    """The ragged-non-contracting form with a batch dimension, every dimension out of the usual order
    (lhs [k, b, m], rhs [b, n, g, k]): checked against jax.lax.ragged_dot_general."""
    import interop

    rng = np.random.default_rng(1)
    lhs = rng.standard_normal((4, 2, 6)).astype(np.float32)
    rhs = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    gs = np.array(sizes, np.int32)
    numbers = lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([0], [3]), ([1], [0])),
                                            lhs_ragged_dimensions=[2], rhs_group_dimensions=[2])
    expected = np.asarray(jax.jit(lambda a, b, c: lax.ragged_dot_general(a, b, c, numbers))(lhs, rhs, gs))
    (out,) = lowering.compile(interop.import_stablehlo(RAGGED_DOT_BATCHED))(lhs, rhs, gs)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_dynamic_pad_and_dynamic_conv_with_constant_operands():
    """The spec's dynamic_pad / dynamic_conv with constant padding operands are pad / convolution."""
    import interop

    pad = '''func.func @main(%x: tensor<2x3xf32>) -> tensor<5x10xf32> {
  %v = stablehlo.constant dense<7.0> : tensor<f32>
  %lo = stablehlo.constant dense<[1, 2]> : tensor<2xi64>
  %hi = stablehlo.constant dense<[2, 1]> : tensor<2xi64>
  %in = stablehlo.constant dense<[0, 2]> : tensor<2xi64>
  %0 = stablehlo.dynamic_pad %x, %v, %lo, %hi, %in : (tensor<2x3xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<5x10xf32>
  return %0 : tensor<5x10xf32>
}'''
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = lowering.compile(interop.import_stablehlo(pad))(x)
    np.testing.assert_array_equal(out, np.asarray(lax.pad(x, np.float32(7), ((1, 2, 0), (2, 1, 2)))))
    conv = '''func.func @main(%x: tensor<1x5x5x1xf32>, %k: tensor<3x3x1x2xf32>) -> tensor<1x5x5x2xf32> {
  %p = stablehlo.constant dense<[[1, 1], [1, 1]]> : tensor<2x2xi64>
  %0 = "stablehlo.dynamic_conv"(%x, %k, %p) {dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>, feature_group_count = 1 : i64, batch_group_count = 1 : i64} : (tensor<1x5x5x1xf32>, tensor<3x3x1x2xf32>, tensor<2x2xi64>) -> tensor<1x5x5x2xf32>
  return %0 : tensor<1x5x5x2xf32>
}'''
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 5, 5, 1)).astype(np.float32)
    k = rng.standard_normal((3, 3, 1, 2)).astype(np.float32)
    (out,) = lowering.compile(interop.import_stablehlo(conv))(a, k)
    expected = np.asarray(lax.conv_general_dilated(a, k, (1, 1), ((1, 1), (1, 1)),
                                                   dimension_numbers=("NHWC", "HWIO", "NHWC")))
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    computed = pad.replace("%lo = stablehlo.constant dense<[1, 2]> : tensor<2xi64>",
                           "%lo0 = stablehlo.constant dense<[1, 2]> : tensor<2xi64>\n  %lo = stablehlo.add %lo0, %lo0 : tensor<2xi64>")
    computed = computed.replace("tensor<5x10xf32>", "tensor<6x12xf32>")
    module = interop.import_stablehlo(computed)  # paddings computed by the program: configured when it runs
    assert "hlo.dynamic_pad" in [op.name for op in module.walk()]
    (out,) = lowering.compile(module)(x)
    np.testing.assert_array_equal(out, np.asarray(lax.pad(x, np.float32(7), ((2, 2, 0), (4, 1, 2)))))


@pytest.mark.parametrize("form", ["contracting", "contracting_batched", "batch"])
def test_ragged_dot_contracting_and_batch_forms(form):
    """ragged_dot's ragged-contracting form ([g, b.., m, n]: each group sums over its own columns) and its
    ragged-batch form (the batched product), checked against jax.lax.ragged_dot_general."""
    import interop

    rng = np.random.default_rng(3)
    batched = form != "contracting"
    lhs = rng.standard_normal((2, 4, 6) if batched else (4, 6)).astype(np.float32)
    rhs = rng.standard_normal((2, 6, 5) if batched else (6, 5)).astype(np.float32)
    gs = np.array([2, 1, 3] if form != "batch" else [1, 1], np.int32)
    b = [0] if batched else []
    k = 2 if batched else 1
    ragged = {"contracting": 1, "contracting_batched": 2, "batch": 0}[form]
    numbers = lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([k], [k - 1]), (b, b)),
                                            lhs_ragged_dimensions=[ragged], rhs_group_dimensions=[])
    expected = np.asarray(jax.jit(lambda a, r, c: lax.ragged_dot_general(a, r, c, numbers))(lhs, rhs, gs))
    shape = "x".join(map(str, expected.shape))
    text = f'''func.func @main(%lhs: tensor<{"x".join(map(str, lhs.shape))}xf32>, %rhs: tensor<{"x".join(map(str, rhs.shape))}xf32>, %gs: tensor<{len(gs)}xi32>) -> tensor<{shape}xf32> {{
  %0 = "chlo.ragged_dot"(%lhs, %rhs, %gs) {{ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = {b}, rhs_batching_dimensions = {b}, lhs_contracting_dimensions = [{k}], rhs_contracting_dimensions = [{k - 1}], lhs_ragged_dimensions = [{ragged}], rhs_group_dimensions = []>, precision_config = [#chlo<precision DEFAULT>, #chlo<precision DEFAULT>]}} : (tensor<{"x".join(map(str, lhs.shape))}xf32>, tensor<{"x".join(map(str, rhs.shape))}xf32>, tensor<{len(gs)}xi32>) -> tensor<{shape}xf32>
  return %0 : tensor<{shape}xf32>
}}'''
    (out,) = lowering.compile(interop.import_stablehlo(text))(lhs, rhs, gs)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
