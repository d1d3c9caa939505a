"""lowering.runtime.process_state: the one module that changes process-wide state (fork hooks, environment defaults,
warning filters, numba's patched cache and compiler, generated modules' directory)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from helpers import library_lines

import lowering
from lowering.runtime import process_state

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_no_other_library_module_changes_process_state():
    changes = re.compile(r"register_at_fork|os\.environ\[[^]]+\]\s*=|os\.environ\.setdefault|os\.putenv"
                         r"|warnings\.(filterwarnings|simplefilter)|sys\.modules\[[^]]+\]\s*=")
    found = []
    for rel, n, lines in library_lines(changes):
        if rel == "lowering/runtime/process_state.py" or rel.startswith("interop/tools/"):
            continue  # (the commands: their own processes)
        if not any("catch_warnings()" in before for before in lines[max(0, n - 4):n - 1]):
            found.append(f"{rel}:{n}: {lines[n - 1].strip()}")
    # passes.registry loads plugin files as modules (and removes them when one fails): the user's modules
    found = [f for f in found if not f.startswith("passes/registry.py")]
    assert not found, "\n".join(found)


def test_importing_lowering_lists_its_changes():
    import lowering.executor.compile_process  # noqa: F401
    import lowering.executor.compile_queue  # noqa: F401
    import lowering.runtime.loop_runtime  # noqa: F401
    import lowering.runtime.workers  # noqa: F401

    assert lowering.runtime.process_state is process_state
    hooks = [c for c in process_state.CHANGES if c.startswith("fork hook:")]
    assert sorted(hooks) == ["fork hook: lowering.executor.compile_process.forget_after_fork",
                             "fork hook: lowering.executor.compile_queue.reset_after_fork",
                             "fork hook: lowering.runtime.loop_runtime._no_pairs_after_fork",
                             "fork hook: lowering.runtime.workers._forget_pools_after_fork"]
    assert any(c.startswith("numba's cache") for c in process_state.CHANGES)
    assert any(c.startswith("warning filter") for c in process_state.CHANGES)


def test_environment_default_leaves_the_users_settings(monkeypatch):
    monkeypatch.delenv("XLA_DIALECT_TEST_DEFAULT", raising=False)
    monkeypatch.setenv("XLA_DIALECT_TEST_POLICY", "passive")
    assert not process_state.environment_default("XLA_DIALECT_TEST_DEFAULT", "1", unless=("XLA_DIALECT_TEST_POLICY",))
    assert "XLA_DIALECT_TEST_DEFAULT" not in os.environ
    monkeypatch.delenv("XLA_DIALECT_TEST_POLICY")
    monkeypatch.setenv("XLA_DIALECT_TEST_DEFAULT", "7")
    assert not process_state.environment_default("XLA_DIALECT_TEST_DEFAULT", "1")
    assert os.environ["XLA_DIALECT_TEST_DEFAULT"] == "7"
    monkeypatch.delenv("XLA_DIALECT_TEST_DEFAULT")
    assert process_state.environment_default("XLA_DIALECT_TEST_DEFAULT", "1")
    assert os.environ["XLA_DIALECT_TEST_DEFAULT"] == "1"


def test_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))
    assert process_state.cache_directory() == str(tmp_path / "loops")
    from lowering.runtime import generated_modules

    assert generated_modules.cache_directory is process_state.cache_directory


def test_a_forked_child_runs_the_hooks():
    code = ("import os, lowering.runtime.workers, lowering.runtime.loop_runtime as r\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os._exit(0 if r.PAIRS_ENABLED[0] == 0 else 1)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "raise SystemExit(os.waitstatus_to_exitcode(status))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


_SLICE_ASSIGNMENTS = r'''
import numba, numpy as np
from numba.core import event
import lowering  # noqa: F401 (installs the changes)
from lowering.runtime.slice_assignment_errors import MESSAGE

@numba.njit
def assign(dst, src, row):
    dst[...] = src.reshape((1, 3))
    row[0:1] = src[:1]
    return dst

with event.install_recorder("numba:compile") as rec:
    assign(np.zeros((2, 3)), np.ones(3), np.zeros(2))
names = [getattr(getattr(e.data["dispatcher"], "py_func", None), "__module__", "") for _, e in rec.buffer
         if e.is_start]
print("compiled:", len(names), "unicode:", sum(n.startswith("numba.cpython.unicode") for n in names))
try:
    assign(np.zeros((2, 4)), np.ones(3), np.zeros(2))
except ValueError as e:
    print("error:", e)
'''


def test_slice_assignments_compile_no_shape_message():
    # numba formats a slice assignment's shapes into its error with its unicode machinery, compiled in every
    # process; lowering.runtime.slice_assignment_errors makes the message constant (a fresh process: numba keeps
    # what it compiled, so the count is only meaningful there).
    assert any(c.startswith("numba's slice assignment") for c in process_state.CHANGES)
    out = subprocess.run([sys.executable, "-c", _SLICE_ASSIGNMENTS], capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    compiled = re.search(r"compiled: (\d+) unicode: (\d+)", out.stdout)
    assert compiled is not None and int(compiled.group(2)) == 0, out.stdout
    assert "error: cannot assign slice from input of different shape" in out.stdout, out.stdout
