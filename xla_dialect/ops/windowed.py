"""Windowed ops: ``hlo.convolution``, ``hlo.reduce_window`` and ``hlo.select_and_scatter``.

All three slide an n-d window over a base area. :class:`Window` holds the
window configuration (sizes, strides, low/high padding, base and window
dilation) and implements XLA's ``InferWindowOutputShape``: each dimension of
the base is dilated (``(size - 1) * base_dilation + 1``, 0 for an empty
dimension), padded (negative padding removes elements), and the window,
dilated the same way, is placed at every stride that fits::

    out = 0 if padded == 0 or dilated_window > padded
          else (padded - dilated_window) // stride + 1

Properties use StableHLO's names, so that StableHLO imports and exports
unchanged: ``padding`` is a flat ``array<i64: low0, high0, low1, high1, ...>``
(StableHLO's ``tensor<Nx2xi64>`` row-major), convolution dimension numbers are
one property per field of ``#stablehlo.conv``. Where StableHLO and XLA
disagree, XLA wins: a window dimension must be positive (so a convolution
kernel cannot have an empty spatial dimension), and padding may not make a
base dimension negative.

The convolution's result element type follows XLA's ``preferred_element_type``
rules, as ``hlo.dot_general`` does (see :mod:`xla_dialect.ops.linalg`).
"""

from __future__ import annotations

from typing import ClassVar

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, IntegerAttr, IntegerType, TensorType
from xdsl.ir import Attribute
from xdsl.traits import Pure, RecursiveMemoryEffect
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    var_operand_def,
    var_result_def,
    traits_def,
)

from ..errors import BuilderError
from ..types import element_type_of
from .base import (
    HloOp, fail, fmt, i64_array, ints, make_tensor, tensor, set_quantized, builder_method,
    check_configuration_operand, declared_result,
)
from .control_flow import (
    _results,
    as_list,
    check_region,
    is_scalar_pred,
    precheck,
    same_shape_arrays,
    scalar_of,
    scalar_params,
    types_text,
)
from .linalg import _bits, _check_precision

# ----------------------------------------------------------------------------
# Window geometry
# ----------------------------------------------------------------------------


def dilated_bound(size: int, dilation: int) -> int:
    """XLA's ``DilatedBound``: the size after ``dilation - 1`` holes between elements (0 stays 0)."""
    return 0 if size == 0 else (size - 1) * dilation + 1


def strided_bound(bound: int, window: int, stride: int) -> int:
    """XLA's ``StridedBound``: how many windows of ``window`` fit in ``bound`` at ``stride``."""
    if bound == 0 or window > bound:
        return 0
    return (bound - window) // stride + 1


@dataclass(frozen=True)
class Window:
    """An n-d window: sizes, strides, (low, high) padding, base and window dilations."""

    dimensions: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    base_dilations: tuple[int, ...]
    window_dilations: tuple[int, ...]
    reversal: tuple[bool, ...] = field(default=())

    @classmethod
    def from_props(cls, op_name: str, props: Mapping[str, Attribute], rank: int, names: Mapping[str, str],
                   dimensions: Sequence[int] | None = None) -> Window:
        """Read the window properties (``names`` maps the fields to property names) and check
        each has ``rank`` entries; absent properties take their defaults (stride 1, padding 0,
        dilation 1). ``dimensions`` replaces the ``dimensions`` property (the convolution takes
        them from its kernel)."""
        def read(field_name: str, default: int, count: int = 1) -> tuple[int, ...]:
            prop = names.get(field_name)
            attr = props.get(prop) if prop else None
            values = ints(attr, None) if attr is not None else (default,) * (rank * count)
            if len(values) != rank * count:
                what = f"{rank} (low, high) pairs ({rank * 2} values)" if count == 2 else f"{rank} values"
                fail(op_name, f"{prop} has {len(values)} values {list(values)}; expected {what}, "
                              f"one per window dimension")
            return tuple(int(v) for v in values)

        dims = tuple(dimensions) if dimensions is not None else read("dimensions", 1)
        flat = read("padding", 0, 2)
        reversal = tuple(bool(v) for v in read("reversal", 0))
        return cls(dims, read("strides", 1), tuple(zip(flat[0::2], flat[1::2])),
                   read("base_dilations", 1), read("window_dilations", 1), reversal)

    def output_shape(self, op_name: str, base: Sequence[int], what: str = "operand") -> list[int]:
        """XLA's ``InferWindowOutputShape`` for a base area of shape ``base``."""
        checks = (("dimensions", self.dimensions, "window dimension", 1),
                  ("strides", self.strides, "window stride", 1),
                  ("base_dilations", self.base_dilations, "base dilation", 1),
                  ("window_dilations", self.window_dilations, "window dilation", 1))
        for _, values, label, minimum in checks:
            for d, v in enumerate(values):
                if v < minimum:
                    fail(op_name, f"{label} {v} of dimension {d} must be positive (all: {list(values)})")
        out = []
        for d, size in enumerate(base):
            low, high = self.padding[d]
            padded = low + dilated_bound(size, self.base_dilations[d]) + high
            if padded < 0:
                fail(op_name, f"padding ({low}, {high}) of dimension {d} removes more than the "
                              f"{dilated_bound(size, self.base_dilations[d])} elements of the dilated {what} "
                              f"dimension (size {size})")
            window = dilated_bound(self.dimensions[d], self.window_dilations[d])
            out.append(strided_bound(padded, window, self.strides[d]))
        return out


def _window_props(window_dimensions, window_strides, padding, base_dilations=None, window_dilations=None,
                  names=("window_dimensions", "window_strides", "padding", "base_dilations",
                         "window_dilations")) -> dict[str, Attribute]:
    """Properties of a window given as Python lists (``padding`` as (low, high) pairs)."""
    values = (window_dimensions, window_strides, [v for pair in padding for v in pair], base_dilations,
              window_dilations)
    return {name: i64_array(v) for name, v in zip(names, values) if v is not None and name}


REDUCE_WINDOW_PROPS = {"dimensions": "window_dimensions", "strides": "window_strides", "padding": "padding",
                       "base_dilations": "base_dilations", "window_dilations": "window_dilations"}
"""Window field -> property of ``hlo.reduce_window``."""

SELECT_AND_SCATTER_PROPS = {"dimensions": "window_dimensions", "strides": "window_strides", "padding": "padding"}
"""Window field -> property of ``hlo.select_and_scatter`` (no dilations)."""

CONVOLUTION_PROPS = {"strides": "window_strides", "padding": "padding", "base_dilations": "lhs_dilation",
                     "window_dilations": "rhs_dilation", "reversal": "window_reversal"}
"""Window field -> property of ``hlo.convolution`` (the window sizes are the kernel's spatial sizes)."""


# ----------------------------------------------------------------------------
# Convolution dimension numbers
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """XLA's ``ConvolutionDimensionNumbers``: which dimension of lhs, rhs (kernel) and result
    is the batch, feature and spatial dimensions."""

    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]

    FIELDS = ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
              "kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions",
              "output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions")
    """Field names, which are also the ``hlo.convolution`` property names (StableHLO's)."""

    @classmethod
    def default(cls, rank: int) -> ConvDimensionNumbers:
        """XLA's default: lhs/result ``[batch, feature, spatial...]``, kernel ``[out, in, spatial...]``."""
        spatial = tuple(range(2, rank))
        return cls(0, 1, spatial, 1, 0, spatial, 0, 1, spatial)

    @classmethod
    def from_specs(cls, lhs_spec: Sequence[int], rhs_spec: Sequence[int], out_spec: Sequence[int]):
        """From jax's ``ConvDimensionNumbers(lhs_spec, rhs_spec, out_spec)``: each spec lists the
        dimension of (batch, feature, spatial...) / (out feature, in feature, spatial...)."""
        lhs, rhs, out = (tuple(int(d) for d in s) for s in (lhs_spec, rhs_spec, out_spec))
        return cls(lhs[0], lhs[1], lhs[2:], rhs[1], rhs[0], rhs[2:], out[0], out[1], out[2:])

    @classmethod
    def from_strings(cls, lhs: str, rhs: str, out: str) -> ConvDimensionNumbers:
        """From jax-style layout strings such as ``('NCHW', 'OIHW', 'NCHW')``.

        ``N``/``C`` mark lhs and result batch/feature, ``O``/``I`` the kernel's output and
        input feature; every other character is a spatial dimension, matched by name, in the
        order the kernel string lists them (as ``jax.lax.conv_general_permutations``).
        """
        for spec, pair in ((lhs, "NC"), (rhs, "OI"), (out, "NC")):
            if len(set(spec)) != len(spec) or any(spec.count(c) != 1 for c in pair):
                raise ValueError(f"{spec!r} must contain each of {pair[0]!r} and {pair[1]!r} exactly once and "
                                 f"no character twice")
        spatial = [c for c in rhs if c not in "OI"]
        if sorted(c for c in lhs if c not in "NC") != sorted(spatial) or \
                sorted(c for c in out if c not in "NC") != sorted(spatial):
            raise ValueError(f"{(lhs, rhs, out)!r}: lhs, rhs and output must name the same spatial dimensions")
        return cls(lhs.index("N"), lhs.index("C"), tuple(lhs.index(c) for c in spatial),
                   rhs.index("I"), rhs.index("O"), tuple(rhs.index(c) for c in spatial),
                   out.index("N"), out.index("C"), tuple(out.index(c) for c in spatial))

    @classmethod
    def of(cls, value, rank: int) -> ConvDimensionNumbers:
        """Accept None (XLA's default for ``rank``), this class, jax's ``ConvDimensionNumbers``
        or a triple of specs, a triple of layout strings, a dict of the field names, or an object
        with the fields (such as XLA's proto)."""
        if value is None:
            return cls.default(rank)
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls(*(value[f] if "spatial" not in f else tuple(value[f]) for f in cls.FIELDS))
        if all(hasattr(value, f) for f in cls.FIELDS):
            return cls(*(getattr(value, f) if "spatial" not in f else tuple(getattr(value, f))
                         for f in cls.FIELDS))
        if isinstance(value, (tuple, list)) and len(value) == 3:
            if all(isinstance(s, str) for s in value):
                return cls.from_strings(*value)
            return cls.from_specs(*value)
        raise TypeError(f"cannot read convolution dimension numbers from {value!r}")

    @classmethod
    def from_props(cls, props: Mapping[str, Attribute]) -> ConvDimensionNumbers:
        """Read the dimension-number properties of ``hlo.convolution``."""
        return cls(*(ints(props[f]) if "spatial" in f else props[f].value.data for f in cls.FIELDS))

    def to_props(self) -> dict[str, Attribute]:
        """The ``hlo.convolution`` properties holding these dimension numbers."""
        return {f: i64_array(v) if "spatial" in f else IntegerAttr(int(v), 64)
                for f, v in ((f, getattr(self, f)) for f in self.FIELDS)}

    def check(self, op_name: str, rank: int) -> None:
        """Each of lhs, kernel and result dimensions is a permutation of ``0..rank-1``."""
        n = len(self.input_spatial_dimensions)
        for what, spatial in (("kernel_spatial_dimensions", self.kernel_spatial_dimensions),
                              ("output_spatial_dimensions", self.output_spatial_dimensions)):
            if len(spatial) != n:
                fail(op_name, f"{what} {list(spatial)} must have as many entries as input_spatial_dimensions "
                              f"{list(self.input_spatial_dimensions)}")
        groups = (("input", (self.input_batch_dimension, self.input_feature_dimension,
                             *self.input_spatial_dimensions), "batch, feature and spatial"),
                  ("kernel", (self.kernel_input_feature_dimension, self.kernel_output_feature_dimension,
                              *self.kernel_spatial_dimensions), "input feature, output feature and spatial"),
                  ("output", (self.output_batch_dimension, self.output_feature_dimension,
                              *self.output_spatial_dimensions), "batch, feature and spatial"))
        for what, dims, names in groups:
            if sorted(dims) != list(range(rank)):
                fail(op_name, f"{what} dimension numbers ({names}: {list(dims)}) must contain each dimension "
                              f"0..{rank - 1} exactly once")


def _int_prop(op_name: str, props: Mapping[str, Attribute], name: str, default: int | None = None) -> int:
    attr = props.get(name)
    if attr is None:
        if default is None:
            fail(op_name, f"missing property {name}")
        return default
    return attr.value.data


# ----------------------------------------------------------------------------
# Ops
# ----------------------------------------------------------------------------


class ConvolutionConfiguration(HloOp):
    """The properties :class:`ConvolutionOp` and :class:`DynamicConvOp` share (everything but the padding)."""

    window_strides = opt_prop_def(DenseArrayBase)
    lhs_dilation = opt_prop_def(DenseArrayBase)
    rhs_dilation = opt_prop_def(DenseArrayBase)
    window_reversal = opt_prop_def(DenseArrayBase)
    input_batch_dimension = prop_def(IntegerAttr)
    input_feature_dimension = prop_def(IntegerAttr)
    input_spatial_dimensions = prop_def(DenseArrayBase)
    kernel_input_feature_dimension = prop_def(IntegerAttr)
    kernel_output_feature_dimension = prop_def(IntegerAttr)
    kernel_spatial_dimensions = prop_def(DenseArrayBase)
    output_batch_dimension = prop_def(IntegerAttr)
    output_feature_dimension = prop_def(IntegerAttr)
    output_spatial_dimensions = prop_def(DenseArrayBase)
    feature_group_count = prop_def(IntegerAttr)
    batch_group_count = prop_def(IntegerAttr)
    precision_config = opt_prop_def(ArrayAttr)


@irdl_op_definition
class ConvolutionOp(ConvolutionConfiguration):
    """``hlo.convolution`` (XLA ConvGeneralDilated): dot products of lhs windows with the kernel.

    The window slides over lhs's spatial dimensions with ``window_strides``,
    ``padding`` (zeros; negative removes), ``lhs_dilation`` (holes between lhs
    elements), ``rhs_dilation`` (holes between kernel elements) and
    ``window_reversal``. ``feature_group_count`` splits the lhs features and
    the kernel output features into groups convolved separately;
    ``batch_group_count`` does the same with lhs batch and kernel output features.
    """

    name = "hlo.convolution"
    traits = traits_def(Pure())
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    padding = opt_prop_def(DenseArrayBase)

    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        name = cls.name
        lhs, rhs = (tensor(name, t, w) for t, w in zip(operand_types, ("lhs", "rhs")))
        fgc = _int_prop(name, props, "feature_group_count", 1)
        bgc = _int_prop(name, props, "batch_group_count", 1)
        for what, count in (("feature_group_count", fgc), ("batch_group_count", bgc)):
            if count <= 0:
                fail(name, f"{what} must be positive, got {count}")
        if fgc > 1 and bgc > 1:
            fail(name, f"feature_group_count ({fgc}) and batch_group_count ({bgc}) cannot both be greater than 1")
        missing = [f for f in ConvDimensionNumbers.FIELDS if f not in props]
        if missing:
            fail(name, f"missing dimension-number properties {', '.join(missing)}")
        dn = ConvDimensionNumbers.from_props(props)
        n = len(dn.input_spatial_dimensions)
        rank = n + 2
        for side, t in (("lhs", lhs), ("rhs", rhs)):
            if t.get_num_dims() != rank:
                fail(name, f"{side} {fmt(t)} must have rank {rank} (batch, feature and {n} spatial dimensions "
                           f"per the dimension numbers), got rank {t.get_num_dims()}")
        dn.check(name, rank)
        if lhs.element_type != rhs.element_type:
            fail(name, f"lhs {fmt(lhs)} and rhs {fmt(rhs)} must have the same element type")
        ls, rs = lhs.get_shape(), rhs.get_shape()
        in_features, in_batch = ls[dn.input_feature_dimension], ls[dn.input_batch_dimension]
        k_in, k_out = rs[dn.kernel_input_feature_dimension], rs[dn.kernel_output_feature_dimension]
        if k_out % bgc:
            fail(name, f"kernel output feature dimension {dn.kernel_output_feature_dimension} of rhs {fmt(rhs)} "
                       f"(size {k_out}) must be a multiple of batch_group_count {bgc}")
        if in_features % fgc or in_features // fgc != k_in:
            fail(name, f"lhs feature dimension {dn.input_feature_dimension} of {fmt(lhs)} (size {in_features}) "
                       f"must be feature_group_count ({fgc}) times the kernel input feature dimension "
                       f"{dn.kernel_input_feature_dimension} of rhs {fmt(rhs)} (size {k_in})")
        if k_out % fgc:
            fail(name, f"kernel output feature dimension {dn.kernel_output_feature_dimension} of rhs {fmt(rhs)} "
                       f"(size {k_out}) must be a multiple of feature_group_count {fgc}")
        if in_batch % bgc:
            fail(name, f"lhs batch dimension {dn.input_batch_dimension} of {fmt(lhs)} (size {in_batch}) must be "
                       f"a multiple of batch_group_count {bgc}")
        kernel = [rs[d] for d in dn.kernel_spatial_dimensions]
        window = Window.from_props(name, props, n, CONVOLUTION_PROPS, dimensions=kernel)
        if any(k <= 0 for k in kernel):
            fail(name, f"kernel spatial dimensions {list(dn.kernel_spatial_dimensions)} of rhs {fmt(rhs)} have "
                       f"sizes {kernel}; XLA's window sizes must be positive")
        spatial = window.output_shape(name, [ls[d] for d in dn.input_spatial_dimensions], "lhs")
        shape = [0] * rank
        shape[dn.output_batch_dimension] = in_batch // bgc
        shape[dn.output_feature_dimension] = k_out
        for d, size in zip(dn.output_spatial_dimensions, spatial):
            shape[d] = size
        _check_precision(name, props)
        return [make_tensor(result_element_type(name, lhs.element_type, result_types), shape)]

    def dimension_numbers(self) -> ConvDimensionNumbers:
        """The op's dimension numbers (used by the kernel)."""
        return ConvDimensionNumbers.from_props(self.properties)

    def window(self) -> Window:
        """The op's window (sizes from the kernel's spatial dimensions)."""
        dn = self.dimension_numbers()
        kernel = [self.rhs.type.get_shape()[d] for d in dn.kernel_spatial_dimensions]
        return Window.from_props(self.name, self.properties, len(kernel), CONVOLUTION_PROPS, dimensions=kernel)


def result_element_type(op_name: str, operand_type: Attribute, result_types) -> Attribute:
    """The declared result element type if any (XLA's ``preferred_element_type``), checked by
    XLA's ``MaybeUpcast``: a non-float operand type may not be narrowed; else the operand type."""
    if not result_types:
        return operand_type
    element = tensor(op_name, result_types[0], "result").element_type
    if (element != operand_type and element_type_of(operand_type).kind != "float"
            and _bits(element) < _bits(operand_type)):
        fail(op_name, f"result element type {element} (preferred_element_type) must not be narrower than the "
                      f"operand element type {operand_type}")
    return element


@irdl_op_definition
class ReduceWindowOp(HloOp):
    """``hlo.reduce_window``: reduces every window of N arrays with a 2N-parameter computation.

    Operands: the N arrays, then the N scalar init values. Each result element
    is ``init`` combined, in window order, with every window element that lies
    inside the array (padding and base-dilation holes are skipped, as XLA does).
    """

    name = "hlo.reduce_window"
    traits = traits_def(RecursiveMemoryEffect())
    operands_ = var_operand_def()
    results_ = var_result_def()
    window_dimensions = prop_def(DenseArrayBase)
    window_strides = opt_prop_def(DenseArrayBase)
    base_dilations = opt_prop_def(DenseArrayBase)
    window_dilations = opt_prop_def(DenseArrayBase)
    padding = opt_prop_def(DenseArrayBase)
    body = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_) $body"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        count = len(operand_types)
        if count < 2 or count % 2:
            fail(cls.name, f"needs N >= 1 operands followed by N init values, got {count} operands in all")
        n = count // 2
        inputs, shape = same_shape_arrays(cls.name, operand_types[:n])
        _check_init_values(cls.name, inputs, operand_types[n:])
        window = Window.from_props(cls.name, props, len(shape), REDUCE_WINDOW_PROPS)
        out_shape = window.output_shape(cls.name, shape)
        if regions:
            scalars = [scalar_of(x) for x in inputs]
            check_region(cls.name, regions[0], scalars + scalars, "reduction computation", scalars)
        return [make_tensor(x.element_type, out_shape) for x in inputs]

    def window(self) -> Window:
        """The op's window."""
        rank = self.operands_[0].type.get_num_dims()
        return Window.from_props(self.name, self.properties, rank, REDUCE_WINDOW_PROPS)


def _check_init_values(op_name: str, arrays: Sequence[TensorType], init_types: Sequence[Attribute]) -> None:
    """Each init value is a scalar of its array's element type."""
    for i, (x, t) in enumerate(zip(arrays, init_types)):
        init = tensor(op_name, t, f"init value #{i}")
        if init.get_shape():
            fail(op_name, f"init value #{i} must be a scalar, got {fmt(init)}")
        if init.element_type != x.element_type:
            fail(op_name, f"init value #{i} {fmt(init)} must have operand #{i}'s element type {fmt(scalar_of(x))}")


@irdl_op_definition
class SelectAndScatterOp(HloOp):
    """``hlo.select_and_scatter``: selects one element of every window of ``operand`` and
    scatters ``source`` onto the selected positions of an ``init_value``-filled result.

    ``select(a, b)`` (``pred[]``) is applied across each window in index order
    and keeps ``a`` (the current selection) when true; ``scatter(current, s)``
    combines a source element into the result. Padding elements are never selected.
    """

    name = "hlo.select_and_scatter"
    traits = traits_def(RecursiveMemoryEffect())
    operand = operand_def()
    source = operand_def()
    init_value = operand_def()
    result = result_def()
    window_dimensions = opt_prop_def(DenseArrayBase)
    window_strides = opt_prop_def(DenseArrayBase)
    padding = opt_prop_def(DenseArrayBase)
    select = region_def("single_block")
    scatter = region_def("single_block")

    assembly_format = ("$operand `,` $source `,` $init_value attr-dict `:` functional-type(operands, results) "
                       "$select $scatter")

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        name = cls.name
        operand, source = (tensor(name, t, w) for t, w in zip(operand_types, ("operand", "source")))
        _check_init_values(name, [operand], operand_types[2:])
        if source.element_type != operand.element_type:
            fail(name, f"source {fmt(source)} must have the operand's element type {operand.element_type}")
        shape = operand.get_shape()
        window = Window.from_props(name, props, len(shape), SELECT_AND_SCATTER_PROPS)
        out_shape = window.output_shape(name, shape)
        if list(source.get_shape()) != out_shape:
            fail(name, f"source {fmt(source)} must have the shape of the window-reduced operand {fmt(operand)}, "
                       f"{out_shape}")
        if regions:
            scalar = scalar_of(operand)
            results = check_region(name, regions[0], [scalar, scalar], "select computation")
            if len(results) != 1 or not is_scalar_pred(results[0]):
                fail(name, f"select computation must return pred[], returns {types_text(results)}")
            check_region(name, regions[1], [scalar, scalar], "scatter computation", [scalar])
        return [make_tensor(operand.element_type, shape)]

    def window(self) -> Window:
        """The op's window."""
        rank = self.operand.type.get_num_dims()
        return Window.from_props(self.name, self.properties, rank, SELECT_AND_SCATTER_PROPS)


@irdl_op_definition
class DynamicConvOp(ConvolutionConfiguration):
    """``hlo.dynamic_conv``: :class:`ConvolutionOp` with the padding as an operand (``s64[n, 2]``, low and high
    per spatial dimension; the StableHLO spec's dynamic_conv); the result type is declared, and the run-time
    padding must give it."""

    name = "hlo.dynamic_conv"
    traits = traits_def(Pure())
    lhs = operand_def()
    rhs = operand_def()
    padding = operand_def()
    result = result_def()

    STATIC: ClassVar = ConvolutionOp
    """The op it is, once its configuration operand is known (executed as that op)."""
    CONFIGURATION: ClassVar[tuple[int, ...]] = (2,)
    """The operands whose values configure it."""

    assembly_format = "$lhs `,` $rhs `,` $padding attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        lhs = tensor(cls.name, operand_types[0], "lhs")
        spatial = len(ints(props.get("input_spatial_dimensions")))
        check_configuration_operand(cls.name, operand_types[2], "padding", [spatial, 2])
        if lhs.get_num_dims() != spatial + 2:
            fail(cls.name, f"lhs {fmt(lhs)} must have rank {spatial + 2} (batch, feature, {spatial} spatial)")
        return declared_result(cls.name, result_types, "the padding")

    @staticmethod
    def static_properties(values) -> dict:
        """The :class:`ConvolutionOp` property for the run-time padding."""
        (padding,) = values
        return {"padding": i64_array(padding)}


OPS = [ConvolutionOp, ReduceWindowOp, SelectAndScatterOp, DynamicConvOp]
"""Every op class of this family (registered in the hlo dialect)."""

# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("compute", ConvolutionOp)
ConvolutionOp.QUANTIZED_HYBRID = True  # float lhs x quantized rhs
set_quantized("transparent", ReduceWindowOp, SelectAndScatterOp)  # computations lowered like any region


# ----------------------------------------------------------------------------
# Builder methods (XLA client names, snake_case)
# ----------------------------------------------------------------------------


def make_padding(padding: str, base: Sequence[int], window: Sequence[int], strides: Sequence[int]):
    """XLA's ``MakePadding`` (also jax's ``padtype_to_pads``): VALID is no padding; SAME pads
    ``max(0, (ceil(base / stride) - 1) * stride + window - base)``, the odd element high;
    SAME_LOWER (jax) puts it low."""
    kind = str(getattr(padding, "name", padding)).upper().removeprefix("K")
    if kind == "VALID":
        return [(0, 0)] * len(base)
    if kind not in ("SAME", "SAME_LOWER"):
        raise ValueError(f"padding must be 'SAME', 'VALID' or (low, high) pairs, got {padding!r}")
    if any(s < 1 for s in strides):
        raise ValueError(f"window strides must be positive for {kind} padding, got {list(strides)}")
    pads = []
    for size, w, s in zip(base, window, strides):
        total = max(0, (-(-size // s) - 1) * s + w - size)
        low = total // 2 if kind == "SAME" else -(-total // 2)
        pads.append((low, total - low))
    return pads


def _ints(caller: str, values, what: str, count: int | None = None, default: int | None = None) -> list[int]:
    """A list of ints from ``values`` (None -> ``count`` copies of ``default``)."""
    if values is None:
        if default is None or count is None:
            raise BuilderError(f"{caller}: {what} must be given")
        return [default] * count
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise BuilderError(f"{caller}: {what} must be a sequence of ints, got {values!r}") from None
    return out


def _padding_pairs(caller: str, padding, base, window, strides) -> list[tuple[int, int]]:
    """``padding`` as (low, high) pairs: given pairs, or 'SAME'/'VALID' resolved by :func:`make_padding`."""
    if isinstance(padding, str) or hasattr(padding, "name"):
        if len(base) != len(window) or len(window) != len(strides):
            return [(0, 0)] * len(window)  # infer() reports the mismatched window
        try:
            return make_padding(padding, base, window, strides)
        except ValueError as e:
            raise BuilderError(f"{caller}: {e}") from None
    try:
        pairs = [tuple(int(v) for v in pair) for pair in padding]
    except (TypeError, ValueError):
        raise BuilderError(f"{caller}: padding must be 'SAME', 'VALID' or (low, high) pairs, got {padding!r}") from None
    if any(len(p) != 2 for p in pairs):
        raise BuilderError(f"{caller}: padding must be (low, high) pairs, got {padding!r}")
    return pairs


def _array_dims(builder, value, what: str) -> tuple[int, ...]:
    """The dimensions of an array XlaOp (BuilderError if it is not an array)."""
    t = builder._value(value, what).type
    if not isinstance(t, TensorType):
        raise BuilderError(f"{builder._caller()}: {what} must be an array, got {fmt(t)}")
    return t.get_shape()


class WindowedBuilder:
    """Builder methods of the windowed family."""

    # -- convolution -----------------------------------------------------------

    @builder_method
    def conv(self, lhs, rhs, window_strides, padding="SAME", feature_group_count: int = 1,
             batch_group_count: int = 1, precision_config=None, preferred_element_type=None):
        """XLA Conv: a convolution in the default layout (lhs ``[batch, feature, spatial...]``,
        kernel ``[out feature, in feature, spatial...]``) with 'SAME' or 'VALID' padding
        (computed from the kernel's spatial sizes as XLA's ``MakePadding`` does)."""
        return self.conv_general_dilated(lhs, rhs, window_strides, padding, None, None, None, feature_group_count,
                                         batch_group_count, precision_config, preferred_element_type)

    @builder_method
    def conv_with_general_padding(self, lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                                  feature_group_count: int = 1, batch_group_count: int = 1,
                                  precision_config=None, preferred_element_type=None):
        """XLA ConvWithGeneralPadding: ``padding`` is one (low, high) pair per spatial dimension."""
        return self.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, None,
                                         feature_group_count, batch_group_count, precision_config,
                                         preferred_element_type)

    @builder_method
    def conv_with_general_dimensions(self, lhs, rhs, window_strides, padding, dimension_numbers,
                                     feature_group_count: int = 1, batch_group_count: int = 1,
                                     precision_config=None, preferred_element_type=None):
        """XLA ConvWithGeneralDimensions: 'SAME'/'VALID' padding with explicit dimension numbers."""
        return self.conv_general_dilated(lhs, rhs, window_strides, padding, None, None, dimension_numbers,
                                         feature_group_count, batch_group_count, precision_config,
                                         preferred_element_type)

    @builder_method
    def conv_general(self, lhs, rhs, window_strides, padding, dimension_numbers, feature_group_count: int = 1,
                     batch_group_count: int = 1, precision_config=None, preferred_element_type=None):
        """XLA ConvGeneral: (low, high) padding pairs and explicit dimension numbers, no dilation."""
        return self.conv_general_dilated(lhs, rhs, window_strides, padding, None, None, dimension_numbers,
                                         feature_group_count, batch_group_count, precision_config,
                                         preferred_element_type)

    @builder_method
    def conv_general_dilated(self, lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                             dimension_numbers=None, feature_group_count: int = 1, batch_group_count: int = 1,
                             precision_config=None, preferred_element_type=None, window_reversal=None):
        """``hlo.convolution`` (XLA ConvGeneralDilated).

        ``padding``: (low, high) pairs per spatial dimension (negative removes
        elements), or 'SAME'/'VALID' computed from the rhs-dilated kernel as
        jax does (not allowed with lhs dilation, as in jax).
        ``dimension_numbers``: None (XLA's default layout), a
        :class:`ConvDimensionNumbers`, jax's ``ConvDimensionNumbers`` or
        ``(lhs_spec, rhs_spec, out_spec)``, or layout strings such as
        ``('NHWC', 'HWIO', 'NHWC')``. ``precision_config``: None, one name
        (DEFAULT/HIGH/HIGHEST) or an (lhs, rhs) pair. ``preferred_element_type``:
        the result element type (XLA name, NumPy dtype or xDSL type).
        ``window_reversal``: per spatial dimension, whether the window is reversed.
        """
        caller = self._caller()
        lhs_dims, rhs_dims = _array_dims(self, lhs, "lhs"), _array_dims(self, rhs, "rhs")
        try:
            dn = ConvDimensionNumbers.of(dimension_numbers, len(lhs_dims))
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise BuilderError(f"{caller}: dimension_numbers: {e}") from None
        n = len(dn.input_spatial_dimensions)
        strides = _ints(caller, window_strides, "window_strides", n, 1)
        lhs_dil = _ints(caller, lhs_dilation, "lhs_dilation", n, 1)
        rhs_dil = _ints(caller, rhs_dilation, "rhs_dilation", n, 1)
        if isinstance(padding, str) and any(d != 1 for d in lhs_dil):
            raise BuilderError(f"{caller}: padding {padding!r} is not defined with lhs_dilation {lhs_dil}; give "
                               f"explicit (low, high) pairs")
        try:
            base = [lhs_dims[d] for d in dn.input_spatial_dimensions]
            kernel = [dilated_bound(rhs_dims[d], r) for d, r in zip(dn.kernel_spatial_dimensions, rhs_dil)]
            pairs = _padding_pairs(caller, padding, base, kernel, strides)
        except IndexError:
            pairs = [(0, 0)] * n  # dimension numbers out of range: infer() reports them
        props = {"window_strides": i64_array(strides), "padding": i64_array([v for p in pairs for v in p]),
                 "lhs_dilation": i64_array(lhs_dil), "rhs_dilation": i64_array(rhs_dil), **dn.to_props(),
                 "feature_group_count": IntegerAttr(int(feature_group_count), 64),
                 "batch_group_count": IntegerAttr(int(batch_group_count), 64)}
        if window_reversal is not None and any(window_reversal):
            props["window_reversal"] = DenseArrayBase.from_list(IntegerType(1), [int(bool(v)) for v in window_reversal])
        # precision_config and preferred_element_type are handled exactly as for dots.
        return self._dot(ConvolutionOp, lhs, rhs, props, precision_config, preferred_element_type)

    @builder_method
    def dynamic_conv(self, lhs, rhs, padding, result_shape, window_strides=None, lhs_dilation=None,
                     rhs_dilation=None, dimension_numbers=None, feature_group_count: int = 1,
                     batch_group_count: int = 1):
        """``hlo.dynamic_conv``: :meth:`conv_general_dilated` with ``padding`` a value (an ``s64[n, 2]`` of
        (low, high) per spatial dimension) known at run time; ``result_shape`` (shape text or type) is what it
        must give."""
        caller = self._caller()
        lhs_dims = _array_dims(self, lhs, "lhs")
        try:
            dn = ConvDimensionNumbers.of(dimension_numbers, len(lhs_dims))
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise BuilderError(f"{caller}: dimension_numbers: {e}") from None
        n = len(dn.input_spatial_dimensions)
        props = {"window_strides": i64_array(_ints(caller, window_strides, "window_strides", n, 1)),
                 "lhs_dilation": i64_array(_ints(caller, lhs_dilation, "lhs_dilation", n, 1)),
                 "rhs_dilation": i64_array(_ints(caller, rhs_dilation, "rhs_dilation", n, 1)), **dn.to_props(),
                 "feature_group_count": IntegerAttr(int(feature_group_count), 64),
                 "batch_group_count": IntegerAttr(int(batch_group_count), 64)}
        return self._emit1(DynamicConvOp, [lhs, rhs, padding], props, result_types=[self._type(result_shape)])

    # -- reduce_window -----------------------------------------------------------

    @builder_method
    def reduce_window(self, operands, init_values, computation, window_dimensions, window_strides=None,
                      padding="VALID", base_dilations=None, window_dilations=None):
        """``hlo.reduce_window`` (XLA ReduceWindow / ReduceWindowWithGeneralPadding).

        ``operands``: one XlaOp or a list of N same-shaped arrays; ``init_values``
        N scalars; ``computation`` takes N accumulators then N elements and
        returns N scalars. ``padding``: (low, high) pairs, or 'SAME'/'VALID'
        (computed from the dilated window, as jax does). Strides and dilations
        default to 1. Returns one XlaOp, or a tuple of N.
        """
        caller = self._caller()
        arrays, inits = as_list(operands), as_list(init_values)
        if len(arrays) != len(inits):
            raise BuilderError(f"{caller}: {len(arrays)} operands but {len(inits)} init values; each operand needs "
                               f"one init value")
        dims = _array_dims(self, arrays[0], "operand #0") if arrays else ()
        window = _ints(caller, window_dimensions, "window_dimensions")
        strides = _ints(caller, window_strides, "window_strides", len(window), 1)
        base_dil = _ints(caller, base_dilations, "base_dilations", len(window), 1)
        win_dil = _ints(caller, window_dilations, "window_dilations", len(window), 1)
        pairs = _padding_pairs(caller, padding, dims, [dilated_bound(w, d) for w, d in zip(window, win_dil)],
                               strides)
        props = _window_props(window, strides, pairs, base_dil, win_dil)
        precheck(self, ReduceWindowOp, [*arrays, *inits], props)
        scalars = scalar_params(self, [self._value(a).type for a in arrays])
        region = self._region(computation, scalars + scalars, "computation")
        return _results(self._emit(ReduceWindowOp, [*arrays, *inits], props, [region]))

    @builder_method
    def reduce_window_with_general_padding(self, operands, init_values, computation, window_dimensions,
                                           window_strides, base_dilations, window_dilations, padding):
        """XLA ReduceWindowWithGeneralPadding (argument order of XLA's client)."""
        return self.reduce_window(operands, init_values, computation, window_dimensions, window_strides, padding,
                                  base_dilations, window_dilations)

    # -- select_and_scatter ------------------------------------------------------

    @builder_method
    def select_and_scatter(self, operand, select, window_dimensions, window_strides, padding, source, init_value,
                           scatter):
        """``hlo.select_and_scatter`` (XLA SelectAndScatter / SelectAndScatterWithGeneralPadding).

        ``select`` takes two scalars of the operand's type and returns
        ``pred[]`` (true keeps the first, the current selection); ``scatter``
        combines the result's current value with a source element.
        ``padding``: 'SAME'/'VALID' or (low, high) pairs.
        """
        caller = self._caller()
        dims = _array_dims(self, operand, "operand")
        window = _ints(caller, window_dimensions, "window_dimensions")
        strides = _ints(caller, window_strides, "window_strides", len(window), 1)
        pairs = _padding_pairs(caller, padding, dims, window, strides)
        props = _window_props(window, strides, pairs)
        precheck(self, SelectAndScatterOp, [operand, source, init_value], props)
        scalars = scalar_params(self, [self._value(operand).type] * 2)
        select_region = self._region(select, scalars, "select")
        scatter_region = self._region(scatter, scalars, "scatter")
        return self._emit1(SelectAndScatterOp, [operand, source, init_value], props, [select_region, scatter_region])

    @builder_method
    def select_and_scatter_with_general_padding(self, operand, select, window_dimensions, window_strides, padding,
                                                source, init_value, scatter):
        """XLA SelectAndScatterWithGeneralPadding: ``padding`` as (low, high) pairs."""
        return self.select_and_scatter(operand, select, window_dimensions, window_strides, padding, source,
                                       init_value, scatter)
