"""Running one program (:func:`run_program`): import, compile (``denormals="keep"``), run and check;
round-trip programs through the exporter; :func:`run_program_through_hlo` runs a program through HLO text."""

from __future__ import annotations

import time
from collections.abc import Callable

from xla_dialect.errors import XlaError

from .records import Program, Result
from .rewriting import normalize_checks
from .extraction import Prepared, _PROBED, _functions, _ir, prepare_module


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
    from ...stablehlo.quant import expand_quantized_text

    return expand_quantized_text(text)


def _import(module, quant_lines: dict | None):
    from ...stablehlo import import_mlir_module

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
        # does not flush them as XLA CPU does (e.g. ceil(smallest denormal) = 1; lowering/runtime/denormals.py).
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
    from ...stablehlo.parse import PARSED_NEWER_OPS

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

    from ...hlo import export_hlo, import_hlo

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
    from ...stablehlo import export_stablehlo, import_stablehlo, parse_stablehlo

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
