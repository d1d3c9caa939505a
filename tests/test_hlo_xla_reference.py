"""XLA as the reference for programs read from HLO text (issue 29): jaxlib's HLO parser aborting on text
is a project error, not a dead process; layout-changing bitcasts make XLA's answer untrustworthy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# import_hlo reads this module (the header's parameter shapes are not used), jaxlib's parser hits a CHECK
# on token[2] and aborts the process.
TOKEN_HEADER = """HloModule m

ENTRY main (p: token[2]) -> f32[] {
  p = token[] parameter(0)
  ROOT c = f32[] constant(1)
}
"""

VALID = """HloModule ok

ENTRY main {
  p = f32[3] parameter(0)
  ROOT n = f32[3] negate(p)
}
"""


def _child(script: str, tmp_path) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter: before the guard, jaxlib aborted the process running it."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)


def test_jaxlib_parser_abort_is_an_hlo_parse_error(tmp_path):
    (tmp_path / "tok.hlo").write_text(TOKEN_HEADER)
    done = _child("""
        from interop.hlo import import_hlo, run_hlo_text_on_xla
        from xla_dialect.errors import HloParseError
        text = open("tok.hlo").read()
        try:
            import_hlo(text)  # (the importer reads the signature: token[] takes no dimensions)
        except HloParseError as e:
            print("IMPORT:", e)
        try:
            run_hlo_text_on_xla(text, source="tok.hlo")
        except HloParseError as e:
            print("ERROR:", e)
        """, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ERROR: tok.hlo: jaxlib's HLO parser crashed reading this text (signal 6)" in done.stdout
    assert "Check failed" in done.stdout
    assert "IMPORT:" in done.stdout and "token[] takes no dimensions" in done.stdout


def test_check_xla_with_text_jaxlib_aborts_on_exits_2(tmp_path):
    """``xla-run --check-xla``: the text handed to XLA (here made to be the aborting text) is parsed in a
    child process, so the command reports an error naming the file and exits 2."""
    (tmp_path / "ok.hlo").write_text(VALID)
    import numpy as np

    np.savez(tmp_path / "in.npz", arg0=np.ones(3, np.float32))
    done = _child(f"""
        import sys
        import interop.hlo.xla as x
        x.export_hlo = lambda module, for_xla=False: {TOKEN_HEADER!r}
        from interop.tools.cli import xla_run_main
        sys.exit(xla_run_main(["ok.hlo", "--inputs", "in.npz", "--check-xla"]))
        """, tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "xla-run: error: ok.hlo: jaxlib's HLO parser crashed" in done.stderr


def test_guarded_and_trusted_routes_agree():
    import numpy as np

    from interop.hlo import run_hlo_text_on_xla
    from xla_dialect.errors import HloParseError

    x = np.arange(3, dtype=np.float32)
    (guarded,) = run_hlo_text_on_xla(VALID, x)
    (trusted,) = run_hlo_text_on_xla(VALID, x, trusted=True)
    assert np.array_equal(guarded, -x) and np.array_equal(trusted, -x)
    with pytest.raises(HloParseError, match=r"bad\.hlo: XLA's HLO parser rejects the text: .*5:19.*negatx"):
        run_hlo_text_on_xla(VALID.replace("negate", "negatx"), x, source="bad.hlo")


# --------------------------------------------------------------------------------------------------------
# Layout-changing bitcasts: XLA compiles HLO through StableHLO, which drops layouts, so where it differs
# from the executor on such a program (or cannot be given it) the verdict is "reference-untrusted".
# --------------------------------------------------------------------------------------------------------

COLUMN_MAJOR = """HloModule col

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  ROOT col = f32[3,2]{0,1} bitcast(x)
}
"""

PLAIN_RESHAPE = """HloModule flat

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  ROOT flat = f32[3,2]{1,0} bitcast(x)
}
"""

TILED = """HloModule tiled

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  tiled = f32[2,3]{1,0:T(2,2)} copy(x)
  ROOT back = f32[4,2]{0,1} bitcast(tiled)
}
"""


def _xla_run(tmp_path, text, *extra):
    import json

    import numpy as np

    from interop.tools.cli import xla_run_main

    (tmp_path / "p.hlo").write_text(text)
    np.savez(tmp_path / "in.npz", arg0=np.arange(6, dtype=np.float32).reshape(2, 3))
    code = xla_run_main([str(tmp_path / "p.hlo"), "--inputs", str(tmp_path / "in.npz"), "--check-xla",
                         "--json", str(tmp_path / "r.json"), *extra])
    return code, json.loads((tmp_path / "r.json").read_text())


def _layouts_dropped(monkeypatch):
    """XLA as if the bitcast's layouts were dropped: the bytes reread as a row-major reshape."""
    import interop.hlo

    def run(module, *arrays, **kw):
        shape = [op for op in module.walk() if op.name == "func.return"][0].operands[0].type.get_shape()
        return (arrays[0].reshape(shape),)

    monkeypatch.setattr(interop.hlo, "run_hlo_on_xla", run)


def test_layout_changing_bitcasts_are_found():
    from interop.tools.cli import layout_changing_bitcasts
    from interop.hlo import import_hlo

    assert [op.name for op in layout_changing_bitcasts(import_hlo(COLUMN_MAJOR))] == ["hlo.bitcast"]
    assert len(layout_changing_bitcasts(import_hlo(TILED))) == 1
    assert layout_changing_bitcasts(import_hlo(PLAIN_RESHAPE)) == []
    size_one = VALID.replace("f32[3] parameter(0)", "f32[1,3]{0,1} parameter(0)") \
        .replace("ROOT n = f32[3] negate(p)", "ROOT n = f32[3]{0} bitcast(p)")
    assert layout_changing_bitcasts(import_hlo(size_one)) == []  # a size-1 dimension's place changes nothing


def test_difference_on_layout_changing_bitcast_is_reference_untrusted(tmp_path, monkeypatch, capsys):
    _layouts_dropped(monkeypatch)
    code, report = _xla_run(tmp_path, COLUMN_MAJOR)
    out = capsys.readouterr().out
    assert code == 0, out
    assert report["status"] == "reference-untrusted" and report["check_xla"]["verdict"] == "reference-untrusted"
    assert report["check_xla"]["ok"] is None
    assert "XLA reference cannot be trusted: the program has layout-changing bitcasts (hlo.bitcast: " \
           "f32[2,3]{1,0} -> f32[3,2]{0,1})" in out


def test_difference_without_layout_changing_bitcast_is_still_a_mismatch(tmp_path, monkeypatch, capsys):
    import interop.hlo

    monkeypatch.setattr(interop.hlo, "run_hlo_on_xla", lambda module, *a, **kw: (a[0].reshape(3, 2) + 1,))
    # (no noise analysis: this fake XLA is 1 off the float64 value everywhere, its 'own rounding error')
    code, report = _xla_run(tmp_path, PLAIN_RESHAPE, "--noise-samples", "0")
    assert code == 1 and report["status"] == "mismatch" and report["check_xla"]["verdict"] == "differs"


def test_tiled_bitcast_xla_cannot_take_is_reference_untrusted(tmp_path, capsys):
    code, report = _xla_run(tmp_path, TILED)
    out = capsys.readouterr().out
    assert code == 0, out
    assert report["status"] == "reference-untrusted"
    assert "f32[2,3]{1,0:T(2,2)} -> f32[4,2]{0,1}" in report["check_xla"]["error"]


def test_agreement_on_layout_changing_bitcast_stays_agreement(tmp_path):
    code, report = _xla_run(tmp_path, COLUMN_MAJOR)  # XLA through our transposes: the same values
    assert code == 0 and report["status"] == "ok" and report["check_xla"]["verdict"] == "agrees"


# --------------------------------------------------------------------------------------------------------
# Rounding noise (difftest's noise-dominated verdict): a sum that is 0 in exact arithmetic, scaled up as
# Adam's first step scales a gradient, differs between two valid summation orders by more than any budget.
# --------------------------------------------------------------------------------------------------------

NOISY = """HloModule noisy

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[256] parameter(0)
  zero = f32[] constant(0)
  total = f32[] reduce(x, zero), dimensions={0}, to_apply=add
  n = f32[] constant(256)
  mean = f32[] divide(total, n)
  mb = f32[256] broadcast(mean), dimensions={}
  d = f32[256] subtract(x, mb)
  g = f32[] reduce(d, zero), dimensions={0}, to_apply=add
  ag = f32[] abs(g)
  eps = f32[] constant(1e-8)
  den = f32[] add(ag, eps)
  lr = f32[] constant(0.001)
  q = f32[] divide(g, den)
  update = f32[] multiply(q, lr)
  ROOT t = (f32[], f32[], f32[256]) tuple(g, update, d)
}
"""


def _reversed_order_executor(monkeypatch, extra=lambda results: results):
    """The executor on the input reversed: another valid order of both sums (the results do not depend on
    the order of the elements, except ``d``, reversed back), whatever order the executor itself uses;
    ``extra`` changes the results after."""
    import lowering

    real = lowering.compile

    def compile_(module, **options):
        run = real(module, **options)

        def call(x):
            if x.dtype != "float32":  # the program widened to float64: the reference, left alone
                return run(x)
            g, update, d = run(x[::-1].copy())
            return tuple(extra([g, update, d[::-1].copy()]))

        call.input_types = run.input_types
        return call

    monkeypatch.setattr(lowering, "compile", compile_)


def _noisy_run(tmp_path, *extra):
    import json

    import numpy as np

    from interop.tools.cli import xla_run_main

    (tmp_path / "p.hlo").write_text(NOISY)
    # (An input whose noisy sum g, summed in reverse, comes out far enough from XLA's that the update shows it:
    # with seed 0 the two sums -- both XLA's windows of 32 since the executor sums in XLA's order -- gave updates
    # 2e-7 apart.)
    np.savez(tmp_path / "in.npz", arg0=np.random.default_rng(1).standard_normal(256).astype(np.float32))
    code = xla_run_main([str(tmp_path / "p.hlo"), "--inputs", str(tmp_path / "in.npz"), "--check-xla",
                         "--json", str(tmp_path / "r.json"), *extra])
    return code, json.loads((tmp_path / "r.json").read_text())


def test_check_xla_reports_rounding_noise_as_noise_dominated(tmp_path, monkeypatch, capsys):
    """As interop.difftest does: the sum and its Adam-like update differ from XLA's by more than the budgets,
    but every differing element is within 4x XLA's own rounding error (against the program in float64): the
    verdict is noise-dominated, with the evidence, exit status 0."""
    _reversed_order_executor(monkeypatch)
    code, report = _noisy_run(tmp_path)
    out = capsys.readouterr().out
    assert code == 0, out
    assert report["status"] == "noise-dominated" and report["check_xla"]["verdict"] == "noise-dominated"
    g, update, d = report["check_xla"]["outputs"]
    assert g["status"] == update["status"] == "noise-dominated", out
    assert d["status"] in ("exact", "ok", "ok (magnitude)")
    assert g["noise"]["dominated"] and g["noise"]["samples"] == 17
    assert abs(g["noise"]["reference"]) < 1e-12 < g["noise"]["own_error"]  # 0 in exact arithmetic
    assert update["max_abs"] > 1e-6  # the visible consequence
    assert "XLA result #1: NOISE-DOMINATED" in out and "more than the value itself" in out
    assert "XLA check: noise-dominated" in out


def test_check_xla_wrong_results_next_to_noise_stay_mismatches(tmp_path, monkeypatch, capsys):
    """An error on the well-determined output d is a mismatch ('not rounding noise'); --noise-samples 0
    turns the analysis off, so the noise is a mismatch too."""
    def wrong(results):
        results[2] = results[2] * np.float32(1 + 1e-4)
        return results

    import numpy as np

    _reversed_order_executor(monkeypatch, wrong)
    code, report = _noisy_run(tmp_path)
    out = capsys.readouterr().out
    assert code == 1 and report["status"] == "mismatch", out
    g, update, d = report["check_xla"]["outputs"]
    assert g["status"] == "noise-dominated" and d["status"] != "noise-dominated"
    assert "not rounding noise" in d["noise"]["note"] + out
    _reversed_order_executor(monkeypatch)
    code, report = _noisy_run(tmp_path, "--noise-samples", "0")
    assert code == 1 and report["status"] == "mismatch"
    assert report["check_xla"]["outputs"][0]["noise"] is None
