"""How well HLO text files import, print, round-trip and run: ``python -m interop.tools.hlo_survey PATH...``.

For every ``.hlo`` / ``.txt`` file under the paths (HLO module text, e.g. XLA dumps or XLA's own test
files), each in a worker process with a timeout:

1. **import**: :func:`interop.import_hlo` (verified);
2. **print**: :func:`interop.export_hlo`, then XLA's parser (jaxlib) reads the printed text and prints it
   back; the layouts of every instruction must be those we printed;
3. **round trip**: the printed text read back and printed again gives the same text;
4. **execution** (when every parameter is an array and the module is under ``--max-elements``): random
   arguments (scalars 0: they are often reduction inits, whose non-identity values XLA may apply
   several times), the executor against XLA compiling the *original* text (or, when XLA cannot compile it
   from text, our ``export_hlo(for_xla=True)`` print of it); floats agree within the difftest budget or
   an error bound relative to the output's magnitude.

Prints one line per file and the rates; ``--json`` writes the per-file results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import Counter
import sys
import time
from pathlib import Path

import numpy as np


def split_modules(text: str) -> list[str]:
    """The HLO modules of a file: several ``HloModule`` texts (XLA's test files separate them with
    ``// -----``) are surveyed one by one."""
    starts = [m.start() for m in re.finditer(r"^HloModule\b", text, re.M)]
    if len(starts) <= 1:
        return [text]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def _files(paths) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.suffix in (".hlo", ".txt") and q.is_file()))
        elif p.is_file():
            out.append(p)
    return out


def _random_arguments(types, rng) -> list[np.ndarray] | None:
    from xdsl.dialects.builtin import TensorType

    from xla_dialect.types import element_type_of, numpy_dtype

    args = []
    for t in types:
        if not isinstance(t, TensorType):
            return None
        dtype = np.dtype(numpy_dtype(t.element_type))
        kind = element_type_of(t.element_type).kind
        shape = tuple(t.get_shape())
        if not shape and kind != "pred":  # scalars are often reduction inits: the identity of a sum
            args.append(np.zeros((), dtype))
        elif kind == "pred":
            args.append(rng.integers(0, 2, shape).astype(bool))
        elif kind in ("sint", "uint"):
            args.append(rng.integers(0, 8, shape).astype(dtype))
        elif kind == "complex":
            args.append((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype))
        else:
            args.append(rng.standard_normal(shape).astype(np.float32).astype(dtype))
    return args


def _agree(ours, theirs) -> str | None:
    from ..comparison import is_float_dtype

    if len(ours) != len(theirs):
        return f"{len(ours)} results, XLA {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return f"result #{i}: shape {a.shape}, XLA {b.shape}"
        if b.dtype.kind == "c" or is_float_dtype(b.dtype):
            wide_a, wide_b = a.astype(np.complex128), b.astype(np.complex128)
            both_nan = np.isnan(wide_a) & np.isnan(wide_b)
            err = np.where(both_nan, 0, np.abs(wide_a - wide_b))
            err = np.where(wide_a == wide_b, 0, err)
            scale = max(float(np.max(np.abs(np.where(np.isfinite(wide_b), wide_b, 0)))) if b.size else 0, 1.0)
            import ml_dtypes

            eps = float(ml_dtypes.finfo(b.real.dtype if b.dtype.kind == "c" else b.dtype).eps)
            bad = np.nan_to_num(err, nan=np.inf) > 64 * eps * scale
            if bad.any():
                return f"result #{i}: max error {float(np.max(np.nan_to_num(err, nan=np.inf))):.3g} (scale {scale:.3g})"
        elif not np.array_equal(a, b):
            return f"result #{i}: {int(np.sum(a != b))} elements differ"
    return None


def survey_file(path: str, max_elements: int = 1 << 24, part: int | None = None) -> dict:
    """Survey one file (or its ``part``-th module, see :func:`split_modules`); returns a dict of
    stages -> 'ok' or the error."""
    from jax._src.lib import xla_client

    import lowering

    from xla_dialect.errors import ExecutionError
    from xla_dialect.ops.control_flow import FusionOp
    from xla_dialect.ops.data_movement import BitcastOp

    from ..hlo import export_hlo, import_hlo, run_hlo_on_xla, run_hlo_text_on_xla

    out: dict = {"path": path if part is None else f"{path}#{part}"}
    text = Path(path).read_text(errors="replace")
    if part is not None:
        text = split_modules(text)[part]
    try:
        module = import_hlo(text, source=path)
        out["import"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported per file
        out["import"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        return out
    try:
        printed = export_hlo(module)
        options = xla_client.hlo.HloPrintOptions()
        options.print_large_constants = True
        xla_printed = xla_client.hlo.hlo_module_from_text(printed).to_string(options)
        # XLA keeps instruction names unique per module (renaming repeats): compare the shapes printed.
        ours = Counter(_layouts(module))
        theirs = Counter(_layouts(import_hlo(xla_printed)))
        differ = list(ours - theirs)  # every shape we print, XLA prints back (it also names what we did not)
        out["print"] = "ok" if not differ else f"XLA prints other shapes/layouts: {differ[:3]}"
    except Exception as e:  # noqa: BLE001
        out["print"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        return out
    try:
        again = export_hlo(import_hlo(printed))
        out["roundtrip"] = "ok" if again == printed else "the text printed again differs"
    except Exception as e:  # noqa: BLE001
        out["roundtrip"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    main = next(op for op in module.ops if op.sym_name.data == "main")
    inputs = list(main.function_type.inputs)
    sizes = [int(np.prod(t.get_shape())) if hasattr(t, "get_shape") else 0 for t in inputs]
    if sum(sizes) > max_elements:
        out["execute"] = "skipped: too large"
        return out
    args = _random_arguments(inputs, np.random.default_rng(0))
    if args is None:
        out["execute"] = "skipped: tuple or token parameters"
        return out
    # XLA compiles optimized text (fusions, bitcasts) only through our for_xla print: from the original
    # text its CPU compiler can abort the process (a CHECK on fusions without backend configs).
    optimized = any(isinstance(op, (FusionOp, BitcastOp)) for op in module.walk())
    try:
        if optimized:
            expected = run_hlo_on_xla(module, *args)
            out["reference"] = "XLA on export_hlo(for_xla=True)"
        else:
            try:
                expected = run_hlo_text_on_xla(text, *args)
                out["reference"] = "XLA on the original text"
            except ExecutionError:  # e.g. opcodes jaxlib's XLA parses but its CPU backend does not compile
                expected = run_hlo_on_xla(module, *args)
                out["reference"] = "XLA on export_hlo(for_xla=True)"
    except Exception as e:  # noqa: BLE001
        out["execute"] = f"no reference: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return out
    try:
        results = lowering.compile(module)(*args)
        problem = _agree(results, expected)
        out["execute"] = "ok" if problem is None else f"differs: {problem}"
    except Exception as e:  # noqa: BLE001
        out["execute"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return out


def _layouts(module) -> list[str]:
    """The shapes (with layouts) of every named op's results."""
    from xla_dialect.shape import format_shape

    return [",".join(format_shape(r.type) for r in op.results)
            for op in module.walk() if "hlo.name" in op.attributes and op.results]


def _worker(path: str, max_elements: int, queue, part=None, parent: int | None = None) -> None:
    from ..processes import die_with_parent

    die_with_parent(parent)  # (a killed survey must not leave a hanging import running)
    try:
        queue.put(survey_file(path, max_elements, part))
    except BaseException as e:  # noqa: BLE001
        queue.put({"path": path, "import": f"crash: {type(e).__name__}: {e}"})


def main(argv=None) -> int:
    """Entry point; see the module docstring."""
    import multiprocessing as mp

    parser = argparse.ArgumentParser(prog="python -m interop.tools.hlo_survey", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--max-elements", type=int, default=1 << 24)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    files = _files(args.paths)
    ctx = mp.get_context("spawn")
    results = []
    tasks = []
    for path in files:
        count = len(split_modules(path.read_text(errors="replace")))
        tasks.extend([(path, None)] if count == 1 else [(path, k) for k in range(count)])
    for path, part in tasks:
        queue = ctx.Queue()
        start = time.monotonic()
        proc = ctx.Process(target=_worker, args=(str(path), args.max_elements, queue, part, os.getpid()))
        proc.start()
        proc.join(args.timeout)
        if proc.is_alive():
            proc.kill()
            result = {"path": str(path), "import": f"timeout after {args.timeout} s"}
        else:
            result = queue.get() if not queue.empty() else {"path": str(path),
                                                              "import": f"worker died ({proc.exitcode})"}
        result["seconds"] = round(time.monotonic() - start, 2)
        results.append(result)
        stages = " ".join(f"{k}={'ok' if v == 'ok' else 'NO'}" for k, v in result.items()
                          if k in ("import", "print", "roundtrip", "execute"))
        print(f"{path.name}{'' if part is None else f'#{part}'}: {stages}")
        for k in ("import", "print", "roundtrip", "execute"):
            if k in result and result[k] != "ok" and not str(result[k]).startswith("skipped"):
                print(f"    {k}: {result[k]}")
    n = len(results)

    def count(stage):
        return sum(r.get(stage) == "ok" for r in results)

    executed = [r for r in results if "execute" in r and not str(r["execute"]).startswith(("skipped", "no reference"))]
    unreferenced = sum(str(r.get("execute", "")).startswith("no reference") for r in results)
    print(f"\n{n} modules from {len(files)} files: import {count('import')}/{n}, XLA reads our print with the same "
          f"layouts {count('print')}/{n}, text round trip {count('roundtrip')}/{n}, execution agrees with XLA "
          f"{count('execute')}/{len(executed)} (those with array parameters that XLA runs; {unreferenced} more "
          f"that XLA's CPU backend cannot run)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
