"""xDSL universe entry point: makes ``xdsl-opt`` know the hlo dialect (and our passes)."""

from xdsl.universe import Universe


def _hlo_dialect():
    from .dialect import HLO

    return HLO


def _quant_dialect():
    from .quant import QUANT

    return QUANT


def _passes():
    try:
        from passes.registry import universe_passes
    except ImportError:  # passes package not importable: dialect only
        return {}
    return universe_passes()


HLO_UNIVERSE = Universe(all_dialects={"hlo": _hlo_dialect, "quant": _quant_dialect}, all_passes=_passes())
