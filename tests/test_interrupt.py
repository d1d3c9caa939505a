"""Bounding a run: lowering.compile(timeout=...) and Ctrl-C in long loops (lowering.interrupt)."""

import threading
import time

import jax
import numpy as np
import pytest

import lowering
from interop import import_jax
from lowering.interrupt import ExecutionTimeout
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
