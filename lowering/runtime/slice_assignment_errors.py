"""numba's error for a slice assignment whose shapes disagree, made a message without the shapes.

Every ``dst[...] = src`` or ``dst[a:b] = src`` of an array ``src`` that numba compiles calls, on a shape mismatch,
``numba.np.arrayobj.raise_with_shape_context``, whose CPU implementation formats both shapes into the message with
f-strings, ``str`` and ``", ".join``. numba compiles that implementation -- and with it its unicode string
machinery -- in every process, once per pair of ranks, whether or not the error can happen. Generated loops and
segments assign slices everywhere (broadcasts, concatenates, pads, dynamic update slices), so a first compilation
paid for it: measured on benchmarks/real_programs.py's odeint (one segment of two chunks, cold caches): 50 numba
compilations of which 42 were that message (``ol_raise_with_shape_context_cpu`` 5.9 s and 3.4 s for two rank
pairs, then ``str``, ``join``, ``repr``...), 18.4 s of 32.8 s spent in LLVM (one run, loaded 2-core VM); with this
change 8 compilations and 9.5 s in LLVM, and odeint's first call took 12.8 s instead of 21.2 s (medians of three
cold runs each, idle VM).

:func:`install` points numba's slice assignment at a function of the same signature whose implementation raises
the same ``ValueError`` with a constant message, which compiles to one string constant. The assignments the
library generates never mismatch (shapes are static and verified before code is generated); for other numba code
in the process only the text of that error changes. Installed when :mod:`lowering` is imported
(:mod:`lowering.runtime.process_state` lists it).
"""

from __future__ import annotations

MESSAGE = "cannot assign slice from input of different shape"
"""The message of the ``ValueError`` a mismatched slice assignment raises in numba code once installed."""

_INSTALLED = False


def shape_mismatch(src_shapes, index_shape):
    """Stands for numba's ``raise_with_shape_context(src_shapes, index_shape)`` (compiled code only)."""
    raise ValueError(MESSAGE)


def install() -> None:
    """Make numba's slice assignments raise :data:`MESSAGE` on a shape mismatch (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    import numba.np.arrayobj as arrayobj
    from numba.core.extending import overload

    @overload(shape_mismatch)
    def _shape_mismatch(src_shapes, index_shape):
        def raise_mismatch(src_shapes, index_shape):
            raise ValueError(MESSAGE)

        return raise_mismatch

    # (numba's fancy_setslice looks the module global up each time it compiles an assignment)
    arrayobj.raise_with_shape_context = shape_mismatch
