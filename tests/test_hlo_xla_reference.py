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
        import_hlo(text)  # accepted by our importer
        try:
            run_hlo_text_on_xla(text, source="tok.hlo")
        except HloParseError as e:
            print("ERROR:", e)
        """, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ERROR: tok.hlo: jaxlib's HLO parser crashed reading this text (signal 6)" in done.stdout
    assert "Check failed" in done.stdout


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
