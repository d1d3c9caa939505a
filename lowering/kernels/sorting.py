"""NumPy kernels: sorting family."""

from __future__ import annotations
