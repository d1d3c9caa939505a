"""The memory limit: how many bytes any one constant, folded value or intermediate array may take.

A program is text; its shapes can ask for anything (``f32[1000000,1000000]`` is 4 TB). Before the
executor allocates an array (every op result, checked once when the program is lowered, since shapes are
static) and before a constant is materialized from text, its size is checked against the limit, so a too
large program fails with a :class:`ResourceLimitError` naming the op and the size instead of a
MemoryError (or the machine swapping) later.

The limit is ``lowering.compile(..., max_bytes=N)`` for one executable, else ``$XLA_DIALECT_MAX_BYTES``
(bytes, with an optional K/M/G/T suffix), else half of the machine's physical memory. The last two never
exceed the process's own memory limit (the soft ``RLIMIT_AS`` / ``RLIMIT_DATA``, as a sandbox such as the
conformance runner's workers sets them): no larger array could be allocated, so such a program fails when it
is lowered, before any of it is compiled or run, not with a MemoryError after seconds of (cold-cache) compiling.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .errors import ResourceLimitError, XlaError

__all__ = ["ResourceLimitError", "check_bytes", "default_max_bytes", "parse_bytes", "process_memory_limit"]


def default_max_bytes() -> int:
    """``$XLA_DIALECT_MAX_BYTES`` if set, else half of the physical memory (8 GiB where it cannot be read);
    at most the process's memory limit (:func:`process_memory_limit`)."""
    text = os.environ.get("XLA_DIALECT_MAX_BYTES")
    if text:
        limit = parse_bytes(text, "XLA_DIALECT_MAX_BYTES")
    else:
        try:
            limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        except (ValueError, OSError, AttributeError):
            limit = 8 << 30
    ceiling = process_memory_limit()
    return limit if ceiling is None else min(limit, ceiling)


def process_memory_limit() -> int | None:
    """The smaller soft limit of ``RLIMIT_AS`` (address space) and ``RLIMIT_DATA`` (heap and private
    mappings, which large arrays are), in bytes; ``None`` when neither is set or they cannot be read.

    Read at each call (``lowering.compile`` calls it once), so a limit set after import counts.
    """
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    limits = []
    for name in ("RLIMIT_AS", "RLIMIT_DATA"):
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            soft, _ = resource.getrlimit(which)
        except (ValueError, OSError):
            continue
        if soft != resource.RLIM_INFINITY and soft > 0:
            limits.append(int(soft))
    return min(limits) if limits else None


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


def check_bytes(nbytes: int, what: str | Callable[[], str], limit: int | None = None) -> None:
    """Raise :class:`ResourceLimitError` when ``nbytes`` exceeds ``limit`` (default: :func:`default_max_bytes`).
    ``what`` names the value: a string, or a function giving it (called only then: a caller checking every op of a
    program builds no message for the ops that fit)."""
    limit = default_max_bytes() if limit is None else limit
    if nbytes > limit:
        what = what() if callable(what) else what
        raise ResourceLimitError(f"{what} needs {nbytes:,} bytes, more than the limit of {limit:,} "
                                 "(lowering.compile(max_bytes=...), $XLA_DIALECT_MAX_BYTES or the process's "
                                 "RLIMIT_AS/RLIMIT_DATA)")
