"""``lowering.executor.memory.program_memory``: the executor's peak of live buffers, counted as its kernels hold
them (views and loop carries passed on unchanged are one buffer), and close to what a call really allocates."""

from __future__ import annotations

import os
import sys
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np

import interop
import lowering
from lowering.executor.memory import program_memory

N = 1024
ARRAY = N * 4  # bytes of one f32[N]


def _real_program(name: str):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import real_programs

    return getattr(real_programs, name)()


def _peak(fn, *args) -> int:
    exe = lowering.compile(interop.import_jax(fn, *args))
    return program_memory(exe.entry.parent_op(), exe.entry.sym_name.data).peak


def test_a_broadcast_is_a_view_of_its_operand():
    """``x + 1.0``: the argument and the result; the broadcast scalar adds its 4 bytes, not an array."""
    x = np.ones(N, np.float32)
    assert 2 * ARRAY <= _peak(lambda x: x + 1.0, x) <= 2 * ARRAY + 16


def test_a_loop_invariant_carry_is_its_operand():
    """A while loop closing over ``a`` carries it unchanged (jax passes it as a carry): one buffer with the
    argument. Live at the body's multiply: ``a``, the carried ``x`` and the product (the result is the last ``x``).
    Counting the invariant carry as its own buffer would give 4 arrays."""
    a = np.full(N, 1.5, np.float32)
    fn = lambda a: jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * a, c[1] + 1), (a, 0))[0]  # noqa: E731
    assert 3 * ARRAY <= _peak(fn, a) <= 3 * ARRAY + 64


def test_a_loops_condition_and_body_do_not_run_at_once():
    """The condition's temporaries (``x * x``, its comparison) are freed before the body runs: the larger
    region's peak counts, not their sum."""
    a = np.full(N, 2.0, np.float32)

    def fn(a):
        def cond(c):
            return jnp.all(c[0] * c[0] > 1e-3)

        return jax.lax.while_loop(cond, lambda c: (jnp.sqrt(c[0]) * 0.5, c[1] + 1), (a, 0))[0]

    # a; the carry; the body's sqrt and product (or the condition's square and comparison): 4 arrays at most
    assert _peak(fn, a) <= 4 * ARRAY + 64


def test_the_model_is_close_to_what_a_call_allocates():
    """On a Newton iteration over 256 KiB arrays (interpreted), the model is within 25% of the NumPy bytes a call
    allocates (tracemalloc's peak; kernels' temporaries, which the model does not count, make up the difference:
    1,282 against 1,088 KiB when measured)."""

    newton_sqrt = _real_program("newton_while").fn  # (the benchmark's program, on 64x more elements)
    a = np.random.default_rng(0).uniform(1, 100, 65536).astype(np.float32)
    exe = lowering.compile(interop.import_jax(newton_sqrt, a), fusion="never", loop_compilation="never")
    model = program_memory(exe.entry.parent_op(), exe.entry.sym_name.data).peak
    exe(a)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        exe(a)
        measured = tracemalloc.get_traced_memory()[1] - base + a.nbytes  # (the argument was allocated before)
    finally:
        tracemalloc.stop()
    assert 0.8 <= measured / model <= 1.25, (measured, model)
