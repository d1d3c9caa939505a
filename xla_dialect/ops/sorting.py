"""hlo ops: sorting family."""

from __future__ import annotations

OPS: list = []


class SortingBuilder:
    """Builder methods of the sorting family."""
