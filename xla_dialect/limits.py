"""The memory limit: how many bytes any one constant, folded value or intermediate array may take.

A program is text; its shapes can ask for anything (``f32[1000000,1000000]`` is 4 TB). Before the
executor allocates an array (every op result, checked once when the program is lowered, since shapes are
static) and before a constant is materialized from text, its size is checked against the limit, so a too
large program fails with a :class:`ResourceLimitError` naming the op and the size instead of a
MemoryError (or the machine swapping) later.

The limit is ``lowering.compile(..., max_bytes=N)`` for one executable, else ``$XLA_DIALECT_MAX_BYTES``
(bytes, with an optional K/M/G/T suffix), else half of the machine's physical memory.
"""

from __future__ import annotations

import os

from .errors import ResourceLimitError, XlaError

__all__ = ["ResourceLimitError", "check_bytes", "default_max_bytes", "parse_bytes"]


def default_max_bytes() -> int:
    """``$XLA_DIALECT_MAX_BYTES`` if set, else half of the physical memory (8 GiB where it cannot be read)."""
    text = os.environ.get("XLA_DIALECT_MAX_BYTES")
    if text:
        return parse_bytes(text, "XLA_DIALECT_MAX_BYTES")
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def parse_bytes(text, what: str) -> int:
    """A byte count from an int or text such as ``"512M"`` / ``"2G"``."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        s = str(text).strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(s[-1:], 1)
        digits = s[:-1] if scale != 1 else s
        if not digits.isdigit() or not digits.isascii():
            raise XlaError(f"{what}: expected a byte count such as 1000000, 512M or 2G, got {text!r}")
        value = int(digits) * scale
    if value < 1:
        raise XlaError(f"{what}: the memory limit must be positive, got {text!r}")
    return value


def check_bytes(nbytes: int, what: str, limit: int | None = None) -> None:
    """Raise :class:`ResourceLimitError` when ``nbytes`` exceeds ``limit`` (default: :func:`default_max_bytes`)."""
    limit = default_max_bytes() if limit is None else limit
    if nbytes > limit:
        raise ResourceLimitError(f"{what} needs {nbytes:,} bytes, more than the limit of {limit:,} "
                                 "(lowering.compile(max_bytes=...) or $XLA_DIALECT_MAX_BYTES)")
