"""The C library's math functions over whole arrays, the same on every CPU.

XLA CPU has its own approximations for some functions (see :mod:`.xla_math`)
and calls the C library (glibc's libm) for the rest: f64 log, sin, cos, tan,
cbrt, atan2, pow and exp (inside erf), and f32 tan, cbrt, atan2 and pow. NumPy's
ufuncs of the same names call the C library only on some CPUs: where the CPU
has AVX-512 (NumPy's ``X86_V4`` / ``AVX512_SKX`` dispatch targets) they switch
to NumPy's own SIMD implementations, which differ from libm in the last bit on
0.05-35% of inputs (measured on an AMD family-26 CPU: f32 tan 2,903 of 20,000,
f64 pow 1,043 of 20,000, f32 cbrt 7,211 of 20,000). So a kernel that wants
XLA's result must not use those ufuncs.

Each function here is a NumPy ufunc (broadcasting, scalars, ``out=``) of the
scalar definition that calls the named C function (``tanf`` for f32, ``tan``
for f64; numba's ``ExternalFunction`` in :mod:`.scalar`, resolved in the running
process, where Python has already loaded libm), one element at a time: libm's
scalar functions are what XLA calls, and numba adds no vectorized variant of
its own (``numba.config.USING_SVML`` must be off; :func:`_compile` checks).
The ufunc is built on first use (:func:`lowering.kernels.scalar.ufunc`: its
loop is compiled once and cached on disk, a few milliseconds to load).

Only f32 and f64 operands are accepted; narrower floats are widened by the
caller, as XLA does.
"""

from __future__ import annotations

import threading

import numpy as np

from xla_dialect.errors import UnsupportedError

# C function names, f32 then f64.
_UNARY_C_NAMES: dict[str, tuple[str, str]] = {
    "sin": ("sinf", "sin"),
    "cos": ("cosf", "cos"),
    "tan": ("tanf", "tan"),
    "exp": ("expf", "exp"),
    "log": ("logf", "log"),
    "cbrt": ("cbrtf", "cbrt"),
}
_BINARY_C_NAMES: dict[str, tuple[str, str]] = {
    "atan2": ("atan2f", "atan2"),
    "pow": ("powf", "pow"),
}

_LOCK = threading.Lock()
_UFUNCS: dict[str, tuple] = {}


def _compiled(name: str) -> tuple:
    """The (f32, f64) ufuncs calling libm's ``name``, compiled on first use."""
    pair = _UFUNCS.get(name)
    if pair is not None:
        return pair
    with _LOCK:
        pair = _UFUNCS.get(name)
        if pair is None:
            pair = _UFUNCS[name] = _compile(name)
    return pair


def _compile(name: str) -> tuple:
    """The (f32, f64) ufuncs of libm's ``name``: the ufuncs of the scalar definitions that call the C functions
    (:mod:`.scalar` declares each C function once, for the interpreter and every compiled path)."""
    import numba

    from . import scalar

    if numba.config.USING_SVML:  # pragma: no cover - only with Intel's SVML library installed
        raise UnsupportedError(
            "lowering.kernels.libm: numba is set to use Intel's SVML vector math, which is not the C library "
            "XLA calls; set NUMBA_DISABLE_INTEL_SVML=1 before numba is imported")
    arity = 1 if name in _UNARY_C_NAMES else 2
    ufuncs = []
    for c_name, dtype in zip(_UNARY_C_NAMES.get(name) or _BINARY_C_NAMES[name], (np.float32, np.float64)):
        definition = scalar.Scalar(c_function_definition(c_name))
        ufuncs.append(scalar.ufunc(definition, [dtype] * arity, dtype))
    return ufuncs[0], ufuncs[1]


def c_function_definition(c_name: str) -> str:
    """The name of the scalar definition (:mod:`.scalar`) that is the C library's ``c_name``."""
    import numba

    from . import scalar

    for name in scalar.EXPORTS:
        value = getattr(scalar, name)
        if isinstance(value, numba.types.ExternalFunction) and value.symbol == c_name:
            return name
    raise UnsupportedError(f"lowering.kernels.libm: no scalar definition calls the C library's {c_name}")


def _pick(name: str, dtype: np.dtype):
    f32_fn, f64_fn = _compiled(name)
    if dtype == np.float32:
        return f32_fn
    if dtype == np.float64:
        return f64_fn
    raise UnsupportedError(f"lowering.kernels.libm.{name}: expected f32 or f64 operands, got {dtype}")


def _unary(name: str):
    def apply(x):
        x = np.asarray(x)
        return _pick(name, x.dtype)(x)

    apply.__name__ = name
    apply.__qualname__ = name
    c32, c64 = _UNARY_C_NAMES[name]
    apply.__doc__ = f"libm's ``{c32}`` (f32) or ``{c64}`` (f64) of each element, as XLA CPU calls it."
    return apply


def _binary(name: str):
    def apply(x, y):
        # A Python number takes the other operand's type, as in NumPy's arithmetic.
        if isinstance(x, (int, float)) and not isinstance(y, (int, float)):
            y = np.asarray(y)
            x = np.asarray(x, y.dtype)
        else:
            x = np.asarray(x)
            y = np.asarray(y, x.dtype) if isinstance(y, (int, float)) else np.asarray(y)
        if x.dtype != y.dtype:
            raise UnsupportedError(f"lowering.kernels.libm.{name}: operands must have one dtype, "
                                   f"got {x.dtype} and {y.dtype}")
        return _pick(name, x.dtype)(x, y)

    apply.__name__ = name
    apply.__qualname__ = name
    c32, c64 = _BINARY_C_NAMES[name]
    apply.__doc__ = f"libm's ``{c32}`` (f32) or ``{c64}`` (f64) of each pair of elements, as XLA CPU calls it."
    return apply


sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
exp = _unary("exp")
log = _unary("log")
cbrt = _unary("cbrt")
atan2 = _binary("atan2")
pow = _binary("pow")  # noqa: A001 - libm's name
