"""NumPy kernel: variadic sort.

Two strategies, chosen once at lowering time:

* **Recognised comparators** — a single ``compare LT/GT`` of a parameter pair
  ``(lhs_k, rhs_k)``, or jax's lexicographic chain
  ``lt(k0) | (eq(k0) & (lt(k1) | (eq(k1) & ...)))``, where each key may be a
  raw parameter or jax's float canonicalisation
  ``select(x != x, NaN, select(x == 0, 0, x))``. Each key becomes an
  integer array in the comparator's order (bit-inverted for descending keys)
  and ``np.argsort(kind='stable')`` / ``np.lexsort`` give the permutation,
  applied to every operand with ``np.take_along_axis``.

  Key orders: integers compare natively; ``TOTALORDER`` floats use the IEEE
  total order (-NaN < -Inf < ... < -0.0 < +0.0 < ... < +Inf < +NaN) from
  their bit patterns; canonicalised keys and ``FLOAT`` comparisons treat
  -0.0 and +0.0 as equal and put NaNs after +Inf (jax.lax.sort's order).
  With a ``FLOAT`` comparator NaN is unordered, so XLA leaves its placement
  implementation-defined; we put NaNs last (first for ``GT``).

* **Any other comparator** — a bottom-up merge sort over the whole batch at
  once: runs of width 1, 2, 4, ... are merged pairwise; each left element's
  position is found by a vectorized binary search over its right run, calling
  the compiled comparator on whole arrays of candidate pairs (about
  ``log2(n)**2 / 2`` comparator calls in all, no per-element Python loop);
  right elements fill the remaining slots in order.

Both strategies are stable (ties keep operand order), which XLA permits for
``is_stable = false`` as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import Block, BlockArgument, SSAValue

from xla_dialect.ops import elementwise as ew
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.control_flow import ReturnOp
from xla_dialect.ops.sorting import SortOp
from xla_dialect.types import element_type_of

from .registry import register
from .control_flow import array_applier
from .elementwise import Elem, elem_of, total_order_key

NAN_LAST = np.iinfo(np.int64).max
"""Key of every NaN in the canonical float order: above +Inf (for f64 it is itself a NaN's bits)."""


# ----------------------------------------------------------------------------
# Comparator recognition
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SortKey:
    """One key of a recognised comparator: operand ``operand`` in the order ``order``."""

    operand: int
    descending: bool
    order: str  # 'int' | 'total' (IEEE total order) | 'canonical' (-0 == +0, NaN last)


def _defining(value: SSAValue, cls):
    op = value.owner
    return op if isinstance(op, cls) else None


def _compare_parts(value: SSAValue):
    op = _defining(value, ew.CompareOp)
    if op is None or op.properties.get("broadcast_dimensions") is not None:
        return None
    ctype = op.compare_type.data if op.compare_type is not None else None
    return op.comparison_direction.data, ctype, op.lhs, op.rhs


def _constant_bits(value: SSAValue):
    op = _defining(value, ConstantOp)
    return None if op is None else np.asarray(op.value.array)


def _key_source(value: SSAValue, block: Block):
    """(parameter index, canonicalised?) of a comparator key, or None."""
    if isinstance(value, BlockArgument) and value.block is block:
        return value.index, False
    # jax: select(x != x, +NaN, select(x == 0, +0.0, x))
    outer = _defining(value, ew.SelectOp)
    if outer is None:
        return None
    is_nan, nan, inner_value = outer.pred, outer.on_true, outer.on_false
    inner = _defining(inner_value, ew.SelectOp)
    nan_c, is_nan_c = _constant_bits(nan), _compare_parts(is_nan)
    if inner is None or nan_c is None or is_nan_c is None:
        return None
    x = inner.on_false
    if not (isinstance(x, BlockArgument) and x.block is block):
        return None
    if is_nan_c[0] != "NE" or is_nan_c[2] is not x or is_nan_c[3] is not x:
        return None
    if not (np.isnan(nan_c.astype(np.float64)) and not np.signbit(nan_c.astype(np.float64))):
        return None
    is_zero, zero = _compare_parts(inner.pred), _constant_bits(inner.on_true)
    if is_zero is None or zero is None or is_zero[0] != "EQ" or is_zero[1] not in (None, "FLOAT"):
        return None
    zero_c = _constant_bits(is_zero[3] if is_zero[2] is x else is_zero[2])
    if x not in (is_zero[2], is_zero[3]) or zero_c is None:
        return None
    z = zero.astype(np.float64)
    if z != 0 or np.signbit(z) or zero_c.astype(np.float64) != 0:
        return None
    return x.index, True


def _key_compare(value: SSAValue, block: Block, directions):
    """(key number, direction, compare type, lhs is the lhs parameter?, canonicalised) or None."""
    parts = _compare_parts(value)
    if parts is None or parts[0] not in directions:
        return None
    direction, ctype, lhs, rhs = parts
    a, b = _key_source(lhs, block), _key_source(rhs, block)
    # The two sides must be lhs_k and rhs_k (parameters 2k and 2k+1) of one key k.
    if a is None or b is None or a[1] != b[1] or a[0] // 2 != b[0] // 2 or a[0] == b[0]:
        return None
    return a[0] // 2, direction, ctype, a[0] % 2 == 0, a[1]


def _order_of(kind: str, ctype: str | None, canonical: bool) -> str | None:
    """The key order for an element kind and compare type, or None if not handled here."""
    if kind == "float":
        if ctype == "TOTALORDER":
            return "canonical" if canonical else "total"
        return "canonical" if ctype in (None, "FLOAT") else None
    if canonical:
        return None
    expected = {"sint": "SIGNED", "uint": "UNSIGNED", "pred": "UNSIGNED"}.get(kind)
    return "int" if expected is not None and ctype in (None, expected) else None


def recognise_comparator(op: SortOp) -> list[SortKey] | None:
    """The keys of a comparator of a recognised form (see the module docstring), else None."""
    block = op.comparator.block
    ret = block.last_op
    if not isinstance(ret, ReturnOp) or len(ret.operands) != 1:
        return None
    kinds = [element_type_of(o.type.element_type).kind for o in op.operands]

    def key(parts) -> SortKey | None:
        k, direction, ctype, lhs_first, canonical = parts
        order = _order_of(kinds[k], ctype, canonical)
        if order is None:
            return None
        ascending = (direction == "LT") == lhs_first
        return SortKey(k, not ascending, order)

    def chain(value: SSAValue) -> list[SortKey] | None:
        single = _key_compare(value, block, ("LT", "GT"))
        if single is not None:
            k = key(single)
            return None if k is None else [k]
        or_op = _defining(value, ew.OrOp)
        if or_op is None:
            return None
        for first, second in ((or_op.lhs, or_op.rhs), (or_op.rhs, or_op.lhs)):
            strict = _key_compare(first, block, ("LT", "GT"))
            and_op = _defining(second, ew.AndOp)
            if strict is None or and_op is None:
                continue
            for eq_value, rest in ((and_op.lhs, and_op.rhs), (and_op.rhs, and_op.lhs)):
                eq = _key_compare(eq_value, block, ("EQ",))
                # The tie test must be on the same key, in the same order.
                if eq is None or (eq[0], eq[2], eq[4]) != (strict[0], strict[2], strict[4]):
                    continue
                head, tail = key(strict), chain(rest)
                if head is not None and tail is not None:
                    return [head, *tail]
        return None

    return chain(ret.operands[0])


# ----------------------------------------------------------------------------
# Keys
# ----------------------------------------------------------------------------

def key_array(x: np.ndarray, order: str, elem: Elem, descending: bool) -> np.ndarray:
    """Integer keys whose ascending order is the comparator's order for ``x``."""
    if order == "int":
        key = x if x.dtype.kind in "iu" and x.dtype.itemsize * 8 == elem.bits else x.astype(np.int64)
        if key.dtype == np.bool_:
            key = key.astype(np.uint8)
    else:
        key = total_order_key(x, elem).astype(np.int64)  # room for NAN_LAST above every float key
        if order == "canonical":
            # (XLA compares bf16 keys widened to f32, where the CPU's flush mode reads a denormal as zero: tied with
            # +-0, they keep their order -- long fuzz campaign, session 20; ml_dtypes' own == does not flush. An f16
            # denormal widens to a normal f32 and is kept.)
            zero = (x.astype(np.float32) if elem.widened else x) == 0
            key = np.where(zero, np.int64(0), key)
            key = np.where(np.isnan(x), NAN_LAST, key)
    return ~key if descending else key


def _keyed_sort(keys: list[SortKey], elems: list[Elem], axis: int, n_out: int):
    def sort_kernel(comparator, *xs):
        ks = [key_array(xs[k.operand], k.order, elems[k.operand], k.descending) for k in keys]
        if len(ks) == 1:
            perm = np.argsort(ks[0], axis=axis, kind="stable")
        else:
            perm = np.lexsort(ks[::-1], axis=axis)  # lexsort's last key is the primary one
        out = tuple(np.take_along_axis(x, perm, axis=axis) for x in xs)
        return out[0] if n_out == 1 else out

    return sort_kernel


# ----------------------------------------------------------------------------
# Generic comparator: vectorized bottom-up merge sort
# ----------------------------------------------------------------------------


def merge_sort(less, values: list[np.ndarray]) -> list[np.ndarray]:
    """Stable-sort the rows of the (B, n) arrays ``values`` together.

    ``less(lhs_values, rhs_values)`` returns a bool array: lhs strictly
    before rhs (the comparator applied element-wise to whole arrays).
    """
    batch, n = values[0].shape
    size = 1 << max(0, (n - 1).bit_length())
    if n <= 1 or batch == 0:
        return [v.copy() for v in values]
    # Pad rows to a power of two with copies of element 0, flagged by index >= n;
    # padding is after every real element without asking the comparator.
    index = np.broadcast_to(np.arange(size), (batch, size))
    vals = [np.concatenate([v, np.repeat(v[:, :1], size - n, axis=1)], axis=1) for v in values]
    width = 1
    while width < size:
        rows = batch * (size // (2 * width))  # one row per pair of runs
        parts = [v.reshape(rows, 2, width) for v in (index, *vals)]
        left = [p[:, 0, :] for p in parts]
        right_flat = [np.ascontiguousarray(p[:, 1, :]).reshape(-1) for p in parts[1:]]
        # Padding is at the end of every sorted run: count each right run's real elements.
        right_real = (parts[0][:, 1, :] < n).sum(axis=1, keepdims=True)
        left_pad = left[0] >= n
        base = np.arange(rows, dtype=np.int64)[:, None] * width
        # count[i] = number of right-run elements strictly before left element i,
        # by binary search (the runs are sorted, so the predicate is a prefix).
        count = np.zeros((rows, width), np.int64)
        step = width
        while step:
            probe = np.minimum(count + (step - 1), width - 1)
            inside = count + (step - 1) < width
            cand = [r[base + probe] for r in right_flat]
            before = (probe < right_real) & (left_pad | less(cand, left[1:]))
            count = np.where(inside & before, count + step, count)
            step //= 2
        # A comparator that is not a strict weak order could make the counts
        # non-monotone; keeping them monotone still yields a permutation.
        count = np.maximum.accumulate(count, axis=-1)
        # Right element j goes after the left elements with count <= j.
        hist = np.bincount((count + base // width * (width + 1)).ravel(), minlength=rows * (width + 1))
        placed = np.cumsum(hist.reshape(rows, width + 1), axis=-1)[:, :width]
        ramp = np.arange(width) + base * 2
        dest_left, dest_right = (ramp + count).ravel(), (ramp + placed).ravel()
        merged = []
        for part in parts:
            out = np.empty(rows * 2 * width, part.dtype)
            out[dest_left] = part[:, 0, :].ravel()
            out[dest_right] = part[:, 1, :].ravel()
            merged.append(out.reshape(batch, size))
        index, vals = merged[0], merged[1:]
        width *= 2
    return [v[:, :n] for v in vals]


def _merge_sort_kernel(op, axis: int, n_out: int):
    apply = array_applier(op.comparator, [np.dtype(np.bool_)])

    def sort_kernel(comparator, *xs):
        f = apply(comparator)

        def less(lhs, rhs):
            return f(*(v for pair in zip(lhs, rhs) for v in pair))[0]

        moved = [np.moveaxis(x, axis, -1) for x in xs]
        shape = moved[0].shape
        rows = [m.reshape(int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]) for m in moved]
        out = tuple(np.moveaxis(s.reshape(shape), -1, axis) for s in merge_sort(less, rows))
        return out[0] if n_out == 1 else out

    return sort_kernel


@register(SortOp)
def _sort(op, ctx):
    rank = op.operands[0].type.get_num_dims()
    axis = op.dimension.value.data % rank
    keys = recognise_comparator(op)
    if keys is not None:
        return _keyed_sort(keys, [elem_of(o.type) for o in op.operands], axis, len(op.results))
    return _merge_sort_kernel(op, axis, len(op.results))
