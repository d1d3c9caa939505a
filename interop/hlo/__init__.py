"""XLA's HLO text: import it into the hlo dialect with its layouts, print hlo modules back as HLO text.

:func:`import_hlo` reads HLO module text (XLA dumps, ``jax.jit(f).lower(x).as_text(dialect="hlo")``,
``compile().as_text()``, XLA's ``.hlo`` files); :func:`export_hlo` prints a module as HLO text with
its layouts, which XLA's own parser reads back; :func:`run_hlo_on_xla` compiles HLO text with
jaxlib's XLA and runs it (the reference for differential checks).
"""

from .exporter import export_hlo
from .importer import import_hlo
from .syntax import parse_hlo_text
from .xla import run_hlo_on_xla, run_hlo_text_on_xla

__all__ = ["export_hlo", "import_hlo", "parse_hlo_text", "run_hlo_on_xla", "run_hlo_text_on_xla"]
