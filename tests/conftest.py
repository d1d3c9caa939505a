"""Shared pytest configuration: JAX on CPU in x64 mode, RNG fixtures, the project's own ``--corpus`` option."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

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
