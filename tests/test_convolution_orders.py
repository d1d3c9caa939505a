"""2-D convolutions in XLA CPU's summation orders: bit for bit against jax.jit.

XLA CPU (jax 0.10.2) gives a 2-D f32/f64 convolution with more than 16 input or output features to YNNPACK, which
computes it as a dot over ``(kh, kw, ci)`` with its own kernel choice, lanes, remainder calls and chunks
(lowering/kernels/ynnpack_convolution.py); an f32 one with at most 16 features it computes itself, with Eigen's
spatial convolution: the contraction order of ``lowering/kernels/eigen_dots.py`` over the patches in ``(kh, kw,
ci)`` order. Before, the executor multiplied im2col patches with BLAS: most outputs differed in the last bits (e.g.
43,320 of 50,176 of the second convolution of flax's CNN example; 7,238 of 8,192 of a 5x5 convolution of 16
features).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax


def _avx512_host() -> bool:
    from lowering.kernels.host import measured_host

    return measured_host()


def _eigen_host() -> bool:
    from lowering.kernels.eigen_dots import MEASURED_CPUS, measured_eigen_host
    from lowering.runtime.workers import usable_cpus

    return measured_eigen_host() and usable_cpus() <= MEASURED_CPUS


pytestmark = pytest.mark.skipif(not _avx512_host(), reason="YNNPACK's dot order was measured on AVX-512 hosts only")

VALID, SAME1, SAME2 = ((0, 0), (0, 0)), ((1, 1), (1, 1)), ((2, 2), (2, 2))

# (batch, height, width, in features, out features, kh, kw, strides, padding, window dilation, dtype)
_CASES = {
    "flax CNN second conv": (8, 14, 14, 16, 32, 3, 3, (1, 1), SAME1, (1, 1), np.float32),
    "two lanes, odd features": (2, 16, 16, 17, 32, 3, 3, (1, 1), VALID, (1, 1), np.float32),
    "four lanes, three left": (2, 16, 16, 19, 24, 3, 3, (1, 1), VALID, (1, 1), np.float32),
    "window padding picks two lanes": (2, 16, 16, 33, 20, 5, 5, (1, 1), SAME2, (1, 1), np.float32),
    "features below one lane tile": (2, 16, 16, 1, 32, 3, 3, (1, 1), VALID, (1, 1), np.float32),
    "RGB input": (2, 16, 16, 3, 32, 3, 3, (1, 1), VALID, (1, 1), np.float32),
    "chunked window": (1, 32, 32, 64, 64, 3, 3, (1, 1), SAME1, (1, 1), np.float32),
    "deep chunked": (1, 7, 7, 256, 512, 3, 3, (1, 1), SAME1, (1, 1), np.float32),
    "ragged column tile": (1, 19, 7, 128, 300, 1, 4, (2, 2), VALID, (1, 1), np.float32),
    "strided 1x1": (2, 16, 16, 32, 64, 1, 1, (2, 2), VALID, (1, 1), np.float32),
    "window dilation": (2, 16, 16, 24, 40, 3, 3, (1, 1), VALID, (2, 2), np.float32),
    "rectangular, strided": (4, 16, 9, 12, 200, 4, 5, (1, 2), ((2, 1), (2, 2)), (1, 1), np.float32),
    "few output rows": (4, 6, 5, 48, 100, 5, 4, (2, 1), VALID, (1, 1), np.float32),
    "f64": (2, 16, 16, 17, 33, 5, 5, (1, 1), SAME2, (1, 1), np.float64),
    "f64 chunked": (1, 12, 12, 64, 64, 3, 3, (1, 1), SAME1, (1, 1), np.float64),
    "f64 rounded-product kernel": (3, 21, 5, 65, 4, 1, 2, (2, 2), ((0, 0), (1, 0)), (1, 1), np.float64),
}


def _conv(strides, padding, dilation, dimension_numbers=("NHWC", "HWIO", "NHWC")):
    return lambda x, k: lax.conv_general_dilated(x, k, strides, padding, rhs_dilation=dilation,
                                                 dimension_numbers=dimension_numbers)


def _operands(n, h, w, ci, co, kh, kw, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, h, w, ci)).astype(dtype), rng.standard_normal((kh, kw, ci, co)).astype(dtype)


def _run(fn, args, **options):
    import lowering
    from interop import import_jax

    executable = lowering.compile(import_jax(fn, *args), **options)
    return [np.asarray(v) for v in executable(*args)]


def _assert_bitwise(got, want):
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    differ = got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")
    assert not differ.any(), f"{int(differ.sum())} of {differ.size} elements differ from jax.jit"


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("name", list(_CASES))
def test_convolution_bitwise(name):
    n, h, w, ci, co, kh, kw, strides, padding, dilation, dtype = _CASES[name]
    x, k = _operands(n, h, w, ci, co, kh, kw, dtype)
    fn = _conv(strides, padding, dilation)
    assert "__ynn" in jax.jit(fn).lower(x, k).compile().as_text(), "XLA no longer runs this convolution in YNNPACK"
    (got,) = _run(fn, (x, k))
    _assert_bitwise(got, jax.jit(fn)(x, k))


def test_nchw_layout_and_bias():
    """NCHW/OIHW operands (XLA transposes them to its canonical layout first) and a bias added after."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 16, 14, 14)).astype(np.float32)
    k = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal((32, 1, 1)).astype(np.float32)

    def fn(x, k, b):
        return jax.nn.relu(lax.conv_general_dilated(x, k, (1, 1), SAME1, dimension_numbers=("NCHW", "OIHW", "NCHW"))
                           + b)

    for options in ({}, {"fusion": "never", "loop_compilation": "never"}):
        (got,) = _run(fn, (x, k, b), **options)
        _assert_bitwise(got, jax.jit(fn)(x, k, b))


def test_convolution_in_a_scan():
    """The same order where the convolution is a loop body's (the compiled paths call the one kernel)."""
    x, k = _operands(2, 10, 10, 20, 20, 3, 3, np.float32, seed=2)
    k = k * np.float32(0.2)
    conv = _conv((1, 1), SAME1, (1, 1))

    def fn(x, k):
        return lax.fori_loop(0, 3, lambda i, y: jax.numpy.tanh(conv(y, k)), x)

    for options in ({}, {"loop_compilation": "never"}):
        (got,) = _run(fn, (x, k), **options)
        _assert_bitwise(got, jax.jit(fn)(x, k))


def test_plan_follows_the_window():
    """YNNPACK's cost model charges the padding of the features once per window position: 33 features in a 3x3
    window take a two-lane kernel (the flat K = 297 would take four), 35 and 36 four."""
    from lowering.kernels.ynnpack_convolution import convolution_plan

    assert convolution_plan(2, (14, 14), 33, 9, 20, 1, np.float32).tile_k == 2
    assert convolution_plan(2, (14, 14), 35, 9, 20, 1, np.float32).tile_k == 4
    assert convolution_plan(2, (14, 14), 36, 9, 20, 1, np.float32).tile_k == 4
    chunked = convolution_plan(1, (32, 32), 64, 9, 64, 1, np.float32)  # 128 KiB / (9 positions * 64 columns * 4 B)
    assert (chunked.tile_k, chunked.chunk) == (1, 56)


# Feature groups (XLA's emitter makes them a batch dimension of YNNPACK's dot, one row each): (batch, height, width,
# in features, out features, kh, kw, groups, padding, dtype)
_GROUPED = {
    "depthwise 3x3 (rounded products)": (2, 16, 16, 64, 64, 3, 3, 64, SAME1, np.float32),
    "depthwise 7x7, ConvNeXt-style": (2, 14, 14, 96, 96, 7, 7, 96, ((3, 3), (3, 3)), np.float32),
    "depthwise, two outputs each": (2, 16, 16, 64, 128, 3, 3, 64, SAME1, np.float32),
    "four groups": (2, 16, 16, 64, 64, 3, 3, 4, SAME1, np.float32),
    "two groups": (2, 16, 16, 64, 64, 3, 3, 2, SAME1, np.float32),
    "f64 groups of two": (2, 16, 16, 64, 64, 3, 3, 32, SAME1, np.float64),
    "few output pixels (B unpacked, fused)": (1, 4, 11, 8, 64, 4, 5, 8, VALID, np.float32),
    "few output pixels, 4 outputs per group": (2, 6, 10, 64, 128, 4, 7, 32, VALID, np.float32),
}


@pytest.mark.parametrize("name", list(_GROUPED))
def test_grouped_convolution_bitwise(name):
    n, h, w, ci, co, kh, kw, groups, padding, dtype = _GROUPED[name]
    strides = (2, 2) if name.endswith("per group") else (1, 1)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((n, h, w, ci)).astype(dtype)
    k = rng.standard_normal((kh, kw, ci // groups, co)).astype(dtype)

    def fn(x, k):
        return lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        feature_group_count=groups)

    assert "__ynn" in jax.jit(fn).lower(x, k).compile().as_text(), "XLA no longer runs this convolution in YNNPACK"
    (got,) = _run(fn, (x, k))
    _assert_bitwise(got, jax.jit(fn)(x, k))


@pytest.mark.parametrize("case", ["few features", "batch groups"])
def test_not_ynnpack_stays_as_before(case):
    """Convolutions XLA does not give to YNNPACK keep the executor's other routes."""
    from lowering.kernels import ynnpack_convolution

    calls = []
    original = ynnpack_convolution.ynnpack_convolution
    ynnpack_convolution_calls = lambda *a, **kw: calls.append(1) or original(*a, **kw)  # noqa: E731
    rng = np.random.default_rng(3)
    if case == "few features":
        x = rng.standard_normal((2, 12, 12, 8)).astype(np.float32)
        k = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
        fn = _conv((1, 1), SAME1, (1, 1))
    else:
        x = rng.standard_normal((4, 12, 12, 32)).astype(np.float32)
        k = rng.standard_normal((3, 3, 32, 64)).astype(np.float32)
        fn = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), SAME1, dimension_numbers=("NHWC", "HWIO", "NHWC"),  # noqa: E731
                                                   batch_group_count=2)
    import lowering.kernels.windowed as windowed

    saved = windowed.ynnpack_convolution
    windowed.ynnpack_convolution = ynnpack_convolution_calls
    try:
        (got,) = _run(fn, (x, k))
    finally:
        windowed.ynnpack_convolution = saved
    assert not calls
    np.testing.assert_allclose(got, jax.jit(fn)(x, k), rtol=2e-5, atol=2e-5)


# XLA's own (Eigen) convolutions: at most 16 input and output features. (batch, height, width, in, out, kh, kw,
# strides, padding)
_EIGEN_CASES = {
    "3x3 of 4 features": (8, 16, 16, 4, 8, 3, 3, (1, 1), "SAME"),
    "5x5, K = 400 (oneDNN pieces)": (2, 16, 16, 16, 16, 5, 5, (1, 1), "SAME"),
    "7x7, K = 784": (1, 20, 20, 16, 16, 7, 7, (1, 1), "SAME"),
    "9x9, K = 1296": (16, 20, 20, 16, 8, 9, 9, (1, 1), "SAME"),
    "RGB input": (8, 32, 32, 3, 16, 3, 3, (1, 1), "SAME"),
    "strided, rectangular": (6, 28, 23, 16, 12, 3, 4, (1, 2), "VALID"),
    # Eigen shards these contractions by K (two halves added): its cost model prices the image patches
    "sharded by K, 2 outputs": (4, 22, 28, 5, 2, 4, 6, (1, 2), "VALID"),
    "sharded by K, 4 outputs": (7, 5, 15, 5, 4, 5, 8, (2, 1), "VALID"),
    "sharded by K, 15 outputs": (3, 11, 10, 16, 15, 7, 3, (2, 1), "VALID"),
    # one output feature: oneDNN's matrix-vector kernel in every slice (the plan's last-column rule)
    "one output feature": (2, 12, 12, 16, 1, 3, 3, (1, 1), "SAME"),
    "one output feature, sharded by K": (4, 20, 20, 8, 1, 5, 5, (1, 1), "SAME"),
}


@pytest.mark.skipif(not _eigen_host(), reason="Eigen's contraction plan was measured with known caches, 1-2 CPUs")
@pytest.mark.parametrize("name", list(_EIGEN_CASES))
def test_eigen_convolution_bitwise(name):
    n, h, w, ci, co, kh, kw, strides, padding = _EIGEN_CASES[name]
    x, k = _operands(n, h, w, ci, co, kh, kw, np.float32)
    fn = _conv(strides, padding, (1, 1))
    assert "__ynn" not in jax.jit(fn).lower(x, k).compile().as_text()
    for options in ({}, {"fusion": "never", "loop_compilation": "never"}):
        (got,) = _run(fn, (x, k), **options)
        _assert_bitwise(got, jax.jit(fn)(x, k))


@pytest.mark.skipif(not _eigen_host(), reason="Eigen's contraction plan was measured with known caches, 1-2 CPUs")
def test_eigen_convolution_nchw():
    """NCHW operands: Eigen sums K in (kh, kw, ci) order whatever the layout (the executor's NCHW patches were
    (ci, kh, kw))."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 16, 16, 16)).astype(np.float32)
    k = rng.standard_normal((16, 16, 5, 5)).astype(np.float32)
    fn = _conv((1, 1), SAME2, (1, 1), ("NCHW", "OIHW", "NCHW"))
    (got,) = _run(fn, (x, k))
    _assert_bitwise(got, jax.jit(fn)(x, k))


@pytest.mark.skipif(not _eigen_host(), reason="Eigen's contraction plan was measured with known caches, 1-2 CPUs")
def test_kernel_gradient_of_a_first_layer():
    """The kernel gradient of a 1 -> 16 feature 3x3 convolution over a batch of 8 28x28 images (flax's CNN example):
    a convolution whose features are the batch, K = 8 * 28 * 28 terms that cancel, which XLA's Eigen shards by K
    (was up to 607 ULP off with BLAS)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 28, 28, 1)).astype(np.float32)
    k = rng.standard_normal((3, 3, 1, 16)).astype(np.float32)
    g = rng.standard_normal((8, 28, 28, 16)).astype(np.float32)
    conv = _conv((1, 1), SAME1, (1, 1))

    def fn(x, k, g):
        return jax.vjp(lambda k: conv(x, k), k)[1](g)[0]

    (got,) = _run(fn, (x, k, g))
    _assert_bitwise(got, jax.jit(fn)(x, k, g))


@pytest.mark.skipif(not _eigen_host(), reason="Eigen's contraction plan was measured with known caches, 1-2 CPUs")
@pytest.mark.parametrize("dims", [1, 3])
def test_eigen_convolution_other_ranks(dims):
    """1-D and 3-D convolutions are Eigen's too (YNNPACK takes 2-D ones only): the same contraction over the patches
    in (window..., ci) order."""
    rng = np.random.default_rng(7)
    if dims == 1:
        x = rng.standard_normal((3, 55, 16)).astype(np.float32)
        k = rng.standard_normal((5, 16, 4)).astype(np.float32)
        fn = lambda x, k: lax.conv_general_dilated(x, k, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))  # noqa: E731
    else:
        x = rng.standard_normal((3, 8, 5, 6, 32)).astype(np.float32)
        k = rng.standard_normal((4, 4, 1, 32, 4)).astype(np.float32)
        fn = lambda x, k: lax.conv_general_dilated(x, k, (1, 2, 1), "VALID",  # noqa: E731
                                                   dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
    (got,) = _run(fn, (x, k))
    _assert_bitwise(got, jax.jit(fn)(x, k))


_TRANSPOSED = {
    # strided convolutions' input gradients and conv_transpose: base-dilated convolutions with unit strides, which
    # XLA computes as x @ w over the input features, then each input pixel's products added into the output
    "input gradient, stride 2, 16 -> 32": ("grad", (4, 16, 16, 16), (3, 3, 16, 32), (2, 2), "SAME"),
    "input gradient, stride (3, 1), 8 features": ("grad", (2, 12, 10, 8), (4, 2, 8, 8), (3, 1), "VALID"),
    "conv_transpose, stride 2": ("transpose", (2, 8, 8, 32), (4, 4, 32, 16), (2, 2), "SAME"),
    "conv_transpose, one input feature": ("transpose", (2, 7, 9, 1), (3, 3, 1, 8), (2, 3), "VALID"),
    "base dilation, asymmetric padding": ("raw", (3, 6, 7, 8), (3, 2, 8, 4), (2, 3), ((2, 0), (1, 2))),
    "input gradient of a one-feature convolution": ("grad", (1, 5, 10, 8), (1, 2, 8, 1), (3, 1), "SAME"),
}


@pytest.mark.skipif(not _eigen_host(), reason="Eigen's contraction plan was measured with known caches, 1-2 CPUs")
@pytest.mark.parametrize("name", list(_TRANSPOSED))
def test_transposed_convolution_bitwise(name):
    import jax.numpy as jnp

    kind, x_shape, k_shape, strides, padding = _TRANSPOSED[name]
    rng = np.random.default_rng(8)
    x = rng.standard_normal(x_shape).astype(np.float32)
    k = rng.standard_normal(k_shape).astype(np.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    if kind == "grad":
        def fn(x, k):
            return jax.grad(lambda x: jnp.sum(jnp.sin(lax.conv_general_dilated(x, k, strides, padding,
                                                                               dimension_numbers=dn))))(x)
    elif kind == "transpose":
        def fn(x, k):
            return lax.conv_transpose(x, k, strides, padding, dimension_numbers=dn)
    else:
        def fn(x, k):
            return lax.conv_general_dilated(x, k, (1, 1), padding, lhs_dilation=strides, dimension_numbers=dn)
    assert "lhs_dilate" in jax.jit(fn).lower(x, k).compile().as_text()
    (got,) = _run(fn, (x, k))
    _assert_bitwise(got, jax.jit(fn)(x, k))
