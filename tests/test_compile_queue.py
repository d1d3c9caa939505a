"""Background compilations of loop_compilation="auto" (lowering/executor/compile_queue.py, lowering/executor/compile_process.py):
outermost code first, nested jobs dropped once useless, numba's work done in a compile process."""

import io
import pickle
import struct
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lowering
from interop import import_jax
from lowering.executor import compile_process, compile_queue, compiled_loops, compiled_segments
from lowering.runtime import numba_cache

F32 = np.float32


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _program(x, w):
    # Straight-line set-up around a while loop: one compiled segment that holds the loop.
    scale = jnp.sqrt(jnp.sum(x * x)) + w
    y = lax.fori_loop(0, 40, lambda i, v: v * F32(0.999) + jnp.cos(v) / scale, x)
    return jnp.concatenate([y[1:], y[:1] * scale])


def _args():
    return np.linspace(-1, 1, 6, dtype=F32), F32(0.5)


@pytest.fixture
def new_program(monkeypatch, tmp_path):
    """A fresh cache directory (nothing compiled before), loops compiled after 10 iterations."""
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))
    # (nor in this process: a module another test loaded -- the same program on other shapes is the same module --
    # would hold its machine code already)
    for name in [n for n in sys.modules if n.startswith("xla_dialect_loop_")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(compiled_loops, "_SHAPE_FREE", {})
    monkeypatch.setattr(numba_cache, "has_machine_code", lambda fn, signature: False)
    monkeypatch.setattr(compiled_loops, "AUTO_THRESHOLD", 10)
    monkeypatch.delenv("XLA_DIALECT_LOOP_COMPILATION", raising=False)
    monkeypatch.delenv("XLA_DIALECT_COMPILE_PROCESS", raising=False)


def _first_call_and_wait():
    """The executable ("auto") after its first call and the background compilations it started, and the
    interpreter's bits."""
    module = import_jax(_program, *_args())
    auto = lowering.compile(module)
    expected = _bits(lowering.compile(module, loop_compilation="never")(*_args()))
    np.testing.assert_array_equal(_bits(auto(*_args())), expected)
    assert compile_queue.wait_for_background_compiles(timeout=600)
    return auto, expected


def _segments(exe) -> list:
    return [r for r in exe._fn.__globals__.values() if isinstance(r, compiled_segments.CompiledSegment)]


def _recorded(monkeypatch):
    """Which compilations ran: ('segment'|'loop', ...) and which went through the compile process."""
    seen = {"segment": 0, "loop": 0, "elsewhere": []}
    segment_compile = compiled_segments.CompiledSegment._compile
    loop_compile = compiled_loops.CompiledLoop.compile_for
    elsewhere = compile_process.compile_elsewhere

    def on_segment(self, readonly, cached_only=False):
        seen["segment"] += not cached_only
        return segment_compile(self, readonly, cached_only)

    def on_loop(self, ranks, cached_only=False):
        seen["loop"] += not cached_only
        return loop_compile(self, ranks, cached_only)

    def on_elsewhere(function, signature):
        done = elsewhere(function, signature)
        seen["elsewhere"].append(done)
        return done

    monkeypatch.setattr(compiled_segments.CompiledSegment, "_compile", on_segment)
    monkeypatch.setattr(compiled_loops.CompiledLoop, "compile_for", on_loop)
    monkeypatch.setattr(compile_process, "compile_elsewhere", on_elsewhere)
    return seen


def test_the_enclosing_segment_compiles_and_the_loop_inside_is_dropped(new_program, monkeypatch):
    seen = _recorded(monkeypatch)
    # The loop reaches its threshold in the first call, inside the segment, which has run once: the segment's
    # compilation starts ahead of the loop's, and the loop's is dropped once the segment has machine code.
    auto, expected = _first_call_and_wait()
    assert not compile_queue.pending()
    assert seen["segment"] == 1 and seen["loop"] == 0  # (the loop body's segment: dropped too)
    assert [s.kernel is not None for s in _segments(auto)].count(True) == 1
    np.testing.assert_array_equal(_bits(auto(*_args())), expected)


def test_jobs_compile_in_the_compile_process(new_program, monkeypatch):
    seen = _recorded(monkeypatch)
    loads = []
    original = compile_queue.compile_function

    def watched(function, signature):
        original(function, signature)
        loads.append(function.stats.cache_hits)

    monkeypatch.setattr(compiled_segments, "compile_function", watched)
    auto, expected = _first_call_and_wait()
    assert seen["elsewhere"] and all(seen["elsewhere"])  # the child compiled it ...
    assert loads and sum(loads[0].values()) >= 1  # ... and this process loaded it from numba's cache
    np.testing.assert_array_equal(_bits(auto(*_args())), expected)


def test_without_the_compile_process(new_program, monkeypatch):
    monkeypatch.setenv("XLA_DIALECT_COMPILE_PROCESS", "0")
    seen = _recorded(monkeypatch)
    auto, expected = _first_call_and_wait()
    assert seen["segment"] == 1 and seen["elsewhere"] == []
    np.testing.assert_array_equal(_bits(auto(*_args())), expected)


def test_a_compile_process_that_cannot_start_leaves_the_compilation_here(new_program, monkeypatch):
    monkeypatch.setattr(compile_process, "_CHILD", [])
    monkeypatch.setattr(compile_process, "_BROKEN", [False])
    monkeypatch.setattr(compile_process.sys, "executable", "/nonexistent/python")
    seen = _recorded(monkeypatch)
    auto, expected = _first_call_and_wait()
    assert seen["elsewhere"] and not any(seen["elsewhere"]) and seen["segment"] == 1
    assert [s.kernel is not None for s in _segments(auto)].count(True) == 1


def test_the_compile_process_answers_what_failed(tmp_path):
    def framed(value):
        data = pickle.dumps(value)
        return struct.pack("<Q", len(data)) + data

    missing = str(tmp_path / "missing.py")
    requests = io.BytesIO(framed(("xla_dialect_missing", missing, "loop", ())))
    answers = io.BytesIO()
    compile_process.serve(requests, answers)  # (ends at the end of its input)
    answers.seek(0)
    ok, reason = compile_process._receive(answers)
    assert not ok and reason


def test_a_failing_job_does_not_stop_the_queue():
    done = []
    compile_queue.compile_in_background(lambda: 1 / 0)
    compile_queue.compile_in_background(lambda: done.append(True))
    assert compile_queue.wait_for_background_compiles(timeout=60)
    assert done == [True]


def test_a_compile_process_that_does_not_answer_is_killed(monkeypatch, tmp_path):
    import subprocess
    import sys

    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    monkeypatch.setattr(compile_process, "_CHILD", [silent])
    monkeypatch.setattr(compile_process, "_BROKEN", [False])
    monkeypatch.setattr(compile_process, "_LOST", [compile_process.MAX_LOST - 1])
    monkeypatch.setattr(compile_process, "CHILD_TIMEOUT", 1.0)
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))
    assert compile_process.compile_elsewhere(compiled_loops.call_compiled, ()) is False  # (not generated code)
    fn = _a_generated_function()
    assert compile_process.compile_elsewhere(fn, ()) is False
    assert silent.wait(timeout=10) is not None and compile_process._CHILD == []
    assert compile_process._BROKEN == [True]  # (the third child lost: no more are started)


def _a_generated_function():
    from lowering.runtime.generated_modules import import_generated

    module = import_generated("import numba\n\n\n@numba.njit(cache=True)\ndef f():\n    return 1\n", "test")
    return module.f


def test_a_loop_running_interpreted_compiles_before_the_segments_inside(new_program, monkeypatch):
    # A scan whose state is too large for a segment around it (4,400 elements), with a small body: the body's
    # segment reaches its 20 calls first and starts the loop's compilation; its own job is dropped.
    monkeypatch.setattr(compiled_loops, "AUTO_THRESHOLD", 50)
    seen = _recorded(monkeypatch)

    def scan(xs, h):
        def step(h, x):
            h = jnp.tanh(h * F32(0.9) + x) - F32(0.1) * jnp.sin(h)
            return h, jnp.sum(h * h)
        return lax.scan(step, h, xs)

    xs, h = np.linspace(-1, 1, 1100 * 4, dtype=F32).reshape(1100, 4), np.zeros(4, F32)
    module = import_jax(scan, xs, h)
    auto = lowering.compile(module)
    expected = [_bits(v) for v in lowering.compile(module, loop_compilation="never")(xs, h)]
    assert [_bits(v).tolist() for v in auto(xs, h)] == [e.tolist() for e in expected]
    assert compile_queue.wait_for_background_compiles(timeout=600)
    assert seen["loop"] == 1 and seen["segment"] == 0
    assert [_bits(v).tolist() for v in auto(xs, h)] == [e.tolist() for e in expected]
