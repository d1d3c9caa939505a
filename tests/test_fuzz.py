"""Fuzzing the project's inputs: only XlaError subclasses, in bounded time, and round trips that hold.

Covered: XLA shape and layout text, hlo MLIR text and StableHLO text (mutations of valid programs), builder
calls with random operands and options, and call-time arguments. The default run is a few seconds
(derandomized, so CI is deterministic); ``python -m pytest -m slow tests/test_fuzz.py`` runs a longer
campaign with fresh random examples.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lowering
from interop import import_stablehlo
from xla_dialect import XlaBuilder, format_shape, parse_module, parse_shape
from xla_dialect.errors import XlaError

QUICK = settings(max_examples=60, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LONG = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SECONDS = 30.0
"""No single input may take longer: catches hangs and runaway work, not speed -- a first call on a busy machine with
a cold cache compiles kernels (3.8 s measured under a parallel load; 2 s here made the run flaky)."""


def _bounded(fn, *args):
    """Run ``fn``; it must return or raise an XlaError, within :data:`SECONDS`."""
    start = time.perf_counter()
    try:
        return fn(*args)
    except XlaError:
        return None
    finally:
        assert time.perf_counter() - start < SECONDS, (fn.__name__, args)


# -- shape and layout text ------------------------------------------------------

_SHAPE_TOKENS = ["f32", "bf16", "s8", "u4", "pred", "token", "c64", "f8e4m3fn", "[", "]", "{", "}", "(", ")", ",",
                 ":", "T", "L", "E", "S", "*", "0", "1", "2", "3", "128", "8", "-1", "?", "<=", " ", "  ", "/*x*/",
                 "/*", "\u0663", "99999999999999999999"]
shape_texts = st.lists(st.sampled_from(_SHAPE_TOKENS), max_size=24).map("".join)
valid_shapes = st.sampled_from(["f32[3,5]{1,0}", "bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}", "(f32[2], s32[])",
                                "pred[4]{0:T(1024)E(32)}", "f32[4,8]{0,1:T(2,4)S(1)}", "u4[16]{0:T(1024)(128)(2,1)}",
                                "token[]", "((f32[1]), (s8[2,2]{0,1}))", "f32[0,300000000]{1,0:T(8,128)}"])


def _shape_round_trip(text):
    shape = parse_shape(text)
    printed = format_shape(shape)
    assert format_shape(parse_shape(printed)) == printed
    return shape


@QUICK
@given(shape_texts)
def test_shape_text(text):
    _bounded(_shape_round_trip, text)


@QUICK
@given(valid_shapes, st.integers(0, 40), st.text(max_size=3))
def test_shape_text_mutations(text, position, insert):
    position = min(position, len(text))
    _bounded(_shape_round_trip, text[:position] + insert + text[position + 1:])


# -- MLIR and StableHLO text ---------------------------------------------------------

_HLO_PROGRAM = """func.func @main(%x: tensor<4xf32, #hlo.layout<{0}>>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = hlo.add %x, %y : (tensor<4xf32, #hlo.layout<{0}>>, tensor<4xf32>) -> tensor<4xf32>
  %1 = hlo.constant <[1.0, 2.0, 3.0, 4.0] : tensor<4xf32>> : tensor<4xf32>
  %2 = hlo.multiply %0, %1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
"""
_STABLEHLO_PROGRAM = """func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %1 = stablehlo.add %arg0, %0 : tensor<2x3xf32>
  %2 = stablehlo.constant dense<2.0> : tensor<2x3xf32>
  %3 = stablehlo.multiply %1, %2 : tensor<2x3xf32>
  return %3 : tensor<2x3xf32>
}
"""

mutations = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3), st.sampled_from(
    ['"', "<", ">", "{", "}", "(", ")", "%", "@", "x", "0", "-", ":", "\n", " ", "#", "\\", "tensor<", "\u00e9", "\x00"])),
    min_size=1, max_size=4)


def _mutate(text: str, edits) -> str:
    for position, cut, insert in edits:
        position %= len(text) + 1
        text = text[:position] + insert + text[position + cut:]
    return text


def _run(parse, text):
    """Parse ``text`` with ``parse``, compile and run the program on ones."""
    exe = lowering.compile(parse(text), fusion="never", loop_compilation="never")
    return exe(*[np.ones(t.get_shape(), np.float32) for t in exe.input_types])


def _run_hlo(text):
    return _run(parse_module, text)


@QUICK
@given(mutations)
def test_hlo_mlir_text_mutations(edits):
    _bounded(_run_hlo, _mutate(_HLO_PROGRAM, edits))


def _run_stablehlo(text):
    return _run(import_stablehlo, text)


@QUICK
@given(mutations)
def test_stablehlo_text_mutations(edits):
    _bounded(_run_stablehlo, _mutate(_STABLEHLO_PROGRAM, edits))


# -- builder calls ---------------------------------------------------------------------

_SHAPES = ["f32[]", "f32[3]", "f32[2,3]", "s32[2,3]", "pred[3]", "f32[0,3]", "bf16[3,2]", "u8[4]"]
_UNARY = ["neg", "exp", "abs", "sqrt", "not_", "tanh", "clz", "real", "is_finite"]
_BINARY = ["add", "mul", "div", "max", "and_", "pow", "rem", "atan2", "shift_left", "complex"]
dims = st.lists(st.integers(-2, 4), max_size=4)


def _build(op, a_shape, b_shape, dimensions, kind):
    b = XlaBuilder("fuzz")
    a = b.parameter(0, a_shape)
    c = b.parameter(1, b_shape)
    if kind == "unary":
        getattr(b, op)(a)
    elif kind == "binary":
        getattr(b, op)(a, c)
    elif kind == "transpose":
        b.transpose(a, dimensions)
    elif kind == "reshape":
        b.reshape(a, dimensions)
    elif kind == "slice":
        b.slice(a, dimensions, [d + 1 for d in dimensions], [1] * len(dimensions))
    elif kind == "broadcast":
        b.broadcast_in_dim(a, dimensions, dimensions)
    elif kind == "reduce":
        b.reduce(a, b.constant(np.float32(0)), lambda p, q: p + q, dimensions)
    elif kind == "dot":
        b.dot(a, c)
    elif kind == "concat":
        b.concat_in_dim([a, c], dimensions[0] if dimensions else 0)
    module = b.build()
    exe = lowering.compile(module, fusion="never", loop_compilation="never")
    args = []
    for t in exe.input_types:
        from xla_dialect.types import numpy_dtype

        args.append(np.ones(t.get_shape(), numpy_dtype(t)))
    return exe(*args)


@QUICK
@given(st.sampled_from(_UNARY + _BINARY), st.sampled_from(_SHAPES), st.sampled_from(_SHAPES), dims,
       st.sampled_from(["unary", "binary", "transpose", "reshape", "slice", "broadcast", "reduce", "dot", "concat"]))
def test_builder_calls(op, a_shape, b_shape, dimensions, kind):
    if kind == "unary" and op not in _UNARY or kind == "binary" and op not in _BINARY:
        kind = "unary" if op in _UNARY else "binary"
    _bounded(_build, op, a_shape, b_shape, dimensions, kind)


# -- call-time arguments ------------------------------------------------------------------

_EXE = None


def _executable():
    global _EXE
    if _EXE is None:
        b = XlaBuilder("args")
        x = b.parameter(0, "f32[2,3]")
        i = b.parameter(1, "s32[]")
        b.add(x, b.convert(i, "f32"), broadcast_dimensions=())
        _EXE = lowering.compile(b.build(), fusion="never", loop_compilation="never")  # no numba compile in the bound
    return _EXE


arguments = st.one_of(
    st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=3),
    st.lists(st.floats(allow_nan=True), max_size=7),
    st.builds(lambda shape, dtype: np.zeros(shape, dtype), st.lists(st.integers(0, 3), max_size=3).map(tuple),
              st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.complex64, object])),
)


@QUICK
@given(arguments, arguments)
def test_call_arguments(x, i):
    _bounded(_executable(), x, i)


# -- the long campaign -------------------------------------------------------------------------


@pytest.mark.slow
@LONG
@given(shape_texts)
def test_shape_text_long(text):
    _bounded(_shape_round_trip, text)


@pytest.mark.slow
@LONG
@given(mutations)
def test_hlo_mlir_text_mutations_long(edits):
    _bounded(_run_hlo, _mutate(_HLO_PROGRAM, edits))


@pytest.mark.slow
@LONG
@given(mutations)
def test_stablehlo_text_mutations_long(edits):
    _bounded(_run_stablehlo, _mutate(_STABLEHLO_PROGRAM, edits))


@pytest.mark.slow
@LONG
@given(arguments, arguments)
def test_call_arguments_long(x, i):
    _bounded(_executable(), x, i)
