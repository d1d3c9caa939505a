"""Differential fuzzing against jax.jit: random programs, compared bit for bit in every configuration.

Each example is a small random JAX program -- a chain of element-wise ops over one to three inputs and an
optional scalar one (arithmetic, transcendental functions, comparisons and selects, conversions through other
float types, constants, row statistics broadcast back over their rows, sums and differences of two products
whose factors may be the scalar or constants, dots, whole-array statistics, softmax and logsumexp rows, cubes,
clips, cumulative sums; data movement: rolls, reverses, sorts and their gathers, cumulative maxima, scatters with
repeated indices, dynamic slices and updates at a computed index, conds), optionally the body of a ``fori_loop`` (also nested in another), a ``while_loop`` or a ``lax.scan`` (or, straight-line, returning some intermediate
values too: several results, a product XLA returns is not contracted, compiled code hands back several buffers) -- run
on inputs full of special values (NaNs with payloads and signs, infinities, signed zeros, subnormals,
the largest finite values) -- or an integer program (every signed and unsigned width: wrapping arithmetic,
division and remainder by zero, shifts past the width, bit counts, reductions, conversions through floats of
out-of-range values, on the types' extremes) -- or a small model's training gradient (``jax.grad`` of a loss over
dense layers, layer norms, residual layers and self-attention: :func:`layer_programs`). It is run by jax.jit and by the executor in four configurations: the
interpreter (``fusion="never"``, ``loop_compilation="never"``), fused loops, compiled while loops, and
both. The executor's four results must be the same bits (NaN payloads included: one executable gives
the same bits whatever its fast paths do), and equal jax.jit's bits, NaN payloads aside (a NaN must be a
NaN; which NaN XLA returns is not claimed, see the deviations in docs/operations.md).

Programs that meet a deviation docs/operations.md documents are not generated (:func:`_documented_deviation`
names each). A failure prints a self-contained reproducer: Python source that builds the inputs from
their bits, defines the program and compares the runs.

The default run is a few examples (derandomized: the same examples in every run, reported unshrunk -- see
``QUICK``; every configuration compiles
its own numba code, a second or so per program on a cold cache); ``python -m pytest -m slow
tests/test_differential_fuzz.py`` runs a long campaign with fresh random examples (each program's reproducer
written to :data:`LAST_PROGRAM` before it runs, for a process that dies).
"""

from __future__ import annotations

import os
import re
import tempfile
import textwrap
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from helpers import sweep
import lowering
from interop import import_jax
from lowering.kernels.host import host_properties, native_bf16

QUICK = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
"""The default run reports the example it drew, not a shrunk one: in two CI runs this test failed on a drawn
example that passed when the test ran alone, and shrinking replaced it with other, deterministic failures (which
were fixed); the drawn example is what shows what differed. The long campaign shrinks."""
LONG = settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
CONFIGURATIONS = {
    "interpreter": {"fusion": "never", "loop_compilation": "never"},
    "fused": {"fusion": "always", "loop_compilation": "never"},
    "compiled loops": {"fusion": "never", "loop_compilation": "always"},
    "fused and compiled loops": {"fusion": "always", "loop_compilation": "always"},
}

# Source expressions, written as a user writes them (the reproducer shows them as they are).
UNARY = {
    "neg": "-{0}", "abs": "jnp.abs({0})", "exp": "jnp.exp({0})", "log": "jnp.log({0})",
    "sqrt": "jnp.sqrt({0})", "sin": "jnp.sin({0})", "cos": "jnp.cos({0})", "tanh": "jnp.tanh({0})",
    "floor": "jnp.floor({0})", "sign": "jnp.sign({0})", "logistic": "jax.nn.sigmoid({0})",
    "expm1": "jnp.expm1({0})", "log1p": "jnp.log1p({0})", "square": "{0} * {0}",
}
BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
    "max": "jnp.maximum({0}, {1})", "min": "jnp.minimum({0}, {1})",
}
ROW_STATISTICS = {  # a keepdims row statistic combined with its rows (XLA's broadcast of a reduction)
    "sub_max": "{0} - jnp.max({0}, axis=-1, keepdims=True)",
    "div_max": "{0} / jnp.max({0}, axis=-1, keepdims=True)",
    "min_plus": "{0} + jnp.min({0}, axis=-1, keepdims=True)",
    "mul_column": "{0} * {1}[..., :1]",
    "sub_sum": "{0} - jnp.sum({0}, axis=-1, keepdims=True)",  # (XLA's window order: lowering/kernels/tree_sum.py)
    "mul_mean": "{0} * jnp.mean({1}, axis=-1, keepdims=True)",
    "sub_column_sum": "{0} - jnp.sum({1}, axis=0, keepdims=True)",  # (columns: XLA's vector lanes over rows)
    "div_column_max": "{0} / jnp.max({1}, axis=0, keepdims=True)",
}
CONSTANTS = [2.0, -3.0, 0.5, 1e-40, -1e-45, 1e30, 3.0e38, float("inf")]
STRUCTURED = {  # (1-D form, 2-D form) of ops that keep the program's shape
    "dot": ("{0} * jnp.dot({1}, {2})", "{0} @ ({1}.T @ {2})"),
    "sum": ("{0} * jnp.sum({1})", "{0} - jnp.sum({1})"),
    "max": ("{0} / jnp.max({1})", "{0} + jnp.max({1})"),
    "softmax": ("jax.nn.softmax({0})", "jax.nn.softmax({0}, axis=-1)"),
    "logsumexp": ("{0} - jax.nn.logsumexp({1})", "{0} - jax.nn.logsumexp({1}, axis=-1, keepdims=True)"),
    "cube": ("{0} ** 3", "{0} ** 3"),
    "clip": ("jnp.clip({0}, -1.5, 2.0)", "jnp.clip({0}, -1.5, 2.0)"),
    "cumsum": ("jnp.cumsum({0})", "jnp.cumsum({0}, axis=-1)"),
}


@dataclass
class Program:
    """A random program: inputs, statements (``v{k} = expression``), the returned value, an optional loop."""

    dtype: str
    shape: tuple[int, ...]
    inputs: list[np.ndarray]
    statements: list[tuple[str, str]] = field(default_factory=list)  # (kind, expression)
    loop_trips: int = 0  # > 0: the statements are a loop body over the first input (fori_loop, while_loop, scan)
    while_loop: bool = False  # the loop a while_loop that also stops at a NaN (a condition reading the array)
    scan: bool = False  # the loop a lax.scan returning its carry and each trip's value stacked
    also_returned: tuple[int, ...] = ()  # straight-line: earlier statements returned too (a tuple of results)
    nested: int = 0  # > 0 (a fori_loop): the statements are the body of an inner fori_loop of this many trips
    x64: bool = True  # jax's 64-bit mode (False: jax's default, which writes Python constants as 32-bit literals)

    def source(self) -> str:
        """The program as Python source defining ``fn``."""
        names = [f"x{i}" for i in range(len(self.inputs))]
        body = [f"v{k} = {expression}" for k, (_, expression) in enumerate(self.statements)]
        result = f"v{len(self.statements) - 1}" if self.statements else "x0"
        if not self.loop_trips:
            returned = ", ".join([result, *(f"v{k}" for k in self.also_returned)])
            lines = [f"def fn({', '.join(names)}):", *("    " + line for line in body), f"    return {returned}"]
            return "\n".join(lines) + "\n"
        if self.scan:
            lines = [f"def fn({', '.join(names)}):",
                     "    def body(x0, _):",
                     *("        " + line for line in body),
                     f"        return {result}.astype(x0.dtype), {result}",
                     f"    return jax.lax.scan(body, x0, None, length={self.loop_trips})",
                     ]
            return "\n".join(lines) + "\n"
        if self.while_loop:
            lines = [f"def fn({', '.join(names)}):",
                     "    def body(carry):",
                     "        i, x0 = carry",
                     *("        " + line for line in body),
                     f"        return i + 1, {result}.astype(x0.dtype)",
                     "    def more(carry):",
                     f"        return (carry[0] < {self.loop_trips}) & ~jnp.any(carry[1] != carry[1])",
                     "    return jax.lax.while_loop(more, body, (0, x0))[1]"]
            return "\n".join(lines) + "\n"
        if self.nested:  # (a loop in a loop: the inner one's body the statements, the outer one's the inner loop)
            lines = [f"def fn({', '.join(names)}):",
                     "    def inner(j, x0):",
                     *("        " + line for line in body),
                     f"        return {result}.astype(x0.dtype)",
                     "    def body(i, x0):",
                     f"        return jax.lax.fori_loop(0, {self.nested}, inner, x0)",
                     f"    return jax.lax.fori_loop(0, {self.loop_trips}, body, x0)"]
            return "\n".join(lines) + "\n"
        lines = [f"def fn({', '.join(names)}):",
                 "    def body(i, x0):",
                 *("        " + line for line in body),
                 f"        return {result}.astype(x0.dtype)",
                 f"    return jax.lax.fori_loop(0, {self.loop_trips}, body, x0)"]
        return "\n".join(lines) + "\n"

    def function(self):
        """``fn``, compiled from :meth:`source` (a loop body closes over the other inputs)."""
        scope = {"jax": jax, "jnp": jnp, "np": np, "ml_dtypes": ml_dtypes}
        exec(self.source(), scope)  # noqa: S102 - the generated program (shown by reproducer())
        return scope["fn"]

    def reproducer(self, detail: str) -> str:
        """Self-contained Python source that rebuilds the inputs from their bits and reruns the comparison."""
        dtype = self.dtype
        lines = ["import jax, jax.numpy as jnp, ml_dtypes, numpy as np", "import lowering",
                 "from interop import import_jax", f"jax.config.update('jax_enable_x64', {self.x64})"]
        for i, x in enumerate(self.inputs):
            bits = x.view(f"u{x.dtype.itemsize}")
            lines.append(f"x{i} = np.array({bits.ravel().tolist()}, np.uint{8 * x.dtype.itemsize})"
                         f".view({_dtype_expression(dtype)}).reshape({x.shape})")
        lines.append(self.source().rstrip())
        args = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        lines += [f"expected = [np.asarray(v) for v in jax.tree.leaves(jax.jit(fn)({args}))]",
                  f"module = import_jax(fn, {args})"]
        for name, options in CONFIGURATIONS.items():
            lines.append(f"print({name!r}, lowering.compile(module, **{options!r})({args}))")
        lines.append("print('jax.jit', expected)")
        return f"{detail}\n\n# reproducer\n" + "\n".join(lines) + "\n"


def _dtype_expression(dtype: str) -> str:
    return "ml_dtypes.bfloat16" if dtype == "bfloat16" else f"np.{dtype}"

MOVEMENT = {  # data movement and structured ops along the last axis, shape kept ({n}: its length, {i}: an index)
    "roll": "jnp.roll({0}, 1, axis=-1)",
    "reverse": "{0}[..., ::-1]",
    "sort": "jnp.sort({0}, axis=-1)",
    "take_sorted": "jnp.take_along_axis({0}, jnp.argsort({1}, axis=-1), axis=-1)",
    "cummax": "jax.lax.cummax({0}, axis={0}.ndim - 1)",
    "scatter_add": "{0}.at[..., jnp.arange({n}) // 2].add({1})",
    "scatter_max": "{0}.at[..., jnp.arange({n}) % 2].max({1})",
    "update": "jax.lax.dynamic_update_slice_in_dim({0}, {1}[..., :1] * 2, {i}, axis=-1)",
    "slice": "{0} * jax.lax.dynamic_slice_in_dim({1}, {i}, 1, axis=-1)",
    "cond": "jax.lax.cond(jnp.sum({1}) > 0, lambda a: a * 2, lambda a: a - 1, {0})",
}
"""Shape-keeping ops that move or select data (slices and concatenation, reverse, sort and its permutation gather,
a cumulative max, scatters with repeated indices, dynamic slices and updates at a computed index, a cond): what
the compiled loops and segments carry besides element-wise code."""

# -- inputs -------------------------------------------------------------------------------------------------


def _specials(dtype) -> list[float]:
    info = ml_dtypes.finfo(dtype)
    tiny = float(info.tiny)
    return [0.0, -0.0, float("inf"), float("-inf"), tiny / 3, -tiny / 7, tiny, float(info.max), -float(info.max),
            1.0, -1.0, 0.5, 2.0, 88.75, -100.0, 1e-3]


@st.composite
def arrays(draw, dtype_name: str, shape: tuple[int, ...]):
    """An array of ``shape`` whose elements mix special values, NaNs with payloads and random finite ones (each
    element drawn from hypothesis; past :data:`DRAWN_ELEMENTS`, from a NumPy generator seeded by one draw, the same
    mix: hypothesis's buffer holds a few thousand draws)."""
    dtype = DTYPES[dtype_name]
    size = int(np.prod(shape))
    specials = _specials(dtype)
    values = np.empty(size, dtype)
    bits = values.view(f"u{values.dtype.itemsize}")
    nbits = 8 * values.dtype.itemsize
    mantissa = {16: 10 if dtype_name == "float16" else 7, 32: 23, 64: 52}[nbits]
    exponent_mask = ((1 << (nbits - 1 - mantissa)) - 1) << mantissa
    if size > DRAWN_ELEMENTS:
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        integers = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
        pick = lambda options: options[int(rng.integers(len(options)))]  # noqa: E731
        uniform = lambda: float(rng.uniform(-1.0, 1.0))  # noqa: E731
    else:
        integers = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
        pick = lambda options: draw(st.sampled_from(options))  # noqa: E731
        uniform = lambda: draw(st.floats(-1.0, 1.0, allow_nan=False))  # noqa: E731
    for k in range(size):
        kind = integers(0, 9)
        if kind <= 3:
            values[k] = dtype(pick(specials))
        elif kind == 4:  # a NaN with a random payload and sign (quiet or signalling)
            payload = integers(1, (1 << mantissa) - 1)
            sign = integers(0, 1) << (nbits - 1)
            bits[k] = np.array(sign | exponent_mask | payload, dtype=bits.dtype)
        else:
            values[k] = dtype(uniform() * pick([1e-3, 1.0, 10.0, 1e4]))
    return values.reshape(shape)


DRAWN_ELEMENTS = 120
"""The largest array whose elements hypothesis draws one by one (:func:`arrays`)."""


def _constant(draw, dtype: str) -> str:
    value = draw(st.sampled_from(CONSTANTS))
    literal = repr(value) if np.isfinite(value) else f"float('{value}')"
    return f"{_dtype_expression(dtype)}({literal})"


def _factor(draw, names: list[str], dtype: str) -> str:
    """The second factor of a product: a value, a scalar input or a constant."""
    return _constant(draw, dtype) if draw(st.integers(0, 3)) == 0 else draw(st.sampled_from(names))


WIDE_SHAPES = [(38,), (40,), (64,), (100,), (3, 64), (4, 80), (8, 128)]
"""Shapes whose fused loops LLVM vectorizes (XLA's loop emitter: 38 elements in one dimension, an innermost 64:
passes/fma_contraction.py), where contractions and reductions follow other rules than in unrolled scalar code."""


def _shape(draw) -> tuple[int, ...]:
    """A program's shape: a row of 1-24 elements or 1-5 such rows, or (one in six) a wide one (:data:`WIDE_SHAPES`)."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(WIDE_SHAPES))
    rank = draw(st.integers(1, 2))
    return (draw(st.integers(1, 24)),) if rank == 1 else (draw(st.integers(1, 5)), draw(st.integers(1, 24)))


def _maybe_in_a_loop(draw, program: Program, loops: bool | None) -> Program:
    """``program`` as the body of a ``fori_loop`` of 1-4 trips (a third of them a ``while_loop`` whose condition
    also reads the array, a sixth a ``lax.scan`` that also stacks each trip's value, a sixth the body of a
    ``fori_loop`` of 2-3 trips inside the ``fori_loop``), or straight-line (``loops``: True, False or either)."""
    use_loop = draw(st.booleans()) if loops is None else loops
    program.loop_trips = draw(st.integers(1, 4)) if use_loop else 0
    form = draw(st.integers(0, 5)) if use_loop else None
    program.while_loop = form in (0, 1)
    program.scan = form == 2
    if form == 3:  # (a sixth: nested fori_loops, the inner one of 2-3 trips)
        program.nested = draw(st.integers(2, 3))
    earlier = len(program.statements) - 1
    if not use_loop and earlier and draw(st.booleans()):
        # Intermediate values returned too: a value returned and read by later ops stays in XLA's fusions'
        # outputs (a product it returns is not contracted), and compiled code hands back several buffers at once.
        program.also_returned = tuple(draw(st.lists(st.integers(0, earlier - 1), min_size=1, max_size=3,
                                                    unique=True)))
    return program


@st.composite
def programs(draw, loops: bool | None = None, x64: bool = True):
    """A random :class:`Program` (``loops``: force a loop (True), none (False) or either (None); ``x64``: in jax's
    64-bit mode, or in its default 32-bit mode, without f64 values)."""
    dtypes = DTYPES if x64 else {name: t for name, t in DTYPES.items() if name != "float64"}
    dtype = draw(st.sampled_from(sorted(dtypes)))
    shape = _shape(draw)
    count = draw(st.integers(1, 3))
    inputs = [draw(arrays(dtype, shape)) for _ in range(count)]
    values = [f"x{i}" for i in range(count)]
    scalars = []
    if draw(st.booleans()):  # a scalar input, read by products (in a loop: a value the loop carries unchanged)
        scalars.append(f"x{count}")
        inputs.append(draw(arrays(dtype, ())))
    program = Program(dtype, shape, inputs, x64=x64)
    for k in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "constant", "select", "row",
                                     "convert", "products", "structured", "movement"]))
        pick = st.sampled_from(values)
        if kind == "unary":
            name = draw(st.sampled_from(sorted(UNARY)))
            expression = UNARY[name].format(draw(pick))
        elif kind == "binary":
            name = draw(st.sampled_from(sorted(BINARY)))
            expression = BINARY[name].format(draw(pick), draw(pick))
        elif kind == "constant":
            name = draw(st.sampled_from(sorted(BINARY)))
            constant = _constant(draw, dtype)
            operands = [draw(pick), constant]
            if draw(st.booleans()):
                operands.reverse()
            expression = BINARY[name].format(*operands)
        elif kind == "select" and draw(st.integers(0, 2)) == 0:
            # a clamp by a constant written twice, which jax writes once per use and XLA's CSE makes one:
            # LLVM's max/min (xla_dialect/cse.py); a Python float (weakly typed) or a typed scalar
            p, c = draw(pick), _constant(draw, dtype)
            if draw(st.booleans()) and "float('" not in c:
                c = c[c.index("(") + 1:-1]
            relation = draw(st.sampled_from([">", "<"]))
            arms = [p, c] if draw(st.booleans()) else [c, p]
            compared = [p, c] if draw(st.booleans()) else [c, p]
            expression = f"jnp.where({compared[0]} {relation} {compared[1]}, {arms[0]}, {arms[1]})"
        elif kind == "select":
            p, q, a, b = (draw(pick) for _ in range(4))
            expression = f"jnp.where({p} > {q}, {a}, {b})"
        elif kind == "structured":  # dots, whole-array statistics, softmax rows, powers, clips
            name = draw(st.sampled_from(sorted(STRUCTURED)))
            expression = STRUCTURED[name][len(shape) - 1].format(draw(pick), draw(pick), draw(pick))
        elif kind == "products":  # two products added: which one LLVM fuses (passes/fma_contraction.py)
            factors = [draw(pick), _factor(draw, values + scalars, dtype), draw(pick),
                       _factor(draw, values + scalars, dtype)]
            sign = draw(st.sampled_from(["+", "-"]))
            expression = f"{factors[0]} * {factors[1]} {sign} {factors[2]} * {factors[3]}"
        elif kind == "row":
            name = draw(st.sampled_from(sorted(ROW_STATISTICS)))
            expression = ROW_STATISTICS[name].format(draw(pick), draw(pick))
        elif kind == "movement":
            name = draw(st.sampled_from(sorted(MOVEMENT)))
            # (the index: where NaN or the largest value of a value's first row is, modulo the length)
            index = f"jnp.argmax({draw(pick)}.reshape(-1)[:{shape[-1]}]) % {shape[-1]}"
            expression = MOVEMENT[name].format(draw(pick), draw(pick), n=shape[-1], i=index)
        else:
            other = draw(st.sampled_from(sorted(set(dtypes) - {dtype})))
            expression = f"{draw(pick)}.astype(jnp.{other}).astype(jnp.{dtype})"
        program.statements.append((kind, expression))
        values.append(f"v{k}")
    return _maybe_in_a_loop(draw, program, loops)


INTEGER_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
INTEGER_UNARY = {
    "neg": "-{0}", "abs": "jnp.abs({0})", "not": "~{0}", "popcount": "jax.lax.population_count({0})",
    "clz": "jax.lax.clz({0})", "sign": "jnp.sign({0})", "square": "{0} * {0}",
}
INTEGER_BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "max": "jnp.maximum({0}, {1})",
    "min": "jnp.minimum({0}, {1})", "and": "{0} & {1}", "or": "{0} | {1}", "xor": "{0} ^ {1}",
    "div": "jax.lax.div({0}, {1})", "rem": "jax.lax.rem({0}, {1})", "floordiv": "{0} // {1}", "mod": "{0} % {1}",
    "shl": "jax.lax.shift_left({0}, {1})", "shr": "jax.lax.shift_right_logical({0}, {1})",
    "sar": "jax.lax.shift_right_arithmetic({0}, {1})",
}
_DIVISIONS = ("div", "rem", "floordiv", "mod")
"""The divisions of :data:`INTEGER_BINARY`."""


def _folded_by_xla(name: str, operands: list[str], folded: set[str]) -> bool:
    """Whether XLA's simplifier makes ``INTEGER_BINARY[name]`` of ``operands`` a constant (conservatively: every
    operand a constant or such a value, ``x - x``, ``x ^ x``, ``x * 0``, ``x & 0``)."""
    constant = [o in folded or o.startswith("np.") for o in operands]
    if all(constant):
        return True
    if name in ("sub", "xor") and operands[0] == operands[1]:
        return True
    zero = any(re.fullmatch(r"np\.\w+\(0\)", o) for o in operands)
    return name in ("mul", "and") and zero
INTEGER_ROWS = {  # reductions over the last axis (wrapping sums, extrema, products) combined with their rows
    "sum": "{0} + jnp.sum({0}, axis=-1, keepdims=True, dtype={0}.dtype)",
    "cumsum": "jnp.cumsum({0}, axis=-1, dtype={0}.dtype) - {1}",
    "sort": "jnp.sort({0}, axis=-1) ^ {1}",
    "scatter_add": "{0}.at[..., jnp.arange({0}.shape[-1]) // 2].add({1})",
    "max": "{0} - jnp.max({0}, axis=-1, keepdims=True)",
    "min": "jnp.minimum({0}, jnp.min({1}, axis=-1, keepdims=True))",
    "prod": "jnp.prod({0}, axis=-1, keepdims=True, dtype={0}.dtype) ^ {1}",
}


@st.composite
def integer_arrays(draw, dtype_name: str, shape: tuple[int, ...]):
    """An integer array of ``shape``: the type's extremes and their neighbours, 0, +-1, shift counts around the
    width, and random values of the whole range."""
    info = np.iinfo(dtype_name)
    bits = info.bits
    specials = sorted({int(v) for v in (info.min, info.min + 1, info.max, info.max - 1, 0, 1, -1, 2, 7,
                                        bits - 1, bits, bits + 1, -bits, 100) if info.min <= v <= info.max})
    size = int(np.prod(shape))
    if size > DRAWN_ELEMENTS:  # (as arrays(): a NumPy generator seeded by one draw)
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        values = [specials[int(rng.integers(len(specials)))] if rng.integers(3) < 2
                  else int(rng.integers(int(info.min), int(info.max), endpoint=True, dtype=np.dtype(dtype_name)))
                  for _ in range(size)]
    else:
        values = [draw(st.sampled_from(specials)) if draw(st.integers(0, 2)) < 2
                  else draw(st.integers(int(info.min), int(info.max))) for _ in range(size)]
    return np.array(values, dtype_name).reshape(shape)


@st.composite
def integer_programs(draw, loops: bool | None = None):
    """A random integer :class:`Program`: wrapping arithmetic, division and remainder by zero and of the minimum
    by -1, shifts by counts past the width, bit counts, extrema, selects, reductions, conversions through floats
    (out-of-range values) and other integer types (``loops`` as for :func:`programs`)."""
    dtype = draw(st.sampled_from(INTEGER_DTYPES))
    shape = _shape(draw)
    count = draw(st.integers(1, 3))
    inputs = [draw(integer_arrays(dtype, shape)) for _ in range(count)]
    program = Program(dtype, shape, inputs)
    values = [f"x{i}" for i in range(count)]
    info = np.iinfo(dtype)
    folded: set[str] = set()  # values XLA's simplifier makes constants (x - x, x * 0, ...): _folded_by_xla
    for k in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "constant", "select", "row", "convert"]))
        pick = st.sampled_from(values)
        operands: list[str] = []
        if kind == "unary":
            operands = [draw(pick)]
            expression = INTEGER_UNARY[draw(st.sampled_from(sorted(INTEGER_UNARY)))].format(*operands)
        elif kind in ("binary", "constant"):
            name = draw(st.sampled_from(sorted(INTEGER_BINARY)))
            if kind == "binary":
                operands = [draw(pick), draw(pick)]
            else:
                value = draw(st.sampled_from([v for v in (0, 1, -1, 3, info.bits, int(info.min), int(info.max))
                                              if info.min <= v <= info.max]))
                operands = [draw(pick), f"np.{dtype}({value})"]
                if draw(st.booleans()):
                    operands.reverse()
            if name in _DIVISIONS and all(o in folded or o.startswith("np.") for o in operands):
                # XLA's constant folder divides two constants itself, and dies of SIGFPE on a zero divisor (long
                # campaign, session 20: jax.lax.div(np.uint64(0), x - x), jax.lax.rem(x * 0, np.uint8(0)) kill
                # jax.jit's compile): not generated
                name = "add"
            expression = INTEGER_BINARY[name].format(*operands)
            if _folded_by_xla(name, operands, folded):
                folded.add(f"v{k}")
        elif kind == "select":
            p, q, a, b = (draw(pick) for _ in range(4))
            operands = [p, q, a, b]
            relation = draw(st.sampled_from([">", "<", "==", ">="]))
            expression = f"jnp.where({p} {relation} {q}, {a}, {b})"
        elif kind == "row":
            operands = [draw(pick), draw(pick)]
            expression = INTEGER_ROWS[draw(st.sampled_from(sorted(INTEGER_ROWS)))].format(*operands)
        else:
            other = draw(st.sampled_from(["float16", "bfloat16", "float32", "float64", *INTEGER_DTYPES]))
            operands = [draw(pick)]
            expression = f"{operands[0]}.astype(jnp.{other}).astype(jnp.{dtype})"
        if kind not in ("binary", "constant") and operands and all(o in folded for o in operands):
            folded.add(f"v{k}")
        program.statements.append((kind, expression))
        values.append(f"v{k}")
    return _maybe_in_a_loop(draw, program, loops)


# -- documented deviations ------------------------------------------------------------------------------------


_ROUND_TRIP = re.compile(r"^(\w+)\.astype\(jnp\.(\w+)\)\.astype\(jnp\.\w+\)$")
_SELECT = re.compile(r"^jnp\.where\((\w+) > (\w+), (\w+), (\w+)\)$")
_SIGN_MOVE = re.compile(r"^(?:-(\w+)|jnp\.abs\((\w+)\))$")
_SUMMED = re.compile(r"jnp\.(?:sum|mean)\((\w+),")
_HOST_BF16 = native_bf16()


def _preserves_values(dtype: str, other: str) -> bool:
    """Whether every ``dtype`` value converts to ``other`` and back unchanged (NaN payloads aside)."""
    narrow, wide = ml_dtypes.finfo(DTYPES[dtype]), ml_dtypes.finfo(DTYPES[other])
    return (wide.nmant >= narrow.nmant and wide.maxexp >= narrow.maxexp
            and wide.minexp - wide.nmant <= narrow.minexp - narrow.nmant)


def _documented_deviation(program: Program) -> str | None:
    """The documented deviation (docs/operations.md) ``program`` meets, if any (such programs are not generated)."""
    if program.dtype in INTEGER_DTYPES:
        return None  # (the documented deviations are of float arithmetic)
    statements = [expression for _, expression in program.statements]
    same = {f"x{i}": f"x{i}" for i in range(len(program.inputs))}  # each value's origin through exact round trips
    for k, expression in enumerate(statements):
        trip = _ROUND_TRIP.match(expression)
        same[f"v{k}"] = same[trip[1]] if trip and _preserves_values(program.dtype, trip[2]) else f"v{k}"
        select = _SELECT.match(expression)
        # docs/operations.md: XLA computes where(a > b, a, b) with the max instruction, which flushes a denormal
        # result: reproduced for f32/f64 (lowering.kernels.scalar.select_flush), not for bf16/f16 (XLA moves the
        # select into f32 in some fusions only), also when b is a's round trip through a wider type, which XLA
        # drops (found by the long campaign: a bf16 loop flushed).
        if select and program.dtype not in ("float32", "float64") and \
                {same[select[1]], same[select[2]]} == {same[select[3]], same[select[4]]}:
            return "where(a > b, a, b) (docs/operations.md: select -> max/min)"
    if program.dtype == "bfloat16" and any("jnp.where(" in e and "1e-40" in e for e in statements):
        # docs/operations.md: a bf16 select against a bf16 denormal constant (bf16(1e-40)) is not modelled: XLA
        # flushes the constant in where(c > x, x, c) and where(x < c, x, c), keeps it in where(x > 0, x, c)
        # (found by the long campaign, session 22, once selects by a constant were generated)
        return "a bf16 select against a denormal constant (docs/operations.md: select -> max/min)"
    if program.loop_trips and program.dtype == "bfloat16" and _HOST_BF16 and \
            any(_SELECT.match(expression) for expression in statements):
        # docs/operations.md: in a loop XLA compiles whole on a native-bf16 host, a bf16 select XLA computes in
        # f32 is rounded by the hardware conversion, which flushes a denormal (found by this test in CI on a Xeon:
        # where(x0 > x1, x0, abs(x0)) of a denormal is 0 in XLA); bf16 arithmetic ops there are reproduced.
        return "a bf16 select in a small loop (docs/operations.md: AVX512-BF16 rounding)"
    sign_move = _SIGN_MOVE.match(statements[-1]) if statements else None
    if program.while_loop and program.dtype == "bfloat16" and _HOST_BF16 and sign_move and \
            same[sign_move[1] or sign_move[2]].startswith("x"):
        # docs/operations.md: a while loop whose condition reads the array XLA compiles whole, LLVM carrying the
        # array's values in f32 registers; the bf16 abs / negation the body stores is rounded by the hardware
        # conversion, which flushes a denormal (found by the long campaign: abs of bf16 0x002b, XLA +0). Of an
        # input only: an arithmetic result is flushed by its own store, reproduced.
        return "a bf16 sign move stored by a while loop reading it (docs/operations.md: AVX512-BF16 rounding)"
    for expression in statements:
        # docs/operations.md: a sum of a product that other ops read too (XLA copies the multiply into each fusion
        # and contracts each step of the sum into an FMA), or of a square (not reproduced).
        summed = _SUMMED.search(expression)
        if summed and summed[1].startswith("v") and " * " in statements[int(summed[1][1:])]:
            return "a row sum of a product (docs/operations.md: a sum of a product)"
    return None


# -- layer gradients: the training programs people write -----------------------------------------------------

ACTIVATIONS = {"tanh": "jnp.tanh({0})", "relu": "jax.nn.relu({0})", "gelu": "jax.nn.gelu({0})", "none": "{0}"}
LAYER_WIDTHS = [4, 8, 16, 24, 32, 48, 64, 96, 128]


@dataclass
class LayerProgram(Program):
    """A small model's training gradient: ``jax.grad`` of a loss over a random stack of layers (dense layers with
    an activation, layer norms, residual dense layers, single-head self-attention over a sequence), taken with
    respect to every parameter and the data. The inputs are the parameters, then the data (``(batch, features)`` or
    ``(batch, sequence, features)``): dots with transposed and copied-out operands, sums over batch and sequence,
    softmax, as jax's gradients write them."""

    layers: list[tuple[str, str]] = field(default_factory=list)  # (line of the forward pass, its parameters' names)

    def source(self) -> str:
        names = [f"x{i}" for i in range(len(self.inputs))]
        params, data = names[:-1], names[-1]
        lines = [f"def fn({', '.join(names)}):",
                 f"    def loss({', '.join(params)}, h):",
                 *(f"        {line}" for line, _ in self.layers),
                 "        return jnp.sum(h * h) * 0.5",
                 f"    return jax.grad(loss, argnums=tuple(range({len(names)})))({', '.join(names)})"]
        return "\n".join(lines) + "\n"


@st.composite
def layer_programs(draw):
    """A random :class:`LayerProgram` (f32; values drawn from a NumPy generator seeded by one draw)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sequence = draw(st.booleans())
    # (batch 1-3 with a sequence: XLA's order of a sum over batch and sequence cut in tiles with 4 or more batch
    # indices is not identified -- docs/operations.md, large float sums)
    batch = draw(st.integers(1, 3 if sequence else 16))
    shape = (batch, draw(st.integers(1, 48)), draw(st.sampled_from(LAYER_WIDTHS))) if sequence else \
        (batch, draw(st.sampled_from(LAYER_WIDTHS)))
    width, params, layers = shape[-1], [], []

    def parameter(array_shape, scale):
        params.append((rng.standard_normal(array_shape) * scale).astype(np.float32))
        return f"x{len(params) - 1}"

    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["dense", "dense", "norm", "residual", "attention" if sequence else "dense"]))
        if kind == "dense":
            out = draw(st.sampled_from(LAYER_WIDTHS))
            w, b = parameter((width, out), width ** -0.5), parameter((out,), 0.1)
            activation = ACTIVATIONS[draw(st.sampled_from(sorted(ACTIVATIONS)))]
            layers.append((f"h = {activation.format(f'h @ {w} + {b}')}", f"{w}, {b}"))
            width = out
        elif kind == "norm":
            g, b = parameter((width,), 1.0), parameter((width,), 0.1)
            layers.append(("h = (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)"
                           f" * {g} + {b}", f"{g}, {b}"))
        elif kind == "residual":
            w, b = parameter((width, width), width ** -0.5), parameter((width,), 0.1)
            layers.append((f"h = h + jnp.tanh(h @ {w} + {b})", f"{w}, {b}"))
        else:
            q, k, v = (parameter((width, width), width ** -0.5) for _ in range(3))
            layers.append((f"h = jax.nn.softmax(jnp.einsum('btd,bsd->bts', h @ {q}, h @ {k}) * {width ** -0.5!r}, "
                           f"axis=-1) @ (h @ {v})", f"{q}, {k}, {v}"))
    data = rng.standard_normal(shape).astype(np.float32)
    return LayerProgram("float32", shape, [*params, data], layers=layers)


def _layer_orders_measured() -> bool:
    """Whether this host is one the dot and sum orders of layer gradients were measured on (AVX-512 with known cache
    sizes, at most two CPUs: lowering/kernels/eigen_dots.py, ynnpack_dots.py, ynnpack_sum.py)."""
    from lowering.kernels import eigen_dots
    from lowering.runtime.workers import usable_cpus

    return eigen_dots.measured_eigen_host() and usable_cpus() <= eigen_dots.MEASURED_CPUS


# -- running and comparing ------------------------------------------------------------------------------------


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fV" else a


def _is_nan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a.astype(np.float64))


def _shown(a: np.ndarray, where: np.ndarray) -> str:
    """The first few elements of ``a`` at flat indices ``where``, as values and bits (NaNs differ in bits)."""
    picked = a.ravel()[where[:4]]
    return f"{picked.tolist()} (bits {[hex(int(b)) for b in _bits(picked)]})"


def _compare(program: Program) -> None:
    with jax.enable_x64(program.x64):
        _compare_in_jaxs_mode(program)


def _compare_in_jaxs_mode(program: Program) -> None:
    fn = program.function()
    args = [np.asarray(x) for x in program.inputs]
    expected = [np.asarray(v) for v in jax.tree.leaves(jax.jit(fn)(*args))]
    module = import_jax(fn, *args)
    results = {}
    for name, options in CONFIGURATIONS.items():
        results[name] = [np.asarray(v) for v in lowering.compile(module, **options)(*args)]
    reference = results["interpreter"]
    assert len(reference) == len(expected)
    for name, outputs in results.items():
        for index, (got, ref) in enumerate(zip(outputs, reference, strict=True)):
            if got.dtype != ref.dtype or got.shape != ref.shape or not np.array_equal(_bits(got), _bits(ref)):
                differ = np.flatnonzero(_bits(got).ravel() != _bits(ref).ravel())
                pytest.fail(program.reproducer(
                    f"the executor's {name!r} and 'interpreter' configurations differ in result {index} at "
                    f"{differ[:8].tolist()}: {_shown(got, differ)} vs {_shown(ref, differ)}"))
    for index, (ref, theirs) in enumerate(zip(reference, expected)):
        same = (_bits(ref) == _bits(theirs)) | (_is_nan(ref) & _is_nan(theirs))
        if not same.all():
            differ = np.flatnonzero(~same.ravel())
            pytest.fail(program.reproducer(
                f"the executor and jax.jit differ in result {index} at {differ[:8].tolist()} of {same.size}: "
                f"{_shown(ref, differ)} vs {_shown(theirs, differ)}"))


def _check(program: Program) -> None:
    assume(_documented_deviation(program) is None)
    _compare(program)


@QUICK
@given(programs(loops=False))
def test_element_wise_programs(program):
    _check(program)


@QUICK
@given(programs(loops=True))
def test_loop_programs(program):
    _check(program)


@QUICK
@given(integer_programs())
def test_integer_programs(program):
    _check(program)


@QUICK
@given(programs(x64=False))
def test_programs_in_jaxs_32_bit_mode(program):
    """jax's default mode (no ``jax_enable_x64``), which users run in: jax writes a Python constant as a 32-bit
    literal where the 64-bit mode converts it (XLA's simplifier and LLVM then see other programs: a select by
    ``1e-40`` ties otherwise, ``test_selects_by_a_denormal_constant_tie_to_the_false_arm_as_xla``)."""
    _check(program)


@pytest.mark.skipif(not _layer_orders_measured(), reason="the dot and sum orders were measured on AVX-512 hosts "
                    "with known cache sizes and at most two CPUs")
@settings(QUICK, max_examples=1)  # (a gradient compiles many kernels: 1-30 s each on a cold cache)
@given(layer_programs())
def test_layer_gradients(program):
    _check(program)


LAST_PROGRAM = os.environ.get("XLA_DIALECT_FUZZ_LAST",
                              os.path.join(tempfile.gettempdir(), "xla_dialect_fuzz_last_program.py"))
"""Where the long campaign writes each program's reproducer before running it: a process that dies (a signal in
XLA's compiler or in compiled code) leaves the program that killed it there."""


@pytest.mark.slow
@LONG
@given(st.one_of(programs(), programs(x64=False), integer_programs()))
def test_programs_long_campaign(program):
    if _documented_deviation(program) is None:
        with open(LAST_PROGRAM, "w") as file:
            file.write(program.reproducer("# the program running when the campaign's process died"))
    _check(program)


@pytest.mark.slow
@pytest.mark.skipif(not _layer_orders_measured(), reason="the dot and sum orders were measured on AVX-512 hosts "
                    "with known cache sizes and at most two CPUs")
@settings(LONG, max_examples=100)
@given(layer_programs())
def test_layer_gradients_long_campaign(program):
    """The layer-gradient campaign (a campaign of its own: its open findings, docs/operations.md, do not stop the
    other one)."""
    with open(LAST_PROGRAM, "w") as file:
        file.write(program.reproducer("# the program running when the campaign's process died"))
    _check(program)


def test_a_reproducer_is_self_contained():
    """The printed reproducer runs on its own and rebuilds the same inputs, bit for bit."""
    x = np.array([1.5, np.nan, -0.0, 1e-40], np.float32)
    program = Program("float32", x.shape, [x], [("unary", "jnp.exp(x0)")], loop_trips=2)
    text = program.reproducer("detail")
    scope: dict = {}
    exec(textwrap.dedent(text.split("# reproducer\n", 1)[1]).replace("print(", "(lambda *a: None)("),  # noqa: S102
         scope)
    assert np.array_equal(_bits(scope["x0"]), _bits(x))
    assert "fori_loop(0, 2" in text and "def fn(x0):" in text


def test_the_comparison_fails_on_a_wrong_result(monkeypatch):
    """A configuration that returns other bits fails the test with a reproducer (the fuzzer can fail)."""
    x = np.array([1.5, 2.0, -3.0], np.float32)
    program = Program("float32", x.shape, [x], [("unary", "jnp.sin(x0)")])
    real_compile = lowering.compile

    def wrong_when_fused(module, **options):
        executable = real_compile(module, **options)
        if options.get("fusion") != "always":
            return executable
        return lambda *args: [np.nextafter(r, np.float32(np.inf)) for r in executable(*args)]

    monkeypatch.setattr(lowering, "compile", wrong_when_fused)
    with pytest.raises(pytest.fail.Exception, match="'fused' and 'interpreter' configurations differ"):
        _compare(program)


# -- reproducers: findings of the long campaign and of issue 30, as regular tests --------------------------------


def _inputs(dtype, *columns):
    return [np.array(column, dtype) for column in columns]


@pytest.mark.parametrize("expression", ["jnp.abs(x0)", "-x0"])
def test_a_bf16_sign_move_in_a_while_loop_reading_it_is_the_documented_deviation(expression):
    """Long campaign (session 18): ``while_loop(lambda c: (c[0] < 1) & ~jnp.any(c[1] != c[1]), abs)`` of the bf16
    denormal 0x002b is +0 in XLA on a host computing bf16 natively (LLVM carries the array in f32 registers and stores it
    through the flushing conversion) and 0x002b here: documented, not generated there. The same body in a
    ``fori_loop`` (the condition does not read the array) keeps the denormal in XLA and here, on every path."""
    x0 = np.array([0x002B, 0x802B, 0x0001, 0x3F80, 0, 0x8000], np.uint16).view(ml_dtypes.bfloat16)
    in_while = Program("bfloat16", x0.shape, [x0], [("unary", expression)], loop_trips=2, while_loop=True)
    if _HOST_BF16:
        assert "sign move" in _documented_deviation(in_while)
    else:
        _compare(in_while)
    _compare(Program("bfloat16", x0.shape, [x0], [("unary", expression)], loop_trips=2))
    # (a sign move of an arithmetic result is not the deviation: the arithmetic's store flushes in both)
    of_a_product = Program("bfloat16", x0.shape, [x0], [("binary", "x0 * x0"), ("unary", "-v0")], loop_trips=2,
                           while_loop=True)
    assert _documented_deviation(of_a_product) is None
    _compare(of_a_product)


@pytest.mark.parametrize("loop", ["straight-line", "fori_loop", "while_loop"])
def test_signed_products_that_wrap_stay_wrapped_in_compiled_code(loop):
    """Long campaign (session 19): ``rem(x1 * x1, x0)`` in an int64 ``while_loop`` killed the process (SIGFPE) in
    every compiled configuration. numba marks signed integer arithmetic ``nsw`` (overflow undefined), so LLVM took
    ``x1 * x1`` to be non-negative and divided it as an unsigned value: a wrapped square by -1 trapped, by 3 gave
    the remainder of the unsigned value (``rem(3037000500 ** 2, 3)``: 0 compiled, -1 in XLA and the interpreter).
    The definitions of add, subtract and multiply compute integers with LLVM's wrapping instructions."""
    mn, mx = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    x0 = np.array([-1, 3, 0, -1, 5, 1, 2, -7, 3, -1], np.int64)
    x1 = np.array([3037000500, -3037000500, 2 ** 62 + 3, 7, 2 ** 32 + 12345, -(2 ** 40) - 1, mn, mx, 3037000500,
                   -4294967297], np.int64)
    statements = [("binary", "x1 * x1"), ("binary", "jax.lax.rem(v0, x0)"), ("binary", "jax.lax.div(v1, v1)"),
                  ("binary", "v0 - x0 * v1 + v2")]
    _compare(Program("int64", x0.shape, [x0, x1], statements, loop_trips=0 if loop == "straight-line" else 3,
                     while_loop=loop == "while_loop"))


@pytest.mark.parametrize("statements", [
    [("unary", "jnp.abs(x0)"), ("unary", "jnp.abs(x0)"), ("select", "jnp.where(x0 > v0, v1, x0)")],
    [("binary", "x0 * x1"), ("binary", "x1 * x0"), ("select", "jnp.where(v0 < x0, v1, x0)")],
    [("unary", "jnp.exp(x1)"), ("unary", "jnp.exp(x1)"), ("select", "jnp.where(v1 > x0, v0, x0)")],
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_selects_of_values_xla_merges_are_max_min_as_xla(statements, dtype):
    """Long campaign (session 20): ``jnp.where(x0 > jnp.abs(x0), jnp.abs(x0), x0)`` with ``jnp.abs(x0)`` written
    twice kept an f32 denormal that XLA flushes: its CSE makes the two one value, so the select is its min
    (``xla_dialect.cse.CseNumbering``: ops of one class on the same operands, a commutative op's in either
    order). Straight-line and in a loop."""
    tiny = float(np.finfo(dtype).tiny)
    x0 = np.array([tiny / 3, -tiny / 5, 0.0, -0.0, 1.0, -2.0, tiny / 2, -tiny, 3.0], dtype)
    x1 = np.array([-1.0, 1.0, tiny / 7, 2.0, -tiny / 3, 0.5, -0.0, 4.0, tiny], dtype)
    for trips in (0, 2):
        _compare(Program(dtype, x0.shape, [x0, x1], list(statements), loop_trips=trips))


@pytest.mark.parametrize("statement", [
    "jnp.where(x0 > -1.0, x0, -1.0)", "jnp.where(x0 < 0.5, x0, 0.5)", "jnp.where(-1.0 < x0, x0, -1.0)",
    "jnp.where(x0 > jnp.full_like(x0, -2.0), x0, -2.0)",
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_selects_of_a_constant_written_twice_are_max_min_as_xla(statement, dtype):
    """``jnp.where(x0 > -1.0, x0, -1.0)`` -- a clamp -- kept the f32 denormals XLA flushes (0 and -0 for +-1e-40):
    jax writes the constant once per use (the compare's a splat literal after constant folding, the select's a
    broadcast of a scalar), XLA's CSE and LLVM make them one constant, so the select is LLVM's max/min
    (``xla_dialect.cse``: a splat constant and a broadcast of a scalar constant of one value are one value).
    Straight-line and in a loop."""
    tiny = float(np.finfo(dtype).tiny)
    x0 = np.array([tiny / 3, -tiny / 5, 0.0, -0.0, 1.0, -2.0, tiny / 2, -tiny, 3.0, -1.0, 0.5], dtype)
    for trips in (0, 2):
        _compare(Program(dtype, x0.shape, [x0], [("select", statement)], loop_trips=trips))


@pytest.mark.parametrize("direction, dtype", [(">=", "float32"), ("<=", "float64"), (">=", "bfloat16"),
                                              (">=", "float64"), ("<=", "float32"), ("<=", "bfloat16"),
                                              (">", "float32"), ("<", "float64"), (">", "bfloat16")])
@pytest.mark.sample(3)
def test_selects_by_a_constant_are_max_min_where_llvm_makes_them_so(direction, dtype):
    """``>=`` and ``<=`` selects against a constant: LLVM's x86 lowering makes ``select(a >= b, a, b)`` the max/min
    instruction (denormals flushed) only where a zero's sign cannot tell them apart -- a nonzero constant in any arm
    order, a zero constant with the arms the other way round (``where(x >= 0.0, 0.0, x)``); ``where(x >= 0.0, x,
    0.0)`` stays a select. In a loop of 2+ trips, on these 18 elements, the select stored in place is scalar code:
    a max/min (``test_selects_stored_in_place_in_a_loop_are_masked_stores_as_xla`` for longer ones). bf16, computed in
    f32 by XLA, follows the f32 rule against a constant
    (it was always a select here; in the loops XLA compiles whole on native-bf16 hosts, a select). Every operand and
    arm order, straight-line and in a loop."""
    import itertools

    tiny = float(ml_dtypes.finfo(dtype).tiny)
    values = [tiny / 3, -tiny / 5, 0.0, -0.0, 1.0, -1.0, 2.5, -2.0, np.nan]
    x = np.array(values * 2, np.float32 if dtype != "float64" else np.float64).astype(dtype)
    for constant, compared, arms in itertools.product(["-1.0", "0.0", "2.5"], ["xc", "cx"], ["xc", "cx"]):
        a, b = ("x", constant) if compared == "xc" else (constant, "x")
        t, f = ("x", constant) if arms == "xc" else (constant, "x")
        statement = f"jnp.where({a} {direction} {b}, {t}, {f})".replace("x", "x0")
        for trips in (0, 3):
            _compare(Program(dtype, x.shape, [x, x[::-1].copy()], [("select", statement)], loop_trips=trips))


@pytest.mark.parametrize("dtype, shapes", [
    ("float64", [(51,), (58,), (121,), (3, 51), (8, 4), (18, 2), (5, 4), (3, 4, 4), (18, 1), (12, 1)]),
    ("float32", [(54,), (70,), (121,), (2, 55), (4, 8), (17, 4), (6, 4), (2, 8, 4), (38, 1), (5, 1)]),
])
def test_selects_stored_in_place_in_a_loop_are_masked_stores_as_xla(dtype, shapes):
    """A max/min select against a constant that a while loop stores in place (``fori_loop(0, 3, lambda i, v:
    jnp.where(v > -1.0, v, -1.0), x)``) is a compare and a masked store of the constant in XLA's vectorized elements
    -- a denormal kept -- and the max/min instruction in its scalar code -- flushed: the last ``n % 4`` of 51 f64
    elements, 6 of 54 and 70 f32 ones, each row's tail of ``[3, 51]``, every element of a loop LLVM unrolls whole,
    the rows past a multiple of 4 of ``[18, 2]``, a column's own tail (``[38, 1]`` f32: ``r % 8``), every element
    of some short columns (``[5, 1]`` f32) (``passes.in_place_selects``; session 30: every denormal was kept
    here in loops of 50 elements or more, flushed in the loops ``xla-small-loops`` counts as compiled whole). In
    place too: a scan also stacking the select, a while loop whose condition reads the array, the select an arm of
    one on a loop-invariant predicate, the select also read by another output. Not in place -- the carried value
    also read by an element-wise op of another output, or a sum --: a max/min, every denormal flushed (kept here
    before)."""
    tiny = float(np.finfo(dtype).tiny)
    for shape in shapes:
        x0 = np.full(shape, tiny / 3, dtype)
        flat = x0.reshape(-1)
        flat[::7], flat[1::11], flat[2::13] = -3.0, -tiny / 5, 0.25
        for statement in ("jnp.where(x0 > -1.0, x0, -1.0)", "jnp.where(x0 < 0.5, x0, 0.5)"):
            _compare(Program(dtype, shape, [x0], [("select", statement)], loop_trips=3))
    x0 = np.full(shapes[2], tiny / 3, dtype)
    x0[:-4:5] = -2.0  # (the last elements denormal: XLA's scalar tail)
    clamp = "jnp.where(x0 > -1.0, x0, -1.0)"
    _compare(Program(dtype, x0.shape, [x0], [("select", clamp)], loop_trips=3, scan=True))
    _compare(Program(dtype, x0.shape, [x0], [("select", clamp)], loop_trips=3, while_loop=True))
    _compare(Program(dtype, x0.shape, [x0], [("select", f"jnp.where(jnp.sum(x0) > 1e30, x0 * 2.0, {clamp})")],
                     loop_trips=3))
    for state in ("(where(a), -a)", "(where(a), b * a)", "(where(a), c + jnp.sum(a))", "(where(a), a)",
                  "(where(a), b - where(a))"):
        _compare(_TwoStateLoop(dtype, x0.shape, [x0, x0[::-1].copy()], body=state))


@dataclass
class _TwoStateLoop(Program):
    """A ``fori_loop`` of 3 trips carrying ``(a, b)`` (``c``: ``b``'s sum, a scalar), its body ``body`` with
    ``where(a)`` the clamp ``jnp.where(a > -1.0, a, -1.0)``."""

    body: str = ""

    def source(self) -> str:
        body = self.body.replace("where(a)", "jnp.where(a > -1.0, a, -1.0)")
        scalar = "c" in self.body.replace("jnp.", "")
        state = "(x0, jnp.sum(x1))" if scalar else "(x0, x1)"
        names = "a, c" if scalar else "a, b"
        return (f"def fn(x0, x1):\n    def body(i, s):\n        {names} = s\n        return {body}\n"
                f"    return jax.lax.fori_loop(0, 3, body, {state})\n")


@pytest.mark.parametrize("direction, dtype", [(">=", "float32"), ("<=", "float64"), ("<=", "float32"),
                                              (">=", "float64")])
@pytest.mark.sample(1)
def test_selects_by_a_denormal_constant_tie_to_the_false_arm_as_xla(direction, dtype):
    """A ``>=``/``<=`` select against a nonzero constant is made strict by LLVM (``x == c`` makes the arms equal),
    so where the min/max instruction reads the arms as equal -- a denormal constant against a zero or another
    denormal, all read as zero -- it gives the false arm: f32 ``where(x >= 1e-40, x, 1e-40)`` at ``x = -0`` is +0
    in XLA with jax's default 32-bit mode, was -0 here (session 24, an Intel Xeon; with ``jax_enable_x64`` jax
    writes the constants otherwise and XLA keeps -0, as here). Every operand and arm order, both signs of the
    constant, straight-line and in a loop, f32 in both of jax's modes."""
    import itertools

    tiny = float(np.finfo(dtype).tiny)
    x = np.array([tiny / 3, -tiny / 5, 0.0, -0.0, 1.0, -1.0, 2.5, -2.0, np.nan] * 2, dtype)
    denormal = "1e-40" if dtype == "float32" else "1e-310"
    for x64 in ([True, False] if dtype == "float32" else [True]):
        for constant, compared, arms in itertools.product([denormal, "-" + denormal], ["xc", "cx"], ["xc", "cx"]):
            a, b = ("x0", constant) if compared == "xc" else (constant, "x0")
            t, f = ("x0", constant) if arms == "xc" else (constant, "x0")
            statement = f"jnp.where({a} {direction} {b}, {t}, {f})"
            for trips in (0, 3):
                _compare(Program(dtype, x.shape, [x, x[::-1].copy()], [("select", statement)], loop_trips=trips,
                                 x64=x64))


def test_a_product_of_a_value_a_dot_reads_too_is_contracted_as_xla():
    """Long campaign (session 24): in ``v0 * v0**3 + x0 * v2`` XLA contracts ``v0 * v0**3`` -- ``v0 = x0 * x0 - x0 *
    2`` is also read by a dot, so XLA computes it in a fusion of its own and the add's fusion loads it first, which
    ranks that product lower -- and ``x0 * v2`` was contracted here, ranking ``v0``'s own expression inside the
    fusion: at ``x0 = -4.087e-306`` the sum is +0 in XLA, was -0 here (``passes.fma_contraction._read_by_a_dot``)."""
    bits = [0, 9218868437227457852, 0, 13860109328209412096, 12950379527529122532, 4635945642982637568,
            4635945642982637568, 9218868437227405313, 9218868437227405313, 9218868437227405313, 9218868437227405313,
            9223372036854775806, 9261360639630964827, 0, 0, 0]
    x0 = np.array(bits, np.uint64).view(np.float64).reshape(2, 8)
    statements = [("products", "x0 * x0 - x0 * np.float64(2.0)"), ("binary", "v0 ** 3"),
                  ("row", "x0 - jnp.sum(x0, axis=0, keepdims=True)"), ("products", "v0 * v1 + x0 * v2"),
                  ("binary", "v2 @ (v2.T @ v0)")]
    _compare(Program("float64", (2, 8), [x0], statements, also_returned=(2, 3)))


@pytest.mark.parametrize("x64", [False, True], ids=["32-bit", "64-bit"])
@pytest.mark.parametrize("direction", [">=", "<", "<=", ">"])
@pytest.mark.sample(2)
def test_selects_of_one_element_by_a_denormal_constant_as_xla(direction, x64):
    """f32 selects of one element against a denormal constant: XLA's scalar code holds the constant as the zero it
    reads as, so ``where(x >= 1e-40, x, 1e-40)`` is ``where(x >= 0.0, x, 0.0)`` with the constant arm +0 -- a
    denormal ``x`` kept, ``x = -1`` gives +0 -- and ``where(x > 1e-40, 1e-40, x)`` XLA's min (found session 24,
    an Intel Xeon; were the array rules here). In jax's 64-bit mode the arm is an f64 ``1e-40`` converted, which
    XLA folds to 0: the same results. Each value its own one-element input, every operand and arm order."""
    import itertools

    tiny = float(np.finfo(np.float32).tiny)
    inputs = [np.array([v], np.float32) for v in (tiny / 3, -tiny / 5, -0.0, 0.0, -1.0, 1.0)]
    for constant, compared, arms in itertools.product(["1e-40", "-1e-40"], ["xc", "cx"], ["xc", "cx"]):
        statements = []
        for i in range(len(inputs)):
            a, b = (f"x{i}", constant) if compared == "xc" else (constant, f"x{i}")
            t, f = (f"x{i}", constant) if arms == "xc" else (constant, f"x{i}")
            statements.append(("select", f"jnp.where({a} {direction} {b}, {t}, {f})"))
        _compare(Program("float32", (1,), inputs, statements, also_returned=tuple(range(len(inputs) - 1)), x64=x64))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_product_with_a_negated_factor_is_subtracted_before_contraction_as_xla(dtype):
    """XLA's simplifier moves a ``negate`` factor out of a product (``v * -y`` is ``-(v * y)``) and makes the add a
    subtraction, ``v * -3.0 - v * y``, whose first product LLVM fuses -- even where the other product's factor is a
    negative constant, which only LLVM reads as a negation: ``v * -y + v * -3.0`` is ``fma(v, -3, -(v * y))`` in XLA,
    was ``fma(v, -y, v * -3)`` here, about a third of the elements 1 ULP off (long fuzz campaign, session 30: the
    form in a ``lax.scan``; also ``(-v) * z + z * -2.5``). Straight-line and in a scan."""
    rng = np.random.default_rng(30)
    x0, x1, x2 = (rng.standard_normal(64).astype(dtype) * scale for scale in (100.0, 1.0, 3.0))
    for expression in ("x0 * -x1 + x0 * -3.0", "(-x0) * x2 + x2 * -2.5", "x0 * -x1 + x2 * -2.5",
                       "x0 * -3.0 + x0 * -x1"):  # (one program each: products shared by two sums contract otherwise)
        _compare(Program(dtype, x0.shape, [x0, x1, x2], [("fma", expression)]))
    _compare(Program(dtype, x0.shape, [x0, x1, x2], [("fma", "x0 * -x1 + x0 * -3.0")], loop_trips=3, scan=True))


_PRODUCTS = ["x0 * -x1", "x0 * x1", "x0 * -3.0", "x0 * 3.0", "(-x0) * x2", "x1 * x2", "-(x0 * x1)",
             "x0 * (-x1) * 2.0", "x2 * -2.5"]
_SUMS_NOT_REPRODUCED = {("x0 * -3.0", "x0 * (-x1) * 2.0"), ("x0 * (-x1) * 2.0", "x0 * -3.0"),
                        ("(-x0) * x2", "-(x0 * x1)"), ("x2 * -2.5", "x0 * (-x1) * 2.0")}
"""Sums of two of :data:`_PRODUCTS` whose contraction differs from XLA's (docs/operations.md, FMA contraction)."""


@pytest.mark.parametrize("first, second", [(a, b) for a in _PRODUCTS for b in _PRODUCTS
                                           if a != b and (a, b) not in _SUMS_NOT_REPRODUCED])
@pytest.mark.sample(3)
def test_sums_of_two_products_with_negations_contract_as_xla(first, second):
    """Every sum of two of :data:`_PRODUCTS` (negate factors, negative constants, shared factors), f32 and f64 on
    64 elements: which product XLA fuses -- after its simplifier takes ``negate`` factors out of products and LLVM
    makes negative constants subtractions -- or none, where the sum is one product subtracted from itself (of the
    72 sums in two types, 28 differed before session 30; 8 still do: the 4 sums of :data:`_SUMS_NOT_REPRODUCED`)."""
    rng = np.random.default_rng(31)
    for dtype in ("float32", "float64"):
        x0, x1, x2 = (rng.standard_normal(64).astype(dtype) * scale for scale in (100.0, 1.0, 3.0))
        _compare(Program(dtype, x0.shape, [x0, x1, x2], [("fma", f"{first} + {second}")]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_sign_op_reading_a_max_min_select_is_moved_into_its_arms_as_xla(dtype):
    """A negation or absolute value reading a max/min select against a constant is moved into the select's arms by
    LLVM inside XLA's fused loop (``-select(c, x, -1)`` is ``select(c, -x, 1)``), so no max/min instruction is left
    and a denormal ``x`` is kept: ``-jnp.where(x > -1.0, x, -1.0)`` of 1e-310 is -1e-310 in XLA, was -0 here
    (session 30, straight-line and in loops, any size). A select returned too, or written twice and returned
    (XLA's CSE makes it one value with two users), is a max/min; ``-(-s)`` is ``s``; two variable arms stay a
    max/min. One element of f32 against a denormal constant: the constant held as a zero, the select kept."""
    tiny = float(np.finfo(dtype).tiny)
    x0 = np.array([tiny / 3, -tiny / 5, 0.0, -0.0, 1.0, -2.0, tiny / 2, -tiny, 3.0, -1.0, 0.5, np.nan], dtype)
    x1 = np.array([-1.0, 1.0, tiny / 7, 2.0, -tiny / 3, 0.5, -0.0, 4.0, tiny, -3.0, 0.0, 1.0], dtype)
    moved = ["-jnp.where(x0 > -1.0, x0, -1.0)", "jnp.abs(jnp.where(x0 < 1.0, x0, 1.0))",
             "-jnp.where(x0 >= -1.0, x0, -1.0)", "jnp.copysign(jnp.where(x0 > -1.0, x0, -1.0), x1)",
             "-jnp.abs(jnp.where(-1.0 < x0, x0, -1.0))", "-jnp.where(x0 > -1.0, x0, -1.0).reshape(3, 4).reshape(12)",
             "-(-jnp.where(x0 > -1.0, x0, -1.0))", "-jnp.where(x0 > x1, x0, x1)"]
    statements = [("sign", expression) for expression in moved]
    statements += [("select", "jnp.where(x0 > -1.0, x0, -1.0)"), ("neg", "-v8"),  # (also returned: a max)
                   ("neg", "-jnp.where(x0 < 0.5, x0, 0.5)"), ("select", "jnp.where(x0 < 0.5, x0, 0.5)")]  # (twice)
    _compare(Program(dtype, x0.shape, [x0, x1], statements, also_returned=tuple(range(len(statements) - 1))))
    for expression in moved[:2]:
        for shape, trips in (((12,), 3), ((1,), 3)):
            _compare(Program(dtype, shape, [x0[:shape[0]].copy(), x1[:shape[0]].copy()], [("sign", expression)],
                             loop_trips=trips))
    if dtype == "float32":  # (one element against a denormal constant, held as a zero: every arm order)
        inputs = [np.array([v], np.float32) for v in (tiny / 3, -tiny / 5, -0.0, 1.0, -1.0)]
        for x64 in (True, False):
            for template in ("-jnp.where({x} > 1e-40, 1e-40, {x})", "jnp.abs(jnp.where({x} < -1e-40, -1e-40, {x}))",
                             "-jnp.where({x} > 1e-40, {x}, 1e-40)", "-jnp.where({x} >= -1e-40, -1e-40, {x})"):
                statements = [("sign", template.format(x=f"x{i}")) for i in range(len(inputs))]
                _compare(Program("float32", (1,), inputs, statements, also_returned=tuple(range(len(inputs) - 1)),
                                 x64=x64))


@pytest.mark.parametrize("expression, dtype", sweep(
    ["jnp.abs(x0 * x0)", "jnp.abs(jnp.maximum(x0 * x0, x0 - x1))", "jnp.abs(jnp.where(x0 > x1, x0 * x0, jnp.abs(x0)))",
     "jnp.where(x0 * x0 >= 0, x0, x1)", "jnp.where(jnp.abs(x0) < 0, x0, x1)", "jnp.where(0 <= x0 * x0, x1, x0)",
     "jnp.where(0 > jnp.abs(x0), x1, x0)"],
    ["int8", "int16", "int32", "int64", "uint8", "float32"]))
def test_values_xla_knows_are_non_negative_as_xla(expression, dtype):
    """Long campaign (session 20): int8 ``jnp.abs(x0 * x0)`` at ``x0 = 20`` is -112 in XLA, 112 here. XLA's
    simplifier takes ``A * A``, ``abs``, and max/min/select of them as non-negative for every real type -- a signed
    square or abs that wrapped too -- and drops ``abs(A)``, folds ``A >= 0`` to true and ``A < 0`` to false (a NaN
    ``A`` of a float too: f32 ``x * x >= 0`` of NaN is true in XLA). Straight-line and in a loop."""
    info = np.iinfo(dtype) if dtype != "float32" else None
    big = {"int8": 20, "uint8": 20, "int16": 300, "int32": 50000, "int64": 4_000_000_000}.get(dtype, 1e30)
    first = [big, -big if dtype != "uint8" else 200, info.min if info else float("nan"), 3, -3 if dtype != "uint8" else 9, 0,
             1, info.max if info else float("-inf")]
    x0, x1 = np.array(first, dtype), np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype)
    for trips in (0, 2):
        _compare(Program(dtype, x0.shape, [x0, x1], [("binary", expression)], loop_trips=trips))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("expression", ["x0 * x1 - x1 * x0", "(x0 + x1) * x2 - (x1 + x0) * x2"])
def test_commutative_duplicates_are_one_value_as_xla(dtype, expression):
    """Long campaign (session 19): ``x2 * x1 - x1 * x2`` is 0 in jax.jit -- XLA's CSE merges a commutative op with
    its operands swapped, and the subtraction reads one multiply twice, which LLVM does not contract -- and was the
    rounding error of ``x2 * x1`` here (one product contracted into the subtraction; f16 on AVX512-FP16 hosts)."""
    rng = np.random.default_rng(len(expression))
    inputs = [rng.standard_normal((2, 7)).astype(dtype) for _ in range(3)]
    inputs[0].reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    for trips in (0, 2):
        _compare(Program(dtype, (2, 7), inputs, [("binary", expression)], loop_trips=trips))


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_division_by_a_quotient_through_a_shape_round_trip_as_xla(dtype):
    """Long campaign (session 19): ``x0 / jnp.max(x0 / jnp.max(x0, axis=0, keepdims=True), axis=0, keepdims=True)``
    of one row is ``(x0 * x0) / x0`` to XLA (the maxima over a dimension of size 1 are reshapes that it folds away,
    then ``A / (B / C)`` -> ``(A * C) / B``), so an f16 denormal ``x0`` is 0 there (its square underflows), and was
    ``x0`` here."""
    tiny = float(ml_dtypes.finfo(dtype).tiny)
    x0 = np.array([[0.0, 1.5, -2.0, tiny / 2, 3e-3, np.inf]], dtype)
    _compare(Program(dtype, x0.shape, [x0], [("row", "x0 / jnp.max(x0, axis=0, keepdims=True)"),
                                              ("row", "x0 / jnp.max(v0, axis=0, keepdims=True)")]))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("expression", ["jnp.maximum(x0, -x0)", "jnp.maximum(-x0, x0)", "jnp.minimum(x0, -x0)"])
def test_an_extremum_of_a_value_and_its_negation_is_its_magnitude_as_xla(dtype, expression):
    """Long campaign (session 19): ``jnp.maximum(x0, -x0)`` of an f32 denormal is the denormal in jax.jit (LLVM
    folds it into ``fabs``), 0 here (the max instruction under denormals-are-zero); a NaN keeps its payload with
    the sign cleared (``min``: set)."""
    tiny = float(ml_dtypes.finfo(dtype).tiny)
    x0 = np.resize(np.array([tiny / 3, -tiny / 3, np.nan, -np.nan, 0.0, -0.0, 1.5, -2.5], dtype), (2, 40))
    for trips in (0, 2):
        _compare(Program(dtype, x0.shape, [x0], [("binary", expression)], loop_trips=trips))


def test_select_of_a_value_and_its_round_trip_is_the_documented_select_max():
    """Long campaign, seed 1: ``where(x0 > v0, x0, x1)`` with ``v0`` the bf16 -> f32 -> bf16 round trip of ``x1``
    is ``where(x0 > x1, x0, x1)`` to XLA (it drops the round trip), which it computes as ``max`` (a subnormal
    bf16 came out flushed in its loop): the documented select -> max deviation, which the generator skips."""
    bf16 = ml_dtypes.bfloat16
    x0 = np.array([np.nan, 89.0, 0.0, 0.5], bf16)
    x1 = np.array([0, 0, 0, 0], np.uint16).view(bf16)
    x1.view(np.uint16)[:] = [0x2B, 0x2B, 0x3F80, 0x8001]
    program = Program("bfloat16", x0.shape, [x0, x1],
                      [("convert", "x1.astype(jnp.float32).astype(jnp.bfloat16)"), ("row", "v0 * x0[..., :1]"),
                       ("binary", "v0 * v0"), ("select", "jnp.where(x0 > v0, x0, x1)")], loop_trips=4)
    assert "select -> max" in _documented_deviation(program)
    # A round trip through a narrower type is no alias, and the executor still gives the same bits on every path.
    narrowing = Program("float32", (2,), _inputs(np.float32, [1.0, 2.0], [3.0, 1e-40]),
                        [("convert", "x1.astype(jnp.bfloat16).astype(jnp.float32)"),
                         ("select", "jnp.where(x0 > v0, x0, x1)")])
    assert _documented_deviation(narrowing) is None
    with pytest.raises(pytest.fail.Exception, match="jax.jit differ"):
        _compare(program)  # (the deviation itself: XLA flushes the subnormal, the executor keeps it)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("expression", ["jnp.maximum(x0, jnp.where(x0 > x1, jnp.abs(x0), x0))",
                                        "jnp.maximum(jnp.where(x0 > x1, jnp.abs(x0), x0), x0)",
                                        "jnp.maximum(x0, jnp.where(x0 > x1, x0, x1 * 2))",
                                        "jnp.minimum(x0, jnp.where(x0 > x1, -jnp.abs(x0), x0))",
                                        "jnp.minimum(jnp.where(x0 < x1, x0, x1 + 1), x0)"])
@pytest.mark.sample(5)
def test_max_min_of_a_select_of_its_operand_as_xla(expression, dtype):
    """Long campaign, seed 27: LLVM moves a max/min of a select one of whose arms is its other operand into the
    arms, where ``max(x, x)`` is ``x``: a subnormal ``x`` (compared as 0 under DAZ) is kept in XLA, where the
    max of ``x`` and ``x`` would flush it. Every arm and operand order, in every configuration, loops too."""
    tiny = float(np.finfo(dtype).tiny)
    x0 = np.array([tiny / 3, -tiny / 3, tiny / 7, -tiny / 5, 0.0, -0.0, 1.0, -2.0, 3.9e-39, np.nan], dtype)
    x1 = np.resize(np.array([0.0, -0.0, 1e-45, -1e-45, 0.5, -0.5], dtype), x0.size)
    for trips in (0, 2):
        _compare(Program(dtype, x0.shape, [x0, x1], [("select", expression)], loop_trips=trips))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_of_nan_by_a_subnormal_is_nan_on_every_path(dtype):
    """Issue 30, item 8: ``pow(NaN, 1e-45)`` gave 1.0 fused (the subnormal exponent, a scalar crossing numba's
    boundary as a double, was flushed to 0) and NaN in XLA. Arrays, a 0-d exponent and a constant, straight-line
    and in a loop, in every configuration."""
    tiny = float(np.finfo(dtype).smallest_subnormal)
    literal = f"np.{np.dtype(dtype).name}({tiny!r})"
    base = np.array([np.nan, -np.nan, 2.0, 0.5, 1.0, np.inf, 0.0, -0.0], dtype)
    exponents = np.full_like(base, tiny)
    programs = [
        Program(np.dtype(dtype).name, base.shape, [base, exponents], [("binary", "jnp.abs(x0) ** x1 * 3")]),
        Program(np.dtype(dtype).name, base.shape, [base], [("constant", f"jnp.abs(x0) ** {literal} * 3")]),
        Program(np.dtype(dtype).name, base.shape, [base], [("constant", f"jnp.sin(x0 ** {literal}) + x0")],
                loop_trips=2),
        Program(np.dtype(dtype).name, (), [np.asarray(dtype(np.nan)), np.asarray(dtype(tiny))],
                [("binary", "x0 ** x1"), ("unary", "jnp.cos(v0)"), ("binary", "v1 * x1"), ("unary", "jnp.sin(v2)"),
                 ("binary", "v3 - x1"), ("unary", "jnp.tanh(v4)"), ("binary", "v5 + v0")]),
    ]
    for program in programs:
        _compare(program)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("expression", ["jnp.maximum(x0, {}(1e-40))", "jnp.minimum(x0, {}(-1e-40))",
                                        "jnp.maximum({}(1e-40), x0)"])
@pytest.mark.sample(3)
def test_max_min_with_a_denormal_constant_as_xla(expression, dtype):
    """Long campaign, seed 3: ``jnp.maximum(x, bf16(1e-40))`` with ``x = -0`` is ``-0`` in XLA (bf16 is computed
    in f32, where the bf16 denormal is an f32 denormal that the max instruction reads as a zero and returns ``x``
    on the tie, as for f32 constants), ``+0`` here. A single element keeps the signed-zero rule (``+0``), except
    inside the loops XLA compiles whole (``-0``, f32 too): found with this test's loop programs."""
    values = [-0.0, 0.0, 1e-40, -1e-40, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), -float("nan")]
    expression = expression.format(_dtype_expression(dtype))
    for size in (1, len(values), 21):
        for first in (-0.0, 0.0):
            x0 = np.resize(np.array([first, *values], DTYPES[dtype]), size)
            _compare(Program(dtype, x0.shape, [x0], [("constant", expression)]))
            _compare(Program(dtype, x0.shape, [x0], [("constant", expression)], loop_trips=2))


def test_max_with_a_denormal_constant_is_one_definition_in_compiled_loops():
    """Issue 30, the long campaign's captured finding (an f32 fori_loop whose NaN came out ``0x7fc10000`` in
    compiled loops and ``0xffc10000`` interpreted): a compiled loop is written at its first call, in the
    executor's flush mode, where reading the denormal constant of ``max(x, 1e-45)`` as a float gave zero, so the
    compiled loop took the ordinary max (``max(-0, 1e-45)`` is ``+0``) and the interpreter the denormal-constant
    rule (``-0``); the next ``max`` with a NaN gives it the and-ed sign bits of both operands."""
    nan_positive, nan_negative = np.array([0x7FC10000, 0xFFC10000], np.uint32).view(np.float32)
    x0 = np.array([-0.0, 0.0, -0.0, 1.0, -1e-40, 0.0], np.float32)
    x1 = np.array([nan_negative, nan_negative, nan_positive, nan_negative, nan_negative, 2.0], np.float32)
    for trips in (0, 2):
        _compare(Program("float32", x0.shape, [x0, x1], [("constant", "jnp.maximum(x0, np.float32(1e-45))"),
                                                        ("binary", "jnp.maximum(v0, x1)")], loop_trips=trips))


@pytest.mark.parametrize("expression, dtype", sweep(
    ["jnp.where(x0 > x1, x1, x0)", "jnp.where(x0 > x1, x0, x1)", "jnp.where(x0 < x1, x0, x1)",
     "jnp.where(x0 < x1, x1, x0)", "jnp.where(x0 > x1, x1, jnp.where(x0 > x0, x1, x0))"], ["float32", "float64"]))
def test_float_max_min_selects_flush_as_xla(expression, dtype):
    """Long campaign, seed 6: ``where(x0 > x1, x1, where(x0 > x0, x1, x0))`` with ``x0`` denormal gave 0 fused
    and the denormal interpreted: LLVM (XLA's and the executor's numba alike) folds ``x0 > x0`` to false and
    computes ``select(a > b, b, a)`` with the min instruction, which reads a denormal as zero under DAZ. Now every
    path does (``select_flush``), as XLA: 0. NaNs and signed zeros keep the select's own rule."""
    tiny = float(np.finfo(DTYPES[dtype]).tiny)
    values0 = [0.0, -0.0, tiny / 3, -tiny / 5, 1.0, -1.0, float("nan"), 2.0, tiny / 3, float("inf")]
    values1 = [0.0, 0.0, 0.0, tiny / 7, tiny / 9, -tiny / 3, 1.0, float("nan"), -0.0, tiny / 3]
    x0, x1 = np.array(values0, DTYPES[dtype]), np.array(values1, DTYPES[dtype])
    for trips in (0, 2):
        _compare(Program(dtype, x0.shape, [x0, x1], [("select", expression)], loop_trips=trips))
        _compare(Program(dtype, x0.shape, [x0, x1], [("select", expression), ("binary", "v0 * x0")],
                         loop_trips=trips))


_FOLDED_SELECTS = {
    "floor-floor": [("unary", "jnp.floor(x1)"), ("select", "jnp.where(x0 > jnp.floor(v0), v0, x0)")],
    "ceil-round-even": [("unary", "jnp.round(x1)"), ("select", "jnp.where(x0 < jnp.ceil(v0), v0, x0)")],
    "round-ceil": [("unary", "jnp.ceil(x1)"), ("select", "jnp.where(jax.lax.round(v0) > x0, x0, v0)")],
    "abs-abs": [("unary", "jnp.abs(x1)"), ("select", "jnp.where(x0 > jnp.abs(v0), v0, x0)")],
    "floor-convert": [("unary", "x1.astype(jnp.int8).astype(x1.dtype)"),
                      ("select", "jnp.where(x0 > jnp.floor(v0), v0, x0)")],
    "select-same-arms": [("unary", "jnp.floor(x1)"),
                         ("select", "jnp.where(x0 > jnp.where(x1 > 1, v0, v0), v0, x0)")],
    # not folded by LLVM (measured): abs of a rounding, a rounding of abs -- the select keeps denormals
    "floor-abs": [("unary", "jnp.abs(x1)"), ("select", "jnp.where(x0 > jnp.floor(v0), v0, x0)")],
    "abs-floor": [("unary", "jnp.floor(x1)"), ("select", "jnp.where(x0 > jnp.abs(v0), v0, x0)")],
}


@pytest.mark.parametrize("name, dtype", sweep(list(_FOLDED_SELECTS), ["float32", "float64"]))
def test_selects_of_values_llvm_folds_to_one_are_max_min_as_xla(name, dtype):
    """Long campaign, seed 29: ``where(x1 > floor(v0), v0, x1)`` with ``v0 = floor(x2)`` and a denormal ``x1``:
    LLVM folds ``floor(floor(x))`` to ``floor(x)`` inside XLA's fused loop, the select becomes the min pattern and
    the min instruction reads the denormal as zero (XLA: 0; the executor gave the denormal). The executor's max/min
    pattern test sees values as LLVM's simplifier leaves them: roundings of integral values, ``abs(abs(x))``,
    selects with one value on both arms."""
    tiny = float(np.finfo(DTYPES[dtype]).tiny)
    values0 = [tiny / 3, -tiny / 5, tiny / 3, -tiny / 5, 1.5, -2.5, float("nan"), 0.0, -0.0, 3.0]
    values1 = [tiny / 3, -tiny / 5, 0.0, -0.0, 1.25, -2.5, 1.0, float("nan"), tiny / 7, 2.5]
    x0, x1 = np.array(values0, DTYPES[dtype]), np.array(values1, DTYPES[dtype])
    statements = _FOLDED_SELECTS[name]
    _compare(Program(dtype, x0.shape, [x0, x1], statements))
    _compare(Program(dtype, x0.shape, [x0, x1], statements, loop_trips=2))


def test_llvm_folds_and_infinite_bounds_as_xla():
    """Long campaign, seeds 8 and 9. Seed 8: ``max(x0, where(x0 > x0, x1, x0))`` keeps a subnormal ``x0`` in XLA
    (LLVM folds ``x0 > x0`` to false, then ``max(x0, x0)`` to ``x0``), here it was flushed. Seed 9:
    ``jnp.minimum(inf, x2)`` (bf16) is ``x2`` in XLA (its simplifier: ``min(A, +inf)`` is ``A``), a subnormal
    kept; here it was flushed. Also ``max(A, -inf)``, f32 and bf16, straight-line and in loops."""
    tiny = float(np.finfo(np.float32).tiny)
    values = [tiny / 3, -tiny / 5, 0.0, -0.0, 1.0, float("nan"), -float("nan"), float("inf"), float("-inf"), 2.5]
    for dtype in ("float32", "bfloat16"):
        x0 = np.array(values, DTYPES[dtype])
        x1 = np.zeros_like(x0)
        literal = _dtype_expression(dtype)
        statements = [[("select", "jnp.where(x0 > x0, x1, x0)"), ("binary", "jnp.maximum(x0, v0)")],
                      [("constant", f"jnp.minimum({literal}(float('inf')), x0)")],
                      [("constant", f"jnp.maximum(x0, {literal}(float('-inf')))")],
                      [("constant", f"jnp.minimum(x0, {literal}(float('inf')))"), ("binary", "v0 + x1")]]
        for body in statements:
            if dtype == "bfloat16" and "x0 > x0" in body[0][1]:
                continue  # (bf16: XLA flushes there, documented)
            for trips in (0, 2):
                _compare(Program(dtype, x0.shape, [x0, x1], body, loop_trips=trips))


@pytest.mark.parametrize("constant", ["0.0", "-1e-45", "-0.0"])
def test_bf16_plus_zero_is_the_operand_as_xla(constant):
    """Long campaign, seed 12: ``x1 + bf16(-1e-45)`` (a bf16 -0) is ``x1`` in XLA (its simplifier's ``A + 0``, for
    bf16 too), a subnormal kept; here it was flushed."""
    bf16 = ml_dtypes.bfloat16
    x0 = np.array([3.94893e-39, -3.94893e-39, 0.0, -0.0, 1.0, float("nan"), float("inf"), -2.5], bf16)
    for expression in (f"x0 + ml_dtypes.bfloat16({constant})", f"ml_dtypes.bfloat16({constant}) + x0"):
        for trips in (0, 2):
            _compare(Program("bfloat16", x0.shape, [x0], [("constant", expression)], loop_trips=trips))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_sqrt_of_a_square_is_the_absolute_value_as_xla(dtype):
    """Long campaign, seed 13: ``jnp.sqrt(x0 * x0)`` (f16) is ``|x0|`` in XLA (its simplifier), a subnormal ``x0``
    kept where its square underflows; here it was 0. Also huge values (the square overflows) and NaNs."""
    info = np.finfo(DTYPES[dtype])
    x0 = np.array([float(info.tiny) / 4, -float(info.tiny) / 4, float(info.max) / 2, -3.0, -0.0, float("nan"),
                   -float("nan"), float("-inf")], DTYPES[dtype])
    for trips in (0, 2):
        _compare(Program(dtype, x0.shape, [x0], [("binary", "x0 * x0"), ("unary", "jnp.sqrt(v0)")], loop_trips=trips))


def test_nested_selects_on_one_predicate_fold_before_max_min_as_xla():
    """Long campaign, seed 13 (at 7463c94): ``where(x0 > x1, x0, where(x0 > x1, x1, x0))`` is ``x0`` in XLA (LLVM
    folds the nested select on the same predicate before it forms a min instruction), a subnormal kept; here the
    inner select flushed it."""
    tiny = float(np.finfo(np.float32).tiny)
    x0 = np.array([tiny / 3, -tiny / 5, 0.0, 1.0, float("nan"), 2.0], np.float32)
    x1 = np.array([0.0, 0.0, -0.0, tiny / 3, 1.0, float("nan")], np.float32)
    for body in ([("select", "jnp.where(x0 > x1, x1, x0)"), ("select", "jnp.where(x0 > x1, x0, v0)")],
                 [("select", "jnp.where(x0 > x1, x1, x0)"), ("select", "jnp.where(x0 > x1, v0, x1)")]):
        for trips in (0, 2):
            _compare(Program("float32", x0.shape, [x0, x1], body, loop_trips=trips))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.sample(1)
def test_a_max_min_select_merged_into_the_select_reading_it_keeps_denormals_as_xla(dtype):
    """Long campaign, seed 50: ``where(x1 > x0, where(x2 > x1, x1, x2), x2)`` (f64, a fori_loop of one trip) with
    denormal ``x1``, ``x2``: XLA keeps ``x2``'s denormal -- LLVM merges a select used once as an arm of a select
    whose other arm is its own (``select(c0, select(c1, a, b), b)`` is ``select(c0 & c1, a, b)``), so no min
    instruction is left -- and the executor flushed it. Both forms (the true and the false arm), straight-line and
    in loops of one trip (which XLA removes: nothing is moved out of it) and two; arrays of one element, which XLA
    does not merge (flushed), too."""
    tiny = float(np.finfo(DTYPES[dtype]).tiny)
    x0 = np.array([-np.inf, 0.0, -tiny / 3, 1.0, -1.0, np.nan, tiny / 5, -0.0, np.inf], DTYPES[dtype])
    x1 = np.array([-tiny / 7, tiny / 3, -tiny / 5, tiny / 9, -tiny / 3, 0.0, -0.0, 2.0, -tiny / 7], DTYPES[dtype])
    x2 = np.array([-tiny / 3, tiny / 7, 0.0, -tiny / 9, -tiny / 5, tiny / 3, 1.0, -tiny / 3, -tiny / 9], DTYPES[dtype])
    bodies = [[("select", "jnp.where(x2 > x1, x1, x2)"), ("select", "jnp.where(x1 > x0, v0, x2)")],
              [("select", "jnp.where(x1 > x2, x2, x1)"), ("select", "jnp.where(x0 > x1, x2, v0)")],
              [("select", "jnp.where(x2 < x1, x1, x2)"), ("select", "jnp.where(x0 < x1, v0, x2)")]]
    for body in bodies:
        for trips in (0, 1, 2):
            _compare(Program(dtype, x0.shape, [x0, x1, x2], body, loop_trips=trips))
            _compare(Program(dtype, (1,), [x0[:1], x1[:1], x2[:1]], body, loop_trips=trips))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_min_select_of_the_minimum_of_its_arm_keeps_denormals_as_xla(dtype):
    """Long campaign, seed 39: ``where(x1 > v0, v0, x1)`` with ``v0 = jnp.minimum(x1, x0)`` (f32, a fori_loop of three
    trips) keeps a denormal ``x1`` in XLA (here it was flushed as a min instruction). The other forms of that select
    flush, in XLA and here: ``where(v0 < x1, v0, x1)``, and the maximum's ``where(x1 < v0, v0, x1)``."""
    tiny = float(np.finfo(DTYPES[dtype]).tiny)
    x0 = np.array([np.nan, 1.0, -1.0, 0.0, -0.0, tiny / 3, -tiny / 5, np.inf, -np.inf], DTYPES[dtype])
    x1 = np.array([tiny / 3, tiny / 5, -tiny / 7, tiny / 9, -tiny / 3, tiny / 7, -tiny / 9, -tiny / 3, tiny / 5],
                  DTYPES[dtype])
    bodies = [[("binary", "jnp.minimum(x1, x0)"), ("select", "jnp.where(x1 > v0, v0, x1)")],
              [("binary", "jnp.minimum(x0, x1)"), ("select", "jnp.where(x1 > v0, v0, x1)")],
              [("binary", "jnp.minimum(x1, x0)"), ("select", "jnp.where(v0 < x1, v0, x1)")],
              [("binary", "jnp.maximum(x1, x0)"), ("select", "jnp.where(x1 < v0, v0, x1)")]]
    for body in bodies:
        for trips in (0, 3):
            _compare(Program(dtype, x0.shape, [x0, x1], body, loop_trips=trips))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_constant_minus_a_difference_is_an_addition_as_xla(dtype):
    """Long campaign, seed 52: ``np.float32(-1e-45) - (x0 - x0)`` is +0 in XLA and was -0 here: LLVM rewrites ``C -
    (X - Y)`` to ``C + (Y - X)`` when ``C`` cannot be -0 (a subnormal constant is not, to LLVM), and the CPU then
    reads ``C`` as -0 (xla-float-rewrites' SubtractionFromConstant). Differences of equal values of both signs,
    NaNs (of two, ``Y``'s, as XLA), a normal and a -0 constant (the negation) for comparison."""
    tiny = float(np.finfo(DTYPES[dtype]).tiny)
    x0 = np.array([0.0, -0.0, 0.0, 1.0, 2.0, np.nan, -np.inf, tiny / 3, 1.0], DTYPES[dtype])
    x1 = np.array([0.0, -0.0, -0.0, 1.0, 1.0, 1.0, -np.inf, tiny / 3, np.nan], DTYPES[dtype])
    literal = _dtype_expression(dtype)
    for constant in (f"{literal}(-{tiny / 5!r})", f"{literal}({tiny / 5!r})", f"{literal}(-1.5)", f"{literal}(-0.0)"):
        for body in ([("constant", f"{constant} - (x0 - x1)")], [("constant", f"{constant} - (x0 - x0)")]):
            for trips in (0, 2):
                _compare(Program(dtype, x0.shape, [x0, x1], body, loop_trips=trips))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_negative_zero_minus_x_is_the_negation_as_xla(dtype):
    """Long campaign, seed 14: ``bf16(-1e-45) - x1`` (a bf16 -0 minus ``x1``) is ``-x1`` in XLA (LLVM folds ``fsub
    -0.0, X`` to ``fneg X``), a subnormal ``x1`` kept (f32/f64 too) and a NaN's sign flipped; here the subtraction
    flushed it. ``+0 - x`` stays a subtraction (a subnormal flushed, measured)."""
    tiny = float(ml_dtypes.finfo(DTYPES[dtype]).tiny)
    x0 = np.array([tiny / 3, -tiny / 3, 0.0, -0.0, 1.0, float("nan"), float("inf"), -2.5, tiny * 2], DTYPES[dtype])
    literal = _dtype_expression(dtype)
    for constant in ("-0.0", "0.0"):
        for expression in (f"{literal}({constant}) - x0", f"({literal}({constant}) - x0) * x0"):
            for trips in (0, 2):
                _compare(Program(dtype, x0.shape, [x0], [("constant", expression)], loop_trips=trips))


def test_a_fused_row_sum_of_two_nan_payloads_is_the_kernels():
    """Long campaign on the Intel Xeon, seed 23: ``x0 * jnp.mean(jnp.expm1(x2), axis=-1, keepdims=True)`` (f64) over a
    row holding two signalling NaNs of different payloads gave the second payload fused and the first interpreted
    (and in jax.jit); a fused group whose row sum is NaN is now recomputed by the ops' own kernels, as one whose
    element output is NaN already was."""
    x2 = np.linspace(-2.0, 3.0, 38).reshape(2, 19)
    x2.view(np.uint64)[1, 14] = 0xFFF0000B5D7F5965
    x2.view(np.uint64)[1, 15] = 0xFFF000000000005B
    x0 = np.linspace(0.5, 1.5, 38).reshape(2, 19)
    fn = lambda x0, x2: x0 * jnp.mean(jnp.expm1(x2), axis=-1, keepdims=True)  # noqa: E731
    module = import_jax(fn, x0, x2)
    results = {name: _bits(np.asarray(lowering.compile(module, **options)(x0, x2)[0]))
               for name, options in CONFIGURATIONS.items()}
    assert results["interpreter"].view(np.uint64)[1, 3] == 0xFFF8000B5D7F5965  # (the first NaN, quieted)
    for name, bits in results.items():
        assert np.array_equal(bits, results["interpreter"]), name


@pytest.mark.parametrize("expression", ["jnp.abs(jnp.abs(x0))", "jnp.abs(x0 * x0)", "jnp.abs(jnp.exp(x0))",
                                        "jnp.abs(jnp.maximum(x1, jnp.abs(x0)))", "jnp.abs(jnp.abs(x0) ** x1)",
                                        "jnp.abs(jnp.where(x0 > x1, x0 * x0, jnp.exp(x1)))",
                                        "jnp.abs(jnp.sqrt(x0))", "jnp.abs(x0 * x1)"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_abs_of_a_non_negative_value_is_the_value_as_xla(expression, dtype):
    """XLA's simplifier drops ``abs`` of a value it knows is non-negative, so a NaN keeps its sign there (``abs``
    clears it); the last two expressions keep their ``abs`` (measured in jax.jit's optimized HLO)."""
    nan = np.array(np.nan, DTYPES[dtype])
    negative_nan = -nan
    x0 = np.array([negative_nan, nan, -2.0, 0.5, -0.0, np.inf, -np.inf, 1e-3], DTYPES[dtype])
    x1 = np.array([1.0, negative_nan, 2.0, -0.5, 3.0, nan, 0.25, -1.0], DTYPES[dtype])
    program = Program(dtype, x0.shape, [x0, x1], [("unary", expression)])
    _compare(program)  # (values; NaNs compared as NaNs)
    fn = program.function()
    expected = np.asarray(jax.jit(fn)(x0, x1))
    module = import_jax(fn, x0, x1)
    for configuration in CONFIGURATIONS.values():
        got = np.asarray(lowering.compile(module, **configuration)(x0, x1)[0])
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))  # (a NaN's sign too)


@pytest.mark.parametrize("expression", ["x0 * jnp.mean(x0, axis=-1, keepdims=True)", "jnp.sum(x0, axis=1)",
                                        "jnp.prod(x0, axis=1) + x1[:, 0]", "jnp.max(x0, axis=1, keepdims=True)",
                                        "jnp.min(x0, axis=(1, 2))"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_reductions_over_axes_of_one_are_reshapes_as_xla(expression, dtype):
    """Long campaign, seed 29: ``x * mean(x, axis=-1, keepdims=True)`` over an axis of one, ``x = -0.0``: XLA makes a
    reduce keeping every element a reshape (the init value never added), so the mean is -0.0 and the product +0.0;
    the executor's sum added the init (+0.0) and gave -0.0. Denormals are kept alike (no arithmetic)."""
    tiny = float(ml_dtypes.finfo(DTYPES[dtype]).tiny)
    values = [-0.0, 0.0, tiny / 4, -tiny / 4, np.nan, -1.5, np.inf, 2.0, -0.0, 3.0, -np.inf, 0.25]
    x0 = np.array(values, DTYPES[dtype]).reshape(12, 1, 1)
    x1 = np.array(values[::-1], DTYPES[dtype]).reshape(12, 1, 1)
    _compare(Program(dtype, x0.shape, [x0, x1], [("reduce", expression)]))


@pytest.mark.parametrize("statements", [
    [("convert", "x1.astype(jnp.bfloat16).astype(x1.dtype)"),
     ("select", "jnp.where(x0 > v0, v0.astype(jnp.float32).astype(x0.dtype), x0)")],
    [("convert", "x1.astype(jnp.float16).astype(x1.dtype)"),
     ("select", "jnp.where(v0.astype(jnp.float32).astype(x0.dtype) < x0, v0, x0)")],
    [("convert", "x1.astype(jnp.float32).astype(x1.dtype)"),
     ("select", "jnp.where(x0 > v0.astype(jnp.float32).astype(x0.dtype), v0, x0)")],
    # a rounding conversion is a new value: no max/min form
    [("convert", "x1.astype(jnp.bfloat16).astype(x1.dtype)"),
     ("select", "jnp.where(x0 > v0, v0.astype(jnp.float16).astype(x0.dtype), x0)")],
    [("select", "jnp.where(x0 > x1, x1.astype(jnp.float32).astype(x0.dtype), x0)")],
], ids=["bf16-f32", "f16-f32", "f32-f32", "bf16-f16", "f64-f32"])
def test_conversions_that_keep_every_value_are_one_value_in_max_min_selects_as_xla(statements):
    """Long campaign, seed 30: ``where(y > v, f64(f32(v)), y)`` with ``v = f64(bf16(x))``: LLVM folds the f32 round
    trip of a value that came from bf16 (f32 holds every bf16 value), the select is the min pattern, and a
    denormal ``y`` reads as zero (XLA: 0; the executor kept it). f64 only: the round trips are through narrower
    types."""
    tiny = float(np.finfo(np.float64).tiny)
    values0 = [tiny / 3, -tiny / 5, tiny / 3, -tiny / 5, 1.5, -2.5, float("nan"), 0.0, -0.0, 3.0, 1e-40, -1e300]
    values1 = [0.0, -0.0, 1e-3, -1e-3, 1.25, -2.5, 1.0, float("nan"), tiny / 7, 2.5, 0.0, 1e300]
    x0, x1 = np.array(values0), np.array(values1)
    _compare(Program("float64", x0.shape, [x0, x1], statements))
    _compare(Program("float64", x0.shape, [x0, x1], statements, loop_trips=2))


def _bf16_inputs(shape, seed, *extra):
    values = np.random.default_rng(seed).uniform(-1, 1, shape).astype(ml_dtypes.bfloat16)
    flat = values.reshape(-1)
    for k, value in enumerate(extra[:flat.size]):
        flat[-1 - k] = value
    return values


_TINY_BF16 = float(ml_dtypes.finfo(ml_dtypes.bfloat16).tiny)


@pytest.mark.parametrize("expression, shape", [
    ("jnp.abs(x0 + x0 * x0)", (1,)),  # the finding (x0 = 0.03125, below)
    ("x0 * 0.3 + x0", ()), ("x0 * 0.3 + x0", (16,)), ("x0 * 0.3 + x0", (49,)), ("x0 * 0.3 + x0", (50,)),
    ("x0 * x0 + x0", (1, 20)),
    ("(x0 * 0.3 + x0) * 1.7 + x0", (37,)), ("(x0 * 0.3 + x0) * 1.7 + x0", (38,)),
    ("x0 * 1.7 - x0 * x0", (16,)), ("(x0 - 0.3) - x0 * 0.3", (16,)), ("jnp.abs(x0 * 0.3 + x0)", (37,)),
    ("jnp.exp(x0) * 0.3 + x0", (33,)), ("jnp.expm1(x0) * 0.3 + x0", (15,)), ("jnp.sign(x0) * 0.3 + x0", (21,)),
    ("x0 * x0 + x0", (4, 5)),  # rows XLA vectorizes: each op rounds
    ("x0 * x0 + x0", (3, 24)), ("x0 * 0.3 + x0", (5, 7)), ("(x0 * x0 + x0) * x0 + x0", (2, 37)),
    # an operand XLA moves out of the loop (x1, carried unchanged) keeps the op in f32: each op rounds
    ("x0 * x1 + x0", (16,)), ("x0 * x0 + x1", (16,)), ("x0 * (x1 * x1) + x0", (16,)), ("x0 * x0 + x0 * x1", (16,)),
])
def test_bf16_multiply_adds_in_small_loops_as_xla(expression, shape):
    """Long campaign, seed 32: ``fori_loop(0, 3, x -> abs(x + x * x))`` on bf16 ``x = 0.03125``: jax.jit 0x3d0d, the
    executor 0x3d0c. In the loops XLA compiles whole, on hosts computing bf16 natively (AVX512-BF16 with AMX), LLVM contracts a bf16 multiply into
    the add that reads it (one f32 FMA rounded to bf16) where it computes the elements in scalar code -- element
    loops it unrolls whole (``passes.small_loops.unrolled_element_loop``); vector code rounds each op. Elsewhere
    each op rounds on every host: compared with jax.jit, the test holds on any CPU."""
    x0 = _bf16_inputs(shape, len(expression) + sum(shape), _TINY_BF16 / 3, -_TINY_BF16 / 5, np.nan, -np.inf)
    if expression == "jnp.abs(x0 + x0 * x0)":
        x0 = np.array([0.03125], ml_dtypes.bfloat16)
    x1 = _bf16_inputs(shape, 7)
    _compare(Program("bfloat16", x0.shape, [x0, x1], [("binary", expression)], loop_trips=3))


def test_bf16_multiply_adds_are_marked_only_where_llvm_contracts_them():
    """The ``xla-small-loops`` marks (``BF16_SCALAR``) follow the host: on hosts not computing bf16 natively nothing is
    marked; the element loop's estimate unrolls ``x * 0.3 + x`` on bf16[49], not on bf16[50] (6 per element)."""
    from passes.inlining import inline_calls
    from passes.small_loops import BF16_SCALAR, small_loop_numerics

    def marked(n):
        fn = lambda x: jax.lax.fori_loop(0, 3, lambda i, v: (v * 0.3 + v).astype(v.dtype), x)  # noqa: E731
        module = small_loop_numerics(inline_calls(import_jax(fn, np.zeros(n, ml_dtypes.bfloat16)), clone=True))
        return sorted(op.name for op in module.walk() if BF16_SCALAR in op.attributes)

    expected = ["hlo.add", "hlo.multiply"] if native_bf16() else []
    assert marked(49) == expected
    assert marked(50) == []


@pytest.mark.parametrize("expression", ["jnp.sum(-x0, axis=0)", "jnp.sum(-x0[:, 0])", "jnp.sum(-(x0 * x1[0]), axis=0)",
                                        "jnp.sum(-jnp.exp(x0), axis=-1)", "-x0 + jnp.sum(-x0, axis=0)"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sums_of_negations_are_negated_sums_as_xla(expression, dtype):
    """``jnp.sum(-x)`` is ``-jnp.sum(x)`` in XLA (its simplifier): a sum of zeros is -0 (the executor gave +0), and
    a sum of a negated product contracts each step into an FMA (the gradient of ``h - h.mean(0)``)."""
    x0 = np.zeros((12, 5), DTYPES[dtype])
    x0[3:6] = np.random.default_rng(1).standard_normal((3, 5))
    x1 = np.random.default_rng(2).standard_normal((12, 5)).astype(DTYPES[dtype])
    _compare(Program(dtype, x0.shape, [x0, x1], [("reduce", expression)]))


def test_a_cumulative_sum_of_nan_payloads_is_one_definitions():
    """Long campaign: ``jnp.cumsum`` (a reduce_window) of NaNs with two payloads in a loop gave the second
    payload interpreted (NumPy's vector add returns the second NaN of two, its scalar loop the first) and the
    first compiled. Now every path adds with the definition where a window's sum is NaN: the first NaN."""
    x1 = np.zeros(17, np.uint32)
    x1[[2, 4, 5, 7, 8, 10, 12, 15, 16]] = [0x7F801EE7, *[0x7F800001] * 8]
    x1 = x1.view(np.float32)
    x0 = np.zeros(17, np.float32)
    for trips in (0, 1):
        _compare(Program("float32", x0.shape, [x0, x1], [("structured", "jnp.cumsum(x1)")], loop_trips=trips))
        _compare(Program("float64", x0.shape, [x0.astype(np.float64), x1.astype(np.float64)],
                         [("structured", "jnp.cumsum(x1 * 3)")], loop_trips=trips))
