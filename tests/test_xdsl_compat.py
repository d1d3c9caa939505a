"""xla_dialect.xdsl_compat: xDSL's internals used only where they were checked against its public API,
and the public paths (another xDSL release, or ``XLA_DIALECT_XDSL_PUBLIC_API=1``) give the same results."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from helpers import library_lines

import passes
from xla_dialect import xdsl_compat
from xla_dialect.ops import elementwise as ew

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLIC = xdsl_compat.PUBLIC_API_ONLY


@pytest.mark.skipif(PUBLIC, reason="XLA_DIALECT_XDSL_PUBLIC_API set")
def test_every_shortcut_passes_its_check_with_the_pinned_xdsl():
    assert xdsl_compat.FAST and all(xdsl_compat.FAST.values()), xdsl_compat.FAST


@pytest.mark.skipif(not PUBLIC, reason="runs in the child process of test_public_api_paths_pass_the_tests")
def test_the_switch_takes_every_public_path():
    assert xdsl_compat.FAST and not any(v for k, v in xdsl_compat.FAST.items() if k != "resume")
    assert xdsl_compat.FAST["resume"]  # (no public path)
    assert xdsl_compat.operands_of.__reduce__()[1] == ("operands",)
    assert not xdsl_compat.retypes_in_place()


def test_public_api_paths_pass_the_tests():
    """The importers, passes and verifier tests with every shortcut off (what an xDSL release that
    changed its internals would get)."""
    if PUBLIC:
        pytest.skip("already the child")
    env = {**os.environ, "XLA_DIALECT_XDSL_PUBLIC_API": "1"}
    tests = ["tests/test_xdsl_compat.py", "tests/test_passes_speed.py", "tests/test_passes.py::test_golden",
             "tests/test_import.py"]
    # (-n 0: in the child's own process, not two more workers beside the default run's)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *tests],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def _layers():
    from tests.test_passes_speed import layered_program

    return layered_program(3)


@pytest.mark.parametrize("shortcut", ["pattern_closures", "verifier_closures"])
def test_passes_give_the_same_program_without_the_closure_shortcuts(monkeypatch, shortcut):
    pipeline = "canonicalize-broadcasts,simplify,assign-layouts{target=tpu}"
    reference = _layers()
    passes.run(reference, pipeline, verify=True)
    monkeypatch.setitem(xdsl_compat.FAST, shortcut, False)
    from passes import verify

    monkeypatch.setattr(verify, "_SIGNATURE_ONLY", {})
    module = _layers()
    passes.run(module, pipeline, verify=True)
    assert str(module) == str(reference)
    if shortcut == "verifier_closures":
        assert not verify.signature_only(ew.AddOp)
    elif not PUBLIC:
        assert xdsl_compat.irdl_custom_verifiers(ew.AddOp) is not None


def test_a_closure_laid_out_otherwise_turns_the_shortcut_off(monkeypatch):
    monkeypatch.setattr(xdsl_compat, "_closure_match", lambda pattern: ((ew.AddOp,), None))
    assert not xdsl_compat._pattern_closures_match()
    monkeypatch.setattr(xdsl_compat, "_closure_verifiers", lambda fn: ())
    assert not xdsl_compat._verifier_closures_match()


def test_only_the_compat_module_touches_xdsl_internals():
    import re

    private = re.compile(r"\._(operands|operand_uses|successors|successor_uses|first_op|last_op|prev_op|next_op|type)\b"
                         r"|__closure__|__dict__\[\"verify_\"\]")
    found = []
    for path, n, lines in library_lines(private):
        line = lines[n - 1]
        # (users' callbacks, and the executable cache storing Python closures: Python's functions, not xDSL's)
        exempt = (path in ("xla_dialect/callbacks.py", "lowering/executor/executable_cache.py")
                  and "__closure__" in line)
        if path != "xla_dialect/xdsl_compat.py" and "self._" not in line and not exempt:
            found.append(f"{path}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
