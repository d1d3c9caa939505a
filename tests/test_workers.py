"""Pieces of large kernels on several CPUs at once (lowering/runtime/workers.py): on numba's polling threads where its
threading layer polls (x86-64 with OpenMP or TBB), else on Python worker threads. The bits never depend on
which, or on how many CPUs ran them (tests/test_blas_threads.py and tests/test_fusion.py check each kind of
piece in both modes)."""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
import pytest

import lowering.kernels.context
from interop import import_jax
from lowering.runtime import blas, workers
from lowering.executor import fusion

from helpers import in_forked_child

F32 = np.float32


def test_even_bounds_cover_the_range_in_aligned_pieces():
    assert workers.even_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert workers.even_bounds(1000, 2, 64) == [(0, 448), (448, 1000)]
    assert workers.even_bounds(1, 2) == [(0, 1)]
    assert workers.even_bounds(0, 2) == []


def test_the_mxcsr_pieces_take_follows_the_executors_denormal_mode():
    # (The parallel functions read it with loop_runtime.mxcsr on the calling thread, as current_mxcsr does.)
    if not workers.numba_threads_available():
        pytest.skip("numba's threading layer does not poll here (or the CPU is not x86-64)")
    from lowering.runtime.denormals import mode_switch
    from lowering.runtime.loop_runtime import current_mxcsr

    seen = {}
    for mode in ("flush", "keep"):
        with mode_switch(mode):
            seen[mode] = int(current_mxcsr())
    ftz_daz = (1 << 15) | (1 << 6)
    assert seen["flush"] & ftz_daz == ftz_daz
    assert seen["keep"] & ftz_daz == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # (the child does not use jax)
def test_a_forked_child_runs_the_pieces_on_python_workers(monkeypatch, products_on_blas):
    # GNU OpenMP aborts a forked child that starts a parallel region its parent used: after numba's threads ran
    # a split matmul and a fused loop's pieces in the parent, the child runs them on Python workers, same bits.
    # (The product on BLAS's split route, whose plans this test checks: on the measured AVX-512 host it would be
    # YNNPACK's order in register tiles, and blas._NATIVE_PLANS held only what earlier tests had left there.)

    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    monkeypatch.setattr(lowering.kernels.context, "usable_cpus", lambda: 2)
    for name in blas.ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    workers.run_pieces(lambda: None, [(), ()])  # the parent has a pool of Python workers (whose threads a child
    rng = np.random.default_rng(0)              # does not have: it must start its own)
    x = rng.standard_normal((256, 1024)).astype(F32)
    w = rng.standard_normal((1024, 1024)).astype(F32) * F32(0.05)
    big = rng.standard_normal(4 * fusion.PARALLEL_ELEMENTS).astype(F32)

    product = lowering.compile(import_jax(lambda x, w: jnp.tanh(x @ w), x, w))
    loop = lowering.compile(import_jax(lambda v: jnp.exp(jnp.tanh(v) * F32(0.5)) + v, big), fusion="always")
    want = [product(x, w)[0], loop(big)[0]]
    (runner,) = [r for name, r in loop._fn.__globals__.items() if name.startswith("fz")]
    assert len(runner.pieces) == 2
    if workers.numba_threads_available():
        assert runner.bounds is not None  # the parent ran the loop's pieces on numba's threads
        assert blas._NATIVE_PLANS  # and the product's

    def child():
        assert not workers.numba_threads_available()
        got = [product(x, w)[0], loop(big)[0]]
        same = all(np.array_equal(g.view(np.int32), v.view(np.int32)) for g, v in zip(got, want))
        return b"same" if same else b"different"

    assert in_forked_child(child) == b"same"
