"""First divergence: run a program twice and name the first op whose value leaves the error budget.

The reference run (``against``) is one of:

- ``"f64"``: a shadow of the program in float64 (every f16/bf16/f32 value widened, complex64 to complex128),
  from the same inputs: its values rounded to the program's types are what each op would give without
  rounding error upstream, so the first op out of budget is the one that loses precision (a catastrophic
  cancellation, an overflow, a sum that absorbs its small terms);
- a dict of :func:`lowering.compile` options (``{"xla_rewrites": False}``, ``{"fma_contraction": False}``,
  ``{"denormals": "keep"}``): which of XLA's rewrites or modes changes the result, and where;
- ``"xla"``: XLA CPU's values of the same ops, from XLA running a variant of the program that returns every
  value of the entry function's body (values inside loops are not outputs and are not compared);
- a mapping of :attr:`~interop.debugging.probes.TracedValue.key` to array, an ``.npz`` file or a
  ``--dump-intermediates`` directory: values from elsewhere (a GPU or TPU run dumped by the user).

Both runs are traced (:func:`interop.debugging.trace`); values are matched by op, result and iteration and
compared in the order the program computed them, with the budgets of :mod:`interop.comparison` (a float
agrees within its ULP budget or within a multiple of its array's magnitude; NaN agrees with NaN, +0 with
-0; integers and booleans exactly).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (ComplexType, Float16Type, Float32Type, Float64Type, BFloat16Type, FunctionType,
                                   ModuleOp, TensorType, TupleType)

from xla_dialect.errors import UnsupportedError, XlaError
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.conversion import BitcastConvertOp
from xla_dialect.ops.data_movement import BitcastOp, BroadcastInDimOp
from xla_dialect.ops.effects import CustomCallOp
from xla_dialect.ops.numerics import ReducePrecisionOp
from xla_dialect.xdsl_compat import retype_in_place

from ..comparison import ULP_INFINITE, compare_arrays, is_float_dtype, magnitude_rtol, ulp_budget, ulp_distance
from .probes import (DEFAULT_MAX_ITERATIONS, Trace, TracedValue, op_index, program_and_arguments, tag_ops,
                     trace)

__all__ = ["Divergence", "DivergenceReport", "find_divergence", "widen_to_f64"]

WORST_ROWS = 5
"""Rows of the table of worst elements of a divergence."""


@dataclass
class Divergence:
    """One value out of budget: op ``op`` (mnemonic) at ``location``, its error and worst elements."""

    key: str
    op: str
    location: str | None
    index: int | None
    iteration: int
    result: int
    shape: tuple[int, ...]
    dtype: str
    mismatches: int
    size: int
    max_ulp: int | None
    max_abs: float
    max_rel: float
    budget_ulp: int
    rtol_magnitude: float
    worst: list[tuple] = field(default_factory=list)
    """Up to :data:`WORST_ROWS` rows ``(element index, value, reference, ULPs, abs error)``, worst first."""
    executed_op: str = ""
    operands: list[str] = field(default_factory=list)
    """The keys of the values the op read (those of the same run), for a look upstream."""
    device: int | None = None
    """The device that computed the value, in a multi-device run (None on one device)."""

    @property
    def max_ulp_text(self) -> str:
        """``-`` for exact dtypes, ``inf`` for NaN against a number or a differing infinity."""
        return "-" if self.max_ulp is None else ("inf" if self.max_ulp == ULP_INFINITE else str(self.max_ulp))

    def __str__(self) -> str:
        where = f" at {self.location}" if self.location else ""
        it = f", iteration {self.iteration}" if self.iteration else ""
        res = f", result {self.result}" if self.result else ""
        via = f" (computed as {self.executed_op})" if self.executed_op and self.executed_op != self.op else ""
        budget = "exact" if self.max_ulp is None else (f"{self.budget_ulp} ULP or {self.rtol_magnitude:.2g}*|max|"
                                                       if self.rtol_magnitude else f"{self.budget_ulp} ULP")
        on = f" on device {self.device}" if self.device is not None else ""
        lines = [f"{self.op}{where}{on}{via} [{self.key}{it}{res}]: {self.dtype}{list(self.shape)}, "
                 f"{self.mismatches} of {self.size} elements beyond the budget ({budget}); "
                 f"max ULP {self.max_ulp_text}, max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}"]
        if self.worst:
            lines.append(f"    {'element':>12s} {'value':>16s} {'reference':>16s} {'ULP':>10s} {'abs error':>10s}")
            for where_, ours, theirs, ulps, err in self.worst:
                ulp_text = "inf" if ulps is None or ulps == ULP_INFINITE else str(ulps)
                lines.append(f"    {str(list(where_)):>12s} {ours:>16s} {theirs:>16s} {ulp_text:>10s} {err:>10.3g}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """JSON-ready (``xla-diverge --json``)."""
        from ..comparison import json_number

        return {"key": self.key, "op": self.op, "executed_op": self.executed_op or self.op,
                "location": self.location, "index": self.index, "iteration": self.iteration, "result": self.result,
                "shape": list(self.shape), "dtype": self.dtype, "mismatches": self.mismatches, "size": self.size,
                "max_ulp": None if self.max_ulp is None else (self.max_ulp_text if self.max_ulp == ULP_INFINITE
                                                              else self.max_ulp),
                "max_abs": json_number(self.max_abs), "max_rel": json_number(self.max_rel),
                "budget_ulp": self.budget_ulp, "rtol_magnitude": self.rtol_magnitude, "operands": self.operands,
                "device": self.device,
                "worst": [{"element": list(w[0]), "value": w[1], "reference": w[2],
                           "ulp": "inf" if w[3] is None or w[3] == ULP_INFINITE else w[3],
                           "abs_error": json_number(w[4])} for w in self.worst]}


@dataclass
class DivergenceReport:
    """What :func:`find_divergence` found: :attr:`first` (None when every value is within budget), every
    value out of budget in the order computed (:attr:`divergences`), and what was compared."""

    against: str
    first: Divergence | None
    divergences: list[Divergence]
    compared: int
    """Values compared (those both runs have)."""
    unmatched: int
    """Values of this run the reference has no value for (ops of the executor's pipeline, loop iterations
    past ``max_iterations``, values inside loops against ``"xla"``)."""
    outputs_agree: bool = True
    absent: list[str] = field(default_factory=list)
    """Ops of the reference run that computed no value in this one (``hlo.divide at f.py:3``): rewritten
    away by the executor's pipeline (XLA's rewrites fold ``(x / c) * d`` into one multiply)."""
    probe_effects: int = 0
    """Against ``"xla"``: values out of budget only while XLA returned every value (within budget returned alone,
    where XLA fuses as in the program), left out of :attr:`divergences`."""

    def __bool__(self) -> bool:
        """True when a divergence was found."""
        return self.first is not None

    def __str__(self) -> str:
        head = f"against {self.against}: compared {self.compared} values"
        head += f" ({self.unmatched} without a reference value)" if self.unmatched else ""
        head += (f"; {self.probe_effects} within budget when XLA returns them alone (its fusion changed by the "
                 "probes), left out") if self.probe_effects else ""
        if self.first is None:
            return head + "; every value is within its budget"
        lines = [head + f"; {len(self.divergences)} out of budget, the first:", "  " + str(self.first).replace(
            "\n", "\n  ")]
        if self.first.operands:
            lines.append(f"  its operands: {', '.join(self.first.operands)} (within budget)")
        later = [d for d in self.divergences[1:6]]
        if later:
            lines.append("  then: " + "; ".join(f"{d.op}" + (f" at {d.location}" if d.location else "")
                                                 + f" [{d.key}]" for d in later)
                         + (" ..." if len(self.divergences) > 6 else ""))
        if self.absent:
            lines.append(f"  ops of the reference without a value here (rewritten away): {', '.join(self.absent[:6])}"
                         + (" ..." if len(self.absent) > 6 else ""))
        lines.append("  the outputs agree within their budgets" if self.outputs_agree
                     else "  the outputs differ beyond their budgets")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """JSON-ready (``xla-diverge --json``)."""
        return {"against": self.against, "compared": self.compared, "unmatched": self.unmatched,
                "diverges": self.first is not None, "outputs_agree": self.outputs_agree, "absent": self.absent,
                "probe_effects": self.probe_effects,
                "first": None if self.first is None else self.first.as_dict(),
                "divergences": [d.as_dict() for d in self.divergences]}


# -- the float64 shadow -------------------------------------------------------------------------------------

_NARROW_FLOATS = (Float16Type, Float32Type, BFloat16Type)


def _wide(t):
    """``t`` with f16/bf16/f32 elements as f64 (complex64 as complex128), or ``t`` itself."""
    if isinstance(t, TupleType):
        return TupleType([_wide(x) for x in t.types.data])
    if not isinstance(t, TensorType):
        return t
    e = t.element_type
    if isinstance(e, _NARROW_FLOATS):
        return TensorType(Float64Type(), t.get_shape(), t.encoding)
    if isinstance(e, ComplexType) and isinstance(e.element_type, Float32Type):
        return TensorType(ComplexType(Float64Type()), t.get_shape(), t.encoding)
    return t


_NOT_WIDENED = (BitcastConvertOp, BitcastOp, ReducePrecisionOp)
"""Ops whose meaning is tied to their element type (reinterpreted bits, rounding to a format): they read
and write the original type in the shadow, between converts."""


def _widen_target(op) -> None:
    """A LAPACK custom call's target for float64: its name says the precision (``lapack_spotrf_ffi`` ->
    ``lapack_dpotrf_ffi``, complex64 ``c`` -> complex128 ``z``)."""
    import re

    from xdsl.dialects.builtin import StringAttr

    target = op.properties["call_target_name"].data
    found = re.fullmatch(r"lapack_([sc])(\w+)", target)
    if found:
        wide = {"s": "d", "c": "z"}[found.group(1)]
        op.properties["call_target_name"] = StringAttr(f"lapack_{wide}{found.group(2)}")


def widen_to_f64(module: ModuleOp) -> ModuleOp:
    """A copy of ``module`` computing in float64 where it computes in f16, bf16 or f32 (complex64 in
    complex128): every value, parameter, result and constant widened, converts to narrow floats becoming
    no-ops, LAPACK custom calls calling the float64 routine; bitcasts and reduce_precision keep their types
    between converts. The reference of
    ``find_divergence(against="f64")``. Raises :class:`UnsupportedError` when the widened copy does not
    verify."""
    from xdsl.rewriter import InsertPoint, Rewriter

    from xla_dialect.literal import DenseLiteralAttr
    from xla_dialect.ops.conversion import ConvertOp

    wide = module.clone()
    keep: dict = {}  # value -> its original type, for the ops that keep their types
    # (op, operand number) -> the operand's type (ops are kept; retyping may replace the values)
    narrow_operands = {(id(op), i): v.type for op in wide.walk() if isinstance(op, _NOT_WIDENED)
                       for i, v in enumerate(op.operands)}
    for op in wide.walk():
        if isinstance(op, _NOT_WIDENED):
            for r in op.results:
                keep[r] = r.type
    for op in list(wide.walk()):
        for region in op.regions:
            for block in region.blocks:
                for arg in list(block.args):
                    retype_in_place(arg, _wide(arg.type))
        for r in list(op.results):
            if r not in keep:
                retype_in_place(r, _wide(r.type))
        if isinstance(op, ConstantOp) and isinstance(op.results[0].type, TensorType):
            t = op.results[0].type
            array = op.value.array
            if array.dtype.kind in "fcV" and t != op.value.data.type:
                with np.errstate(all="ignore"):
                    widened = array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)
                op.properties["value"] = DenseLiteralAttr.from_array(widened, t)
        if isinstance(op, CustomCallOp):
            _widen_target(op)
        if isinstance(op, func.FuncOp):
            ft = op.function_type
            op.properties["function_type"] = FunctionType.from_lists([_wide(t) for t in ft.inputs.data],
                                                                     [_wide(t) for t in ft.outputs.data])
    # ops keeping their types: narrow their widened operands and widen their results for the users
    for op in list(wide.walk()):
        if not isinstance(op, _NOT_WIDENED):
            continue
        for i, v in enumerate(op.operands):
            narrow = narrow_operands.get((id(op), i))
            if narrow is not None and narrow != v.type:
                conv = ConvertOp.create(operands=[v], result_types=[narrow])
                Rewriter.insert_op(conv, InsertPoint.before(op))
                op.operands[i] = conv.results[0]
        for r in op.results:
            if _wide(r.type) != r.type:
                conv = ConvertOp.create(operands=[r], result_types=[_wide(r.type)])
                Rewriter.insert_op(conv, InsertPoint.after(op))
                r.replace_uses_with_if(conv.results[0], lambda use: use.operation is not conv)
    try:
        wide.verify()
    except Exception as e:  # noqa: BLE001 - any verifier complaint: the shadow cannot be built
        raise UnsupportedError(f"find_divergence(against='f64'): the float64 copy of the program does not "
                               f"verify ({str(e).strip().splitlines()[0] if str(e).strip() else e})") from None
    return wide


# -- reference runs ---------------------------------------------------------------------------------------


def _widen_args(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):  # one argument list per device
            out.append(_widen_args(a))
            continue
        arr = np.asarray(a) if a is not None else None
        if arr is not None and (is_float_dtype(arr.dtype) or arr.dtype == np.complex64):
            arr = arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)
        out.append(arr)
    return out


XLA_RECHECKS = 12
"""How many values out of budget against ``"xla"`` :func:`find_divergence` checks again, each returned alone."""


def _xla_values(tagged: ModuleOp, args, entry: str, keys: set[str] | None = None) -> dict[str, np.ndarray]:
    """XLA CPU's values of the ops of the entry function's body (not inside regions): XLA runs a copy of the
    program that returns them all (or those of ``keys``) after its own results."""
    from ..stablehlo.xla import run_xla

    if entry != "main":
        raise XlaError("find_divergence(against='xla'): XLA runs @main only")
    only = keys
    variant = tagged.clone()
    main = next(op for op in variant.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main")
    ret = main.body.block.last_op
    extra, keys = [], []
    for op in main.body.block.ops:
        index = op_index(op)
        if op is ret or index is None:
            continue
        for k, r in enumerate(op.results):
            key = f"op{index}.{op.name}" + (f".r{k}" if len(op.results) > 1 else "")
            if isinstance(r.type, TensorType) and (only is None or key in only):
                extra.append(r)
                keys.append(key)
    outputs = list(ret.operands)
    ret.operands = [*outputs, *extra]
    ft = main.function_type
    main.properties["function_type"] = FunctionType.from_lists(list(ft.inputs.data),
                                                               [*ft.outputs.data, *(v.type for v in extra)])
    if main.res_attrs is not None:  # (one dictionary per result)
        from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr

        main.res_attrs = ArrayAttr([*main.res_attrs.data, *(DictionaryAttr({}) for _ in extra)])
    values = run_xla(variant, *args)
    return dict(zip(keys, values[len(outputs):]))


def _mapping_values(against) -> dict[str, np.ndarray]:
    """Values from elsewhere: a mapping, an ``.npz`` file or a ``--dump-intermediates`` directory."""
    if isinstance(against, Mapping):
        return {str(k): np.asarray(v) for k, v in against.items()}
    path = os.fspath(against)
    if os.path.isdir(path):
        values = {}
        for name in sorted(os.listdir(path)):
            if name.endswith(".npz"):
                with np.load(os.path.join(path, name), allow_pickle=False) as data:
                    values.update({k: data[k] for k in data.files})
        if not values:
            raise XlaError(f"find_divergence: {path} holds no .npz file (a --dump-intermediates directory has "
                           "FUNCTION.npz and index.json)")
        return values
    if not os.path.isfile(path):
        raise XlaError(f"find_divergence: against={path!r}: no such file or directory (give 'f64', 'xla', a dict "
                       "of compile options, a mapping of values, an .npz file or a --dump-intermediates directory)")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, AttributeError) as e:
        raise XlaError(f"find_divergence: {path}: not an .npz file ({e})") from None


# -- comparison -----------------------------------------------------------------------------------------------


def _as_ours(ref: np.ndarray, ours: np.ndarray) -> np.ndarray | None:
    """The reference value in the dtype of ours: rounded from f64, or read as ours when saved as raw bits
    (np.savez writes bf16 and f8 arrays as void); None when it cannot be."""
    ref = np.asarray(ref)
    if ref.shape != ours.shape:
        return None
    if ref.dtype == ours.dtype:
        return ref
    if ref.dtype.kind == "V" and ref.dtype.itemsize == ours.dtype.itemsize:
        return ref.view(ours.dtype)
    try:
        with np.errstate(all="ignore"):
            return ref.astype(ours.dtype)
    except (TypeError, ValueError):
        return None


def _compare(v: TracedValue, ref: np.ndarray, max_ulp, rtol) -> Divergence | None:
    ours = np.asarray(v.value)
    theirs = _as_ours(ref, ours)
    if theirs is None:
        return None
    inexact = ours.dtype.kind == "c" or is_float_dtype(ours.dtype)
    budget = ulp_budget(ours.dtype, max_ulp) if inexact else 0
    rtol = magnitude_rtol(ours.dtype, rtol) if inexact else 0.0
    c = compare_arrays(ours, theirs, budget, 0.0, rtol)
    if c.ok:
        return None
    worst = []
    flat_o, flat_t = ours.reshape(-1), theirs.reshape(-1)
    if inexact:
        ulps = ulp_distance(ours, theirs).reshape(-1)
        with np.errstate(all="ignore"):
            wide = np.complex128 if ours.dtype.kind == "c" else np.float64
            errs = np.abs(flat_o.astype(wide) - flat_t.astype(wide))
        order = np.lexsort((-np.nan_to_num(errs, nan=np.inf), -ulps.astype(np.float64)))
        order = order[ulps[order] > 0][:WORST_ROWS]  # (rows that differ at all)
    else:
        ulps = None
        order = np.flatnonzero(flat_o != flat_t)[:WORST_ROWS]
        errs = None
    for i in order:
        where = np.unravel_index(int(i), ours.shape) if ours.ndim else ()
        err = float(errs[i]) if errs is not None else float(abs(int(flat_o[i]) - int(flat_t[i]))
                                                             if ours.dtype.kind in "iub" else 0.0)
        worst.append((tuple(int(x) for x in where), str(flat_o[i]), str(flat_t[i]),
                      None if ulps is None else int(ulps[i]), err))
    return Divergence(v.key, v.op, v.location, v.index, v.iteration, v.result, ours.shape, str(ours.dtype),
                      c.mismatches, c.size, c.max_ulp, c.max_abs, c.max_rel, budget, rtol, worst, v.executed_op)


def _operand_keys(run: Trace, v: TracedValue) -> list[str]:
    """Keys of the values the op of ``v`` read, as recorded in ``run`` (the latest before ``v``)."""
    if v.index is None or run.module is None:
        return []
    op = next((o for o in run.module.walk() if op_index(o) == v.index), None)
    if op is None:
        return []
    wanted = []
    for operand in op.operands:
        owner = operand.owner
        index = op_index(owner) if hasattr(owner, "attributes") else None
        if index is not None:
            wanted.append((index, operand.index))
    keys = []
    position = run.values.index(v)
    for index, result in wanted:
        for u in reversed(run.values[:position]):
            if u.index == index and u.result == result and u.device == v.device:
                keys.append(u.key)
                break
    return keys


def _flat(outputs) -> list:
    """The results, those of every device in turn for a multi-device run."""
    out = []
    for o in outputs:
        out.extend(_flat(o) if isinstance(o, tuple) else [o])
    return out


def _bit_dependent(module: ModuleOp) -> set[int]:
    """Indices of the ops whose shadow values are not comparable with ours: bitcasts and reduce_precision
    (the shadow reads bits rounded from float64) and the integer or boolean values computed from them."""
    out: set[int] = set()
    for op in module.walk():
        index = op_index(op)
        if index is None:
            continue
        if isinstance(op, _NOT_WIDENED):
            out.add(index)
            continue
        exact = all(isinstance(r.type, TensorType) and not isinstance(r.type.element_type, (
            _NARROW_FLOATS, Float64Type, ComplexType)) for r in op.results)
        if exact and any(op_index(v.owner) in out for v in op.operands if hasattr(v.owner, "attributes")):
            out.add(index)
    return out


def find_divergence(program, *args, against="f64", max_ulp: int | Mapping | None = None,
                    rtol_magnitude: float | Mapping | None = None, entry: str = "main",
                    max_iterations: int | None = DEFAULT_MAX_ITERATIONS, device: str | None = None,
                    **compile_options) -> DivergenceReport:
    """Run ``program`` on ``args`` and a reference run (``against``), compare every intermediate value op by
    op in the order computed, and report the first op whose value leaves the budget.

    ``program``: an xDSL module, a program file or a JAX function (imported with ``args``). ``against``:
    ``"f64"`` (a float64 shadow run from the same inputs), a dict of :func:`lowering.compile` options for the
    reference (``{"xla_rewrites": False}``), ``"xla"`` (XLA CPU's values of the entry function's ops), or
    values from elsewhere: a mapping of keys (``op12.hlo.subtract``, as ``trace`` and ``xla-run
    --dump-intermediates`` name them) to arrays, an ``.npz`` file or a dump directory. Budgets: a float
    element agrees within ``max_ulp`` ULPs or ``rtol_magnitude`` times its array's largest magnitude
    (defaults per dtype, as :func:`interop.difftest`: 4 ULP or 64 eps for f32); other dtypes exactly.
    ``compile_options`` go to :func:`lowering.compile` for this run (and the reference, unless ``against``
    is a dict, which is applied on top of them). ``device`` (``"tpu"``, ``"gpu"``) makes this run compute its
    f32 dots and convolutions as that device does (:mod:`interop.debugging.device_numerics`); in an
    ``against`` dict, ``"device"`` does the same for the reference: ``against={"device": "tpu"}``.

    The :class:`DivergenceReport` has ``.first`` (a :class:`Divergence` with ``.op``, ``.location``,
    shapes, errors and the worst elements) and prints readably.
    """
    module, args = program_and_arguments(program, args, "find_divergence")
    tagged, _ = tag_ops(module)
    ours = trace(tagged, *args, max_iterations=max_iterations, entry=entry, device=device, **compile_options)
    theirs = None
    if isinstance(against, str) and against == "f64":
        description = "a float64 shadow run"
        theirs = trace(widen_to_f64(tagged), *_widen_args(args), max_iterations=max_iterations, entry=entry,
                       device=device, **compile_options)
        reference, ref_outputs = {v.key: v.value for v in theirs}, theirs.outputs
    elif isinstance(against, str) and against == "xla":
        description = "XLA CPU"
        reference, ref_outputs = _xla_values(tagged, args, entry), None
    elif isinstance(against, dict) and all(isinstance(k, str) and not k.startswith("op") for k in against) \
            and against:
        description = "compile options " + ", ".join(f"{k}={v!r}" for k, v in against.items())
        options = {**compile_options, **against}
        options.setdefault("device", device)
        try:
            theirs = trace(tagged, *args, max_iterations=max_iterations, entry=entry, **options)
        except TypeError as e:
            raise XlaError(f"find_divergence: against={against!r}: {e} (lowering.compile's options are "
                           "xla_rewrites, fma_contraction, denormals, blas_threads, argument_conversion, ...)") \
                from None
        reference, ref_outputs = {v.key: v.value for v in theirs}, theirs.outputs
    elif isinstance(against, (Mapping, str, os.PathLike)):
        description = "the values given" if isinstance(against, Mapping) else os.fspath(against)
        reference, ref_outputs = _mapping_values(against), None
    else:
        raise XlaError(f"find_divergence: against must be 'f64', 'xla', a dict of compile options, a mapping of "
                       f"values or a path, got {type(against).__name__}")
    ref_traced = theirs
    skip = _bit_dependent(ours.module) if isinstance(against, str) and against == "f64" else set()
    divergences, compared, unmatched = [], 0, 0
    for v in ours:
        ref = reference.get(v.key)
        if ref is None or v.index is None or v.index in skip:
            unmatched += 1
            continue
        compared += 1
        d = _compare(v, ref, max_ulp, rtol_magnitude)
        if d is not None:
            if v.key.endswith(f".dev{v.device}"):
                d.device = v.device
            if not divergences:
                d.operands = _operand_keys(ours, v)
            divergences.append(d)
    rechecked = 0
    if isinstance(against, str) and against == "xla" and divergences:
        divergences, rechecked = _recheck_alone(divergences, ours, tagged, args, entry, max_ulp, rtol_magnitude)
        if divergences:
            divergences[0].operands = _operand_keys(ours, next(v for v in ours if v.key == divergences[0].key))
    outputs_agree = True
    if ref_outputs is not None:
        for a, b in zip(_flat(ours.outputs), _flat(ref_outputs)):
            if isinstance(a, np.ndarray) and _compare(TracedValue("", None, "", None, 0, 0, a), b, max_ulp,
                                                      rtol_magnitude) is not None:
                outputs_agree = False
    else:
        outputs_agree = not divergences
    absent = []
    if ref_traced is not None:
        have = {v.index for v in ours}
        for v in ref_traced:
            if v.index is not None and v.index not in have and v.op not in (ConstantOp.name, BroadcastInDimOp.name):
                text = v.op + (f" at {v.location}" if v.location else "")
                if text not in absent:
                    absent.append(text)
    return DivergenceReport(description, divergences[0] if divergences else None, divergences, compared, unmatched,
                            outputs_agree, absent, rechecked)


def _recheck_alone(divergences: list[Divergence], ours: Trace, tagged: ModuleOp, args, entry: str, max_ulp,
                   rtol_magnitude) -> tuple[list[Divergence], int]:
    """``divergences`` (against ``"xla"``) without those that were XLA's probe: a program returning every value
    fuses differently (a multiply it returns is no longer contracted into the add that reads it), so the first
    :data:`XLA_RECHECKS` are checked again against a run returning that value alone, and kept only if still out
    of budget. Returns the divergences left and how many values were dropped."""
    values = {v.key: v for v in ours}
    dropped = 0
    for n, d in enumerate(divergences[:XLA_RECHECKS]):
        alone = _xla_values(tagged, args, entry, keys={d.key}).get(d.key)
        if alone is None:  # (no value returned alone: keep what the first run found)
            return divergences[n:], dropped
        again = _compare(values[d.key], alone, max_ulp, rtol_magnitude)
        if again is None:
            dropped += 1
            continue
        again.device = d.device
        return [again, *divergences[n + 1:]], dropped  # (the first confirmed: what follows is downstream of it)
    return divergences[XLA_RECHECKS:], dropped


def report_json(report: DivergenceReport) -> str:
    """The report as indented JSON text."""
    return json.dumps(report.as_dict(), indent=1)
