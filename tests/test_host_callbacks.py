"""Host callbacks (issue 29): jax.debug.print, jax.pure_callback, io_callback and equinox's runtime checks
(custom calls @xla_ffi_python_cpu_callback) run the Python function captured when the program was traced,
with jax.jit's semantics; a program whose callback was not captured (text, serialized) says so."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import io_callback

import interop
import lowering
from xla_dialect import parse_module
from xla_dialect.errors import ExecutionError, HostCallbackError, UnsupportedError, XlaError

MODES = [dict(), dict(loop_compilation="always", fusion="always"), dict(loop_compilation="never", fusion="never")]
MODE_IDS = ["default", "compiled", "interpreted"]


def run(fn, *args, **options):
    """``fn`` imported by tracing and run on the executor."""
    return lowering.compile(interop.import_jax(fn, *args), **options)(*args)


def assert_bitwise(actual, expected):
    actual, expected = list(actual), jax.tree.leaves(expected)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        e = np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape
        assert a.tobytes() == e.tobytes(), (a, e)


# ----------------------------------------------------------------------------
# jax.debug.print
# ----------------------------------------------------------------------------


def test_debug_print_matches_jax_jit(capsys):
    def f(x, n):
        jax.debug.print("x = {x}, n = {n}", x=x, n=n)
        y = jnp.sin(x) * n
        jax.debug.print("sum {} and {s:.3f}", y.sum(), s=y[0])
        return y

    x, n = np.linspace(-1, 1, 5, dtype=np.float32), np.int32(3)
    expected = jax.jit(f)(x, n)
    jax.effects_barrier()
    jax_out = capsys.readouterr().out
    assert jax_out.count("\n") == 2
    actual = run(f, x, n)
    assert capsys.readouterr().out == jax_out
    assert_bitwise(actual, expected)


def test_debug_print_ordered_and_in_a_scan(capsys):
    def f(xs):
        def body(c, x):
            jax.debug.print("step {c} {x}", c=c, x=x, ordered=True)
            return c + x, c * x
        return lax.scan(body, jnp.float64(0), xs)

    xs = np.arange(4.0)
    expected = jax.jit(f)(xs)
    jax.effects_barrier()
    jax_out = capsys.readouterr().out
    for options in MODES:
        actual = run(f, xs, **options)
        assert capsys.readouterr().out == jax_out
        assert_bitwise(actual, expected)


# ----------------------------------------------------------------------------
# jax.pure_callback
# ----------------------------------------------------------------------------


def test_pure_callback_numpy_function():
    def f(x, y):
        a = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        b, c = jax.pure_callback(lambda p, q: (np.cumsum(p * q), (p > q).astype(np.int32)),
                                 (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, np.int32)),
                                 x, y)
        return a * 2 + b, c

    x = np.linspace(-3, 3, 7, dtype=np.float32)
    y = np.linspace(3, -3, 7, dtype=np.float32)
    assert_bitwise(run(f, x, y), jax.jit(f)(x, y))


@pytest.mark.parametrize("vmap_method", ["sequential", "expand_dims", "broadcast_all"])
def test_pure_callback_vmapped(vmap_method):
    calls = []

    def host(v):
        calls.append(v.shape)
        return np.tanh(v) + v.sum()

    def f(v):
        return jax.pure_callback(host, jax.ShapeDtypeStruct(v.shape, v.dtype), v, vmap_method=vmap_method)

    xs = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    expected = jax.jit(jax.vmap(f))(xs)
    jax_calls, calls[:] = list(calls), []
    for options in MODES:
        assert_bitwise(run(jax.vmap(f), xs, **options), expected)
        assert calls == jax_calls  # one call per row (sequential: a while loop) or one batched call
        calls.clear()


def test_pure_callback_runs_at_every_call_on_constants():
    calls = []

    def host():
        calls.append(1)
        return np.float32(len(calls))

    def f(x):
        return x + jax.pure_callback(host, jax.ShapeDtypeStruct((), np.float32))

    x = np.float32(1)
    exe = lowering.compile(interop.import_jax(f, x))
    assert calls == []  # not evaluated when lowering
    assert [float(exe(x)[0]) for _ in range(3)] == [2.0, 3.0, 4.0]


def test_callback_result_checks_as_jax():
    def f(x):
        return jax.pure_callback(lambda a: a.astype(np.float64), jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    x = np.ones(3, np.float32)
    with pytest.raises(jax.errors.JaxRuntimeError, match="Incorrect output dtype") as jax_error:
        jax.jit(f)(x)
    with pytest.raises(HostCallbackError, match="Incorrect output dtype") as ours:
        run(f, x)
    assert isinstance(ours.value, jax.errors.JaxRuntimeError)
    assert str(ours.value).splitlines()[-2] == str(jax_error.value).splitlines()[-1]


def test_callback_arguments_as_jax_gives_them():
    seen = []

    def host(a, b):
        seen.append((type(a).__name__, a.shape, str(a.dtype), type(b).__name__, b.shape, str(b.dtype)))
        return np.asarray(a).T.copy()

    def io_host(a):
        seen.append((type(a).__name__, a.shape, str(a.dtype), np.asarray(a).tolist()))
        return np.asarray(a)

    def f(x, s):
        y = jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x.T, s)
        return io_callback(io_host, jax.ShapeDtypeStruct(y.T.shape, y.dtype), y.T)

    x, s = np.arange(6.0).reshape(2, 3), np.int64(3)
    expected = jax.jit(f)(x, s)
    jax.effects_barrier()
    jax_seen, seen[:] = list(seen), []
    assert_bitwise(run(f, x, s), expected)
    assert seen == jax_seen and len(seen) == 2


# ----------------------------------------------------------------------------
# io_callback
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_io_callback_ordered(options):
    log = []

    def record(tag):
        def host(v):
            log.append((tag, np.asarray(v).tolist()))
            return np.asarray(v * 2)
        return host

    def f(x):
        a = io_callback(record("a"), jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True)
        b = io_callback(record("b"), jax.ShapeDtypeStruct(x.shape, x.dtype), x + 1, ordered=True)
        io_callback(record("c"), jax.ShapeDtypeStruct(x.shape, x.dtype), a + b, ordered=True)
        return a - b

    x = np.arange(3, dtype=np.int32)
    expected = jax.jit(f)(x)
    jax.effects_barrier()
    jax_log, log[:] = list(log), []
    assert_bitwise(run(f, x, **options), expected)
    assert log == jax_log and [t for t, _ in log] == ["a", "b", "c"]


@pytest.mark.parametrize("options", MODES, ids=MODE_IDS)
def test_callbacks_in_fori_loop_and_cond(options):
    log = []

    def host(i, c):
        log.append((int(i), float(c)))
        return np.float32(c * 0.5 + i)

    def f(x, flag):
        def body(i, c):
            c = io_callback(host, jax.ShapeDtypeStruct((), np.float32), i, c, ordered=True)
            return c * np.float32(1.25)
        c = lax.fori_loop(0, 6, body, x)
        return lax.cond(flag > 0,
                        lambda v: jax.pure_callback(lambda a: np.float32(a * 3), jax.ShapeDtypeStruct((), np.float32), v),
                        lambda v: v - 1, c)

    x = np.float32(2)
    for flag in (np.int32(1), np.int32(0)):
        expected = jax.jit(f)(x, flag)
        jax.effects_barrier()
        jax_log, log[:] = list(log), []
        assert_bitwise(run(f, x, flag, **options), expected)
        assert log == jax_log and len(log) == 6
        log.clear()


def test_long_loop_with_callback_stays_correct_in_auto_mode():
    count = [0]

    def host(c):
        count[0] += 1
        return c + np.int32(1)

    def f(n):
        return lax.fori_loop(0, n, lambda i, c: jax.pure_callback(host, jax.ShapeDtypeStruct((), np.int32), c),
                             np.int32(0))

    n = np.int32(2500)  # past the auto loop-compilation threshold
    exe = lowering.compile(interop.import_jax(f, n))
    assert int(exe(n)[0]) == 2500 and count[0] == 2500


# ----------------------------------------------------------------------------
# Errors from callbacks, equinox's runtime checks
# ----------------------------------------------------------------------------


def test_callback_exception_as_jax_jit():
    def host(a):
        raise ValueError("bad value")

    def f(x):
        return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    x = np.ones(2, np.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as jax_error:
        jax.jit(f)(x)
    with pytest.raises(HostCallbackError) as ours:
        run(f, x)
    e = ours.value
    assert isinstance(e, jax.errors.JaxRuntimeError) and isinstance(e, ExecutionError) and isinstance(e, XlaError)
    assert isinstance(e.__cause__, ValueError) and str(e.__cause__) == "bad value"
    assert str(e).startswith("INTERNAL: CpuCallback error calling callback: Traceback (most recent call last):")
    assert str(jax_error.value).startswith("INTERNAL: CpuCallback error calling callback: Traceback")
    assert str(e).splitlines()[-2] == str(jax_error.value).splitlines()[-1] == "ValueError: bad value"
    assert "jax.pure_callback(" in str(e).splitlines()[-1] and "host" in str(e).splitlines()[-1]


def test_equinox_error_if():
    eqx = pytest.importorskip("equinox")

    def f(x):
        y = eqx.error_if(x, x > 2, "x too big")
        return eqx.error_if(y * 2, jnp.isnan(y).any(), "nan")

    good, bad = np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32)
    exe = lowering.compile(interop.import_jax(f, good))
    assert_bitwise(exe(good), jax.jit(f)(good))
    # jax.jit raises JaxRuntimeError, or ValueError with the same message when the failure surfaces from a
    # result buffer it already handed out (here: the second check reads the first's result); ours is both
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError)) as jax_error:
        jax.jit(f)(np.array([0, 1, 5], np.float32))
    with pytest.raises(HostCallbackError) as ours:
        exe(np.array([0, 1, 5], np.float32))
    assert isinstance(ours.value, jax.errors.JaxRuntimeError) and isinstance(ours.value, ValueError)
    assert "_EquinoxRuntimeError: x too big" in str(ours.value)
    jax_tail = str(jax_error.value).split("_EquinoxRuntimeError: ", 1)[1]
    assert str(ours.value).split("_EquinoxRuntimeError: ", 1)[1].startswith(jax_tail.rstrip())
    assert type(ours.value.__cause__).__name__ == "_EquinoxRuntimeError"
    # Also when traced with the failing input and in a loop (branched_error_if inside a scan)
    def g(xs):
        return lax.scan(lambda c, x: (c + eqx.error_if(x, x > 2, "x too big"), None), jnp.float32(0), xs)[0]

    fine = np.array([0, 1, 2, 1], np.float32)
    for options in MODES:
        exe = lowering.compile(interop.import_jax(g, bad), **options)
        assert_bitwise(exe(fine), jax.jit(g)(fine))
        with pytest.raises(HostCallbackError, match="x too big"):
            exe(bad)


# ----------------------------------------------------------------------------
# Programs whose callbacks were not captured
# ----------------------------------------------------------------------------


def _program(x):
    y = jax.pure_callback(np.cos, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    jax.debug.print("y={}", y)
    return y + 1


def test_stablehlo_text_callback_not_captured():
    x = np.ones(3, np.float32)
    text = jax.jit(_program).lower(x).as_text()
    exe = lowering.compile(interop.import_jax(text))  # lowering succeeds; the call fails when it runs
    with pytest.raises(UnsupportedError, match=r"host callback #0 .* was not captured.*traced in this process"):
        exe(x)


def test_printed_and_exported_module_callback_not_captured():
    x = np.ones(3, np.float32)
    module = interop.import_jax(_program, x)
    text = str(module)
    assert '#hlo.host_callback<"jax.pure_callback(numpy.cos) #0">' in text
    assert "#hlo.host_callback<\"jax.debug.print('y={}') #1\">" in text
    with pytest.raises(UnsupportedError, match=r"host callback jax.pure_callback\(numpy.cos\) #0 .*was not captured"):
        lowering.compile(parse_module(text))(x)
    stablehlo = interop.export_stablehlo(module)  # the index only, as jax wrote it
    assert "index = 0 : ui64" in stablehlo and "hlo.host_callback" not in stablehlo
    with pytest.raises(UnsupportedError, match="was not captured"):
        lowering.compile(interop.import_jax(stablehlo))(x)
    # the module itself keeps the callables: clones and later compiles still call back
    (out,) = lowering.compile(module.clone())(x)
    assert out.tobytes() == np.asarray(jax.jit(_program)(x)).tobytes()


def test_serialized_program_in_a_fresh_process(tmp_path):
    x = np.ones(3, np.float32)
    lowered = jax.jit(_program).lower(x)
    path = tmp_path / "prog.mlirbc"
    path.write_bytes(lowered.compiler_ir("stablehlo").operation.get_asm(binary=True))
    np.savez(tmp_path / "args.npz", arg0=x)
    xla_run = os.path.join(os.path.dirname(sys.executable), "xla-run")
    proc = subprocess.run([xla_run, str(path), "--inputs", str(tmp_path / "args.npz")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    assert "xla_ffi_python_cpu_callback" in proc.stderr and "was not captured" in proc.stderr
    assert "Traceback" not in proc.stderr
