"""Differential testing of JAX functions: run ``fn`` with ``jax.jit`` and on the NumPy executor, compare.

>>> report = interop.difftest(lambda x: jnp.tanh(x) @ x.T, x)
>>> print(report)            # per output: max abs / rel error, max ULP distance
>>> report.raise_if_mismatch()

:func:`difftest` traces ``fn`` with the given arguments, imports the program
(:func:`interop.import_jax`), runs it on the NumPy executor
(:func:`lowering.compile`) and runs ``jax.jit(fn)`` on the same inputs. Every
output is compared by the rules of :mod:`interop.comparison` (also ``xla-run --check-xla``'s and the
conformance runner's): integers and bools exactly, floats (and both parts of complex numbers) within a
budget of ULPs or of the output's magnitude.

A float output out of tolerance may be rounding noise (see :mod:`interop.comparison`): this module
gives the analysis its reference for a JAX function, :func:`float64_program` (the traced jaxpr with every
float widened, so random bits stay those of the program), and XLA's results on nudged inputs
(:func:`analyse_noise`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from ..comparison import (
    DEFAULT_NOISE_SAMPLES,
    DiffReport,
    OutputDiff,
    _NoReference,
    analyse_noise_with,
    compare_output,
    is_float_dtype,
    plain_array,
)

__all__ = ["analyse_noise", "difftest", "float64_program"]

_CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "remat2", "checkpoint", "custom_jvp_call",
                    "custom_vjp_call", "custom_vjp_call_jaxpr"})

# Scatters carry their combiner as a jaxpr of the operand type: made again by lax for float64.
_SCATTERS = {"scatter-add": "scatter_add", "scatter-sub": "scatter_sub", "scatter-mul": "scatter_mul",
             "scatter-min": "scatter_min", "scatter-max": "scatter_max"}


def _widen(x):
    """``x`` in the evaluation type of its type: float64 for every real float, complex128 for complex."""
    import jax
    from jax import lax

    dtype = getattr(x, "dtype", None)
    if dtype is None or jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return x
    dtype = np.dtype(dtype)
    if dtype.kind == "c" and dtype != np.complex128:
        return lax.convert_element_type(x, np.complex128)
    return lax.convert_element_type(x, np.float64) if is_float_dtype(dtype) and dtype != np.float64 else x


def _wide_param(value):
    if isinstance(value, np.dtype) and (value.kind == "c" or is_float_dtype(value)):
        return np.dtype(np.complex128 if value.kind == "c" else np.float64)
    return value


def _eval_wide(jaxpr, consts, args):
    """Evaluate a jaxpr with every float value in float64 (complex in complex128), to be traced by jax.jit
    under x64: conversions to a float type convert to float64, ``reduce_precision`` is left out, bitcasts
    see their operands in their own type; calls, ``scan``, ``while`` and ``cond`` evaluate their bodies
    the same way. Other operations with a body (``shard_map``, ...) raise :class:`_NoReference`."""
    from jax.extend.core import ClosedJaxpr, DropVar, Literal

    env = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    def run(sub, values):
        if isinstance(sub, ClosedJaxpr):
            return _eval_wide(sub.jaxpr, sub.consts, values)
        return _eval_wide(sub, [], values)

    for var, value in (*zip(jaxpr.constvars, consts), *zip(jaxpr.invars, args)):
        env[var] = _widen(value)
    for eqn in jaxpr.eqns:
        outs = _eval_eqn(eqn, [_widen(read(v)) for v in eqn.invars], run)
        for var, value in zip(eqn.outvars, outs):
            if not isinstance(var, DropVar):
                env[var] = _widen(value)
    return [_widen(read(v)) for v in jaxpr.outvars]


def _eval_eqn(eqn, ins, run):
    from jax import lax
    from jax.extend.core import jaxprs_in_params

    name, params = eqn.primitive.name, dict(eqn.params)
    if name in _CALLS:
        sub = next(params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in params)
        return run(sub, ins)
    if name == "scan":
        nc, nk = params["num_consts"], params["num_carry"]
        consts, init, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]

        def body(carry, x):
            out = run(params["jaxpr"], [*consts, *carry, *x])
            return out[:nk], out[nk:]

        carry, ys = lax.scan(body, init, xs, length=params["length"], reverse=params["reverse"])
        return [*carry, *ys]
    if name == "while":
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        cond_consts, body_consts, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
        return lax.while_loop(lambda c: run(params["cond_jaxpr"], [*cond_consts, *c])[0],
                              lambda c: run(params["body_jaxpr"], [*body_consts, *c]), list(init))
    if name == "cond":
        branches = [lambda *a, br=br: run(br, list(a)) for br in params["branches"]]
        return lax.switch(ins[0], branches, *ins[1:])
    if name in _SCATTERS or (name == "scatter" and params.get("update_jaxpr") is None):
        scatter = getattr(lax, _SCATTERS.get(name, "scatter"))
        return [scatter(*ins, params["dimension_numbers"], indices_are_sorted=params["indices_are_sorted"],
                        unique_indices=params["unique_indices"], mode=params["mode"])]
    if any(True for _ in jaxprs_in_params(params)):
        raise _NoReference(f"the program has a {name} operation, which is not evaluated in float64")
    if name == "reduce_precision":
        return ins
    if name == "bitcast_convert_type":  # of the bits of the value in its own type, to its own type
        ins = [lax.convert_element_type(x, v.aval.dtype) for x, v in zip(ins, eqn.invars)]
    else:
        params = {k: _wide_param(v) for k, v in params.items()}
    out = eqn.primitive.bind(*ins, **params)
    return out if eqn.primitive.multiple_results else [out]


def _run_wide(closed, *leaves):
    """:func:`_eval_wide` of a closed jaxpr on its arguments: integers as the program takes them (int64 to
    int32 without x64), floats and keys as they are."""
    import jax
    from jax import lax

    def as_given(dtype) -> bool:
        return (jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) or is_float_dtype(dtype)
                or np.dtype(dtype).kind == "c")

    leaves = [x if as_given(v.aval.dtype) else lax.convert_element_type(x, v.aval.dtype)
              for x, v in zip(leaves, closed.jaxpr.invars)]
    return _eval_wide(closed.jaxpr, closed.consts, leaves)


@functools.cache
def _wide_jit():
    import jax

    return jax.jit(_run_wide, static_argnums=0)  # jax caches the jaxpr of a call: compiled once per program


def float64_program(fn, args, kwargs):
    """A function of the leaves of ``(args, kwargs)`` returning the float64 value of each output of
    ``jax.jit(fn)`` (NumPy arrays): the jaxpr of the call evaluated with every float in float64
    (:func:`_eval_wide`), compiled by jax.jit under x64. Raises :class:`_NoReference` when it cannot be."""
    import jax

    from .importer import jit_of_call

    closed = jit_of_call(fn).trace(*args, **kwargs).jaxpr
    count = len(closed.jaxpr.invars)

    def evaluate(leaves):
        if len(leaves) != count:
            raise _NoReference(f"the program takes {count} arguments, the call has {len(leaves)} leaves")
        with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):
            return [plain_array(x) for x in _wide_jit()(closed, *leaves)]

    return evaluate


def analyse_noise(fn, args, kwargs, outputs: list[OutputDiff], actual: list, expected: list,
                  samples: int = DEFAULT_NOISE_SAMPLES, atol: float = 0.0) -> None:
    """Set :attr:`OutputDiff.noise` on each float output that is out of tolerance (see :class:`NoiseEvidence`):
    XLA's float32 program on the inputs and on ``samples`` nudged copies (:func:`nudge_ulp`, seeded), each
    against :func:`float64_program` on the same inputs."""
    import jax

    def setup():
        reference = float64_program(fn, args, kwargs)
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        jitted = jax.jit(fn)

        def run_xla(moved):
            margs, mkwargs = jax.tree_util.tree_unflatten(tree, moved)
            with jax.default_device(jax.devices("cpu")[0]):
                return [plain_array(x) for x in jax.tree.leaves(jitted(*margs, **mkwargs))]

        return leaves, run_xla, reference

    analyse_noise_with(setup, outputs, actual, expected, samples, atol)


def difftest(fn, *args, max_ulp: int | Mapping[str, int] | None = None, atol: float = 0.0,
             rtol_magnitude: float | Mapping[str, float] | None = None, exact: bool = False,
             kwargs: Mapping | None = None, name: str | None = None, accept_noise: bool = False,
             noise_samples: int = DEFAULT_NOISE_SAMPLES, sharded: bool = False) -> DiffReport:
    """Run ``jax.jit(fn)`` and the imported program on the NumPy executor on ``args``; compare every output.

    ``args`` (and ``kwargs``, the function's keyword arguments) may be pytrees
    of arrays or scalars, typed PRNG keys included (compared as their key data).
    Each float (or complex) output agrees when every element is within
    ``max_ulp`` ULPs (element-wise results: an int for every dtype, or a mapping from
    dtype name - ``'float32'``, ``'bfloat16'``; complex outputs use their component
    type - to budget, missing names taking :data:`DEFAULT_MAX_ULP`) **or** within
    ``rtol_magnitude`` times the output's magnitude (its largest ``|value|``; sums
    and matmuls in another order: default :data:`DEFAULT_MAGNITUDE_RTOL`, 64 units of
    roundoff for f32; 0 turns it off). ``atol > 0`` also accepts elements within that
    absolute error. Integer and bool outputs must be equal. ``exact=True`` requires
    every output to be bitwise equal (where the executor reproduces XLA exactly).

    The report says per output whether it is bitwise exact, within the ULP budget, or
    only within the magnitude bound. Returns a :class:`DiffReport`; import and
    execution errors propagate as :class:`~xla_dialect.errors.XlaError`.

    A float output out of tolerance (not with ``exact=True``) is checked for rounding noise
    (:func:`analyse_noise`): XLA's float32 results on the inputs and on ``noise_samples`` copies
    nudged by an ULP are compared with a float64 evaluation of the same program on the same inputs.
    When every element that differs is one where XLA's own error is beyond the tolerance and our
    difference is at most :data:`NOISE_FACTOR` times that error (a quantity that is 0 in exact
    arithmetic, rounding noise that a later step such as Adam's first update scales up), the output
    is ``noise-dominated``, with the evidence (:class:`NoiseEvidence`). It does not count as agreeing
    (``report.ok`` is False, the verdict ``noise-dominated``) unless ``accept_noise=True``.
    ``noise_samples=0`` turns the check off.

    ``sharded=True`` compares a sharded function (``jax.jit`` with in/out shardings over a mesh,
    ``jax.jit(jax.shard_map(...))``) run as :func:`interop.compile_sharded` runs it -- XLA's partitioned
    per-device program, one program per device, global arrays assembled from the shards -- with the
    function itself on the host devices (jax.jit on N devices: the process needs them,
    ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` or the plugin's ``--difftest-devices N``). The
    rounding-noise check is not made for sharded functions.
    """
    import jax

    import lowering

    from .importer import import_jax

    kwargs = dict(kwargs or {})
    label = name or getattr(fn, "__name__", type(fn).__name__)
    if sharded:
        return _difftest_sharded(fn, args, kwargs, label, max_ulp, atol, rtol_magnitude, exact)
    with jax.default_device(jax.devices("cpu")[0]):  # the reference is XLA's CPU backend
        expected_tree = jax.jit(fn)(*args, **kwargs)
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(expected_tree)
    expected = [plain_array(leaf) for _, leaf in leaves_with_paths]
    names = [jax.tree_util.keystr(path) for path, _ in leaves_with_paths]

    # The program of the call, whose outputs are the ones compared: import_jax traces a function jitted by
    # another library (nnx.jit, whose own program returns state updates first) as jax.jit of the call.
    module = import_jax(fn, *args, **kwargs)
    flat_args = [plain_array(a) for a in jax.tree.leaves((args, kwargs))]
    # The arguments as jax.jit takes them: converted to the program's parameter types (e.g. int64 to s32
    # without jax_enable_x64), as jax does.
    actual = list(lowering.compile(module, argument_conversion="cast")(*flat_args))

    report = DiffReport(label)
    if len(actual) != len(expected):
        report.error = f"the executor returned {len(actual)} outputs, jax.jit {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        report.outputs.append(compare_output(a, e, max_ulp, atol, rtol_magnitude, exact, i, names[i]))
    report.accept_noise = accept_noise
    if noise_samples > 0 and not exact and report.error is None:
        analyse_noise(fn, args, kwargs, report.outputs, actual, expected, noise_samples, atol)
    return report


def _difftest_sharded(fn, args, kwargs, label, max_ulp, atol, rtol_magnitude, exact) -> DiffReport:
    """:func:`difftest` of a sharded function: :func:`interop.compile_sharded` against the function on the host
    devices (a jitted function as it is, with its shardings; another one through ``jax.jit``)."""
    import jax

    from .sharded import compile_sharded

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    expected_tree = jitted(*args, **kwargs)
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(expected_tree)
    expected = [plain_array(leaf) for _, leaf in leaves_with_paths]
    names = [jax.tree_util.keystr(path) for path, _ in leaves_with_paths]
    exe = compile_sharded(fn, *args, **kwargs)
    actual = [plain_array(leaf) for leaf in jax.tree.leaves(exe(*args, **kwargs))]
    report = DiffReport(f"{label} (sharded: {exe.num_replicas} replicas x {exe.num_partitions} partitions)")
    if len(actual) != len(expected):
        report.error = f"the executor returned {len(actual)} outputs, jax.jit {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        report.outputs.append(compare_output(a, e, max_ulp, atol, rtol_magnitude, exact, i, names[i]))
    return report
