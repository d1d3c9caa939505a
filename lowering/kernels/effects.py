"""NumPy kernels. Side effects and program structure: tokens, infeed/outfeed, send/recv, custom_call, composite, optimization_barrier, dimension sizes."""

from __future__ import annotations
