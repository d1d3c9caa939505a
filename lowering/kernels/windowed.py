"""NumPy kernels. Windowed ops: convolution, reduce_window, select_and_scatter."""

from __future__ import annotations
