"""``XlaBuilder``: build hlo programs the way XLA's client ``XlaBuilder`` does.

Each operation of XLA's operation semantics is one snake_case method (``add``, ``dot_general``,
``reduce``, ``while_``, ...). The methods live next to their op definitions, in
the builder mixin of each op family (``xla_dialect/ops/*.py``); this module
assembles them and provides the core: parameters, constants, sub-computations
and :meth:`XlaBuilder.build`.

Shape inference runs at every call, so a mistake raises :class:`BuilderError`
at the offending call, naming it::

    b = XlaBuilder("axpy")
    alpha = b.parameter(0, "f32[]", "alpha")
    x = b.parameter(1, "f32[10]", "x")
    y = b.parameter(2, "f32[10]", "y")
    b.add(b.mul(alpha, x), y)
    module = b.build()
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    ModuleOp,
    StringAttr,
    TensorType,
    TupleType,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.rewriter import Rewriter

from .errors import BuilderError, HloVerifyError, XlaError
from .layout import Layout, LayoutAttr, layout_of
from .literal import DenseLiteralAttr
from .ops import constants, control_flow
from .shape import format_shape, parse_shape
from .ops.base import builder_method, make_tensor
from .quant import UniformQuantizedType, expressed_type, parse_quantized_type, quantized_element
from .types import element_type_from_dtype, element_type_named

ShapeLike = str | Attribute


def _moved_quantization(op_cls, values, props, result_types):
    """Result types a builder method derived from a per-axis quantized operand's type, with the
    quantization dimension moved as the op moves that dimension (reshape, broadcast_in_dim)."""
    source = next((v.type for v in values if quantized_element(v.type) is not None), None)
    q = quantized_element(source) if source is not None else None
    if q is None or q.data.axis is None:
        return result_types
    out = []
    for t in result_types:
        if quantized_element(t) == q and t.get_shape() != source.get_shape():
            axis = op_cls.quantized_axis(props, q.data.axis, source.get_shape(), t.get_shape())
            if axis is not None:
                t = TensorType(UniformQuantizedType(q.data.with_axis(axis)), t.get_shape(), t.encoding)
        out.append(t)
    return out


class XlaOp:
    """A value produced by a builder call (wraps an xDSL ``SSAValue``).

    Supports ``+ - * / -x`` and comparisons-free arithmetic sugar, which call
    the builder's ``add``/``sub``/``mul``/``div``/``neg``.
    """

    __slots__ = ("builder", "value")

    def __init__(self, builder: XlaBuilder, value: SSAValue):
        self.builder = builder
        self.value = value

    @property
    def type(self) -> Attribute:
        return self.value.type

    @property
    def shape(self) -> str:
        """The value's shape in XLA notation, e.g. ``f32[10]{0}``."""
        return format_shape(self.value.type)

    @property
    def dims(self) -> tuple[int, ...]:
        t = self.value.type
        if not isinstance(t, TensorType):
            raise BuilderError(f"{self.shape} is not an array")
        return t.get_shape()

    def __repr__(self) -> str:
        return f"XlaOp({self.shape})"

    def __add__(self, other):
        return self.builder.add(self, other)

    def __sub__(self, other):
        return self.builder.sub(self, other)

    def __mul__(self, other):
        return self.builder.mul(self, other)

    def __truediv__(self, other):
        return self.builder.div(self, other)

    def __neg__(self):
        return self.builder.neg(self)


class _BuilderCore:
    """Parameters, constants, op emission, sub-computations and build()."""

    def __init__(self, name: str = "main", *, default_layouts: bool = True, _parent: XlaBuilder | None = None,
                 _arg_types: Sequence[Attribute] | None = None):
        self.name = name
        self.default_layouts = default_layouts
        self._parent = _parent
        self._root_builder: XlaBuilder = _parent._root_builder if _parent is not None else self  # type: ignore
        self._block = Block(arg_types=list(_arg_types or ()))
        self._param_index: list[int] = []
        self._param_names: list[str] = []
        self._last: list[XlaOp] = []
        self._method: str | None = None  # the public method running (builder_method), named by errors
        # Functions this program calls (name -> FuncOp), shared with sub-builders.
        if _parent is None:
            self._functions: dict[str, func.FuncOp] = {}
            self._function_ids: dict[int, str] = {}

    # -- values ------------------------------------------------------------

    def _value(self, x, what: str = "operand") -> SSAValue:
        if isinstance(x, XlaOp):
            # A sub-computation may use values of the builders enclosing it
            # (captures), never the other way round (XLA: "built by builder X,
            # used in builder Y").
            owner = self
            while owner is not None and owner is not x.builder:
                owner = owner._parent
            if owner is None:
                raise BuilderError(
                    f"{self._caller()}: {what} was built by builder {x.builder.name!r} and cannot be used in "
                    f"builder {self.name!r} (use the builder of the computation's arguments, arg.builder)"
                )
            return x.value
        if isinstance(x, SSAValue):
            return x
        if isinstance(x, (int, float, complex, bool, np.ndarray, np.generic)):
            raise BuilderError(
                f"{self._caller()}: {what} is a Python/NumPy value ({x!r}); wrap it with builder.constant(...)"
            )
        raise BuilderError(f"{self._caller()}: {what} must be an XlaOp, got {type(x).__name__}")

    def _type(self, shape: ShapeLike) -> Attribute:
        if isinstance(shape, str):
            try:
                return parse_shape(shape)
            except XlaError as e:
                raise BuilderError(f"{self._caller()}: {e}") from None
        if isinstance(shape, Attribute):
            return shape
        raise BuilderError(f"{self._caller()}: shape must be XLA shape text or an xDSL type, got {shape!r}")

    def _element(self, element, what: str = "element type") -> Attribute:
        """An element type from an XLA name (``'s8'``), a NumPy dtype, an xDSL type or a
        ``'!quant.uniform<...>'`` spelling."""
        try:
            if isinstance(element, Attribute):
                return element
            if isinstance(element, str):
                if element.strip().startswith("!quant."):
                    return parse_quantized_type(element)
                return element_type_named(element).mlir
            return element_type_from_dtype(np.dtype(element)).mlir
        except XlaError as e:
            raise BuilderError(f"{self._caller()}: {what}: {e}") from None
        except TypeError:
            raise BuilderError(f"{self._caller()}: {what}: expected an element type (XLA name, NumPy dtype, xDSL "
                               f"type or quantized type spelling), got {element!r}") from None

    def _results_of_element(self, op_cls, operands: Sequence, properties: dict | None, element) -> list | None:
        """Result types of ``op_cls`` on ``operands`` with element type ``element`` (None: inferred).

        For ops on quantized values, whose result quantization is the caller's
        choice: the shapes come from shape inference on the expressed types.
        """
        if element is None:
            return None
        element = self._element(element, "result_type")
        types = [expressed_type(self._value(o, f"operand #{i}").type) for i, o in enumerate(operands)]
        props = {k: v for k, v in (properties or {}).items() if v is not None}
        try:
            inferred = op_cls.infer(types, props, [], None)
        except HloVerifyError as e:
            raise BuilderError(f"{self._caller()}: {e}") from None
        return [make_tensor(element, t.get_shape()) if isinstance(t, TensorType) else t for t in inferred]

    def _caller(self) -> str:
        """The public method being called (``XlaBuilder.<name>``, set by :func:`builder_method`), for errors."""
        return self._method or "XlaBuilder"

    def _with_default_layout(self, t: Attribute) -> Attribute:
        if not self.default_layouts:
            return t
        if isinstance(t, TensorType) and layout_of(t) is None:
            return TensorType(t.element_type, t.get_shape(), LayoutAttr(Layout.default(t.get_num_dims())))
        if isinstance(t, TupleType):
            return TupleType([self._with_default_layout(e) for e in t.types])
        return t

    def _emit(self, op_cls, operands: Sequence = (), properties: dict | None = None,
              regions: Sequence[Region] = (), result_types: Sequence[Attribute] | None = None,
              attributes: dict | None = None) -> list[XlaOp]:
        """Create ``op_cls`` with inferred result types; raise BuilderError on bad input."""
        values = [self._value(o, f"operand #{i}") for i, o in enumerate(operands)]
        props = {k: v for k, v in (properties or {}).items() if v is not None}
        if result_types is not None and op_cls.QUANTIZED == "storage":
            result_types = _moved_quantization(op_cls, values, props, result_types)
        try:
            types = op_cls.infer([v.type for v in values], props, list(regions), result_types)
        except HloVerifyError as e:
            raise BuilderError(f"{self._caller()}: {e}") from None
        types = [self._with_default_layout(t) for t in types]
        op = op_cls.create(operands=values, result_types=types, properties=props,
                           regions=list(regions), attributes=attributes or {})
        self._block.add_op(op)
        results = [XlaOp(self, r) for r in op.results]
        if results:
            self._last = results
        return results

    def _emit1(self, op_cls, operands: Sequence = (), properties: dict | None = None,
               regions: Sequence[Region] = (), result_types: Sequence[Attribute] | None = None) -> XlaOp:
        return self._emit(op_cls, operands, properties, regions, result_types)[0]

    # -- parameters and constants -------------------------------------------

    @builder_method
    def parameter(self, index: int, shape: ShapeLike, name: str = "") -> XlaOp:
        """Entry parameter number ``index`` with ``shape`` (XLA text such as ``'f32[10]'`` or a type)."""
        if self._parent is not None:
            raise BuilderError("XlaBuilder.parameter: sub-computation parameters are given by the caller")
        if not isinstance(index, int) or index < 0:
            raise BuilderError(f"XlaBuilder.parameter: index must be a non-negative int, got {index!r}")
        if index in self._param_index:
            raise BuilderError(f"XlaBuilder.parameter: parameter {index} is already defined")
        t = self._with_default_layout(self._type(shape))
        position = sum(1 for i in self._param_index if i < index)
        self._param_index.insert(position, index)
        self._param_names.insert(position, name or f"p{index}")
        arg = self._block.insert_arg(t, position)
        return XlaOp(self, arg)

    @builder_method
    def constant(self, value, dtype=None) -> XlaOp:
        """A literal: ``value`` is anything ``np.asarray`` accepts; ``dtype`` a NumPy dtype or XLA name."""
        if isinstance(dtype, str):
            dtype = element_type_named(dtype).dtype
        try:
            array = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as e:
            raise BuilderError(f"XlaBuilder.constant: cannot make an array from {value!r}: {e}") from None
        if dtype is None and array.dtype == np.float64 and not isinstance(value, np.ndarray):
            array = array.astype(np.float32)  # Python floats become f32, as in XLA's ConstantR0<float>
        if dtype is None and array.dtype == np.int64 and not isinstance(value, np.ndarray):
            array = array.astype(np.int32)
        try:
            element = element_type_from_dtype(array.dtype)
        except XlaError as e:
            raise BuilderError(f"XlaBuilder.constant: {e}") from None
        t = TensorType(element.mlir, array.shape)
        return self._emit1(constants.ConstantOp, [], {"value": DenseLiteralAttr.from_array(array, t)})

    @builder_method
    def constant_r0(self, value, dtype=None) -> XlaOp:
        """A scalar constant."""
        return self.constant(np.asarray(value, dtype=dtype).reshape(()) if dtype else value, dtype)

    # -- sub-computations ---------------------------------------------------

    def _sub_builder(self, name: str, arg_types: Sequence[Attribute]) -> XlaBuilder:
        return type(self)(name, default_layouts=self.default_layouts, _parent=self, _arg_types=arg_types)

    def _region(self, computation, arg_types: Sequence[Attribute], what: str) -> Region:
        """A region computing ``computation`` over block arguments of ``arg_types``.

        ``computation`` is a Python callable taking one :class:`XlaOp` per
        argument (build with ``arg.builder``) and returning an XlaOp or a
        tuple of them, or a computation built earlier (a ``ModuleOp`` from
        :meth:`build`, or a ``func.FuncOp``).
        """
        if callable(computation) and not isinstance(computation, (ModuleOp, func.FuncOp)):
            sub = self._sub_builder(f"{self.name}.{what}", arg_types)
            args = [XlaOp(sub, a) for a in sub._block.args]
            try:
                params = inspect.signature(computation).parameters.values()
                # Parameters with defaults (``lambda a, k=k: ...``) are not computation parameters.
                nparams = sum(1 for p in params if p.default is p.empty and p.kind in
                              (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
                if any(p.kind is p.VAR_POSITIONAL for p in params):
                    nparams = len(args)  # f(*args): takes whatever it is given
            except (TypeError, ValueError):
                nparams = len(args)
            if nparams == len(args) + 1:
                out = computation(sub, *args)
            elif nparams == len(args):
                out = computation(*args)
            else:
                raise BuilderError(
                    f"{self._caller()}: {what} takes {nparams} parameters but must take {len(args)} "
                    f"({', '.join(format_shape(t) for t in arg_types)}), optionally preceded by a builder"
                )
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            values = [sub._value(o, f"{what} result") for o in outs]
            sub._block.add_op(control_flow.ReturnOp.create(operands=values))
            return Region(sub._block)
        fn = self._func_of(computation, what)
        want = [t for t in arg_types]
        have = list(fn.function_type.inputs)
        if len(want) != len(have) or any(_strip(a) != _strip(b) for a, b in zip(want, have)):
            raise BuilderError(
                f"{self._caller()}: {what} computation takes ({', '.join(format_shape(t) for t in have)}) "
                f"but must take ({', '.join(format_shape(t) for t in want)})"
            )
        region = fn.body.clone()
        for block in region.blocks:
            term = block.last_op
            if isinstance(term, func.ReturnOp):
                Rewriter.replace_op(term, control_flow.ReturnOp.create(operands=list(term.operands)))
        self._adopt_callees(computation)
        return region

    def _func_of(self, computation, what: str) -> func.FuncOp:
        if isinstance(computation, func.FuncOp):
            return computation
        if isinstance(computation, ModuleOp):
            funcs = [op for op in computation.ops if isinstance(op, func.FuncOp)]
            main = [f for f in funcs if f.sym_name.data == "main"] or [f for f in funcs if f.sym_visibility is None]
            if main:
                return main[0]
        raise BuilderError(
            f"{self._caller()}: {what} must be a callable or a built computation (ModuleOp/FuncOp), got {type(computation).__name__}"
        )

    def _adopt_callees(self, computation) -> None:
        """Copy the private functions a built computation calls into this program."""
        if isinstance(computation, ModuleOp):
            root = self._root_builder
            for op in computation.ops:
                if isinstance(op, func.FuncOp) and op.sym_visibility is not None:
                    root._functions.setdefault(op.sym_name.data, op.clone())

    def _function_symbol(self, computation, arg_types: Sequence[Attribute], what: str) -> tuple[str, func.FuncOp]:
        """Register ``computation`` as a private function of the program; return its name."""
        root = self._root_builder
        key = id(computation)
        if key in root._function_ids:
            name = root._function_ids[key]
            return name, root._functions[name]
        region = self._region(computation, arg_types, what)
        results = list(region.block.last_op.operands)
        base = getattr(computation, "__name__", None) or what
        name = _unique(base if base != "<lambda>" else what, root._functions)
        for block in region.blocks:
            term = block.last_op
            if isinstance(term, control_flow.ReturnOp):
                Rewriter.replace_op(term, func.ReturnOp(*term.operands))
        fn = func.FuncOp(name, FunctionType.from_lists(list(arg_types), [r.type for r in results]), region, "private")
        root._functions[name] = fn
        root._function_ids[key] = name
        return name, fn

    # -- build ---------------------------------------------------------------

    @builder_method
    def build(self, root: XlaOp | Sequence[XlaOp] | None = None) -> ModuleOp:
        """Finish the program: a ``ModuleOp`` whose entry function is ``main``.

        ``root`` is the value computed (default: the last op added, as in
        XLA); a list of values makes a function with several results.
        """
        if self._parent is not None:
            raise BuilderError("XlaBuilder.build: call build() on the top-level builder")
        if self._param_index != list(range(len(self._param_index))):
            raise BuilderError(f"XlaBuilder.build: parameter numbers must be 0..n-1, got {self._param_index}")
        if root is None:
            if not self._last:
                raise BuilderError("XlaBuilder.build: the computation is empty; nothing to return")
            roots = self._last[:1] if len(self._last) == 1 else self._last
        else:
            roots = list(root) if isinstance(root, (list, tuple)) else [root]
        values = [self._value(r, "root") for r in roots]
        block = self._block
        block.add_op(func.ReturnOp(*values))
        arg_attrs = (ArrayAttr([DictionaryAttr({"hlo.name": StringAttr(n)}) for n in self._param_names])
                     if self._param_names else None)
        main = func.FuncOp(
            "main",
            FunctionType.from_lists([a.type for a in block.args], [v.type for v in values]),
            Region(block),
            arg_attrs=arg_attrs,
        )
        module = ModuleOp([main, *self._functions.values()])
        try:
            module.verify()
        except XlaError:
            raise
        except Exception as e:  # a bug in an op definition, not user input
            raise BuilderError(f"XlaBuilder.build: the built module does not verify: {e}") from e
        # A builder builds once; start fresh so it cannot be reused by accident.
        self._block = Block()
        self._param_index, self._param_names, self._last = [], [], []
        self._functions, self._function_ids = {}, {}
        return module


def _strip(t: Attribute) -> Attribute:
    from .layout import strip_layout

    return strip_layout(t)


def _unique(base: str, taken) -> str:
    name = base.replace(".", "_")
    i = 1
    while name in taken:
        name = f"{base}_{i}"
        i += 1
    return name


from .ops.collectives import CollectivesBuilder  # noqa: E402  (the families import the builder core above)
from .ops.constants import ConstantsBuilder  # noqa: E402
from .ops.control_flow import ControlFlowBuilder  # noqa: E402
from .ops.conversion import ConversionBuilder  # noqa: E402
from .ops.data_movement import DataMovementBuilder  # noqa: E402
from .ops.effects import EffectsBuilder  # noqa: E402
from .ops.elementwise import ElementwiseBuilder  # noqa: E402
from .ops.indexing import IndexingBuilder  # noqa: E402
from .ops.linalg import LinalgBuilder  # noqa: E402
from .ops.numerics import NumericsBuilder  # noqa: E402
from .ops.reduction import ReductionBuilder  # noqa: E402
from .ops.sorting import SortingBuilder  # noqa: E402
from .ops.windowed import WindowedBuilder  # noqa: E402


class XlaBuilder(ConstantsBuilder, ElementwiseBuilder, ConversionBuilder, DataMovementBuilder, IndexingBuilder,
                 LinalgBuilder, WindowedBuilder, ReductionBuilder, SortingBuilder, NumericsBuilder,
                 ControlFlowBuilder, EffectsBuilder, CollectivesBuilder, _BuilderCore):
    """XLA's computation builder for the hlo dialect (see the module docstring).

    Its methods come from the op families' builder mixins (one per file in
    ``xla_dialect/ops``), so each op's builder method sits next to its definition.
    """
