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
        from interop.cli import xla_run_main
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

    from interop.cli import xla_run_main

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
    from interop.cli import layout_changing_bitcasts
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
    code, report = _xla_run(tmp_path, PLAIN_RESHAPE)
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
