"""Layouts: the #hlo.layout attribute, XLA layout notation, and tiling math.

The tiling expectations come from the worked examples of the tiled-layout
spec (shared/reference/xla-tiled-layout.md) and from independent
re-statements of it: XLA's own single-level formulas (``LayoutUtil::LinearIndex``,
``ShapeUtil::ArraySize``), the spec's pad-reshape-transpose description, and
classic strides for untiled layouts.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import NoneAttr, StringAttr, TensorType, TupleType, f32
from xdsl.printer import Printer

from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import HloVerifyError, LayoutError, MlirParseError
from xla_dialect.layout import (
    COMBINE_DIMENSION,
    Layout,
    LayoutAttr,
    byte_size,
    from_physical,
    layout_of,
    linear_index,
    linear_indices,
    parse_layout,
    physical_dims,
    physical_element_count,
    to_physical,
    with_layout,
)
from xla_dialect.shape import format_shape, parse_shape

FAST = settings(max_examples=60, deadline=None)

# ----------------------------------------------------------------------------
# The spec's worked examples
# ----------------------------------------------------------------------------


def test_figure1_element_2_3_is_at_17():
    assert linear_index("f32[3,5]{1,0:T(2,2)}", (2, 3)) == 17


def test_figure1_whole_table_and_padding():
    # 2x3 tiles of 2x2, tiles row-major, elements row-major inside a tile.
    expected = np.array([[0, 1, 4, 5, 8], [2, 3, 6, 7, 10], [12, 13, 16, 17, 20]])
    np.testing.assert_array_equal(linear_indices("f32[3,5]{1,0:T(2,2)}"), expected)
    assert physical_dims("f32[3,5]{1,0:T(2,2)}") == (2, 3, 2, 2)
    assert physical_element_count("f32[3,5]{1,0:T(2,2)}") == 24
    buffer = to_physical(np.arange(1, 16, dtype=np.float32).reshape(3, 5), parse_shape("f32[3,5]{1,0:T(2,2)}"))
    # The white padding cells of Figure 1 hold zeros here.
    padding = np.setdiff1d(np.arange(24), expected.ravel())
    assert np.all(buffer[padding] == 0) and len(padding) == 9


def test_figure2_repeated_tiling_4x8():
    # (2,4) tiles, then (2,1) pairs one even-row and one odd-row element (BF16 packing).
    expected = np.array(
        [
            [0, 2, 4, 6, 8, 10, 12, 14],
            [1, 3, 5, 7, 9, 11, 13, 15],
            [16, 18, 20, 22, 24, 26, 28, 30],
            [17, 19, 21, 23, 25, 27, 29, 31],
        ]
    )
    np.testing.assert_array_equal(linear_indices("bf16[4,8]{1,0:T(2,4)(2,1)}"), expected)
    assert physical_element_count("bf16[4,8]{1,0:T(2,4)(2,1)}") == 32


def test_alternative_bf16_packing_8x8_red_dot_is_51():
    # The spec's (2,4)(2,1,1,1) example: the second tile acts on the tile-index dims too.
    shape = "bf16[8,8]{1,0:T(2,4)(2,1,1,1)}"
    assert linear_index(shape, (6, 5)) == 51
    assert physical_dims(shape) == (2, 2, 2, 4, 2, 1, 1, 1)


def test_combine_dimensions_example():
    # F32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)} == F32[112,110] tiled by (2,3).
    shape = "f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}"
    assert physical_dims(shape) == (56, 37, 2, 3)
    assert physical_element_count(shape) == 56 * 37 * 6
    e = np.indices((2, 7, 8, 11, 10))
    row = (e[0] * 7 + e[1]) * 8 + e[2]
    col = e[3] * 10 + e[4]
    expected = ((row // 2) * 37 + col // 3) * 6 + (row % 2) * 3 + col % 3
    np.testing.assert_array_equal(linear_indices(shape), expected)
    assert linear_index(shape, (1, 6, 7, 10, 9)) == expected[1, 6, 7, 10, 9]


def test_combined_layout_equals_reshaped_layout():
    combined = linear_indices("f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}")
    flat = linear_indices("f32[112,110]{1,0:T(2,3)}")
    np.testing.assert_array_equal(combined.reshape(112, 110), flat)


def test_minor_to_major_permutes_before_tiling():
    # {0,1}: dimension 0 is minor, so f32[5,3]{0,1} is physically f32[3,5]{1,0}.
    np.testing.assert_array_equal(
        linear_indices("f32[5,3]{0,1:T(2,2)}"), linear_indices("f32[3,5]{1,0:T(2,2)}").T
    )
    assert linear_index("f32[5,3]{0,1:T(2,2)}", (3, 2)) == 17


def test_seed_indexing_example_and_column_major():
    # IndexUtil example: [2,3] row-major, (1,2) -> 5; {0,1} stores "a d b e c f".
    assert linear_index("f32[2,3]{1,0}", (1, 2)) == 5
    np.testing.assert_array_equal(linear_indices("f32[2,3]{0,1}"), [[0, 2, 4], [1, 3, 5]])


def test_tpu_bf16_format_sizes():
    shape = "bf16[8,1,1280,16384]{3,2,0,1:T(8,128)(2,1)}"
    # Dim 1 (size 1) is the most major: physical (1, 8, 1280, 16384); 8x128 tiles pad nothing.
    assert physical_element_count(shape) == 8 * 1280 * 16384
    assert byte_size(shape) == 8 * 1280 * 16384 * 2


def test_layoutless_tensor_means_default_descending_layout():
    plain = TensorType(f32, [3, 4])
    np.testing.assert_array_equal(linear_indices(plain), np.arange(12).reshape(3, 4))
    assert physical_element_count(plain) == 12


# ----------------------------------------------------------------------------
# Scalars, empty arrays, tiles longer than the shape
# ----------------------------------------------------------------------------


def test_scalars():
    assert linear_index("f32[]", ()) == 0
    assert physical_element_count("f32[]") == 1
    # XLA (ShapeUtil::ArraySize) pads a tiled scalar to a whole tile.
    assert physical_element_count("f32[]{:T(256)}") == 256
    np.testing.assert_array_equal(from_physical(to_physical(np.float32(3.5), "f32[]{:T(256)}"), "f32[]{:T(256)}"), 3.5)
    assert from_physical(np.array([7], np.int32), "s32[]").shape == ()


def test_zero_sized_arrays():
    for shape in ("f32[0,5]{1,0:T(2,2)}", "f32[3,0]{0,1}", "f32[0]{0:T(128)L(1024)}"):
        assert physical_element_count(shape) == 0
        assert linear_indices(shape).size == 0
        dims = parse_shape(shape).get_shape()
        assert to_physical(np.zeros(dims, np.float32), shape).shape == (0,)
        assert from_physical(np.zeros(0, np.float32), shape).shape == tuple(dims)


def test_tile_with_more_dimensions_than_the_shape_follows_xla():
    # XLA treats the missing major dimensions as size 1 (ArraySize: RoundUpTo(1, 2) * RoundUpTo(5, 128)).
    assert physical_element_count("f32[5]{0:T(2,128)}") == 256
    assert linear_index("f32[300]{0:T(2,128)}", (130,)) == 256 + 2
    assert parse_shape("f32[5]{0:T(2,128)}").encoding.data.tiles == ((2, 128),)


# ----------------------------------------------------------------------------
# byte_size: E(n), sub-byte types, L(n)
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, size",
    [
        ("f32[3,5]{1,0:T(2,2)}", 24 * 4),
        ("f32[3,5]", 60),
        ("f64[]", 8),
        ("c64[3]", 24),
        ("c128[2]", 32),
        ("pred[10]", 10),  # XLA: pred is one byte
        ("pred[10]{0:E(1)}", 2),  # 10 bits -> 2 bytes
        ("s4[3]", 3),  # without E(4) each s4 takes a byte (XLA ByteWidth)
        ("s4[3]{0:E(4)}", 2),
        ("u4[4]{0:E(4)}", 2),
        ("s2[5]{0:E(2)}", 2),
        ("f4e2m1fn[5]{0:E(4)}", 3),
        ("f8e8m0fnu[7]", 7),
        ("bf16[8,256]{1,0:T(8,128)(2,1)}", 8 * 256 * 2),
        ("f32[3]{0:L(4)}", 16),
        ("f32[3,5]{1,0:T(2,2)L(32)}", 32 * 4),
        ("s4[3,5]{1,0:T(2,2)L(32)E(4)}", 16),
        ("s8[5,300]{1,0:T(8,128)(4,1)}", 8 * 384),
        ("f32[]{:T(256)S(1)}", 1024),
        ("f32[0,7]{1,0:T(8,128)}", 0),
    ],
)
def test_byte_size(shape, size):
    assert byte_size(shape) == size


def test_physical_element_count_rounds_to_tail_alignment():
    assert physical_element_count("f32[3,5]{1,0:T(2,2)L(10)}") == 30
    assert physical_element_count("f32[7]{0:L(8)}") == 8
    assert physical_element_count("f32[8]{0:L(8)}") == 8


def test_sub_tile_padding_is_counted():
    # (2,4)(3,1): a 2-row tile padded to 3 rows by the sub-tile. XLA's ArraySize assumes sub-tiles
    # add no padding (and would say 8); every index must still fit, so it is 12 here.
    shape = "f32[2,4]{1,0:T(2,4)(3,1)}"
    assert physical_element_count(shape) == 12
    idx = linear_indices(shape)
    assert idx.max() < 12 and len(np.unique(idx)) == 8


# ----------------------------------------------------------------------------
# Independent restatements, checked on random layouts (hypothesis)
# ----------------------------------------------------------------------------


@st.composite
def tiled_tensors(draw, max_rank=4, max_levels=3, combine=True, single_level=False):
    """A random tensor type with a random (possibly tiled, possibly combining) layout."""
    rank = draw(st.integers(0, max_rank))
    dims = draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank))
    m2m = tuple(draw(st.permutations(range(rank))))
    tiles = []
    current = rank
    levels = 1 if single_level else draw(st.integers(0, max_levels))
    for _ in range(levels):
        n = draw(st.integers(1, max(1, current + 1)))
        tile = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
        if combine:
            for i in range(n - 1):
                if draw(st.integers(0, 4)) == 0:
                    tile[i] = COMBINE_DIMENSION
        tiles.append(tuple(tile))
        current = max(current, n) + sum(1 for t in tile if t != COMBINE_DIMENSION) - sum(
            1 for t in tile if t == COMBINE_DIMENSION
        )
    align = draw(st.sampled_from([1, 1, 3, 8]))
    layout = Layout(m2m, tuple(tiles), align)
    return TensorType(f32, dims, LayoutAttr(layout))


@FAST
@given(tiled_tensors())
def test_linear_indices_are_injective_and_in_range(t):
    idx = linear_indices(t)
    count = physical_element_count(t)
    assert idx.shape == tuple(t.get_shape())
    assert idx.dtype == np.int64
    if idx.size:
        assert idx.min() >= 0 and idx.max() < count
    assert len(np.unique(idx)) == idx.size


@FAST
@given(tiled_tensors(), st.data())
def test_physical_round_trip(t, data):
    dims = tuple(t.get_shape())
    x = data.draw(st.integers(0, 2**31 - 1).map(lambda s: np.random.default_rng(s).standard_normal(dims)))
    x = x.astype(np.float32)
    buffer = to_physical(x, t)
    assert buffer.shape == (physical_element_count(t),)
    assert buffer.dtype == np.float32
    np.testing.assert_array_equal(from_physical(buffer, t), x)
    # Padding is zero-filled: the buffer holds exactly x's values plus zeros.
    mask = np.ones(buffer.size, bool)
    mask[linear_indices(t).ravel()] = False
    assert np.all(buffer[mask] == 0)


@FAST
@given(tiled_tensors(), st.data())
def test_scalar_linear_index_matches_vectorized(t, data):
    dims = t.get_shape()
    if 0 in dims:
        return
    index = tuple(data.draw(st.integers(0, d - 1)) for d in dims)
    assert linear_index(t, index) == linear_indices(t)[index]


@FAST
@given(st.lists(st.integers(0, 5), max_size=4).flatmap(
    lambda dims: st.tuples(st.just(dims), st.permutations(range(len(dims))))))
def test_untiled_layout_is_classic_strided_index(case):
    dims, m2m = case
    t = TensorType(f32, dims, LayoutAttr(Layout(tuple(m2m))))
    strides = [0] * len(dims)
    stride = 1
    for d in m2m:  # minor_to_major: the fastest-varying dimension first
        strides[d] = stride
        stride *= dims[d]
    expected = sum(np.indices(dims)[i] * strides[i] for i in range(len(dims))) if dims else np.array(0)
    np.testing.assert_array_equal(linear_indices(t), expected)
    assert physical_element_count(t) == math.prod(dims)


def _xla_linear_index(dims, layout: Layout, index):
    """XLA's LayoutUtil::LinearIndex (first tile level only), restated for rank >= 2."""
    tile = layout.tiles[0] if layout.tiles else ()
    linear, tile_multiplier, within = 0, math.prod(tile), 1
    for minor, logical in enumerate(layout.minor_to_major):
        size, i = dims[logical], index[logical]
        if minor < len(tile):
            t = tile[len(tile) - 1 - minor]
            linear += tile_multiplier * (i // t) + within * (i % t)
            tile_multiplier *= -(-size // t)
            within *= t
        else:
            linear += i * tile_multiplier
            tile_multiplier *= size
    return linear


def _xla_array_size_elements(dims, layout: Layout):
    """XLA's ShapeUtil::ArraySize element count (first tile level, tail alignment)."""
    tile = layout.tiles[0]
    count = 1
    for dim in range(max(len(tile), len(dims))):
        size = dims[layout.minor_to_major[dim]] if dim < len(dims) else 1
        if dim < len(tile):
            t = tile[len(tile) - dim - 1]
            size = -(-size // t) * t
        count *= size
    align = layout.tail_padding_alignment
    return -(-count // align) * align


@FAST
@given(tiled_tensors(max_levels=1, combine=False, single_level=True), st.data())
def test_single_level_matches_xla_formulas(t, data):
    layout = t.encoding.data
    dims = t.get_shape()
    assert physical_element_count(t) == _xla_array_size_elements(dims, layout)
    if len(dims) >= 2 and 0 not in dims:  # XLA's LinearIndex returns the raw index for rank 1
        index = tuple(data.draw(st.integers(0, d - 1)) for d in dims)
        assert linear_index(t, index) == _xla_linear_index(dims, layout, index)


@FAST
@given(st.lists(st.integers(1, 7), min_size=1, max_size=3), st.data())
def test_pad_reshape_transpose_description(dims, data):
    # The spec: tiling = pad to whole tiles, split each dim into (tiles, t), move the t's minor.
    tile = data.draw(st.lists(st.integers(1, 4), min_size=len(dims), max_size=len(dims)))
    t = TensorType(f32, dims, LayoutAttr(Layout(tuple(range(len(dims) - 1, -1, -1)), (tuple(tile),))))
    x = np.arange(1, math.prod(dims) + 1, dtype=np.float32).reshape(dims)
    counts = [-(-d // s) for d, s in zip(dims, tile)]
    padded = np.pad(x, [(0, c * s - d) for c, s, d in zip(counts, tile, dims)])
    split = padded.reshape([v for c, s in zip(counts, tile) for v in (c, s)])
    n = len(dims)
    moved = split.transpose([2 * i for i in range(n)] + [2 * i + 1 for i in range(n)])
    np.testing.assert_array_equal(to_physical(x, t), moved.ravel())


def test_linear_indices_is_vectorized_and_cached():
    t = parse_shape("f32[64,256]{0,1:T(8,128)(2,1)}")
    a = linear_indices(t)
    assert a is linear_indices(t)  # cached table
    assert not a.flags.writeable
    big = parse_shape("u8[1200,1000]{1,0:T(8,128)(4,1)}")  # above the cache limit: still fast, no loop
    assert linear_indices(big).shape == (1200, 1000)


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


def test_rank_mismatch_between_layout_and_tensor():
    bad = TensorType(f32, [2, 3], LayoutAttr(Layout((0,))))
    for fn in (physical_element_count, linear_indices, byte_size, physical_dims):
        with pytest.raises(LayoutError, match="has 1 dimensions in minor_to_major but the shape has rank 2"):
            fn(bad)
    with pytest.raises(LayoutError, match="rank 2"):
        with_layout(TensorType(f32, [2, 3]), "{0}")


def test_index_validation():
    with pytest.raises(LayoutError, match=r"index \[1\] has 1 coordinates, the shape has rank 2"):
        linear_index("f32[3,5]{1,0:T(2,2)}", (1,))
    with pytest.raises(LayoutError, match=r"out of bounds in dimension 1 \(size 5\)"):
        linear_index("f32[3,5]{1,0:T(2,2)}", (0, 5))
    with pytest.raises(LayoutError, match="out of bounds in dimension 0"):
        linear_index("f32[3,5]", (-1, 0))


def test_trailing_combine_has_nothing_to_combine_with():
    # XLA's parser accepts T(2,*) but the spec gives it no meaning.
    t = parse_shape("f32[4,6]{1,0:T(2,*)}")
    assert format_shape(t) == "f32[4,6]{1,0:T(2,*)}"
    with pytest.raises(LayoutError, match=r"T\(2,\*\) ends with '\*'"):
        physical_element_count(t)


def test_non_array_and_bad_inputs():
    with pytest.raises(LayoutError, match="needs an array type"):
        physical_element_count(TupleType([TensorType(f32, [2])]))
    with pytest.raises(LayoutError, match="dynamic dimensions"):
        linear_indices(TensorType(f32, [-1, 2]))
    with pytest.raises(LayoutError, match="is not an #hlo.layout"):
        linear_indices(TensorType(f32, [2], StringAttr("x")))
    with pytest.raises(LayoutError, match=r"array of shape \(3,\) does not match f32\[2\]"):
        to_physical(np.zeros(3), "f32[2]")
    with pytest.raises(LayoutError, match=r"needs a 1-D buffer of 24 elements, got shape \(15,\)"):
        from_physical(np.zeros(15), "f32[3,5]{1,0:T(2,2)}")


@pytest.mark.parametrize(
    "text, message",
    [
        ("{1,0:T(2,2)", "expected '}'"),
        ("{1,0:T}", "expected '\\(' after T"),
        ("{1,0:T(2,x)}", "expected an integer"),
        ("{1,0:Q(1)}", "unknown layout field 'Q'"),
        ("{1,0:S(1)T(2,2)}", "T is out of order"),
        ("{1,0:L(4)L(4)}", "L appears twice"),
        ("{1,0:E(4)L(2)}", "L is out of order"),
        ("{1,0:D(D,D)}", r"D\(...\) \(dim level types, used only by sparse arrays\) is not supported"),
        ("{1,0:#(u32)}", r"#\(...\) \(index primitive type"),
        ("{1,0:*(u32)}", r"\*\(...\) \(pointer primitive type"),
        ("{1,0:SC(0:1)}", r"SC\(...\) \(split configs\)"),
        ("{1,0:P(f32[6]{0})}", r"P\(...\) \(physical shape"),
        ("{1,0:M(8)}", r"M\(...\) \(dynamic shape metadata prefix bytes\)"),
        ("{1,1}", "not a permutation"),
        ("{1,0:T()}", r"empty tile T\(\)"),
        ("{1,0:T(0,2)}", "tile sizes must be positive"),
        ("{1,0:T(-1,2)}", "tile sizes must be positive"),
        ("{1,0:L(0)}", "L\\(n\\) tail padding alignment must be positive"),
        ("{1,0:E(-1)}", "E\\(n\\) must be non-negative"),
        ("{1,0} x", "unexpected 'x' after the closing"),
    ],
)
def test_malformed_layout_text(text, message):
    with pytest.raises(LayoutError, match=message):
        parse_layout(text)


def test_layout_text_round_trip_fields_in_xla_order():
    text = "{3,2,0,1:T(8,128)(2,1)(*,2)L(1024)E(16)S(5)}"
    layout = parse_layout(text)
    assert layout.tiles == ((8, 128), (2, 1), (COMBINE_DIMENSION, 2))
    assert (layout.tail_padding_alignment, layout.element_size_in_bits, layout.memory_space) == (1024, 16, 5)
    assert layout.to_text() == text
    # Default-valued fields are not printed, as in XLA.
    assert parse_layout("{0:L(1)E(0)S(0)}").to_text() == "{0}"
    assert parse_layout("{ 1 , 0 : T ( 2 , * ) /* c */ }").to_text() == "{1,0:T(2,*)}"
    assert parse_layout("{:S(1)}").to_text() == "{:S(1)}"


@FAST
@given(tiled_tensors(), st.sampled_from([0, 4, 16]), st.sampled_from([0, 1, 5]))
def test_layout_to_text_parse_round_trip(t, bits, space):
    layout = t.encoding.data.with_(element_size_in_bits=bits, memory_space=space)
    assert parse_layout(layout.to_text()) == layout


# ----------------------------------------------------------------------------
# The #hlo.layout attribute in MLIR text (custom and generic form)
# ----------------------------------------------------------------------------

LAYOUT_SHAPES = [
    "f32[3,5]{1,0:T(2,2)}",
    "f32[5,3]{0,1}",
    "bf16[8,256]{1,0:T(8,128)(2,1)L(1024)E(16)S(1)}",
    "f32[2,7,8,11,10]{4,3,2,1,0:T(*,*,2,*,3)}",
    "s4[16]{0:T(128)E(4)}",
    "pred[32,128]{1,0:T(32,128)(32,1)E(1)}",
    "f32[]{:T(256)S(1)}",
    "f32[]",
    "u8[4,4]{0,1:L(64)}",
    "c64[2,2]{1,0:S(5)}",
]


def _module_with_parameters(shapes):
    b = XlaBuilder("layouts", default_layouts=False)
    params = [b.parameter(i, s) for i, s in enumerate(shapes)]
    return b.build(params)


def _generic(module) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=True).print_op(module)
    return out.getvalue()


def _arg_types(module):
    return list(module.ops.first.function_type.inputs.data)


@pytest.mark.parametrize("form", ["custom", "generic"])
def test_layout_attribute_round_trips_through_mlir(form):
    module = _module_with_parameters(LAYOUT_SHAPES)
    text = str(module) if form == "custom" else _generic(module)
    for shape in LAYOUT_SHAPES[:-3]:
        assert f"#hlo.layout<{shape[shape.index('{'):]}>" in text
    reparsed = parse_module(text)
    types = _arg_types(reparsed)
    assert types == _arg_types(module)
    assert [format_shape(t) for t in types] == LAYOUT_SHAPES
    assert str(reparsed) == str(module)


def test_layout_attribute_text_form():
    t = parse_shape("bf16[8,256]{1,0:T(8,128)(2,1)L(1024)E(16)S(1)}")
    assert str(t) == "tensor<8x256xbf16, #hlo.layout<{1,0:T(8,128)(2,1)L(1024)E(16)S(1)}>>"
    assert layout_of(t) == parse_layout("{1,0:T(8,128)(2,1)L(1024)E(16)S(1)}")
    assert layout_of(TensorType(f32, [2])) is None
    assert isinstance(with_layout(t, None).encoding, NoneAttr)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{1,0:T(2,2)S(1)L(4)}", "L is out of order"),
        ("{1,0:Q(1)}", "unknown layout field"),
        ("{1,1}", "not a permutation"),
        ("{1,0:SC(0:1)}", "split configs"),
    ],
)
def test_malformed_layout_attribute_in_mlir(bad, message):
    text = (
        "builtin.module {\n"
        f"  func.func @main(%0: tensor<2x3xf32, #hlo.layout<{bad}>>) -> tensor<2x3xf32, #hlo.layout<{{1,0}}>> {{\n"
        "    func.return %0 : tensor<2x3xf32, #hlo.layout<{1,0}>>\n  }\n}\n"
    )
    with pytest.raises(MlirParseError, match=message):
        parse_module(text)


def test_layout_of_wrong_rank_in_mlir_is_rejected():
    text = (
        "builtin.module {\n"
        "  func.func @main(%0: tensor<2x3xi32, #hlo.layout<{0}>>) -> tensor<2x3xi32> {\n"
        "    %1 = hlo.negate %0 : (tensor<2x3xi32, #hlo.layout<{0}>>) -> tensor<2x3xi32>\n"
        "    func.return %1 : tensor<2x3xi32>\n  }\n}\n"
    )
    with pytest.raises(HloVerifyError, match="has 1 dimensions in minor_to_major but the shape has rank 2"):
        parse_module(text)


def test_empty_arrays_with_huge_dimensions_allocate_nothing():
    # f32[0,300000000] took 20 s and 9 GiB of index vectors to lay out nothing.
    import time

    import numpy as np

    from xla_dialect import parse_shape
    from xla_dialect.layout import from_physical, linear_indices, to_physical

    shape = parse_shape("f32[0,300000000]{1,0:T(8,128)}")
    start = time.perf_counter()
    buffer = to_physical(np.zeros((0, 300000000), np.float32), shape)
    assert buffer.shape == (0,) and from_physical(buffer, shape).shape == (0, 300000000)
    assert linear_indices(shape).shape == (0, 300000000)
    assert time.perf_counter() - start < 1


def test_empty_arrays_numpy_cannot_hold_raise_layout_error():
    # f32[0,9223372036854775807] has no elements, but NumPy refuses its dimensions: a raw ValueError escaped.
    import numpy as np

    from xla_dialect.layout import from_physical, linear_indices

    for text in ("f32[0,9223372036854775807]", "f32[0,4611686018427387904]{0,1}"):
        with pytest.raises(LayoutError, match=r"f32\[0,\d+\].*index table.*cannot be a NumPy array"):
            linear_indices(text)
        with pytest.raises(LayoutError, match=r"f32\[0,\d+\].*cannot be a NumPy array"):
            from_physical(np.zeros(0, np.float32), text)


def test_layout_tables_respect_the_memory_limit(monkeypatch):
    import numpy as np

    from xla_dialect import parse_shape
    from xla_dialect.errors import ResourceLimitError
    from xla_dialect.layout import to_physical

    monkeypatch.setenv("XLA_DIALECT_MAX_BYTES", "1M")
    with pytest.raises(ResourceLimitError, match="index table"):
        to_physical(np.zeros((512, 512), np.float32), parse_shape("f32[512,512]{1,0:T(8,128)}"))
