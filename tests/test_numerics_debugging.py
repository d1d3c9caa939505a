"""Numerics debugging (interop.debugging): generated inputs, probes, first divergence, pass bisection, reducer."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import interop
import lowering
from interop.tools.cli import xla_run_main
from interop.debugging import random_inputs, special_values_of
from xla_dialect import parse_module
from xla_dialect.errors import XlaError

MIXED = """
builtin.module {
  func.func @main(%0: tensor<3x4xf32>, %1: tensor<5xi8>, %2: tensor<2xbf16>, %3: tensor<i1>) -> tensor<3x4xf32> {
    %4 = hlo.add %0, %0 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
    func.return %4 : tensor<3x4xf32>
  }
}
"""


def _bits(a):
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# -- random inputs ----------------------------------------------------------------------------------------


def test_random_inputs_have_the_parameter_types_and_are_reproducible():
    module = parse_module(MIXED)
    a = random_inputs(module, seed=7)
    assert [(x.shape, x.dtype) for x in a] == [((3, 4), np.float32), ((5,), np.int8),
                                               ((2,), ml_dtypes.bfloat16), ((), np.bool_)]
    b = random_inputs(module, seed=7)
    assert all(np.array_equal(_bits(x), _bits(y)) for x, y in zip(a, b))
    c = random_inputs(module, seed=8)
    assert not np.array_equal(a[0], c[0])
    assert all(np.isfinite(a[0]).ravel()) and np.all(np.abs(a[1].astype(int)) <= 100)
    (out,) = lowering.compile(module)(*a)  # the executor takes them as they are (argument_conversion="exact")
    np.testing.assert_array_equal(out, a[0] + a[0])


def test_special_values_are_mixed_in():
    f = special_values_of(np.float32)
    bits = set(_bits(f).tolist())
    assert {0x7FC00000, 0xFFC00000, 0x7F800000, 0xFF800000, 0, 0x80000000, 1} <= bits  # NaN, -NaN, inf, zeros, denormal
    assert {-128, 127, 0, -1} <= set(special_values_of(np.int8).tolist())
    assert not np.isinf(special_values_of(ml_dtypes.float8_e4m3fn).astype(np.float64)).any()  # no infinities there
    (x,) = random_inputs([parse_module(MIXED).body.block.first_op.function_type.inputs.data[0]], seed=1,
                         special_values=True)
    assert np.isnan(x).any() and np.isinf(x).any()
    assert 2 <= np.count_nonzero(~np.isfinite(x) | (x == 0) | (np.abs(x) < 1.2e-38) | (np.abs(x) > 1e38)) <= 12
    with pytest.raises(XlaError, match="seed must be an int"):
        random_inputs(parse_module(MIXED), seed="x")
    with pytest.raises(XlaError, match="no function @nope"):
        random_inputs(parse_module(MIXED), entry="nope")


def test_xla_run_random_inputs(tmp_path, capsys):
    path = tmp_path / "p.mlir"
    path.write_text(MIXED)
    assert xla_run_main([str(path), "--random-inputs", "--seed", "3", "--output", str(tmp_path / "a.npz")]) == 0
    assert "random inputs (seed 3)" in capsys.readouterr().out
    expected = random_inputs(parse_module(MIXED), seed=3)[0]
    np.testing.assert_array_equal(np.load(tmp_path / "a.npz")["result0"], expected + expected)
    assert xla_run_main([str(path), "--random-inputs", "--special-values", "--output", str(tmp_path / "b.npz")]) == 0
    assert np.isnan(np.load(tmp_path / "b.npz")["result0"]).any()
    assert xla_run_main([str(path)]) == 2
    assert "--random-inputs" in capsys.readouterr().err


# -- probes -------------------------------------------------------------------------------------------------


def _loop_program(x, y):
    a = x * 3.0
    b = jnp.sin(a) - y  # line of the subtract
    c = jax.lax.fori_loop(0, 5, lambda i, c: c * 1.5 + 1.0, b)
    return jnp.sum(c)


SUBTRACT_LINE = _loop_program.__code__.co_firstlineno + 2


def test_trace_records_every_op_with_its_location_and_the_kernels_values():
    x = np.linspace(-1, 1, 4).astype(np.float32)
    y = np.full(4, 0.25, np.float32)
    t = interop.trace(_loop_program, x, y, max_iterations=3)
    (sub,) = t.of("subtract")
    assert sub.op == "hlo.subtract" and sub.location.endswith(f"test_numerics_debugging.py:{SUBTRACT_LINE}")
    (mul,) = t.of("multiply")[:1]
    (sine,) = t.of("sine")
    # the values the kernels computed: sine's value is the executor's sine of the multiply's value
    sine_alone = lowering.compile(parse_module("""
builtin.module {
  func.func @main(%0: tensor<4xf32>) -> tensor<4xf32> {
    %1 = hlo.sine %0 : (tensor<4xf32>) -> tensor<4xf32>
    func.return %1 : tensor<4xf32>
  }
}"""))(mul.value)[0]
    np.testing.assert_array_equal(sine.value, sine_alone)
    np.testing.assert_array_equal(sub.value, sine.value - y)
    # the outputs are those of a normal run, bit for bit
    normal = lowering.compile(interop.import_jax(_loop_program, x, y))(x, y)
    assert _bits(t.outputs[0]).tolist() == _bits(normal[0]).tolist()
    # inside the loop: one value per iteration, the first max_iterations of them, then counted as skipped
    body = [v for v in t if v.iteration == 2]
    assert body and all(v.key.endswith(".it2") for v in body)
    assert not [v for v in t if v.iteration >= 3] and t.skipped > 0
    fmas = [v for v in t if v.executed_op == "hlo_internal.fma"]
    # the FMA stands for the add of the loop body (a call jax makes, inlined by the executor), line and all
    assert fmas and all(v.op == "hlo.add" and v.location.endswith(f":{SUBTRACT_LINE + 1}") for v in fmas)
    loop_values = [v.value for v in fmas]
    # (XLA contracts c * 1.5 + 1.0 to one FMA: one rounding, which float64 arithmetic gives exactly here)
    np.testing.assert_array_equal(loop_values[1], (loop_values[0].astype(np.float64) * 1.5 + 1.0).astype(np.float32))
    assert "hlo.subtract" in str(t) and len(t) == len(t.as_dict())


def test_probes_cost_nothing_without_a_probe():
    module = interop.import_jax(_loop_program, np.ones(4, np.float32), np.ones(4, np.float32))
    assert "probe" not in lowering.compile(module).source
    assert "probe" in lowering.compile(module, probe=interop.debugging.probes.Probe()).source


def test_xla_run_dump_intermediates(tmp_path, capsys):
    x = np.linspace(-1, 1, 4).astype(np.float32)
    y = np.full(4, 0.25, np.float32)
    exported = jax.export.export(jax.jit(_loop_program))(x, y)
    (tmp_path / "prog.bin").write_bytes(exported.serialize())
    np.savez(tmp_path / "in.npz", arg0=x, arg1=y)
    out = tmp_path / "dump"
    assert xla_run_main([str(tmp_path / "prog.bin"), "--trusted", "--inputs", str(tmp_path / "in.npz"),
                         "--dump-intermediates", str(out), "--max-iterations", "2"]) == 0
    assert "intermediate values written" in capsys.readouterr().out
    index = json.loads((out / "index.json").read_text())
    arrays = np.load(out / "main.npz")
    (sub,) = [e for e in index["values"] if e["op"] == "hlo.subtract"]
    assert sub["location"].endswith(f":{SUBTRACT_LINE}") and sub["shape"] == [4] and sub["file"] == "main.npz"
    np.testing.assert_array_equal(arrays[sub["key"]], interop.trace(_loop_program, x, y).of("subtract")[0].value)
    # one .npz per function of the program: the loop body jax wrote as a function has its own
    files = {e["file"] for e in index["values"]}
    assert "main.npz" in files and len(files) == 2
    stored = {k for name in files for k in np.load(out / name).files}
    assert stored == {e["key"] for e in index["values"]} and index["skipped"] > 0


# -- first divergence ---------------------------------------------------------------------------------------


def _cancellation(x):
    y = x * x
    z = y + 1.0
    w = z - y  # catastrophic cancellation: (x*x + 1) - x*x is 0 in f32 for large x, 1 in f64
    return jnp.sqrt(w) * 2.0


CANCELLATION_LINE = _cancellation.__code__.co_firstlineno + 3
CANCELLATION_INPUT = np.array([1e4, 2.0, 3e3, 0.5, -7e3], np.float32)


def test_find_divergence_against_f64_names_the_cancelling_subtract_and_its_line():
    report = interop.find_divergence(_cancellation, CANCELLATION_INPUT, against="f64")
    first = report.first
    assert first.op == "hlo.subtract"
    assert first.location.endswith(f"test_numerics_debugging.py:{CANCELLATION_LINE}")
    assert first.shape == (5,) and first.mismatches == 2 and first.max_abs == 1.0
    assert [w[0] for w in first.worst] == [(0,), (4,)] and first.worst[0][1:3] == ("0.0", "1.0")
    text = str(report)
    assert f"hlo.subtract at {first.location}" in text and "[0]" in text and "outputs differ" in text
    assert sorted(k.split(".", 1)[1] for k in first.operands) == ["hlo.add", "hlo.multiply"]  # within budget
    assert [d.op for d in report.divergences][1:] == ["hlo.sqrt", "hlo.multiply"]
    # small inputs: no cancellation, nothing reported
    assert not interop.find_divergence(_cancellation, np.array([0.5, 1.5], np.float32))


def test_find_divergence_against_compile_options_names_the_rewritten_op():
    def f(x):
        return jnp.sin(x / 10.0)  # XLA rewrites x / 10 to x * 0.1: not the correctly rounded quotient

    x = np.arange(1, 65, dtype=np.float32) * np.float32(1.37)
    report = interop.find_divergence(f, x, against={"xla_rewrites": False}, max_ulp=0, rtol_magnitude=0)
    assert report.first.op == "hlo.divide" and report.first.location.endswith(f":{f.__code__.co_firstlineno + 1}")
    assert report.first.executed_op == "hlo.multiply" and report.first.max_ulp == 1
    assert "computed as hlo.multiply" in str(report)

    def g(x):
        return (x / 10.0) * 7.0  # folded into one multiply by 0.7: the divide has no value at all

    report = interop.find_divergence(g, x, against={"xla_rewrites": False}, max_ulp=0, rtol_magnitude=0)
    assert report.first.op == "hlo.multiply" and report.absent == [f"hlo.divide at {report.first.location}"]
    assert "(rewritten away): hlo.divide" in str(report)
    assert not interop.find_divergence(f, x, against={"fma_contraction": False}, max_ulp=0, rtol_magnitude=0)
    with pytest.raises(XlaError, match="unexpected keyword argument 'bogus'"):
        interop.find_divergence(f, x, against={"bogus": 1})


def test_find_divergence_against_xla_and_against_dumped_values(tmp_path):
    x = np.linspace(-3, 3, 16).astype(np.float32)
    y = np.full(16, 0.25, np.float32)
    report = interop.find_divergence(_loop_program, x, y, against="xla", max_ulp=0, rtol_magnitude=0)
    assert not report and report.compared >= 5 and "every value is within" in str(report)
    # values from elsewhere: a dump of this run with one value changed stands for a device's run
    t = interop.trace(_loop_program, x, y)
    t.dump(tmp_path / "device")
    values = dict(np.load(tmp_path / "device" / "main.npz"))
    key = t.of("sine")[0].key
    values[key] = values[key].copy()
    values[key][3] = np.nextafter(values[key][3], np.float32(9), dtype=np.float32)
    report = interop.find_divergence(_loop_program, x, y, against=values, max_ulp=0, rtol_magnitude=0)
    assert report.first.key == key and report.first.op == "hlo.sine" and report.first.worst[0][0] == (3,)
    assert not interop.find_divergence(_loop_program, x, y, against=str(tmp_path / "device"), max_ulp=0)
    with pytest.raises(XlaError, match="no such file"):
        interop.find_divergence(_loop_program, x, y, against=str(tmp_path / "nothing.npz"))


def test_widened_shadow_keeps_bitcasts_and_bf16_converts_verifying():
    def f(x):
        bits = jax.lax.bitcast_convert_type(x, jnp.int32)
        back = jax.lax.bitcast_convert_type(bits + 1, jnp.float32)
        return (back.astype(jnp.bfloat16) * 3).astype(jnp.float32) + x

    x = np.linspace(0.1, 2, 8).astype(np.float32)
    report = interop.find_divergence(f, x)
    # the bf16 rounding is where precision goes; it shows in the first f32 value computed from it (XLA computes
    # the bf16 product in f32 and contracts it with the add), not at the bitcasts (compared as floats there)
    assert report.first.op == "hlo.add" and report.first.executed_op == "hlo_internal.fma"
    assert report.first.dtype == "float32" and report.first.max_rel < 0.004
    assert any(a.startswith("hlo.multiply") for a in report.absent)
    assert not any(d.op.startswith("hlo.bitcast") for d in report.divergences)


def test_xla_diverge_command(tmp_path, capsys):
    from interop.tools.debugging_cli import diverge_main

    (tmp_path / "p.mlir").write_text("""
builtin.module {
  func.func @main(%0: tensor<4xf32>) -> tensor<4xf32> {
    %1 = hlo.multiply %0, %0 {loc = "model.py:3"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %c = hlo.constant <[1.0, 1.0, 1.0, 1.0] : tensor<4xf32>> : tensor<4xf32>
    %2 = hlo.add %1, %c {loc = "model.py:4"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = hlo.subtract %2, %1 {loc = "model.py:5"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    func.return %3 : tensor<4xf32>
  }
}""")
    np.savez(tmp_path / "in.npz", arg0=np.array([1e4, 2.0, 3e3, 0.5], np.float32))
    prog, inputs = str(tmp_path / "p.mlir"), str(tmp_path / "in.npz")
    assert diverge_main([prog, "--inputs", inputs]) == 1
    assert "hlo.subtract at model.py:5" in capsys.readouterr().out
    assert diverge_main([prog, "--inputs", inputs, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["first"]["op"] == "hlo.subtract" and data["first"]["location"] == "model.py:5"
    assert data["first"]["worst"][0]["element"] == [0]
    assert diverge_main([prog, "--inputs", inputs, "--against", "fma_contraction=false"]) == 0
    assert diverge_main([prog, "--random-inputs", "--against", "xla"]) == 0
    assert diverge_main([prog, "--against", "nonsense"]) == 2
    assert "--against nonsense" in capsys.readouterr().err


# -- pass bisection -----------------------------------------------------------------------------------------

BROKEN_PASS = '''
from dataclasses import dataclass

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from passes import PatternPass, register_pass
from xla_dialect.ops.elementwise import AddOp, SubOp


class CancelAddSubtract(RewritePattern):
    """(a + b) - b -> a: true of real numbers, not of floats (rounding, infinities)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: SubOp, rewriter: PatternRewriter) -> None:
        inner = op.lhs.owner
        if isinstance(inner, AddOp) and inner.rhs == op.rhs:
            rewriter.replace(op, [], [inner.lhs])


@register_pass(replace=True)
@dataclass(frozen=True)
class CancelAddSubtractPass(PatternPass):
    """``cancel-add-subtract``: (a + b) - b -> a (wrong for floats)."""

    name = "cancel-add-subtract"
    PATTERNS = (CancelAddSubtract,)
'''

ADD_SUBTRACT = """
builtin.module {
  func.func @main(%0: tensor<8xf32>, %1: tensor<8xf32>) -> tensor<8xf32> {
    %2 = hlo.add %0, %1 {loc = "model.py:2"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %3 = hlo.subtract %2, %1 {loc = "model.py:3"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %4 = hlo.multiply %3, %3 {loc = "model.py:4"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    func.return %4 : tensor<8xf32>
  }
}
"""

BUILTIN_PIPELINE = ("canonicalize-broadcasts,explicit-binary-broadcasts,simplify,fold-constants,cse,dce,inline-calls,"
                    "xla-divide-by-broadcast,xla-float-rewrites,contract-fma,xla-small-loops,assign-layouts,"
                    "lower-quantized,expand-quantized,assign-layouts{target=tpu},tile-layouts")


@pytest.fixture
def broken_pass(tmp_path):
    import passes

    path = tmp_path / "broken_pass.py"
    path.write_text(BROKEN_PASS)
    passes.load_plugin(str(path))
    return str(path)


def test_check_semantics_names_a_broken_users_pass_and_the_op(broken_pass):
    from interop.debugging import check_semantics

    report = check_semantics(parse_module(ADD_SUBTRACT), "simplify,cse,cancel-add-subtract,dce")
    assert not report.ok and report.first == "cancel-add-subtract"
    assert (report.op, report.location) == ("hlo.subtract", "model.py:3")
    assert [c.status for c in report.checks] == ["same", "same", "changed"]
    assert "the first pass that changes the results: cancel-add-subtract, starting at hlo.subtract" in str(report)
    # the rewritten value feeding the results directly is found too
    direct = ADD_SUBTRACT.replace("func.return %4", "func.return %3")
    report = check_semantics(parse_module(direct), "cancel-add-subtract")
    assert report.op == "hlo.subtract" and "the function's results" in report.details


def test_no_false_alarm_on_the_builtin_passes():
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from hlo_programs import programs

    chosen = ["elementwise_binary", "integers", "compare_select_clamp", "reductions", "while", "sort", "mlp"]
    table = programs()
    for name in chosen:
        fn, args = table[name]
        report = interop.debugging.check_semantics(interop.import_jax(fn, *args), BUILTIN_PIPELINE, seeds=(0, 1))
        assert report.ok, f"{name}: {report}"
    # NaN sign and payload do not count, a NaN against a number does
    from interop.debugging.bisection import same_values

    a = np.array([np.nan, -np.nan, 0.0, 1.0], np.float32)
    b = np.array([-np.nan, np.float32(np.nan), -0.0, np.nan], np.float32)
    assert same_values(a, b).tolist() == [True, True, True, False]
    assert same_values(a, b, signed_zeros=True).tolist() == [True, True, False, False]


def test_xla_opt_check_semantics(tmp_path, broken_pass, capsys):
    from interop.tools.xla_opt import main

    path = tmp_path / "p.mlir"
    path.write_text(ADD_SUBTRACT)
    assert main([str(path), "-p", "simplify,cse,dce", "--check-semantics"]) == 0
    assert "every pass preserves the results" in capsys.readouterr().err
    assert main([str(path), "-p", "cse,cancel-add-subtract,dce", "--load-pass-plugin", broken_pass,
                 "--check-semantics"]) == 1
    out = capsys.readouterr()
    assert "first pass that changes the results: cancel-add-subtract, starting at hlo.subtract at model.py:3" in out.err
    assert "hlo.multiply" in out.out  # the pipeline's output is still printed


# -- reducer ------------------------------------------------------------------------------------------------


def chain_program(n: int, culprit: str, at: int, seed: int = 0) -> str:
    """A chain of ``n`` element-wise ops over two f32[16] parameters with ``culprit`` at position ``at``: a custom
    call nobody implements ("custom_call") or ``(x + b) - b`` ("add_subtract")."""
    rng = np.random.default_rng(seed)
    t = "tensor<16xf32>"
    lines = ["builtin.module {", f"  func.func @main(%a: {t}, %b: {t}) -> ({t}, {t}) {{"]
    values, k = ["%a", "%b"], 0
    for i in range(n):
        x = values[-1]
        if i == at and culprit == "custom_call":
            lines.append(f'    %v{k} = hlo.custom_call "no_such_target"({x}) {{loc = "model.py:{i}"}} : ({t}) -> {t}')
        elif i == at:
            lines.append(f'    %v{k} = hlo.add {x}, %b {{loc = "model.py:{i}"}} : ({t}, {t}) -> {t}')
            k += 1
            lines.append(f'    %v{k} = hlo.subtract %v{k - 1}, %b {{loc = "model.py:{i}"}} : ({t}, {t}) -> {t}')
        else:
            op = rng.choice(["add", "multiply", "maximum", "sine", "tanh", "negate", "subtract"])
            y = ["%a", "%b"][int(rng.integers(0, 2))]
            operands = x if op in ("sine", "tanh", "negate") else f"{x}, {y}"
            types = t if op in ("sine", "tanh", "negate") else f"{t}, {t}"
            lines.append(f'    %v{k} = hlo.{op} {operands} {{loc = "model.py:{i}"}} : ({types}) -> {t}')
        values.append(f"%v{k}")
        k += 1
    lines += [f"    func.return {values[-1]}, {values[-3]} : {t}, {t}", "  }", "}"]
    return "\n".join(lines)


def _run_pytest_file(path):
    """The reproducing test of a pytest file written by xla-reduce, run here: the exception it fails with."""
    namespace = {}
    exec(compile(open(path).read(), str(path), "exec"), namespace)
    try:
        namespace["test_reduced_program"]()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def test_xla_reduce_shrinks_a_100_op_crash_to_the_op(tmp_path, capsys):
    from interop.tools.debugging_cli import reduce_main
    from interop.debugging.reducer import count_ops

    source = tmp_path / "big.mlir"
    source.write_text(chain_program(100, "custom_call", at=50))
    assert count_ops(parse_module(source.read_text())) == 100
    assert reduce_main([str(source), "--crash", "-o", str(tmp_path / "small.mlir")]) == 0
    assert "reduced 100 ops to 1" in capsys.readouterr().out
    small = parse_module((tmp_path / "small.mlir").read_text())
    assert [op.name for op in small.walk()][2:] == ["hlo.custom_call", "func.return"]
    error = _run_pytest_file(tmp_path / "test_small.py")
    assert "no_such_target" in str(error) or "custom_call" in str(error)


def test_xla_reduce_pass_changes_and_command(tmp_path, broken_pass, capsys):
    import sys

    from interop.tools.debugging_cli import reduce_main

    source = tmp_path / "big.mlir"
    source.write_text(chain_program(100, "add_subtract", at=99))
    assert reduce_main([str(source), "--pass-changes", "simplify,cancel-add-subtract,dce", "--load-pass-plugin",
                        broken_pass, "-o", str(tmp_path / "as.mlir")]) == 0
    small = parse_module((tmp_path / "as.mlir").read_text())
    assert [op.name for op in small.walk()][2:] == ["hlo.add", "hlo.subtract", "func.return"]
    assert "cancel-add-subtract" in str(_run_pytest_file(tmp_path / "test_as.py"))
    # any command: interesting while the program has a tanh followed somewhere by a sine
    check = (f"{sys.executable} -S -c \"import sys, re; t = open(sys.argv[1]).read(); "
             "sys.exit(0 if re.search('tanh(.|\\\\n)*sine', t) else 1)\"")
    assert reduce_main([str(source), "--test", check, "-o", str(tmp_path / "cmd.mlir")]) == 0
    small = parse_module((tmp_path / "cmd.mlir").read_text())
    assert [op.name for op in small.walk()][2:] == ["hlo.tanh", "hlo.sine", "func.return"]
    capsys.readouterr()
    # a program without the problem: an error, not a reduction
    assert reduce_main([str(tmp_path / "cmd.mlir"), "--crash", "-o", str(tmp_path / "x.mlir")]) == 2
    assert "not interesting to begin with" in capsys.readouterr().err


# -- device numerics ----------------------------------------------------------------------------------------


def test_emulated_devices_round_dot_operands_as_documented():
    from interop.debugging import emulate_device

    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 32)).astype(np.float32)
    b = rng.standard_normal((32, 4)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def rounded(x, dtype):
        return x.astype(dtype).astype(np.float64)

    def run(precision, device):
        module = interop.import_jax(lambda a, b: jnp.dot(a, b, precision=precision), a, b)
        return lowering.compile(emulate_device(module, device))(a, b)[0].astype(np.float64)

    scale = np.abs(exact).max()
    # TPU DEFAULT: one pass over bf16-rounded operands, f32 accumulation
    np.testing.assert_allclose(run("default", "tpu"), rounded(a, ml_dtypes.bfloat16) @ rounded(b, ml_dtypes.bfloat16),
                               atol=4e-7 * scale)
    assert 1e-3 < np.abs(run("default", "tpu") - exact).max() / scale < 1e-2
    # TPU HIGH (bf16_3x) and HIGHEST (bf16_6x): about 16 and 24 bits
    assert 1e-7 < np.abs(run("high", "tpu") - exact).max() / scale < 3e-5
    assert np.abs(run("highest", "tpu") - exact).max() / scale < 3e-7
    # GPU DEFAULT and HIGH: TF32 operands (10 mantissa bits: the 13 low bits of f32 are zero); HIGHEST is f32
    t = interop.trace(lambda a, b: jnp.dot(a, b), a, b, device="gpu")
    operands = [v.value for v in t if v.op == "hlo.reduce_precision"]
    assert len(operands) == 2 and all(not (x.view(np.uint32) & 0x1FFF).any() for x in operands)
    assert 1e-4 < np.abs(run("high", "gpu") - exact).max() / scale < 2e-3
    assert np.array_equal(run("highest", "gpu"), run("highest", "cpu"))


def test_find_divergence_against_a_device_names_the_dot():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)

    def f(a, b):
        return jnp.tanh(jnp.dot(a * 2.0, b)) + 1.0

    report = interop.find_divergence(f, a, b, against={"device": "tpu"})
    assert report.first.op == "hlo.dot_general" and report.first.location.endswith(f":{f.__code__.co_firstlineno + 1}")
    assert not interop.find_divergence(f, a, b, against={"device": "tpu"}, device="tpu", max_ulp=0, rtol_magnitude=0)
    with pytest.raises(XlaError, match="unknown device 'npu'"):
        interop.trace(f, a, b, device="npu")


def test_trace_and_divergence_per_device():
    from xla_dialect import XlaBuilder

    b = XlaBuilder("c")
    x = b.parameter(0, "f32[4]")
    square = b.mul(x, x)
    total = b.all_reduce(square, lambda p, q: p.builder.add(p, q), [[0, 1]])
    module = b.build(b.sub(total, square))  # psum(x*x) - x*x: cancels on the device holding the large values
    args = [[np.arange(4, dtype=np.float32)], [np.full(4, 1e4, np.float32)]]
    t = interop.trace(module, *args, num_replicas=2)
    assert [v.device for v in t] == [0, 0, 0, 1, 1, 1] and t.values[3].key == "op0.hlo.multiply.dev1"
    np.testing.assert_array_equal(t.values[1].value, t.values[4].value)  # the all-reduce: one sum on both
    assert [out[0].tolist() for out in t.outputs] == [[1e8] * 4, [0.0, 0.0, 0.0, 8.0]]
    report = interop.find_divergence(module, *args, num_replicas=2)
    assert (report.first.op, report.first.device) == ("hlo.subtract", 1) and "on device 1" in str(report)


@pytest.fixture
def broken_tanh_kernel(monkeypatch):
    """The executor's tanh made 1 ULP too large (a kernel bug, as XLA CPU would show it)."""
    from lowering.kernels.registry import KERNELS
    from xla_dialect.ops.elementwise import TanhOp

    import lowering.kernels  # noqa: F401  (registers the kernels)

    original = KERNELS[TanhOp]

    def broken(op, ctx):
        kernel = original(op, ctx)
        return lambda x: np.nextafter(kernel(x), np.float32(np.inf)).astype(np.float32)

    monkeypatch.setitem(KERNELS, TanhOp, broken)


def test_a_wrong_kernel_is_named_against_xla_and_reduced_to(broken_tanh_kernel, tmp_path):
    from interop.debugging.reducer import mismatch_vs_jax_test

    def f(x, y):
        return jnp.tanh(x * y) * 2.0 + y

    x = np.linspace(-2, 2, 8, dtype=np.float32)
    y = np.full(8, 0.5, np.float32)
    report = interop.find_divergence(f, x, y, against="xla", max_ulp=0, rtol_magnitude=0)
    assert report.first.op == "hlo.tanh" and report.first.max_ulp == 1
    assert report.first.location.endswith(f":{f.__code__.co_firstlineno + 1}")
    source = tmp_path / "big.mlir"
    source.write_text(chain_program(60, "custom_call", at=-1, seed=3))  # sine, tanh, ... and no culprit
    from interop.tools.debugging_cli import reduce_main

    assert reduce_main([str(source), "--mismatch-vs-jax", "--max-ulp", "0", "--rtol-magnitude", "0",
                        "-o", str(tmp_path / "small.mlir")]) == 0
    small = parse_module((tmp_path / "small.mlir").read_text())
    assert [op.name for op in small.walk()][2:] == ["hlo.tanh", "func.return"]
    assert isinstance(_run_pytest_file(tmp_path / "test_small.py"), AssertionError)
    assert mismatch_vs_jax_test(max_ulp=4)(small) is False  # 1 ULP is within the default budget


def test_reducer_shrinks_shapes_and_returns_the_op_that_matters():
    import re

    from interop.debugging.reducer import crash_test, reduce_program

    module = interop.import_jax(lambda x, w: jnp.tanh(x @ w).sum(0) * 2.0, np.ones((32, 64), np.float32),
                                np.ones((64, 16), np.float32))
    broken = parse_module(re.sub(r"hlo.tanh (%\d+)", r'hlo.custom_call "bad_target"(\1)', str(module), count=1))
    result = reduce_program(broken, crash_test())
    assert result.ops_before == 8 and result.ops_after == 1
    (call,) = [op for op in result.module.walk() if op.name == "hlo.custom_call"]
    assert call.results[0].type.get_shape() == (1, 1)  # 32x16 -> 1x1: every dimension shrunk
    assert "tensor<1x1xf32>) -> tensor<1x1xf32>" in str(result.module)


def test_pytree_arguments_of_a_jax_function():
    def step(params, x):
        h = jnp.tanh(x @ params["w"] + params["b"])
        return jnp.mean(h * h)

    params = {"w": np.full((4, 3), 0.5, np.float32), "b": np.zeros(3, np.float32)}
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    t = interop.trace(step, params, x)
    assert t.of("tanh") and float(t.outputs[0]) == pytest.approx(float(step(params, x)), rel=1e-6)
    assert not interop.find_divergence(step, params, x, against="xla", max_ulp=0, rtol_magnitude=0)
    assert interop.debugging.check_semantics(step, "simplify,cse,dce", inputs=[(params, x)]).ok


def test_bf16_values_dumped_and_read_back(tmp_path):
    def f(x):
        return (x.astype(jnp.bfloat16) * 3).astype(jnp.float32) + x

    x = np.linspace(0.1, 2, 8).astype(np.float32)
    t = interop.trace(f, x)
    t.dump(tmp_path / "d")
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    assert "bfloat16" in {e["dtype"] for e in index["values"]}
    assert not interop.find_divergence(f, x, against=str(tmp_path / "d"), max_ulp=0, rtol_magnitude=0)


def test_divergence_inside_a_loop_names_the_iteration():
    def f(x):
        def body(i, c):
            big = jnp.float32(1e8) * (i == 3)  # the 4th iteration adds and removes a large value
            return (c + big) - big + 0.25

        return jax.lax.fori_loop(0, 6, body, x)

    report = interop.find_divergence(f, np.full(4, 1.0, np.float32))
    assert (report.first.op, report.first.iteration) == ("hlo.subtract", 3)
    assert report.first.location.endswith(f":{f.__code__.co_firstlineno + 3}") and "iteration 3" in str(report)
    # iterations 0-2 only compared: then the loop's result is where the runs part
    report = interop.find_divergence(f, np.full(4, 1.0, np.float32), max_iterations=3)
    assert report.first.op == "hlo.while" and report.first.iteration == 0


def test_probe_as_a_compile_option():
    from interop.debugging import Probe

    module = parse_module(MIXED)
    probe = Probe()
    exe = lowering.compile(module, probe=probe)
    args = random_inputs(module, seed=0)
    (out,) = exe(*args)
    (value,) = probe.values
    assert value.key == "op0.hlo.add" and value.op == "hlo.add" and np.array_equal(value.value, out)
    probe.reset()
    exe(*args)
    assert len(probe.values) == 1


def test_locations_from_hlo_metadata():
    module = interop.import_hlo("""HloModule m

ENTRY main {
  x = f32[4] parameter(0)
  m = f32[4] multiply(x, x), metadata={op_name="jit(f)/mul" source_file="model.py" source_line=3}
  ROOT s = f32[4] sine(m), metadata={op_name="jit(f)/sin" source_file="model.py" source_line=4}
}
""")
    t = interop.trace(module, np.arange(4, dtype=np.float32))
    assert [(v.op, v.location) for v in t] == [("hlo.multiply", "model.py:3"), ("hlo.sine", "model.py:4")]


def test_reducer_inlines_loop_bodies_and_branches():
    import re

    from interop.debugging.reducer import crash_test, reduce_program

    def f(x, p):
        def body(i, c):
            return jax.lax.cond(p > 0, lambda v: jnp.sin(v) * 2.0, lambda v: jnp.tanh(v) + 1.0, c)

        return jax.lax.fori_loop(0, 5, body, x).sum()

    module = interop.import_jax(f, np.ones(8, np.float32), np.float32(1))
    # the false branch, inside the loop, calls a custom call nobody implements
    broken = parse_module(re.sub(r"hlo.tanh (%\d+)", r'hlo.custom_call "bad_target"(\1)', str(module), count=1))
    result = reduce_program(broken, crash_test())
    assert [op.name for op in result.module.walk()][2:] == ["hlo.custom_call", "func.return"]


def test_against_xla_a_value_xlas_probes_change_is_checked_alone(monkeypatch):
    # XLA computes x * y + z as one FMA; returning every value (the probes) makes x * y an output too, so XLA no
    # longer contracts it and the add's reference is the rounded sum -- a divergence that is not in the program.
    # find_divergence checks each value out of budget again, returned alone, and leaves such values out.
    from interop.debugging import divergence

    def f(x, y, z):
        return jnp.tanh(x * y + z)

    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
    report = interop.find_divergence(f, x, y, z, against="xla", max_ulp=0, rtol_magnitude=0)
    assert not report and report.outputs_agree and report.probe_effects == 2  # (the add and the tanh after it)
    assert "2 within budget when XLA returns them alone" in str(report)
    monkeypatch.setattr(divergence, "XLA_RECHECKS", 0)  # (what it reported before)
    report = interop.find_divergence(f, x, y, z, against="xla", max_ulp=0, rtol_magnitude=0)
    assert report.first.op == "hlo.add" and report.first.executed_op == "hlo_internal.fma"
