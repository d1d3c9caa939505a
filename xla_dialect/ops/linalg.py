"""Linear-algebra ops: ``hlo.dot`` and ``hlo.dot_general``.

Shape rules follow XLA's ``ShapeInference::InferDotOpShape``: the result
dimensions are the batch dimensions (in ``lhs_batching_dimensions`` order), then
the lhs free dimensions, then the rhs free dimensions (free = neither batch nor
contracting), each in increasing order. As in XLA's operation semantics (``lhs``/``rhs`` are both
"array of type T"), the operands must share their element type.

The result element type is XLA's ``preferred_element_type``: by default the
operands' type; another type is accepted as XLA's ``MaybeUpcast`` (and jax)
accept it: anything when the operands are real floating-point, otherwise not
narrower than the operand type. How such a dot computes (upcast operands vs.
convert the result) is decided by :func:`higher_precision_type`, as XLA's
``OperandUpcaster``/``ResultCaster`` passes do; see the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ml_dtypes
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, StringAttr, TensorType
from xdsl.ir import Attribute
from xdsl.traits import Pure
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, result_def, traits_def

from ..errors import BuilderError
from ..types import element_type_of
from .base import HloOp, fail, fmt, i64_array, ints, make_tensor, tensor, set_quantized, builder_method

PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")
"""XLA ``PrecisionConfig`` operand precisions (the CPU computes every one at full precision)."""


@dataclass(frozen=True)
class DotDimensionNumbers:
    """XLA's ``DotDimensionNumbers``: which lhs/rhs dimensions are contracted and which are batch."""

    lhs_contracting_dimensions: tuple[int, ...] = ()
    rhs_contracting_dimensions: tuple[int, ...] = ()
    lhs_batch_dimensions: tuple[int, ...] = ()
    rhs_batch_dimensions: tuple[int, ...] = ()

    PROPERTY_NAMES = {
        "lhs_contracting_dimensions": "lhs_contracting_dimensions",
        "rhs_contracting_dimensions": "rhs_contracting_dimensions",
        "lhs_batch_dimensions": "lhs_batching_dimensions",
        "rhs_batch_dimensions": "rhs_batching_dimensions",
    }
    """Field -> name of the ``array<i64>`` property of ``hlo.dot_general`` holding it."""

    @classmethod
    def of(cls, value) -> DotDimensionNumbers:
        """Accept this class, jax's ``((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))``,
        a dict with the field names (``batching`` spellings too), or an object with the fields
        (such as XLA's proto)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            get = lambda f: value.get(f, value.get(f.replace("batch_", "batching_"), ()))  # noqa: E731
        elif isinstance(value, (tuple, list)) and len(value) == 2:
            (lc, rc), (lb, rb) = value
            return cls(*(tuple(int(d) for d in dims) for dims in (lc, rc, lb, rb)))
        elif all(hasattr(value, f) for f in ("lhs_contracting_dimensions", "rhs_contracting_dimensions")):
            get = lambda f: getattr(value, f, ())  # noqa: E731
        else:
            raise TypeError(f"cannot read dot dimension numbers from {value!r}")
        return cls(*(tuple(int(d) for d in get(f)) for f in cls.PROPERTY_NAMES))

    @classmethod
    def from_props(cls, props: Mapping[str, Attribute]) -> DotDimensionNumbers:
        """Read the four ``array<i64>`` properties of ``hlo.dot_general`` (absent means empty)."""
        return cls(*(ints(props.get(p)) for p in cls.PROPERTY_NAMES.values()))

    def to_props(self) -> dict[str, Attribute]:
        """The ``hlo.dot_general`` properties holding these dimension numbers."""
        return {p: i64_array(getattr(self, f)) for f, p in self.PROPERTY_NAMES.items()}

    @staticmethod
    def implicit(lhs_rank: int) -> DotDimensionNumbers:
        """XLA Dot: contract lhs dimension 1 (0 for a vector) with rhs dimension 0."""
        return DotDimensionNumbers((0 if lhs_rank == 1 else 1,), (0,))

    def free_dimensions(self, lhs_rank: int, rhs_rank: int) -> tuple[list[int], list[int]]:
        """The lhs and rhs dimensions that are neither batch nor contracting, in order."""
        lhs = [d for d in range(lhs_rank) if d not in self.lhs_contracting_dimensions
               and d not in self.lhs_batch_dimensions]
        rhs = [d for d in range(rhs_rank) if d not in self.rhs_contracting_dimensions
               and d not in self.rhs_batch_dimensions]
        return lhs, rhs


def precision_rank(element_type: Attribute) -> tuple:
    """XLA's ``HigherPrecisionType`` ordering key: complex first, then float range, float
    precision, bit width, and signed over unsigned."""
    et = element_type_of(element_type)
    if et.kind == "complex":
        et = element_type_of(element_type.element_type)
        is_complex = True
    else:
        is_complex = False
    if et.kind == "float":
        info = ml_dtypes.finfo(et.dtype)
        exp, mant = int(info.maxexp), int(info.nmant)
    else:
        exp = mant = -1
    return is_complex, exp, mant, et.bits, et.kind != "uint"


def higher_precision_type(a: Attribute, b: Attribute) -> Attribute:
    """The element type of ``a`` and ``b`` that XLA considers more precise (``a`` on ties)."""
    return b if precision_rank(b) > precision_rank(a) else a


def _bits(element_type: Attribute) -> int:
    """Bit width as jax's ``_bit_width`` (a complex type counts its component's width)."""
    et = element_type_of(element_type)
    if et.kind == "complex":
        return element_type_of(element_type.element_type).bits
    return et.bits


def dot_result_type(op_name: str, lhs: TensorType, rhs: TensorType, dnums: DotDimensionNumbers,
                    result_types: Sequence[Attribute] | None) -> TensorType:
    """XLA's dot shape inference; the element type is the declared one if a result type is given."""
    lrank, rrank = lhs.get_num_dims(), rhs.get_num_dims()
    lshape, rshape = lhs.get_shape(), rhs.get_shape()
    for side, rank, t in (("lhs", lrank, lhs), ("rhs", rrank, rhs)):
        dims = {}
        for kind in ("batching", "contracting"):
            field = f"{side}_{'batch' if kind == 'batching' else kind}_dimensions"
            values = getattr(dnums, field)
            for d in values:
                if not 0 <= d < rank:
                    fail(op_name, f"{side}_{kind}_dimensions {list(values)} has dimension {d} out of range "
                                  f"for {side} {fmt(t)} of rank {rank}")
                if d in dims:
                    fail(op_name, f"{side} dimension {d} appears more than once among the {side} batching and "
                                  f"contracting dimensions ({dims[d]} and {kind})")
                dims[d] = kind
    lc, rc = dnums.lhs_contracting_dimensions, dnums.rhs_contracting_dimensions
    lb, rb = dnums.lhs_batch_dimensions, dnums.rhs_batch_dimensions
    for kind, ldims, rdims in (("contracting", lc, rc), ("batching", lb, rb)):
        if len(ldims) != len(rdims):
            fail(op_name, f"lhs and rhs must have the same number of {kind} dimensions, got "
                          f"lhs_{kind}_dimensions {list(ldims)} and rhs_{kind}_dimensions {list(rdims)}")
        for ld, rd in zip(ldims, rdims):
            if lshape[ld] != rshape[rd]:
                fail(op_name, f"{kind} dimension {ld} of lhs {fmt(lhs)} has size {lshape[ld]} but the matching "
                              f"{kind} dimension {rd} of rhs {fmt(rhs)} has size {rshape[rd]}")
    if lhs.element_type != rhs.element_type:
        fail(op_name, f"lhs {fmt(lhs)} and rhs {fmt(rhs)} must have the same element type")
    lfree, rfree = dnums.free_dimensions(lrank, rrank)
    shape = [lshape[d] for d in lb] + [lshape[d] for d in lfree] + [rshape[d] for d in rfree]
    operand_type = lhs.element_type
    element = operand_type
    if result_types:
        declared = tensor(op_name, result_types[0], "result")
        element = declared.element_type
        if (element != operand_type and element_type_of(operand_type).kind != "float"
                and _bits(element) < _bits(operand_type)):
            fail(op_name, f"result element type {element} (preferred_element_type) must not be narrower "
                          f"than the operand element type {operand_type}")
    return make_tensor(element, shape)


def _check_precision(op_name: str, props: Mapping[str, Attribute]) -> None:
    config = props.get("precision_config")
    if config is None:
        return
    values = [getattr(v, "data", v) for v in config.data]
    if len(values) not in (0, 2):
        fail(op_name, f"precision_config must have 0 or 2 entries (lhs, rhs), got {len(values)}")
    for v in values:
        if v not in PRECISIONS:
            fail(op_name, f"precision {v!r} is not one of {', '.join(PRECISIONS)}")


class _DotBase(HloOp):
    """Common IRDL fields of the dot ops."""

    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    precision_config = opt_prop_def(ArrayAttr)

    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def dimension_numbers(self) -> DotDimensionNumbers:
        """The op's dot dimension numbers (used by the kernel)."""
        raise NotImplementedError


@irdl_op_definition
class DotOp(_DotBase):
    """``hlo.dot`` (XLA Dot): vector·vector, matrix·vector, vector·matrix or matrix·matrix.

    Contracts lhs dimension 1 (0 for a vector) with rhs dimension 0.
    """

    name = "hlo.dot"
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        lhs, rhs = (tensor(cls.name, t, w) for t, w in zip(operand_types, ("lhs", "rhs")))
        for side, t in (("lhs", lhs), ("rhs", rhs)):
            if t.get_num_dims() not in (1, 2):
                fail(cls.name, f"{side} must be a vector or a matrix (rank 1 or 2), got {fmt(t)}; "
                               "use dot_general for other ranks")
        _check_precision(cls.name, props)
        return [dot_result_type(cls.name, lhs, rhs, DotDimensionNumbers.implicit(lhs.get_num_dims()), result_types)]

    def dimension_numbers(self) -> DotDimensionNumbers:
        return DotDimensionNumbers.implicit(self.lhs.type.get_num_dims())


@irdl_op_definition
class DotGeneralOp(_DotBase):
    """``hlo.dot_general`` (XLA DotGeneral): sum of products over the contracting dimensions,
    independently for each index of the batch dimensions."""

    name = "hlo.dot_general"
    traits = traits_def(Pure())
    lhs_batching_dimensions = opt_prop_def(DenseArrayBase)
    rhs_batching_dimensions = opt_prop_def(DenseArrayBase)
    lhs_contracting_dimensions = opt_prop_def(DenseArrayBase)
    rhs_contracting_dimensions = opt_prop_def(DenseArrayBase)

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        lhs, rhs = (tensor(cls.name, t, w) for t, w in zip(operand_types, ("lhs", "rhs")))
        _check_precision(cls.name, props)
        return [dot_result_type(cls.name, lhs, rhs, DotDimensionNumbers.from_props(props), result_types)]

    def dimension_numbers(self) -> DotDimensionNumbers:
        return DotDimensionNumbers.from_props(self.properties)


OPS = [DotOp, DotGeneralOp]
"""Every op class of this family (registered in the hlo dialect)."""


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("compute", DotOp, DotGeneralOp)
DotOp.QUANTIZED_HYBRID = DotGeneralOp.QUANTIZED_HYBRID = True  # float lhs x quantized rhs


# ----------------------------------------------------------------------------
# Builder methods (XLA client names, snake_case)
# ----------------------------------------------------------------------------


def _precision_names(caller: str, precision_config) -> list[str]:
    """None, one precision for both operands, or an (lhs, rhs) pair -> names."""
    if precision_config is None:
        return []
    single = isinstance(precision_config, str) or not isinstance(precision_config, (tuple, list))
    values = [precision_config] * 2 if single else list(precision_config)
    names = [str(getattr(v, "name", v)).upper() for v in values]
    for n in names:
        if n not in PRECISIONS:
            raise BuilderError(f"{caller}: precision {n!r} is not one of {', '.join(PRECISIONS)}")
    return names


class LinalgBuilder:
    """Builder methods of the linalg family."""

    @builder_method
    def dot(self, lhs, rhs, precision_config=None, preferred_element_type=None):
        """``hlo.dot`` (XLA Dot): vector/matrix products contracting lhs' last and rhs' first dimension."""
        return self._dot(DotOp, lhs, rhs, {}, precision_config, preferred_element_type)

    @builder_method
    def dot_general(self, lhs, rhs, dimension_numbers, precision_config=None, preferred_element_type=None):
        """``hlo.dot_general`` (XLA DotGeneral).

        ``dimension_numbers``: a :class:`DotDimensionNumbers`, jax's
        ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`` or a
        dict of the field names. Result dimensions: batch, lhs free, rhs free.
        ``precision_config``: None, a precision name (DEFAULT/HIGH/HIGHEST)
        for both operands or an (lhs, rhs) pair. ``preferred_element_type``:
        the result element type (XLA name, NumPy dtype or xDSL type).
        """
        try:
            dnums = DotDimensionNumbers.of(dimension_numbers)
        except (TypeError, ValueError) as e:
            raise BuilderError(f"{self._caller()}: dimension_numbers: {e}") from None
        return self._dot(DotGeneralOp, lhs, rhs, dnums.to_props(), precision_config, preferred_element_type)

    def _dot(self, op_cls, lhs, rhs, props, precision_config, preferred_element_type):
        caller = self._caller()
        names = _precision_names(caller, precision_config)
        if names:
            props["precision_config"] = ArrayAttr([StringAttr(n) for n in names])
        result_types = None
        if preferred_element_type is not None:
            # infer() reads only the element type of a given result type; the shape is its own.
            result_types = [make_tensor(self._element(preferred_element_type, "preferred_element_type"), [])]
        return self._emit1(op_cls, [lhs, rhs], props, result_types=result_types)
