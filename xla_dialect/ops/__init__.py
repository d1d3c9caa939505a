"""The hlo ops, one module per op family. :data:`ALL_OPS` lists every op class."""

from . import (
    collectives,
    constants,
    control_flow,
    conversion,
    data_movement,
    effects,
    elementwise,
    indexing,
    linalg,
    numerics,
    reduction,
    sorting,
    windowed,
)

FAMILIES = (
    constants, elementwise, conversion, data_movement, indexing, linalg, windowed, reduction, sorting,
    numerics, control_flow, effects, collectives,
)

ALL_OPS = [op for family in FAMILIES for op in family.OPS]
"""Every hlo op class, in family order."""

OPS_BY_NAME = {op.name: op for op in ALL_OPS}
"""``'hlo.add'`` -> op class."""
