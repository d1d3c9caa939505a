"""``xla-run``: run a program file on the NumPy executor, check it against XLA, save or trace its results."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from xla_dialect.errors import XlaError

from ..programs import FORMATS_HELP, load_program, program_from_bytes, read_program_file  # noqa: F401
from .command_io import describe, quiet_broken_pipe, read_npz, result_summary, write_json


def _arguments(inputs: list[np.ndarray] | None, input_types: list) -> list[np.ndarray]:
    if inputs is None:
        if input_types:
            raise XlaError(
                f"the program takes {len(input_types)} arguments; give them with --inputs FILE.npz "
                "(arrays named arg0, arg1, ... or in file order), or run on generated ones with --random-inputs"
            )
        return []
    return inputs


def layout_changing_bitcasts(module) -> list:
    """The ``hlo.bitcast`` ops of ``module`` that are not a plain reshape: the operand's or the result's
    layout is tiled, puts a dimension of more than one element out of row-major order, or the element
    width changes. XLA compiles a program through StableHLO, which has no layouts, so for these its result
    stands for our rewriting of the bitcast (``export_hlo(for_xla=True)``), not for the bytes XLA itself
    would read: a difference from the executor there does not show that the executor is wrong."""
    from xla_dialect.layout import Layout, layout_of
    from xla_dialect.ops.data_movement import BitcastOp
    from xla_dialect.types import element_type_of

    def row_major(t) -> bool:
        if not hasattr(t, "get_shape"):
            return False
        dims = list(t.get_shape())
        layout = layout_of(t) or Layout.default(len(dims))
        if layout.tiles:
            return False
        order = [d for d in layout.minor_to_major if dims[d] != 1]
        return order == sorted(order, reverse=True)

    found = []
    for op in module.walk():
        if not isinstance(op, BitcastOp):
            continue
        src, dst = op.operands[0].type, op.results[0].type
        try:
            same_width = element_type_of(src.element_type).bits == element_type_of(dst.element_type).bits
        except Exception:  # noqa: BLE001 - a type without an XLA element type: not a plain reshape either
            same_width = False
        if not (same_width and row_major(src) and row_major(dst)):
            found.append(op)
    return found


def _untrusted_reason(bitcasts) -> str:
    from xla_dialect.errors import op_context
    from xla_dialect.shape import format_shape

    op = bitcasts[0]
    more = f" and {len(bitcasts) - 1} more" if len(bitcasts) > 1 else ""
    return (f"the program has layout-changing bitcasts ({op_context(op)}: {format_shape(op.operands[0].type)} -> "
            f"{format_shape(op.results[0].type)}{more}); XLA compiles it through StableHLO, which drops layouts, "
            "so its results cannot be trusted as the reference here")


def _check_against_xla(module, args, results, entry: str, max_ulp=None, rtol_magnitude=None, source="<program>",
                       trusted=False, noise_samples=None):
    """Run ``module`` on XLA's CPU backend and compare each result with :func:`interop.comparison.compare_output`
    (the comparison and budgets of ``interop.difftest``, :mod:`interop.comparison`); prints one line per result.

    Returns ``(ok, outputs, error)``: the :class:`~interop.comparison.OutputDiff` of every result, and a
    message when the result counts differ. ``ok`` is ``"untrusted"`` (a verdict of its own, not a failure)
    when the program has :func:`layout_changing_bitcasts` and XLA differs from the executor or cannot be
    given the program at all: XLA's route through StableHLO drops layouts, the executor reads the bytes.
    ``ok`` is ``"noise"`` when every result out of tolerance is rounding noise, as ``interop.difftest``
    decides it (:func:`interop.comparison.analyse_noise_with`, ``noise_samples`` nudged inputs, default
    :data:`~interop.comparison.DEFAULT_NOISE_SAMPLES`; 0 turns the analysis off): a verdict of its own too."""
    from ..comparison import DEFAULT_NOISE_SAMPLES, analyse_noise_with, compare_output
    from ..stablehlo.xla import run_xla

    if entry != "main":
        raise XlaError("--check-xla runs @main only (XLA compiles the module's entry function)")
    bitcasts = layout_changing_bitcasts(module)
    def on_xla(arrays, trusted=trusted):
        if "hlo.module_name" in module.attributes:  # read from HLO text: XLA compiles it as HLO text
            from ..hlo import run_hlo_on_xla

            return run_hlo_on_xla(module, *arrays, trusted=trusted, source=source)
        return run_xla(module, *arrays)

    try:
        expected = on_xla(args)
    except XlaError as e:
        if not bitcasts or "bitcast" not in str(e):
            raise
        error = f"{_untrusted_reason(bitcasts)} (XLA cannot be given the program: {e})"
        print(f"XLA reference cannot be trusted: {error}")
        return "untrusted", [], error
    if len(expected) != len(results):
        error = f"XLA returned {len(expected)} results, the executor {len(results)}"
        print(f"XLA: {error}")
        return False, [], error
    outputs = [compare_output(ours, theirs, max_ulp, rtol_magnitude=rtol_magnitude, index=i)
               for i, (ours, theirs) in enumerate(zip(results, expected))]
    samples = DEFAULT_NOISE_SAMPLES if noise_samples is None else noise_samples
    if samples > 0 and not bitcasts and not all(o.ok for o in outputs):
        analyse_noise_with(lambda: _noise_setup(module, args, entry, on_xla), outputs, list(results),
                           list(expected), samples)
    for o in outputs:
        c = o.comparison
        detail = "exact" if c.max_ulp is None else f"max ULP {o.max_ulp_text}, budget {o.budget_text}"
        detail += f", max abs {c.errors_text[0]}"
        if c.ok and c.by_magnitude:
            detail += f"; {c.by_magnitude} elements within the magnitude bound only"
        word = "agrees" if c.ok else "NOISE-DOMINATED" if o.noise_dominated else "DIFFERS"
        print(f"XLA result #{o.index}: {word} ({detail})" + ("" if c.ok else f": {c.message}"))
        if o.noise is not None:
            print(f"  {o.noise.text}")
    if bitcasts and not all(o.ok for o in outputs):
        error = _untrusted_reason(bitcasts)
        print(f"XLA reference cannot be trusted: {error}; the differences above are not counted as a mismatch")
        return "untrusted", outputs, error
    if not all(o.ok for o in outputs) and all(o.ok or o.noise_dominated for o in outputs):
        return "noise", outputs, None
    return all(o.ok for o in outputs), outputs, None


def _noise_setup(module, args, entry: str, on_xla):
    """``(leaves, run_xla, reference)`` for :func:`interop.comparison.analyse_noise_with` on a program file: XLA
    on nudged arguments (the text already checked: trusted), and the program widened to float64
    (:func:`interop.debugging.divergence.widen_to_f64`) run on the executor as the reference."""
    import lowering

    from ..debugging.divergence import _widen_args, widen_to_f64
    from ..comparison import plain_array

    wide = lowering.compile(widen_to_f64(module), entry=entry)

    def reference(arrays):
        return [plain_array(r) for r in wide(*_widen_args(arrays))]

    def run_xla(arrays):
        return [plain_array(r) for r in on_xla(arrays, trusted=True)]

    return [np.asarray(a) for a in args], run_xla, reference


DEMO_TOLERANCE = 1e-5
"""``xla-run --demo`` passes when every result is within this of jax.jit's (f32 programs)."""


def xla_run_main(argv: list[str] | None = None) -> int:
    """``xla-run FILE [--inputs inputs.npz | --random-inputs [--seed N]] [--dump-intermediates DIR] [--check-xla]``
    or ``xla-run --demo``.

    Exit status: 0 on success, 1 when ``--check-xla`` finds a difference, 2 on errors. A program with
    layout-changing bitcasts that XLA differs on (or cannot be given) gets the verdict "reference-untrusted"
    (printed, and the ``--json`` status): exit status 0, as XLA's route through StableHLO drops layouts.
    Results whose every difference is rounding noise (``interop.difftest``'s analysis) get the verdict
    "noise-dominated", exit status 0.
    """
    parser = argparse.ArgumentParser(
        prog="xla-run",
        description="Run a program on the NumPy executor.", epilog=FORMATS_HELP)
    parser.add_argument("file", nargs="?", help="program file (any format below)")
    parser.add_argument("--inputs", help=".npz file with the arguments (arg0, arg1, ...)")
    parser.add_argument("--random-inputs", action="store_true",
                        help="run on generated arguments of the parameter types instead of --inputs "
                             "(interop.debugging.random_inputs; reproducible with --seed)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="--random-inputs: the seed (default 0)")
    parser.add_argument("--special-values", action="store_true",
                        help="--random-inputs: mix in NaN, -NaN, +-inf, +-0, denormals, largest values and "
                             "integer extremes (about a quarter of each array)")
    parser.add_argument("--dump-intermediates", metavar="DIR",
                        help="write every intermediate value to DIR: FUNCTION.npz (arrays named by op, e.g. "
                             "op12.hlo.subtract, .it3 for loop iterations) and index.json (op, source location, "
                             "iteration, shape, dtype of each); see interop.debugging.trace")
    parser.add_argument("--max-iterations", type=int, default=16, metavar="N",
                        help="--dump-intermediates: values recorded per op inside loops (default 16)")
    parser.add_argument("--entry", default="main", help="entry function (default: main)")
    parser.add_argument("--check-xla", action="store_true",
                        help="also run the program on XLA's CPU backend and compare the results")
    parser.add_argument("--max-ulp", type=int, default=None, metavar="N",
                        help="--check-xla: a float element agrees within N ULPs (default: per dtype, 4 for f32 and "
                             "f64, 2 for f16 and bf16; interop.difftest's budgets)")
    parser.add_argument("--rtol-magnitude", type=float, default=None, metavar="R",
                        help="--check-xla: ... or within R times the result's magnitude, its largest |value| "
                             "(sums and matmuls in another order; default: per dtype, 64 units of roundoff, "
                             "3.8e-06 for f32; 0 turns this bound off)")
    parser.add_argument("--noise-samples", type=int, default=None, metavar="N",
                        help="--check-xla: a float result out of tolerance is checked for rounding noise as "
                             "interop.difftest checks it: XLA on the inputs and on N copies nudged by an ULP "
                             "against the program widened to float64; when every differing element is within 4x "
                             "XLA's own rounding error the verdict is noise-dominated, exit status 0 (default 16; "
                             "0 turns the check off)")
    parser.add_argument("--trusted", action="store_true",
                        help="the file is one you produced yourself: skip the check of MLIR bytecode, portable "
                             "artifacts and serialized exports in a child process (about 0.5 s), which guards "
                             "against jaxlib's reader aborting on corrupted bytes")
    parser.add_argument("--demo", action="store_true", help="build axpy and an MLP, run them, compare with jax.jit")
    parser.add_argument("--show-source", action="store_true", help="print the generated Python code")
    parser.add_argument("--output", metavar="FILE.npz",
                        help="also save the results to an .npz file (arrays result0, result1, ...; tokens are skipped)")
    parser.add_argument("--backend", choices=("auto", "threads", "mpi"), default="auto",
                        help="a sharded program (a serialized export of several devices): run its devices in threads "
                             "or over MPI ranks (mpiexec -n P xla-run ...); auto (default): MPI when started by "
                             "mpiexec with more than one process")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="a sharded program: how long a device waits for another at a collective before failing "
                             "(MPI default 600: a crashed rank; mismatched collectives are detected without it)")
    parser.add_argument("--memory", action="store_true",
                        help="a sharded program: print each device's memory (arguments, results, peak of live values)")
    parser.add_argument("--json", metavar="REPORT",
                        help="write a JSON report to this file: status (ok, mismatch, noise-dominated, reference-untrusted, error), error message, each "
                             "result's dtype, shape, finite range and NaN count, and with --check-xla each result's "
                             "verdict (status, max ULP / abs / rel error, budgets, mismatching elements)")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this command's process: XLA's CPU backend, no GPU probing
    report = {"program": args.file, "entry": args.entry, "status": "error", "error": None, "results": []}
    code = _run(parser, args, report)
    if args.json:
        try:
            write_json(args.json, report)
        except OSError as e:
            print(f"xla-run: error: --json {args.json}: {e}", file=sys.stderr)
            return 2
    return code


def _mpi_error(e: BaseException) -> None:
    """Print ``e``; under ``mpiexec`` with the rank, and when only this rank met it (not a collective's error,
    which every rank raises), end the whole job so that no rank waits for this one."""
    from lowering.executor.mpi import mpi_world_size

    if mpi_world_size() <= 1:
        print(f"xla-run: error: {e}", file=sys.stderr)
        return
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "?"))
    print(f"xla-run: rank {rank}: error: {e}", file=sys.stderr, flush=True)
    if not getattr(e, "all_ranks", False):
        from lowering.executor.mpi import abort

        print(f"xla-run: rank {rank}: ending every rank of the job (MPI_Abort)", file=sys.stderr, flush=True)
        abort(2)


def _run(parser, args, report: dict) -> int:
    """The body of ``xla-run``; fills the ``--json`` ``report`` as it goes, returns the exit status."""
    try:
        if args.demo:
            from .demo import run_demo

            worst = run_demo()
            verdict = "PASS" if worst < DEMO_TOLERANCE else "FAIL"
            print(f"demo {verdict}: max difference against jax.jit {worst:.3g} (passes below {DEMO_TOLERANCE:g})")
            report.update(program="--demo", status="ok" if worst < DEMO_TOLERANCE else "mismatch",
                          demo_max_difference=worst)
            return 0 if worst < DEMO_TOLERANCE else 1
        if not args.file:
            parser.error("give a program FILE or --demo")
        import lowering

        if args.random_inputs and args.inputs:
            parser.error("give --inputs or --random-inputs, not both")
        inputs = read_npz(args.inputs)
        data = read_program_file(args.file)
        from .sharded_cli import run_sharded_export, sharded_export

        exported = sharded_export(data, trusted=args.trusted)
        if exported is not None:  # several devices: partitioned as XLA partitions it, as interop.compile_sharded
            return run_sharded_export(exported, args, inputs, report)
        from ..hlo.syntax import is_hlo_text

        if not is_hlo_text(data):  # StableHLO of several devices: XLA partitions it (jaxlib), then as HLO text
            from .sharded_cli import partition_stablehlo, run_partitioned_hlo, stablehlo_grid

            grid = stablehlo_grid(data)
            if grid != (1, 1):
                from ..hlo import import_hlo

                text, shardings = partition_stablehlo(data, *grid)
                return run_partitioned_hlo(import_hlo(text, source=args.file), text, args, inputs, report,
                                           output_shardings=shardings)
        module = program_from_bytes(data, args.file, inputs, trusted=args.trusted)

        if is_hlo_text(data):  # XLA's partitioned per-device program: run on its replicas x partitions
            from .sharded_cli import partition_grid, run_partitioned_hlo

            text = data.decode("utf-8", errors="replace")
            if partition_grid(text) != (1, 1):
                return run_partitioned_hlo(module, text, args, inputs, report)
        exe = lowering.compile(module, entry=args.entry)
        if args.show_source:
            print(exe.source)
        if args.random_inputs:
            from ..debugging.random_inputs import random_inputs

            inputs = random_inputs(exe, seed=args.seed, special_values=args.special_values)
            print(f"random inputs (seed {args.seed}{', special values' if args.special_values else ''}): "
                  + ", ".join(describe(a) for a in inputs))
        arrays = _arguments(inputs, exe.input_types)
        if args.dump_intermediates:
            from ..debugging.probes import trace

            traced = trace(module, *arrays, max_iterations=args.max_iterations, entry=args.entry)
            written = traced.dump(args.dump_intermediates)
            print(f"{len(traced)} intermediate values written to {', '.join(written)}"
                  + (f" ({traced.skipped} more inside loops past --max-iterations)" if traced.skipped else ""))
        results = exe(*arrays)
        if args.output:
            np.savez(args.output, **{f"result{i}": np.asarray(r) for i, r in enumerate(results)
                                     if isinstance(r, (np.ndarray, np.generic))})
        report["results"] = [result_summary(i, r) for i, r in enumerate(results)]
        report["status"] = "ok"
        for i, r in enumerate(results):
            print(f"result #{i}: {describe(r)}")
            if isinstance(r, np.ndarray):
                print(np.array2string(r, threshold=200))
        if args.check_xla:
            ok, outputs, error = _check_against_xla(module, arrays, results, args.entry, args.max_ulp,
                                                    args.rtol_magnitude, source=args.file, trusted=args.trusted,
                                                    noise_samples=args.noise_samples)
            if ok == "noise":  # every difference is rounding noise (difftest's verdict): not a mismatch
                report["check_xla"] = {"ok": None, "verdict": "noise-dominated", "error": None,
                                       "outputs": [o.as_dict() for o in outputs]}
                report["status"] = "noise-dominated"
                print("XLA check: noise-dominated: every result that differs is rounding noise (see above)")
                return 0
            if ok == "untrusted":  # neither agreement nor a failure: XLA is not a reference for this program
                report["check_xla"] = {"ok": None, "verdict": "reference-untrusted", "error": error,
                                       "outputs": [o.as_dict() for o in outputs]}
                report["status"] = "reference-untrusted"
                return 0
            report["check_xla"] = {"ok": ok, "verdict": "agrees" if ok else "differs", "error": error,
                                   "outputs": [o.as_dict() for o in outputs]}
            report["status"] = "ok" if ok else "mismatch"
            return 0 if ok else 1
        return 0
    except XlaError as e:
        report.update(status="error", error=str(e))
        _mpi_error(e)
        return 2
    except BrokenPipeError:  # `xla-run ... | head`: the reader went away

        return quiet_broken_pipe()
    except OSError as e:
        report.update(status="error", error=str(e))
        _mpi_error(e)
        return 2
    except Exception as e:
        from lowering.executor.mpi import mpi_world_size

        if mpi_world_size() > 1:  # an unexpected error on one rank: its traceback, then no rank left waiting
            import traceback

            traceback.print_exc()
            _mpi_error(e)
        raise


if __name__ == "__main__":
    sys.exit(xla_run_main())
