"""Differential testing: run a JAX function with ``jax.jit`` and on the NumPy executor, compare.

>>> report = interop.difftest(lambda x: jnp.tanh(x) @ x.T, x)
>>> print(report)            # per output: max abs / rel error, max ULP distance
>>> report.raise_if_mismatch()

:func:`difftest` traces ``fn`` with the given arguments, imports the program
(:func:`interop.import_jax`), runs it on the NumPy executor
(:func:`lowering.compile`) and runs ``jax.jit(fn)`` on the same inputs. Every
output is compared with a tolerance that follows its dtype: integers and bools
exactly, floats (and both parts of complex numbers) within a budget of ULPs
(units in the last place; NaN must meet NaN, infinities must be equal).

The comparison primitives (:func:`ulp_distance`, :func:`compare_arrays`) are
also used by the conformance runner (:mod:`interop.conformance`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from xla_dialect.errors import ExecutionError

os.environ.setdefault("JAX_PLATFORMS", "cpu")

__all__ = [
    "DEFAULT_MAX_ULP",
    "DiffMismatchError",
    "DiffReport",
    "OutputDiff",
    "compare_arrays",
    "difftest",
    "float_bits",
    "is_float_dtype",
    "ulp_budget",
    "ulp_distance",
]

ULP_INFINITE = np.iinfo(np.uint64).max
"""The ULP distance of pairs that are not comparable in ULPs (a NaN against a number, an infinity against
anything but itself)."""

DEFAULT_MAX_ULP: dict[str, int] = {
    # XLA's CPU code and NumPy use different (both correctly rounded for the
    # basic operations, not for transcendental ones) libm implementations; a
    # few ULPs is the usual distance for exp/log/tanh & co. 8-bit and 16-bit
    # floats round their f32 computations once more, so 1-2 ULPs suffice.
    "float64": 4,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
}
"""Default ULP budget by dtype name; other floats (f8, f4, ...) get 1."""


class DiffMismatchError(ExecutionError):
    """The NumPy executor and ``jax.jit`` disagree beyond the tolerance (raised by ``raise_if_mismatch``)."""


# ----------------------------------------------------------------------------
# Comparison primitives
# ----------------------------------------------------------------------------


def is_float_dtype(dtype) -> bool:
    """True for NumPy and ml_dtypes floating-point dtypes (f64 ... f4), False for complex, ints, bools."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return True
    if dtype.kind != "V":
        return False
    try:
        ml_dtypes.finfo(dtype)
    except (ValueError, TypeError):
        return False
    return True


def float_bits(dtype) -> int:
    """Number of significant bits of a float dtype (16 for bf16, 4 for f4e2m1fn stored in a byte)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype.itemsize * 8
    return int(ml_dtypes.finfo(dtype).bits)


def _as_f64(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.float64 else a.astype(np.float64)


def ulp_distance(actual, expected) -> np.ndarray:
    """Elementwise ULP distance (``uint64``) between two float (or complex) arrays of one dtype.

    The rule is the StableHLO test harness's (``check.expect_close``):
    bitwise-equal values are 0 apart, two NaNs are 0 apart, two finite values
    are the difference of their sign-magnitude ordinals (so +0 and -0 are 0
    apart and the distance across zero is the sum of both magnitudes), and any
    other pair involving a non-finite value is :data:`ULP_INFINITE` apart. For
    complex numbers it is the larger of the real and imaginary distances.
    """
    a = np.asarray(actual)
    b = np.asarray(expected)
    if a.dtype != b.dtype:
        raise ExecutionError(f"ulp_distance: dtypes differ ({a.dtype} vs {b.dtype})")
    if a.dtype.kind == "c":
        return np.maximum(ulp_distance(a.real, b.real), ulp_distance(a.imag, b.imag))
    if not is_float_dtype(a.dtype):
        raise ExecutionError(f"ulp_distance: {a.dtype} is not a floating-point type")
    bits = float_bits(a.dtype)
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    # Sub-byte floats (f4, f6) sit in the low bits of their byte.
    mask = np.uint64((1 << bits) - 1) if bits < 64 else np.uint64(ULP_INFINITE)
    ra = a.view(unsigned).astype(np.uint64) & mask
    rb = b.view(unsigned).astype(np.uint64) & mask
    sign = np.uint64(1 << (bits - 1))
    ma, mb = ra & (sign - np.uint64(1)), rb & (sign - np.uint64(1))
    same_sign = (ra & sign) == (rb & sign)
    # uint64 arithmetic: magnitudes are below 2**63, so their sum cannot wrap.
    d = np.where(same_sign, np.maximum(ma, mb) - np.minimum(ma, mb), ma + mb)
    fa, fb = _as_f64(a), _as_f64(b)
    finite = np.isfinite(fa) & np.isfinite(fb)
    d = np.where(finite, d, np.uint64(ULP_INFINITE))
    d = np.where(ra == rb, np.uint64(0), d)
    return np.where(np.isnan(fa) & np.isnan(fb), np.uint64(0), d)


@dataclass
class Comparison:
    """Result of :func:`compare_arrays` for one pair of arrays."""

    ok: bool
    mismatches: int = 0  # number of elements out of tolerance
    size: int = 0
    max_abs: float = 0.0  # over elements where both values are finite
    max_rel: float = 0.0
    max_ulp: int | None = None  # None for integer/bool arrays; ULP_INFINITE when a non-finite value differs
    first: tuple[int, ...] | None = None  # index of the first mismatching element
    message: str = ""


def _errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Max absolute and relative error over the elements where both are finite."""
    if a.size == 0:
        return 0.0, 0.0
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    try:
        fa, fb = a.astype(wide), b.astype(wide)
    except (TypeError, ValueError):
        fa, fb = a.astype(np.int64).astype(wide), b.astype(np.int64).astype(wide)
    with np.errstate(all="ignore"):
        finite = np.isfinite(fa) & np.isfinite(fb)
        diff = np.where(finite, np.abs(fa - fb), 0.0)
        scale = np.abs(fb)
        rel = np.where(finite & (diff > 0), diff / np.where(scale > 0, scale, np.inf), 0.0)
        rel = np.where(finite & (diff > 0) & (scale == 0), np.inf, rel)
    return float(diff.max()), float(rel.max())


def _show(a: np.ndarray, index) -> str:
    # str() of a NumPy scalar is its shortest round-trip text in its own precision.
    return str(a[index] if a.ndim else a[()])


def compare_arrays(actual, expected, max_ulp: int = 0, atol: float = 0.0) -> Comparison:
    """Compare two arrays with a dtype-aware tolerance.

    Shapes and dtypes must be equal. Integers, bools (and any non-float
    dtype) must be equal exactly; floats and complex numbers must be within
    ``max_ulp`` ULPs (:func:`ulp_distance`) or, when ``atol > 0``, within
    ``atol`` in absolute value. NaN matches NaN only; infinities match only
    themselves.
    """
    a = np.asarray(actual)
    b = np.asarray(expected)
    if a.shape != b.shape:
        return Comparison(False, size=b.size, message=f"shape {list(a.shape)} != expected {list(b.shape)}")
    if a.dtype != b.dtype:
        return Comparison(False, size=b.size, message=f"dtype {a.dtype} != expected {b.dtype}")
    max_abs, max_rel = _errors(a, b)
    if a.dtype.kind == "c" or is_float_dtype(a.dtype):
        d = ulp_distance(a, b)
        bad = d > np.uint64(max_ulp)
        if atol > 0:
            wide = np.complex128 if a.dtype.kind == "c" else np.float64
            with np.errstate(invalid="ignore"):
                bad &= ~(np.abs(a.astype(wide) - b.astype(wide)) <= atol)
        max_ulp_seen = int(d.max()) if d.size else 0
    else:
        bad = a != b
        max_ulp_seen = None
    count = int(np.count_nonzero(bad))
    if not count:
        return Comparison(True, 0, b.size, max_abs, max_rel, max_ulp_seen)
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if a.ndim else ()
    where = f" at {list(first)}" if a.ndim else ""
    message = (f"{count} of {b.size} elements differ; first{where}: actual {_show(a, first)}, "
               f"expected {_show(b, first)}")
    return Comparison(False, count, b.size, max_abs, max_rel, max_ulp_seen, first, message)


# ----------------------------------------------------------------------------
# difftest
# ----------------------------------------------------------------------------


@dataclass
class OutputDiff:
    """How one output of the program compares (``name`` is its ``jax.tree`` path)."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    budget: int  # ULP budget applied (0 for exact dtypes)
    comparison: Comparison

    @property
    def ok(self) -> bool:
        """True when the output is within tolerance."""
        return self.comparison.ok


@dataclass
class DiffReport:
    """The outcome of :func:`difftest`: one :class:`OutputDiff` per flattened output."""

    function: str
    outputs: list[OutputDiff] = field(default_factory=list)
    error: str | None = None  # outputs of different count / structure

    @property
    def ok(self) -> bool:
        """True when every output agrees with ``jax.jit`` within tolerance."""
        return self.error is None and all(o.ok for o in self.outputs)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        head = f"difftest {self.function}: {'OK' if self.ok else 'MISMATCH'} ({len(self.outputs)} outputs)"
        lines = [head]
        if self.error:
            lines.append(f"  {self.error}")
        rows = [("output", "shape", "status", "max abs", "max rel", "max ULP", "budget")]
        for o in self.outputs:
            c = o.comparison
            ulp = "-" if c.max_ulp is None else ("inf" if c.max_ulp == ULP_INFINITE else str(c.max_ulp))
            rows.append((f"#{o.index} {o.name}".rstrip(), f"{o.dtype}{list(o.shape)}", "ok" if o.ok else "MISMATCH",
                         f"{c.max_abs:.3g}", f"{c.max_rel:.3g}", ulp, "exact" if c.max_ulp is None else str(o.budget)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
        for o in self.outputs:
            if not o.ok:
                lines.append(f"  #{o.index} {o.name}: {o.comparison.message}")
        return "\n".join(lines)

    def raise_if_mismatch(self) -> DiffReport:
        """Raise :class:`DiffMismatchError` (with this report as message) unless :attr:`ok`; return self."""
        if not self.ok:
            raise DiffMismatchError(str(self))
        return self


def ulp_budget(dtype, max_ulp=None) -> int:
    """The ULP budget for a float or complex dtype: ``max_ulp`` itself (an int), or looked up by dtype name
    in a mapping (complex dtypes by their component type), missing names taking :data:`DEFAULT_MAX_ULP` or 1."""
    dtype = np.dtype(dtype)
    if max_ulp is None:
        max_ulp = DEFAULT_MAX_ULP
    if isinstance(max_ulp, Mapping):
        key = dtype.name if dtype.kind != "c" else np.dtype(dtype.type(0).real.dtype).name
        if key in max_ulp:
            return int(max_ulp[key])
        return DEFAULT_MAX_ULP.get(key, 1)
    return int(max_ulp)


def difftest(fn, *args, max_ulp: int | Mapping[str, int] | None = None, atol: float = 0.0,
             kwargs: Mapping | None = None, name: str | None = None) -> DiffReport:
    """Run ``jax.jit(fn)`` and the imported program on the NumPy executor on ``args``; compare every output.

    ``args`` (and ``kwargs``, the function's keyword arguments) may be pytrees
    of arrays or scalars. ``max_ulp`` is the ULP budget for floating-point
    outputs: an int for every dtype, or a mapping from dtype name
    (``'float32'``, ``'bfloat16'``; complex outputs use their component type)
    to budget, missing names taking :data:`DEFAULT_MAX_ULP`. ``atol > 0`` also
    accepts elements within that absolute error (useful near zero, where ULPs
    are tiny). Integer and bool outputs must be equal.

    Returns a :class:`DiffReport`; import and execution errors propagate as
    :class:`~xla_dialect.errors.XlaError`.
    """
    import jax

    import lowering

    from .jax_import import import_jax

    kwargs = dict(kwargs or {})
    label = name or getattr(fn, "__name__", type(fn).__name__)
    expected_tree = jax.jit(fn)(*args, **kwargs)
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(expected_tree)
    expected = [np.asarray(leaf) for _, leaf in leaves_with_paths]
    names = [jax.tree_util.keystr(path) for path, _ in leaves_with_paths]

    module = import_jax(fn, *args, **kwargs)
    flat_args = [np.asarray(a) for a in jax.tree.leaves((args, kwargs))]
    # The arguments as jax.jit takes them: converted to the program's parameter types (e.g. int64 to s32
    # without jax_enable_x64), as jax does.
    actual = list(lowering.compile(module, argument_conversion="cast")(*flat_args))

    report = DiffReport(label)
    if len(actual) != len(expected):
        report.error = f"the executor returned {len(actual)} outputs, jax.jit {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        budget = ulp_budget(e.dtype, max_ulp) if (e.dtype.kind == "c" or is_float_dtype(e.dtype)) else 0
        report.outputs.append(OutputDiff(i, names[i], tuple(e.shape), str(e.dtype), budget,
                                         compare_arrays(a, e, budget, atol)))
    return report
