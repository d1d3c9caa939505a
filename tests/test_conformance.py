"""The conformance runner: check semantics, check-op rewriting, discovery, isolation, and the corpus itself.

The corpus tests read ``--corpus PATH`` (default ``../shared/corpus`` next to
the repository). Without a corpus they are skipped, except under ``CI=true``
where a missing corpus is a failure. ``tests/conformance_threshold.json`` holds
the number of programs that must pass (raise it whenever the figure improves).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import textwrap
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from interop.tools import conformance as conf
from interop.comparison import ULP_INFINITE, ulp_distance

REPO = Path(__file__).resolve().parents[1]
THRESHOLD_FILE = REPO / "tests" / "conformance_threshold.json"


# ----------------------------------------------------------------------------
# ULP distance and check semantics
# ----------------------------------------------------------------------------


def test_ulp_distance_rules():
    f32 = np.float32
    one = f32(1)
    a = np.array([0.0, -0.0, 1.0, np.nan, np.inf, 1.0, -np.inf, np.inf, np.nan], f32)
    b = np.array([-0.0, 0.0, np.nextafter(one, f32(2)), -np.nan, np.inf, -1.0, np.inf, f32(3.4e38), 1.0], f32)
    d = ulp_distance(a, b)
    assert d.dtype == np.uint64
    # +0/-0: 0; neighbours: 1; NaN/NaN (any sign): 0; equal infinities: 0;
    # across zero: the sum of both magnitudes' ordinals; other non-finite pairs: "infinite".
    assert d[:5].tolist() == [0, 0, 1, 0, 0]
    assert int(d[5]) == 2 * int(one.view(np.uint32))
    assert d[6:].tolist() == [ULP_INFINITE] * 3


def test_ulp_distance_smallest_subnormals_and_f64_extremes():
    tiny = np.array([np.finfo(np.float64).smallest_subnormal], np.float64)
    assert ulp_distance(tiny, -tiny).tolist() == [2]
    big = np.array([np.finfo(np.float64).max], np.float64)
    assert ulp_distance(big, -big).tolist() == [2 * int(big.view(np.uint64)[0])]  # no int64 overflow


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                   ml_dtypes.float4_e2m1fn])
def test_ulp_distance_small_floats_counts_representable_steps(dtype):
    # Adjacent values of the type are 1 apart; sub-byte floats sit in the low bits of a byte.
    values = np.array([0.5, 1.0, 1.5], dtype)
    steps = ulp_distance(values[1:], values[:-1])
    expected = [int(np.searchsorted(_all_finite(dtype), float(values[i + 1]))
                    - np.searchsorted(_all_finite(dtype), float(values[i]))) for i in range(2)]
    assert steps.tolist() == expected
    assert ulp_distance(values, -values).tolist() == [2 * int(np.searchsorted(_all_finite(dtype), float(v))
                                                              - np.searchsorted(_all_finite(dtype), 0.0))
                                                      for v in values]


def _all_finite(dtype) -> np.ndarray:
    """Every distinct finite value of a small float type, sorted (zero once)."""
    bits = ml_dtypes.finfo(dtype).bits if dtype not in (np.float16,) else 16
    raw = np.arange(1 << bits, dtype=np.uint16 if bits > 8 else np.uint8)
    values = raw.view(dtype) if bits in (8, 16) else raw.astype(np.uint8).view(dtype)
    with np.errstate(invalid="ignore"):  # NaN bit patterns
        finite = values.astype(np.float64)
    finite = finite[np.isfinite(finite)]
    return np.unique(finite)


def test_ulp_distance_complex_takes_the_larger_part():
    a = np.array([1 + 1j], np.complex64)
    b = np.array([np.nextafter(np.float32(1), np.float32(2)) + 1j], np.complex64)
    c = np.array([1 + 1j * np.nextafter(np.nextafter(np.float32(1), np.float32(2)), np.float32(2))], np.complex64)
    assert ulp_distance(a, b).tolist() == [1]
    assert ulp_distance(a, c).tolist() == [2]


def test_check_close_bounds():
    one = np.float32(1)
    a = np.array([1.0, 2.0], np.float32)
    b = a.copy()
    b[0] = np.nextafter(np.nextafter(one, np.float32(2)), np.float32(2))  # 2 ULP away
    assert conf.check_close(a, b, max_ulp=3) is None
    assert conf.check_close(a, b, max_ulp=2) is None
    message = conf.check_close(a, b, max_ulp=1)
    assert message and "1 of 2 elements" in message and "max 2" in message
    # min_ulp_difference: the identical element is now the failure
    assert "outside [1, 3]" in conf.check_close(a, b, max_ulp=3, min_ulp=1)
    nan = np.array([np.nan], np.float32)
    assert conf.check_close(nan, nan.copy(), 0) is None
    assert "inf" in conf.check_close(np.array([np.inf], np.float32), np.array([3e38], np.float32), 3)
    assert "shape" in conf.check_close(a, a[:1], 3)
    with pytest.raises(conf.ConformanceError):
        conf.check_close(np.array([1]), np.array([1]), 3)


def test_check_eq_is_exact_and_nan_unequal():
    assert conf.check_eq(np.array([0.0]), np.array([-0.0])) is None
    assert conf.check_eq(np.array([np.nan]), np.array([np.nan])) is not None
    assert conf.check_eq(np.array([1, 2], np.int8), np.array([1, 3], np.int8)).startswith("1 of 2 elements differ")
    assert conf.check_eq(np.array([1], ml_dtypes.int4), np.array([1], ml_dtypes.int4)) is None
    assert conf.check_eq(np.array([1], ml_dtypes.int4), np.array([-1], ml_dtypes.int4)) is not None
    assert "dtype" in conf.check_eq(np.array([1], np.int32), np.array([1], np.int64))
    assert conf.check_eq(np.array([1 + 2j]), np.array([1 + 2j])) is None


def test_check_almost_eq_follows_the_interpreter():
    check = conf.check_almost_eq
    f = np.float64
    assert check(np.array([5.0], f), np.array([5.0001], f)) is None  # default tolerance 1e-4
    assert check(np.array([5.0], f), np.array([5.001], f)) is not None
    assert check(np.array([5.0], f), np.array([5.001], f), tolerance=0.1) is None
    assert check(np.array([np.nan], f), np.array([np.nan], f)) is None
    assert check(np.array([np.nan], f), np.array([1.0], f)) is not None
    assert check(np.array([np.inf], f), np.array([np.inf], f)) is None
    assert check(np.array([np.inf], f), np.array([-np.inf], f)) is not None
    # finite values of either sign are close within the tolerance (StableHLO dropped its sign condition in
    # February 2026: triangular_solve's spec example expects 0 where the solve gives -6.7e-17)
    assert check(np.array([0.0], f), np.array([1e-5], f)) is None
    assert check(np.array([-0.0], f), np.array([-1e-5], f)) is None
    assert check(np.array([0.0], f), np.array([-1e-5], f)) is None
    assert check(np.array([1e-5], f), np.array([-1e-5], f)) is None
    assert check(np.array([1e-3], f), np.array([-1e-3], f)) is not None
    assert check(np.array([0.0], f), np.array([-0.0], f)) is None  # equal
    assert check(np.array([1 + 1j]), np.array([1 + 1.00001j])) is None
    assert check(np.array([1 + 1j]), np.array([1 + 1.1j])) is not None
    assert check(np.array([3], np.int32), np.array([3], np.int32)) is None
    assert check(np.array([3], np.int32), np.array([4], np.int32)) is not None


def test_check_abs_close_for_the_custom_call_forms():
    check = conf.check_abs_close
    assert check(np.array([1.0, np.nan, np.inf]), np.array([1.0009, np.nan, np.inf]), 1e-3) is None
    assert check(np.array([1.0]), np.array([1.002]), 1e-3) is not None
    assert check(np.array([1e-5]), np.array([-1e-5]), 1e-3) is None  # plain absolute difference
    assert check(np.array([np.inf]), np.array([-np.inf]), 1e-3) is not None
    assert conf.CHECKS[("custom_call", "eq")].evaluate(np.array([1.0]), np.array([1.00005]), {}) is None
    assert conf.CHECKS[("custom_call", "expect_close")].evaluate(
        np.array([1.0], np.float32), np.array([1.0000004], np.float32), {}) is None  # 3 ULP


# ----------------------------------------------------------------------------
# Check ops: text rewriting and extraction
# ----------------------------------------------------------------------------


def test_normalize_custom_syntax_and_properties():
    text = textwrap.dedent("""\
        func.func @f() {
          check.expect_eq_const %r#0, dense<[[1, 2],
                                            [3, 4]]> : tensor<2x2xi64>
          check.expect_almost_eq %a, %b, tolerance = 0.1 : tensor<f64>
          check.expect_close %a, %b, max_ulp_difference = 3, min_ulp_difference = 1 : tensor<f16>, tensor<f16>
          check.expect_almost_eq_const %a, dense<5.0> : tensor<f64> {tolerance = 1.0e-3 : f64}
          "check.expect_eq_const"(%c) <{value = dense<[0, -1]> : tensor<2xi2>}> : (tensor<2xi2>) -> ()
          check.expect_eq %a, %b : tensor<3xi64>
          func.return
        }
        """)
    out = conf.normalize_checks(text)
    assert out.count("\n") == text.count("\n")  # line numbers kept
    lines = out.splitlines()
    assert lines[1].strip().startswith('%__conformance_expected0 = "stablehlo.constant"() {value = dense<[[1, 2],')
    assert '"check.expect_eq"(%r#0, %__conformance_expected0) : (tensor<2x2xi64>, tensor<2x2xi64>) -> ()' in lines[1]
    assert lines[2] == ""
    assert lines[3].strip() == '"check.expect_almost_eq"(%a, %b) {tolerance = 0.1} : (tensor<f64>, tensor<f64>) -> ()'
    assert lines[4].strip() == ('"check.expect_close"(%a, %b) {max_ulp_difference = 3, min_ulp_difference = 1} : '
                                '(tensor<f16>, tensor<f16>) -> ()')
    assert '"check.expect_almost_eq"(%a, %__conformance_expected3) {tolerance = 1.0e-3 : f64}' in lines[5]
    assert '{value = dense<[0, -1]> : tensor<2xi2>} : () -> tensor<2xi2>' in lines[6]
    assert lines[7].strip() == '"check.expect_eq"(%a, %b) : (tensor<3xi64>, tensor<3xi64>) -> ()'


def _program(body: str, name: str = "t", mode: str = "run") -> conf.Program:
    return conf.Program("mem.mlir", name, mode, textwrap.dedent(body), family="t")


def test_run_program_passes_and_fails_with_located_messages():
    ok = conf.run_program(_program("""\
        func.func @t() {
          %a = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
          %b = stablehlo.add %a, %a : tensor<2xf32>
          check.expect_almost_eq_const %b, dense<[2.0, 4.0]> : tensor<2xf32>
          check.expect_eq_const %b, dense<[2.0, 4.0]> : tensor<2xf32>
          func.return
        }
        """))
    assert (ok.status, ok.message) == ("passed", "2 checks")
    bad = conf.run_program(_program("""\
        func.func @t() {
          %a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
          %b = stablehlo.add %a, %a : tensor<2xi32>
          check.expect_eq_const %b, dense<[2, 5]> : tensor<2xi32>
          func.return
        }
        """))
    assert bad.status == "failed"
    assert bad.message.startswith("check.expect_eq at line 4: 1 of 2 elements differ; first at [1]: actual")


def test_custom_call_checks_and_check_eq_verdict():
    result = conf.run_program(_program("""\
        module {
          func.func public @main() -> (tensor<2xf32>, tensor<i1>) {
            %0 = call @inputs() : () -> tensor<2xf32>
            %1 = stablehlo.exponential %0 : tensor<2xf32>
            %2 = stablehlo.constant dense<[2.71828175, 7.3890562]> : tensor<2xf32>
            stablehlo.custom_call @check.expect_close(%1, %2) {has_side_effect = true} : (tensor<2xf32>, tensor<2xf32>) -> ()
            stablehlo.custom_call @check.expect_almost_eq(%1, %2) {has_side_effect = true} : (tensor<2xf32>, tensor<2xf32>) -> ()
            %3 = stablehlo.custom_call @check.eq(%1, %2) : (tensor<2xf32>, tensor<2xf32>) -> tensor<i1>
            return %1, %3 : tensor<2xf32>, tensor<i1>
          }
          func.func private @inputs() -> tensor<2xf32> {
            %c = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
            return %c : tensor<2xf32>
          }
        }
        """))
    assert (result.status, result.message) == ("passed", "3 checks")


def test_run_parallel_runs_the_device_grid():
    result = conf.run_program(_program("""\
        module @m {
          func.func @ids() -> (tensor<ui32>, tensor<ui32>) {
            %r = stablehlo.replica_id : tensor<ui32>
            %p = stablehlo.partition_id : tensor<ui32>
            return %r, %p : tensor<ui32>, tensor<ui32>
          }
          func.func @main() {
            %results:8 = "interpreter.run_parallel"() {programs=[[@ids, @ids], [@ids, @ids]]}
                : () -> (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>,
                         tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>)
            check.expect_eq_const %results#4, dense<1> : tensor<ui32>
            check.expect_eq_const %results#5, dense<0> : tensor<ui32>
            check.expect_eq_const %results#7, dense<1> : tensor<ui32>
            func.return
          }
        }
        """))
    assert (result.status, result.message) == ("passed", "3 checks")


def test_discovery_modes(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "abs_float32_20_20.mlir").write_text("// RUN-DISABLED(inaccurate) stablehlo-opt -inline %s | "
                                                     "stablehlo-translate --interpret\nmodule {}\n")
    (tmp_path / "sub" / "split.mlir").write_text(textwrap.dedent("""\
        // RUN: stablehlo-translate --interpret -split-input-file %s

        func.func @first() {
          func.return
        }

        // -----

        func.func @second() {
          func.return
        }
        """))
    (tmp_path / "errors.mlir").write_text("// RUN: not stablehlo-translate --interpret %s 2>&1 | FileCheck %s\n")
    (tmp_path / "poly_dynamic.mlir").write_text("// RUN: stablehlo-translate --serialize %s\nmodule {}\n")
    (tmp_path / "args.mlir").write_text(textwrap.dedent("""\
        // RUN: stablehlo-translate %s --interpret --args="[dense<1> : tensor<2xi32>, dense<2> : tensor<2xi32>]" | FileCheck %s
        func.func @main(%arg0: tensor<2xi32>, %arg1: tensor<2xi32>) -> tensor<2xi32> {
          %0 = stablehlo.add %arg0, %arg1 : tensor<2xi32>
          return %0 : tensor<2xi32>
        }
        // CHECK:      tensor<2xi32> {
        // CHECK-NEXT:   [3, 3]
        // CHECK-NEXT: }
        """))
    programs = {p.name: p for p in conf.discover([str(tmp_path)])}
    assert {n: p.mode for n, p in programs.items()} == {
        "abs_float32_20_20": "disabled", "args": "run", "errors": "skip", "poly_dynamic": "roundtrip",
        "split[0] first": "run", "split[1] second": "run"}
    assert programs["abs_float32_20_20"].message == "RUN-DISABLED upstream (inaccurate)"
    assert programs["split[1] second"].line == 6  # newlines before the chunk
    assert programs["args"].expected == ["dense<[3, 3]> : tensor<2xi32>"]
    assert conf.run_program(programs["args"]).status == "passed"
    assert conf.family_of("testdata/abs_float32_20_20.mlir") == "abs"
    assert conf.family_of("gather_shape__10__6__idxs.mlir") == "gather"
    assert conf.family_of("interpret/all_gather.mlir") == "all_gather"


# ----------------------------------------------------------------------------
# Isolation: crash, hang and memory
# ----------------------------------------------------------------------------

HANG = """\
func.func @main() {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %r = stablehlo.while(%i = %c0) : tensor<i64>
   cond {
    %t = stablehlo.constant dense<true> : tensor<i1>
    stablehlo.return %t : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i64>
    %n = stablehlo.add %i, %one : tensor<i64>
    stablehlo.return %n : tensor<i64>
  }
  check.expect_eq_const %r, dense<0> : tensor<i64>
  func.return
}
"""

HOG = """\
func.func @main() {
  %c = stablehlo.constant dense<1.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<32768x32768xf32>
  %s = stablehlo.add %b, %b : tensor<32768x32768xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %t = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [0, 1]
      : (tensor<32768x32768xf32>, tensor<f32>) -> tensor<f32>
  check.expect_eq_const %t, dense<2.0> : tensor<f32>
  func.return
}
"""

FINE = """\
func.func @main() {
  %c = stablehlo.constant dense<2> : tensor<i32>
  check.expect_eq_const %c, dense<2> : tensor<i32>
  func.return
}
"""


def crash_on_request(program: conf.Program) -> conf.Result:
    """A runner that kills its worker with SIGSEGV for programs named 'crash'."""
    if program.name == "crash":
        import ctypes

        ctypes.string_at(0)  # segfault
    return conf.run_program(program)


def test_memory_and_crash_are_contained():
    """No timeout: the verdicts cannot depend on the machine's load or a cold numba cache. The hog's 4 GiB
    array is over the worker's 1.5 GiB address space, so the executor's limit (which follows RLIMIT_AS)
    rejects it when the program is lowered: nothing is compiled or allocated first."""
    programs = [_program(FINE, "before"), _program(HOG, "hog"), _program(FINE, "crash"), _program(FINE, "after")]
    seen = []
    results = conf.run_programs(programs, jobs=2, timeout=None, memory_mb=1536, progress=seen.append,
                                runner=crash_on_request)
    by_name = {r.name: r for r in results}
    assert [r.name for r in results] == ["before", "hog", "crash", "after"]
    assert len(seen) == 4
    assert by_name["before"].status == by_name["after"].status == "passed"
    hog = by_name["hog"]
    assert hog.status == "error" and hog.message.startswith("compile: out of memory"), hog.message
    assert "needs 4,294,967,296 bytes, more than the limit of" in hog.message
    assert by_name["crash"].status == "error" and by_name["crash"].message == "worker crashed (SIGSEGV)"


def test_hang_is_contained():
    """The hang never finishes, so it is a timeout whatever the timeout; the program after it runs in a fresh
    worker. The timeout starts when a worker takes its program (not while a new worker imports JAX), and the
    program after the hang is trivial (well under a second on a loaded machine): 10 s is a wide margin."""
    results = conf.run_programs([_program(HANG, "hang"), _program(FINE, "after")], jobs=1, timeout=10,
                                memory_mb=1536)
    assert [(r.name, r.status, r.message) for r in results] == [
        ("hang", "error", "timeout after 10 s"), ("after", "passed", "1 checks")]


def test_cli_json_report_and_exit_status(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "good.mlir").write_text("// RUN: stablehlo-translate --interpret -split-input-file %s\n" + FINE)
    (folder / "bad.mlir").write_text("// RUN: stablehlo-translate --interpret %s\n"
                                     + FINE.replace("dense<2> : tensor<i32>\n  func", "dense<3> : tensor<i32>\n  func"))
    (folder / "off.mlir").write_text("// RUN-DISABLED(no interpreter support): stablehlo-translate --interpret %s\n")
    report = tmp_path / "report.json"
    status = conf.main([str(folder), "--jobs", "1", "--json", str(report), "--quiet"])
    assert status == 1  # bad.mlir fails
    data = json.loads(report.read_text())
    assert {k: data["summary"][k] for k in ("total", "passed", "failed", "error", "skipped", "disabled")} == {
        "total": 3, "passed": 1, "failed": 1, "error": 0, "skipped": 0, "disabled": 1}
    assert data["summary"]["pass_rate"] == 0.5
    rows = {r["name"]: r for r in data["results"]}
    assert set(rows["bad"]) >= {"path", "name", "status", "message", "seconds"}
    assert rows["bad"]["status"] == "failed" and "actual 2" in rows["bad"]["message"]
    assert rows["off"]["status"] == "disabled"
    assert "1 of 2 enabled programs passed" in capsys.readouterr().out
    assert conf.main([str(folder), "--jobs", "0", "--quiet", "--min-passed", "1"]) == 0
    assert conf.main([str(tmp_path / "missing")]) == 2


def _corpus_of_fine_programs(folder, names):
    folder.mkdir()
    for name in names:
        (folder / f"{name}.mlir").write_text("// RUN: stablehlo-translate --interpret %s\n" + FINE)
    return folder


def test_ctrl_c_prints_the_partial_summary_and_writes_the_report(tmp_path, monkeypatch, capsys):
    folder = _corpus_of_fine_programs(tmp_path / "corpus", ["a", "b", "c", "d"])
    real = conf.run_program

    def interrupted_at_c(program):
        if program.path.endswith("c.mlir"):
            raise KeyboardInterrupt
        return real(program)

    monkeypatch.setattr(conf.workers, "run_program", interrupted_at_c)  # where run_programs looks it up
    report = tmp_path / "report.json"
    assert conf.main([str(folder), "--jobs", "0", "--json", str(report), "--quiet"]) == 130
    out, err = capsys.readouterr()
    assert "interrupted (Ctrl-C): 2 of 4 programs finished" in err and "Traceback" not in err
    assert "2 of 2 enabled programs passed" in out
    data = json.loads(report.read_text())
    assert data["summary"]["interrupted"] and data["summary"]["programs"] == 4
    assert [r["name"] for r in data["results"]] == ["a", "b"] and data["summary"]["passed"] == 2


def test_ctrl_c_with_worker_processes(tmp_path):
    """A real SIGINT to the command (and its workers: the process group) while a worker runs a hanging
    program: the finished program is reported, no traceback."""
    import signal
    import subprocess
    import sys

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.mlir").write_text("// RUN: stablehlo-translate --interpret %s\n" + FINE)
    (folder / "b.mlir").write_text("// RUN: stablehlo-translate --interpret %s\n" + HANG)
    report = tmp_path / "report.json"
    process = subprocess.Popen([sys.executable, "-c", "import sys; from interop.tools.conformance import main; "
                                "sys.exit(main(sys.argv[1:]))", str(folder), "--jobs", "1", "--timeout", "120",
                                "--json", str(report)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = process.stderr.readline()  # the progress line after the first program
        assert "1/2" in first, first
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "1 of 2 programs finished" in err and "1 of 1 enabled programs passed" in out
    assert json.loads(report.read_text())["summary"]["interrupted"]


def busy_until_killed(program: conf.Program) -> conf.Result:
    """A runner that says it has started (a file next to ``program.path``), then never ends: in the executor
    (``HANG``), or for a program named 'gil' in C code that never lets another thread of its process run."""
    Path(program.path).with_suffix(".started").touch()
    if program.name == "gil":
        sum(range(1 << 62))
    return conf.run_program(program)


def _process_table() -> dict[int, tuple[int, str, str]]:
    """Every process: pid -> (parent pid, state, start time), from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            table[int(entry)] = (int(fields[1]), fields[0], fields[19])
    return table


def _descendants(root: int) -> dict[int, str]:
    """The processes below ``root``: pid -> start time (which tells a pid used again apart)."""
    table = _process_table()
    found: dict[int, str] = {}
    parents = [root]
    while parents:
        parent = parents.pop()
        for pid, (ppid, _, start) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                parents.append(pid)
    return found


def _running(processes: dict[int, str]) -> list[int]:
    table = _process_table()
    return [pid for pid, start in processes.items()
            if pid in table and table[pid][2] == start and table[pid][1] not in "ZX"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from Linux's /proc")
def test_no_worker_outlives_a_killed_runner(tmp_path):
    """The runner is SIGKILLed (no cleanup: the workers are not stopped) while both its workers are busy, one
    in a hanging program, one in C code holding the GIL (as in a numba compilation or a big kernel): the
    forkserver, the workers and multiprocessing's resource tracker all end within seconds. Before, they ran
    on as orphans (a hanging program's worker was seen spinning for hours)."""
    import signal
    import subprocess

    programs = [conf.Program(str(tmp_path / f"{name}.mlir"), name, "run", textwrap.dedent(HANG), family="t")
                for name in ("hang", "gil")]
    code = ("import pickle, sys; from interop.tools import conformance as conf; from test_conformance import "
            "busy_until_killed; conf.run_programs(pickle.loads(sys.stdin.buffer.read()), jobs=2, timeout=None, "
            "runner=busy_until_killed)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    runner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, env=env, cwd=REPO,
                              start_new_session=True)
    runner.stdin.write(pickle.dumps(programs))
    runner.stdin.close()
    processes: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120  # (starting the workers is slow on a loaded machine)
        while not all(Path(p.path).with_suffix(".started").exists() for p in programs):
            assert runner.poll() is None and time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
        processes = _descendants(runner.pid)
        assert len(processes) >= 3  # the forkserver and the two workers (and the resource tracker)
        runner.kill()
        runner.wait()
        deadline = time.monotonic() + 20
        while _running(processes) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(processes), {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:100]
                                         for pid in _running(processes)}
    finally:
        runner.kill()
        for pid in _running(processes):
            os.kill(pid, signal.SIGKILL)


def test_filter_matching_nothing_is_an_error(tmp_path, capsys):
    folder = _corpus_of_fine_programs(tmp_path / "corpus", ["a", "b"])
    assert conf.main([str(folder), "--jobs", "0", "--filter", "no_such_op"]) == 2
    captured = capsys.readouterr()
    assert "--filter 'no_such_op' matches none of the 2 programs" in captured.err and "100" not in captured.out
    assert conf.main([str(folder), "--jobs", "0", "--filter", "("]) == 2
    assert "not a regular expression" in capsys.readouterr().err
    assert conf.main([str(folder), "--jobs", "0", "--filter", "a\\.mlir", "--quiet"]) == 0
    assert "1 of 1 enabled programs passed" in capsys.readouterr().out


def test_progress_without_a_terminal_prints_a_line_per_tenth_or_per_interval(monkeypatch):
    import io
    import types

    monkeypatch.delenv("CI", raising=False)
    result = conf.Result("p.mlir", "t", "passed", "", 0.0, "t")
    stream = io.StringIO()
    progress = conf.Progress(1751, stream)
    for _ in range(1751):
        progress(result)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("[###") and "1751/1751 passed 1751" in lines[-1]

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(conf.report, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    stream = io.StringIO()
    progress = conf.Progress(1000, stream, interval=10.0)
    for i in range(50):  # slow programs: 3 s each, fewer than a tenth
        clock.now += 3.0
        progress(result)
    assert len(stream.getvalue().splitlines()) == 50 * 3 // 12  # one line per 12 s (10 s, rounded to 3 s steps)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("CI", "true")  # a CI log with a pseudo-terminal: lines, not carriage returns
    stream = Terminal()
    progress = conf.Progress(100, stream)
    for _ in range(100):
        progress(result)
    assert "\r" not in stream.getvalue() and len(stream.getvalue().splitlines()) == 10


# ----------------------------------------------------------------------------
# The corpus
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(request) -> Path:
    """The corpus folder (``--corpus``, default ``../shared/corpus``); skip (or fail under CI) when absent."""
    option = request.config.getoption("--corpus", default=None)
    path = Path(option) if option else REPO.parent / "shared" / "corpus"
    if not path.is_dir():
        message = f"StableHLO corpus not found at {path} (give --corpus PATH)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def _threshold() -> dict:
    return json.loads(THRESHOLD_FILE.read_text())


def _failures(results) -> str:
    return "\n".join(f"{r.status} {r.path} {r.name}: {r.message[:200]}" for r in results
                     if r.status in ("failed", "error"))


SAMPLE_TIMEOUT = 300
"""Seconds per sample program: the timeout catches hangs, and a worker process whose numba cache is cold compiles
the small-dot kernels on its first dot (then 37-43 s per element type, now 1-6 s per order: docs/performance.md): in a cold CI run on
two test workers (four processes on two CPUs), dot_general_bfloat16_4_3_float32_3_6 and
dot_general_float16_4_3_float64_3_6 timed out at 60 s."""


def test_corpus_sample(corpus):
    """Every ``every``-th program of the corpus (fast); at least the recorded number must pass."""
    threshold = _threshold()["sample"]
    programs = conf.discover([str(corpus)])[::threshold["every"]]
    results = conf.run_programs(programs, jobs=2, timeout=SAMPLE_TIMEOUT)
    passed = sum(r.status == "passed" for r in results)
    assert passed >= threshold["passed"], f"{passed} of {len(results)} sample programs passed\n{_failures(results)}"


@pytest.mark.slow
def test_whole_corpus(corpus):
    """The whole corpus; at least the recorded number of programs must pass."""
    threshold = _threshold()["corpus"]
    results = conf.run_programs(conf.discover([str(corpus)]), jobs=os.cpu_count() or 1, timeout=120)
    passed = sum(r.status == "passed" for r in results)
    assert passed >= threshold["passed"], f"{passed} programs passed\n{_failures(results)}"


def test_corpus_sample_through_hlo_text(corpus):
    """The sample of test_corpus_sample translated to XLA HLO text (jaxlib), imported with import_hlo,
    printed back, run (the whole corpus this way is test_whole_corpus_through_hlo_text, marked slow)."""
    threshold = _threshold()["via_hlo_sample"]
    programs = conf.discover([str(corpus)])[::threshold["every"]]
    results = conf.run_programs(programs, jobs=2, timeout=SAMPLE_TIMEOUT, runner=conf.run_program_through_hlo)
    passed = sum(r.status == "passed" for r in results)
    assert passed >= threshold["passed"], (f"{passed} of {len(results)} sample programs passed through HLO text\n"
                                           f"{_failures(results)}")


@pytest.mark.slow
def test_whole_corpus_through_hlo_text(corpus):
    """Every program translated to XLA HLO text (jaxlib), imported with import_hlo, printed back, run."""
    threshold = _threshold()["via_hlo"]
    results = conf.run_programs(conf.discover([str(corpus)]), jobs=2, timeout=60,
                                runner=conf.run_program_through_hlo)
    passed = sum(r.status == "passed" for r in results)
    assert passed >= threshold["passed"], f"{passed} programs passed through HLO text\n{_failures(results)}"


def test_causes_group_failures():
    results = [conf.Result("a.mlir", "a", "error", "compile: hlo.cbrt: operand has element type complex<f64>", 0, "cbrt"),
               conf.Result("b.mlir", "b", "error", "compile: hlo.cbrt: operand has element type complex<f32>", 0, "cbrt"),
               conf.Result("c.mlir", "c", "failed", "custom_call @check.expect_close at line 3: 1 of 2 ...", 0, "dot"),
               conf.Result("d.mlir", "d", "error", "timeout after 5 s", 0, "x"),
               conf.Result("e.mlir", "e", "passed", "", 0, "x")]
    assert [conf.cause_of(r) for r in results[:4]] == [
        "compile: hlo.cbrt", "compile: hlo.cbrt", "dot: custom_call @check.expect_close mismatch", "run: timeout after N s"]
    table = conf.causes_table(results)
    assert table.splitlines()[0] == "    2  compile: hlo.cbrt"
    assert "e.mlir" not in table


def test_probes_and_prints():
    result = conf.run_program(_program("""\
        func.func @t() {
          %a = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
          %p = interpreter.probe %a, probe_id = "a" : tensor<2xf32>
          %b = stablehlo.add %p, %p : tensor<2xf32>
          interpreter.print %b : tensor<2xf32>
          %c = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
          check.expect_serialized_eq %c, probe_id = "a" : tensor<2xf32>
          check.expect_eq_const %b, dense<[2.0, 4.0]> : tensor<2xf32>
          func.return
        }
        """))
    assert (result.status, result.message) == ("passed", "2 checks")
    missing = conf.run_program(_program("""\
        func.func @t() {
          %c = stablehlo.constant dense<1.0> : tensor<f32>
          check.expect_serialized_eq %c, probe_id = "nope" : tensor<f32>
          func.return
        }
        """))
    assert missing.status == "error" and "no value probed as 'nope'" in missing.message


def test_each_checked_function_of_a_chunk_runs(tmp_path):
    """Without @main, every argument-less function with checks is run, as the interpreter runs them."""
    (tmp_path / "two.mlir").write_text("""// RUN: stablehlo-translate --interpret %s

func.func @add_test() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %1 = stablehlo.add %0, %0 : tensor<2xi32>
  check.expect_eq_const %1, dense<[2, 4]> : tensor<2xi32>
  func.return
}

func.func @mul_test() {
  %0 = stablehlo.constant dense<[3, 4]> : tensor<2xi32>
  %1 = stablehlo.multiply %0, %0 : tensor<2xi32>
  check.expect_eq_const %1, dense<[9, 15]> : tensor<2xi32>
  func.return
}
""")
    programs = conf.discover([str(tmp_path)])
    assert [p.name for p in programs] == ["two @add_test", "two @mul_test"]
    results = conf.run_programs(programs, jobs=0)
    assert [r.status for r in results] == ["passed", "failed"]  # 4*4 is not 15: the second check fails
    assert "mul" in results[1].name and "expect_eq" in results[1].message


def test_programs_jaxlib_cannot_parse_are_reported_apart(tmp_path, capsys):
    (tmp_path / "new.mlir").write_text("""// RUN: stablehlo-translate --interpret %s

func.func @main() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %1 = stablehlo.an_op_from_the_future %0 : tensor<2xi32>
  check.expect_eq_const %1, dense<[1, 2]> : tensor<2xi32>
  func.return
}
""")
    (tmp_path / "ok.mlir").write_text("""// RUN: stablehlo-translate --interpret %s

func.func @main() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  check.expect_eq_const %0, dense<[1, 2]> : tensor<2xi32>
  func.return
}
""")
    status = conf.main([str(tmp_path), "--jobs", "0", "--quiet"])
    out = capsys.readouterr().out
    assert status == 1
    assert "parser rejects 1 of them" in out and "among the 1 it parses, 100.00% pass" in out


def test_probe_inside_a_loop_records_every_iteration():
    # interpreter.probe in a while body: check.expect_serialized_eq ... iter = N reads the N-th value.
    body = """\
        func.func @t() {
          %zero = stablehlo.constant dense<0> : tensor<i32>
          %three = stablehlo.constant dense<3> : tensor<i32>
          %ten = stablehlo.constant dense<10> : tensor<i32>
          %r:2 = stablehlo.while(%i = %zero, %acc = %zero) : tensor<i32>, tensor<i32>
          cond {
            %c = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
            stablehlo.return %c : tensor<i1>
          } do {
            %next = stablehlo.add %acc, %ten : tensor<i32>
            %seen = interpreter.probe %next, probe_id = "acc" : tensor<i32>
            %one = stablehlo.constant dense<1> : tensor<i32>
            %j = stablehlo.add %i, %one : tensor<i32>
            stablehlo.return %j, %seen : tensor<i32>, tensor<i32>
          }
          %v10 = stablehlo.constant dense<10> : tensor<i32>
          %v30 = stablehlo.constant dense<CHECK30> : tensor<i32>
          check.expect_serialized_eq %v10, probe_id = "acc", iter = 0 : tensor<i32>
          check.expect_serialized_eq %v30, probe_id = "acc", iter = 2 : tensor<i32>
          func.return
        }
        """
    ok = conf.run_program(_program(body.replace("CHECK30", "30")))
    assert (ok.status, ok.message) == ("passed", "2 checks"), ok.message
    bad = conf.run_program(_program(body.replace("CHECK30", "31")))
    assert bad.status == "failed" and "check.expect_serialized_eq at line 19: 1 of 1 elements differ; first: actual 30, expected 31" in bad.message, bad.message
    missing = conf.run_program(_program(body.replace("CHECK30", "30").replace("iter = 2", "iter = 3")))
    assert missing.status == "failed" and "recorded 3 values, no iteration 3" in missing.message


def test_run_parallel_infeed_and_different_programs_per_device():
    # infeed=[@f, @g] fills the infeed queue with the functions' results; programs=[[@a], [@b]] runs a
    # different program on each replica, connected by a host-transfer channel.
    result = conf.run_program(_program("""\
        module @m {
          func.func @reader(%t : !stablehlo.token) -> (tensor<2xi32>, !stablehlo.token) {
            %r:2 = "stablehlo.infeed"(%t) : (!stablehlo.token) -> (tensor<2xi32>, !stablehlo.token)
            %s = "stablehlo.send"(%r#0, %r#1) {channel_handle = #stablehlo.channel_handle<handle = 7, type = 2>,
                is_host_transfer = true} : (tensor<2xi32>, !stablehlo.token) -> !stablehlo.token
            return %r#0, %s : tensor<2xi32>, !stablehlo.token
          }
          func.func @receiver(%t : !stablehlo.token) -> (tensor<2xi32>, !stablehlo.token) {
            %r:2 = "stablehlo.recv"(%t) {channel_handle = #stablehlo.channel_handle<handle = 7, type = 3>,
                is_host_transfer = true} : (!stablehlo.token) -> (tensor<2xi32>, !stablehlo.token)
            %two = stablehlo.constant dense<2> : tensor<2xi32>
            %d = stablehlo.multiply %r#0, %two : tensor<2xi32>
            return %d, %r#1 : tensor<2xi32>, !stablehlo.token
          }
          func.func @first() -> tensor<2xi32> {
            %c = stablehlo.constant dense<[4, 5]> : tensor<2xi32>
            return %c : tensor<2xi32>
          }
          func.func @main() {
            %t = stablehlo.after_all : !stablehlo.token
            %r:4 = "interpreter.run_parallel"(%t, %t) {infeed = [@first], programs = [[@reader], [@receiver]]}
                : (!stablehlo.token, !stablehlo.token) -> (tensor<2xi32>, !stablehlo.token, tensor<2xi32>, !stablehlo.token)
            check.expect_eq_const %r#0, dense<[4, 5]> : tensor<2xi32>
            check.expect_eq_const %r#2, dense<[8, 10]> : tensor<2xi32>
            func.return
          }
        }
        """))
    assert (result.status, result.message) == ("passed", "2 checks"), result.message


def test_compile_with_one_program_per_device():
    import lowering
    from interop import import_stablehlo
    from xla_dialect.errors import ExecutionError

    module = import_stablehlo("""
        func.func @double(%x: tensor<2xf32>) -> tensor<2xf32> {
          %y = stablehlo.add %x, %x : tensor<2xf32>
          return %y : tensor<2xf32>
        }
        func.func @negate(%x: tensor<2xf32>) -> tensor<2xf32> {
          %y = stablehlo.negate %x : tensor<2xf32>
          return %y : tensor<2xf32>
        }
        func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
          return %x : tensor<2xf32>
        }""")
    exe = lowering.compile(module, entry=[["double", "negate"]])
    assert (exe.num_replicas, exe.num_partitions) == (1, 2)
    x = np.array([1.5, -2.0], np.float32)
    (a,), (b,) = exe((x,), (x,))
    np.testing.assert_array_equal(a, 2 * x)
    np.testing.assert_array_equal(b, -x)
    with pytest.raises(ExecutionError, match="rectangular grid"):
        lowering.compile(module, entry=[["double"], ["negate", "double"]])
    with pytest.raises(ExecutionError, match="grid is 1 x 2, but num_replicas x num_partitions is 2 x 1"):
        lowering.compile(module, entry=[["double", "negate"]], num_replicas=2)
    with pytest.raises(ExecutionError, match="no function @nope"):
        lowering.compile(module, entry=[["double", "nope"]])


def test_comments_after_checks_are_not_part_of_them():
    text = ('check.expect_eq_const %r#0, dense<[1, 2]> : tensor<2xi64> // the first "result" {x}\n'
            'check.expect_almost_eq %a, %b : tensor<f32>  // close\n')
    lines = conf.normalize_checks(text).split("\n")
    assert lines[0].endswith('"check.expect_eq"(%r#0, %__conformance_expected0) : (tensor<2xi64>, tensor<2xi64>) -> ()')
    assert lines[1].strip() == '"check.expect_almost_eq"(%a, %b) : (tensor<f32>, tensor<f32>) -> ()'


def test_the_summary_separates_what_jaxlibs_parser_reads():
    # Issue 14: conformance of the programs jaxlib's own parser reads, and of those read past it (the importer's
    # fallback for ops newer than jaxlib), counted apart.
    note = conf.NEWER_OPS_NOTE
    results = [conf.Result("a", "a", "passed"), conf.Result("b", "b", "failed", "x"),
               conf.Result("c", "c", "passed", "3 checks" + note), conf.Result("d", "d", "failed", "y" + note),
               conf.Result("e", "e", "disabled")]
    summary = conf.summarize(results)
    assert (summary["enabled"], summary["passed"]) == (4, 2)
    assert (summary["parsed_by_jaxlib"], summary["passed_parsed_by_jaxlib"]) == (2, 1)
    assert (summary["newer_ops"], summary["newer_ops_passed"]) == (2, 1)


def test_printed_results_of_split_files(tmp_path):
    # A `--split-input-file | FileCheck` file: each chunk's printed results (indented CHECK lines, {LITERAL},
    # one-line scalars, complex elements printed as pairs, empty tensors) are checked against its results; a
    # wrong printed value fails; a chunk whose CHECK lines show interpreter.print output is skipped, saying so.
    (tmp_path / "printing.mlir").write_text(textwrap.dedent("""\
        // RUN: stablehlo-translate --interpret --split-input-file %s | FileCheck %s
        func.func @values() -> (tensor<2x2xi8>, tensor<ui8>, tensor<2xcomplex<f32>>, tensor<2x0xi8>) {
          // CHECK:      tensor<2x2xi8> {
          // CHECK-NEXT:   [
          // CHECK-NEXT:     [1, 2],
          // CHECK-NEXT:     [3, 4]
          // CHECK-NEXT:   ]
          // CHECK-NEXT: }
          %m = stablehlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi8>
          // CHECK:      tensor<ui8> {7}
          %s = stablehlo.constant dense<7> : tensor<ui8>
          // CHECK:      tensor<2xcomplex<f32>> {
          // CHECK-NEXT{LITERAL}:   [[1.500000e+00, -2.000000e+00], [0.000000e+00, 1.000000e+00]]
          // CHECK-NEXT: }
          %c = stablehlo.constant dense<[(1.5, -2.0), (0.0, 1.0)]> : tensor<2xcomplex<f32>>
          // CHECK:      tensor<2x0xi8> {
          // CHECK-NEXT:   [
          // CHECK-NEXT:     [],
          // CHECK-NEXT:     []
          // CHECK-NEXT:   ]
          // CHECK-NEXT: }
          %e = stablehlo.constant dense<> : tensor<2x0xi8>
          func.return %m, %s, %c, %e : tensor<2x2xi8>, tensor<ui8>, tensor<2xcomplex<f32>>, tensor<2x0xi8>
        }

        // -----

        func.func @wrong() -> tensor<2xi32> {
          // CHECK:      tensor<2xi32> {
          // CHECK-NEXT:   [5, 6]
          // CHECK-NEXT: }
          %x = stablehlo.constant dense<[5, 7]> : tensor<2xi32>
          func.return %x : tensor<2xi32>
        }

        // -----

        func.func @main() -> tensor<2xi32> {
          // CHECK:      %0 = tensor<2xi32> {
          // CHECK-NEXT:   [0, 1]
          // CHECK-NEXT: }
          %0 = stablehlo.iota dim = 0 : tensor<2xi32>
          interpreter.print %0 : tensor<2xi32>
          func.return %0 : tensor<2xi32>
        }
        """))
    values, wrong, prints = conf.discover([str(tmp_path)])
    assert values.expected[1:3] == ["dense<7> : tensor<ui8>",
                                    "dense<[(1.500000e+00, -2.000000e+00), (0.000000e+00, 1.000000e+00)]> : "
                                    "tensor<2xcomplex<f32>>"]
    assert conf.run_program(values).status == "passed"
    assert conf.run_program(wrong).status == "failed"
    assert prints.mode == "skip" and "other than the results" in prints.message
