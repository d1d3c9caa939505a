"""XLA HLO text: import with layouts, printing, round trips, execution against XLA, errors with positions."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")

import interop  # noqa: E402
import lowering  # noqa: E402
from interop.comparison import compare_arrays, is_float_dtype, ulp_budget  # noqa: E402
from interop.hlo import export_hlo, import_hlo, run_hlo_text_on_xla  # noqa: E402
from xla_dialect.errors import HloParseError, XlaError  # noqa: E402
from xla_dialect.layout import layout_of  # noqa: E402
from xla_dialect.shape import format_shape  # noqa: E402

from hlo_programs import hlo_texts, programs  # noqa: E402

PROGRAMS = sorted(programs())


def _xla_module(text: str):
    from jax._src.lib import xla_client

    return xla_client.hlo.hlo_module_from_text(text)


def _xla_print(module) -> str:
    """XLA's print of a parsed module, large constants included."""
    from jax._src.lib import xla_client

    options = xla_client.hlo.HloPrintOptions()
    options.print_large_constants = True
    return module.to_string(options)


def _named_types(module) -> dict[str, str]:
    """instruction name -> XLA shape text, for every named op of the module."""
    out = {}
    for op in module.walk():
        name = op.attributes.get("hlo.name")
        if name is not None and op.results:
            types = [r.type for r in op.results]
            out[name.data] = ",".join(format_shape(t) for t in types)
    return out


def _agree(ours, expected, what: str) -> None:
    assert len(ours) == len(expected), f"{what}: {len(ours)} results, expected {len(expected)}"
    for i, (a, b) in enumerate(zip(ours, expected)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, f"{what} #{i}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        if b.dtype.kind == "c" or is_float_dtype(b.dtype):
            # Sums in another order: compare against the magnitude of the result (ULP near zero is meaningless).
            scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1.0)
            err = float(np.max(np.abs(a.astype(np.complex128) - b.astype(np.complex128)))) if b.size else 0.0
            finite = np.isfinite(b) if b.dtype.kind != "c" else np.isfinite(b.real)
            assert np.array_equal(np.isnan(a), np.isnan(b)), f"{what} #{i}: NaN positions differ"
            assert np.array_equal(a[~finite], b[~finite]) or b.dtype.kind == "c", f"{what} #{i}: infinities differ"
            import ml_dtypes

            tol = 64 * float(ml_dtypes.finfo(b.real.dtype if b.dtype.kind == "c" else b.dtype).eps) * scale
            if b.dtype.kind != "c":
                c = compare_arrays(a, b, ulp_budget(b.dtype, 4))
                assert c.ok or err <= tol, f"{what} #{i}: {c.message} (max abs {err:.3g}, tolerance {tol:.3g})"
            else:
                assert err <= tol, f"{what} #{i}: max abs {err:.3g} > {tol:.3g}"
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{what} #{i}")


@pytest.fixture(scope="module")
def jax_texts():
    import jax

    cache = {}

    def get(name):
        if name not in cache:
            pre, post, fn, args = hlo_texts(name)
            expected = [np.asarray(o) for o in jax.tree.leaves(jax.jit(fn)(*args))]
            cache[name] = pre, post, args, expected
        return cache[name]

    return get


@pytest.mark.parametrize("stage", ["pre", "post"])
@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.sample(16)
def test_jax_program(jax_texts, name, stage):
    """Import JAX's HLO (before and after XLA's optimizations), print it, read it back, run it."""
    pre, post, args, expected = jax_texts(name)
    text = pre if stage == "pre" else post
    module = import_hlo(text)
    printed = export_hlo(module)
    # XLA's parser accepts our text and prints back the same layouts on every instruction.
    xla_printed = _xla_print(_xla_module(printed))
    assert _named_types(import_hlo(xla_printed)) == _named_types(module)
    # Round trip: structurally the same module, and the same text when printed again.
    again = import_hlo(printed)
    assert again.is_structurally_equivalent(module)
    assert export_hlo(again) == printed
    # Execution: the executor against jax.jit (the same XLA that printed the text).
    _agree(lowering.compile(module)(*args), expected, f"{name} ({stage}) against jax.jit")
    if stage == "pre":
        _agree(interop.run_hlo_on_xla(module, *args), expected, f"{name}: XLA compiling our text")


def test_every_layout_survives_post_optimization_text(jax_texts):
    """Optimized modules carry non-default layouts (transposes, dot operands): imported as written."""
    pre, post, args, expected = jax_texts("dot_general")
    module = import_hlo(post)
    written = {}
    from interop.hlo.syntax import parse_hlo_text

    for comp in parse_hlo_text(post).order:
        for ins in comp.instructions:
            written[ins.name] = format_shape(ins.shape)
    ours = _named_types(module)
    assert all(ours[n] == written[n] for n in ours if n in written)


# ----------------------------------------------------------------------------
# XLA's operation semantics' examples (XLA's shapes, layout and tiling notes), verbatim inside a module
# ----------------------------------------------------------------------------

SEED_ADD = """HloModule seed_add

ENTRY %main {
  %exponential.183 = bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)} parameter(0)
  %broadcast.3115 = bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)} parameter(1)
  ROOT add.936 = bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}
add(exponential.183, broadcast.3115)
}
"""

SEED_FUSION = """HloModule seed_fusion

%all-reduce-scatter.3 (p: bf16[32,32,8192]) -> bf16[32,32,4096] {
  %p = bf16[32,32,8192]{2,1,0:T(8,128)(2,1)S(1)} parameter(0)
  ROOT %s = bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)} slice(%p), slice={[0:32], [0:32], [0:4096]}
}

ENTRY %main {
  %fusion.32 = bf16[32,32,8192]{2,1,0:T(8,128)(2,1)S(1)} parameter(0)
  ROOT %fusion.3 = bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)}
fusion(bf16[32,32,8192]{2,1,0:T(8,128)(2,1)S(1)} %fusion.32),
kind=kCustom, calls=%all-reduce-scatter.3
}
"""


def test_seed_add_example():
    module = import_hlo(SEED_ADD)
    add = next(op for op in module.walk() if op.name == "hlo.add")
    assert add.attributes["hlo.name"].data == "add.936"
    assert format_shape(add.results[0].type) == "bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}"
    printed = export_hlo(module)
    assert "add.936 = bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)} add(%exponential.183, %broadcast.3115)" in printed
    _xla_module(printed)  # XLA's parser accepts it


def test_seed_fusion_example():
    module = import_hlo(SEED_FUSION)
    fusion = next(op for op in module.walk() if op.name == "hlo.fusion")
    assert fusion.kind.data == "kCustom"
    assert fusion.callee.string_value() == "all-reduce-scatter.3"
    assert layout_of(fusion.results[0].type).memory_space == 1
    printed = export_hlo(module)
    assert ("%fusion.3 = bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)} fusion(%fusion.32), kind=kCustom, "
            "calls=%all-reduce-scatter.3") in printed
    assert import_hlo(printed).is_structurally_equivalent(module)
    hm = _xla_module(printed)
    assert "S(1)" in hm.to_string()
    x = (np.arange(32 * 32 * 8192) % 251).astype(np.float32).reshape(32, 32, 8192)
    import ml_dtypes

    (out,) = lowering.compile(module)(x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(out, x[:, :, :4096].astype(ml_dtypes.bfloat16))


TPU_LAYOUTS = """HloModule tpu_layouts, entry_computation_layout={(bf16[16,256]{0,1:T(8,128)(2,1)S(1)}, s4[8,128]{1,0:T(8,128)(2,1)E(4)}, f32[3,5,7]{2,1,0:T(2,*,128)L(1024)})->(f32[16,256]{1,0:T(8,128)}, s8[8,128]{1,0:T(8,128)(4,1)}, f32[3,5,7]{2,1,0:T(2,*,128)L(1024)})}

ENTRY %main.1 (a: bf16[16,256], b: s4[8,128], c: f32[3,5,7]) -> (f32[16,256], s8[8,128], f32[3,5,7]) {
  %a = bf16[16,256]{0,1:T(8,128)(2,1)S(1)} parameter(0), sharding={replicated}
  %b = s4[8,128]{1,0:T(8,128)(2,1)E(4)} parameter(1)
  %c = f32[3,5,7]{2,1,0:T(2,*,128)L(1024)} parameter(2)
  %wide = f32[16,256]{1,0:T(8,128)} convert(bf16[16,256]{0,1:T(8,128)(2,1)S(1)} %a), frontend_attributes={_xla_stream_annotation="1"}
  %b8 = s8[8,128]{1,0:T(8,128)(4,1)} convert(%b)
  %c2 = f32[3,5,7]{2,1,0:T(2,*,128)L(1024)} add(%c, %c), metadata={op_type="add" op_name="jit(f)/add" source_file="/tmp/m.py" source_line=3}
  ROOT %t = (f32[16,256]{1,0:T(8,128)}, s8[8,128]{1,0:T(8,128)(4,1)}, f32[3,5,7]{2,1,0:T(2,*,128)L(1024)}) tuple(%wide, %b8, %c2)
}
"""


def test_tpu_layouts_tiles_memory_spaces_element_sizes():
    """T(8,128)(2,1), S(1), E(4), '*' tiles and L(n) survive import, printing and XLA's parser."""
    import ml_dtypes

    module = import_hlo(TPU_LAYOUTS)
    printed = export_hlo(module)
    for layout in ("{0,1:T(8,128)(2,1)S(1)}", "{1,0:T(8,128)(2,1)E(4)}", "{2,1,0:T(2,*,128)L(1024)}",
                   "sharding={replicated}", 'frontend_attributes={_xla_stream_annotation="1"}'):
        assert layout in printed, layout
    assert _named_types(import_hlo(_xla_print(_xla_module(printed)))) == _named_types(module)
    a = np.arange(16 * 256, dtype=np.float32).reshape(16, 256).astype(ml_dtypes.bfloat16)
    b = (np.arange(8 * 128) % 16 - 8).astype(ml_dtypes.int4).reshape(8, 128)
    c = np.ones((3, 5, 7), np.float32)
    wide, b8, c2 = lowering.compile(module)(a, b, c)
    np.testing.assert_array_equal(wide, a.astype(np.float32))
    np.testing.assert_array_equal(b8, b.astype(np.int8))
    np.testing.assert_array_equal(c2, 2 * c)


# ----------------------------------------------------------------------------
# Forms of the text
# ----------------------------------------------------------------------------

FORMS = """HloModule forms, entry_computation_layout={(f32[2,3]{0,1}, s32[])->(f32[2,3]{1,0}, s32[], f32[3])}

/* a comment */
%body (state: (s32[], f32[2,3])) -> (s32[], f32[2,3]) {
  %state = (s32[], f32[2,3]{1,0}) parameter(0)
  %i = s32[] get-tuple-element((s32[], f32[2,3]{1,0}) %state), index=0
  %x = f32[2,3]{1,0} get-tuple-element(%state), index=1
  %one = s32[] constant(1)
  %next = s32[] add(s32[] %i, s32[] %one)
  %double = f32[2,3]{1,0} add(%x, %x)
  ROOT %t = (s32[], f32[2,3]{1,0}) tuple(%next, %double)
}

%cond (state.1: (s32[], f32[2,3])) -> pred[] {
  %state.1 = (s32[], f32[2,3]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%state.1), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%i.1, %three), direction=LT
}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %entry (arg: f32[2,3], n: s32[]) -> (f32[2,3], s32[], f32[3]) {
  %arg = f32[2,3]{0,1} parameter(0), metadata={op_name="x" source_file="model.py" source_line=7}
  %n = s32[] parameter(1)
  %zero = s32[] constant(0)
  %copy0 = f32[2,3]{1,0} copy(%arg)
  %init = (s32[], f32[2,3]{1,0}) tuple(%zero, %copy0)
  %loop = (s32[], f32[2,3]{1,0}) while(%init), condition=%cond, body=%body
  %copy = f32[2,3]{1,0} get-tuple-element(%loop), index=1
  %count = s32[] get-tuple-element(%loop), index=0
  %c0 = f32[] constant(0)
  %r = f32[3]{0} reduce(%copy, %c0), dimensions={0}, to_apply=%sum,
      metadata={op_name="jit(f)/reduce_sum" source_file="model.py" source_line=9}
  ROOT %out = (f32[2,3]{1,0}, s32[], f32[3]{0}) tuple(%copy, %count, %r)
}
"""


def test_forms_of_the_text():
    """Inline operand shapes, comments, multi-line attributes, signatures, a while over a tuple."""
    module = import_hlo(FORMS)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = lowering.compile(module)(x, np.int32(0))
    np.testing.assert_array_equal(out[0], x * 8)
    assert int(out[1]) == 3
    np.testing.assert_array_equal(out[2], (x * 8).sum(0))
    main = next(op for op in module.ops if op.sym_name.data == "main")
    assert format_shape(main.function_type.inputs.data[0]) == "f32[2,3]{0,1}"
    reduce = next(op for op in module.walk() if op.name == "hlo.reduce")
    assert reduce.attributes["loc"].data == "model.py:9"
    printed = export_hlo(module)
    assert import_hlo(printed).is_structurally_equivalent(module)
    expected = run_hlo_text_on_xla(FORMS, x, np.int32(0))
    _agree(out, expected, "forms against XLA")


def test_instructions_out_of_order_are_read():
    """XLA's parser wants operands defined first; here any order is read (as XLA's printer may not sort)."""
    text = ("HloModule m\nENTRY e {\n  ROOT q = f32[2]{0} add(n, p)\n  n = f32[2]{0} negate(p)\n"
            "  p = f32[2]{0} parameter(0)\n}\n")
    (out,) = lowering.compile(import_hlo(text))(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(out, [0, 0])
    cyclic = "HloModule m\nENTRY e {\n  a = f32[2]{0} negate(b)\n  ROOT b = f32[2]{0} negate(a)\n}\n"
    with pytest.raises(HloParseError, match="depend on each other"):
        import_hlo(cyclic)


ASYNC = """HloModule async, replica_count=1

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%wrapped (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%p)
}

ENTRY %main (x: f32[4]) -> (f32[4], f32[4], f32[4], f32[4]) {
  %x = f32[4]{0} parameter(0)
  %ars = f32[4]{0} all-reduce-start(%x), replica_groups={}, to_apply=%add
  %ard = f32[4]{0} all-reduce-done(%ars)
  %cs = (f32[4]{0}, f32[4]{0}, u32[]) copy-start(%x)
  %cd = f32[4]{0} copy-done(%cs)
  %as = ((f32[4]{0}), f32[4]{0}, s32[]) async-start(%x), calls=%wrapped
  %au = ((f32[4]{0}), f32[4]{0}, s32[]) async-update(%as)
  %ad = f32[4]{0} async-done(%au)
  %ags = (f32[4]{0}, f32[4]{0}) all-gather-start(%x), dimensions={0}, replica_groups={{0}}
  %agd = f32[4]{0} all-gather-done(%ags)
  ROOT %t = (f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(%ard, %cd, %ad, %agd)
}
"""


def test_async_pairs():
    """*-start / *-done pairs run as the synchronous op (one device)."""
    module = import_hlo(ASYNC)
    x = np.arange(4, dtype=np.float32)
    ard, cd, ad, agd = lowering.compile(module)(x)
    np.testing.assert_array_equal(ard, x)
    np.testing.assert_array_equal(cd, x)
    np.testing.assert_allclose(ad, np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(agd, x)  # a group of one device gathers its own data
    printed = export_hlo(module)
    assert "all-reduce(" in printed and "copy(" in printed and "call(" in printed
    assert import_hlo(printed).is_structurally_equivalent(import_hlo(printed))


BITCAST = """HloModule bitcasts

ENTRY %main (x: f32[2,3]) -> (f32[3,2], f32[6], f32[3,2], f32[4,2]) {
  %x = f32[2,3]{1,0} parameter(0)
  %col = f32[3,2]{0,1} bitcast(%x)
  %flat = f32[6]{0} bitcast(%x)
  %tr = f32[3,2]{1,0} bitcast(%col)
  %tiled = f32[2,3]{1,0:T(2,2)} copy(%x)
  %back = f32[4,2]{0,1} bitcast(%tiled)
  ROOT %t = (f32[3,2]{0,1}, f32[6]{0}, f32[3,2]{1,0}, f32[4,2]{0,1}) tuple(%col, %flat, %tr, %back)
}
"""


def test_bitcast_reads_the_physical_layouts():
    """A bitcast reads the operand's bytes with the result's layout (tiles and padding included)."""
    from xla_dialect.layout import from_physical, to_physical
    from xla_dialect.shape import parse_shape

    module = import_hlo(BITCAST)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    col, flat, tr, back = lowering.compile(module)(x)
    np.testing.assert_array_equal(col, [[0, 3], [1, 4], [2, 5]])  # row-major bytes read column-major
    np.testing.assert_array_equal(flat, np.arange(6))
    np.testing.assert_array_equal(tr, [[0, 1], [2, 3], [4, 5]])  # the same bytes, read row-major
    # T(2,2) tiles of f32[2,3]: two 2x2 tiles, 8 slots with 2 of padding, read as f32[4,2]{0,1}.
    buffer = to_physical(x, parse_shape("f32[2,3]{1,0:T(2,2)}"))
    expected = from_physical(buffer, parse_shape("f32[4,2]{0,1}"))
    np.testing.assert_array_equal(expected, [[0, 2], [1, 0], [3, 5], [4, 0]])
    np.testing.assert_array_equal(back, expected)
    printed = export_hlo(module)
    assert import_hlo(printed).is_structurally_equivalent(module)
    # XLA agrees on the untiled ones (through the transposes they stand for).
    untiled = BITCAST.replace(", f32[4,2])", ")").replace("  %tiled = f32[2,3]{1,0:T(2,2)} copy(%x)\n", "") \
        .replace("  %back = f32[4,2]{0,1} bitcast(%tiled)\n", "") \
        .replace(", f32[4,2]{0,1}) tuple(%col, %flat, %tr, %back)", ") tuple(%col, %flat, %tr)")
    m2 = import_hlo(untiled)
    _agree(lowering.compile(m2)(x), interop.run_hlo_on_xla(m2, x), "bitcasts against XLA")


def test_fusion_kinds_and_calls_run_their_computation():
    _, post, args, expected = hlo_texts_cached("mlp")
    module = import_hlo(post)
    assert any(op.name == "hlo.fusion" for op in module.walk())
    _agree(lowering.compile(module)(*args), expected, "mlp post-optimization")


def hlo_texts_cached(name, _cache={}):  # noqa: B006 - a module-level memo
    if name not in _cache:
        import jax

        pre, post, fn, args = hlo_texts(name)
        _cache[name] = pre, post, args, [np.asarray(o) for o in jax.tree.leaves(jax.jit(fn)(*args))]
    return _cache[name]


def test_layouts_from_passes_print_as_hlo():
    """assign-layouts{target=tpu} then --emit hlo: the tiles are in the text XLA reads."""
    import passes

    pre, _, _, _ = hlo_texts_cached("mlp")
    module = import_hlo(pre)
    passes.run(module, "assign-layouts{target=tpu}")
    printed = export_hlo(module)
    assert ":T(8,128)" in printed and "entry_computation_layout={(f32[16,32]{1,0:T(8,128)}" in printed
    hm = _xla_module(printed)
    assert _named_types(import_hlo(_xla_print(hm))) == _named_types(module)


def test_builder_module_exports_and_round_trips_as_text():
    """Builder forms without an HLO twin (implicit broadcast, hlo.dot, multi-operand while) print as HLO."""
    from xla_dialect import XlaBuilder

    b = XlaBuilder("builder")
    m = b.parameter(0, "f32[2,3]{0,1}")
    v = b.parameter(1, "f32[3]")
    s = b.add(m, v, broadcast_dimensions=(1,))
    d = b.dot(s, b.transpose(s, (1, 0)))
    module = b.build(b.tuple([d, b.reduce(s, b.constant(np.float32(0)), lambda p, q: p + q, dimensions=[1])]))
    printed = export_hlo(module)
    assert "broadcast(" in printed and "dot(" in printed
    again = import_hlo(printed)
    assert export_hlo(again) == printed
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones(3, np.float32)
    _agree(lowering.compile(again)(x, y), lowering.compile(module)(x, y), "builder module through HLO text")


def test_newer_xla_math_opcodes_run_as_xla_expands_their_chlo_ops():
    """acos, cosh, ... are HLO opcodes in newer XLA: computed by XLA's own expansion of the chlo op."""
    x = np.linspace(-0.9, 0.9, 16).astype(np.float32)
    y = np.linspace(1.1, 3.0, 16).astype(np.float32)
    for opcode, arg, reference in (("acos", x, np.arccos), ("asin", x, np.arcsin), ("atanh", x, np.arctanh),
                                   ("asinh", x, np.arcsinh), ("acosh", y, np.arccosh), ("cosh", x, np.cosh),
                                   ("sinh", x, np.sinh)):
        text = (f"HloModule m\nENTRY e {{\n  p = f32[16]{{0}} parameter(0)\n"
                f"  ROOT r = f32[16]{{0}} {opcode}(p)\n}}\n")
        module = import_hlo(text)
        (out,) = lowering.compile(module)(arg)
        np.testing.assert_allclose(out, reference(arg), rtol=2e-6, atol=1e-7, err_msg=opcode)
        printed = export_hlo(module)
        assert export_hlo(import_hlo(printed)) == printed
        _agree([out], interop.run_hlo_on_xla(module, arg), f"{opcode} against XLA's expansion")


# ----------------------------------------------------------------------------
# Errors name the line and column
# ----------------------------------------------------------------------------

BAD = [
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} frobnicate(p)\n}\n",
     "line 4, column 3", "opcode 'frobnicate' is not supported"),
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} add(p, r)\n}\n",
     "line 4, column 3", "operand %r is not defined"),
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{1} negate(p)\n}\n",
     "line 4", "layout"),
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[3]{0} negate(p)\n}\n",
     "line 4, column 3", "shape inference gives f32[2]"),
    ("HloModule m\nENTRY e {\n  p = f32[2,3]{1,0} parameter(0)\n  ROOT q = f32[3,2]{1,0} transpose(p)\n}\n",
     "line 4, column 3", "transpose needs the attribute dimensions="),
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} negate(p), colour=blue\n}\n",
     "line 4, column 3", "attribute colour=blue is not supported"),
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} add(s32[2]{0} p, p)\n}\n",
     "line 4, column 3", "operand %p is written as s32[2]{0}"),
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  p = f32[2]{0} negate(p)\n}\n",
     "line 4, column 3", "used twice"),
    ("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT q = f32[2]{0} negate(p\n}\n",
     "line 4, column 28", "expected ')' to close"),
    ("HloModule m\nENTRY e {\n  p = f33[2]{0} parameter(0)\n}\n", "line 3", "unknown element type 'f33'"),
    ("HloModule m\nENTRY e {\n  c = f32[2]{0} constant({1, 2, 3})\n}\n", "line 3", "literal has 3 values"),
    ("HloModule m\nENTRY e {\n  p = f32[4]{0} parameter(0)\n  ROOT r = f32[4]{0} reduce(p, p), dimensions={0}, to_apply=%nowhere\n}\n",
     "line 4", "computation 'nowhere'"),
    ("hello world\n", "line 1, column 1", "expected 'HloModule name'"),
    ("HloModule a\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n// -----\nHloModule b\nENTRY e {\n"
     "  ROOT p = f32[] parameter(0)\n}\n", "line 6, column 1", "several HLO modules"),
    ("ENTRY e {\n}\n", "line 1, column 1", "computation 'e' has no instructions"),
]


@pytest.mark.parametrize("text,where,what", BAD, ids=[b[2][:30] for b in BAD])
def test_errors_name_line_and_column(text, where, what):
    with pytest.raises(XlaError) as info:
        import_hlo(text)
    message = str(info.value)
    assert where in message and what in message, message


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.hlo"
    path.write_text(BAD[0][0])
    with pytest.raises(HloParseError, match=r"bad\.hlo:4:3"):
        import_hlo(str(path))


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------

def test_cli_runs_and_checks_hlo_text(tmp_path, jax_texts):
    pre, post, args, expected = jax_texts("shapes")  # data movement: XLA and the executor agree exactly
    program = tmp_path / "shapes.hlo"
    program.write_text(post)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, *args)
    run = subprocess.run([sys.executable, "-m", "interop.tools.cli", str(program), "--inputs", str(inputs), "--check-xla",
                          "--output", str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("agrees") == len(expected), run.stdout
    saved = np.load(tmp_path / "out.npz")
    _agree([saved[f"result{i}"] for i in range(len(expected))], expected, "xla-run --output")
    opt = subprocess.run([sys.executable, "-m", "interop.tools.xla_opt", str(program), "-p", "assign-layouts{target=tpu}",
                          "--emit", "hlo"], capture_output=True, text=True)
    assert opt.returncode == 0, opt.stderr
    assert opt.stdout.startswith("HloModule") and ":T(" in opt.stdout
    _xla_module(opt.stdout)
    bad = tmp_path / "bad.hlo"
    bad.write_text(BAD[0][0])
    run = subprocess.run([sys.executable, "-m", "interop.tools.cli", str(bad)], capture_output=True, text=True)
    assert run.returncode == 2 and f"{bad}:4:3" in run.stderr and "Traceback" not in run.stderr
