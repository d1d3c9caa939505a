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

The comparison (:func:`compare_output`) is also ``xla-run --check-xla``'s; its
primitives (:func:`ulp_distance`, :func:`compare_arrays`) are also used by the
conformance runner (:mod:`interop.conformance`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from xla_dialect.errors import ExecutionError


__all__ = [
    "DEFAULT_MAGNITUDE_RTOL",
    "DEFAULT_MAX_ULP",
    "DiffMismatchError",
    "DiffReport",
    "OutputDiff",
    "compare_arrays",
    "compare_output",
    "difftest",
    "float_bits",
    "magnitude_rtol",
    "plain_array",
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

DEFAULT_MAGNITUDE_RTOL: dict[str, float] = {
    # Sums and dot products in another order (XLA's blocked kernels, YNNPACK, BLAS) differ by a few
    # roundings of the *partial sums*, whose size is that of the output's largest values, not of each
    # element: near zero that is millions of ULPs while the error is tiny against the output. The bound
    # is 64 units of roundoff of the output's magnitude (max |expected| over the output).
    "float64": 64 * 2.0 ** -53,
    "float32": 64 * 2.0 ** -24,
    "float16": 8 * 2.0 ** -11,
    "bfloat16": 8 * 2.0 ** -8,
}
"""Default error bound relative to an output's magnitude, by dtype name (other floats: 4 of their eps)."""


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
    exact: bool = False  # every element bitwise equal (NaNs with NaNs)
    magnitude: float = 0.0  # max |expected| over the finite elements (the scale of rtol_magnitude)
    by_magnitude: int = 0  # elements beyond the ULP budget accepted by the magnitude bound
    nan_mismatches: int = 0  # elements where one side is NaN and the other a number
    finite_pairs: int = 0  # elements where both are finite (those max_abs / max_rel are taken over)

    @property
    def errors_text(self) -> tuple[str, str]:
        """``max_abs``, ``max_rel`` as shown: ``-`` when no element has two finite values."""
        if not self.finite_pairs:
            return "-", "-"
        return f"{self.max_abs:.3g}", f"{self.max_rel:.3g}"


def _errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """Max absolute and relative error over the elements where both are finite, and their count."""
    if a.size == 0:
        return 0.0, 0.0, 0
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
    return float(diff.max()), float(rel.max()), int(np.count_nonzero(finite))


def _show(a: np.ndarray, index) -> str:
    # str() of a NumPy scalar is its shortest round-trip text in its own precision.
    return str(a[index] if a.ndim else a[()])


def compare_arrays(actual, expected, max_ulp: int = 0, atol: float = 0.0,
                   rtol_magnitude: float = 0.0) -> Comparison:
    """Compare two arrays with a dtype-aware tolerance.

    Shapes and dtypes must be equal. Integers, bools (and any non-float
    dtype) must be equal exactly; floats and complex numbers must be within
    ``max_ulp`` ULPs (:func:`ulp_distance`) or, when ``atol > 0``, within
    ``atol`` in absolute value, or, when ``rtol_magnitude > 0``, within
    ``rtol_magnitude`` times the output's magnitude (the largest finite
    ``|expected|``). NaN matches NaN only; infinities match only themselves.
    """
    a = np.asarray(actual)
    b = np.asarray(expected)
    if a.shape != b.shape:
        return Comparison(False, size=b.size, message=f"shape {list(a.shape)} != expected {list(b.shape)}")
    if a.dtype != b.dtype:
        return Comparison(False, size=b.size, message=f"dtype {a.dtype} != expected {b.dtype}")
    max_abs, max_rel, finite_pairs = _errors(a, b)
    magnitude, by_magnitude, nans = 0.0, 0, 0
    if a.dtype.kind == "c" or is_float_dtype(a.dtype):
        with np.errstate(invalid="ignore"):
            nan_a, nan_b = (np.isnan(_as_f64(x) if x.dtype.kind != "c" else x) for x in (a, b))
        nans = int(np.count_nonzero(nan_a != nan_b))
        d = ulp_distance(a, b)
        exact = not bool(np.any(d))
        bad = d > np.uint64(max_ulp)
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        if atol > 0:
            with np.errstate(invalid="ignore"):
                bad &= ~(np.abs(a.astype(wide) - b.astype(wide)) <= atol)
        if rtol_magnitude > 0 and bad.any():
            with np.errstate(invalid="ignore", over="ignore"):
                wb = b.astype(wide)
                finite = np.isfinite(wb)
                magnitude = float(np.max(np.abs(wb[finite]))) if finite.any() else 0.0
                close = np.abs(a.astype(wide) - wb) <= rtol_magnitude * magnitude
            by_magnitude = int(np.count_nonzero(bad & close))
            bad &= ~close
        max_ulp_seen = int(d.max()) if d.size else 0
    else:
        bad = a != b
        exact = not bool(bad.any())
        max_ulp_seen = None
    count = int(np.count_nonzero(bad))
    if not count:
        return Comparison(True, 0, b.size, max_abs, max_rel, max_ulp_seen, exact=exact, magnitude=magnitude,
                          by_magnitude=by_magnitude, finite_pairs=finite_pairs)
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if a.ndim else ()
    where = f" at {list(first)}" if a.ndim else ""
    nan_note = f" ({nans} NaN where the other has a number)" if nans else ""
    message = (f"{count} of {b.size} elements differ{nan_note}; first{where}: actual {_show(a, first)}, "
               f"expected {_show(b, first)}")
    return Comparison(False, count, b.size, max_abs, max_rel, max_ulp_seen, first, message, False, magnitude,
                      by_magnitude, nans, finite_pairs)


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
    rtol_magnitude: float = 0.0  # error bound relative to the output's magnitude (0: not applied)

    @property
    def ok(self) -> bool:
        """True when the output is within tolerance."""
        return self.comparison.ok

    @property
    def label(self) -> str:
        """``#0`` or ``#0 ['logits']``."""
        return f"#{self.index} {self.name}".rstrip()

    @property
    def status(self) -> str:
        """``exact``, ``ok``, ``ok (magnitude)`` (accepted by the magnitude bound) or ``MISMATCH``."""
        c = self.comparison
        if not c.ok:
            return f"MISMATCH ({c.nan_mismatches} NaN)" if c.nan_mismatches else "MISMATCH"
        return "exact" if c.exact else ("ok (magnitude)" if c.by_magnitude else "ok")

    @property
    def max_ulp_text(self) -> str:
        """The largest ULP distance seen: ``-`` for exact dtypes, ``inf`` for non-finite mismatches."""
        u = self.comparison.max_ulp
        return "-" if u is None else ("inf" if u == ULP_INFINITE else str(u))

    def as_dict(self) -> dict:
        """The comparison as JSON-ready values (``max_ulp``: null for exact dtypes, ``"inf"`` for a
        non-finite mismatch; non-finite errors as the strings ``"inf"``/``"nan"``)."""
        c = self.comparison
        return {"index": self.index, "name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "status": self.status, "ok": c.ok, "exact": c.exact,
                "max_ulp": None if c.max_ulp is None else (self.max_ulp_text if c.max_ulp == ULP_INFINITE
                                                           else c.max_ulp),
                "max_abs": json_number(c.max_abs) if c.finite_pairs else None,
                "max_rel": json_number(c.max_rel) if c.finite_pairs else None, "nan_mismatches": c.nan_mismatches,
                "budget_ulp": None if c.max_ulp is None else self.budget,
                "rtol_magnitude": self.rtol_magnitude, "mismatches": c.mismatches, "size": c.size,
                "by_magnitude": c.by_magnitude, "message": c.message}

    @property
    def budget_text(self) -> str:
        """The tolerance applied: ``exact``, ``4`` or ``4 ULP or 3.8e-06*|out|``."""
        if self.comparison.max_ulp is None:
            return "exact"
        return str(self.budget) + (f" ULP or {self.rtol_magnitude:.2g}*|out|" if self.rtol_magnitude else "")


def json_number(x: float) -> float | str:
    """``x``, or ``"inf"``, ``"-inf"``, ``"nan"`` for what JSON cannot hold."""
    return x if np.isfinite(x) else str(x)


def compare_output(actual, expected, max_ulp: int | Mapping[str, int] | None = None, atol: float = 0.0,
                   rtol_magnitude: float | Mapping[str, float] | None = None, exact: bool = False,
                   index: int = 0, name: str = "") -> OutputDiff:
    """Compare one output with the reference, with the budgets of its dtype: the one comparison of
    :func:`difftest` and ``xla-run --check-xla``.

    Floats and complex numbers agree within ``max_ulp`` ULPs (:func:`ulp_budget`) **or**
    ``rtol_magnitude`` times the output's magnitude (:func:`magnitude_rtol`; 0 turns it off) or, when
    ``atol > 0``, ``atol``; other dtypes, and every dtype with ``exact=True``, bitwise.
    """
    e = np.asarray(expected)
    inexact = (e.dtype.kind == "c" or is_float_dtype(e.dtype)) and not exact
    budget = ulp_budget(e.dtype, max_ulp) if inexact else 0
    rtol = magnitude_rtol(e.dtype, rtol_magnitude) if inexact else 0.0
    return OutputDiff(index, name, tuple(e.shape), str(e.dtype), budget,
                      compare_arrays(actual, e, budget, atol if inexact else 0.0, rtol), rtol)


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

    @property
    def exact(self) -> list[bool]:
        """Per output: bitwise equal to ``jax.jit``'s (NaN with NaN)."""
        return [o.comparison.exact for o in self.outputs]

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        bad = [o for o in self.outputs if not o.ok]
        head = f"difftest {self.function}: {'OK' if self.ok else 'MISMATCH'} ({len(self.outputs)} outputs)"
        if bad:  # the first line is what pytest's short summary shows: the verdict in brief
            head += ": " + "; ".join(f"{o.label}: {o.comparison.message}" for o in bad[:2]) + (
                f"; and {len(bad) - 2} more outputs" if len(bad) > 2 else "")
        elif self.error:
            head += f": {self.error}"
        lines = [head]
        if self.error:
            lines.append(f"  {self.error}")
        rows = [("output", "shape", "status", "max abs", "max rel", "max ULP", "budget")]
        for o in self.outputs:
            c = o.comparison
            rows.append((o.label, f"{o.dtype}{list(o.shape)}", o.status,
                         *c.errors_text, o.max_ulp_text, o.budget_text))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
        for o in self.outputs:
            if not o.ok:
                lines.append(f"  {o.label}: {o.comparison.message}")
        return "\n".join(lines)

    def raise_if_mismatch(self) -> DiffReport:
        """Raise :class:`DiffMismatchError` (with this report as message) unless :attr:`ok`; return self."""
        __tracebackhide__ = True  # pytest: the failure points at the caller, not here
        if not self.ok:
            raise DiffMismatchError(str(self))
        return self


def _per_dtype(dtype, value, defaults: Mapping, fallback):
    """``value`` itself (a number), or looked up by dtype name in a mapping (complex dtypes by their
    component type; ``defaults`` when ``value`` is None), missing names taking ``defaults`` or
    ``fallback(real dtype)``."""
    dtype = np.dtype(dtype)
    if value is None:
        value = defaults
    if not isinstance(value, Mapping):
        return value
    real = np.dtype(dtype.type(0).real.dtype) if dtype.kind == "c" else dtype
    if real.name in value:
        return value[real.name]
    return defaults[real.name] if real.name in defaults else fallback(real)


def ulp_budget(dtype, max_ulp=None) -> int:
    """The ULP budget for a float or complex dtype: ``max_ulp`` itself (an int), or looked up by dtype name
    in a mapping (complex dtypes by their component type), missing names taking :data:`DEFAULT_MAX_ULP` or 1."""
    return int(_per_dtype(dtype, max_ulp, DEFAULT_MAX_ULP, lambda real: 1))


def plain_array(value) -> np.ndarray:
    """A NumPy array of ``value``; a typed PRNG key array (``jax.random.key``) as its key data
    (``uint32[..., 2]`` for threefry), which is what the lowered program takes and returns."""
    import jax

    dtype = getattr(value, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(value))
    return np.asarray(value)


def magnitude_rtol(dtype, rtol=None) -> float:
    """The magnitude-relative bound for a float or complex dtype: ``rtol`` itself (a number), or looked
    up by dtype name in a mapping (default :data:`DEFAULT_MAGNITUDE_RTOL`; other floats: 4 eps)."""
    return float(_per_dtype(dtype, rtol, DEFAULT_MAGNITUDE_RTOL, lambda real: 4 * float(ml_dtypes.finfo(real).eps)))


def difftest(fn, *args, max_ulp: int | Mapping[str, int] | None = None, atol: float = 0.0,
             rtol_magnitude: float | Mapping[str, float] | None = None, exact: bool = False,
             kwargs: Mapping | None = None, name: str | None = None) -> DiffReport:
    """Run ``jax.jit(fn)`` and the imported program on the NumPy executor on ``args``; compare every output.

    ``args`` (and ``kwargs``, the function's keyword arguments) may be pytrees
    of arrays or scalars, typed PRNG keys included (compared as their key data).
    Each float (or complex) output agrees when every element is within
    ``max_ulp`` ULPs (element-wise results: an int for every dtype, or a mapping from
    dtype name - ``'float32'``, ``'bfloat16'``; complex outputs use their component
    type - to budget, missing names taking :data:`DEFAULT_MAX_ULP`) **or** within
    ``rtol_magnitude`` times the output's magnitude (its largest ``|value|``; sums
    and matmuls in another order: default :data:`DEFAULT_MAGNITUDE_RTOL`, 64 units of
    roundoff for f32; 0 turns it off). ``atol > 0`` also accepts elements within that
    absolute error. Integer and bool outputs must be equal. ``exact=True`` requires
    every output to be bitwise equal (where the executor reproduces XLA exactly).

    The report says per output whether it is bitwise exact, within the ULP budget, or
    only within the magnitude bound. Returns a :class:`DiffReport`; import and
    execution errors propagate as :class:`~xla_dialect.errors.XlaError`.
    """
    import jax

    import lowering

    from .jax_import import import_jax

    kwargs = dict(kwargs or {})
    label = name or getattr(fn, "__name__", type(fn).__name__)
    with jax.default_device(jax.devices("cpu")[0]):  # the reference is XLA's CPU backend
        expected_tree = jax.jit(fn)(*args, **kwargs)
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(expected_tree)
    expected = [plain_array(leaf) for _, leaf in leaves_with_paths]
    names = [jax.tree_util.keystr(path) for path, _ in leaves_with_paths]

    # The program of the call, whose outputs are the ones compared: import_jax traces a function jitted by
    # another library (nnx.jit, whose own program returns state updates first) as jax.jit of the call.
    module = import_jax(fn, *args, **kwargs)
    flat_args = [plain_array(a) for a in jax.tree.leaves((args, kwargs))]
    # The arguments as jax.jit takes them: converted to the program's parameter types (e.g. int64 to s32
    # without jax_enable_x64), as jax does.
    actual = list(lowering.compile(module, argument_conversion="cast")(*flat_args))

    report = DiffReport(label)
    if len(actual) != len(expected):
        report.error = f"the executor returned {len(actual)} outputs, jax.jit {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        report.outputs.append(compare_output(a, e, max_ulp, atol, rtol_magnitude, exact, i, names[i]))
    return report
