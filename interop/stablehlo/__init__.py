"""StableHLO: import it into the hlo dialect (text, bytecode, portable artifacts, quantized text, chlo ops),
export hlo modules as StableHLO text that XLA compiles, run hlo modules on XLA's CPU backend through it.

The importer's modules import one way (see :mod:`interop.stablehlo.importer` for their order); the exporter
(:mod:`~interop.stablehlo.exporter`) shares only :mod:`interop.schema` with them."""

from .entry import import_stablehlo, parse_stablehlo
from .exporter import export_stablehlo
from .importer import Importer, import_mlir_module
from .xla import run_xla

__all__ = ["Importer", "export_stablehlo", "import_mlir_module", "import_stablehlo", "parse_stablehlo", "run_xla"]
