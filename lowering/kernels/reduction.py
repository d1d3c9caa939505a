"""NumPy kernels: reduction family."""

from __future__ import annotations
