"""Import speed: a long JAX program (about 15,000 StableHLO ops) exported and imported (and exported back).

Builds a chain of element-wise ops, exports it with ``jax.export`` and times
:func:`interop.import_stablehlo` on the portable artifact and on the MLIR text
(best of several runs; parse and conversion reported separately). Goal: under
1 s for 15,000 ops.

    python benchmarks/bench_import.py [--ops 15000] [--repeat 5] [--verify]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from interop.stablehlo import export_stablehlo  # noqa: E402
from interop.stablehlo import Importer, parse_stablehlo  # noqa: E402


def long_program(target_ops: int):
    """A jax.export.Exported of a function with about ``target_ops`` StableHLO ops."""
    steps = max(1, target_ops // 4)  # sin, multiply, broadcast_in_dim, add per step

    def f(x, y):
        for _ in range(steps):
            x = jnp.sin(x) * y + 1.0
        return x

    spec = jax.ShapeDtypeStruct((8,), jnp.float32)
    return jax.export.export(jax.jit(f))(spec, spec)


def best_time(fn, repeat: int, clock=time.perf_counter) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = clock()
        result = fn()
        best = min(best, clock() - start)
    return best, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=15000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--verify", action="store_true", help="also time the hlo verifier on the result")
    args = parser.parse_args(argv)

    exported = long_program(args.ops)
    artifact = exported.mlir_module_serialized
    text = exported.mlir_module()
    for label, source in (("portable artifact", artifact), ("MLIR text", text)):
        t_parse, module = best_time(lambda: parse_stablehlo(source, trusted=True), args.repeat)
        t_convert, result = best_time(lambda: Importer().import_module(module), args.repeat)
        count = sum(1 for _ in result.walk()) - 2  # minus builtin.module and func.func
        total = t_parse + t_convert
        cpu = best_time(lambda: Importer().import_module(parse_stablehlo(source, trusted=True)), args.repeat,
                        time.process_time)[0]
        print(f"{label:18s}: {count} ops imported in {total:.3f} s wall "
              f"(parse {t_parse:.3f} s + convert {t_convert:.3f} s; {total / count * 1e6:.1f} us/op); "
              f"{cpu:.3f} s CPU")
        if args.verify:
            t_verify, _ = best_time(result.verify, 1)
            print(f"{'':18s}  hlo verifier on the result: {t_verify:.3f} s")
    from interop import import_stablehlo

    t_untrusted, _ = best_time(lambda: import_stablehlo(artifact), 2)
    print(f"{'untrusted artifact':18s}: {t_untrusted:.3f} s wall, including the child process that imports the bytes "
          "first (interop.stablehlo.bytecode_check: jaxlib aborts on some corrupted bytecode)")
    t_export, _ = best_time(lambda: export_stablehlo(result), args.repeat)
    print(f"{'export':18s}: {count} ops exported to StableHLO text in {t_export:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
