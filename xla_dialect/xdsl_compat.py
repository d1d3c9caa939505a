"""Every use of xDSL's private internals, each beside a path through xDSL's public API.

The importers and passes build, link and inspect tens of thousands of ops;
xDSL's general API does bookkeeping there that fresh ops do not need. The
shortcuts below read or write xDSL's private fields (``Operation._operands``,
``Block._first_op``, ``SSAValue._type``, the closures of
``op_type_rewrite_pattern`` and of IRDL's ``verify_``). No other module of the
project touches them (``tests/test_structure.py`` checks).

Each shortcut is checked once, on import, against what xDSL's public API does
on a small probe (the same objects, fields, links, answers); where the check
fails -- another xDSL release laid its objects out differently -- that
shortcut is replaced by its public path for the life of the process. A new
xDSL release can thus make the importers and passes slower, never wrong.
``XLA_DIALECT_XDSL_PUBLIC_API=1`` in the environment (read on import) takes
every public path, which the tests use to check that those paths give the same
results. One use has no public path: :func:`resume_after` (xDSL's parser
resumed after text scanned by hand); without it, parsing those syntaxes
raises an error naming the tested xDSL range (:data:`TESTED_XDSL`).

What each pair does (``FAST`` lists which shortcuts are in use):

* :func:`create_op` -- ``cls.create(...)`` (public) or the op assembled field by
  field as ``Operation.__init__`` and ``IRDLOperation.__post_init__`` would;
* :func:`link_ops` -- ``Block.add_ops`` / ``Block.insert_ops_before`` (public) or
  the ops spliced into the block's linked list for fresh ops without regions;
* :func:`retype_in_place` -- ``Rewriter.replace_value_with_new_type`` (public:
  a new value takes over every use) or the value's type slot written;
* :data:`operands_of`, :data:`successors_of` -- ``op.operands`` /
  ``op.successors`` (public views) or the tuples behind them;
* :func:`matched_op_types`, :func:`unwrapped_match` -- the op classes an
  ``op_type_rewrite_pattern`` method matches and the method without its class
  test, read from the decorator's closure (public: None, "any op", and the
  wrapped method: each op is offered every pattern, as xDSL's walker does);
* :func:`irdl_custom_verifiers` -- the op's own ``verify_`` methods that IRDL's
  generated ``verify_`` calls after the definition's checks, read from its
  closure (public: None, unknown: the caller verifies such ops in full);
* :func:`resume_after` -- ``GenericParser._resume_from`` (no public path).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from operator import attrgetter
from types import UnionType
from typing import Union, get_args, get_origin

from xdsl.dialects.builtin import UNKNOWN_LOC
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.core import OpResult, SSAValues, Use
from xdsl.rewriter import Rewriter

PUBLIC_API_ONLY = os.environ.get("XLA_DIALECT_XDSL_PUBLIC_API", "") not in ("", "0")
"""Every shortcut off (``XLA_DIALECT_XDSL_PUBLIC_API=1``): xDSL's public API only."""

FAST: dict[str, bool] = {}
"""Shortcut name -> whether it passed its check and is in use (filled on import)."""

_MISSING = object()


# --- building ops ----------------------------------------------------------------------------------------

_DEFAULTS: dict[type, tuple[tuple, tuple] | None] = {}
"""Op class -> (default properties, default attributes) IRDL's ``__post_init__`` fills in (None: not IRDL)."""


def _defaults(cls: type[Operation]):
    found = _DEFAULTS.get(cls, _MISSING)
    if found is _MISSING:
        from xdsl.irdl import OptionalDef

        try:
            op_def = cls.get_irdl_definition()
        except Exception:  # not an IRDL op: let xDSL build it
            op_def = None
        if op_def is None:  # (undecorated IRDL base classes answer None)
            found = None
        else:
            found = tuple(
                tuple((name, d.default_value) for name, d in defs.items()
                      if not isinstance(d, OptionalDef) and d.default_value is not None)
                for defs in (op_def.properties, op_def.attributes))
        _DEFAULTS[cls] = found
    return found


def _fast_create(cls, operands, result_types, properties, attributes, regions):
    defaults = _DEFAULTS.get(cls, _MISSING)
    if defaults is _MISSING:
        defaults = _defaults(cls)
    if defaults is None:
        return _public_create(cls, operands, result_types, properties, attributes, regions)
    op = cls.__new__(cls)
    d = op.__dict__
    values = SSAValues(operands)
    uses = tuple([Use(op, i) for i in range(len(values))])
    for value, use in zip(values, uses):
        value.add_use(use)
    d["_operands"] = values
    d["_operand_uses"] = uses
    d["results"] = SSAValues([OpResult(t, op, i) for i, t in enumerate(result_types)])
    d["properties"] = props = dict(properties)
    d["attributes"] = attrs = dict(attributes)
    d["location"] = UNKNOWN_LOC
    d["_successors"] = ()
    d["_successor_uses"] = ()
    d["regions"] = ()
    for name, value in defaults[0]:  # IRDLOperation.__post_init__, in its order
        if name not in props:
            props[name] = value
    for name, value in defaults[1]:
        if name not in attrs:
            attrs[name] = value
    for region in regions:
        op.add_region(region)
    return op


def _public_create(cls, operands, result_types, properties, attributes, regions):
    return cls.create(operands=operands, result_types=result_types, properties=dict(properties),
                      attributes=dict(attributes), regions=list(regions))


def create_op(cls: type[Operation], operands: Sequence[SSAValue], result_types: Sequence[Attribute],
              properties: dict, attributes: dict, regions: Sequence[Region] = ()) -> Operation:
    """``cls.create(operands=..., result_types=..., properties=..., attributes=..., regions=...)``
    (the dictionaries are copied, never kept)."""
    return _create(cls, operands, result_types, properties, attributes, regions)


# --- linking ops into blocks -----------------------------------------------------------------------------

def _fast_link(block: Block, ops: Sequence[Operation], before: Operation | None) -> None:
    if not ops:
        return
    prev = before._prev_op if before is not None else block._last_op
    for op in ops:
        op.parent = block
        op._prev_op = prev
        if prev is None:
            block._first_op = op
        else:
            prev._next_op = op
        prev = op
    prev._next_op = before
    if before is None:
        block._last_op = prev
    else:
        before._prev_op = prev


def _public_link(block: Block, ops: Sequence[Operation], before: Operation | None) -> None:
    if before is None:
        block.add_ops(ops)
    else:
        block.insert_ops_before(ops, before)


def link_ops(block: Block, ops: Sequence[Operation], before: Operation | None = None) -> None:
    """``block.add_ops(ops)`` (``before`` None) or ``block.insert_ops_before(ops, before)``.

    For fresh ops only: without a parent, none holding ``block`` (an op just
    built), ``before`` (if any) in ``block``; the caller makes sure (xDSL's own
    methods check it, the shortcut does not)."""
    _link(block, ops, before)


# --- value types, operands, successors -------------------------------------------------------------------

def _fast_retype(value: SSAValue, new_type: Attribute) -> SSAValue:
    value._type = new_type
    return value


def _public_retype(value: SSAValue, new_type: Attribute) -> SSAValue:
    return Rewriter.replace_value_with_new_type(value, new_type)


def retype_in_place(value: SSAValue, new_type: Attribute) -> SSAValue:
    """Give ``value`` the type ``new_type``; return the value now carrying it: ``value`` itself
    (shortcut) or the new value that took over its uses (``Rewriter.replace_value_with_new_type``)."""
    return _retype(value, new_type)


def retypes_in_place() -> bool:
    """Whether :func:`retype_in_place` keeps the value (callers may then retype while sharing values)."""
    return _retype is _fast_retype


# --- patterns and verifiers ------------------------------------------------------------------------------

def _closure_match(pattern) -> tuple[tuple[type, ...], object] | None:
    """(op classes, undecorated method) read from ``op_type_rewrite_pattern``'s closure, or None."""
    method = type(pattern).match_and_rewrite
    types, inner = None, None
    for cell in getattr(method, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, type) and issubclass(value, Operation):
            types = (value,)
        elif get_origin(value) in (Union, UnionType):
            args = get_args(value)
            if args and all(isinstance(a, type) and issubclass(a, Operation) for a in args):
                types = args
        elif callable(value) and getattr(value, "__name__", None) == "match_and_rewrite":
            inner = value
    return (types, inner) if types is not None and inner is not None else None


def matched_op_types(pattern) -> tuple[type, ...] | None:
    """The op classes an ``op_type_rewrite_pattern`` pattern can match (None: any op, or not known).

    The rules of :mod:`passes.patterns` declare theirs (an ``op_types`` attribute on the pattern)."""
    if "op_types" in getattr(pattern, "__dict__", ()):
        return pattern.op_types
    if not FAST.get("pattern_closures"):
        return None
    found = _closure_match(pattern)
    return found[0] if found is not None else None


def unwrapped_match(pattern):
    """``pattern.match_and_rewrite`` without the class test ``op_type_rewrite_pattern`` wraps around
    it, when :func:`matched_op_types` knows its classes (the caller offers it only those); else as is."""
    dispatched = getattr(pattern, "match_and_rewrite_dispatched", None)
    if dispatched is not None:  # (the rules of passes.patterns: their class test is the applier's dispatch)
        return dispatched
    if FAST.get("pattern_closures") and "op_types" not in getattr(pattern, "__dict__", ()):
        found = _closure_match(pattern)
        if found is not None:
            return found[1].__get__(pattern)
    return pattern.match_and_rewrite


def _closure_verifiers(fn) -> tuple | None:
    """The custom verifiers IRDL's generated ``verify_`` ``fn`` calls after ``op_def.verify``, unwrapped
    through the generated ``verify_`` of IRDL base classes; None when ``fn`` is not such a wrapper."""
    from xdsl.irdl import OpDef

    if getattr(fn, "__qualname__", "").split(".")[-1] != "verify_" or "irdl" not in (fn.__module__ or ""):
        return None
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:
            return None
    defs = [c for c in cells if isinstance(c, OpDef)]
    customs = [c for c in cells if not isinstance(c, OpDef)]
    if len(defs) != 1 or len(customs) > 1 or not all(callable(c) and not isinstance(c, type) for c in customs):
        return None
    if not customs:
        return ()
    inner = _closure_verifiers(customs[0])
    return (customs[0],) if inner is None else inner


def irdl_custom_verifiers(cls: type[Operation]) -> tuple | None:
    """The class's own ``verify_`` functions that ``cls.verify_`` runs after the IRDL definition's
    checks (``()``: none), None when not known (not an IRDL op, or the shortcut is off)."""
    if not FAST.get("verifier_closures"):
        return None
    try:
        return _closure_verifiers(cls.verify_)
    except Exception:
        return None


# --- resuming xDSL's parser after text scanned by hand -----------------------------------------------------

TESTED_XDSL = ">=0.74,<0.76"
"""The xDSL versions this dialect was tested with (kept equal to pyproject.toml's pin)."""


def resume_after(parser, position: int) -> None:
    """Make xDSL's ``parser`` continue at character ``position`` of its input, after text the dialect scanned
    by hand: XLA's layout notation (``{1,0:T(8,128)(2,1)}``), quantized types (``i8<-127:127>``) and large
    dense literals are not MLIR's tokens, and a literal of millions of numbers scans an order of magnitude
    faster as text than token by token (:mod:`xla_dialect.layout`, :mod:`xla_dialect.quant`,
    :mod:`xla_dialect.literal`). xDSL has no public call for that, only
    ``GenericParser._resume_from``: where it is missing or behaves otherwise (checked on import), this raises
    an error naming the xDSL range the dialect was tested with -- the one shortcut without a public path."""
    if not FAST.get("resume"):
        import xdsl

        from .errors import XlaError

        raise XlaError(f"this xDSL ({getattr(xdsl, '__version__', 'unknown version')}) cannot resume parsing "
                       f"after a scanned attribute; xla_dialect is tested with xdsl{TESTED_XDSL}")
    parser._resume_from(position)


# --- the checks ------------------------------------------------------------------------------------------

_PROBES: list = []


def _probe_ops():
    """Three small IRDL ops (variadic operands, results and regions, a property with a default, an optional
    one) the checks build with both paths: defined here, so that the checks need nothing of the dialect."""
    if not _PROBES:
        from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
        from xdsl.irdl import (IRDLOperation, irdl_op_definition, opt_prop_def, prop_def, var_operand_def,
                               var_region_def, var_result_def)

        @irdl_op_definition
        class ProbeA(IRDLOperation):
            name = "xdsl_compat.a"
            args = var_operand_def()
            outs = var_result_def()
            body = var_region_def()
            flag = prop_def(IntegerAttr, default_value=IntegerAttr(0, i64))
            note = opt_prop_def(StringAttr)

        @irdl_op_definition
        class ProbeB(IRDLOperation):
            name = "xdsl_compat.b"
            args = var_operand_def()
            outs = var_result_def()

        @irdl_op_definition
        class ProbeC(IRDLOperation):
            name = "xdsl_compat.c"
            args = var_operand_def()
            outs = var_result_def()

        _PROBES.extend((ProbeA, ProbeB, ProbeC))
    return _PROBES


def _fields(op: Operation) -> dict:
    # linkage fields left at their class default None may be unset
    return {k: v for k, v in vars(op).items() if not (k in ("_prev_op", "_next_op") and v is None)}


def _create_matches() -> bool:
    """Whether :func:`_fast_create` builds the objects ``create`` builds (fields, their order, uses)."""
    from xdsl.dialects.builtin import IntegerAttr, StringAttr, TensorType, f32, i64

    A, B, _ = _probe_ops()
    t = TensorType(f32, [2])
    made = []
    for create in (_public_create, _fast_create):
        block = Block(arg_types=[t, t])
        a = create(A, block.args, [t], {"note": StringAttr("n")}, {"loc": StringAttr("x")}, ())
        b = create(B, [a.results[0], block.args[0]], [t, t], {}, {}, ())
        regions = [Region(Block([B.create()], arg_types=[t])) for _ in range(2)]
        w = create(A, [b.results[1]], [t], {"flag": IntegerAttr(3, i64)}, {}, regions)
        made.append((block, (a, b, w)))
    (block0, ops0), (block1, ops1) = made
    for x, y in zip(ops0, ops1):
        fx, fy = _fields(x), _fields(y)
        if (type(x) is not type(y) or fx.keys() != fy.keys() or list(x.properties.items()) != list(y.properties.items())
                or list(x.attributes.items()) != list(y.attributes.items()) or x.location != y.location
                or [r.type for r in x.results] != [r.type for r in y.results] or not all(r.op is y for r in y.results)
                or len(x.regions) != len(y.regions) or not all(r.parent is y for r in y.regions)
                or list(x.successors) != list(y.successors)):
            return False

    def uses(block, ops):  # every value's uses, as (op number, operand number), in xDSL's order
        values = [*block.args, *(r for op in ops for r in op.results)]
        return [[(ops.index(u.operation), u.index) for u in v.uses] for v in values]

    return (uses(block0, ops0) == uses(block1, ops1) == [[(1, 1), (0, 0)], [(0, 1)], [(1, 0)], [], [(2, 0)], []]
            and ops1[0].properties["flag"] == IntegerAttr(0, i64) and ops1[2].flag == IntegerAttr(3, i64))


def _link_matches() -> bool:
    """Whether :func:`_fast_link` links ops exactly as ``add_ops`` / ``insert_ops_before`` do."""
    _, B, _ = _probe_ops()

    def build(link) -> list[int] | None:
        ops = [B.create() for _ in range(7)]
        block = Block()
        link(block, ops[:2], None)
        for new, before in ((ops[2:4], ops[1]), (ops[4:5], ops[0]), (ops[5:7], None)):
            link(block, new, before)
        order = list(block.ops)  # forward links
        backward, op = [], block.last_op
        while op is not None:
            backward.append(op)
            op = op.prev_op
        consistent = (backward[::-1] == order and block.first_op is order[0] and block.last_op is order[-1]
                      and all(op.parent is block for op in order) and order[0].prev_op is None
                      and order[-1].next_op is None)
        return [ops.index(op) for op in order] if consistent else None

    reference = build(_public_link)
    return reference is not None and build(_fast_link) == reference


def _retype_matches() -> bool:
    """Whether writing the type slot changes what ``value.type`` reads and nothing else."""
    from xdsl.dialects.builtin import i32, i64

    _, B, _ = _probe_ops()
    block = Block(arg_types=[i32])
    arg = block.args[0]
    op = B.create(operands=[arg, arg], result_types=[i32])
    same = _fast_retype(arg, i64)
    res = _fast_retype(op.results[0], i64)
    return (same is arg and arg.type is i64 and res.type is i64 and op.results[0] is res
            and [u.operation for u in arg.uses] == [op, op] and op.operands[0] is arg)


def _accessors_match() -> bool:
    """Whether ``op._operands`` / ``op._successors`` are tuples holding what ``op.operands`` /
    ``op.successors`` show."""
    from xdsl.dialects.builtin import i32

    _, B, _ = _probe_ops()
    block = Block(arg_types=[i32, i32])
    op = B.create(operands=block.args, result_types=[i32])
    fast_operands, fast_successors = attrgetter("_operands")(op), attrgetter("_successors")(op)
    return (isinstance(fast_operands, tuple) and list(fast_operands) == list(op.operands)
            and isinstance(fast_successors, tuple) and list(fast_successors) == list(op.successors) == [])


def _pattern_closures_match() -> bool:
    """Whether the closure of ``op_type_rewrite_pattern`` shows its op classes and the method it wraps."""
    from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

    A, B, C = _probe_ops()
    seen = []

    def one(self, op, rewriter) -> None:
        seen.append(("one", op))

    def two(self, op, rewriter) -> None:
        seen.append(("two", op))

    one.__name__ = two.__name__ = "match_and_rewrite"
    one.__annotations__ = {"op": A, "rewriter": PatternRewriter, "return": None}
    two.__annotations__ = {"op": A | B, "rewriter": PatternRewriter, "return": None}
    One = type("One", (RewritePattern,), {"match_and_rewrite": op_type_rewrite_pattern(one)})
    Two = type("Two", (RewritePattern,), {"match_and_rewrite": op_type_rewrite_pattern(two)})
    p1, p2 = One(), Two()
    f1, f2 = _closure_match(p1), _closure_match(p2)
    if f1 is None or f2 is None or f1 != ((A,), one) or f2 != ((A, B), two):
        return False
    # the wrapper calls the method for its classes only (what dispatching on the classes replaces)
    ops = [cls.create() for cls in (A, B, C)]
    for p in (p1, p2):
        for op in ops:
            p.match_and_rewrite(op, None)
    return seen == [("one", ops[0]), ("two", ops[0]), ("two", ops[1])]


def _verifier_closures_match() -> bool:
    """Whether IRDL's generated ``verify_`` shows the custom verifier it calls (and calls it)."""
    from xdsl.irdl import IRDLOperation, irdl_op_definition

    calls = []

    class _Base(IRDLOperation):
        def verify_(self) -> None:
            calls.append("base")

    base_verify = _Base.__dict__["verify_"]

    @irdl_op_definition
    class _Plain(_Base):
        name = "xdsl_compat.plain"

    class _Own(_Base):
        name = "xdsl_compat.own"

        def verify_(self) -> None:
            calls.append("own")

    own_verify = _Own.__dict__["verify_"]
    _Own = irdl_op_definition(_Own)

    @irdl_op_definition
    class _Sub(_Own):  # a definition over a definition: the wrappers nest
        name = "xdsl_compat.sub"

    if _Own.verify_ is own_verify or _Plain.verify_ is base_verify:
        return False  # no wrapper: IRDL's checks would not run before ours (then the layout changed)
    found = [_closure_verifiers(c.verify_) for c in (_Plain, _Own, _Sub)]
    for cls in (_Plain, _Own, _Sub):
        cls.create().verify_()
    return found == [(base_verify,), (own_verify,), (own_verify,)] and calls == ["base", "own", "own"]


def _resume_matches() -> bool:
    """Whether ``_resume_from`` moves the parser to a character position (the next token read from there)."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import i64
    from xdsl.parser import Parser

    parser = Parser(Context(), "i32 , i64")
    parser._resume_from(6)
    return parser.parse_type() == i64


def _check(name: str, check) -> bool:
    if PUBLIC_API_ONLY:
        ok = False
    else:
        try:
            ok = bool(check())
        except Exception:  # another xDSL release
            ok = False
    FAST[name] = ok
    return ok


_create = _fast_create if _check("create", _create_matches) else _public_create
_link = _fast_link if _check("link", _link_matches) else _public_link
_retype = _fast_retype if _check("retype", _retype_matches) else _public_retype
if _check("accessors", _accessors_match):
    operands_of = attrgetter("_operands")
    successors_of = attrgetter("_successors")
else:
    operands_of = attrgetter("operands")
    successors_of = attrgetter("successors")
_check("pattern_closures", _pattern_closures_match)
_check("verifier_closures", _verifier_closures_match)
try:  # (no public path: used under XLA_DIALECT_XDSL_PUBLIC_API too)
    FAST["resume"] = bool(_resume_matches())
except Exception:  # another xDSL release
    FAST["resume"] = False
