"""Property tests: random element-wise programs give bit-identical results before and after every pass.

Programs are chains of unary, binary, compare/select and clamp ops over
parameters and constants of random shapes, element types and broadcast
patterns (scalars, ``broadcast_dimensions``, degenerate dimensions and their
composition), plus transposes and reshapes. Each program runs on the
executor before and after each pass and after the full pipeline.
Set ``PASSES_EXAMPLES`` for a longer run.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lowering
import passes
from xla_dialect import XlaBuilder

EXAMPLES = int(os.environ.get("PASSES_EXAMPLES", 70))
"""Programs per run; raise it (PASSES_EXAMPLES=1000) for a longer search."""

PIPELINES = [
    "canonicalize-broadcasts",
    "simplify",
    "fold-constants",
    "cse",
    "dce",
    "canonicalize-broadcasts,simplify,fold-constants,cse,dce",
    "assign-layouts{target=cpu}",
    "assign-layouts{target=tpu}",
    "canonicalize-broadcasts,assign-layouts{target=tpu},tile-layouts,cse,dce",
]

DTYPES = {
    "f32": np.float32, "f64": np.float64, "bf16": "bfloat16", "f16": np.float16,
    "s32": np.int32, "u8": np.uint8, "pred": np.bool_,
}
FLOAT_UNARY = ["neg", "abs", "exp", "tanh", "sqrt", "floor", "sign"]
INT_UNARY = ["neg", "abs", "not_"]
ARITH = ["add", "sub", "mul", "max", "min"]
LOGIC = ["and_", "or_", "xor"]
COMPARE = ["lt", "eq", "ge", "ne"]


def _dtype(name):
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if name == "bf16" else np.dtype(DTYPES[name])


def _random_array(rng, dtype_name, shape):
    dtype = _dtype(dtype_name)
    if dtype_name == "pred":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(max(info.min, -50), min(info.max, 50) + 1, shape)
        special = rng.random(shape) < 0.1
        values = np.where(special, rng.choice([info.min, info.max, 0], shape), values)
        return values.astype(dtype)
    values = rng.standard_normal(shape) * 3
    specials = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0])
    pick = rng.random(shape) < 0.2
    values = np.where(pick, rng.choice(specials, shape), values)
    return values.astype(dtype)


@st.composite
def programs(draw):
    """(module, args): a random element-wise program with implicit broadcasts."""
    rank = draw(st.integers(0, 3))
    full = tuple(draw(st.sampled_from([1, 2, 3, 4, 5, 0] if i == 0 else [1, 2, 3, 4])) for i in range(rank))
    dtype_name = draw(st.sampled_from(list(DTYPES)))
    kind = "pred" if dtype_name == "pred" else ("int" if _dtype(dtype_name).kind in "iu" else "float")
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)

    b = XlaBuilder("random", default_layouts=draw(st.booleans()))
    values = []  # (XlaOp, kept dims of `full`)
    args = []
    n_params = draw(st.integers(1, 3))
    for i in range(n_params):
        dims = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), max_size=rank)))) if rank and i else tuple(range(rank))
        shape = tuple(full[d] if draw(st.booleans()) or i == 0 else 1 for d in dims)
        x = b.parameter(i, f"{dtype_name}[{','.join(map(str, shape))}]")
        values.append((x, dims))
        args.append(_random_array(rng, dtype_name, shape))
    # Constants that the simplifier and folder care about.
    for c in draw(st.lists(st.sampled_from(["zero", "negzero", "one", "allones"]), max_size=2)):
        scalar = {"zero": 0, "negzero": -0.0, "one": 1, "allones": -1}[c]
        if kind == "pred":
            scalar = c != "zero"
        values.append((b.constant(np.asarray(scalar).astype(_dtype(dtype_name))), ()))

    def combine(u, du, v, dv):
        """Broadcast-compatible operands: returns (broadcast_dimensions, result dims) or None."""
        small, large = (dv, du) if len(dv) <= len(du) else (du, dv)
        if not set(small) <= set(large) or (len(small) == len(large) and small != large):
            return None
        bdims = [large.index(d) for d in small] if len(small) != len(large) and small else []
        return bdims, large

    steps = draw(st.integers(1, 6))
    for _ in range(steps):
        op_kind = draw(st.sampled_from(["unary", "binary", "binary", "select", "clamp", "shape"]))
        (u, du) = values[draw(st.integers(0, len(values) - 1))]
        if op_kind == "unary":
            names = FLOAT_UNARY if kind == "float" else (INT_UNARY if kind == "int" else ["not_"])
            if kind == "int" and _dtype(dtype_name).kind == "u":
                names = ["not_", "neg"]
            values.append((getattr(b, draw(st.sampled_from(names)))(u), du))
        elif op_kind in ("binary", "select"):
            (v, dv) = values[draw(st.integers(0, len(values) - 1))]
            plan = combine(u, du, v, dv)
            if plan is None:
                continue
            bdims, dims = plan
            if op_kind == "binary":
                names = ARITH if kind != "pred" else LOGIC + ["max", "min"]
                if kind == "int":
                    names = names + LOGIC
                values.append((getattr(b, draw(st.sampled_from(names)))(u, v, bdims), dims))
            else:
                pred = getattr(b, draw(st.sampled_from(COMPARE)))(u, v, bdims)
                both = b.add(u, v, bdims) if kind != "pred" else b.or_(u, v, bdims)
                other = b.neg(both) if kind == "float" else b.not_(both) if kind != "float" else both
                values.append((b.select(pred, both, other), dims))
        elif op_kind == "clamp" and kind != "pred":
            lo = b.constant(np.asarray(-2).astype(_dtype(dtype_name)))
            hi = b.constant(np.asarray(3).astype(_dtype(dtype_name)))
            values.append((b.clamp(lo, u, hi), du))
        elif op_kind == "shape" and len(du) >= 2:
            t = b.transpose(b.transpose(u, [1, 0] + list(range(2, len(du)))), [1, 0] + list(range(2, len(du))))
            values.append((b.reshape(b.reshape(t, [int(np.prod(u.dims))]), list(u.dims)), du))
    outputs = [values[-1][0]]
    if len(values) > n_params + 1:
        outputs.append(values[draw(st.integers(0, len(values) - 2))][0])
    return b.build(outputs), args


def _bits(array):
    array = np.ascontiguousarray(array)
    return array.view(np.uint8) if array.dtype.itemsize else array


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_every_pass_preserves_results(program):
    # Each op's literal IEEE semantics: XLA's pattern-based float rewrites (x + 0 -> x keeps -0) and FMA
    # contraction may match differently once layouts/tiling have rewritten the constants.
    module, args = program
    ieee = {"xla_rewrites": False, "fma_contraction": False}
    before = lowering.compile(module, **ieee)(*args)
    for pipeline in PIPELINES:
        rewritten = module.clone()
        passes.run(rewritten, pipeline)
        after = lowering.compile(rewritten, **ieee)(*args)
        assert len(after) == len(before)
        for i, (x, y) in enumerate(zip(before, after)):
            assert x.shape == y.shape and x.dtype == y.dtype, (pipeline, i)
            np.testing.assert_array_equal(_bits(x), _bits(y), err_msg=f"{pipeline}, result {i}\n{module}")


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_canonicalized_programs_have_no_implicit_broadcasts(program):
    from xla_dialect.ops import elementwise as ew

    module, _ = program
    passes.run(module, "canonicalize-broadcasts")
    for op in module.walk():
        if isinstance(op, (ew.BinaryElementwiseOp, ew.CompareOp, ew.SelectOp, ew.ClampOp)):
            shape = op.results[0].type.get_shape()
            assert "broadcast_dimensions" not in op.properties
            assert all(o.type.get_shape() == shape for o in op.operands)
