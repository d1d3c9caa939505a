"""The per-op status table of docs/operations.md, generated from the code.

``python -m interop.tools.op_table`` prints one Markdown table per op family: every
hlo op with whether it has a NumPy kernel, plus the family's builder methods.
A test checks that docs/operations.md lists every op, so the table cannot go stale.
"""

from __future__ import annotations

import inspect

from lowering import kernels as _kernels  # noqa: F401  (registers every kernel)
from lowering.kernels.registry import KERNELS
from xla_dialect.ops import FAMILIES
from xla_dialect.ops.collectives import CollectiveBroadcastOp, CollectiveReduceOp
from xla_dialect.ops.control_flow import AsyncDoneOp, AsyncStartOp, ReturnOp
from xla_dialect.ops.conversion import BitcastConvertOp, UniformDequantizeOp, UniformQuantizeOp
from xla_dialect.ops.data_movement import DynamicPadOp
from xla_dialect.ops.effects import SetDimensionSizeOp
from xla_dialect.ops.elementwise import (
    Atan2Op,
    CbrtOp,
    CompareOp,
    CosineOp,
    ErfOp,
    ExpOp,
    Expm1Op,
    Log1pOp,
    LogOp,
    LogisticOp,
    PowOp,
    RsqrtOp,
    SineOp,
    TanOp,
    TanhOp,
)
from xla_dialect.ops.indexing import DynamicGatherOp
from xla_dialect.ops.linalg import DotGeneralOp
from xla_dialect.ops.numerics import FftOp, RngOp
from xla_dialect.ops.reduction import ReduceOp
from xla_dialect.ops.windowed import DynamicConvOp, ReduceWindowOp

# Known deviations from XLA, per op (measured against jax.jit / XLA CPU; see the tests).
NOTES = {
    ExpOp: "bit-exact with XLA's own exp (about 0.025 us/element f32, 0.2 f64); c128 bit-exact, c64 within 2 ULP",
    LogOp: "real types bit-exact (f32 XLA's own); complex: the StableHLO complex-math expansion XLA applies, c128 "
           "bit-exact, c64 up to 1 ULP on the few elements XLA computes outside its vectorized loop",
    TanhOp: "bit-exact with XLA's own approximations (about 0.03 us/element f32, 0.4 f64); c128 bit-exact",
    Expm1Op: "bit-exact (about 0.05 us/element f32, 0.6 f64); c128 bit-exact",
    Log1pOp: "bit-exact (about 0.07 us/element f32, 0.3 f64; complex: the StableHLO expansion XLA applies)",
    ErfOp: "bit-exact (f32 XLA's rational approximation, f64 glibc's erf)",
    RsqrtOp: "bit-exact on every x86-64 CPU: the CPU's own estimate instruction plus XLA's Newton steps, as XLA "
             "runs them (f32 RSQRTPS with AVX; f64 VRSQRT14PD with AVX-512F, else 1/sqrt)",
    LogisticOp: "bit-exact for real types and c128",
    SineOp: "bit-exact for real types (f32: the C library's sinf, which XLA calls, called from the kernel, fused "
            "loops and compiled loops alike); complex: see the general notes",
    CosineOp: "bit-exact for real types (f32: the C library's cosf, which XLA calls, called from the kernel, fused "
              "loops and compiled loops alike); complex: see the general notes",
    TanOp: "bit-exact (libm's tanf/tan, as XLA; 8-bit floats via f16)",
    DotGeneralOp: "small f32/f64 dots in XLA CPU's summation order (bit-exact on measured shapes, see the notes); complex dots follow XLA's Eigen summation order (bit-exact on tested shapes; ~10x slower than BLAS)",
    BitcastConvertOp: "pred counts as 1 bit, as in StableHLO (XLA counts 8)",
    CbrtOp: "complex accepted as in StableHLO (XLA rejects it)",
    Atan2Op: "complex: c128 bit-exact; c64 matches XLA's special values but not its last bits (XLA calls glibc's "
             "f32 sincosf)",
    PowOp: "complex: c128 bit-exact, c64 within 2 ULP",
    CompareOp: "complex LT/GT/LE/GE rejected (XLA accepts them but its results look wrong)",
    RngOp: "random stream differs from XLA's (same distributions/formulas)",
    SetDimensionSizeOp: "static shapes only: the size is checked, data is not truncated",
    FftOp: "fft_length must equal the innermost dimensions (XLA CPU misbehaves otherwise)",
    ReduceOp: "f32/f64/bf16 sums of 4,096 elements or more in XLA CPU's order (YNNPACK's sum; bit-exact on "
              "measured shapes on AVX-512 hosts, see the notes)",
    ReduceWindowOp: "window walk order is row-major; XLA CPU's order with padding may differ in the last float bits",
    CollectiveBroadcastOp: "XLA CPU does not implement it; several operands and `has_dynamic_root` as in the "
                           "current spec (text jaxlib cannot parse is read through the importer's fallback)",
    AsyncStartOp: "the current spec's async op (jaxlib 0.10 cannot parse it: read through the importer's "
                  "fallback); the executor computes the body's op when it starts, as the spec allows",
    AsyncDoneOp: "returns the results the future holds",
    DynamicPadOp: "configured when it runs (paddings as operands), executed as `hlo.pad`",
    DynamicGatherOp: "configured when it runs (slice sizes as an operand), executed as `hlo.gather`",
    DynamicConvOp: "configured when it runs (padding as an operand), executed as `hlo.convolution`",
    CollectiveReduceOp: "op of the current StableHLO spec (no XLA op, jaxlib 0.10 cannot parse it: read through "
                        "the importer's fallback); the spec's example and StableHLO's interpreter test pass",
    UniformQuantizeOp: "also the 125 quantized corpus programs (XLA CPU does not compile quantized programs)",
    UniformDequantizeOp: "also the 125 quantized corpus programs (XLA CPU does not compile quantized programs)",
}
"""Op class -> known deviation, shown in the status column of docs/operations.md."""

GENERAL_NOTES = [
    "XLA CPU flushes denormals (FTZ/DAZ); `lowering.compile(..., denormals=None|'flush'|'keep')`. By default the "
    "executor runs each call in the CPU's same flush modes, so arithmetic, comparisons, reductions, dot/conv and libm "
    "calls flush bit for bit as XLA does; data movement keeps denormals, f16/f8 never flush, and 'keep' gives IEEE "
    "gradual underflow (the conformance runner uses it: the corpus comes from the IEEE reference interpreter). Not "
    "reproduced: XLA's compile-time identities (x*1, x+0, x/1, max(x,x) with constants keep denormals in XLA), "
    "select -> max/min, bf16 ==/!= against a constant 0 as a bit test, and threaded OpenBLAS workers reading "
    "denormal operands (results are flushed).",
    "Complex: divide, abs, log, log1p, tan, tanh, logistic, sqrt, exp, expm1 are bit-exact with XLA for c64 and c128 "
    "(NaN payloads included; sqrt follows the StableHLO complex-math expansion XLA applies), c128 atan2/power too. "
    "Complex sine/cosine are bit-exact with XLA's own ops (jax.lax.sin/cos on complex emit a different, real-valued "
    "program, which the executor runs op by op). Not bit-exact: complex rsqrt (9% c64 / 12% c128 of random bit "
    "patterns, 1-2 ULP), c64 atan2/power (last "
    "bits), c64 log (<= 1 ULP on the few elements XLA computes outside its vector loop), complex multiply (last bit: "
    "XLA's FMAs inside it).",
    "FMA contraction as XLA CPU does it (`lowering.compile(..., fma_contraction=True)`, default): f32/f64 `a*b+c`, "
    "`c+a*b`, `a*b-c`, `c-a*b` become one fused multiply-add when the multiply has one use (after merging duplicate "
    "expressions and inlining calls, as XLA does before fusing) and nothing stands between them; with two "
    "multiplies the first operand's is fused. On CPUs with AVX512-FP16 (detected at run time) f16 contracts the same "
    "way (measured on an Intel host: 100,000 of 100,000 `a*b+c` equal the single rounding), and the f16 batch-norm "
    "and triangular-solve expansions follow XLA's contractions there (fused reduce-of-products loops, one-term "
    "dots). Not reproduced: "
    "a multiply XLA copies into two separate fusions (both uses become FMAs in XLA), contraction inside reductions, "
    "and the FMAs inside complex multiplication (last bit).",
    "XLA's algebraic simplifier rewrites that change float results (`x / c` -> `x * (1/c)`, ...) are reproduced by "
    "the `xla-float-rewrites` pass, which `lowering.compile` runs by default.",
    "f16/bf16 cholesky and triangular_solve replay XLA's expanders (per-op rounding, f32 dots summed in order, XLA's "
    "reciprocal rewrites): bit-exact on tested shapes; f16 solves through inverted diagonal blocks are rarely 1 ULP off "
    "(cause not identified). bf16 batch norm is bit-exact (computed in f32 like XLA). f16 batch norm is expanded in f16 "
    "and is bit-exact for inference and for short 2-D reductions (<= 32 elements per feature); XLA CPU splits longer "
    "f16 sums in an order not reproduced (up to a few % relative).",
    "Quantized types (`!quant.uniform`): ops marked `compute` in `QUANTIZED_MODES` run as dequantize -> float op -> "
    "quantize (the `lower-quantized` pass, the spec's dequantize_op_quantize); data-movement ops run on the storage "
    "integers; region ops (reduce, sort, scatter, ...) requantize after every op of their computation, as the spec's "
    "formula applies per op. Per-axis quantization through compute ops follows the same formula (the spec only "
    "defines per-tensor there). Checked against the spec's formulas and the 125 quantized corpus programs: XLA's CPU "
    "client does not compile quantized StableHLO.",
]

SPEC_CHECKED = {UniformQuantizeOp, UniformDequantizeOp, CollectiveBroadcastOp, CollectiveReduceOp, AsyncStartOp,
                AsyncDoneOp, DynamicPadOp, DynamicGatherOp, DynamicConvOp}
"""Ops XLA's CPU client cannot run: tested against the StableHLO spec (and the corpus) instead."""

# Ops that are structure rather than computation: they have no kernel of their
# own because the executor handles them while lowering.
STRUCTURAL = {ReturnOp: "region terminator, lowered to the region function's return"}


def family_rows():
    """(family name, [(op name, status)], [builder method names]) for every op family."""
    for family in FAMILIES:
        short = family.__name__.rsplit(".", 1)[-1]
        ops = []
        for op in family.OPS:
            if op in STRUCTURAL:
                status = STRUCTURAL[op]
            else:
                checked = "the StableHLO spec" if op in SPEC_CHECKED else "jax/XLA"
                status = f"executes, tested vs {checked}" if op in KERNELS else "NO KERNEL"
                if op in NOTES:
                    status += "; " + NOTES[op]
            ops.append((op.name, status))
        methods = []
        for name, obj in vars(family).items():
            if isinstance(obj, type) and name.endswith("Builder") and obj.__module__ == family.__name__:
                methods = sorted(n for n, f in vars(obj).items() if callable(f) and not n.startswith("_"))
        yield short, ops, methods


def markdown() -> str:
    """The op table of docs/operations.md: one row per op, grouped by family."""
    out = ["| family | op | status |", "|---|---|---|"]
    builders = []
    for family, ops, methods in family_rows():
        for name, status in ops:
            out.append(f"| {family} | `{name}` | {status} |")
        if methods:
            builders.append(f"- **{family}**: {', '.join(f'`{m}`' for m in methods)}")
    out.append("")
    out.append("Builder methods by family (besides the core `parameter`, `constant`, `build`):")
    out.extend(builders)
    out.append("")
    out.append("General deviations:")
    out.extend(f"- {n}" for n in GENERAL_NOTES)
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown())
