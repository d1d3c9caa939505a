"""Denormal floats in the executor: ``lowering.compile(..., denormals="flush" | "keep" | None)``.

XLA's CPU runtime runs compiled code with the CPU's flush-to-zero (FTZ) and
denormals-are-zero (DAZ) modes set: an arithmetic instruction reads a denormal
operand as a zero of the same sign, and a result below the normal range
becomes a signed zero (tininess is detected before rounding). Instructions that
only move or select bits (loads, stores, shuffles, blends, sign-bit masks)
keep denormals. This module gives the executor the same behaviour the same way:

* ``"flush"`` -- each call of an :class:`~lowering.executor.executable.Executable` sets
  FTZ and DAZ in the calling thread's floating-point control register (x86-64
  MXCSR bits 15 and 6; AArch64 FPCR.FZ) and restores the previous state when
  the call returns. NumPy's ufunc loops, libm, and single-threaded OpenBLAS
  then run on the same hardware in the same mode as XLA's generated code, so
  every kernel flushes exactly where XLA's instructions do, with no work per
  op. XLA's own threads work the same way (TSL's ``ScopedFlushDenormal``).
* ``"keep"`` -- the call runs in IEEE mode (gradual underflow); FTZ/DAZ are
  cleared for the call if the thread had them set. Kernels that reproduce
  XLA's own code bit for bit flush in both modes: the approximations of
  :mod:`lowering.kernels.xla_math` (exp, log, tanh, expm1, log1p, erf, rsqrt,
  logistic) and the f32 <-> f64 conversions of
  :mod:`lowering.kernels.conversion` (under "flush" the hardware mode flushes
  there too, which changes nothing).
* ``None`` (the default) -- "flush" where this module can set the mode
  (x86-64 and AArch64 under Linux (glibc/musl) or macOS: checked once per
  process by running a multiply in the mode), else "keep". ``"flush"`` where
  the mode cannot be set raises :class:`UnsupportedError`.

Findings (XLA CPU via ``jax.jit``, jax 0.10.2, x86-64; ``d`` a positive f32
denormal such as 1e-39, ``D`` an f64 one such as 1e-310; "flushes" means DAZ
on inputs and FTZ on results). Every row is what "flush" gives too, except
where the last column says otherwise (``tests/test_denormals.py``):

==========================================  ======================================================  ==========
op                                          XLA CPU                                                 "flush"
==========================================  ======================================================  ==========
add, subtract, multiply, divide             flush: d*1 = 0, 3e-39+1e-39 = 0, 1e-30*1e-10 = 0,       same
                                            (2**-125 - 2**-148)*0.5 = 0 (rounds to 2**-126),
                                            D*2 = 0, 1/d = inf
remainder                                   glibc fmod under DAZ: rem(d, 1) = d (returned as is),   same
                                            rem(1, d) = NaN
maximum, minimum, clamp                     flush: max(d, 0) = 0, max(d, -1) = 0,                   same
                                            min(-d, 1) = -0, clamp(-1, d, 1) = 0
compare (float order)                       DAZ: -d < 0 false, d == 0 true, d > 0 false             same
compare TOTALORDER                          on the bits: keeps denormals                            same
sqrt, cbrt, floor, ceil                     flush: sqrt(d) = 0, floor(-d) = -0                      same
round (both), is_finite                     no difference (round(d) = 0 either way)                 same
sign                                        sign(±d) = ±0 (XLA: copysign(x != 0, x))                same
abs, negate                                 sign-bit masks: keep denormals                          same
power, atan2 (f32/f64: libm under DAZ)      libm's own paths: pow(2, -140) = 0, pow(d, 0.5) =       same
                                            2.6e-23 (powf's denormal path under DAZ),
                                            atan2(d, 1) = d (f32), atan2(D, 1) = 0 (f64)
sine, cosine, tangent                       libm (f32: glibc sinf/cosf): sin(d) = d, cos(d) = 1,    same [1]
                                            tan(d) = d
exp, log, tanh, expm1, log1p, erf,          flush (XLA's approximations): exp(-88) = 0,             same [2]
rsqrt, logistic                             log(d) = -inf, rsqrt(d) = inf
select, data movement (reshape, transpose,  copy bits: keep denormals                               same
slice, concatenate, pad, reverse, gather,
copy, bitcast_convert, sort's moves...)
convert f32 <-> f64, f64 -> bf16            flush (hardware conversions)                            same [2]
reduce, reduce_window (add, max, ...),      flush in each step: sum([d, d]) = 0,                    same
sort comparators, while/conditional bodies  max-reduce of [-d, -d] = -0
dot, dot_general, convolution               flush: DAZ operands, FTZ result, products accumulated   same [3]
                                            with FMAs (a tiny product is not flushed on its own)
f16, f8 types (computed in f32)             never flush: their denormals are normal f32 values,     same
                                            and rounding back to f16 keeps f16 denormals
                                            (6e-5 - 5.9e-5 = 1e-6 in f16)
bf16 (computed in f32)                      flushes like f32 (bf16 denormals are f32 denormals)     same
complex (c64, c128)                         each real operation flushes like the real types         same [4]
==========================================  ======================================================  ==========

[1] NumPy's own f32 sin would read a denormal as 0 under DAZ and give 0;
    the f32 kernel is xla_math's reproduction of glibc's sinf, whose
    ``|x| < 2**-12`` test returns x itself, as XLA's call does.
[2] Reproduced by those kernels themselves, in both modes.
[3] Bit-exact where NumPy's BLAS call sums in XLA's order (small products);
    otherwise within the usual summation-order differences. Matmuls that
    OpenBLAS splits over several threads (``blas_threads`` other than 1 and
    ``m*n*k > 2**18``): OpenBLAS's worker threads do not take the caller's
    mode, so their share of the product reads denormal operands as their
    values (a difference below ``2**-126 * |other operand|`` per term) and may
    produce denormal sums; :func:`flush_threaded_matmul` flushes the result
    (one pass over the output) so no denormal leaves the op.
[4] As exact as those kernels are without denormals (XLA's complex formulas
    fuse multiply-adds: see the op table's last-bit deviations); where they
    emulate a fused multiply-add in f64 (``xla_math.fma64``), error terms
    below the normal range are flushed, so operands below about 2**-969
    can differ in the last bits.

Differences that come from XLA's compiler rather than from the CPU mode, and
which the executor (evaluating op by op) does not reproduce:

* XLA's algebraic simplifier removes ``x + 0``, ``x - 0``, ``x * 1``,
  ``x / 1`` and ``max(x, x)`` when the identity is a constant, so those keep
  denormals in XLA and flush here. (The ``simplify`` pass of :mod:`passes`
  drops the bit-exact ones, ``x + (-0)``, ``x - 0``, ``x * 1``, ``x / 1``.)
* LLVM contracts ``a * b + c`` within a fusion to a fused multiply-add, whose
  tiny product is not flushed on its own (e.g. ``v * 0.5 + a`` in a loop body):
  a difference below the smallest normal number.
* LLVM turns ``select(a > b, a, b)`` (and ``<``) on floats into the CPU's max
  (min) instruction, which flushes: XLA gives 0 where the executor's select
  returns a denormal ``a`` or ``b``.
* LLVM compiles a bf16 ``x == 0.0`` or ``x != 0.0`` against a constant zero
  to a test of x's bits, which DAZ does not affect: a bf16 denormal is not
  equal to 0 there (it is when the 0 is computed or an argument, and for f32).
* Constant folding: XLA folds constant expressions mostly in IEEE arithmetic
  (``1e-39 * 2`` folds to 2e-39, ``max(1e-39, 0)`` to 1e-39, ``sqrt(1e-39)``
  to 3.2e-20, though ``ceil(1e-39)`` folds to 0). The executor computes what
  it is given in the call's mode; the ``fold-constants`` pass folds in IEEE
  mode (the thread's own).

The StableHLO conformance runner (:mod:`interop.tools.conformance`) compiles with
``denormals="keep"``: the corpus's expected values come from the reference
interpreter, which is IEEE (under "flush" 3 of its 1742 programs fail:
``ceil`` of the smallest denormal is 0, as in XLA, not 1).

Cost (measured on a 2-core x86-64 VM, both modes interleaved in one process):
the mode switch is three libc calls through ctypes, about 1.5 us per
executable call (a one-op f32[4] program: 8.7 us per call under "flush",
7.2 us under "keep", which only reads the mode); nothing per op (the 2,000-op
f32[4] chain of benchmarks/bench_executor.py: 0.445 vs 0.442 us/op). The
256x1024 MLP: 20.3 vs 20.2 ms with one BLAS thread, 14.8 vs 14.5 ms with two,
where flushing the threaded matmuls' results shows (one pass over each:
0.12 ms for 256x1024 f32). The switch is taken in ``Executable.__call__``
(:mod:`lowering.executor.executable`).

The mode is per thread: multi-device executables set it in each device
thread; host callbacks and custom calls run inside the call run in it too
(as XLA's do). Kernels run outside an executable (constant folding by the
``fold-constants`` pass) run in the thread's own mode, IEEE by default, as
XLA's constant folder does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import threading

import numpy as np

from xla_dialect.errors import ExecutionError, UnsupportedError

MODES = ("flush", "keep")
"""The values of ``lowering.compile``'s ``denormals`` option (or None: automatic)."""

# Where the flush bits live in the C library's fenv_t (read and written with fegetenv /
# fesetenv): (index of the 32-bit word in the structure, bits). x86-64 sets MXCSR.FTZ
# (bit 15) and MXCSR.DAZ (bit 6); AArch64 has one bit for both, FPCR.FZ (bit 24).
_FENV_LAYOUTS = {
    ("Linux", "x86_64"): (7, 0x8040),   # glibc/musl: x87 environment (28 bytes), then mxcsr
    ("Linux", "aarch64"): (0, 1 << 24),  # {fpcr, fpsr}
    ("Darwin", "x86_64"): (1, 0x8040),   # {control, status (16 bits each), mxcsr, reserved[8]}
    ("Darwin", "arm64"): (2, 1 << 24),   # {fpsr, fpcr} (64 bits each, little-endian)
}

_Env = ctypes.c_uint32 * 16
"""A buffer larger than every fenv_t above (32 bytes at most)."""


class _Fenv:
    """The C library's fegetenv / fesetenv and where the flush bits are (None when unsupported)."""

    def __init__(self):
        self.get = self.set = None
        self.word, self.bits = _FENV_LAYOUTS.get((platform.system(), platform.machine()), (None, 0))
        if self.word is None:
            return
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("m") or None)
            get, set_ = lib.fegetenv, lib.fesetenv
        except (OSError, AttributeError):
            return
        get.argtypes = set_.argtypes = [ctypes.POINTER(_Env)]
        get.restype = set_.restype = ctypes.c_int
        self.get, self.set = get, set_


_FENV = _Fenv()
_local = threading.local()


def _switch(flush: bool) -> None:
    """Enter: put the thread in ``flush`` mode, remembering the environment to restore (or None)."""
    saved = _Env()
    _FENV.get(saved)
    word, bits = _FENV.word, _FENV.bits
    current = saved[word] & bits
    if current == (bits if flush else 0):
        restore = None  # already in the wanted mode (e.g. a nested call): nothing to undo
    else:
        wanted = _Env.from_buffer_copy(saved)
        wanted[word] = (saved[word] | bits) if flush else (saved[word] & ~bits)
        _FENV.set(wanted)
        restore = saved
    try:
        _local.stack.append(restore)
    except AttributeError:
        _local.stack = [restore]


def _unswitch() -> None:
    """Leave: restore the environment saved by the matching :func:`_switch`."""
    restore = _local.stack.pop()
    if restore is not None:
        _FENV.set(restore)


class DenormalMode:
    """Context manager: the calling thread computes in ``mode`` ("flush" or "keep") inside.

    Stateless apart from a per-thread stack, so one instance serves every
    thread and nests (a host callback running another executable).
    """

    __slots__ = ("mode", "_flush")

    def __init__(self, mode: str):
        self.mode = mode
        self._flush = mode == "flush"

    def __enter__(self):
        _switch(self._flush)
        return self

    def __exit__(self, *exc) -> None:
        _unswitch()


class _IeeeAssumed:
    """"keep" where the mode cannot be controlled: the platform's default, IEEE, is assumed."""

    mode = "keep"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


@functools.lru_cache(maxsize=None)
def flush_supported() -> bool:
    """True when this process can set the CPU's flush modes (checked by running a multiply in them)."""
    if _FENV.get is None:
        return False
    denormal = np.array([1e-39, -1e-39], np.float32)
    one = np.ones(2, np.float32)
    try:
        with DenormalMode("flush"):
            flushed = np.multiply(denormal, one)
        with DenormalMode("keep"):
            kept = np.multiply(denormal, one)
    except Exception:  # noqa: BLE001 - a C library that rejects the environment: unsupported
        return False
    return flushed.tobytes() == np.array([0.0, -0.0], np.float32).tobytes() and kept.tobytes() == denormal.tobytes()


def resolve_denormals(option) -> str:
    """The mode for ``lowering.compile``'s ``denormals`` option: "flush" or "keep".

    None is automatic ("flush" where :func:`flush_supported`, else "keep").
    Raises :class:`ExecutionError` for a value that is not an option and
    :class:`UnsupportedError` for "flush" where the mode cannot be set.
    """
    if option is None:
        return "flush" if flush_supported() else "keep"
    if not isinstance(option, str) or option not in MODES:
        raise ExecutionError(f"lowering.compile: denormals must be None (automatic), 'flush' (XLA CPU's "
                             f"flush-to-zero) or 'keep' (IEEE), got {option!r}")
    if option == "flush" and not flush_supported():
        raise UnsupportedError(f"lowering.compile: denormals='flush' needs control of the CPU's flush-to-zero "
                               f"mode, which is not available on {platform.system()} {platform.machine()}; "
                               f"use denormals='keep'")
    return option


def mode_switch(mode: str):
    """The context manager an :class:`~lowering.executor.executable.Executable` call runs in for ``mode``."""
    if mode == "keep" and _FENV.get is None:
        return _IeeeAssumed()
    return DenormalMode(mode)


# ----------------------------------------------------------------------------
# Matmuls on OpenBLAS's worker threads
# ----------------------------------------------------------------------------

_BITS = {np.dtype(np.float32): (np.int32, np.uint32, 0x7FFFFFFF, 0x00800000),
         np.dtype(np.float64): (np.int64, np.uint64, 0x7FFFFFFFFFFFFFFF, 0x0010000000000000)}
"""Real BLAS dtype -> (signed int view, unsigned int view, magnitude mask, smallest normal's bits)."""


def flush_bits(x: np.ndarray) -> np.ndarray:
    """``x`` (f32/f64) with each denormal replaced by the zero of its sign.

    Works on the bit patterns, so the result does not depend on the mode the
    thread is in (under DAZ, comparisons cannot tell a denormal from 0).
    """
    signed, unsigned, magnitude, smallest = _BITS[x.dtype]
    bits = x.view(signed)
    # magnitude - 1 < smallest - 1, unsigned: 0 wraps around, so this is 0 < magnitude < smallest.
    denormal = ((bits & magnitude).view(unsigned) - unsigned(1)) < unsigned(smallest - 1)
    if not denormal.any():
        return x
    return np.where(denormal, bits & ~signed(magnitude), bits).view(x.dtype)


def flush_threaded_matmul(matmul, blas_threads: int | None, dtype, m: int, k: int, n: int):
    """``matmul`` for a "flush" program, with its result flushed when OpenBLAS may run it on several threads.

    OpenBLAS's worker threads do not take the caller's FTZ/DAZ mode, so their
    share of a threaded product keeps IEEE denormals; flushing the result keeps
    XLA's "no denormal results". Products OpenBLAS runs on the calling thread
    (``blas_threads=1``, the automatic choice on machines with at most two
    CPUs, or ``m*n*k <= 2**18``) and non-BLAS dtypes are returned unchanged.
    """
    from .blas import SERIAL_MNK

    if blas_threads == 1 or np.dtype(dtype) not in _BITS or m * k * n <= SERIAL_MNK:
        return matmul

    def flushed_matmul(a, b):
        return flush_bits(matmul(a, b))

    flushed_matmul.__doc__ = f"{getattr(matmul, '__doc__', None) or 'np.matmul'} Denormal results flushed."
    return flushed_matmul
