"""HLO text import (issue 29, "XLA's own HLO"): syntax XLA's parser accepts is read (and run, or a clear
UnsupportedError when the executor cannot), and what XLA's parser rejects is rejected with the reason.

Each test is a small hand-written module; where XLA's CPU backend runs it, the executor's results are compared
with XLA's (jaxlib, ``run_hlo_text_on_xla``)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("jax")

import lowering  # noqa: E402
from interop.hlo import export_hlo, import_hlo, run_hlo_text_on_xla  # noqa: E402
from xla_dialect.errors import HloParseError, UnsupportedError, XlaError  # noqa: E402


def _module(body: str, params: str = "  p = f32[4] parameter(0)\n", extra: str = "") -> str:
    return f"HloModule m\n{extra}\nENTRY e {{\n{params}{body}\n}}\n"


def _run(text: str, *args):
    return lowering.compile(import_hlo(text, source="m.hlo"))(*args)


def _same_as_xla(text: str, *args, xla_text: str | None = None) -> None:
    """The executor's results on ``text`` are XLA's (on ``xla_text``, an equivalent form XLA's CPU backend
    compiles, when given)."""
    ours = _run(text, *args)
    theirs = run_hlo_text_on_xla(xla_text or text, *args, trusted=True)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _round_trip(text: str) -> str:
    printed = export_hlo(import_hlo(text))
    assert export_hlo(import_hlo(printed)) == printed
    return printed


def _error(text: str, cls=HloParseError) -> str:
    with pytest.raises(cls) as info:
        import_hlo(text, source="m.hlo")
    message = str(info.value)
    assert "ValueError" not in message and "malformed instruction" not in message, message
    return message


# ----------------------------------------------------------------------------
# XLA opcodes without an op here: read, printed back, UnsupportedError naming them when compiled
# ----------------------------------------------------------------------------

SCALED_DOT = _module(
    "  ROOT c = f32[2,4] scaled-dot(a, b, sa, sb), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
    params="  a = f32[2,3] parameter(0)\n  b = f32[3,4] parameter(1)\n  sa = f32[2,1] parameter(2)\n"
           "  sb = f32[1,4] parameter(3)\n")


def test_xla_opcode_without_kernel_is_read_and_fails_at_compile_naming_it():
    module = import_hlo(SCALED_DOT, source="m.hlo")
    printed = _round_trip(SCALED_DOT)
    assert "scaled-dot(%a, %b, %sa, %sb), lhs_contracting_dims={1}, rhs_contracting_dims={0}" in printed
    with pytest.raises(UnsupportedError) as info:
        lowering.compile(module)
    assert "m.hlo:8:3" in str(info.value) and "scaled-dot" in str(info.value)
    # a name XLA does not know stays an import error
    assert "XLA has no such opcode" in _error(_module("  ROOT q = f32[4] frobnicate(p)"))


def test_asynchronous_wrapper_of_any_opcode():
    """``X-start``/``X-done`` (XLA's ParseOpcode reads any opcode so) run as X."""
    text = _module("  s = ((f32[4]), f32[4], u32[]) negate-start(p)\n  ROOT d = f32[4] negate-done(s)")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_run(text, x)[0], -x)


# ----------------------------------------------------------------------------
# Attributes XLA repeats on done instructions, and others it accepts
# ----------------------------------------------------------------------------

CALLS = """comp {
  q = f32[4] parameter(0)
  ROOT n = f32[4] exponential(q)
}
"""


def test_async_done_calls_and_send_recv_done_channel_id():
    text = _module("  s = ((f32[4]), f32[4], s32[]) async-start(p), calls=comp\n"
                   "  ROOT d = f32[4] async-done(s), calls=comp", extra=CALLS)
    x = np.linspace(-1, 1, 4).astype(np.float32)
    # (XLA compiles HLO text through StableHLO, which does not take async pairs: it runs the call)
    _same_as_xla(text, x, xla_text=_module("  ROOT d = f32[4] call(p), to_apply=comp", extra=CALLS))
    wrong = text.replace("async-done(s), calls=comp", "async-done(s), calls=other")
    assert "calls=other differs from the async-start %s" in _error(wrong)
    sendrecv = _module(
        "  tok = token[] after-all()\n"
        "  s = (f32[4], u32[], token[]) send(p, tok), channel_id=1\n"
        "  sd = token[] send-done(s), channel_id=1\n"
        "  r = (f32[4], u32[], token[]) recv(tok), channel_id=2\n"
        "  rd = (f32[4], token[]) recv-done(r), channel_id=2\n"
        "  ROOT g = f32[4] get-tuple-element(rd), index=0")
    import_hlo(sendrecv)
    message = _error(sendrecv.replace("send-done(s), channel_id=1", "send-done(s), channel_id=3"))
    assert "m.hlo:7:3" in message and "channel_id=3 differs from the send %s it completes (channel_id=1)" in message


def test_get_dimension_size_without_a_shape_is_s32():
    text = _module("  ROOT c = get-dimension-size(p), dimensions={0}")
    (size,) = _run(text, np.zeros(4, np.float32))
    assert size.dtype == np.int32 and int(size) == 4
    _same_as_xla(text, np.zeros(4, np.float32))


def test_parameter_replication_topk_is_stable_split_configs_and_comments_in_tuple_shapes():
    text = _module("  ROOT t = (f32[4], // the values\n            s32[4]) tuple(p, i)",
                   params="  p = f32[4]{0:SC(0:2)} parameter(0), parameter_replication={true}\n"
                          "  i = s32[4] iota(), iota_dimension=0\n")
    x = np.arange(4, dtype=np.float32)
    out = _run(text, x)
    np.testing.assert_array_equal(out[0], x)
    assert "parameter_replication={true}" in _round_trip(text)
    wrong = text.replace("parameter_replication={true}", "parameter_replication={true,false}")
    assert "the parameter has 1 leaf buffers, but parameter_replication has 2 elements" in _error(wrong)
    topk = _module("  ROOT t = (f32[2], s32[2]) topk(p), k=2, largest=true, is_stable=true")
    values, indices = _run(topk, np.array([1, 3, 3, 0], np.float32))
    np.testing.assert_array_equal(values, [3, 3])
    np.testing.assert_array_equal(indices, [1, 2])  # ties: the lower index first


# ----------------------------------------------------------------------------
# dot: algorithms, operands of different element types
# ----------------------------------------------------------------------------

def _dot(lhs: str, rhs: str, out: str = "f32", attrs: str = "") -> str:
    return _module(f"  ROOT c = {out}[2,4] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{attrs}",
                   params=f"  a = {lhs}[2,3] parameter(0)\n  b = {rhs}[3,4] parameter(1)\n")


def test_dot_algorithm_is_kept_and_unsupported_numerics_fail_at_compile():
    a = (np.arange(6).reshape(2, 3) / 7).astype(ml_dtypes.bfloat16)
    b = (np.arange(12).reshape(3, 4) / 3).astype(ml_dtypes.bfloat16)
    honoured = _dot("bf16", "bf16", attrs=", algorithm=dot_bf16_bf16_f32")
    _same_as_xla(honoured, a, b)
    assert "algorithm=dot_bf16_bf16_f32" in _round_trip(honoured)
    # f32 operands rounded to bf16 (and the x3/x6/x9 splits): not what the executor computes
    for algorithm in ("dot_bf16_bf16_f32", "dot_bf16_bf16_f32_x3", "dot_tf32_tf32_f32"):
        text = _dot("f32", "f32", attrs=f", algorithm={algorithm}")
        module = import_hlo(text, source="m.hlo")
        assert f"algorithm={algorithm}" in _round_trip(text)
        with pytest.raises(UnsupportedError) as info:
            lowering.compile(module)
        assert "m.hlo:6:3: dot with" in str(info.value) and f"algorithm={algorithm}" in str(info.value)
    assert "unknown dot algorithm=dot_f7" in _error(_dot("f32", "f32", attrs=", algorithm=dot_f7"))


def test_dot_and_convolution_operands_of_different_element_types():
    a = (np.arange(6).reshape(2, 3) / 7).astype(ml_dtypes.bfloat16)
    b = (np.arange(12).reshape(3, 4) / 3).astype(np.float32)
    s8 = np.arange(-3, 3, dtype=np.int8).reshape(2, 3)
    for lhs, rhs, x, y in (("bf16", "f32", a, b), ("f32", "bf16", a.astype(np.float32) * 3, b.astype(a.dtype)),
                           ("s8", "f32", s8, b)):
        text = _dot(lhs, rhs)
        _same_as_xla(text, x, y)
        assert "dot(%a, %b)" in _round_trip(text)
    conv = _module("  ROOT c = f32[1,2,1] convolution(a, b), window={size=2}, dim_labels=b0f_0io->b0f",
                   params="  a = bf16[1,3,1] parameter(0)\n  b = f32[2,1,1] parameter(1)\n")
    _same_as_xla(conv, np.array([[[1], [2], [3]]], ml_dtypes.bfloat16), np.array([[[0.5]], [[0.25]]], np.float32))
    assert "neither converts exactly" in str(_error(_dot("s32", "bf16"), XlaError))


# ----------------------------------------------------------------------------
# A single instruction: its operands, written with their shapes, are the parameters
# ----------------------------------------------------------------------------

def test_single_instruction_text_reads_its_operands_as_parameters():
    x, y = np.arange(3, dtype=np.float32), np.full(3, 0.5, np.float32)
    text = "%r = f32[3]{0} subtract(f32[3]{0} %a, f32[3]{0} %b)"
    np.testing.assert_array_equal(_run(text, x, y)[0], x - y)
    assert "%a = f32[3]{0} parameter(0)" in _round_trip(text)
    _same_as_xla(text, x, y)
    unnamed = "f32[3] multiply(f32[3], f32[3])"  # no left-hand side, unnamed operands: _0, _1
    np.testing.assert_array_equal(_run(unnamed, x, y)[0], x * y)
    assert "ROOT %_ = f32[3]{0} multiply(%_0, %_1)" in _round_trip(unnamed)
    _same_as_xla(unnamed, x, y)
    assert "operand %a has no shape" in _error("%r = f32[3] add(%a, f32[3] %b)")
    assert "m.hlo:1:36: expected the end of the text" in _error("r = f32[3] add(f32[3] a, f32[3] b) junk")


# ----------------------------------------------------------------------------
# What XLA's parser rejects is rejected, with the reason and line:column
# ----------------------------------------------------------------------------

_ROOT = "ENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n"
_SECTIONS = ("HloModule m\n\nFileNames\n1 \"a.py\"\n\nFunctionNames\n1 \"f\"\n\nFileLocations\n"
             "1 {file_name_id=1 function_name_id=1 line=LINE end_line=3}\n\nStackFrames\n"
             "1 {file_location_id=1 parent_frame_id=FRAME}\n\n" + _ROOT)

REJECTED = [
    # the computation's signature: its shapes are read, its result must be the root's
    ("HloModule m\nENTRY e (p: f33[2]) -> f32[2] {\n  ROOT p = f32[2] parameter(0)\n}\n",
     "m.hlo:2:13", "unknown element type 'f33'"),
    ("HloModule m\nENTRY e (p: f32[2]) -> s32[2] {\n  ROOT p = f32[2] parameter(0)\n}\n",
     "m.hlo:2:24", "computation 'e' returns s32[2]{0}, but its root %p is f32[2]{0}"),
    # (jaxlib's parser aborts the process on this one: tests/test_hlo_xla_reference.py)
    ("HloModule m\nENTRY main (p: token[2]) -> f32[] {\n  p = token[] parameter(0)\n  ROOT c = f32[] constant(1)\n}\n",
     "m.hlo:2:16", "token[] takes no dimensions"),
    ("HloModule m\nENTRY e (p f32[2]) -> f32[2] {\n  ROOT p = f32[2] parameter(0)\n}\n",
     "m.hlo:2:10", "expected a parameter 'name: shape'"),
    # integers beyond int64 in shapes (dimensions, tiles)
    ("HloModule m\nENTRY e {\n  ROOT p = f32[9223372036854775808] parameter(0)\n}\n",
     "m.hlo:3:12", "9223372036854775808 in shape 'f32[9223372036854775808]' is beyond int64"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[2]{0:T(18446744073709551616)} parameter(0)\n}\n",
     "m.hlo:3:12", "18446744073709551616 in shape"),
    # module attributes XLA does not have, or of the wrong kind
    ("HloModule m, colour=blue\n" + _ROOT, "m.hlo:1:12", "unknown module attribute colour="),
    ("HloModule m, replica_count=x\n" + _ROOT, "m.hlo:1:12", "module attribute replica_count=x must be a 64-bit"),
    ("HloModule m, is_scheduled=yes\n" + _ROOT, "m.hlo:1:12", "is_scheduled=yes must be true or false"),
    # metadata and debug-info sections: int32 fields
    ("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), metadata={op_name=\"a\" source_line=nan}\n}\n",
     "m.hlo:3:3", "metadata source_line=nan must be a 32-bit integer"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), metadata={stack_frame_id=4294967296}\n}\n",
     "m.hlo:3:3", "metadata stack_frame_id=4294967296 must be a 32-bit integer"),
    (_SECTIONS.replace("LINE", "nan").replace("FRAME", "0"), "m.hlo:10:", "line=nan must be a 32-bit integer"),
    (_SECTIONS.replace("LINE", "3").replace("FRAME", "2147483648"), "m.hlo:13:",
     "parent_frame_id=2147483648 must be a 32-bit integer"),
    # an add-dependency of one operand; an integer literal beyond 64 bits (XLA's lexer reads it as an integer)
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT c = f32[2] add-dependency(p)\n}\n",
     "m.hlo:4:3", "add-dependency takes 2 operands"),
    ("HloModule m\nENTRY e {\n  ROOT c = f32[] constant(18446744073709551616)\n}\n",
     "m.hlo:3:3", "the integer 18446744073709551616 in the literal is beyond 64 bits"),
    # a computation attribute other than execution_thread
    ("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}, colour=blue\n", "m.hlo:2:1",
     "unknown attribute colour="),
]


@pytest.mark.parametrize("text, where, what", REJECTED, ids=[r[2][:40] for r in REJECTED])
def test_what_xla_rejects_is_rejected_with_the_reason(text, where, what):
    message = _error(text)
    assert where in message and what in message, message


def test_valid_debug_info_sections_still_import():
    module = import_hlo(_SECTIONS.replace("LINE", "3").replace("FRAME", "0"))
    assert module is not None


@pytest.mark.parametrize("shape", [(16,), (8, 16), (2, 3, 9)])
def test_xla_cpu_topk_custom_call_is_read_as_topk(shape):
    # XLA CPU compiles top_k into custom-call "TopK" (its runtime: descending total order, ties at the lower index);
    # it reads as the topk opcode's expansion: bitwise jax.jit's values and indices, NaNs, signed zeros and ties too.
    import jax

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:7] = [np.nan, -np.nan, 0.0, -0.0, np.inf, 1.0, 1.0]
    f = jax.jit(lambda x: jax.lax.top_k(x, 4))
    text = f.lower(x).compile().as_text()
    assert 'custom_call_target="TopK"' in text
    for ours, ref in zip(_run(text, x), f(x)):
        assert np.array_equal(np.asarray(ours).view(np.uint8), np.asarray(ref).view(np.uint8))


# ----------------------------------------------------------------------------
# collective-permute with slice_sizes (XLA's in-place collective-permute of slices): read, kept, printed
# back; no kernel (the per-pair layout of its start indices is not specified): UnsupportedError at compile
# ----------------------------------------------------------------------------

_CP_PARAMS = ("  input = f32[8,4]{0,1} parameter(0)\n  constant = f32[] constant(1)\n"
              "  output = f32[8,8]{0,1} broadcast(constant), dimensions={}\n  c0 = s32[] constant(0)\n"
              "  i = (s32[], s32[]) tuple(c0, c0)\n  c4 = s32[] constant(4)\n  o = (s32[], s32[]) tuple(c0, c4)\n")
CP_SLICES = ("HloModule m, replica_count=4\n\nENTRY e {\n" + _CP_PARAMS
             + "  ROOT cp = f32[8,8]{0,1} collective-permute(input, output, i, o), "
               "source_target_pairs={{0,1},{1,2},{2,3}}, slice_sizes={{4,4}}\n}\n")
CP_SLICES_START = ("HloModule m, replica_count=4\n\nENTRY e {\n" + _CP_PARAMS
                   + "  s = (f32[8,4]{0,1}, f32[8,8]{0,1}, u32[], u32[]) collective-permute-start(input, output, i, o),"
                     " channel_id=2, source_target_pairs={{0,1},{1,2},{2,3}}, slice_sizes={{4,4}}\n"
                     "  ROOT d = f32[8,8]{0,1} collective-permute-done(s)\n}\n")


@pytest.mark.parametrize("text, line", [(CP_SLICES, 11), (CP_SLICES_START, 11)], ids=["sync", "start"])
def test_collective_permute_with_slice_sizes_is_read_printed_back_and_fails_at_compile(text, line):
    from jax._src.lib import xla_client

    module = import_hlo(text, source="m.hlo")
    printed = _round_trip(text)
    assert "collective-permute(%input, %output, %i, %o), " in printed
    assert "source_target_pairs={{0,1},{1,2},{2,3}}, slice_sizes={{4,4}}" in printed
    assert xla_client.hlo.hlo_module_from_text(printed) is not None  # XLA's parser reads our print
    with pytest.raises(UnsupportedError) as info:
        lowering.compile(module, num_replicas=4)
    message = str(info.value)
    assert f"m.hlo:{line}:3" in message and "collective-permute with slice_sizes" in message, message


def test_collective_permute_with_slice_sizes_is_checked_as_xla_checks_it():
    three = CP_SLICES.replace("collective-permute(input, output, i, o)", "collective-permute(input, output, i)")
    message = _error(three)
    assert "m.hlo:11:3" in message and "takes exactly four operands" in message and "got 3" in message
    message = _error(CP_SLICES.replace("{{0,1},{1,2},{2,3}}", "{{0,1,2},{2,3}}"))
    assert "m.hlo:11:3" in message and "a list of pairs" in message
    message = _error(CP_SLICES.replace("slice_sizes={{4,4}}", "slice_sizes={{4,x}}"))
    assert "m.hlo:11:3" in message and "slice_sizes" in message


# ----------------------------------------------------------------------------
# Bounded dynamic shapes (f32[<=8,4]): read as their bound, kept (hlo.dynamic_shape) and printed back with
# <=; get-dimension-size of a set-dimension-size runs (XLA's result); other uses: UnsupportedError at compile
# ----------------------------------------------------------------------------

DYNAMIC = """HloModule dyn

ENTRY main {
  p = f32[8,4] parameter(0)
  size = s32[] parameter(1)
  sds = f32[<=8,4] set-dimension-size(p, size), dimensions={0}
  n = f32[<=8,4] negate(sds)
  g0 = s32[] get-dimension-size(n), dimensions={0}
  g1 = s32[] get-dimension-size(sds), dimensions={0}
  ROOT sum = s32[] add(g0, g1)
}
"""

DYNAMIC_PARAMETER = """HloModule dyn

ENTRY main {
  p = f32[<= 8,4] parameter(0)
  s = s32[] get-dimension-size(p), dimensions={0}
  ROOT t = (f32[<=8,4], s32[]) tuple(p, s)
}
"""

DYNAMIC_REDUCTION = """HloModule dyn

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,4] parameter(0)
  size = s32[] parameter(1)
  sds = f32[<=8,4] set-dimension-size(p, size), dimensions={0}
  zero = f32[] constant(0)
  ROOT r = f32[4] reduce(sds, zero), dimensions={0}, to_apply=add
}
"""


def test_bounded_dynamic_shapes_are_read_and_printed_back_with_their_bounds():
    from jax._src.lib import xla_client

    for text in (DYNAMIC, DYNAMIC_PARAMETER, DYNAMIC_REDUCTION):
        printed = _round_trip(text)
        xla = xla_client.hlo.hlo_module_from_text(printed).to_string()  # XLA's parser reads our print
        dynamic = re.findall(r"^  (?:ROOT )?%([\w.]+) = [^=]*<=", printed, re.M)
        assert dynamic
        for name in dynamic:  # ... and gives the same instructions bounded dynamic dimensions
            (line,) = [line for line in xla.splitlines() if re.match(rf"\s*(ROOT )?%?{re.escape(name)} = ", line)]
            assert "<=8" in line, (name, xla)
    printed = _round_trip(DYNAMIC)
    assert "%sds = f32[<=8,4]{1,0} set-dimension-size(%p, %size), dimensions={0}" in printed
    assert "%n = f32[<=8,4]{1,0} negate(%sds)" in printed
    printed = _round_trip(DYNAMIC_PARAMETER)
    assert "entry_computation_layout={(f32[<=8,4]{1,0})->(f32[<=8,4]{1,0}, s32[])}" in printed
    assert "%p = f32[<=8,4]{1,0} parameter(0)" in printed
    assert "ROOT %t = (f32[<=8,4]{1,0}, s32[]) tuple(%p, %s)" in printed
    module = import_hlo(DYNAMIC, source="m.hlo")  # the bound is the type's static size
    sds = next(op for op in module.walk() if op.name == "hlo.set_dimension_size")
    assert sds.results[0].type.get_shape() == (8, 4)
    assert sds.attributes["hlo.dynamic_shape"].data == "f32[<=8,4]{1,0}"


@pytest.mark.parametrize("size", [0, 3, 8])
def test_get_dimension_size_of_set_dimension_size_runs_as_xla(size):
    args = (np.ones((8, 4), np.float32), np.int32(size))
    (ours,) = _run(DYNAMIC, *args)
    assert int(ours) == 2 * size
    _same_as_xla(DYNAMIC, *args)


@pytest.mark.parametrize("text, where, what", [
    (DYNAMIC_REDUCTION, "m.hlo:12:3", "hlo.set_dimension_size %sds has the bounded dynamic shape f32[<=8,4]{1,0}"),
    (DYNAMIC_PARAMETER, "m.hlo:4:3", "parameter 0 %p of @main has the bounded dynamic shape f32[<=8,4]{1,0}"),
    (DYNAMIC.replace("ROOT sum = s32[] add(g0, g1)", "ROOT sum = s32[] add(g0, g1)\n  x = f32[<=8,4] abs(n)")
     .replace("  ROOT sum", "  sum").replace("  x = ", "  ROOT x = "),
     "m.hlo:6:3", "hlo.set_dimension_size %sds has the bounded dynamic shape"),
], ids=["reduction", "parameter", "result"])
def test_other_uses_of_dynamic_shapes_fail_at_compile_naming_where(text, where, what):
    module = import_hlo(text, source="m.hlo")
    with pytest.raises(UnsupportedError) as info:
        lowering.compile(module)
    message = str(info.value)
    assert message.startswith(where) and what in message and "static shapes only" in message, message


def test_unbounded_dynamic_dimensions_are_rejected_with_the_reason():
    message = _error(_module("  ROOT n = f32[?] negate(p)"))
    assert "m.hlo:5:12" in message and "unbounded dynamic dimensions ('?') are not supported" in message
    message = _error(_module("  ROOT n = f32[<=] negate(p)"))
    assert "m.hlo:5:12" in message and "expected the bound of a dynamic dimension" in message
