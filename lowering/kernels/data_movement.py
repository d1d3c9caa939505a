"""NumPy kernels: data_movement family."""

from __future__ import annotations
