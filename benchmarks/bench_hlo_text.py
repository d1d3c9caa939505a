"""HLO text speed: import (parse + build + verify) and export of a JAX program of about 15,000 instructions.

The program is a chain of small layers (dot, add, tanh, multiply, reduce, broadcast,
with metadata on every instruction, as JAX prints it); its HLO text comes from
``jax.jit(f).lower(...).as_text(dialect="hlo")``. Reported: best of ``--repeat`` runs
for parsing alone, import without and with the verifier, and export. Goal: a
15,000-instruction module imports in under 1 s.

    python benchmarks/bench_hlo_text.py [--instructions 15000] [--repeat 5]
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

from interop.hlo import export_hlo, import_hlo, parse_hlo_text  # noqa: E402


def long_program_text(target: int) -> str:
    """HLO text of a chain of layers with about ``target`` instructions."""

    def make(steps):
        def f(x, w, b):
            for _ in range(steps):
                h = jnp.tanh(x @ w + b)
                x = h * 0.5 + x / (1.0 + jnp.sum(h, axis=1, keepdims=True))
            return x
        return f

    spec = (jax.ShapeDtypeStruct((4, 16), jnp.float32), jax.ShapeDtypeStruct((16, 16), jnp.float32),
            jax.ShapeDtypeStruct((16,), jnp.float32))
    probe = jax.jit(make(10)).lower(*spec).as_text(dialect="hlo")
    per_step = max(1, (probe.count(" = ") - 5) // 10)
    return jax.jit(make(max(1, target // per_step))).lower(*spec).as_text(dialect="hlo")


def best_time(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instructions", type=int, default=15000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    text = long_program_text(args.instructions)
    count = text.count(" = ")
    print(f"HLO text: {count} instructions, {len(text) / 1e6:.1f} MB")
    t_parse, _ = best_time(lambda: parse_hlo_text(text), args.repeat)
    t_import, _ = best_time(lambda: import_hlo(text, verify=False), args.repeat)
    t_verified, module = best_time(lambda: import_hlo(text), args.repeat)
    t_export, _ = best_time(lambda: export_hlo(module), args.repeat)
    print(f"parse only             {t_parse:7.3f} s")
    print(f"import (no verifier)   {t_import:7.3f} s")
    print(f"import (verified)      {t_verified:7.3f} s   goal < 1 s: {'met' if t_verified < 1 else 'NOT met'}")
    print(f"export                 {t_export:7.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
