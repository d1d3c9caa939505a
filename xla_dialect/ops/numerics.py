"""Numerical library ops: reduce_precision, fft, cholesky, triangular_solve,
batch_norm_training / batch_norm_inference / batch_norm_grad, rng and rng_bit_generator.

Shape rules follow XLA's ``ShapeInference`` (``InferFftShape``,
``InferCholeskyShape``, ``InferTriangularSolveShape``, ``InferBatchNorm*Shape``,
the HLO verifier's Rng / RngBitGenerator checks) and the StableHLO spec where it
is stricter: batch-norm operands share one element type (StableHLO C2; XLA's
shape inference would accept mixed float precisions its CPU expander cannot
compute), rng_bit_generator states are ``u64[N]``.

Properties use StableHLO's attribute names so that modules import from and
export to StableHLO unchanged: enums (``fft_type``, ``transpose_a``,
``rng_distribution``, ``rng_algorithm``) are strings, flags are ``i1``
integers, ``epsilon`` an ``f32`` float, other integers ``i64``.

``hlo.rng`` keeps StableHLO's form: its shape is a third operand (a rank-1
integer tensor, a constant in practice) and the result type is declared.
``hlo.rng_bit_generator`` declares its output type too (XLA's ``shape``
argument). uniform_quantize / uniform_dequantize are not defined: the dialect
has no quantized element types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from xdsl.dialects.builtin import (
    BoolAttr,
    ComplexType,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
)
from xdsl.ir import Attribute
from xdsl.traits import Pure
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def, traits_def

from ..errors import BuilderError, XlaError
from ..layout import strip_layout
from ..types import element_type_from_dtype, element_type_named, element_type_of
from .base import (
    set_quantized,
    HloOp,
    complex_component,
    fail,
    fmt,
    ints,
    i64_array,
    kind_of,
    make_tensor,
    string,
    tensor,
    unsigned_int, builder_method)

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
TRANSPOSE_KINDS = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")
RNG_DISTRIBUTIONS = ("UNIFORM", "NORMAL")
RNG_STATE_SIZES = {"DEFAULT": (2, 3), "THREE_FRY": (2,), "PHILOX": (2, 3)}
"""rng_bit_generator algorithm -> the state sizes XLA's CPU expander accepts
(DEFAULT is Philox on CPU)."""

_FLOAT_COMPONENTS = ("f32", "f64")
"""Element types an FFT may have as real type (XLA: c64 <-> f32, c128 <-> f64)."""


# ----------------------------------------------------------------------------
# Property helpers
# ----------------------------------------------------------------------------


def flag(props: Mapping[str, Attribute], name: str, default: bool = False) -> bool:
    """A boolean property (``i1`` integer attribute) as a Python bool."""
    attr = props.get(name)
    if attr is None:
        return default
    if not isinstance(attr, IntegerAttr):
        raise XlaError(f"property {name} must be a boolean, got {attr}")
    return bool(attr.value.data)


def integer(props: Mapping[str, Attribute], name: str, op_name: str) -> int:
    """A required integer property."""
    attr = props.get(name)
    if not isinstance(attr, IntegerAttr):
        fail(op_name, f"needs an integer property {name}, got {attr}")
    return int(attr.value.data)


def enum(props: Mapping[str, Attribute], name: str, allowed: Sequence[str], op_name: str,
         default: str | None = None) -> str:
    """A string-enum property, checked against ``allowed``."""
    value = string(props.get(name), default)
    if value not in allowed:
        fail(op_name, f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _name(type_: TensorType) -> str:
    return element_type_of(type_.element_type).xla_name


def _same_element(op_name: str, what: str, t: TensorType, operand: TensorType) -> None:
    if t.element_type != operand.element_type:
        fail(op_name, f"{what} {fmt(t)} must have the operand's element type {_name(operand)}")


def _float_operand(op_name: str, t: Attribute, what: str) -> TensorType:
    t = tensor(op_name, t, what)
    if kind_of(t) != "float":
        fail(op_name, f"{what} must have a floating-point element type, got {fmt(t)}")
    return t


def _float_or_complex(op_name: str, t: Attribute, what: str) -> TensorType:
    t = tensor(op_name, t, what)
    if kind_of(t) not in ("float", "complex"):
        fail(op_name, f"{what} must have a floating-point or complex element type, got {fmt(t)}")
    return t


# ----------------------------------------------------------------------------
# reduce_precision
# ----------------------------------------------------------------------------


@irdl_op_definition
class ReducePrecisionOp(HloOp):
    """``hlo.reduce_precision``: round to a float format with ``exponent_bits`` and
    ``mantissa_bits`` and back (ties to even; overflow to inf, underflow to zero, NaN kept)."""

    name = "hlo.reduce_precision"
    traits = traits_def(Pure())
    operand = operand_def()
    result = result_def()
    exponent_bits = prop_def(IntegerAttr)
    mantissa_bits = prop_def(IntegerAttr)

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        t = _float_operand(cls.name, t, "operand")
        exponent_bits = integer(props, "exponent_bits", cls.name)
        mantissa_bits = integer(props, "mantissa_bits", cls.name)
        if exponent_bits < 1:
            fail(cls.name, f"exponent_bits must be at least 1 (to tell zero from infinity), got {exponent_bits}")
        if mantissa_bits < 0:
            fail(cls.name, f"mantissa_bits must be non-negative, got {mantissa_bits}")
        return [make_tensor(t.element_type, t.get_shape())]


# ----------------------------------------------------------------------------
# fft
# ----------------------------------------------------------------------------


@irdl_op_definition
class FftOp(HloOp):
    """``hlo.fft``: FFT / IFFT (complex -> complex), RFFT (real -> complex, the last
    axis shrinks to ``n // 2 + 1``), IRFFT (complex -> real) over the last
    ``len(fft_length)`` (1 to 3) axes."""

    name = "hlo.fft"
    traits = traits_def(Pure())
    operand = operand_def()
    result = result_def()
    fft_type = prop_def(StringAttr)
    fft_length = prop_def(DenseArrayBase)

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        t = tensor(cls.name, t, "operand")
        kind = enum(props, "fft_type", FFT_TYPES, cls.name)
        lengths = ints(props.get("fft_length"))
        rank = len(lengths)
        if not 1 <= rank <= 3:
            fail(cls.name, f"fft_length must have 1 to 3 entries (FFT ranks 1-3), got {list(lengths)}")
        if any(n < 0 for n in lengths):
            fail(cls.name, f"fft_length {list(lengths)} has a negative length")
        shape = list(t.get_shape())
        if kind == "RFFT":
            if _name(t) not in _FLOAT_COMPONENTS:
                fail(cls.name, f"RFFT requires an f32 or f64 operand, got {fmt(t)}")
        elif kind_of(t) != "complex":
            fail(cls.name, f"{kind} requires a complex (c64 or c128) operand, got {fmt(t)}")
        if len(shape) < rank:
            fail(cls.name, f"an FFT of rank {rank} needs an operand of at least rank {rank}, got {fmt(t)}")
        inner = shape[len(shape) - rank:]
        if kind == "RFFT":
            if inner != list(lengths):
                fail(cls.name, f"RFFT requires the innermost dimensions {inner} of {fmt(t)} to equal "
                               f"fft_length {list(lengths)}")
            if lengths[-1] != 0:
                shape[-1] = lengths[-1] // 2 + 1
            return [make_tensor(ComplexType(t.element_type), shape)]
        if kind == "IRFFT":
            if inner[:-1] != list(lengths[:-1]):
                fail(cls.name, f"IRFFT requires all but the innermost of the last {rank} dimensions {inner} "
                               f"of {fmt(t)} to equal fft_length {list(lengths[:-1])}")
            want = lengths[-1] // 2 + 1
            if (inner[-1] != 0 or lengths[-1] != 0) and inner[-1] != want:
                fail(cls.name, f"IRFFT requires the innermost dimension of {fmt(t)} to be fft_length[-1]/2+1 "
                               f"= {want}, got {inner[-1]}")
            shape[-1] = lengths[-1]
            return [make_tensor(complex_component(t.element_type), shape)]
        # FFT / IFFT: XLA checks only the operand rank; a transform length must match its axis here
        # because the result keeps the operand's shape.
        if inner != list(lengths):
            fail(cls.name, f"{kind} requires the innermost dimensions {inner} of {fmt(t)} to equal "
                           f"fft_length {list(lengths)}")
        return [make_tensor(t.element_type, shape)]


# ----------------------------------------------------------------------------
# cholesky, triangular_solve
# ----------------------------------------------------------------------------


def _square_batch(op_name: str, t: TensorType, what: str) -> tuple[int, ...]:
    shape = t.get_shape()
    if len(shape) < 2:
        fail(op_name, f"{what} must have rank >= 2 (a batch of matrices), got {fmt(t)}")
    if shape[-1] != shape[-2]:
        fail(op_name, f"the two minor dimensions of {what} must be equal (square matrices), got {fmt(t)}")
    return shape


@irdl_op_definition
class CholeskyOp(HloOp):
    """``hlo.cholesky``: Cholesky factors of a batch of Hermitian positive definite
    matrices, read from and written to the ``lower`` (or upper) triangle."""

    name = "hlo.cholesky"
    traits = traits_def(Pure())
    a = operand_def()
    result = result_def()
    lower = opt_prop_def(IntegerAttr)

    assembly_format = "$a attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (a,) = operand_types
        a = _float_or_complex(cls.name, a, "operand a")
        _square_batch(cls.name, a, "operand a")
        return [make_tensor(a.element_type, a.get_shape())]


@irdl_op_definition
class TriangularSolveOp(HloOp):
    """``hlo.triangular_solve``: solves ``op(a) x = b`` (``left_side``) or ``x op(a) = b``
    for batches of triangular ``a`` (op: ``transpose_a`` NO_TRANSPOSE / TRANSPOSE / ADJOINT)."""

    name = "hlo.triangular_solve"
    traits = traits_def(Pure())
    a = operand_def()
    b = operand_def()
    result = result_def()
    left_side = opt_prop_def(IntegerAttr)
    lower = opt_prop_def(IntegerAttr)
    unit_diagonal = opt_prop_def(IntegerAttr)
    transpose_a = prop_def(StringAttr)

    assembly_format = "$a `,` $b attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        a, b = operand_types
        a = _float_or_complex(cls.name, a, "operand a")
        b = tensor(cls.name, b, "operand b")
        if a.element_type != b.element_type:
            fail(cls.name, f"a and b must have the same element type, got {fmt(a)} and {fmt(b)}")
        a_shape = _square_batch(cls.name, a, "operand a")
        b_shape = b.get_shape()
        if len(b_shape) != len(a_shape):
            fail(cls.name, f"a and b must have the same rank, got {fmt(a)} and {fmt(b)}")
        left = flag(props, "left_side")
        shared = b_shape[-2] if left else b_shape[-1]
        if shared != a_shape[-1]:
            side = "b's second-to-last dimension (left_side)" if left else "b's last dimension (right side)"
            fail(cls.name, f"the shared dimension of a and b does not match: a is {fmt(a)}, {side} is {shared} "
                           f"in {fmt(b)}")
        if a_shape[:-2] != b_shape[:-2]:
            fail(cls.name, f"a and b must have the same batch dimensions, got {list(a_shape[:-2])} and "
                           f"{list(b_shape[:-2])}")
        enum(props, "transpose_a", TRANSPOSE_KINDS, cls.name)
        return [make_tensor(b.element_type, b_shape)]


# ----------------------------------------------------------------------------
# batch norm
# ----------------------------------------------------------------------------


def _batch_norm_operand(op_name: str, props: Mapping[str, Attribute], t: Attribute) -> tuple[TensorType, int]:
    operand = _float_operand(op_name, t, "operand")
    index = integer(props, "feature_index", op_name)
    rank = operand.get_num_dims()
    if rank < 1:
        fail(op_name, f"the operand must have rank >= 1, got {fmt(operand)}")
    if not 0 <= index < rank:
        fail(op_name, f"feature_index {index} is out of range for the operand {fmt(operand)} of rank {rank}")
    epsilon = props.get("epsilon")
    if not isinstance(epsilon, FloatAttr):
        fail(op_name, f"needs an f32 property epsilon, got {epsilon}")
    return operand, index


def _feature_vectors(op_name: str, operand: TensorType, index: int, types: Sequence[Attribute],
                     names: Sequence[str]) -> TensorType:
    """Check each of ``types`` is a rank-1 vector of the feature count; return the feature vector type."""
    count = operand.get_shape()[index]
    for t, what in zip(types, names):
        t = tensor(op_name, t, what)
        _same_element(op_name, what, t, operand)
        if t.get_num_dims() != 1:
            fail(op_name, f"{what} must have rank 1, got {fmt(t)}")
        if t.get_shape()[0] != count:
            fail(op_name, f"{what} {fmt(t)} must have the feature count {count} "
                          f"(dimension {index} of the operand {fmt(operand)})")
    return make_tensor(operand.element_type, [count])


class _BatchNormOp(HloOp):
    """Common properties of the batch-norm ops (operands are declared by each op: IRDL
    lists a subclass's fields before its base's)."""

    epsilon = prop_def(FloatAttr)
    feature_index = prop_def(IntegerAttr)


@irdl_op_definition
class BatchNormTrainingOp(_BatchNormOp):
    """``hlo.batch_norm_training(operand, scale, offset)`` -> (output, batch_mean, batch_var):
    normalizes over every dimension but ``feature_index``."""

    name = "hlo.batch_norm_training"
    traits = traits_def(Pure())
    operand = operand_def()
    scale = operand_def()
    offset = operand_def()
    output = result_def()
    batch_mean = result_def()
    batch_var = result_def()

    assembly_format = "$operand `,` $scale `,` $offset attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        operand, index = _batch_norm_operand(cls.name, props, operand_types[0])
        vec = _feature_vectors(cls.name, operand, index, operand_types[1:], ("scale", "offset"))
        return [make_tensor(operand.element_type, operand.get_shape()), vec, vec]


@irdl_op_definition
class BatchNormInferenceOp(_BatchNormOp):
    """``hlo.batch_norm_inference(operand, scale, offset, mean, variance)``: normalizes
    with the given moments."""

    name = "hlo.batch_norm_inference"
    traits = traits_def(Pure())
    operand = operand_def()
    scale = operand_def()
    offset = operand_def()
    mean = operand_def()
    variance = operand_def()
    result = result_def()

    assembly_format = ("$operand `,` $scale `,` $offset `,` $mean `,` $variance attr-dict `:` "
                       "functional-type(operands, results)")

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        operand, index = _batch_norm_operand(cls.name, props, operand_types[0])
        _feature_vectors(cls.name, operand, index, operand_types[1:], ("scale", "offset", "mean", "variance"))
        return [make_tensor(operand.element_type, operand.get_shape())]


@irdl_op_definition
class BatchNormGradOp(_BatchNormOp):
    """``hlo.batch_norm_grad(operand, scale, mean, variance, grad_output)`` ->
    (grad_operand, grad_scale, grad_offset)."""

    name = "hlo.batch_norm_grad"
    traits = traits_def(Pure())
    operand = operand_def()
    scale = operand_def()
    mean = operand_def()
    variance = operand_def()
    grad_output = operand_def()
    grad_operand = result_def()
    grad_scale = result_def()
    grad_offset = result_def()

    assembly_format = ("$operand `,` $scale `,` $mean `,` $variance `,` $grad_output attr-dict `:` "
                       "functional-type(operands, results)")

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        operand, index = _batch_norm_operand(cls.name, props, operand_types[0])
        vec = _feature_vectors(cls.name, operand, index, operand_types[1:4], ("scale", "mean", "variance"))
        grad = tensor(cls.name, operand_types[4], "grad_output")
        _same_element(cls.name, "grad_output", grad, operand)
        if grad.get_shape() != operand.get_shape():
            fail(cls.name, f"grad_output {fmt(grad)} must have the operand's shape {fmt(operand)}")
        return [make_tensor(operand.element_type, operand.get_shape()), vec, vec]


# ----------------------------------------------------------------------------
# rng, rng_bit_generator
# ----------------------------------------------------------------------------


def _declared(op_name: str, result_types, count: int) -> list[TensorType]:
    if result_types is None or len(result_types) != count:
        fail(op_name, f"the result type{'s' if count > 1 else ''} must be declared")
    return [tensor(op_name, t, f"result #{i}") for i, t in enumerate(result_types)]


@irdl_op_definition
class RngOp(HloOp):
    """``hlo.rng(a, b, shape)``: random numbers, UNIFORM over ``[a, b)`` or NORMAL with
    mean ``a`` and standard deviation ``b`` (XLA's RngUniform / RngNormal)."""

    name = "hlo.rng"
    a = operand_def()
    b = operand_def()
    shape = operand_def()
    result = result_def()
    rng_distribution = prop_def(StringAttr)

    assembly_format = "$a `,` $b `,` $shape attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        a, b, shape = (tensor(cls.name, t, w) for t, w in zip(operand_types, ("a", "b", "shape")))
        distribution = enum(props, "rng_distribution", RNG_DISTRIBUTIONS, cls.name)
        (result,) = _declared(cls.name, result_types, 1)
        for t, what in ((a, "a"), (b, "b")):
            if t.get_shape():
                fail(cls.name, f"{what} must be a scalar, got {fmt(t)}")
            if t.element_type != result.element_type:
                fail(cls.name, f"{what} {fmt(t)} must have the result's element type {_name(result)}")
        kind = kind_of(result)
        if distribution == "NORMAL" and kind != "float":
            fail(cls.name, f"NORMAL needs a floating-point element type, got {_name(result)}")
        if kind == "complex":
            fail(cls.name, f"UNIFORM needs a floating-point, integer or pred element type, got {_name(result)}")
        if kind_of(shape) not in ("sint", "uint") or shape.get_num_dims() != 1:
            fail(cls.name, f"shape must be a rank-1 integer tensor, got {fmt(shape)}")
        if shape.get_shape()[0] != result.get_num_dims():
            fail(cls.name, f"shape {fmt(shape)} has {shape.get_shape()[0]} entries but the result {fmt(result)} "
                           f"has rank {result.get_num_dims()}")
        return [make_tensor(result.element_type, result.get_shape())]


@irdl_op_definition
class RngBitGeneratorOp(HloOp):
    """``hlo.rng_bit_generator(initial_state)`` -> (output_state, output): uniform random
    bits from a counter-based generator (``rng_algorithm`` DEFAULT / THREE_FRY / PHILOX)."""

    name = "hlo.rng_bit_generator"
    traits = traits_def(Pure())
    initial_state = operand_def()
    output_state = result_def()
    output = result_def()
    rng_algorithm = prop_def(StringAttr)

    assembly_format = "$initial_state attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (state,) = operand_types
        state = tensor(cls.name, state, "initial_state")
        algorithm = enum(props, "rng_algorithm", tuple(RNG_STATE_SIZES), cls.name)
        if state.element_type != unsigned_int(64) or state.get_num_dims() != 1:
            fail(cls.name, f"initial_state must be a u64 vector, got {fmt(state)}")
        sizes = RNG_STATE_SIZES[algorithm]
        if state.get_shape()[0] not in sizes:
            fail(cls.name, f"{algorithm} needs a state of {' or '.join(f'u64[{n}]' for n in sizes)}, "
                           f"got {fmt(state)}")
        out_state, output = _declared(cls.name, result_types, 2)
        if strip_layout(out_state) != strip_layout(make_tensor(state.element_type, state.get_shape())):
            fail(cls.name, f"output_state {fmt(out_state)} must have the initial state's type {fmt(state)}")
        et = element_type_of(output.element_type)
        if et.kind not in ("sint", "uint", "float") or et.bits not in (2, 4, 8, 16, 32, 64):
            fail(cls.name, f"output must have a 2/4/8/16/32/64-bit integer or floating-point element type, "
                           f"got {fmt(output)}")
        return [make_tensor(state.element_type, state.get_shape()),
                make_tensor(output.element_type, output.get_shape())]


OPS = [ReducePrecisionOp, FftOp, CholeskyOp, TriangularSolveOp, BatchNormTrainingOp, BatchNormInferenceOp,
       BatchNormGradOp, RngOp, RngBitGeneratorOp]
"""Every op class of this family (registered in the hlo dialect)."""

# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("compute", ReducePrecisionOp, CholeskyOp, TriangularSolveOp, BatchNormTrainingOp,
              BatchNormInferenceOp, BatchNormGradOp)


# ----------------------------------------------------------------------------
# Builder methods (XLA client names, snake_case)
# ----------------------------------------------------------------------------


def _enum_name(caller: str, value, allowed: Sequence[str], what: str) -> str:
    """An enum given as a string or an enum member (jax's ``RandomAlgorithm.RNG_PHILOX``, XLA's ``FftType.FFT``)."""
    name = str(getattr(value, "name", value)).upper()
    if name.startswith("RNG_") and name[4:] in allowed:
        name = name[4:]
    if name not in allowed:
        raise BuilderError(f"{caller}: {what} must be one of {', '.join(allowed)}, got {value!r}")
    return name


def _int_arg(caller: str, value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BuilderError(f"{caller}: {what} must be an int, got {value!r}")
    return value


def _batch_norm_props(caller: str, epsilon, feature_index) -> dict[str, Attribute]:
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool):
        raise BuilderError(f"{caller}: epsilon must be a float, got {epsilon!r}")
    return {"epsilon": FloatAttr(float(epsilon), f32),
            "feature_index": IntegerAttr(_int_arg(caller, feature_index, "feature_index"), 64)}


class NumericsBuilder:
    """Builder methods of the numerics family."""

    @builder_method
    def reduce_precision(self, operand, exponent_bits: int, mantissa_bits: int, result_type=None):
        """``hlo.reduce_precision``: round ``operand`` to a float format with the given bit counts and back.

        ``result_type``: the result's element type, needed on quantized operands."""
        caller = self._caller()
        props = {"exponent_bits": IntegerAttr(_int_arg(caller, exponent_bits, "exponent_bits"), 64),
                 "mantissa_bits": IntegerAttr(_int_arg(caller, mantissa_bits, "mantissa_bits"), 64)}
        return self._emit1(ReducePrecisionOp, [operand], props,
                           result_types=self._results_of_element(ReducePrecisionOp, [operand], props, result_type))

    @builder_method
    def fft(self, operand, fft_type, fft_length: Sequence[int]):
        """``hlo.fft``: ``fft_type`` FFT / IFFT / RFFT / IRFFT over the last ``len(fft_length)`` axes.

        ``fft_length`` are the time-domain lengths (for IRFFT it sets the
        innermost result dimension)."""
        caller = self._caller()
        kind = _enum_name(caller, fft_type, FFT_TYPES, "fft_type")
        try:
            lengths = [int(n) for n in fft_length]
        except (TypeError, ValueError):
            raise BuilderError(f"{caller}: fft_length must be a list of ints, got {fft_length!r}") from None
        return self._emit1(FftOp, [operand], {"fft_type": StringAttr(kind), "fft_length": i64_array(lengths)})

    @builder_method
    def cholesky(self, a, lower: bool = True):
        """``hlo.cholesky``: lower (``l @ l^H = a``) or upper (``u^H @ u = a``) Cholesky factors,
        read from that triangle of ``a``; the other triangle of the result is zero."""
        return self._emit1(CholeskyOp, [a], {"lower": BoolAttr.from_bool(bool(lower))})

    @builder_method
    def triangular_solve(self, a, b, left_side: bool, lower: bool, unit_diagonal: bool, transpose_a="NO_TRANSPOSE"):
        """``hlo.triangular_solve``: ``x`` with ``op(a) @ x = b`` (``left_side``) or ``x @ op(a) = b``;
        ``transpose_a`` is NO_TRANSPOSE, TRANSPOSE or ADJOINT."""
        caller = self._caller()
        props = {"left_side": BoolAttr.from_bool(bool(left_side)), "lower": BoolAttr.from_bool(bool(lower)),
                 "unit_diagonal": BoolAttr.from_bool(bool(unit_diagonal)),
                 "transpose_a": StringAttr(_enum_name(caller, transpose_a, TRANSPOSE_KINDS, "transpose_a"))}
        return self._emit1(TriangularSolveOp, [a, b], props)

    @builder_method
    def batch_norm_training(self, operand, scale, offset, epsilon: float, feature_index: int):
        """``hlo.batch_norm_training``: returns (output, batch_mean, batch_var)."""
        props = _batch_norm_props(self._caller(), epsilon, feature_index)
        return tuple(self._emit(BatchNormTrainingOp, [operand, scale, offset], props))

    @builder_method
    def batch_norm_inference(self, operand, scale, offset, mean, variance, epsilon: float, feature_index: int):
        """``hlo.batch_norm_inference``: normalizes with the given mean and variance."""
        props = _batch_norm_props(self._caller(), epsilon, feature_index)
        return self._emit1(BatchNormInferenceOp, [operand, scale, offset, mean, variance], props)

    @builder_method
    def batch_norm_grad(self, operand, scale, mean, variance, grad_output, epsilon: float, feature_index: int):
        """``hlo.batch_norm_grad``: returns (grad_operand, grad_scale, grad_offset)."""
        props = _batch_norm_props(self._caller(), epsilon, feature_index)
        return tuple(self._emit(BatchNormGradOp, [operand, scale, mean, variance, grad_output], props))

    @builder_method
    def rng_uniform(self, a, b, shape):
        """``hlo.rng`` UNIFORM (XLA RngUniform): values in ``[a, b)`` of ``shape`` (XLA shape text or a type)."""
        return self._rng("UNIFORM", a, b, shape)

    @builder_method
    def rng_normal(self, mu, sigma, shape):
        """``hlo.rng`` NORMAL (XLA RngNormal): normal values with mean ``mu`` and standard deviation ``sigma``."""
        return self._rng("NORMAL", mu, sigma, shape)

    def _rng(self, distribution: str, a, b, shape):
        result = self._type(shape)
        if not isinstance(result, TensorType):
            raise BuilderError(f"{self._caller()}: shape must be an array shape, got {fmt(result)}")
        dims = self.constant(_dims_array(result.get_shape()))
        return self._emit1(RngOp, [a, b, dims], {"rng_distribution": StringAttr(distribution)},
                           result_types=[make_tensor(result.element_type, result.get_shape())])

    @builder_method
    def rng_bit_generator(self, algorithm, initial_state, shape):
        """``hlo.rng_bit_generator`` (XLA RngBitGenerator): returns (new_state, bits of ``shape``).

        ``algorithm``: DEFAULT, THREE_FRY or PHILOX (or jax's ``RandomAlgorithm``);
        ``shape``: XLA shape text such as ``'u32[4,8]'``, an xDSL type, or
        ``(dims, dtype)``."""
        caller = self._caller()
        name = _enum_name(caller, algorithm, tuple(RNG_STATE_SIZES), "algorithm")
        if isinstance(shape, tuple) and len(shape) == 2 and not isinstance(shape[0], int):
            dims, dtype = shape
            try:
                element = (element_type_named(dtype) if isinstance(dtype, str) else element_type_from_dtype(dtype))
            except XlaError as e:
                raise BuilderError(f"{caller}: {e}") from None
            result = make_tensor(element.mlir, [int(d) for d in dims])
        else:
            result = self._type(shape)
        state = self._value(initial_state, "initial_state").type
        return tuple(self._emit(RngBitGeneratorOp, [initial_state], {"rng_algorithm": StringAttr(name)},
                                result_types=[strip_layout(state), result]))


def _dims_array(dims: Sequence[int]) -> np.ndarray:
    """The s64 vector of an rng result's dimensions (hlo.rng's shape operand)."""
    return np.asarray(list(dims), dtype=np.int64).reshape(len(dims))
