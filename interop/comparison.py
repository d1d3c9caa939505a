"""How two runs of a program are compared: output by output, with a tolerance that follows the dtype.

Integers and bools must be equal; floats (and both parts of complex numbers) agree within a budget of ULPs
(units in the last place; NaN must meet NaN, infinities must be equal) or within a bound relative to the
output's magnitude (sums in another order). :func:`compare_output` is the rule of :func:`interop.difftest`
(JAX functions, :mod:`interop.jax.difftest`) and of ``xla-run --check-xla``; its primitives
(:func:`ulp_distance`, :func:`compare_arrays`) are also used by the conformance runner and the numerics
debugging tools.

A float output out of tolerance may be rounding noise: a quantity that is 0 in
exact arithmetic (the gradient of a bias that BatchNorm or a softmax cancels) is,
in float32, the rounding error of its sums, which depends on their order, and a
later step (Adam's first update, ``g / (|g| + eps)``) scales it up to visible
values. :func:`analyse_noise_with` then measures XLA's own error: XLA's float32
results on the inputs and on copies nudged by an ULP (:func:`nudge_ulp`), each
against a float64 evaluation of the same program on the same inputs (for a JAX
function :func:`interop.jax.difftest.float64_program`, for a program file the program widened to float64).
An output whose every differing element is one where XLA's own error is beyond the ULP budget and ours
differs from XLA by at most :data:`NOISE_FACTOR` (4) times that error is ``noise-dominated``
(:class:`NoiseEvidence` has the float64 value, XLA's error and values, ours); it
is not ``ok`` unless ``accept_noise=True``, and the report's :attr:`DiffReport.verdict`
says ``noise-dominated`` rather than ``mismatch``.
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
    "DEFAULT_NOISE_SAMPLES",
    "DiffReport",
    "NOISE_FACTOR",
    "NoiseDominatedError",
    "NoiseEvidence",
    "OutputDiff",
    "analyse_noise_with",
    "beyond_tolerance",
    "compare_arrays",
    "compare_output",
    "float_bits",
    "magnitude_rtol",
    "nudge_ulp",
    "output_magnitude",
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


def output_magnitude(expected) -> float:
    """The scale of ``rtol_magnitude``: the largest finite ``|expected|`` (0 when there is none)."""
    b = np.asarray(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        wb = np.abs(b.astype(np.complex128 if b.dtype.kind == "c" else np.float64))
    finite = np.isfinite(wb)
    return float(np.max(wb[finite])) if finite.any() else 0.0


def beyond_tolerance(actual, expected, max_ulp: int = 0, atol: float = 0.0, rtol_magnitude: float = 0.0,
                     magnitude: float | None = None, ulps: np.ndarray | None = None) -> tuple[np.ndarray, float, int]:
    """Which elements of two float (or complex) arrays of one dtype are out of tolerance (the rule of
    :func:`compare_arrays`): a bool mask, the magnitude used (``magnitude`` or :func:`output_magnitude`
    of ``expected``, computed only when some element is beyond the ULP and ``atol`` bounds) and how many
    elements the magnitude bound accepted."""
    a, b = np.asarray(actual), np.asarray(expected)
    bad = (ulp_distance(a, b) if ulps is None else ulps) > np.uint64(max_ulp)
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    if atol > 0:
        with np.errstate(invalid="ignore"):
            bad &= ~(np.abs(a.astype(wide) - b.astype(wide)) <= atol)
    by_magnitude = 0
    if rtol_magnitude > 0 and bad.any():
        magnitude = output_magnitude(b) if magnitude is None else magnitude
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.abs(a.astype(wide) - b.astype(wide)) <= rtol_magnitude * magnitude
        by_magnitude = int(np.count_nonzero(bad & close))
        bad &= ~close
    return bad, (magnitude or 0.0), by_magnitude


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
        bad, magnitude, by_magnitude = beyond_tolerance(a, b, max_ulp, atol, rtol_magnitude, ulps=d)
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
    noise: NoiseEvidence | None = None  # set by difftest on float outputs out of tolerance

    @property
    def ok(self) -> bool:
        """True when the output is within tolerance (a noise-dominated output is not)."""
        return self.comparison.ok

    @property
    def noise_dominated(self) -> bool:
        """Out of tolerance, and every element that is out of it is rounding noise (:class:`NoiseEvidence`)."""
        return not self.comparison.ok and self.noise is not None and self.noise.dominated

    @property
    def label(self) -> str:
        """``#0`` or ``#0 ['logits']``."""
        return f"#{self.index} {self.name}".rstrip()

    @property
    def status(self) -> str:
        """``exact``, ``ok``, ``ok (magnitude)`` (accepted by the magnitude bound), ``noise-dominated`` or
        ``MISMATCH``."""
        c = self.comparison
        if self.noise_dominated:
            return "noise-dominated"
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
                "by_magnitude": c.by_magnitude, "message": c.message,
                "noise": None if self.noise is None else self.noise.as_dict()}

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
    :func:`interop.difftest` and ``xla-run --check-xla``.

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
    """The outcome of :func:`interop.difftest`: one :class:`OutputDiff` per flattened output.

    :attr:`verdict` is ``"ok"``, ``"noise-dominated"`` (every output out of tolerance is rounding noise,
    :class:`NoiseEvidence`) or ``"mismatch"``; :attr:`ok` is True for ``"ok"``, and for
    ``"noise-dominated"`` only when ``accept_noise`` is set.
    """

    function: str
    outputs: list[OutputDiff] = field(default_factory=list)
    error: str | None = None  # outputs of different count / structure
    accept_noise: bool = False  # noise-dominated outputs count as agreeing

    @property
    def verdict(self) -> str:
        """``ok``, ``noise-dominated`` or ``mismatch`` (whatever ``accept_noise`` says)."""
        if self.error is not None or any(not o.ok and not o.noise_dominated for o in self.outputs):
            return "mismatch"
        return "noise-dominated" if self.noise_dominated else "ok"

    @property
    def noise_dominated(self) -> list[OutputDiff]:
        """The outputs out of tolerance whose every differing element is rounding noise."""
        return [o for o in self.outputs if o.noise_dominated]

    @property
    def ok(self) -> bool:
        """True when every output agrees with ``jax.jit`` within tolerance, or is noise-dominated and
        the report accepts noise."""
        return self.verdict == "ok" or (self.verdict == "noise-dominated" and self.accept_noise)

    @property
    def exact(self) -> list[bool]:
        """Per output: bitwise equal to ``jax.jit``'s (NaN with NaN)."""
        return [o.comparison.exact for o in self.outputs]

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        noisy = self.noise_dominated
        bad = [o for o in self.outputs if not o.ok and not o.noise_dominated] + ([] if self.accept_noise else noisy)
        word = {"ok": "OK", "mismatch": "MISMATCH", "noise-dominated": "NOISE-DOMINATED"}[self.verdict]
        if self.ok and noisy:
            word = "OK (noise-dominated accepted: " + ", ".join(o.label for o in noisy) + ")"
        head = f"difftest {self.function}: {word} ({len(self.outputs)} outputs)"
        if bad:  # the first line is what pytest's short summary shows: the verdict in brief
            head += ": " + "; ".join(f"{o.label}: {'noise-dominated, ' if o.noise_dominated else ''}"
                                     f"{o.comparison.message}" for o in bad[:2]) + (
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
                if o.noise is not None:
                    lines.append(f"    {o.noise.text}")
        return "\n".join(lines)

    def raise_if_mismatch(self) -> DiffReport:
        """Raise :class:`DiffMismatchError` (with this report as message) unless :attr:`ok`: a
        :class:`NoiseDominatedError` when the verdict is ``noise-dominated``; return self."""
        __tracebackhide__ = True  # pytest: the failure points at the caller, not here
        if not self.ok:
            raise (NoiseDominatedError if self.verdict == "noise-dominated" else DiffMismatchError)(str(self))
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


# ----------------------------------------------------------------------------
# Noise-dominated outputs: XLA's own rounding error, measured against float64
# ----------------------------------------------------------------------------

NOISE_FACTOR = 4.0
"""An element out of tolerance is rounding noise when the difference is at most this many times XLA's
own error (its float32 results against a float64 evaluation of the same program on the same inputs)."""

DEFAULT_NOISE_SAMPLES = 16
"""How many times difftest nudges the float inputs (each element by -1, 0 or +1 ULP) to measure XLA's
own rounding error, besides the inputs as given."""


class NoiseDominatedError(DiffMismatchError):
    """Raised by ``raise_if_mismatch`` when every output that differs is noise-dominated (and the report
    does not accept them): a :class:`DiffMismatchError`, so callers that catch that one catch it too."""


@dataclass
class NoiseEvidence:
    """Why an output's out-of-tolerance elements are (or are not) rounding noise.

    XLA's float32 program is run on the inputs and on ``samples - 1`` copies whose float elements are
    nudged by an ULP (:func:`nudge_ulp`), and each result is compared with a float64 evaluation of the
    same program on the same inputs (:func:`interop.jax.difftest.float64_program`): XLA's own error, per element. An element
    that differs is rounding noise when XLA's own error there is beyond the ULP budget in some sample
    (not the rounding of an element-wise result but accumulated error: sums, cancellation) and our
    difference from XLA is at most ``factor`` times XLA's largest own error there (we are about as close
    to XLA as XLA is to the value it computes). The element shown (``at``) is the largest difference
    among the elements that are not noise, or among all when every one is.
    """

    elements: int = 0  # elements out of tolerance
    explained: int = 0  # of those, rounding noise
    accurate: int = 0  # of those, where XLA's own error stays within the ULP budget in every sample
    samples: int = 0  # XLA evaluations compared with float64 (the inputs as given and the nudged copies)
    factor: float = NOISE_FACTOR
    at: tuple[int, ...] = ()
    actual: complex = 0.0  # ours, XLA's and the float64 value at ``at`` (inputs as given)
    expected: complex = 0.0
    reference: complex = 0.0
    own_error: float = 0.0  # XLA's largest error against float64 at ``at``, over the samples
    low: float | None = None  # XLA's smallest and largest value at ``at`` over the samples (real dtypes)
    high: float | None = None
    note: str = ""  # why the output was not analysed (then ``samples`` is 0)

    @property
    def dominated(self) -> bool:
        """True when every element out of tolerance is rounding noise."""
        return self.samples > 0 and self.elements > 0 and self.explained == self.elements

    @property
    def text(self) -> str:
        """The verdict and its evidence, one sentence."""
        if not self.samples:
            return f"not analysed for rounding noise: {self.note}"
        where = f" at {list(self.at)}" if self.at else ""
        values = (f"ours {self.actual:.4g}, XLA {self.expected:.4g}, float64 {self.reference:.4g}; XLA's own "
                  f"error there up to {self.own_error:.3g}")
        if self.own_error > abs(self.reference):
            values += ", more than the value itself"
        if self.low is not None:
            values += f" (its float32 values {self.low:.4g} .. {self.high:.4g})"
        how = (f"XLA's float32 results against a float64 evaluation of the program, on the inputs and "
               f"{self.samples - 1} copies nudged by an ULP")
        if self.dominated:
            return (f"noise-dominated: all {self.elements} elements that differ are within {self.factor:g}x "
                    f"XLA's own rounding error, itself beyond the ULP budget ({how}); largest{where}: {values}")
        far = self.elements - self.explained - self.accurate
        reasons = [f"{self.accurate} where XLA's own error is within the ULP budget"] if self.accurate else []
        reasons += [f"{far} that differ by more than {self.factor:g}x XLA's own error"] if far else []
        return (f"not rounding noise: of {self.elements} elements that differ, " + " and ".join(reasons)
                + f" ({how}); largest{where}: {values}")

    def as_dict(self) -> dict:
        """JSON-ready fields (complex values as ``[re, im]``)."""
        def number(x):
            if x is None:
                return None
            return [json_number(x.real), json_number(x.imag)] if isinstance(x, complex) else json_number(x)

        return {"dominated": self.dominated, "elements": self.elements, "explained": self.explained,
                "accurate": self.accurate, "samples": self.samples, "factor": self.factor, "at": list(self.at),
                "actual": number(self.actual), "expected": number(self.expected),
                "reference": number(self.reference), "own_error": number(self.own_error),
                "low": number(self.low), "high": number(self.high), "note": self.note}


def nudge_ulp(x, rng: np.random.Generator) -> np.ndarray:
    """A copy of a float array with each finite nonzero element moved by -1, 0 or +1 ULP at random (zeros,
    infinities, NaNs and the smallest subnormals stay): an input as valid as the given one at the
    rounding level of its type."""
    a = np.array(x)
    bits = float_bits(a.dtype)
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    raw = a.view(unsigned).astype(np.uint64) & np.uint64((1 << bits) - 1 if bits < 64 else ULP_INFINITE)
    sign = np.uint64(1 << (bits - 1))
    magnitude = raw & (sign - np.uint64(1))
    step = rng.integers(-1, 2, size=a.shape)
    moved = np.where(step < 0, magnitude - np.uint64(1), np.where(step > 0, magnitude + np.uint64(1), magnitude))
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(_as_f64(a))
    keep = ~finite | (magnitude <= np.uint64(1)) | (moved >= sign)
    out = np.where(keep, raw, (raw & sign) | moved).astype(unsigned).view(a.dtype).reshape(a.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isfinite(_as_f64(out)), out, a)


class _NoReference(Exception):
    """The program cannot be evaluated in float64 (the reason is the message)."""


def _float_leaf(x) -> bool:
    """An array (NumPy or jax) of a float type; Python numbers are not nudged."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    try:
        return is_float_dtype(np.dtype(dtype))
    except TypeError:  # typed PRNG keys
        return False


def analyse_noise_with(setup, outputs: list[OutputDiff], actual: list, expected: list,
                       samples: int = DEFAULT_NOISE_SAMPLES, atol: float = 0.0) -> None:
    """The rounding-noise analysis of :func:`interop.jax.difftest.analyse_noise` for any program XLA runs: ``setup()`` returns
    ``(leaves, run_xla, reference)``, the program's inputs (a list), XLA's float32 results on a list of
    inputs and the float64 evaluation of the same program on them (``run_xla(leaves)`` is ``expected``,
    not run again). Also used by ``xla-run --check-xla``, whose reference is the
    program widened to float64. Errors while setting up or running become the outputs' notes."""
    todo = [o for o in outputs if not o.comparison.ok and o.comparison.max_ulp is not None]
    if not todo:
        return
    wide_types = [o for o in todo if np.dtype(o.dtype) in (np.float64, np.complex128)]
    for o in wide_types:
        o.noise = NoiseEvidence(note="no reference more precise than float64")
    todo = [o for o in todo if o not in wide_types]
    if not todo:
        return
    try:
        leaves, run_xla, reference = setup()
        rng = np.random.default_rng(0)
        acc = {o.index: _NoiseAccumulator(o, actual[o.index], expected[o.index], atol) for o in todo}
        for k in range(samples + 1):
            if k == 0:
                moved, xla = leaves, expected
            else:
                moved = [nudge_ulp(x, rng) if _float_leaf(x) else x for x in leaves]
                xla = run_xla(moved)
            ref = reference(moved)
            if len(ref) != len(expected):
                raise _NoReference(f"the float64 evaluation has {len(ref)} outputs, XLA {len(expected)}")
            for i, a in acc.items():
                a.add(xla[i], ref[i])
    except Exception as e:  # the analysis explains a mismatch; it never turns one into an error
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        for o in todo:
            o.noise = NoiseEvidence(note=reason)
        return
    for o in todo:
        o.noise = acc[o.index].evidence()


class _NoiseAccumulator:
    """XLA's largest error against float64 per element, whether it was ever beyond tolerance, and the range
    of its values, over the samples of one output."""

    def __init__(self, o: OutputDiff, actual, expected, atol: float):
        self.o, self.atol = o, atol
        self.actual, self.expected = np.asarray(actual), np.asarray(expected)
        self.wide = np.complex128 if self.expected.dtype.kind == "c" else np.float64
        self.bad, _, _ = beyond_tolerance(self.actual, self.expected, o.budget, atol, o.rtol_magnitude)
        self.own = np.zeros(self.expected.shape)
        self.noisy = np.zeros(self.expected.shape, bool)
        self.low = self.high = self.first_ref = None
        self.count = 0

    def add(self, xla, ref) -> None:
        xla, ref = np.asarray(xla), np.asarray(ref)
        if xla.shape != self.expected.shape or ref.shape != self.expected.shape:
            raise _NoReference(f"output {self.o.label}: shapes differ between the evaluations")
        with np.errstate(invalid="ignore", over="ignore"):
            wx, wr = xla.astype(self.wide), ref.astype(self.wide)
            finite = np.isfinite(wx) & np.isfinite(wr)
            self.own = np.fmax(self.own, np.where(finite, np.abs(wx - wr), 0.0))
            rounded = ref.astype(self.expected.dtype)
        # Beyond what rounding each operation once gives (the ULP budget, atol): accumulated rounding
        # error, which the magnitude bound may accept or not depending on the size of the partial sums.
        beyond, _, _ = beyond_tolerance(xla, rounded, self.o.budget, self.atol)
        self.noisy |= beyond & finite
        if self.wide is np.float64:
            self.low = wx if self.low is None else np.fmin(self.low, wx)
            self.high = wx if self.high is None else np.fmax(self.high, wx)
        if self.first_ref is None:
            self.first_ref = ref
        self.count += 1

    def evidence(self) -> NoiseEvidence:
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(self.actual.astype(self.wide) - self.expected.astype(self.wide))
            diff = np.where(np.isnan(diff), np.inf, diff)
            explained = self.bad & self.noisy & (diff <= NOISE_FACTOR * self.own)
        unexplained = self.bad & ~explained
        pick = unexplained if unexplained.any() else self.bad
        at = np.unravel_index(int(np.argmax(np.where(pick, diff, -1.0))), self.bad.shape) if self.bad.ndim else ()
        at = tuple(int(i) for i in at)

        def value(a):
            x = np.asarray(a)[at].item()
            return complex(x) if isinstance(x, complex) else float(x)

        return NoiseEvidence(int(self.bad.sum()), int(explained.sum()), int((self.bad & ~self.noisy).sum()),
                             self.count, NOISE_FACTOR, at,
                             value(self.actual), value(self.expected), value(self.first_ref),
                             float(self.own[at]), None if self.low is None else float(self.low[at]),
                             None if self.high is None else float(self.high[at]))
