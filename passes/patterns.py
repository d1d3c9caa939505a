"""An HLO pattern language: matchers with captures, declarative rules, and passes made of rules.

In the spirit of XLA's pattern matcher (``m::Multiply(m::Op(&x), m::ConstantScalar(2))``) and MLIR's DRR/PDLL::

    from passes.patterns import m, rule, rule_pass

    rule_pass("multiply-by-two",
              rule(m.Multiply("x", m.ConstantScalar(2)), lambda b, x: b.add(x, x)))

``passes.run(module, "multiply-by-two,dce")`` then rewrites ``x * 2.0`` as JAX writes it (a multiply by a
``broadcast_in_dim`` of a scalar constant) into ``x + x``.

Matchers (all in the namespace :data:`m`) match an SSA value; an op matcher matches the op defining it:

* ``m.Add(a, b)``, ``m.Multiply(...)``, ``m.Exp(x)``, ... one per hlo op (the mnemonic in CamelCase:
  ``m.BroadcastInDim``, ``m.DotGeneral``; XLA's short names ``Exp``, ``Sub``, ``Mul``, ``Div``, ``Max``,
  ``Min``, ``Neg``, ``Pow`` too), or ``m.Op(OpClass | "hlo.name" | None, ...)``. Operands are matchers; a
  string ``"x"`` is ``m.Any("x")``: any value, captured as ``x`` (the same name twice must be the same value).
  With operands given, the op must have exactly that many. ``any_order=True`` also tries the two operands
  swapped (XLA's ``AddAnyOrder``). Keyword arguments constrain properties: ``m.Transpose("x",
  permutation=(1, 0))``, or a predicate ``permutation=lambda p: ...`` (integer arrays are given as tuples,
  strings as ``str``).
* ``m.ConstantScalar(2)``: a constant whose elements all equal 2 (a number, a predicate on the 0-d NumPy
  array, or None for any splat), also seen through ``broadcast_in_dim`` and ``hlo.broadcast`` (what JAX emits
  for ``x * 2.0``) and through value-preserving ``convert``s (``through=`` narrows this); ``name=`` captures
  the scalar as a 0-d array. ``m.Constant(name=...)`` captures a whole constant array.
* ``m.Parameter()`` a function argument; ``m.AnyOf(p, q)`` (or ``p | q``) the first that matches.
* Refinements, on every matcher: ``.bind("name")`` (capture the value), ``.with_shape((4, None))``,
  ``.with_rank(2)``, ``.with_dtype("f32", "bf16")``, ``.with_layout((1, 0))`` (minor-to-major; ``None``: no
  layout), ``.one_use()``, ``.where(predicate)`` (on the op for op matchers, on the value otherwise).

A :func:`rule` joins a pattern (an op matcher: the root), a replacement and an optional condition. The
replacement is a capture name (forward that value; the rule applies only when its type equals the root's
result type exactly, layouts included) or a function ``(b, **captures)`` building the new value with ``b``,
an :class:`~xla_dialect.XlaBuilder` whose ops go right before the matched op (``b.add``, ``b.mul``,
``b.constant``, and :meth:`RewriteBuilder.splat`, :meth:`RewriteBuilder.create`); returning None declines.
Functions (replacement and ``when``) receive the captures they name, plus ``op`` (the matched op) and
``options`` (the pass instance, for its options). A set of rules becomes a pass with :func:`rule_pass` or a
:class:`RulePass` subclass (options as dataclass fields); each run reports how often each rule fired
(``xla-opt --report``, ``passes.run(...).report(name)``).
"""

from __future__ import annotations

import difflib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, BoolAttr, DenseArrayBase, FloatAttr, IntegerAttr, StringAttr, TensorType
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from xla_dialect.builder import XlaBuilder, XlaOp
from xla_dialect.errors import BuilderError, HloVerifyError, PassError
from xla_dialect.layout import Layout, layout_of
from xla_dialect.ops import ALL_OPS
from xla_dialect.ops import conversion as cv
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.types import numpy_dtype

from .base import PatternPass, emit_report
from .purity import is_pure
from .quantized import computes_on_quantized
from .registry import register_pass
from .util import create, element_name, i64s, make_constant, tensor_type

__all__ = ["m", "Match", "Pattern", "OpPattern", "PatternError", "Rule", "RulePass", "RuleReport", "RewriteBuilder",
           "rule", "rule_pass", "constant_scalar", "constant_value"]


class PatternError(PassError):
    """A pattern or rule is malformed (unknown op name, a function asking for a capture the pattern does not
    make, a replacement of the wrong kind); the message says which and what is available."""


# ----------------------------------------------------------------------------
# Constants as the matchers see them
# ----------------------------------------------------------------------------

BROADCASTS = (dm.BroadcastInDimOp, dm.BroadcastOp)
"""Ops that copy a splat constant's value to more elements (``through="broadcast"``)."""


def _exact_convert(source: np.ndarray, dtype) -> np.ndarray | None:
    """``source`` converted to ``dtype`` when the conversion changes no value (every element converts back to
    itself, NaNs included), else None."""
    if source.dtype.kind not in "biufcV":
        return None
    with np.errstate(all="ignore"):
        try:
            converted = source.astype(dtype)
            back = converted.astype(source.dtype)
        except (TypeError, ValueError):
            return None
        if back.tobytes() == source.tobytes():
            return converted
        if source.dtype.kind in "fcV" and np.array_equal(back, source, equal_nan=True):
            return converted
    return None


def constant_scalar(value: SSAValue, through: Sequence[str] = ("broadcast", "convert")) -> np.ndarray | None:
    """The 0-d array every element of ``value`` equals bit for bit when ``value`` is a constant (an
    ``hlo.constant`` splat; with ``"broadcast"`` in ``through`` also a broadcast of one; with ``"convert"``
    also a ``convert`` of one that changes no value, in the converted type), else None."""
    owner = value.owner
    if type(owner) is ConstantOp:
        return owner.splat_value()
    if isinstance(owner, BROADCASTS) and "broadcast" in through:
        return constant_scalar(owner.operands[0], through)
    if isinstance(owner, cv.ConvertOp) and "convert" in through and not computes_on_quantized(owner):
        scalar = constant_scalar(owner.operands[0], through)
        if scalar is None:
            return None
        try:
            dtype = numpy_dtype(value.type)
        except Exception:  # noqa: BLE001 - element types without a NumPy dtype are not constants we can read
            return None
        return _exact_convert(scalar, dtype)
    return None


def constant_value(value: SSAValue, through: Sequence[str] = ("convert",)) -> np.ndarray | None:
    """The array of a constant ``value`` (``hlo.constant``, or with ``"convert"`` in ``through`` a value-preserving
    ``convert`` of one, in the converted type), else None."""
    owner = value.owner
    if type(owner) is ConstantOp:
        return owner.value.array
    if isinstance(owner, cv.ConvertOp) and "convert" in through and not computes_on_quantized(owner):
        array = constant_value(owner.operands[0], through)
        if array is None:
            return None
        try:
            return _exact_convert(array, numpy_dtype(value.type))
        except Exception:  # noqa: BLE001 - see constant_scalar
            return None
    return None


# ----------------------------------------------------------------------------
# Matchers
# ----------------------------------------------------------------------------


class Match(dict):
    """The captures of a successful match (name -> value or constant array); true even when empty, so that
    ``if pattern.matches(v):`` reads as it should."""

    def __bool__(self) -> bool:
        return True


def _bind(caps: dict, name: str, obj) -> bool:
    """Record capture ``name``; a name captured already must be the same value (arrays: the same bits)."""
    old = caps.get(name, _UNSET)
    if old is _UNSET:
        caps[name] = obj
        return True
    if isinstance(old, np.ndarray) and isinstance(obj, np.ndarray):
        return old.dtype == obj.dtype and old.shape == obj.shape and old.tobytes() == obj.tobytes()
    return old is obj


_UNSET = object()


def _restore(caps: dict, snapshot: dict) -> None:
    caps.clear()
    caps.update(snapshot)


class Pattern:
    """A matcher of SSA values (see the module docstring). Refinements return a new matcher."""

    _bound: str | None = None
    _checks: tuple = ()
    _descr: tuple = ()

    def _copy(self) -> Pattern:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    # -- matching ------------------------------------------------------------------------------------

    def match(self, value: SSAValue, caps: dict) -> bool:
        """Whether ``value`` matches; captures go into ``caps`` (partly filled on failure: callers that try
        alternatives restore it)."""
        if not self._match(value, caps):
            return False
        for check in self._checks:
            if not check(value):
                return False
        return self._bound is None or _bind(caps, self._bound, value)

    def _match(self, value: SSAValue, caps: dict) -> bool:
        raise NotImplementedError

    def captures(self) -> set[str]:
        """The names this matcher may capture."""
        return {self._bound} if self._bound else set()

    def matches(self, value: SSAValue | XlaOp) -> Match | None:
        """The captures when ``value`` matches (a :class:`Match`, true even without captures), else None: for
        tests, conditions and trying a pattern out."""
        caps = Match()
        value = value.value if isinstance(value, XlaOp) else value
        return caps if self.match(value, caps) else None

    # -- refinements ---------------------------------------------------------------------------------

    def _refined(self, check, descr: str) -> Pattern:
        new = self._copy()
        new._checks = (*self._checks, check)
        new._descr = (*self._descr, descr)
        return new

    def bind(self, name: str) -> Pattern:
        """Capture the matched value as ``name``."""
        if not isinstance(name, str) or not name.isidentifier():
            raise PatternError(f"bind: a capture name must be a Python identifier, got {name!r}")
        new = self._copy()
        new._bound = name
        return new

    def where(self, predicate: Callable[[object], bool]) -> Pattern:
        """Also require ``predicate(value)`` (op matchers: ``predicate(op)``)."""
        return self._refined(lambda v: bool(predicate(v)), f"where({getattr(predicate, '__name__', '?')})")

    def with_shape(self, shape: Sequence[int | None]) -> Pattern:
        """Require an array of this shape (``None``: any size in that dimension)."""
        want = tuple(shape)

        def check(v):
            t = v.type
            if not isinstance(t, TensorType):
                return False
            got = t.get_shape()
            return len(got) == len(want) and all(w is None or w == g for w, g in zip(want, got))

        return self._value_refined(check, f"with_shape({list(want)})")

    def with_rank(self, rank: int) -> Pattern:
        """Require an array of ``rank`` dimensions."""
        return self._value_refined(lambda v: isinstance(v.type, TensorType) and v.type.get_num_dims() == rank,
                                   f"with_rank({rank})")

    def with_dtype(self, *names: str) -> Pattern:
        """Require one of these element types (XLA names: ``f32``, ``bf16``, ``s32``, ``pred``...)."""
        wanted = frozenset(names)
        return self._value_refined(lambda v: element_name(v) in wanted, f"with_dtype({', '.join(names)})")

    def with_layout(self, minor_to_major: Sequence[int] | Layout | None) -> Pattern:
        """Require this layout (minor-to-major dimension order, or a :class:`~xla_dialect.layout.Layout`;
        None: no layout attached)."""
        if minor_to_major is None:
            return self._value_refined(lambda v: layout_of(v.type) is None, "with_layout(None)")
        want = minor_to_major.minor_to_major if isinstance(minor_to_major, Layout) else tuple(minor_to_major)

        def check(v):
            layout = layout_of(v.type)
            return layout is not None and tuple(layout.minor_to_major) == want

        return self._value_refined(check, f"with_layout({list(want)})")

    def one_use(self) -> Pattern:
        """Require a value with exactly one use (XLA's ``WithOneUse``)."""
        return self._value_refined(lambda v: v.has_one_use(), "one_use()")

    def _value_refined(self, check, descr: str) -> Pattern:
        return self._refined(check, descr)

    def __or__(self, other: Pattern | str) -> Pattern:
        return AnyOf(self, other)

    def __repr__(self) -> str:
        text = self._repr()
        for d in self._descr:
            text += "." + d
        return text + (f".bind({self._bound!r})" if self._bound else "")

    def _repr(self) -> str:
        return type(self).__name__


def as_pattern(p: Pattern | str) -> Pattern:
    """``p`` itself, or ``m.Any(p)`` for a capture name."""
    if isinstance(p, Pattern):
        return p
    if isinstance(p, str):
        return Any(p)
    raise PatternError(f"expected a matcher or a capture name, got {p!r}")


class Any(Pattern):
    """Any value; with a name, captured (XLA's ``m::Op(&x)``)."""

    def __init__(self, name: str | None = None):
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise PatternError(f"m.Any: a capture name must be a Python identifier, got {name!r}")
        self._bound = name

    def _match(self, value, caps) -> bool:
        return True

    def __repr__(self) -> str:
        text = self._bound or "_"
        for d in self._descr:
            text += "." + d
        return text


class Parameter(Pattern):
    """An argument of a function or region (not computed by an op)."""

    def _match(self, value, caps) -> bool:
        return isinstance(value, BlockArgument)


class AnyOf(Pattern):
    """The first of several matchers that matches (captures of the others are dropped)."""

    def __init__(self, *alternatives: Pattern | str):
        if not alternatives:
            raise PatternError("m.AnyOf needs at least one matcher")
        self.alternatives = tuple(as_pattern(a) for a in alternatives)

    def _match(self, value, caps) -> bool:
        snapshot = dict(caps)
        for alternative in self.alternatives:
            if alternative.match(value, caps):
                return True
            _restore(caps, snapshot)
        return False

    def captures(self) -> set[str]:
        """The names this matcher may capture."""
        return set().union(*(a.captures() for a in self.alternatives)) | super().captures()

    def op_types(self) -> tuple[type, ...] | None:
        """The op classes the alternatives may match at the root (None: any)."""
        found: list[type] = []
        for a in self.alternatives:
            types = getattr(a, "op_types", lambda: None)()
            if types is None:
                return None
            found.extend(types)
        return tuple(found)

    def match_root(self, op: Operation, caps: dict, class_checked: bool = False) -> bool:
        """Root matching: the first alternative matching ``op`` (then this matcher's refinements, on the op's
        first result)."""
        snapshot = dict(caps)
        for alternative in self.alternatives:
            if isinstance(alternative, (OpPattern, AnyOf)) and alternative.match_root(op, caps):
                return _root_refinements(self, op, caps)
            _restore(caps, snapshot)
        return False

    def _repr(self) -> str:
        return "AnyOf(" + ", ".join(map(repr, self.alternatives)) + ")"


class ConstantScalar(Pattern):
    """A constant whose every element equals ``value`` (see :func:`constant_scalar`); ``name`` captures the
    0-d array."""

    def __init__(self, value: object = None, *, name: str | None = None,
                 through: Sequence[str] = ("broadcast", "convert")):
        unknown = set(through) - {"broadcast", "convert"}
        if unknown:
            raise PatternError(f"m.ConstantScalar: through= takes 'broadcast' and 'convert', got {sorted(unknown)}")
        self.value = value
        self.name = name
        self.through = tuple(through)

    def _match(self, value, caps) -> bool:
        scalar = constant_scalar(value, self.through)
        if scalar is None:
            return False
        want = self.value
        if want is not None:
            if callable(want):
                if not want(scalar):
                    return False
            else:
                with np.errstate(all="ignore"):
                    if not bool(scalar == want):
                        return False
        return self.name is None or _bind(caps, self.name, scalar)

    def captures(self) -> set[str]:
        """The names this matcher may capture."""
        return super().captures() | ({self.name} if self.name else set())

    def _repr(self) -> str:
        args = [] if self.value is None else [getattr(self.value, "__name__", repr(self.value))]
        if self.name:
            args.append(f"name={self.name!r}")
        return f"ConstantScalar({', '.join(args)})"


class Constant(Pattern):
    """A constant array (see :func:`constant_value`); ``name`` captures the array, ``value`` a predicate on it."""

    def __init__(self, value: Callable[[np.ndarray], bool] | None = None, *, name: str | None = None,
                 through: Sequence[str] = ("convert",)):
        self.value = value
        self.name = name
        self.through = tuple(through)

    def _match(self, value, caps) -> bool:
        array = constant_value(value, self.through)
        if array is None or (self.value is not None and not self.value(array)):
            return False
        return self.name is None or _bind(caps, self.name, array)

    def captures(self) -> set[str]:
        """The names this matcher may capture."""
        return super().captures() | ({self.name} if self.name else set())

    def _repr(self) -> str:
        return f"Constant(name={self.name!r})" if self.name else "Constant()"


def _python(attr):
    """A property value as rules compare it: integer arrays as tuples, strings, numbers, booleans."""
    if isinstance(attr, DenseArrayBase):
        return tuple(attr.get_values())
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, BoolAttr):
        return bool(attr.value.data)
    if isinstance(attr, (IntegerAttr, FloatAttr)):
        return attr.value.data
    if isinstance(attr, ArrayAttr):
        return tuple(_python(a) for a in attr.data)
    return attr


class OpPattern(Pattern):
    """A value defined by an op of given classes with matching operands and properties."""

    def __init__(self, types: tuple[type, ...] | None, operands: Sequence[Pattern | str] | None = None, *,
                 any_order: bool = False, label: str = "Op", **properties):
        self.types = types
        self.operands = None if operands is None else tuple(as_pattern(o) for o in operands)
        if any_order and (self.operands is None or len(self.operands) != 2):
            raise PatternError(f"m.{label}: any_order=True needs exactly two operand matchers")
        self.any_order = any_order
        self.label = label
        self.properties = tuple(properties.items())
        self._op_checks: tuple = ()

    def op_types(self) -> tuple[type, ...] | None:
        """The op classes this matcher matches (None: any)."""
        return self.types

    def where(self, predicate: Callable[[Operation], bool]) -> Pattern:
        """Also require ``predicate(op)``."""
        new = self._copy()
        new._op_checks = (*self._op_checks, predicate)
        new._descr = (*self._descr, f"where({getattr(predicate, '__name__', '?')})")
        return new

    def _match(self, value, caps) -> bool:
        owner = value.owner
        if not isinstance(owner, Operation):
            return False
        return self.match_op(owner, caps)

    def match_root(self, op: Operation, caps: dict, class_checked: bool = False) -> bool:
        """Whether ``op`` matches as the root of a rule (value refinements and ``bind`` apply to its first
        result). ``class_checked``: the caller dispatched on the op class already (the pass driver does)."""
        if not self.match_op(op, caps, class_checked):
            return False
        return _root_refinements(self, op, caps) if self._checks or self._bound else True

    def match_op(self, op: Operation, caps: dict, class_checked: bool = False) -> bool:
        """Whether ``op`` matches (its class, properties, operands and op predicates; not the refinements of
        the value, which :meth:`Pattern.match` and :meth:`match_root` check)."""
        if not class_checked and self.types is not None and not isinstance(op, self.types):
            return False
        for name, want in self.properties:
            got = op.properties.get(name)
            if got is None:
                got = op.attributes.get(name)
            got = None if got is None else _python(got)
            if callable(want):
                if not want(got):
                    return False
            elif got != (tuple(want) if isinstance(want, list) else want):
                return False
        operands = self.operands
        if operands is not None:
            values = op.operands
            if len(values) != len(operands):
                return False
            if self.any_order:
                snapshot = dict(caps)
                if not (operands[0].match(values[0], caps) and operands[1].match(values[1], caps)):
                    _restore(caps, snapshot)
                    if not (operands[0].match(values[1], caps) and operands[1].match(values[0], caps)):
                        return False
            else:
                for pattern, value in zip(operands, values):
                    if type(pattern) is Any and not pattern._checks:  # a plain capture (the common case)
                        name = pattern._bound
                        if name is not None and not _bind(caps, name, value):
                            return False
                    elif not pattern.match(value, caps):
                        return False
        for check in self._op_checks:
            if not check(op):
                return False
        return True

    def captures(self) -> set[str]:
        """The names this matcher may capture."""
        found = super().captures()
        for o in self.operands or ():
            found |= o.captures()
        return found

    def _repr(self) -> str:
        args = [repr(o) for o in self.operands] if self.operands is not None else ["..."]
        args += [f"{k}={getattr(v, '__name__', v)!r}" if callable(v) else f"{k}={v!r}" for k, v in self.properties]
        if self.any_order:
            args.append("any_order=True")
        return f"{self.label}({', '.join(args)})"


def _root_refinements(pattern: Pattern, op: Operation, caps: dict) -> bool:
    """The value refinements and the ``bind`` of a root matcher, on the op's first result."""
    if not op.results:
        return not pattern._checks and pattern._bound is None
    value = op.results[0]
    for check in pattern._checks:
        if not check(value):
            return False
    return pattern._bound is None or _bind(caps, pattern._bound, value)


def _camel(mnemonic: str) -> str:
    return "".join(part.capitalize() for part in mnemonic.split("_"))


_OP_CLASSES: dict[str, type] = {}
"""CamelCase name (and ``hlo.`` mnemonic) -> op class."""
for _cls in ALL_OPS:
    _OP_CLASSES[_camel(_cls.name.split(".", 1)[1])] = _cls
    _OP_CLASSES[_cls.name] = _cls
for _short, _long in {"Exp": "Exponential", "Sub": "Subtract", "Mul": "Multiply", "Div": "Divide", "Max": "Maximum",
                      "Min": "Minimum", "Neg": "Negate", "Pow": "Power", "Cos": "Cosine", "Sin": "Sine",
                      "Log1p": "LogPlusOne", "Expm1": "ExponentialMinusOne", "Rem": "Remainder"}.items():
    _OP_CLASSES[_short] = _OP_CLASSES[_long]


def _op_class(what) -> type:
    if isinstance(what, type) and issubclass(what, Operation):
        return what
    cls = _OP_CLASSES.get(what) if isinstance(what, str) else None
    if cls is None:
        close = difflib.get_close_matches(str(what), list(_OP_CLASSES), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise PatternError(f"no hlo op {what!r}{hint}; give an op class, an 'hlo.<mnemonic>' name or a CamelCase "
                           f"name such as 'Multiply'")
    return cls


class _Namespace:
    """The matcher namespace ``m``: ``m.Multiply(...)``, ``m.Any("x")``, ``m.ConstantScalar(2)``..."""

    Any = Any
    AnyOf = AnyOf
    ConstantScalar = ConstantScalar
    Constant = Constant
    Parameter = Parameter

    @staticmethod
    def Op(what: type | str | Sequence | None = None, *operands: Pattern | str, any_order: bool = False,
           **properties) -> OpPattern:
        """An op matcher for an op class, an ``hlo.<mnemonic>``/CamelCase name, a tuple of them, or None (any op)."""
        if what is None:
            types, label = None, "Op"
        elif isinstance(what, (tuple, list)):
            types = tuple(_op_class(w) for w in what)
            label = "Op[" + "|".join(t.name for t in types) + "]"
        else:
            types = (_op_class(what),)
            label = _camel(types[0].name.split(".", 1)[1])
        return OpPattern(types, operands if operands else None, any_order=any_order, label=label, **properties)

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in _OP_CLASSES:
            close = difflib.get_close_matches(name, [*_OP_CLASSES, "Any", "AnyOf", "ConstantScalar", "Constant",
                                                     "Parameter", "Op"], n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise AttributeError(f"m.{name}: no such matcher{hint}")
        cls = _OP_CLASSES[name]

        def matcher(*operands: Pattern | str, any_order: bool = False, **properties) -> OpPattern:
            return OpPattern((cls,), operands if operands else None, any_order=any_order, label=name, **properties)

        matcher.__name__ = name
        matcher.__doc__ = f"A value defined by ``{cls.name}`` (operand matchers, property constraints)."
        return matcher

    def __dir__(self):
        return sorted({*type(self).__dict__, *(k for k in _OP_CLASSES if not k.startswith("hlo."))})


m = _Namespace()
"""The matchers: ``m.Multiply("x", m.ConstantScalar(2))`` (see the module docstring)."""


# ----------------------------------------------------------------------------
# Replacements: a builder inserting before the matched op
# ----------------------------------------------------------------------------


class RewriteBuilder(XlaBuilder):
    """An :class:`~xla_dialect.XlaBuilder` whose ops are inserted right before the op a rule matched.

    Result types are inferred as the builder does; a result with the matched op's shape and element type
    takes the matched result's exact type (its layout), others get the default layout when the matched
    result carries one (so that rewritten programs keep verifying after ``assign-layouts``).
    """

    def __init__(self, name: str = "rewrite", *, default_layouts: bool = False, _parent=None, _arg_types=None):
        super().__init__(name, default_layouts=default_layouts, _parent=_parent, _arg_types=_arg_types)
        self._rewriter: PatternRewriter | None = None
        self._like = None
        self._loc = None
        self.keep_locations = True
        """New ops take the matched op's ``loc`` (source location), so that errors and
        ``check_semantics`` still point at the user's line."""
        self.created: list[Operation] = []

    def _retarget(self, rewriter: PatternRewriter, op: Operation) -> None:
        self._rewriter = rewriter
        self._like = op.results[0].type if op.results else None
        self._loc = op.attributes.get("loc") if self.keep_locations else None
        self.created = []

    def _result_type(self, t: Attribute) -> Attribute:
        like = self._like
        if not isinstance(t, TensorType) or not isinstance(like, TensorType):
            return t
        if t.element_type == like.element_type and t.get_shape() == like.get_shape():
            return like
        if layout_of(like) is not None and layout_of(t) is None:
            return tensor_type(t.element_type, t.get_shape(), Layout.default(t.get_num_dims()))
        return t

    def _emit(self, op_cls, operands: Sequence = (), properties: dict | None = None, regions: Sequence = (),
              result_types: Sequence[Attribute] | None = None, attributes: dict | None = None) -> list[XlaOp]:
        if self._rewriter is None:  # a sub-computation's builder (reduce bodies...): ops go into its block
            return super()._emit(op_cls, operands, properties, regions, result_types, attributes)
        values = [self._value(o, f"operand #{i}") for i, o in enumerate(operands)]
        props = {k: v for k, v in (properties or {}).items() if v is not None}
        try:
            types = op_cls.infer([v.type for v in values], props, list(regions), result_types)
        except HloVerifyError as e:
            raise BuilderError(f"{self._caller()}: {e}") from None
        types = [self._result_type(t) for t in types]
        op = create(op_cls, values, props, types, regions)
        if attributes:
            op.attributes.update(attributes)
        if self._loc is not None and "loc" not in op.attributes:
            op.attributes["loc"] = self._loc
        self._rewriter.insert(op)
        self.created.append(op)
        return [XlaOp(self, r) for r in op.results]

    def splat(self, value, like: SSAValue | XlaOp | TensorType) -> XlaOp:
        """``value`` in every element of an array of ``like``'s type (a value's or a type): a scalar constant
        (without layout) and a ``broadcast_in_dim`` to exactly that type, as JAX writes ``x * 2.0``; for a
        scalar ``like``, the constant alone."""
        t = like if isinstance(like, TensorType) else self._value(like, "like").type
        scalar = np.asarray(value, dtype=numpy_dtype(t)).reshape(())
        if not t.get_shape():
            return self._insert(make_constant(scalar, t))
        const = self._insert(make_constant(scalar, tensor_type(t.element_type, ())))
        return self._insert(create(dm.BroadcastInDimOp, [const.value], {"broadcast_dimensions": i64s(())}, [t]))

    def constant_of_type(self, array, result_type: TensorType) -> XlaOp:
        """An ``hlo.constant`` of exactly ``result_type`` (layout included) holding ``array``, broadcast to the
        type's shape (a scalar fills it)."""
        return self._insert(make_constant(np.broadcast_to(np.asarray(array), result_type.get_shape()), result_type))

    def _insert(self, op: Operation) -> XlaOp:
        if self._loc is not None and "loc" not in op.attributes:
            op.attributes["loc"] = self._loc
        self._rewriter.insert(op)
        self.created.append(op)
        return XlaOp(self, op.results[0])

    def create(self, op_cls: type | str, operands: Sequence, properties: dict | None = None,
               result_type: Attribute | None = None) -> XlaOp:
        """Any hlo op (class or ``hlo.<mnemonic>``) with these operands and properties (xDSL attributes); the
        result type is inferred unless given."""
        cls = _op_class(op_cls)
        if result_type is None:
            return self._emit(cls, operands, properties)[0]
        # A given result type is taken as is (no inference: the caller knows, e.g. a layout to keep).
        values = [self._value(o, f"operand #{i}") for i, o in enumerate(operands)]
        return self._insert(create(cls, values, properties or {}, [result_type]))

    # XLA's and StableHLO's op names next to the builder's short ones.
    def multiply(self, lhs, rhs) -> XlaOp:
        """``lhs * rhs``."""
        return self.mul(lhs, rhs)

    def subtract(self, lhs, rhs) -> XlaOp:
        """``lhs - rhs``."""
        return self.sub(lhs, rhs)

    def divide(self, lhs, rhs) -> XlaOp:
        """``lhs / rhs``."""
        return self.div(lhs, rhs)

    def negate(self, x) -> XlaOp:
        """``-x``."""
        return self.neg(x)

    def maximum(self, lhs, rhs) -> XlaOp:
        """``max(lhs, rhs)``."""
        return self.max(lhs, rhs)

    def minimum(self, lhs, rhs) -> XlaOp:
        """``min(lhs, rhs)``."""
        return self.min(lhs, rhs)


# ----------------------------------------------------------------------------
# Rules
# ----------------------------------------------------------------------------

SPECIAL_ARGUMENTS = ("op", "options")
"""Names a rule's functions may take besides the captures: the matched op, and the pass (its options)."""


def _arguments(fn: Callable, what: str, skip_first: bool, available: set[str], rule_name: str):
    """How to call ``fn``: the names it takes (after the builder with ``skip_first``) and whether it takes
    ``**kwargs`` (then all captures). Unknown names raise a PatternError now, not at the first match."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None, True
    if skip_first:
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise PatternError(f"rule {rule_name}: the replacement function takes the builder first "
                               f"(lambda b, x: b.add(x, x))")
        params = params[1:]
    names, rest = [], False
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            rest = True
        elif p.kind is p.VAR_POSITIONAL:
            continue
        elif p.name in available or p.name in SPECIAL_ARGUMENTS:
            names.append(p.name)
        elif p.default is p.empty:
            raise PatternError(f"rule {rule_name}: the {what} takes {p.name!r}, which the pattern does not capture "
                               f"(captures: {', '.join(sorted(available)) or 'none'}; also available: op, options)")
    return tuple(names), rest


@dataclass(frozen=True, eq=False)
class Rule:
    """A declarative rewrite: ``pattern`` (an op matcher, the root), ``replacement`` (a capture name or a
    function ``(b, **captures)``), an optional condition ``when(**captures)``. Build with :func:`rule`."""

    pattern: Pattern
    replacement: str | Callable
    when: Callable | None = None
    name: str = ""
    erase_dead_operands: bool | tuple = False
    """After a rewrite, erase the ops defining the matched op's operands that are left without uses (True: any
    pure op without regions; a tuple: only ops of these classes). Otherwise ``dce`` removes them."""
    keep_locations: bool = True
    """Ops the replacement builds take the matched op's ``loc``."""
    _calls: tuple = field(default=(), repr=False)

    def op_types(self) -> tuple[type, ...] | None:
        """The op classes the root may be (None: any op)."""
        return self.pattern.op_types()

    def pattern_for(self, pass_: object = None, report: RuleReport | None = None) -> RewritePattern:
        """This rule as an xDSL ``RewritePattern`` run by ``pass_`` (its ``options``), counting into ``report``."""
        return _RulePattern(self, pass_, report)

    def __call__(self) -> RewritePattern:
        """This rule as an xDSL ``RewritePattern``: a rule may stand in a ``PATTERNS`` table of a
        :class:`~passes.base.PatternPass`, which instantiates its entries by calling them."""
        return _RulePattern(self, None, None)


def rule(pattern: Pattern, replacement: str | Callable, when: Callable | None = None, *, name: str | None = None,
         erase_dead_operands: bool | tuple = False, keep_locations: bool = True) -> Rule:
    """A rewrite rule: where ``pattern`` matches (and ``when(**captures)`` holds), replace the matched op by
    ``replacement``: a capture name, or ``fn(b, **captures)`` returning the new value built with ``b`` (a
    :class:`RewriteBuilder`; None declines). Functions may also take ``op`` and ``options``."""
    if not isinstance(pattern, (OpPattern, AnyOf)):
        raise PatternError(f"rule: the pattern's root must be an op matcher (m.Multiply(...), m.Op(...)), "
                           f"got {pattern!r}")
    if isinstance(pattern, AnyOf) and not all(isinstance(a, (OpPattern, AnyOf)) for a in pattern.alternatives):
        raise PatternError(f"rule: every alternative of the root must be an op matcher, got {pattern!r}")
    label = name or f"{pattern!r} -> {replacement if isinstance(replacement, str) else _fn_name(replacement)}"
    available = pattern.captures()
    if isinstance(replacement, str):
        if replacement not in available:
            raise PatternError(f"rule {label}: the replacement {replacement!r} is not a capture of the pattern "
                               f"(captures: {', '.join(sorted(available)) or 'none'})")
        replace_call = None
    elif callable(replacement):
        replace_call = _arguments(replacement, "replacement", True, available, label)
    else:
        raise PatternError(f"rule {label}: the replacement must be a capture name or a function (b, **captures)")
    when_call = _arguments(when, "condition", False, available, label) if when is not None else None
    if when is not None and not callable(when):
        raise PatternError(f"rule {label}: when= must be a function of the captures")
    return Rule(pattern, replacement, when, label, erase_dead_operands, keep_locations, (replace_call, when_call))


def _fn_name(fn) -> str:
    name = getattr(fn, "__name__", "fn")
    return "<function>" if name == "<lambda>" else name


def _call(fn, spec, caps: dict, op: Operation, pass_, builder=None):
    names, rest = spec
    if names is None:  # no signature: everything by keyword
        kwargs = {**caps, "op": op, "options": pass_}
    elif not rest and len(names) == 1:  # the usual case, on the hot path: one capture, or the op
        n = names[0]
        kwargs = {n: op if n == "op" else pass_ if n == "options" and n not in caps else caps.get(n)}
    else:
        kwargs = {}
        for n in names:
            kwargs[n] = op if n == "op" else pass_ if n == "options" and n not in caps else caps.get(n)
        if rest:
            for n, v in caps.items():
                kwargs.setdefault(n, v)
    return fn(builder, **kwargs) if builder is not None else fn(**kwargs)


@dataclass
class RuleReport:
    """How often each rule of a :class:`RulePass` fired in one run (``xla-opt --report``)."""

    pass_name: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Rewrites made by all rules."""
        return sum(self.counts.values())

    def __str__(self) -> str:
        lines = [f"{self.pass_name}: {self.total} rewrites by its rules"]
        lines += [f"  {n:5d}  {name}" for name, n in self.counts.items()]
        return "\n".join(lines)


class _RulePattern(RewritePattern):
    """A :class:`Rule` run by the pass driver (which dispatches on :attr:`op_types`). A rule that misbehaves
    raises a plain exception, which the driver turns into a :class:`PassError` naming the pass and the op."""

    def __init__(self, rule: Rule, pass_: object, report: RuleReport | None):
        self.rule = rule
        self.pass_ = pass_
        self.report = report
        self.op_types = rule.op_types()
        self.class_checked = self.op_types is not None and isinstance(rule.pattern, OpPattern)
        self.builder: RewriteBuilder | None = None
        if report is not None:
            report.counts.setdefault(rule.name, 0)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        """Rewrite ``op`` if the rule applies (any op: the root's class is checked)."""
        self.rewrite(op, rewriter, False)

    def match_and_rewrite_dispatched(self, op: Operation, rewriter: PatternRewriter) -> None:
        """:meth:`match_and_rewrite` for a driver that offers ``op`` only when it is an instance of
        :attr:`op_types` (``passes.base``): the root's class test is then done once per class, not per op."""
        self.rewrite(op, rewriter, self.class_checked)

    def rewrite(self, op: Operation, rewriter: PatternRewriter, class_checked: bool) -> None:
        """Match the rule at ``op``, check its condition, replace the op."""
        rule = self.rule
        caps: dict = {}
        if not rule.pattern.match_root(op, caps, class_checked):
            return
        replace_spec, when_spec = rule._calls
        if rule.when is not None and not _call(rule.when, when_spec, caps, op, self.pass_):
            return
        replacement = rule.replacement
        if replace_spec is None:
            value = caps[replacement]
            if not isinstance(value, SSAValue):
                raise TypeError(f"rule {rule.name}: the capture {replacement!r} is a constant's value, not an "
                                   f"SSA value (capture the value with .bind({replacement!r}))")
            results = op.results
            if len(results) != 1 or (value.type is not results[0].type and value.type != results[0].type):
                return  # forwarding would change the result's type (shape, element type or layout)
            new_values = [value]
        else:
            builder = self.builder
            if builder is None:
                builder = self.builder = RewriteBuilder(f"rule {rule.name}")
                builder.keep_locations = rule.keep_locations and getattr(self.pass_, "KEEP_LOCATIONS", True)
            builder._retarget(rewriter, op)
            result = _call(replacement, replace_spec, caps, op, self.pass_, builder)
            if result is None:  # declined: take back what the function built, and the "changed" it set
                for created in reversed(builder.created):
                    if created.parent is not None and all(r.first_use is None for r in created.results):
                        rewriter.erase(created)
                rewriter.has_done_action = False  # (else the driver would sweep again, forever)
                return
            new_values = _values(result, rule.name)
            if len(new_values) != len(op.results):
                raise TypeError(f"rule {rule.name}: the replacement gives {len(new_values)} values for an op "
                                   f"with {len(op.results)} results")
        operand_owners = [v.owner for v in op.operands] if rule.erase_dead_operands else ()
        rewriter.replace(op, [], new_values)
        if self.report is not None:
            self.report.counts[rule.name] += 1
        keep = rule.erase_dead_operands
        for owner in operand_owners:
            if (isinstance(owner, Operation) and owner.parent is not None and not owner.regions
                    and all(r.first_use is None for r in owner.results)
                    and (isinstance(owner, keep) if isinstance(keep, tuple) else is_pure(owner))):
                rewriter.erase(owner)


def _values(result, rule_name: str) -> list[SSAValue]:
    items = list(result) if isinstance(result, (list, tuple)) else [result]
    out = []
    for item in items:
        if isinstance(item, XlaOp):
            item = item.value
        if not isinstance(item, SSAValue):
            raise TypeError(f"rule {rule_name}: the replacement returned {item!r}; return a value built with "
                               f"the builder, a captured value, or None to leave the op alone")
        out.append(item)
    return out


# ----------------------------------------------------------------------------
# Passes made of rules
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RulePass(PatternPass):
    """A pass whose rewrites are :class:`Rule` s (``RULES``, or :meth:`rules` to build them from the options),
    after any hand-written ``PATTERNS``; rules are tried in order on each op, as patterns are. Options are
    dataclass fields; rules' functions see the pass as ``options``. Each run emits a :class:`RuleReport`
    unless ``REPORT`` is False."""

    RULES: ClassVar[tuple[Rule, ...]] = ()
    REPORT: ClassVar[bool] = True
    KEEP_LOCATIONS: ClassVar[bool] = True
    """Ops a rule builds take the matched op's source location (``loc``)."""

    def rules(self) -> Sequence[Rule]:
        """The rules of this pass instance (override to build them from its options)."""
        return self.RULES

    def patterns(self, report: RuleReport | None = None) -> list[RewritePattern]:
        """The entries of ``PATTERNS`` (pattern classes, or rules), then one pattern per rule of :meth:`rules`;
        rules count their rewrites into ``report``."""
        table = [p.pattern_for(self, report) if isinstance(p, Rule) else p() for p in self.PATTERNS]
        return [*table, *(r.pattern_for(self, report) for r in self.rules())]

    def apply(self, ctx, op) -> None:
        """Run the patterns and rules to a fixed point; report how often each rule fired."""
        report = RuleReport(self.name) if self.REPORT else None
        self.rewrite(op, self.patterns(report))
        if report is not None:
            emit_report(self, report)


def rule_pass(name: str, *rules: Rule, doc: str | None = None, options: dict[str, object] | None = None,
              register: bool = True, **class_settings) -> type[RulePass]:
    """A :class:`RulePass` class named ``name`` running ``rules`` (registered unless ``register`` is False:
    it then works in pipelines, ``xla-opt`` and ``xdsl-opt``). ``options``: option name -> default (a
    dataclass field each, ``name{option=value}`` in pipelines). ``class_settings``: ``WALK_REVERSE``,
    ``CONFIRM_FIXED_POINT``, ``REPORT``..."""
    import dataclasses

    for r in rules:
        if not isinstance(r, Rule):
            raise PatternError(f"rule_pass {name}: expected rules (passes.patterns.rule(...)), got {r!r}")
    caller = sys._getframe(1).f_globals.get("__name__", __name__)  # so that load_plugin finds the class
    class_name = _camel(name.replace("-", "_")) + "Pass"
    fields = [(k.replace("-", "_"), type(v), dataclasses.field(default=v)) for k, v in (options or {}).items()]
    namespace = {"name": name, "RULES": tuple(rules), "__module__": caller,
                 "__doc__": doc or f"``{name}``: " + "; ".join(r.name for r in rules), **class_settings}
    cls = dataclasses.make_dataclass(class_name, fields, bases=(RulePass,), frozen=True, namespace=namespace)
    return register_pass(cls) if register else cls


def forward_if_same_type(value: SSAValue, op: Operation) -> SSAValue | None:
    """``value`` when it can stand for ``op``'s single result (the types agree exactly), else None: for
    replacement functions that forward a value only sometimes."""
    return value if len(op.results) == 1 and value.type == op.results[0].type else None
