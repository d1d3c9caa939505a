"""Pass bisection: run a program before and after each pass of a pipeline, name the first pass that changes
its results and the op where the change starts (``xla-opt --check-semantics``; the pass-testing helper of
:mod:`interop.debugging.pass_testing`).

Inputs are generated (:func:`~interop.debugging.random_inputs`): one set of ordinary values and, by default,
sets with special values mixed in (NaN, infinities, signed zeros, denormals, integer extremes), where
rewrites that hold for real numbers fail. Results are compared bit for bit except that two NaNs are equal
whatever their sign and payload (XLA does not define them, and neither does :mod:`interop.comparison`) and,
unless ``signed_zeros``, +0 equals -0 (the ULP rule of :func:`interop.comparison.ulp_distance`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from xla_dialect.errors import PassError, XlaError

from ..comparison import is_float_dtype, ulp_distance
from .probes import load_program_like, op_index, program_and_arguments, tag_ops, trace
from .random_inputs import random_inputs

__all__ = ["PassCheck", "SemanticsReport", "check_semantics", "same_values"]

DEFAULT_SEEDS = (0, 1, 2)
"""Input sets of :func:`check_semantics`: the first with ordinary values, the others with special values."""

CALL_TIMEOUT = 20.0
"""Seconds a run of one input set may take (a generated loop bound can be huge): past it, the set is not used."""


def same_values(a, b, signed_zeros: bool = False) -> np.ndarray | bool:
    """Element-wise: ``a`` and ``b`` hold the same value: bitwise, two NaNs equal whatever their sign and
    payload, and +0 equal to -0 unless ``signed_zeros``. Shapes or dtypes that differ: False."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "c" or is_float_dtype(a.dtype):
        same = ulp_distance(a, b) == 0  # (0 for equal bits, for any two NaNs and for +0 against -0)
        if signed_zeros:
            with np.errstate(all="ignore"):
                wa, wb = (x.astype(np.complex128 if x.dtype.kind == "c" else np.float64) for x in (a, b))
                zero = (wa == 0) & (wb == 0)
                same &= ~zero | (np.signbit(wa.real) == np.signbit(wb.real))
        return same
    if a.dtype.kind == "V":
        return a.view(np.uint8).reshape(*a.shape, -1).__eq__(b.view(np.uint8).reshape(*b.shape, -1)).all(-1)
    return a == b


@dataclass
class PassCheck:
    """The check of one pass: ``status`` is ``"same"``, ``"changed"`` (results differ from before it),
    ``"raises"`` (the program raises after it, not before) or ``"failed"`` (the pass itself raised)."""

    spec: str
    status: str
    message: str = ""
    seconds: float = 0.0


@dataclass
class SemanticsReport:
    """What :func:`check_semantics` found: :attr:`first` (the spec of the first pass that changes the
    results, None when none does), with the op where values start to differ, the output and the inputs."""

    pipeline: str
    checks: list[PassCheck]
    inputs: list[list] = field(default_factory=list)
    first: str | None = None
    op: str | None = None
    """Mnemonic of the op of the program before the pass whose value first differs after it (or that the pass
    rewrote into what differs)."""
    location: str | None = None
    output: int | None = None
    input_set: int | None = None
    details: str = ""
    module_before: ModuleOp | None = field(default=None, repr=False)
    """The program the offending pass was given (for a reducer or a test)."""

    @property
    def ok(self) -> bool:
        """True when every pass preserves the results."""
        return self.first is None

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        lines = [f"checked {len(self.checks)} passes of {self.pipeline!r} on {len(self.inputs)} input sets"]
        for c in self.checks:
            lines.append(f"  {c.spec:40s} {c.status}" + (f": {c.message}" if c.message else ""))
        if self.first is None:
            lines.append("every pass preserves the results")
        else:
            where = f" at {self.location}" if self.location else ""
            op = f", starting at {self.op}{where}" if self.op else ""
            lines.append(f"the first pass that changes the results: {self.first}{op}")
            if self.details:
                lines.append("  " + self.details.replace("\n", "\n  "))
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """JSON-ready."""
        return {"pipeline": self.pipeline, "ok": self.ok, "first": self.first, "op": self.op,
                "location": self.location, "output": self.output, "input_set": self.input_set,
                "details": self.details, "checks": [{"pass": c.spec, "status": c.status, "message": c.message}
                                                    for c in self.checks]}


def _run_all(module: ModuleOp, inputs: list[list], entry: str, compile_options: dict):
    """``module``'s results on every input set: a tuple of arrays, or the exception text when it raises
    (or when lowering raises: then for every set), or None when a set timed out."""
    import lowering
    from lowering.runtime.interrupt import ExecutionTimeout

    try:
        exe = lowering.compile(module, entry=entry, timeout=CALL_TIMEOUT, **compile_options)
    except XlaError as e:
        return [f"{type(e).__name__}: {e}"] * len(inputs)
    out = []
    for args in inputs:
        try:
            out.append(tuple(np.array(r, copy=True) if isinstance(r, np.ndarray) else r for r in exe(*args)))
        except ExecutionTimeout:
            out.append(None)
        except XlaError as e:
            out.append(f"{type(e).__name__}: {e}")
    return out


def _difference(before, after, signed_zeros: bool) -> tuple[int, str] | None:
    """(output index, description) of the first output that differs, or None."""
    if isinstance(before, str) or isinstance(after, str):
        if isinstance(before, str) and isinstance(after, str):
            return None
        if isinstance(after, str):
            return -1, f"raises after the pass: {after}"
        return -1, f"raised before the pass ({before}), returns values after it"
    if len(before) != len(after):
        return -1, f"{len(before)} results before, {len(after)} after"
    for i, (a, b) in enumerate(zip(before, after)):
        if not isinstance(a, np.ndarray):
            continue
        same = same_values(b, a, signed_zeros)
        if same is False or not np.all(same):
            if same is False:
                return i, f"result #{i}: {b.dtype}{list(np.shape(b))} after, {a.dtype}{list(a.shape)} before"
            bad = np.argwhere(~np.asarray(same))
            where = tuple(int(x) for x in bad[0]) if a.ndim else ()
            return i, (f"result #{i}: {len(bad)} of {a.size} elements differ; first at {list(where)}: "
                       f"{str(b[where])} after, {str(a[where])} before")
    return None


def _locate(before: ModuleOp, p, args, entry: str, compile_options: dict, signed_zeros: bool):
    """The op where values start to differ: run the pass on a numbered copy, trace both on ``args`` and take the
    first value (in the order the pass's output computes them) that differs from the same op's value before;
    an op that the pass replaced or removed, feeding that one, is named instead (the rewrite itself)."""
    import passes

    tagged, originals = tag_ops(before)
    after = tagged.clone()
    passes.run(after, [p], verify=False)
    t_before = trace(tagged, *args, entry=entry, **compile_options)
    t_after = trace(after, *args, entry=entry, **compile_options)
    values = {v.key: v for v in t_before}
    kept = {op_index(op) for op in after.walk()} - {None}

    def rewritten_upstream(start, what: str):
        """The nearest op feeding ``start`` (breadth-first over operands) that the pass replaced or removed."""
        seen, frontier = set(), [start]
        while frontier:
            op = frontier.pop(0)
            for operand in op.operands:
                owner = operand.owner
                index = op_index(owner) if hasattr(owner, "attributes") else None
                if index is None or index in seen:
                    continue
                seen.add(index)
                if index not in kept:
                    loc = owner.attributes.get("loc")
                    return owner.name, loc.data if loc is not None else None, \
                        f"the pass rewrote {owner.name} [op{index}], read by {what}, whose value differs"
                frontier.append(owner)
        return None

    for v in t_after:
        w = values.get(v.key)
        if w is None or v.index is None:
            continue
        same = same_values(v.value, w.value, signed_zeros)
        if same is False or not np.all(same):
            found = rewritten_upstream(originals[v.index], f"{v.op} [{v.key}]")
            return found or (v.op, v.location, f"{v.op} [{v.key}] computes another value after the pass")
    # every value kept agrees: the change is in a value the pass made that goes straight to the results
    ret = next((op for op in tagged.walk() if op.name == "func.return" and op.parent_op().sym_name.data == entry),
               None)
    found = rewritten_upstream(ret, "the function's results") if ret is not None else None
    return found or (None, None, "")


def check_semantics(program, pipeline, inputs: Sequence[Sequence] | None = None, seeds: Sequence[int] = DEFAULT_SEEDS,
                    special_values: bool = True, signed_zeros: bool = False, entry: str = "main",
                    **compile_options) -> SemanticsReport:
    """Run ``program`` before and after each pass of ``pipeline`` and name the first pass that changes its results.

    ``program``: an xDSL module (not changed), a program file or a JAX function; ``pipeline``: pipeline text
    (``"simplify,cse,dce"``) or pass instances (a user's own ``ModulePass``). The program runs on ``inputs``
    (a list of argument lists), or on generated ones: one set per seed, the first with ordinary values and the
    others with special values (NaN, +-inf, +-0, denormals, integer extremes) when ``special_values``.
    Results agree when bitwise equal, two NaNs whatever their sign and payload, +0 and -0 unless
    ``signed_zeros``. ``compile_options`` go to :func:`lowering.compile`.

    Returns a :class:`SemanticsReport`: ``.ok``, ``.first`` (the pass), ``.op`` and ``.location`` (where the
    values start to differ), one :class:`PassCheck` per pass; it prints readably.
    """
    import time

    import passes
    from passes.runner import pipeline_passes

    if not isinstance(program, ModuleOp) and inputs:  # a JAX function, imported with the first input set
        module, _ = program_and_arguments(program, list(inputs[0]), "check_semantics")
        inputs = [program_and_arguments(program, list(args), "check_semantics")[1] for args in inputs]
    else:
        module = program if isinstance(program, ModuleOp) else load_program_like(program, (), "check_semantics")
    pass_list = pipeline_passes(pipeline)
    text = pipeline if isinstance(pipeline, str) else ",".join(str(p) for p in pass_list)
    if inputs is None:
        inputs = [random_inputs(module, seed=s, special_values=special_values and k > 0, entry=entry)
                  for k, s in enumerate(seeds)]
    inputs = [list(args) for args in inputs]
    if not inputs:
        raise XlaError("check_semantics: no input sets (give inputs or seeds)")
    report = SemanticsReport(text, [], inputs)
    current = module.clone()
    before = _run_all(current, inputs, entry, compile_options)
    for p in pass_list:
        spec = str(p)
        start = time.perf_counter()
        candidate = current.clone()
        try:
            passes.run(candidate, [p])
        except (PassError, XlaError) as e:
            report.checks.append(PassCheck(spec, "failed", str(e), time.perf_counter() - start))
            report.first, report.details, report.module_before = spec, f"the pass raised: {e}", current
            return report
        after = _run_all(candidate, inputs, entry, compile_options)
        for k, (b, a) in enumerate(zip(before, after)):
            if b is None or a is None:
                continue  # (a set that timed out on either side says nothing)
            diff = _difference(b, a, signed_zeros)
            if diff is None:
                continue
            status = "raises" if isinstance(a, str) and not isinstance(b, str) else "changed"
            report.checks.append(PassCheck(spec, status, f"input set {k}: {diff[1]}", time.perf_counter() - start))
            report.first, report.output, report.input_set, report.module_before = spec, diff[0], k, current
            report.details = f"input set {k}: {diff[1]}"
            if status == "changed":
                try:
                    op, loc, why = _locate(current, p, inputs[k], entry, compile_options, signed_zeros)
                except XlaError as e:
                    op, loc, why = None, None, f"(the op could not be located: {e})"
                report.op, report.location = op, loc
                if why:
                    report.details += "\n" + why
            return report
        report.checks.append(PassCheck(spec, "same", "", time.perf_counter() - start))
        current, before = candidate, after
    return report
