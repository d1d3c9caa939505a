"""NumPy kernels: control flow and structure (tuple, call, while, conditional)."""

from __future__ import annotations
