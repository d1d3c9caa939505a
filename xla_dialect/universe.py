"""xDSL universe entry point: makes ``xdsl-opt`` know the hlo and quant dialects.

The passes come from their own entry point (:data:`passes.universe.PASSES_UNIVERSE`): the IR does not
import the layers above it.
"""

from xdsl.universe import Universe


def _hlo_dialect():
    from .dialect import HLO

    return HLO


def _quant_dialect():
    from .quant import QUANT

    return QUANT


HLO_UNIVERSE = Universe(all_dialects={"hlo": _hlo_dialect, "quant": _quant_dialect})
