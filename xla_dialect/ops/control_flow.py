"""Control flow and program structure: return, tuple, get_tuple_element, call, while, conditional.

Sub-computations are regions (``reduce`` bodies, ``while`` conditions, branches):
a single block whose arguments are the computation's parameters, ended by
``hlo.return``. The helpers :func:`region_signature` and :func:`check_region`
check a region against the parameter and result types an op needs; every
region-carrying op (here and in the reduction and sorting families) uses them.

IR forms chosen (documented deviations from StableHLO):

* ``hlo.while`` takes N operands as StableHLO does, but XLA's builder
  (``while_``) always passes one (possibly tuple-shaped) value, so tuple state
  is carried as a ``tuple<...>`` value and read with ``hlo.get_tuple_element``.
* ``hlo.conditional`` is XLA's kConditional, not StableHLO's ``if``/``case``:
  its operands are the selector followed by one operand per branch, and
  region ``b`` takes branch ``b``'s operand as its single block argument.
  A ``pred`` selector means two branches (region 0 runs when true); an
  ``s32`` selector picks region ``index``, and an index outside ``[0, N)``
  runs the last region, as XLA specifies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xdsl.dialects.builtin import IntegerAttr, StringAttr, SymbolRefAttr, TensorType, TupleType, i32
from xdsl.ir import Attribute, Region
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_region_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, Pure, RecursiveMemoryEffect, SymbolTable

from ..errors import HloVerifyError, op_context
from ..layout import strip_layout
from ..types import FutureType
from .base import HloOp, fail, fmt, kind_of, make_tensor, tensor, set_quantized, builder_method


@irdl_op_definition
class ReturnOp(HloOp):
    """``hlo.return``: terminates the region of a region-carrying op (reduce, while, sort, ...)."""

    name = "hlo.return"
    results_ = var_operand_def()
    traits = traits_def(IsTerminator(), Pure())

    assembly_format = "($results_^ `:` type($results_))? attr-dict"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        return []


# ----------------------------------------------------------------------------
# Region checking shared by every region-carrying op
# ----------------------------------------------------------------------------


def types_text(types: Sequence[Attribute]) -> str:
    """``(f32[], s32[])`` for messages."""
    return "(" + ", ".join(fmt(t) for t in types) + ")"


def same_types(a: Sequence[Attribute], b: Sequence[Attribute]) -> bool:
    """Equal type lists, ignoring layouts."""
    return len(a) == len(b) and all(strip_layout(x) == strip_layout(y) for x, y in zip(a, b))


def region_signature(op_name: str, region: Region, what: str) -> tuple[list[Attribute], list[Attribute]]:
    """(parameter types, result types) of a single-block region ended by ``hlo.return``."""
    if len(region.blocks) != 1:
        fail(op_name, f"{what} must have exactly one block, got {len(region.blocks)}")
    block = region.block
    term = block.last_op
    if not isinstance(term, ReturnOp):
        fail(op_name, f"{what} must end with hlo.return, got {term.name if term is not None else 'an empty block'}")
    return [a.type for a in block.args], [v.type for v in term.operands]


def check_region(op_name: str, region: Region, param_types: Sequence[Attribute], what: str,
                 result_types: Sequence[Attribute] | None = None) -> list[Attribute]:
    """Check ``region`` takes ``param_types`` (and returns ``result_types`` if given); return its result types."""
    params, results = region_signature(op_name, region, what)
    if not same_types(params, param_types):
        fail(op_name, f"{what} takes {types_text(params)} but must take {types_text(param_types)}")
    if result_types is not None and not same_types(results, result_types):
        fail(op_name, f"{what} returns {types_text(results)} but must return {types_text(result_types)}")
    return results


def same_shape_arrays(op_name: str, types: Sequence[Attribute]) -> tuple[list[TensorType], tuple[int, ...]]:
    """Check ``types`` are arrays of one shape (element types may differ); return them and the shape."""
    if not types:
        fail(op_name, "expects at least one operand")
    arrays = [tensor(op_name, t, f"operand #{i}") for i, t in enumerate(types)]
    shape = arrays[0].get_shape()
    for i, t in enumerate(arrays[1:], 1):
        if t.get_shape() != shape:
            fail(op_name, f"all operands must have the same dimensions: operand #0 is {fmt(arrays[0])}, "
                          f"operand #{i} is {fmt(t)}")
    return arrays, shape


def scalar_of(type_: Attribute) -> TensorType:
    """The rank-0 tensor type with ``type_``'s element type (the parameter type of scalar computations)."""
    return make_tensor(type_.element_type, [])


def is_scalar_pred(type_: Attribute) -> bool:
    """True for ``pred[]`` (``tensor<i1>``)."""
    return isinstance(type_, TensorType) and not type_.get_shape() and kind_of(type_) == "pred"


# ----------------------------------------------------------------------------
# Tuples
# ----------------------------------------------------------------------------


@irdl_op_definition
class TupleOp(HloOp):
    """``hlo.tuple``: groups values of any shape into one tuple value."""

    name = "hlo.tuple"
    traits = traits_def(Pure())
    elements = var_operand_def()
    result = result_def(TupleType)

    assembly_format = "$elements attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        return [TupleType(list(operand_types))]


@irdl_op_definition
class GetTupleElementOp(HloOp):
    """``hlo.get_tuple_element``: element ``index`` (a compile-time constant) of a tuple."""

    name = "hlo.get_tuple_element"
    traits = traits_def(Pure())
    operand = operand_def(TupleType)
    index = prop_def(IntegerAttr)
    result = result_def()

    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (t,) = operand_types
        if not isinstance(t, TupleType):
            fail(cls.name, f"operand must be a tuple, got {fmt(t)}")
        index = props["index"].value.data
        n = len(t.types)
        if not 0 <= index < n:
            fail(cls.name, f"index {index} is out of range for a tuple of {n} elements {fmt(t)}")
        return [t.types.data[index]]


# ----------------------------------------------------------------------------
# Call
# ----------------------------------------------------------------------------


@irdl_op_definition
class CallOp(HloOp):
    """``hlo.call``: invokes the ``func.func`` named by ``callee`` (XLA's kCall)."""

    name = "hlo.call"
    callee = prop_def(SymbolRefAttr)
    operands_ = var_operand_def()
    results_ = var_result_def()

    assembly_format = "$callee `(` $operands_ `)` attr-dict `:` functional-type($operands_, $results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        # The result types are the callee's; the builder passes them and
        # verify_() checks them against the callee's signature.
        if result_types is None:
            fail(cls.name, "result types must be given (they are the callee's result types)")
        return list(result_types)

    def verify_(self) -> None:
        super().verify_()
        CallOp.verify_callee(self)

    @staticmethod
    def verify_callee(self) -> None:
        """Check the callee exists and its signature matches the op's operands and results."""
        name = self.callee.string_value()
        try:
            callee = SymbolTable.lookup_symbol(self, self.callee)
        except ValueError:
            return  # not inside a module yet (being built): checked once it is
        if callee is None:
            raise HloVerifyError(f"{op_context(self)}: callee @{name} is not defined")
        ftype = getattr(callee, "function_type", None)
        if ftype is None:
            raise HloVerifyError(f"{op_context(self)}: callee @{name} is not a function")
        args = [o.type for o in self.operands]
        if not same_types(args, list(ftype.inputs)):
            raise HloVerifyError(f"{op_context(self)}: arguments {types_text(args)} do not match "
                                 f"@{name}'s parameters {types_text(list(ftype.inputs))}")
        res = [r.type for r in self.results]
        if not same_types(res, list(ftype.outputs)):
            raise HloVerifyError(f"{op_context(self)}: results {types_text(res)} do not match "
                                 f"@{name}'s results {types_text(list(ftype.outputs))}")



@irdl_op_definition
class FusionOp(HloOp):
    """``hlo.fusion``: XLA's kFusion, a call of its fused computation (the ``func.func`` named by ``callee``).

    ``kind`` is XLA's fusion kind (``kLoop``, ``kInput``, ``kOutput``, ``kCustom``); the
    value is the fused computation's result, so the executor runs it as a call. Imported
    from optimized HLO text (:func:`interop.import_hlo`) and printed back as a fusion.
    """

    name = "hlo.fusion"
    callee = prop_def(SymbolRefAttr)
    kind = opt_prop_def(StringAttr)
    operands_ = var_operand_def()
    results_ = var_result_def()

    assembly_format = "$callee `(` $operands_ `)` attr-dict `:` functional-type($operands_, $results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        kind = props.get("kind")
        if kind is not None and kind.data not in FUSION_KINDS:
            fail(cls.name, f"kind {kind.data!r} is not one of {', '.join(FUSION_KINDS)}")
        if result_types is None:
            fail(cls.name, "result types must be given (they are the fused computation's result types)")
        return list(result_types)

    def verify_(self) -> None:
        super().verify_()
        CallOp.verify_callee(self)


FUSION_KINDS = ("kLoop", "kInput", "kOutput", "kCustom")
"""XLA's fusion kinds (``HloInstruction::FusionKind``)."""

# ----------------------------------------------------------------------------
# While
# ----------------------------------------------------------------------------


@irdl_op_definition
class WhileOp(HloOp):
    """``hlo.while``: runs ``body`` while ``cond`` is true; state types never change.

    ``cond`` takes the state and returns ``pred[]``; ``body`` takes the state
    and returns the next state. The result is the state after the last body run
    (the initial state if ``cond`` is false at once).
    """

    name = "hlo.while"
    traits = traits_def(RecursiveMemoryEffect())
    operands_ = var_operand_def()
    results_ = var_result_def()
    cond = region_def("single_block")
    body = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $results_) $cond $body"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        state = list(operand_types)
        if not state:
            fail(cls.name, "needs at least one state value (the init operand)")
        if regions:
            cond, body = regions
            cond_results = check_region(cls.name, cond, state, "condition computation")
            if len(cond_results) != 1 or not is_scalar_pred(cond_results[0]):
                fail(cls.name, f"condition computation must return pred[], returns {types_text(cond_results)}")
            check_region(cls.name, body, state, "body computation", state)
        return state


# ----------------------------------------------------------------------------
# Conditional
# ----------------------------------------------------------------------------


@irdl_op_definition
class ConditionalOp(HloOp):
    """``hlo.conditional``: runs one branch region on its operand (XLA's kConditional).

    Operands: the selector (``pred[]`` with two branches: region 0 when true,
    region 1 when false; or ``s32[]``: region ``index``, the last region when
    the index is out of range), then one operand per branch.
    """

    name = "hlo.conditional"
    traits = traits_def(RecursiveMemoryEffect())
    selector = operand_def()
    branch_operands = var_operand_def()
    results_ = var_result_def()
    branches = var_region_def("single_block")

    # The custom syntax, ``%sel, %a, %b attr-dict : (types) -> results {branch 0} {branch 1}``, is written out
    # below rather than as an ``assembly_format``: xDSL's declarative ``$branches`` reads regions side by side up
    # to 0.74 and as a comma-separated list from 0.75 (MLIR's spelling), so neither release read the other's
    # text. These read both spellings and print the side-by-side one, whatever the xDSL release.

    @classmethod
    def parse(cls, parser: Parser) -> ConditionalOp:
        start = parser.pos
        selector = parser.parse_unresolved_operand()
        branch_operands = []
        if parser.parse_optional_punctuation(","):
            branch_operands = parser.parse_comma_separated_list(parser.Delimiter.NONE,
                                                                parser.parse_unresolved_operand)
        attributes = parser.parse_optional_attr_dict()
        properties = {name: attributes.pop(name) for name in list(attributes)
                      if name in cls.get_irdl_definition().properties}  # (HloOp's ParsePropInAttrDict)
        parser.parse_punctuation(":")
        function_type = parser.parse_function_type()
        operands = parser.resolve_operands([selector, *branch_operands], function_type.inputs.data, start)
        regions: list[Region] = []
        region = parser.parse_optional_region()
        while region is not None:
            regions.append(region)
            region = parser.parse_region() if parser.parse_optional_punctuation(",") else \
                parser.parse_optional_region()
        return cls.build(operands=[operands[0], operands[1:]], result_types=[function_type.outputs.data],
                         attributes=attributes, properties=properties, regions=[regions])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes(self.attributes | self.properties)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)
        for region in self.regions:
            printer.print_string(" ")
            printer.print_region(region)

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        selector, *branch_types = operand_types
        sel = tensor(cls.name, selector, "branch selector")
        if sel.get_shape() or not (kind_of(sel) == "pred" or sel.element_type == i32):
            fail(cls.name, f"branch selector must be pred[] or s32[], got {fmt(selector)}")
        n = len(branch_types)
        if n < 1:
            fail(cls.name, "needs at least one branch")
        if kind_of(sel) == "pred" and n != 2:
            fail(cls.name, f"a pred[] selector needs exactly 2 branches, got {n}")
        if regions is None or not len(regions):
            if result_types is None:
                fail(cls.name, "result types must be given when the branches are not")
            return list(result_types)
        if len(regions) != n:
            fail(cls.name, f"has {n} branch operands but {len(regions)} branch computations")
        first: list[Attribute] | None = None
        for b, (region, t) in enumerate(zip(regions, branch_types)):
            what = f"branch computation {b}"
            results = check_region(cls.name, region, [t], what)
            if first is None:
                first = results
            elif not same_types(results, first):
                fail(cls.name, f"{what} returns {types_text(results)} but branch computation 0 returns "
                               f"{types_text(first)}; all branches must return the same type")
        return list(first)


# ----------------------------------------------------------------------------
# async_start / async_done
# ----------------------------------------------------------------------------

ASYNC_BODY_OPS = ("hlo.all_reduce", "hlo.all_gather", "hlo.all_to_all", "hlo.collective_permute",
                  "hlo.reduce_scatter", "hlo.collective_broadcast", "hlo.slice", "hlo.dynamic_slice",
                  "hlo.dynamic_update_slice")
"""The ops an ``async_start`` body may hold (the StableHLO spec's C2): collectives and slices."""


@irdl_op_definition
class AsyncStartOp(HloOp):
    """``hlo.async_start``: starts the one op of ``body`` (a collective or a slice) on ``operands``; its
    results are read from the ``future`` by ``hlo.async_done``. The asynchrony is a permission, not a
    promise (the spec): the executor computes the op when it starts."""

    name = "hlo.async_start"
    traits = traits_def(RecursiveMemoryEffect())
    operands_ = var_operand_def()
    future = result_def()
    body = region_def("single_block")

    assembly_format = "$operands_ attr-dict `:` functional-type($operands_, $future) $body"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        if not regions:
            if result_types is None:
                fail(cls.name, "the result type must be given when the body is not")
            return list(result_types)
        ops = list(regions[0].block.ops)
        if len(ops) != 2 or not isinstance(ops[1], ReturnOp):
            fail(cls.name, f"body must hold one op and a return (the spec's C1), holds {len(ops)} ops")
        inner, ret = ops
        if inner.name not in ASYNC_BODY_OPS:
            fail(cls.name, f"body op must be a collective or a slice ({', '.join(ASYNC_BODY_OPS)}), got {inner.name}")
        if [v.type for v in inner.operands] != list(operand_types):
            fail(cls.name, f"operands {types_text(operand_types)} must be those of the body's {inner.name} "
                           f"({types_text([v.type for v in inner.operands])})")
        if list(ret.operands) != list(inner.results):
            fail(cls.name, f"body must return the results of its {inner.name}")
        return [FutureType([v.type for v in inner.results])]

    def verify_(self) -> None:
        super().verify_()
        inner = self.body.block.first_op
        if inner is not None and list(inner.operands) != list(self.operands):
            raise HloVerifyError(f"{op_context(self)}: the body's {inner.name} must take the operands of "
                                 "async_start (the spec's C3)")


@irdl_op_definition
class AsyncDoneOp(HloOp):
    """``hlo.async_done``: the results of the ``hlo.async_start`` whose future it receives."""

    name = "hlo.async_done"
    future = operand_def()
    results_ = var_result_def()

    assembly_format = "$future attr-dict `:` functional-type($future, $results_)"

    @classmethod
    def infer(cls, operand_types, props, regions, result_types):
        (future,) = operand_types
        if not isinstance(future, FutureType):
            fail(cls.name, f"operand must be a future (the result of hlo.async_start), got {fmt(future)}")
        return list(future.types.data)


OPS = [ReturnOp, TupleOp, GetTupleElementOp, CallOp, FusionOp, WhileOp, ConditionalOp, AsyncStartOp, AsyncDoneOp]
"""Every op class of this family (registered in the hlo dialect)."""


# How each op treats quantized types (see base.QUANTIZED_MODES; ops not listed reject them).
set_quantized("transparent", *OPS)


# ----------------------------------------------------------------------------
# Builder methods
# ----------------------------------------------------------------------------


def one_or_tuple(values: list):
    """One XlaOp, or a tuple of them for multi-result ops."""
    return values[0] if len(values) == 1 else tuple(values)


_results = one_or_tuple  # the earlier name, still imported by other op families


def as_list(values) -> list:
    """A builder argument that is one XlaOp or a sequence of them, as a list."""
    return list(values) if isinstance(values, (list, tuple)) else [values]


def precheck(builder, op_cls, operands: Sequence, props: dict) -> list[Attribute]:
    """Run ``op_cls.infer`` without regions, before building them; BuilderError on bad operands.

    Region-carrying builder methods need valid operand types to know the
    computation's parameter types, so they check the operands first.
    """
    from ..errors import BuilderError

    types = [builder._value(o, f"operand #{i}").type for i, o in enumerate(operands)]
    try:
        return op_cls.infer(types, props, [], None)
    except HloVerifyError as e:
        raise BuilderError(f"{builder._caller()}: {e}") from None


def scalar_params(builder, types: Sequence[Attribute]) -> list[Attribute]:
    """Parameter types of a scalar computation over arrays of ``types`` (with the builder's layouts)."""
    return [builder._with_default_layout(scalar_of(t)) for t in types]


class ControlFlowBuilder:
    """Builder methods of the control_flow family."""

    @builder_method
    def tuple(self, elements: Sequence):
        """``hlo.tuple``: a tuple of ``elements`` (XlaOps of any shape)."""
        return self._emit1(TupleOp, list(elements))

    @builder_method
    def get_tuple_element(self, tuple_, index: int):
        """``hlo.get_tuple_element``: element ``index`` of a tuple-shaped XlaOp."""
        return self._emit1(GetTupleElementOp, [tuple_], {"index": IntegerAttr(int(index), 64)})

    @builder_method
    def call(self, computation, operands: Sequence = ()):
        """``hlo.call``: invoke ``computation`` (callable or built computation) on ``operands``.

        The computation becomes a private ``func.func`` of the program (built
        once per computation object, however often it is called).
        """
        values = [self._value(o, f"operand #{i}") for i, o in enumerate(operands)]
        name, fn = self._function_symbol(computation, [v.type for v in values], "call")
        have = list(fn.function_type.inputs)
        if not same_types(have, [v.type for v in values]):
            from ..errors import BuilderError

            raise BuilderError(f"{self._caller()}: computation @{name} takes {types_text(have)}, "
                               f"called with {types_text([v.type for v in values])}")
        results = self._emit(CallOp, values, {"callee": SymbolRefAttr(name)},
                             result_types=list(fn.function_type.outputs))
        return one_or_tuple(results) if results else None

    @builder_method
    def async_start(self, operands: Sequence, body):
        """``hlo.async_start``: ``body(builder, *operands)`` emits one collective or slice of ``operands``
        (built with the given builder; ``operands`` are this builder's values); returns the future that
        :meth:`async_done` reads."""
        from ..errors import BuilderError

        values = [self._value(o, f"operand #{i}") for i, o in enumerate(operands)]
        sub = self._sub_builder(f"{self.name}.async", [])
        out = body(sub, *operands)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        results = [sub._value(o, "body result") for o in outs]
        sub._block.add_op(ReturnOp.create(operands=results))
        region = Region(sub._block)
        first = sub._block.first_op
        if first is not None and list(first.operands) != values:
            raise BuilderError(f"{self._caller()}: the body's {first.name} must take exactly the operands given "
                               "to async_start")
        return self._emit1(AsyncStartOp, values, regions=[region])

    @builder_method
    def async_done(self, future):
        """``hlo.async_done``: the results of ``future`` (one XlaOp, or a tuple of them)."""
        return one_or_tuple(self._emit(AsyncDoneOp, [future]))

    @builder_method
    def while_(self, condition, body, init):
        """``hlo.while``: ``state = init; while condition(state): state = body(state)``.

        ``init`` is one XlaOp (use :meth:`tuple` for several state values, as
        in XLA); ``condition`` returns ``pred[]``, ``body`` returns the next
        state of the same shape.
        """
        inits = as_list(init)
        types = [self._value(v, "init").type for v in inits]
        regions = [self._region(condition, types, "condition"), self._region(body, types, "body")]
        return one_or_tuple(self._emit(WhileOp, inits, regions=regions))

    @builder_method
    def conditional(self, selector, *args):
        """``hlo.conditional``, in XLA's two forms.

        ``conditional(pred, true_operand, true_computation, false_operand, false_computation)``
        runs ``true_computation(true_operand)`` if ``pred`` else
        ``false_computation(false_operand)``.

        ``conditional(branch_index, branch_computations, branch_operands)``
        runs ``branch_computations[i](branch_operands[i])`` for ``i = branch_index``
        (an ``s32[]``); an index ``< 0`` or ``>= N`` runs the last branch.
        """
        from ..errors import BuilderError

        if len(args) == 4:
            true_operand, true_computation, false_operand, false_computation = args
            sel = self._value(selector, "pred")
            if not is_scalar_pred(sel.type):
                raise BuilderError(f"{self._caller()}: pred must be a pred[] scalar, got {fmt(sel.type)}")
            computations = [true_computation, false_computation]
            operands = [true_operand, false_operand]
            names = ["true_computation", "false_computation"]
        elif len(args) == 2:
            computations, operands = list(args[0]), list(args[1])
            sel = self._value(selector, "branch_index")
            if not (isinstance(sel.type, TensorType) and not sel.type.get_shape()
                    and sel.type.element_type == i32):
                raise BuilderError(f"{self._caller()}: branch_index must be an s32[] scalar, got {fmt(sel.type)}")
            if len(computations) != len(operands):
                raise BuilderError(f"{self._caller()}: {len(computations)} branch computations but "
                                   f"{len(operands)} branch operands")
            if not computations:
                raise BuilderError(f"{self._caller()}: needs at least one branch computation")
            names = [f"branch_computations[{b}]" for b in range(len(computations))]
        else:
            raise BuilderError(f"{self._caller()}: takes (pred, true_operand, true_computation, false_operand, "
                               f"false_computation) or (branch_index, branch_computations, branch_operands)")
        values = [self._value(o, f"{n} operand") for o, n in zip(operands, names)]
        regions = [self._region(c, [v.type], n) for c, v, n in zip(computations, values, names)]
        return one_or_tuple(self._emit(ConditionalOp, [selector, *values], regions=regions))


def static_trip_count(loop: WhileOp) -> int | None:
    """How many times ``loop`` runs its body when that is known from its code alone, as XLA's
    ``ComputeWhileLoopTripCount`` finds it in the simple case (what ``lax.fori_loop`` with static bounds lowers to):
    the condition compares one carried integer with a constant (``LT``, ``LE``, ``GT``, ``GE``, ``NE``), the
    integer starts from a constant and the body adds a constant to it. None otherwise. (XLA's
    ``WhileLoopSimplifier`` removes a loop that runs once: its body is then straight-line code.)"""
    from .constants import ConstantOp
    from .elementwise import AddOp, CompareOp

    def constant(value):
        owner = value.owner
        if not isinstance(owner, ConstantOp) or owner.value.array.size != 1:
            return None
        number = owner.value.array.reshape(-1)[0]
        return int(number) if np.issubdtype(type(number), np.integer) else None

    cond, body = loop.cond.block, loop.body.block
    compare = cond.last_op.operands[0].owner if cond.last_op is not None and cond.last_op.operands else None
    if not isinstance(compare, CompareOp):
        return None
    lhs, rhs = compare.operands
    direction = compare.properties["comparison_direction"].data
    if rhs.owner is cond and lhs.owner is not cond:  # (the constant first: ``N > i``)
        lhs, rhs = rhs, lhs
        direction = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction, direction)
    if lhs.owner is not cond or constant(rhs) is None:
        return None
    k, bound = lhs.index, constant(rhs)
    start = constant(loop.operands[k])
    step_op = body.last_op.operands[k].owner
    if start is None or not isinstance(step_op, AddOp):
        return None
    a, b = step_op.operands
    if b.owner is body and b.index == k:
        a, b = b, a
    step = constant(b)
    if not (a.owner is body and a.index == k) or not step:
        return None
    if direction in ("LT", "LE", "NE") and step > 0:
        end = bound + 1 if direction == "LE" else bound
        if direction == "NE" and (end - start) % step:
            return None
        return max(0, -(-(end - start) // step))
    if direction in ("GT", "GE") and step < 0:
        end = bound - 1 if direction == "GE" else bound
        return max(0, -(-(start - end) // -step))
    return None


def loop_invariant_ops(op: WhileOp) -> set[int]:
    """The ids of the ops of ``op``'s body that XLA's ``WhileLoopInvariantCodeMotion`` moves out of the loop: each
    operand a constant, a carried value the body returns unchanged at its own position, or the result of another
    such op (of the ops with regions only reduces, whose region is the computation they apply: ``jnp.sum(x2)`` of
    a captured ``x2`` is summed before the loop, measured). XLA computes them before the loop, as straight-line
    code."""
    moved = _moved_out(op)
    return {id(inner) for inner in op.body.block.ops if moved(inner)}


def moved_out_of_loop(op, loop: WhileOp) -> bool:
    """Whether ``op`` (an op of ``loop``'s body block) is one of :func:`loop_invariant_ops` -- found from the ops
    ``op`` reads only, not the whole body: what a kernel asks of one op."""
    return op.parent_block() is loop.body.block and _moved_out(loop)(op)


def _moved_out(loop: WhileOp):
    """The predicate of :func:`loop_invariant_ops` on the ops of ``loop``'s body block, each op decided once."""
    from .constants import ConstantOp

    body = loop.body.block
    returned = list(body.last_op.operands)
    seen: dict[int, bool] = {}

    def invariant_value(value) -> bool:
        owner = value.owner
        if owner is body:
            return returned[value.index] is value
        if isinstance(owner, ConstantOp):
            return True
        return owner.parent_block() is body and invariant_op(owner)

    def invariant_op(inner) -> bool:
        if id(inner) not in seen:
            seen[id(inner)] = False  # (SSA: no cycles; a guard all the same)
            # (a reduce by name: ops.reduction imports this module)
            seen[id(inner)] = (inner is not body.last_op and (not inner.regions or inner.name == "hlo.reduce")
                               and bool(inner.results)
                               and all(invariant_value(v) for v in inner.operands))
        return seen[id(inner)]

    return invariant_op
