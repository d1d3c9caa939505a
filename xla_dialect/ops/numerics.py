"""hlo ops. Numerical library ops: reduce_precision, fft, cholesky, triangular_solve, batch_norm_*, rng, rng_bit_generator, quantization."""

from __future__ import annotations

OPS: list = []


class NumericsBuilder:
    """Builder methods of the numerics family."""
