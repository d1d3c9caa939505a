"""Which converter an MLIR op takes: the table of converters (:data:`CONVERTERS`) for ops that are not a 1:1
rename, the generic rule for those that are (``stablehlo.X`` -> ``hlo.X``), chlo ops through XLA's expansion,
and opaque ops for what has no hlo form.

The converters (:mod:`interop.stablehlo.converters`) register here; the :class:`~interop.stablehlo.importer.Importer`
calls :func:`convert_unquantized` for each op, and every converter gets the importer as its first argument."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdsl.dialects.builtin import DenseArrayBase, IntegerType
from xdsl.ir import Attribute, SSAValue

from xla_dialect.errors import MlirParseError, UnsupportedError

from ..schema import BROADCAST_DIMENSIONS
from .chlo import legalize_chlo_op
from .context import NEWER_DIALECT

Importer = Any
"""What a converter takes first: the :class:`interop.stablehlo.importer.Importer` converting the module (its
services: ``emit``, ``operands``, ``type``, ...). A name for annotations only: the importer imports the
converters, not the other way round."""

Converter = Callable[["Importer", Any], "list[SSAValue] | None"]

CONVERTERS: dict[str, Converter] = {}
"""Op name -> converter ``fn(importer, op)`` for ops that are not a 1:1 rename.

A converter appends hlo ops through :meth:`Importer.emit` and returns the
values that replace the op's results (or None when it has none)."""


def register_converter(name: str):
    """Decorator registering a converter for the MLIR op ``name`` (replaces any previous one)."""

    def deco(fn: Converter) -> Converter:
        CONVERTERS[name] = fn
        return fn

    return deco


ATTRIBUTE_RENAMES: dict[str, dict[str, str | None]] = {}
"""StableHLO op -> {attribute name: hlo property name (None: drop)} where they differ."""


def convert_unquantized(imp: Importer, op) -> list[SSAValue] | None:
    """Convert ``op`` (an ``ir.Operation``) by its converter or the generic rule; return its values."""
    name = op.name
    conv = CONVERTERS.get(name)
    if conv is not None:
        return conv(imp, op)
    for dialect in ("stablehlo.", NEWER_DIALECT + "."):
        if name.startswith(dialect) and (cls := hlo_op_class(imp, "hlo." + name[len(dialect):])) is not None:
            return generic_converter(imp, op, cls)
    if name.startswith("chlo."):
        return chlo_through_xla(imp, op)
    if imp.allow_unknown:
        return opaque_converter(imp, op)
    if name.startswith("stablehlo."):
        raise UnsupportedError(f"{imp._where()}: {name} has no hlo counterpart yet")
    if name.startswith(NEWER_DIALECT + "."):  # (read past jaxlib's parser: interop.stablehlo.parse)
        raise UnsupportedError(f"{imp._where()}: stablehlo.{name[len(NEWER_DIALECT) + 1:]} is neither an op of "
                               f"jaxlib's StableHLO (its parser is older than the current spec) nor one this "
                               f"importer converts")
    raise UnsupportedError(f"{imp._where()}: {name} is not supported")


def hlo_op_class(imp: Importer, name: str) -> type | None:
    """The hlo op class named ``name`` (``"hlo.add"``), or None: the one place the importer finds an op class
    by a name it read -- the generic rule's ``stablehlo.X`` -> ``hlo.X`` and the op named by an exporter marker
    (``hlo.original_op``). Every other rule names the class it builds (``ConstantOp``)."""
    return imp.ops_by_name.get(name)


def generic_converter(imp: Importer, op, cls) -> list[SSAValue]:
    """``stablehlo.X`` -> ``hlo.X``: same operands, results, regions; attributes converted."""
    attrs = op.attributes
    if not len(attrs):  # most element-wise ops: nothing to convert, no exporter markers
        regions = imp.regions(op) if len(op.regions) else ()
        return imp.emit(cls, imp.operands(op), {}, regions, plain=True)
    props = imp.properties(op, cls, ATTRIBUTE_RENAMES.get(op.name))
    if BROADCAST_DIMENSIONS in attrs:  # interop.stablehlo.exporter's record of XLA implicit broadcasting
        props["broadcast_dimensions"] = imp.attribute(attrs[BROADCAST_DIMENSIONS])
    regions = imp.regions(op)
    segments = OPERAND_SEGMENTS.get(op.name)
    if segments is not None:
        props["operandSegmentSizes"] = DenseArrayBase.from_list(
            IntegerType(32), segments(len(op.operands), len(op.results)))
    return imp.emit(cls, imp.operands(op), props, regions)


_OPAQUE_CLASSES: dict[str, type] = {}


def opaque_op_class(name: str) -> type:
    """An xDSL unregistered-op class named ``name`` (one per name)."""
    from xdsl.dialects.builtin import UnregisteredOp

    cls = _OPAQUE_CLASSES.get(name)
    if cls is None:
        # Named like the op so that messages (op_context) and the exporter see its real name.
        cls = _OPAQUE_CLASSES[name] = type("OpaqueOp", (UnregisteredOp.with_name(name),),
                                           {"name": name, "has_trait": classmethod(_opaque_has_trait)})
    return cls


def _opaque_has_trait(cls, trait, *, value_if_unregistered: bool = True) -> bool:
    """xDSL assumes an unregistered op may have any trait, SymbolTable included: a symbol lookup from
    inside one (an ``hlo.call`` in a kept ``sdy.manual_computation`` body, i.e. a shard_map with a loop)
    then stops at it and misses the module's functions. None of the kept ops (shard_map bodies, unknown
    custom ops) defines symbols: for SymbolTable the answer is no, for other traits xDSL's default."""
    from xdsl.traits import SymbolTable

    if trait is SymbolTable or isinstance(trait, SymbolTable):
        return False
    return value_if_unregistered


def opaque_converter(imp: Importer, op) -> list[SSAValue]:
    """Keep an op without hlo counterpart as an unregistered op (``allow_unknown=True``).

    Its attributes become properties (dimension-number structs one per field,
    as for hlo ops), so that :mod:`interop.stablehlo.exporter` writes it back unchanged;
    the NumPy executor reports it as an op it has no kernel for.
    """
    props: dict[str, Attribute] = {}
    attrs = op.attributes
    for i in range(len(attrs)):
        name = attrs[i].name
        if name.startswith(("hlo.", "mhlo.", "sdy.", "jax.")):
            continue
        try:
            value = imp.attribute(attrs[name])
        except TypeError:
            raise UnsupportedError(f"{imp._where()}: attribute {name} is not supported") from None
        if isinstance(value, dict):
            props.update(value)
        else:
            props[name] = value
    regions = imp.regions(op)
    cls = opaque_op_class(op.name)
    result_types = imp.result_types(op)
    attributes = dict(imp._loc_attributes(op))
    new = cls.create(operands=imp.operands(op), result_types=result_types, properties=props,
                     attributes=attributes, regions=regions)
    imp._ops.append(new)
    return new.results


OPERAND_SEGMENTS: dict[str, Callable[[int, int], list[int]]] = {}
"""StableHLO op -> ``fn(num_operands, num_results)`` giving the operand group
sizes, for hlo ops with several variadic operand groups."""


def chlo_through_xla(imp: Importer, op) -> list[SSAValue]:
    """Convert a chlo op without a converter of its own through XLA's expansion of it.

    With ``allow_unknown`` an op XLA cannot expand (or whose expansion has no
    hlo form) is kept as an opaque op instead of raising.
    """
    where = imp._where()
    start = len(imp._ops)
    try:
        return imp.inline_expansion(legalize_chlo_op(op), imp.operands(op))
    except (UnsupportedError, MlirParseError) as e:
        # Take back what the expansion emitted before it failed.
        for partial in reversed(imp._ops[start:]):
            partial.drop_all_references()
        del imp._ops[start:]
        if imp.allow_unknown:
            return opaque_converter(imp, op)
        raise UnsupportedError(f"{where} (expanded through XLA): {e}") from None
