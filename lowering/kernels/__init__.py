"""Kernel families; importing this package registers every kernel."""

from . import (  # noqa: F401
    collectives, configured, constants, control_flow, conversion, data_movement, effects, elementwise,
    indexing, linalg, numerics, reduction, sorting, windowed)
