"""hlo ops: data_movement family."""

from __future__ import annotations

OPS: list = []


class DataMovementBuilder:
    """Builder methods of the data_movement family."""
