"""Interoperation with JAX, StableHLO and XLA; the command-line tools."""

# import_jax / import_stablehlo: JAX programs and StableHLO (text, bytecode,
# portable artifacts, quantized text) to hlo modules; export_stablehlo: hlo
# modules to StableHLO text that XLA compiles; run_xla: run an hlo module on
# XLA's CPU backend (the reference for builder-made programs); difftest:
# jax.jit against the NumPy executor, output by output (DiffReport).
from .difftest import DiffReport, difftest
from .export import export_stablehlo
from .jax_import import import_jax
from .stablehlo_import import import_stablehlo
from .xla_run import run_xla

__all__ = ["DiffReport", "difftest", "export_stablehlo", "import_jax", "import_stablehlo", "run_xla"]
