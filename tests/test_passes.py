"""Pass infrastructure and passes: registry, pipelines, CLI, plugins, PDL, golden outputs, semantics.

Golden tests live in ``tests/passes_golden``: ``NAME.mlir`` starts with
``// pipeline: ...`` and ``NAME.expected`` is the output. Regenerate after an
intended change with ``UPDATE_GOLDEN=1 pytest tests/test_passes.py -k golden``
(and review the diff).
"""

from __future__ import annotations

from pathlib import Path

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import lowering
import passes
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import PassError, XlaError
from xla_dialect.layout import Layout, byte_size, layout_of, physical_dims
from xla_dialect.shape import parse_shape

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = pathlib.Path(__file__).resolve().parent / "passes_golden"
EXAMPLE_PLUGIN = ROOT / "examples" / "fold_double_negation.py"
FULL_PIPELINE = "canonicalize-broadcasts,assign-layouts{target=tpu},tile-layouts,cse,dce"
BIN = pathlib.Path(sys.executable).parent


def run_both(module: ModuleOp, pipeline: str, args, **options):
    """Results before and after ``pipeline`` (on a clone), and the rewritten clone."""
    before = lowering.compile(module, **options)(*args)
    after_module = module.clone()
    passes.run(after_module, pipeline)
    after = lowering.compile(after_module, **options)(*args)
    return before, after, after_module


def assert_identical(before, after):
    """Bit-identical results (NaNs compare equal to NaNs at the same place)."""
    assert len(before) == len(after)
    for b, a in zip(before, after):
        assert b.shape == a.shape and b.dtype == a.dtype
        if b.dtype.kind in "fc" or b.dtype.kind == "V":
            np.testing.assert_array_equal(np.ascontiguousarray(b).view(np.uint8), np.ascontiguousarray(a).view(np.uint8))
        else:
            np.testing.assert_array_equal(b, a)


# ----------------------------------------------------------------------------
# Registry, pipelines, universe, plugins
# ----------------------------------------------------------------------------


BUILTIN = ["apply-pdl", "assign-layouts", "canonicalize-broadcasts", "cse", "dce", "fold-constants", "simplify",
           "tile-layouts"]


def test_registry_lists_every_builtin_pass():
    available = passes.available_passes()
    for name in BUILTIN:
        assert name in available, name
        assert available[name].name == name


def test_pipeline_text_parses_with_options():
    pipeline = passes.parse_pipeline(FULL_PIPELINE)
    assert [p.name for p in pipeline.passes] == ["canonicalize-broadcasts", "assign-layouts", "tile-layouts",
                                                 "cse", "dce"]
    assert pipeline.passes[1].target == "tpu"
    assert passes.parse_pipeline("fold-constants{max-elements=8}").passes[0].max_elements == 8


@pytest.mark.parametrize("spec, message", [
    ("no-such-pass", "Unrecognized passes: \\['no-such-pass'\\]"),
    ("fold-constants{max-elements=x}", "fold-constants\\{max-elements=x\\}"),
    ("cse{bogus=1}", "bogus"),
])
def test_bad_pipelines_raise_pass_error(spec, message):
    with pytest.raises(PassError, match=message):
        passes.parse_pipeline(spec)


def test_assign_layouts_rejects_unknown_target():
    b = XlaBuilder("f")
    b.neg(b.parameter(0, "f32[2]"))
    with pytest.raises(PassError, match="unknown target 'gpu'"):
        passes.run(b.build(), "assign-layouts{target=gpu}")


def test_universe_exports_passes_without_clashing_with_xdsl():
    from xdsl.universe import Universe

    from passes.universe import PASSES_UNIVERSE

    names = set(PASSES_UNIVERSE.all_passes)
    assert {"canonicalize-broadcasts", "assign-layouts", "tile-layouts", "hlo-cse", "hlo-dce"} <= names
    assert "cse" not in names and "dce" not in names  # xDSL's own names
    multiverse = Universe.get_multiverse()  # raises on duplicate names
    assert multiverse.all_passes["hlo-cse"]().name == "hlo-cse"
    assert "hlo" in multiverse.all_dialects


def test_entry_point_group_publishes_the_builtin_passes():
    from importlib.metadata import entry_points

    eps = {ep.name: ep for ep in entry_points(group="xla_dialect.passes")}
    assert "xla_dialect" in eps
    classes = eps["xla_dialect"].load()()
    assert {c.name for c in classes} >= set(BUILTIN)


def test_entry_point_plugins_are_loaded(monkeypatch):
    """A package's entry point in the xla_dialect.passes group registers its pass."""
    import importlib.metadata as md

    from passes import registry

    plugin_src = (ROOT / "examples" / "fold_double_negation.py").read_text()
    namespace: dict = {"__name__": "fake_plugin_package"}
    exec(compile(plugin_src.replace('"fold-double-negation"', '"fake-entry-point-pass"'), "fake", "exec"), namespace)
    cls = namespace["FoldDoubleNegationPass"]

    class FakeEntryPoint:
        name, value = "fake", "fake_plugin_package:FoldDoubleNegationPass"

        def load(self):
            return cls

    real = md.entry_points
    monkeypatch.setattr(md, "entry_points",
                        lambda **kw: [FakeEntryPoint()] if kw.get("group") == "xla_dialect.passes" else real(**kw))
    monkeypatch.setattr(registry, "_loaded_entry_points", False)
    assert "fake-entry-point-pass" in passes.available_passes()


def test_load_plugin_file_and_errors(tmp_path):
    names = passes.load_plugin(str(EXAMPLE_PLUGIN))
    assert names == ["fold-double-negation"]
    with pytest.raises(PassError, match="no such file"):
        passes.load_plugin(str(tmp_path / "missing.py"))
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(PassError, match="failed to load: RuntimeError: boom"):
        passes.load_plugin(str(broken))
    clash = tmp_path / "clash.py"
    clash.write_text(
        "from dataclasses import dataclass\nfrom passes import PatternPass\n"
        "@dataclass(frozen=True)\nclass Clash(PatternPass):\n    name = 'cse'\n")
    with pytest.raises(PassError, match="'cse' is already taken"):
        passes.load_plugin(str(clash))


def test_example_plugin_test_passes():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import test_fold_double_negation as example
    finally:
        sys.path.pop(0)
    example.test_plugin_registers_and_folds()
    example.test_plugin_loads_once()


def test_errors_name_the_pass_and_the_op(tmp_path):
    plugin = tmp_path / "failing.py"
    plugin.write_text(
        "from dataclasses import dataclass\n"
        "from xdsl.pattern_rewriter import RewritePattern, op_type_rewrite_pattern\n"
        "from passes import PatternPass\n"
        "from xla_dialect.ops.elementwise import ExpOp\n"
        "class Fail(RewritePattern):\n"
        "    @op_type_rewrite_pattern\n"
        "    def match_and_rewrite(self, op: ExpOp, rewriter):\n"
        "        raise ValueError('cannot handle this')\n"
        "class Invalid(RewritePattern):\n"
        "    @op_type_rewrite_pattern\n"
        "    def match_and_rewrite(self, op: ExpOp, rewriter):\n"
        "        from xla_dialect.ops.elementwise import AbsOp\n"
        "        from xdsl.dialects.builtin import TensorType, i32\n"
        "        rewriter.replace(op, AbsOp.create(operands=[op.operand], result_types=[TensorType(i32, [2])]))\n"
        "@dataclass(frozen=True)\n"
        "class FailingPass(PatternPass):\n"
        "    name = 'test-failing-pass'\n"
        "    PATTERNS = (Fail,)\n"
        "@dataclass(frozen=True)\n"
        "class InvalidPass(PatternPass):\n"
        "    name = 'test-invalid-ir-pass'\n"
        "    PATTERNS = (Invalid,)\n")
    passes.load_plugin(str(plugin))
    b = XlaBuilder("f")
    b.exp(b.parameter(0, "f32[2]"))
    with pytest.raises(PassError, match=r"pass test-failing-pass: hlo\.exponential: ValueError: cannot handle this"):
        passes.run(b.build(), "test-failing-pass")
    b = XlaBuilder("f")
    b.exp(b.parameter(0, "f32[2]"))
    with pytest.raises(PassError, match=r"pass test-invalid-ir-pass produced invalid IR: .*hlo\.abs"):
        passes.run(b.build(), "test-invalid-ir-pass")


def test_run_result_has_timings_and_reports():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[8,128]")
    b.add(x, b.constant(np.float32(1)))
    module = b.build()
    result = passes.run(module, "canonicalize-broadcasts,assign-layouts{target=tpu},dce")
    assert result.module is module
    assert [spec.split("{")[0] for spec, _ in result.timings] == ["canonicalize-broadcasts", "assign-layouts", "dce"]
    report = result.report("assign-layouts")
    assert report.target == "tpu" and report.copies == []
    assert result.report("dce") is None
    with pytest.raises(PassError, match="expects an xDSL ModuleOp"):
        passes.run("not a module", "dce")


def test_pass_instances_and_lists_are_pipelines():
    from passes.cleanup import CSEPass, DCEPass

    b = XlaBuilder("f")
    x = b.parameter(0, "f32[2]")
    b.add(b.exp(x), b.exp(x))
    module = b.build()
    passes.run(module, [CSEPass(), "dce"])
    assert str(module).count("hlo.exponential") == 1


# ----------------------------------------------------------------------------
# PDL
# ----------------------------------------------------------------------------

DOUBLE_NEGATE_PDL = """
pdl.pattern @double_negate : benefit(1) {
  %t = pdl.type
  %x = pdl.operand
  %inner = pdl.operation "hlo.negate"(%x : !pdl.value) -> (%t : !pdl.type)
  %v = pdl.result 0 of %inner
  %outer = pdl.operation "hlo.negate"(%v : !pdl.value) -> (%t : !pdl.type)
  pdl.rewrite %outer {
    pdl.replace %outer with (%x : !pdl.value)
  }
}
"""


def test_apply_pdl_runs_a_user_pattern(tmp_path):
    pdl_file = tmp_path / "double_negate.mlir"
    pdl_file.write_text(DOUBLE_NEGATE_PDL)
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[3]")
    b.exp(b.neg(b.neg(x)))
    module = b.build()
    args = [np.array([1.0, -2.0, np.nan], np.float32)]
    before, after, rewritten = run_both(module, f'apply-pdl{{file="{pdl_file}"}},dce', args)
    assert "hlo.negate" not in str(rewritten)
    assert_identical(before, after)
    with pytest.raises(PassError, match="give the PDL file"):
        passes.run(module.clone(), "apply-pdl")
    bad = tmp_path / "bad.mlir"
    bad.write_text("this is not pdl")
    with pytest.raises(PassError, match="is not valid PDL"):
        passes.run(module.clone(), f'apply-pdl{{file="{bad}"}}')


# ----------------------------------------------------------------------------
# Golden tests
# ----------------------------------------------------------------------------

GOLDEN_CASES = sorted(p.stem for p in GOLDEN.glob("*.mlir"))


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_golden(name):
    source = (GOLDEN / f"{name}.mlir").read_text()
    first = source.splitlines()[0]
    assert first.startswith("// pipeline: "), f"{name}.mlir must start with '// pipeline: ...'"
    pipeline = first[len("// pipeline: "):].strip()
    module = parse_module(source)
    passes.run(module, pipeline)
    actual = str(module).rstrip() + "\n"
    expected_file = GOLDEN / f"{name}.expected"
    if os.environ.get("UPDATE_GOLDEN") or not expected_file.exists():
        expected_file.write_text(actual)
    assert actual == expected_file.read_text()
    parse_module(actual)  # the output is valid hlo MLIR


# ----------------------------------------------------------------------------
# Individual passes
# ----------------------------------------------------------------------------


def test_simplify_keeps_results_bit_identical():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[5]")
    i = b.parameter(1, "s32[5]")
    outs = [
        b.add(x, b.constant(np.float32(0.0))),  # not folded: -0.0 + 0.0 is +0.0
        b.add(b.constant(np.float32(-0.0)), x),
        b.sub(x, b.constant(np.float32(0.0))),
        b.mul(x, b.constant(np.float32(1.0))),
        b.div(x, b.constant(np.float32(1.0))),
        b.or_(i, b.constant(np.int32(0))),
        b.and_(i, b.constant(np.int32(-1))),
        b.shift_left(i, b.constant(np.int32(0))),
        b.transpose(b.transpose(b.reshape(x, [5, 1]), [1, 0]), [1, 0]),
        b.reshape(b.reshape(x, [1, 5]), [5]),
        b.slice(x, [0], [5], [1]),
        b.rev(b.reshape(x, [1, 5]), [0]),
        b.pad(x, b.constant(np.float32(7)), [(0, 0, 0)]),
        b.concat_in_dim([x], 0),
    ]
    module = b.build(outs)
    args = [np.array([-0.0, 0.0, np.nan, -np.inf, 3.5], np.float32),
            np.array([0, -1, np.iinfo(np.int32).min, np.iinfo(np.int32).max, 7], np.int32)]
    before, after, rewritten = run_both(module, "simplify,dce", args)
    assert_identical(before, after)
    text = str(rewritten)
    assert text.count("hlo.add") == 1  # only x + 0.0 survives
    for gone in ("hlo.multiply", "hlo.divide", "hlo.subtract", "hlo.or", "hlo.and", "hlo.shift_left",
                 "hlo.transpose", "hlo.slice", "hlo.reverse", "hlo.pad", "hlo.concatenate"):
        assert gone not in text, gone


def test_fold_constants_uses_the_kernels_and_respects_the_bound():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[4]")
    k = b.constant(np.array([1, 4, 9, 16], np.float32))
    folded = b.add(b.sqrt(k), b.iota("f32[4]", 0))
    big = b.exp(b.constant(np.ones(64, np.float32)))
    out = b.mul(x, folded)
    module = b.build([out, big])
    before, after, rewritten = run_both(module, "fold-constants{max-elements=16},dce", [np.ones(4, np.float32)])
    assert_identical(before, after)
    text = str(rewritten)
    assert "hlo.sqrt" not in text and "hlo.iota" not in text
    assert "hlo.exponential" in text  # 64 elements > max-elements
    np.testing.assert_array_equal(before[0], [1, 3, 5, 7])


def test_cse_merges_regions_and_respects_side_effects():
    from passes.purity import is_pure

    b = XlaBuilder("f")
    x = b.parameter(0, "f32[4,3]")
    zero = b.constant(np.float32(0))
    r1 = b.reduce(x, zero, lambda p, q: p + q, [0])
    r2 = b.reduce(x, zero, lambda p, q: p + q, [0])
    r3 = b.reduce(x, zero, lambda p, q: b.max(p, q) if False else p * q, [0])
    module = b.build([b.add(r1, r2), r3])
    before, after, rewritten = run_both(module, "cse,dce", [np.arange(12, dtype=np.float32).reshape(4, 3)])
    assert_identical(before, after)
    assert str(rewritten).count("hlo.reduce") == 2
    ops = list(rewritten.walk())
    assert all(is_pure(op) for op in ops if op.name in ("hlo.reduce", "hlo.add", "hlo.constant"))
    assert not any(is_pure(op) for op in ops if op.name in ("hlo.return", "func.return"))


def test_dce_keeps_what_is_returned():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[2]")
    b.exp(x)
    keep = b.log(x)
    module = b.build(keep)
    passes.run(module, "dce")
    text = str(module)
    assert "hlo.log" in text and "hlo.exponential" not in text


def test_canonicalize_broadcasts_leaves_no_implicit_broadcast():
    from xla_dialect.ops import elementwise as ew

    b = XlaBuilder("f")
    m = b.parameter(0, "s32[4,3,1]")
    v = b.parameter(1, "s32[3]")
    s = b.parameter(2, "s32[]")
    p = b.parameter(3, "pred[]")
    x = b.add(m, v, [1])  # InDim + degenerate: s32[4,3,3]
    y = b.mul(x, s)
    z = b.select(p, y, b.clamp(s, y, s))
    c = b.eq(m, b.reshape(v, [1, 3, 1]))
    module = b.build([z, c])
    rng = np.random.default_rng(1)
    args = [rng.integers(-9, 9, (4, 3, 1)).astype(np.int32), np.array([1, 2, 3], np.int32), np.int32(-4), np.bool_(True)]
    before, after, rewritten = run_both(module, "canonicalize-broadcasts", args)
    assert_identical(before, after)
    for op in rewritten.walk():
        if isinstance(op, (ew.BinaryElementwiseOp, ew.CompareOp, ew.SelectOp, ew.ClampOp)):
            assert "broadcast_dimensions" not in op.properties
            assert all(o.type.get_shape() == op.results[0].type.get_shape() for o in op.operands), op


def test_canonicalize_broadcasts_hook_for_the_executor():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[2,3]")
    b.add(x, b.parameter(1, "f32[3]"), [1])
    module = b.build()
    assert passes.canonicalize_broadcasts(module) is module
    assert "broadcast_in_dim" in str(module)


def test_canonicalize_broadcasts_composes_chains_and_drops_the_unused_inner_one():
    # jax's keepdims statistics: (4,) -> (4,1) -> (4,8). The chain alone is reason enough to run the pass
    # from the executor's hook, and the inner broadcast, no longer used, goes (it would split a fusion group).
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[4]")
    y = b.parameter(1, "f32[4,8]")
    keep = b.broadcast_in_dim(x, [4, 1], [0])
    b.sub(y, b.broadcast_in_dim(keep, [4, 8], [0, 1]))
    module = b.build()
    canonical = passes.canonicalize_broadcasts(module, clone=True)
    assert canonical is not module
    (bcast,) = [op for op in canonical.walk() if op.name == "hlo.broadcast_in_dim"]
    assert list(bcast.broadcast_dimensions.get_values()) == [0]
    args = [np.arange(4, dtype=np.float32), np.ones((4, 8), np.float32)]
    assert_identical(lowering.compile(module)(*args), lowering.compile(canonical)(*args))


def test_canonicalize_broadcasts_keeps_tuple_select_scalar():
    b = XlaBuilder("f")
    p = b.parameter(0, "pred[]")
    x = b.parameter(1, "f32[2]")
    t = b.tuple([x, x])
    b.select(p, t, t)
    module = b.build()
    passes.run(module, "canonicalize-broadcasts")
    assert "broadcast_in_dim" not in str(module)


# ----------------------------------------------------------------------------
# assign-layouts
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape, expected", [
    ("f32[16,256]", "{1,0:T(8,128)}"),
    ("f32[2,256]", "{1,0:T(2,128)}"),
    ("f32[3,256]", "{1,0:T(4,128)}"),
    ("f32[5,7]", "{1,0:T(8,128)}"),
    ("bf16[8,1,1280,16384]", "{3,2,0,1:T(8,128)(2,1)}"),  # the shapes/layout/tiling notes' example: size-1 dimension most major
    ("s8[64,128]", "{1,0:T(8,128)(4,1)}"),
    ("pred[64,128]", "{1,0:T(32,128)(32,1)}"),
    ("s4[16,128]", "{1,0:T(8,128)(8,1)E(4)}"),
    ("f32[1000]", "{0:T(1024)}"),
    ("f32[100]", "{0:T(256)}"),
    ("bf16[1000]", "{0:T(1024)(128)(2,1)}"),
    ("f32[]", "{:T(256)}"),
])
def test_tpu_tiling_rules(shape, expected):
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, shape)
    b.neg(x) if not shape.startswith("pred") else b.not_(x)
    module = b.build()
    passes.run(module, "assign-layouts{target=tpu}")
    main = next(iter(module.ops))
    assert str(layout_of(main.function_type.inputs.data[0])) == expected


def test_cpu_layouts_are_row_major_with_copies_for_entry_layouts():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[3,4]{0,1}")
    y = b.transpose(x, [1, 0])
    module = b.build(b.exp(y))
    report = passes.assign_layouts(module, "cpu")
    assert len(report.copies) == 1 and report.copies[0].to_shape == "f32[3,4]{1,0}"
    for op in module.walk():
        for r in op.results:
            assert layout_of(r.type) == Layout.default(r.type.get_num_dims())
    assert report.total_bytes_after == report.total_bytes_before + 48


def test_tpu_transposes_and_reshapes_become_bitcasts():
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[16,256]")
    t = b.transpose(x, [1, 0])
    r = b.reshape(x, [2, 8, 256])
    module = b.build([b.exp(t), b.neg(r)])
    report = passes.assign_layouts(module, "tpu")
    assert report.copies == []
    text = str(module)
    assert "tensor<256x16xf32, #hlo.layout<{0,1:T(8,128)}>>" in text
    assert "tensor<2x8x256xf32, #hlo.layout<{2,1,0:T(8,128)}>>" in text


def test_tpu_entry_result_constraint_makes_a_real_transpose_not_a_copy():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[16,256]")
    module = b.build(b.exp(b.transpose(x, [1, 0])))
    report = passes.assign_layouts(module, "tpu")
    assert report.copies == []
    main = next(iter(module.ops))
    assert str(layout_of(main.function_type.outputs.data[0])) == "{1,0:T(8,128)}"


def test_layout_options_and_mhlo_layout_mode():
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[4,8]")
    module = b.build(b.neg(x))
    passes.run(module, 'assign-layouts{target=cpu arg-layouts="{0,1}" result-layouts="{0,1}"}')
    main = next(iter(module.ops))
    assert str(layout_of(main.function_type.inputs.data[0])) == "{0,1}"
    assert str(layout_of(main.function_type.outputs.data[0])) == "{0,1}"
    # The negate reads a column-major parameter: XLA CPU copies it to row-major first.
    assert "hlo.copy" in str(module)
    with pytest.raises(PassError, match="1 layouts given for the 2 parameters"):
        b2 = XlaBuilder("g")
        b2.add(b2.parameter(0, "f32[2]"), b2.parameter(1, "f32[2]"))
        passes.run(b2.build(), 'assign-layouts{arg-layouts="{0}"}')
    with pytest.raises(PassError, match="arg-layouts"):
        passes.run(module, 'assign-layouts{arg-layouts="{0,1"}')


def test_layout_report_counts_tile_padding():
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[3,5]")
    module = b.build(b.neg(x))
    report = passes.assign_layouts(module, "tpu")
    assert report.total_bytes_before == 2 * 15 * 4
    padded = byte_size(parse_shape("f32[3,5]{1,0:T(4,128)}"))
    assert padded == 4 * 128 * 4
    assert report.total_bytes_after == 2 * padded
    assert [v[2] for v in report.values] == [padded, padded]
    assert "0 copies inserted" in str(report)


def test_assign_layouts_with_while_call_and_tuples():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[4,8]")

    def body(state):
        bb = state.builder
        i = bb.get_tuple_element(state, 0)
        v = bb.get_tuple_element(state, 1)
        return bb.tuple([bb.add(i, bb.constant(np.int32(1))), bb.exp(bb.transpose(bb.transpose(v, [1, 0]), [1, 0]))])

    def cond(state):
        bb = state.builder
        return bb.lt(bb.get_tuple_element(state, 0), bb.constant(np.int32(3)))

    init = b.tuple([b.constant(np.int32(0)), x])
    loop = b.while_(cond, body, init)
    callee = XlaBuilder("callee")
    callee.neg(callee.parameter(0, "f32[4,8]"))
    called = b.call(callee.build(), [b.get_tuple_element(loop, 1)])
    module = b.build(called)
    args = [np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)]
    for target in ("cpu", "tpu"):
        before, after, rewritten = run_both(module, f"assign-layouts{{target={target}}}", args)
        assert_identical(before, after)


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------


def _program_file(tmp_path) -> pathlib.Path:
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[2,3]")
    b.neg(b.neg(b.add(x, b.parameter(1, "f32[3]"), [1])))
    path = tmp_path / "program.mlir"
    path.write_text(str(b.build()))
    return path


def test_cli_runs_a_pipeline(tmp_path, capsys):
    from interop.tools.xla_opt import main

    path = _program_file(tmp_path)
    out = tmp_path / "out.mlir"
    assert main([str(path), "-p", "canonicalize-broadcasts,assign-layouts{target=tpu},dce", "-o", str(out),
                 "--report"]) == 0
    err = capsys.readouterr().err
    assert "report of assign-layouts" in err and "copies inserted" in err
    text = out.read_text()
    assert "hlo.broadcast_in_dim" in text and "T(2,128)" in text
    parse_module(text)


def test_cli_plugin_list_emit_and_errors(tmp_path, capsys):
    from interop.tools.xla_opt import main

    path = _program_file(tmp_path)
    assert main(["--load-pass-plugin", str(EXAMPLE_PLUGIN), "--list-passes"]) == 0
    listing = capsys.readouterr().out
    assert "fold-double-negation" in listing and "assign-layouts{target=cpu" in listing
    assert main([str(path), "--load-pass-plugin", str(EXAMPLE_PLUGIN), "-p", "fold-double-negation,dce",
                 "--emit", "generic"]) == 0
    out = capsys.readouterr().out
    assert '"hlo.add"' in out and "hlo.negate" not in out
    assert main([str(path), "-p", "canonicalize-broadcasts", "--emit", "hlo"]) == 0
    assert "HloModule" in capsys.readouterr().out
    assert main([str(path), "-p", "nope"]) == 2
    assert "Unrecognized passes" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.mlir"), "-p", "dce"]) == 2
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main() { hlo.bogus }")
    assert main([str(bad), "-p", "dce"]) == 2
    assert "xla-opt: error:" in capsys.readouterr().err


def test_cli_reads_stablehlo(tmp_path, capsys):
    from interop import export_stablehlo

    from interop.tools.xla_opt import main

    b = XlaBuilder("f")
    x = b.parameter(0, "f32[2,3]")
    b.add(x, b.parameter(1, "f32[3]"), [1])
    path = tmp_path / "program.stablehlo.mlir"
    path.write_text(str(export_stablehlo(b.build())))
    assert main([str(path), "-p", "canonicalize-broadcasts,cse"]) == 0
    assert "hlo.add" in capsys.readouterr().out


def test_console_scripts_xla_opt_and_xdsl_opt(tmp_path):
    path = _program_file(tmp_path)
    for tool, pipeline in (("xla-opt", "canonicalize-broadcasts,cse,dce"),
                           ("xdsl-opt", "canonicalize-broadcasts,hlo-cse,hlo-dce")):
        exe = BIN / tool
        if not exe.exists():
            pytest.skip(f"{tool} is not installed in this environment")
        done = subprocess.run([str(exe), str(path), "-p", pipeline], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        assert "hlo.broadcast_in_dim" in done.stdout


# ----------------------------------------------------------------------------
# Whole pipeline on builder programs
# ----------------------------------------------------------------------------


def _mlp_like():
    b = XlaBuilder("mlp")
    x = b.parameter(0, "f32[8,16]")
    w = b.parameter(1, "f32[16,32]")
    bias = b.parameter(2, "f32[32]")
    h = b.add(b.dot(x, w), bias, [1])
    h = b.max(h, b.constant(np.float32(0)))
    m = b.reduce(h, b.constant(np.float32(-np.inf)), lambda p, q: p.builder.max(p, q), [1])
    e = b.exp(b.sub(h, m, [0]))
    s = b.reduce(e, b.constant(np.float32(0)), lambda p, q: p + q, [1])
    out = b.div(e, s, [0])
    return b.build(b.transpose(out, [1, 0])), [
        np.random.default_rng(0).standard_normal(s, dtype=np.float32) for s in ((8, 16), (16, 32), (32,))]


@pytest.mark.parametrize("pipeline", [
    "canonicalize-broadcasts", "simplify", "fold-constants", "cse", "dce",
    "assign-layouts{target=cpu}", "assign-layouts{target=tpu}",
    FULL_PIPELINE, "canonicalize-broadcasts,simplify,fold-constants,cse,dce,assign-layouts{target=tpu},tile-layouts",
])
def test_passes_preserve_semantics_on_an_mlp(pipeline):
    module, args = _mlp_like()
    # XLA's float rewrites (a division by a broadcast made a multiplication by a reciprocal) are decided
    # on the program as written, before layout assignment; tiling reshapes the program into its tiled
    # physical form, where XLA would not see the same divisions: tiled pipelines are compared op by op.
    options = {"xla_rewrites": False} if "tile-layouts" in pipeline else {}
    before, after, _ = run_both(module, pipeline, args, **options)
    assert_identical(before, after)


def test_passes_are_xla_errors():
    assert issubclass(PassError, XlaError)


# ----------------------------------------------------------------------------
# hlo.copy (the layout-changing op) and tile-layouts
# ----------------------------------------------------------------------------


def test_copy_op_builder_verifier_and_round_trip():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[2,3]")
    y = b.copy(x, "{0,1}")
    z = b.copy(y)
    assert y.shape == "f32[2,3]{0,1}" and z.shape == "f32[2,3]{1,0}"
    with pytest.raises(XlaError, match="XlaBuilder.copy: .*has 1 dimensions in minor_to_major"):
        b.copy(x, "{0}")
    module = b.build(z)
    assert str(parse_module(str(module))) == str(module)
    (r,) = lowering.compile(module)(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(r, np.arange(6).reshape(2, 3))
    bad = str(module).replace("-> tensor<2x3xf32, #hlo.layout<{0,1}>>", "-> tensor<3x2xf32, #hlo.layout<{0,1}>>", 1)
    with pytest.raises(XlaError, match="hlo.copy"):
        parse_module(bad)


def _expose_all(module: ModuleOp) -> list[int]:
    """Make @main also return every top-level array value; return their print-order indices."""
    from xdsl.dialects.builtin import FunctionType, TensorType

    from passes.layouts import _values_in_print_order

    fn = next(iter(module.ops))
    block = fn.body.block
    ret = block.last_op
    values = [v for v, _ in _values_in_print_order(module)]
    index = {v: i for i, v in enumerate(values)}
    top = [v for v in values if isinstance(v.type, TensorType)
           and (v.owner is block or getattr(v.owner, "parent", None) is block)]
    ret.operands = [*ret.operands, *top]
    fn.function_type = FunctionType.from_lists(list(fn.function_type.inputs), [v.type for v in ret.operands])
    return [index[v] for v in top]


def test_tile_layouts_physical_buffers_equal_to_physical():
    import ml_dtypes

    from passes.layouts import _values_in_print_order
    from xla_dialect.layout import to_physical

    b = XlaBuilder("f")
    x = b.parameter(0, "f32[10,200]")
    y = b.parameter(1, "bf16[3,5]")
    n = b.neg(b.exp(x))
    s = b.add(b.transpose(n, [1, 0]), b.transpose(n, [1, 0]))
    m = b.mul(b.reshape(x, [2, 5, 200]), b.reshape(x, [2, 5, 200]))
    z = b.neg(y)
    c = b.lt(y, z)
    q = b.sqrt(b.reshape(b.abs(x), [2, 8, 125]))  # not a bitcast: logical in between
    module = b.build([s, m, z, c, q])
    passes.run(module, "assign-layouts{target=tpu}")
    results = len(next(iter(module.ops)).function_type.outputs)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((10, 200), dtype=np.float32), rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16)]
    logical_module = module.clone()
    order = _expose_all(logical_module)
    logical = dict(zip(order, lowering.compile(logical_module)(*args)[results:]))
    types = {i: v.type for i, (v, _) in enumerate(_values_in_print_order(module))}

    tiled = module.clone()
    result = passes.run(tiled, "tile-layouts{expose-physical=true},cse,dce")
    report = result.report("tile-layouts")
    assert report.physical_ops >= 5 and len(report.exposed) == len(order)
    outputs = lowering.compile(tiled)(*args)
    assert_identical(lowering.compile(module)(*args), outputs[:results])
    for (index, shape), buffer in zip(report.exposed, outputs[results:]):
        want = to_physical(logical[index], types[index])
        assert buffer.shape == tuple(physical_dims(types[index]))
        np.testing.assert_array_equal(buffer.reshape(-1).view(np.uint8), want.view(np.uint8), err_msg=shape)


def test_tile_layouts_bitcasts_pass_buffers_through():
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[16,256]")
    e = b.exp(x)
    t = b.transpose(e, [1, 0])
    r = b.reshape(e, [2, 8, 256])
    module = b.build([b.neg(t), b.abs(r)])
    args = [np.linspace(-3, 3, 16 * 256, dtype=np.float32).reshape(16, 256)]
    before, after, rewritten = run_both(module, "assign-layouts{target=tpu},tile-layouts,cse,dce", args)
    assert_identical(before, after)
    text = str(rewritten)
    # exp, neg and abs all run on the 2x2x8x128 buffer; only the results are unpacked.
    assert text.count("tensor<2x2x8x128xf32") >= 3
    assert "hlo.negate" in text and "hlo.abs" in text


def test_tile_layouts_is_a_no_op_without_tiles():
    module, args = _mlp_like()
    before, after, rewritten = run_both(module, "assign-layouts{target=cpu},tile-layouts", args)
    assert_identical(before, after)
    assert "hlo.pad" not in str(rewritten)


# ----------------------------------------------------------------------------
# JAX programs
# ----------------------------------------------------------------------------


def _jax_functions():
    import jax
    import jax.numpy as jnp

    def mlp(x, w, b):
        h = jnp.tanh(x @ w + b)
        return jax.nn.softmax(h, axis=-1).T, h.sum(0)

    def transposes(x, y):
        return (x.T @ y).T, jnp.transpose(x[:, :, None] * y[:, None, :4], (2, 0, 1))

    def reductions(x):
        return x.max(0), jnp.cumsum(x, 1)[:, ::2], x.reshape(4, -1).mean(1)

    f32 = np.float32
    return [
        (mlp, (np.ones((8, 16), f32), np.ones((16, 32), f32), np.ones(32, f32))),
        (transposes, (np.arange(32, dtype=f32).reshape(4, 8), np.arange(64, dtype=f32).reshape(4, 16) / 7)),
        (reductions, (np.linspace(-1, 1, 64, dtype=f32).reshape(8, 8),)),
    ]


@pytest.mark.parametrize("index", range(3))
def test_cpu_entry_layouts_match_what_xla_compiles(index):
    """target=cpu: the entry layouts equal the entry_computation_layout of jax.jit(f).lower(...).compile()."""
    import jax

    from interop import import_jax
    from xla_dialect.shape import format_shape

    fn, args = _jax_functions()[index]
    compiled = jax.jit(fn).lower(*args).compile().as_text()
    start = compiled.index("entry_computation_layout={") + len("entry_computation_layout={")
    depth, end = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(compiled[end], 0)
        end += 1
    params, results = compiled[start:end - 1].split(")->")
    module = import_jax(fn, *args)
    before = lowering.compile(module)(*args)
    passes.run(module, "canonicalize-broadcasts,assign-layouts{target=cpu},cse,dce")
    main = next(op for op in module.ops if getattr(op, "sym_name", None) and op.sym_name.data == "main")
    ours_in = ", ".join(format_shape(t) for t in main.function_type.inputs)
    outs = [format_shape(t) for t in main.function_type.outputs]
    ours_out = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
    assert "(" + ours_in == params
    assert ours_out == results
    assert_identical(before, lowering.compile(module)(*args))


def test_full_pipeline_on_a_jax_transformer_block():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import transformer_block as tb
    finally:
        sys.path.pop(0)
    args = tb.example_args(batch=1, seq=16, model=32, hidden=64)
    before, after, result = tb.run(FULL_PIPELINE, args)
    report = result.report("assign-layouts")
    assert report.total_bytes_after >= report.total_bytes_before > 0
    assert all(layout_of(t) is not None and layout_of(t).tiles for t in next(iter(after.ops)).function_type.inputs)
    assert result.report("tile-layouts").physical_ops > 0
    # The pipeline preserves every op's IEEE meaning; XLA's pattern-based float rewrites and FMA contraction (which
    # lowering.compile applies by default) see different patterns once constants are laid out and tiled.
    assert_identical(lowering.compile(before, xla_rewrites=False, fma_contraction=False)(*args),
                     lowering.compile(after, xla_rewrites=False, fma_contraction=False)(*args))


def test_canonicalize_broadcasts_clone_mode_for_the_executor_hook():
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[2,3]")
    b.add(x, b.parameter(1, "f32[3]"), [1])
    module = b.build()
    text = str(module)
    canonical = passes.canonicalize_broadcasts(module, clone=True)
    assert canonical is not module and str(module) == text
    assert "broadcast_in_dim" in str(canonical)
    assert passes.canonicalize_broadcasts(canonical, clone=True) is canonical  # nothing left to do
    args = [np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)]
    assert_identical(lowering.compile(module)(*args), lowering.compile(canonical)(*args))


def test_mhlo_layout_mode_attributes_are_entry_constraints():
    text = """
    func.func @main(%x: tensor<4x8xf32, #hlo.layout<{0,1}>> {mhlo.layout_mode = "auto"},
                    %y: tensor<8x1xf32> {mhlo.layout_mode = "default"}, %z: tensor<8x1xf32>)
                    -> (tensor<4x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>) {
      %a = hlo.negate %x : (tensor<4x8xf32, #hlo.layout<{0,1}>>) -> tensor<4x8xf32>
      %b = hlo.negate %y : (tensor<8x1xf32>) -> tensor<8x1xf32>
      %c = hlo.negate %z : (tensor<8x1xf32>) -> tensor<8x1xf32>
      func.return %a, %b, %c : tensor<4x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
    }
    """
    module = parse_module(text)
    passes.run(module, "assign-layouts{target=tpu}")
    main = next(iter(module.ops))
    x, y, z = (str(layout_of(t)) for t in main.function_type.inputs.data)
    assert x == "{1,0:T(4,128)}"  # auto: the pass chooses (the {0,1} in the type is not a constraint)
    assert y == "{1,0:T(8,128)}"  # default: row-major is fixed
    assert z == "{0,1:T(2,128)}"  # free: TPU moves the size-1 dimension most major


@pytest.mark.parametrize("spec,column", [("cse{", 5), ("cse,,dce", 5), ('cse{a="x', 7)])
def test_malformed_pipeline_text_is_a_pass_error(spec, column):
    # xDSL's ArgSpecParseError is a BaseException, which `except Exception` does not catch.
    from xla_dialect.errors import PassError

    with pytest.raises(PassError, match=f"at column {column}"):
        passes.parse_pipeline(spec)


# ----------------------------------------------------------------------------
# Newcomer's rough edges (issue 13)
# ----------------------------------------------------------------------------


REPO = Path(__file__).resolve().parent.parent

EXAMPLE_PROGRAM = """builtin.module {
  func.func @main(%0: tensor<4xi32>) -> tensor<4xi32> {
    %1 = hlo.negate %0 : (tensor<4xi32>) -> tensor<4xi32>
    %2 = hlo.negate %1 : (tensor<4xi32>) -> tensor<4xi32>
    func.return %2 : tensor<4xi32>
  }
}
"""


def test_plugin_loads_from_any_directory_by_path_or_module(tmp_path, monkeypatch):
    import subprocess
    import sys

    from passes.registry import load_plugin

    package = tmp_path / "my_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "negations.py").write_text(
        (REPO / "examples" / "fold_double_negation.py").read_text().replace("fold-double-negation",
                                                                          "fold-double-negation-module"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "fold-double-negation-module" in load_plugin("my_plugins.negations")
    with pytest.raises(PassError, match="current directory"):
        load_plugin("no/such/plugin.py")
    # xla-opt from another directory, with the example's absolute path
    program = tmp_path / "p.mlir"
    program.write_text(EXAMPLE_PROGRAM)
    run = subprocess.run([sys.executable, "-m", "interop.tools.xla_opt", str(program), "--load-pass-plugin",
                          str(REPO / "examples" / "fold_double_negation.py"), "-p", "fold-double-negation,dce"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "hlo.negate" not in run.stdout


def test_emit_help_explains_the_choices():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "interop.tools.xla_opt", "--help"], capture_output=True, text=True)
    text = " ".join(run.stdout.split())
    assert "stablehlo: StableHLO MLIR text" in text and "hlo: XLA HLO module text" in text


def test_readme_xdsl_opt_line_on_the_programs_the_other_lines_use(tmp_path):
    """xla-opt turns a StableHLO program into hlo MLIR; xdsl-opt then runs our passes on it."""
    import shutil
    import subprocess
    import sys

    import jax
    import numpy as np

    text = jax.jit(lambda x, y: x + y).lower(np.ones((2, 3), np.float32), np.ones((3,), np.float32)[None]).as_text()
    (tmp_path / "prog.mlir").write_text(text)
    conv = subprocess.run([sys.executable, "-m", "interop.tools.xla_opt", "prog.mlir", "-o", "prog.hlo.mlir"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert conv.returncode == 0, conv.stderr
    xdsl_opt = shutil.which("xdsl-opt")
    if xdsl_opt is None:
        pytest.skip("xdsl-opt not on PATH")
    run = subprocess.run([xdsl_opt, "prog.hlo.mlir", "-p", "canonicalize-broadcasts"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "hlo.add" in run.stdout


def test_demo_says_pass_or_fail():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "interop.tools.cli", "--demo"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "demo PASS: max difference against jax.jit" in run.stdout


def test_pass_options_are_spelt_one_way_in_errors_and_listings():
    """Issue 29: a misspelt option listed the Python names (arg_layouts), --list-passes showed arg-layouts and
    file=None. Both use the dashed names; options without a default say whether they are required."""
    from interop.tools.xla_opt import describe_passes
    from passes.registry import pass_options, pass_signature

    def module():
        b = XlaBuilder("x")
        b.add(b.parameter(0, "f32[2]"), b.parameter(1, "f32[2]"))
        return b.build()

    with pytest.raises(PassError) as info:
        passes.run(module(), "cse,assign-layouts{targt=tpu}")
    message = str(info.value)
    assert "unknown option 'targt' (did you mean target?)" in message and "arg-layouts=<optional>" in message
    assert "arg_layouts" not in message and "None" not in message
    with pytest.raises(PassError, match="pass cse: unknown option 'x'; it takes no options"):
        passes.run(module(), "cse{x=1}")
    listing = describe_passes()
    assert "=None" not in listing and "_" not in listing.split("{", 1)[1].split("}", 1)[0]
    assert "apply-pdl{file=<required>}" in listing
    assert "assign-layouts{target=cpu arg-layouts=<optional> result-layouts=<optional>}" in listing
    assert pass_signature("fold-constants", passes.available_passes()["fold-constants"]) in listing
    assert ("max-elements", "4096") in pass_options(passes.available_passes()["fold-constants"])
    assert passes.run(module(), "fold-constants{max_elements=10}")  # the Python spelling still runs
