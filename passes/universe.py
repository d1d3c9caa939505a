"""xDSL universe entry point for the passes: ``xdsl-opt -p canonicalize-broadcasts`` knows them.

(The hlo dialect comes from :data:`xla_dialect.universe.HLO_UNIVERSE`; xDSL merges the universes.)
"""

from xdsl.universe import Universe

from .registry import universe_passes

PASSES_UNIVERSE = Universe(all_passes=universe_passes())
"""Every built-in pass (those whose name xDSL itself uses as ``hlo-<name>``)."""
