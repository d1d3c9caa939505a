"""2-D convolutions as XLA CPU (jax 0.10.2) runs them in YNNPACK, in its summation order.

XLA CPU gives a convolution to YNNPACK (a ``__ynn_fusion``) when, after its convolution canonicalization (batch,
spatial..., feature operands; the kernel spatial..., in, out), the convolution is 2-D, f32 or f64 throughout, has no
batch groups, base dilation or window reversal, more than 16 input or output features, and an output and a kernel
no larger than the input in each spatial dimension (XLA's ``IsConvolutionOpSupportedByYnn``; every shape measured
met it, NCHW/OIHW layouts too, which XLA transposes first). XLA's YNNPACK emitter builds it as a stencil copy of the
padded input, ``(n, oh, ow, kh, kw, ci)``, and a dot with three contraction dimensions, ``k1 = ci`` (innermost),
``k2 = kw``, ``k3 = kh``, against the kernel ``(kh, kw, ci, co)``: ``ow`` is the dot's rows and ``n, oh`` its batch.
So every output element is YNNPACK's dot order over the window (``lowering/kernels/ynnpack_dots.py`` picks the
kernel, here with :func:`ynnpack_order`'s ``k_outer`` and ``row_batches``), with what three contraction dimensions
change (``ynnpack/subgraph/dot.cc``, confirmed element by element against jax.jit):

* the kernel's loops run ``k3``, ``k2``, then ``k1`` in its lanes: the terms of an element are taken in
  ``(kh, kw, ci)`` order, term ``ci`` in lane ``ci mod tile_k``, over the first ``ci - ci mod tile_k`` input
  features of each window position (the aligned part, one call of the kernel);
* the other ``ci mod tile_k`` features are a second call per window position, in ``(kh, kw)`` order, on a copy padded
  with zeros: each adds to the element the sum of its lanes, ``fma(a, b, +0)`` (a rounded product) and zeros,
  added as ``l0 + l1`` or ``(l0 + l1) + (l2 + l3)`` (with no aligned part, the first of them is the element);
* where a block of ``B`` exceeds YNNPACK's L2 budget the chunks cut ``k1``: a chunk is ``k1`` terms
  ``[c0, c1)`` of every window position, in ``(kh, kw, ci)`` order, each chunk's chain from zero added to the
  sum of the chunks before it; the budget counts the whole window (``kh * kw * block_n * block_k`` per ``k1``
  step), and a last, narrower thread tile of columns has its own chunk length.

Each chunk of the aligned part is one product in YNNPACK's lanes (:func:`lowering.kernels.small_dot.small_matmul`,
the dot's own definition) of the patches of its features, ``K`` laid out ``(kh, kw, ci in chunk)``, added to the
chunks before it; the remainder terms are whole-array NumPy products and adds, rounded as the kernel rounds them.
Feature groups (grouped and depthwise convolutions, which XLA gives to YNNPACK too) are the batch of those products
(:func:`convolution_plan`); one input feature per group is summed straight from the padded input
(:func:`depthwise`). Bitwise equal to jax.jit on the measured shapes (``tests/test_convolution_orders.py``: 3x3, 5x5,
1x1 and rectangular windows, strides, padding, window dilation, every ``ci mod tile_k``, chunked windows to 256 ->
512 features, groups, depthwise 3x3 and 7x7, f32 and f64, NCHW) on the AVX-512 host the dot orders were measured
on. Not identified (computed with this model, not claimed): f64 products whose last, narrower column tile is
chunked (one measured shape, ``(3, 7, 6, 128) * (5, 4, 128, 200)``, stride 2: no chunk length matched those
columns), and groups of one output feature over at most 10 output pixels (one measured shape).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from ..runtime.loop_runtime import fused_multiply_add
from . import host
from .small_dot import small_matmul, ynnpack_kernel_order
from .ynnpack_dots import ynnpack_order

MIN_FEATURES = 16
"""XLA leaves a convolution with at most this many input and output features to its own emitters."""


def is_ynnpack_convolution(op, lhs_dtype: np.dtype, rhs_dtype: np.dtype, result_dtype: np.dtype) -> bool:
    """Whether XLA CPU runs the convolution ``op`` (operands and result of these types) in YNNPACK on this host and
    the executor replays its order: XLA's conditions (module docstring) and an AVX-512 host
    (:func:`lowering.kernels.host.measured_host`)."""
    dn = op.dimension_numbers()
    window = op.window()
    if len(window.dimensions) != 2 or op.batch_group_count.value.data != 1:
        return False
    dtype = np.dtype(lhs_dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return False
    if np.dtype(rhs_dtype) != dtype or np.dtype(result_dtype) != dtype:
        return False
    lhs_shape, rhs_shape, out_shape = op.lhs.type.get_shape(), op.rhs.type.get_shape(), op.result.type.get_shape()
    if max(lhs_shape[dn.input_feature_dimension], out_shape[dn.output_feature_dimension]) <= MIN_FEATURES:
        return False
    for i in range(2):
        size = lhs_shape[dn.input_spatial_dimensions[i]]
        if out_shape[dn.output_spatial_dimensions[i]] > size or rhs_shape[dn.kernel_spatial_dimensions[i]] > size:
            return False
    if any(d != 1 for d in window.base_dilations) or any(window.reversal):
        return False
    return host.measured_host()


@dataclass(frozen=True)
class ConvolutionPlan:
    """How YNNPACK sums a convolution's ``(m, k_outer * features) x (k_outer * features, outputs)`` product: in
    ``tile_k`` lanes of the features, with fused multiply-adds or rounded products, the features cut in chunks of
    ``chunk`` (``last_chunk`` for the columns from ``columns`` on; 0: no cut)."""

    tile_k: int
    fused: bool
    columns: int
    chunk: int
    last_chunk: int


def convolution_plan(batch: int, out_spatial: tuple[int, int], features: int, k_outer: int, outputs: int,
                     groups: int, dtype: np.dtype) -> ConvolutionPlan | None:
    """YNNPACK's plan for a convolution with output ``(batch, oh, ow)`` pixels, ``features`` input and ``outputs``
    output features per group of ``groups``, and a window of ``k_outer`` positions, or None where the thread tiles
    would not agree on a kernel. YNNPACK's rows are the output width, the batch and output rows its batch; with
    feature groups XLA's emitter builds ``(n, oh, ow, g, 1, kh, kw, ci / g)`` patches: one row, the rest batch
    dimensions, with one kernel per group (so ``B`` stays unpacked up to 10 output pixels: a kernel of fused
    products there, of rounded products for small groups beyond)."""
    oh, ow = out_spatial
    if groups == 1:
        found = ynnpack_order(ow, features, outputs, np.dtype(dtype), False, k_outer, batch * oh)
    else:
        found = ynnpack_order(1, features, outputs, np.dtype(dtype), False, k_outer, batch * oh * ow * groups, groups)
    return None if found is None else ConvolutionPlan(*found)


FUSED_CHAIN, ROUNDED_CHAIN, REMAINDER_CALLS = 0, 1, 2
"""How :func:`depthwise` sums the window of a group with one input feature: one fused multiply-add chain (a
``tile_k`` 1 kernel of fused products), rounded products added from zero (one of rounded products), or each
position's product ``fl(a b) + 0`` its own remainder call added to the sum before it (``tile_k`` 2 or 4)."""


@numba.njit(cache=True, error_model="numpy", nogil=True)
def depthwise(x, w, strides, dilations, out, rule):
    """A convolution with one input feature per group in YNNPACK's order, straight from the padded input: ``x``
    ``(batch, height, width, groups)`` (C-contiguous), ``w`` ``(kh, kw, groups, outputs per group)``, ``out``
    ``(batch, oh, ow, groups * outputs per group)``; each output is its window's products in ``(kh, kw)`` order
    summed by ``rule`` (:data:`FUSED_CHAIN`, :data:`ROUNDED_CHAIN`, :data:`REMAINDER_CALLS`). The loop over
    groups is innermost, so that it vectorizes; no patches are copied (a 7x7 depthwise convolution of 96 features
    over 8 x 56 x 56 pixels: 383 ms through the patches and the batched product)."""
    batch, oh, ow = out.shape[0], out.shape[1], out.shape[2]
    kh, kw, groups, per_group = w.shape
    zero = x.dtype.type(0)
    acc = np.empty(groups, x.dtype)
    for b in range(batch):
        for i in range(oh):
            for j in range(ow):
                for o in range(per_group):
                    for g in range(groups):
                        acc[g] = zero
                    for p in range(kh):
                        row = i * strides[0] + p * dilations[0]
                        for q in range(kw):
                            column = j * strides[1] + q * dilations[1]
                            first = p == 0 and q == 0
                            for g in range(groups):
                                a, c = x[b, row, column, g], w[p, q, g, o]
                                if rule == FUSED_CHAIN:
                                    acc[g] = fused_multiply_add(a, c, acc[g])
                                elif rule == ROUNDED_CHAIN:
                                    acc[g] = acc[g] + a * c
                                elif first:
                                    acc[g] = a * c + zero
                                else:
                                    acc[g] = acc[g] + (a * c + zero)
                    for g in range(groups):
                        out[b, i, j, g * per_group + o] = acc[g]


def depthwise_rule(plan: ConvolutionPlan, features: int) -> int | None:
    """:func:`depthwise`'s rule for a plan of groups with ``features`` input features each, or None (more than one:
    the batched product of :func:`ynnpack_convolution`)."""
    if features != 1:
        return None
    if plan.tile_k == 1:
        return FUSED_CHAIN if plan.fused else ROUNDED_CHAIN
    return REMAINDER_CALLS


def ynnpack_convolution(view: np.ndarray | None, kernel: np.ndarray, plan: ConvolutionPlan, workers: int = 1,
                        mode=None, copied_patches=None, view_size=None, make_view=None) -> np.ndarray:
    """The ``(pixels, outputs)`` result of a 2-D convolution in YNNPACK's order. ``view`` is the padded input's
    windows, ``(batch, features, oh, ow, kh, kw)`` (a strided view: each block of patches is copied from it once);
    ``kernel`` is ``(groups, kh * kw, features / groups, outputs / groups)`` (output feature ``g * outputs / groups
    + j`` is group ``g``'s ``j``); both of the result's float type. ``workers`` and ``mode`` as for
    :func:`lowering.kernels.small_dot.small_matmul`. Groups are the batch of each product. With one group the
    caller may give instead ``copied_patches(f0, f1)``, the ``(pixels, K)`` patches of features ``[f0, f1)``
    (:func:`lowering.kernels.window_copies.padded_patches`), ``view_size`` (the view's shape) and ``make_view()``
    for the view where a remainder of features needs it."""
    batch, _, oh, ow, kh, kw = view.shape if view is not None else view_size
    groups, k_outer, features, outputs = kernel.shape
    pixels = batch * oh * ow
    dtype = kernel.dtype
    grouped = None
    blocks = {}

    def windows_of() -> np.ndarray:
        nonlocal grouped, view
        if grouped is None:
            view = view if view is not None else make_view()
            grouped = view.reshape(batch, groups, features, oh, ow, kh, kw)  # (splits one axis: no copy)
        return grouped

    def patches(f0: int, f1: int) -> np.ndarray:  # features [f0, f1) of every window position: (groups, pixels, K)
        if (f0, f1) not in blocks and copied_patches is not None:
            blocks[f0, f1] = copied_patches(f0, f1).astype(dtype, copy=False).reshape(1, pixels, -1)
        if (f0, f1) not in blocks:
            grouped = windows_of()
            part = np.transpose(grouped[:, :, f0:f1], (1, 0, 3, 4, 5, 6, 2))
            blocks[f0, f1] = np.ascontiguousarray(part, dtype).reshape(groups, pixels, k_outer * (f1 - f0))
        return blocks[f0, f1]

    aligned = features & ~(plan.tile_k - 1)
    out = None
    if aligned:
        # Each chunk of the features is one product in the kernel's lanes, its chains from zero, added to the sum
        # of the chunks before it (small_dot's chunked orders, with K laid out (kh, kw, chunk of ci)).
        matmul = small_matmul(ynnpack_kernel_order(plan.tile_k, plan.fused), workers, mode)
        ranges = [(0, outputs, plan.chunk)]
        if plan.columns < outputs and plan.last_chunk != plan.chunk:
            ranges = [(0, plan.columns, plan.chunk), (plan.columns, outputs, plan.last_chunk)]
        out = np.empty((groups, pixels, outputs), dtype) if len(ranges) > 1 else None
        for c0, c1, chunk in ranges:
            step = chunk if 0 < chunk < aligned else aligned
            result = None
            for f0 in range(0, aligned, step):
                f1 = min(f0 + step, aligned)
                rhs = np.ascontiguousarray(kernel[:, :, f0:f1, c0:c1]).reshape(groups, k_outer * (f1 - f0), c1 - c0)
                product = matmul(patches(f0, f1), rhs)
                # (the chunk's product plus the sum before it, in that order, into the sum's own array)
                result = product if result is None else np.add(product, result, out=result)
            if (c0, c1) == (0, outputs):
                out = result
            else:
                out[:, :, c0:c1] = result
    zero = dtype.type(0)
    for position in range(k_outer if aligned < features else 0):
        # The remainder of this window position: one kernel call on a zero-padded copy, its lanes added in pairs.
        row, column = divmod(position, kw)
        grouped = windows_of()
        lanes = [np.transpose(grouped[:, :, f, :, :, row, column], (1, 0, 2, 3)).reshape(groups, pixels, 1)
                 * kernel[:, position, f, None, :] + zero for f in range(aligned, features)]
        lanes += [np.zeros((groups, pixels, outputs), dtype)] * (plan.tile_k - len(lanes))
        tail = lanes[0] + lanes[1] if plan.tile_k == 2 else (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
        out = tail if out is None else out + tail
    if groups == 1:
        return out.reshape(pixels, outputs)
    return np.transpose(out, (1, 0, 2)).reshape(pixels, groups * outputs)
