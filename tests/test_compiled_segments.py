"""Compiled straight-line segments (lowering/executor/compiled_segments.py): the same bits as the ops' own kernels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lowering
from helpers import INSPECTS_THE_LOWERING
from interop import import_jax
from lowering.executor import compiled_loops, compiled_segments

RNG = np.random.default_rng(3)
F32 = np.float32


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint8) if x.dtype.kind == "b" else x.view(f"u{x.dtype.itemsize}")


def _setup(y, w, t):
    # An ODE solver's step-size setup: norms, a small product, slices, a concatenate, comparisons and a select.
    f0 = jnp.concatenate([y[1:], -jnp.sin(y[:1]) * w])
    d0 = jnp.sqrt(jnp.mean((y / (1e-6 + jnp.abs(y))) ** 2))
    d1 = jnp.sqrt(jnp.mean((f0 / (1e-6 + jnp.abs(y))) ** 2))
    h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
    m = jnp.outer(y, f0) @ jnp.ones((y.shape[0], 3), y.dtype)
    return h0 * t, m.sum(axis=0), jnp.maximum(f0, y).astype(jnp.int32)


def _specials(dtype, n):
    x = RNG.standard_normal(n).astype(dtype)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40]
    return x


def _segments(exe) -> list:
    return [r for name, r in exe._fn.__globals__.items()
            if name.startswith("sg") and isinstance(r, compiled_segments.CompiledSegment)]


@pytest.mark.parametrize("denormals", ["flush", "keep"])
@pytest.mark.parametrize("special", [False, True], ids=["normal", "specials"])
@pytest.mark.sample(2)
def test_a_segment_gives_the_kernels_bits(denormals, special):
    y = _specials(F32, 8) if special else RNG.standard_normal(8).astype(F32)
    w, t = F32(0.3), F32(2.5)
    module = import_jax(_setup, y, w, t)
    compiled = lowering.compile(module, loop_compilation="always", denormals=denormals)
    interpreted = lowering.compile(module, loop_compilation="never", denormals=denormals)
    assert "compiled segment of" in compiled.source and "compiled segment" not in interpreted.source
    (segment,) = _segments(compiled)
    assert segment.kernel is None  # compiled at its first call ("always")
    got, want = compiled(y, w, t), interpreted(y, w, t)
    assert segment.kernel is not None
    for g, i in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(i).dtype and np.shape(g) == np.shape(i)
        np.testing.assert_array_equal(_bits(g), _bits(i))
    if not special and denormals == "flush":
        for g, j in zip(got, jax.jit(_setup)(y, w, t)):
            np.testing.assert_array_equal(_bits(g), _bits(j))


def test_auto_compiles_after_calls_and_keeps_the_bits():
    # "auto": the ops' own kernels for the first calls, then the segment compiles in the background; one
    # executable gives the same bits on every call.
    y, w, t = RNG.standard_normal(8).astype(F32), F32(0.3), F32(2.5)
    exe = lowering.compile(import_jax(_setup, y, w, t), loop_compilation="auto")
    (segment,) = _segments(exe)
    first = exe(y, w, t)
    for _ in range(compiled_segments.AUTO_CALLS + 1):
        again = exe(y, w, t)
    assert segment.started
    assert compiled_loops.wait_for_background_compiles(timeout=600)
    assert segment.kernel is not None
    last = exe(y, w, t)
    for a, b, c in zip(first, again, last):
        np.testing.assert_array_equal(_bits(a), _bits(b))
        np.testing.assert_array_equal(_bits(a), _bits(c))


@INSPECTS_THE_LOWERING
def test_large_arrays_and_callbacks_are_not_in_segments_and_small_loops_are():
    seen = []

    def fn(x, big):
        a = jnp.sin(x) * 2 + x - jnp.cos(x) * x + 1  # a segment
        jax.debug.callback(lambda v: seen.append(float(v)), a[0])  # a custom call: never in a segment
        b = jax.lax.fori_loop(0, 3, lambda i, v: v * 1.5 + i, a)  # a small loop: in the segment after the callback
        c = jnp.tanh(big) * 3 + big * big - 1  # large values: the fused NumPy kernels
        return jnp.exp(b) * 0.5 + b - jnp.abs(b) * 3 + 2, c

    x, big = RNG.standard_normal(4).astype(F32), RNG.standard_normal(1 << 14).astype(F32)
    exe = lowering.compile(import_jax(fn, x, big), loop_compilation="always")
    segments = _segments(exe)
    assert len(segments) >= 2  # before and after the callback
    assert any("hlo.while" in {op.name for op in segment.segment.ops} for segment in segments)
    for segment in segments:
        names = {op.name for op in segment.segment.ops}
        assert not names & {"hlo.custom_call", "hlo.host_callback"}
        assert all(np.prod(r.type.get_shape()) <= compiled_segments.SEGMENT_MAX_ELEMENTS
                   for op in segment.segment.ops for r in op.results)
    got = exe(x, big)
    want = lowering.compile(import_jax(fn, x, big), loop_compilation="never")(x, big)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    assert len(seen) == 2  # the callback ran once per call, in order with the segments


def test_a_deadline_is_checked_after_a_segment():
    y, w, t = RNG.standard_normal(8).astype(F32), F32(0.3), F32(2.5)
    exe = lowering.compile(import_jax(_setup, y, w, t), loop_compilation="always", timeout=60)
    assert "('a compiled segment')" in exe.source
    exe(y, w, t)



def test_regions_applied_to_arrays_have_no_segments(monkeypatch):
    # A sort comparator is applied to whole arrays of elements (lowering/kernels/sorting.py), not to scalars of
    # its block's types: a run of ops there is never a segment (test_sorting's generic sort found it).
    from test_sorting import build_sort, jax_comparator, not_recognised

    monkeypatch.setenv("XLA_DIALECT_LOOP_COMPILATION", "always")
    x = RNG.standard_normal((3, 200)).astype(F32)
    module, recognised = build_sort([np.float32], x.shape, jax_comparator(1, not_recognised), 1)
    assert not recognised
    exe = lowering.compile(module)
    assert not _segments(exe)
    np.testing.assert_array_equal(exe(x)[0], np.sort(x, axis=1))


def test_operands_a_segment_does_not_read_are_still_its_inputs():
    # A pad of an empty array (and a gather of an empty one) reads nothing from its operand; the segment still
    # takes it as an input, since its interpreted fallback passes it to the op's kernel (KeyError at lowering,
    # found by tests/test_passes_properties.py).
    def fn(x, e):
        p = jnp.pad(e, ((1, 1), (0, 0))) + F32(1)
        y = jnp.sin(x) * F32(2) + jnp.cos(x)
        return (y * y - x).sum() + p.sum(), jnp.tanh(y) + F32(0.5)

    x, e = RNG.standard_normal(8).astype(F32), np.zeros((0, 2), F32)
    module = import_jax(fn, x, e)
    compiled = lowering.compile(module, loop_compilation="always")
    interpreted = lowering.compile(module, loop_compilation="never")
    assert _segments(compiled)
    for g, i in zip(compiled(x, e), interpreted(x, e)):
        np.testing.assert_array_equal(_bits(g), _bits(i))


@INSPECTS_THE_LOWERING
def test_a_long_run_is_one_call_of_chunks_with_the_kernels_bits(monkeypatch):
    """A run longer than SEGMENT_MAX_OPS (an ODE solver's set-up) is one segment of chunks, each its own numba
    function, called one after the other in machine code (SegmentChain): one call from Python, the kernels' bits,
    values passed between chunks whatever their kind (arrays, boxed float scalars, integers, a loop's state)."""
    monkeypatch.setattr(compiled_segments, "SEGMENT_MAX_OPS", 12)

    def fn(y, w, t):
        h, m, k = _setup(y, w, t)
        s = jax.lax.fori_loop(0, 4, lambda i, v: v * w + jnp.sin(v) * i, m)  # a loop inside the run
        for _ in range(3):
            h = h * 1.5 - jnp.sqrt(jnp.abs(h)) + (k[0] > 0)
            s = jnp.cos(s) * h + s
        return h, s, k

    y, w, t = _specials(F32, 8), F32(0.3), F32(2.5)
    module = import_jax(fn, y, w, t)
    # (fusion off: with SEGMENT_MAX_OPS this low, element-wise chains of 3 ops would go to fused kernels instead)
    compiled = lowering.compile(module, loop_compilation="always", fusion="never")
    main = compiled.source.split("def f_main")[1]
    assert main.count("compiled segment") == 1, main  # the whole function: one call
    # (the loop body has a segment of its own, for the loop's interpreted runs)
    segment = max(_segments(compiled), key=lambda s: len(s.segment.ops))
    assert isinstance(segment.segment, compiled_segments.SegmentChain) and len(segment.segment.chunks) >= 4
    assert "hlo.while" in {op.name for op in segment.segment.ops}
    got, want = compiled(y, w, t), lowering.compile(module, loop_compilation="never", fusion="never")(y, w, t)
    assert segment.kernel is not None
    for g, i in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(i).dtype and np.shape(g) == np.shape(i)
        np.testing.assert_array_equal(_bits(g), _bits(i))


@INSPECTS_THE_LOWERING
def test_ops_of_constants_are_computed_when_lowering_not_in_segments():
    """Ops whose operands are all known when lowering (a solver's set-up from Python floats: bit tricks,
    compares and selects on constants, as diffrax computes its time bounds) are computed once, ahead of the
    segments, with the same kernels: the segment reads them as constants and keeps the kernels' bits."""
    def fn(y):
        t = jnp.float32(0.25)
        for _ in range(8):  # constants only: nextafter-like bit arithmetic
            bits = jax.lax.bitcast_convert_type(t, jnp.int32)
            t = jnp.where(t > 0, jax.lax.bitcast_convert_type(bits + 1, jnp.float32), t) * 1.5
        z = y
        for _ in range(4):
            z = jnp.sin(z) * t + jnp.cos(z[::-1])
        return z, t

    y = _specials(F32, 8)
    module = import_jax(fn, y)
    compiled = lowering.compile(module, loop_compilation="always", fusion="never")  # (the rest: one segment)
    (segment,) = _segments(compiled)
    names = [op.name for op in segment.segment.ops]
    assert "hlo.bitcast_convert" not in names and "hlo.sine" in names
    assert compiled.source.split("def f_main")[1].count("# hlo.bitcast_convert") == 0  # not even bound in Python
    got = compiled(y)
    want = lowering.compile(module, loop_compilation="never", fusion="never")(y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w))


@INSPECTS_THE_LOWERING
def test_a_conditional_on_a_known_selector_is_its_branchs_values():
    """equinox's error_if on a condition computed from constants: XLA inlines the taken branch (which returns
    its operand) and folds what follows; so does the executor when lowering -- the branch with the host callback
    never runs, and the ops after it are constants, not segment work."""
    seen = []

    def fn(y):
        c = jnp.arange(4, dtype=jnp.float32) * 0.5
        bad = c[1] > 2.0  # false, computed from an iota
        checked = jax.lax.cond(bad, lambda: (jax.debug.callback(lambda: seen.append(1)), c * 0)[1], lambda: c)
        scale = jnp.sqrt(checked.sum()) + checked[3]  # (a reduce of constants: folded too)
        z = y
        for _ in range(4):
            z = jnp.sin(z) * scale + jnp.cos(z[::-1])
        return z

    y = _specials(F32, 8)
    module = import_jax(fn, y)
    compiled = lowering.compile(module, loop_compilation="always", fusion="never")
    main = compiled.source.split("def f_main")[1]
    assert "hlo.conditional" not in main and "hlo.sqrt" not in main
    (segment,) = _segments(compiled)
    assert "hlo.sqrt" not in {op.name for op in segment.segment.ops}
    got = compiled(y)
    want = lowering.compile(module, loop_compilation="never", fusion="never")(y)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert not seen
