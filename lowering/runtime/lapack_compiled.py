"""LAPACK custom calls inside compiled code: the routines of :mod:`lowering.runtime.lapack`'s targets called from numba.

An implicit ODE solver (diffrax's Kvaerno5), a Kalman filter or a Newton root find calls
``jnp.linalg.solve`` in its loop: jaxlib's ``lapack_sgetrf_ffi`` (LU with partial pivoting) and
``lapack_strsm_ffi`` (triangular solves) custom calls. Interpreted, each iteration of such a loop costs
tens of microseconds of Python around a LAPACK call on a 2x2 matrix; compiled, the loop calls LAPACK
directly.

The numerics are LAPACK's and are not written here: these functions call the very routines the
interpreter's targets call, in the same library -- SciPy's Cython exports
(``scipy.linalg.cython_lapack`` / ``cython_blas``, whose addresses numba's
``get_cython_function_address`` hands out) are the Fortran routines of the LAPACK that SciPy's Python
bindings (``scipy.linalg.lapack.sgetrf``, ``scipy.linalg.blas.strsm``, used by :mod:`lowering.runtime.lapack`) wrap
-- with the same arguments: the matrices column-major, the same leading dimensions and flags. So the
compiled loop's bits are the interpreter's (checked by ``tests/test_compiled_loops.py``), and jaxlib's.

Only what a call site needs is here: :data:`COMPILED_ROUTINES` names the targets compiled code may call
(``lapack_{s,d}getrf_ffi``, ``lapack_{s,d}trsm_ffi``); :func:`routine_address` gives the address the
generated code receives as an argument (never a constant in its text: numba's cache then serves every
process).
"""

from __future__ import annotations

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_njit = numba.njit(cache=True, error_model="numpy", nogil=True)

COMPILED_ROUTINES = {"getrf": ("scipy.linalg.cython_lapack", "lapack_getrf"),
                     "trsm": ("scipy.linalg.cython_blas", "lapack_trsm")}
"""LAPACK routine of a ``lapack_<p><routine>_ffi`` target -> (the SciPy Cython module exporting it, the numba
function of this module generated code calls for it). f32 and f64 only (``s``, ``d``): compiled loops hold no
complex values."""

_PREFIXES = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}


def compiled_target(target: str, dtype: np.dtype) -> tuple[str, str, int] | None:
    """``(routine, numba function name, routine address)`` for custom-call ``target`` on matrices of ``dtype``
    when compiled code can call it, else None."""
    prefix = _PREFIXES.get(np.dtype(dtype))
    if prefix is None or not (target.startswith(f"lapack_{prefix}") and target.endswith("_ffi")):
        return None
    routine = target[len("lapack_") + 1:-len("_ffi")]
    if routine not in COMPILED_ROUTINES:
        return None
    address = routine_address(prefix + routine, COMPILED_ROUTINES[routine][0])
    return None if address is None else (routine, COMPILED_ROUTINES[routine][1], address)


_ADDRESSES: dict[str, int | None] = {}


def routine_address(name: str, module: str) -> int | None:
    """The address of SciPy's Cython export ``name`` of ``module`` (None if SciPy does not export it)."""
    if name not in _ADDRESSES:
        from numba.extending import get_cython_function_address

        try:
            _ADDRESSES[name] = int(get_cython_function_address(module, name))
        except (ImportError, ValueError, AttributeError):
            _ADDRESSES[name] = None
    return _ADDRESSES[name]


@intrinsic
def _fortran_call(typingctx, address, pointers):
    """Call the function at ``address`` (an int64) with ``pointers`` (a tuple of integer addresses) as its
    pointer arguments, returning nothing -- a Fortran routine's calling convention as SciPy's Cython exports
    declare it (every argument by reference)."""
    if address != types.int64 or not (isinstance(pointers, types.BaseTuple) and len(pointers) > 0
                                      and all(isinstance(p, types.Integer) for p in pointers)):
        return None

    def codegen(context, builder, signature, args):
        byte_ptr = ir.IntType(8).as_pointer()
        fn_type = ir.FunctionType(ir.VoidType(), [byte_ptr] * len(pointers))
        fn = builder.inttoptr(args[0], fn_type.as_pointer())
        values = cgutils.unpack_tuple(builder, args[1], len(pointers))
        builder.call(fn, [builder.inttoptr(v, byte_ptr) for v in values])
        return context.get_dummy_value()

    return types.none(address, pointers), codegen


@_njit
def lapack_getrf(address, a, lu, pivots, info):
    """jaxlib's ``lapack_?getrf_ffi`` on a batch ``a`` (b, m, n), C-ordered: ``lu`` (b, m, n) the packed
    factors, ``pivots`` (b, min(m, n)) LAPACK's 1-based row interchanges (int32), ``info`` (b,) LAPACK's
    info -- the routine at ``address`` (``?getrf``) run on each matrix column-major, as SciPy's binding runs it
    for the interpreter's target (:func:`lowering.runtime.lapack._getrf`)."""
    batch, m, n = a.shape
    if m == 0 or n == 0:
        return
    ints = np.empty(4, np.int32)  # m, n, lda, info
    ints[0], ints[1], ints[2] = m, n, max(m, 1)
    stride = ints.itemsize
    for i in range(batch):
        work = a[i].T.copy()  # (n, m) row-major: the matrix column-major
        _fortran_call(address, (ints.ctypes.data, ints.ctypes.data + stride, work.ctypes.data,
                                ints.ctypes.data + 2 * stride, pivots[i].ctypes.data, ints.ctypes.data + 3 * stride))
        lu[i] = work.T
        info[i] = ints[3]


@_njit
def lapack_trsm(address, flags, alpha, x, y, out):
    """jaxlib's ``lapack_?trsm_ffi`` on batches ``x`` (b, k, k) and ``y`` (b, m, n), C-ordered: ``out`` (b, m,
    n) the solution of ``op(x) @ out = alpha * y`` (``side`` L) or ``out @ op(x) = alpha * y`` (R) -- the BLAS
    routine at ``address`` (``?trsm``) run on each pair column-major with ``flags`` the letters side, uplo,
    transa, diag (uint8) and ``alpha`` a one-element array, as SciPy's binding runs it for the interpreter's
    target (:func:`lowering.runtime.lapack._trsm`)."""
    batch, m, n = y.shape
    if m == 0 or n == 0:
        return
    k = x.shape[1]
    ints = np.empty(4, np.int32)  # m, n, lda, ldb
    ints[0], ints[1], ints[2], ints[3] = m, n, max(k, 1), max(m, 1)
    stride = ints.itemsize
    base = flags.ctypes.data
    for i in range(batch):
        a = x[i].T.copy()
        b = y[i].T.copy()
        _fortran_call(address, (base, base + 1, base + 2, base + 3, ints.ctypes.data, ints.ctypes.data + stride,
                                alpha.ctypes.data, a.ctypes.data, ints.ctypes.data + 2 * stride, b.ctypes.data,
                                ints.ctypes.data + 3 * stride))
        out[i] = b.T
