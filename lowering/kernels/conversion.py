"""NumPy kernels: conversion family (``hlo.convert``, ``hlo.bitcast_convert``, uniform (de)quantization).

``hlo.convert`` follows XLA on CPU (checked against ``jax.jit`` in
``tests/test_conversion.py``): float -> integer truncates toward zero and
saturates at the target's range, NaN becomes 0; complex -> non-complex keeps
the real part; x -> pred is ``x != 0``; integers wrap; floats round to nearest
even (ml_dtypes implements the f8/f4 rounding, overflow to inf or NaN as the
format has it). XLA's CPU runtime flushes denormals in the hardware f32 <-> f64
conversions (f64 -> f32/bf16/c64 results, f32 -> f64 inputs); this kernel does
the same so conversions are bit-exact.

``hlo.bitcast_convert`` reinterprets bits (little-endian, as XLA: element 0 of
an added minor dimension holds the low bits), including sub-byte types, which
ml_dtypes stores one per byte.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from xla_dialect.ops import conversion as cv

from .registry import register
from .elementwise import BF16_FLUSHED_STORE, Elem, elem_of, store
from .host import host_properties

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_F32_TINY = np.float32(np.finfo(np.float32).tiny)


def _flush_f32(x):
    """Denormal f32-range magnitudes -> signed zero (XLA CPU's FTZ/DAZ)."""
    return np.where(np.abs(x) < _F32_TINY, np.copysign(x.dtype.type(0), x), x)


_F16 = np.dtype(np.float16)


def _with_xla_nans(convert, src: Elem, dst: Elem):
    """``convert`` with the NaNs XLA CPU's conversions give (measured against jax.jit), where NumPy's differ:

    * to f16 from f32 or bf16 (bf16 widened to f32 first): the hardware ``vcvtps2ph`` -- sign, the top 10
      payload bits, and the quiet bit set (a signalling NaN is quieted; NumPy keeps it signalling);
    * to f16 from f64: the quiet NaN of the same sign, payload dropped; on hosts with AVX512-FP16 the hardware
      ``vcvtpd2ph`` -- sign, the top 10 payload bits and the quiet bit set (measured on a Xeon);
    * f16 to f32: the hardware ``vcvtph2ps`` -- payload kept, quiet bit set.
    """
    if src.dtype == dst.dtype:
        return convert
    if dst.dtype == _F16 and src.compute == _F32:
        def fix(x, out):
            wide = np.asarray(x).astype(_F32).view(np.uint32)
            return ((wide >> 16) & 0x8000 | 0x7E00 | (wide >> 13) & 0x3FF).astype(np.uint16)
    elif dst.dtype == _F16 and src.dtype == _F64:
        payload = 0x3FF if host_properties()["avx512fp16"] else 0

        def fix(x, out):
            wide = np.asarray(x).view(np.uint64)
            return ((wide >> 48) & 0x8000 | 0x7E00 | (wide >> 42) & payload).astype(np.uint16)
    elif src.dtype == _F16 and dst.dtype == _F32:
        def fix(x, out):
            return out.view(np.uint32) | np.uint32(0x00400000)
    else:
        return convert

    def converted(x):
        x = np.asarray(x)
        out = np.asarray(convert(x))
        nan = np.isnan(out)
        if not nan.any():
            return out
        out = np.array(out, ndmin=1)  # a copy, also of a 0-d result
        nan = nan.reshape(out.shape)
        out.view(f"u{out.dtype.itemsize}")[nan] = fix(x.reshape(out.shape)[nan], out[nan])
        return out.reshape(x.shape)

    return converted


def _float_to_float(src: Elem, dst: Elem, flush: bool = True):
    return _with_xla_nans(_float_to_float_values(src, dst, flush), src, dst)


def _float_to_float_values(src: Elem, dst: Elem, flush: bool):
    if dst.name == "f4e2m1fn":  # no NaN in f4e2m1fn: XLA gives -0 for every NaN
        def to_f4(x):
            # (fnuz formats have no -0: go through the compute type)
            return store(np.asarray(x).astype(src.compute), dst.dtype)

        return to_f4
    # (With denormals kept, the executor is IEEE: the hardware conversions below flush nothing.)
    if src.dtype == _F64 and dst.compute == _F32 and flush:  # hardware cvtsd2ss: FTZ on the f32 result
        if dst.dtype == _F32:
            return lambda x: _flush_f32(x.astype(_F32))
        return lambda x: _flush_f32(x.astype(_F32)).astype(dst.dtype)
    if src.compute == _F32 and dst.dtype == _F64 and flush:  # hardware cvtss2sd: DAZ on the f32 input
        return lambda x: _flush_f32(np.asarray(x).astype(_F32)).astype(_F64)
    if src.dtype == dst.dtype:
        return lambda x: x
    return lambda x: x.astype(dst.dtype)


def _float_to_int(src: Elem, dst: Elem):
    if src.dtype in (_F32, _F64) and dst.bits == 8 * dst.dtype.itemsize:
        # The conversion's scalar definition (lowering.kernels.scalar.float_to_int), as the compiled paths.
        from . import scalar

        fn = scalar.ufunc(scalar.conversion(src.dtype, dst.dtype, True), [src.dtype], dst.dtype)

        def convert_by_definition(x):
            with np.errstate(all="ignore"):
                return fn(x)

        return convert_by_definition
    signed = dst.kind == "sint"
    lo = -(1 << (dst.bits - 1)) if signed else 0
    hi = (1 << (dst.bits - 1)) - 1 if signed else (1 << dst.bits) - 1
    # Powers of two are exact in every float type: compare against them, not against hi.
    upper = 2.0 ** (dst.bits - 1 if signed else dst.bits)
    lo_v, hi_v = dst.compute.type(lo), dst.compute.type(hi)

    # XLA CPU treats f4e2m1fn's largest magnitude (6.0) like an infinity: it saturates.
    f4_limit = 6.0 if src.name == "f4e2m1fn" else np.inf

    def convert(x):
        x = np.asarray(x).astype(src.compute)
        too_big = (x >= upper) | (x >= f4_limit)
        too_small = (x < (-upper if signed else 0)) | (x <= -f4_limit)
        safe = np.where(too_big | too_small | np.isnan(x), 0, np.trunc(x))
        r = np.where(too_big, hi_v, np.where(too_small, lo_v, safe.astype(dst.compute)))
        return r.astype(dst.dtype)

    return convert


def _to_pred(src: Elem, flush: bool):
    if src.dtype in (_F32, _F64) and flush:  # DAZ: a denormal input reads as zero
        tiny = np.finfo(src.dtype).tiny
        return lambda x: ~(np.abs(x) < tiny)  # NaN -> True
    return lambda x: np.asarray(x) != 0


_BF16 = np.dtype(ml_dtypes.bfloat16)


def _plain(src: Elem, dst: Elem):
    if src.dtype == dst.dtype:
        return lambda x: x
    if dst.dtype == _BF16 and src.kind in ("sint", "uint"):
        # XLA converts an integer to f32, then f32 to bf16: rounded twice (int32 832569354 is the f32 832569344,
        # a bf16 tie, rounded to even: 830472192 in XLA, 834666496 rounded once; long fuzz campaign, session 20)
        return lambda x: np.asarray(x).astype(_F32).astype(_BF16)
    return lambda x: np.asarray(x).astype(src.compute).astype(dst.dtype)


def convert_kernel(src: Elem, dst: Elem, flush: bool = True):
    """A function converting arrays of ``src`` elements to ``dst`` elements as XLA CPU does (``flush``: the
    executor's denormal mode is XLA's "flush"; else conversions are IEEE's)."""
    if src.kind == "complex":
        if dst.kind == "complex":
            component = _float_to_float(elem_of(_component(src)), elem_of(_component(dst)), flush)

            def complex_to_complex(x):
                out = np.empty(np.shape(x), dst.dtype)
                out.real = component(np.real(x))
                out.imag = component(np.imag(x))
                return out

            return complex_to_complex
        real = convert_kernel(elem_of(_component(src)), dst, flush)
        return lambda x: real(np.real(x))
    if dst.kind == "pred":
        return _to_pred(src, flush)
    if src.kind == "float" and dst.kind == "float":
        return _float_to_float(src, dst, flush)
    if src.kind == "float" and dst.kind in ("sint", "uint"):
        return _float_to_int(src, dst)
    if dst.kind == "complex" and src.kind == "float":
        component = _float_to_float(src, elem_of(_component(dst)), flush)
        return lambda x: component(np.asarray(x).astype(src.compute)).astype(dst.dtype)
    return _plain(src, dst)  # pred/int -> anything, int -> int (wraps), int -> float (nearest even)


def _component(e: Elem):
    from xla_dialect.types import element_type_from_dtype

    return element_type_from_dtype(np.empty(0, e.dtype).real.dtype).mlir


@register(cv.ConvertOp)
def _convert(op, ctx):
    src, dst = elem_of(op.operands[0].type), elem_of(op.results[0].type)
    if BF16_FLUSHED_STORE in op.attributes and src.dtype == _F32:
        # (the hardware f32 -> bf16 conversion of XLA's small loops: a denormal is a zero of its sign, whatever
        # the flush mode; see passes/small_loops.py)
        return lambda x: _flush_f32(np.asarray(x)).astype(dst.dtype)
    return convert_kernel(src, dst, ctx.flush)


def _raw_bits(x, e: Elem):
    """The element bits as unsigned integers of the storage width."""
    x = np.ascontiguousarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


@register(cv.BitcastConvertOp)
def _bitcast(op, ctx):
    src, dst = elem_of(op.operands[0].type), elem_of(op.results[0].type)
    out_shape = tuple(op.results[0].type.get_shape())
    if src.bits == 8 * src.dtype.itemsize and dst.bits == 8 * dst.dtype.itemsize:
        # Whole bytes: a NumPy view (little-endian, as XLA lays the parts out).
        return lambda x: np.ascontiguousarray(x).view(dst.dtype).reshape(out_shape)
    if src.bits == dst.bits:
        return lambda x: _raw_bits(x, src).view(dst.dtype).reshape(out_shape)
    if src.bits > dst.bits:  # split each element into ratio parts, low bits first
        ratio = src.bits // dst.bits
        shifts = np.arange(ratio, dtype=np.uint64) * dst.bits
        mask = (1 << dst.bits) - 1

        def split(x):
            raw = _raw_bits(x, src).astype(np.uint64)[..., None]
            parts = (raw >> shifts) & np.uint64(mask)
            return parts.astype(np.dtype(f"u{dst.dtype.itemsize}")).view(dst.dtype).reshape(out_shape)

        return split
    shifts = np.arange(src.bits and dst.bits // src.bits, dtype=np.uint64) * src.bits

    def combine(x):
        raw = _raw_bits(x, src).astype(np.uint64) & np.uint64((1 << src.bits) - 1)
        word = np.bitwise_or.reduce(raw << shifts, axis=-1) if raw.shape[-1] else np.zeros(raw.shape[:-1], np.uint64)
        return word.astype(np.dtype(f"u{dst.dtype.itemsize}")).view(dst.dtype).reshape(out_shape)

    return combine


# ----------------------------------------------------------------------------
# Uniform quantization (StableHLO's quantize / dequantize, step by step)
# ----------------------------------------------------------------------------


def _per_element(values, dtype, q, rank: int) -> np.ndarray:
    """Scales or zero points as an array broadcasting against the tensor (along the quantized axis)."""
    arr = np.asarray(values, dtype=dtype)
    if q.data.axis is None:
        return arr.reshape(())
    shape = [1] * rank
    shape[q.data.axis] = arr.size
    return arr.reshape(shape)


def _rounded(e: Elem):
    """Round a compute-dtype result to the element type and back (XLA rounds f16/bf16 after each op)."""
    if not e.widened:
        return lambda x: x
    return lambda x: x.astype(e.dtype).astype(e.compute)


def dequantize_kernel(q, rank: int):
    """``(q - zero_point) * scale`` in the expressed type, as the spec's ``dequantize``.

    The subtraction is done in 64-bit integers: the difference of two storage
    values need not fit the storage type.
    """
    expressed = elem_of(q.expressed.mlir)
    round_ = _rounded(expressed)
    zero_points = _per_element(q.data.zero_points, np.int64, q, rank)
    scales = _per_element(q.data.scales, expressed.dtype, q, rank).astype(expressed.compute)
    to_float = convert_kernel(elem_of(_s64()), expressed)

    def dequantize(storage):
        centred = np.asarray(storage).astype(np.int64) - zero_points
        with np.errstate(over="ignore"):  # (a wide storage value may overflow a narrow expressed type)
            real = np.asarray(to_float(centred)).astype(expressed.compute)
            return round_(real * scales).astype(expressed.dtype)

    return dequantize


def _s64():
    from xla_dialect.types import element_type_named

    return element_type_named("s64").mlir


def quantize_kernel(q, rank: int):
    """The spec's ``quantize``: ``round_nearest_even(clamp(x / scale + zero_point))`` in the expressed
    type, then converted to the storage type."""
    expressed = elem_of(q.expressed.mlir)
    storage = elem_of(q)
    round_ = _rounded(expressed)
    compute = expressed.compute
    scales = _per_element(q.data.scales, expressed.dtype, q, rank).astype(compute)
    zero_points = _per_element(q.data.zero_points, expressed.dtype, q, rank).astype(compute)
    with np.errstate(over="ignore"):  # an s32 range in f16 is +-inf, as the spec's convert gives
        low = np.asarray(q.data.storage_min, expressed.dtype).astype(compute)
        high = np.asarray(q.data.storage_max, expressed.dtype).astype(compute)
    to_storage = convert_kernel(expressed, storage)

    def quantize(x):
        x = np.asarray(x).astype(compute)
        with np.errstate(all="ignore"):  # x / scale may overflow to inf: clamped like any other value
            shifted = round_(round_(x / scales) + zero_points)
        clamped = np.where(np.isnan(shifted), shifted, np.minimum(np.maximum(shifted, low), high))
        rounded = np.rint(clamped).astype(expressed.dtype)
        return to_storage(rounded)

    return quantize


@register(cv.UniformQuantizeOp)
def _uniform_quantize(op, ctx):
    from xla_dialect.quant import quantized_element

    operand_type, result_type = op.operands[0].type, op.results[0].type
    rank = result_type.get_num_dims()
    quantize = quantize_kernel(quantized_element(result_type), rank)
    source = quantized_element(operand_type)
    if source is None:
        return quantize
    dequantize = dequantize_kernel(source, rank)  # requantization goes through the expressed floats
    return lambda x: quantize(dequantize(x))


@register(cv.UniformDequantizeOp)
def _uniform_dequantize(op, ctx):
    from xla_dialect.quant import quantized_element

    operand_type = op.operands[0].type
    return dequantize_kernel(quantized_element(operand_type), operand_type.get_num_dims())
