"""interop.difftest (interop.jax.difftest, interop.comparison): jax.jit against the NumPy executor, the comparison rules, and the pytest fixture."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import interop
import lowering
from interop.comparison import DiffMismatchError, compare_arrays, float_bits, is_float_dtype
from interop.jax.difftest import difftest
from xla_dialect.errors import XlaError

pytest_plugins = ["pytester"]


def mlp(params, x):
    """A small two-layer network returning a dict (a pytree of outputs)."""
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    return {"logits": logits, "label": jnp.argmax(logits, axis=-1)}


def test_pytree_function_matches(rng):
    params = {"w1": rng.standard_normal((8, 16), dtype=np.float32), "b1": np.zeros(16, np.float32),
              "w2": rng.standard_normal((16, 4), dtype=np.float32)}
    x = rng.standard_normal((3, 8), dtype=np.float32)
    report = difftest(mlp, params, x, atol=1e-5)
    assert report.ok, str(report)
    assert [o.name for o in report.outputs] == ["['label']", "['logits']"]  # jax.tree order
    label, logits = report.outputs
    assert (label.dtype, label.shape, label.budget, label.comparison.max_ulp) == ("int64", (3,), 0, None)
    assert (logits.dtype, logits.shape, logits.budget) == ("float32", (3, 4), 4)
    assert report.raise_if_mismatch() is report


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64, np.complex64, np.int8, np.uint32,
                                   np.bool_])
def test_dtypes_and_special_values(dtype):
    x = np.array([0.0, -0.0, 1.5, np.inf, -np.inf, np.nan]) if np.dtype(dtype).kind in "fcV" else np.arange(6)
    x = x.astype(dtype)
    report = difftest(lambda a: (a, jnp.where(a == a, a, a)), x)
    assert report.ok, str(report)
    assert report.outputs[0].comparison.max_abs == 0


def test_mismatch_is_reported_per_output(monkeypatch):
    real_compile = lowering.compile

    def perturbed(module, *a, **k):
        exe = real_compile(module, *a, **k)

        def run(*args):
            out = list(exe(*args))
            out[0] = np.nextafter(out[0], np.float32(np.inf))  # one ULP up, every element
            out[1] = out[1] + 1
            return tuple(out)

        return run

    monkeypatch.setattr(lowering, "compile", perturbed)
    x = np.linspace(1, 2, 5, dtype=np.float32)
    report = difftest(lambda a: (a * 2, jnp.int32(7)), x, max_ulp=0, rtol_magnitude=0)
    assert not report.ok and not report
    ulp, exact = report.outputs
    assert (ulp.ok, ulp.comparison.max_ulp, ulp.comparison.mismatches) == (False, 1, 5)
    assert ulp.comparison.max_rel == pytest.approx(2.0 ** -23)  # one ULP at 2.0, relative
    assert (exact.ok, exact.comparison.message) == (False, "1 of 1 elements differ; first: actual 8, expected 7")
    text = str(report)
    assert "MISMATCH" in text and "max ULP" in text and "5 of 5 elements differ; first at [0]" in text
    with pytest.raises(DiffMismatchError) as info:
        report.raise_if_mismatch()
    assert isinstance(info.value, XlaError) and "difftest <lambda>: MISMATCH" in str(info.value)
    assert difftest(lambda a: (a * 2, jnp.int32(7)), x, max_ulp=1).outputs[0].ok is True  # budget covers it


def test_ulp_budget_by_dtype_name():
    a = np.array([1.0], np.float32)
    b = np.nextafter(a, np.float32(2))
    assert compare_arrays(a, b, 0).ok is False
    assert compare_arrays(a, b, 1).ok is True
    assert compare_arrays(a, a + np.float32(1e-3), 0, atol=1e-2).ok is True  # absolute floor
    nan = np.array([np.nan], np.float32)
    assert compare_arrays(nan, nan, 0).ok is True
    assert compare_arrays(nan, a, 1000).ok is False
    assert compare_arrays(a, a.astype(np.float64)).message == "dtype float32 != expected float64"
    assert compare_arrays(a, np.ones((1, 1), np.float32)).message == "shape [1] != expected [1, 1]"


def test_dtype_helpers():
    assert is_float_dtype(ml_dtypes.bfloat16) and is_float_dtype(np.float16)
    assert not is_float_dtype(ml_dtypes.int4) and not is_float_dtype(np.complex64) and not is_float_dtype(np.int32)
    assert float_bits(ml_dtypes.float4_e2m1fn) == 4 and float_bits(np.float64) == 64


def test_errors_propagate_as_project_errors():
    # (approx_max_k lowers to the custom call ApproxTopK, which the executor has no kernel for; host callbacks,
    # the example here before, now run.)
    with pytest.raises(Exception) as info:
        difftest(lambda a: jax.lax.approx_max_k(a, 2)[0], np.arange(8, dtype=np.float32))
    assert isinstance(info.value, XlaError)


PLUGIN_TEST = """
import jax.numpy as jnp
import numpy as np
import lowering


def test_ok(difftest):
    report = difftest(lambda x: jnp.sin(x) * 2, np.linspace(0, 1, 7, dtype=np.float32))
    assert report.ok


def test_mismatch(difftest, monkeypatch):
    real = lowering.compile
    monkeypatch.setattr(lowering, "compile", lambda m, **k: (lambda *a: tuple(o + 1 for o in real(m, **k)(*a))))
    difftest(lambda x: x + 1, np.arange(3))
"""


def test_pytest_fixture_and_its_failure_report(pytester, monkeypatch):
    """The plugin's ``difftest`` fixture passes a program that agrees and fails one that does not (one inner
    pytest run for all of it: a subprocess that imports jax takes seconds). The failure's traceback ends in
    the test (not in raise_if_mismatch), the short summary line says which elements differ, and a user's
    pytest gets no --corpus (this project's own tests/conftest.py has it)."""
    import importlib.metadata

    installed = any(ep.value == "interop.tools.pytest_plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    pytester.makepyfile(test_t=PLUGIN_TEST)
    monkeypatch.setenv("COLUMNS", "160")  # pytest cuts each summary line at the terminal's width
    args = ["-p", "no:cacheprovider"] + ([] if installed else ["-p", "interop.tools.pytest_plugin"])
    result = pytester.runpytest_subprocess(*args, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*DiffMismatchError: difftest <lambda>: MISMATCH*", "*3 of 3 elements differ*"])
    out = result.stdout.str()
    assert "raise_if_mismatch" not in out, out
    assert "interop/comparison.py" not in out and "interop/jax/difftest.py" not in out, out
    result.stdout.fnmatch_lines(["FAILED test_t.py::test_mismatch - *DiffMismatchError: difftest <lambda>: MISMATCH "
                                 "(1 outputs): #0: 3 of 3 elements differ*"])
    help_text = pytester.runpytest_subprocess(*args, "--help").stdout.str()
    assert "--difftest-max-ulp" in help_text and "--corpus" not in help_text


def test_nan_against_a_number_is_reported_plainly():
    from interop.comparison import DiffReport, compare_output

    c = compare_arrays(np.float32([np.nan, 2.5, 3.0]), np.float32([1.0, 2.0, 3.0]), 4)
    assert not c.ok and c.nan_mismatches == 1 and c.finite_pairs == 2 and c.max_abs == 0.5
    assert "(1 NaN where the other has a number)" in c.message
    only_nan = compare_output(np.float32([np.nan]), np.float32([1.0]))
    assert only_nan.comparison.errors_text == ("-", "-") and only_nan.status == "MISMATCH (1 NaN)"
    assert only_nan.as_dict()["max_abs"] is None and only_nan.as_dict()["nan_mismatches"] == 1
    text = str(DiffReport("f", [only_nan]))
    row = next(line for line in text.splitlines() if line.strip().startswith("#0  "))
    assert row.split()[2:6] == ["MISMATCH", "(1", "NaN)", "-"] and " 0 " not in row, text
    assert compare_arrays(np.float32([np.nan, 1.0]), np.float32([np.nan, 1.0])).ok  # NaN meets NaN


# ----------------------------------------------------------------------------
# xla-run on StableHLO files, --check-xla
# ----------------------------------------------------------------------------


def _two_outputs(x, y):
    return jnp.tanh(x) @ y, jnp.argmax(x, 0)


@pytest.fixture
def program_files(tmp_path, rng):
    """The same JAX program as StableHLO text, serialized export and portable artifact, with its inputs."""
    # Positive values: no cancellation in the dot product, so a few ULPs is a fair budget.
    x = rng.uniform(0.1, 2, (3, 4)).astype(np.float32)
    y = rng.uniform(0.5, 1.5, (4, 2)).astype(np.float32)
    exported = jax.export.export(jax.jit(_two_outputs))(x, y)
    files = {"text": tmp_path / "p.mlir", "export": tmp_path / "p.bin", "artifact": tmp_path / "p.vhlo"}
    files["text"].write_text(jax.jit(_two_outputs).lower(x, y).as_text())
    files["export"].write_bytes(exported.serialize())
    files["artifact"].write_bytes(exported.mlir_module_serialized)
    np.savez(tmp_path / "in.npz", arg0=x, arg1=y)
    return files, tmp_path / "in.npz"


@pytest.mark.parametrize("kind", ["text", "export", "artifact"])
def test_xla_run_stablehlo_inputs_and_check_xla(program_files, kind, capsys):
    from interop.tools.cli import xla_run_main

    files, inputs = program_files
    assert xla_run_main([str(files[kind]), "--inputs", str(inputs), "--check-xla"]) == 0
    out = capsys.readouterr().out
    assert "result #0: float32[3, 2]" in out and "result #1: int64[4]" in out
    assert "XLA result #0: agrees (max ULP" in out and "XLA result #1: agrees (exact" in out


def test_xla_run_check_xla_reports_differences(program_files, monkeypatch, capsys):
    from interop.tools.cli import xla_run_main

    real = lowering.compile

    class OffByOne:
        """The executable, with every result incremented."""

        def __init__(self, module, **options):
            self.exe = real(module, **options)
            self.input_types = self.exe.input_types

        def __call__(self, *args):
            return tuple(o + 1 for o in self.exe(*args))

    monkeypatch.setattr(lowering, "compile", OffByOne)
    files, inputs = program_files
    # (--noise-samples 0: the float64 reference runs through the patched compile too, 1 off as well)
    assert xla_run_main([str(files["text"]), "--inputs", str(inputs), "--check-xla", "--noise-samples", "0"]) == 1
    out = capsys.readouterr().out
    assert "XLA result #0: DIFFERS" in out and "XLA result #1: DIFFERS (exact" in out


def test_xla_run_check_xla_uses_difftests_comparison_and_budgets(tmp_path, monkeypatch, capsys):
    """A sum in another order: many ULPs near zero, tiny against the result's magnitude. difftest calls it
    ok; --check-xla (the same comparison) agrees, and its two budgets are flags."""
    import interop.stablehlo.xla
    from interop.tools.cli import xla_run_main
    from interop.comparison import compare_output

    program = tmp_path / "prog.mlir"
    x = np.float32([1.0, 1e-6, -2.0])
    program.write_text(str(interop.import_jax(lambda a: a * 1, x)))
    np.savez(tmp_path / "in.npz", arg0=x)
    xla = np.float32([1.0, 1e-6 + 2e-7, -2.0])  # ~1.8M ULPs at 1e-6, 1e-7 of the magnitude 2
    monkeypatch.setattr(interop.stablehlo.xla, "run_xla", lambda module, *args: (xla,))
    assert compare_output(x, xla).ok and not compare_output(x, xla, rtol_magnitude=0).ok
    # (--noise-samples 0: this fake XLA's error against float64 would be read as its own rounding noise)
    run = [str(program), "--inputs", str(tmp_path / "in.npz"), "--check-xla", "--noise-samples", "0"]
    assert xla_run_main(run) == 0
    out = capsys.readouterr().out
    assert "XLA result #0: agrees (max ULP" in out and "budget 4 ULP or 3.8e-06*|out|" in out
    assert "1 elements within the magnitude bound only" in out
    assert xla_run_main(run + ["--rtol-magnitude", "0"]) == 1
    assert "XLA result #0: DIFFERS (max ULP" in capsys.readouterr().out
    assert xla_run_main(run + ["--rtol-magnitude", "0", "--max-ulp", "2000000"]) == 0
    assert xla_run_main(run + ["--rtol-magnitude", "1e-9"]) == 1
    capsys.readouterr()


def test_xla_run_json_report(program_files, tmp_path, monkeypatch, capsys):
    import json

    import interop.stablehlo.xla
    from interop.tools.cli import xla_run_main

    files, inputs = program_files
    report = tmp_path / "report.json"
    assert xla_run_main([str(files["text"]), "--inputs", str(inputs), "--check-xla", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["status"] == "ok" and data["error"] is None and data["program"] == str(files["text"])
    assert [(r["dtype"], r["shape"]) for r in data["results"]] == [("float32", [3, 2]), ("int64", [4])]
    assert data["results"][1]["min"] >= 0 and data["results"][0]["nan"] == 0
    first, second = data["check_xla"]["outputs"]
    assert data["check_xla"]["ok"] and first["ok"] and first["budget_ulp"] == 4 and first["rtol_magnitude"] > 0
    assert second["status"] == "exact" and second["max_ulp"] is None and second["budget_ulp"] is None

    real = interop.stablehlo.xla.run_xla
    monkeypatch.setattr(interop.stablehlo.xla, "run_xla", lambda m, *a: (real(m, *a)[0] + 1, np.full(4, np.nan)))
    assert xla_run_main([str(files["text"]), "--inputs", str(inputs), "--check-xla", "--json", str(report),
                         "--noise-samples", "0"]) == 1  # (a fake XLA, 1 off the float64 value: not noise)
    data = json.loads(report.read_text())
    assert data["status"] == "mismatch" and not data["check_xla"]["ok"]
    first, second = data["check_xla"]["outputs"]
    assert first["status"] == "MISMATCH" and first["mismatches"] == 6 and "6 of 6 elements differ" in first["message"]
    assert second["status"] == "MISMATCH" and "dtype" in second["message"]

    assert xla_run_main([str(tmp_path / "missing.mlir"), "--json", str(report)]) == 2
    data = json.loads(report.read_text())
    assert data["status"] == "error" and "missing.mlir" in data["error"] and data["results"] == []
    capsys.readouterr()


def test_xla_run_shape_polymorphic_program(tmp_path, capsys):
    from interop.tools.cli import xla_run_main

    (n,) = jax.export.symbolic_shape("n")
    exported = jax.export.export(jax.jit(lambda a: jnp.sin(a) * 2))(jax.ShapeDtypeStruct((n, 3), np.float32))
    path = tmp_path / "poly.mlir"
    path.write_text(exported.mlir_module())
    np.savez(tmp_path / "in.npz", arg0=np.ones((5, 3), np.float32))
    assert xla_run_main([str(path), "--inputs", str(tmp_path / "in.npz"), "--check-xla"]) == 0
    assert "result #0: float32[5, 3]" in capsys.readouterr().out
    assert xla_run_main([str(path)]) == 2  # no inputs: no shapes to refine to
    assert "dynamic shape" in capsys.readouterr().err


def test_xla_run_rejects_bad_input_files(tmp_path, capsys):
    from interop import import_jax
    from interop.tools.cli import xla_run_main

    program = tmp_path / "prog.mlir"
    program.write_text(str(import_jax(lambda x, y: x + y, np.ones(2, np.float32), np.ones(2, np.float32))))
    np.save(tmp_path / "one.npy", np.ones(2, np.float32))
    (tmp_path / "text.npz").write_text("not a zip")
    np.savez(tmp_path / "gap.npz", arg0=np.ones(2, np.float32), arg2=np.ones(2, np.float32))
    np.savez(tmp_path / "obj.npz", arg0=np.array([object(), 1], dtype=object), arg1=np.ones(2, np.float32))
    np.savez(tmp_path / "mixed.npz", arg0=np.ones(2, np.float32), y=np.ones(2, np.float32))
    cases = {"one.npy": "a .npy file", "text.npz": "not an .npz file", "gap.npz": "leave arg1 out",
             "obj.npz": "cannot be loaded", "mixed.npz": "mixes arrays", "missing.npz": "no such file"}
    for name, message in cases.items():
        assert xla_run_main([str(program), "--inputs", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (name, err)
    np.savez(tmp_path / "ok.npz", arg1=np.full(2, 2, np.float32), arg0=np.ones(2, np.float32))
    assert xla_run_main([str(program), "--inputs", str(tmp_path / "ok.npz")]) == 0
    assert "[3. 3.]" in capsys.readouterr().out


def test_xla_run_saves_results(tmp_path, capsys):
    from interop import import_jax
    from interop.tools.cli import xla_run_main

    program = tmp_path / "prog.mlir"
    program.write_text(str(import_jax(lambda x: (x * 2, x.sum()), np.arange(3, dtype=np.float32))))
    np.savez(tmp_path / "in.npz", arg0=np.arange(3, dtype=np.float32))
    out = tmp_path / "out.npz"
    assert xla_run_main([str(program), "--inputs", str(tmp_path / "in.npz"), "--output", str(out)]) == 0
    with np.load(out) as saved:
        assert sorted(saved.files) == ["result0", "result1"]
        assert saved["result0"].tolist() == [0, 2, 4] and saved["result1"] == 3


def test_command_line_tools_are_quiet_on_a_closed_pipe(tmp_path):
    import subprocess
    import sys

    program = tmp_path / "big.mlir"
    adds = "".join(f"  %v{i} = hlo.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n" for i in range(3000))
    program.write_text(f"func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {{\n{adds}  func.return %x : tensor<2xf32>\n}}\n")
    code = "import sys; from interop.tools.xla_opt import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(f"{sys.executable} -c '{code}' {program} | head -1", shell=True, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.startswith("builtin.module") and "Broken pipe" not in done.stderr and "Error" not in done.stderr


def test_list_passes_prints_whole_sentences():
    from interop.tools.xla_opt import describe_passes

    text = describe_passes()
    assert "layouts included)." in text  # cse's summary continues past its docstring's first line


# ----------------------------------------------------------------------------
# Budgets that mean something for real models; exactness; typed keys; sharding annotations
# ----------------------------------------------------------------------------


def test_magnitude_bound_accepts_sums_in_another_order_and_reports_it():
    """A layer-norm of a matmul: thousands of ULPs near zero, tiny against the output's magnitude."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 256)) / 8).astype(np.float32)

    def norm(x, w):
        y = x @ w
        return (y - y.mean(-1, keepdims=True)) / jnp.sqrt(y.var(-1, keepdims=True) + 1e-5)

    strict = interop.difftest(norm, x, w, rtol_magnitude=0)
    report = interop.difftest(norm, x, w)
    assert report.ok
    if not strict.ok:  # (on a machine where the orders happen to agree both pass)
        assert "ok (magnitude)" in str(report)
        assert report.outputs[0].comparison.by_magnitude > 0
    # A real error is still caught: the magnitude bound is 64 roundings of the output's size.
    c = compare_arrays(np.float32([1.0, 2.0]), np.float32([1.0, 2.001]), 4, rtol_magnitude=64 * 2.0 ** -24)
    assert not c.ok


def test_exact_mode_and_exact_flags():
    import jax.numpy as jnp

    x = np.linspace(-3, 3, 50, dtype=np.float32)
    report = interop.difftest(lambda x: (jnp.sin(x) * 2, x + 1), x, exact=True)
    assert report.ok and report.exact == [True, True]
    assert "exact" in str(report)


def test_typed_prng_keys_as_arguments_and_results():
    import jax

    def f(key, x):
        k1, k2 = jax.random.split(key)
        return x + jax.random.normal(k1, x.shape), k2

    report = interop.difftest(f, jax.random.key(0), np.ones(3, np.float32))
    assert report.ok, str(report)
    assert report.outputs[1].dtype == "uint32" and report.exact[1]


def test_shardy_annotations_import_and_run_on_one_device():
    """sdy.sharding_constraint (typed keys, with_sharding_constraint) and shard_map on one device."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))

    def g(x):
        y = jax.lax.with_sharding_constraint(x * 2, NamedSharding(mesh, P("x")))
        return jax.shard_map(lambda a: a + 1, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(y)

    x = np.arange(8, dtype=np.float32)
    assert interop.difftest(g, x, exact=True).ok
    module = interop.import_jax(g, x)
    calls = [op for op in module.walk() if op.name == "hlo.custom_call"]
    assert calls and calls[0].call_target_name.data == "Sharding"
    assert "sdy.sharding" in calls[0].attributes["hlo.sharding"].data
    text = interop.export_hlo(module)
    assert 'custom_call_target="Sharding"' in text
    assert interop.export_hlo(interop.import_hlo(text)) == text


def test_argument_shardings_are_kept_and_ignored_on_one_device():
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    s = NamedSharding(mesh, P("x"))
    f = jax.jit(lambda x: jnp.sin(x) * 2, in_shardings=s, out_shardings=s)
    x = np.arange(8, dtype=np.float32)
    module = interop.import_jax(f, x)
    main = next(op for op in module.ops if op.sym_name.data == "main")
    assert "sdy.sharding" in main.arg_attrs.data[0].data["hlo.sharding"].data
    assert "sdy.sharding" in main.res_attrs.data[0].data["hlo.sharding"].data
    assert interop.difftest(f, x, exact=True).ok


def test_shard_map_over_two_devices_imports_and_is_reported_at_compile():
    """Shardy programs for several devices never fail to import; the executor names what it cannot run."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import jax, numpy as np
        from jax.sharding import PartitionSpec as P
        import interop, lowering
        from xla_dialect.errors import XlaError
        mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        f = jax.jit(jax.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        module = interop.import_jax(f, np.arange(8, dtype=np.float32))
        assert any(op.name == "sdy.manual_computation" for op in module.walk())
        try:
            lowering.compile(module)
        except XlaError as e:
            print("REPORTED", e)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "REPORTED" in run.stdout and "sdy.manual_computation" in run.stdout


def test_gspmd_sharding_custom_call_of_the_older_partitioner():
    """jax_use_shardy_partitioner=False writes XLA's Sharding custom call: the identity here."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        f = jax.jit(lambda x: jax.lax.with_sharding_constraint(x * 2, NamedSharding(mesh, P("x"))))
        x = np.arange(8, dtype=np.float32)
        assert "custom_call @Sharding" in f.lower(x).as_text()
        assert interop.difftest(f, x, exact=True).ok
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)
