"""XLA shape text: parse_shape / format_shape against XLA's own HLO parser and printer.

jaxlib's HLO parser is the oracle: each shape becomes a parameter of a tiny
HLO module, jaxlib parses and prints the module, and the shape it prints on
the parameter line must equal ``format_shape(parse_shape(s))``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import NoneAttr, TensorType, TupleType, f32

from xla_dialect.errors import LayoutError, ShapeParseError, XlaError
from xla_dialect.layout import LayoutAttr
from xla_dialect.shape import format_shape, parse_shape
from xla_dialect.types import ELEMENT_TYPES, TokenType

_hlo = pytest.importorskip("jaxlib._hlo")

_PARAM_LINE = re.compile(r"^\s*%p(\d+) = (.*) parameter\((\d+)\)$", re.M)


def xla_printed(shapes: list[str]) -> list[str]:
    """The shape XLA prints for each of ``shapes`` after parsing them as HLO parameters."""
    params = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(shapes))
    text = f"HloModule m\n\nENTRY main {{\n{params}\n  ROOT t = () tuple()\n}}\n"
    printed = _hlo.hlo_module_from_text(text).to_string()
    found = {int(m.group(1)): m.group(2) for m in _PARAM_LINE.finditer(printed)}
    assert sorted(found) == list(range(len(shapes))), printed
    return [found[i] for i in range(len(shapes))]


def xla_rejects(shape: str) -> bool:
    """True when XLA's HLO parser refuses ``shape`` (with an error, not a crash)."""
    try:
        xla_printed([shape])
    except Exception:
        return True
    return False


# Shapes WITH layouts (and scalars, tuples, tokens): XLA prints them back as given
# (modulo default-valued fields and whitespace), and so must format_shape.
LAYOUT_SHAPES = (
    [f"{name}[2,3]{{1,0}}" for name in ELEMENT_TYPES]
    + [f"{name}[]" for name in ELEMENT_TYPES]
    + [f"{name}[5]{{0:T(4)E({max(1, ELEMENT_TYPES[name].bits)})}}" for name in ELEMENT_TYPES]
    + [
        "f32[3,5]{1,0:T(2,2)}",
        "f32[5,3]{0,1}",
        "f32[2,3,4]{0,2,1}",
        "bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}",
        "bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)}",
        "bf16[32,256]{1,0:T(8,128)(2,1,1,1)}",
        "f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}",
        "s8[256,512]{1,0:T(8,128)(4,1)}",
        "pred[64,128]{1,0:T(32,128)(32,1)E(1)}",
        "f32[1024]{0:T(1024)(128)}",
        "f32[5]{0:T(2,128)}",
        "f32[2,3]{1,0:T(2,*)}",
        "f32[2,3]{1,0:L(1024)}",
        "f32[2,3]{1,0:E(32)}",
        "f32[2,3]{1,0:S(5)}",
        "f32[2,3]{1,0:T(2,2)L(4)E(8)S(3)}",
        "f32[2,3]{1,0:L(4)S(1)}",
        "f32[]{:T(256)}",
        "f32[]{:S(1)}",
        "f32[]{:T(128)L(256)E(32)S(2)}",
        "f32[0,3]{1,0}",
        "f32[0]{0:T(128)}",
        "s32[1,1,1,1,1,1]{5,4,3,2,1,0}",
        "u64[9223372036854775807]{0}",
        "token[]",
        "()",
        "(())",
        "((), (()))",
        "(f32[], token[])",
        "(f32[2]{0}, (s32[]{:S(1)}, (pred[3]{0:E(1)})), token[], ())",
        "(f32[1]{0}, f32[2]{0}, f32[3]{0}, f32[4]{0}, f32[5]{0}, /*index=5*/f32[6]{0})",
        "(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[], f32[], f32[], f32[], "
        "/*index=10*/(s8[], s8[], s8[], s8[], s8[], /*index=5*/s8[]))",
    ]
)


def test_every_xla_primitive_type_is_covered():
    expected = {
        "pred", "s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16", "u32", "u64",
        "f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e4m3fn", "f8e4m3fnuz", "f8e5m2fnuz",
        "f8e4m3b11fnuz", "f8e3m4", "f8e8m0fnu", "f4e2m1fn", "c64", "c128",
    }  # fmt: skip
    assert expected <= set(ELEMENT_TYPES)


def test_format_shape_matches_xla_printer():
    ours = [format_shape(parse_shape(s)) for s in LAYOUT_SHAPES]
    assert ours == xla_printed(LAYOUT_SHAPES)
    # These were written as XLA prints them, so both are the identity.
    assert ours == LAYOUT_SHAPES


@pytest.mark.parametrize(
    "text, printed",
    [
        ("f32[2]{0:L(1)E(0)S(0)}", "f32[2]{0}"),  # default-valued fields are not printed
        ("f32[]{:L(1)}", "f32[]"),  # a scalar's empty layout is not printed
        ("f32[ 2 , 3 ]{ 1 , 0 : T ( 2 , * ) }", "f32[2,3]{1,0:T(2,*)}"),
        ("f32 [2] {0}", "f32[2]{0}"),
        ("f32[00002]{00}", "f32[2]{0}"),
        ("f32[2,3]{1,0:}", "f32[2,3]{1,0}"),
        ("( f32[] , s32[2]{0} )", "(f32[], s32[2]{0})"),
        ("(f32[], /*c*/ s32[2]{0})", "(f32[], s32[2]{0})"),
        ("(f32[], f32[], f32[], f32[], f32[], f32[])", "(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[])"),
    ],
)
def test_normalisation_matches_xla(text, printed):
    assert xla_printed([text]) == [printed]
    assert format_shape(parse_shape(text)) == printed


LAYOUTLESS = ["f32[3,5]", "s4[7]", "pred[2,3,4]", "c128[0,2]", "(f32[3], (bf16[2,2], f32[]), token[])"]


def test_layoutless_types_print_without_braces_or_with_xla_default():
    # XLA's parser gives a layout-less non-scalar array the default descending layout and prints it.
    xla = xla_printed(LAYOUTLESS)
    assert xla == ["f32[3,5]{1,0}", "s4[7]{0}", "pred[2,3,4]{2,1,0}", "c128[0,2]{1,0}",
                   "(f32[3]{0}, (bf16[2,2]{1,0}, f32[]), token[])"]  # fmt: skip
    assert [format_shape(parse_shape(s), default_layout=True) for s in LAYOUTLESS] == xla
    # Here a layout-less type stays layout-less and prints without braces.
    assert [format_shape(parse_shape(s)) for s in LAYOUTLESS] == LAYOUTLESS
    assert isinstance(parse_shape("f32[3,5]").encoding, NoneAttr)


def test_print_layout_false_drops_layouts():
    t = parse_shape("(f32[3,5]{1,0:T(2,2)}, f32[]{:S(1)}, token[])")
    assert format_shape(t, print_layout=False) == "(f32[3,5], f32[], token[])"


def test_parse_shape_builds_xdsl_types():
    t = parse_shape("(bf16[8,256]{1,0:T(8,128)(2,1)S(1)}, token[], ())")
    assert isinstance(t, TupleType)
    array, token, empty = t.types
    assert isinstance(array, TensorType) and isinstance(array.encoding, LayoutAttr)
    assert array.get_shape() == (8, 256)
    assert isinstance(token, TokenType)
    assert empty == TupleType([])
    assert parse_shape("f32[]") == TensorType(f32, [])


# ----------------------------------------------------------------------------
# Random shapes: our printer vs XLA's, and print/parse round trip
# ----------------------------------------------------------------------------


@st.composite
def shape_texts(draw, depth=0):
    """Random XLA shape text with layouts XLA accepts."""
    if depth < 2 and draw(st.integers(0, 5)) == 0:
        elements = draw(st.lists(st.deferred(lambda: shape_texts(depth + 1)), max_size=7))
        return "(" + ", ".join(elements) + ")"
    if draw(st.integers(0, 15)) == 0:
        return "token[]"
    name = draw(st.sampled_from(sorted(ELEMENT_TYPES)))
    rank = draw(st.integers(0, 4))
    dims = draw(st.lists(st.integers(0, 300), min_size=rank, max_size=rank))
    text = f"{name}[{','.join(map(str, dims))}]"
    if draw(st.booleans()):
        m2m = draw(st.permutations(range(rank)))
        fields = ""
        if draw(st.booleans()):
            levels = draw(st.lists(st.lists(st.sampled_from(["1", "2", "8", "128", "*"]), min_size=1, max_size=3),
                                   min_size=1, max_size=3))
            fields += "T" + "".join("(" + ",".join(level) + ")" for level in levels)
        for key, values in (("L", [1, 2, 1024]), ("E", [0, 1, 4, 16]), ("S", [0, 1, 5])):
            if draw(st.booleans()):
                fields += f"{key}({draw(st.sampled_from(values))})"
        if rank or fields:  # XLA does not read '{}' as a layout
            text += "{" + ",".join(map(str, m2m)) + (":" + fields if fields else "") + "}"
    return text


@settings(max_examples=25, deadline=None)
@given(st.lists(shape_texts(), min_size=1, max_size=8))
def test_random_shapes_match_xla_printer(shapes):
    xla = xla_printed(shapes)
    ours = [format_shape(parse_shape(s), default_layout=True) for s in shapes]
    assert ours == xla
    # XLA's output parses back to the same types (print/parse is a fixed point).
    assert [format_shape(parse_shape(s), default_layout=True) for s in xla] == xla


@settings(max_examples=100, deadline=None)
@given(shape_texts())
def test_format_parse_round_trip(text):
    t = parse_shape(text)
    again = parse_shape(format_shape(t))
    assert format_shape(again) == format_shape(t)
    # Equal types, except that a scalar's empty layout, which XLA (and format_shape) never
    # prints, comes back as no layout: both mean XLA's default scalar layout.
    assert _drop_empty_scalar_layouts(again) == _drop_empty_scalar_layouts(t)


def _drop_empty_scalar_layouts(t):
    if isinstance(t, TupleType):
        return TupleType([_drop_empty_scalar_layouts(e) for e in t.types])
    if isinstance(t, TensorType) and isinstance(t.encoding, LayoutAttr) and t.encoding.data.to_text() == "{}":
        return TensorType(t.element_type, t.get_shape())
    return t


def test_scalar_empty_layout_is_not_printed():
    t = parse_shape("f32[]{:E(0)}")
    assert t.encoding.data.to_text() == "{}"
    assert format_shape(t) == "f32[]" == xla_printed(["f32[]{:E(0)}"])[0]
    assert isinstance(parse_shape("f32[]").encoding, NoneAttr)


# ----------------------------------------------------------------------------
# Layout fields XLA has and this toolkit does not model
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, printed, message",
    [
        ("f32[2,3]{1,0:#(u32)}", "f32[2,3]{1,0:#(u32)}", "index primitive type"),
        ("f32[2,3]{1,0:*(u32)}", "f32[2,3]{1,0:*(u32)}", "pointer primitive type"),
        ("f32[2,3]{1,0:SC(0:1)}", "f32[2,3]{1,0:SC(0:1)}", "split configs"),
        ("f32[2,3]{1,0:M(8)}", "f32[2,3]{1,0:M(8)}", "dynamic shape metadata prefix bytes"),
        ("f32[2,3]{1,0:S(1)SC(0:1)}", "f32[2,3]{1,0:S(1)SC(0:1)}", "split configs"),
        ("f32[2,3]{1,0:D(D,D)}", "f32[2,3]{1,0}", "dim level types"),
    ],
)
def test_xla_layout_fields_we_do_not_support(shape, printed, message):
    assert xla_printed([shape]) == [printed]  # XLA accepts (and mostly prints) them...
    with pytest.raises(LayoutError, match=message):  # ...we refuse them clearly
        parse_shape(shape)


def test_physical_shape_field_is_rejected_by_both():
    shape = "f32[2,3]{1,0:P(f32[6]{0})}"
    assert xla_rejects(shape)
    with pytest.raises(LayoutError, match="physical shape"):
        parse_shape(shape)


@pytest.mark.parametrize(
    "shape, error, message",
    [
        # Field order and repetition, as XLA's parser enforces them.
        ("f32[2,3]{1,0:S(1)T(2,2)}", LayoutError, "T is out of order"),
        ("f32[2,3]{1,0:L(4)T(2,2)}", LayoutError, "T is out of order"),
        ("f32[2,3]{1,0:E(4)T(2)}", LayoutError, "T is out of order"),
        ("f32[2,3]{1,0:E(32)E(16)}", LayoutError, "E appears twice"),
        ("f32[2,3]{1,0:T(2,2)T(1,1)}", LayoutError, "T appears twice"),
        ("f32[2,3]{1,0:Q(1)}", LayoutError, "unknown layout field 'Q'"),
        ("f32[2,3]{0}", LayoutError, "has 1 dimensions in minor_to_major but the shape has rank 2"),
        # '{}' is not a layout for XLA: a '{' starts one only before a number or ':'.
        ("f32[]{}", ShapeParseError, "'{}' is not a layout"),
        ("f32[2]{}", ShapeParseError, "'{}' is not a layout"),
        ("token[]{}", ShapeParseError, "unexpected '{}'"),
        ("F32[2]", ShapeParseError, r"unknown element type 'F32' \(XLA type names are lower case\)"),
        ("f33[2]", ShapeParseError, "unknown element type 'f33'; expected one of pred, s2"),
        ("f32[2", ShapeParseError, "expected ',' or ']' after a dimension size"),
        ("f32[2,]", ShapeParseError, "expected a dimension size"),
        ("f32[-1]", ShapeParseError, "expected a dimension size"),
        ("(f32[],)", ShapeParseError, r"expected a shape \('type\[dims\]' or '\(' for a tuple\), found '\)'"),
        ("(f32[] s32[])", ShapeParseError, "expected ',' or '\\)' in a tuple shape"),
        ("(f32[]", ShapeParseError, "expected ',' or '\\)' in a tuple shape"),
        ("f32", ShapeParseError, "expected '\\[' after the element type 'f32'"),
        ("f32[2]{+0}", ShapeParseError, "unexpected"),
        ("f32[2] x", ShapeParseError, "unexpected 'x' at offset 7"),
        ("", ShapeParseError, "found the end"),
    ],
)
def test_malformed_shapes_rejected_like_xla(shape, error, message):
    assert xla_rejects(shape)
    with pytest.raises(error, match=message):
        parse_shape(shape)


@pytest.mark.parametrize(
    "shape, error, message",
    [
        # XLA's parser accepts these; its verifier (LayoutUtil::ValidateLayoutForShape) rejects them.
        ("f32[2,3]{0,0}", LayoutError, "not a permutation of 0..1"),
        ("f32[2,3]{1,0:T()}", LayoutError, r"empty tile T\(\)"),
        ("f32[2,3]{1,0:T(0,2)}", LayoutError, "tile sizes must be positive"),
        ("f32[2,3]{1,0:E(-1)}", LayoutError, "E\\(n\\) must be non-negative"),
        # XLA's parser accepts S(-1); a negative memory space means nothing, so it is refused here.
        ("f32[2,3]{1,0:S(-1)}", LayoutError, "S\\(n\\) must be non-negative"),
        # Valid XLA shapes outside this toolkit.
        ("s1[4]", ShapeParseError, "'s1' \\(1-bit signed integers\\) is not supported"),
        ("u1[4]", ShapeParseError, "'u1' \\(1-bit unsigned integers\\) is not supported"),
        ("opaque[]", ShapeParseError, "'opaque' \\(opaque values\\) is not supported"),
        ("f32[<=4,3]", ShapeParseError, "dynamic dimensions"),
        ("f32[?,3]", ShapeParseError, "dynamic dimensions"),
    ],
)
def test_shapes_xla_parses_but_we_refuse(shape, error, message):
    assert not xla_rejects(shape)
    with pytest.raises(error, match=message):
        parse_shape(shape)


def test_errors_are_xla_errors_and_value_errors():
    for bad in ("f32[2", "f32[2]{0:Q(1)}"):
        with pytest.raises(XlaError):
            parse_shape(bad)
        with pytest.raises(ValueError):
            parse_shape(bad)
    with pytest.raises(ShapeParseError, match="expects a string"):
        parse_shape(3)
    with pytest.raises(ShapeParseError, match="is not an XLA shape"):
        format_shape(f32)


@pytest.mark.parametrize("template", ["f32[3]{{0{}!}}", "f32[3{}!]", "(f32[3],{}!)", "f32[3]{{0 /*{}", "f32[3]{{0:T(8{}!)}}"])
def test_parsing_time_is_linear(template):
    # Whitespace runs before a bad character once took exponential time (a nested regex repetition).
    import time

    from xla_dialect.errors import XlaError

    for spaces in (30, 100_000):
        text = template.format(" " * spaces)
        start = time.perf_counter()
        with pytest.raises(XlaError):
            parse_shape(text)
        assert time.perf_counter() - start < 1.0, (spaces, template)


@pytest.mark.parametrize("text", ["f32[\u0663]", "f32[3]{\u0660}", "f32[3]{0:T(\uff18)}"])
def test_only_ascii_digits(text):
    from xla_dialect.errors import XlaError

    with pytest.raises(XlaError):
        parse_shape(text)


def test_deeply_nested_tuples_are_an_error_not_a_recursion_error():
    from xla_dialect.errors import ShapeParseError
    from xla_dialect.shape import MAX_TUPLE_DEPTH

    deep = "(" * MAX_TUPLE_DEPTH + "f32[]" + ")" * MAX_TUPLE_DEPTH
    assert format_shape(parse_shape(deep)) == deep
    with pytest.raises(ShapeParseError, match="nested more than"):
        parse_shape("(" * 5000 + "f32[]" + ")" * 5000)
