"""Shared pytest configuration: JAX on CPU in x64 mode, RNG fixtures, the project's own ``--corpus`` option."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile one module under many monkeypatched settings (hosts, thresholds) that the executable cache's key
# does not see: off unless a test asks for it, or the run sets it (=roundtrip: every executable read back from its
# stored form; docs/executor.md).
os.environ.setdefault("XLA_DIALECT_EXECUTABLE_CACHE", "0")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def rng():
    """A deterministic NumPy random generator."""
    return np.random.default_rng(0)


def pytest_addoption(parser):
    """``--corpus PATH``: the StableHLO conformance corpus of tests/test_conformance.py (this project's
    tests only; the installed pytest plugin adds nothing of it to other projects' sessions)."""
    parser.addoption("--corpus", default=None, metavar="PATH",
                     help="StableHLO conformance corpus folder (default: ../shared/corpus next to the repository)")


@pytest.fixture
def products_on_blas(monkeypatch):
    """Float products go to BLAS, as on hosts without the AVX-512 kernels whose order the executor replays (on
    the measured host, YNNPACK's products of any size are computed in its order by
    ``lowering/kernels/chain_tiles.py``; lhs-transposed products, rounded kernels and other CPUs use BLAS): for
    the tests of the BLAS route itself (thread limits, splits, gemm calls in compiled loops)."""
    from lowering.kernels import host

    monkeypatch.setattr(host, "measured_host", lambda: False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.sample(k)``: the sampled sweeps' other cases marked ``slow`` (:func:`helpers.mark_unsampled_slow`),
    before pytest's ``-m`` selection reads the marks (``tryfirst``)."""
    from helpers import mark_unsampled_slow

    mark_unsampled_slow(items)
