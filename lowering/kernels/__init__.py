"""Kernel families; importing this package registers every kernel."""

from . import constants, control_flow, conversion, data_movement, elementwise, linalg, reduction, sorting  # noqa: F401
