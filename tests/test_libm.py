"""lowering.kernels.libm calls the C library's own functions, whatever NumPy's SIMD dispatch does on this CPU."""

import ctypes
import ctypes.util

import jax
import numpy as np
import pytest

from lowering.kernels import libm

_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))


def _c_reference(c_name: str, dtype, *arrays):
    """The C function applied element by element through ctypes (slow, unambiguous)."""
    fn = getattr(_LIBM, c_name)
    c_type = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    fn.restype, fn.argtypes = c_type, [c_type] * len(arrays)
    return np.array([fn(*values) for values in zip(*(a.tolist() for a in arrays))], dtype)


def _inputs(dtype, n=3000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5]
    with np.errstate(all="ignore"):
        return np.concatenate([x, special]).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(libm._UNARY_C_NAMES))
def test_unary_is_the_c_function(name, dtype):
    x = _inputs(dtype)
    if name == "log":
        x = np.abs(x)
    c_name = libm._UNARY_C_NAMES[name][dtype == np.float64]
    with np.errstate(all="ignore"):
        got = getattr(libm, name)(x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), _c_reference(c_name, dtype, x).view(f"u{x.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(libm._BINARY_C_NAMES))
def test_binary_is_the_c_function(name, dtype):
    x, y = _inputs(dtype), _inputs(dtype, seed=1) / dtype(1e20)
    if name == "pow":
        x = np.abs(x)
    c_name = libm._BINARY_C_NAMES[name][dtype == np.float64]
    with np.errstate(all="ignore"):
        got = getattr(libm, name)(x, y)
    np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), _c_reference(c_name, dtype, x, y).view(f"u{x.itemsize}"))


def test_scalars_broadcasting_and_errors():
    from xla_dialect.errors import XlaError

    assert libm.pow(np.float32(4), 0.5).dtype == np.float32
    assert libm.atan2(np.ones((2, 1), np.float64), np.ones(3)).shape == (2, 3)
    with pytest.raises(XlaError, match="f32 or f64"):
        libm.tan(np.ones(2, np.int32))
    with pytest.raises(XlaError, match="one dtype"):
        libm.pow(np.ones(2, np.float32), np.ones(2, np.float64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_pow_by_one_half_is_llvms_sqrt(dtype):
    # XLA CPU's LLVM turns pow(x, 0.5) with a constant exponent into |sqrt(x)|, -inf -> +inf.
    from interop import import_jax

    import lowering

    x = np.concatenate([_inputs(dtype), np.array([-np.inf, -0.0, -4.0], dtype)])
    fn = lambda a: jax.lax.pow(a, dtype(0.5))  # noqa: E731
    with np.errstate(all="ignore"):
        (got,) = lowering.compile(import_jax(fn, x))(x)
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))
