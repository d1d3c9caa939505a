"""The check semantics of the StableHLO test harness: ``check.expect_eq``, ``expect_close``,
``expect_almost_eq`` and the ``custom_call @check.*`` forms of ``testdata/`` (:data:`CHECKS`), as comparisons
of NumPy arrays that name the first element that differs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...comparison import ULP_INFINITE, is_float_dtype, ulp_distance
from .records import ConformanceError


def _first_mismatch(bad: np.ndarray, actual: np.ndarray, expected: np.ndarray, what: str = "") -> str | None:
    """``None`` when nothing is ``bad``, else a message naming how many and the first element."""
    count = int(np.count_nonzero(bad))
    if not count:
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
    a = actual[index] if actual.ndim else actual[()]
    e = expected[index] if expected.ndim else expected[()]
    where = f" at {list(index)}" if bad.ndim else ""
    # str() of a NumPy scalar is its shortest round-trip text in its own precision.
    return f"{count} of {bad.size} elements differ{what}; first{where}: actual {a}, expected {e}"


def _same_layout(actual: np.ndarray, expected: np.ndarray) -> str | None:
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != expected {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    return None


def _is_inexact(dtype: np.dtype) -> bool:
    return dtype.kind == "c" or is_float_dtype(dtype)


def _f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64)


def check_eq(actual, expected) -> str | None:
    """``check.expect_eq``: exact elementwise equality (NaN differs from NaN, +0 equals -0).

    Returns ``None`` when the check holds, else a message.
    """
    a, e = np.asarray(actual), np.asarray(expected)
    bad_layout = _same_layout(a, e)
    if bad_layout:
        return bad_layout
    if a.dtype.kind == "c":
        bad = (a.real.astype(np.float64) != e.real.astype(np.float64)) | (_f64(a.imag) != _f64(e.imag))
    elif is_float_dtype(a.dtype):
        bad = _f64(a) != _f64(e)
    elif a.dtype.kind == "V":  # sub-byte integers (ml_dtypes int4, ...)
        bad = a.astype(np.int64) != e.astype(np.int64)
    else:
        bad = a != e
    return _first_mismatch(np.asarray(bad), a, e)


def check_close(actual, expected, max_ulp: int = 1, min_ulp: int = 0) -> str | None:
    """``check.expect_close``: every element's ULP distance lies in ``[min_ulp, max_ulp]``.

    The distance is :func:`interop.comparison.ulp_distance` (bitwise-equal and
    NaN/NaN pairs are 0 apart, other pairs with a non-finite value are
    infinitely apart; complex: the larger distance of the two parts). The
    testdata ``custom_call @check.expect_close`` form uses ``[0, 3]``.
    """
    a, e = np.asarray(actual), np.asarray(expected)
    bad_layout = _same_layout(a, e)
    if bad_layout:
        return bad_layout
    if not _is_inexact(a.dtype):
        raise ConformanceError(f"check.expect_close: unsupported element type {a.dtype}")
    d = ulp_distance(a, e)
    bad = (d > np.uint64(max_ulp)) | (d < np.uint64(min_ulp))
    if not bad.any():
        return None
    worst = int(d.max())
    shown = "inf" if worst == ULP_INFINITE else str(worst)
    return _first_mismatch(bad, a, e, f" by more than {max_ulp} ULP (max {shown})" if min_ulp == 0
                           else f" outside [{min_ulp}, {max_ulp}] ULP (max {shown})")


def _almost_equal_floats(a: np.ndarray, e: np.ndarray, tolerance: float) -> np.ndarray:
    """The interpreter's ``areApproximatelyEqual`` for float arrays (elementwise bool)."""
    fa, fe = _f64(a), _f64(e)
    with np.errstate(invalid="ignore", over="ignore"):
        equal = fa == fe
        nan_a, nan_e = np.isnan(fa), np.isnan(fe)
        unordered = nan_a | nan_e
        # A non-finite value is only close to itself; finite values (zeros included, of either sign)
        # are close within the tolerance (StableHLO's reference/Element.cpp areApproximatelyEqual).
        finite = np.isfinite(fa) & np.isfinite(fe)
        near = np.abs(fa - fe) <= tolerance
    return equal | (unordered & (nan_a == nan_e)) | (~unordered & finite & near)


def _elementwise_close(actual, expected, tolerance: float,
                       close: Callable[[np.ndarray, np.ndarray, float], np.ndarray]) -> str | None:
    """Apply a float closeness rule elementwise (complex: to both parts); other dtypes must be equal."""
    a, e = np.asarray(actual), np.asarray(expected)
    bad_layout = _same_layout(a, e)
    if bad_layout:
        return bad_layout
    if a.dtype.kind == "c":
        bad = ~(close(a.real, e.real, tolerance) & close(a.imag, e.imag, tolerance))
    elif is_float_dtype(a.dtype):
        bad = ~close(a, e, tolerance)
    else:
        return check_eq(a, e)
    return _first_mismatch(bad, a, e, f" by more than {tolerance:g}")


def check_almost_eq(actual, expected, tolerance: float = 1e-4) -> str | None:
    """``check.expect_almost_eq`` (check dialect ops): floats within ``tolerance``.

    As in the StableHLO interpreter: equal values (incl. equal infinities and
    +0/-0) match, NaN matches NaN only, finite values match when they differ
    by at most ``tolerance`` (whatever their signs: -6.7e-17 is close to 0);
    complex numbers part by part; integers and bools must be equal.
    """
    return _elementwise_close(actual, expected, tolerance, _almost_equal_floats)


def _abs_close(a: np.ndarray, e: np.ndarray, tolerance: float) -> np.ndarray:
    fa, fe = _f64(a), _f64(e)
    with np.errstate(invalid="ignore", over="ignore"):
        return (np.abs(fa - fe) <= tolerance) | (fa == fe) | (np.isnan(fa) & np.isnan(fe))


def check_abs_close(actual, expected, tolerance: float) -> str | None:
    """``|actual - expected| <= tolerance``, NaN matching NaN and infinities their equal; ints exactly.

    The semantics of the testdata forms ``custom_call @check.expect_almost_eq``
    (tolerance 1e-3) and ``custom_call @check.eq`` (1e-4), per the corpus README.
    """
    return _elementwise_close(actual, expected, tolerance, _abs_close)


@dataclass(frozen=True)
class CheckSpec:
    """How one kind of check op is applied: its operand count and its evaluator.

    ``evaluate(actual, expected, attributes)`` returns ``None`` or a message;
    ``attributes`` holds the op's attributes as Python values.
    """

    operands: int
    evaluate: Callable[[np.ndarray, np.ndarray, dict], str | None]


CHECKS: dict[tuple[str, str], CheckSpec] = {
    # check dialect ops (interpret/ and quantized/ files)
    ("op", "expect_eq"): CheckSpec(2, lambda a, e, at: check_eq(a, e)),
    ("op", "expect_almost_eq"): CheckSpec(2, lambda a, e, at: check_almost_eq(a, e, at.get("tolerance", 1e-4))),
    ("op", "expect_serialized_eq"): CheckSpec(2, lambda a, e, at: check_eq(a, e)),  # the probe's value first
    ("op", "expect_close"): CheckSpec(
        2, lambda a, e, at: check_close(a, e, at.get("max_ulp_difference", 1), at.get("min_ulp_difference", 0))),
    # stablehlo.custom_call forms (testdata/)
    ("custom_call", "expect_eq"): CheckSpec(2, lambda a, e, at: check_eq(a, e)),
    ("custom_call", "expect_close"): CheckSpec(2, lambda a, e, at: check_close(a, e, 3, 0)),
    ("custom_call", "expect_almost_eq"): CheckSpec(2, lambda a, e, at: check_abs_close(a, e, 1e-3)),
    ("custom_call", "eq"): CheckSpec(2, lambda a, e, at: check_abs_close(a, e, 1e-4)),
}
"""(form, kind) -> :class:`CheckSpec`; form is ``op`` (``check.<kind>``) or ``custom_call`` (``@check.<kind>``).

``check.expect_eq_const`` and ``check.expect_almost_eq_const`` are rewritten
into their two-operand forms by :func:`normalize_checks`."""
