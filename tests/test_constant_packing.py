"""Constants of generated code in packed arrays (lowering/executor/constant_packing.py): the same values, the same
bits, a few arguments per call instead of one per constant."""

import jax
import jax.numpy as jnp
import numba
import numpy as np
import pytest

import lowering
from helpers import INSPECTS_THE_LOWERING
from interop import import_jax
from lowering.executor import compiled_segments
from lowering.executor.constant_packing import pack_constants
from lowering.runtime.loop_runtime import PAIRS_ENABLED, packed_array

SOURCE = """def segment(k1, k2, k3, k4, k5, k6, k7, p0):
    return (k1 + p0[0], k2[0], k3[1, 2], k4[0], k5, k6, k7[2])
"""


def test_scalars_and_arrays_are_packed_by_type_and_the_rest_kept():
    values = [np.int32(3), np.full(1, 2.5, np.float32), np.arange(6, dtype=np.int64).reshape(2, 3), PAIRS_ENABLED,
              np.complex64(1.5 + 2j), True, np.full(3, 7.0, np.float32)]
    text, arguments = pack_constants(SOURCE, "segment", [f"k{i}" for i in range(1, 8)], values)
    header, *prologue = text.splitlines()[:8]
    assert header == "def segment(_ks_int32, _ks_bool, _ka_float32, _ka_int64, k4, k5, p0):"
    assert prologue[0] == "    k1 = _ks_int32[0]" and "    k6 = _ks_bool[0]" in prologue
    assert "k2 = packed_array(_ka_float32, 0, (1,))" in text and "k7 = packed_array(_ka_float32, 16, (3,))" in text
    assert arguments[4] is PAIRS_ENABLED and arguments[5] == np.complex64(1.5 + 2j)  # (identity kept; complex not packed)
    namespace = {"packed_array": packed_array, "np": np}
    exec(text, namespace)
    got = numba.njit(namespace["segment"])(*arguments, np.ones(1, np.int32))
    assert got == (4, 2.5, 5, 1, np.complex64(1.5 + 2j), True, 7.0)


def test_sources_without_constants_or_the_function_are_left_or_refused():
    assert pack_constants(SOURCE, "segment", [], []) == (SOURCE, [])
    with pytest.raises(ValueError, match="no top-level function 'loop'"):
        pack_constants(SOURCE, "loop", ["k1"], [np.int32(1)])
    with pytest.raises(ValueError, match="do not start with the constants"):
        pack_constants(SOURCE, "segment", ["k2"], [np.int32(1)])


@INSPECTS_THE_LOWERING
def test_a_segment_of_many_constants_takes_a_few_arguments_and_keeps_the_bits():
    """Forty distinct constants of several types (f32 scalars as one-element arrays, int32 and bool scalars, a
    table): the compiled segment is called with a handful of arrays and gives the interpreter's and jax.jit's
    bits."""
    def fn(x, i):
        for k in range(10):
            x = jnp.where(i > k, x * np.float32(1.0 + k / 7) - np.float32(k / 3), jnp.sin(x) + np.float32(1e-40))
            i = i + (k % 3) * (x[0] > k / 5)
        return x + jnp.asarray(np.linspace(-1, 1, 8, dtype=np.float32)), i

    x, i = np.linspace(-2, 2, 8, dtype=np.float32), np.int32(4)
    module = import_jax(fn, x, i)
    compiled = lowering.compile(module, loop_compilation="always", fusion="never")
    segments = [r for name, r in compiled._fn.__globals__.items()
                if name.startswith("sg") and isinstance(r, compiled_segments.CompiledSegment)]
    assert segments
    got = compiled(x, i)
    want = lowering.compile(module, loop_compilation="never", fusion="never")(x, i)
    for segment in segments:
        assert segment.kernel is not None and len(segment.constants) <= 8, len(segment.constants)
        assert len(segment.segment.constants) > len(segment.constants)
    for g, w, j in zip(got, want, jax.jit(fn)(x, i)):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), np.asarray(w).view(np.uint32))
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), np.asarray(j).view(np.uint32))


def test_returned_constants_are_copies_where_the_views_have_no_owner():
    """Where every return is a tuple of names the constants are views without an owner (reference counts without
    atomic operations); a constant the function returns is copied on its way out, so Python never holds a view of
    the packed buffer."""
    source = "def segment(k1, k2, k3, p0):\n    x = k2\n    return (x, k3, p0)\n"
    values = [np.int32(1), np.arange(4, dtype=np.float32), np.ones((2, 2), np.float32)]
    text, arguments = pack_constants(source, "segment", ["k1", "k2", "k3"], values)
    assert "k2 = borrowed_array(_ka_float32, 0, (4,))" in text
    assert "    return (owned(x), owned(k3), owned(p0),)" in text
    from lowering.runtime.loop_runtime import borrowed_array, owned

    namespace = {"borrowed_array": borrowed_array, "owned": owned, "np": np}
    exec(text, namespace)
    p0 = np.zeros(3)
    x, k3, p = numba.njit(namespace["segment"])(*arguments, p0)
    np.testing.assert_array_equal(x, values[1])
    np.testing.assert_array_equal(k3, values[2])
    (buffer,) = [a for a in arguments if isinstance(a, np.ndarray) and a.dtype == np.float32]
    assert not np.shares_memory(x, buffer) and not np.shares_memory(k3, buffer)
    assert np.shares_memory(p, p0)  # (an argument with an owner is returned as it is)
    x[:] = -1
    np.testing.assert_array_equal(buffer[:4], values[1])


def test_prologue_buffers_are_read_without_owners_kept_alive_to_every_return():
    """Buffers a generated function allocates once per call are read through views without an owner (no atomic
    reference counts in its loops); their owners are used before every return, so numba keeps them alive while
    the views are read, on every path, and a buffer the function returns (a segment's chunk hands its values to
    the next chunk) is copied on its way out."""
    from lowering.executor.constant_packing import unowned_buffers
    from lowering.runtime.loop_runtime import keep_alive, new_array, owned, unowned_view

    source = ("def loop(x, n):\n    h1 = new_array((4,), np.float64)\n    d2 = new_array(2, np.int64)\n"
              "    v3 = new_array((4,), np.float64)\n    s = 0.0\n    for i in range(n):\n        h1[:] = x * i\n"
              "        if s > 100.0:\n            return (s, v3)\n        s += h1.sum()\n    return (s, h1)\n")
    text = unowned_buffers(source)
    assert "    h1_owner = new_array((4,), np.float64)\n    h1 = unowned_view(h1_owner)\n" in text
    assert "    d2 = unowned_view(d2_owner)\n" in text and "    v3 = new_array((4,), np.float64)\n" in text
    assert text.count("keep_alive((h1_owner, d2_owner,))") == 2  # (the early return too, at its indentation)
    assert ("            _owned_s = owned(s)\n            _owned_v3 = owned(v3)\n"
            "            keep_alive((h1_owner, d2_owner,))\n            return (_owned_s, _owned_v3,)") in text
    namespace = {"np": np, "new_array": new_array, "unowned_view": unowned_view, "keep_alive": keep_alive,
                 "owned": owned}
    exec(text, namespace)
    x = np.arange(4.0)
    s, h1 = numba.njit(namespace["loop"])(x, 5)
    assert s == sum(6.0 * i for i in range(5))
    np.testing.assert_array_equal(h1, x * 4)  # (the buffer, copied: it outlives the call)
    assert numba.njit(namespace["loop"])(x, 50)[0] == 126.0  # (the early return)
    other = "def f(x):\n    h1 = new_array((4,), np.float64)\n    return h1.sum()\n"
    assert unowned_buffers(other) == other  # (a return that is not a tuple of names: left as it is)


def test_returned_buffers_are_copied_before_their_owners_are_released():
    """A function returning an array of its own and views of three per-call buffers: numba releases a variable after
    its last use, so when the buffers' ``keep_alive`` came before the copies, the buffers were freed first and a
    copy's allocation took another buffer's memory -- the last value came back holding the one before's (measured
    with this function; in equinox's MLP train step compiled, its first layer's weight and bias gradients)."""
    from lowering.executor.constant_packing import unowned_buffers
    from lowering.runtime.loop_runtime import keep_alive, new_array, owned, unowned_view

    source = ("def outputs(x):\n    o = new_array(1, np.float32)\n    o[0] = 7\n"
              + "".join(f"    h{i} = new_array((32,), np.float32)\n" for i in range(3))
              + "".join(f"    h{i}[:] = x + {i}\n" for i in range(3)) + "    return (o, h0, h1, h2)\n")
    namespace = {"np": np, "new_array": new_array, "unowned_view": unowned_view, "keep_alive": keep_alive,
                 "owned": owned}
    exec(unowned_buffers(source), namespace)
    outputs = numba.njit(namespace["outputs"])
    x = np.arange(32, dtype=np.float32)
    for _ in range(20):
        o, *buffers = outputs(x)
        assert o[0] == 7
        for i, value in enumerate(buffers):
            np.testing.assert_array_equal(value, x + i)
