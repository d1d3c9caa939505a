"""Generated arguments for a program: ``random_inputs`` and ``xla-run --random-inputs``.

Values are reproducible (one ``seed``) and of the parameter types of the program's entry function. With
``special_values`` the edge cases that break numerics are mixed in: NaN (both signs), infinities, signed
zeros, denormals, the largest finite values and, for integers, the extremes and -1.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

from xla_dialect.errors import UnsupportedError, XlaError

__all__ = ["parameter_types", "random_array", "random_inputs", "special_values_of"]

SPECIAL_FRACTION = 0.25
"""With ``special_values``: about this fraction of the elements of each array is a special value (every
special value appears at least once when the array has room for them all)."""


def parameter_types(program, entry: str = "main") -> list:
    """The parameter types of ``program``: an xDSL module (its function ``entry``), a ``func.func``, an
    executable of :func:`lowering.compile` (its ``input_types``) or a list of types."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp

    if isinstance(program, ModuleOp):
        for op in program.ops:
            if isinstance(op, func.FuncOp) and op.sym_name.data == entry:
                return list(op.function_type.inputs)
        names = [op.sym_name.data for op in program.ops if isinstance(op, func.FuncOp)]
        raise XlaError(f"random_inputs: no function @{entry} in the module (have: {', '.join(names) or 'none'})")
    if isinstance(program, func.FuncOp):
        return list(program.function_type.inputs)
    if hasattr(program, "input_types"):
        return list(program.input_types)
    if isinstance(program, Sequence) and not isinstance(program, (str, bytes)):
        return list(program)
    raise XlaError("random_inputs expects an xDSL ModuleOp, a func.func, a compiled executable or a list of "
                   f"types, got {type(program).__name__}")


def special_values_of(dtype) -> np.ndarray:
    """The special values of ``dtype`` that ``special_values=True`` mixes in (an array of that dtype)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([False, True])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [info.min, info.max, 0, 1] + ([-1, info.min + 1] if dtype.kind == "i" else [info.max - 1])
        return np.array(values, dtype=dtype)
    if dtype.kind == "c":
        part = special_values_of(np.float32 if dtype.itemsize == 8 else np.float64)
        return (part + 0j).astype(dtype)
    info = _finfo(dtype)
    # -NaN is the NaN of XLA's own results (0 * inf, inf - inf on x86): a sign that passes must not lose
    values = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0]
    values += [float(info.max), -float(info.max), float(info.smallest_normal)]
    tiny = float(getattr(info, "smallest_subnormal", 0.0) or 0.0)
    if tiny and tiny < float(info.smallest_normal):
        values += [tiny, -tiny * 3]
    with np.errstate(all="ignore"):
        out = np.array(values, dtype=np.float64).astype(dtype)
    out[1] = -out[0] if dtype.kind == "f" else out[1]  # (astype can drop the sign of a NaN)
    if dtype.kind != "f":  # ml_dtypes floats: set the sign bit of the second NaN by hand
        bits = out.view(np.uint8 if dtype.itemsize == 1 else np.uint16)
        bits[1] = bits[0] | (1 << (dtype.itemsize * 8 - 1))
    if not _has_inf(dtype):  # (inf converts to NaN there)
        out = np.delete(out, [2, 3])
    return out


def _finfo(dtype):
    try:
        return np.finfo(dtype) if dtype.kind == "f" else ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        raise UnsupportedError(f"random_inputs: no generator for element type {dtype}") from None


def _has_inf(dtype) -> bool:
    """False for the f8/f4 types without infinities (e4m3fn, ...), where inf converts to NaN."""
    with np.errstate(all="ignore"):
        return bool(np.isinf(np.array(np.inf).astype(dtype).astype(np.float64)))


def _ordinary(rng: np.random.Generator, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """Values of moderate size, as real data has: normal floats, small integers."""
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = max(int(info.min), -100), min(int(info.max), 100)
        return rng.integers(low, high + 1, size=shape).astype(dtype)
    if dtype.kind == "c":
        part = np.float32 if dtype.itemsize == 8 else np.float64
        return (_ordinary(rng, np.dtype(part), shape) + 1j * _ordinary(rng, np.dtype(part), shape)).astype(dtype)
    with np.errstate(all="ignore"):
        return (rng.standard_normal(shape) * 2.0).astype(dtype)


def random_array(rng: np.random.Generator, dtype, shape, special_values: bool = False) -> np.ndarray:
    """One array of ``dtype`` and ``shape`` drawn from ``rng`` (see :func:`random_inputs`)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    out = np.asarray(_ordinary(rng, dtype, shape))
    if special_values and out.size:
        specials = special_values_of(dtype)
        flat = out.reshape(-1)
        count = max(1, int(round(flat.size * SPECIAL_FRACTION)))
        where = rng.permutation(flat.size)[:count]
        # every special value once (as room allows), the rest drawn at random
        picks = np.concatenate([np.arange(min(count, specials.size)),
                                rng.integers(0, specials.size, size=max(0, count - specials.size))])
        flat[where] = specials[picks.astype(np.int64)]
        out = flat.reshape(shape)
    return out


def random_inputs(program, seed: int = 0, special_values: bool = False, entry: str = "main") -> list:
    """Arguments for ``program``: one array per parameter of its entry function, of the parameter's shape and
    dtype, reproducible from ``seed``.

    ``program`` is an xDSL module (function ``entry``), a ``func.func``, a compiled executable or a list of
    parameter types. Floats are normal with standard deviation 2, integers lie in [-100, 100] (clipped to the
    type), booleans are fair coins. With ``special_values`` about a quarter of each array's elements are
    replaced by :func:`special_values_of` its dtype: NaN and -NaN, +-inf, +-0, +-1, +-the largest finite value,
    the smallest normal and two denormals; the extremes, 0, 1 and -1 of integers. Token parameters get None.
    """
    from xdsl.dialects.builtin import TensorType, TupleType

    from xla_dialect.types import TokenType, numpy_dtype

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise XlaError(f"random_inputs: seed must be an int, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    out = []
    for i, t in enumerate(parameter_types(program, entry)):
        if isinstance(t, TokenType):
            out.append(None)
            continue
        if isinstance(t, TupleType) or not isinstance(t, TensorType):
            raise UnsupportedError(f"random_inputs: parameter #{i} has type {t}; only array parameters are generated")
        try:
            dtype = numpy_dtype(t)
        except XlaError:
            raise UnsupportedError(f"random_inputs: parameter #{i}: no generator for {t}") from None
        out.append(random_array(rng, dtype, t.get_shape(), special_values))
    return out
