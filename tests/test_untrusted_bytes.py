"""Corrupted MLIR bytecode / portable artifacts give project errors, never a crash of the caller's process."""

import numpy as np
import pytest

from interop import import_jax, import_stablehlo
from interop.bytecode_check import check_bytecode
from xla_dialect.errors import MlirParseError, XlaError


def _artifact() -> bytes:
    import jax
    import jax.numpy as jnp

    x = np.ones((4, 4), np.float32)
    return bytes(jax.export.export(jax.jit(lambda v: jnp.sin(v) @ v.T))(x).mlir_module_serialized)


def test_valid_artifact_passes_the_checks():
    data = _artifact()
    check_bytecode(data)
    untrusted, trusted = import_jax(data), import_stablehlo(data, trusted=True)
    assert str(untrusted) == str(trusted)


def test_producer_that_is_not_utf8():
    # jaxlib aborts the whole process (SIGABRT) on this one.
    data = bytearray(_artifact())
    data[data.index(b"StableHLO") + 2] = 0xFF
    with pytest.raises(MlirParseError, match="producer string is not UTF-8"):
        import_jax(bytes(data))


@pytest.mark.parametrize("cut", [5, 40, -7])
def test_truncated_bytecode(cut):
    data = _artifact()
    with pytest.raises(XlaError):
        import_jax(data[:cut])


def _mutations(count: int, seed: int):
    data = _artifact()
    rng = np.random.default_rng(seed)
    for _ in range(count):
        b = bytearray(data)
        for _ in range(rng.integers(1, 4)):
            b[rng.integers(0, len(b))] = rng.integers(0, 256)
        yield bytes(b)


def _import_or_project_error(data: bytes) -> None:
    try:
        import_jax(data)
    except XlaError:
        pass


def test_random_corruptions_few():
    for data in _mutations(6, seed=1):  # seed 1 holds a mutation on which jaxlib's string conversion aborts
        _import_or_project_error(data)


@pytest.mark.slow
def test_random_corruptions_many():
    for data in _mutations(200, seed=2):
        _import_or_project_error(data)
