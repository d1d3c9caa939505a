"""hlo ops: reduction family."""

from __future__ import annotations

OPS: list = []


class ReductionBuilder:
    """Builder methods of the reduction family."""
