"""Bounding a run: lowering.compile(timeout=...) and Ctrl-C in long loops (lowering.runtime.interrupt)."""

import threading
import time

import jax
import numpy as np
import pytest

import lowering
from interop import import_jax
from lowering.runtime.interrupt import ExecutionTimeout
from xla_dialect.errors import XlaError


def _endless(x):
    # i stays 1, so the loop never ends.
    return jax.lax.while_loop(lambda s: s[0] > 0, lambda s: (s[0] * np.int32(1), s[1] * np.float32(1.0001)),
                              (np.int32(1), x))[1]


def _compile_the_loop(loops: str):
    """The endless loop's executable with a 0.5 s timeout, called once: numba compiles the loop during the
    first call (seconds on a cold cache and a busy machine, and a compile is not interrupted), so only the
    later calls are timed. Loop modules are kept per process, so other executables of the program reuse it."""
    x = np.float32(1)
    exe = lowering.compile(import_jax(_endless, x), timeout=0.5, loop_compilation=loops)
    with pytest.raises(ExecutionTimeout, match="timeout of 0.5 s .stopped at "):
        exe(x)
    return exe


@pytest.mark.parametrize("loops", ["never", "always", "auto"])
def test_timeout_stops_an_endless_loop(loops):
    exe = _compile_the_loop(loops)
    start = time.monotonic()
    with pytest.raises(ExecutionTimeout, match="timeout of 0.5 s .stopped at "):
        exe(np.float32(1))
    assert time.monotonic() - start < 5  # 0.5 s and a check within 65,536 iterations: a wide margin


def test_timeout_between_ops_and_unbounded_calls():
    def fn(x):
        for _ in range(50):
            x = jax.numpy.sin(x) * np.float32(1.5)
        return x

    x = np.ones(8, np.float32)
    exe = lowering.compile(import_jax(fn, x), timeout=60)
    assert "chk" in exe.source  # a check after each op
    np.testing.assert_array_equal(exe(x)[0], lowering.compile(import_jax(fn, x))(x)[0])
    assert "chk" not in lowering.compile(import_jax(fn, x)).source  # no cost without a timeout
    for bad in (0, -1, "1", True):
        with pytest.raises(XlaError, match="timeout"):
            lowering.compile(import_jax(fn, x), timeout=bad)


@pytest.fixture
def sigint_raises_keyboard_interrupt():
    """Python's own SIGINT handler for the test: a process started with SIGINT ignored (pytest run in the
    background by a non-interactive shell) has none, and _thread.interrupt_main then does nothing (the
    endless loop would never stop)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("loops", ["never", "always"])
def test_ctrl_c_interrupts_an_endless_loop(loops, sigint_raises_keyboard_interrupt):
    import _thread

    x = np.float32(1)
    # Compiled first: a Ctrl-C that arrives while numba compiles the loop can be swallowed in one of llvmlite's
    # ctypes callbacks ("Exception ignored on calling ctypes callback function"), and the loop never stops.
    _compile_the_loop(loops)
    exe = lowering.compile(import_jax(_endless, x), loop_compilation=loops)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            exe(x)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 5


def _endless_inside(x):
    # An outer loop whose body runs an endless inner loop: compiled as one function, the inner loop is not cut
    # into budgets as a top-level loop is; it polls (lowering.runtime.interrupt.poll) every 65,536 iterations.
    return jax.lax.fori_loop(0, 3, lambda i, y: _endless(y), x)


@pytest.mark.parametrize("stop", ["timeout", "ctrl-c"])
def test_an_endless_inner_loop_of_compiled_code_stops(stop, sigint_raises_keyboard_interrupt):
    import _thread

    x = np.float32(1)
    module = import_jax(_endless_inside, x)
    exe = lowering.compile(module, timeout=0.5, loop_compilation="always")
    with pytest.raises(ExecutionTimeout, match="stopped at a loop in compiled code"):
        exe(x)  # (the first call also compiles, for every executable of the program: not timed)
    if stop == "ctrl-c":
        exe = lowering.compile(module, loop_compilation="always")
    start = time.monotonic()
    timer = threading.Timer(0.5, _thread.interrupt_main) if stop == "ctrl-c" else None
    if timer is not None:
        timer.start()
    try:
        with pytest.raises(KeyboardInterrupt if stop == "ctrl-c" else ExecutionTimeout):
            exe(x)
    finally:
        if timer is not None:
            timer.cancel()
    assert time.monotonic() - start < 5


# Ctrl-C while numba compiles (issue 29). The child holds the first numba compilation after the executable is
# made (a listener of numba's compile event waits on an event) and says so: the SIGINT lands while numba
# compiles, however long that takes on a cold cache, with no timing margin. Before the fix the compilation ran
# on the main thread, where Python raises KeyboardInterrupt: inside one of llvmlite's ctypes callbacks it was
# swallowed ('Exception ignored on calling ctypes callback function', and the program went on), elsewhere it
# could leave numba half-updated (a later call crashed with SIGSEGV).
_COMPILE_CHILD = r"""
import signal, sys, threading
import numpy as np
import jax, jax.numpy as jnp
import lowering
from interop import import_jax
from lowering.executor.compiled_loops import wait_for_background_compiles
from numba.core import event

signal.signal(signal.SIGINT, signal.default_int_handler)
mode = sys.argv[1]

def fn(x):
    return jax.lax.fori_loop(0, 40, lambda i, c: jnp.tanh(c * 1.01 + jnp.sin(c)) * 0.5 + jnp.cos(c) * 0.25, x)

x = np.linspace(0, 1, 64, dtype=np.float32)
module = import_jax(fn, x)
exe = lowering.compile(module, loop_compilation=mode)
expected = lowering.compile(module, loop_compilation="never")(x)[0]
if sys.argv[2] == "fresh":  # a new process on the caches the interrupted one left
    print("FRESH", np.array_equal(exe(x)[0], expected), flush=True)
    sys.exit(0)

on_main, release = [], threading.Event()

class Hold(event.Listener):
    def on_start(self, ev):
        on_main.append(threading.current_thread() is threading.main_thread())
        if len(on_main) == 1:
            print("COMPILING", flush=True)
            release.wait(300)

    def on_end(self, ev):
        pass

event.register("numba:compile", Hold())
try:
    for _ in range(100000):  # (auto: interpreted calls until the background compilation starts)
        exe(x)
    print("NOT INTERRUPTED", flush=True)
except KeyboardInterrupt:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the parent may have sent another before it read this line)
    print("INTERRUPTED", flush=True)
finally:
    release.set()
wait_for_background_compiles()
print("AGAIN", np.array_equal(exe(x)[0], expected), np.array_equal(exe(x)[0], expected), flush=True)
print("ON_MAIN", any(on_main), flush=True)
"""


@pytest.mark.parametrize("loops", ["always", "auto"])
def test_ctrl_c_while_numba_compiles(loops, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # (cold caches: numba compiles everything; auto's background compilation on a thread of this process, not in the
    # compile process, whose compilations the child's listener does not see)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=root, NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               XLA_DIALECT_CACHE=str(tmp_path / "xla"), XLA_DIALECT_COMPILE_PROCESS="0")
    (tmp_path / "child.py").write_text(_COMPILE_CHILD)
    err_file = open(tmp_path / "stderr.txt", "w")  # (a file: a pipe nobody reads could fill and hold the child)
    child = subprocess.Popen([sys.executable, str(tmp_path / "child.py"), loops, "interrupt"], env=env, cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=err_file, text=True)
    try:
        lines = []
        for line in child.stdout:  # (the child ends, or holds numba's compilation until it is interrupted)
            lines.append(line)
            if line.startswith("COMPILING"):
                child.send_signal(signal.SIGINT)
                break
        # Python runs a SIGINT's handler at the next bytecode boundary of the main thread, which can be inside a
        # garbage-collector callback (jax registers one) or a __del__: a KeyboardInterrupt raised there is
        # "ignored" by CPython, in any program. A user presses Ctrl-C again; so does this test, every 10 s of
        # silence (the first one is seen within milliseconds unless it was swallowed so).
        reader = threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + 300
        while reader.is_alive() and not any(line.startswith("INTERRUPTED") for line in lines):
            reader.join(10)
            if reader.is_alive() and not any(line.startswith("INTERRUPTED") for line in lines):
                assert time.monotonic() < deadline, "".join(lines)
                child.send_signal(signal.SIGINT)
        # (the child then compiles everything on cold caches: minutes on a busy 2-core machine -- 300 s was
        # exceeded once with four other test processes running)
        reader.join(900)
        child.wait(timeout=900)
    finally:
        child.kill()
        err_file.close()
    out, err = "".join(lines), (tmp_path / "stderr.txt").read_text()
    assert child.returncode == 0, (out, err[-3000:])
    assert "COMPILING" in out and "INTERRUPTED" in out and "NOT INTERRUPTED" not in out, (out, err[-3000:])
    assert "AGAIN True True" in out  # the later calls work (compiled now), same bits
    assert "ON_MAIN False" in out  # numba never compiled on the main thread, where Ctrl-C is raised
    # (the swallowed Ctrl-C this guards against; an unswallowed error elsewhere would end the child non-zero)
    assert "ctypes callback" not in err, err[-3000:]
    fresh = subprocess.run([sys.executable, str(tmp_path / "child.py"), loops, "fresh"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=900)
    assert "FRESH True" in fresh.stdout, fresh.stderr[-3000:]  # the caches left behind serve whole functions


def test_compilations_leave_the_main_thread_unless_it_holds_numbas_lock():
    """lowering.runtime.interrupt.compile_off_main_thread (numba.vectorize in the kernels, scalar and libm): on the main
    thread a compilation runs on a thread of its own; a compilation nested in one the main thread runs itself
    (it holds numba's compiler lock) stays there -- a thread of ours would wait for that lock for ever."""
    from numba.core.compiler_lock import global_compiler_lock

    from lowering.runtime.interrupt import compile_off_main_thread

    assert threading.current_thread() is threading.main_thread()
    assert compile_off_main_thread(threading.current_thread) is not threading.main_thread()
    with global_compiler_lock:
        assert compile_off_main_thread(threading.current_thread) is threading.main_thread()
    with pytest.raises(ZeroDivisionError):  # errors reach the caller
        compile_off_main_thread(lambda: 1 / 0)
