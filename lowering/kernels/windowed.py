"""NumPy kernels: convolution, reduce_window, select_and_scatter.

Every kernel first builds the padded, dilated base area with strided
assignment (:func:`dilate_pad`) and takes all windows at once as a strided
view (:func:`windows`, made from the base's strides, window strides and
window dilations); nothing loops over output elements. Window geometry,
permutations and masks are worked out once, in the factory.

Convolution is im2col: the window view is reshaped into one ``(groups, M, K)``
matrix and multiplied with the ``(groups, K, N)`` kernel in one ``matmul``
(feature groups and batch groups are the matmul's batch). Numerics follow the
dot kernel, as XLA CPU does: f16/bf16/f8 multiply-accumulate in f32 and round
once, integers wrap, pred is OR of ANDs, complex uses the textbook product,
and ``preferred_element_type`` upcasts the operands or converts the result
like XLA's OperandUpcaster/ResultCaster. Float sums are reassociated (BLAS),
so f32/f64 results can differ from XLA's in the last bits -- except where
XLA CPU's own order is replayed: the 2-D convolutions it runs in YNNPACK
(:mod:`lowering.kernels.ynnpack_convolution`), the f32 ones it gives Eigen's
spatial convolution (:func:`lowering.kernels.eigen_dots.convolution_order`)
and its transposed convolutions (:func:`_transposed_convolution`).

reduce_window follows XLA CPU's semantics: each result starts at the init
value and combines the window elements one by one in row-major window order;
padding and base-dilation holes are *skipped* (not reduced as init values,
which is what the StableHLO spec's pad-with-init formulation would give for a
non-identity init). Three strategies:

* a body that is one add/multiply/maximum/minimum/and/or/xor of its
  parameters: the base is padded with the operation's identity (so padding
  changes nothing) and the ufunc combines the accumulator with one window
  position at a time, over all windows at once. That is sequential like XLA
  (each step rounded in the element type: bf16/f16/f8 sums round at every
  step, as XLA CPU's do) and, for small windows, much faster than
  ``ufunc.reduce`` over the strided window axes. The sign of a zero max/min
  is fixed afterwards (XLA orders -0 < +0, NumPy returns either);
* any other body (variadic reductions): the compiled region applied window
  position by window position to whole arrays, with a static mask keeping
  the accumulator where the position is padding.

XLA leaves the order unspecified, and XLA CPU's loop emitter does not always
walk a window row-major: when several dimensions are padded it may put a
padded dimension's loop outermost, and it may reassociate float sums. So a
non-associative body, a float sum's last bits, or the tie-breaking of
select_and_scatter (below, built on the same walk) can differ from XLA CPU in
such configurations; without padding they match bit for bit.

select_and_scatter walks the window positions in index order, applying the
select region to whole arrays (all windows at once) to keep or replace each
window's selection, exactly XLA's sequential rule (padding is never selected;
a window of padding only scatters nothing). The source is then scattered:
``np.add.at`` for an add body on NumPy dtypes; otherwise in rounds, each
round taking the next not-yet-applied source element of every destination,
so every round has unique destinations (one vectorized region call) and each
destination sees its source elements in row-major order, as in XLA.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from xla_dialect.ops.linalg import higher_precision_type
from xla_dialect.ops.windowed import ConvolutionOp, ReduceWindowOp, SelectAndScatterOp, Window
from xla_dialect.types import element_type_from_dtype

from ..runtime.denormals import mode_switch
from . import scalar as _scalar
from .registry import register
from .control_flow import array_applier, result_dtypes
from .eigen_dots import convolution_order, eigen_matmul, one_column_matmul, transposed_convolution_order
from .linalg import _arith_dtype, matmul_kernel, xla_convert
from .reduction import _signed_zeros, binary_body_ufunc
from .window_copies import padded_patches
from .ynnpack_convolution import convolution_plan, depthwise_rule, is_ynnpack_convolution, ynnpack_convolution
from .ynnpack_convolution import depthwise as ynnpack_depthwise

# ----------------------------------------------------------------------------
# Window helpers
# ----------------------------------------------------------------------------


def dilate_pad(x: np.ndarray, axes, padding, dilations, fill) -> np.ndarray:
    """``x`` with ``dilations - 1`` holes between elements and (low, high) edge padding along
    ``axes``, holes and padding set to ``fill``; negative padding removes elements."""
    if all(lo == 0 and hi == 0 for lo, hi in padding) and all(d == 1 for d in dilations):
        return x
    shape, place, crop = list(x.shape), [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for a, (lo, hi), d in zip(axes, padding, dilations):
        size = x.shape[a]
        dilated = (size - 1) * d + 1 if size else 0
        full = max(lo, 0) + dilated + max(hi, 0)
        shape[a] = full
        place[a] = slice(max(lo, 0), max(lo, 0) + dilated, d)
        crop[a] = slice(max(-lo, 0), full - max(-hi, 0))
    out = np.full(shape, fill, x.dtype)
    out[tuple(place)] = x
    return out[tuple(crop)]


def windows(xp: np.ndarray, axes, window: Window) -> np.ndarray:
    """All windows of the padded, dilated ``xp``: a view with the window axes appended
    (``xp.shape`` with ``axes`` replaced by the output positions, then one axis per window
    dimension)."""
    if xp.dtype.char not in np.typecodes["All"]:
        # ml_dtypes types (bf16, f8, s4, ...): NumPy's as_strided cannot rebuild every one of
        # them from its type string, so take the windows of the raw bits.
        return windows(xp.view(f"u{xp.dtype.itemsize}"), axes, window).view(xp.dtype)
    # The view built directly from the strides (what sliding_window_view and slicing give, 4-8x faster to make).
    shape, strides = list(xp.shape), list(xp.strides)
    window_shape, window_strides = [1] * xp.ndim, [0] * xp.ndim
    for a, w, s, d in zip(axes, window.dimensions, window.strides, window.window_dilations):
        extent = (w - 1) * d + 1
        if extent > xp.shape[a]:
            raise ValueError(f"a window of {extent} elements does not fit in a dimension of {xp.shape[a]}")
        shape[a] = (xp.shape[a] - extent) // s + 1
        strides[a] = xp.strides[a] * s
        window_shape[a], window_strides[a] = w, xp.strides[a] * d
    shape = (*shape, *(window_shape[a] for a in axes))
    strides = (*strides, *(window_strides[a] for a in axes))
    if xp.flags.c_contiguous:
        view = np.ndarray(shape, xp.dtype, xp, 0, strides)
        view.flags.writeable = False  # (overlapping windows: never written)
        return view
    return as_strided(xp, shape, strides, writeable=False)


def valid_mask(base_shape, window: Window, out_shape) -> np.ndarray | None:
    """Boolean array of shape ``out_shape + window.dimensions``: True where a window element
    lies on an element of the base (not padding, not a base-dilation hole); None if all do."""
    per_dim = []
    for d, (size, (lo, _)) in enumerate(zip(base_shape, window.padding)):
        o = np.arange(out_shape[d])[:, None] * window.strides[d]
        k = np.arange(window.dimensions[d])[None, :] * window.window_dilations[d]
        q = o + k - lo  # position in the dilated base
        bd = window.base_dilations[d]
        per_dim.append((q >= 0) & (q < (size - 1) * bd + 1) & (q % bd == 0))
    if all(m.all() for m in per_dim):
        return None
    rank = len(per_dim)
    mask = np.ones(tuple(out_shape) + tuple(window.dimensions), bool)
    for d, m in enumerate(per_dim):
        shape = [1] * (2 * rank)
        shape[d], shape[rank + d] = m.shape
        mask &= m.reshape(shape)
    return mask


def _window_positions(window: Window):
    """Window offsets in row-major order (the order XLA visits them)."""
    return list(np.ndindex(*window.dimensions))


# ----------------------------------------------------------------------------
# Convolution
# ----------------------------------------------------------------------------


@register(ConvolutionOp)
def _convolution(op, ctx):
    dn = op.dimension_numbers()
    window = op.window()
    n = len(dn.input_spatial_dimensions)
    lhs_t, rhs_t, out_t = op.lhs.type, op.rhs.type, op.result.type
    out_shape = tuple(out_t.get_shape())
    lhs_perm = (dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions)
    rhs_perm = (dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension, *dn.kernel_spatial_dimensions)
    # Canonical result (batch, feature, spatial...) -> the output dimension numbers.
    canon = (dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions)
    out_perm = tuple(int(i) for i in np.argsort(canon))
    ls = [lhs_t.get_shape()[d] for d in lhs_perm]
    rs = [rhs_t.get_shape()[d] for d in rhs_perm]
    fgc = op.feature_group_count.value.data
    bgc = op.batch_group_count.value.data
    groups = fgc * bgc  # one of them is 1
    batch, features, kernel_in = ls[0] // bgc, ls[1] // fgc, rs[1]
    group_out = rs[0] // groups
    out_spatial = [out_shape[d] for d in dn.output_spatial_dimensions]
    kernel = rs[2:]
    spatial_axes = tuple(range(2, 2 + n))
    reversed_axes = tuple(2 + i for i, r in enumerate(window.reversal) if r)

    operand_et, result_et = lhs_t.element_type, out_t.element_type
    result_dtype = ctx.dtype(out_t)
    upcast = result_et != operand_et and higher_precision_type(operand_et, result_et) == result_et
    compute_dtype = result_dtype if upcast else ctx.dtype(lhs_t)
    arith = _arith_dtype(compute_dtype)
    empty = math.prod(out_shape) == 0 or kernel_in == 0

    m = batch * math.prod(out_spatial)
    k = kernel_in * math.prod(kernel)
    ynnpack = None
    if is_ynnpack_convolution(op, ctx.dtype(lhs_t), ctx.dtype(rhs_t), result_dtype):
        # XLA runs it in YNNPACK: its summation order (lowering/kernels/ynnpack_convolution.py)
        ynnpack = convolution_plan(batch, tuple(out_spatial), kernel_in, math.prod(kernel), group_out, fgc,
                                   result_dtype)
    if ynnpack is not None:
        return _ynnpack_convolution(ctx, window, tuple(dn.input_spatial_dimensions), lhs_perm, rhs_perm, out_perm,
                                    ynnpack, fgc, kernel_in, (batch, *out_spatial, rs[0]))
    eigen = None
    all_f32 = arith == result_dtype == np.dtype(np.float32) == ctx.dtype(lhs_t) == ctx.dtype(rhs_t)
    if (all_f32 and groups == 1 and n in (1, 2) and any(d > 1 for d in window.base_dilations)
            and all(d == 1 for d in (*window.strides, *window.window_dilations)) and not any(window.reversal)):
        # XLA's transposed convolution (a strided convolution's input gradient): the input times the kernel over
        # the input features, then each input pixel's products added into the output (Pack2DPatches)
        replayed, order = transposed_convolution_order(features, batch * math.prod(ls[2:]),
                                                       math.prod(kernel) * group_out)
        if replayed:
            return _transposed_convolution(ctx, order, window, lhs_perm, rhs_perm, out_perm, tuple(out_spatial))
    if groups == 1 and n in (1, 2, 3) and all_f32:
        # XLA computes it itself: Eigen's spatial convolution, the contraction order of eigen_dots
        eigen = convolution_order(k, m, group_out)
    if eigen is not None:
        matmul = eigen_matmul(eigen, ctx.split_workers, mode_switch(ctx.denormals))
        if group_out == 1:
            matmul = one_column_matmul(matmul)
    else:
        matmul = matmul_kernel(ctx, arith, m, k, group_out, groups)
    # With the features minor in the input (NHWC-style), the columns take them innermost (K ordered
    # (*kernel, C)), so that building them copies contiguous runs of C values; otherwise (NCHW-style) K is
    # ordered (C, *kernel), whose innermost kernel axis runs along contiguous rows. Eigen's order sums K in
    # (*kernel, C) order whatever the layout.
    features_minor = dn.input_feature_dimension == len(lhs_t.get_shape()) - 1 or eigen is not None
    # lhs windows (N, C, *out, *kernel) -> (Bg, Nb, Fg, Cg, *out, *kernel) -> (G, Nb * out, K).
    lhs_split = (bgc, batch, fgc, features, *out_spatial, *kernel)
    if features_minor:
        lhs_order = (0, 2, 1, *range(4, 4 + n), *range(4 + n, 4 + 2 * n), 3)
        kernel_order = (0, *range(3, 3 + n), 2, 1)  # (G, Og, I, *kernel) -> (G, *kernel, I, Og)
    else:
        lhs_order = (0, 2, 1, *range(4, 4 + n), 3, *range(4 + n, 4 + 2 * n))
        kernel_order = (0, *range(2, 3 + n), 1)  # (G, Og, I, *kernel) -> (G, I, *kernel, Og)
    # Result (G, Nb * out, Og) -> (G, Nb, *out, Og) -> (Nb, G, Og, *out) -> (Nb, O, *out).
    res_split = (groups, batch, *out_spatial, group_out)
    res_order = (1, 0, 2 + n, *range(2, 2 + n))
    canon_shape = (batch, groups * group_out, *out_spatial)
    input_spatial = tuple(dn.input_spatial_dimensions)

    def convert(x):
        if x.dtype != compute_dtype:
            x = x.astype(compute_dtype)  # XLA converts the operands (may round, e.g. f16 -> bf16)
        return x.astype(arith, copy=False)

    # 2-D images without feature or batch groups: the patches copied by one loop from the image as (N, H, W, C).
    channels_last = (lhs_perm[0], *lhs_perm[2:], lhs_perm[1])
    # (other layouts are transposed to it first: the copy of a strided view of every window was slower)
    patches_copied = (groups == 1 and n == 2 and features_minor
                      and np.dtype(arith).kind == "f" and all(d == 1 for d in window.base_dilations))

    def convolution(lhs, rhs):
        if empty:
            return np.zeros(out_shape, result_dtype)
        # Padded in the operand's own layout (no transposing copy), then viewed as (N, C, *spatial).
        a = None if patches_copied else np.transpose(
            dilate_pad(convert(lhs), input_spatial, window.padding, window.base_dilations, 0), lhs_perm)
        w = convert(np.transpose(rhs, rhs_perm))
        if reversed_axes:
            # Reversing the lhs window equals reversing the kernel.
            w = np.flip(w, reversed_axes)
        if patches_copied:  # (one compiled loop of contiguous runs: lowering/kernels/window_copies.py)
            cols = padded_patches(convert(np.transpose(lhs, channels_last)), tuple(kernel), tuple(out_spatial),
                                  tuple(window.strides), tuple(window.window_dilations),
                                  tuple(p[0] for p in window.padding), (0, features)).reshape(1, m, k)
        else:
            view = windows(a, spatial_axes, window)
            cols = np.transpose(view.reshape(lhs_split), lhs_order).reshape(groups, m, k)
        kmat = np.transpose(w.reshape(groups, group_out, kernel_in, *kernel), kernel_order)
        kmat = kmat.reshape(groups, k, group_out)
        c = matmul(cols, kmat)
        if groups == 1:  # (Nb, *out, O) viewed as (Nb, O, *out): no copy
            c = np.moveaxis(c.reshape(res_split[1:]), -1, 1)
        else:
            c = np.transpose(c.reshape(res_split), res_order).reshape(canon_shape)
        c = np.transpose(c, out_perm)
        if c.dtype != compute_dtype:
            c = c.astype(compute_dtype)
        if compute_dtype != result_dtype:
            c = xla_convert(c, result_dtype)
        return c

    return convolution


def _ynnpack_convolution(ctx, window: Window, input_spatial, lhs_perm, rhs_perm, out_perm, plan, groups, features,
                         canon_shape):
    """The convolution kernel for a convolution XLA runs in YNNPACK, summed in YNNPACK's order: the windows of the
    padded input and the kernel as ``(groups, kh * kw, features, outputs)`` (:func:`ynnpack_convolution`), or, with
    one input feature per group, the padded input itself (:func:`lowering.kernels.ynnpack_convolution.depthwise`).
    ``canon_shape``: the result as ``(batch, oh, ow, all outputs)``."""
    workers, mode = ctx.split_workers, mode_switch(ctx.denormals)
    spatial_axes = (2, 3)
    n_kernel = len(window.dimensions)
    depthwise = depthwise_rule(plan, features) if groups > 1 else None
    strides, dilations = np.array(window.strides), np.array(window.window_dilations)

    # Images without base dilation and one group: the patches are copied from the unpadded input (as (N, H, W, C))
    # by a compiled loop, chunk by chunk (lowering/kernels/window_copies.py), the padded copy made only if the
    # product's remainder needs it.
    channels_last = (lhs_perm[0], *lhs_perm[2:], lhs_perm[1])
    unpadded = (depthwise is None and groups == 1 and n_kernel == 2
                and all(d == 1 for d in window.base_dilations))

    def convolution(lhs, rhs):
        if unpadded:
            return unpadded_convolution(lhs, rhs)
        a = np.transpose(dilate_pad(lhs, input_spatial, window.padding, window.base_dilations, 0), lhs_perm)
        w = np.transpose(rhs, rhs_perm)  # (O, I, kh, kw), O = groups * outputs per group
        if depthwise is not None:  # (one input feature per group: straight from the padded input)
            out = np.empty(canon_shape, a.dtype)
            kernel = np.ascontiguousarray(np.transpose(w.reshape(groups, -1, *w.shape[2:]), (2, 3, 0, 1)))
            ynnpack_depthwise(np.ascontiguousarray(np.moveaxis(a, 1, -1)), kernel, strides, dilations, out, depthwise)
            return np.transpose(np.moveaxis(out, -1, 1), out_perm)
        view = windows(a, spatial_axes, window)  # (N, C, oh, ow, kh, kw), no copy
        w = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
        kmat = np.ascontiguousarray(np.transpose(w, (0, *range(3, 3 + n_kernel), 2, 1)))
        c = ynnpack_convolution(view, kmat.reshape(groups, -1, *kmat.shape[-2:]), plan, workers, mode)
        return np.transpose(np.moveaxis(c.reshape(canon_shape), -1, 1), out_perm)

    def unpadded_convolution(lhs, rhs):
        w = np.transpose(rhs, rhs_perm)  # (O, I, kh, kw)
        kmat = np.ascontiguousarray(np.transpose(w, (2, 3, 1, 0)))  # (kh, kw, I, O)
        size = (lhs.shape[lhs_perm[0]], features, *canon_shape[1:3], *kmat.shape[:2])
        image = np.ascontiguousarray(np.transpose(lhs, channels_last))  # (a copy only for other layouts)

        def padded_view():
            a = np.transpose(dilate_pad(lhs, input_spatial, window.padding, window.base_dilations, 0), lhs_perm)
            return windows(a, spatial_axes, window)

        def copied(f0, f1):
            return padded_patches(image, tuple(window.dimensions), tuple(canon_shape[1:3]), tuple(window.strides),
                                  tuple(window.window_dilations), tuple(p[0] for p in window.padding), (f0, f1))

        c = ynnpack_convolution(None, kmat.reshape(1, -1, *kmat.shape[-2:]), plan, workers, mode,
                                copied_patches=copied, view_size=size, make_view=padded_view)
        return np.transpose(np.moveaxis(c.reshape(canon_shape), -1, 1), out_perm)

    return convolution


def _transposed_convolution(ctx, order, window: Window, lhs_perm, rhs_perm, out_perm, out_spatial):
    """A base-dilated f32 convolution with unit strides and window dilations as XLA CPU computes it
    (``EigenTransposedConv2D``, where ``CanUseCustomTransposedConv``): ``C = x @ w`` over the input features (Eigen's
    contraction: the order of :func:`lowering.kernels.eigen_dots.contraction_order`), one row per input pixel and
    one column per (window position, output feature); then, from a zero output, each input pixel's products added
    to the output pixels its window reaches, input pixels in row-major order (XLA's ``Pack2DPatches``). Input pixel
    ``i`` and window position ``p`` reach output ``i * base_dilation + padding_low - p`` (XLA keeps the kernel
    unrotated). An output's contributions come in increasing ``i`` and so increasing ``p``: adding whole strided
    slices window position by window position keeps that order. ``order`` None: one input feature, whose products
    need no sum. Bitwise equal to jax.jit on strided convolutions' input gradients and ``conv_transpose``
    (``tests/test_convolution_orders.py``)."""
    workers, mode = ctx.split_workers, mode_switch(ctx.denormals)
    matmul = eigen_matmul(order, workers, mode) if order is not None else np.matmul  # (one input feature: exact)
    dilations = window.base_dilations
    padding_low = [low for low, _ in window.padding]

    def convolution(lhs, rhs):
        x = np.transpose(lhs, lhs_perm)  # (N, C, *spatial)
        w = np.transpose(rhs, rhs_perm)  # (O, I, *kernel)
        if x.ndim == 3:  # (a 1-D convolution is XLA's 2-D one with a unit first dimension)
            x, w = x[:, :, None], w[:, :, None]
            dil, pad = (1, *dilations), (0, *padding_low)
        else:
            dil, pad = tuple(dilations), tuple(padding_low)
        batch, features, height, width = x.shape
        outputs, _, kh, kw = w.shape
        rows = np.ascontiguousarray(np.moveaxis(x, 1, -1)).reshape(1, -1, features)
        columns = np.ascontiguousarray(np.transpose(w, (1, 2, 3, 0))).reshape(1, features, kh * kw * outputs)
        products = matmul(rows, columns).reshape(batch, height, width, kh, kw, outputs)
        out_h, out_w = out_spatial if len(out_spatial) == 2 else (1, out_spatial[0])
        out = np.zeros((batch, out_h, out_w, outputs), np.float32)
        for p in range(kh):
            i0, i1 = _reached(height, dil[0], pad[0] - p, out_h)
            for q in range(kw):
                j0, j1 = _reached(width, dil[1], pad[1] - q, out_w)
                if i0 < i1 and j0 < j1:
                    y0, x0 = i0 * dil[0] + pad[0] - p, j0 * dil[1] + pad[1] - q
                    y1, x1 = y0 + (i1 - i0 - 1) * dil[0] + 1, x0 + (j1 - j0 - 1) * dil[1] + 1
                    out[:, y0:y1:dil[0], x0:x1:dil[1]] += products[:, i0:i1, j0:j1, p, q]
        c = np.moveaxis(out, -1, 1)  # (N, O, out_h, out_w)
        if len(out_spatial) == 1:
            c = c[:, :, 0]
        return np.transpose(c, out_perm)

    return convolution


def _reached(size: int, dilation: int, offset: int, out_size: int) -> tuple[int, int]:
    """The input indices ``i`` in ``[0, size)`` whose ``i * dilation + offset`` lies in ``[0, out_size)``: a range."""
    first = max(0, -(offset // dilation))
    last = min(size, (out_size - 1 - offset) // dilation + 1) if out_size - 1 - offset >= 0 else 0
    return first, max(first, last)


# ----------------------------------------------------------------------------
# reduce_window
# ----------------------------------------------------------------------------

def _identity(ufunc, dtype: np.dtype):
    """The value that leaves ``ufunc``'s accumulator unchanged (padding is skipped in XLA),
    or None when the type has none (f8e8m0fnu has no zero)."""
    dtype = np.dtype(dtype)
    kind = element_type_from_dtype(dtype).kind
    if ufunc is np.add:
        value = np.array(-0.0 if kind in ("float", "complex") else 0).astype(dtype)  # x + -0 == x, also for -0
    elif ufunc is np.multiply:
        value = np.array(1).astype(dtype)
    elif ufunc in (np.bitwise_or, np.bitwise_xor):
        value = np.zeros((), dtype)
    elif ufunc is np.bitwise_and:
        value = np.ones((), dtype) if kind == "pred" else np.array(-1).astype(dtype)
    elif kind == "pred":
        value = np.array(ufunc is np.minimum)
    elif kind == "float":
        value = np.array(np.inf if ufunc is np.minimum else -np.inf).astype(dtype)
        if np.isnan(value.astype(np.float32)):  # no infinities (f8 *fn/*fnuz types): the extreme finite value
            info = ml_dtypes.finfo(dtype)
            value = np.array(info.max if ufunc is np.minimum else info.min).astype(dtype)
    else:
        info = ml_dtypes.iinfo(dtype)
        value = np.array(info.max if ufunc is np.minimum else info.min).astype(dtype)
    if kind == "float" and np.isnan(value.astype(np.float32)):
        return None
    return value


@register(ReduceWindowOp)
def _reduce_window(op, ctx):
    window = op.window()
    dtypes = result_dtypes(op, ctx)
    n = len(dtypes)
    base = op.operands_[0].type.get_shape()
    rank = len(base)
    axes = tuple(range(rank))
    window_axes = tuple(range(rank, 2 * rank))
    out_shape = tuple(op.results[0].type.get_shape())
    positions = _window_positions(window)
    kind = element_type_from_dtype(dtypes[0]).kind
    ufunc = binary_body_ufunc(op.body) if n == 1 else None
    if ufunc is not None and kind == "complex" and ufunc not in (np.add, np.multiply):
        ufunc = None  # complex max/min have their own ordering in the region's kernel
    fill = _identity(ufunc, dtypes[0]) if ufunc is not None else None
    if fill is None:
        ufunc = None  # no identity to pad with: the general path skips padding with a mask

    if math.prod(out_shape) == 0:
        def empty_kernel(body, *args):
            results = [np.full(out_shape, init, dt) for init, dt in zip(args[n:], dtypes)]
            return results[0] if n == 1 else tuple(results)
        return empty_kernel

    if ufunc is not None:
        fix = _signed_zeros(ufunc, window_axes) if kind == "float" and ufunc in (np.maximum, np.minimum) else None
        # Of two NaNs NumPy's vector loops return the second, its scalar loops the first: where a result is NaN,
        # the windows are added again with the op's definition (the first NaN, as compiled loops compute it).
        definition = (_scalar.ufunc(_scalar.Scalar("add" if ufunc is np.add else "multiply"), [dtypes[0]] * 2,
                                    dtypes[0])
                      if ufunc in (np.add, np.multiply) and dtypes[0] in (np.float32, np.float64) else None)

        # XLA CPU computes a bf16 max/min window in f32 (float normalization), with the max instruction: under
        # denormals-are-zero a bf16 denormal comes out a zero (measured: cummax and max-pools of 2-4,096 bf16
        # denormals are 0 in jax.jit; long fuzz campaign, session 19). Widened here too: exact otherwise.
        widened = (np.dtype(dtypes[0]) == np.dtype(ml_dtypes.bfloat16) and ufunc in (np.maximum, np.minimum))

        def ufunc_kernel(body, x, init):
            if widened:
                acc = ufunc_kernel_of(np.asarray(x).astype(np.float32), np.asarray(init).astype(np.float32),
                                      np.float32(fill))
                return acc.astype(dtypes[0])
            return ufunc_kernel_of(x, init, fill)

        def ufunc_kernel_of(x, init, fill):
            view = windows(dilate_pad(x, axes, window.padding, window.base_dilations, fill), axes, window)
            # Window positions in order, each step covering all windows: init op x0, then acc op x1, ... in place.
            if not positions:  # an empty window: init everywhere
                return np.full(out_shape, init, x.dtype)
            acc = ufunc(np.asarray(init, x.dtype), view[(Ellipsis, *positions[0])])
            for pos in positions[1:]:
                ufunc(acc, view[(Ellipsis, *pos)], out=acc)
            if definition is not None and acc.size and np.isnan(np.max(acc)):
                with np.errstate(all="ignore"):
                    acc = np.asarray(definition(np.asarray(init, dtypes[0]), view[(Ellipsis, *positions[0])]),
                                     dtypes[0])
                    for pos in positions[1:]:
                        acc = np.asarray(definition(acc, view[(Ellipsis, *pos)]), dtypes[0])
            # NumPy's maximum/minimum return either zero for -0 vs +0; XLA orders -0 < +0.
            return acc if fix is None else fix(acc, view, init)

        return ufunc_kernel

    apply = array_applier(op.body, dtypes)
    mask = valid_mask(base, window, out_shape)

    def general_kernel(body, *args):
        f = apply(body)
        views = [windows(dilate_pad(x, axes, window.padding, window.base_dilations, 0), axes, window)
                 for x in args[:n]]
        accs = [np.full(out_shape, init, dt) for init, dt in zip(args[n:], dtypes)]
        for pos in positions:
            key = (Ellipsis, *pos)
            new = f(*accs, *(v[key] for v in views))
            accs = list(new) if mask is None else [np.where(mask[key], r, a) for r, a in zip(new, accs)]
        return accs[0] if n == 1 else tuple(accs)

    return general_kernel


# ----------------------------------------------------------------------------
# select_and_scatter
# ----------------------------------------------------------------------------


@register(SelectAndScatterOp)
def _select_and_scatter(op, ctx):
    window = op.window()
    shape = tuple(op.operand.type.get_shape())
    src_shape = tuple(op.source.type.get_shape())
    rank = len(shape)
    axes = tuple(range(rank))
    dtype = ctx.dtype(op.result.type)
    positions = _window_positions(window)
    mask = valid_mask(shape, window, src_shape)
    select_apply = array_applier(op.select, [np.dtype(np.bool_)])
    scatter_apply = array_applier(op.scatter, [dtype])
    # np.add.at needs a NumPy dtype (not bf16, f8, s4, ...).
    add = binary_body_ufunc(op.scatter) is np.add and dtype.char in np.typecodes["All"] and dtype != np.bool_

    # Flat operand index of window element ``pos`` of window ``o``: base[o] + offset[pos].
    strides = [math.prod(shape[d + 1:]) for d in range(rank)]
    base = np.zeros(src_shape, np.int64)
    for d in range(rank):
        coord = np.arange(src_shape[d]) * window.strides[d] - window.padding[d][0]
        base += (coord * strides[d]).reshape([-1 if e == d else 1 for e in range(rank)])
    offsets = np.array([sum(p * s for p, s in zip(pos, strides)) for pos in positions] or [0], np.int64)
    empty = math.prod(src_shape) == 0 or math.prod(shape) == 0

    def select_and_scatter_kernel(select, scatter, operand, source, init):
        result = np.full(math.prod(shape), init, dtype)
        if empty:
            return result.reshape(shape)
        view = windows(dilate_pad(operand, axes, window.padding, [1] * rank, operand.dtype.type(0)), axes, window)
        pick = select_apply(select)
        chosen_val = view[(Ellipsis, *positions[0])]
        chosen = np.zeros(src_shape, np.int64)
        seen = np.ones(src_shape, bool) if mask is None else mask[(Ellipsis, *positions[0])].copy()
        for k, pos in enumerate(positions[1:], 1):
            key = (Ellipsis, *pos)
            current = view[key]
            (keep,) = pick(chosen_val, current)
            if mask is None:
                take = ~keep
            else:
                valid = mask[key]
                take = valid & ~(seen & keep)  # the first valid element, or one select() prefers
                seen = seen | valid
            chosen_val = np.where(take, current, chosen_val)
            chosen = np.where(take, k, chosen)
        index = (base + offsets[chosen]).reshape(-1)
        values = np.asarray(source).reshape(-1)
        if mask is not None:
            index, values = index[seen.reshape(-1)], values[seen.reshape(-1)]
        if add:
            np.add.at(result, index, values)
        else:
            _scatter_in_rounds(scatter_apply(scatter), result, index, values)
        return result.reshape(shape)

    return select_and_scatter_kernel


def _scatter_in_rounds(f, result: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
    """``result[index[i]] = f(result[index[i]], values[i])`` for every i in order, vectorized:
    round r applies the r-th value of every destination (destinations are unique in a round)."""
    if not index.size:
        return
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    position = np.arange(index.size)
    starts = np.r_[True, sorted_index[1:] != sorted_index[:-1]]
    rank = position - np.maximum.accumulate(np.where(starts, position, 0))
    for r in range(int(rank.max()) + 1):
        pick = order[rank == r]
        dest = index[pick]
        (result[dest],) = f(result[dest], values[pick])
