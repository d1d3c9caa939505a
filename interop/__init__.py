"""Interoperation with JAX, StableHLO and XLA; the command-line tools."""
