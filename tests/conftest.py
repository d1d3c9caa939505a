"""Shared pytest configuration: JAX on CPU in x64 mode, RNG fixtures."""

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
