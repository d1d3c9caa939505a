"""Interoperation with JAX, StableHLO and XLA; the command-line tools."""

# import_jax / import_stablehlo: JAX programs and StableHLO (text, bytecode,
# portable artifacts, quantized text) to hlo modules; export_stablehlo: hlo
# modules to StableHLO text that XLA compiles; run_xla: run an hlo module on
# XLA's CPU backend (the reference for builder-made programs); difftest:
# jax.jit against the NumPy executor, output by output (DiffReport); import_hlo / export_hlo:
# XLA's HLO module text with its layouts; run_hlo_on_xla: an hlo module on XLA through HLO text;
# load_program: a program file in any format the commands read (programs.FORMATS); compile_sharded: a sharded
# JAX program as XLA partitions it, run one program per device, called like jax.jit (jax/sharded.py);
# random_inputs / trace / find_divergence: generated arguments, every intermediate value of a run, the first
# op where two runs differ (debugging/).
from .debugging import find_divergence, random_inputs, trace
from .comparison import DiffReport
from .stablehlo import export_stablehlo
from .hlo import export_hlo, import_hlo, run_hlo_on_xla
from .jax import ShardedExecutable, compile_sharded, difftest, import_jax
from .programs import load_program
from .stablehlo import import_stablehlo
from .stablehlo import run_xla
from passes.cost_analysis import cost_analysis  # noqa: E402  (XLA's cost analysis of a module; xla-show cost)

__all__ = ["DiffReport", "ShardedExecutable", "compile_sharded", "cost_analysis", "difftest", "export_hlo",
           "export_stablehlo",
           "import_hlo", "import_jax", "import_stablehlo", "load_program", "random_inputs", "run_hlo_on_xla", "run_xla",
           "trace"]
