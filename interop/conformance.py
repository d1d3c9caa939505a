"""The StableHLO conformance runner: ``xla-conformance PATH... [--jobs N] [--timeout S] [--json REPORT]``.

It runs the programs of the StableHLO test corpus (``stablehlo/testdata`` and
``stablehlo/tests/interpret``, see ``../shared/corpus/README.md``) through
:func:`interop.import_stablehlo`, the NumPy executor and the corpus's checks:

1. **Discovery** (:func:`discover`): every ``.mlir`` file under the given
   paths; its ``// RUN`` lines say what it is. Files whose interpreter run is
   ``RUN-DISABLED`` upstream are reported ``disabled``; ``-split-input-file``
   files are split at ``// -----`` into independent programs; files that are
   only serialized and compared upstream (``dynamic/``) are round-trip tests;
   files tested only for error messages (``not stablehlo-translate``) are
   ``skipped``.
2. **Check ops** (:func:`normalize_checks`, :func:`prepare_module`): the checks
   appear as ``stablehlo.custom_call @check.*`` or as ``check.*`` ops in their
   custom syntax. The text is rewritten so that every ``check.*`` op is in the
   generic form (which jaxlib's MLIR parser accepts for an unregistered
   dialect), parsed with jaxlib, and then each check op is removed and its
   operands become extra results of the tested function (``*_const`` checks
   get their value as a ``stablehlo.constant``). The importer therefore sees
   plain StableHLO; the runner applies the check to the extra results.
   ``interpreter.run_parallel`` is run by compiling the device program for a
   replicas x partitions grid (``lowering.compile(..., num_replicas=...)``)
   between a prologue computing its operands and an epilogue checking its
   results; ``interpreter.probe`` values feed ``check.expect_serialized_eq``.
   Quantized programs go through the importer's ``!quant`` text rewrite first.
3. **Isolation** (:func:`run_programs`): programs run in worker processes
   (``forkserver``, or ``spawn``) with an address-space limit
   (``resource.setrlimit``); a program that crashes its worker, exceeds the
   memory limit or the per-program timeout is reported as an ``error`` and the
   worker is replaced. The executor's array-size limit follows the address-space
   limit (:mod:`xla_dialect.limits`), so a program asking for more memory fails
   when it is lowered, before anything is compiled, whatever the state of the
   numba cache. The timeout counts from the moment the worker takes the program
   (it acknowledges it), so the start-up of a fresh worker, importing JAX on a
   busy machine, is not charged to the program. A runner killed before it can
   stop its workers (SIGKILL, a closed terminal) takes them and the forkserver
   with it, even a worker inside a hanging program (:mod:`interop.processes`).

Check semantics follow the StableHLO test harness (see the corpus README and
:func:`check_close`, :func:`check_almost_eq`): the ``custom_call`` forms of
``testdata/`` allow 3 ULPs (``expect_close``) or an absolute error of 1e-3
(``expect_almost_eq``); the ``check`` dialect ops use their own attributes.
Programs are compiled with ``denormals="keep"`` (IEEE gradual underflow, as
the reference interpreter computes), not XLA CPU's flush-to-zero default.

The command prints a table by op family (:func:`family_table`) and the
programs that did not pass grouped by cause (:func:`causes_table`). The
report (``--json``) is ``{"summary": {...}, "results": [{"path", "name",
"status", "message", "seconds"}]}`` with ``status`` one of ``passed``,
``failed`` (a check did not hold), ``error`` (import, compile or run failed,
crash, timeout), ``skipped`` or ``disabled``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from lowering.runtime import register_custom_call
from xla_dialect.errors import XlaError

from .comparison import ULP_INFINITE, is_float_dtype, ulp_distance


__all__ = [
    "CHECKS",
    "Program",
    "Result",
    "check_almost_eq",
    "check_close",
    "check_eq",
    "cause_of",
    "discover",
    "family_of",
    "main",
    "normalize_checks",
    "prepare_module",
    "run_program",
    "run_programs",
    "split_programs",
]

STATUSES = ("passed", "failed", "error", "skipped", "disabled")


class ConformanceError(XlaError):
    """A corpus program cannot be run (malformed check ops, unsupported harness feature)."""


# ----------------------------------------------------------------------------
# Check semantics (the StableHLO test harness's)
# ----------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------
# Text level: splitting files, check ops to generic form
# ----------------------------------------------------------------------------

_SPLIT = re.compile(r"(?m)^// -----.*$")
# A check op (custom or generic form), or an interpreter.probe / interpreter.print op in custom form.
_HARNESS_OP = re.compile(r'(?m)^[ \t]*(?P<result>%[\w#]+\s*=\s*)?(?:(?P<quote>"?)check\.(?P<kind>\w+)(?P=quote)'
                         r'|interpreter\.(?P<interpreter>probe|print)\b)')
_OPEN, _CLOSE = "([{<", ")]}>"


def split_programs(text: str) -> list[tuple[int, str]]:
    """Split a ``-split-input-file`` file at ``// -----`` lines: ``[(first_line, chunk), ...]``.

    Each chunk keeps its own text; ``first_line`` (0-based) lets messages give file lines.
    """
    chunks, start, line = [], 0, 0
    for m in _SPLIT.finditer(text):
        chunks.append((line, text[start:m.start()]))
        line += text.count("\n", start, m.end())
        start = m.end()
    chunks.append((line, text[start:]))
    return chunks


def _scan(text: str, start: int, stop: Callable[[int, str, int, bool], bool]) -> int:
    """Index of the first character at which ``stop(i, char, depth, colon_seen)`` holds.

    Tracks bracket depth (``()[]{}<>``, with ``->`` not counted), skips string
    literals and notes whether a ``:`` at depth 0 has been seen.
    """
    depth, colon, i, n = 0, False, start, len(text)
    while i < n:
        c = text[i]
        if stop(i, c, depth, colon):
            return i
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "/" and text.startswith("//", i):  # a comment: up to the end of its line
            newline = text.find("\n", i)
            i = (newline if newline >= 0 else n) - 1
        elif c == "-" and text.startswith("->", i):
            i += 1
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == ":" and depth == 0:
            colon = True
        i += 1
    return n


def _split_top(text: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` characters outside brackets and strings."""
    parts, start = [], 0
    while True:
        end = _scan(text, start, lambda i, c, d, _: c == sep and d == 0)
        parts.append(text[start:end].strip())
        if end >= len(text):
            return parts
        start = end + 1


def _top_index(text: str, char: str, last: bool = False) -> int:
    """Index of the first (or last) ``char`` outside brackets and strings, or -1."""
    found, start = -1, 0
    while True:
        i = _scan(text, start, lambda i, c, d, _: c == char and d == 0)
        if i >= len(text):
            return found
        if not last:
            return i
        found, start = i, i + 1


@dataclass
class _CheckText:
    """A check op read from the text: operands, attribute items and operand types."""

    kind: str  # 'expect_eq', ... or 'interpreter.probe' / 'interpreter.print'
    operands: list[str]
    attributes: list[str]  # 'key = value' items
    types: list[str]


def _parse_custom(kind: str, body: str) -> _CheckText:
    """A ``check.<kind>`` op in its custom syntax (``body`` follows the op name)."""
    body = body.strip()
    if kind.endswith("_const"):
        # %x, dense<...> : T [{attr-dict}]
        operand, _, rest = body.partition(",")
        brace = _top_index(rest, "{")
        value, extra = (rest[:brace], rest[brace + 1:rest.rindex("}")]) if brace >= 0 else (rest, "")
        value = value.strip()
        colon = _top_index(value, ":")
        if colon < 0:
            raise ConformanceError(f"check.{kind}: expected 'dense<...> : type', got {value[:60]!r}")
        attributes = [f"value = {value}"] + [a for a in _split_top(extra, ",") if a]
        return _CheckText(kind, [operand.strip()], attributes, [value[colon + 1:].strip()])
    # %a, %b [, key = value]* [{attr-dict}] : T [, T]
    colon = _top_index(body, ":", last=True)
    if colon < 0:
        raise ConformanceError(f"check.{kind}: no ': type' in {body[:60]!r}")
    head, types = body[:colon], _split_top(body[colon + 1:], ",")
    extra = ""
    brace = _top_index(head, "{")
    if brace >= 0:
        head, extra = head[:brace], head[brace + 1:head.rindex("}")]
    operands, attributes = [], []
    for item in _split_top(head, ","):
        (operands if item.startswith("%") else attributes).append(item)
    attributes += [a for a in _split_top(extra, ",") if a]
    if len(types) == 1 and len(operands) > 1:
        types = types * len(operands)
    return _CheckText(kind, operands, attributes, types)


def _parse_generic(kind: str, body: str) -> _CheckText:
    """A ``"check.<kind>"(operands) <{props}> {attrs} : (types) -> ()`` op (``body`` follows the name)."""
    body = body.strip()
    if not body.startswith("("):
        raise ConformanceError(f"check.{kind}: expected '(' after the op name, got {body[:40]!r}")
    close = _scan(body, 0, lambda i, c, d, _: c == ")" and d == 1)
    operands = [o for o in _split_top(body[1:close], ",") if o]
    rest = body[close + 1:].strip()
    attributes: list[str] = []
    while rest.startswith(("<{", "{")):  # properties, then the attribute dictionary
        open_at = 1 if rest.startswith("<{") else 0
        end = _scan(rest, open_at, lambda i, c, d, _: c == "}" and d == 1)
        attributes += [a for a in _split_top(rest[open_at + 1:end], ",") if a]
        rest = rest[end + 1 + open_at:].strip()
    if not rest.startswith(":"):
        raise ConformanceError(f"check.{kind}: expected ': (types) -> ()', got {rest[:40]!r}")
    signature = rest[1:].strip()
    arrow = signature.find("->")
    inputs = (signature[:arrow] if arrow >= 0 else signature).strip()
    types = [t for t in _split_top(inputs[1:-1] if inputs.startswith("(") else inputs, ",") if t]
    return _CheckText(kind, operands, attributes, types)


def _emit_check(check: _CheckText, serial: int) -> str:
    """The generic form (attributes, no properties) of a check; ``*_const`` checks become two-operand checks.

    ``check.expect_eq_const %x, dense<...>`` becomes a ``stablehlo.constant``
    followed by ``check.expect_eq %x, %const``, so that the importer reads
    the constant (jaxlib's Python bindings cannot hand out every dense
    attribute, e.g. complex ones) and the runner only meets two-operand checks.
    """
    kind, operands, attributes, types = check.kind, list(check.operands), list(check.attributes), list(check.types)
    if kind.startswith("interpreter."):  # probe returns its operand, print nothing
        attr_text = f" {{{', '.join(attributes)}}}" if attributes else ""
        results = types[0] if kind == "interpreter.probe" else "()"
        return f'"{kind}"({", ".join(operands)}){attr_text} : ({", ".join(types)}) -> {results}'
    prefix = ""
    if kind.endswith("_const"):
        value = next((a for a in attributes if re.match(r"value\s*=", a)), None)
        if value is None or len(operands) != 1 or len(types) != 1:
            raise ConformanceError(f"check.{kind}: expected one operand and a 'value' attribute")
        attributes.remove(value)
        name = f"%__conformance_expected{serial}"
        prefix = f'{name} = "stablehlo.constant"() {{{value}}} : () -> {types[0]} '
        kind = kind[:-len("_const")]
        operands.append(name)
        types.append(types[0])
    attr_text = f" {{{', '.join(attributes)}}}" if attributes else ""
    return f'{prefix}"check.{kind}"({", ".join(operands)}){attr_text} : ({", ".join(types)}) -> ()'


def _without_comments(text: str) -> str:
    """``text`` without its ``//`` comments (outside string literals)."""
    if "//" not in text:
        return text
    out, start = [], 0
    while True:
        j, quoted = start, False
        while j < len(text):
            if text[j] == '"':
                quoted = not quoted
            elif not quoted and text.startswith("//", j):
                break
            j += 2 if quoted and text[j] == "\\" else 1
        out.append(text[start:j])
        if j >= len(text):
            return "".join(out)
        newline = text.find("\n", j)
        if newline < 0:
            return "".join(out)
        start = newline


def normalize_checks(text: str) -> str:
    """Rewrite every ``check.*`` op of ``text`` into the generic form with attributes (not properties).

    Handles the custom syntax (``check.expect_eq_const %x, dense<...> : T``)
    and the generic form with properties (``"check.expect_eq_const"(%x) <{value
    = ...}>``); ``*_const`` checks become a constant and a two-operand check
    (:func:`_emit_check`). ``interpreter.probe`` and ``interpreter.print`` in
    custom syntax become generic too. Line numbers are kept: a rewritten op
    takes one line, padded with as many newlines as the original spanned.
    """
    out, pos, serial = [], 0, 0
    for m in _HARNESS_OP.finditer(text):
        if m.start() < pos:
            continue
        # The op ends at the first newline outside brackets after its ': type'.
        end = _scan(text, m.end(), lambda i, c, d, colon: c == "\n" and d == 0 and colon)
        begin = m.start("quote") if m.group("kind") else m.start("interpreter") - len("interpreter.")
        statement = text[begin:end]
        body = _without_comments(text[m.end():end])
        if m.group("kind"):
            parse = _parse_generic if m.group("quote") else _parse_custom
            new = _emit_check(parse(m.group("kind"), body), serial)
        else:
            parsed = _parse_custom(m.group("interpreter"), body)
            parsed.kind = "interpreter." + parsed.kind
            new = _emit_check(parsed, serial)
        serial += 1
        out.append(text[pos:begin])
        out.append(" ".join(new.split("\n")) + "\n" * statement.count("\n"))
        pos = end
    out.append(text[pos:])
    return "".join(out)


# ----------------------------------------------------------------------------
# MLIR level: check ops become results of the tested function
# ----------------------------------------------------------------------------


@dataclass
class Check:
    """One check op taken out of a program: its kind and where its operands are among the results."""

    form: str  # 'op' | 'custom_call'
    kind: str  # 'expect_eq', 'expect_close', ...
    attributes: dict
    first: int  # index of its first operand among the tested function's results
    count: int
    where: str  # 'check.expect_eq at line 12'
    probed: bool = False  # expect_serialized_eq of a probe in a region: the actual value is in _PROBED

    @property
    def spec(self) -> CheckSpec:
        """The :class:`CheckSpec` of this check."""
        return CHECKS[(self.form, self.kind)]


def _ir():
    from jaxlib.mlir import ir

    return ir


def _attribute_value(attr):
    """A Python value for a scalar attribute (int, float, bool, string); else the attribute's text."""
    ir = _ir()
    for cls in (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr):
        if isinstance(attr, cls):  # jaxlib hands out attributes downcast to their class
            return attr.value
    return str(attr)


def _line_of(op, offset: int) -> str:
    """`` at line N`` from an op's ``loc("-":N:col)`` location (shifted to the file's numbering), or ''."""
    m = re.search(r":(\d+):\d+", str(op.location))
    return f" at line {int(m.group(1)) + offset}" if m else ""


def _functions(module) -> dict:
    return {op.attributes["sym_name"].value: op for op in module.body.operations
            if op.operation.name == "func.func"}


def _check_kind(op) -> tuple[str, str] | None:
    name = op.name
    if name.startswith("check."):
        return "op", name[len("check."):]
    if name == "stablehlo.custom_call":
        target = _ir().StringAttr(op.attributes["call_target_name"]).value
        if target.startswith("check."):
            return "custom_call", target[len("check."):]
    return None


def _set_results(fop, values: list) -> None:
    """Make ``values`` the results of ``func.func`` op ``fop`` (replacing its terminator)."""
    ir = _ir()
    from jaxlib.mlir.dialects import func

    block = fop.regions[0].blocks[0]
    old = list(block.operations)[-1]
    with ir.InsertionPoint(old.operation):
        func.ReturnOp(values)
    old.operation.erase()
    ftype = ir.FunctionType(ir.TypeAttr(fop.attributes["function_type"]).value)
    inputs = [a.type for a in block.arguments]
    fop.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, [v.type for v in values]))
    if "res_attrs" in fop.attributes:
        old_attrs = list(ir.ArrayAttr(fop.attributes["res_attrs"]))
        keep = old_attrs[:len(ftype.results)]
        keep += [ir.DictAttr.get({})] * (len(values) - len(keep))
        fop.attributes["res_attrs"] = ir.ArrayAttr.get(keep[:len(values)])


def extract_checks(fop, line_offset: int = 0) -> list[Check]:
    """Remove the check ops of ``func.func`` op ``fop``; their operands become extra results.

    The ``tensor<i1>`` result of ``custom_call @check.eq`` is replaced by ``true``
    (the runner evaluates the check itself). Returns the checks in program order.
    """
    ir = _ir()
    from jaxlib.mlir.dialects import stablehlo

    block = fop.regions[0].blocks[0]
    # Only the count: the returned values may change below (check.eq verdicts are replaced).
    returned = len(list(block.operations)[-1].operands)
    extra: list = []
    checks: list[Check] = []
    probes: dict[str, object] = {}  # probe_id -> the probed value
    in_regions = _probes_in_regions(fop, line_offset)
    for view in list(block.operations):
        op = view.operation
        if op.name in ("interpreter.probe", "interpreter.print"):
            # probe: its result is its operand, recorded for check.expect_serialized_eq; print: nothing to run.
            if op.name == "interpreter.probe":
                probe_id = _attribute_value(op.attributes["probe_id"])
                if probe_id in probes:
                    raise ConformanceError(f"interpreter.probe{_line_of(op, line_offset)}: probe '{probe_id}' is "
                                           "written more than once (only first iterations are supported)")
                probes[probe_id] = op.operands[0]
                op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()
            continue
        found = _check_kind(op)
        if found is None:
            continue
        form, kind = found
        where = f"{'custom_call @' if form == 'custom_call' else ''}check.{kind}{_line_of(op, line_offset)}"
        spec = CHECKS.get((form, kind))
        if spec is None:
            raise ConformanceError(f"{where}: this check is not supported by the runner")
        attrs = {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}
        operands = list(op.operands)
        if kind == "expect_serialized_eq":
            # Compares the probed value (the "actual") with its operand.
            probe_id = _attribute_value(attrs["probe_id"]) if "probe_id" in attrs else None
            iteration = _attribute_value(attrs["iter"]) if "iter" in attrs else 0
            if probe_id in in_regions:  # recorded while running: the check reads _PROBED (Check.probed)
                operands = [None] + operands
            elif probe_id not in probes or iteration != 0:
                raise ConformanceError(f"{where}: no value probed as '{probe_id}' before it")
            else:
                operands = [probes[probe_id]] + operands
        if len(operands) != spec.operands:
            raise ConformanceError(f"{where}: expected {spec.operands} operands, got {len(operands)}")
        with ir.InsertionPoint(op), op.location:
            for r in op.results:  # custom_call @check.eq returns its verdict: true here
                true = ir.DenseElementsAttr.get_splat(r.type, ir.BoolAttr.get(True))
                r.replace_all_uses_with(stablehlo.ConstantOp(true).result)
        values = {k: _attribute_value(v) for k, v in attrs.items() if k not in ("value", "call_target_name")}
        probed = operands[0] is None
        if probed:
            operands = operands[1:]
        checks.append(Check(form, kind, values, returned + len(extra), len(operands), where, probed))
        extra.extend(operands)
        op.erase()
    if checks:
        _set_results(fop, list(list(block.operations)[-1].operands) + extra)
    return checks


PROBE_TARGET = "interpreter.probe"
"""Custom-call target an ``interpreter.probe`` inside a region becomes: it records each value it sees."""

_PROBED: dict[str, list[np.ndarray]] = {}
"""probe_id -> the values an in-region probe recorded in the run in progress, in order (one per iteration)."""
_PROBE_LOCK = threading.Lock()


def _record_probe(operands, attributes, result_types):
    """The :data:`PROBE_TARGET` custom call: append the operand to its probe's values, return it."""
    with _PROBE_LOCK:
        _PROBED.setdefault(str(attributes["backend_config"]), []).append(np.array(operands[0]))
    return operands[0]


register_custom_call(PROBE_TARGET, _record_probe)


def _probes_in_regions(fop, line_offset: int) -> set[str]:
    """Make every ``interpreter.probe`` inside a region of ``fop`` (a loop body, a branch) a
    :data:`PROBE_TARGET` custom call with side effects, which records the value of every execution;
    return their probe ids (``check.expect_serialized_eq ... iter = N`` reads the N-th value)."""
    ir = _ir()
    nested: list = []

    def visit(op):
        if op.operation.name == "interpreter.probe" and op.operation.parent is not None \
                and op.operation.parent.operation != fop.operation:
            nested.append(op.operation)
        return ir.WalkResult.ADVANCE

    fop.operation.walk(visit)
    ids = set()
    for op in nested:
        probe_id = _attribute_value(op.attributes["probe_id"])
        if probe_id in ids:
            raise ConformanceError(f"interpreter.probe{_line_of(op, line_offset)}: probe '{probe_id}' is written "
                                   "by more than one op")
        ids.add(probe_id)
        with ir.InsertionPoint(op), op.location:
            call = ir.Operation.create("stablehlo.custom_call", results=[op.results[0].type],
                                       operands=[op.operands[0]],
                                       attributes={"call_target_name": ir.StringAttr.get(PROBE_TARGET),
                                                   "has_side_effect": ir.BoolAttr.get(True),
                                                   "backend_config": ir.StringAttr.get(probe_id)})
        op.results[0].replace_all_uses_with(call.results[0])
        op.erase()
    return ids


def _remaining_checks(module) -> list[str]:
    """Names of check ops left anywhere in ``module`` (in regions or other functions)."""
    left: list[str] = []

    def visit(op):
        found = _check_kind(op.operation)
        if found is not None:
            left.append(f"check.{found[1]}")
        return _ir().WalkResult.ADVANCE

    module.operation.walk(visit)
    return left


@dataclass
class Parallel:
    """An ``interpreter.run_parallel`` op: the device program and its grid."""

    programs: list[list[str]]  # the function each device runs: one row per replica, one column per partition
    num_replicas: int
    num_partitions: int
    operand_counts: list[int]  # arguments of each device's program, device order
    result_counts: list[int]
    infeed: list[str] = field(default_factory=list)  # functions whose results fill the infeed queue, in order


@dataclass
class Prepared:
    """A program ready for the importer: checks extracted, harness ops removed."""

    module: object  # jaxlib ir.Module
    entry: str
    checks: list[Check]
    prologue: object | None = None  # ir.Module computing run_parallel's operands (entry @main)
    parallel: Parallel | None = None


def _entry_function(functions: dict) -> str:
    if "main" in functions:
        return "main"
    with_checks = [name for name, f in functions.items() if any(_check_kind(op.operation) for op in
                                                                  f.regions[0].blocks[0].operations)]
    if len(with_checks) == 1:
        return with_checks[0]
    public = [n for n, f in functions.items() if "sym_visibility" not in f.attributes
              or f.attributes["sym_visibility"].value == "public"]
    if len(public) == 1:
        return public[0]
    raise ConformanceError(f"cannot tell which function to run (no @main; functions: {', '.join(functions)})")


def _run_parallel_op(fop):
    ops = [op.operation for op in fop.regions[0].blocks[0].operations if op.operation.name == "interpreter.run_parallel"]
    if len(ops) > 1:
        raise ConformanceError("more than one interpreter.run_parallel in a function is not supported")
    return ops[0] if ops else None


def _parallel_of(op, functions: dict) -> Parallel:
    ir = _ir()
    grid = [[ir.FlatSymbolRefAttr(p).value for p in ir.ArrayAttr(row)]
            for row in ir.ArrayAttr(op.attributes["programs"])]
    if len({len(row) for row in grid}) != 1 or not grid[0]:
        raise ConformanceError("interpreter.run_parallel: the programs grid must be rectangular and not empty")
    types = []
    for name in (n for row in grid for n in row):  # device order: replica-major
        if name not in functions:
            raise ConformanceError(f"interpreter.run_parallel: no function @{name}")
        types.append(ir.FunctionType(ir.TypeAttr(functions[name].attributes["function_type"]).value))
    if len(op.operands) != sum(len(t.inputs) for t in types) or len(op.results) != sum(len(t.results) for t in types):
        raise ConformanceError("interpreter.run_parallel: operand/result counts do not match the programs")
    infeed = [ir.FlatSymbolRefAttr(f).value for f in ir.ArrayAttr(op.attributes["infeed"])] \
        if "infeed" in op.attributes else []
    for name in infeed:
        if name not in functions:
            raise ConformanceError(f"interpreter.run_parallel: no infeed function @{name}")
    return Parallel(grid, len(grid), len(grid[0]), [len(t.inputs) for t in types], [len(t.results) for t in types],
                    infeed)


def _wrap_entry(module, fop, args_text: str | None, expected: list[str]) -> str:
    """Add ``@__conformance_main``: calls ``fop`` on constant arguments and checks its results.

    ``args_text`` is the ``--args`` list of a RUN line (``[dense<1> :
    tensor<2xi32>, ...]``); ``expected`` holds one dense literal per result
    (what the interpreter prints, read from the file's CHECK lines), checked
    with ``check.expect_eq``.
    """
    ir = _ir()
    from jaxlib.mlir.dialects import func, stablehlo

    name = fop.attributes["sym_name"].value
    ftype = ir.FunctionType(ir.TypeAttr(fop.attributes["function_type"]).value)
    args = list(ir.ArrayAttr(ir.Attribute.parse(args_text))) if args_text is not None else []
    if len(args) != len(ftype.inputs):
        raise ConformanceError(f"@{name} takes {len(ftype.inputs)} arguments; the RUN line gives {len(args)}")
    if expected and len(expected) != len(ftype.results):
        raise ConformanceError(f"@{name} has {len(ftype.results)} results; the CHECK lines show {len(expected)}")
    with ir.InsertionPoint(module.body):
        wrapper = func.FuncOp("__conformance_main", ([], list(ftype.results)))
        block = wrapper.add_entry_block()
    with ir.InsertionPoint(block):
        values = [stablehlo.ConstantOp(a).result for a in args]
        results = list(func.CallOp(list(ftype.results), ir.FlatSymbolRefAttr.get(name), values).results)
        for r, text in zip(results, expected):
            # (Parsed as an op: jaxlib's Python bindings cannot hand out a complex dense attribute.)
            constant = ir.Operation.parse(f'"stablehlo.constant"() {{value = {text}}} : () -> '
                                          f'{text.rsplit(" : ", 1)[1]}')
            ir.InsertionPoint(block).insert(constant)
            value = constant.result
            ir.Operation.create("check.expect_eq", results=[], operands=[r, value])
        func.ReturnOp(results)
    return "__conformance_main"


def prepare_module(text: str, line_offset: int = 0, args_text: str | None = None,
                   expected: list[str] | None = None, entry: str | None = None) -> Prepared:
    """Parse a (normalized) program with jaxlib and take its check and harness ops out.

    ``args_text`` (the ``--args`` list of a RUN line) and ``expected`` (dense
    literals of the printed results) make a wrapper the entry point (see
    :func:`_wrap_entry`). ``line_offset`` is added to line numbers in messages.
    """
    ir = _ir()
    from .stablehlo import parse_stablehlo
    from .stablehlo.context import mlir_context

    module = parse_stablehlo(text)
    ctx = mlir_context()
    with ctx, ir.Location.unknown():
        functions = _functions(module)
        if entry is not None:
            if entry not in functions:
                raise ConformanceError(f"no function @{entry} in the program")
            # One program per checked function: the other checked functions are other programs.
            for name in [n for n in functions if n != entry]:
                if any(_check_kind(op.operation) for op in functions[name].regions[0].blocks[0].operations):
                    functions.pop(name).operation.erase()
        entry = entry or _entry_function(functions)
        fop = functions[entry]
        if entry != "main" and "main" not in functions:
            # The importer expands chlo ops through XLA, which wants an entry named main.
            fop.attributes["sym_name"] = ir.StringAttr.get("main")
            functions["main"] = functions.pop(entry)
            entry = "main"
        if args_text is not None or expected:
            entry = _wrap_entry(module, fop, args_text, expected or [])
            fop = _functions(module)[entry]
        parallel_op = _run_parallel_op(fop)
        if parallel_op is None:
            checks = extract_checks(fop, line_offset)
            left = _remaining_checks(module)
            if left:
                raise ConformanceError(f"{len(left)} check ops outside the body of @{entry} ({left[0]}) are not "
                                       "supported")
            return Prepared(module, entry, checks)
        parallel = _parallel_of(parallel_op, functions)
        # Epilogue: @entry takes run_parallel's results as arguments and checks them.
        block = fop.regions[0].blocks[0]
        for r in list(parallel_op.results):
            r.replace_all_uses_with(block.add_argument(r.type, parallel_op.location))
        parallel_op.erase()
        checks = extract_checks(fop, line_offset)
        if not checks:
            _set_results(fop, list(list(block.operations)[-1].operands))  # the new arguments in its type
        # Prologue: a second copy of the program whose @entry stops at run_parallel and returns its operands.
        prologue = parse_stablehlo(text)
        pfop = _functions(prologue)[entry]
        pblock = pfop.regions[0].blocks[0]
        pop = _run_parallel_op(pfop)
        operands = list(pop.operands)
        ops = list(pblock.operations)
        index = next(i for i, o in enumerate(ops) if o.operation == pop)
        if any(_check_kind(o.operation) for o in ops[:index]):
            raise ConformanceError("check ops before interpreter.run_parallel are not supported")
        from jaxlib.mlir.dialects import func

        with ir.InsertionPoint(pop):
            func.ReturnOp(operands)
        for o in reversed(ops[index:]):
            o.operation.erase()
        pfop.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([], [v.type for v in operands]))
        if "res_attrs" in pfop.attributes:
            del pfop.attributes["res_attrs"]
        return Prepared(module, entry, checks, prologue=prologue, parallel=parallel)


# ----------------------------------------------------------------------------
# Discovery
# ----------------------------------------------------------------------------


@dataclass
class Program:
    """One program of the corpus: a whole file or one ``// -----`` chunk of it."""

    path: str
    name: str
    mode: str  # 'run' (execute and check), 'roundtrip', 'disabled', 'skip'
    text: str = ""
    line: int = 0  # first line of the chunk in its file (0-based), for messages
    args: str | None = None  # --args list of the RUN line
    expected: list[str] | None = None  # printed results (FileCheck lines) as dense literals
    message: str = ""  # why it is disabled / skipped
    family: str = ""
    entry: str | None = None  # the function to run (a chunk with several checked functions and no @main)


@dataclass
class Result:
    """The outcome of one program."""

    path: str
    name: str
    status: str  # one of STATUSES
    message: str = ""
    seconds: float = 0.0
    family: str = ""


_RUN_LINE = re.compile(r"(?m)^//\s*(RUN(?:-DISABLED(?:\((?P<why>[^)]*)\))?)?)\s*:?\s*(?P<cmd>.*)$")
_ARGS = re.compile(r'--args="(?P<args>[^"]*)"')
_DTYPES = r"(?:bfloat16|float(?:16|32|64)|complex(?:64|128)|u?int(?:2|4|8|16|32|64)|bool|float8_\w+?|float4_\w+?)"
# Where a JAX harness file name stops naming the op: the first dtype, a test parameter (shape, lhs,
# dtypes, a number, "__"), or the folder's suffix (_dynamic, _qi8, _chlo).
_FAMILY_END = re.compile(rf"_{_DTYPES}(?=_|$)|_in{_DTYPES}|__|_-?\d|_(?:shape|lhs|dtypes|dynamic|qi8|chlo)(?=_|$)")
_LABEL = re.compile(r"(?:module\s+@(?P<module>[\w$.-]+)|func\.func\s+(?:public\s+|private\s+)?@(?P<func>[\w$.\"-]+))")


def family_of(path: str) -> str:
    """The op family of a corpus file: its name up to the first dtype (``abs_float32_20_20`` -> ``abs``).

    Names without a dtype stop at their first parameter (``gather_shape__10_...`` -> ``gather``).
    """
    stem = os.path.splitext(os.path.basename(path))[0]
    m = _FAMILY_END.search(stem)
    return (stem[:m.start()] if m else stem) or stem


def _expected_prints(text: str) -> list[str] | None:
    """The results the interpreter is expected to print (plain ``CHECK``/``CHECK-NEXT`` lines, ``{LITERAL}`` or
    not) as dense literals, None when the lines show anything else (``interpreter.print`` output included).

    ``// CHECK: tensor<2xi32> {`` ``// CHECK-NEXT: [3, 3]`` ``// CHECK-NEXT: }``
    becomes ``dense<[3, 3]> : tensor<2xi32>``; ``tensor<ui8> {1}`` ``dense<1> : tensor<ui8>``; a complex
    element printed ``[re, im]`` becomes ``(re, im)``; an empty tensor ``dense<> : tensor<0x2xi8>``.
    """
    lines = [m.group(1).strip()
             for m in re.finditer(r"(?m)^[ \t]*//\s*CHECK(?:-NEXT)?(?:\{LITERAL\})?:(.*)$", text)]
    if not lines:
        return None
    results, current, body = [], None, []
    for line in lines:
        one_line = re.fullmatch(r"(tensor<[^{]*>)\s*\{(.*)\}", line)
        head = re.fullmatch(r"(tensor<[^{]*>)\s*\{", line)
        if one_line and current is None:
            results.append(_dense_literal(one_line.group(1), one_line.group(2).strip()))
        elif head and current is None:
            current, body = head.group(1), []
        elif line == "}" and current is not None:
            results.append(_dense_literal(current, " ".join(body)))
            current = None
        elif current is not None:
            body.append(line)
        else:
            return None  # not a printed tensor: not understood
    return None if current is not None else results


def _dense_literal(type_text: str, values: str) -> str:
    """``dense<values> : type`` for a tensor the interpreter printed (see :func:`_expected_prints`)."""
    if re.fullmatch(r"[\[\],\s]*", values) and re.search(r"\b0x|<0x|x0x|x0>", type_text):
        values = ""  # an empty tensor: MLIR writes dense<>
    elif "complex<" in type_text:
        number = r"[-+]?(?:[\d.]+(?:e[-+]?\d+)?|inf|nan)"
        values = re.sub(rf"\[\s*({number})\s*,\s*({number})\s*\]", r"(\1, \2)", values)
    return f"dense<{values}> : {type_text}"


def _programs_of_file(path: str, shown: str) -> list[Program]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stem = os.path.splitext(os.path.basename(path))[0]
    family = family_of(path)
    runs = [(m.group(1) != "RUN", m.group("why") or "", m.group("cmd").strip()) for m in _RUN_LINE.finditer(text)]
    interpret = [r for r in runs if "--interpret" in r[2]]
    positive = [r for r in interpret if not r[0] and not r[2].startswith("not ")]
    if not positive:
        disabled = [r for r in interpret if r[0]]
        if disabled:
            why = disabled[0][1] or "disabled"
            return [Program(shown, stem, "disabled", message=f"RUN-DISABLED upstream ({why})", family=family)]
        if interpret:
            return [Program(shown, stem, "skip", message="error-message test (not stablehlo-translate | FileCheck)",
                            family=family)]
        if any("--serialize" in r[2] for r in runs if not r[0]):
            return [Program(shown, stem, "roundtrip", text, family=family)]
        return [Program(shown, stem, "skip", message="no interpreter or serialization RUN line", family=family)]
    command = positive[0][2]
    args = _ARGS.search(command)
    split = any("split-input-file" in r[2] for r in runs if not r[0])
    file_check = "FileCheck" in command
    if file_check and not split and _expected_prints(text) is None:
        return [Program(shown, stem, "skip", message="FileCheck test of printed output", family=family)]
    chunks = split_programs(text) if split else [(0, text)]
    programs = []
    for i, (line, chunk) in enumerate(chunks):
        if "func.func" not in chunk:
            continue
        if split:
            label = _LABEL.search(chunk)
            name = f"{stem}[{i}] {label.group('module') or label.group('func')}" if label else f"{stem}[{i}]"
        else:
            name = stem
        expected = _expected_prints(chunk) if file_check else None
        if file_check and expected is None:  # (e.g. the output of interpreter.print ops: not captured)
            programs.append(Program(shown, name, "skip", message="FileCheck test of printed output other than "
                                    "the results", family=family))
            continue
        entries = _checked_functions(chunk) if "@main" not in chunk and args is None and not expected else []
        if len(entries) > 1:
            # No @main and several functions with checks: the interpreter runs each; so do we, one program each.
            for entry in entries:
                programs.append(Program(shown, f"{name} @{entry}", "run", chunk, line, None, None, family=family,
                                        entry=entry))
            continue
        programs.append(Program(shown, name, "run", chunk, line, args.group("args") if args else None, expected,
                                family=family))
    return programs


_FUNC_HEAD = re.compile(r"func\.func\s+(?:public\s+)?@([\w.$-]+)\s*\(\s*\)")


def _checked_functions(chunk: str) -> list[str]:
    """The argument-less functions of a chunk whose bodies hold check ops, in text order."""
    heads = list(_FUNC_HEAD.finditer(chunk))
    out = []
    for k, m in enumerate(heads):
        body = chunk[m.end(): heads[k + 1].start() if k + 1 < len(heads) else len(chunk)]
        if "check." in body:
            out.append(m.group(1))
    return out


def discover(paths: Iterable[str]) -> list[Program]:
    """Every program in the ``.mlir`` files at or under ``paths`` (sorted by path, then file order)."""
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".mlir"))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise ConformanceError(f"no such file or directory: {p}")
    programs: list[Program] = []
    for f in sorted(dict.fromkeys(files)):
        programs.extend(_programs_of_file(f, os.path.relpath(f) if not os.path.isabs(f) else f))
    return programs


# ----------------------------------------------------------------------------
# Running one program
# ----------------------------------------------------------------------------


class _Stage(Exception):
    """An error tagged with the pipeline stage it happened in (parse, import, compile, run, roundtrip)."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"{stage}: {_describe(error)}")
        self.stage = stage


def _describe(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    if not isinstance(error, XlaError):
        text = f"{type(error).__name__}: {text}"
    return text


class _at:
    """``with _at('import'):`` tags any exception raised inside with the stage."""

    def __init__(self, stage: str):
        self.stage = stage

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is not None and not isinstance(error, _Stage) and isinstance(error, Exception):
            raise _Stage(self.stage, error) from error
        return False


def _expand_quantized(text: str) -> tuple[str, dict | None]:
    """Quantized programs: the importer's rewrite of ``!quant.uniform`` types, which jaxlib cannot parse.

    :func:`interop.import_stablehlo` does this itself for text; the runner
    parses the text first (to take the checks out), so it applies the same
    rewrite and hands its per-line table to the importer.
    """
    if "!quant." not in text:
        return text, None
    from .stablehlo.quant import expand_quantized_text

    return expand_quantized_text(text)


def _import(module, quant_lines: dict | None):
    from .stablehlo import import_mlir_module

    if quant_lines is None:
        return import_mlir_module(module)
    return import_mlir_module(module, quant_lines=quant_lines)


def _run_checked(program: Program) -> tuple[str, str]:
    import lowering

    with _at("parse"):
        text, quant_lines = _expand_quantized(normalize_checks(program.text))
        prepared = prepare_module(text, program.line, program.args, program.expected, program.entry)
    with _at("import"):
        module = _import(prepared.module, quant_lines)
        prologue = _import(prepared.prologue, quant_lines) if prepared.prologue is not None else None
    with _at("compile"):
        # IEEE denormals: the corpus's expectations come from the StableHLO reference interpreter, which
        # does not flush them as XLA CPU does (e.g. ceil(smallest denormal) = 1; lowering/denormals.py).
        exe = lowering.compile(module, entry=prepared.entry, denormals="keep")
        if prepared.parallel is not None:
            par = prepared.parallel
            device = lowering.compile(module, entry=par.programs, denormals="keep")
            first = lowering.compile(prologue, entry=prepared.entry, denormals="keep")
    with _at("run"):
        _PROBED.clear()
        if prepared.parallel is None:
            outputs = exe()
        else:
            # infeed=[@f, ...]: each infeed op takes the results of the next function of the list.
            for name in par.infeed:
                values = lowering.compile(module, entry=name, denormals="keep")()
                device.infeed.put(values[0] if len(values) == 1 else tuple(values))
            operands, per_device = list(first()), []
            for count in par.operand_counts:
                per_device.append(operands[:count])
                operands = operands[count:]
            # One device compiles to a plain Executable (called with the arguments themselves).
            grid = device(*per_device) if len(per_device) > 1 else [device(*per_device[0])]
            results = [r for device_results in grid for r in device_results]
            outputs = exe(*results)
    status, message = _apply_checks(prepared, outputs)
    from .stablehlo.parse import PARSED_NEWER_OPS

    if PARSED_NEWER_OPS in prepared.module.operation.attributes:
        message += NEWER_OPS_NOTE
    return status, message


NEWER_OPS_NOTE = " (ops newer than jaxlib's parser, read through the fallback)"
"""Appended to the message of a program jaxlib's parser rejects and the importer's fallback reads."""


def _apply_checks(prepared: Prepared, outputs, how: str = "") -> tuple[str, str]:
    """Evaluate the program's checks on the outputs: ("passed" | "failed", message)."""
    failures = []
    for check in prepared.checks:
        values = list(outputs[check.first:check.first + check.count])
        if check.probed:
            probe_id, iteration = check.attributes.get("probe_id"), check.attributes.get("iter", 0)
            seen = _PROBED.get(probe_id, [])
            if iteration >= len(seen):
                failures.append(f"{check.where}: probe '{probe_id}' recorded {len(seen)} values, no iteration "
                                f"{iteration}")
                continue
            values = [seen[iteration]] + values
        with _at("check"):
            message = check.spec.evaluate(values[0], values[1], check.attributes)
        if message:
            failures.append(f"{check.where}: {message}")
    if failures:
        more = f" (and {len(failures) - 2} more failing checks)" if len(failures) > 2 else ""
        return "failed", "; ".join(failures[:2]) + more
    if not prepared.checks:
        return "passed", "ran (no checks)"
    return "passed", f"{len(prepared.checks)} checks{how}"


def hlo_text_of(module, entry: str = "main") -> str:
    """XLA HLO text of a parsed StableHLO module, as XLA's own translation prints it (jaxlib).

    XLA translates the function named ``main``: another ``entry`` (the harness's wrapper) is
    renamed to ``main`` first, and the old ``main`` with its calls to ``main_``.
    """
    from jax._src.lib import xla_client

    if entry != "main":
        ir = _ir()
        with module.context:
            functions = _functions(module)
            if "main" in functions:
                functions["main"].attributes["sym_name"] = ir.StringAttr.get("main_")

                def rename(op):
                    if op.name == "func.call" and str(op.attributes["callee"]) == "@main":
                        op.attributes["callee"] = ir.FlatSymbolRefAttr.get("main_")
                    return ir.WalkResult.ADVANCE

                module.operation.walk(rename)
            functions[entry].attributes["sym_name"] = ir.StringAttr.get("main")
    computation = xla_client._xla.mlir.mlir_module_to_xla_computation(
        str(module), use_tuple_args=False, return_tuple=True)
    return computation.as_hlo_text(print_large_constants=True)


def _run_through_hlo(program: Program) -> tuple[str, str]:
    """The program as XLA HLO text: jaxlib translates it, :func:`interop.import_hlo` reads it, the text
    :func:`interop.export_hlo` prints must read back and print the same again, then the executor runs
    the imported module and the checks apply."""
    import lowering

    from .hlo import export_hlo, import_hlo

    if program.mode == "roundtrip":
        return "skipped", "a StableHLO serialization test (no program to run through HLO text)"
    with _at("parse"):
        text = normalize_checks(program.text)
        if "!quant." in text:
            return "skipped", "quantized types: XLA HLO text has none"
        prepared = prepare_module(text, program.line, program.args, program.expected, program.entry)
    if prepared.parallel is not None:
        return "skipped", "interpreter.run_parallel: the harness runs StableHLO functions, not HLO text"
    with _at("to-hlo"):
        hlo = hlo_text_of(prepared.module, prepared.entry)
    with _at("hlo-import"):
        module = import_hlo(hlo)
    with _at("hlo-roundtrip"):
        # The text printed back reads back to a module that prints the same text (ops that XLA has
        # and the dialect expands, such as topk, print as their expansion: the text is the invariant).
        printed = export_hlo(module)
        again = export_hlo(import_hlo(printed))
        if again != printed:
            return "failed", f"HLO text round trip: the text printed again differs; {_first_difference(printed, again)}"
    with _at("compile"):
        exe = lowering.compile(module, denormals="keep")
    with _at("run"):
        outputs = exe()
    return _apply_checks(prepared, outputs, " through HLO text")


def run_program_through_hlo(program: Program) -> Result:
    """:func:`run_program` with every program taken through XLA HLO text (``--via hlo``)."""
    saved = _RUNNERS["run"], _RUNNERS["roundtrip"]
    _RUNNERS["run"] = _RUNNERS["roundtrip"] = _run_through_hlo
    try:
        return run_program(program)
    finally:
        _RUNNERS["run"], _RUNNERS["roundtrip"] = saved


def _first_difference(a: str, b: str) -> str:
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {i + 1}: {x.strip()[:100]!r} became {y.strip()[:100]!r}"
    return "different number of lines"


def _run_roundtrip(program: Program) -> tuple[str, str]:
    from .stablehlo import export_stablehlo, import_stablehlo, parse_stablehlo

    with _at("import"):
        module = import_stablehlo(program.text, allow_unknown=True)
    with _at("export"):
        text = export_stablehlo(module)
    with _at("reparse"):
        parsed = parse_stablehlo(text)
    with _at("reimport"):
        again = import_stablehlo(parsed, allow_unknown=True)
    if not again.is_structurally_equivalent(module):
        return "failed", f"roundtrip: re-imported module differs; {_first_difference(str(module), str(again))}"
    return "passed", "round trip equal"


_RUNNERS: dict[str, Callable[[Program], tuple[str, str]]] = {"run": _run_checked, "roundtrip": _run_roundtrip}


def _out_of_memory(error: BaseException) -> bool:
    """True when a MemoryError is anywhere in ``error``'s chain (``raise ... from None`` keeps it as context)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, MemoryError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def run_program(program: Program) -> Result:
    """Run one program in this process; every error is caught and reported in the :class:`Result`."""
    start = time.perf_counter()
    if program.mode in ("disabled", "skip"):
        status, message = ("disabled" if program.mode == "disabled" else "skipped"), program.message
    else:
        try:
            status, message = _RUNNERS[program.mode](program)
        except _Stage as e:
            status, message = "error", str(e)
            if _out_of_memory(e):
                status, message = "error", f"{e.stage}: out of memory ({message})"
        except MemoryError:
            status, message = "error", "out of memory (MemoryError)"
        except Exception as e:  # noqa: BLE001 - a runner bug must not stop the corpus
            status, message = "error", f"runner: {_describe(e)}"
    return Result(program.path, program.name, status, " ".join(message.split())[:2000],
                  round(time.perf_counter() - start, 4), program.family)


# ----------------------------------------------------------------------------
# Worker processes
# ----------------------------------------------------------------------------


def _limit_memory(megabytes: int | None) -> None:
    """Cap this process's address space (``RLIMIT_AS``) so a runaway program gets a MemoryError."""
    if not megabytes:
        return
    import resource

    limit = int(megabytes) << 20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _worker_main(conn, memory_mb: int | None, runner: Callable[[Program], Result] | None = None,
                 lifeline=None) -> None:
    """A worker process: run the programs it is sent until told to stop (``None``) or the pipe closes.

    Ctrl-C reaches the whole process group: the worker ignores it, and the parent stops its workers. A parent
    killed without stopping them (SIGKILL, a closed terminal) ends them too, even inside a hanging program
    (:mod:`interop.processes`): Linux kills the worker when the forkserver (or, with ``spawn``, the parent)
    exits, which the forkserver does once the parent is gone and the worker has closed its copy of the
    server's "alive" pipe; and ``lifeline`` (the parent keeps its other end) reaching end of file ends it."""
    import signal

    from .processes import die_with_parent, exit_when_closed, release_forkserver

    die_with_parent()
    release_forkserver()
    if lifeline is not None:
        exit_when_closed(lifeline)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory(memory_mb)
    run = runner or run_program
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        index, program = task
        conn.send(index)  # taken: the program's timeout starts now, not while the worker was starting up
        conn.send((index, run(program)))


def _context():
    """``forkserver`` (each worker forks from a server that has imported the heavy modules once), else ``spawn``.

    ``fork`` is avoided: the parent may hold threads (JAX/XLA thread pools)
    whose locks a forked child would inherit.
    """
    import multiprocessing as mp

    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        # Importing, not initializing: JAX starts no threads until a backend is used.
        # The executor and the parser's helpers too: each fresh worker (one per crash or timeout) would
        # otherwise import them with its first program, charged to that program's timeout.
        ctx.set_forkserver_preload(["interop.conformance", "jax", "xdsl", "xla_dialect", "lowering",
                                    "lowering.kernels", "lowering.executor", "passes.pipelines",
                                    "interop.stablehlo"])
        return ctx
    return mp.get_context("spawn")


_STARTUP_SECONDS = 300.0
"""How long a worker may take to acknowledge a program (a fresh worker imports JAX first, slowly on a busy
machine); the program's own timeout starts with the acknowledgement."""


class _Worker:
    """One worker process and the task it is running."""

    def __init__(self, ctx, memory_mb: int | None, runner, lifeline=None):
        import multiprocessing as mp

        self.conn, child = mp.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, memory_mb, runner, lifeline), daemon=True)
        self.process.start()
        child.close()
        self.task: int | None = None
        self.deadline = 0.0
        self.started = 0.0
        self.acknowledged = False
        self.timeout: float | None = None

    def send(self, index: int, program: Program, timeout: float | None) -> None:
        self.task = index
        self.started = time.monotonic()
        self.acknowledged = False
        self.timeout = timeout
        self.deadline = self.started + _STARTUP_SECONDS
        self.conn.send((index, program))

    def receive(self):
        """The task's result if the worker sent it, else ``None``; an acknowledgement starts the timeout.
        ``EOFError`` / ``OSError`` when the worker died."""
        while self.conn.poll():
            message = self.conn.recv()
            if isinstance(message, int):
                self.acknowledged = True
                self.started = time.monotonic()
                self.deadline = self.started + self.timeout if self.timeout else float("inf")
                continue
            return message[1]
        return None

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                self.process.kill()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _death_message(process) -> str:
    import signal

    code = process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker crashed ({name})"
    return f"worker exited with code {code}"


def run_programs(programs: Sequence[Program], jobs: int = 1, timeout: float | None = 120.0,
                 memory_mb: int | None = 4096, progress: Callable[[Result], None] | None = None,
                 runner: Callable[[Program], Result] | None = None) -> list[Result]:
    """Run ``programs`` in ``jobs`` worker processes; results in the order of ``programs``.

    Each program gets ``timeout`` seconds and ``memory_mb`` MiB of address
    space; a worker that crashes, hangs or runs out of memory is replaced and
    its program reported as an ``error``. ``jobs=0`` runs everything in this
    process (no isolation; for debugging). ``runner`` replaces
    :func:`run_program` (it must be a picklable module-level function).
    ``progress`` is called with each result as it arrives.

    Ctrl-C (``KeyboardInterrupt``) stops the workers and raises :class:`Interrupted` holding the results
    of the programs that finished.
    """
    results: list[Result | None] = [None] * len(programs)
    try:
        return _run_programs(programs, results, jobs, timeout, memory_mb, progress, runner)
    except KeyboardInterrupt:
        raise Interrupted([r for r in results if r is not None]) from None


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_programs`; ``results`` are those of the programs that finished, in order."""

    def __init__(self, results: list[Result]):
        super().__init__(f"interrupted after {len(results)} programs")
        self.results = results


def _run_programs(programs, results, jobs, timeout, memory_mb, progress, runner) -> list[Result]:
    """The body of :func:`run_programs`, filling ``results`` as programs finish."""
    run = runner or run_program
    pending: list[int] = []
    for i, p in enumerate(programs):
        if p.mode in ("run", "roundtrip"):
            pending.append(i)
        else:
            results[i] = run_program(p)
            if progress:
                progress(results[i])
    if jobs <= 0:
        for i in pending:
            results[i] = run(programs[i])
            if progress:
                progress(results[i])
        return results  # type: ignore[return-value]
    from multiprocessing.connection import wait

    ctx = _context()
    pending.reverse()  # pop() from the end: program order
    workers: list[_Worker] = []
    lifeline, held = ctx.Pipe(duplex=False)  # the workers' end reaches end of file when this process is gone
    try:
        while pending or any(w.task is not None for w in workers):
            while len(workers) < min(jobs, len(pending) + sum(w.task is not None for w in workers)):
                workers.append(_Worker(ctx, memory_mb, runner, lifeline))
            for w in workers:
                if w.task is None and pending:
                    i = pending.pop()
                    w.send(i, programs[i], timeout)
            busy = [w for w in workers if w.task is not None]
            now = time.monotonic()
            wait_for = max(0.0, min(w.deadline for w in busy) - now) if busy else 0.0
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy],
                             timeout=min(wait_for, 1.0)))
            now = time.monotonic()
            for w in busy:
                outcome: Result | None = None
                replace = False
                program = programs[w.task]
                died = False
                if w.conn in ready:
                    try:
                        outcome = w.receive()
                    except (EOFError, OSError):
                        died = True
                    now = time.monotonic()
                if outcome is None and (died or w.process.sentinel in ready):
                    w.process.join(1)
                    outcome = Result(program.path, program.name, "error", _death_message(w.process),
                                     round(now - w.started, 4), program.family)
                    replace = True
                elif outcome is None and now >= w.deadline:
                    message = (f"timeout after {timeout:g} s" if w.acknowledged
                               else f"the worker did not start within {_STARTUP_SECONDS:g} s")
                    outcome = Result(program.path, program.name, "error", message, round(now - w.started, 4),
                                     program.family)
                    replace = True
                if outcome is None:
                    continue
                results[w.task] = outcome
                w.task = None
                if progress:
                    progress(outcome)
                if replace:
                    w.stop(kill=True)
                    workers.remove(w)
    finally:
        for w in workers:
            w.stop(kill=w.task is not None)
        lifeline.close()
        held.close()
    return results  # type: ignore[return-value]


# ----------------------------------------------------------------------------
# Reporting and the command line
# ----------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr, redrawn in place on a terminal. Elsewhere (a pipe, a file, a CI
    log: ``$CI`` set, or ``TERM=dumb``) one line per tenth of the programs or per ``interval`` seconds,
    whichever comes first, and the last."""

    def __init__(self, total: int, stream=None, width: int = 30, interval: float = 10.0):
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self.width = width
        self.counts: Counter = Counter()
        self.done = 0
        self.start = time.monotonic()
        self.tty = (hasattr(self.stream, "isatty") and self.stream.isatty() and not os.environ.get("CI")
                    and os.environ.get("TERM") != "dumb")
        self.every = max(1, -(-self.total // 10))
        self.interval = interval
        self._printed = (0, self.start)  # (programs done, time) at the last line

    def __call__(self, result: Result) -> None:
        self.done += 1
        self.counts[result.status] += 1
        now = time.monotonic()
        if not self.tty and self.done != self.total and self.done - self._printed[0] < self.every \
                and now - self._printed[1] < self.interval:
            return
        self._printed = (self.done, now)
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        counts = " ".join(f"{s} {self.counts[s]}" for s in STATUSES if self.counts[s])
        line = f"[{bar}] {self.done}/{self.total} {counts} ({time.monotonic() - self.start:.0f} s)"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def summarize(results: Sequence[Result], seconds: float | None = None) -> dict:
    """Counts by status, the pass rate over the non-disabled programs, and the total time."""
    counts = Counter(r.status for r in results)
    enabled = len(results) - counts["disabled"]
    unparsed = sum(1 for r in results if r.status == "error" and is_unparsed(r))
    parsed = enabled - unparsed
    newer = [r for r in results if r.message.endswith(NEWER_OPS_NOTE)]
    newer_passed = sum(1 for r in newer if r.status == "passed")
    by_jaxlib = parsed - len(newer)  # (what jaxlib's own parser reads; the fallback reads ``newer``)
    summary = {"total": len(results), **{s: counts[s] for s in STATUSES}, "enabled": enabled,
               "pass_rate": round(counts["passed"] / enabled, 6) if enabled else 1.0,
               "unparsed": unparsed,
               "pass_rate_parsed": round(counts["passed"] / parsed, 6) if parsed else 1.0,
               "newer_ops": len(newer), "newer_ops_passed": newer_passed,
               "parsed_by_jaxlib": by_jaxlib, "passed_parsed_by_jaxlib": counts["passed"] - newer_passed}
    if seconds is not None:
        summary["seconds"] = round(seconds, 2)
    return summary


def is_unparsed(result: Result) -> bool:
    """Whether the program failed because jaxlib's MLIR parser rejects its text (often syntax of a
    StableHLO newer than the one bundled with jaxlib), as opposed to failing in the toolkit."""
    return result.message.startswith("parse:") and "cannot parse the StableHLO text" in result.message


def family_table(results: Sequence[Result]) -> str:
    """A text table of status counts per op family (families with a non-passing program first)."""
    by_family: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        by_family[r.family or "?"][r.status] += 1
    rows = sorted(by_family.items(), key=lambda kv: (kv[1]["passed"] + kv[1]["disabled"] == sum(kv[1].values()),
                                                      kv[0]))
    header = ("family", "programs", *STATUSES)
    lines = [header] + [(name if len(name) <= 40 else name[:39] + "~", str(sum(c.values())),
                         *(str(c[s]) if c[s] else "." for s in STATUSES)) for name, c in rows]
    total = Counter(r.status for r in results)
    lines.append(("TOTAL", str(len(results)), *(str(total[s]) for s in STATUSES)))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    out = []
    for k, row in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if k == 0 or k == len(lines) - 2:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


_OP_NAME = re.compile(r"\b(?:hlo|stablehlo|chlo|mhlo|func)\.[a-z_]+")


def cause_of(result: Result) -> str:
    """A short key grouping programs that fail for the same reason (stage and op, or family and check kind)."""
    message = result.message
    if result.status == "failed":
        kind = re.search(r"(?:custom_call @)?check\.[a-z_]+|roundtrip", message)
        return f"{result.family}: {kind.group(0) if kind else 'check'} mismatch"
    stage = message.split(":", 1)[0] if ":" in message[:20] else "run"
    op = _OP_NAME.search(message)
    if op:
        return f"{stage}: {op.group(0)}"
    return f"{stage}: " + re.sub(r"\b\d+\b", "N", message.split(":", 1)[-1].strip())[:60]


def causes_table(results: Sequence[Result]) -> str:
    """The failed and erroneous programs grouped by :func:`cause_of`, largest group first."""
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.status in ("failed", "error"):
            groups[cause_of(r)].append(r)
    lines = []
    for cause, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"{len(members):5}  {cause}")
        for r in members[:3]:
            lines.append(f"         {r.path} :: {r.name}: {r.message[:160]}")
        if len(members) > 3:
            lines.append(f"         ... and {len(members) - 3} more")
    return "\n".join(lines)


def write_json(path: str, results: Sequence[Result], summary: dict) -> None:
    """Write the JSON report ``{"summary": ..., "results": [...]}``."""
    from .tools.command_io import write_json as write

    write(path, {"summary": summary, "results": [asdict(r) for r in results]})


def _threshold(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    value = data.get("corpus", data).get("passed") if isinstance(data, dict) else data
    if not isinstance(value, int):
        raise ConformanceError(f"{path}: expected {{\"corpus\": {{\"passed\": N}}}} or {{\"passed\": N}}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``xla-conformance PATH... [--jobs N] [--timeout S] [--json REPORT]``; see the module docstring.

    Exit status: 0 when every non-disabled program passed (or, with
    ``--min-passed``/``--threshold``, when at least that many passed), 1
    otherwise, 2 on usage errors (a ``--filter`` matching no program
    included), 130 when interrupted with Ctrl-C (after printing the summary
    of the programs that finished and writing their ``--json`` report).
    """
    parser = argparse.ArgumentParser(
        prog="xla-conformance",
        description="Run StableHLO conformance programs (testdata and interpreter tests) through the importer, the "
                    "NumPy executor and their checks.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".mlir files or folders (searched recursively)")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: CPU count; 0: run in this process, no isolation)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per program (default 120; 0: none)")
    parser.add_argument("--memory", type=int, default=4096, metavar="MB",
                        help="address-space limit per worker in MiB (default 4096; 0: none)")
    parser.add_argument("--json", metavar="REPORT", help="write the JSON report to this file")
    parser.add_argument("--filter", metavar="REGEX", help="only programs whose path or name matches")
    parser.add_argument("--min-passed", type=int, help="succeed when at least this many programs pass")
    parser.add_argument("--threshold", metavar="FILE", help="JSON file with the minimum number passing "
                        "({\"corpus\": {\"passed\": N}})")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no family table")
    parser.add_argument("--via", choices=("stablehlo", "hlo"), default="stablehlo",
                        help="stablehlo (default): import the StableHLO; hlo: translate each program to XLA HLO text "
                             "with jaxlib, import that (interop.import_hlo), check the text round trip, then run")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the command's own process (and its workers): no GPU probing
    try:
        programs = discover(args.paths)
        minimum = args.min_passed
        if args.threshold:
            minimum = _threshold(args.threshold)
    except (XlaError, OSError, ValueError) as e:
        print(f"xla-conformance: error: {e}", file=sys.stderr)
        return 2
    if args.filter:
        try:
            pattern = re.compile(args.filter)
        except re.error as e:
            print(f"xla-conformance: error: --filter {args.filter!r} is not a regular expression: {e}",
                  file=sys.stderr)
            return 2
        found = len(programs)
        programs = [p for p in programs if pattern.search(p.path) or pattern.search(p.name)]
        if not programs:
            print(f"xla-conformance: error: --filter {args.filter!r} matches none of the {found} programs found "
                  f"in {', '.join(args.paths)} (it is searched in each program's path and name)", file=sys.stderr)
            return 2
    start = time.monotonic()
    progress = None if args.quiet else Progress(len(programs))
    runner = run_program_through_hlo if args.via == "hlo" else None
    interrupted = False
    try:
        results = run_programs(programs, args.jobs, args.timeout or None, args.memory or None, progress, runner)
    except Interrupted as e:
        results, interrupted = e.results, True
        print(f"\nxla-conformance: interrupted (Ctrl-C): {len(results)} of {len(programs)} programs finished; "
              "the summary and report below cover those", file=sys.stderr)
    summary = summarize(results, time.monotonic() - start)
    if interrupted:
        summary.update(interrupted=True, programs=len(programs))
    if not args.quiet:
        print(family_table(results))
    failing = [r for r in results if r.status in ("failed", "error")]
    if failing:
        print(f"\n{len(failing)} programs did not pass, by cause:")
        print(causes_table(results))
    print(f"\n{summary['passed']} of {summary['enabled']} enabled programs passed ({100 * summary['pass_rate']:.2f}%); "
          f"{summary['failed']} failed, {summary['error']} errors, {summary['skipped']} skipped, "
          f"{summary['disabled']} disabled; {summary['seconds']:.1f} s")
    if summary.get("newer_ops"):
        print(f"jaxlib's StableHLO parser reads {summary['parsed_by_jaxlib']} of them: "
              f"{summary['passed_parsed_by_jaxlib']} pass; it rejects {summary['newer_ops']} that use ops newer "
              f"than it, read through the importer's fallback (interop.stablehlo.parse.NEWER_OPS): "
              f"{summary['newer_ops_passed']} pass")
    if summary["unparsed"]:
        print(f"jaxlib's StableHLO parser rejects {summary['unparsed']} of them (their syntax may be newer than "
              f"jaxlib's); among the {summary['enabled'] - summary['unparsed']} it parses, "
              f"{100 * summary['pass_rate_parsed']:.2f}% pass")
    if args.json:
        write_json(args.json, results, summary)
    if interrupted:
        return 130  # (the shell's status of a command stopped by SIGINT)
    if minimum is not None:
        if summary["passed"] < minimum:
            print(f"xla-conformance: {summary['passed']} programs passed, fewer than the required {minimum}",
                  file=sys.stderr)
            return 1
        return 0
    return 0 if summary["passed"] == summary["enabled"] else 1


if __name__ == "__main__":
    sys.exit(main())
