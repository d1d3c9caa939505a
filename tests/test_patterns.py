"""The HLO pattern language (passes/patterns.py), rules as passes, plugins in xla-opt and xdsl-opt, and the
pytest helper for users' passes (interop/debugging/pass_testing.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import interop
import lowering
import passes
from passes import PatternPass
from passes.patterns import PatternError, RulePass, m, rule, rule_pass
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import PassError, XlaError
from xla_dialect.ops.elementwise import AbsOp
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _ops(module) -> list[str]:
    return [op.name for op in module.walk() if op.name.startswith("hlo.")]


def _root(module):
    """The op defining the value the entry function returns."""
    ret = next(op for op in module.walk() if op.name == "func.return")
    return ret.operands[0]


# The target of issue 25: multiply(x, 2) -> add(x, x) in a few lines, on what JAX emits.
TIMES_TWO = rule_pass("test-multiply-by-two",
                      rule(m.Multiply("x", m.ConstantScalar(2), any_order=True), lambda b, x: b.add(x, x)))


# ----------------------------------------------------------------------------
# Matchers on JAX-emitted programs
# ----------------------------------------------------------------------------


def test_the_short_pass_rewrites_what_jax_emits():
    module = interop.import_jax(lambda x: x * 2.0 + 2 * x - x * 3.0, jnp.ones((4, 3), jnp.float32))
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    # (Each op as written, IEEE: XLA's own rewrites and contractions depend on the form -- x*2 + 2*x is
    # factored into (x + x) * 2, whose multiply an FMA then takes -- so only the literal results must agree.)
    literal = {"xla_rewrites": False, "fma_contraction": False}
    (before,) = lowering.compile(module, **literal)(x)
    result = passes.run(module, "test-multiply-by-two,dce")
    ops = _ops(module)
    assert ops.count("hlo.multiply") == 1  # x * 3.0 stays
    assert ops.count("hlo.add") == 3 and ops.count("hlo.broadcast_in_dim") == 1
    report = result.report("test-multiply-by-two")
    assert report.total == 2 and "ConstantScalar(2)" in str(report)
    (after,) = lowering.compile(module, **literal)(x)
    np.testing.assert_array_equal(before, after)


def test_new_ops_keep_the_source_location():
    module = interop.import_jax(lambda x: x * 2.0, jnp.ones((3,), jnp.float32))
    loc = _root(module).owner.attributes["loc"]
    passes.run(module, [TIMES_TWO()])
    assert _root(module).owner.name == "hlo.add" and _root(module).owner.attributes["loc"] == loc


def test_constant_scalar_sees_through_broadcasts_and_exact_converts():
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[4]")
    two_int = b.convert_element_type(b.constant(np.int32(2)), np.float32)
    exact = b.mul(x, b.broadcast_in_dim(two_int, [4], []))
    inexact = b.convert_element_type(b.constant(np.array(2.0000001, np.float64)), np.float32)  # rounds: not 2.0000001
    also = b.mul(x, b.broadcast_in_dim(inexact, [4], []))
    module = b.build(b.add(exact, also))
    two = m.Multiply("x", m.ConstantScalar(2, name="c"))
    caps = two.matches(exact)
    assert caps is not None and caps["x"] is x.value and caps["c"].dtype == np.float32 and caps["c"] == 2
    assert two.matches(also) is None
    assert m.Multiply("x", m.ConstantScalar(2, through=("convert",))).matches(exact) is None  # not via broadcast
    assert m.Multiply("x", m.ConstantScalar(2, through=("broadcast",))).matches(exact) is None  # not via convert
    passes.run(module, "test-multiply-by-two,dce")
    assert _ops(module).count("hlo.multiply") == 1


def test_constant_scalar_matches_jax_integer_exponents():
    # lax.pow(x, jnp.int32(3)): a power by a broadcast of convert(s32 constant 3) to f32
    module = interop.import_jax(lambda x: jax.lax.pow(x, jnp.int32(3)), jnp.ones(3, jnp.float32))
    caps = m.Power("x", m.ConstantScalar(3, name="n")).matches(_root(module))
    assert caps is not None and caps["n"].dtype == np.float32
    assert m.Power("x", m.ConstantScalar(3, through=("broadcast",))).matches(_root(module)) is None


def test_captures_must_agree_and_any_order_tries_both_orders():
    f32 = jnp.ones(3, jnp.float32)
    module = interop.import_jax(lambda p, x, y: (jax.lax.select(p, x, x), jax.lax.select(p, x, y), 2.0 * x),
                                jnp.ones(3, bool), f32, f32)
    same, different, two_x = (v for v in next(op for op in module.walk() if op.name == "func.return").operands)
    select_same = m.Select(m.Any(), "x", "x")
    assert select_same.matches(same) is not None and select_same.matches(different) is None
    assert m.Multiply("x", m.ConstantScalar(2)).matches(two_x) is None  # 2.0 * x: the constant is on the left
    assert m.Multiply("x", m.ConstantScalar(2), any_order=True).matches(two_x)["x"].type == two_x.type
    either = m.AnyOf(m.Add("a", "b"), m.Multiply(m.ConstantScalar(name="k"), "a"))
    caps = either.matches(two_x)
    assert set(caps) == {"a", "k"} and float(caps["k"]) == 2.0  # the failed alternative left nothing behind


def test_shapes_types_layouts_properties_and_uses():
    b = XlaBuilder("f")  # default layouts
    x = b.parameter(0, "f32[2,3]")
    t = b.transpose(x, [1, 0])
    module = b.build(b.add(t, t))
    assert m.Transpose("x", permutation=(1, 0)).matches(t) is not None
    assert m.Transpose("x", permutation=lambda p: p == (0, 1)).matches(t) is None
    assert m.Transpose(m.Parameter().with_shape((2, None)).with_dtype("f32")).matches(t) is not None
    assert m.Transpose(m.Parameter().with_dtype("bf16", "f16")).matches(t) is None
    assert m.Any().with_layout((1, 0)).matches(t) is not None and m.Any().with_layout(None).matches(t) is None
    assert m.Any().with_rank(2).one_use().matches(t) is None  # used twice by the add
    assert m.Op("hlo.transpose").where(lambda op: op.results[0].has_one_use()).matches(t) is None
    assert m.Op(None, "a", "a").matches(_root(module)) is not None
    assert repr(m.Transpose("x", permutation=(1, 0)).one_use()) == "Transpose(x, permutation=(1, 0)).one_use()"


def test_conditions_see_captures_op_and_options():
    @passes.register_pass
    @dataclass(frozen=True)
    class ScaleBelow(RulePass):
        """``test-scale-below``: ``x * c`` -> ``x + x`` for a splat ``c`` below the option ``limit``."""

        name = "test-scale-below"
        limit: float = 3.0
        RULES = (rule(m.Multiply("x", m.ConstantScalar(name="c")), lambda b, x: b.add(x, x),
                      when=lambda c, op, options: c < options.limit and op.results[0].type.get_shape() != ()),)

    fn = lambda x: (x * 2.0, x * 5.0)  # noqa: E731
    module = interop.import_jax(fn, jnp.ones(4, jnp.float32))
    assert passes.run(module, "test-scale-below").report("test-scale-below").total == 1
    module = interop.import_jax(fn, jnp.ones(4, jnp.float32))
    assert passes.run(module, "test-scale-below{limit=5.5}").report("test-scale-below").total == 2
    module = interop.import_jax(fn, jnp.ones((), jnp.float32))  # scalars are not rewritten
    assert passes.run(module, "test-scale-below").report("test-scale-below").total == 0


def test_replacements_build_with_the_builder_and_keep_layouts():
    # x / c -> x * (1 / c), built with splat; on a program with layouts, verification holds.
    reciprocal = rule_pass("test-reciprocal", rule(
        m.Divide("x", m.ConstantScalar(lambda c: c != 0, name="c")),
        lambda b, x, c: b.mul(x, b.splat(1 / c, like=x))), register=False)
    b = XlaBuilder("f")
    x = b.parameter(0, "f32[4,2]")
    module = b.build(b.div(x, b.broadcast_in_dim(b.constant(np.float32(4)), [4, 2], [])))
    passes.run(module, [reciprocal(), passes.get_pass("dce")()])  # verify=True: layouts must fit
    assert _ops(module) == ["hlo.constant", "hlo.broadcast_in_dim", "hlo.multiply"]
    (out,) = lowering.compile(module)(np.full((4, 2), 2, np.float32))
    np.testing.assert_array_equal(out, np.full((4, 2), 0.5, np.float32))


def test_a_replacement_may_decline_and_forwarding_keeps_types():
    declined = []
    decline = rule_pass("test-decline", rule(m.Negate("x"), lambda b, x: declined.append(b.neg(x)) or None),
                        register=False)
    module = interop.import_jax(lambda x: -x, jnp.ones(3, jnp.float32))
    passes.run(module, [decline()])
    assert declined and _ops(module) == ["hlo.negate"]  # the op built and dropped is gone
    # x + 0 with an implicit broadcast of x: forwarding x would change the result's shape.
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[]")
    module = b.build(b.add(x, b.constant(np.zeros(3, np.float32))))
    drop = rule_pass("test-drop-zero", rule(m.Add("x", m.ConstantScalar(0)), "x"), register=False)
    assert passes.run(module, [drop()]).reports[0][1].total == 0


def test_rules_mix_with_hand_written_patterns_in_one_table():
    class AbsOfAbs(RewritePattern):
        @op_type_rewrite_pattern
        def match_and_rewrite(self, op: AbsOp, rewriter: PatternRewriter) -> None:
            if isinstance(op.operand.owner, AbsOp):
                rewriter.replace(op, [], [op.operand])

    @dataclass(frozen=True)
    class Mixed(PatternPass):
        name = "test-mixed"
        PATTERNS = (AbsOfAbs, rule(m.Negate(m.Negate("x")), "x"))

    module = interop.import_jax(lambda x: jnp.abs(jnp.abs(-(-x))), jnp.ones(3, jnp.float32))
    passes.run(module, [Mixed(), passes.get_pass("dce")()])
    assert _ops(module) == ["hlo.abs"]


def test_clear_errors():
    with pytest.raises(AttributeError, match="did you mean Multiply"):
        m.Multipy("x")
    with pytest.raises(PatternError, match="takes 'y', which the pattern does not capture \\(captures: x"):
        rule(m.Negate("x"), lambda b, y: y)
    with pytest.raises(PatternError, match="'z' is not a capture"):
        rule(m.Negate("x"), "z")
    with pytest.raises(PatternError, match="root must be an op matcher"):
        rule(m.ConstantScalar(2), "x")
    with pytest.raises(PatternError, match="no hlo op 'hlo.mul'"):
        m.Op("hlo.mul")
    assert issubclass(PatternError, XlaError)
    broken = rule_pass("test-broken", rule(m.Negate("x"), lambda b, x: 3), register=False)
    with pytest.raises(PassError, match="test-broken.*hlo.negate.*returned 3"):
        passes.run(interop.import_jax(lambda x: -x, jnp.ones(3, jnp.float32)), [broken()])


def test_builtin_rules_report_and_keep_their_results():
    # simplify's identity operands and the data-movement no-ops are rules now: they report.
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[2,3]")
    y = b.mul(b.transpose(b.transpose(x, [0, 1]), [0, 1]), b.constant(np.ones((2, 3), np.float32)))
    module = b.build(b.add(y, b.constant(np.full((2, 3), -0.0, np.float32))))
    report = passes.run(module, "simplify").report("simplify")
    assert _root(module) is module.body.block.first_op.body.block.args[0]
    assert report.counts["x multiply e -> x"] == 1 and report.counts["x add e -> x"] == 1
    assert report.counts["transpose(x, identity permutation) -> x"] == 2


# ----------------------------------------------------------------------------
# The pytest helper
# ----------------------------------------------------------------------------


def test_helper_passes_a_correct_pass_and_fails_a_wrong_one():
    from interop.debugging.pass_testing import assert_preserves_semantics, generated_programs

    programs = generated_programs(12, seed=1)
    assert len(programs) == 12 and len({str(p) for p in programs}) == 12
    summary = assert_preserves_semantics("test-multiply-by-two", programs + [
        (lambda x: x * 2.0, (np.array([np.inf, -0.0, 3e38, np.nan], np.float32),))])
    assert summary.programs == 13
    # (a + b) - b -> a: true of real numbers, not of floats (overflow, rounding, inf - inf).
    wrong = rule_pass("test-cancel", rule(m.Subtract(m.Add("a", "b"), "b"), "a"), register=False)
    with pytest.raises(AssertionError, match="(?s)changes the results.*test-cancel.*hlo.subtract"):
        assert_preserves_semantics(wrong(), [(lambda a, b: (a + b) - b, (np.float32([3e38, 1, 2]),
                                                                         np.float32([3e38, 1e-8, 3])))])
    with pytest.raises(AssertionError, match="rewrote 0 of 2 programs"):
        assert_preserves_semantics(wrong(), programs[:2], min_rewritten=1)


def test_helper_finds_a_wrong_pass_on_generated_programs(check_pass):
    # (the check_pass fixture of the project's pytest plugin is interop.debugging.pass_testing.assert_preserves_semantics)
    # x * c -> x + x for every splat c: wrong unless c is 2; the generated programs multiply by 1, 0, -1...
    wrong = rule_pass("test-always-double", rule(m.Multiply("x", m.ConstantScalar()), lambda b, x: b.add(x, x)),
                      register=False)
    with pytest.raises(AssertionError, match="test-always-double"):
        check_pass(wrong(), count=16)


# ----------------------------------------------------------------------------
# Plugins: a file, an entry point; xla-opt and xdsl-opt under the same names
# ----------------------------------------------------------------------------

PLUGIN = textwrap.dedent('''
    from passes.patterns import m, rule, rule_pass

    rule_pass("times-two-as-add", rule(m.Multiply("x", m.ConstantScalar(2), any_order=True),
                                       lambda b, x: b.add(x, x)))
''')

PROGRAM = textwrap.dedent('''
    builtin.module {
      func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
        %c = hlo.constant <2.0 : tensor<f32>> : tensor<f32>
        %b = hlo.broadcast_in_dim %c {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
        %y = hlo.multiply %x, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %z = hlo.multiply %x, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        %s = hlo.subtract %y, %z : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        func.return %s : tensor<4xf32>
      }
    }
''')


def _tool(name: str, *args, env=None, cwd=None):
    exe = BIN / name
    if not exe.exists():
        pytest.skip(f"{name} is not installed in this environment")
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=full_env, cwd=cwd,
                          timeout=120)


def test_a_plugin_file_runs_in_xla_opt_and_xdsl_opt_under_one_name(tmp_path):
    (tmp_path / "times_two.py").write_text(PLUGIN)
    (tmp_path / "program.mlir").write_text(PROGRAM)
    pipeline = "times-two-as-add,hlo-cse,hlo-dce"  # the same text in both tools
    outputs = []
    for tool, extra in (("xdsl-opt", []), ("xla-opt", ["--report"])):
        done = _tool(tool, "program.mlir", "-p", pipeline, *extra, env={"XLA_PASS_PLUGINS": "times_two.py"},
                     cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        module = parse_module(done.stdout)
        assert _ops(module) == ["hlo.add", "hlo.subtract"], done.stdout
        outputs.append(done)
    assert "report of times-two-as-add" in outputs[1].stderr and "2 rewrites by its rules" in outputs[1].stderr
    done = _tool("xla-opt", "program.mlir", "-p", "times-two-as-add", "--load-pass-plugin", "times_two.py",
                 cwd=tmp_path)
    assert done.returncode == 0 and "hlo.multiply" not in done.stdout, done.stderr


def test_an_entry_point_plugin_runs_in_both_tools(tmp_path):
    package = tmp_path / "site" / "my_hlo_passes"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(PLUGIN.replace("times-two-as-add", "ep-times-two")
                                         + "\nPASSES = [TimesTwoPass] if False else []\n")
    (package / "__init__.py").write_text(PLUGIN.replace('rule_pass("times-two-as-add"',
                                                        'TimesTwo = rule_pass("ep-times-two"'))
    info = tmp_path / "site" / "my_hlo_passes-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-hlo-passes\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[xla_dialect.passes]\nmy_hlo_passes = my_hlo_passes:TimesTwo\n")
    (tmp_path / "program.mlir").write_text(PROGRAM)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    listing = _tool("xla-opt", "--list-passes", env=env, cwd=tmp_path)
    assert "ep-times-two" in listing.stdout, listing.stderr
    for tool in ("xdsl-opt", "xla-opt"):
        done = _tool(tool, "program.mlir", "-p", "ep-times-two,hlo-dce", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "hlo.multiply" not in done.stdout and "hlo.add" in done.stdout


def test_xdsl_opt_errors_are_messages_not_tracebacks(tmp_path):
    (tmp_path / "program.mlir").write_text(PROGRAM)
    done = _tool("xdsl-opt", "program.mlir", "-p", "times-two-as-add", cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "Unrecognized passes: ['times-two-as-add']" in done.stderr and "XLA_PASS_PLUGINS=" in done.stderr
    assert "hlo-cse" in done.stderr and "canonicalize-broadcasts" in done.stderr
    done = _tool("xdsl-opt", "program.mlir", "-p", "canonicalize-broadcasts{bogus=1}", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "a pass option" in done.stderr
    done = _tool("xdsl-opt", "program.mlir", "-p", "hlo-dce", env={"XLA_PASS_PLUGINS": "missing.py"}, cwd=tmp_path)
    assert done.returncode == 0 and "warning: XLA_PASS_PLUGINS: pass plugin missing.py: no such file" in done.stderr


def test_hlo_names_are_accepted_everywhere():
    from passes.registry import pass_aliases, xdsl_opt_name

    assert {xdsl_opt_name(n) for n in ("cse", "dce", "apply-pdl", "simplify")} == {
        "hlo-cse", "hlo-dce", "hlo-apply-pdl", "simplify"}
    assert set(pass_aliases()) == {"hlo-cse", "hlo-dce", "hlo-apply-pdl"}
    pipeline = passes.parse_pipeline("simplify,hlo-cse,hlo-dce")
    assert [p.name for p in pipeline.passes] == ["simplify", "hlo-cse", "hlo-dce"]
    assert passes.get_pass("hlo-dce").name == "hlo-dce"
    with pytest.raises(PassError, match="unknown option 'bogus'"):
        passes.parse_pipeline("hlo-cse{bogus=1}")


def test_root_refinements_apply_to_the_matched_result():
    only_f16 = rule_pass("test-f16-double", rule(m.Multiply("x", m.ConstantScalar(2)).with_dtype("f16").bind("y"),
                                                 lambda b, x, y: b.add(x, x)), register=False)
    module = interop.import_jax(lambda x, y: (x * 2.0, y * 2.0), jnp.ones(2, jnp.float32), jnp.ones(2, jnp.float16))
    assert passes.run(module, [only_f16()]).reports[0][1].total == 1
    assert [op.name for op in module.walk() if op.name in ("hlo.add", "hlo.multiply")] == ["hlo.multiply", "hlo.add"]


def test_canonicalize_broadcasts_folds_splats_under_its_option():
    module = interop.import_jax(lambda x: x * 2.0, jnp.ones((4, 4), jnp.float32))
    report = passes.run(module, "canonicalize-broadcasts{max-splat-elements=8}").report("canonicalize-broadcasts")
    assert report.counts["broadcast_in_dim(splat constant) -> splat constant"] == 0
    report = passes.run(module, "canonicalize-broadcasts").report("canonicalize-broadcasts")
    assert report.counts["broadcast_in_dim(splat constant) -> splat constant"] == 1
    assert "hlo.broadcast_in_dim" not in _ops(module)
