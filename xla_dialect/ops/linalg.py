"""hlo ops: linalg family."""

from __future__ import annotations

OPS: list = []


class LinalgBuilder:
    """Builder methods of the linalg family."""
