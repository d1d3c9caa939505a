"""The hlo ops, one module per op family. :data:`ALL_OPS` lists every op class."""

from . import constants, control_flow, conversion, data_movement, elementwise, linalg, reduction, sorting

FAMILIES = (constants, elementwise, conversion, data_movement, linalg, reduction, sorting, control_flow)

ALL_OPS = [op for family in FAMILIES for op in family.OPS]
"""Every hlo op class, in family order."""

OPS_BY_NAME = {op.name: op for op in ALL_OPS}
"""``'hlo.add'`` -> op class."""
