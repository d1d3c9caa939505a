"""hlo ops. Windowed ops: convolution, reduce_window, select_and_scatter."""

from __future__ import annotations

OPS: list = []


class WindowedBuilder:
    """Builder methods of the windowed family."""
