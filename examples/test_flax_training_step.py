"""The flax training-step example runs and agrees with jax.jit."""

import pytest

pytest.importorskip("flax")
pytest.importorskip("optax")


def test_flax_training_step_example():
    from flax_training_step import main

    assert main(steps=2) < 1e-4
